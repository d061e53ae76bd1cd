/* The packed-weight product (kn_wgemm.h) at every instruction-set level the CPU has: against a float64 loop
 * over many shapes (row, panel and k-pass tails), column ranges, the embedding row read-back, and the promise
 * that a row's result does not depend on the batch it is computed in (bit for bit). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_isa.h"
#include "kn_wgemm.h"
#include "mmgw_test.h"

static uint32_t rng = 12345;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *packed(const float *w, int64_t n, int64_t k)
{
    float *p = aligned_alloc(64, (size_t)(kn_wpack_floats(n, k) * 4 + 64) / 64 * 64);
    if (p) kn_wpack(w, n, k, k, p);
    return p;
}

static void check_shape(int64_t m, int64_t n, int64_t k)
{
    float *a = malloc(sizeof(float) * (size_t)(m * k + 1)), *w = malloc(sizeof(float) * (size_t)(n * k + 1));
    float *c = malloc(sizeof(float) * (size_t)(m * (n + 3))), *c1 = malloc(sizeof(float) * (size_t)(n + 3));
    for (int64_t i = 0; i < m * k; i++) a[i] = frand();
    for (int64_t i = 0; i < n * k; i++) w[i] = frand();
    float *p = packed(w, n, k);
    CHECK(p != NULL);
    int64_t ldc = n + 3;
    for (int64_t i = 0; i < m * ldc; i++) c[i] = 1e30f; /* the padding columns must stay untouched */
    kn_wgemm(m, k, a, k, p, n, 0, n, c, ldc);
    int bad = 0, bad_batch = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double r = 0, s = 0;
            for (int64_t x = 0; x < k; x++) {
                r += (double)a[i * k + x] * w[j * k + x];
                s += fabs((double)a[i * k + x] * w[j * k + x]);
            }
            if (fabs(c[i * ldc + j] - r) > 1e-6 * (s + 1)) bad++;
        }
        for (int64_t j = n; j < ldc; j++) bad += c[i * ldc + j] != 1e30f;
    }
    /* batch invariance: each row alone gives the same bits */
    for (int64_t i = 0; i < m; i += 1 + m / 5) {
        kn_wgemm(1, k, a + i * k, k, p, n, 0, n, c1, n);
        bad_batch += memcmp(c1, c + i * ldc, sizeof(float) * (size_t)n) != 0;
    }
    CHECK_MSG(!bad, "%s: m %lld n %lld k %lld: %d wrong outputs", kn_isa_name(kn_isa_get()), (long long)m,
              (long long)n, (long long)k, bad);
    CHECK_MSG(!bad_batch, "%s: m %lld n %lld k %lld: %d rows differ from the one-row product",
              kn_isa_name(kn_isa_get()), (long long)m, (long long)n, (long long)k, bad_batch);
    /* a column range [16, n - 1) as a thread would compute it, the rest untouched */
    if (n > 20) {
        for (int64_t i = 0; i < m * ldc; i++) c[i] = -7.0f;
        kn_wgemm(m, k, a, k, p, n, 16, n - 1, c, ldc);
        float *ref = malloc(sizeof(float) * (size_t)(m * n));
        kn_wgemm(m, k, a, k, p, n, 0, n, ref, n);
        int bad_range = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < ldc; j++) {
                float want = j >= 16 && j < n - 1 ? ref[i * n + j] : -7.0f;
                bad_range += c[i * ldc + j] != want;
            }
        CHECK_MSG(!bad_range, "m %lld n %lld k %lld: column range: %d wrong", (long long)m, (long long)n,
                  (long long)k, bad_range);
        free(ref);
    }
    /* rows back out of the packed form */
    float *row = malloc(sizeof(float) * (size_t)k);
    for (int64_t j = 0; j < n; j += 1 + n / 3) {
        kn_wpack_row(p, n, k, j, row);
        CHECK(memcmp(row, w + j * k, sizeof(float) * (size_t)k) == 0);
    }
    free(row);
    free(p);
    free(a);
    free(w);
    free(c);
    free(c1);
}

int main(void)
{
    int32_t top = kn_isa_get();
    for (int32_t lv = top; lv >= 0; lv--) {
        CHECK_EQ_INT(kn_isa_limit(lv), lv);
        static const int64_t ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 100, 203};
        static const int64_t ns[] = {1, 15, 16, 17, 48, 81};
        static const int64_t ks[] = {1, 7, 8, 33, 256, 257, 600};
        for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t d = 0; d < sizeof ks / sizeof ks[0]; d++)
                    if (ms[a] * ns[b] * ks[d] < 3000000) check_shape(ms[a], ns[b], ks[d]);
    }
    kn_isa_limit(top);
    /* k = 0: zeros */
    float c[4] = {1, 2, 3, 4}, w[1] = {0};
    float *p = packed(w, 4, 0);
    kn_wgemm(1, 0, w, 0, p ? p : w, 4, 0, 4, c, 4);
    CHECK(c[0] == 0 && c[3] == 0);
    free(p);
    return test_done();
}
