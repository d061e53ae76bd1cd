#include "kn_wgemm.h"

#include <string.h>

#include "kn_simd.h"

#define NR KN_WPACK_NR
#define KC 256 /* inputs per pass: a row block's slice of A stays in L1/L2 while the panels stream */
#define MC 96  /* rows per pass (a multiple of every row tile: 8, 6, 4, 2, 1) */

int64_t kn_wpack_floats(int64_t n, int64_t k)
{
    return (n + NR - 1) / NR * k * NR;
}

void kn_wpack(const float *w, int64_t n, int64_t k, int64_t ldw, float *dst)
{
    int64_t np = (n + NR - 1) / NR;
    for (int64_t p = 0; p < np; p++) {
        float *d = dst + p * k * NR;
        for (int64_t j = 0; j < NR; j++) {
            int64_t row = p * NR + j;
            if (row < n)
                for (int64_t x = 0; x < k; x++) d[x * NR + j] = w[row * ldw + x];
            else
                for (int64_t x = 0; x < k; x++) d[x * NR + j] = 0.0f;
        }
    }
}

void kn_wpack_row(const float *p, int64_t n, int64_t k, int64_t row, float *out)
{
    (void)n;
    const float *s = p + row / NR * k * NR + row % NR;
    for (int64_t x = 0; x < k; x++) out[x] = s[x * NR];
}

/* Register tile: R rows of A x P panels (16 outputs each), in vectors of W lanes (the level's native width:
 * wider generic vectors are kept in memory by the compiler). The accumulators live in registers for the
 * whole k loop; c is loaded first when a previous k pass left partial sums there, which keeps every output's
 * sum in plain x order.
 *
 * pf (or NULL): the panels the next tile group will read, fetched into L1 at the pace this tile consumes its
 * own (one line per panel per x step). A decode step streams its weights from L3 or DRAM (they do not fit
 * in L2 together with the KV cache); the hardware prefetchers stop at 4 KiB page ends and run only a few
 * lines ahead. */
