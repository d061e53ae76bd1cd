/* Pre-tokenization: the flattened Sequence of Split / ByteLevel steps. Each step splits every piece of
 * the previous one (HF PreTokenizedString::split), empty pieces vanish, and the pieces of the last
 * step are BPE-encoded. Pieces are (pointer, length) views into the text, so nothing is copied except
 * ByteLevel's optional prefix space. Isolated splits (the usual case) stream straight into the next
 * step; the other behaviours first collect the splits of a piece, as HF does. */
#include <string.h>

#include "gw_tok_internal.h"

struct pt_ctx {
    const struct gw_tokenizer *tok;
    struct gw_tok_tls *tls;
    struct gw_tok_ids *out;
    struct mm_err *err;
    gw_tok_pretoken_fn sink; /* NULL: BPE into out */
    void *sink_ctx;
};

static int32_t run_step(struct pt_ctx *c, int step, const uint8_t *s, size_t n);

static int32_t emit(struct pt_ctx *c, int step, const uint8_t *s, size_t n)
{
    if (n == 0) return MM_OK;
    if (step == c->tok->n_steps) {
        if (c->sink) return c->sink(c->sink_ctx, s, n);
        return gw_tok_bpe_word(c->tok, c->tls, s, n, c->out, c->err);
    }
    return run_step(c, step, s, n);
}

static int32_t match_error(struct pt_ctx *c, int rc)
{
    PCRE2_UCHAR msg[128];
    pcre2_get_error_message(rc, msg, sizeof msg);
    int32_t code = (rc == PCRE2_ERROR_NOMEMORY) ? MM_NOMEM
                   : (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
                      rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT)
                       ? MM_EXHAUSTED
                       : MM_ERROR;
    return mm_err_set(c->err, code, "pre-tokenizer regex: %s", (char *)msg);
}

/* Next match of re in s[0..n) at or after *from, with Oniguruma's find_iter rule for empty matches
 * (an empty match right where the previous match ended is skipped). Returns 1 with [*ms, *me), 0 when
 * there is none, or a negative status. */
static int32_t next_match(struct pt_ctx *c, const struct gw_tok_step *st, const uint8_t *s, size_t n,
                          size_t *from, size_t *last_match_end, size_t *ms, size_t *me)
{
    for (;;) {
        if (*from > n) return 0;
        /* the JIT entry point skips pcre2_match's option checks: the subject is validated UTF-8 */
        int rc = st->jit ? pcre2_jit_match(st->re, s, n, *from, 0, c->tls->md, c->tls->mctx)
                         : pcre2_match(st->re, s, n, *from, PCRE2_NO_UTF_CHECK, c->tls->md, c->tls->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) return match_error(c, rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->tls->md);
        size_t s0 = ov[0], e0 = ov[1];
        if (e0 == s0 && *last_match_end == e0) {
            if (*from >= n) return 0;
            size_t l = s[*from] < 0x80 ? 1 : s[*from] < 0xE0 ? 2 : s[*from] < 0xF0 ? 3 : 4;
            *from += l;
            continue;
        }
        *from = e0;
        *last_match_end = e0;
        *ms = s0;
        *me = e0;
        return 1;
    }
}

/* Isolated: every match and every gap between matches is a piece. */
static int32_t split_isolated(struct pt_ctx *c, int step, const struct gw_tok_step *st, const uint8_t *s,
                              size_t n)
{
    size_t from = 0, lme = SIZE_MAX, prev = 0, ms, me;
    int32_t rc;
    while ((rc = next_match(c, st, s, n, &from, &lme, &ms, &me)) == 1) {
        if (prev < ms && (rc = emit(c, step + 1, s + prev, ms - prev))) return rc;
        if ((rc = emit(c, step + 1, s + ms, me - ms))) return rc;
        prev = me;
    }
    if (rc < 0) return rc;
    return prev < n ? emit(c, step + 1, s + prev, n - prev) : MM_OK;
}

