/* Index scoring with one pass over each query's key pages (decode: one query per sequence, a long key
 * stream). Bandwidth-bound, so the design is about bytes in flight and nothing else:
 *
 *  - One warp owns a whole page at a time and walks it 16 tokens (one m16n8k16 tile) at a time; the next
 *    tiles stream into a per-warp cp.async ring in shared memory (2-4 tiles ahead, across page ends), which
 *    keeps bytes in flight without holding them in registers.
 *  - The tile layout and product (AB-swapped, hi/lo query columns, permuted k index, FP8 converted in
 *    registers) are kn_index_tile.cuh's, shared with the other two decode scans. Each lane copies its own
 *    chunks into the ring and reads back only those (consecutive lanes, consecutive 16 bytes: no bank
 *    conflicts, no barriers).
 *  - The block max is kept in registers per lane and reduced across the warp once per page.
 * FP8 tiles are half the bytes, so their ring is deeper (4 tiles ahead instead of 2) for the same bytes in
 * flight.
 * The grid is sized to one wave of resident CTAs when the work allows: a second, partial wave would leave
 * most of the GPU idle for its duration.
 * Ring depth (ST) and CTAs per SM (MINB) are template parameters. Measured on an H200 in one run
 * (bench/cuda/README.md): a deeper FP8 ring (5 tiles in flight) and one CTA per SM with deep rings (5 bf16 /
 * 11 FP8 tiles per warp) were no faster at batch 1 and up to 10 points slower at batch 8, so the launches
 * use 2 CTAs per SM with 2 (bf16) or 4 (FP8) tiles in flight per warp. */
#include "kn_decode_prof.cuh"
#include "kn_index_tile.cuh"
#include "kn_msa_kernels.cuh"

#define IDX_WARPS 8
#define IDX_STAGES 3     /* bf16: 4 KB tiles, 2 in flight per warp */
#define IDX_STAGES_FP8 5 /* e4m3: 2 KB tiles, 4 in flight per warp */
/* How a query's pages are split over its CTAs (KN_CUDA_IDX): contiguous chunks of a multiple of 8 pages
 * (0), or as even as they go over 2 x SMs CTAs (1). Pages strided over all the warps (every warp taking
 * every (CTAs x 8)-th page, so that all sweep one window of the keys) measured no faster at 1M batch 1. */
#define IDX_SPLIT_CHUNK 0
#define IDX_SPLIT_EVEN 1

/* Benchmark hook (kn_decode_prof.cuh): where the scan writes per-warp timestamps, NULL when off. */
static unsigned long long *g_idx_prof;

/* uint4 per ring slot: the tile's chunks for 32 lanes, then (FP8) 64 scales */
template <int DI, bool FP8> __host__ __device__ constexpr int idx_slot_u4()
{
    return idx_cfg<DI, FP8>::LOADS * 32 + (FP8 ? 16 : 0);
}

template <int DI, bool FP8> __host__ __device__ constexpr int idx_smem_bytes(int st)
{
    return IDX_WARPS * st * idx_slot_u4<DI, FP8>() * 16;
}

/* STEAL: the first page of each warp is static (global warp id), the others are handed out one at a time by
 * an atomic counter per query (steal[i], zeroed before the launch): a single-wave grid with a static split
 * ends when its slowest warp does, and at batch 1 that tail was ~10 us of a 78 us scan. Otherwise the CTA's
 * chunk of pages, warp w taking pages w, w + IDX_WARPS, ... of it. Either way the next page's block index and
 * page id are fetched half a page ahead, so neither the atomic nor the block-table load stalls the ring. */
