/* kn_msa.h against hand-computed cases and a brute-force dense reference on random paged data. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_msa.h"
#include "mmgw_test.h"

/* ---- hand-checked: block 2, index dim 2, one index head, 5 tokens on shuffled pages ---- */
static void test_hand_scores_topk(void)
{
    /* pages: block 0 -> page 2, block 1 -> page 0, block 2 -> page 1 */
    const int32_t bt[3] = {2, 0, 1};
    float cache[3 * 2 * 2] = {0};
    const float keys[5][2] = {{1, 0}, {0, 1}, {2, 0}, {-1, -1}, {0, 3}};
    for (int t = 0; t < 5; t++) memcpy(cache + (bt[t / 2] * 2 + t % 2) * 2, keys[t], sizeof keys[t]);
    struct kn_paged_seq seq = {bt, 5};
    const float q[2][2] = {{1, 1}, {0, 1}};
    const int64_t pos[2] = {3, 2};
    float sc[2 * 3];
    kn_msa_index_scores(&q[0][0], 2, pos, 1, 2, cache, 2, &seq, sc, 3);
    /* query 0 at 3: dots 1, 1 | 2, -2 | (t4 is in the future) */
    CHECK_NEAR(sc[0], 1.0, 0);
    CHECK_NEAR(sc[1], 2.0, 0);
    CHECK(sc[2] == -INFINITY);
    /* query 1 at 2: dots 0, 1 | 0 (t3 masked) */
    CHECK_NEAR(sc[3], 1.0, 0);
    CHECK_NEAR(sc[4], 0.0, 0);
    CHECK(sc[5] == -INFINITY);

    int32_t sel[2 * 4];
    CHECK_EQ_INT(kn_msa_topk(sc, 1, 2, pos, 3, 2, 1, sel, 4), 1);
    CHECK_EQ_INT(sel[0], 1); /* own block forced even though block 1 is also the best */
    CHECK_EQ_INT(sel[4], 1);
    CHECK_EQ_INT(kn_msa_topk(sc, 1, 2, pos, 3, 2, 3, sel, 4), 3);
    CHECK_EQ_INT(sel[0], 1);
    CHECK_EQ_INT(sel[1], 0);
    CHECK_EQ_INT(sel[2], -1); /* the future block is an empty slot */
    CHECK_EQ_INT(sel[4], 1);
    CHECK_EQ_INT(sel[5], 0);
    CHECK_EQ_INT(sel[6], -1);

    /* own block forced although its score is the lowest; ties go to the lower block id */
    float s2[5] = {5, 3, 5, -7, 1};
    int64_t p2[1] = {7}; /* block 3 with block 2 */
    int32_t o[3];
    CHECK_EQ_INT(kn_msa_topk(s2, 1, 1, p2, 5, 2, 3, o, 3), 3);
    CHECK_EQ_INT(o[0], 3);
    CHECK_EQ_INT(o[1], 0);
    CHECK_EQ_INT(o[2], 2);
    /* two local blocks */
    CHECK_EQ_INT(kn_msa_topk_local(s2, 1, 1, p2, 5, 2, 3, 2, o, 3), 3);
    CHECK_EQ_INT(o[0], 2);
    CHECK_EQ_INT(o[1], 3);
    CHECK_EQ_INT(o[2], 0);
}

