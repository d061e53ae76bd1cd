/* Fused prefill selection with wgmma (sm_90a): the same contract and results as k_select_prefill
 * (kn_msa_index_prefill.cu): index scores of a query tile against every visible key block as a GEMM, the
 * token-level causal block max per (query, index head) row folded straight into a running top-k, so the
 * [heads][n][blocks] score matrix never reaches memory.
 *
 * CTA = one tile (<= 64 queries of one sequence x <= 4 index heads = 256 rows) as before, but:
 *   - 4 consumer warpgroups own 64-row slabs (16 queries x 4 heads; row r of a slab = query r / 4, head
 *     r % 4). Each keeps its slab's queries in shared memory (rounded to bf16, 128B-swizzled) and computes
 *     S = Q K^T for each 128-key block with 8 wgmma m64n128k16, both operands from shared memory;
 *   - one producer warp streams the key blocks through a 4-stage ring (128B-swizzled, completion on the
 *     stage's "full" mbarrier; consumers release a stage on "empty", one arrival per warp, as soon as their
 *     product has read it, before the epilogue). Lane 0 loads a block as two TMA boxes (KN_CUDA_SELECT_TMA,
 *     on by default: +11 to +16 % over the warp's cp.async on an H200, v103); without a map, every lane
 *     copies with cp.async.
 * Epilogue: each lane holds 2 rows x 32 columns of S (the accumulator layout); the causal mask is applied
 * only when the block reaches past some row's position (a warp-uniform vote), the row max is reduced over the
 * quad (2 shuffles), and lane tig 0 / 1 of the quad folds row gid / gid + 8 into its running list. The list
 * sits in shared memory ([k][row], conflict-free) with its k-th score in a register: after the first few
 * dozen blocks almost no block beats it, so the insertion (a shift of <= 16 entries) is rare, and 64
 * accumulators + 32 list registers would not fit the 120 registers per thread 17 warps leave. Blocks arrive
 * in increasing id order, so a tie never displaces an entry (ties to the lower id, as kn_msa_topk_local). The
 * four warpgroups share the tensor cores: while one runs its epilogue the others' products run. Tiles are
 * taken in reverse order (the last tiles of a sequence see the most blocks) to shorten the grid's tail.
 * Variant 2 (KN_CUDA_SELECT_WGMMA=2): two warpgroups of two slabs each, both products issued back to back and
 * slab 0's maxima reduced while slab 1's product runs. Measured on an H200 (bench/cuda/README.md, "wgmma
 * selection"): variant 1 565 TFLOP/s, variant 2 479-573, the mma.sync kernel 267-306, same selections;
 * variant 1 is the default (kn_msa_api.cu). Shapes as the mma.sync kernel: idx_dim 128, block 128,
 * n_idx_heads <= 4, topk <= 16.
 *
 * FP8 index keys (e4m3 with a scale per token; only this kernel takes them in prefill): four producer warps
 * copy each block's 16 KB of keys and 512 bytes of scales into one of two raw stages with cp.async, two
 * blocks ahead, then convert the block they wait for into the bf16 stage the consumers read, k = bf16(e4m3 x
 * scale) (one bf16 rounding of the dequantized key, like the query's), so the consumers are unchanged. The
 * raw stages take the room of one bf16 stage (3 instead of 4). Without it an FP8 cache sent prefill selection
 * through the decode scan and a separate top-k over a full score matrix: 6x the time to first token at 1M (t
 * run 3).
 *
 * FP8 keys with e4m3 queries (variant 3, KN_CUDA_SELECT_WGMMA=3): the Hopper tensor cores multiply e4m3 at
 * twice the bf16 rate, so the queries are quantized as the keys are (scale amax / 448 per (query, head) row,
 * in the consumers when they load Q), one producer warp copies each block's e4m3 rows as they lie with their
 * scales, and each block is 4 wgmma m64n128k32; the consumers multiply each score column by its key's scale
 * before the stage is released (the query's scale is left out: it only scales a row, whose scores are only
 * compared with each other). Coarser queries move some selections (kn_bench "select8" says how many); the
 * CPU twin is kn_msa_quant_q8 followed by the usual scores. */
#include "kn_msa_kernels.cuh"
#include "kn_tma.cuh"
#include "kn_wgmma.cuh"

