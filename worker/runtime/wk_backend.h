/* The compute backend behind the model code: a table of operations plus its context ({iface, ctx}, as
 * ggml backends are). The model code (wk_forward.c, wk_vision.c) only sequences these operations; a
 * backend owns every byte the operations touch.
 *
 * Ownership
 *  - Activations and scratch: float buffers from alloc(); "device" pointers that the model code may
 *    offset (row i of a [n][d] buffer is p + i * d) but never dereferences. Data crosses with
 *    upload()/download(). Activations are fp32 in this interface (the CPU reference computes in fp32).
 *  - Weights: weight_load() receives a checkpoint tensor as stored (struct wk_wsrc: bf16/f16/f32 or FP8 with
 *    block scales, mmap'ed) and keeps it in whatever form the backend computes with; the model code only
 *    holds the opaque struct wk_weight handle. The mapping may be closed once all weights are loaded.
 *  - Paged cache: cache_init() allocates K, V (every layer) and index keys (MSA layers) for n_pages pages of
 *    `block` tokens, layout as in kernels/cpu/kn_msa.h. Page ids and block tables are decided by the
 *    runtime's cache manager (wk_cache.c), not by the backend.
 *  - Batch metadata (struct wk_batch: ids, positions, per-sequence block tables) is host memory, valid
 *    from batch_begin() until the next batch_begin(); a device backend copies what it needs there.
 *
 * Every operation works on the current batch's n_tokens rows unless it takes an explicit n. Operations
 * return nothing: a backend records failures (device errors, scratch allocation) and reports them from the
 * next batch_end(). The vision ops need no batch; the vision code calls batch_end() after them. */
#ifndef WK_BACKEND_H
#define WK_BACKEND_H

#include <stdint.h>

#include "mm_cands.h"
#include "mm_status.h"
#include "wk_ckpt.h"

struct wk_weight; /* backend-defined */
struct wk_be;

/** Shape of the paged cache. */
struct wk_cache_geom {
    int64_t n_pages;
    int32_t block; /* tokens per page (the MSA block) */
    int32_t n_layers;
    const uint8_t *layer_sparse; /* [n_layers]: 1 = MSA layer (has an index-key cache) */
    int32_t n_kv, head_dim;      /* K/V token row: n_kv * head_dim */
    int32_t idx_dim;             /* index-key token row */
};

/** The tokens of one forward step: n_seqs sequences, each contributing a contiguous run of tokens. */
struct wk_batch {
    int64_t n_tokens;
    int32_t n_seqs;
    const int32_t *ids;       /* [n_tokens] token ids */
    const int64_t *pos;       /* [n_tokens] absolute positions */
    const int32_t *seq_of;    /* [n_tokens] index of the token's sequence in this batch */
    const int64_t *seq_first; /* [n_seqs] first token row of each sequence */
    const int32_t *seq_n;     /* [n_seqs] tokens of each sequence in this step */
    const int64_t *seq_len;   /* [n_seqs] tokens in the cache after this step (the new ones included) */
    const int32_t *const *block_tables; /* [n_seqs] page id per block, covering seq_len tokens */
    int64_t max_pos;                    /* largest position in the batch */
};

/** Parameters of an MSA layer's selection. */
struct wk_msa_params {
    int32_t n_idx_heads, idx_dim, topk, n_local;
};

/** Where an MSA op reports the selected blocks (the first MSA layer, for mmgw-run and tests): row
 * (g, i) at sel + (g * n_tokens + i) * stride, -1 padded to stride. NULL = not wanted. */
struct wk_sel_out {
    int32_t *sel;
    int32_t stride;
};

/** A MoE layer's routed experts. */
struct wk_moe {
    const struct wk_weight *router;    /* [n_experts][hidden] */
    const struct wk_weight *bias;      /* [n_experts] selection-only bias, or NULL */
    const struct wk_weight *const *w1; /* [n_experts] gate [inter][hidden] */
    const struct wk_weight *const *w3; /* [n_experts] up   [inter][hidden] */
    const struct wk_weight *const *w2; /* [n_experts] down [hidden][inter] */
    int32_t n_experts, topk, hidden, inter;
    float scale, alpha, limit; /* routed_scaling_factor, swiglu alpha and limit */
};

/** The inputs of the attn_layer op: the batch's projections of one layer (normed and rotated in place). */
struct wk_attn_layer {
    int32_t layer;
    float *q, *k;                            /* [n_tokens][n_heads * head_dim], [n_tokens][n_kv * head_dim] */
    const float *v;                          /* [n_tokens][n_kv * head_dim] */
    const struct wk_weight *q_norm, *k_norm; /* [head_dim] */
    float *iq, *ik;                          /* MSA: [n_tokens][n_idx_heads * idx_dim], [n_tokens][idx_dim] */
    const struct wk_weight *iq_norm, *ik_norm; /* MSA: [idx_dim] */
    const float *cos_t, *sin_t;                /* RoPE tables [n_tokens][table_stride] */
    int32_t table_stride, rot, irot;           /* rotated dims of q/k and of the index q/k */
    int32_t n_heads;
    float eps, scale;
    const struct wk_msa_params *msa; /* NULL: a dense layer */
    const struct wk_sel_out *sel;    /* MSA: where to report the selections, or NULL */
    float *out;                      /* [n_tokens][n_heads * head_dim] */
};