static void test_hand_sparse_attention(void)
{
    /* block 2, one KV head of dim 2, two query heads; keys/values on pages in order */
    const int32_t bt[2] = {1, 0};
    float kc[2 * 2 * 2] = {0}, vc[2 * 2 * 2] = {0};
    const float keys[4][2] = {{1, 0}, {0, 1}, {1, 1}, {2, 0}};
    const float vals[4][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
    for (int t = 0; t < 4; t++) {
        memcpy(kc + (bt[t / 2] * 2 + t % 2) * 2, keys[t], 8);
        memcpy(vc + (bt[t / 2] * 2 + t % 2) * 2, vals[t], 8);
    }
    struct kn_paged_seq seq = {bt, 4};
    const float q[2][2] = {{1, 0}, {0, 2}}; /* one query, two heads */
    int64_t pos[1] = {2};
    int32_t sel[1] = {1}; /* only block 1: keys t2 and t3, but t3 is after pos */
    float out[4];
    kn_msa_sparse_attention(&q[0][0], 1, pos, 2, 1, 2, 0.5f, kc, vc, 2, &seq, sel, 1, 1, out);
    /* one visible key: the output is exactly its value for both heads */
    CHECK_NEAR(out[0], 5, 1e-6);
    CHECK_NEAR(out[1], 6, 1e-6);
    CHECK_NEAR(out[2], 5, 1e-6);
    CHECK_NEAR(out[3], 6, 1e-6);
    /* blocks 0 and 1 at pos 3: head 0 scores (x scale .5) .5, 0, .5, 1 */
    int32_t sel2[2] = {1, 0};
    pos[0] = 3;
    kn_msa_sparse_attention(&q[0][0], 1, pos, 2, 1, 2, 0.5f, kc, vc, 2, &seq, sel2, 2, 2, out);
    double e[4] = {exp(0.5), exp(0.0), exp(0.5), exp(1.0)}, z = e[0] + e[1] + e[2] + e[3];
    CHECK_NEAR(out[0], (e[0] * 1 + e[1] * 3 + e[2] * 5 + e[3] * 7) / z, 1e-5);
    CHECK_NEAR(out[1], (e[0] * 2 + e[1] * 4 + e[2] * 6 + e[3] * 8) / z, 1e-5);
    /* head 1 (q = 0,2): scores 0, 1, 1, 0 */
    double f[4] = {1, exp(1.0), exp(1.0), 1}, y = f[0] + f[1] + f[2] + f[3];
    CHECK_NEAR(out[2], (f[0] * 1 + f[1] * 3 + f[2] * 5 + f[3] * 7) / y, 1e-5);
    /* an empty slot (-1) is skipped */
    int32_t sel3[2] = {-1, 1};
    kn_msa_sparse_attention(&q[0][0], 1, pos, 2, 1, 2, 0.5f, kc, vc, 2, &seq, sel3, 2, 2, out);
    double g0 = exp(0.5), g1 = exp(1.0);
    CHECK_NEAR(out[0], (g0 * 5 + g1 * 7) / (g0 + g1), 1e-5);
}

/* ---- brute force on random data ---- */
static uint64_t rng_state = 88172645463325252ull;
static double urand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int32_t *)a - *(const int32_t *)b;
}

