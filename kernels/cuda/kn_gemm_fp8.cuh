/* What the FP8 tensor-core decode products share (kn_gemm_small_fp8.cu: the weight streamed through
 * registers, 3-16 activation rows; kn_gemv_fp8_bulk.cu: the weight fed through shared memory by bulk copies,
 * 1-8 rows): the power-of-two scaling of the activations into f16, the mma fragments of a 64-wide k block of
 * e4m3 weights and the end of a weight-scale block. The numerics are described in kn_gemm_small_fp8.cu. */
#pragma once

#include "kn_cuda_internal.cuh"

#include <cuda_fp16.h>

#define G8_BLOCK 64 /* k values per 16-byte load of a weight row */

/* 2^k as an f32, k in [-126, 127] */
__device__ __forceinline__ float g8_pow2(int k)
{
    return __int_as_float((127 + k) << 23);
}

/* The exponent k that puts a row's largest |value| m in [2^14, 2^15); 0 for a row of zeros or one with an
 * infinity or NaN (those propagate as in the bf16 route) */
__device__ __forceinline__ int g8_exp(float m)
{
    return m > 0.0f && m <= 3.0e38f ? max(-126, min(126, 14 - ilogbf(m))) : 0;
}

/* Step s's A fragment from a lane's 16 e4m3 of row gid (a) and row gid + 8 (b): physical k 4 s .. 4 s + 3 */
__device__ __forceinline__ void g8_afrag(uint32_t (&af)[4], uint32_t a, uint32_t b)
{
    af[0] = kn_e4m3x2_to_f16x2((uint16_t)(a & 0xffffu));
    af[1] = kn_e4m3x2_to_f16x2((uint16_t)(b & 0xffffu));
    af[2] = kn_e4m3x2_to_f16x2((uint16_t)(a >> 16));
    af[3] = kn_e4m3x2_to_f16x2((uint16_t)(b >> 16));
}

/* One 64-wide k block of NT activation tiles: bx[t][h] is the lane's 8 f16 activations of token 8 t + gid at
 * physical k 16 tig + 8 h .. + 7 */
template <int NT>
__device__ __forceinline__ void g8_block(float (&acc)[NT][4], uint4 a0, uint4 a8, const uint4 (&bx)[NT][2])
{
    const uint32_t wa[4] = {a0.x, a0.y, a0.z, a0.w}, wb[4] = {a8.x, a8.y, a8.z, a8.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t af[4];
        g8_afrag(af, wa[s], wb[s]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const uint4 v = bx[t][s >> 1];
            const uint32_t b[2] = {(s & 1) ? v.z : v.x, (s & 1) ? v.w : v.y};
            kn_mma_f16(acc[t], af, b);
        }
    }
}

/* The end of a weight-scale block: its sums times the scales of rows gid (sa) and gid + 8 (sb) into acc */
template <int NT>
__device__ __forceinline__ void g8_flush(float (&acc)[NT][4], float (&blk)[NT][4], float sa, float sb)
{
#pragma unroll
    for (int t = 0; t < NT; t++) {
        acc[t][0] = fmaf(blk[t][0], sa, acc[t][0]), acc[t][1] = fmaf(blk[t][1], sa, acc[t][1]);
        acc[t][2] = fmaf(blk[t][2], sb, acc[t][2]), acc[t][3] = fmaf(blk[t][3], sb, acc[t][3]);
#pragma unroll
        for (int e = 0; e < 4; e++) blk[t][e] = 0.0f;
    }
}

/* The bulk-copy route (kn_gemv_fp8_bulk.cu) for the one-weight, several-weight and expert products of
 * kn_gemv_fp8.cu, where kn_cuda_gemv_fp8_bulk_ok takes the shapes. */
int32_t kn_gemv_fp8_bulk(int32_t n_w, const uint8_t *const *w, const float *const *scale, const int64_t *rows,
                         float *const *y, const int64_t *ldy, int64_t n, int64_t cols, const float *x,
                         int64_t ldx, int32_t bs_rows, int32_t bs_cols, cudaStream_t stream,
                         struct mm_err *err);
int32_t kn_gemv_fp8_bulk_experts(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols, const float *x,
                                 int64_t ldx, const int32_t *expert, const uint8_t *const *w_a,
                                 const float *const *s_a, const uint8_t *const *w_b, const float *const *s_b,
                                 int32_t bs_rows, int32_t bs_cols, float *y_a, float *y_b, int64_t ldy,
                                 int ring, int pf, cudaStream_t stream, struct mm_err *err);
