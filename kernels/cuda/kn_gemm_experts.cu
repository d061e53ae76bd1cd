/* MoE expert products of a prefill, grouped by expert on the device with wgmma (kn_cuda_gemm_experts_bf16).
 *
 * Why: the host-grouped route read the expert offsets back (a sync per MoE layer) and launched 3 cuBLAS
 * products and a SwiGLU per expert that has rows: with tens to hundreds of experts that is hundreds of
 * launches per layer, more host time than GPU time for prompts of a few thousand tokens. Here one persistent
 * launch covers every expert: its CTAs work through the tiles (expert, 128 routed rows, 256 weight rows, or
 * 256 x 128) of all experts, which they find from the device offsets and a per-CTA prefix of tile counts in
 * shared memory.
 *
 * Tile order: with a tile counter (the default where the caller gives one) the producer takes each next tile
 * from it (atomicAdd) and hands its index to the consumers in the tile's first stage, so the tiles that share
 * an operand (neighbouring indices) start within a microsecond of each other and stay in step. The static
 * order (blockIdx.x, + gridDim.x, ...) let CTAs drift apart over the ~50 waves of a large prefill until the
 * second reader of a weight tile found it gone from L2: M3's experts at 8192 tokens read 16.9 GB from DRAM
 * for 10.1 GB of operands, the dynamic order 10.3 GB (ncu, v58; bench/cuda/README.md "Sixteenth session").
 *
 * CTA: warps 0-7 are two consumer warpgroups (two m64n128k16 accumulators each: 64 routed rows x 256 weight
 * rows, or two 64-row quarters x 128), warps 8-11 the producer warpgroup (64-column k-slices of both operands
 * into a ring of 4 stages of 48 KB, sw128 tiles, completion on the stage's "full" mbarrier). Both operands
 * are K-major (x rows [n][cols], weights [rows][cols] as nn.Linear stores them), so no transpose anywhere.
 * The consumers keep one k-slice's products in flight (wait_group 1) and release the slice before it; the
 * producer runs ahead into the next tile while the consumers store the f32 sums.
 *
 * Two producers: with the weights' tensor maps (kn_cuda_experts_maps_create, made once per weight table) one
 * thread loads each k-slice with 2-6 TMA copies (cp.async.bulk.tensor, the 128-byte swizzle done by the copy
 * engine, out-of-range rows zero-filled, completion by transaction bytes); without them (or
 * KN_CUDA_EXPERTS_TMA=0) 128 threads issue 16-byte cp.async copies, which measured 1.4-2.2x slower (H200,
 * bench/cuda/README.md "Fourteenth session"): the sums are the same bits either way.
 *
 * FP8 experts (kn_cuda_gemm_experts_e4m3, template F8): the checkpoint's e4m3 weights as stored, with their
 * 128 x 128 block scales, against routed rows quantized to e4m3 per 128 values (kn_cuda_x_e4m3_groups), on
 * the e4m3 tensor cores (m64n128k32, twice bf16's rate). A k-slice is then 128 columns (the same 128 bytes a
 * row, so stages, swizzle, boxes and descriptors are the bf16 ones) and exactly one scale block of both
 * operands: each accumulator half takes the slice's products into a scratch accumulator and adds them scaled
 * by its rows' activation scales times the weight block's scale (the scale is per slice, so it cannot ride in
 * the tensor cores' sums; and Hopper's FP8 sums keep fewer bits than f32, so adding each 128-deep slice in
 * f32 also keeps the error to one slice's). The scales ride in the stage beside its tiles (the producer
 * warp copies them into shared memory), so the promotion never waits on a global load. TMA producer only;
 * the consumers take 232 registers (three accumulators), the producer warpgroup 40. */
#include "kn_cuda_internal.cuh"
#include "kn_tma.cuh"
#include "kn_wgmma.cuh"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Tile shapes (template W): 0 = 128 routed rows x 256 weight rows (a warpgroup's 64 rows against two 128-row
 * halves of the weight tile), 1 = 256 x 128 (a warpgroup's two 64-row quarters, wg and wg + 2, against the
 * weight tile): the weight tile then serves twice the rows, so an expert of up to 256 rows reads its weights
 * once (kn_cuda_gemm_experts_plan picks). Both: two m64n128 accumulators per thread, 48 KB a k-slice. */
#define GE_BM(W) ((W) ? 256 : 128)
#define GE_BN(W) ((W) ? 128 : 256)
#define GE_BK 64                             /* bf16 columns per k-slice: one 128-byte swizzle row */
#define GE_KC(F8) ((F8) ? 2 * GE_BK : GE_BK) /* columns per k-slice (e4m3: 128, one scale block) */
#define GE_BOX 128                           /* rows of a weight's TMA box: its tile is 1-2 boxes */
#define GE_XBOX 64 /* rows of a routed-rows box: a tile loads only the boxes that hold the expert's rows */
#define GE_STAGES 4
#define GE_A_BYTES(W) (GE_BM(W) * GE_BK * 2)
#define GE_STAGE_BYTES ((GE_BM(0) + GE_BN(0)) * GE_BK * 2)
#define GE_EMAX 512 /* experts whose tile prefix fits in shared memory */
#define GE_THREADS 384
#define GE_PRODUCER 8 /* first producer warp */
/* header: full and empty mbarriers of each stage, the tile prefix (GE_EMAX + 1 words), then each stage's
 * tile (the dynamic order: the producer writes a tile's index into its first k-slice's stage, -1 at the end)
 */
