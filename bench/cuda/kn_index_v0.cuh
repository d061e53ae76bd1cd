/* The decode index-scoring kernel as it was in commit 9c4498e (before the "Speed follow-up" reworked its
 * issue loop), kept in the benchmark only: perf run 1 measured bf16 at batch 8-64 3-5 points below the
 * previous session, and the two loops must be compared in one run to tell the code from the machine. M3's
 * index dim (128) only; the launch is the library's static split (one wave of 2 CTAs per SM). Not used by the
 * library. */
#ifndef KN_INDEX_V0_CUH
#define KN_INDEX_V0_CUH

#include "kn_cuda_internal.cuh"

#define V0_WARPS 8
#define V0_STAGES 3
#define V0_STAGES_FP8 5

template <int DI, bool FP8> struct v0_cfg {
    /* 16-byte chunks per key row per lane, uint4 loads per lane per 16-token tile */
    static constexpr int CH = FP8 ? DI / 64 : DI / 32;
    static constexpr int LOADS = 2 * CH;
    static constexpr int KS = DI / 16; /* k-steps */
};

/* uint4 per ring slot: the tile's chunks for 32 lanes, then (FP8) 64 scales */
template <int DI, bool FP8> __host__ __device__ constexpr int v0_slot_u4()
{
    return v0_cfg<DI, FP8>::LOADS * 32 + (FP8 ? 16 : 0);
}

template <int DI, bool FP8> __host__ __device__ constexpr int v0_smem_bytes()
{
    return V0_WARPS * (FP8 ? V0_STAGES_FP8 : V0_STAGES) * v0_slot_u4<DI, FP8>() * 16;
}

template <int DI, bool FP8> struct v0_tile {
    uint4 r[v0_cfg<DI, FP8>::LOADS]; /* [row half][chunk] */
    float sc[2];                     /* FP8: scales of rows gid and gid+8 */
};

/* The A fragment of k-step ks from the loaded chunks (see the file comment for the permutation). */
template <int DI, bool FP8>
__device__ __forceinline__ void v0_afrag(const v0_tile<DI, FP8> &t, int ks, uint32_t a[4])
{
    constexpr int CH = v0_cfg<DI, FP8>::CH;
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
        uint32_t w0 = hh == 0 ? r0.x : hh == 1 ? r0.y : hh == 2 ? r0.z : r0.w;
        uint32_t w1 = hh == 0 ? r1.x : hh == 1 ? r1.y : hh == 2 ? r1.z : r1.w;
        a[0] = kn_e4m3x2_to_f16x2((uint16_t)(w0 & 0xffff));
        a[1] = kn_e4m3x2_to_f16x2((uint16_t)(w1 & 0xffff));
        a[2] = kn_e4m3x2_to_f16x2((uint16_t)(w0 >> 16));
        a[3] = kn_e4m3x2_to_f16x2((uint16_t)(w1 >> 16));
    }
}

/* True key dim of k-slot pair (2*tig + 8*half) in k-step ks for this lane (first of the pair). */
template <int DI, bool FP8> __device__ __forceinline__ int v0_dim_of(int ks, int tig, int half)
{
    if (!FP8) {
        const int c = tig + 4 * (ks >> 1);
        return 8 * c + 4 * (ks & 1) + 2 * half;
    }
    const int c = tig + 4 * (ks >> 2);
    return 16 * c + 4 * (ks & 3) + 2 * half;
}

