/* Log-probabilities of the model's raw next-token distribution (log_softmax of the logits, before
 * temperature or truncation: what OpenAI-style APIs report). */
#ifndef WK_LOGPROBS_H
#define WK_LOGPROBS_H

#include <stdint.h>

/** log(sum(exp(x))) over n values, computed stably. */
float wk_logsumexp(const float *x, int32_t n);
/** The k largest values of x (k <= n), highest first, ties broken by the lower id: their ids and
 * log-probabilities (x - lse). */
void wk_top_logprobs(const float *x, int32_t n, float lse, int32_t k, int32_t *ids, float *logprobs);

#endif