template <int DI, bool FP8, bool STEAL, int ST, int MINB>
__global__ void __launch_bounds__(IDX_WARPS * 32, MINB)
    k_index_decode(const float *__restrict__ q, const int32_t *__restrict__ qseq,
                   const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                   const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n, int32_t nh,
                   int32_t block, int32_t chunk, int32_t split, int32_t late, float *__restrict__ scores,
                   int32_t score_stride, int32_t *__restrict__ steal, unsigned long long *prof)
{
    /* a dependent launch (the fused decode attention) may be scheduled as we drain; late: only once a warp
     * of every CTA is done, so that its CTAs start on SMs the scan has left */
    if (!late) kn_griddep_launch();
    const uint64_t t_entry = prof ? kn_prof_ns() : 0;
    constexpr int KS = idx_cfg<DI, FP8>::KS;
    constexpr int ROWB = idx_cfg<DI, FP8>::ROWB;
    constexpr int CH = idx_cfg<DI, FP8>::CH, LOADS = idx_cfg<DI, FP8>::LOADS;
    constexpr int SLOT = idx_slot_u4<DI, FP8>();
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t i = blockIdx.y;
    const int64_t p = pos[i];
    const int32_t nb = (int32_t)(p / block) + 1;
    const int32_t *btr = bt + (int64_t)qseq[i] * bt_stride;
    const int tiles = block / 16;
    const int mid = tiles / 2; /* issue tile at which the page after the current one is looked up */
    if (prof) {                /* warp slots: entry, first tile landed, exit, SM id | pages << 32 */
        prof += (((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * IDX_WARPS + w) * KN_PROF_IDX_SLOTS;
        if (lane == 0) prof[KN_PROF_IDX_ENTRY] = t_entry, prof[KN_PROF_IDX_EXIT] = t_entry;
    }

    /* issue side: page being issued (block ib, page id pg, next tile it), the next page (ibn, pgn) */
    int32_t ib, lim;
    if (STEAL) {
        ib = blockIdx.x * IDX_WARPS + w;
        lim = nb;
    } else if (split == IDX_SPLIT_EVEN) { /* chunk = max_blocks, split as evenly as the CTAs allow */
        const int32_t b_begin = (int32_t)((int64_t)blockIdx.x * chunk / gridDim.x);
        ib = b_begin + w;
        lim = min(nb, (int32_t)((int64_t)(blockIdx.x + 1) * chunk / gridDim.x));
    } else {
        const int32_t b_begin = blockIdx.x * chunk;
        ib = b_begin + w;
        lim = min(nb, b_begin + chunk);
    }
    if (ib >= lim) {
        if (prof && lane == 0) prof[KN_PROF_IDX_FIRST] = 0, prof[KN_PROF_IDX_INFO] = kn_prof_smid();
        if (late) kn_griddep_launch();
        return;
    }
    const int32_t nstatic = gridDim.x * IDX_WARPS;
    int32_t grab = 0; /* lane 0: the counter value of an atomic in flight (STEAL) */
    if (STEAL && lane == 0) grab = atomicAdd(steal + i, 1);
    int64_t pg = btr[ib], pgn = 0;
    int32_t ibn = lim;
    int it = 0;

    extern __shared__ uint4 idx_smem[];
    uint4 *ring = idx_smem + (size_t)w * ST * SLOT;
    const uint32_t ring_s = kn_smem_addr(ring);
    int slot_iss = 0;

    /* Per-warp ring of ST tiles in shared memory, filled by cp.async: bytes in flight cost no registers.
     * Every lane reads back only what it copied itself, so the lane's own wait_group is the only
     * synchronisation: no barriers. Slot layout: [load k][lane] uint4, then (FP8) [row half][lane] scales.
     * Every call commits a group (empty past the last page) so that wait_group counts stay aligned. */
#define IDX_ISSUE()                                                                                          \
    do {                                                                                                     \
        _Pragma("unroll") for (int k = 0; k + 2 < ST; k++) qb_[k] = qb_[k + 1], qt_[k] = qt_[k + 1];         \
        if (ib < lim) {                                                                                      \
            const uint32_t slot__ = ring_s + (uint32_t)(slot_iss * SLOT) * 16u;                              \
            _Pragma("unroll") for (int h = 0; h < 2; h++)                                                    \
            {                                                                                                \
                const int row = it * 16 + gid + 8 * h;                                                       \
                const uint8_t *rp = keys + (pg * block + row) * ROWB;                                        \
                _Pragma("unroll") for (int c = 0; c < CH; c++) kn_cp_async16(                                \
                    slot__ + (uint32_t)(((h * CH + c) * 32 + lane) * 16), rp + 16 * (tig + 4 * c), 16);      \
                if (FP8)                                                                                     \
                    kn_cp_async4(slot__ + (uint32_t)(LOADS * 32 * 16 + (h * 32 + lane) * 4),                 \
                                 kscale + pg * block + row);                                                 \
            }                                                                                                \
            if (it == mid) {                                                                                 \
                ibn = STEAL ? nstatic + __shfl_sync(0xffffffffu, grab, 0) : ib + IDX_WARPS;                  \
                if (STEAL && lane == 0) grab = atomicAdd(steal + i, 1);                                      \
                pgn = ibn < lim ? btr[ibn] : 0;                                                              \
            }                                                                                                \
            qb_[ST - 2] = ib, qt_[ST - 2] = it;                                                              \
            if (++it == tiles) it = 0, ib = ibn, pg = pgn;                                                   \
        } else {                                                                                             \
            qb_[ST - 2] = lim;                                                                               \
        }                                                                                                    \
        kn_cp_async_commit();                                                                                \
        slot_iss = slot_iss + 1 == ST ? 0 : slot_iss + 1;                                                    \
    } while (0)

    /* (block, tile) of the units in flight, oldest first: a shift register the issuer appends to */
    int32_t qb_[ST - 1], qt_[ST - 1];
#pragma unroll
    for (int k = 0; k < ST - 1; k++) qb_[k] = lim, qt_[k] = 0;
#pragma unroll
    for (int k = 0; k < ST - 1; k++) IDX_ISSUE();

    /* query fragments (after the first copies are in flight): column gid = hi part (gid < 4) or lo part
     * (gid >= 4) of head gid & 3 */
    uint32_t bq[KS][2];
    idx_query_frags<DI, FP8>(q, i, nh, gid, tig, bq);

    int slot_con = 0;
    float mx0 = -INFINITY, mx1 = -INFINITY;
    int32_t pages_done = 0;
    for (;;) {
        const int32_t b = qb_[0];
        const int tile = qt_[0];
        if (b >= lim) break;        /* units are issued in order: nothing valid follows */
        kn_cp_async_wait<ST - 2>(); /* this lane's copies of this unit have landed */
        if (prof && pages_done == 0 && tile == 0 && lane == 0) prof[KN_PROF_IDX_FIRST] = kn_prof_ns();
        idx_tile<DI, FP8> cur;
        {
            const uint4 *slot = ring + slot_con * SLOT;
#pragma unroll
            for (int k = 0; k < LOADS; k++) cur.r[k] = slot[k * 32 + lane];
            if (FP8) {
                const float *sc = (const float *)(slot + LOADS * 32);
                cur.sc[0] = sc[lane];
                cur.sc[1] = sc[32 + lane];
            }
        }
        slot_con = slot_con + 1 == ST ? 0 : slot_con + 1;
        IDX_ISSUE(); /* into the slot the previous unit used: this lane read it last iteration */
        float c[4];
        idx_tile_scores<DI, FP8>(cur, bq, c);
        idx_tile_max(c, (int64_t)b * block + tile * 16, gid, p, mx0, mx1);
        if (tile == tiles - 1) {
            idx_rows_max(mx0, mx1); /* page done */
            idx_store_page_max(scores, score_stride, nh, n, i, b, lane, mx0, mx1);
            mx0 = mx1 = -INFINITY;
            pages_done++;
        }
    }
    kn_cp_async_wait<0>();
    if (late) kn_griddep_launch();
    if (prof && lane == 0) {
        prof[KN_PROF_IDX_EXIT] = kn_prof_ns();
        prof[KN_PROF_IDX_INFO] = kn_prof_smid() | (unsigned long long)pages_done << 32;
    }
#undef IDX_ISSUE
}

int kn_index_decode_supported(const struct kn_cuda_msa_shape *sh)
{
    return sh->n_idx_heads >= 1 && sh->n_idx_heads <= 4 && sh->block % 16 == 0 &&
           (sh->idx_dim == 128 || sh->idx_dim == 64 || sh->idx_dim == 32);
}

template <int DI, bool FP8, bool STEAL, int ST, int MINB>
static void launch_index_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const float *q, float *scores,
                                int32_t score_stride, int32_t *steal, cudaStream_t stream)
{
    const int smem = idx_smem_bytes<DI, FP8>(ST);
    (void)kn_smem_attr((const void *)k_index_decode<DI, FP8, STEAL, ST, MINB>, smem); /* fails at launch */
    /* static split: one wave of resident CTAs (MINB per SM) when the work allows. Two per SM: chunks of a
     * multiple of IDX_WARPS pages (every warp the same count). One per SM: any chunk, so that every SM gets
     * a CTA (rounding up to 8 pages would leave some idle); warps differ by at most one page. */
    const int64_t want = (int64_t)kn_cuda_sm_count() * MINB;
    int64_t chunk = kn_cdiv((int64_t)qb->max_blocks * qb->n, want);
    if (MINB > 1) chunk = kn_cdiv(chunk, IDX_WARPS) * IDX_WARPS;
    if (chunk < IDX_WARPS) chunk = IDX_WARPS;
    if (chunk > 32 * IDX_WARPS * (3 - MINB)) chunk = 32 * IDX_WARPS * (3 - MINB);
    /* STEAL: one wave of CTAs shared among the queries, each warp at least one page */
    int64_t gx = kn_cdiv(qb->max_blocks, chunk);
    /* even: at least one wave of CTAs (each at least one page), pages split as evenly as they go: chunks of
     * 8 pages leave slots empty when the work is small (1M batch 1: 256 of 264) */
    const int knob = kn_cuda_knob_int("KN_CUDA_IDX", 0);
    const int32_t split = !STEAL && knob == 1 ? IDX_SPLIT_EVEN : IDX_SPLIT_CHUNK;
    if (split == IDX_SPLIT_EVEN) {
        int64_t g1 = want / qb->n;
        if (g1 > qb->max_blocks) g1 = qb->max_blocks;
        if (g1 > gx) gx = g1;
        chunk = qb->max_blocks;
    }
    if (STEAL) {
        gx = want / qb->n;
        const int64_t most = kn_cdiv(qb->max_blocks, IDX_WARPS);
        if (gx > most) gx = most;
        if (gx < 1) gx = 1;
    }
    dim3 grid((unsigned)gx, (unsigned)qb->n);
    k_index_decode<DI, FP8, STEAL, ST, MINB><<<grid, IDX_WARPS * 32, smem, stream>>>(
        q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale, qb->n,
        sh->n_idx_heads, sh->block, (int32_t)chunk, split, kn_cuda_knob("KN_CUDA_IDX_TRIGGER", 0), scores,
        score_stride, steal, g_idx_prof);
}

template <int DI, bool FP8, int ST, int MINB>
static void launch_index_decode2(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const float *q, float *scores,
                                 int32_t score_stride, int32_t *steal, cudaStream_t stream)
{
    if (steal)
        launch_index_decode<DI, FP8, true, ST, MINB>(sh, qb, c, q, scores, score_stride, steal, stream);
    else
        launch_index_decode<DI, FP8, false, ST, MINB>(sh, qb, c, q, scores, score_stride, NULL, stream);
}

int32_t kn_index_scores_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                               const struct kn_cuda_cache *c, const float *q, float *scores,
                               int32_t score_stride, int32_t *steal, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n == 0 || qb->max_blocks == 0) return MM_OK;
    if (qb->n > 65535) return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_msa_index_scores: %d queries", qb->n);
    const bool fp8 = c->idx_dtype == KN_IDX_FP8;
    if (fp8 && sh->idx_dim % 64)
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_msa_index_scores: fp8 keys need idx_dim %% 64 == 0");
    /* Measured on H200s (docs/progress/cuda-fp8.md, "fp8 runs 2 and 3"): the ring with whole-line copies
     * (kn_msa_index_decode_ring.cu, KN_CUDA_IDX=4) leads every other scan in every cell measured (128K-1M,
     * batch 1-64, bf16 and FP8; 1M batch 1 b2b: bf16 96-98 % of copy against 84-85 % (per-page), FP8 82-83 %
     * against 74 % (stream)). Where it does not apply (idx_dim != 128, FP8 blocks not a multiple of 32), the
     * previous choice ("final run 2", "decode runs 8-10"): bf16 from 512K, one short CTA per page for a
     * single query and the grid-stride stream from 8 queries; FP8 at 1M for one query, the stream; the
     * persistent scan elsewhere. */
    int idx_knob = kn_cuda_knob_int("KN_CUDA_IDX", -1);
    if (idx_knob < 0) {
        if (kn_index_ring_supported(sh, fp8))
            idx_knob = 4;
        else if (qb->max_blocks < 4096)
            idx_knob = 0;
        else if (!fp8)
            idx_knob = qb->n == 1 ? 2 : qb->n >= 8 ? 3 : 0;
        else
            idx_knob = qb->n == 1 && qb->max_blocks >= 8192 ? 3 : 0;
    }
    if (!steal && idx_knob == 2 && kn_index_pages_supported(sh))
        return kn_index_scores_decode_pages(sh, qb, c, q, scores, score_stride, stream, err);
    if (!steal && idx_knob == 3 && kn_index_stream_supported(sh))
        return kn_index_scores_decode_stream(sh, qb, c, q, scores, score_stride, stream, err);
    if (!steal && idx_knob == 4 && kn_index_ring_supported(sh, fp8))
        return kn_index_scores_decode_ring(sh, qb, c, q, scores, score_stride, stream, err);
    if (steal)
        KN_CU(cudaMemsetAsync(steal, 0, sizeof(int32_t) * (size_t)qb->n, stream), "index scores: counters");
    switch (sh->idx_dim * 2 + fp8) {
    case 256:
        launch_index_decode2<128, false, IDX_STAGES, 2>(sh, qb, c, q, scores, score_stride, steal, stream);
        break;
    case 257:
        launch_index_decode2<128, true, IDX_STAGES_FP8, 2>(sh, qb, c, q, scores, score_stride, steal, stream);
        break;
    case 128:
        launch_index_decode2<64, false, IDX_STAGES, 2>(sh, qb, c, q, scores, score_stride, steal, stream);
        break;
    case 129:
        launch_index_decode2<64, true, IDX_STAGES_FP8, 2>(sh, qb, c, q, scores, score_stride, steal, stream);
        break;
    case 64:
        launch_index_decode2<32, false, IDX_STAGES, 2>(sh, qb, c, q, scores, score_stride, steal, stream);
        break;
    default:
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_msa_index_scores: idx_dim %d", sh->idx_dim);
    }
    KN_LAUNCHED("kn_cuda_msa_index_scores (tensor cores)");
    return MM_OK;
}

/* Benchmark hook (kn_decode_prof.cuh): buf receives KN_PROF_IDX_SLOTS u64 per warp of each later scan (NULL:
 * off). Not part of kn_cuda.h: only bench/cuda/kn_bench.cu declares and calls it. */
extern "C" int32_t kn_cuda_index_prof_set(unsigned long long *buf)
{
    g_idx_prof = buf;
    kn_index_pages_prof(buf);
    kn_index_stream_prof(buf);
    kn_index_ring_prof(buf);
    return MM_OK;
}
