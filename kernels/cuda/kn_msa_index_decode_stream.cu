/* Index scoring for decode as a plain stream: a persistent grid walks every (query, page) item in a
 * grid-stride order, U items per CTA at a time, every key tile of the U items in registers before any is
 * used.
 *
 * Why a third decode scan: a plain read of the same bytes (bench/cuda kn_bench "read", one wave of CTAs,
 * grid-stride, 8 x 16-byte loads in flight per thread) reaches 94-100 % of the copy rate at 1M batch 1, where
 * the persistent scan (kn_msa_index_decode.cu: a cp.async ring per warp over a contiguous chunk of pages)
 * reaches 75 % (FP8) / 81 % (bf16) and the per-page scan (kn_msa_index_decode_pages.cu: one short CTA per
 * page) 57 % / 85 %. This kernel keeps the read kernel's shape and adds only what scoring needs: warp w takes
 * tile w (16 tokens) of each item (so a 128-token block is exactly 8 warps), the tile product is
 * kn_index_tile.cuh's as in the other scans, the 8 warps' block maxima meet in shared memory, and the
 * block-table entries of the next U items are loaded while the current ones are computed. Block size 128
 * only; kn_index_stream_supported says which shapes. */
#include "kn_decode_prof.cuh"
#include "kn_index_tile.cuh"
#include "kn_msa_kernels.cuh"

#define IST_WARPS 8

/* items in flight per CTA (U) and CTAs per SM (MINB): bf16 2 x 2 (32 KB of keys per CTA, 128 registers);
 * FP8 2 x 3 (16 KB per CTA, 80 registers). Measured on an H200: FP8 at 4 items x 2 CTAs (32 KB per CTA)
 * reached only 54-72 % of copy, 2 x 3 74-91 %: with two CTAs per SM the products of one leave only the
 * other's loads in flight. */
template <bool FP8> struct ist_shape {
    static constexpr int U = 2;
    static constexpr int MINB = FP8 ? 3 : 2;
};

/* item k = (query k / max_blocks, block k % max_blocks) and its page; pg < 0: nothing to read (past the end,
 * or past the query's last block) */
struct ist_item {
    int32_t qi, b;
    int64_t pg;
};

__device__ __forceinline__ ist_item ist_locate(int64_t k, int64_t items, int32_t max_blocks,
                                               const int32_t *__restrict__ qseq,
                                               const int64_t *__restrict__ pos,
                                               const int32_t *__restrict__ bt, int32_t bt_stride)
{
    ist_item it;
    it.qi = (int32_t)(k / max_blocks);
    it.b = (int32_t)(k % max_blocks);
    it.pg = -1;
    if (k < items && it.b <= pos[it.qi] / (16 * IST_WARPS))
        it.pg = bt[(int64_t)qseq[it.qi] * bt_stride + it.b];
    return it;
}

