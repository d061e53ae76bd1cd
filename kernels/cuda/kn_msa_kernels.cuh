/* Internal entry points of the MSA kernels, one family per file; kn_msa_api.cu picks among them. */
#ifndef KN_MSA_KERNELS_CUH
#define KN_MSA_KERNELS_CUH

#include "kn_cuda_internal.cuh"
#include "kn_tma.cuh"

/* kn_msa_generic.cu */
int32_t kn_index_scores_generic(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const float *q, float *scores,
                                int32_t score_stride, cudaStream_t stream, struct mm_err *err);
/* sel NULL = dense causal attention over every visible block */
int32_t kn_attention_generic(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                             int32_t sel_stride, void *out, cudaStream_t stream, struct mm_err *err);

/* kn_msa_topk.cu */
int32_t kn_topk_launch(const float *scores, int32_t score_stride, const int64_t *pos, int32_t n,
                       int32_t n_heads, int32_t block, int32_t topk, int32_t n_local, int32_t *sel,
                       int32_t sel_stride, cudaStream_t stream, struct mm_err *err);

/* kn_msa_index_decode.cu: tensor-core index scores, one pass over each query's pages */
int kn_index_decode_supported(const struct kn_cuda_msa_shape *sh);
/* steal: NULL for a static split of the pages, or a device int32 [qb->n] the call zeroes and the kernel uses
 * to hand out pages dynamically (balanced tail) */
int32_t kn_index_scores_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                               const struct kn_cuda_cache *c, const float *q, float *scores,
                               int32_t score_stride, int32_t *steal, cudaStream_t stream, struct mm_err *err);

/* kn_msa_index_decode_pages.cu: the same scores, one short CTA per page, scheduled by the hardware (block
 * 128 only); kn_index_pages_prof sets its benchmark timestamp buffer */
int kn_index_pages_supported(const struct kn_cuda_msa_shape *sh);
int32_t kn_index_scores_decode_pages(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                     const struct kn_cuda_cache *c, const float *q, float *scores,
                                     int32_t score_stride, cudaStream_t stream, struct mm_err *err);
void kn_index_pages_prof(unsigned long long *buf);
/* kn_msa_index_decode_stream.cu: the same scores from a persistent grid-stride stream over (query, page)
 * items (block 128, idx_dim 128) */
int kn_index_stream_supported(const struct kn_cuda_msa_shape *sh);
int32_t kn_index_scores_decode_stream(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                      const struct kn_cuda_cache *c, const float *q, float *scores,
                                      int32_t score_stride, cudaStream_t stream, struct mm_err *err);
void kn_index_stream_prof(unsigned long long *buf);
/* kn_msa_index_decode_ring.cu: the persistent scan's cp.async ring with lean per-tile bookkeeping and
 * 32-token FP8 ring slots (idx_dim 128; fp8: block a multiple of 32) */
int kn_index_ring_supported(const struct kn_cuda_msa_shape *sh, int fp8);
int32_t kn_index_scores_decode_ring(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                    const struct kn_cuda_cache *c, const float *q, float *scores,
                                    int32_t score_stride, cudaStream_t stream, struct mm_err *err);
void kn_index_ring_prof(unsigned long long *buf);

/* kn_msa_index_prefill.cu: fused tensor-core index scores + running top-k over query tiles (bf16 keys; FP8
 * keys where the wgmma kernel runs: kn_index_prefill_supported says whether one of them takes c) */
int kn_index_prefill_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c);
int32_t kn_select_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, const float *q, int32_t *sel, int32_t sel_stride,
                          cudaStream_t stream, struct mm_err *err);
/* kn_msa_index_prefill_wgmma.cu: the same with wgmma (sm_90a, ~225 KB of shared memory per CTA), bf16 or
 * FP8 keys; same shapes as kn_index_prefill_supported, plus kn_select_prefill_wgmma_ok(fp8) for the device.
 * variant 1: four consumer warpgroups of one 64-row slab; 2: two warpgroups of two slabs each; 3 (FP8 keys,
 * else as 1): as 1 with the queries quantized to e4m3 (amax / 448 per row) and e4m3 products */
int kn_select_prefill_wgmma_ok(int fp8);
int32_t kn_select_prefill_wgmma(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const float *q, int32_t *sel,
                                int32_t sel_stride, int variant, cudaStream_t stream, struct mm_err *err);
