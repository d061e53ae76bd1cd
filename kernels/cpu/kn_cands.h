/* Sampling candidates: the few logits of a row that top-k sampling at temperature t can pick from, so that
 * a sampler run on them alone (wk_sample) returns what it returns on the whole row. */
#ifndef KN_CANDS_H
#define KN_CANDS_H

#include <stdint.h>

#include "mm_cands.h"

/** The candidates of row x[0..n) for top-k (1 <= k) at temperature t > 0: every i with
 * x[i] >= max(l_k - MM_CANDS_TIE t, m - MM_CANDS_FLOOR t) (m the largest logit, l_k the k-th largest; NaN
 * never), in ascending id order into ids / vals, at most cap of them. Returns how many there are (more than
 * cap: only the count; the caller samples the whole row). scratch: n floats. */
int32_t kn_topk_cands(const float *x, int32_t n, int32_t k, float t, int32_t cap, int32_t *ids, float *vals,
                      float *scratch);
/** The same under r's k, t, flags and n_top (MM_CANDS_EXACT: no floor; MM_CANDS_LSE is common/mm_logprobs.h's
 * mm_logsumexp, which the caller computes; n_top > 0 without a top-k (k INT32_MAX): also every x[i] >=
 * l_n_top - MM_CANDS_TIE t). */
int32_t kn_cands_req(const float *x, int32_t n, const struct mm_cand_req *r, int32_t cap, int32_t *ids,
                     float *vals, float *scratch);

#endif