/* The other behaviours, over the full list of (range, is_match) as HF NormalizedString::split. */
static int32_t split_general(struct pt_ctx *c, int step, const struct gw_tok_step *st, const uint8_t *s,
                             size_t n)
{
    struct gw_tok_splitvec *v = &c->tls->splits[step];
    v->n = 0;
    size_t from = 0, lme = SIZE_MAX, prev = 0, ms, me;
    int32_t rc;
    while ((rc = next_match(c, st, s, n, &from, &lme, &ms, &me)) == 1) {
        if (prev != ms && gw_tok_splitvec_push(v, prev, ms, 0)) goto nomem;
        if (gw_tok_splitvec_push(v, ms, me, 1)) goto nomem;
        prev = me;
    }
    if (rc < 0) return rc;
    if (prev != n && gw_tok_splitvec_push(v, prev, n, 0)) goto nomem;
    if (st->invert)
        for (size_t i = 0; i < v->n; i++) v->v[i].is_match = !v->v[i].is_match;

    /* Rewrite in place into (range, remove) pairs; k = pieces kept so far. */
    struct gw_tok_split *a = v->v;
    size_t k = 0;
    int prev_match = 0;
    switch (st->behavior) {
    case GW_TOK_REMOVED:
        k = v->n; /* is_match doubles as "remove" */
        break;
    case GW_TOK_CONTIGUOUS:
        for (size_t i = 0; i < v->n; i++) {
            int m = a[i].is_match;
            if (m == prev_match && k > 0)
                a[k - 1].end = a[i].end;
            else
                a[k++] = (struct gw_tok_split){a[i].start, a[i].end, 0};
            prev_match = m;
        }
        break;
    case GW_TOK_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < v->n; i++) {
            int m = a[i].is_match;
            if (m && !prev_match && k > 0)
                a[k - 1].end = a[i].end;
            else
                a[k++] = (struct gw_tok_split){a[i].start, a[i].end, 0};
            prev_match = m;
        }
        break;
    case GW_TOK_MERGED_WITH_NEXT: {
        /* HF folds from the right; walk backwards filling from the end of the array. */
        size_t w = v->n;
        for (size_t i = v->n; i-- > 0;) {
            int m = a[i].is_match;
            if (m && !prev_match && w < v->n)
                a[w].start = a[i].start;
            else
                a[--w] = (struct gw_tok_split){a[i].start, a[i].end, 0};
            prev_match = m;
        }
        memmove(a, a + w, (v->n - w) * sizeof *a);
        k = v->n - w;
        break;
    }
    default: /* Isolated is handled by split_isolated */
        k = v->n;
        for (size_t i = 0; i < k; i++) a[i].is_match = 0;
        break;
    }
    for (size_t i = 0; i < k; i++) {
        if (a[i].is_match) continue;
        if ((rc = emit(c, step + 1, s + a[i].start, a[i].end - a[i].start))) return rc;
    }
    return MM_OK;
nomem:
    return mm_err_set(c->err, MM_NOMEM, "encode: out of memory");
}

static int32_t run_step(struct pt_ctx *c, int step, const uint8_t *s, size_t n)
{
    const struct gw_tok_step *st = &c->tok->steps[step];
    if (st->kind == GW_TOK_STEP_BYTELEVEL) {
        if (st->add_prefix_space && s[0] != ' ') {
            struct gw_tok_tls *t = c->tls;
            if (n + 1 > t->prefix_cap) {
                size_t cap = n + 1 < 256 ? 256 : (n + 1) * 2;
                uint8_t *nb = realloc(t->prefix_buf, cap);
                if (!nb) return mm_err_set(c->err, MM_NOMEM, "encode: out of memory");
                t->prefix_buf = nb;
                t->prefix_cap = cap;
            }
            t->prefix_buf[0] = ' ';
            memcpy(t->prefix_buf + 1, s, n);
            s = t->prefix_buf;
            n++;
        }
        if (!st->re) return emit(c, step + 1, s, n);
        return split_isolated(c, step, st, s, n);
    }
    if (st->behavior == GW_TOK_ISOLATED) return split_isolated(c, step, st, s, n);
    return split_general(c, step, st, s, n);
}

int32_t gw_tok_pretokenize(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s, size_t n,
                           struct gw_tok_ids *out, struct mm_err *err)
{
    struct pt_ctx c = {tok, tls, out, err, NULL, NULL};
    return emit(&c, 0, s, n);
}

int32_t gw_tok_pretokenize_with(const struct gw_tokenizer *tok, struct gw_tok_tls *tls, const uint8_t *s,
                                size_t n, gw_tok_pretoken_fn sink, void *sink_ctx, struct mm_err *err)
{
    struct pt_ctx c = {tok, tls, NULL, err, sink, sink_ctx};
    return emit(&c, 0, s, n);
}