static void test_random(int32_t block, int32_t n_tok, int32_t n_kv, int32_t group, int32_t hd,
                        int32_t idx_dim, int32_t topk)
{
    int32_t n_heads = n_kv * group, nb = (n_tok + block - 1) / block, n_pages = nb + 3;
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
    /* a scrambled page assignment */
    for (int32_t b = 0; b < nb; b++) bt[b] = (int32_t)((b * 7 + 3) % n_pages);
    for (int32_t b = 0; b < nb; b++)
        for (int32_t c = 0; c < b; c++)
            if (bt[c] == bt[b]) bt[b] = (bt[b] + 1) % n_pages, c = -1;
    size_t tok = (size_t)n_pages * block;
    float *kc = calloc(tok * n_kv * hd, 4), *vc = calloc(tok * n_kv * hd, 4), *ic = calloc(tok * idx_dim, 4);
    float *K = malloc(4 * (size_t)n_tok * n_kv * hd), *V = malloc(4 * (size_t)n_tok * n_kv * hd);
    float *I = malloc(4 * (size_t)n_tok * idx_dim);
    for (int32_t t = 0; t < n_tok; t++) {
        size_t slot = (size_t)bt[t / block] * block + t % block;
        for (int32_t d = 0; d < n_kv * hd; d++) {
            K[(size_t)t * n_kv * hd + d] = kc[slot * n_kv * hd + d] = (float)(urand() * 2 - 1);
            V[(size_t)t * n_kv * hd + d] = vc[slot * n_kv * hd + d] = (float)(urand() * 2 - 1);
        }
        for (int32_t d = 0; d < idx_dim; d++)
            I[(size_t)t * idx_dim + d] = ic[slot * idx_dim + d] = (float)(urand() * 2 - 1);
    }
    struct kn_paged_seq seq = {bt, n_tok};
    int32_t nq = n_tok < 9 ? n_tok : 9;
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)nq);
    for (int32_t i = 0; i < nq; i++) pos[i] = n_tok - 1 - (int64_t)(urand() * n_tok) % n_tok;
    pos[0] = n_tok - 1;
    float *q = malloc(4 * (size_t)nq * n_heads * hd), *iq = malloc(4 * (size_t)nq * n_kv * idx_dim);
    for (int32_t i = 0; i < nq * n_heads * hd; i++) q[i] = (float)(urand() * 2 - 1);
    for (int32_t i = 0; i < nq * n_kv * idx_dim; i++) iq[i] = (float)(urand() * 2 - 1);
    float *sc = malloc(4 * (size_t)n_kv * nq * nb);
    kn_msa_index_scores(iq, nq, pos, n_kv, idx_dim, ic, block, &seq, sc, nb);
    int32_t stride = topk + 2;
    int32_t *sel = malloc(4 * (size_t)n_kv * nq * stride);
    int32_t k = kn_msa_topk(sc, n_kv, nq, pos, nb, block, topk, sel, stride);
    CHECK_EQ_INT(k, topk < nb ? topk : nb);
    float *out = malloc(4 * (size_t)nq * n_heads * hd);
    kn_msa_sparse_attention(q, nq, pos, n_heads, n_kv, hd, 0.3f, kc, vc, block, &seq, sel, k, stride, out);

    double *ref = malloc(sizeof(double) * (size_t)nb);
    int32_t *rsel = malloc(4 * (size_t)nb), *ksel = malloc(4 * (size_t)nb);
    double *w = malloc(sizeof(double) * (size_t)n_tok);
    for (int32_t i = 0; i < nq; i++)
        for (int32_t g = 0; g < n_kv; g++) {
            /* scores */
            for (int32_t b = 0; b < nb; b++) {
                ref[b] = -INFINITY;
                for (int64_t t = (int64_t)b * block; t < (int64_t)(b + 1) * block && t < n_tok && t <= pos[i];
                     t++) {
                    double d = 0;
                    for (int32_t x = 0; x < idx_dim; x++)
                        d += (double)iq[((size_t)i * n_kv + g) * idx_dim + x] * I[(size_t)t * idx_dim + x];
                    if (d > ref[b]) ref[b] = d;
                }
                float got = sc[((size_t)g * nq + i) * nb + b];
                if (isinf(ref[b]))
                    CHECK(got == -INFINITY);
                else
                    CHECK_NEAR(got, ref[b], 1e-4);
            }
            /* selection: the own block then the best visible blocks (compared as sets) */
            int32_t own = (int32_t)(pos[i] / block), cnt = 0;
            rsel[cnt++] = own;
            double used_last = INFINITY;
            (void)used_last;
            while (cnt < k) {
                int32_t best = -1;
                for (int32_t b = 0; b < nb; b++) {
                    int taken = 0;
                    for (int32_t c = 0; c < cnt; c++) taken |= rsel[c] == b;
                    if (taken || isinf(ref[b])) continue;
                    if (best < 0 || ref[b] > ref[best]) best = b;
                }
                if (best < 0) break;
                rsel[cnt++] = best;
            }
            int32_t kc2 = 0;
            const int32_t *row = sel + ((size_t)g * nq + i) * stride;
            for (int32_t c = 0; c < k; c++)
                if (row[c] >= 0) ksel[kc2++] = row[c];
            for (int32_t c = k; c < stride; c++) CHECK_EQ_INT(row[c], -1);
            CHECK_EQ_INT(kc2, cnt);
            qsort(rsel, (size_t)cnt, 4, cmp_int);
            qsort(ksel, (size_t)kc2, 4, cmp_int);
            for (int32_t c = 0; c < cnt && c < kc2; c++) CHECK_EQ_INT(ksel[c], rsel[c]);
            /* attention over exactly the selected blocks, causal */
            for (int32_t hh = 0; hh < group; hh++) {
                int32_t h = g * group + hh;
                double m = -INFINITY, z = 0;
                for (int32_t t = 0; t <= pos[i]; t++) {
                    int in = 0;
                    for (int32_t c = 0; c < cnt; c++) in |= rsel[c] == t / block;
                    w[t] = -INFINITY;
                    if (!in) continue;
                    double d = 0;
                    for (int32_t x = 0; x < hd; x++)
                        d += (double)q[((size_t)i * n_heads + h) * hd + x] *
                             K[((size_t)t * n_kv + g) * hd + x];
                    w[t] = d * 0.3;
                    if (w[t] > m) m = w[t];
                }
                for (int32_t t = 0; t <= pos[i]; t++) z += isinf(w[t]) ? 0 : exp(w[t] - m);
                for (int32_t x = 0; x < hd; x++) {
                    double o = 0;
                    for (int32_t t = 0; t <= pos[i]; t++)
                        if (!isinf(w[t])) o += exp(w[t] - m) / z * V[((size_t)t * n_kv + g) * hd + x];
                    CHECK_NEAR(out[((size_t)i * n_heads + h) * hd + x], o, 2e-5);
                }
            }
        }
    free(ref);
    free(rsel);
    free(ksel);
    free(w);
    free(out);
    free(sel);
    free(sc);
    free(q);
    free(iq);
    free(pos);
    free(K);
    free(V);
    free(I);
    free(kc);
    free(vc);
    free(ic);
    free(bt);
}