#define GE_BAR_FULL 0
#define GE_BAR_EMPTY (8 * GE_STAGES)
#define GE_PREFIX (16 * GE_STAGES)
#define GE_TWORD (GE_PREFIX + 4 * (GE_EMAX + 1))
/* F8: then each stage's scales, copied by the producer warp beside the stage's tiles: the routed rows' (one
 * per tile row, GE_BM(1) at most) and the weight tile's one or two block scales after them */
#define GE_SC_BYTES ((GE_BM(1) + 4) * 4)
#define GE_SCALES ((GE_TWORD + 4 * GE_STAGES + 15) & ~15)
#define GE_HEAD_BYTES(F8) ((F8) ? GE_SCALES + GE_STAGES * GE_SC_BYTES : GE_TWORD + 4 * GE_STAGES)
#define GE_SMEM(F8) (((GE_HEAD_BYTES(F8) + 1023) & ~1023) + GE_STAGES * GE_STAGE_BYTES + 1024)

struct ge_args {
    CUtensorMap xm;               /* the routed rows (TMA producer) */
    const CUtensorMap *wm0, *wm1; /* the weights' maps, [n_exp] each (TMA producer) */
    const int32_t *off;
    const uint16_t *x;
    const void *const *w0, *const *w1;
    float *y0, *y1;
    int64_t ldx, ldy, rows, cols;
    int32_t n_exp, n_w, nt; /* weight tables (1 or 2), weight tiles of one weight */
    int32_t l2;             /* KN_CUDA_EXPERTS_L2: 1 = routed rows kept in L2 (evict-last), weights streamed
                               (evict-first); 2 = the rows kept only; 0 = no hints */
    int32_t skip;           /* a tile's 64-row quarters the expert lacks are neither loaded (TMA) nor
                               multiplied (kn_cuda_gemm_experts_plan) */
    int32_t *ctr;           /* the dynamic tile order (TMA producer): the next tile to hand out, zeroed
                               before the launch; NULL = the static order (blockIdx.x + i gridDim.x) */
    /* F8: the routed rows' scales [cols / 128][ldxs], each expert's weight block scales [ceil(rows / 128)]
     * [cols / 128], and the routed row count (rows past the expert's read a neighbour's scale, clamped) */
    const float *xs;
    const float *const *ws0, *const *ws1;
    int64_t ldxs, n;
};

/* Tile t of the CTA's walk -> expert e, its first routed row p0 and row count, the weight table, the first
 * routed row of the tile and its first weight row. Tiles of an expert: table-major, then weight tiles, then
 * row tiles (neighbouring tiles share a weight tile, and the dynamic order runs them together). */
struct ge_tile {
    int32_t e, p0, cnt, wsel, m0, n0;
};

/* Tiles of expert e: its row tiles x the weight tiles of each table */
template <int W> __device__ __forceinline__ int32_t ge_expert_tiles(const ge_args &a, int32_t e)
{
    const int32_t cnt = __ldg(a.off + e + 1) - __ldg(a.off + e);
    return (cnt + GE_BM(W) - 1) / GE_BM(W) * a.nt * a.n_w;
}