#define PW_SLABS 4 /* 64-row slabs of a tile: 64 queries x 4 heads */
#define PW_STAGES 4
#define PW_BLK 128
#define PW_DI 128
#define PW_KMAX 16
#define PW_ROWS (64 * PW_SLABS)
#define PW_STAGE_BYTES (PW_BLK * PW_DI * 2) /* one key block, sw128 tile of 128 rows */
#define PW_SLAB_BYTES (64 * PW_DI * 2)      /* one warpgroup's queries, sw128 tile of 64 rows */
/* shared memory: mbarriers, the lists (scores, then ids: [PW_KMAX][PW_ROWS]), then (1024-aligned) Q, ring */
#define PW_MAX_STAGES 8 /* mbarrier pairs in the header: the most stages any mode uses (PW_Q8_STAGES) */
#define PW_BAR_FULL 0
#define PW_BAR_EMPTY (8 * PW_MAX_STAGES)
#define PW_LS (16 * PW_MAX_STAGES)
#define PW_LI (PW_LS + 4 * PW_KMAX * PW_ROWS)
#define PW_HEAD_BYTES (PW_LI + 4 * PW_KMAX * PW_ROWS)
#define PW_SMEM (PW_HEAD_BYTES + 1024 + PW_SLABS * PW_SLAB_BYTES + PW_STAGES * PW_STAGE_BYTES)
/* FP8 keys: 3 bf16 stages, then 2 raw stages of one block's e4m3 keys and its scales */
#define PW_STAGES_FP8 3
#define PW_RAW_KEYS (PW_BLK * PW_DI)
#define PW_RAW_BYTES (PW_RAW_KEYS + PW_BLK * 4)
#define PW_SMEM_FP8                                                                                          \
    (PW_HEAD_BYTES + 1024 + PW_SLABS * PW_SLAB_BYTES + PW_STAGES_FP8 * PW_STAGE_BYTES + 2 * PW_RAW_BYTES)

/* FP8 keys and e4m3 queries (KN_CUDA_SELECT_WGMMA=3): e4m3 products on the tensor cores. A key block is one
 * sw128 slab of 128 rows x 128 bytes followed by its 128 scales, padded to the next 1024-byte boundary (17 KB
 * per stage, 8 stages); a Q slab is 64 rows x 128 bytes. */
#define PW_Q8_STAGES 8
#define PW_Q8_STAGE_BYTES (PW_RAW_KEYS + 1024)
#define PW_Q8_SLAB_BYTES (64 * PW_DI)
#define PW_SMEM_Q8 (PW_HEAD_BYTES + 1024 + PW_SLABS * PW_Q8_SLAB_BYTES + PW_Q8_STAGES * PW_Q8_STAGE_BYTES)
static_assert(PW_SMEM_Q8 <= PW_SMEM_FP8, "kn_select_prefill_wgmma_ok(1) must cover the q8 kernel");
static_assert(PW_Q8_STAGES <= PW_MAX_STAGES && PW_STAGES <= PW_MAX_STAGES, "too few mbarriers in the header");

struct pw_args {
    const float *q;
    const int32_t *tiles, *qseq;
    const int64_t *pos;
    const int32_t *bt;
    int32_t bt_stride;
    const void *keys;
    const float *kscale; /* FP8 keys: a scale per token (page-major as the keys) */
    int32_t n, nh, topk, n_local, n_tiles;
    int32_t *sel;
    int32_t sel_stride;
    int tma;        /* bf16 keys: lane 0 loads each block by TMA (KN_CUDA_SELECT_TMA) */
    CUtensorMap km; /* the bf16 index keys as a 2-D map [n_pages * block][idx_dim], boxes of 64 x 128 */
};

/* The producer warp: every visible block of the tile into the ring. Lane l copies 16-byte chunk l % 16 of
 * rows l / 16 + 2j (half a warp per 256-byte key row: coalesced). With TMA (a.tma), lane 0 alone loads each
 * block as two boxes (its two 64-column slabs); a block's 32 KB are one page's contiguous keys. */