template <int DI, bool FP8>
__global__ void __launch_bounds__(IST_WARPS * 32, (ist_shape<FP8>::MINB))
    k_index_decode_stream(const float *__restrict__ q, const int32_t *__restrict__ qseq,
                          const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                          const uint8_t *__restrict__ keys, const float *__restrict__ kscale, int32_t n,
                          int32_t nh, int32_t max_blocks, float *__restrict__ scores, int32_t score_stride,
                          unsigned long long *prof)
{
    kn_griddep_launch(); /* the fused decode tail may be scheduled as this grid drains */
    constexpr int U = ist_shape<FP8>::U, BLOCK = 16 * IST_WARPS;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int64_t items = (int64_t)n * max_blocks, stride = gridDim.x;
    const uint64_t t_entry = prof ? kn_prof_ns() : 0;
    __shared__ float red[U][IST_WARPS][4];

    int32_t qi[U], bb[U];
    int64_t pg[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const ist_item it =
            ist_locate(blockIdx.x + (int64_t)u * stride, items, max_blocks, qseq, pos, bt, bt_stride);
        qi[u] = it.qi, bb[u] = it.b, pg[u] = it.pg;
    }
    int32_t cur_q = -1;
    uint32_t bq[idx_cfg<DI, FP8>::KS][2];
    int64_t p_cur = 0;
    int32_t done = 0;
    for (int64_t k0 = blockIdx.x; k0 < items; k0 += (int64_t)U * stride) {
        /* every tile of the U items in flight */
        idx_tile<DI, FP8> t[U];
#pragma unroll
        for (int u = 0; u < U; u++) /* uniform over the CTA: no reads for items past the end */
            if (pg[u] >= 0) idx_tile_load(t[u], keys, kscale, pg[u] * BLOCK + w * 16 + gid, tig);
        /* the next U items' block-table entries while these keys are in flight */
        ist_item nx[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            nx[u] = ist_locate(k0 + (int64_t)(U + u) * stride, items, max_blocks, qseq, pos, bt, bt_stride);
#pragma unroll
        for (int u = 0; u < U; u++) {
            float mx0 = -INFINITY, mx1 = -INFINITY;
            if (pg[u] >= 0) { /* uniform over the CTA */
                if (qi[u] != cur_q) {
                    cur_q = qi[u];
                    p_cur = pos[cur_q];
                    idx_query_frags<DI, FP8>(q, cur_q, nh, gid, tig, bq);
                }
                float c[4];
                idx_tile_scores<DI, FP8>(t[u], bq, c);
                idx_tile_max(c, (int64_t)bb[u] * BLOCK + w * 16, gid, p_cur, mx0, mx1);
                idx_rows_max(mx0, mx1);
            }
            if (lane < 2) red[u][w][2 * lane] = mx0, red[u][w][2 * lane + 1] = mx1; /* heads (0,1) / (2,3) */
        }
        __syncthreads();
        if (threadIdx.x < U * 4) {
            /* thread 4u + g writes head g of item u; the item's fields picked by selects, so that the
             * register arrays are never indexed at run time (that would put them on the stack) */
            const int u = threadIdx.x >> 2, g = threadIdx.x & 3;
            int64_t mpg = -1;
            int32_t mq = 0, mb = 0;
#pragma unroll
            for (int uu = 0; uu < U; uu++) {
                const bool me = uu == u;
                mpg = me ? pg[uu] : mpg;
                mq = me ? qi[uu] : mq;
                mb = me ? bb[uu] : mb;
            }
            if (mpg >= 0 && g < nh) {
                float m = -INFINITY;
#pragma unroll
                for (int ww = 0; ww < IST_WARPS; ww++) m = fmaxf(m, red[u][ww][g]);
                scores[((int64_t)g * n + mq) * score_stride + mb] = m;
            }
        }
        __syncthreads(); /* red is rewritten by the next round */
#pragma unroll
        for (int u = 0; u < U; u++) {
            done += pg[u] >= 0;
            qi[u] = nx[u].qi, bb[u] = nx[u].b, pg[u] = nx[u].pg;
        }
    }
    if (prof && lane == 0) { /* warp slots as the persistent scan: entry, (unused), exit, SM id | items */
        prof += ((int64_t)blockIdx.x * IST_WARPS + w) * KN_PROF_IDX_SLOTS;
        prof[KN_PROF_IDX_ENTRY] = t_entry;
        prof[KN_PROF_IDX_FIRST] = 0;
        prof[KN_PROF_IDX_EXIT] = kn_prof_ns();
        prof[KN_PROF_IDX_INFO] = kn_prof_smid() | (unsigned long long)done << 32;
    }
}

static unsigned long long *g_ist_prof;

void kn_index_stream_prof(unsigned long long *buf)
{
    g_ist_prof = buf;
}

int kn_index_stream_supported(const struct kn_cuda_msa_shape *sh)
{
    return sh->block == 16 * IST_WARPS && sh->n_idx_heads >= 1 && sh->n_idx_heads <= 4 && sh->idx_dim == 128;
}

template <int DI, bool FP8>
static void launch_stream(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, const float *q, float *scores, int32_t score_stride,
                          cudaStream_t stream)
{
    /* one wave of resident CTAs, fewer when there are fewer items */
    const int64_t items = (int64_t)qb->n * qb->max_blocks;
    int64_t g = (int64_t)kn_cuda_sm_count() * ist_shape<FP8>::MINB;
    if (g > items) g = items;
    k_index_decode_stream<DI, FP8><<<(unsigned)g, IST_WARPS * 32, 0, stream>>>(
        q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint8_t *)c->idx, c->idx_scale, qb->n,
        sh->n_idx_heads, qb->max_blocks, scores, score_stride, g_ist_prof);
}

int32_t kn_index_scores_decode_stream(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                      const struct kn_cuda_cache *c, const float *q, float *scores,
                                      int32_t score_stride, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n == 0 || qb->max_blocks == 0) return MM_OK;
    if (c->idx_dtype == KN_IDX_FP8)
        launch_stream<128, true>(sh, qb, c, q, scores, score_stride, stream);
    else
        launch_stream<128, false>(sh, qb, c, q, scores, score_stride, stream);
    KN_LAUNCHED("kn_cuda_msa_index_scores (stream)");
    return MM_OK;
}