template <int W>
__device__ __forceinline__ ge_tile ge_locate(const ge_args &a, const int32_t *prefix, int32_t t)
{
    int32_t lo = 0, hi = a.n_exp; /* the last e with prefix[e] <= t (prefix[n_exp] > t) */
    while (hi - lo > 1) {
        const int32_t mid = (lo + hi) >> 1;
        if (prefix[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    ge_tile r;
    r.e = lo;
    r.p0 = __ldg(a.off + lo);
    r.cnt = __ldg(a.off + lo + 1) - r.p0;
    const int32_t mt = (r.cnt + GE_BM(W) - 1) / GE_BM(W), local = t - prefix[lo];
    r.wsel = local / (mt * a.nt);
    const int32_t rem = local - r.wsel * mt * a.nt;
    r.n0 = (rem / mt) * GE_BN(W);
    r.m0 = (rem % mt) * GE_BM(W);
    return r;
}

/* The 64-row quarters of tile tl's routed rows that hold rows of its expert (all of them when a.skip is 0):
 * the boxes the TMA producer loads and the accumulators the consumers use */
template <int W> __device__ __forceinline__ int ge_quarters(const ge_args &a, const ge_tile &tl)
{
    const int32_t q = (tl.cnt - tl.m0 + GE_XBOX - 1) / GE_XBOX;
    return !a.skip || q > GE_BM(W) / GE_XBOX ? GE_BM(W) / GE_XBOX : (int)q;
}

/* mb_wait with a warp-uniform loop (a vote), and lane 0's arrival as a predicated instruction: code between a
 * wgmma's issue and its wait must not branch divergently, or ptxas serializes every wgmma (C7518) */
__device__ __forceinline__ void ge_wait_uniform(uint32_t bar, uint32_t parity)
{
    uint32_t done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!__all_sync(0xffffffffu, done));
}

__device__ __forceinline__ void ge_arrive_lane0(uint32_t bar, int lane)
{
    asm volatile("{\n.reg .pred p;\n.reg .b64 st;\nsetp.eq.u32 p, %1, 0;\n"
                 "@p mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar),
                 "r"(lane)
                 : "memory");
}

/* Registers: the launch gives every thread 168 (65536 / 384, in steps of 8); the producer warpgroup drops to
 * 128 and the consumers rise to 184. A rise waits until the CTA has the registers free, so what the producers
 * give must cover it (at 128 / 192 the consumers waited forever); under 128 the cp.async producer spills. */
static_assert((168 - 128) * 128 >= (184 - 168) * 256,
              "setmaxnreg: the consumers' rise exceeds the producers' drop");
/* F8: three accumulators (192 registers) per consumer thread; the producer is one warp (TMA copies and the
 * scales' cp.async copies) */
static_assert((168 - 40) * 128 >= (232 - 168) * 256, "setmaxnreg (F8): the rise exceeds the drop");

template <int F8> __device__ __forceinline__ void ge_setmaxnreg_inc(void)
{
    if (F8)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    else
        asm volatile("setmaxnreg.inc.sync.aligned.u32 184;\n");
}

template <int F8> __device__ __forceinline__ void ge_setmaxnreg_dec(void)
{
    if (F8)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    else
        asm volatile("setmaxnreg.dec.sync.aligned.u32 128;\n");
}

/* Producer thread j (0..127): 16-byte chunk j & 7 of rows j / 8 + 16 i of both tiles of each k-slice. Rows
 * past the expert's count or the weight's rows are zero-filled (their sums are never stored). */
template <int W>
__device__ __forceinline__ void ge_produce(const ge_args &a, const int32_t *prefix, int32_t total,
                                           uint32_t s0, uint32_t st0, int j)
{
    const int c = j & 7, r0 = j >> 3;
    const int32_t ks = (int32_t)(a.cols / GE_BK);
    uint32_t it = 0;
    for (int32_t t = (int32_t)blockIdx.x; t < total; t += (int32_t)gridDim.x) {
        const ge_tile tl = ge_locate<W>(a, prefix, t);
        const uint16_t *w = (const uint16_t *)(tl.wsel ? a.w1 : a.w0)[tl.e];
        for (int32_t k = 0; k < ks; k++, it++) {
            const uint32_t s = it % GE_STAGES, st = st0 + s * GE_STAGE_BYTES;
            if (it >= GE_STAGES) mb_wait(s0 + GE_BAR_EMPTY + 8 * s, ((it / GE_STAGES) & 1u) ^ 1u);
            const int64_t kc = (int64_t)k * GE_BK + 8 * c;
#pragma unroll
            for (int i = 0; i < GE_BM(W) / 16; i++) {
                const int r = r0 + 16 * i;
                const bool ok = tl.m0 + r < tl.cnt;
                const uint16_t *src = ok ? a.x + (int64_t)(tl.p0 + tl.m0 + r) * a.ldx + kc : a.x;
                kn_cp_async16(st + wg_sw128_off(r, c, GE_BM(W)), src, ok ? 16 : 0);
            }
#pragma unroll
            for (int i = 0; i < GE_BN(W) / 16; i++) {
                const int r = r0 + 16 * i;
                const bool ok = tl.n0 + r < a.rows;
                const uint16_t *src = ok ? w + (int64_t)(tl.n0 + r) * a.cols + kc : w;
                kn_cp_async16(st + GE_A_BYTES(W) + wg_sw128_off(r, c, GE_BN(W)), src, ok ? 16 : 0);
            }
            mb_arrive_cp_async(s0 + GE_BAR_FULL + 8 * s);
        }
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* TMA producer: each k-slice's routed rows in 64-row boxes (the quarters it loads) and its weight tile in
 * 128-row boxes, by bulk tensor copies; the stage's "full" barrier expects their bytes (whole boxes,
 * zero-filled rows included). One thread issues them (bf16).
 * F8: the whole producer warp runs the loop; lane 0 hands out the tiles and issues the TMA copies, and every
 * lane copies its rows' scales of the slice (cp.async, 4 bytes each, rows past the routed ones clamped to the
 * last) into the stage's scale area, lanes 0-1 the weight block scales, then arrives on the "full" barrier
 * once its copies have landed (its count is 1 + 32). The consumers then read the scales from shared memory
 * at the slice's start: loaded from global memory by each consumer thread at its promotion, they were the
 * top stall (ncu v96: 17 % of the warps' samples on their first use, the slice's products long done). */
template <int W, int F8>
__device__ __forceinline__ void ge_produce_tma(const ge_args &a, const int32_t *prefix, int32_t total,
                                               uint32_t s0, uint32_t st0, volatile int32_t *tword, int lane)
{
    const int32_t ks = (int32_t)(a.cols / GE_KC(F8));
    const uint64_t xm = (uint64_t)&a.xm;
    uint64_t keep, stream;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(keep));
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(stream));
    uint32_t it = 0;
    const bool dyn = a.ctr != nullptr, lead = lane == 0;
    int32_t t = dyn ? (lead ? atomicAdd(a.ctr, 1) : 0) : (int32_t)blockIdx.x;
    if (F8) t = __shfl_sync(0xffffffffu, t, 0);
    while (t < total) {
        const ge_tile tl = ge_locate<W>(a, prefix, t);
        const uint64_t wm = (uint64_t)((tl.wsel ? a.wm1 : a.wm0) + tl.e);
        const int nx = ge_quarters<W>(a, tl); /* routed-row boxes to load */
        const float *ws = nullptr;
        int32_t kb = 0, nb = 0;
        if (F8) { /* lane 0: the first 128 weight rows' block scales, lane 1: the next 128's (W = 0) */
            kb = (int32_t)(a.cols / 128);
            nb = tl.n0 / 128 + (!W && lane == 1);
            nb = min(nb, (int32_t)((a.rows + 127) / 128) - 1);
            ws = (tl.wsel ? a.ws1 : a.ws0)[tl.e] + (int64_t)nb * kb;
        }
        for (int32_t k = 0; k < ks; k++, it++) {
            const uint32_t s = it % GE_STAGES, st = st0 + s * GE_STAGE_BYTES, full = s0 + GE_BAR_FULL + 8 * s;
            if (it >= GE_STAGES) mb_wait(s0 + GE_BAR_EMPTY + 8 * s, ((it / GE_STAGES) & 1u) ^ 1u);
            if (lead) {
                if (k == 0)
                    tword[s] = t; /* published by the arrive's release, read after the consumers' wait */
                kn_mb_arrive_expect_tx(full, (uint32_t)(nx * GE_XBOX + GE_BN(W)) * 128u);
                for (int i = 0; i < nx; i++)
                    kn_tma_box(st + i * GE_XBOX * 128, xm, k * GE_KC(F8), tl.p0 + tl.m0 + i * GE_XBOX, full,
                               a.l2 != 0, keep);
#pragma unroll
                for (int i = 0; i < GE_BN(W) / GE_BOX; i++)
                    kn_tma_box(st + GE_A_BYTES(W) + i * GE_BOX * 128, wm, k * GE_KC(F8), tl.n0 + i * GE_BOX,
                               full, a.l2 == 1, stream);
            }
            if (F8) {
                const uint32_t sc = s0 + GE_SCALES + s * GE_SC_BYTES;
                const float *xk = a.xs + (int64_t)k * a.ldxs;
                const int32_t last = (int32_t)a.n - 1, r0 = tl.p0 + tl.m0;
#pragma unroll
                for (int i = 0; i < GE_BM(W) / 32; i++)
                    kn_cp_async4(sc + 4u * (uint32_t)(lane + 32 * i), xk + min(r0 + lane + 32 * i, last));
                if (lane < 2) kn_cp_async4(sc + 4u * (uint32_t)(GE_BM(1) + lane), ws + k);
                mb_arrive_cp_async(full);
            }
        }
        t = dyn ? (lead ? atomicAdd(a.ctr, 1) : 0) : t + (int32_t)gridDim.x;
        if (F8) t = __shfl_sync(0xffffffffu, t, 0);
    }
    if (dyn) { /* no tiles left: -1 in the next stage, whose phase these arrivals complete */
        const uint32_t s = it % GE_STAGES;
        if (it >= GE_STAGES) mb_wait(s0 + GE_BAR_EMPTY + 8 * s, ((it / GE_STAGES) & 1u) ^ 1u);
        if (lead) {
            tword[s] = -1;
            mb_arrive(s0 + GE_BAR_FULL + 8 * s);
        }
        if (F8) mb_arrive_cp_async(s0 + GE_BAR_FULL + 8 * s);
    }
}

