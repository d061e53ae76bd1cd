/* What the tensor-core decode products share (kn_gemm_small.cu: bf16 weights; kn_gemm_small_fp8.cu: FP8
 * weights): the CTA shape (8 warps of 16 weight rows each), the pipelined stream of 16-byte weight loads and
 * the end of a tile (sums over warps and over the CTAs of a k split). */
#pragma once

#include "kn_cuda_internal.cuh"

#include <cuda_bf16.h>

#define GS_WARPS 8
#define GS_ROWS 16
#define GS_GROUP 4 /* 32-wide k blocks per pipelined load group */

/* The end of a tile: each warp's C fragments (acc[t][0..1] = row gid, tokens 8t + 2tig and +1; acc[t][2..3]
 * = row gid + 8, same tokens) summed over the 8 warps in order in shared memory and stored to
 * dst[tok * ld + r0 + r] for the tokens < n and rows < rows that exist. cluster = ks > 1: the ks CTAs of a
 * k split form one cluster and add their sums through distributed shared memory (CTA z sums the outputs
 * e = z mod ks of all ks CTAs in rank order: the result does not depend on timing), so the split needs no
 * workspace and no second launch. */
template <int NT>
__device__ __forceinline__ void gs_store(float (&acc)[NT][4], int32_t n, int64_t rows, int64_t r0,
                                         float *__restrict__ dst, int64_t ld, int cluster = 1)
{
    __shared__ float part[GS_WARPS][GS_ROWS][NT * 8];
    __shared__ float tot[GS_ROWS * NT * 8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        part[warp][gid][8 * t + 2 * tig] = acc[t][0];
        part[warp][gid][8 * t + 2 * tig + 1] = acc[t][1];
        part[warp][gid + 8][8 * t + 2 * tig] = acc[t][2];
        part[warp][gid + 8][8 * t + 2 * tig + 1] = acc[t][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < GS_ROWS * NT * 8; e += GS_WARPS * 32) {
        const int r = e / (NT * 8), tok = e % (NT * 8);
        if (cluster == 1 && (tok >= n || r0 + r >= rows)) continue;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < GS_WARPS; w++) v += part[w][r][tok];
        if (cluster == 1)
            dst[tok * ld + r0 + r] = v;
        else
            tot[e] = v;
    }
    if (cluster == 1) return;
    kn_cluster_sync();
    const int z = (int)kn_cluster_rank();
    for (int e = threadIdx.x; e < GS_ROWS * NT * 8; e += GS_WARPS * 32) {
        const int r = e / (NT * 8), tok = e % (NT * 8);
        if (e % cluster != z || tok >= n || r0 + r >= rows) continue;
        const uint32_t at = (uint32_t)__cvta_generic_to_shared(&tot[e]);
        float v = 0.0f;
        for (int c = 0; c < cluster; c++) v += kn_ld_cluster_f32(kn_cluster_map(at, (uint32_t)c));
        dst[tok * ld + r0 + r] = v;
    }
    kn_cluster_sync(); /* the peers have read this CTA's sums */
}

/* A warp's stream over its weight rows gid and gid + 8 (wa, wb; rows that do not exist read as zeros): blocks
 * 32-wide k blocks, each handed to blk(b, a0, a8). PIPE 1: the next GS_GROUP blocks' loads are issued before
 * the current group's products (two register sets); PIPE 0 and the remainder: a plain loop unrolled by 4. */
template <int PIPE, typename F>
__device__ __forceinline__ void gs_stream(int blocks, const uint4 *__restrict__ wa,
                                          const uint4 *__restrict__ wb, bool ra, bool rb, F &&blk)
{
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    int b = 0;
    if (PIPE) {
        const int groups = blocks / GS_GROUP;
        uint4 c0[GS_GROUP], c8[GS_GROUP];
        if (groups > 0)
#pragma unroll
            for (int u = 0; u < GS_GROUP; u++)
                c0[u] = ra ? __ldcs(wa + 4 * u) : z, c8[u] = rb ? __ldcs(wb + 4 * u) : z;
        for (int g = 0; g < groups; g++) {
            uint4 n0[GS_GROUP], n8[GS_GROUP];
            const bool more = g + 1 < groups;
#pragma unroll
            for (int u = 0; u < GS_GROUP; u++) {
                const int nb = (g + 1) * GS_GROUP + u;
                n0[u] = more && ra ? __ldcs(wa + 4 * nb) : z;
                n8[u] = more && rb ? __ldcs(wb + 4 * nb) : z;
            }
#pragma unroll
            for (int u = 0; u < GS_GROUP; u++) blk(g * GS_GROUP + u, c0[u], c8[u]);
#pragma unroll
            for (int u = 0; u < GS_GROUP; u++) c0[u] = n0[u], c8[u] = n8[u];
        }
        b = groups * GS_GROUP;
    }
#pragma unroll 4
    for (; b < blocks; b++) blk(b, ra ? __ldcs(wa + 4 * b) : z, rb ? __ldcs(wb + 4 * b) : z);
}

