#include "kn_msa.h"

#include <math.h>
#include <string.h>

#include "kn_attn.h"
#include "kn_gemm.h"
#include "kn_simd.h"
#include "mm_dtype.h"
#include "mm_topk.h"

/* One query's scores over blocks [0, n_blocks): the max over the block's visible keys of dot(q_g, key). */
KN_INLINE void scores_row_body(const float *qi, int64_t p, int32_t n_idx_heads, int32_t idx_dim,
                               const float *idx_cache, int32_t block, const int32_t *block_table, float *out,
                               int64_t head_stride, int32_t n_blocks)
{
    for (int32_t b = 0; b < n_blocks; b++) {
        int64_t t0 = (int64_t)b * block;
        if (t0 > p) {
            for (int32_t g = 0; g < n_idx_heads; g++) out[g * head_stride + b] = -INFINITY;
            continue;
        }
        /* causal mask before the block max: only keys at positions <= p take part */
        int64_t jn = p - t0 + 1 < block ? p - t0 + 1 : block;
        const float *kb = idx_cache + (int64_t)block_table[b] * block * idx_dim;
        for (int32_t g = 0; g < n_idx_heads; g++) {
            const float *qg = qi + (int64_t)g * idx_dim;
            float m = -INFINITY;
            for (int64_t j = 0; j < jn; j++) {
                float s;
                dot_body(qg, kb + j * idx_dim, idx_dim, &s);
                m = s > m ? s : m;
            }
            out[g * head_stride + b] = m;
        }
    }
}

KN_DISPATCH(scores_row,
            (const float *qi, int64_t p, int32_t n_idx_heads, int32_t idx_dim, const float *idx_cache,
             int32_t block, const int32_t *block_table, float *out, int64_t head_stride, int32_t n_blocks),
            (qi, p, n_idx_heads, idx_dim, idx_cache, block, block_table, out, head_stride, n_blocks))

void kn_msa_index_scores(const float *q, int32_t n, const int64_t *pos, int32_t n_idx_heads, int32_t idx_dim,
                         const float *idx_cache, int32_t block, const struct kn_paged_seq *seq, float *scores,
                         int32_t n_blocks)
{
    for (int32_t i = 0; i < n; i++)
        KN_CALL(scores_row,
                (q + (int64_t)i * n_idx_heads * idx_dim, pos[i], n_idx_heads, idx_dim, idx_cache, block,
                 seq->block_table, scores + (int64_t)i * n_blocks, (int64_t)n * n_blocks, n_blocks));
}

int32_t kn_msa_topk_local(const float *scores, int32_t n_idx_heads, int32_t n, const int64_t *pos,
                          int32_t n_blocks, int32_t block, int32_t topk, int32_t n_local, int32_t *sel,
                          int32_t sel_stride)
{
    int32_t k = topk < n_blocks ? topk : n_blocks;
    if (k < 0) k = 0;
    for (int32_t g = 0; g < n_idx_heads; g++)
        for (int32_t i = 0; i < n; i++) {
            const float *s = scores + ((int64_t)g * n + i) * n_blocks;
            int32_t *out = sel + ((int64_t)g * n + i) * sel_stride;
            int64_t own = pos[i] / block;
            int64_t lo = own - n_local + 1; /* n_local <= 0: nothing forced (lo > own) */
            if (lo < 0) lo = 0;
            /* best-first insertion; a strictly larger score is needed to pass an earlier (lower) block,
             * so ties go to the lower block id */
            float bs[KN_MSA_MAX_TOPK];
            int32_t cnt = 0;
            int32_t cap = k < KN_MSA_MAX_TOPK ? k : KN_MSA_MAX_TOPK;
            for (int32_t b = 0; b < n_blocks && cap > 0; b++) {
                float v = (b >= lo && b <= own) ? INFINITY : s[b];
                if (!(v > -INFINITY)) continue; /* -inf and NaN never take a slot */
                mm_topk_offer(bs, out, &cnt, cap, v, b);
            }
            for (int32_t j = cnt; j < sel_stride; j++) out[j] = -1;
        }
    return k;
}

int32_t kn_msa_topk(const float *scores, int32_t n_idx_heads, int32_t n, const int64_t *pos, int32_t n_blocks,
                    int32_t block, int32_t topk, int32_t *sel, int32_t sel_stride)
{
    return kn_msa_topk_local(scores, n_idx_heads, n, pos, n_blocks, block, topk, 1, sel, sel_stride);
}

void kn_msa_sparse_attention(const float *q, int32_t n, const int64_t *pos, int32_t n_heads, int32_t n_kv,
                             int32_t head_dim, float scale, const float *k_cache, const float *v_cache,
                             int32_t block, const struct kn_paged_seq *seq, const int32_t *sel, int32_t k,
                             int32_t sel_stride, float *out)
{
    int32_t group = n_heads / n_kv;
    int32_t ids[KN_MSA_MAX_TOPK];
    for (int32_t i = 0; i < n; i++)
        for (int32_t g = 0; g < n_kv; g++) {
            const int32_t *row = sel + ((int64_t)g * n + i) * sel_stride;
            const int32_t *list = row;
            int32_t nb = k;
            if (k <= KN_MSA_MAX_TOPK) {
                /* visit blocks in ascending order so the sum does not depend on the selection order */
                nb = 0;
                for (int32_t j = 0; j < k; j++) {
                    int32_t b = row[j];
                    if (b < 0) continue;
                    int32_t at = nb++;
                    while (at > 0 && ids[at - 1] > b) {
                        ids[at] = ids[at - 1];
                        at--;
                    }
                    ids[at] = b;
                }
                list = ids;
            }
            if (nb == 0) {
                ids[0] = -1; /* nothing selected: the output is zero */
                list = ids;
                nb = 1;
            }
            kn_attn_group_blocks(q + ((int64_t)i * n_heads + (int64_t)g * group) * head_dim, group, pos[i],
                                 head_dim, scale, k_cache, v_cache, n_kv, g, block, seq->block_table, list,
                                 nb, out + ((int64_t)i * n_heads + (int64_t)g * group) * head_dim);
        }
}

void kn_msa_quant_q8(const float *q, int64_t rows, int32_t dim, float *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *x = q + r * dim;
        float *y = out + r * dim, amax = 0.0f;
        for (int32_t d = 0; d < dim; d++) amax = fmaxf(amax, fabsf(x[d]));
        const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
        for (int32_t d = 0; d < dim; d++) y[d] = mm_f8e4m3_to_f32(mm_f32_to_f8e4m3(x[d] / s)) * s;
    }
}
