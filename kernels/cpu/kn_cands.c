/* Sampling candidates for top-k (kn_cands.h): the k-th largest logit by quickselect, then one pass. */
#include "kn_cands.h"

#include <math.h>

/* the k-th largest (1-based) of a[0..n), n >= k: a is reordered */
static float kth_largest(float *a, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        const float pv = a[lo + (hi - lo) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > pv) i++;
            while (a[j] < pv) j--;
            if (i <= j) {
                const float t = a[i];
                a[i++] = a[j], a[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want];
    }
    return a[want];
}

static int32_t cands(const float *x, int32_t n, int32_t k, float t, int floor, int32_t n_top, int32_t cap,
                     int32_t *ids, float *vals, float *scratch)
{
    float m = -INFINITY;
    int32_t nv = 0;
    for (int32_t i = 0; i < n; i++)
        if (!isnan(x[i])) {
            scratch[nv++] = x[i];
            if (x[i] > m) m = x[i];
        }
    if (nv == 0) return 0;
    float thr = floor ? m - MM_CANDS_FLOOR * t : -INFINITY;
    if (k <= nv) {
        const float lk = kth_largest(scratch, nv, k) - MM_CANDS_TIE * t;
        if (lk > thr) thr = lk;
    } else if (n_top > 0 &&
               k == INT32_MAX) { /* no top-k: the n_top largest too, below the floor if need be */
        const float lt = kth_largest(scratch, nv, n_top < nv ? n_top : nv) - MM_CANDS_TIE * t;
        if (lt < thr) thr = lt;
    }
    int32_t c = 0;
    for (int32_t i = 0; i < n; i++)
        if (x[i] >= thr) {
            if (c < cap) ids[c] = i, vals[c] = x[i];
            c++;
        }
    return c;
}

int32_t kn_topk_cands(const float *x, int32_t n, int32_t k, float t, int32_t cap, int32_t *ids, float *vals,
                      float *scratch)
{
    return cands(x, n, k, t, 1, 0, cap, ids, vals, scratch);
}

int32_t kn_cands_req(const float *x, int32_t n, const struct mm_cand_req *r, int32_t cap, int32_t *ids,
                     float *vals, float *scratch)
{
    return cands(x, n, r->k, r->t, !(r->flags & MM_CANDS_EXACT), r->n_top, cap, ids, vals, scratch);
}
