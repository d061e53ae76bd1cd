/* Sampling: greedy, temperature, top-k, top-p, min-p, seeds and log-probabilities. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_cands.h"
#include "kn_draw.h"
#include "mmgw_test.h"
#include "sample_ref.h"
#include "wk_engine.h"

static double softmax_p(const float *l, int n, int i, double t)
{
    double m = -1e30, z = 0;
    for (int j = 0; j < n; j++) m = l[j] > m ? l[j] : m;
    for (int j = 0; j < n; j++) z += exp((l[j] - m) / t);
    return exp((l[i] - m) / t) / z;
}

/* The radix-sorted sampler equals the qsort one it replaced, token for token and bit for bit in the
 * log-probability, at M3's vocabulary (200,064) and a small one, with equal probabilities among the
 * candidates, under every filter; and a row without a finite spread (all -inf, a +inf) falls back to argmax
 */
static void test_same_as_reference(void)
{
    static const struct wk_sampling cfgs[] = {
        {1.0f, 1.0f, 0, 0},    {0.7f, 0.9f, 0, 0}, {0.7f, 1.0f, 50, 0}, {1.0f, 0.95f, 40, 0.05f},
        {0.3f, 1.0f, 0, 0.1f}, {2.0f, 0.5f, 0, 0}, {0.05f, 1.0f, 0, 0}, {1.0f, 1.0f, 300, 0}};
    static const int32_t vocabs[] = {200064, 1000};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        const int32_t V = vocabs[vi];
        float *l = malloc(sizeof(float) * (size_t)V);
        for (int shape = 0; shape < 3; shape++) {
            const int tie = shape == 1 ? 3 : 0;
            ref_logits(l, V, 1000 + (uint64_t)shape, tie, shape == 2 ? 30.0f : 0.0f);
            for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
                uint64_t r1 = 77 + ci, r2 = 77 + ci;
                int same = 1, lp_same = 1;
                for (int d = 0; d < (V > 10000 ? 6 : 200); d++) {
                    float lp1 = 0, lp2 = 0;
                    int32_t a = wk_sample(l, V, &cfgs[ci], &r1, &lp1),
                            b = ref_sample(l, V, &cfgs[ci], &r2, &lp2);
                    same &= a == b;
                    lp_same &= memcmp(&lp1, &lp2, sizeof lp1) == 0;
                }
                CHECK_MSG(same && lp_same, "vocab %d logits %d config %zu: tokens %s, log-probabilities %s",
                          V, shape, ci, same ? "equal" : "differ", lp_same ? "equal" : "differ");
            }
        }
        free(l);
    }
    /* nothing finite to sample from: argmax */
    const float ninf[3] = {-INFINITY, -INFINITY, -INFINITY}, pinf[3] = {0, INFINITY, 1};
    struct wk_sampling t1 = {1.0f, 1.0f, 0, 0};
    uint64_t rng = 5;
    float lp = 1;
    CHECK_EQ_INT(wk_sample(ninf, 3, &t1, &rng, &lp), 0);
    CHECK_EQ_INT(wk_sample(pinf, 3, &t1, &rng, &lp), 1);
    CHECK_NEAR(lp, 0, 0);
}

/* Sampling from a row's top-k candidates (kn_topk_cands) gives the token and log-probability sampling from
 * the whole row gives, bit for bit: flat, tied and peaked rows, NaN and infinities, every filter over a range
 * of top-k and temperatures; a row of NaN has no candidates */
