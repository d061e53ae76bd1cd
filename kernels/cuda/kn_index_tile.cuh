/* One 16-token tile of decode index scoring on the tensor cores, shared by the three decode scans
 * (kn_msa_index_decode.cu: persistent with a cp.async ring; kn_msa_index_decode_pages.cu: one CTA per page;
 * kn_msa_index_decode_stream.cu: grid-stride stream). How a tile is laid out and multiplied is the same in
 * all three; only how the tiles reach the registers and how the work is split differ.
 *
 *  - "AB-swapped" layout: the keys are the M dimension (16 tokens), the query heads the N dimension (8
 *    columns: the bf16 / f16 high part of each of up to 4 heads, then the low part q - hi, so the products
 *    carry ~16 mantissa bits of the fp32 query at no extra cost: the columns were padding anyway).
 *  - Each lane holds whole 16-byte chunks of key rows gid and gid + 8 (chunks tig, tig + 4, ...): a dot
 *    product does not care about the order of its terms, so the k index of the MMA is a permutation of the
 *    key dims, and the query fragment is built with the same permutation (idx_dim_of).
 *  - FP8 keys (e4m3 + a per-token f32 scale) are converted to f16 in registers (exact) and multiplied with
 *    the f16 hi/lo query; the scale is applied per row after the product. */
#ifndef KN_INDEX_TILE_CUH
#define KN_INDEX_TILE_CUH

#include "kn_cuda_internal.cuh"

template <int DI, bool FP8> struct idx_cfg {
    static constexpr int CH = FP8 ? DI / 64 : DI / 32; /* 16-byte chunks per key row per lane */
    static constexpr int LOADS = 2 * CH;               /* uint4 per lane per tile: [row half][chunk] */
    static constexpr int KS = DI / 16;                 /* k-steps */
    static constexpr int ROWB = FP8 ? DI : 2 * DI;     /* bytes per key row */
};

template <int DI, bool FP8> struct idx_tile {
    uint4 r[idx_cfg<DI, FP8>::LOADS]; /* [row half][chunk] */
    float sc[2];                      /* FP8: scales of rows gid and gid + 8 */
};

/* True key dim of k-slot pair (2*tig + 8*half) in k-step ks for this lane (first of the pair). */
template <int DI, bool FP8> __device__ __forceinline__ int idx_dim_of(int ks, int tig, int half)
{
    if (!FP8) {
        const int c = tig + 4 * (ks >> 1);
        return 8 * c + 4 * (ks & 1) + 2 * half;
    }
    const int c = tig + 4 * (ks >> 2);
    return 16 * c + 4 * (ks & 3) + 2 * half;
}

/* The query fragments of query i for this lane: column gid = hi part (gid < 4) or lo part (gid >= 4) of head
 * gid & 3 (heads >= nh are zero), k index permuted as the key chunks are held. */
template <int DI, bool FP8>
__device__ __forceinline__ void idx_query_frags(const float *__restrict__ q, int32_t i, int32_t nh, int gid,
                                                int tig, uint32_t (&bq)[idx_cfg<DI, FP8>::KS][2])
{
    const int head = gid & 3;
    const bool lo = gid >= 4;
    const float *qh = q + ((int64_t)i * nh + head) * DI;
#pragma unroll
    for (int ks = 0; ks < idx_cfg<DI, FP8>::KS; ks++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            float x0 = 0.0f, x1 = 0.0f;
            if (head < nh) {
                const int d = idx_dim_of<DI, FP8>(ks, tig, half);
                x0 = qh[d];
                x1 = qh[d + 1];
            }
            uint32_t v;
            if (!FP8) {
                const float h0 = __bfloat162float(__float2bfloat16_rn(x0));
                const float h1 = __bfloat162float(__float2bfloat16_rn(x1));
                v = lo ? kn_pack_bf16(x0 - h0, x1 - h1) : kn_pack_bf16(h0, h1);
            } else {
                const float h0 = __half2float(__float2half_rn(x0));
                const float h1 = __half2float(__float2half_rn(x1));
                v = lo ? kn_pack_f16(x0 - h0, x1 - h1) : kn_pack_f16(h0, h1);
            }
            bq[ks][half] = v;
        }
}

