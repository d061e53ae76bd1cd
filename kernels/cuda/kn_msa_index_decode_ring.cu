/* Index scoring for decode with the persistent scan's per-warp cp.async ring, copying whole 128-byte lines
 * (KN_CUDA_IDX=4; the default wherever it applies, see kn_index_scores_decode).
 *
 * Why: every other decode scan has each lane fetch the 16-byte chunks it multiplies (row gid, chunks
 * tig + 4c: the mma fragment layout), so one warp-wide copy or load covers 8 rows x 64 bytes, i.e. 8 half
 * lines, and the other halves come from a second instruction. The same bytes fetched as whole lines (lane L:
 * bytes 16 L of a 512-byte stretch, 4 whole lines per instruction) read at 98 % of the copy rate where the
 * half-line scans reach 74-85 % (1M, batch 1; docs/progress/cuda-fp8.md "fp8 run 2"). A register-fed scan
 * cannot fetch whole lines (4 lanes share a row and a lane loads at most 16 bytes), so the tiles are staged
 * in shared memory in line order and each lane reads its fragment chunks back from there (after a __syncwarp:
 * the chunks were copied by other lanes); odd rows are stored with the chunk index XOR 4 so that the
 * read-back is free of bank conflicts (irg_tile_u4). Also lean per-tile bookkeeping (the persistent scan's
 * SASS spent ~70 instructions per tile on 64-bit address arithmetic): each lane keeps a source pointer that a
 * tile advances by a constant, every copy of a tile is that pointer plus a compile-time offset, and the slot
 * address advances with one wrap test. FP8 moves TPS = 2 tiles (32 tokens, 4 KB, as one bf16 tile) per ring
 * step. Neither of these two alone measured faster than the persistent scan (KN_CUDA_IDX_LINES=0 keeps the
 * per-lane copies for comparison); the whole-line copies did. Layout of the product and masking are
 * kn_index_tile.cuh's, as in the other scans. Static split only (contiguous chunks of a multiple of 8 pages
 * per CTA, one wave of 2 CTAs per SM, warp w taking pages w, w + 8, ... of its CTA's chunk), no page
 * stealing; idx_dim 128, block a multiple of 16 x TPS tokens (kn_index_ring_supported). */
#include "kn_decode_prof.cuh"
#include "kn_index_tile.cuh"
#include "kn_msa_kernels.cuh"

#define IRG_WARPS 8

static unsigned long long *g_irg_prof;

/* 16-byte and 4-byte global -> shared copies (no source-size operand: always the full size) */
__device__ __forceinline__ void irg_cp16(uint32_t dst, const void *src)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

/* The same with an L2 eviction policy (the whole-line copies; KN_CUDA_IDX_EVICT, default 1 = evict-first).
 * The index keys are read once per decode step, so they are marked evict-first and do not push out what
 * the tail after the scan needs (its code, the scores, block tables), which otherwise comes back from HBM
 * after the scan streamed 100+ MB through L2. Measured on an H200 (decode run 19): the FP8 decode layer at
 * 1M 61.9 -> 51.7 us, bf16 90.0 -> 77.7 us (synced), and the scan itself faster at every size (bf16 1M
 * batch 1 85 -> 99 % of copy, FP8 70 -> 84 %, b2b): why the scan gains too is not analysed. */
__device__ __forceinline__ void irg_cp16_pol(uint32_t dst, const void *src, uint64_t pol)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "l"(pol));
}

__device__ __forceinline__ void irg_cp16_if_pol(bool on, uint32_t dst, const void *src, uint64_t pol)
{
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p cp.async.cg.shared.global.L2::cache_hint [%0], "
        "[%1], 16, %3;\n}\n" ::"r"(dst),
        "l"(src), "r"((int)on), "l"(pol));
}

/* evict != 0: evict-first; otherwise evict-normal (what a copy without a hint gets) */
__device__ __forceinline__ uint64_t irg_policy(int32_t evict)
{
    uint64_t pol;
    if (evict)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(pol));
    else
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(pol));
    return pol;
}

__device__ __forceinline__ void irg_cp4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

/* Two shared-memory layouts of a tile (LINES, KN_CUDA_IDX_LINES):
 *  - 0: each lane copies the 16-byte chunks it multiplies ([load k][lane] uint4, then (FP8) [row half][lane]
 *    scales) and reads back only its own copies: no synchronisation beyond its own wait_group. A warp's copy
 *    instruction covers 8 rows x 64 bytes: 8 half lines.
 *  - 1: the warp copies the tile as it lies in memory (lane L: bytes 16 L + 512 j, 4 whole 128-byte lines per
 *    instruction; FP8 scales: 64 bytes by lanes 0-3), rows stored with the chunk index XOR 4 on odd rows so
 *    that the read-back (lane: row gid, chunks tig + 4c) is free of bank conflicts; lanes read each other's
 *    copies, so a __syncwarp follows the wait. Fewer, whole-line requests for the same bytes. */
