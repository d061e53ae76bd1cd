/* Token sampling: greedy, or temperature with top-k, top-p and min-p filters (applied in that order, as
 * transformers' logits warpers do), drawn with a per-choice splitmix64 state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "wk_engine.h"

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct cand {
    float p;
    int32_t id;
};

static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

int32_t wk_argmax(const float *l, int32_t vocab)
{
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (l[i] > l[best] || (isnan(l[best]) && !isnan(l[i]))) best = i;
    return best;
}

int32_t wk_sample(const float *logits, int32_t vocab, const struct wk_sampling *sp, uint64_t *rng,
                  float *logprob)
{
    if (!logits || vocab <= 0) return -1;
    float temp = sp ? sp->temperature : 0.0f;
    int32_t top_k = sp ? sp->top_k : 0;
    if (!(temp > 0.0f) || top_k == 1) {
        int32_t id = wk_argmax(logits, vocab);
        if (logprob) {
            /* greedy: the log-probability under the model's own distribution (temperature 1) */
            double m = logits[id], z = 0.0;
            for (int32_t i = 0; i < vocab; i++) z += exp((double)logits[i] - m);
            *logprob = (float)-log(z);
        }
        return id;
    }
    float top_p = sp->top_p > 0.0f && sp->top_p < 1.0f ? sp->top_p : 1.0f;
    float min_p = sp->min_p > 0.0f ? sp->min_p : 0.0f;
    /* softmax of logits / T */
    double m = -INFINITY;
    for (int32_t i = 0; i < vocab; i++)
        if (logits[i] > m) m = logits[i];
    struct cand *c = malloc(sizeof *c * (size_t)vocab);
    if (!c) return wk_argmax(logits, vocab);
    for (int32_t i = 0; i < vocab; i++) {
        double p = isnan(logits[i]) ? 0.0 : exp(((double)logits[i] - m) / temp);
        c[i].p = (float)p;
        c[i].id = i;
    }
    /* tokens under 1e-12 of the best carry no mass that could matter (<= vocab * 1e-12 of the total):
     * leaving them out keeps the sort short on large vocabularies */
    int32_t n = 0;
    for (int32_t i = 0; i < vocab; i++)
        if (c[i].p >= 1e-12f) c[n++] = c[i];
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    if (top_k > 0 && top_k < n) n = top_k;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += c[i].p;
    if (top_p < 1.0f) {
        /* smallest prefix whose mass (renormalized over the survivors) reaches top_p; at least one token */
        double acc = 0.0;
        int32_t k = 0;
        while (k < n) {
            acc += c[k++].p;
            if (acc >= top_p * sum) break;
        }
        n = k;
        sum = acc;
    }
    if (min_p > 0.0f) {
        int32_t k = 1;
        while (k < n && c[k].p >= min_p * c[0].p) k++;
        for (int32_t i = k; i < n; i++) sum -= c[i].p;
        n = k;
    }
    double u = (double)(splitmix64(rng) >> 11) / 9007199254740992.0 * sum, acc = 0.0;
    int32_t pick = n - 1;
    for (int32_t i = 0; i < n; i++) {
        acc += c[i].p;
        if (u < acc) {
            pick = i;
            break;
        }
    }
    int32_t id = c[pick].id;
    if (logprob) *logprob = (float)log((double)c[pick].p / sum);
    free(c);
    return id;
}
