/* CUDA kernels for MiniMax-M3 on Hopper (sm_90a): MSA (index scoring, top-k, sparse prefill and decode
 * attention), dense paged attention, and the element-wise/normalization/MoE pieces of the model.
 *
 * Every function takes device pointers, enqueues work on `stream` and returns an mm_status code (with a
 * one-line message in err). Nothing synchronizes unless its comment says so. Checks of shapes and
 * arguments happen on the host before anything is launched.
 *
 * Layouts (the same as the CPU kernels of kn_msa.h, with bf16 instead of f32 in the caches):
 *   K, V cache of one layer:   bf16 [n_pages][block][n_kv][head_dim]
 *   index-key cache:           bf16 [n_pages][block][idx_dim], or e4m3 [n_pages][block][idx_dim] plus an
 *                              f32 scale per token [n_pages][block] (key = e4m3 value * scale)
 *   selections:                i32  [n_idx_heads][n][sel_stride], best first, -1 = empty slot
 *   block scores:              f32  [n_idx_heads][n][score_stride]
 * Queries of a step are described by struct kn_cuda_qbatch: query i belongs to sequence qseq[i] (a row of
 * the block table) and sits at absolute position pos[i]; it sees keys at positions <= pos[i].
 */
#ifndef KN_CUDA_H
#define KN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "mm_cands.h"  /* a struct only */
#include "mm_status.h" /* a C header without C++ guards: declare its functions with C linkage */

/** Queries per tile of the fused prefill index kernel (struct kn_cuda_qbatch.tiles). */
#define KN_CUDA_QTILE 64
/** Largest top-k the CUDA MSA kernels support (M3 uses 16). */
#define KN_CUDA_MAX_TOPK 32

enum kn_cuda_idx_dtype { KN_IDX_BF16 = 0, KN_IDX_FP8 = 1, KN_IDX_F32 = 2 };
/** K/V cache element type. F32 is the exact mode for small models and cross-checks: attention queries and
 * outputs are then f32 too, and only the GENERIC paths run (AUTO picks them). */
enum kn_cuda_kv_dtype { KN_KV_BF16 = 0, KN_KV_F32 = 1 };

/** Which implementation to run; AUTO picks the fastest that supports the shapes. GENERIC is the plain
 * SIMT version every shape supports (also the on-GPU cross-check of the fast ones). */
enum kn_cuda_path { KN_PATH_AUTO = 0, KN_PATH_GENERIC = 1, KN_PATH_DECODE = 2, KN_PATH_PREFILL = 3 };

/** The attention shapes of one model (the same for every MSA layer). */
struct kn_cuda_msa_shape {
    int32_t n_heads, n_kv, head_dim; /* main attention (GQA: n_heads / n_kv heads per KV group) */
    int32_t n_idx_heads, idx_dim;    /* index branch: one index head per KV group in M3 */
    int32_t block;                   /* MSA block = cache page, in tokens */
    int32_t topk;                    /* selected blocks per (query, KV group) */
    int32_t n_local;                 /* blocks forced in ending at the query's own (1 in M3) */
    float scale;                     /* softmax scale, head_dim^-0.5 */
};

/** One layer's paged caches (device memory). */
struct kn_cuda_cache {
    void *k, *v;      /* bf16 (or f32, kv_dtype) [n_pages][block][n_kv][head_dim] */
    void *idx;        /* index keys, bf16, e4m3 or f32 [n_pages][block][idx_dim] */
    float *idx_scale; /* KN_IDX_FP8 only: [n_pages][block] */
    int32_t idx_dtype;
    int64_t n_pages;
    int32_t kv_dtype; /* enum kn_cuda_kv_dtype; 0 = bf16 */
};

/** The queries of one forward step. Device arrays, plus a few numbers the host already knows (so that no
 * launch needs a device-to-host copy). kn_cuda_qbatch_plan fills the host-side arrays. */
struct kn_cuda_qbatch {
    int32_t n;                  /* queries */
    int32_t n_seqs;             /* sequences (rows of block_table) */
    const int32_t *qseq;        /* [n]: sequence of each query */
    const int64_t *pos;         /* [n]: absolute position of each query */
    const int32_t *block_table; /* [n_seqs][bt_stride]: page id of each block */
    int32_t bt_stride;
    const int32_t *seq_blk_off; /* [n_seqs + 1]: prefix sums of the blocks each sequence's queries see */
    const int64_t *seq_last;    /* [n_seqs]: largest query position of each sequence (-1 = no query) */
    int32_t total_blocks;       /* host copy of seq_blk_off[n_seqs] */
    int32_t max_blocks;         /* host: max over queries of pos / block + 1 */
    const int32_t *tiles;       /* [n_tiles][2] (first query, count): runs of <= KN_CUDA_QTILE consecutive
                                   queries of one sequence with increasing positions */
    int32_t n_tiles;
    int32_t max_q_per_seq; /* host: most queries of one sequence (1 for a pure decode step) */
};

/** Host-side planning for a kn_cuda_qbatch: from qseq_h[n] and pos_h[n] (host copies) fill seq_blk_off_h
 * [n_seqs + 1], seq_last_h [n_seqs] and tiles_h [n][2] (room for n tiles), and the host numbers of qb (n,
 * n_seqs, total_blocks, max_blocks, n_tiles, max_q_per_seq). The caller then uploads the arrays and sets the
 * device pointers. */