/* W = 0: d0 / d1 = the warpgroup's 64 rows (quarter wg) x weight rows 0-127 / 128-255; W = 1: quarters wg
 * / wg + 2 of the tile's 256 rows x its 128 weight rows (so that a tile of up to 128 rows keeps both
 * warpgroups busy on one accumulator each). TWO = 0: d0 only (W = 1, the expert has no rows in the
 * warpgroup's second quarter). */
template <int W, int TWO>
__device__ __forceinline__ void ge_issue(float (&d0)[64], float (&d1)[64], uint32_t st, int wg, int acc)
{
    const uint32_t bt = st + GE_A_BYTES(W);
    const uint32_t a0 = st + (uint32_t)wg * 64u * 128u, a1 = W ? a0 + 128u * 128u : a0;
    const uint32_t b1 = W ? bt : bt + 128u * 128u;
#pragma unroll
    for (int kk = 0; kk < GE_BK / 16; kk++) {
        const uint32_t ko = 32u * (uint32_t)kk;
        wg_mma_ss(d0, wg_desc(a0 + ko, 16, 1024), wg_desc(bt + ko, 16, 1024), acc || kk);
        if (TWO) wg_mma_ss(d1, wg_desc(a1 + ko, 16, 1024), wg_desc(b1 + ko, 16, 1024), acc || kk);
    }
}

/* Row gid (+8) of warp wl's 16 and columns 8 nt + 2 tig of one 128-column half: float2 stores of the rows
 * the expert has and the columns the weight has (rows is a multiple of 8). */
__device__ __forceinline__ void ge_store(const float (&d)[64], float *y, int64_t ldy, int32_t nrow,
                                         int64_t ncol, int32_t r, int64_t c0)
{
#pragma unroll
    for (int nt = 0; nt < 16; nt++) {
        const int64_t c = c0 + 8 * nt;
        if (c >= ncol) break;
        if (r < nrow) *(float2 *)(y + (int64_t)r * ldy + c) = make_float2(d[4 * nt], d[4 * nt + 1]);
        if (r + 8 < nrow)
            *(float2 *)(y + (int64_t)(r + 8) * ldy + c) = make_float2(d[4 * nt + 2], d[4 * nt + 3]);
    }
}

/* One tile's k-slices for a live warpgroup: one slice's products kept in flight, the slice before it
 * released; the loop is compiled once per accumulator count so that no branch sits between a wgmma and its
 * wait */
template <int W, int TWO>
__device__ __forceinline__ void ge_mainloop(float (&d0)[64], float (&d1)[64], uint32_t s0, uint32_t st0,
                                            int32_t ks, uint32_t &it, int wg, int lane)
{
    for (int32_t k = 0; k < ks; k++, it++) {
        const uint32_t s = it % GE_STAGES;
        ge_wait_uniform(s0 + GE_BAR_FULL + 8 * s, (it / GE_STAGES) & 1u);
        /* the producer's copies before the tensor cores read them; no register touch of d0 / d1 while a
         * slice is in flight (ptxas would insert a wait), only after the tile's last wait */
        wg_fence_proxy_async();
        wg_fence();
        ge_issue<W, TWO>(d0, d1, st0 + s * GE_STAGE_BYTES, wg, k > 0);
        wg_commit();
        if (k > 0) { /* the previous slice's products are done: its stage goes back */
            wg_wait<1>();
            ge_arrive_lane0(s0 + GE_BAR_EMPTY + 8 * ((it - 1) % GE_STAGES), lane);
        }
    }
    wg_wait<0>();
    wg_touch(d0);
    if (TWO) wg_touch(d1);
    ge_arrive_lane0(s0 + GE_BAR_EMPTY + 8 * ((it - 1) % GE_STAGES), lane);
}

