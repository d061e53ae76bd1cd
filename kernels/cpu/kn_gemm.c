#include "kn_gemm.h"

#include <string.h>

#include "kn_simd.h"

#ifdef MMGW_HAVE_OPENBLAS
#include <cblas.h>
#endif

#ifdef MMGW_HAVE_OPENBLAS
#define KN_BLAS_MAX_DIM 2147483647LL /* cblas takes int dimensions */

static int fits_blas(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc)
{
    return m <= KN_BLAS_MAX_DIM && n <= KN_BLAS_MAX_DIM && k <= KN_BLAS_MAX_DIM && lda <= KN_BLAS_MAX_DIM &&
           ldb <= KN_BLAS_MAX_DIM && ldc <= KN_BLAS_MAX_DIM;
}
#endif

KN_DISPATCH(dot, (const float *restrict a, const float *restrict b, int64_t n, float *out), (a, b, n, out))

float kn_dot(const float *a, const float *b, int64_t n)
{
    float r;
    KN_CALL(dot, (a, b, n, &r));
    return r;
}

KN_DISPATCH(axpy, (float *restrict y, const float *restrict x, float alpha, int64_t n), (y, x, alpha, n))

void kn_axpy(float *y, const float *x, float alpha, int64_t n)
{
    KN_CALL(axpy, (y, x, alpha, n));
}

/* Few rows of A (decode steps): the BLAS would repack all of B for every call, which costs as much as the
 * product itself. Here each row of B is read once and multiplied against R rows of A held in L1, with one
 * 8-lane accumulator per row. R is a compile-time 8, 4, 2 or 1 so the accumulators stay in registers. */
#define LOAD8(dst, p)                                                                                        \
    memcpy(&(dst), (p), sizeof(kn_v8f)) /* unaligned; a macro keeps vectors out of the ABI */

#define NT_ROWS_BODY(R)                                                                                      \
    KN_INLINE void nt_rows##R##_body(int64_t n, int64_t k, const float *a, int64_t lda, const float *b,      \
                                     int64_t ldb, float beta, float *c, int64_t ldc)                         \
    {                                                                                                        \
        int64_t k8 = k & ~(int64_t)7;                                                                        \
        for (int64_t j = 0; j < n; j++) {                                                                    \
            const float *w = b + j * ldb;                                                                    \
            kn_v8f acc[R];                                                                                   \
            for (int32_t i = 0; i < R; i++) acc[i] = (kn_v8f){0, 0, 0, 0, 0, 0, 0, 0};                       \
            for (int64_t x = 0; x < k8; x += 8) {                                                            \
                kn_v8f wv, av;                                                                               \
                LOAD8(wv, w + x);                                                                            \
                for (int32_t i = 0; i < R; i++) {                                                            \
                    LOAD8(av, a + i * lda + x);                                                              \
                    acc[i] += av * wv;                                                                       \
                }                                                                                            \
            }                                                                                                \
            for (int32_t i = 0; i < R; i++) {                                                                \
                kn_v8f v = acc[i];                                                                           \
                float s = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));                 \
                for (int64_t x = k8; x < k; x++) s += a[i * lda + x] * w[x];                                 \
                c[i * ldc + j] = beta == 0.0f ? s : s + beta * c[i * ldc + j];                               \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    KN_DISPATCH(nt_rows##R,                                                                                  \
                (int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, \
                 float *c, int64_t ldc),                                                                     \
                (n, k, a, lda, b, ldb, beta, c, ldc))

NT_ROWS_BODY(8)
NT_ROWS_BODY(4)
NT_ROWS_BODY(2)
NT_ROWS_BODY(1)

#define SMALL_M_MAX 8 /* above this the BLAS's packing pays for itself (measured) */

void kn_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
    if (m <= SMALL_M_MAX && k >= 8) {
        for (int64_t i0 = 0; i0 < m;) {
            const float *ai = a + i0 * lda;
            float *ci = c + i0 * ldc;
            int64_t r = m - i0;
            if (r >= 8)
                KN_CALL(nt_rows8, (n, k, ai, lda, b, ldb, beta, ci, ldc)), r = 8;
            else if (r >= 4)
                KN_CALL(nt_rows4, (n, k, ai, lda, b, ldb, beta, ci, ldc)), r = 4;
            else if (r >= 2)
                KN_CALL(nt_rows2, (n, k, ai, lda, b, ldb, beta, ci, ldc)), r = 2;
            else
                KN_CALL(nt_rows1, (n, k, ai, lda, b, ldb, beta, ci, ldc)), r = 1;
            i0 += r;
        }
        return;
    }
#ifdef MMGW_HAVE_OPENBLAS
    if (k > 0 && fits_blas(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float d = k > 0 ? kn_dot(a + i * lda, b + j * ldb, k) : 0.0f;
            c[i * ldc + j] = beta == 0.0f ? d : d + beta * c[i * ldc + j];
        }
}

void kn_sgemm_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0) return;
#ifdef MMGW_HAVE_OPENBLAS
    if (k > 0 && fits_blas(m, n, k, lda, ldb, ldc)) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                    (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++) ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
        for (int64_t p = 0; p < k; p++) kn_axpy(ci, b + p * ldb, a[i * lda + p], n);
    }
}

void kn_gemm_set_threads(int32_t n)
{
#ifdef MMGW_HAVE_OPENBLAS
    if (n > 0) openblas_set_num_threads(n);
#else
    (void)n;
#endif
}

int32_t kn_gemm_has_blas(void)
{
#ifdef MMGW_HAVE_OPENBLAS
    return 1;
#else
    return 0;
#endif
}