int32_t kn_cuda_qbatch_plan(int32_t n, int32_t n_seqs, const int32_t *qseq_h, const int64_t *pos_h,
                            int32_t block, int32_t *seq_blk_off_h, int64_t *seq_last_h, int32_t *tiles_h,
                            struct kn_cuda_qbatch *qb, struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* MSA                                                                                                    */

/** Block scores for every query: scores[g][i][b] = max over keys j <= pos[i] of block b of dot(q[i][g], key
 * j) (fp32 accumulation; -inf when no key of b is visible), for b < pos[i]/block + 1; later entries of the
 * row are not written. q: f32 [n][n_idx_heads][idx_dim]. path: AUTO, GENERIC or DECODE (tensor cores, one
 * pass over each query's key pages). */
int32_t kn_cuda_msa_index_scores(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const float *q, float *scores,
                                 int32_t score_stride, int32_t path, cudaStream_t stream, struct mm_err *err);

/** kn_cuda_msa_index_scores with the DECODE path's pages handed out dynamically, so that a one-wave grid
 * ends together (a balanced tail): counters is a device int32 [qb->n] scratch that the call zeroes first
 * (one memset on the stream). Other paths ignore counters. Measured slower than the static split on an H200
 * (bench/cuda/README.md), so the automatic routes use it only with KN_CUDA_STEAL=1 in the environment. */
int32_t kn_cuda_msa_index_scores_dyn(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                     const struct kn_cuda_cache *c, const float *q, float *scores,
                                     int32_t score_stride, int32_t *counters, int32_t path,
                                     cudaStream_t stream, struct mm_err *err);

/** Top-k per (index head, query) over block scores, as kn_msa_topk_local: the n_local blocks ending at the
 * query's own are forced in, then the best by score (ties to the lower id), best first; -inf and NaN never
 * take a slot; every one of the sel_stride slots is written (-1 = empty). */
int32_t kn_cuda_msa_topk(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                         const float *scores, int32_t score_stride, int32_t *sel, int32_t sel_stride,
                         cudaStream_t stream, struct mm_err *err);

/** Index scores and top-k together. PREFILL runs the fused tensor-core kernel (bf16 index cache, idx_dim 128,
 * block 128, n_idx_heads <= 4): no score matrix is written. Other paths use kn_cuda_msa_index_scores then
 * kn_cuda_msa_topk with ws as the score buffer. */
int32_t kn_cuda_msa_select(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                           const struct kn_cuda_cache *c, const float *q, int32_t *sel, int32_t sel_stride,
                           void *ws, size_t ws_bytes, int32_t path, cudaStream_t stream, struct mm_err *err);
size_t kn_cuda_msa_select_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             int32_t path);

/** Sparse attention over the selected blocks with the token-level causal mask. q: bf16
 * [n][n_heads][head_dim]; out: bf16 [n][n_heads][head_dim] (both f32 with an f32 K/V cache). path: GENERIC,
 * DECODE (paged split-K per (query, KV group)), PREFILL or AUTO. PREFILL: 8-query tiles (of qb->tiles) whose
 * queries share enough of their blocks attend to the union of them with wgmma and write their outputs
 * directly; the other (query, KV group) rows go KV-block-major with partial outputs and a merge (the route is
 * decided on the device; KN_CUDA_PREFILL_UNION=0 / KN_CUDA_UNION_MIN=<percent> in the environment are
 * benchmark knobs, docs/design/cuda.md "wgmma prefill"). */
int32_t kn_cuda_msa_attention(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                              const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                              int32_t sel_stride, void *out, void *ws, size_t ws_bytes, int32_t path,
                              cudaStream_t stream, struct mm_err *err);
size_t kn_cuda_msa_attention_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                int32_t sel_stride, int32_t path);
/** Test and benchmark hook: which prefill kernels would load this cache by TMA now (bit 0: the union kernel's
 * K/V ring, KN_CUDA_UNION_TMA; bit 1: the wgmma selection's bf16 index keys, KN_CUDA_SELECT_TMA, where that
 * kernel runs for these shapes on this device), given the knobs, the cache's page count and the driver's
 * tensor-map encoder. */
int kn_cuda_prefill_tma(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c);

/** One MSA layer's selection and sparse attention together: sel receives the selections (as
 * kn_cuda_msa_select) and out the attention (as kn_cuda_msa_attention). With path AUTO, a decode step (few
 * queries per sequence) on the fast shapes (head_dim 128, block 128, one index head per KV group, bf16 K/V)
 * runs two kernels: index scoring, then one kernel in which each (query, KV group) row's CTAs select its
 * blocks, attend to their share and merge inside a thread-block cluster (launched with programmatic dependent
 * launch). Anything else runs kn_cuda_msa_select then
 * kn_cuda_msa_attention with the given path. idx_q: f32 index queries as kn_cuda_msa_select; q/out as
 * kn_cuda_msa_attention. KN_CUDA_FUSED_DECODE=0 / KN_CUDA_PDL=0 in the environment turn the fused route /
 * the programmatic launch off (benchmark knobs). */
int32_t kn_cuda_msa_select_attend(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                  const struct kn_cuda_cache *c, const float *idx_q, const void *q,
                                  int32_t *sel, int32_t sel_stride, void *out, void *ws, size_t ws_bytes,
                                  int32_t path, cudaStream_t stream, struct mm_err *err);
size_t kn_cuda_msa_select_attend_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                    int32_t sel_stride, int32_t path);

/** Dense causal attention over each query's whole visible context (the dense layers). Same layouts as
 * kn_cuda_msa_attention; path GENERIC, DECODE (split-K over all pages), PREFILL (query-major flash) or AUTO.
 */
int32_t kn_cuda_dense_attention(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                const struct kn_cuda_cache *c, const void *q, void *out, void *ws,
                                size_t ws_bytes, int32_t path, cudaStream_t stream, struct mm_err *err);
size_t kn_cuda_dense_attention_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                  int32_t path);

/** Append the step's keys and values to the caches at (qseq[i], pos[i]). k, v: f32 rows [n][n_kv*head_dim]
 * with row strides kv_stride (elements), both NULL = no K/V; kidx: f32 [n] rows of idx_dim, stride
 * kidx_stride (NULL = no index keys, as in dense layers). FP8 index keys are stored with a per-token scale
 * amax/448. */