/* d += t * (the scale of row gid, of row gid + 8): one slice's products promoted into a tile's f32 sums */
__device__ __forceinline__ void ge_promote(float (&d)[64], const float (&t)[64], float fa, float fb)
{
#pragma unroll
    for (int nt = 0; nt < 16; nt++) {
        d[4 * nt] = fmaf(t[4 * nt], fa, d[4 * nt]), d[4 * nt + 1] = fmaf(t[4 * nt + 1], fa, d[4 * nt + 1]);
        d[4 * nt + 2] = fmaf(t[4 * nt + 2], fb, d[4 * nt + 2]);
        d[4 * nt + 3] = fmaf(t[4 * nt + 3], fb, d[4 * nt + 3]);
    }
}

__device__ __forceinline__ float ge_lds(uint32_t addr)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

/* F8: one tile's 128-column k-slices. Per slice and accumulator half: the 4 e4m3 k-steps into t, wait, add t
 * times the row and weight block scales (read from the stage's scale area while the products run) into d0 /
 * d1; the stage goes back once the slice's last product is done. The two consumer warpgroups overlap each
 * other's waits. */
template <int W, int TWO>
__device__ __forceinline__ void ge_mainloop_f8(float (&d0)[64], float (&d1)[64], float (&t)[64], uint32_t s0,
                                               uint32_t st0, int32_t ks, uint32_t &it, int wg, int wl,
                                               int lane)
{
    /* this thread's rows in the tile: gid and gid + 8 of the warpgroup's quarter, and (W = 1) of quarter
     * wg + 2 */
    const uint32_t li = 4u * (uint32_t)(64 * wg + 16 * wl + (lane >> 2));
#pragma unroll
    for (int i = 0; i < 64; i++) d0[i] = 0.0f, d1[i] = 0.0f;
    for (int32_t k = 0; k < ks; k++, it++) {
        const uint32_t s = it % GE_STAGES, st = st0 + s * GE_STAGE_BYTES, bt = st + GE_A_BYTES(W);
        const uint32_t a0 = st + (uint32_t)wg * 64u * 128u, a1 = W ? a0 + 128u * 128u : a0;
        const uint32_t b1 = W ? bt : bt + 128u * 128u, sc = s0 + GE_SCALES + s * GE_SC_BYTES;
        ge_wait_uniform(s0 + GE_BAR_FULL + 8 * s, (it / GE_STAGES) & 1u);
        wg_fence_proxy_async();
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma_ss_e4m3(t, wg_desc(a0 + 32u * kk, 16, 1024), wg_desc(bt + 32u * kk, 16, 1024), kk);
        wg_commit();
        /* W = 0: d1 is the same rows against the second 128 weight rows (their block scale); W = 1: rows
         * 128 further against the same weight rows */
        const float sw0 = ge_lds(sc + 4u * GE_BM(1)), sw1 = W ? sw0 : ge_lds(sc + 4u * (GE_BM(1) + 1));
        const float xa = ge_lds(sc + li), xb = ge_lds(sc + li + 32u);
        const float xc = W && TWO ? ge_lds(sc + li + 512u) : xa, xd = W && TWO ? ge_lds(sc + li + 544u) : xb;
        const float fa = xa * sw0, fb = xb * sw0, fc = xc * sw1, fd = xd * sw1;
        wg_wait<0>();
        wg_touch(t);
        if (!TWO) { /* the slice's scales are in registers and its only product done: the stage goes back */
            __syncwarp();
            ge_arrive_lane0(s0 + GE_BAR_EMPTY + 8 * s, lane);
        }
        ge_promote(d0, t, fa, fb);
        if (TWO) {
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++)
                wg_mma_ss_e4m3(t, wg_desc(a1 + 32u * kk, 16, 1024), wg_desc(b1 + 32u * kk, 16, 1024), kk);
            wg_commit();
            wg_wait<0>();
            wg_touch(t);
            __syncwarp();
            ge_arrive_lane0(s0 + GE_BAR_EMPTY + 8 * s, lane);
            ge_promote(d1, t, fc, fd);
        }
    }
}