template <int DI, bool FP8, bool LINES> __host__ __device__ constexpr int irg_tile_u4()
{
    return LINES ? 16 * idx_cfg<DI, FP8>::ROWB / 16 + (FP8 ? 4 : 0)
                 : idx_cfg<DI, FP8>::LOADS * 32 + (FP8 ? 16 : 0);
}

template <int DI, bool FP8, int ST, int TPS, bool LINES> __host__ __device__ constexpr int irg_smem_bytes()
{
    return IRG_WARPS * ST * TPS * irg_tile_u4<DI, FP8, LINES>() * 16;
}

template <int DI, bool FP8, int ST, int TPS, bool LINES>
__global__ void __launch_bounds__(IRG_WARPS * 32, 2)
    k_index_decode_ring(const float *__restrict__ q, const int64_t *__restrict__ pos,
                        const int32_t *__restrict__ qseq, const int32_t *__restrict__ bt, int32_t bt_stride,
                        const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n,
                        int32_t nh, int32_t block, int32_t chunk, float *__restrict__ scores,
                        int32_t score_stride, int32_t evict, unsigned long long *prof)
{
    kn_griddep_launch(); /* the fused decode tail may be scheduled as this grid drains */
    const uint64_t t_entry = prof ? kn_prof_ns() : 0;
    using C = idx_cfg<DI, FP8>;
    constexpr int TU4 = irg_tile_u4<DI, FP8, LINES>(), SLOT = TPS * TU4, SLOTB = SLOT * 16;
    constexpr int ROWB = C::ROWB, TILEB = 16 * ROWB; /* bytes of keys per row / per tile */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t i = blockIdx.y;
    const int64_t p = pos[i];
    const int32_t nb = (int32_t)(p / block) + 1;
    const int32_t *btr = bt + (int64_t)qseq[i] * bt_stride;
    const int tiles = block / 16;
    const int mid = tiles / 2; /* issue step at which the page after the current one is looked up */
    if (prof) {
        prof += (((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * IRG_WARPS + w) * KN_PROF_IDX_SLOTS;
        if (lane == 0) prof[KN_PROF_IDX_ENTRY] = t_entry, prof[KN_PROF_IDX_EXIT] = t_entry;
    }
    const int32_t b_begin = blockIdx.x * chunk;
    int32_t ib = b_begin + w;
    const int32_t lim = min(nb, b_begin + chunk);
    if (ib >= lim) {
        if (prof && lane == 0) prof[KN_PROF_IDX_FIRST] = 0, prof[KN_PROF_IDX_INFO] = kn_prof_smid();
        return;
    }

    /* Lane constants. Copy side: source offset in a tile, destination offset in a slot (keys), scale
     * destination relative to it. Read side: uint4 offsets of the lane's chunks for even / odd c. */
    int64_t src_off;
    uint32_t kdst, sdst;
    int ro_e, ro_o;
    if (LINES) {
        const int row = 16 * lane / ROWB, ch = lane % (ROWB / 16); /* of copy j = 0; j adds 512 / ROWB rows */
        src_off = 16 * lane;
        kdst = (uint32_t)(row * ROWB + (ch ^ (4 * (row & 1))) * 16);
        sdst = (uint32_t)(TILEB + 16 * lane) - kdst;
        const int odd = gid & 1, base = gid * ROWB / 16 + tig;
        ro_e = base + 4 * odd, ro_o = base - 4 * odd;
    } else {
        src_off = (int64_t)gid * ROWB + 16 * tig;
        kdst = (uint32_t)lane * 16;
        sdst = C::LOADS * 32 * 16 - lane * 12; /* [row half][lane] floats after the chunks */
        ro_e = ro_o = lane;
    }

    /* issue side: the page being copied (block ib), the next one (ibn, pgn), this lane's source pointers */
    int64_t pg = btr[ib], pgn = 0;
    const uint8_t *src = keys + pg * block * ROWB + src_off;
    const float *ssrc = kscale + pg * block + (LINES ? 4 * (lane & 3) : gid);
    int32_t ibn = lim;
    int it = 0;
    const uint64_t pol = irg_policy(evict);

    extern __shared__ uint4 irg_smem[];
    const uint4 *ring = irg_smem + (size_t)w * ST * SLOT;
    const uint32_t ring0 = kn_smem_addr(ring) + kdst, ring_end = ring0 + ST * SLOTB;
    uint32_t dst = ring0;

    /* (block, first tile) of the steps in flight, oldest first */
    int32_t qb_[ST - 1], qt_[ST - 1];
#pragma unroll
    for (int k = 0; k < ST - 1; k++) qb_[k] = lim, qt_[k] = 0;

    auto issue = [&]() {
#pragma unroll
        for (int k = 0; k + 2 < ST; k++) qb_[k] = qb_[k + 1], qt_[k] = qt_[k + 1];
        if (ib < lim) {
#pragma unroll
            for (int tt = 0; tt < TPS; tt++) {
                if (LINES) {
#pragma unroll
                    for (int j = 0; j < TILEB / 512; j++)
                        irg_cp16_pol(dst + tt * TU4 * 16 + 512 * j, src + tt * TILEB + 512 * j, pol);
                    if (FP8) irg_cp16_if_pol(lane < 4, dst + sdst + tt * TU4 * 16, ssrc + tt * 16, pol);
                } else {
#pragma unroll
                    for (int h = 0; h < 2; h++) {
#pragma unroll
                        for (int c = 0; c < C::CH; c++)
                            irg_cp16(dst + (tt * TU4 + (h * C::CH + c) * 32) * 16,
                                     src + tt * TILEB + h * 8 * ROWB + 64 * c);
                        if (FP8) irg_cp4(dst + sdst + tt * TU4 * 16 + h * 128, ssrc + tt * 16 + 8 * h);
                    }
                }
            }
            if (it <= mid && mid < it + TPS) {
                ibn = ib + IRG_WARPS;
                pgn = ibn < lim ? btr[ibn] : 0;
            }
            qb_[ST - 2] = ib, qt_[ST - 2] = it;
            it += TPS;
            src += TPS * TILEB;
            ssrc += TPS * 16;
            if (it == tiles) {
                it = 0, ib = ibn, pg = pgn;
                src = keys + pg * block * ROWB + src_off;
                ssrc = kscale + pg * block + (LINES ? 4 * (lane & 3) : gid);
            }
        } else {
            qb_[ST - 2] = lim;
        }
        kn_cp_async_commit(); /* empty past the last page: the wait_group counts stay aligned */
        dst += SLOTB;
        if (dst == ring_end) dst = ring0;
    };

#pragma unroll
    for (int k = 0; k < ST - 1; k++) issue();

    uint32_t bq[C::KS][2];
    idx_query_frags<DI, FP8>(q, i, nh, gid, tig, bq);

    const uint4 *rd = ring;
    float mx0 = -INFINITY, mx1 = -INFINITY;
    int32_t pages_done = 0;
    for (;;) {
        const int32_t b = qb_[0];
        const int tile = qt_[0];
        if (b >= lim) break;        /* steps are issued in order: nothing valid follows */
        kn_cp_async_wait<ST - 2>(); /* this lane's copies of this step have landed */
        if (LINES) __syncwarp();    /* and so have the other lanes' */
        if (prof && pages_done == 0 && tile == 0 && lane == 0) prof[KN_PROF_IDX_FIRST] = kn_prof_ns();
        idx_tile<DI, FP8> cur[TPS];
#pragma unroll
        for (int tt = 0; tt < TPS; tt++) {
            const uint4 *t = rd + tt * TU4;
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int c = 0; c < C::CH; c++)
                    cur[tt].r[h * C::CH + c] = LINES ? t[((c & 1) ? ro_o : ro_e) + h * ROWB / 2 + 4 * c]
                                                     : t[lane + (h * C::CH + c) * 32];
            if (FP8) {
                const float *sc = reinterpret_cast<const float *>(t + (LINES ? TILEB / 16 : C::LOADS * 32));
                cur[tt].sc[0] = sc[LINES ? gid : lane];
                cur[tt].sc[1] = sc[LINES ? gid + 8 : 32 + lane];
            }
        }
        rd += SLOT;
        if (rd == ring + ST * SLOT) rd = ring;
        issue(); /* into the slot the previous step used: every lane read it last iteration */
        const int64_t t0 = (int64_t)b * block + tile * 16;
#pragma unroll
        for (int tt = 0; tt < TPS; tt++) {
            float c[4];
            idx_tile_scores<DI, FP8>(cur[tt], bq, c);
            idx_tile_max(c, t0 + tt * 16, gid, p, mx0, mx1);
        }
        if (tile + TPS == tiles) {
            idx_rows_max(mx0, mx1); /* page done: lanes 0 and 1 hold heads (0,1) and (2,3) */
            if (lane < 2) {
                const int g0 = 2 * lane;
                if (g0 < nh) scores[((int64_t)g0 * n + i) * score_stride + b] = mx0;
                if (g0 + 1 < nh) scores[((int64_t)(g0 + 1) * n + i) * score_stride + b] = mx1;
            }
            mx0 = mx1 = -INFINITY;
            pages_done++;
        }
    }
    kn_cp_async_wait<0>();
    if (prof && lane == 0) {
        prof[KN_PROF_IDX_EXIT] = kn_prof_ns();
        prof[KN_PROF_IDX_INFO] = kn_prof_smid() | (unsigned long long)pages_done << 32;
    }
}

void kn_index_ring_prof(unsigned long long *buf)
{
    g_irg_prof = buf;
}

int kn_index_ring_supported(const struct kn_cuda_msa_shape *sh, int fp8)
{
    return sh->n_idx_heads >= 1 && sh->n_idx_heads <= 4 && sh->idx_dim == 128 && sh->block % 16 == 0 &&
           (!fp8 || sh->block % 32 == 0);
}

template <int DI, bool FP8, int ST, int TPS, bool LINES>
static void launch_ring(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                        const struct kn_cuda_cache *c, const float *q, float *scores, int32_t score_stride,
                        cudaStream_t stream)
{
    static bool attr_set; /* raise the dynamic shared-memory limit once, not at every launch */
    constexpr int smem = irg_smem_bytes<DI, FP8, ST, TPS, LINES>();
    if (!attr_set) {
        cudaFuncSetAttribute(k_index_decode_ring<DI, FP8, ST, TPS, LINES>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        attr_set = true;
    }
    /* one wave of 2 CTAs per SM when the work allows, chunks of a multiple of 8 pages (every warp the same
     * count), at most 256 pages per CTA (as the persistent scan) */
    const int64_t want = (int64_t)kn_cuda_sm_count() * 2;
    int64_t chunk = kn_cdiv((int64_t)qb->max_blocks * qb->n, want);
    chunk = kn_cdiv(chunk, IRG_WARPS) * IRG_WARPS;
    if (chunk > 32 * IRG_WARPS) chunk = 32 * IRG_WARPS;
    dim3 grid((unsigned)kn_cdiv(qb->max_blocks, chunk), (unsigned)qb->n);
    k_index_decode_ring<DI, FP8, ST, TPS, LINES><<<grid, IRG_WARPS * 32, smem, stream>>>(
        q, qb->pos, qb->qseq, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale, qb->n,
        sh->n_idx_heads, sh->block, (int32_t)chunk, scores, score_stride,
        (int32_t)kn_cuda_knob_int("KN_CUDA_IDX_EVICT", 1), g_irg_prof);
}

int32_t kn_index_scores_decode_ring(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                    const struct kn_cuda_cache *c, const float *q, float *scores,
                                    int32_t score_stride, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n == 0 || qb->max_blocks == 0) return MM_OK;
    if (qb->n > 65535) return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_msa_index_scores: %d queries", qb->n);
    /* bf16: one 4 KB tile per step, 2 in flight per warp (as the persistent scan); FP8: two 2 KB tiles per
     * step, 2 steps in flight (KN_CUDA_IDX_TILE=1: one tile per step, 4 in flight, as the persistent scan's
     * FP8 ring). Whole-line copies unless KN_CUDA_IDX_LINES=0 (each lane copies its own chunks; FP8 needs
     * 16-byte aligned scales for the line layout). */
    const bool lines = kn_cuda_knob_int("KN_CUDA_IDX_LINES", 1) != 0 &&
                       ((uintptr_t)c->idx_scale % 16 == 0 || c->idx_dtype != KN_IDX_FP8);
    const bool fp8_t16 = kn_cuda_knob_int("KN_CUDA_IDX_TILE", 2) == 1;
    if (c->idx_dtype != KN_IDX_FP8) {
        if (lines)
            launch_ring<128, false, 3, 1, true>(sh, qb, c, q, scores, score_stride, stream);
        else
            launch_ring<128, false, 3, 1, false>(sh, qb, c, q, scores, score_stride, stream);
    } else if (fp8_t16) {
        if (lines)
            launch_ring<128, true, 5, 1, true>(sh, qb, c, q, scores, score_stride, stream);
        else
            launch_ring<128, true, 5, 1, false>(sh, qb, c, q, scores, score_stride, stream);
    } else if (lines) {
        launch_ring<128, true, 3, 2, true>(sh, qb, c, q, scores, score_stride, stream);
    } else {
        launch_ring<128, true, 3, 2, false>(sh, qb, c, q, scores, score_stride, stream);
    }
    KN_LAUNCHED("kn_cuda_msa_index_scores (ring)");
    return MM_OK;
}
