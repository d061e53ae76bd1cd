/* Products with a weight matrix packed once at load: y[m][n] = x[m][k] . W[n][k]^T, the linear layers of the
 * CPU backend.
 *
 * Packed layout: W's n output rows in panels of KN_WPACK_NR (the last one zero-padded), each panel k-major:
 * element (j, x) at p[(j / NR) * k * NR + x * NR + j % NR]. One step of the inner loop then loads NR weights
 * of consecutive outputs as one vector and multiplies them by one broadcast input value, so a register tile
 * of R input rows x NR*P outputs needs no horizontal sums, and the BLAS's per-call repacking of W disappears.
 *
 * Every output is the plain fp32 sum over x = 0..k-1 in order (a fused multiply-add per step on AVX2 and
 * AVX-512), whatever m is and however the rows and columns are tiled or split over threads: a row's result
 * does not depend on the batch it is computed in. */
#ifndef KN_WGEMM_H
#define KN_WGEMM_H

#include <stdint.h>

#define KN_WPACK_NR 16

/** Floats a packed [n][k] weight takes: ceil(n / 16) * k * 16. */
int64_t kn_wpack_floats(int64_t n, int64_t k);

/** Pack row-major w [n][k] (row stride ldw) into dst (kn_wpack_floats floats, 64-byte aligned). */
void kn_wpack(const float *w, int64_t n, int64_t k, int64_t ldw, float *dst);

/** Row `row` of a packed [n][k] weight back into out [k] (an embedding lookup from a tied LM head). */
void kn_wpack_row(const float *p, int64_t n, int64_t k, int64_t row, float *out);

/** c[i][j] = sum_x a[i][x] * W[j][x] for i < m and j in [j0, j1); j0 a multiple of 16, j1 <= n.
 * a: m rows of k (stride lda); c: stride ldc. c must not overlap a. */
void kn_wgemm(int64_t m, int64_t k, const float *a, int64_t lda, const float *p, int64_t n, int64_t j0,
              int64_t j1, float *c, int64_t ldc);

#endif
