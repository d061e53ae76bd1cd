/* Index scoring for decode, one CTA per page (or two FP8 pages) and the hardware as the scheduler.
 *
 * Why a second decode scan: the persistent one-wave scan (kn_msa_index_decode.cu) splits each query's pages
 * statically over the resident CTAs, and a timestamp profile of a 1M-context batch-1 layer showed its end is
 * set by the slowest SMs: the same number of pages took 53 us on some SMs and 68 us on others (bf16), and
 * which SMs are slow changes from call to call, so no static split can fix it. Handing pages out through a
 * global counter was measured slower (an atomic's round trip under a saturated memory system, and a warp's
 * page takes 8-16 us, too coarse to balance on). Here the work is cut into many short CTAs (one page of
 * 32 KB each, ~4 resident per SM) and the block scheduler gives the next CTA to whichever SM frees a slot
 * first, so the end is within one short CTA of the average.
 *
 * CTA = PPC pages of one query (bf16: 1 page, FP8: 2 pages, both 32 KB of keys). Warp w owns tile w (16
 * tokens) of each page, so a 128-token block needs exactly 8 warps. The tiles go straight into registers
 * (streaming loads, issued before anything else), the query fragments are built while they are in flight,
 * and the tile product is kn_index_tile.cuh's; the 8 warps' block maxima meet in shared memory.
 * Block size 128 only (kn_index_pages_supported); other shapes take the persistent scan. */
#include "kn_decode_prof.cuh"
#include "kn_index_tile.cuh"
#include "kn_msa_kernels.cuh"

#define IPG_WARPS 8

/* Benchmark hook (kn_decode_prof.cuh), set through kn_cuda_index_prof_set: NULL when off. */
static unsigned long long *g_ipg_prof;

template <int DI, bool FP8, int PPC>
__global__ void __launch_bounds__(IPG_WARPS * 32, 3)
    k_index_decode_pages(const float *__restrict__ q, const int32_t *__restrict__ qseq,
                         const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                         const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n,
                         int32_t nh, float *__restrict__ scores, int32_t score_stride,
                         unsigned long long *prof)
{
    kn_griddep_launch(); /* the fused decode tail may be scheduled as the last CTAs drain */
    const uint64_t t_entry = prof ? kn_prof_ns() : 0;
    constexpr int BLOCK = 16 * IPG_WARPS;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t i = blockIdx.y;
    const int64_t p = pos[i];
    const int32_t nb = (int32_t)(p / BLOCK) + 1;
    const int32_t b0 = blockIdx.x * PPC;
    if (prof) prof += (((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * IPG_WARPS + w) * KN_PROF_IDX_SLOTS;
    if (b0 >= nb) { /* a shorter query of a mixed batch */
        if (prof && lane == 0)
            prof[KN_PROF_IDX_ENTRY] = 0, prof[KN_PROF_IDX_FIRST] = 0, prof[KN_PROF_IDX_INFO] = kn_prof_smid();
        return;
    }
    const int32_t *btr = bt + (int64_t)qseq[i] * bt_stride;

    /* every tile of this warp in flight first: rows gid and gid + 8 of tile w of each page */
    idx_tile<DI, FP8> t[PPC];
#pragma unroll
    for (int k = 0; k < PPC; k++) {
        const int32_t b = b0 + k < nb ? b0 + k : nb - 1; /* a missing last page reloads one: no branch */
        idx_tile_load(t[k], keys, kscale, (int64_t)btr[b] * BLOCK + w * 16 + gid, tig);
    }

    /* query fragments while the keys are in flight */
    uint32_t bq[idx_cfg<DI, FP8>::KS][2];
    idx_query_frags<DI, FP8>(q, i, nh, gid, tig, bq);
    const uint64_t t_first = prof ? kn_prof_ns() : 0;

    __shared__ float red[PPC][IPG_WARPS][4];
#pragma unroll
    for (int k = 0; k < PPC; k++) {
        float c[4], mx0 = -INFINITY, mx1 = -INFINITY;
        idx_tile_scores<DI, FP8>(t[k], bq, c);
        idx_tile_max(c, (int64_t)(b0 + k) * BLOCK + w * 16, gid, p, mx0, mx1);
        idx_rows_max(mx0, mx1);
        if (lane < 2) red[k][w][2 * lane] = mx0, red[k][w][2 * lane + 1] = mx1; /* heads (0,1) / (2,3) */
    }
    __syncthreads();
    if (threadIdx.x < PPC * 4) {
        const int k = threadIdx.x >> 2, g = threadIdx.x & 3;
        if (g < nh && b0 + k < nb) {
            float m = -INFINITY;
#pragma unroll
            for (int ww = 0; ww < IPG_WARPS; ww++) m = fmaxf(m, red[k][ww][g]);
            scores[((int64_t)g * n + i) * score_stride + b0 + k] = m;
        }
    }
    if (prof && lane == 0) {
        prof[KN_PROF_IDX_ENTRY] = t_entry;
        prof[KN_PROF_IDX_FIRST] = t_first;
        prof[KN_PROF_IDX_EXIT] = kn_prof_ns();
        prof[KN_PROF_IDX_INFO] = kn_prof_smid() | (unsigned long long)(b0 + PPC <= nb ? PPC : nb - b0) << 32;
    }
}

int kn_index_pages_supported(const struct kn_cuda_msa_shape *sh)
{
    return sh->block == 16 * IPG_WARPS && sh->n_idx_heads >= 1 && sh->n_idx_heads <= 4 &&
           (sh->idx_dim == 128 || sh->idx_dim == 64);
}

template <int DI, bool FP8, int PPC>
static void launch_pages(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                         const struct kn_cuda_cache *c, const float *q, float *scores, int32_t score_stride,
                         cudaStream_t stream)
{
    dim3 grid((unsigned)kn_cdiv((int64_t)qb->max_blocks, PPC), (unsigned)qb->n);
    k_index_decode_pages<DI, FP8, PPC><<<grid, IPG_WARPS * 32, 0, stream>>>(
        q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale, qb->n,
        sh->n_idx_heads, scores, score_stride, g_ipg_prof);
}

int32_t kn_index_scores_decode_pages(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                     const struct kn_cuda_cache *c, const float *q, float *scores,
                                     int32_t score_stride, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n == 0 || qb->max_blocks == 0) return MM_OK;
    if (qb->n > 65535) return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_msa_index_scores: %d queries", qb->n);
    const bool fp8 = c->idx_dtype == KN_IDX_FP8;
    switch (sh->idx_dim * 2 + fp8) {
    case 256:
        launch_pages<128, false, 1>(sh, qb, c, q, scores, score_stride, stream);
        break;
    case 257:
        launch_pages<128, true, 2>(sh, qb, c, q, scores, score_stride, stream);
        break;
    case 128:
        launch_pages<64, false, 2>(sh, qb, c, q, scores, score_stride, stream);
        break;
    case 129:
        launch_pages<64, true, 4>(sh, qb, c, q, scores, score_stride, stream);
        break;
    default:
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_msa_index_scores (pages): idx_dim %d%s", sh->idx_dim,
                          fp8 ? " fp8" : "");
    }
    KN_LAUNCHED("kn_cuda_msa_index_scores (pages)");
    return MM_OK;
}

void kn_index_pages_prof(unsigned long long *buf)
{
    g_ipg_prof = buf;
}
