/* Paged attention for the CPU backend's own cache layout, in which keys are stored transposed inside a page.
 *
 * The reference kernels (kn_msa.h, kn_attn.h) read K and index keys token-major, so every score is a dot
 * product that ends in a horizontal sum. Here a page stores one dimension of `block` consecutive keys
 * contiguously, so one vector load covers 16 (AVX-512), 8 (AVX2) or 4 keys and the scores of a chunk of keys
 * are plain multiply-adds over the head dimension. Same semantics as the reference kernels (causal mask at
 * token level, online softmax, -inf for blocks with no visible key); the sums run in a different order, so
 * results agree to fp32 rounding, not bit for bit.
 *
 * Layout of one layer, a pool of n_pages pages of `block` tokens:
 *   K            [n_kv][n_pages][head_dim][block]
 *   V            [n_kv][n_pages][block][head_dim]
 *   index keys   [n_pages][idx_dim][block]
 * Floats per page: n_kv * head_dim * block for K and for V, idx_dim * block for the index keys. KV heads are
 * outermost so that one head's consecutive pages are one contiguous run: a sequence whose pages were taken in
 * order is read as a few long streams, which the hardware prefetchers follow, rather than 2 KiB pieces. */
#ifndef KN_PATTN_H
#define KN_PATTN_H

#include <stdint.h>

/** One layer's K and V in the transposed-key layout. */
struct kn_pkv {
    const float *k, *v;
    int32_t n_kv, head_dim, block;
    int64_t n_pages; /* pages in the pool */
};

/** Store token row k_row/v_row ([n_kv][head_dim] each) at slot `slot` of page `page` of k and v (c gives the
 * geometry; its k and v are not used). */
void kn_pkv_write(float *k, float *v, const struct kn_pkv *c, int64_t page, int32_t slot, const float *k_row,
                  const float *v_row);

/** Store an index key ([idx_dim]) at slot `slot` of page `page`. */
void kn_pidx_write(float *idx, int32_t idx_dim, int32_t block, int64_t page, int32_t slot, const float *row);

/** G query heads of one token at position pos (q: G rows of head_dim) that share KV head kv_head, against the
 * blocks blocks[0..nb) of the sequence (ascending ids, -1 = skip; NULL = every block up to the token's own),
 * with the token-level causal mask; out: G rows of head_dim (zeros when no key is visible). */
void kn_pattn_gqa(const float *q, int32_t G, int64_t pos, float scale, const struct kn_pkv *c,
                  int32_t kv_head, const int32_t *block_table, const int32_t *blocks, int32_t nb, float *out);

/** MSA block scores of one query: scores[g * head_stride + b] = max over keys j <= pos of block b of
 * dot(q[g], key[j]) for g < n_idx_heads (q: n_idx_heads rows of idx_dim) and b < n_blocks; -INFINITY when no
 * key of b is visible. */
void kn_pidx_scores(const float *q, int32_t n_idx_heads, int32_t idx_dim, int64_t pos, const float *idx,
                    int32_t block, const int32_t *block_table, float *scores, int64_t head_stride,
                    int32_t n_blocks);

/* ---- appended: the same for a half-precision cache ----
 * The same layout with IEEE binary16 elements (raw bits in uint16_t): half the bytes a decode step reads,
 * for an optional lower-precision cache (results within fp16 rounding of the K/V/index values, no longer
 * those of the fp32 cache). Values are stored rounded to nearest even and saturated at +-65504. */

struct kn_pkv16 {
    const uint16_t *k, *v;
    int32_t n_kv, head_dim, block;
    int64_t n_pages;
};

/** x as the half-precision cache stores it (round to nearest even, saturating at +-65504; NaN stays NaN). */
uint16_t kn_f16_store(float x);

void kn_pkv_write_f16(uint16_t *k, uint16_t *v, const struct kn_pkv16 *c, int64_t page, int32_t slot,
                      const float *k_row, const float *v_row);
void kn_pidx_write_f16(uint16_t *idx, int32_t idx_dim, int32_t block, int64_t page, int32_t slot,
                       const float *row);
void kn_pattn_gqa_f16(const float *q, int32_t G, int64_t pos, float scale, const struct kn_pkv16 *c,
                      int32_t kv_head, const int32_t *block_table, const int32_t *blocks, int32_t nb,
                      float *out);
void kn_pidx_scores_f16(const float *q, int32_t n_idx_heads, int32_t idx_dim, int64_t pos,
                        const uint16_t *idx, int32_t block, const int32_t *block_table, float *scores,
                        int64_t head_stride, int32_t n_blocks);

#endif