struct wk_backend_iface {
    const char *name;
    void (*destroy)(void *ctx);

    /* ---- memory ---- */
    float *(*alloc)(void *ctx, int64_t n_floats); /* NULL on failure */
    void (*free)(void *ctx, float *p);
    void (*upload)(void *ctx, float *dst, const float *src, int64_t n_floats);
    void (*download)(void *ctx, float *dst, const float *src, int64_t n_floats);
    /** Optional (NULL: download() per row): rows of n floats, contiguous at src, row i to dst[i]; for a
     * device whose every download is a round trip (a decode step's logits, one row per sequence). */
    void (*download_rows)(void *ctx, float *const *dst, const float *src, int32_t rows, int64_t n);
    /** Optional (NULL: each row downloaded, then wk_argmax): ids[i] = wk_argmax of the i-th of rows rows of
     * n floats contiguous at src (host ids); greedy decoding without the logits' download. */
    void (*argmax_rows)(void *ctx, const float *src, int32_t rows, int64_t n, int32_t *ids);
    /** Optional (NULL: such rows are downloaded whole): the sampling candidates of each of rows rows of n
     * floats at src whose req[i].k > 0 (kn_cands.h's rule at temperature req[i].t): counts[i] of them, the
     * first min(counts[i], cap) (id, logit) pairs at ids / vals + i x cap in any order (host arrays). A row
     * with more than cap whose req[i] asks for the draw may be drawn from where it lies (kn_draw.h's rule):
     * counts[i] = MM_CANDS_DRAWN, the token at ids[i x cap] and its logit at vals[i x cap], with req[i].n_top
     * the top list after them (mm_cands.h); its logits at src may be overwritten. A row whose req[i].flags
     * has MM_CANDS_LSE also gets its log-sum-exp in lse[i] (mm_logsumexp's). */
    void (*topk_rows)(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                      int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse);

    /* ---- weights ---- */
    int32_t (*weight_load)(void *ctx, const struct wk_wsrc *src, struct wk_weight **out, struct mm_err *err);
    void (*weight_free)(void *ctx, struct wk_weight *w);
    /** Bytes the backend keeps for a weight (for reports). */
    int64_t (*weight_bytes)(void *ctx, const struct wk_weight *w);

    /* ---- paged cache ---- */
    int32_t (*cache_init)(void *ctx, const struct wk_cache_geom *g, struct mm_err *err);
    /** Copy the first n_tokens token rows of page src to page dst in every layer (fork of a partial page). */
    void (*cache_copy_page)(void *ctx, int32_t dst, int32_t src, int32_t n_tokens);

    /* ---- per step ---- */
    int32_t (*batch_begin)(void *ctx, const struct wk_batch *b, struct mm_err *err);
    int32_t (*batch_end)(void *ctx, struct mm_err *err);

    /* ---- text ops (rows = the batch's tokens) ---- */
    /** out[i] = table[ids[i]] for the batch's ids. */
    void (*embed)(void *ctx, const struct wk_weight *table, float *out, int32_t dim);
    /** out[rows[j]] = data[j] (host rows of dim floats): media embeddings at placeholder positions. */
    void (*set_rows)(void *ctx, float *out, int32_t dim, const int64_t *rows, const float *data,
                     int64_t n_rows);
    /** Gemma RMSNorm of n rows of dim. x and out may alias. */
    void (*rmsnorm)(void *ctx, const float *x, const struct wk_weight *w, int64_t n, int32_t dim, float eps,
                    float *out);
    /** Per-head Gemma RMSNorm in place over n rows of n_heads * head_dim. */
    void (*head_rmsnorm)(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim,
                         const struct wk_weight *w, float eps);
    /** Rotate the first rot dims of every head with device tables cos/sin [n][table_stride] (kn_rope.h). */
    void (*rope)(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim, const float *cos_t,
                 const float *sin_t, int32_t table_stride, int32_t rot);
    /** y[n][rows(w)] = x[n][cols(w)] . w^T (+ bias). */
    void (*linear)(void *ctx, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                   int64_t n, float *y);
    /** y += x over n floats. */
    void (*add)(void *ctx, float *y, const float *x, int64_t n);
    /** M3's clamped SwiGLU over n floats (kn_act.h). */
    void (*swiglu)(void *ctx, const float *gate, const float *up, int64_t n, float alpha, float limit,
                   float *out);
    /** Write the batch's K and V rows ([n_tokens][n_kv * head_dim]) of a layer into the cache. */
    void (*kv_write)(void *ctx, int32_t layer, const float *k, const float *v);
    /** Write the batch's index keys ([n_tokens][idx_dim]) of an MSA layer into the index cache. */
    void (*idx_write)(void *ctx, int32_t layer, const float *idx_k);
    /** Dense causal GQA attention of the batch's queries [n_tokens][n_heads * head_dim] over each sequence's
     * cache. */
    void (*attn_dense)(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out);
    /** MSA: index scores of idx_q [n_tokens][n_idx_heads * idx_dim] against the index cache, top-k with the
     * local block(s) forced, exact attention over the selected blocks. */
    void (*attn_msa)(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                     float scale, const struct wk_msa_params *p, const struct wk_sel_out *sel, float *out);
    /** Routed experts of a MoE layer: out = scale * sum over the chosen experts of w_e * E_e(x). */
    void (*moe)(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out);

