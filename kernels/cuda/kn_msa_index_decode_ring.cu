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
 * kn_index_tile.cuh's, as in the other scans. Static split only (contiguous chunks of pages per CTA, by
 * default one wave of 2 CTAs per SM, warp w taking pages w, w + 8, ... of its CTA's chunk; knobs for more
 * warps per page and smaller chunks, see k_index_decode_ring), no page stealing; idx_dim 128, block a
 * multiple of 16 x TPS tokens (kn_index_ring_supported). */
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
 *    instruction; FP8 scales per page in buffers of their own, irg_scale_bytes), rows stored with the
 *    chunk index XOR 4 on odd rows so that the read-back (lane: row gid, chunks tig + 4c) is free of bank
 *    conflicts; lanes read each other's copies, so a __syncwarp follows the wait. Fewer, whole-line requests
 *    for the same bytes. */
template <int DI, bool FP8, bool LINES> __host__ __device__ constexpr int irg_tile_u4()
{
    return LINES ? 16 * idx_cfg<DI, FP8>::ROWB / 16 : idx_cfg<DI, FP8>::LOADS * 32 + (FP8 ? 16 : 0);
}

/* FP8 scales in the line layout: a warp copies the scales of its part of a page (tpp x 64 bytes: 512 at block
 * 128) with one instruction at the page's first step, into the next of ST buffers after the rings, instead of
 * 64 bytes with each tile: a 128-byte request per 4 KB step measured ~1.2 us of the 39 us FP8 scan at 1M
 * batch 1 (run r1: 38.9 -> 37.7 us with no scale copies at all). ST buffers: the page being read, the pages
 * of the ST - 1 steps in flight, and the one issued reuses the buffer of a page read at least one iteration
 * before (as the ring slots). Bytes of the scale buffers of a CTA: */
__host__ __device__ constexpr int irg_scale_bytes(int st, int block, int parts)
{
    return IRG_WARPS * st * (block / 16 / parts) * 64;
}

template <int DI, bool FP8, int ST, int TPS, bool LINES> __host__ __device__ constexpr int irg_smem_bytes()
{
    return IRG_WARPS * ST * TPS * irg_tile_u4<DI, FP8, LINES>() * 16;
}

/* Page maxima of split pages (parts > 1): [page of the chunk][part][4 heads] floats after the rings, combined
 * by the CTA at its end. At most IRG_PART_SLOTS (page, part) pairs per CTA (8 KB: 2 CTAs still fit an SM). */
#define IRG_PART_SLOTS 512

/* Work split (KN_CUDA_IDX_SPLIT, KN_CUDA_IDX_CHUNK): a CTA takes `chunk` consecutive pages of one query; its
 * warps form IRG_WARPS / parts groups, group g taking pages g, g + groups, ... of the chunk, and warp r of a
 * group the r-th of `parts` equal runs of tiles of each of those pages. parts = 1 is the whole-page walk;
 * parts > 1 puts more warps on few pages (at 128K batch 1 one page per warp leaves half the warps idle).
 *
 * Programmatic dependent launch (default up to 32768 pages, KN_CUDA_IDX_PDL; one query per sequence): the
 * scan may start while the kernel before it (the index-key append of this step) still runs. Before
 * griddepcontrol.wait it reads only what that kernel may not write: positions, sequence ids, block tables,
 * and the keys of every page but the query's own (last) one, which the append writes; the own page's copies,
 * the query and the score stores come after the wait (a no-op when the launch was not programmatic). So the
 * kernel right before the scan in the stream must not write anything else the scan reads
 * (kn_cuda_cache_append with one token per sequence does not). unsafe_own != 0 (tests only) copies the own
 * page before the wait, so that a test can show it would catch that. */