static void test_candidates(void)
{
    static const int32_t ks[] = {2, 5, 40, 300, 1024, INT32_MAX}; /* INT32_MAX: no top-k */
    static const float ts[] = {0.05f, 0.7f, 1.0f, 2.0f, 100.0f};
    static const float tps[] = {1.0f, 0.9f, 0.5f};
    static const float mps[] = {0.0f, 0.05f};
    static const int32_t vocabs[] = {200064, 3000};
    enum { CAP = 1024 };
    int32_t ids[CAP];
    float vals[CAP];
    int64_t rows = 0, fits = 0, bad = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        const int32_t V = vocabs[vi];
        float *l = malloc(sizeof(float) * (size_t)V), *scratch = malloc(sizeof(float) * (size_t)V);
        for (int shape = 0; shape < 4; shape++) {
            ref_logits(l, V, 300 + (uint64_t)shape, shape == 1 ? 3 : 0, shape == 2 ? 30.0f : 0.0f);
            if (shape == 3) /* NaN and infinities sprinkled, no +inf */
                for (int32_t i = 0; i < V; i += 97) l[i] = i % 2 ? nanf("") : -INFINITY;
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
                for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++) {
                    const int32_t n = kn_topk_cands(l, V, ks[ki], ts[ti], CAP, ids, vals, scratch);
                    rows++;
                    if (n > CAP) continue; /* the whole row would be sampled */
                    fits++;
                    for (int32_t j = 1; j < n; j++) bad += ids[j] <= ids[j - 1];
                    for (size_t pi = 0; pi < 3; pi++)
                        for (size_t mi = 0; mi < 2; mi++) {
                            struct wk_sampling sp = {ts[ti], tps[pi], ks[ki] == INT32_MAX ? 0 : ks[ki],
                                                     mps[mi]};
                            uint64_t r1 = 11 + ki, r2 = 11 + ki;
                            for (int d = 0; d < (V > 10000 ? 1 : 3); d++) {
                                float lp1 = 0, lp2 = 0;
                                const int32_t a = wk_sample(l, V, &sp, &r1, &lp1);
                                const int32_t j = wk_sample(vals, n, &sp, &r2, &lp2);
                                const int32_t b = j >= 0 && j < n ? ids[j] : -1;
                                if (a != b || memcmp(&lp1, &lp2, sizeof lp1)) {
                                    if (bad < 5)
                                        fprintf(stderr, "V %d shape %d k %d t %g p %g: %d vs %d (%g vs %g)\n",
                                                V, shape, ks[ki], ts[ti], tps[pi], a, b, lp1, lp2);
                                    bad++;
                                }
                            }
                        }
                }
        }
        free(l), free(scratch);
    }
    CHECK_MSG(bad == 0, "%lld of the draws from candidates differ from the whole row's", (long long)bad);
    CHECK_MSG(fits > rows / 2, "only %lld of %lld rows fit in %d candidates", (long long)fits,
              (long long)rows, CAP);
    float nan3[3] = {nanf(""), nanf(""), nanf("")}, s3[3];
    CHECK_EQ_INT(kn_topk_cands(nan3, 3, 2, 1.0f, 4, ids, vals, s3), 0);
    /* a +inf logit: it alone (wk_sample falls back to the argmax, the first +inf) */
    float inf4[4] = {1, INFINITY, 2, INFINITY}, s4[4];
    CHECK_EQ_INT(kn_topk_cands(inf4, 4, 2, 1.0f, 4, ids, vals, s4), 2);
    CHECK_EQ_INT(ids[0], 1);
}

/* kn_draw.h's rule written the plain way: the kept tokens sorted (key descending, id ascending), running
 * integer weights walked */
struct dr_cand {
    uint32_t key;
    int32_t id;
};

static int dr_cmp(const void *a, const void *b)
{
    const struct dr_cand *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return x->id - y->id;
}

static int32_t draw_oracle(const float *x, int32_t n, const struct mm_cand_req *r)
{
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    struct dr_cand *c = malloc(sizeof *c * (size_t)n);
    int32_t nk = 0;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        const uint32_t key = kn_draw_key(x[i], m, r->t);
        if (key) c[nk].key = key, c[nk++].id = i, total += kn_draw_mass(key);
    }
    qsort(c, (size_t)nk, sizeof *c, dr_cmp);
    int32_t keep = nk;
    if (r->top_p > 0.0f && r->top_p < 1.0f) {
        const uint64_t tp = (uint64_t)((double)r->top_p * (double)total);
        uint64_t cum = 0;
        for (keep = 0; keep < nk;) {
            cum += kn_draw_mass(c[keep++].key);
            if (cum >= tp) break;
        }
    }
    if (r->min_p > 0.0f) {
        uint32_t mk;
        memcpy(&mk, &r->min_p, sizeof mk);
        int32_t k = 0;
        while (k < nk && c[k].key >= mk) k++;
        if (k == 0) k = 1;
        if (k < keep) keep = k;
    }
    uint64_t w = 0;
    for (int32_t i = 0; i < keep; i++) w += kn_draw_mass(c[i].key);
    uint64_t tu = (uint64_t)(r->u * (double)w), cum = 0;
    if (tu >= w) tu = w - 1;
    int32_t id = -1;
    for (int32_t i = 0; i < keep && id < 0; i++)
        if ((cum += kn_draw_mass(c[i].key)) > tu) id = c[i].id;
    free(c);
    return id;
}

