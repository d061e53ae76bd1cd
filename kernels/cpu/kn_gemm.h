/* Single-precision matrix products for the CPU backend: OpenBLAS when present, a plain loop otherwise.
 *
 * All matrices are row-major with explicit leading dimensions, so callers can multiply strided views
 * (one head of a [n][heads][dim] tensor, one KV head of a paged cache page) without copying. */
#ifndef KN_GEMM_H
#define KN_GEMM_H

#include <stdint.h>

/** C[m][n] = A[m][k] . B[n][k]^T + beta * C: the "x . W^T" of a linear layer with W stored [out][in]. */
void kn_sgemm_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc);

/** C[m][n] = A[m][k] . B[k][n] + beta * C. */
void kn_sgemm_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                 float beta, float *c, int64_t ldc);

/** Threads the BLAS may use for one product (no-op without OpenBLAS). */
void kn_gemm_set_threads(int32_t n);

/** 1 when the products go through OpenBLAS. */
int32_t kn_gemm_has_blas(void);

/** dot(a, b) over n floats with several accumulators (vectorizable; deterministic for a given n). */
float kn_dot(const float *a, const float *b, int64_t n);

/** y += alpha * x over n floats (y and x must not overlap). */
void kn_axpy(float *y, const float *x, float alpha, int64_t n);

#endif