template <int W, int F8>
__device__ __forceinline__ void ge_consume(const ge_args &a, const int32_t *prefix, int32_t total,
                                           uint32_t s0, uint32_t st0, const volatile int32_t *tword, int warp,
                                           int lane)
{
    const int wg = warp >> 2, wl = warp & 3, gid = lane >> 2, tig = lane & 3;
    const int32_t ks = (int32_t)(a.cols / GE_KC(F8));
    const bool dyn = a.ctr != nullptr;
    float d0[64], d1[64], t8[F8 ? 64 : 1];
    uint32_t it = 0;
    for (int32_t t = (int32_t)blockIdx.x;; t += (int32_t)gridDim.x) {
        if (dyn) { /* the tile is in its first k-slice's stage (the wait again in the main loop returns at
                      once) */
            const uint32_t s = it % GE_STAGES;
            ge_wait_uniform(s0 + GE_BAR_FULL + 8 * s, (it / GE_STAGES) & 1u);
            t = tword[s];
        }
        if (t < 0 || t >= total) break;
        const ge_tile tl = ge_locate<W>(a, prefix, t);
        /* a warpgroup none of whose quarters the expert has only hands the stages back; W = 1: one whose
         * second quarter it lacks uses d0 only (votes: branches around a wgmma must be warp-uniform) */
        const int nq = ge_quarters<W>(a, tl);
        const bool live = __any_sync(0xffffffffu, nq > wg), two = !W || __any_sync(0xffffffffu, nq > 2 + wg);
        if (!live) {
            for (int32_t k = 0; k < ks; k++, it++) {
                const uint32_t s = it % GE_STAGES;
                ge_wait_uniform(s0 + GE_BAR_FULL + 8 * s, (it / GE_STAGES) & 1u);
                ge_arrive_lane0(s0 + GE_BAR_EMPTY + 8 * s, lane);
            }
            continue;
        }
        if constexpr (F8) {
            if (two)
                ge_mainloop_f8<W, 1>(d0, d1, t8, s0, st0, ks, it, wg, wl, lane);
            else
                ge_mainloop_f8<W, 0>(d0, d1, t8, s0, st0, ks, it, wg, wl, lane);
        } else if (two)
            ge_mainloop<W, 1>(d0, d1, s0, st0, ks, it, wg, lane);
        else
            ge_mainloop<W, 0>(d0, d1, s0, st0, ks, it, wg, lane);
        const int32_t r = tl.m0 + 64 * wg + 16 * wl + gid; /* within the expert's rows */
        float *y = (tl.wsel ? a.y1 : a.y0) + (int64_t)tl.p0 * a.ldy;
        ge_store(d0, y, a.ldy, tl.cnt, a.rows, r, tl.n0 + 2 * tig);
        if (two) ge_store(d1, y, a.ldy, tl.cnt, a.rows, W ? r + 128 : r, tl.n0 + (W ? 0 : 128) + 2 * tig);
    }
}

template <int TMA, int W, int F8>
__global__ void __launch_bounds__(GE_THREADS, 1) k_gemm_experts(const __grid_constant__ ge_args a)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t s0 = kn_smem_addr(smem), st0 = (s0 + GE_HEAD_BYTES(F8) + 1023u) & ~1023u;
    int32_t *prefix = (int32_t *)(smem + GE_PREFIX);
    kn_chain_entry();
    if (tid == 0) {
        for (int s = 0; s < GE_STAGES; s++) {
            /* the TMA thread's expect_tx (F8: and the producer warp's 32 scale copies), or every producer
             * thread through cp.async */
            mb_init(s0 + GE_BAR_FULL + 8 * s, TMA ? 1 + 32 * F8 : 128);
            mb_init(s0 + GE_BAR_EMPTY + 8 * s, 8); /* one arrival per consumer warp */
        }
        mb_init_fence(); /* the TMA copies complete on them */
    }
    /* prefix[e] = tiles of the experts before e (warp 0: each lane sums a run of experts, then a scan) */
    if (warp == 0) {
        const int32_t per = (a.n_exp + 31) / 32, e0 = lane * per;
        int32_t e1 = e0 + per, sum = 0;
        if (e1 > a.n_exp) e1 = a.n_exp;
        for (int32_t e = e0; e < e1; e++) sum += ge_expert_tiles<W>(a, e);
        int32_t inc = sum;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int32_t v = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= o) inc += v;
        }
        int32_t run = inc - sum;
        for (int32_t e = e0; e < e1; e++) {
            prefix[e] = run;
            run += ge_expert_tiles<W>(a, e);
        }
        if (lane == 31) prefix[a.n_exp] = inc;
    }
    __syncthreads();
    const int32_t total = prefix[a.n_exp];
    volatile int32_t *tword = (volatile int32_t *)(smem + GE_TWORD);
    if (warp >= GE_PRODUCER) {
        ge_setmaxnreg_dec<F8>();
        if constexpr (!TMA)
            ge_produce<W>(a, prefix, total, s0, st0, tid - 32 * GE_PRODUCER);
        else if (F8 ? warp == GE_PRODUCER : tid == 32 * GE_PRODUCER)
            ge_produce_tma<W, F8>(a, prefix, total, s0, st0, tword, lane);
    } else {
        ge_setmaxnreg_inc<F8>();
        ge_consume<W, F8>(a, prefix, total, s0, st0, tword, warp, lane);
    }
}

/* A 2-D map of [rows][cols] (row stride ld) in boxes of one k-slice's columns x box_rows rows */
static int ge_encode(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int64_t ld, uint32_t box_rows,
                     int f8)
{
    return kn_tma_encode_2d(m, p, rows, cols, ld, (uint32_t)GE_KC(f8), box_rows, f8);
}

static int32_t ge_maps_create(const void *const *w, int32_t n, int64_t rows, int64_t cols, int f8,
                              void **maps, const char *what, struct mm_err *err)
{
    if (!maps || n <= 0 || !w || rows <= 0 || cols <= 0 || cols % GE_KC(f8) || rows > INT32_MAX ||
        cols > INT32_MAX)
        return mm_err_set(err, MM_INVALID, "%s: bad arguments", what);
    *maps = NULL;
    static_assert(sizeof(CUtensorMap) == KN_CUDA_TMAP_BYTES, "tensor map size");
    CUtensorMap *h =
        (CUtensorMap *)aligned_alloc(64, sizeof(CUtensorMap) * (size_t)n); /* the encoder's alignment */
    if (!h) return mm_err_set(err, MM_NOMEM, "%s: out of memory", what);
    for (int32_t i = 0; i < n; i++)
        if (!ge_encode(&h[i], w[i], rows, cols, cols, GE_BOX, f8)) {
            free(h);
            return mm_err_set(err, MM_UNSUPPORTED, "%s: no tensor map for weight %d", what, (int)i);
        }
    void *d = NULL;
    int32_t rc = kn_cuda_check(cudaMalloc(&d, sizeof(CUtensorMap) * (size_t)n), what, err);
    if (!rc)
        rc = kn_cuda_check(cudaMemcpy(d, h, sizeof(CUtensorMap) * (size_t)n, cudaMemcpyHostToDevice), what,
                           err);
    free(h);
    if (rc) {
        cudaFree(d);
        return rc;
    }
    *maps = d;
    return MM_OK;
}

