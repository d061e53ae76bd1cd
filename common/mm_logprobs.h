/* Log-probabilities of the model's raw next-token distribution (log_softmax of the logits, before
 * temperature or truncation: what OpenAI-style APIs report). */
#ifndef MM_LOGPROBS_H
#define MM_LOGPROBS_H

#include <stdint.h>

/** log(sum(exp(x))) over n values, computed stably: the largest m (NaN skipped; m itself when not finite),
 * then m + float(log(sum over i of exp(double(x[i] - m)))), summed in index order. The backends' MM_CANDS_LSE
 * (common/mm_cands.h) is this arithmetic (the CUDA kernel sums in another order). */
float mm_logsumexp(const float *x, int32_t n);
/** The k largest values of x (k <= n), highest first, ties broken by the lower id: their ids and
 * log-probabilities (x - lse). */
void mm_top_logprobs(const float *x, int32_t n, float lse, int32_t k, int32_t *ids, float *logprobs);

#endif