/* The A fragment of k-step ks from the held chunks. */
template <int DI, bool FP8>
__device__ __forceinline__ void idx_afrag(const idx_tile<DI, FP8> &t, int ks, uint32_t a[4])
{
    constexpr int CH = idx_cfg<DI, FP8>::CH;
    if (!FP8) {
        const int c = ks >> 1, hh = ks & 1;
        const uint4 r0 = t.r[c], r1 = t.r[CH + c];
        a[0] = hh ? r0.z : r0.x;
        a[1] = hh ? r1.z : r1.x;
        a[2] = hh ? r0.w : r0.y;
        a[3] = hh ? r1.w : r1.y;
    } else {
        const int c = ks >> 2, hh = ks & 3;
        const uint4 r0 = t.r[c], r1 = t.r[CH + c];
        /* 32-bit word hh of the chunk holds dims 4hh..4hh+3 of the chunk: two f16x2 words */
        const uint32_t w0 = hh == 0 ? r0.x : hh == 1 ? r0.y : hh == 2 ? r0.z : r0.w;
        const uint32_t w1 = hh == 0 ? r1.x : hh == 1 ? r1.y : hh == 2 ? r1.z : r1.w;
        a[0] = kn_e4m3x2_to_f16x2((uint16_t)(w0 & 0xffff));
        a[1] = kn_e4m3x2_to_f16x2((uint16_t)(w1 & 0xffff));
        a[2] = kn_e4m3x2_to_f16x2((uint16_t)(w0 >> 16));
        a[3] = kn_e4m3x2_to_f16x2((uint16_t)(w1 >> 16));
    }
}

/* Rows gid and gid + 8 of the tile starting at key row `row` straight from global memory into registers
 * (streaming loads: the keys are read once per step). */
template <int DI, bool FP8>
__device__ __forceinline__ void idx_tile_load(idx_tile<DI, FP8> &t, const uint8_t *__restrict__ keys,
                                              const float *__restrict__ kscale, int64_t row, int tig)
{
    using C = idx_cfg<DI, FP8>;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const uint8_t *rp = keys + (row + 8 * h) * C::ROWB;
#pragma unroll
        for (int c = 0; c < C::CH; c++) t.r[h * C::CH + c] = kn_ldg_stream(rp + 16 * (tig + 4 * c));
        if (FP8) t.sc[h] = __ldcs(kscale + row + 8 * h);
    }
}

/* The tile's scores: c[0..1] = heads (2 tig', 2 tig' + 1) of row gid, c[2..3] the same of row gid + 8, valid
 * in lanes tig < 2 (the hi and lo columns folded together), FP8 scales applied. */
template <int DI, bool FP8>
__device__ __forceinline__ void idx_tile_scores(const idx_tile<DI, FP8> &t,
                                                const uint32_t (&bq)[idx_cfg<DI, FP8>::KS][2], float c[4])
{
    c[0] = c[1] = c[2] = c[3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < idx_cfg<DI, FP8>::KS; ks++) {
        uint32_t a[4];
        idx_afrag<DI, FP8>(t, ks, a);
        if (FP8)
            kn_mma_f16(c, a, bq[ks]);
        else
            kn_mma_bf16(c, a, bq[ks]);
    }
    /* hi + lo columns: lane tig pairs with tig ^ 2 */
#pragma unroll
    for (int e = 0; e < 4; e++) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 2);
    if (FP8) {
        c[0] *= t.sc[0], c[1] *= t.sc[0];
        c[2] *= t.sc[1], c[3] *= t.sc[1];
    }
}

/* Fold the causally visible rows of a tile (first token t0; rows gid and gid + 8; last visible token p) into
 * the running maxima of this lane's two head columns. */
__device__ __forceinline__ void idx_tile_max(const float c[4], int64_t t0, int gid, int64_t p, float &mx0,
                                             float &mx1)
{
    const bool v0 = t0 + gid <= p, v1 = t0 + gid + 8 <= p;
    mx0 = fmaxf(mx0, fmaxf(v0 ? c[0] : -INFINITY, v1 ? c[2] : -INFINITY));
    mx1 = fmaxf(mx1, fmaxf(v0 ? c[1] : -INFINITY, v1 ? c[3] : -INFINITY));
}

/* Max over the warp's 8 row groups: afterwards lanes 0 and 1 hold heads (0, 1) and (2, 3). */
__device__ __forceinline__ void idx_rows_max(float &mx0, float &mx1)
{
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
    }
}

/* A finished page's maxima (after idx_rows_max: lanes 0 and 1 hold heads (0, 1) and (2, 3)) into the score
 * rows [head][query][block] of query i, block b. */
__device__ __forceinline__ void idx_store_page_max(float *__restrict__ scores, int32_t score_stride,
                                                   int32_t nh, int32_t n, int32_t i, int32_t b, int lane,
                                                   float mx0, float mx1)
{
    if (lane < 2) {
        const int g0 = 2 * lane;
        if (g0 < nh) scores[((int64_t)g0 * n + i) * score_stride + b] = mx0;
        if (g0 + 1 < nh) scores[((int64_t)(g0 + 1) * n + i) * score_stride + b] = mx1;
    }
}

#endif