template <int ST>
__device__ __forceinline__ void pw_produce(const pw_args &a, const int32_t *btr, const uint16_t *keys,
                                           int32_t last_b, uint32_t s0, uint32_t kv_s, int lane)
{
    const int c = lane & 15, r0 = lane >> 4;
    int s = 0;
    uint32_t ph = 0;
    int32_t page = btr[0];
    if (a.tma) {
        if (lane) return;
        for (int32_t b = 0; b <= last_b; b++) {
            const int32_t next = b < last_b ? btr[b + 1] : 0;
            if (b >= ST) mb_wait(s0 + PW_BAR_EMPTY + 8 * s, ph ^ 1u);
            const uint32_t dst = kv_s + (uint32_t)s * PW_STAGE_BYTES, full = s0 + PW_BAR_FULL + 8 * s;
            kn_mb_arrive_expect_tx(full, PW_STAGE_BYTES);
            kn_tma_box(dst, (uint64_t)&a.km, 0, page * PW_BLK, full, false, 0);
            kn_tma_box(dst + PW_BLK * 128, (uint64_t)&a.km, 64, page * PW_BLK, full, false, 0);
            page = next;
            if (++s == ST) s = 0, ph ^= 1u;
        }
        return;
    }
    for (int32_t b = 0; b <= last_b; b++) {
        const int32_t next = b < last_b ? btr[b + 1] : 0; /* its latency hides under this block's copies */
        if (b >= ST) mb_wait(s0 + PW_BAR_EMPTY + 8 * s, ph ^ 1u);
        const uint8_t *src = (const uint8_t *)(keys + (int64_t)page * PW_BLK * PW_DI) + r0 * 256 + c * 16;
        const uint32_t dst = kv_s + (uint32_t)s * PW_STAGE_BYTES;
#pragma unroll 16
        for (int j = 0; j < PW_BLK / 2; j++) {
            const int row = r0 + 2 * j;
            kn_cp_async16(dst + wg_sw128_off(row, c, PW_BLK), src + j * 512, 16);
        }
        mb_arrive_cp_async(s0 + PW_BAR_FULL + 8 * s);
        page = next;
        if (++s == ST) s = 0, ph ^= 1u;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* The producer warps for FP8 keys (see the top): PW_PROD8 of them, warp p owning rows 32 p .. 32 p + 31 of
 * every block, so that each converts what it copied and only ever waits for its own lanes. Raw stage r holds
 * block b's keys ([row][128] bytes, as in the cache) and then its 128 scales; lane l copies chunks l + 32 j
 * of the warp's 4 KB of keys and (lanes 0-7) chunk l of its 128 bytes of scales. Conversion: lane l takes
 * rows l / 8 + 4 j of the warp's and 16 keys of each (bytes 16 (l % 8)...), i.e. bf16 chunks 2 (l % 8) and
 * 2 (l % 8) + 1 of the sw128 stage. One warp for the whole block converted at half the consumers' rate
 * (t run 4: 265-277 against 502-572 TFLOP/s). */
#define PW_PROD8 4
#define PW_ROWS8 (PW_BLK / PW_PROD8)
__device__ __forceinline__ void pw_fetch_fp8(const int32_t *btr, const uint8_t *keys, const float *kscale,
                                             int32_t b, int32_t last_b, uint32_t raw, int pw, int lane)
{
    if (b <= last_b) {
        const int64_t page = btr[b];
        const uint32_t o = (uint32_t)pw * PW_ROWS8 * PW_DI;
        const uint8_t *src = keys + page * PW_RAW_KEYS + o;
#pragma unroll
        for (int j = 0; j < PW_ROWS8 * PW_DI / 512; j++)
            kn_cp_async16(raw + o + (uint32_t)(512 * j + 16 * lane), src + 512 * j + 16 * lane, 16);
        if (lane < PW_ROWS8 / 4)
            kn_cp_async16(raw + PW_RAW_KEYS + 4 * PW_ROWS8 * pw + 16 * lane,
                          kscale + page * PW_BLK + PW_ROWS8 * pw + 4 * lane, 16);
    }
    kn_cp_async_commit(); /* empty past the last block: the wait_group counts stay aligned */
}

__device__ __forceinline__ void pw_produce_fp8(const int32_t *btr, const uint8_t *keys, const float *kscale,
                                               int32_t last_b, uint32_t s0, uint32_t kv_s, uint32_t raw_s,
                                               int pw, int lane)
{
    pw_fetch_fp8(btr, keys, kscale, 0, last_b, raw_s, pw, lane);
    pw_fetch_fp8(btr, keys, kscale, 1, last_b, raw_s + PW_RAW_BYTES, pw, lane);
    const int cp = lane & 7, r0 = PW_ROWS8 * pw + (lane >> 3);
    int s = 0;
    uint32_t ph = 0;
    for (int32_t b = 0; b <= last_b; b++) {
        const uint32_t raw = raw_s + (uint32_t)(b & 1) * PW_RAW_BYTES;
        kn_cp_async_wait<1>(); /* this lane's copies of block b have landed */
        __syncwarp();          /* and so have the other lanes' */
        if (b >= PW_STAGES_FP8) mb_wait(s0 + PW_BAR_EMPTY + 8 * s, ph ^ 1u);
        const uint32_t dst = kv_s + (uint32_t)s * PW_STAGE_BYTES;
#pragma unroll 4
        for (int j = 0; j < PW_ROWS8 / 4; j++) {
            const int row = r0 + 4 * j;
            uint32_t k8[4];
            float sc;
            asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                         : "=r"(k8[0]), "=r"(k8[1]), "=r"(k8[2]), "=r"(k8[3])
                         : "r"(raw + (uint32_t)(row * PW_DI + 16 * cp)));
            asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(sc) : "r"(raw + PW_RAW_KEYS + 4 * row));
            uint32_t o[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                    (__nv_fp8x2_storage_t)(k8[e >> 1] >> (16 * (e & 1))), __NV_E4M3);
                const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h));
                o[e] = kn_pack_bf16(f.x * sc, f.y * sc);
            }
            asm volatile(
                "st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst + wg_sw128_off(row, 2 * cp, PW_BLK)),
                "r"(o[0]), "r"(o[1]), "r"(o[2]), "r"(o[3])
                : "memory");
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                             dst + wg_sw128_off(row, 2 * cp + 1, PW_BLK)),
                         "r"(o[4]), "r"(o[5]), "r"(o[6]), "r"(o[7])
                         : "memory");
        }
        wg_fence_proxy_async(); /* these generic-proxy stores before the consumers' wgmma reads */
        mb_arrive(s0 + PW_BAR_FULL + 8 * s);
        __syncwarp(); /* every lane has read raw stage b & 1 before it is refilled */
        pw_fetch_fp8(btr, keys, kscale, b + 2, last_b, raw, pw, lane);
        if (++s == PW_STAGES_FP8) s = 0, ph ^= 1u;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* The producer warp for FP8 keys read as FP8: each block's e4m3 rows copied as they lie into an sw128 slab
 * (row r at 128 r, 16-byte chunk c at c ^ (r & 7)) and its 128 scales after them. Lane l copies chunk l % 8
 * of rows l / 8 + 4 j (a warp instruction covers 4 whole 128-byte rows) and 16 bytes of the scales. */
