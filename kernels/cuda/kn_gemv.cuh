/* What the decode-sized products (kn_gemv.cu: bf16 and f32 weights; kn_gemv_fp8.cu: FP8 weights) share: the
 * CTA shape, the rounding of x to bf16, and the end of a tile (the sums over lanes, warps and the CTAs of an
 * inner-dimension split). */
#pragma once

#include "kn_cuda_internal.cuh"

#include <cuda_bf16.h>

#define GV_WARPS 8

__device__ __forceinline__ float gv_bf16r(float v)
{
    return __bfloat162float(__float2bfloat16_rn(v));
}

/* Sums over the 32 lanes of a warp of V values per lane, V a power of two: a transpose reduction (at each
 * shuffle distance O a lane keeps one half of its CNT values and adds the partner's copy of that half, so a
 * warp issues V - 1 shuffles in all instead of 5 V). Afterwards this lane holds the sums of values base ..
 * base + C - 1 in a[0 .. C), C = max(V / 32, 1); with V < 32, 32 / V neighbouring lanes hold the same. A
 * template recursion, so that every index is a constant and a[] stays in registers. */
template <int CNT, int O, int V>
__device__ __forceinline__ void gv_warp_reduce(float (&a)[V], int lane, int &base)
{
    if constexpr (O > 0) {
        if constexpr (CNT >= 2) {
            constexpr int H = CNT / 2;
            const bool up = lane & O;
#pragma unroll
            for (int i = 0; i < H; i++) {
                const float send = up ? a[i] : a[i + H], keep = up ? a[i + H] : a[i];
                a[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
            }
            base += up ? H : 0;
            gv_warp_reduce<H, O / 2>(a, lane, base);
        } else {
            a[0] += __shfl_xor_sync(0xffffffffu, a[0], O);
            gv_warp_reduce<1, O / 2>(a, lane, base);
        }
    }
}

/* The end of a tile: acc[r][j] summed over the lanes and then over the 8 warps (in order, in shared memory),
 * stored to y[j * ldy + r0 + r] for the rows that exist. With an inner-dimension split (ks > 1 CTAs of a
 * row tile, launched as one cluster) the CTAs' sums meet through distributed shared memory:
 * CTA z of the cluster adds output e = z (mod ks) of all ks CTAs in rank order, so the result does not depend
 * on timing, and no workspace or second launch is needed. */
template <int R, int N>
__device__ __forceinline__ void gv_store(float (&acc)[R][N], int64_t rows, float *__restrict__ y, int64_t ldy,
                                         int64_t r0, int32_t n = N, int ks = 1)
{
    constexpr int V = R * N;
    __shared__ float part[GV_WARPS][V];
    __shared__ float tot[V];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float a[V];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < N; j++) a[r * N + j] = acc[r][j];
    if constexpr ((V & (V - 1)) == 0) {
        constexpr int C = V >= 32 ? V / 32 : 1, dup = V >= 32 ? 1 : 32 / V;
        int base = 0;
        gv_warp_reduce<V, 16>(a, lane, base);
        if (lane % dup == 0)
#pragma unroll
            for (int i = 0; i < C; i++) part[warp][base + i] = a[i];
    } else {
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float s = kn_warp_sum(a[e]);
            if (lane == 0) part[warp][e] = s;
        }
    }
    __syncthreads();
    const int e = threadIdx.x, r = e / N, j = e % N;
    const bool out = e < V && r0 + r < rows && j < n;
    float s = 0.0f;
    if (e < V)
#pragma unroll
        for (int v = 0; v < GV_WARPS; v++) s += part[v][e];
    if (ks == 1) {
        if (out) y[j * ldy + r0 + r] = s;
        return;
    }
    if (e < V) tot[e] = s;
    kn_cluster_sync();
    if (out && e % ks == (int)kn_cluster_rank()) {
        const uint32_t at = (uint32_t)__cvta_generic_to_shared(&tot[e]);
        float t = 0.0f;
        for (int z = 0; z < ks; z++) t += kn_ld_cluster_f32(kn_cluster_map(at, (uint32_t)z));
        y[j * ldy + r0 + r] = t;
    }
    kn_cluster_sync(); /* the peers have read this CTA's sums */
}

/* A MoE decode CTA's pair and first row (R rows per CTA): PF (pairs fastest) puts the pairs on x, so that the
 * block scheduler runs every pair's row tile t together and pairs that share an expert read its tile within
 * microseconds of each other (L2 serves the repeats); else the tiles are on x (each pair's tiles in turn).
 * PF with the pairs of several tokens (the expert products' group; KN_CUDA_GEMV_PAIR_FAST=0: tiles fastest).
 * Measured (v122, bf16, 16 pairs over 12 experts): down products 128-132 against 147-150 us; with
 * kn_gemv.cu's grouped passes gate + up 210-224 against 247 (grouped alone) and 291-292 (neither); the
 * model's decode at batch 4 / 8 +12-15 / +22-23 % with both, against +7 / +14 % with either alone. */
template <bool PF> __device__ __forceinline__ int64_t gv_pair()
{
    return PF ? blockIdx.x : blockIdx.y;
}
template <bool PF, int R> __device__ __forceinline__ int64_t gv_pair_r0()
{
    return (int64_t)(PF ? blockIdx.y : blockIdx.x) * R;
}

/* Whether the expert products run the pairs fastest: pairs of several tokens (group) and the row tiles
 * within grid y's limit */
static inline bool gv_pair_fast(int32_t group, int64_t tiles)
{
    return group && tiles <= 65535 && kn_cuda_knob_int("KN_CUDA_GEMV_PAIR_FAST", 1);
}

/* The grid of an expert product: tiles x pairs x z, or pairs x tiles x z with the pairs fastest */
static inline dim3 gv_pair_grid(bool pf, int64_t tiles, int64_t pairs, unsigned z)
{
    return pf ? dim3((unsigned)pairs, (unsigned)tiles, z) : dim3((unsigned)tiles, (unsigned)pairs, z);
}
