/* Index scoring for decode as a plain stream: a persistent grid walks every (query, page) item in a
 * grid-stride order, U items per CTA at a time, every key tile of the U items in registers before any is
 * used.
 *
 * Why a third decode scan: a plain read of the same bytes (bench/cuda kn_bench "read", one wave of CTAs,
 * grid-stride, 8 x 16-byte loads in flight per thread) reaches 94-100 % of the copy rate at 1M batch 1, where
 * the persistent scan (kn_msa_index_decode.cu: a cp.async ring per warp over a contiguous chunk of pages)
 * reaches 75 % (FP8) / 81 % (bf16) and the per-page scan (kn_msa_index_decode_pages.cu: one short CTA per
 * page) 57 % / 85 %. This kernel keeps the read kernel's shape and adds only what scoring needs: warp w takes
 * tile w (16 tokens) of each item (so a 128-token block is exactly 8 warps), the product is the same
 * AB-swapped hi/lo tensor-core split as the other scans (see kn_msa_index_decode.cu for the fragment
 * permutation), the 8 warps' block maxima meet in shared memory, and the block-table entries of the next U
 * items are loaded while the current ones are computed. Block size 128 only; kn_index_stream_supported says
 * which shapes. */
#include "kn_decode_prof.cuh"
#include "kn_msa_kernels.cuh"

#define IST_WARPS 8

template <int DI, bool FP8> struct ist_cfg {
    static constexpr int CH = FP8 ? DI / 64 : DI / 32; /* 16-byte chunks per key row per lane */
    static constexpr int LOADS = 2 * CH;               /* uint4 per lane per tile (rows gid, gid + 8) */
    static constexpr int KS = DI / 16;                 /* k-steps */
    static constexpr int ROWB = FP8 ? DI : 2 * DI;     /* bytes per key row */
};

/* items in flight per CTA (U) and CTAs per SM (MINB): bf16 2 x 2 (32 KB of keys per CTA, 128 registers);
 * FP8 2 x 3 (16 KB per CTA, 80 registers). Measured on an H200: FP8 at 4 items x 2 CTAs (32 KB per CTA)
 * reached only 54-72 % of copy, 2 x 3 74-91 %: with two CTAs per SM the products of one leave only the
 * other's loads in flight. */
template <bool FP8> struct ist_shape {
    static constexpr int U = 2;
    static constexpr int MINB = FP8 ? 3 : 2;
};

/* The query fragments of query i for this lane (column gid: hi part of head gid & 3 for gid < 4, lo part
 * otherwise; k index permuted as the chunks are loaded). */
template <int DI, bool FP8>
__device__ __forceinline__ void ist_query(const float *q, int32_t i, int32_t nh, int gid, int tig,
                                          uint32_t bq[ist_cfg<DI, FP8>::KS][2])
{
    const int head = gid & 3;
    const bool lo = gid >= 4;
    const float *qh = q + ((int64_t)i * nh + head) * DI;
#pragma unroll
    for (int ks = 0; ks < ist_cfg<DI, FP8>::KS; ks++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int d = FP8 ? 16 * (tig + 4 * (ks >> 2)) + 4 * (ks & 3) + 2 * half
                              : 8 * (tig + 4 * (ks >> 1)) + 4 * (ks & 1) + 2 * half;
            const float x0 = head < nh ? qh[d] : 0.0f, x1 = head < nh ? qh[d + 1] : 0.0f;
            uint32_t v;
            if (!FP8) {
                const float h0 = __bfloat162float(__float2bfloat16_rn(x0));
                const float h1 = __bfloat162float(__float2bfloat16_rn(x1));
                v = lo ? kn_pack_bf16(x0 - h0, x1 - h1) : kn_pack_bf16(h0, h1);
            } else {
                const float h0 = __half2float(__float2half_rn(x0));
                const float h1 = __half2float(__float2half_rn(x1));
                v = lo ? kn_pack_f16(x0 - h0, x1 - h1) : kn_pack_f16(h0, h1);
            }
            bq[ks][half] = v;
        }
}

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
    using C = ist_cfg<DI, FP8>;
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
    uint32_t bq[C::KS][2];
    int64_t p_cur = 0;
    int32_t done = 0;
    for (int64_t k0 = blockIdx.x; k0 < items; k0 += (int64_t)U * stride) {
        /* every tile of the U items in flight */
        uint4 r[U][C::LOADS];
        float sc[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (pg[u] < 0) continue; /* uniform over the CTA: no reads for items past the end */
            const int64_t row = pg[u] * BLOCK + w * 16 + gid;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *rp = keys + (row + 8 * h) * C::ROWB;
#pragma unroll
                for (int c = 0; c < C::CH; c++) r[u][h * C::CH + c] = kn_ldg_stream(rp + 16 * (tig + 4 * c));
                if (FP8) sc[u][h] = __ldcs(kscale + row + 8 * h);
            }
        }
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
                    ist_query<DI, FP8>(q, cur_q, nh, gid, tig, bq);
                }
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < C::KS; ks++) {
                    uint32_t a[4];
                    if (!FP8) {
                        const int cc = ks >> 1, hh = ks & 1;
                        const uint4 r0 = r[u][cc], r1 = r[u][C::CH + cc];
                        a[0] = hh ? r0.z : r0.x;
                        a[1] = hh ? r1.z : r1.x;
                        a[2] = hh ? r0.w : r0.y;
                        a[3] = hh ? r1.w : r1.y;
                        kn_mma_bf16(c, a, bq[ks]);
                    } else {
                        const int cc = ks >> 2, hh = ks & 3;
                        const uint4 r0 = r[u][cc], r1 = r[u][C::CH + cc];
                        const uint32_t w0 = hh == 0 ? r0.x : hh == 1 ? r0.y : hh == 2 ? r0.z : r0.w;
                        const uint32_t w1 = hh == 0 ? r1.x : hh == 1 ? r1.y : hh == 2 ? r1.z : r1.w;
                        a[0] = kn_e4m3x2_to_f16x2((uint16_t)(w0 & 0xffff));
                        a[1] = kn_e4m3x2_to_f16x2((uint16_t)(w1 & 0xffff));
                        a[2] = kn_e4m3x2_to_f16x2((uint16_t)(w0 >> 16));
                        a[3] = kn_e4m3x2_to_f16x2((uint16_t)(w1 >> 16));
                        kn_mma_f16(c, a, bq[ks]);
                    }
                }
#pragma unroll
                for (int e = 0; e < 4; e++) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 2); /* hi + lo */
                if (FP8) {
                    c[0] *= sc[u][0], c[1] *= sc[u][0];
                    c[2] *= sc[u][1], c[3] *= sc[u][1];
                }
                const int64_t t0 = (int64_t)bb[u] * BLOCK + w * 16;
                const bool v0 = t0 + gid <= p_cur, v1 = t0 + gid + 8 <= p_cur;
                mx0 = fmaxf(v0 ? c[0] : -INFINITY, v1 ? c[2] : -INFINITY);
                mx1 = fmaxf(v0 ? c[1] : -INFINITY, v1 ? c[3] : -INFINITY);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) {
                    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
                    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
                }
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