/* kn_msa_quant_q8: a row's largest magnitude maps to e4m3's 448 (so comes back exactly), every value is an
 * e4m3 multiple of amax / 448 within half a step of the input, a zero row stays zero, in place works. */
static void test_quant_q8(void)
{
    float q[3][8] = {{1.0f, -2.0f, 0.3f, 0.1f, -0.05f, 1.7f, 0.0f, 1e-6f}, {0}, {-5.0f, 4.9f, 2.5f, 0.0f}};
    float out[3][8];
    kn_msa_quant_q8(&q[0][0], 3, 8, &out[0][0]);
    CHECK(out[0][1] == -2.0f && out[2][0] == -5.0f); /* the row maxima, exactly */
    for (int d = 0; d < 8; d++) CHECK(out[1][d] == 0.0f);
    CHECK(out[0][6] == 0.0f);
    for (int r = 0; r < 3; r += 2) {
        const float s = (r == 0 ? 2.0f : 5.0f) / 448.0f;
        for (int d = 0; d < 8; d++) {
            /* e4m3 has 3 mantissa bits: relative error <= 1/16 in the normal range, and subnormal steps of
             * s * 2^-9 below it */
            const float err = fabsf(out[r][d] - q[r][d]);
            CHECK_MSG(err <= fabsf(q[r][d]) / 16.0f + s * 0x1p-10f, "row %d dim %d: %g -> %g", r, d,
                      (double)q[r][d], (double)out[r][d]);
        }
    }
    CHECK(out[0][2] != q[0][2]); /* 0.3 is not an e4m3 multiple of 2/448: quantization happened */
    kn_msa_quant_q8(&q[0][0], 3, 8, &q[0][0]);
    CHECK(memcmp(q, out, sizeof q) == 0);
}

int main(void)
{
    test_quant_q8();
    test_hand_scores_topk();
    test_hand_sparse_attention();
    test_random(4, 1, 1, 1, 8, 8, 4);      /* one token */
    test_random(4, 3, 2, 2, 8, 4, 4);      /* fewer blocks than k */
    test_random(16, 40, 2, 4, 32, 32, 4);  /* tiny checkpoint shapes */
    test_random(16, 300, 2, 4, 32, 32, 4); /* partial last block */
    test_random(8, 257, 4, 3, 20, 12, 6);  /* odd dims */
    test_random(128, 700, 4, 2, 64, 64, 3);
    return test_done();
}
