/* Decode products at 1-8 activation rows with FP8-E4M3 weights as stored, on the tensor cores, the weight fed
 * through shared memory by asynchronous copies: y[n][rows] = bf16(x[n][cols]) . (W * scale)^T for one
 * weight, several weights that read the same x (q / k / v), and the MoE decode pairs over expert tables.
 * Two feeds:
 * - bulk copies (cp.async.bulk + mbarrier CTA ring, k_gemv_fp8_bulk), OPT-IN (KN_CUDA_GEMV_FP8_BULK=1):
 *   measured slower than the CUDA-core kernels of kn_gemv_fp8.cu on every one-weight shape (bench/cuda/
 *   README.md "Nineteenth session");
 * - a per-warp cp.async ring (k_gemv_fp8_ring): THE DEFAULT for the MoE decode pairs
 *   (kn_cuda_gemv_experts_fp8 when kn_cuda_gemv_fp8_ring_experts_ok; KN_CUDA_GEMV_FP8_EXPERTS_RING=0 turns it
 *   off) and for single weights at 3-8 rows (n >= GB_RING_MIN_N; cols and scale blocks in 64s), where it
 *   runs 1.5-3x the CUDA-core kernels (v89). At 1-2 rows single weights stay on the CUDA cores (faster on
 *   4 of 6 shapes at one row, mixed at two; the whole model measured level either way, v90).
 *   KN_CUDA_GEMV_FP8_BULK=2 forces the ring at every n, =0 turns it off for single weights. At 1-2 rows each
 *   ring CTA converts its slice of x once (XS, the default; KN_CUDA_GEMV_FP8_RING_XS=0 turns it off): the
 *   pairs' gate + up 146 -> 120 us, and the whole model's FP8 decode +4-5 % at batch 1, +7-11 % at batch 4-8
 *   (twenty-second session, v89). The pairs took the ring first (twentieth session: 6144 x 3072 pairs 147
 *   against 224 us, 3072 x 6144 143 against 157; whole synthetic model batch 1 +5-9 %, batch 4 +20-26 %).
 *
 * Why the tensor cores lost on single weights before XS: a pure-read probe (v82) streams 50 MB in 18-20 us
 * with any of the access patterns used here, the CUDA-core kernel needs 25-27 and these 35-38, so the cost is
 * the per-block work (the activation block's f16 scaling, recomputed by every warp of every row tile), not
 * the copies. The bulk-copy notes of the nineteenth session (v75-v78): 8192 x 6144 at one row 37 us, DRAM at
 * 29 % of peak, 103 registers, two CTAs per SM.
 *
 * Layout (the bulk feed): a CTA takes 16 weight rows (one mma M) and a k slice (all of the inner dimension,
 * or 1/ks of it for a split, the ks CTAs of a tile forming a cluster that adds its sums through distributed
 * shared memory in rank order), cut into stages of SPAN columns that pass through a ring of DEPTH slots: warp
 * 0 arms a slot's "full" mbarrier with the byte count and its lanes 0-15 each copy one row; warp w multiplies
 * blocks BPW w .. of every stage and releases the slot on its "empty" mbarrier (one arrival per warp); the
 * sums of the 8 warps meet in shared memory in warp order (gs_store: the result does not depend on timing).
 * The activation rows are scaled per 64-wide block (rounded to bf16, times the power of two that puts the
 * block's largest |value| in [2^14, 2^15), as f16: exact) by the lanes that hold them as the mma's N columns,
 * which load them before they wait for the stage. Weights are constants, so a CTA issues its first copies
 * before it waits for the kernel before it (the launch chain); the expert route first needs the expert ids.
 *
 * Numerics: kn_gemm_small_fp8.cu's (W * scale exact, x rounded to bf16, products exact, f32 sums, here per
 * 64-wide block, times the weight block's scale and the activation block's 2^-k), up to the order of the f32
 * sums. */
#include "kn_gemm_fp8.cuh"
#include "kn_gemm_small.cuh"
#include "kn_gemv.cuh"
#include "kn_wgmma.cuh"

#include <string.h>

/* Stage shapes (KN_CUDA_GEMV_FP8_BULK_CFG picks one, benchmark): inner-dimension columns (bytes of each of
 * the 16 weight rows, one bulk copy per row) per stage, and stages in the ring. A stage row is SPAN + 64
 * bytes apart in shared memory, so that the lanes' 16-byte reads (row gid and gid + 8, byte 16 tig of a
 * 64-wide block) fall in distinct banks. */