__device__ __forceinline__ void pw_produce_q8(const int32_t *btr, const uint8_t *keys, const float *kscale,
                                              int32_t last_b, uint32_t s0, uint32_t kv_s, int lane)
{
    const int c = lane & 7, r0 = lane >> 3;
    int s = 0;
    uint32_t ph = 0;
    int32_t page = btr[0];
    for (int32_t b = 0; b <= last_b; b++) {
        const int32_t next = b < last_b ? btr[b + 1] : 0;
        if (b >= PW_Q8_STAGES) mb_wait(s0 + PW_BAR_EMPTY + 8 * s, ph ^ 1u);
        const uint8_t *src = keys + (int64_t)page * PW_RAW_KEYS + r0 * PW_DI + c * 16;
        const uint32_t dst = kv_s + (uint32_t)s * PW_Q8_STAGE_BYTES;
#pragma unroll 8
        for (int j = 0; j < PW_BLK / 4; j++) {
            const int row = r0 + 4 * j;
            kn_cp_async16(dst + (uint32_t)(row * 128 + ((c ^ (row & 7)) << 4)), src + j * 4 * PW_DI, 16);
        }
        kn_cp_async16(dst + PW_RAW_KEYS + 16 * lane, kscale + (int64_t)page * PW_BLK + 4 * lane, 16);
        mb_arrive_cp_async(s0 + PW_BAR_FULL + 8 * s);
        page = next;
        if (++s == PW_Q8_STAGES) s = 0, ph ^= 1u;
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* Keys at columns <= rel of the block are visible to a row (rel clamped to [-1, PW_BLK - 1]). */
__device__ __forceinline__ int pw_rel(int64_t pos, int64_t kb0)
{
    const int64_t r = pos - kb0;
    return r < -1 ? -1 : r > PW_BLK - 1 ? PW_BLK - 1 : (int)r;
}

/* Causal row maxima of one slab's scores for block kb0 / PW_BLK: m0 for row gid, m1 for row gid + 8 (every
 * lane of the quad ends with both). Warp-uniform control flow only: it may run while a wgmma is pending. */
__device__ __forceinline__ void pw_rowmax(const float (&acc)[64], int64_t pos0, int64_t pos1, int64_t kb0,
                                          int tig, float &m0, float &m1)
{
    const int rel0 = pw_rel(pos0, kb0), rel1 = pw_rel(pos1, kb0);
    m0 = -INFINITY, m1 = -INFINITY;
    if (__any_sync(0xffffffffu, (rel0 < rel1 ? rel0 : rel1) < PW_BLK - 1)) {
#pragma unroll
        for (int e = 0; e < 64; e++) {
            const int col = 8 * (e >> 2) + 2 * tig + (e & 1);
            if ((e >> 1) & 1)
                m1 = fmaxf(m1, col <= rel1 ? acc[e] : -INFINITY);
            else
                m0 = fmaxf(m0, col <= rel0 ? acc[e] : -INFINITY);
        }
    } else {
#pragma unroll
        for (int e = 0; e < 64; e += 4) {
            m0 = fmaxf(m0, fmaxf(acc[e], acc[e + 1]));
            m1 = fmaxf(m1, fmaxf(acc[e + 2], acc[e + 3]));
        }
    }
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 1));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 1));
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, 2));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, 2));
}