template <int DI, bool FP8>
__global__ void __launch_bounds__(V0_WARPS * 32, 2)
    k_index_decode_v0(const float *__restrict__ q, const int32_t *__restrict__ qseq,
                      const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                      const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n,
                      int32_t nh, int32_t block, int32_t chunk, float *__restrict__ scores,
                      int32_t score_stride)
{
    constexpr int KS = v0_cfg<DI, FP8>::KS;
    constexpr int ROWB = FP8 ? DI : 2 * DI;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t i = blockIdx.y;
    const int64_t p = pos[i];
    const int32_t nb = (int32_t)(p / block) + 1;
    const int32_t b_begin = blockIdx.x * chunk, b_end = min(nb, b_begin + chunk);
    if (b_begin >= nb) return;
    const int32_t *btr = bt + (int64_t)qseq[i] * bt_stride;

    /* query fragments: column gid = hi part (gid < 4) or lo part (gid >= 4) of head gid & 3 */
    uint32_t bq[KS][2];
    {
        const int head = gid & 3;
        const bool lo = gid >= 4;
        const float *qh = q + ((int64_t)i * nh + head) * DI;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float x0 = 0.0f, x1 = 0.0f;
                if (head < nh) {
                    int d = v0_dim_of<DI, FP8>(ks, tig, half);
                    x0 = qh[d];
                    x1 = qh[d + 1];
                }
                uint32_t v;
                if (!FP8) {
                    float h0 = __bfloat162float(__float2bfloat16_rn(x0));
                    float h1 = __bfloat162float(__float2bfloat16_rn(x1));
                    v = lo ? kn_pack_bf16(x0 - h0, x1 - h1) : kn_pack_bf16(h0, h1);
                } else {
                    float h0 = __half2float(__float2half_rn(x0));
                    float h1 = __half2float(__float2half_rn(x1));
                    v = lo ? kn_pack_f16(x0 - h0, x1 - h1) : kn_pack_f16(h0, h1);
                }
                bq[ks][half] = v;
            }
    }

    const int tiles = block / 16;
    /* this warp's pages: b_begin + w, + V0_WARPS, ... < b_end; units = (page, 16-token tile) in order */
    const int32_t my_pages = b_end - b_begin - w > 0 ? (b_end - b_begin - w + V0_WARPS - 1) / V0_WARPS : 0;
    const int32_t units = my_pages * tiles;
    if (units == 0) return;

    /* Per-warp ring of ST tiles in shared memory, filled by cp.async: bytes in flight cost no registers.
     * Every lane reads back only what it copied itself, so the lane's own wait_group is the only
     * synchronisation: no barriers. Slot layout: [load k][lane] uint4, then (FP8) [row half][lane] scales. */
    constexpr int ST = FP8 ? V0_STAGES_FP8 : V0_STAGES;
    constexpr int LOADS = v0_cfg<DI, FP8>::LOADS, CH = v0_cfg<DI, FP8>::CH;
    constexpr int SLOT = v0_slot_u4<DI, FP8>();
    extern __shared__ uint4 v0_smem[];
    uint4 *ring = v0_smem + (size_t)w * ST * SLOT;
    const uint32_t ring_s = kn_smem_addr(ring);

#define V0_ISSUE(v)                                                                                          \
    do {                                                                                                     \
        const int32_t v__ = (v);                                                                             \
        if (v__ < units) {                                                                                   \
            const int32_t pv__ = v__ / tiles, tl__ = v__ - pv__ * tiles;                                     \
            const int64_t pg__ = btr[b_begin + w + pv__ * V0_WARPS];                                         \
            const uint32_t slot__ = ring_s + (uint32_t)((v__ % ST) * SLOT) * 16u;                            \
            _Pragma("unroll") for (int h = 0; h < 2; h++)                                                    \
            {                                                                                                \
                const int row = tl__ * 16 + gid + 8 * h;                                                     \
                const uint8_t *rp = keys + (pg__ * block + row) * ROWB;                                      \
                _Pragma("unroll") for (int c = 0; c < CH; c++) kn_cp_async16(                                \
                    slot__ + (uint32_t)(((h * CH + c) * 32 + lane) * 16), rp + 16 * (tig + 4 * c), 16);      \
                if (FP8)                                                                                     \
                    kn_cp_async4(slot__ + (uint32_t)(LOADS * 32 * 16 + (h * 32 + lane) * 4),                 \
                                 kscale + pg__ * block + row);                                               \
            }                                                                                                \
        }                                                                                                    \
        kn_cp_async_commit();                                                                                \
    } while (0)

