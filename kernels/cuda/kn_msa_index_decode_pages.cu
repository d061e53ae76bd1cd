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
 * and the tensor-core product is the same AB-swapped hi/lo split as the persistent scan (see its file
 * comment for the fragment permutation); the 8 warps' block maxima meet in shared memory.
 * Block size 128 only (kn_index_pages_supported); other shapes take the persistent scan. */
#include "kn_decode_prof.cuh"
#include "kn_msa_kernels.cuh"

#define IPG_WARPS 8

/* Benchmark hook (kn_decode_prof.cuh), set through kn_cuda_index_prof_set: NULL when off. */
static unsigned long long *g_ipg_prof;

template <int DI, bool FP8> struct ipg_cfg {
    static constexpr int CH = FP8 ? DI / 64 : DI / 32; /* 16-byte chunks per key row per lane */
    static constexpr int LOADS = 2 * CH;               /* uint4 per lane per tile (rows gid, gid + 8) */
    static constexpr int KS = DI / 16;                 /* k-steps */
    static constexpr int ROWB = FP8 ? DI : 2 * DI;     /* bytes per key row */
};

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
    using C = ipg_cfg<DI, FP8>;
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
    uint4 r[PPC][C::LOADS];
    float sc[PPC][2];
#pragma unroll
    for (int k = 0; k < PPC; k++) {
        const int32_t b = b0 + k < nb ? b0 + k : nb - 1; /* a missing last page reloads one: no branch */
        const int64_t row = (int64_t)btr[b] * BLOCK + w * 16 + gid;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t *rp = keys + (row + 8 * h) * C::ROWB;
#pragma unroll
            for (int c = 0; c < C::CH; c++) r[k][h * C::CH + c] = kn_ldg_stream(rp + 16 * (tig + 4 * c));
            if (FP8) sc[k][h] = __ldcs(kscale + row + 8 * h);
        }
    }

    /* query fragments while the keys are in flight: column gid = hi (gid < 4) or lo (gid >= 4) part of head
     * gid & 3, k index permuted as the chunks were loaded */
    uint32_t bq[C::KS][2];
    {
        const int head = gid & 3;
        const bool lo = gid >= 4;
        const float *qh = q + ((int64_t)i * nh + head) * DI;
#pragma unroll
        for (int ks = 0; ks < C::KS; ks++)
#pragma unroll
            for (int half = 0; half < 2; half++) {
                int d;
                if (!FP8)
                    d = 8 * (tig + 4 * (ks >> 1)) + 4 * (ks & 1) + 2 * half;
                else
                    d = 16 * (tig + 4 * (ks >> 2)) + 4 * (ks & 3) + 2 * half;
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
    const uint64_t t_first = prof ? kn_prof_ns() : 0;

    __shared__ float red[PPC][IPG_WARPS][4];
#pragma unroll
    for (int k = 0; k < PPC; k++) {
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int ks = 0; ks < C::KS; ks++) {
            uint32_t a[4];
            if (!FP8) {
                const int cc = ks >> 1, hh = ks & 1;
                const uint4 r0 = r[k][cc], r1 = r[k][C::CH + cc];
                a[0] = hh ? r0.z : r0.x;
                a[1] = hh ? r1.z : r1.x;
                a[2] = hh ? r0.w : r0.y;
                a[3] = hh ? r1.w : r1.y;
                kn_mma_bf16(c, a, bq[ks]);
            } else {
                const int cc = ks >> 2, hh = ks & 3;
                const uint4 r0 = r[k][cc], r1 = r[k][C::CH + cc];
                const uint32_t w0 = hh == 0 ? r0.x : hh == 1 ? r0.y : hh == 2 ? r0.z : r0.w;
                const uint32_t w1 = hh == 0 ? r1.x : hh == 1 ? r1.y : hh == 2 ? r1.z : r1.w;
                a[0] = kn_e4m3x2_to_f16x2((uint16_t)(w0 & 0xffff));
                a[1] = kn_e4m3x2_to_f16x2((uint16_t)(w1 & 0xffff));
                a[2] = kn_e4m3x2_to_f16x2((uint16_t)(w0 >> 16));
                a[3] = kn_e4m3x2_to_f16x2((uint16_t)(w1 >> 16));
                kn_mma_f16(c, a, bq[ks]);
            }
        }
        /* hi + lo columns: lane tig pairs with tig ^ 2 */
#pragma unroll
        for (int e = 0; e < 4; e++) c[e] += __shfl_xor_sync(0xffffffffu, c[e], 2);
        if (FP8) {
            c[0] *= sc[k][0], c[1] *= sc[k][0];
            c[2] *= sc[k][1], c[3] *= sc[k][1];
        }
        const int64_t t0 = (int64_t)(b0 + k) * BLOCK + w * 16;
        const bool v0 = t0 + gid <= p, v1 = t0 + gid + 8 <= p;
        float mx0 = fmaxf(v0 ? c[0] : -INFINITY, v1 ? c[2] : -INFINITY);
        float mx1 = fmaxf(v0 ? c[1] : -INFINITY, v1 ? c[3] : -INFINITY);
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
            mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
        }
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