int32_t kn_cuda_cache_append(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             const struct kn_cuda_cache *c, const float *k, const float *v, int64_t kv_stride,
                             const float *kidx, int64_t kidx_stride, cudaStream_t stream, struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* Element-wise, normalization, embedding (f32 unless said otherwise; bf16 as raw uint16 bits)           */

/** Gemma RMSNorm of n rows: out = x * rsqrt(mean(x^2) + eps) * (1 + w); out_bf16 != 0 writes bf16. x and
 * out may alias when both are f32. */
int32_t kn_cuda_rmsnorm(const float *x, int64_t x_stride, const float *w, int64_t n, int32_t dim, float eps,
                        void *out, int64_t out_stride, int32_t out_bf16, cudaStream_t stream,
                        struct mm_err *err);
/** y += x over n rows of dim, then out = Gemma RMSNorm of y (f32, rows of dim) in one launch (a cluster of 8
 * CTAs per row): y bit for bit as kn_cuda_add, out as kn_cuda_rmsnorm up to the order of the sum of squares
 * (fixed: the same bits run to run). y and out must not overlap. */
int32_t kn_cuda_add_rmsnorm(float *y, const float *x, const float *w, int64_t n, int32_t dim, float eps,
                            float *out, cudaStream_t stream, struct mm_err *err);
/** Per-head Gemma RMSNorm in place: n rows of n_heads heads (head_dim each, rows stride apart), one weight.
 */
int32_t kn_cuda_head_rmsnorm(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                             const float *w, float eps, cudaStream_t stream, struct mm_err *err);
/** LayerNorm (biased variance) of n rows, b may be NULL; out_bf16 as in kn_cuda_rmsnorm. */
int32_t kn_cuda_layernorm(const float *x, int64_t x_stride, const float *w, const float *b, int64_t n,
                          int32_t dim, float eps, void *out, int64_t out_stride, int32_t out_bf16,
                          cudaStream_t stream, struct mm_err *err);
/** Text RoPE tables cos/sin [n][rot] for positions pos (device), as kn_rope_text_table (fp32 inverse
 * frequencies, fp32 angle, trigonometry in double). */
int32_t kn_cuda_rope_table(const int64_t *pos, int64_t n, int32_t rot, double theta, float *cos_t,
                           float *sin_t, cudaStream_t stream, struct mm_err *err);
/** Rotate the first rot dims of each head in place (rotate-half), table rows table_stride apart. */
int32_t kn_cuda_rope_apply(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                           const float *cos_t, const float *sin_t, int32_t table_stride, int32_t rot,
                           cudaStream_t stream, struct mm_err *err);
/** One tensor of kn_cuda_head_norm_rope: rows of n_heads heads of head_dim floats (n_heads * head_dim
 * apart), its norm weight w [head_dim], the dims its RoPE rotates (even, <= head_dim; 0: none), and where to
 * put a bf16 copy of the result in the same layout (NULL: none; what kn_cuda_convert would make of it). */
struct kn_norm_rope_part {
    float *x;
    const float *w;
    int32_t n_heads, head_dim, rot;
    void *bf16;
};
/** Most tensors one kn_cuda_head_norm_rope call takes (q, k, index q, index k). */
#define KN_NORM_ROPE_MAX_PARTS 4
/** kn_cuda_head_rmsnorm then kn_cuda_rope_apply on each of n_parts tensors of n rows, in one launch: the
 * same arithmetic in the same order, so the same bits as the separate calls (one warp per (row, head)). RoPE
 * tables cos/sin [n][table_stride]; a part's rot must not exceed table_stride. */
int32_t kn_cuda_head_norm_rope(const struct kn_norm_rope_part *parts, int32_t n_parts, int64_t n,
                               const float *cos_t, const float *sin_t, int32_t table_stride, float eps,
                               cudaStream_t stream, struct mm_err *err);
/** out = (clamp(up) + 1) * g * sigmoid(alpha g) with g = min(gate, limit); gate/up rows of dim with strides;
 * out f32 or bf16 rows of dim (stride out_stride). */
int32_t kn_cuda_swiglu(const float *gate, const float *up, int64_t in_stride, int64_t n, int32_t dim,
                       float alpha, float limit, void *out, int64_t out_stride, int32_t out_bf16,
                       cudaStream_t stream, struct mm_err *err);
/** GELU in place (kind: 0 erf, 1 tanh, 2 quick, as kn_act.h) over n elements. */
int32_t kn_cuda_gelu(float *x, int64_t n, int32_t kind, cudaStream_t stream, struct mm_err *err);
/** y[i] = x[i] + bias[i % dim] (bias may be NULL: copy/convert) into f32 or bf16. */
int32_t kn_cuda_add_bias_convert(const float *x, const float *bias, int64_t n, int32_t dim, void *y,
                                 int32_t y_bf16, cudaStream_t stream, struct mm_err *err);
/** y += x (n elements). */
int32_t kn_cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream, struct mm_err *err);
/** Convert n elements: f32 -> bf16 (to_bf16 = 1) or bf16 -> f32. */
int32_t kn_cuda_convert(const void *src, void *dst, int64_t n, int32_t to_bf16, cudaStream_t stream,
                        struct mm_err *err);
/** Widen n 16-bit floats at src (f16 = 1: IEEE half, 0: bf16) to f32 at dst, bit for bit mm_f16_to_f32 /
 * mm_bf16_to_f32 (NaN payloads and subnormals kept): media pixels cross to the device in the width they came.
 */
int32_t kn_cuda_widen16(const void *src, int32_t f16, float *dst, int64_t n, cudaStream_t stream,
                        struct mm_err *err);
/** ids[r] = the index of the first largest of row r's n floats (rows at stride ld), NaN never chosen, 0 when
 * all are NaN (wk_argmax's rule): greedy decoding without downloading the logits. */
int32_t kn_cuda_argmax_rows(const float *x, int32_t rows, int64_t n, int64_t ld, int32_t *ids,
                            cudaStream_t stream, struct mm_err *err);
/** Sampling candidates of each row (kernels/cpu/kn_cands.h's rule: every logit >= max(l_k - MM_CANDS_TIE t,
 * m - MM_CANDS_FLOOR t), NaN never; k, t, n_top from req[r], a device array of rows): counts[r] of them,
 * the first min(count, cap) (id, logit) pairs at ids / vals + r x cap in no particular order. A row with k 0
 * is skipped (its count untouched). A row with more than cap candidates whose req asks for the draw, with
 * no top-k that cuts, a finite largest logit and n <= MM_DRAW_MAX_VOCAB, is drawn from instead
 * (kernels/cpu/kn_draw.h's rule): counts[r] = MM_CANDS_DRAWN, its token at ids[r x cap], its logit at
 * vals[r x cap] and with req n_top the top list after them (mm_cands.h); the draw's keys go to keys + r x ld
 * (rows x ld words), or with keys NULL over the row's logits in x (the token's logit is then NaN).
 * req's flags: MM_CANDS_EXACT (no floor), MM_CANDS_LSE (the row's log-sum-exp, in lse[r]:
 * kernels/cpu/kn_cands.c's mm_logsumexp up to the order of a double sum). t > 0 where k > 0, not checked on
 * the host. */
int32_t kn_cuda_topk_cands(float *x, int32_t rows, int64_t n, int64_t ld, const struct mm_cand_req *req,
                           int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse,
                           uint32_t *keys, cudaStream_t stream, struct mm_err *err);
/** Embedding rows out[i] = table[ids[i]] (bf16 table [vocab][dim] -> f32), ids checked against vocab
 * (out of range -> zeros and *bad set on the device). */
int32_t kn_cuda_embed(const void *table, int32_t vocab, int32_t dim, const int32_t *ids, int64_t n,
                      float *out, int32_t *bad, cudaStream_t stream, struct mm_err *err);
/** FP8-E4M3 weight [rows][cols] with 2-D block scales [ceil(rows/bs_rows)][ceil(cols/bs_cols)] (f32,
 * "weight_scale_inv", multiplied) -> bf16 [rows][cols]. */