#pragma unroll
    for (int k = 0; k < ST - 1; k++) V0_ISSUE(k);

    float mx0 = -INFINITY, mx1 = -INFINITY;
    for (int32_t u = 0; u < units; u++) {
        const int32_t pg = u / tiles, tile = u - pg * tiles;
        const int32_t b = b_begin + w + pg * V0_WARPS;
        kn_cp_async_wait<ST - 2>(); /* this lane's copies of unit u have landed */
        v0_tile<DI, FP8> cur;
        {
            const uint4 *slot = ring + (u % ST) * SLOT;
#pragma unroll
            for (int k = 0; k < LOADS; k++) cur.r[k] = slot[k * 32 + lane];
            if (FP8) {
                const float *sc = (const float *)(slot + LOADS * 32);
                cur.sc[0] = sc[lane];
                cur.sc[1] = sc[32 + lane];
            }
        }
        V0_ISSUE(u + ST - 1); /* into the slot unit u - 1 used: this lane read it last iteration */
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            uint32_t a[4];
            v0_afrag<DI, FP8>(cur, ks, a);
            if (FP8)
                kn_mma_f16(c, a, bq[ks]);
            else
                kn_mma_bf16(c, a, bq[ks]);
        }
        /* hi + lo columns: lane tig pairs with tig ^ 2 */
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 2);
        if (FP8) {
            c[0] *= cur.sc[0], c[1] *= cur.sc[0];
            c[2] *= cur.sc[1], c[3] *= cur.sc[1];
        }
        const int64_t t0 = (int64_t)b * block + tile * 16;
        const bool v0 = t0 + gid <= p, v1 = t0 + gid + 8 <= p;
        mx0 = fmaxf(mx0, fmaxf(v0 ? c[0] : -INFINITY, v1 ? c[2] : -INFINITY));
        mx1 = fmaxf(mx1, fmaxf(v0 ? c[1] : -INFINITY, v1 ? c[3] : -INFINITY));
        if (tile == tiles - 1) {
            /* page done: max over the 8 row groups, lanes 0 and 1 hold heads (0,1) and (2,3) */
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) {
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
            }
            if (lane < 2) {
                const int g0 = 2 * lane;
                if (g0 < nh) scores[((int64_t)g0 * n + i) * score_stride + b] = mx0;
                if (g0 + 1 < nh) scores[((int64_t)(g0 + 1) * n + i) * score_stride + b] = mx1;
            }
            mx0 = mx1 = -INFINITY;
        }
    }
    kn_cp_async_wait<0>();
#undef V0_ISSUE
}

/* kn_cuda_msa_index_scores(KN_PATH_DECODE) with the old kernel (bf16 or FP8 keys, idx_dim 128). */
static void v0_index_scores(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            const struct kn_cuda_cache *c, const float *q, float *scores,
                            int32_t score_stride, int sm_count, cudaStream_t stream)
{
    const bool fp8 = c->idx_dtype == KN_IDX_FP8;
    int64_t want = (int64_t)sm_count * 2;
    int64_t chunk = kn_cdiv((int64_t)qb->max_blocks * qb->n, want);
    chunk = kn_cdiv(chunk, V0_WARPS) * V0_WARPS;
    if (chunk < V0_WARPS) chunk = V0_WARPS;
    if (chunk > 32 * V0_WARPS) chunk = 32 * V0_WARPS;
    dim3 grid((unsigned)kn_cdiv(qb->max_blocks, chunk), (unsigned)qb->n);
    if (fp8) {
        const int smem = v0_smem_bytes<128, true>();
        cudaFuncSetAttribute(k_index_decode_v0<128, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        k_index_decode_v0<128, true><<<grid, V0_WARPS * 32, smem, stream>>>(
            q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale,
            qb->n, sh->n_idx_heads, sh->block, (int32_t)chunk, scores, score_stride);
    } else {
        const int smem = v0_smem_bytes<128, false>();
        cudaFuncSetAttribute(k_index_decode_v0<128, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem);
        k_index_decode_v0<128, false><<<grid, V0_WARPS * 32, smem, stream>>>(
            q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale,
            qb->n, sh->n_idx_heads, sh->block, (int32_t)chunk, scores, score_stride);
    }
}

#endif