#define GB_CFGS 3
static const int gb_span[GB_CFGS] = {1024, 512, 2048}, gb_depth[GB_CFGS] = {4, 6, 2};
#define GB_PITCH(SPAN) ((SPAN) + 64)
#define GB_STAGE(SPAN) (GS_ROWS * GB_PITCH(SPAN))
#define GB_MAX_N 8 /* activation rows: one mma N */

/* What a launch multiplies: weight i = blockIdx.y of the tables (one or several weights reading the same
 * x), or, experts != NULL, pair p (blockIdx.y, or blockIdx.x / ks with pf) with expert expert[p] of the
 * tables w_a / s_a (blockIdx.z = 0) or w_b / s_b (1), its x row p / xdiv, its output row p of y_a / y_b. The
 * CTAs of a row tile's k slices (a cluster) lie along x: x = tile x ks + slice, or with pf (experts; the
 * pairs fastest, gv_pair) x = pair x ks + slice and y = tile. */
struct gb_args {
    const float *x;
    int64_t ldx, cols;
    int64_t kspan; /* columns per k slice: cols / ks */
    int32_t n, bs_rows, bs_cols, xdiv, ks, pf;
    const uint8_t *w[KN_GEMV_MULTI_MAX];
    const float *s[KN_GEMV_MULTI_MAX];
    float *y[KN_GEMV_MULTI_MAX];
    int64_t rows[KN_GEMV_MULTI_MAX], ldy[KN_GEMV_MULTI_MAX];
    const int32_t *expert;
    const uint8_t *const *w_a, *const *w_b;
    const float *const *s_a, *const *s_b;
    float *y_a, *y_b;
};

/* bytes of dynamic shared memory a CTA of configuration cfg needs for a k slice of kspan columns */
static int64_t gb_smem(int cfg, int64_t kspan)
{
    const int64_t stages = (kspan + gb_span[cfg] - 1) / gb_span[cfg];
    return (stages < gb_depth[cfg] ? stages : gb_depth[cfg]) * GB_STAGE(gb_span[cfg]);
}

__device__ __forceinline__ void gb_bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar,
                                             uint64_t pol)
{
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], "
        "%2, [%3], %4;\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "l"(pol)
        : "memory");
}

/* 16 values of activation row gid at column c (lanes gid < n; the others hold zeros) as the mma's B
 * fragment: rounded to bf16, times the power of two 2^k that puts the 64-wide block's largest |value| (the
 * 4 lanes of the row) in [2^14, 2^15), as f16 (exact); returns 2^-k */
__device__ __forceinline__ float gb_xfrag(const float4 (&v)[4], uint4 (&bx)[2])
{
    float f[16];
    float m = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        f[4 * q] = gv_bf16r(v[q].x), f[4 * q + 1] = gv_bf16r(v[q].y);
        f[4 * q + 2] = gv_bf16r(v[q].z), f[4 * q + 3] = gv_bf16r(v[q].w);
    }
#pragma unroll
    for (int e = 0; e < 16; e++) m = fmaxf(m, fabsf(f[e]));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
    const int k = g8_exp(m);
    const float sc = g8_pow2(k);
    uint32_t h[8];
#pragma unroll
    for (int e = 0; e < 8; e++) h[e] = kn_pack_f16(f[2 * e] * sc, f[2 * e + 1] * sc);
    bx[0] = make_uint4(h[0], h[1], h[2], h[3]), bx[1] = make_uint4(h[4], h[5], h[6], h[7]);
    return g8_pow2(-k);
}

/* What a CTA multiplies (gb_args' comment: its weight or pair, and table); the expert route first waits for
 * the kernel before it, which wrote the expert ids */
struct gb_tile {
    const uint8_t *w;
    const float *scale, *x;
    float *y;
    int64_t rows, ldy;
    int32_t n;
};