int32_t kn_cuda_dequant_fp8_block(const uint8_t *w, const float *scale, int64_t rows, int64_t cols,
                                  int32_t bs_rows, int32_t bs_cols, void *out_bf16, cudaStream_t stream,
                                  struct mm_err *err);
/** out[rows[j]] = data[j] for n_rows rows of dim floats (rows: device int64). */
int32_t kn_cuda_scatter_rows(float *out, int32_t dim, const int64_t *rows, const float *data, int64_t n_rows,
                             cudaStream_t stream, struct mm_err *err);
/** Bidirectional attention of n rows (one vision item): q/k/v rows stride apart (f32), heads head_dim apart;
 * out f32 rows out_stride apart. */
int32_t kn_cuda_attn_full(const float *q, const float *k, const float *v, int64_t stride, int64_t n,
                          int32_t n_heads, int32_t head_dim, float scale, float *out, int64_t out_stride,
                          cudaStream_t stream, struct mm_err *err);
/** Workspace bytes of kn_cuda_attn_full_tc for n rows of n_heads x head_dim; 0 when it does not take the
 * shape (head_dim above 128). */
size_t kn_cuda_attn_full_tc_ws(int64_t n, int32_t n_heads, int32_t head_dim);
/** kn_cuda_attn_full on the tensor cores (kn_attn_full.cu): q, k, v and the probabilities rounded to bf16,
 * f32 accumulation and output; head_dim <= 128; ws of kn_cuda_attn_full_tc_ws bytes. */