/* The draw (kn_draw): equal to its plain sorted form token for token, and to wk_sample given the same
 * uniform (whose sums it makes exact) on flat, tied, peaked, NaN-sprinkled and constant rows under
 * temperature, top-p and min-p; not drawn with a top-k that cuts, without draw, or without a finite
 * largest logit */
static void test_draw(void)
{
    static const struct wk_sampling cfgs[] = {
        {1.0f, 1.0f, 0, 0}, {0.7f, 0.9f, 0, 0},   {1.0f, 0.95f, 0, 0.05f}, {0.3f, 1.0f, 0, 0.1f},
        {2.0f, 0.5f, 0, 0}, {1.0f, 0.001f, 0, 0}, {0.5f, 1.0f, 0, 3.0f},   {5.0f, 0.99f, 0, 0.01f}};
    static const int32_t vocabs[] = {200064, 1000, 7};
    int64_t draws = 0, bad_oracle = 0, bad_sample = 0;
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        const int32_t V = vocabs[vi];
        float *l = malloc(sizeof(float) * (size_t)V);
        uint32_t *keys = malloc(sizeof(uint32_t) * (size_t)V);
        for (int shape = 0; shape < 5; shape++) {
            ref_logits(l, V, 500 + (uint64_t)shape, shape == 1 ? 2 : 0, shape == 2 ? 30.0f : 0.0f);
            if (shape == 3)
                for (int32_t i = 0; i < V; i += 5) l[i] = i % 2 ? nanf("") : -INFINITY;
            if (shape == 4)
                for (int32_t i = 0; i < V; i++) l[i] = -2.5f; /* every token ties */
            for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
                uint64_t rng = 900 + ci;
                for (int d = 0; d < (V > 10000 ? 4 : 40); d++) {
                    uint64_t peek = rng;
                    const struct wk_sampling *sp = &cfgs[ci];
                    const struct mm_cand_req r = {.k = INT32_MAX,
                                                  .t = sp->temperature,
                                                  .top_p = sp->top_p,
                                                  .min_p = sp->min_p,
                                                  .draw = 1,
                                                  .u = wk_sample_uniform(&peek)};
                    const int32_t a = kn_draw(l, V, &r, keys), b = draw_oracle(l, V, &r),
                                  c = wk_sample(l, V, sp, &rng, NULL);
                    draws++;
                    bad_oracle += a != b;
                    bad_sample += a != c;
                    if (a != c && bad_sample < 5)
                        fprintf(stderr, "V %d shape %d cfg %zu draw %d: kn_draw %d, wk_sample %d\n", V, shape,
                                ci, d, a, c);
                }
            }
        }
        free(l), free(keys);
    }
    CHECK_MSG(bad_oracle == 0, "%lld of %lld draws differ from the sorted form", (long long)bad_oracle,
              (long long)draws);
    CHECK_MSG(bad_sample == 0, "%lld of %lld draws differ from wk_sample's", (long long)bad_sample,
              (long long)draws);
    /* the edges of u: the first kept token, the last */
    const float row[6] = {1.0f, 3.0f, 3.0f, nanf(""), 2.0f, -INFINITY};
    uint32_t keys[6];
    struct mm_cand_req r = {.k = INT32_MAX, .t = 1.0f, .top_p = 1.0f, .draw = 1, .u = 0.0};
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), 1);
    r.u = 0.9999999999999999;
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), 0);
    r.u = 0.0, r.t = 0.01f; /* 1 and 2 are far below: only the tied pair, in id order */
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), 1);
    r.u = 0.75;
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), 2);
    /* not drawn from */
    r.k = 2; /* a top-k that may cut: 5 non-NaN */
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), -1);
    r.k = 5; /* one that cannot */
    CHECK(kn_draw(row, 6, &r, keys) >= 0);
    r.draw = 0;
    CHECK_EQ_INT(kn_draw(row, 6, &r, keys), -1);
    r.draw = 1;
    const float pinf[3] = {0.0f, INFINITY, 1.0f}, nan2[2] = {nanf(""), nanf("")};
    CHECK_EQ_INT(kn_draw(pinf, 3, &r, keys), -1);
    CHECK_EQ_INT(kn_draw(nan2, 2, &r, keys), -1);
}

