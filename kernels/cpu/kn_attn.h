/* Softmax attention on the CPU: over paged caches (text) and over contiguous rows (vision).
 *
 * Paged layout as in kn_msa.h: K and V of one layer are [n_pages][block][n_kv][head_dim]. */
#ifndef KN_ATTN_H
#define KN_ATTN_H

#include <stdint.h>

#include "kn_msa.h"

/** Query heads handled together per call by the stack state of kn_attn_group_blocks (larger groups are
 * sliced). */
#define KN_ATTN_MAX_GROUP 32

/** G query heads of one token (contiguous, head_dim apart) that share KV head kv_head, against the key blocks
 * blocks[0..nb) of one sequence (-1 = skip; NULL = every block up to the token's own), causal at token level.
 * Each key and value row is read once for all G heads. out: G heads of head_dim. */
void kn_attn_group_blocks(const float *q, int32_t G, int64_t pos, int32_t head_dim, float scale,
                          const float *k_cache, const float *v_cache, int32_t n_kv, int32_t kv_head,
                          int32_t block, const int32_t *block_table, const int32_t *blocks, int32_t nb,
                          float *out);

/** Dense causal attention (GQA) over a sequence's paged cache: the dense layers of M3.
 * q: [n][n_heads][head_dim] with absolute positions pos[n]; out: [n][n_heads][head_dim]. */
void kn_attn_paged_causal(const float *q, int32_t n, const int64_t *pos, int32_t n_heads, int32_t n_kv,
                          int32_t head_dim, float scale, const float *k_cache, const float *v_cache,
                          int32_t block, const struct kn_paged_seq *seq, float *out);

/** Bidirectional multi-head attention over n contiguous rows (the vision tower; one item at a time).
 * q, k, v: row i, head h at x + i * stride + h * head_dim; out likewise with out_stride.
 * scratch: at least n floats; more lets several query rows share one matrix product. */
void kn_attn_full(const float *q, const float *k, const float *v, int64_t stride, int64_t n, int32_t n_heads,
                  int32_t head_dim, float scale, float *out, int64_t out_stride, float *scratch,
                  int64_t scratch_floats);

#endif