/* Whether the wgmma kernel's producer loads c's bf16 index keys by TMA (KN_CUDA_SELECT_TMA, default
 * KN_SELECT_TMA; the page count known, the driver's encoder present), with m then the keys' map */
#define KN_SELECT_TMA 1
int kn_select_prefill_tma(const struct kn_cuda_cache *c, CUtensorMap *m);

/* kn_msa_decode.cu: paged split-K attention per (query, KV group) over a page list (sel, or all blocks) */
int kn_attn_decode_supported(const struct kn_cuda_msa_shape *sh);
size_t kn_attn_decode_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int dense);
int32_t kn_attn_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                       const struct kn_cuda_cache *c, const void *q, const int32_t *sel, int32_t sel_stride,
                       void *out, void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err);
/* Fused decode tail: each CTA of a (query, KV group) row selects the row's blocks from the index scores
 * itself (kn_topk_row), attends to its share of them, and the splits of a row are merged inside a
 * thread-block cluster; launched with programmatic dependent launch after the index-scoring kernel. sel
 * (may be NULL) receives the selections. kn_attn_decode_fused_ok says whether the shapes and the device
 * allow it. */
int kn_attn_decode_fused_ok(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            int32_t sel_stride);
int32_t kn_attn_decode_fused(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             const struct kn_cuda_cache *c, const void *q, const float *scores,
                             int32_t score_stride, int32_t *sel, int32_t sel_stride, void *out,
                             cudaStream_t stream, struct mm_err *err);
/* The MSA kernels' tuning knobs (read with kn_cuda_knob / kn_cuda_knob_int, kn_cuda_internal.cuh):
 * KN_CUDA_FUSED_DECODE (default on), KN_CUDA_PDL (on), KN_CUDA_STEAL (off: measured slower, see
 * docs/design/cuda.md). Integer settings: KN_CUDA_IDX picks the
 * decode index scan: unset = automatic (see kn_index_scores_decode), 0 persistent with chunks of 8 pages per
 * CTA, 1 persistent with an even split over 2 x SMs CTAs, 2 one short CTA per page
 * (kn_msa_index_decode_pages.cu; FP8: two pages), 3 a persistent grid-stride stream over (query, page) items
 * (kn_msa_index_decode_stream.cu), 4 the per-warp cp.async ring with whole-line copies
 * (kn_msa_index_decode_ring.cu; the default where it applies). KN_CUDA_IDX_LINES=0: that ring with per-lane
 * copies; KN_CUDA_IDX_TILE=1: that ring with one 16-token FP8 tile per step (default 2 tiles, 32 tokens).
 * KN_CUDA_IDX_EVICT=0: that ring's key copies under the normal L2 policy (default 1: evict-first).
 * KN_CUDA_IDX_SPLIT=2|4|8: that ring with 2-8 warps per page; KN_CUDA_IDX_CHUNK=N: N pages per CTA;
 * KN_CUDA_IDX_PDL=0|1: that ring launched plainly / as a programmatic dependent of the kernel before it
 * (unset: the latter up to 32768 pages, one query per sequence; kn_msa_index_decode_ring.cu).
 * KN_CUDA_MERGE_PUSH=0 / KN_CUDA_TOPK_SPLIT=1|2: the fused decode tail's pulled merge / split selection
 * (kn_msa_decode.cu).
 * KN_CUDA_IDX_TRIGGER=1: the persistent scan lets the fused decode tail
 * launch only when its CTAs finish (default: at their entry). KN_CUDA_TOPK_BF=0: top-k gathers its candidates
 * with a branch per value (the previous code) instead of a store per value. */

/* kn_msa_prefill.cu: KV-block-major sparse prefill with partial outputs and a merge */
int kn_attn_prefill_supported(const struct kn_cuda_msa_shape *sh, int32_t sel_stride);
size_t kn_attn_prefill_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          int32_t sel_stride);
int32_t kn_attn_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                        const struct kn_cuda_cache *c, const void *q, const int32_t *sel, int32_t sel_stride,
                        void *out, void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err);

/* kn_attn_dense.cu: query-major flash attention over every visible block (dense layers, baseline) */
int kn_attn_dense_prefill_supported(const struct kn_cuda_msa_shape *sh);
int32_t kn_attn_dense_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                              const struct kn_cuda_cache *c, const void *q, void *out, cudaStream_t stream,
                              struct mm_err *err);

#endif
