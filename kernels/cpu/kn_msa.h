/* MiniMax Sparse Attention on the CPU: the reference semantics every backend must match
 * (see ../shared/docs/ARCHITECTURE.md, "MSA index branch").
 *
 * Paged cache layout, the same in every backend (f32 on the CPU, bf16 on CUDA):
 *   K and V of one layer:   [n_pages][block][n_kv_heads][head_dim]   (token stride n_kv*head_dim)
 *   index keys of one layer: [n_pages][block][index_dim]
 * A sequence's block table maps block b (positions [b*block, (b+1)*block)) to a page id, so block b of a
 * sequence is always the page holding those positions whatever else shares the pool.
 *
 * Queries are given with their absolute positions; a query at position p sees keys at positions <= p of
 * its own sequence (keys up to max(pos) must already be in the cache). */
#ifndef KN_MSA_H
#define KN_MSA_H

#include <stdint.h>

/** Largest top-k the CPU kernels select (M3 uses 16); configs asking for more are refused at load. */
#define KN_MSA_MAX_TOPK 256

/** A sequence's view of one layer's paged cache. */
struct kn_paged_seq {
    const int32_t *block_table; /* page id per block */
    int64_t n_tokens;           /* tokens present in the cache */
};

/** Block scores. q: [n][n_idx_heads][idx_dim] index queries (normed, rotated), pos: [n] positions.
 * scores: [n_idx_heads][n][n_blocks] with n_blocks = max(pos)/block + 1; entry (g, i, b) = max over keys j
 * in block b with j <= pos[i] of dot(q[i][g], key[j]) in fp32, -INFINITY when no key of b is visible. */
void kn_msa_index_scores(const float *q, int32_t n, const int64_t *pos, int32_t n_idx_heads, int32_t idx_dim,
                         const float *idx_cache, int32_t block, const struct kn_paged_seq *seq, float *scores,
                         int32_t n_blocks);

/** Top-k selection per (index head, query): the query's own block pos/block is forced in (+inf); then the
 * k = min(topk, n_blocks) best blocks by score, best first; slots whose score is -inf hold -1.
 * sel: [n_idx_heads][n][sel_stride], sel_stride >= k; returns k. Ties go to the lower block id. */
int32_t kn_msa_topk(const float *scores, int32_t n_idx_heads, int32_t n, const int64_t *pos, int32_t n_blocks,
                    int32_t block, int32_t topk, int32_t *sel, int32_t sel_stride);

/** Exact softmax attention over the selected blocks. q: [n][n_heads][head_dim]; head h uses KV group
 * h / (n_heads / n_kv) and that group's selection row sel[g][i][0..k) (-1 = empty); keys after pos[i] are
 * masked. out: [n][n_heads][head_dim]. */
void kn_msa_sparse_attention(const float *q, int32_t n, const int64_t *pos, int32_t n_heads, int32_t n_kv,
                             int32_t head_dim, float scale, const float *k_cache, const float *v_cache,
                             int32_t block, const struct kn_paged_seq *seq, const int32_t *sel, int32_t k,
                             int32_t sel_stride, float *out);

/** kn_msa_topk with the reference's index_local_blocks: blocks pos/block - l for l in [0, n_local), clamped
 * at 0, are all forced in (n_local = 1 is kn_msa_topk; 0 forces nothing). Forced blocks keep ascending-id
 * order among themselves. */
int32_t kn_msa_topk_local(const float *scores, int32_t n_idx_heads, int32_t n, const int64_t *pos,
                          int32_t n_blocks, int32_t block, int32_t topk, int32_t n_local, int32_t *sel,
                          int32_t sel_stride);

/** Index queries as the FP8 prefill selection reads them when an FP8 index cache also takes e4m3 queries
 * (CUDA, KN_CUDA_SELECT_WGMMA=3): each row of dim values quantized to e4m3 with the scale s = amax / 448 (1
 * for an all-zero row), the rule of the FP8 index keys; out = e4m3(q / s) * s, so its scores against the
 * dequantized keys rank blocks as the e4m3 products do. q and out may be the same array. */
void kn_msa_quant_q8(const float *q, int64_t rows, int32_t dim, float *out);

#endif