template <int DI, bool FP8, int ST, int TPS, bool LINES>
__global__ void __launch_bounds__(IRG_WARPS * 32, 2)
    k_index_decode_ring(const float *__restrict__ q, const int64_t *__restrict__ pos,
                        const int32_t *__restrict__ qseq, const int32_t *__restrict__ bt, int32_t bt_stride,
                        const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n,
                        int32_t nh, int32_t block, int32_t chunk, int32_t parts, float *__restrict__ scores,
                        int32_t score_stride, int32_t evict, int32_t unsafe_own, int32_t diag, int32_t inter,
                        unsigned long long *prof)
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
    const int32_t own = nb - 1; /* the page the append before this kernel may be writing */
    const int tpp = block / 16 / parts, groups = IRG_WARPS / parts; /* tiles per part */
    const int it_begin = (w % parts) * tpp, it_end = it_begin + tpp;
    const int mid = it_begin + tpp / 2; /* issue step at which the warp's next page is looked up */
    if (prof) {
        prof += (((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * IRG_WARPS + w) * KN_PROF_IDX_SLOTS;
        if (lane == 0) prof[KN_PROF_IDX_ENTRY] = t_entry, prof[KN_PROF_IDX_EXIT] = t_entry;
    }
    /* inter (KN_CUDA_IDX_INTER, parts 1 only): CTA x takes pages groups x + w, then that plus groups x the
     * grid, ... (the grid sweeps the sequence together) instead of a contiguous chunk */
    const int32_t b_begin = inter ? 0 : blockIdx.x * chunk;
    int32_t ib = inter ? (int32_t)blockIdx.x * groups + w : b_begin + w / parts;
    const int32_t gstep = inter ? groups * (int32_t)gridDim.x : groups;
    const int32_t lim = inter ? nb : min(nb, b_begin + chunk);
    if (ib >= lim) {
        if (prof && lane == 0) prof[KN_PROF_IDX_FIRST] = 0, prof[KN_PROF_IDX_INFO] = kn_prof_smid();
        if (parts == 1) return; /* split pages: the CTA's final combine needs every warp at its barrier */
    }

    /* Lane constants. Copy side: source offset in a tile, destination offset in a slot (keys), and (per-lane
     * layout) the scale destination relative to it. Read side: uint4 offsets of the lane's chunks for even /
     * odd c. */
    int64_t src_off;
    uint32_t kdst, sdst = 0;
    int ro_e, ro_o;
    if (LINES) {
        const int row = 16 * lane / ROWB, ch = lane % (ROWB / 16); /* of copy j = 0; j adds 512 / ROWB rows */
        src_off = 16 * lane;
        kdst = (uint32_t)(row * ROWB + (ch ^ (4 * (row & 1))) * 16);
        const int odd = gid & 1, base = gid * ROWB / 16 + tig;
        ro_e = base + 4 * odd, ro_o = base - 4 * odd;
    } else {
        src_off = (int64_t)gid * ROWB + 16 * tig;
        kdst = (uint32_t)lane * 16;
        sdst = C::LOADS * 32 * 16 - lane * 12; /* [row half][lane] floats after the chunks */
        ro_e = ro_o = lane;
    }

    /* issue side: the page being copied (block ib), the next one (ibn, pgn), this lane's source pointers */
    const int64_t src_off0 = src_off + (int64_t)it_begin * TILEB; /* the warp's first tile of a page */
    const int sc_off0 = it_begin * 16 + (LINES ? 0 : gid);
    int64_t pg = ib < lim ? btr[ib] : 0, pgn = 0;
    const uint8_t *src = keys + pg * block * ROWB + src_off0;
    const float *ssrc = kscale + pg * block + sc_off0;
    int32_t ibn = lim;
    int it = it_begin;
    bool wait_own = !unsafe_own; /* griddepcontrol.wait still due before the own page is copied */
    const uint64_t pol = LINES ? irg_policy(evict) : 0;

    extern __shared__ uint4 irg_smem[];
    const uint4 *ring = irg_smem + (size_t)w * ST * SLOT;
    constexpr bool PSC = FP8 && LINES; /* scales per page (irg_scale_bytes) */
    const int scu4 = tpp * 4;          /* uint4 of scales of the warp's part of a page */
    const uint4 *sbuf = irg_smem + (size_t)IRG_WARPS * ST * SLOT + (size_t)w * ST * scu4;
    int wbuf = 0, rbuf = 0; /* scale buffers of the next page issued / of the page being read */
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
            if (ib == own && wait_own) {
                kn_griddep_wait(); /* the append of this step has completed and is visible */
                wait_own = false;
            }
            if (PSC && it == it_begin) { /* the scales of this part of the page, to the next buffer */
                if (!(diag & 1)) {
                    const uint32_t sd = kn_smem_addr(sbuf + wbuf * scu4);
                    for (int o = lane; o < scu4; o += 32) irg_cp16_pol(sd + 16 * o, ssrc + 4 * o, pol);
                }
                wbuf = wbuf + 1 == ST ? 0 : wbuf + 1;
            }
#pragma unroll
            for (int tt = 0; tt < TPS; tt++) {
                if (LINES) {
#pragma unroll
                    for (int j = 0; j < TILEB / 512; j++)
                        irg_cp16_pol(dst + tt * TU4 * 16 + 512 * j, src + tt * TILEB + 512 * j, pol);
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
                ibn = ib + gstep;
                pgn = ibn < lim ? btr[ibn] : 0;
            }
            qb_[ST - 2] = ib, qt_[ST - 2] = it;
            it += TPS;
            src += TPS * TILEB;
            ssrc += TPS * 16;
            if (it == it_end) {
                it = it_begin, ib = ibn, pg = pgn;
                src = keys + pg * block * ROWB + src_off0;
                ssrc = kscale + pg * block + sc_off0;
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

    kn_griddep_wait(); /* the query and the score rows: after the kernel before this one (PDL) */
    uint32_t bq[C::KS][2];
    idx_query_frags<DI, FP8>(q, i, nh, gid, tig, bq);
    /* [page][part][4], after the rings and the scale buffers */
    float *part = reinterpret_cast<float *>(irg_smem + IRG_WARPS * ST * (SLOT + (PSC ? scu4 : 0)));

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
            if (PSC) {
                const float *sc =
                    reinterpret_cast<const float *>(sbuf + rbuf * scu4) + (tile - it_begin + tt) * 16;
                cur[tt].sc[0] = sc[gid];
                cur[tt].sc[1] = sc[gid + 8];
            } else if (FP8) {
                const float *sc = reinterpret_cast<const float *>(t + C::LOADS * 32);
                cur[tt].sc[0] = sc[lane];
                cur[tt].sc[1] = sc[32 + lane];
            }
        }
        rd += SLOT;
        if (rd == ring + ST * SLOT) rd = ring;
        issue(); /* into the slot the previous step used: every lane read it last iteration */
        const int64_t t0 = (int64_t)b * block + tile * 16;
#pragma unroll
        for (int tt = 0; tt < TPS; tt++) {
            float c[4];
            if (diag & 2) { /* timing only: no products, the loaded words folded so that they stay live */
                uint32_t x = 0;
#pragma unroll
                for (int r = 0; r < C::LOADS; r++)
                    x ^= cur[tt].r[r].x ^ cur[tt].r[r].y ^ cur[tt].r[r].z ^ cur[tt].r[r].w;
                c[0] = c[1] = c[2] = c[3] = __uint_as_float(x & 0x3fffffffu) * cur[tt].sc[0];
            } else {
                idx_tile_scores<DI, FP8>(cur[tt], bq, c);
            }
            idx_tile_max(c, t0 + tt * 16, gid, p, mx0, mx1);
        }
        if (tile + TPS == it_end) {
            idx_rows_max(mx0, mx1); /* the warp's part of the page done */
            if (parts == 1)
                idx_store_page_max(scores, score_stride, nh, n, i, b, lane, mx0, mx1);
            else if (lane < 2)
                *reinterpret_cast<float2 *>(part + ((b - b_begin) * parts + w % parts) * 4 + 2 * lane) =
                    make_float2(mx0, mx1);
            mx0 = mx1 = -INFINITY;
            pages_done++;
            rbuf = rbuf + 1 == ST ? 0 : rbuf + 1;
        }
    }
    kn_cp_async_wait<0>();
    if (parts > 1) { /* every (page, part) of the chunk is in shared memory: combine and store */
        __syncthreads();
        for (int e = threadIdx.x; e < (lim - b_begin) * nh; e += IRG_WARPS * 32) {
            const int lp = e / nh, h = e - lp * nh;
            float m = part[lp * parts * 4 + h];
            for (int r = 1; r < parts; r++) m = fmaxf(m, part[(lp * parts + r) * 4 + h]);
            scores[((int64_t)h * n + i) * score_stride + b_begin + lp] = m;
        }
    }
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

/* How the pages are split (see k_index_decode_ring), chosen per call */
struct irg_split {
    int32_t chunk, parts;
};

static struct irg_split irg_pick_split(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                       int tps)
{
    struct irg_split sp;
    /* KN_CUDA_IDX_SPLIT: warps per page (1, 2, 4, 8; each part a whole number of ring steps) */
    int parts = kn_cuda_knob_int("KN_CUDA_IDX_SPLIT", 1);
    const int steps = sh->block / 16 / tps;
    if (parts < 1) parts = 1;
    while (parts > 1 && (parts > IRG_WARPS || IRG_WARPS % parts || steps % parts)) parts >>= 1;
    /* one wave of 2 CTAs per SM when the work allows, chunks of a multiple of the warp groups (every warp
     * the same count), at most 256 pages per CTA (as the persistent scan); KN_CUDA_IDX_CHUNK: pages per CTA
     * (rounded up to the groups), so that several waves of smaller CTAs can be compared */
    const int64_t want = (int64_t)kn_cuda_sm_count() * 2;
    int64_t chunk = kn_cuda_knob_int("KN_CUDA_IDX_CHUNK", 0);
    if (chunk <= 0) chunk = kn_cdiv((int64_t)qb->max_blocks * qb->n, want);
    if (chunk > 32 * IRG_WARPS) chunk = 32 * IRG_WARPS;
    int64_t groups = IRG_WARPS / parts;
    chunk = kn_cdiv(chunk, groups) * groups;
    if (parts > 1 && chunk * parts > IRG_PART_SLOTS) { /* large work: whole pages per warp */
        parts = 1;
        chunk = kn_cdiv(chunk, IRG_WARPS) * IRG_WARPS;
    }
    sp.chunk = (int32_t)chunk;
    sp.parts = parts;
    return sp;
}

template <int DI, bool FP8, int ST, int TPS, bool LINES>
static void launch_ring(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                        const struct kn_cuda_cache *c, const float *q, float *scores, int32_t score_stride,
                        cudaStream_t stream)
{
    auto kern = k_index_decode_ring<DI, FP8, ST, TPS, LINES>;
    const struct irg_split sp = irg_pick_split(sh, qb, TPS);
    const int smem = irg_smem_bytes<DI, FP8, ST, TPS, LINES>() +
                     (FP8 && LINES ? irg_scale_bytes(ST, sh->block, sp.parts) : 0) +
                     (sp.parts > 1 ? sp.chunk * sp.parts * 16 : 0);
    (void)kn_smem_attr((const void *)kern, smem); /* a failure shows as the launch's error */
    /* Programmatic dependent launch after the previous kernel (see the kernel), one query per sequence only
     * (several would make more than the last page fresh). KN_CUDA_IDX_PDL unset: on up to 32768 pages in all
     * (1M tokens at batch 1, 128K-512K at batch 8), where the scan's launch and first copies overlapping the
     * step's append measured +2 to +7 points of copy back to back (+4.6 FP8 at 1M batch 1) and the FP8 decode
     * layer 1 us faster b2b; at batch 64 it measured level (bf16 128K: -1 point), so plain there (scan
     * runs 2-3, docs/progress/cuda-scan.md). 0: plain, 1: always, 2: the own page copied before the wait
     * (tests only: a wrong order, to be caught). */
    const int knob_pdl = kn_cuda_knob_int("KN_CUDA_IDX_PDL", -1);
    int pdl = 0;
    if (qb->max_q_per_seq == 1) pdl = knob_pdl >= 0 ? knob_pdl : (int64_t)qb->n * qb->max_blocks <= 32768;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    cfg.gridDim = dim3((unsigned)kn_cdiv(qb->max_blocks, sp.chunk), (unsigned)qb->n);
    cfg.blockDim = dim3(IRG_WARPS * 32);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.stream = stream;
    const int32_t evict = kn_cuda_knob_int("KN_CUDA_IDX_EVICT", 1), unsafe_own = pdl == 2;
    /* KN_CUDA_IDX_DIAG (timing only, wrong scores): bit 0 skips the FP8 scale copies, bit 1 the products */
    const int32_t diag = kn_cuda_knob_int("KN_CUDA_IDX_DIAG", 0);
    const int32_t inter = sp.parts == 1 && kn_cuda_knob_int("KN_CUDA_IDX_INTER", 0) != 0;
    /* a launch error stays pending for the caller's KN_LAUNCHED */
    (void)kn_launch_pdl(&cfg, at, 0, pdl != 0, kern, q, qb->pos, qb->qseq, qb->block_table, qb->bt_stride,
                        (const uint8_t *)c->idx, (const float *)c->idx_scale, qb->n, sh->n_idx_heads,
                        sh->block, sp.chunk, sp.parts, scores, score_stride, evict, unsafe_own, diag, inter,
                        g_irg_prof);
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
     * 16-byte aligned scales for the line layout, and blocks of at most 1024 so that the scale buffers fit).
     */
    const bool lines =
        kn_cuda_knob_int("KN_CUDA_IDX_LINES", 1) != 0 &&
        (c->idx_dtype != KN_IDX_FP8 || ((uintptr_t)c->idx_scale % 16 == 0 && sh->block <= 1024));
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