/* Fold block b's max v into a row's list (local blocks forced to +inf; -inf and NaN never enter). Divergent:
 * only after the last pending wgmma (ptxas would serialize the products otherwise). */
__device__ __forceinline__ void pw_fold(float *ls, int32_t *li, int grow, int32_t b, float v, int64_t own,
                                        int64_t lo, float &thr)
{
    if (b > own) return;
    if (b >= lo) v = INFINITY;
    if (!(v > thr)) return;
    int k = PW_KMAX - 1;
    while (k > 0) {
        const float p = ls[(k - 1) * PW_ROWS + grow];
        if (!(p < v)) break; /* an equal score has a lower id: it stays ahead */
        ls[k * PW_ROWS + grow] = p;
        li[k * PW_ROWS + grow] = li[(k - 1) * PW_ROWS + grow];
        k--;
    }
    ls[k * PW_ROWS + grow] = v;
    li[k * PW_ROWS + grow] = b;
    thr = ls[(PW_KMAX - 1) * PW_ROWS + grow];
}

/* A consumer warp. SL slabs per warpgroup: SL = 1, four warpgroups, one product per block each (they overlap
 * each other's epilogues); SL = 2, two warpgroups, each issues both slabs' products and reduces slab 0 while
 * slab 1's runs (two accumulators: 128 registers). Global slab of (warpgroup wg, slab sl) = wg * SL + sl. */
template <int SL, int ST, bool Q8>
__device__ __forceinline__ void pw_consume(const pw_args &a, int32_t i0, int32_t cnt, int32_t last_b,
                                           uint32_t s0, uint32_t q_s, uint32_t kv_s, float *ls, int32_t *li,
                                           int warp, int lane)
{
    const int wg = warp >> 2, wq = warp & 3, gid = lane >> 2, tig = lane & 3, t = (int)(threadIdx.x & 127);

    constexpr uint32_t SLAB = Q8 ? PW_Q8_SLAB_BYTES : PW_SLAB_BYTES,
                       STAGE = Q8 ? PW_Q8_STAGE_BYTES : PW_STAGE_BYTES;
    if (Q8) {
        /* this warpgroup's queries as e4m3 with a scale per (query, head) row, amax / 448 as the index keys'
         * (the scale itself is not needed: a row's scores are only compared with each other). Thread t
         * quantizes 16 dims (chunk t % 8) of rows t / 8 + 16 j; a row's 8 threads are neighbouring lanes. */
#pragma unroll 1
        for (int j = 0; j < 4; j++) {
            const int r = (t >> 3) + 16 * j, c = t & 7, ql = 16 * wg + (r >> 2), hd = r & 3;
            float v[16];
#pragma unroll
            for (int e = 0; e < 16; e++) v[e] = 0.0f;
            if (ql < cnt && hd < a.nh) {
                const float4 *src =
                    reinterpret_cast<const float4 *>(a.q + ((int64_t)(i0 + ql) * a.nh + hd) * PW_DI + c * 16);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float4 f = __ldg(src + e);
                    v[4 * e] = f.x, v[4 * e + 1] = f.y, v[4 * e + 2] = f.z, v[4 * e + 3] = f.w;
                }
            }
            float amax = 0.0f;
#pragma unroll
            for (int e = 0; e < 16; e++) amax = fmaxf(amax, fabsf(v[e]));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 4));
            const float sq = amax > 0.0f ? amax / 448.0f : 1.0f;
            uint32_t w[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                w[e] = 0;
#pragma unroll
                for (int x = 0; x < 4; x++)
                    w[e] |= (uint32_t)__nv_cvt_float_to_fp8(v[4 * e + x] / sq, __NV_SATFINITE, __NV_E4M3)
                            << (8 * x);
            }
            asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                             q_s + (uint32_t)wg * SLAB + (uint32_t)(r * 128 + ((c ^ (r & 7)) << 4))),
                         "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                         : "memory");
        }
    } else {
        /* this warpgroup's queries, rounded to bf16, into its sw128 slabs (zeros for missing queries/heads)
         */
#pragma unroll
        for (int sl = 0; sl < SL; sl++)
#pragma unroll 2
            for (int j = 0; j < 8; j++) {
                const int gs = wg * SL + sl, r = (t >> 4) + 8 * j, c = t & 15, ql = 16 * gs + (r >> 2),
                          hd = r & 3;
                uint32_t v[4] = {0u, 0u, 0u, 0u};
                if (ql < cnt && hd < a.nh) {
                    const float *src = a.q + ((int64_t)(i0 + ql) * a.nh + hd) * PW_DI + c * 8;
#pragma unroll
                    for (int e = 0; e < 4; e++)
                        v[e] = kn_pack_bf16(__ldg(src + 2 * e), __ldg(src + 2 * e + 1));
                }
                asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_s + (uint32_t)gs * SLAB +
                                                                                wg_sw128_off(r, c, 64)),
                             "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
                             : "memory");
            }
    }
    wg_fence_proxy_async(); /* generic-proxy stores before the tensor cores read them */
    wg_bar_sync(1 + wg, 128);

    /* per slab: this lane's two accumulator rows (gid, gid + 8 of its warp's 16), and the row whose list it
     * keeps (lanes tig 0 / 1 of each quad: rows gid / gid + 8) */
    int64_t rpos[SL][2], my_pos[SL], my_own[SL], my_lo[SL];
    int grow[SL];
    float thr[SL];
    int32_t wg_last_b = -1; /* the warpgroup's last block that any of its rows sees */
    const bool owner = tig < 2;