#define MICRO(R, P, W)                                                                                       \
    KN_INLINE void micro_##R##_##P##_##W(int64_t kc, const float *restrict a, int64_t lda,                   \
                                         const float *restrict b, int64_t pstride, float *restrict c,        \
                                         int64_t ldc, int load_c, const float *pf)                           \
    {                                                                                                        \
        enum { VP = NR / W };                                                                                \
        kn_v##W##f acc[R][P * VP];                                                                           \
        for (int r = 0; r < R; r++)                                                                          \
            for (int q = 0; q < P * VP; q++) {                                                               \
                if (load_c)                                                                                  \
                    memcpy(&acc[r][q], c + r * ldc + q * W, sizeof(kn_v##W##f));                             \
                else                                                                                         \
                    acc[r][q] = (kn_v##W##f){0};                                                             \
            }                                                                                                \
        for (int64_t x = 0; x < kc; x++) {                                                                   \
            kn_v##W##f bv[P * VP];                                                                           \
            if (pf)                                                                                          \
                for (int q = 0; q < P; q++) __builtin_prefetch(pf + q * pstride + x * NR, 0, 3);             \
            for (int q = 0; q < P * VP; q++)                                                                 \
                bv[q] = *(const kn_v##W##f *)(b + (q / VP) * pstride + x * NR + (q % VP) * W);               \
            for (int r = 0; r < R; r++) {                                                                    \
                float av = a[r * lda + x];                                                                   \
                for (int q = 0; q < P * VP; q++) acc[r][q] += bv[q] * av;                                    \
            }                                                                                                \
        }                                                                                                    \
        for (int r = 0; r < R; r++)                                                                          \
            for (int q = 0; q < P * VP; q++)                                                                 \
                memcpy(c + r * ldc + (q / VP) * NR + (q % VP) * W, &acc[r][q], sizeof(kn_v##W##f));          \
    }

/* AVX-512: one zmm per panel row */
MICRO(8, 2, 16)
MICRO(8, 1, 16)
MICRO(4, 4, 16)
MICRO(4, 2, 16)
MICRO(4, 1, 16)
MICRO(2, 4, 16)
MICRO(2, 2, 16)
MICRO(2, 1, 16)
MICRO(1, 4, 16)
MICRO(1, 2, 16)
MICRO(1, 1, 16)
/* AVX2: two ymm; 6 x 1 keeps 12 of the 16 ymm as accumulators (more independent FMA chains than 4 x 1) */
MICRO(6, 1, 8)
MICRO(4, 1, 8)
MICRO(2, 2, 8)
MICRO(2, 1, 8)
MICRO(1, 4, 8)
MICRO(1, 2, 8)
MICRO(1, 1, 8)
/* baseline: four xmm */
MICRO(2, 1, 4)
MICRO(1, 2, 4)
MICRO(1, 1, 4)

/* Largest row tile per level, and panels per tile for a given row tile: about 8-16 accumulator vectors,
 * fitting 32 zmm (AVX-512), 16 ymm (AVX2, two per vector) or 16 xmm (baseline, four per vector). */
KN_INLINE int rmax_of(int lv)
{
    return lv == 2 ? 8 : lv == 1 ? 6 : 2;
}

KN_INLINE int pmax_of(int lv, int r)
{
    if (lv == 2) return r >= 8 ? 2 : 4;
    if (lv == 1) return r >= 4 ? 1 : r == 2 ? 2 : 4;
    return r >= 2 ? 1 : 2;
}

/* The row tile for the `left` rows still to do: the largest (rmax, then halves) that fits. */
KN_INLINE int rows_of(int rmax, int64_t left)
{
    if (left >= rmax) return rmax;
    int r = rmax == 6 ? 4 : rmax / 2;
    while (r > left) r /= 2;
    return r;
}

KN_INLINE void tile(int lv, int r, int p, int64_t kc, const float *a, int64_t lda, const float *b,
                    int64_t pstride, float *c, int64_t ldc, int load_c, const float *pf)
{
#define T(R, P, W)                                                                                           \
    do {                                                                                                     \
        if (r == R && p == P) {                                                                              \
            micro_##R##_##P##_##W(kc, a, lda, b, pstride, c, ldc, load_c, pf);                               \
            return;                                                                                          \
        }                                                                                                    \
    } while (0)
    if (lv == 2) {
        T(8, 2, 16);
        T(8, 1, 16);
        T(4, 4, 16);
        T(4, 2, 16);
        T(4, 1, 16);
        T(2, 4, 16);
        T(2, 2, 16);
        T(2, 1, 16);
        T(1, 4, 16);
        T(1, 2, 16);
        T(1, 1, 16);
    } else if (lv == 1) {
        T(6, 1, 8);
        T(4, 1, 8);
        T(2, 2, 8);
        T(2, 1, 8);
        T(1, 4, 8);
        T(1, 2, 8);
        T(1, 1, 8);
    } else {
        T(2, 1, 4);
        T(1, 2, 4);
        T(1, 1, 4);
    }
#undef T
}

/* A tile whose outputs run past column n (the zero-padded last panel): computed into a local tile, and only
 * the real columns are read from / written to c. */
KN_INLINE void tile_edge(int lv, int r, int p, int64_t kc, const float *a, int64_t lda, const float *b,
                         int64_t pstride, float *c, int64_t ldc, int load_c, int64_t ncols, const float *pf)
{
    float t[8 * 4 * NR];
    int64_t ldt = (int64_t)p * NR;
    for (int i = 0; i < r; i++)
        for (int64_t j = 0; j < ldt; j++) t[i * ldt + j] = load_c && j < ncols ? c[i * ldc + j] : 0.0f;
    tile(lv, r, p, kc, a, lda, b, pstride, t, ldt, load_c, pf);
    for (int i = 0; i < r; i++) memcpy(c + i * ldc, t + i * ldt, sizeof(float) * (size_t)ncols);
}

KN_INLINE void wgemm_body(int lv, int64_t m, int64_t k, const float *a, int64_t lda, const float *pk,
                          int64_t n, int64_t j0, int64_t j1, float *c, int64_t ldc)
{
    int rmax = rmax_of(lv);
    int64_t pstride = k * NR, p0 = j0 / NR, p1 = (j1 + NR - 1) / NR;
    /* panels per tile follow the largest row tile this product uses */
    int pg = pmax_of(lv, rows_of(rmax, m));
    for (int64_t k0 = 0; k0 < k; k0 += KC) {
        int64_t kc = k - k0 < KC ? k - k0 : KC;
        int load_c = k0 > 0;
        for (int64_t i0 = 0; i0 < m; i0 += MC) {
            int64_t mc = m - i0 < MC ? m - i0 : MC;
            for (int64_t p = p0; p < p1;) {
                int np = pg;
                while (np > 1 && p + np > p1) np /= 2;
                const float *b = pk + p * pstride + k0 * NR;
                int64_t col = p * NR, ncols = j1 - col;
                int edge = ncols < (int64_t)np * NR;
                /* AVX2 only (measured: +6% on a decode step's products there, -2..4% with AVX-512, whose
                 * tiles finish a panel twice as fast): the first row tile fetches the next group's panels
                 * when the next group is as wide as this one; the other row tiles find this group's in L1 */
                const float *pf = lv == 1 && p + 2 * np <= p1 ? b + np * pstride : NULL;
                for (int64_t i = 0; i < mc;) {
                    int r = rows_of(rmax, mc - i);
                    const float *ai = a + (i0 + i) * lda + k0;
                    float *ci = c + (i0 + i) * ldc + col;
                    if (edge)
                        tile_edge(lv, r, np, kc, ai, lda, b, pstride, ci, ldc, load_c, ncols, i ? NULL : pf);
                    else
                        tile(lv, r, np, kc, ai, lda, b, pstride, ci, ldc, load_c, i ? NULL : pf);
                    i += r;
                }
                p += np;
            }
        }
    }
}

KN_DISPATCH3(wgemm,
             (int64_t m, int64_t k, const float *a, int64_t lda, const float *pk, int64_t n, int64_t j0,
              int64_t j1, float *c, int64_t ldc),
             (m, k, a, lda, pk, n, j0, j1, c, ldc))

void kn_wgemm(int64_t m, int64_t k, const float *a, int64_t lda, const float *p, int64_t n, int64_t j0,
              int64_t j1, float *c, int64_t ldc)
{
    if (j1 > n) j1 = n;
    if (m <= 0 || j0 >= j1) return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++) memset(c + i * ldc + j0, 0, sizeof(float) * (size_t)(j1 - j0));
        return;
    }
    KN_CALL3(wgemm, (m, k, a, lda, p, n, j0, j1, c, ldc));
}
