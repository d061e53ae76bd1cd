/* Log-probabilities of a logits row (see mm_logprobs.h): the worker's GenerateChunk and the CPU backend's
 * candidates. */
#include "mm_logprobs.h"

#include <math.h>

#include "mm_topk.h"

float mm_logsumexp(const float *x, int32_t n)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    if (!isfinite(mx)) return mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(x[i] - mx));
    return mx + (float)log(sum);
}

void mm_top_logprobs(const float *x, int32_t n, float lse, int32_t k, int32_t *ids, float *logprobs)
{
    /* k is small (<= 20): keep a sorted array and insert, one pass over the vocabulary */
    int32_t have = 0;
    for (int32_t i = 0; i < n; i++) mm_topk_offer(logprobs, ids, &have, k, x[i], i);
    for (int32_t j = 0; j < have; j++) logprobs[j] -= lse;
}