template <int EXPERTS> __device__ __forceinline__ gb_tile gb_select(const gb_args &a)
{
    gb_tile t;
    t.x = a.x, t.n = a.n;
    if (EXPERTS) {
        kn_griddep_wait(); /* the expert ids come from the routing */
        const int64_t p = a.pf ? blockIdx.x / (unsigned)a.ks : blockIdx.y;
        const int32_t e = a.expert[p];
        t.w = (blockIdx.z ? a.w_b : a.w_a)[e], t.scale = (blockIdx.z ? a.s_b : a.s_a)[e];
        t.y = (blockIdx.z ? a.y_b : a.y_a) + p * a.ldy[0], t.rows = a.rows[0], t.ldy = a.ldy[0];
        t.x += (p / a.xdiv) * a.ldx, t.n = 1;
    } else {
        t.w = a.w[0], t.scale = a.s[0], t.y = a.y[0], t.rows = a.rows[0], t.ldy = a.ldy[0];
#pragma unroll
        for (int k = 1; k < KN_GEMV_MULTI_MAX; k++) /* constant indices: a stays in parameter space */
            if (k == (int)blockIdx.y)
                t.w = a.w[k], t.scale = a.s[k], t.y = a.y[k], t.rows = a.rows[k], t.ldy = a.ldy[k];
    }
    return t;
}

template <int EXPERTS, int SPAN, int DEPTH>
__global__ void __launch_bounds__(GS_WARPS * 32, 2) k_gemv_fp8_bulk(const gb_args a)
{
    constexpr int BPW = SPAN / G8_BLOCK / GS_WARPS; /* 64-wide blocks of a stage per warp */
    extern __shared__ __align__(128) uint8_t gb_sm[];
    __shared__ __align__(8) uint64_t full[DEPTH], empty[DEPTH];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    /* tile blockIdx.x / ks (blockIdx.y with a.pf), k slice blockIdx.x % ks (= the rank in its cluster) */
    const int32_t ks = a.ks, kz = (int32_t)(blockIdx.x % (unsigned)ks);
    const int64_t cols = a.cols, r0 = (int64_t)(a.pf ? blockIdx.y : blockIdx.x / (unsigned)ks) * GS_ROWS;
    const int64_t kb = (int64_t)kz * a.kspan, ke = kb + a.kspan;
    const gb_tile t = gb_select<EXPERTS>(a);
    const uint8_t *w = t.w;
    const float *scale = t.scale, *x = t.x;
    float *y = t.y;
    const int64_t rows = t.rows, ldy = t.ldy;
    const int32_t n = t.n;
    if (r0 >= rows) { /* a tile past this weight's rows (the grid is sized for the largest): the whole
                         cluster leaves */
        kn_chain_entry();
        return;
    }
    const int nst = (int)((ke - kb + SPAN - 1) / SPAN), depth = nst < DEPTH ? nst : DEPTH;
    const int nrow = rows - r0 < GS_ROWS ? (int)(rows - r0) : GS_ROWS;
    const uint32_t ring = kn_smem_addr(gb_sm);
    uint64_t pol = 0;
    if (threadIdx.x == 0) {
        for (int d = 0; d < depth; d++)
            mb_init(kn_smem_addr(&full[d]), 1), mb_init(kn_smem_addr(&empty[d]), GS_WARPS);
        mb_init_fence();
    }
    if (warp == 0) asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    __syncthreads();
    /* warp 0: stage i into slot i % depth, once every warp has released the stage there before */
    auto issue = [&](int i) {
        const int d = i % depth;
        const int64_t k0 = kb + (int64_t)i * SPAN;
        const uint32_t bytes = (uint32_t)(ke - k0 < SPAN ? ke - k0 : SPAN);
        const uint32_t bar = kn_smem_addr(&full[d]);
        if (i >= depth) mb_wait(kn_smem_addr(&empty[d]), (uint32_t)((i / depth - 1) & 1));
        if (lane == 0) {
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                         "r"(bytes * (uint32_t)nrow)
                         : "memory");
        }
        __syncwarp();
        if (lane < nrow)
            gb_bulk_copy(ring + (uint32_t)(d * GB_STAGE(SPAN) + lane * GB_PITCH(SPAN)),
                         w + (r0 + lane) * cols + k0, bytes, bar, pol);
    };
    if (warp == 0)
        for (int i = 0; i < depth; i++) issue(i);
    kn_chain_entry();

    /* rows gid and gid + 8 of the tile (a row past the weight's end multiplies whatever the ring holds
     * there: its output row is not stored); warp w takes blocks BPW w .. of every stage; lanes gid < n load
     * activation row gid's 16 values of each block before they wait for the weights */
    const int64_t scols = (cols + a.bs_cols - 1) / a.bs_cols;
    const float *sa = scale + (gid < nrow ? (r0 + gid) / a.bs_rows : 0) * scols;
    const float *sb = scale + (gid + 8 < nrow ? (r0 + gid + 8) / a.bs_rows : 0) * scols;
    const float *xrow = x + (gid < n ? gid : 0) * a.ldx + 16 * tig;
    float acc[1][4];
