/* The margins of sampling candidates, shared by the CPU (kernels/cpu/kn_cands.c) and CUDA
 * (kn_cuda_topk_cands) versions: the first k tokens in the sampler's order (probability
 * float(exp((l - m) / t)) descending, id ascending) all have l >= l_k - MM_CANDS_TIE x t, l_k the k-th
 * largest logit (two logits closer than ~1.2e-7 t can round to one probability); every token the sampler
 * keeps (probability >= 1e-12 of the best: l >= m - 27.7 t) has l >= m - MM_CANDS_FLOOR x t.
 *
 * A row without a top-k whose candidates do not fit may be drawn from where it lies instead
 * (kernels/cpu/kn_draw.h, kn_cuda_topk_cands): the sampler's filters and draw, with the probabilities'
 * masses summed as integers (MM_DRAW_ONE per unit) so that any summation order gives the same token. */
#ifndef MM_CANDS_H
#define MM_CANDS_H

#include <stdint.h>

#define MM_CANDS_TIE 1e-5f
#define MM_CANDS_FLOOR 28.6f

/* a probability p in [1e-12, 1] weighs (uint64_t)(p x 2^44): exact sums up to 2^20 tokens of p = 1 */
#define MM_DRAW_ONE 17592186044416.0
#define MM_DRAW_MAX_VOCAB (1 << 19)

/* the count of a row that was drawn from instead of returning candidates: its token in ids[0] with its logit
 * in vals[0]; with n_top > 0, the logits >= l_n_top - MM_CANDS_TIE t follow in ids / vals [1, cap), in any
 * order, ended by an id of -1 when fewer than cap - 1 */
#define MM_CANDS_DRAWN (-2)

/* One row's request to the candidates operation */
struct mm_cand_req {
    int32_t k;     /* top-k >= 1 (INT32_MAX: none); 0: the row is skipped */
    float t;       /* temperature > 0 */
    float top_p;   /* in (0, 1): nucleus filter; otherwise off */
    float min_p;   /* > 0: min-p filter; otherwise off */
    int32_t draw;  /* 1: a row whose candidates do not fit and that has no effective top-k is drawn from */
    int32_t flags; /* MM_CANDS_EXACT, MM_CANDS_LSE */
    double u;      /* the draw's uniform in [0, 1) (the one wk_sample would take next) */
    /* > 0, for a row without a top-k (k INT32_MAX): the log-probabilities of a sampled token want the n_top
     * largest logits too: the candidates also keep every logit >= l_n_top - MM_CANDS_TIE t however far below
     * the floor, and a drawn row returns them after its token */
    int32_t n_top;
};

/* no floor: every logit >= l_k - MM_CANDS_TIE t (the top k for log-probabilities, however far below the best)
 */
#define MM_CANDS_EXACT 1
/* the row's log-sum-exp too (mm_logsumexp's arithmetic: max, then a double sum of exp(float(x - max))) */
#define MM_CANDS_LSE 2

#endif