int main(void)
{
    test_same_as_reference();
    test_candidates();
    test_draw();
    const float l[4] = {1, 3, 2, 0};
    uint64_t rng = 42;
    float lp;
    struct wk_sampling greedy = {0, 1, 0, 0};
    CHECK_EQ_INT(wk_sample(l, 4, &greedy, &rng, &lp), 1);
    CHECK_NEAR(lp, log(softmax_p(l, 4, 1, 1)), 1e-6);
    struct wk_sampling k1 = {1.0f, 1.0f, 1, 0};
    CHECK_EQ_INT(wk_sample(l, 4, &k1, &rng, NULL), 1);
    /* top-p 0.1: only the best token survives; its log-prob under the filtered distribution is 0 */
    struct wk_sampling p01 = {1.0f, 0.1f, 0, 0};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(wk_sample(l, 4, &p01, &rng, &lp), 1);
    CHECK_NEAR(lp, 0, 1e-6);
    /* min-p 0.5: p(2)/p(1) = e^-1 < 0.5, so only token 1 */
    struct wk_sampling mp = {1.0f, 1.0f, 0, 0.5f};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(wk_sample(l, 4, &mp, &rng, NULL), 1);
    /* plain temperature 1: frequencies follow the softmax */
    struct wk_sampling t1 = {1.0f, 1.0f, 0, 0};
    int cnt[4] = {0};
    enum { N = 40000 };
    for (int i = 0; i < N; i++) cnt[wk_sample(l, 4, &t1, &rng, NULL)]++;
    for (int i = 0; i < 4; i++) CHECK_NEAR((double)cnt[i] / N, softmax_p(l, 4, i, 1), 0.01);
    /* temperature 0.5 sharpens */
    struct wk_sampling t05 = {0.5f, 1.0f, 0, 0};
    int c1 = 0;
    for (int i = 0; i < N; i++) c1 += wk_sample(l, 4, &t05, &rng, NULL) == 1;
    CHECK_NEAR((double)c1 / N, softmax_p(l, 4, 1, 0.5), 0.01);
    /* top-k 2: only tokens 1 and 2, in ratio e^3 : e^2; the log-prob is under the renormalized pair */
    struct wk_sampling k2 = {1.0f, 1.0f, 2, 0};
    int c[4] = {0};
    for (int i = 0; i < N; i++) {
        int id = wk_sample(l, 4, &k2, &rng, &lp);
        c[id]++;
        double pr = id == 1 ? 1 / (1 + exp(-1.0)) : 1 / (1 + exp(1.0));
        if (i < 50) CHECK_NEAR(lp, log(pr), 1e-5);
    }
    CHECK_EQ_INT(c[0] + c[3], 0);
    CHECK_NEAR((double)c[1] / N, 1 / (1 + exp(-1.0)), 0.01);
    /* top-p 0.8 over (0.665, 0.245, 0.090, 0.033): tokens 1 and 2 */
    struct wk_sampling p08 = {1.0f, 0.8f, 0, 0};
    int d[4] = {0};
    for (int i = 0; i < 2000; i++) d[wk_sample(l, 4, &p08, &rng, NULL)]++;
    CHECK_EQ_INT(d[0] + d[3], 0);
    CHECK(d[2] > 0);
    /* the same seed gives the same sequence */
    uint64_t r1 = 7, r2 = 7;
    int same = 1;
    for (int i = 0; i < 100; i++) same &= wk_sample(l, 4, &t1, &r1, NULL) == wk_sample(l, 4, &t1, &r2, NULL);
    CHECK(same);
    /* ties go to the lower id under greedy */
    const float tie[3] = {2, 5, 5};
    CHECK_EQ_INT(wk_sample(tie, 3, &greedy, &rng, NULL), 1);
    CHECK_EQ_INT(wk_sample(NULL, 3, &greedy, &rng, NULL), -1);
    return test_done();
}
