/* Plain SIMT versions of index scoring and (sparse or dense) paged attention: every shape the model config
 * allows, fp32 arithmetic throughout. They serve small models (the tiny checkpoints) and are the on-GPU
 * cross-check of the tensor-core kernels. One warp per (query, block) or per (query, head). */
#include "kn_msa_kernels.cuh"

#define GEN_WARPS 4

/* Key j of a page, element d, as f32 (bf16, f32, or e4m3 times the token's scale). */
__device__ __forceinline__ float idx_key(const void *keys, const float *scale, int32_t dtype, int64_t row,
                                         int32_t d, int32_t dim)
{
    if (dtype == KN_IDX_F32) return ((const float *)keys)[row * dim + d];
    if (dtype == KN_IDX_FP8) {
        __nv_fp8_e4m3 v;
        v.__x = ((const uint8_t *)keys)[row * dim + d];
        return (float)v * scale[row];
    }
    return kn_bf16_to_f32(((const uint16_t *)keys)[row * dim + d]);
}

/* One warp per (query i, block b): the max over visible keys of each index head's dot product. */
__global__ void __launch_bounds__(GEN_WARPS * 32)
    k_index_scores_generic(const float *__restrict__ q, const int32_t *__restrict__ qseq,
                           const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                           const void *__restrict__ keys, const float *__restrict__ kscale, int32_t kdtype,
                           int32_t n, int32_t nh, int32_t dim, int32_t block, int32_t max_blocks,
                           float *__restrict__ scores, int32_t score_stride)
{
    int lane = threadIdx.x & 31;
    int64_t item = (int64_t)blockIdx.x * GEN_WARPS + (threadIdx.x >> 5);
    if (item >= (int64_t)n * max_blocks) return;
    int32_t i = (int32_t)(item / max_blocks), b = (int32_t)(item % max_blocks);
    int64_t p = pos[i];
    int64_t t0 = (int64_t)b * block;
    if (t0 > p) return; /* beyond the query's own block: not part of its row */
    int32_t jn = (int32_t)(p - t0 + 1 < block ? p - t0 + 1 : block);
    int64_t page = bt[(int64_t)qseq[i] * bt_stride + b];
    for (int32_t g = 0; g < nh; g++) {
        const float *qg = q + ((int64_t)i * nh + g) * dim;
        float m = -INFINITY;
        for (int32_t j = lane; j < jn; j += 32) {
            int64_t row = page * block + j;
            float s = 0.0f;
            for (int32_t d = 0; d < dim; d++) s += qg[d] * idx_key(keys, kscale, kdtype, row, d, dim);
            m = fmaxf(m, s);
        }
        m = kn_warp_max(m);
        if (lane == 0) scores[((int64_t)g * n + i) * score_stride + b] = m;
    }
}

int32_t kn_index_scores_generic(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const float *q, float *scores,
                                int32_t score_stride, cudaStream_t stream, struct mm_err *err)
{
    int64_t items = (int64_t)qb->n * qb->max_blocks;
    if (items == 0) return MM_OK;
    k_index_scores_generic<<<(unsigned)kn_cdiv(items, GEN_WARPS), GEN_WARPS * 32, 0, stream>>>(
        q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, c->idx, c->idx_scale, c->idx_dtype, qb->n,
        sh->n_idx_heads, sh->idx_dim, sh->block, qb->max_blocks, scores, score_stride);
    KN_LAUNCHED("kn_cuda_msa_index_scores (generic)");
    return MM_OK;
}

/* One warp per (query i, head h): online softmax over the keys of the listed blocks (sel row, or every block
 * up to the query's own when sel is NULL), 32 keys at a time. Lane l owns output dims l, l+32, ... */
#define GEN_MAX_DIM 512
/* element e of a bf16 (F32 = false) or f32 array */
template <bool F32> __device__ __forceinline__ float gen_ld(const void *p, int64_t e)
{
    return F32 ? ((const float *)p)[e] : kn_bf16_to_f32(((const uint16_t *)p)[e]);
}