#pragma unroll
    for (int sl = 0; sl < SL; sl++) {
        const int gs = wg * SL + sl;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int ql = 16 * gs + 4 * wq + (gid >> 2) + 2 * h, hd = gid & 3;
            rpos[sl][h] = (ql < cnt && hd < a.nh) ? a.pos[i0 + ql] : -1;
        }
        const int qlast = (cnt < 16 * gs + 16 ? cnt : 16 * gs + 16) - 1; /* the slab's last query */
        if (qlast >= 16 * gs) {
            const int32_t lb = (int32_t)(a.pos[i0 + qlast] / PW_BLK);
            wg_last_b = lb > wg_last_b ? lb : wg_last_b;
        }
        my_pos[sl] = tig == 1 ? rpos[sl][1] : rpos[sl][0];
        my_own[sl] = my_pos[sl] >= 0 ? my_pos[sl] / PW_BLK : -1;
        my_lo[sl] = my_own[sl] - (a.n_local > 0 ? a.n_local : 1) + 1;
        if (my_lo[sl] < 0) my_lo[sl] = 0;
        grow[sl] = 64 * gs + 16 * wq + gid + 8 * (tig & 1);
        thr[sl] = -INFINITY; /* the list's k-th score */
        if (owner)
#pragma unroll
            for (int k = 0; k < PW_KMAX; k++)
                ls[k * PW_ROWS + grow[sl]] = -INFINITY, li[k * PW_ROWS + grow[sl]] = -1;
    }

    float acc[SL][64];
#pragma unroll
    for (int sl = 0; sl < SL; sl++)
