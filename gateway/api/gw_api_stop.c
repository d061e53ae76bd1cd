/* The stop-string matcher (see gw_api_stop.h). */
#include "gw_api_stop.h"

#include <stdint.h>
#include <string.h>

void gw_api_stop_init(struct gw_api_stop *s, const struct gw_api_stop_set *set)
{
    memset(s, 0, sizeof *s);
    s->set = set;
    mm_buf_init(&s->held, 0);
}

void gw_api_stop_free(struct gw_api_stop *s)
{
    mm_buf_free(&s->held);
}

/* Length of the longest suffix of t[0..n) that is a proper prefix of some stop string. */
static size_t partial_suffix(const struct gw_api_stop_set *set, const char *t, size_t n)
{
    size_t best = 0;
    for (size_t i = 0; i < set->n; i++) {
        size_t L = set->lens[i];
        size_t k = L - 1 < n ? L - 1 : n; /* proper prefix: at most L-1 bytes */
        for (; k > best; k--)
            if (memcmp(t + n - k, set->strs[i], k) == 0) break;
        if (k > best) best = k;
    }
    return best;
}

int gw_api_stop_feed(struct gw_api_stop *s, const char *text, size_t len, struct mm_buf *out)
{
    if (s->matched || len == 0) return s->matched;
    if (!s->set || s->set->n == 0) return mm_buf_append(out, text, len) ? -1 : 0;
    if (mm_buf_append(&s->held, text, len)) return -1;
    const char *t = s->held.data;
    size_t n = s->held.len;
    /* The stop string that is complete first (its end earliest) wins, then the longest of those: exactly
     * where generation would have stopped token by token, so the result does not depend on chunking. */
    size_t at = n, end = SIZE_MAX, which = 0;
    for (size_t i = 0; i < s->set->n; i++) {
        size_t L = s->set->lens[i];
        if (L > n) continue;
        const char *p = memmem(t, n, s->set->strs[i], L);
        if (!p) continue;
        size_t st = (size_t)(p - t);
        if (st + L < end || (st + L == end && st < at)) {
            at = st;
            end = st + L;
            which = i;
        }
    }
    if (at < n) {
        if (at && mm_buf_append(out, t, at)) return -1;
        s->matched = 1;
        s->which = which;
        mm_buf_reset(&s->held);
        return 1;
    }
    size_t keep = partial_suffix(s->set, t, n);
    if (n - keep && mm_buf_append(out, t, n - keep)) return -1;
    mm_buf_consume(&s->held, n - keep);
    return 0;
}

int gw_api_stop_flush(struct gw_api_stop *s, struct mm_buf *out)
{
    if (s->matched || s->held.len == 0) return 0;
    int rc = mm_buf_append(out, s->held.data, s->held.len) ? -1 : 0;
    mm_buf_reset(&s->held);
    return rc;
}