extern "C" int32_t kn_cuda_experts_maps_create(const void *const *w, int32_t n, int64_t rows, int64_t cols,
                                               void **maps, struct mm_err *err)
{
    return ge_maps_create(w, n, rows, cols, 0, maps, "kn_cuda_experts_maps_create", err);
}

extern "C" int32_t kn_cuda_experts_maps_create_e4m3(const uint8_t *const *w, int32_t n, int64_t rows,
                                                    int64_t cols, void **maps, struct mm_err *err)
{
    return ge_maps_create((const void *const *)w, n, rows, cols, 1, maps, "kn_cuda_experts_maps_create_e4m3",
                          err);
}

extern "C" void kn_cuda_experts_maps_free(void *maps)
{
    if (maps) cudaFree(maps);
}

extern "C" int kn_cuda_gemm_experts_ok(int32_t n_exp, int64_t rows, int64_t cols, int64_t ldx)
{
    return n_exp >= 0 && n_exp <= GE_EMAX && rows > 0 && rows % 8 == 0 && rows <= INT32_MAX && cols > 0 &&
           cols % GE_BK == 0 && ldx >= cols && ldx % 8 == 0;
}

extern "C" int kn_cuda_gemm_experts_plan(int32_t n_exp, int64_t n, int64_t rows, int64_t cols, int dynamic)
{
    /* The tile shape, both orders (same-run medians of kn_bench --only experts, H200, TFLOP/s): experts
     * averaging 128-255 rows with weights of 32 MB or more take tiles of 256 routed rows x 128 weight rows,
     * so that most experts read their weights in one tile where 128-row tiles would take two, the second
     * nearly empty (32 experts of 6144 x 9216 at 128 rows: static order 388-399 against 294-340, cuBLAS per
     * expert 371, v49-v50; dynamic order 358 / 382 against 342 / 333, v58 / v59); the others 128 x 256.
     *
     * Skipping a tile's 64-row quarters without rows: always in the dynamic order (v58: 128 x 256 tiles that
     * skip ahead of or level with multiplying every quarter in every cell, M3's 128 experts of 3072 x 6144 at
     * 256 rows 451 against 424). In the static order, where tiles of unequal cost let the CTAs that share a
     * tile's operands drift apart over the waves (and the L2 copy go), 256 x 128 tiles skip, 128 x 256 ones
     * only when the experts average under 128 rows (8-64 rows 2-10 % ahead; with more rows tiles that all
     * cost the same came out ahead: 32 experts at 512 rows 545 against 414, 64 of 512 x 4096 at 256 rows 401
     * against 375, v48-v50).
     * KN_CUDA_EXPERTS_TILE (an integer knob: kn_cuda_knob reads only on / off): 1 = 128 x 256, 2 = 256 x 128;
     * KN_CUDA_EXPERTS_SKIP: 0 never, 1 always. */
    const int tile = kn_cuda_knob_int("KN_CUDA_EXPERTS_TILE", 0),
              skip = kn_cuda_knob_int("KN_CUDA_EXPERTS_SKIP", -1);
    const int many = n >= 128 * (int64_t)n_exp;
    const int W =
        tile ? tile == 2 : many && n < 256 * (int64_t)n_exp && rows * cols * 2 >= ((int64_t)32 << 20);
    const int sk = skip >= 0 ? skip != 0 : dynamic || W || !many;
    return W | sk << 1;
}

/* The launch both element types share: a's operands, maps and tile counter set; picks the plan (tile shape,
 * quarter skipping) and the grid, zeroes the counter, launches */
static int32_t ge_launch(ge_args &a, int64_t n, int tma, int f8, cudaStream_t stream, const char *what,
                         struct mm_err *err)
{
    const int plan = kn_cuda_gemm_experts_plan(a.n_exp, n, a.rows, a.cols, a.ctr != NULL), W = plan & 1;
    a.skip = (plan >> 1) & 1;
    a.l2 = kn_cuda_knob_int("KN_CUDA_EXPERTS_L2", 0);
    a.nt = (int32_t)((a.rows + GE_BN(W) - 1) / GE_BN(W));
    /* at most this many tiles: every routed row in a full tile, plus one partial tile per expert */
    const int64_t bound = (n / GE_BM(W) + a.n_exp) * a.nt * a.n_w;
    if (bound > INT32_MAX) return mm_err_set(err, MM_INVALID, "%s: %lld tiles", what, (long long)bound);
    const int64_t sms = kn_cuda_sm_count();
    const unsigned grid = (unsigned)(bound < sms ? bound : sms);
    void (*kern)(const ge_args) = f8    ? (W ? k_gemm_experts<1, 1, 1> : k_gemm_experts<1, 0, 1>)
                                  : tma ? (W ? k_gemm_experts<1, 1, 0> : k_gemm_experts<1, 0, 0>)
                                        : (W ? k_gemm_experts<0, 1, 0> : k_gemm_experts<0, 0, 0>);
    int32_t rc = kn_cuda_check(kn_smem_attr((const void *)kern, GE_SMEM(f8)), what, err);
    if (!rc && a.ctr) rc = kn_cuda_check(cudaMemsetAsync(a.ctr, 0, sizeof(int32_t), stream), what, err);
    if (rc) return rc;
    return kn_cuda_check(kn_launch(kern, dim3(grid), GE_THREADS, GE_SMEM(f8), stream, a), what, err);
}

