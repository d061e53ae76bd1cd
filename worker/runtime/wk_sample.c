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

/* cmp_cand's order: a before b */
static int cand_before(const struct cand *a, const struct cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

/* The first k of cmp_cand's order into c[0..k), in no particular order (quickselect, expected O(n)): top-k
 * sampling needs only those, sorted afterwards */
static void select_first(struct cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        /* median of three as the pivot, moved to hi */
        int32_t mid = lo + (hi - lo) / 2;
        if (cand_before(&c[mid], &c[lo])) {
            struct cand t = c[mid];
            c[mid] = c[lo], c[lo] = t;
        }
        if (cand_before(&c[hi], &c[lo])) {
            struct cand t = c[hi];
            c[hi] = c[lo], c[lo] = t;
        }
        if (cand_before(&c[mid], &c[hi])) {
            struct cand t = c[mid];
            c[mid] = c[hi], c[hi] = t;
        }
        const struct cand pv = c[hi];
        int32_t s = lo;
        for (int32_t i = lo; i < hi; i++)
            if (cand_before(&c[i], &pv)) {
                struct cand t = c[i];
                c[i] = c[s], c[s++] = t;
            }
        c[hi] = c[s], c[s] = pv; /* c[lo..s) before the pivot, c[s] the pivot, the rest after */
        if (s == k - 1 || s == k) return;
        if (s < k)
            lo = s + 1;
        else
            hi = s - 1;
    }
}

/* c[0..n) in cmp_cand's order (p descending, id ascending) without comparisons: the candidates arrive in id
 * order and every p is a positive float (its bits order as its value), so a stable radix sort on p's bits,
 * descending, gives exactly qsort's order. qsort of M3's ~200K candidates cost ~45 ms a token; this ~1 ms.
 * tmp: room for n more. */
static void sort_cands(struct cand *c, struct cand *tmp, int32_t n)
{
    if (n < 256) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return;
    }
    struct cand *src = c, *dst = tmp;
    for (int shift = 0; shift < 32; shift += 8) {
        int32_t cnt[256] = {0};
        for (int32_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &src[i].p, sizeof b);
            cnt[255 - ((b >> shift) & 255)]++;
        }
        int32_t pos = 0, skip = 0;
        for (int d = 0; d < 256; d++) {
            int32_t k = cnt[d];
            skip |= k == n; /* every key has this digit: the pass would keep the order */
            cnt[d] = pos;
            pos += k;
        }
        if (skip) continue;
        for (int32_t i = 0; i < n; i++) {
            uint32_t b;
            memcpy(&b, &src[i].p, sizeof b);
            dst[cnt[255 - ((b >> shift) & 255)]++] = src[i];
        }
        struct cand *t = src;
        src = dst, dst = t;
    }
    if (src != c) memcpy(c, src, sizeof *c * (size_t)n);
}

double wk_sample_uniform(uint64_t *rng)
{
    return (double)(splitmix64(rng) >> 11) / 9007199254740992.0;
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
    struct cand *c = malloc(sizeof *c * (size_t)vocab * 2);
    if (!c) return wk_argmax(logits, vocab);
    /* tokens under 1e-12 of the best carry no mass that could matter (<= vocab * 1e-12 of the total):
     * leaving them out keeps the sort short on large vocabularies; those more than 28.5 (e^-28.5 = 4.2e-13)
     * below the best in units of T are left out before their exp */
    int32_t n = 0;
    for (int32_t i = 0; i < vocab; i++) {
        if (isnan(logits[i])) continue;
        const double x = ((double)logits[i] - m) / temp;
        if (x < -28.5) continue;
        const float p = (float)exp(x);
        if (p >= 1e-12f) c[n].p = p, c[n++].id = i;
    }
    if (n == 0) { /* no finite spread to sample from (every logit -inf or NaN, or a +inf one) */
        free(c);
        if (logprob) *logprob = 0.0f;
        return wk_argmax(logits, vocab);
    }
    if (top_k > 0 && top_k < n) {
        select_first(c, n, top_k); /* the same first top_k as sorting all n, in O(n) */
        n = top_k;
    }
    sort_cands(c, c + vocab, n);
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
    double u = wk_sample_uniform(rng) * sum, acc = 0.0;
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