#pragma unroll
        for (int e = 0; e < 64; e++) acc[sl][e] = 0.0f;
    int s = 0;
    uint32_t ph = 0;
    for (int32_t b = 0; b <= last_b; b++) {
        const uint32_t k_s = kv_s + (uint32_t)s * STAGE;
        const int64_t kb0 = (int64_t)b * PW_BLK;
        mb_wait(s0 + PW_BAR_FULL + 8 * s, ph);
        /* warpgroup-uniform (and a vote, so that ptxas knows the branch does not diverge) */
        const bool work = __any_sync(0xffffffffu, b <= wg_last_b);
        float m[SL][2];
        if (work) {
            wg_fence_proxy_async(); /* the producer's cp.async writes (generic proxy) before wgmma reads */
#pragma unroll
            for (int sl = 0; sl < SL; sl++) wg_touch(acc[sl]);
            wg_fence();
#pragma unroll
            for (int sl = 0; sl < SL; sl++) {
                const uint32_t qs = q_s + (uint32_t)(wg * SL + sl) * SLAB;
                if (Q8) {
#pragma unroll
                    for (int kk = 0; kk < 4; kk++)
                        wg_mma_ss_e4m3(acc[sl], wg_desc_kmajor(qs, 64, kk), wg_desc_kmajor(k_s, PW_BLK, kk),
                                       kk > 0);
                } else {
#pragma unroll
                    for (int kk = 0; kk < 8; kk++)
                        wg_mma_ss(acc[sl], wg_desc_kmajor(qs, 64, kk), wg_desc_kmajor(k_s, PW_BLK, kk),
                                  kk > 0);
                }
                wg_commit();
            }
            if (SL == 2) { /* slab 0's maxima while slab 1's product runs */
                wg_wait<1>();
                wg_touch(acc[0]);
                pw_rowmax(acc[0], rpos[0][0], rpos[0][1], kb0, tig, m[0][0], m[0][1]);
            }
            wg_wait<0>();
#pragma unroll
            for (int sl = 0; sl < SL; sl++) wg_touch(acc[sl]);
            if (Q8) /* the keys' scales, read before the stage is released: column 8 i + 2 tig (+1) */
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    float2 sk;
                    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                                 : "=f"(sk.x), "=f"(sk.y)
                                 : "r"(k_s + PW_RAW_KEYS + 4 * (8 * i + 2 * tig)));
                    acc[0][4 * i] *= sk.x, acc[0][4 * i + 1] *= sk.y;
                    acc[0][4 * i + 2] *= sk.x, acc[0][4 * i + 3] *= sk.y;
                }
        }
        __syncwarp();
        if (lane == 0) mb_arrive(s0 + PW_BAR_EMPTY + 8 * s); /* the stage is read: release it */
        if (++s == ST) s = 0, ph ^= 1u;
        if (!work) continue;
        pw_rowmax(acc[SL - 1], rpos[SL - 1][0], rpos[SL - 1][1], kb0, tig, m[SL - 1][0], m[SL - 1][1]);
        if (owner)
#pragma unroll
            for (int sl = 0; sl < SL; sl++)
                pw_fold(ls, li, grow[sl], b, tig == 1 ? m[sl][1] : m[sl][0], my_own[sl], my_lo[sl], thr[sl]);
    }

    if (owner)
#pragma unroll
        for (int sl = 0; sl < SL; sl++) {
            if (my_pos[sl] < 0) continue;
            const int ql = 16 * (wg * SL + sl) + 4 * wq + (gid >> 2) + 2 * (tig & 1);
            int32_t *out = a.sel + ((int64_t)(gid & 3) * a.n + i0 + ql) * a.sel_stride;
            for (int k = 0; k < a.sel_stride; k++)
                out[k] = (k < a.topk && k < PW_KMAX) ? li[k * PW_ROWS + grow[sl]] : -1;
        }
}

/* MODE: 0 bf16 keys, 1 FP8 keys converted to bf16 by the producers, 2 FP8 keys and FP8 queries (SL = 1). */
enum { PW_BF16 = 0, PW_FP8 = 1, PW_Q8 = 2 };

/* threads: the consumer warpgroups, then the producer warp(s) */
template <int SL, int MODE> constexpr int pw_threads()
{
    return 128 * (4 / SL) + 32 * (MODE == PW_FP8 ? PW_PROD8 : 1);
}

template <int SL, int MODE>
__global__ void __launch_bounds__(pw_threads<SL, MODE>(), 1)
    k_select_prefill_wgmma(const __grid_constant__ pw_args a)
{
    constexpr bool FP8 = MODE == PW_FP8, Q8 = MODE == PW_Q8;
    static_assert(!Q8 || SL == 1, "the q8 consumer has one slab per warpgroup");
    constexpr int ST = FP8 ? PW_STAGES_FP8 : Q8 ? PW_Q8_STAGES : PW_STAGES;
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t tile = a.n_tiles - 1 - (int32_t)blockIdx.x; /* the longest tiles first */
    const int32_t i0 = a.tiles[2 * tile], cnt = a.tiles[2 * tile + 1];
    const int32_t *btr = a.bt + (int64_t)a.qseq[i0] * a.bt_stride;
    const int32_t last_b = (int32_t)(a.pos[i0 + cnt - 1] / PW_BLK);
    const uint32_t s0 = kn_smem_addr(smem);
    const uint32_t q_s = (s0 + PW_HEAD_BYTES + 1023u) & ~1023u,
                   kv_s = q_s + PW_SLABS * (Q8 ? PW_Q8_SLAB_BYTES : PW_SLAB_BYTES);
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            /* every producer lane (bf16: by cp.async), or the TMA lane (its expect_tx) */
            mb_init(s0 + PW_BAR_FULL + 8 * s, FP8 ? 32 * PW_PROD8 : MODE == PW_BF16 && a.tma ? 1 : 32);
            mb_init(s0 + PW_BAR_EMPTY + 8 * s, 4 * (4 / SL)); /* one arrival per consumer warp */
        }
        mb_init_fence(); /* the TMA producer's copies complete on them */
    }
    __syncthreads();
    if (warp >= 4 * (4 / SL)) {
        if (FP8)
            pw_produce_fp8(btr, (const uint8_t *)a.keys, a.kscale, last_b, s0, kv_s,
                           kv_s + ST * PW_STAGE_BYTES, warp - 4 * (4 / SL), lane);
        else if (Q8)
            pw_produce_q8(btr, (const uint8_t *)a.keys, a.kscale, last_b, s0, kv_s, lane);
        else
            pw_produce<ST>(a, btr, (const uint16_t *)a.keys, last_b, s0, kv_s, lane);
    } else {
        pw_consume<SL, ST, Q8>(a, i0, cnt, last_b, s0, q_s, kv_s, (float *)(smem + PW_LS),
                               (int32_t *)(smem + PW_LI), warp, lane);
    }
}

