/* The sampler's draw on a row without top-k, by selection over the row instead of a sort: the CPU twin of
 * kn_cuda_topk_cands' draw, and what the CPU backend does for such rows.
 *
 * The draw is wk_sample's with its sums made exact: each token the sampler keeps (probability
 * p = float(exp((l - m) / t)) >= 1e-12, NaN never) weighs (uint64_t)(p x MM_DRAW_ONE); in the order p
 * descending, id ascending, top-p keeps the prefix through the first token whose running weight reaches
 * trunc(top_p x total), min-p the tokens with p >= min_p (at least the first), the shorter of the two; the
 * token drawn is the first whose running weight exceeds trunc(u x kept weight). Integer sums do not depend on
 * their order, so the device's histogram passes give exactly this token; it is wk_sample's token unless
 * u x sum or top_p x sum falls within the weights' rounding (~1e-8 of the sum) of a boundary. */
#ifndef KN_DRAW_H
#define KN_DRAW_H

#include <stdint.h>

#include "mm_cands.h"

/** The token drawn from row x[0..n) under r (r->t > 0, r->u in [0, 1)), or -1 when the row is not one to
 * draw from: r->draw 0, a top-k that cuts (r->k below the row's non-NaN count), no finite largest logit,
 * or n above MM_DRAW_MAX_VOCAB. keys: n scratch words. */
int32_t kn_draw(const float *x, int32_t n, const struct mm_cand_req *r, uint32_t *keys);

/** The weight key of logit v at largest logit m and temperature t: p's bits, 0 for a token not kept */
uint32_t kn_draw_key(float v, float m, float t);
/** The weight of a key */
uint64_t kn_draw_mass(uint32_t key);

#endif