template <bool F32>
__global__ void __launch_bounds__(GEN_WARPS * 32)
    k_attention_generic(const void *__restrict__ q, const int32_t *__restrict__ qseq,
                        const int64_t *__restrict__ pos, const int32_t *__restrict__ bt, int32_t bt_stride,
                        const void *__restrict__ kc, const void *__restrict__ vc, int32_t n, int32_t n_heads,
                        int32_t n_kv, int32_t dim, int32_t block, float scale,
                        const int32_t *__restrict__ sel, int32_t sel_k, int32_t sel_stride,
                        void *__restrict__ out)
{
    __shared__ float qs[GEN_WARPS][GEN_MAX_DIM];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int64_t item = (int64_t)blockIdx.x * GEN_WARPS + w;
    if (item >= (int64_t)n * n_heads) return;
    int32_t i = (int32_t)(item / n_heads), h = (int32_t)(item % n_heads);
    int32_t g = h / (n_heads / n_kv);
    for (int32_t d = lane; d < dim; d += 32) qs[w][d] = gen_ld<F32>(q, ((int64_t)i * n_heads + h) * dim + d);
    __syncwarp();
    int64_t p = pos[i];
    const int32_t *btr = bt + (int64_t)qseq[i] * bt_stride;
    const int32_t *row = sel ? sel + ((int64_t)g * n + i) * sel_stride : NULL;
    int32_t nlist = sel ? sel_k : (int32_t)(p / block + 1);
    int64_t tok = (int64_t)n_kv * dim;
    float m = -INFINITY, l = 0.0f, acc[GEN_MAX_DIM / 32];
    for (int k = 0; k < GEN_MAX_DIM / 32; k++) acc[k] = 0.0f;
    for (int32_t li = 0; li < nlist; li++) {
        int32_t b = row ? row[li] : li;
        if (b < 0 || (int64_t)b * block > p) continue;
        int32_t jn = (int32_t)(p - (int64_t)b * block + 1 < block ? p - (int64_t)b * block + 1 : block);
        int64_t base = (int64_t)btr[b] * block * tok + (int64_t)g * dim;
        for (int32_t j0 = 0; j0 < jn; j0 += 32) {
            int32_t j = j0 + lane;
            float s = -INFINITY;
            if (j < jn) {
                const int64_t kr = base + (int64_t)j * tok;
                s = 0.0f;
                for (int32_t d = 0; d < dim; d++) s += qs[w][d] * gen_ld<F32>(kc, kr + d);
                s *= scale;
            }
            float bm = kn_warp_max(s);
            float mn = fmaxf(m, bm);
            float corr = m == -INFINITY ? 0.0f : __expf(m - mn);
            float pj = j < jn ? __expf(s - mn) : 0.0f;
            l = l * corr + kn_warp_sum(pj);
#pragma unroll
            for (int k = 0; k < GEN_MAX_DIM / 32; k++) acc[k] *= corr;
            m = mn;
            int32_t cnt = jn - j0 < 32 ? jn - j0 : 32;
            for (int32_t t = 0; t < cnt; t++) {
                float pt = __shfl_sync(0xffffffffu, pj, t);
                const int64_t vr = base + (int64_t)(j0 + t) * tok;
#pragma unroll
                for (int k = 0; k < GEN_MAX_DIM / 32; k++) {
                    int32_t d = lane + 32 * k;
                    if (d < dim) acc[k] += pt * gen_ld<F32>(vc, vr + d);
                }
            }
        }
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int k = 0; k < GEN_MAX_DIM / 32; k++) {
        int32_t d = lane + 32 * k;
        if (d < dim) {
            const int64_t e = ((int64_t)i * n_heads + h) * dim + d;
            if (F32)
                ((float *)out)[e] = acc[k] * inv;
            else
                ((uint16_t *)out)[e] = kn_f32_to_bf16(acc[k] * inv);
        }
    }
}

int32_t kn_attention_generic(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                             int32_t sel_stride, void *out, cudaStream_t stream, struct mm_err *err)
{
    if (sh->head_dim > GEN_MAX_DIM)
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda attention: head_dim %d > %d", sh->head_dim,
                          GEN_MAX_DIM);
    int64_t items = (int64_t)qb->n * sh->n_heads;
    if (items == 0) return MM_OK;
    int32_t sel_k = sel ? (sh->topk < sel_stride ? sh->topk : sel_stride) : 0;
    if (c->kv_dtype == KN_KV_F32)
        k_attention_generic<true><<<(unsigned)kn_cdiv(items, GEN_WARPS), GEN_WARPS * 32, 0, stream>>>(
            q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, c->k, c->v, qb->n, sh->n_heads, sh->n_kv,
            sh->head_dim, sh->block, sh->scale, sel, sel_k, sel_stride, out);
    else
        k_attention_generic<false><<<(unsigned)kn_cdiv(items, GEN_WARPS), GEN_WARPS * 32, 0, stream>>>(
            q, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, c->k, c->v, qb->n, sh->n_heads, sh->n_kv,
            sh->head_dim, sh->block, sh->scale, sel, sel_k, sel_stride, out);
    KN_LAUNCHED("kn_cuda attention (generic)");
    return MM_OK;
}