extern "C" int32_t kn_cuda_gemm_experts_bf16(int32_t n_exp, const int32_t *off, int64_t n, int64_t rows,
                                             int64_t cols, const uint16_t *x, int64_t ldx,
                                             const void *const *w_a, const void *const *w_b,
                                             const void *maps_a, const void *maps_b, float *y_a, float *y_b,
                                             int64_t ldy, int32_t *tile_ctr, cudaStream_t stream,
                                             struct mm_err *err)
{
    if (!kn_cuda_gemm_experts_ok(n_exp, rows, cols, ldx) || n < 0 || n > INT32_MAX || ldy < rows || ldy % 2 ||
        (uintptr_t)x % 16 || (uintptr_t)y_a % 8 || (uintptr_t)y_b % 8 || (uintptr_t)tile_ctr % 4 ||
        (n_exp > 0 && n > 0 && (!x || !off || !w_a || !y_a || (w_b && !y_b))))
        return mm_err_set(
            err, MM_INVALID,
            "kn_cuda_gemm_experts_bf16: bad arguments (experts %d rows %lld cols %lld ldx %lld)", (int)n_exp,
            (long long)rows, (long long)cols, (long long)ldx);
    if (n_exp == 0 || n == 0) return MM_OK;
    ge_args a;
    memset(&a, 0, sizeof a);
    /* the TMA producer when the weights have maps and the rows' map can be made */
    const int tma = maps_a && (!w_b || maps_b) && kn_cuda_knob("KN_CUDA_EXPERTS_TMA", 1) &&
                    ge_encode(&a.xm, x, n, cols, ldx, GE_XBOX, 0);
    a.wm0 = (const CUtensorMap *)maps_a, a.wm1 = (const CUtensorMap *)(w_b ? maps_b : maps_a);
    a.off = off, a.x = x, a.w0 = w_a, a.w1 = w_b ? w_b : w_a, a.y0 = y_a, a.y1 = w_b ? y_b : y_a;
    a.ldx = ldx, a.ldy = ldy, a.rows = rows, a.cols = cols;
    /* the dynamic tile order: CTAs that share a tile's weights or rows take it at nearly the same moment and
     * stay in step, where the static order let them drift apart over the waves (and the L2 copy go) */
    a.ctr = tma && tile_ctr && kn_cuda_knob("KN_CUDA_EXPERTS_DYN", 1) ? tile_ctr : NULL;
    a.n_exp = n_exp, a.n_w = w_b ? 2 : 1;
    return ge_launch(a, n, tma, 0, stream, "kn_cuda_gemm_experts_bf16", err);
}

extern "C" int kn_cuda_gemm_experts_e4m3_ok(int32_t n_exp, int64_t rows, int64_t cols, int32_t bs_rows,
                                            int32_t bs_cols)
{
    return n_exp >= 0 && n_exp <= GE_EMAX && rows > 0 && rows % 8 == 0 && rows <= INT32_MAX && cols > 0 &&
           cols % 128 == 0 && cols <= INT32_MAX && bs_rows == 128 && bs_cols == 128;
}

extern "C" int32_t kn_cuda_gemm_experts_e4m3(int32_t n_exp, const int32_t *off, int64_t n, int64_t rows,
                                             int64_t cols, const uint8_t *xq, const float *xs, int64_t ldxs,
                                             const uint8_t *const *w_a, const float *const *s_a,
                                             const uint8_t *const *w_b, const float *const *s_b,
                                             const void *maps_a, const void *maps_b, float *y_a, float *y_b,
                                             int64_t ldy, int32_t *tile_ctr, cudaStream_t stream,
                                             struct mm_err *err)
{
    if (!kn_cuda_gemm_experts_e4m3_ok(n_exp, rows, cols, 128, 128) || n < 0 || n > INT32_MAX || ldxs < n ||
        ldy < rows || ldy % 2 || (uintptr_t)xq % 16 || (uintptr_t)y_a % 8 || (uintptr_t)y_b % 8 ||
        (uintptr_t)tile_ctr % 4 ||
        (n_exp > 0 && n > 0 &&
         (!xq || !xs || !off || !w_a || !s_a || !maps_a || !y_a || (w_b && (!s_b || !maps_b || !y_b)))))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_experts_e4m3: bad arguments (experts %d rows %lld cols %lld)",
                          (int)n_exp, (long long)rows, (long long)cols);
    if (n_exp == 0 || n == 0) return MM_OK;
    ge_args a;
    memset(&a, 0, sizeof a);
    if (!ge_encode(&a.xm, xq, n, cols, cols, GE_XBOX, 1))
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_experts_e4m3: no tensor map for the rows");
    a.wm0 = (const CUtensorMap *)maps_a, a.wm1 = (const CUtensorMap *)(w_b ? maps_b : maps_a);
    a.off = off, a.w0 = (const void *const *)w_a, a.w1 = (const void *const *)(w_b ? w_b : w_a);
    a.y0 = y_a, a.y1 = w_b ? y_b : y_a;
    a.xs = xs, a.ws0 = s_a, a.ws1 = w_b ? s_b : s_a, a.ldxs = ldxs, a.n = n;
    a.ldx = cols, a.ldy = ldy, a.rows = rows, a.cols = cols;
    a.ctr = tile_ctr && kn_cuda_knob("KN_CUDA_EXPERTS_DYN", 1) ? tile_ctr : NULL;
    a.n_exp = n_exp, a.n_w = w_b ? 2 : 1;
    return ge_launch(a, n, 1, 1, stream, "kn_cuda_gemm_experts_e4m3", err);
}