int32_t kn_cuda_attn_full_tc(const float *q, const float *k, const float *v, int64_t stride, int64_t n,
                             int32_t n_heads, int32_t head_dim, float scale, float *out, int64_t out_stride,
                             void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* MoE routing                                                                                            */

/** Sigmoid router: for each of n rows of logits [n][n_exp], choose top_k experts by sigmoid + bias (bias may
 * be NULL), weights = chosen raw sigmoids renormalized to sum 1 and multiplied by scaling. ids/wts:
 * [n][top_k]. Ties go to the lower expert id. */
int32_t kn_cuda_moe_route(const float *logits, const float *bias, int64_t n, int32_t n_exp, int32_t top_k,
                          float scaling, int32_t *ids, float *wts, cudaStream_t stream, struct mm_err *err);
/** Group the n*top_k (row, slot) pairs by expert: offsets [n_exp + 1] (exclusive scan of the counts; the host
 * reads them to size the expert GEMMs), perm [n*top_k] = row*top_k + slot in expert order (order inside an
 * expert unspecified; results do not depend on it) and inv [n*top_k] its inverse. One CTA; n_exp <= 4096. */
int32_t kn_cuda_moe_sort(const int32_t *ids, int64_t n, int32_t top_k, int32_t n_exp, int32_t *offsets,
                         int32_t *perm, int32_t *inv, cudaStream_t stream, struct mm_err *err);
/** out[j] = x[perm[j] / top_k] as bf16 (out_bf16 = 1) or f32 rows of dim (gather of the routed rows), j < m.
 */
int32_t kn_cuda_moe_gather(const float *x, int64_t x_stride, const int32_t *perm, int64_t m, int32_t top_k,
                           int32_t dim, void *out, int32_t out_bf16, cudaStream_t stream, struct mm_err *err);
/** y[r] += sum over slots s of wts[r][s] * e[inv[r*top_k + s]]: the weighted combine of the expert outputs
 * e [n*top_k][dim] (f32, expert order). inv NULL: e is in (row, slot) order (the identity). */
int32_t kn_cuda_moe_combine(const float *e, const int32_t *inv, const float *wts, int64_t n, int32_t top_k,
                            int32_t dim, float *y, int64_t y_stride, cudaStream_t stream, struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* GEMM (cuBLAS)                                                                                          */

struct kn_cuda_blas; /* a cuBLAS handle and its workspace */

int32_t kn_cuda_blas_create(struct kn_cuda_blas **out, cudaStream_t stream, struct mm_err *err);
void kn_cuda_blas_destroy(struct kn_cuda_blas *b);
int32_t kn_cuda_blas_set_stream(struct kn_cuda_blas *b, cudaStream_t stream, struct mm_err *err);

/** C[m][n] = A[m][k] . W[n][k]^T (+ beta C): bf16 A and W (row-major, leading dims in elements), fp32
 * accumulation; C f32 (c_bf16 = 0) or bf16. The "x . W^T" of a linear layer. */
int32_t kn_cuda_gemm_bf16(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                          const void *w, int64_t ldw, float beta, void *c, int64_t ldc, int32_t c_bf16,
                          struct mm_err *err);
/** C[m][n] = A[m][k] . W[n][k]^T + bias[n] in one cuBLASLt product (the bias in its epilogue): bf16 A and W,
 * f32 bias (16-byte aligned) and C, fp32 accumulation. MM_UNSUPPORTED when cuBLASLt has no algorithm for the
 * shape or alignments: the caller then adds the bias in a pass of its own. */
int32_t kn_cuda_gemm_bf16_bias(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const void *a,
                               int64_t lda, const void *w, int64_t ldw, const float *bias, float *c,
                               int64_t ldc, struct mm_err *err);
/** C[m][n] (f32, row stride ldc, a multiple of 4) = X[m][k] . W[n][k]^T on the FP8 tensor cores (cuBLASLt
 * block scaling, MMGW_CUDA_FP8_PREFILL=e4m3): X (f32, row stride ldx) is first quantized in the workspace
 * (kn_cuda_x_e4m3_groups's rule; ws 256-byte aligned, at least kn_cuda_gemm_fp8_block_ws bytes), W is the
 * checkpoint's e4m3 [n][k] with its f32 128 x 128 block scales [n/128][k/128] (16-byte aligned), fp32
 * accumulation. Shapes: kn_cuda_gemm_fp8_block_ok. MM_UNSUPPORTED, with nothing run, when cuBLASLt has no
 * algorithm for the shape or alignments. */
int32_t kn_cuda_gemm_fp8_block(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const float *x,
                               int64_t ldx, const uint8_t *w, const float *w_scale, float *c, int64_t ldc,
                               void *ws, size_t ws_bytes, struct mm_err *err);
size_t kn_cuda_gemm_fp8_block_ws(int64_t m, int64_t n, int64_t k);
/** Blocks 128 x 128, k a multiple of 512 (the scale rows cuBLASLt reads, k/128 a multiple of 4, are then the
 * checkpoint's), n a multiple of 16. */
int kn_cuda_gemm_fp8_block_ok(int64_t n, int64_t k, int32_t bs_rows, int32_t bs_cols);
/** Rows of x [n][cols] (f32, row stride ldx, 16-byte aligned) in 128-wide groups of e4m3 with one f32 scale
 * each: q [n][cols] = e4m3(x / s), qs [cols/128][ldqs >= n] = s, s = the group's amax / 448 (1 for all
 * zeros); the CPU twin is kn_quant_e4m3_groups (ldqs = n). Needs kn_cuda_x_e4m3_groups_ok. */
int32_t kn_cuda_x_e4m3_groups(int64_t n, int64_t cols, const float *x, int64_t ldx, uint8_t *q, float *qs,
                              int64_t ldqs, cudaStream_t stream, struct mm_err *err);
/** cols a multiple of 128, ldx >= cols and a multiple of 4. */
int kn_cuda_x_e4m3_groups_ok(int64_t cols, int64_t ldx);
/** kn_cuda_x_e4m3_groups of the gathered rows x[perm[j] / top_k], j < m (kn_cuda_moe_gather's f32 rows) in
 * one pass: the same codes and scales, no f32 copy of the rows. x as kn_cuda_x_e4m3_groups's (stride
 * x_stride). */
int32_t kn_cuda_moe_gather_e4m3(const float *x, int64_t x_stride, const int32_t *perm, int64_t m,
                                int32_t top_k, int64_t cols, uint8_t *q, float *qs, int64_t ldqs,
                                cudaStream_t stream, struct mm_err *err);
/** kn_cuda_x_e4m3_groups of kn_cuda_swiglu's f32 values of n rows (gate and up at in_stride, 16-byte
 * aligned) in one pass: the same codes and scales, no f32 activations. */
int32_t kn_cuda_swiglu_e4m3(const float *gate, const float *up, int64_t in_stride, int64_t n, int64_t cols,
                            float alpha, float limit, uint8_t *q, float *qs, int64_t ldqs,
                            cudaStream_t stream, struct mm_err *err);
/** Same product in plain fp32 (no TF32): f32 A and W, f32 C. For weights whose rounding to bf16 would move
 * decisions (the MoE router, the index projections) and for an all-fp32 run. */
int32_t kn_cuda_gemm_f32(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *w, int64_t ldw, float beta, float *c, int64_t ldc, struct mm_err *err);
/** Most activation rows kn_cuda_gemv_bf16 takes. */
#define KN_GEMV_MAX_N 4
/** Decode-sized product without cuBLAS: y[n][rows] (f32, row stride ldy) = bf16(x[n][cols]) . W^T, W bf16
 * [rows][cols] contiguous, x f32 (row stride ldx) rounded to bf16 as the bf16 path's conversion does, f32
 * sums; a stream over W that fills the GPU where cuBLAS's output tiles leave SMs idle (kn_gemv.cu). Needs
 * kn_cuda_gemv_ok(n, cols, ldx) and 16-byte aligned x and W. */
int32_t kn_cuda_gemv_bf16(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx, const void *w,
                          float *y, int64_t ldy, cudaStream_t stream, struct mm_err *err);
/** Most weights one kn_cuda_gemv_bf16_multi call takes. */
#define KN_GEMV_MULTI_MAX 8
/** kn_cuda_gemv_bf16 for n_w (<= KN_GEMV_MULTI_MAX) weights w[i] [rows[i]][cols] that read the same x, in one
 * launch: y[i] [n][rows[i]] (row stride rows[i]), the same bits as one call per weight. */
int32_t kn_cuda_gemv_bf16_multi(int32_t n_w, const void *const *w, const int64_t *rows, float *const *y,
                                int64_t n, int64_t cols, const float *x, int64_t ldx, cudaStream_t stream,
                                struct mm_err *err);
/** Whether kn_cuda_gemv_bf16 takes these shapes: 1 <= n <= KN_GEMV_MAX_N, cols a multiple of 64, ldx >= cols
 * and a multiple of 4. */
int kn_cuda_gemv_ok(int64_t n, int64_t cols, int64_t ldx);
/** Most activation rows kn_cuda_gemv_f32 takes. */
#define KN_GEMV_F32_MAX_N 16
/** kn_cuda_gemv_bf16 with f32 weights (the router and index projections): y = x . W^T, f32 throughout, up to
 * KN_GEMV_F32_MAX_N rows; where the weight rows alone would not fill the GPU the inner dimension is split
 * over a cluster of CTAs whose sums are added in a fixed order (sm_90). Needs kn_cuda_gemv_f32_ok(n, cols,
 * ldx) (cols a multiple of 32) and 16-byte aligned x and W. */
int32_t kn_cuda_gemv_f32(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx, const float *w,
                         float *y, int64_t ldy, cudaStream_t stream, struct mm_err *err);
int kn_cuda_gemv_f32_ok(int64_t n, int64_t cols, int64_t ldx);
/** kn_cuda_gemv_f32 for n_w (<= KN_GEMV_MULTI_MAX) f32 weights w[i] [rows[i]][cols] that read the same x
 * (y[i] [n][rows[i]]), in one launch: each CTA stages its slice of x in shared memory once for 32 weight
 * rows (the index projections at 3-16 rows: kn_gemv.cu). Sums in a fixed order, not kn_cuda_gemv_f32's.
 * Needs kn_cuda_gemv_f32_multi_ok(n, cols, ldx) and 16-byte aligned x and W. */
int32_t kn_cuda_gemv_f32_multi(int32_t n_w, const float *const *w, const int64_t *rows, float *const *y,
                               int64_t n, int64_t cols, const float *x, int64_t ldx, cudaStream_t stream,
                               struct mm_err *err);
/** Whether kn_cuda_gemv_f32_multi takes these shapes: 1 <= n <= KN_GEMV_F32_MAX_N, cols a multiple of 128,
 * ldx >= cols and a multiple of 4. */
int kn_cuda_gemv_f32_multi_ok(int64_t n, int64_t cols, int64_t ldx);
/** How many CTAs kn_cuda_gemv_f32 splits the inner dimension over for this shape (1: none). */
int kn_cuda_gemv_f32_split(int64_t n, int64_t rows, int64_t cols);
/** Decode products at up to 16 activation rows on the tensor cores (kn_gemm_small.cu): y[n][rows] = bf16(x[n]
 * [cols]) . W^T, W bf16 [rows][cols] contiguous, f32 sums. Needs kn_cuda_gemm_small_ok(n, cols, ldx) (cols a
 * multiple of 256), 16-byte aligned x and W, and a workspace of kn_cuda_gemm_small_ws(n, rows, cols) bytes
 * (0 when the rows alone fill the GPU). Where the inner dimension is split, the split's CTAs add their sums
 * in a cluster if the grid runs in one wave; only a split in several waves goes through the workspace (it is
 * required whenever the size says so, whichever way the call goes). */
int32_t kn_cuda_gemm_small_bf16(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                const void *w, float *y, int64_t ldy, void *ws, size_t ws_bytes,
                                cudaStream_t stream, struct mm_err *err);
int kn_cuda_gemm_small_ok(int64_t n, int64_t cols, int64_t ldx);
/** Whether kn_cuda_gemm_small_bf16 is expected to read a rows x cols weight faster than cuBLAS at n rows
 * (measured on an H200: cuBLAS wins only on large weights whose rows fill its 128-row tiles). */
int kn_cuda_gemm_small_prefer(int64_t n, int64_t rows, int64_t cols);
size_t kn_cuda_gemm_small_ws(int64_t n, int64_t rows, int64_t cols);
/** kn_cuda_gemm_small_bf16 for n_w (1 or 2) weights w[i] of one shape [rows][cols] that read the same x (gate
 * and up), y[i] [n][ldy], in one launch of the row route (k split chosen for their rows together). Needs
 * kn_cuda_gemm_small_multi_ok(n_w, n, rows, cols, ldx) and kn_cuda_gemm_small_multi_ws(...) workspace bytes.
 */
int32_t kn_cuda_gemm_small_bf16_multi(int32_t n_w, const void *const *w, int64_t n, int64_t rows,
                                      int64_t cols, const float *x, int64_t ldx, float *const *y, int64_t ldy,
                                      void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err);
/** Whether the row route takes n_w weights of rows x cols together: where it takes each alone (by default
 * 2048+ rows and 4096+ columns). */
int kn_cuda_gemm_small_multi_ok(int32_t n_w, int64_t n, int64_t rows, int64_t cols, int64_t ldx);
size_t kn_cuda_gemm_small_multi_ws(int32_t n_w, int64_t n, int64_t rows, int64_t cols);
/** MoE products grouped by expert without the host (kn_gemm_small.cu): for each expert e < n_exp, rows
 * off[e] .. off[e + 1] (device offsets, from kn_cuda_moe_sort) of y_a = bf16(x rows) . W^T with W = w_a[e]
 * (device table of bf16 [rows][cols] pointers, 16-byte aligned), and of y_b from w_b[e] when w_b is not
 * NULL (gate and up in one launch). x f32 rows (stride ldx) in expert order, f32 sums; needs
 * kn_cuda_gemm_small_experts_ok(cols, ldx) (cols a multiple of 32). Re-reads each expert's weights for every
 * 16 of its rows: for decode-sized batches. */
int32_t kn_cuda_gemm_small_experts_bf16(int32_t n_exp, const int32_t *off, int64_t rows, int64_t cols,
                                        const float *x, int64_t ldx, const void *const *w_a,
                                        const void *const *w_b, float *y_a, float *y_b, int64_t ldy,
                                        cudaStream_t stream, struct mm_err *err);
int kn_cuda_gemm_small_experts_ok(int64_t cols, int64_t ldx);
/** MoE products of a prefill grouped by expert without the host (kn_gemm_experts.cu, wgmma): for each
 * expert e < n_exp, rows off[e] .. off[e + 1] (device offsets, kn_cuda_moe_sort; off[n_exp] <= n) of
 * y_a = x . W^T with W = w_a[e] (device table of bf16 [rows][cols] pointers, 16-byte aligned), and of y_b
 * from w_b[e] when w_b is not NULL (gate and up in one launch). x bf16 rows (stride ldx) in expert order, f32
 * sums in y (stride ldy, even). One persistent launch over tiles of 128 routed rows x 256 weight rows (256 x
 * 128 for large weights with many rows); needs kn_cuda_gemm_experts_ok(n_exp, rows, cols, ldx) (at most 512
 * experts, rows a multiple of 8, cols of 64) and sm_90a. maps_a / maps_b: the same weights' tensor maps
 * (kn_cuda_experts_maps_create; NULL: the operands are loaded with cp.async instead of TMA; the sums are the
 * same bits). tile_ctr: a 4-byte aligned device int32 the call zeroes (one memset on the stream) and its
 * CTAs take tiles from, so that the CTAs sharing a tile's operands run in step (TMA loads only; NULL: a
 * static tile order, the same bits); calls that share one must be ordered on one stream. */
int32_t kn_cuda_gemm_experts_bf16(int32_t n_exp, const int32_t *off, int64_t n, int64_t rows, int64_t cols,
                                  const uint16_t *x, int64_t ldx, const void *const *w_a,
                                  const void *const *w_b, const void *maps_a, const void *maps_b, float *y_a,
                                  float *y_b, int64_t ldy, int32_t *tile_ctr, cudaStream_t stream,
                                  struct mm_err *err);
/** Bytes of one tensor map in a kn_cuda_experts_maps_create array. */
#define KN_CUDA_TMAP_BYTES 128
/** Device tensor maps (*maps, n x KN_CUDA_TMAP_BYTES) of n bf16 weights [rows][cols] (w: host array of their
 * device addresses, 16-byte aligned) for kn_cuda_gemm_experts_bf16; MM_UNSUPPORTED where the driver makes
 * none. Free with kn_cuda_experts_maps_free. */
int32_t kn_cuda_experts_maps_create(const void *const *w, int32_t n, int64_t rows, int64_t cols, void **maps,
                                    struct mm_err *err);
void kn_cuda_experts_maps_free(void *maps);
int kn_cuda_gemm_experts_ok(int32_t n_exp, int64_t rows, int64_t cols, int64_t ldx);
/** The plan kn_cuda_gemm_experts_bf16 takes for n routed rows over n_exp experts of [rows][cols] weights,
 * knobs included: bit 0 set = tiles of 256 routed rows x 128 weight rows (else 128 x 256), bit 1 set = a
 * tile's 64-row quarters without rows are skipped. For tests and benchmarks. */
int kn_cuda_gemm_experts_plan(int32_t n_exp, int64_t n, int64_t rows, int64_t cols, int dynamic);
/** kn_cuda_gemm_experts_bf16 for FP8 experts on the e4m3 tensor cores (MMGW_CUDA_FP8_PREFILL=e4m3): the
 * weights w_a[e] / w_b[e] are the checkpoint's e4m3 [rows][cols] with f32 128 x 128 block scales s_a[e] /
 * s_b[e] ([ceil(rows / 128)][cols / 128]); the routed rows xq [n][cols] are e4m3 in 128-wide groups with
 * scales xs [cols / 128][ldxs >= n] (kn_cuda_x_e4m3_groups). y = sum over 128-wide slices of the slice's
 * e4m3 products times the row's and the weight block's scales, f32 sums. maps_a / maps_b (required):
 * kn_cuda_experts_maps_create_e4m3 of the same weights. Same tiles, tile counter and plan as the bf16
 * products; needs kn_cuda_gemm_experts_e4m3_ok and sm_90a. MM_UNSUPPORTED (nothing run) when the rows' tensor
 * map cannot be made. */
int32_t kn_cuda_gemm_experts_e4m3(int32_t n_exp, const int32_t *off, int64_t n, int64_t rows, int64_t cols,
                                  const uint8_t *xq, const float *xs, int64_t ldxs, const uint8_t *const *w_a,
                                  const float *const *s_a, const uint8_t *const *w_b, const float *const *s_b,
                                  const void *maps_a, const void *maps_b, float *y_a, float *y_b, int64_t ldy,
                                  int32_t *tile_ctr, cudaStream_t stream, struct mm_err *err);
/** At most 512 experts, rows a multiple of 8, cols of 128, scale blocks 128 x 128. */
int kn_cuda_gemm_experts_e4m3_ok(int32_t n_exp, int64_t rows, int64_t cols, int32_t bs_rows, int32_t bs_cols);
/** kn_cuda_experts_maps_create for e4m3 weights [rows][cols] (kn_cuda_gemm_experts_e4m3). */
int32_t kn_cuda_experts_maps_create_e4m3(const uint8_t *const *w, int32_t n, int64_t rows, int64_t cols,
                                         void **maps, struct mm_err *err);
/** MoE decode products without the host: for each pair p < pairs (<= 65535), y_a[p] = bf16(x[p / xdiv]) .
 * W^T with W = w_a[expert[p]] (device tables of bf16 [rows][cols] device pointers, 16-byte aligned), and the
 * same into y_b from w_b when w_b is not NULL (gate and up in one launch). Rows of y have stride ldy; x rows
 * stride ldx; shapes as kn_cuda_gemv_ok(1, cols, ldx). Same arithmetic as kn_cuda_gemv_bf16. group
 * (non-zero): pairs may share an expert (several tokens): the CTAs run the pairs fastest (each row tile of
 * every pair together, so L2 serves the repeated reads of an expert; KN_CUDA_GEMV_PAIR_FAST=0: not), and with
 * up to 64 pairs each expert's weights are streamed from HBM once for all of its pairs (its first pair's
 * CTAs run the others' tiles after it, from L1 / L2), except at widths that take (row, half) units
 * (KN_CUDA_GEMV_GROUP=0: once per pair). The same bits either way. */
int32_t kn_cuda_gemv_experts_bf16(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols, const float *x,
                                  int64_t ldx, const int32_t *expert, const void *const *w_a,
                                  const void *const *w_b, float *y_a, float *y_b, int64_t ldy, int32_t group,
                                  cudaStream_t stream, struct mm_err *err);
/** Most activation rows kn_cuda_gemv_fp8 takes. */
#define KN_GEMV_FP8_MAX_N 16
/** Decode-sized product with an FP8-E4M3 weight as stored (kn_gemv_fp8.cu): y[n][rows] (f32, row stride ldy)
 * = bf16(x[n][cols]) . (W * scale)^T, W e4m3 [rows][cols] contiguous with f32 block scales scale
 * [ceil(rows/bs_rows)][ceil(cols/bs_cols)] (the checkpoint's "weight_scale_inv", multiplied); W * scale
 * exact in f32 (not rounded to bf16), f32 sums. Reads 1 byte per weight. Needs kn_cuda_gemv_fp8_ok and
 * 16-byte aligned x and W. */
int32_t kn_cuda_gemv_fp8(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx, const uint8_t *w,
                         const float *scale, int32_t bs_rows, int32_t bs_cols, float *y, int64_t ldy,
                         cudaStream_t stream, struct mm_err *err);
/** Whether kn_cuda_gemv_fp8 takes these shapes: 1 <= n <= KN_GEMV_FP8_MAX_N, cols a multiple of 16, ldx >=
 * cols and a multiple of 4, bs_rows >= 1, bs_cols a multiple of 16. */
int kn_cuda_gemv_fp8_ok(int64_t n, int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols);
/** Whether kn_cuda_gemv_fp8, kn_cuda_gemv_fp8_multi and kn_cuda_gemv_experts_fp8 (n = 1) take the tensor-core
 * routes of kn_gemv_fp8_bulk.cu for these shapes (n <= 8, cols and bs_cols multiples of 64): by default the
 * per-warp cp.async ring from 3 rows (1.5-3x the CUDA-core kernels there); 1-2 rows stay on the CUDA-core
 * kernels (same arithmetic up to the order of f32 sums). KN_CUDA_GEMV_FP8_BULK=2 takes the ring at every n,
 * =1 bulk copies instead (measured slower), =0 never. The ring converts x once per CTA at 1-2 rows
 * (KN_CUDA_GEMV_FP8_RING_XS=0 turns that off). The MoE decode pairs take the ring by default
 * (kn_cuda_gemv_fp8_ring_experts_ok). */
int kn_cuda_gemv_fp8_bulk_ok(int64_t n, int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols);
/** Whether kn_cuda_gemv_experts_fp8 takes the tensor-core route fed by a per-warp cp.async ring
 * (kn_gemv_fp8_bulk.cu) for these shapes: cols and bs_cols multiples of 64, unless
 * KN_CUDA_GEMV_FP8_EXPERTS_RING=0 (the CUDA-core kernel then; the bulk-copy route, when on, goes first). */
int kn_cuda_gemv_fp8_ring_experts_ok(int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols);
/** kn_cuda_gemv_fp8 for n_w (<= KN_GEMV_MULTI_MAX) FP8 weights w[i] [rows[i]][cols] (scales scale[i], one
 * scale block for all) that read the same x, 1-4 activation rows, in one launch: y[i] [n][rows[i]] (row
 * stride rows[i]); 4 weight rows per CTA and no inner split, so the sums' order may differ from one call's.
 */
int32_t kn_cuda_gemv_fp8_multi(int32_t n_w, const uint8_t *const *w, const float *const *scale,
                               const int64_t *rows, float *const *y, int64_t n, int64_t cols, const float *x,
                               int64_t ldx, int32_t bs_rows, int32_t bs_cols, cudaStream_t stream,
                               struct mm_err *err);
/** kn_cuda_gemv_experts_bf16 with FP8 expert weights: tables w_a / s_a (and w_b / s_b) of device pointers to
 * each expert's e4m3 weight [rows][cols] (16-byte aligned) and its f32 block scales (block bs_rows x bs_cols,
 * the same for every expert); arithmetic as kn_cuda_gemv_fp8; shapes as kn_cuda_gemv_fp8_ok(1, cols, ldx,
 * bs_rows, bs_cols). group (non-zero): pairs may share an expert (several tokens): the CTAs run the pairs
 * fastest, as kn_cuda_gemv_experts_bf16's do (KN_CUDA_GEMV_PAIR_FAST=0: not); the same bits either way. */
int32_t kn_cuda_gemv_experts_fp8(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols, const float *x,
                                 int64_t ldx, const int32_t *expert, const uint8_t *const *w_a,
                                 const float *const *s_a, const uint8_t *const *w_b, const float *const *s_b,
                                 int32_t bs_rows, int32_t bs_cols, float *y_a, float *y_b, int64_t ldy,
                                 int32_t group, cudaStream_t stream, struct mm_err *err);
/** FP8 expert weights to bf16 for the grouped expert products: for each set s < n_sets and expert e < n_exp
 * whose rows off[e] .. off[e + 1] are not empty (device offsets; off NULL: every expert), out[s * n_exp + e]
 * (device table of bf16 [rows][cols], 16-byte aligned) = bf16(w[s * n_exp + e] * its block scales), the
 * values kn_cuda_dequant_fp8_block gives; the other experts' outputs are left as they were. Shapes:
 * kn_cuda_dequant_fp8_experts_ok. */
int32_t kn_cuda_dequant_fp8_experts(int32_t n_sets, int32_t n_exp, const int32_t *off,
                                    const uint8_t *const *w, const float *const *scale, int64_t rows,
                                    int64_t cols, int32_t bs_rows, int32_t bs_cols, void *const *out,
                                    cudaStream_t stream, struct mm_err *err);
/** cols a multiple of 16, bs_cols a multiple of 16, bs_rows >= 1. */
int kn_cuda_dequant_fp8_experts_ok(int64_t rows, int64_t cols, int32_t bs_rows, int32_t bs_cols);
/** Activation rows for the FP8 tensor-core products (kn_gemm_small_fp8.cu): xh [n][cols] (f16, contiguous) =
 * bf16(x) * 2^k_i and xs[i] = 2^-k_i, k_i per row so that its largest |value| lies in [2^14, 2^15) (exact
 * but for values under 2^-28 of the row's largest). Needs kn_cuda_x_f16_scaled_ok, x 16-byte aligned. */
int32_t kn_cuda_x_f16_scaled(int64_t n, int64_t cols, const float *x, int64_t ldx, void *xh, float *xs,
                             cudaStream_t stream, struct mm_err *err);
/** cols a multiple of 4, ldx >= cols and a multiple of 4. */
int kn_cuda_x_f16_scaled_ok(int64_t cols, int64_t ldx);
/** Decode-sized product with an FP8-E4M3 weight as stored, on the tensor cores: y[n][rows] (row stride ldy)
 * = x . (W * scale)^T for x given as kn_cuda_x_f16_scaled's xh / xs (n rows); W and scale as
 * kn_cuda_gemv_fp8's; arithmetic as kn_cuda_gemv_fp8's up to the order of f32 sums. ws: at least
 * kn_cuda_gemm_small_fp8_ws bytes (the partial sums of an inner-dimension split). xh and W 16-byte aligned.
 */
int32_t kn_cuda_gemm_small_fp8(int64_t n, int64_t rows, int64_t cols, const void *xh, const float *xs,
                               const uint8_t *w, const float *scale, int32_t bs_rows, int32_t bs_cols,
                               float *y, int64_t ldy, void *ws, size_t ws_bytes, cudaStream_t stream,
                               struct mm_err *err);
/** Whether kn_cuda_gemm_small_fp8 takes these shapes: 1 <= n <= 16, cols and bs_cols multiples of 64. */
int kn_cuda_gemm_small_fp8_ok(int64_t n, int64_t rows, int64_t cols, int32_t bs_rows, int32_t bs_cols);
size_t kn_cuda_gemm_small_fp8_ws(int64_t n, int64_t rows, int64_t cols);
/** kn_cuda_gemm_small_experts_bf16 with FP8 expert weights (tables w_a / s_a, w_b / s_b as
 * kn_cuda_gemv_experts_fp8's) and the sorted activation rows given as kn_cuda_x_f16_scaled's xh / xs
 * (row stride cols); arithmetic as kn_cuda_gemm_small_fp8's. */
int32_t kn_cuda_gemm_small_experts_fp8(int32_t n_exp, const int32_t *off, int64_t rows, int64_t cols,
                                       const void *xh, const float *xs, const uint8_t *const *w_a,
                                       const float *const *s_a, const uint8_t *const *w_b,
                                       const float *const *s_b, int32_t bs_rows, int32_t bs_cols, float *y_a,
                                       float *y_b, int64_t ldy, cudaStream_t stream, struct mm_err *err);
/** cols and bs_cols multiples of 64, bs_rows >= 1. */
int kn_cuda_gemm_small_experts_fp8_ok(int64_t cols, int32_t bs_rows, int32_t bs_cols);
/** Strided batched version: batch products, operands batch_a/batch_w/batch_c elements apart. */
int32_t kn_cuda_gemm_bf16_batched(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const void *a,
                                  int64_t lda, int64_t batch_a, const void *w, int64_t ldw, int64_t batch_w,
                                  float beta, void *c, int64_t ldc, int64_t batch_c, int32_t c_bf16,
                                  int32_t batch, struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* Device facts                                                                                           */

/** Number of usable CUDA devices (0 when the driver or device is missing; never fails). */
int32_t kn_cuda_device_count(void);
/** Map a CUDA error to MM_ERROR with the CUDA error name in err; returns MM_OK for cudaSuccess. */
int32_t kn_cuda_check(cudaError_t e, const char *what, struct mm_err *err);

/** The kernels' tuning knobs (KN_CUDA_* environment variables) are read once per thread and cached: after
 * changing one with setenv / unsetenv, call this so that the next kernel call sees it (tests, benchmarks). */
void kn_cuda_knobs_reload(void);
/** The integer value the kernels see for knob name (atoi; dflt when unset or empty), through the cache. */
int32_t kn_cuda_knob_value(const char *name, int32_t dflt);

#ifdef __cplusplus
}
#endif

#endif
