/* The sampler as it was before its radix sort (wk_sample.c, 2026-12-01): every candidate's exp, then qsort.
 * Kept as the reference the new one must equal token for token and bit for bit in its log-probability
 * (test_sample.c), and as the baseline of bench-sample. Header-only, static. */
#ifndef SAMPLE_REF_H
#define SAMPLE_REF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "wk_engine.h"

struct ref_cand {
    float p;
    int32_t id;
};

static int ref_cmp_cand(const void *a, const void *b)
{
    const struct ref_cand *x = a, *y = b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->id - y->id;
}

static uint64_t ref_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* wk_sample's temperature path (temperature > 0, top_k != 1), as it was */
static int32_t ref_sample(const float *logits, int32_t vocab, const struct wk_sampling *sp, uint64_t *rng,
                          float *logprob)
{
    float temp = sp->temperature;
    int32_t top_k = sp->top_k;
    float top_p = sp->top_p > 0.0f && sp->top_p < 1.0f ? sp->top_p : 1.0f;
    float min_p = sp->min_p > 0.0f ? sp->min_p : 0.0f;
    double m = -INFINITY;
    for (int32_t i = 0; i < vocab; i++)
        if (logits[i] > m) m = logits[i];
    struct ref_cand *c = malloc(sizeof *c * (size_t)vocab);
    if (!c) return -1;
    for (int32_t i = 0; i < vocab; i++) {
        double p = isnan(logits[i]) ? 0.0 : exp(((double)logits[i] - m) / temp);
        c[i].p = (float)p;
        c[i].id = i;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < vocab; i++)
        if (c[i].p >= 1e-12f) c[n++] = c[i];
    qsort(c, (size_t)n, sizeof *c, ref_cmp_cand);
    if (top_k > 0 && top_k < n) n = top_k;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) sum += c[i].p;
    if (top_p < 1.0f) {
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
    double u = (double)(ref_splitmix64(rng) >> 11) / 9007199254740992.0 * sum, acc = 0.0;
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

/* Logits over vocab tokens: a normal bulk (sd 3), 8 tokens raised by 5-12 and one more by `peak` (a
 * confident position: 30); every `tie`-th value rounded to a multiple of 1/4 so that equal probabilities
 * occur (0: none). */
static void ref_logits(float *l, int32_t vocab, uint64_t seed, int32_t tie, float peak)
{
    uint64_t s = seed;
    for (int32_t i = 0; i < vocab; i++) {
        double u = ((double)(ref_splitmix64(&s) >> 11) + 0.5) / 9007199254740992.0;
        double w = ((double)(ref_splitmix64(&s) >> 11) + 0.5) / 9007199254740992.0;
        l[i] = (float)(3.0 * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w));
        if (tie && i % tie == 0) l[i] = floorf(l[i] * 4.0f) / 4.0f;
    }
    for (int32_t k = 0; k < 8; k++) l[(int32_t)(ref_splitmix64(&s) % (uint64_t)vocab)] += 12.0f - (float)k;
    l[(int32_t)(ref_splitmix64(&s) % (uint64_t)vocab)] += peak;
}

#endif