#pragma unroll
    for (int e = 0; e < 4; e++) acc[0][e] = 0.0f;
    for (int i = 0; i < nst; i++) {
        const int d = i % depth;
        const int64_t k0 = kb + (int64_t)i * SPAN;
        const int nb = (int)((ke - k0 < SPAN ? ke - k0 : SPAN) / G8_BLOCK);
        float4 xv[BPW][4];
#pragma unroll
        for (int q = 0; q < BPW; q++) {
            const int64_t c = k0 + G8_BLOCK * (BPW * warp + q);
#pragma unroll
            for (int v = 0; v < 4; v++)
                xv[q][v] = gid < n && BPW * warp + q < nb
                               ? __ldg(reinterpret_cast<const float4 *>(xrow + c) + v)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        mb_wait(kn_smem_addr(&full[d]), (uint32_t)((i / depth) & 1));
        const uint8_t *wa = gb_sm + d * GB_STAGE(SPAN) + gid * GB_PITCH(SPAN) + 16 * tig;
#pragma unroll
        for (int q = 0; q < BPW; q++) {
            const int j = BPW * warp + q;
            if (j >= nb) break;
            const uint4 a0 = *reinterpret_cast<const uint4 *>(wa + G8_BLOCK * j);
            const uint4 a8 = *reinterpret_cast<const uint4 *>(wa + 8 * GB_PITCH(SPAN) + G8_BLOCK * j);
            const int64_t c = k0 + G8_BLOCK * j;
            uint4 bx[1][2];
            const float un = gb_xfrag(xv[q], bx[0]);
            /* the 2^-k of activation rows 2 tig and 2 tig + 1 (the C columns of this lane) */
            const float u0 = __shfl_sync(0xffffffffu, un, 8 * tig),
                        u1 = __shfl_sync(0xffffffffu, un, 8 * tig + 4);
            float blk[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
            g8_block<1>(blk, a0, a8, bx);
            const float fa = __ldg(sa + c / a.bs_cols), fb = __ldg(sb + c / a.bs_cols);
            acc[0][0] = fmaf(blk[0][0] * u0, fa, acc[0][0]), acc[0][1] = fmaf(blk[0][1] * u1, fa, acc[0][1]);
            acc[0][2] = fmaf(blk[0][2] * u0, fb, acc[0][2]), acc[0][3] = fmaf(blk[0][3] * u1, fb, acc[0][3]);
        }
        __syncwarp(); /* every lane has read slot d */
        if (lane == 0) mb_arrive(kn_smem_addr(&empty[d]));
        if (warp == 0 && i + depth < nst) issue(i + depth);
    }
    gs_store<1>(acc, n, rows, r0, y, ldy, ks);
}

/* ---- the same product fed by a per-warp cp.async ring (the MoE decode pairs' route) ----
 * As the decode index scan streams its keys (kn_msa_index_decode_ring.cu, 91-95 % of copy): every lane
 * copies, 16 bytes at a time, exactly the weight chunks it multiplies (row gid and gid + 8, bytes 16 tig of
 * each 64-wide block the warp takes: blocks warp, warp + 8, ... of the CTA's k slice) into its own slots of
 * the warp's ring, GR_DEPTH blocks ahead, so its own cp.async.wait_group is the only synchronisation: no
 * mbarrier, no producer warp, no register per byte in flight (79 registers, 64 KB: 3 CTAs per SM). The
 * activation chunks go through registers one block ahead (L1/L2 hits: every CTA reads the same x). */
#define GR_DEPTH 8                      /* 64-wide blocks in flight per warp */
#define GR_WARP_BYTES (GR_DEPTH * 1024) /* a slot: 2 chunks x 32 lanes x 16 bytes */

/* XS = 1 (the default at n <= 2; KN_CUDA_GEMV_FP8_RING_XS=0 turns it off): the CTA converts its slice of x
 * once, after the chain's wait, into shared memory behind the ring (each row rounded to bf16 and scaled by
 * the power of two that puts its largest |value| in [2^14, 2^15), as f16: kn_cuda_x_f16_scaled's arithmetic),
 * so the consumers load their B fragments (32 bytes) instead of scaling every 64-wide block themselves (~130
 * of the ~190 instructions a warp spends on a block); the row's 2^-k is applied once, to the sums. */
#define GR_XS_MAX_N 2
#define GR_XS_MAX_BYTES (64 << 10)
#define GR_XS_DEPTH 6 /* 48 KB of ring and up to 24 KB of x: still 3 CTAs per SM */

template <int EXPERTS, int XS>
__global__ void __launch_bounds__(GS_WARPS * 32, 3) k_gemv_fp8_ring(const gb_args a)
{
    constexpr int D = XS ? GR_XS_DEPTH : GR_DEPTH, WB = D * 1024; /* blocks in flight, ring bytes per warp */
    extern __shared__ __align__(128) uint8_t gb_sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t ks = a.ks, kz = (int32_t)(blockIdx.x % (unsigned)ks);
    const int64_t cols = a.cols, r0 = (int64_t)(a.pf ? blockIdx.y : blockIdx.x / (unsigned)ks) * GS_ROWS;
    const int64_t kb = (int64_t)kz * a.kspan;
    const gb_tile t = gb_select<EXPERTS>(a);
    const uint8_t *w = t.w;
    const float *scale = t.scale, *x = t.x;
    float *y = t.y;
    const int64_t rows = t.rows, ldy = t.ldy;
    const int32_t n = t.n;
    if (r0 >= rows) {
        kn_chain_entry();
        return;
    }
    const int nblk = (int)(a.kspan / G8_BLOCK), mine = warp < nblk ? (nblk - 1 - warp) / GS_WARPS + 1 : 0;
    const int nrow = rows - r0 < GS_ROWS ? (int)(rows - r0) : GS_ROWS;
    /* this lane's weight chunks: rows gid and gid + 8 (a row past the weight's end reads row r0,
     * zero-filled)
     */
    const uint8_t *wa = w + (r0 + (gid < nrow ? gid : 0)) * cols + kb + 16 * tig;
    const uint8_t *wb = w + (r0 + (gid + 8 < nrow ? gid + 8 : 0)) * cols + kb + 16 * tig;
    const int32_t ba = gid < nrow ? 16 : 0, bb = gid + 8 < nrow ? 16 : 0;
    const uint32_t ring = kn_smem_addr(gb_sm) + (uint32_t)(warp * WB) + 16u * (uint32_t)lane;
    auto issue = [&](int i) { /* the warp's i-th block into slot i % D; always one commit group */
                              if (i < mine) {
                                  const int64_t c = (int64_t)G8_BLOCK * (warp + GS_WARPS * i);
                                  const uint32_t slot = ring + (uint32_t)((i % D) * 1024);
                                  kn_cp_async16(slot, wa + c, ba);
                                  kn_cp_async16(slot + 512, wb + c, bb);
                              }
                              kn_cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < D; i++) issue(i); /* weights are constants: before the chain's wait */
    kn_chain_entry();
    const int64_t scols = (cols + a.bs_cols - 1) / a.bs_cols;
    const float *sa = scale + (gid < nrow ? (r0 + gid) / a.bs_rows : 0) * scols;
    const float *sb = scale + (gid + 8 < nrow ? (r0 + gid + 8) / a.bs_rows : 0) * scols;
    const float *xrow = x + (gid < n ? gid : 0) * a.ldx + kb + 16 * tig;
    __half2 *xh = reinterpret_cast<__half2 *>(gb_sm + GS_WARPS * WB);
    __shared__ float xu[GR_XS_MAX_N], xmax[GS_WARPS];
    if (XS) { /* x's slice as scaled f16, row by row: the largest |bf16(x)|, then the values */
        for (int j = 0; j < n; j++) {
            const float *row = x + j * a.ldx + kb;
            float m = 0.0f;
            for (int64_t c = 4 * (int64_t)threadIdx.x; c < a.kspan; c += 4 * GS_WARPS * 32) {
                const float4 v = __ldg(reinterpret_cast<const float4 *>(row + c));
                m = fmaxf(m, fmaxf(fmaxf(fabsf(gv_bf16r(v.x)), fabsf(gv_bf16r(v.y))),
                                   fmaxf(fabsf(gv_bf16r(v.z)), fabsf(gv_bf16r(v.w)))));
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (lane == 0) xmax[warp] = m;
            __syncthreads();
            m = xmax[0];
#pragma unroll
            for (int v = 1; v < GS_WARPS; v++) m = fmaxf(m, xmax[v]);
            const int k = g8_exp(m);
            const float sc = g8_pow2(k);
            if (threadIdx.x == 0) xu[j] = g8_pow2(-k);
            for (int64_t c = 4 * (int64_t)threadIdx.x; c < a.kspan; c += 4 * GS_WARPS * 32) {
                const float4 v = __ldg(reinterpret_cast<const float4 *>(row + c));
                xh[(j * a.kspan + c) / 2] = __floats2half2_rn(gv_bf16r(v.x) * sc, gv_bf16r(v.y) * sc);
                xh[(j * a.kspan + c) / 2 + 1] = __floats2half2_rn(gv_bf16r(v.z) * sc, gv_bf16r(v.w) * sc);
            }
            __syncthreads(); /* xmax is read before the next row writes it; xh and xu before the loop */
        }
    }
    /* this lane's activation row gid (lanes gid < n) as f16 at column 16 tig of each block */
    const uint4 *xrh = reinterpret_cast<const uint4 *>(xh + ((gid < n ? gid : 0) * a.kspan + 16 * tig) / 2);
    float acc[1][4];
#pragma unroll
    for (int e = 0; e < 4; e++) acc[0][e] = 0.0f;
    float4 xv[4], xn[4];
#pragma unroll
    for (int v = 0; v < 4; v++)
        xn[v] = !XS && gid < n && mine > 0
                    ? __ldg(reinterpret_cast<const float4 *>(xrow + G8_BLOCK * warp) + v)
                    : make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < mine; i++) {
        const int64_t c = (int64_t)G8_BLOCK * (warp + GS_WARPS * i);
        if (!XS) {
#pragma unroll
            for (int v = 0; v < 4; v++) xv[v] = xn[v];
#pragma unroll
            for (int v = 0; v < 4; v++) /* the next block's activations, one block ahead */
                xn[v] = gid < n && i + 1 < mine
                            ? __ldg(reinterpret_cast<const float4 *>(xrow + c + G8_BLOCK * GS_WARPS) + v)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        kn_cp_async_wait<D - 1>(); /* this lane's copies of block i have landed */
        const uint32_t slot = (uint32_t)((i % D) * 1024);
        const uint8_t *own = gb_sm + warp * WB + 16 * lane + slot;
        const uint4 a0 = *reinterpret_cast<const uint4 *>(own);
        const uint4 a8 = *reinterpret_cast<const uint4 *>(own + 512);
        uint4 bx[1][2];
        float u0 = 1.0f, u1 = 1.0f;
        if (XS) {
            const uint4 z = make_uint4(0u, 0u, 0u, 0u);
            bx[0][0] = gid < n ? xrh[c / 8] : z, bx[0][1] = gid < n ? xrh[c / 8 + 1] : z;
        } else {
            const float un = gb_xfrag(xv, bx[0]);
            u0 = __shfl_sync(0xffffffffu, un, 8 * tig), u1 = __shfl_sync(0xffffffffu, un, 8 * tig + 4);
        }
        float blk[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
        g8_block<1>(blk, a0, a8, bx);
        const int64_t k = kb + c;
        const float fa = __ldg(sa + k / a.bs_cols), fb = __ldg(sb + k / a.bs_cols);
        acc[0][0] = fmaf(blk[0][0] * u0, fa, acc[0][0]), acc[0][1] = fmaf(blk[0][1] * u1, fa, acc[0][1]);
        acc[0][2] = fmaf(blk[0][2] * u0, fb, acc[0][2]), acc[0][3] = fmaf(blk[0][3] * u1, fb, acc[0][3]);
        issue(i + D); /* after this block's reads of the slot it refills */
    }
    kn_cp_async_wait<0>();
    if (XS) { /* the rows' 2^-k (C columns 2 tig and 2 tig + 1 are activation rows 2 tig, 2 tig + 1) */
        const float ua = 2 * tig < n ? xu[2 * tig] : 0.0f, ub = 2 * tig + 1 < n ? xu[2 * tig + 1] : 0.0f;
        acc[0][0] *= ua, acc[0][2] *= ua, acc[0][1] *= ub, acc[0][3] *= ub;
    }
    gs_store<1>(acc, n, rows, r0, y, ldy, ks);
}

/* the configuration: KN_CUDA_GEMV_FP8_BULK_CFG (0 .. GB_CFGS - 1; default 0) */
static int gb_cfg(void)
{
    const int c = kn_cuda_knob_int("KN_CUDA_GEMV_FP8_BULK_CFG", 0);
    return c >= 0 && c < GB_CFGS ? c : 0;
}

/* the shapes both rings take */
static int gb_shape_ok(int64_t n, int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols)
{
    return n >= 1 && n <= GB_MAX_N && cols > 0 && cols % G8_BLOCK == 0 && ldx >= cols && ldx % 4 == 0 &&
           bs_rows >= 1 && bs_cols >= G8_BLOCK && bs_cols % G8_BLOCK == 0 && cols / G8_BLOCK <= INT32_MAX;
}

/* KN_CUDA_GEMV_FP8_BULK: -1 (the default) the ring from GB_RING_MIN_N rows, 0 never, 1 bulk copies, 2 the
 * ring at every n */
#define GB_RING_MIN_N 3

extern "C" int kn_cuda_gemv_fp8_bulk_ok(int64_t n, int64_t cols, int64_t ldx, int32_t bs_rows,
                                        int32_t bs_cols)
{
    const int b = kn_cuda_knob_int("KN_CUDA_GEMV_FP8_BULK", -1);
    return gb_shape_ok(n, cols, ldx, bs_rows, bs_cols) && (b > 0 || (b < 0 && n >= GB_RING_MIN_N));
}

extern "C" int kn_cuda_gemv_fp8_ring_experts_ok(int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols)
{
    return gb_shape_ok(1, cols, ldx, bs_rows, bs_cols) && kn_cuda_knob("KN_CUDA_GEMV_FP8_EXPERTS_RING", 1);
}

typedef void (*gb_kernel)(const gb_args);

/* The k split for `ctas` CTAs without one: the CTAs of a split form a cluster and add their sums through
 * distributed shared memory (gs_store), so it costs no workspace and no launch. Doubled (up to 8) while the
 * grid is under two CTAs per SM and the 64-wide blocks divide evenly with at least 8 per slice (a 16-row
 * weight tile of 512 x 6144 alone is 32 CTAs for 132 SMs). KN_CUDA_GEMV_FP8_BULK_KS forces it (1, 2, 4, 8;
 * where the blocks divide). */
static int32_t gb_split(int64_t ctas, int64_t cols)
{
    const int64_t blocks = cols / G8_BLOCK, sms = kn_cuda_sm_count();
    const int f = kn_cuda_knob_int("KN_CUDA_GEMV_FP8_BULK_KS", 0);
    int32_t k = 1;
    if (f == 1 || f == 2 || f == 4 || f == 8)
        k = f;
    else
        while (k < 8 && ctas * k < 2 * sms && blocks % (2 * k) == 0 && blocks / (2 * k) >= 8) k *= 2;
    while (k > 1 && blocks % k) k /= 2;
    return k;
}

static int32_t gb_launch(gb_args &a, int64_t tiles, unsigned gy, unsigned gz, int experts, int ring,
                         cudaStream_t stream, const char *what, struct mm_err *err)
{
    static const gb_kernel kt[2][GB_CFGS] = {
        {k_gemv_fp8_bulk<0, 1024, 4>, k_gemv_fp8_bulk<0, 512, 6>, k_gemv_fp8_bulk<0, 2048, 2>},
        {k_gemv_fp8_bulk<1, 1024, 4>, k_gemv_fp8_bulk<1, 512, 6>, k_gemv_fp8_bulk<1, 2048, 2>}};
    const int cfg = gb_cfg();
    ring = ring || kn_cuda_knob_int("KN_CUDA_GEMV_FP8_BULK", -1) != 1;
    const int xs = ring && kn_cuda_knob("KN_CUDA_GEMV_FP8_RING_XS", 1) && a.n <= GR_XS_MAX_N &&
                   a.n * a.cols * 2 <= GR_XS_MAX_BYTES;
    const gb_kernel kern = ring ? (xs ? (experts ? k_gemv_fp8_ring<1, 1> : k_gemv_fp8_ring<0, 1>)
                                      : (experts ? k_gemv_fp8_ring<1, 0> : k_gemv_fp8_ring<0, 0>))
                                : kt[experts ? 1 : 0][cfg];
    a.ks = gb_split(tiles * gy * gz, a.cols), a.kspan = a.cols / a.ks;
    a.pf = a.pf && tiles <= 65535; /* the tiles on y */
    if (tiles * a.ks > INT32_MAX)
        return mm_err_set(err, MM_INVALID, "%s: %lld rows are too many", what, (long long)(tiles * GS_ROWS));
    const int smem = !ring ? (int)gb_smem(cfg, a.kspan)
                     : xs  ? GS_WARPS * GR_XS_DEPTH * 1024 + (int)(a.n * a.kspan * 2)
                           : GS_WARPS * GR_WARP_BYTES;
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    if (e == cudaSuccess) {
        cudaLaunchConfig_t lc;
        cudaLaunchAttribute at;
        const dim3 grid =
            a.pf ? dim3(gy * (unsigned)a.ks, (unsigned)tiles, gz) : dim3((unsigned)(tiles * a.ks), gy, gz);
        kn_cluster_cfg(&lc, &at, grid, GS_WARPS * 32, stream, (unsigned)a.ks, 1);
        lc.dynamicSmemBytes = (size_t)smem;
        e = kn_launch_cfg(&lc, kern, (const gb_args)a);
    }
    return kn_cuda_check(e, what, err);
}

int32_t kn_gemv_fp8_bulk(int32_t n_w, const uint8_t *const *w, const float *const *scale, const int64_t *rows,
                         float *const *y, const int64_t *ldy, int64_t n, int64_t cols, const float *x,
                         int64_t ldx, int32_t bs_rows, int32_t bs_cols, cudaStream_t stream,
                         struct mm_err *err)
{
    gb_args a;
    memset(&a, 0, sizeof a);
    int64_t tiles = 0;
    int ok = n_w >= 1 && n_w <= KN_GEMV_MULTI_MAX &&
             kn_cuda_gemv_fp8_bulk_ok(n, cols, ldx, bs_rows, bs_cols) && x && (uintptr_t)x % 16 == 0 && w &&
             scale && rows && y && ldy;
    for (int32_t i = 0; ok && i < n_w; i++) {
        ok = w[i] && scale[i] && y[i] && rows[i] >= 0 && ldy[i] >= rows[i] && (uintptr_t)w[i] % 16 == 0;
        if (!ok) break;
        a.w[i] = w[i], a.s[i] = scale[i], a.y[i] = y[i], a.rows[i] = rows[i], a.ldy[i] = ldy[i];
        if (kn_cdiv(rows[i], GS_ROWS) > tiles) tiles = kn_cdiv(rows[i], GS_ROWS);
    }
    if (!ok)
        return mm_err_set(err, MM_INVALID, "kn_gemv_fp8_bulk: bad arguments (%d weights, n %lld cols %lld)",
                          (int)n_w, (long long)n, (long long)cols);
    if (tiles == 0) return MM_OK;
    a.x = x, a.ldx = ldx, a.cols = cols, a.n = (int32_t)n, a.bs_rows = bs_rows, a.bs_cols = bs_cols,
    a.xdiv = 1;
    return gb_launch(a, tiles, (unsigned)n_w, 1, 0, 0, stream, "kn_gemv_fp8_bulk", err);
}

int32_t kn_gemv_fp8_bulk_experts(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols, const float *x,
                                 int64_t ldx, const int32_t *expert, const uint8_t *const *w_a,
                                 const float *const *s_a, const uint8_t *const *w_b, const float *const *s_b,
                                 int32_t bs_rows, int32_t bs_cols, float *y_a, float *y_b, int64_t ldy,
                                 int ring, int pf, cudaStream_t stream, struct mm_err *err)
{
    if (pairs < 0 || pairs > 65535 || xdiv < 1 || rows < 0 || ldy < rows ||
        !gb_shape_ok(1, cols, ldx, bs_rows, bs_cols) || (uintptr_t)x % 16 ||
        (pairs > 0 && (!x || !expert || !w_a || !s_a || !y_a || (w_b && (!s_b || !y_b)))))
        return mm_err_set(err, MM_INVALID,
                          "kn_gemv_fp8_bulk_experts: bad arguments (pairs %lld rows %lld cols %lld)",
                          (long long)pairs, (long long)rows, (long long)cols);
    if (pairs == 0 || rows == 0) return MM_OK;
    gb_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.ldx = ldx, a.cols = cols, a.n = 1, a.bs_rows = bs_rows, a.bs_cols = bs_cols, a.xdiv = xdiv;
    a.rows[0] = rows, a.ldy[0] = ldy;
    a.expert = expert, a.w_a = w_a, a.s_a = s_a, a.w_b = w_b, a.s_b = s_b, a.y_a = y_a, a.y_b = y_b;
    a.pf = pf;
    return gb_launch(a, kn_cdiv(rows, GS_ROWS), (unsigned)pairs, w_b ? 2u : 1u, 1, ring, stream,
                     "kn_gemv_fp8_bulk_experts", err);
}