/* A warp's ring of GS_RING_DEPTH k blocks in shared memory, the grouped expert products' weight feed
 * (k_gemm_small_experts_ring, k_gemm_experts_fp8_ring): each lane copies exactly its two 16-byte chunks of
 * block i (rows gid and gid + 8, at wa / wb + 4 i: 64 bytes of a row per block for bf16's 32-wide and e4m3's
 * 64-wide blocks alike) into its own 16 bytes of slot i % GS_RING_DEPTH, so its own cp.async.wait_group is
 * the only synchronisation (the FP8 pairs' ring and the index scan work the same way). */
#define GS_RING_DEPTH 8                           /* k blocks in flight per warp */
#define GS_RING_WARP_BYTES (GS_RING_DEPTH * 1024) /* a slot: 2 chunks x 32 lanes x 16 bytes */
#define GS_RING_SMEM (GS_WARPS * GS_RING_WARP_BYTES)

struct gs_ring {
    uint32_t dst;       /* this lane's 16 bytes of slot 0, as a shared-memory address */
    const uint8_t *own; /* the same, generic */
    const uint4 *wa, *wb;
    int32_t ba, bb; /* bytes each copy takes: 16, or 0 for a row past the weight's end (zero-filled) */
    int blocks;     /* this warp's k blocks */

    /* block i into slot i % GS_RING_DEPTH (nothing past the warp's blocks); always one commit group */
    __device__ __forceinline__ void issue(int i) const
    {
        if (i < blocks) {
            const uint32_t slot = dst + (uint32_t)((i % GS_RING_DEPTH) * 1024);
            kn_cp_async16(slot, wa + 4 * i, ba);
            kn_cp_async16(slot + 512, wb + 4 * i, bb);
        }
        kn_cp_async_commit();
    }

    /* block b's two chunks, once this lane's copies of it have landed (blocks b + 1 .. b + depth - 1 may
     * still be in flight); issue(b + GS_RING_DEPTH) may follow at once */
    __device__ __forceinline__ void take(int b, uint4 &a0, uint4 &a8) const
    {
        kn_cp_async_wait<GS_RING_DEPTH - 1>();
        const uint8_t *sl = own + (b % GS_RING_DEPTH) * 1024;
        a0 = *reinterpret_cast<const uint4 *>(sl), a8 = *reinterpret_cast<const uint4 *>(sl + 512);
    }
};

/* The ring of warp `warp` in sm (GS_RING_SMEM bytes); rows that do not exist (!ra, !rb) copy nothing from
 * wa / wb, which must still point into the weight */
__device__ __forceinline__ gs_ring gs_ring_make(uint8_t *sm, int warp, int lane, const uint4 *wa,
                                                const uint4 *wb, bool ra, bool rb, int blocks)
{
    gs_ring g;
    g.dst = kn_smem_addr(sm) + (uint32_t)(warp * GS_RING_WARP_BYTES) + 16u * (uint32_t)lane;
    g.own = sm + warp * GS_RING_WARP_BYTES + 16 * lane;
    g.wa = wa, g.wb = wb, g.ba = ra ? 16 : 0, g.bb = rb ? 16 : 0, g.blocks = blocks;
    return g;
}

/* One CTA of the grouped expert products (k_gemm_small_experts[_ring], k_gemm_experts_fp8[_ring]): expert e
 * = blockIdx.y with activation rows p0 .. p0 + cnt (sorted by expert), its weight rows r0 .. r0 + GS_ROWS,
 * this lane's rows gid and gid + 8 (ra, rb: they exist) and this warp's share [b_begin, b_begin + blocks)
 * of a row's nb k blocks. */
struct ge_cta {
    int e;
    int32_t p0, cnt;
    int lane, warp, gid, tig;
    int64_t r0, b_begin;
    int blocks;
    bool ra, rb;
};

/* false for an expert without rows: its CTAs exit */
__device__ __forceinline__ bool ge_cta_make(ge_cta &c, const int32_t *__restrict__ off, int64_t rows,
                                            int64_t nb)
{
    c.e = blockIdx.y;
    c.p0 = off[c.e], c.cnt = off[c.e + 1] - c.p0;
    if (c.cnt <= 0) return false;
    c.lane = threadIdx.x & 31, c.warp = threadIdx.x >> 5, c.gid = c.lane >> 2, c.tig = c.lane & 3;
    c.r0 = (int64_t)blockIdx.x * GS_ROWS;
    c.b_begin = c.warp * nb / GS_WARPS;
    c.blocks = (int)((c.warp + 1) * nb / GS_WARPS - c.b_begin);
    c.ra = c.r0 + c.gid < rows, c.rb = c.r0 + c.gid + 8 < rows;
    return true;
}

template <int NT> __device__ __forceinline__ void gs_zero(float (&acc)[NT][4])
{
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int v = 0; v < 4; v++) acc[t][v] = 0.0f;
}