int kn_select_prefill_wgmma_ok(int fp8)
{
    static int optin = -1; /* an sm_90 device whose opt-in shared memory per block holds the ring */
    if (optin < 0) {
        int dev = 0, major = 0, v = 0;
        optin =
            cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    major == 9 &&
                    cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess
                ? v
                : 0;
    }
    return optin >= (fp8 ? PW_SMEM_FP8 : PW_SMEM);
}

/* The bf16 index keys' map for the TMA producer (KN_CUDA_SELECT_TMA; false: cp.async, as when the cache's
 * page count is unknown or the driver has no encoder) */
int kn_select_prefill_tma(const struct kn_cuda_cache *c, CUtensorMap *m)
{
    return kn_cuda_knob("KN_CUDA_SELECT_TMA", KN_SELECT_TMA) && c->idx_dtype == KN_IDX_BF16 &&
           c->n_pages > 0 && c->n_pages <= INT32_MAX / PW_BLK &&
           kn_tma_encode_2d(m, c->idx, c->n_pages * PW_BLK, PW_DI, PW_DI, 64, PW_BLK, 0);
}

int32_t kn_select_prefill_wgmma(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const float *q, int32_t *sel,
                                int32_t sel_stride, int variant, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n_tiles == 0) return MM_OK;
    if (!qb->tiles) return mm_err_set(err, MM_INVALID, "kn_cuda_msa_select: the batch has no tiles");
    pw_args a;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.tiles = qb->tiles;
    a.qseq = qb->qseq;
    a.pos = qb->pos;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.keys = c->idx;
    a.kscale = (const float *)c->idx_scale;
    a.n = qb->n;
    a.nh = sh->n_idx_heads;
    a.topk = sh->topk;
    a.n_local = sh->n_local;
    a.n_tiles = qb->n_tiles;
    a.sel = sel;
    a.sel_stride = sel_stride;
    const bool fp8 = c->idx_dtype == KN_IDX_FP8, q8 = fp8 && variant == 3;
    a.tma = !fp8 && kn_select_prefill_tma(c, &a.km);
    void (*kern)(const pw_args) =
        q8             ? k_select_prefill_wgmma<1, PW_Q8>
        : variant == 2 ? (fp8 ? k_select_prefill_wgmma<2, PW_FP8> : k_select_prefill_wgmma<2, PW_BF16>)
                       : (fp8 ? k_select_prefill_wgmma<1, PW_FP8> : k_select_prefill_wgmma<1, PW_BF16>);
    const int threads = q8             ? pw_threads<1, PW_Q8>()
                        : variant == 2 ? (fp8 ? pw_threads<2, PW_FP8>() : pw_threads<2, PW_BF16>())
                                       : (fp8 ? pw_threads<1, PW_FP8>() : pw_threads<1, PW_BF16>()),
              smem = q8    ? PW_SMEM_Q8
                     : fp8 ? PW_SMEM_FP8
                           : PW_SMEM;
    KN_CU(kn_smem_attr((const void *)kern, smem), "kn_cuda_msa_select (wgmma): shared memory");
    kern<<<(unsigned)qb->n_tiles, threads, smem, stream>>>(a);
    KN_LAUNCHED("kn_cuda_msa_select (fused prefill, wgmma)");
    return MM_OK;
}