    /* ---- vision ops ---- */
    void (*layernorm)(void *ctx, const float *x, const struct wk_weight *w, const struct wk_weight *b,
                      int64_t n, int32_t dim, float eps, float *out);
    void (*gelu)(void *ctx, float *x, int64_t n, int32_t kind);
    /** Bidirectional attention over n rows of q, k, v ([n][n_heads * head_dim] each). */
    void (*attn_full)(void *ctx, const float *q, const float *k, const float *v, int64_t n, int32_t n_heads,
                      int32_t head_dim, float *out);

    /* ---- appended; optional (NULL: the model code calls linear once per weight) ---- */
    /** y[i][n][rows(w[i])] = x[n][cols] . w[i]^T for n_w (<= WK_LINEAR_MULTI_MAX) weights without bias that
     * read the same input (q/k/v, gate/up): one parallel step instead of n_w. */
    void (*linear_multi)(void *ctx, int32_t n_w, const struct wk_weight *const *w, const float *x, int64_t n,
                         float *const *y);

    /** One layer's attention from its projections (struct wk_attn_layer): the per-head norms and RoPE of q
     * and k (and of the index query and key of an MSA layer), the cache writes, and dense or MSA attention,
     * with the results of the separate ops (head_rmsnorm, rope, kv_write, idx_write, attn_dense/attn_msa),
     * bit for bit. Lets a backend run the per-token work in the same parallel step as the attention. */
    void (*attn_layer)(void *ctx, const struct wk_attn_layer *a);

    /** y += x over n rows of dim, then out = Gemma RMSNorm of y (the residual add and the next norm) in one
     * step: y as add, out as rmsnorm up to the summation order of the norm. Optional: NULL means add then
     * rmsnorm. */
    void (*add_rmsnorm)(void *ctx, float *y, const float *x, const struct wk_weight *w, int64_t n,
                        int32_t dim, float eps, float *out);

    /** Bytes one page of geometry g (g->n_pages ignored) takes in this backend's cache: K, V and index keys
     * in the element types it stores (fp16/bf16/fp8 caches take less than fp32). The runtime sizes the pool
     * and reports bytes_per_page with it. Optional: NULL means fp32 elements. */
    int64_t (*cache_page_bytes)(void *ctx, const struct wk_cache_geom *g);

    /** A second context for the vision ops (memory, linear, layernorm, gelu, rope, add, attn_full,
     * batch_end) that one other thread may drive while this context runs steps: it reads this context's
     * weights (never loads or frees any) and has its own threads (`threads`, where the backend has any),
     * scratch and queue, so that media encode beside the decode steps. Destroyed before this context.
     * Optional: NULL means media are encoded on the engine's thread, inside the steps. */
    int32_t (*vision_context)(void *ctx, int32_t threads, struct wk_be *out, struct mm_err *err);

    /** upload() of n values of element type dtype at host src into the floats at dst, widened to f32 as
     * mm_convert_to_f32 does, bit for bit (media pixels come as bf16 or f16: a device moves half the bytes
     * and widens them itself). Returns 1 when done, 0 when this dtype is not taken (the caller converts on
     * the host and calls upload). Optional: NULL means 0 for every dtype. */
    int32_t (*upload_typed)(void *ctx, float *dst, const void *src, int32_t dtype, int64_t n);

    /* ---- appended: media embeddings kept where the vision tower made them (both optional, or neither) ----
     */
    /** dst = src over n floats, both in this backend's memory; src may be memory this context's vision
     * context allocated, written by work that has completed (an encode that returned). Ordered after this
     * context's earlier operations. NULL: media embeddings cross through the host (download, then set_rows).
     */
    void (*copy)(void *ctx, float *dst, const float *src, int64_t n);
    /** Free, from this context, memory that its vision context allocated: after this context's earlier
     * operations (which may read it), without waiting for anything the vision context runs meanwhile. */
    void (*free_vision)(void *ctx, float *p);
};

/** Most weights one linear_multi call takes. */
#define WK_LINEAR_MULTI_MAX 8

/** A backend instance: its operation table and context. */
struct wk_be {
    const struct wk_backend_iface *iface;
    void *ctx;
};

/** The CPU backend: fp32 weights converted at load, OpenBLAS/own GEMMs, `threads` threads (0 = all cores). */
int32_t wk_backend_cpu_create(int32_t threads, struct wk_be *out, struct mm_err *err);

#endif
