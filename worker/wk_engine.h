/* The model runtime as its users see it: mmgw-run (offline evaluation) and the gRPC worker's scheduler.
 *
 * An engine owns one loaded model, one backend (CPU or CUDA) and one paged cache pool: KV pages and
 * index-key pages of one MSA block each (config block_size tokens), shared by all sequences through
 * per-sequence block tables. A sequence is a handle on its pages; forward() appends tokens to
 * sequences and returns logits. The engine is not thread-safe: one thread (the scheduler) drives it; the one
 * exception is media encoding after wk_engine_set_encode_threads (at the end of this file).
 *
 * Contract for batching: a forward over several sequences gives, for each, the same results as running
 * it alone (MSA stays on; no dense fallback).
 */
#ifndef WK_ENGINE_H
#define WK_ENGINE_H

#include <stdint.h>

#include "mm_cands.h"
#include "mm_status.h"

enum wk_backend { WK_BACKEND_CPU = 0, WK_BACKEND_CUDA = 1 };

struct wk_engine_opts {
    int32_t backend;          /* enum wk_backend */
    int32_t threads;          /* CPU threads; 0 = all cores */
    int64_t cache_pages;      /* pages in the pool (each holds block_size tokens of every layer); 0 = auto */
    int64_t cache_bytes;      /* alternative budget in bytes when cache_pages is 0; 0 = auto */
    int32_t max_batch_tokens; /* most tokens one forward() may take (sizes scratch buffers); 0 = 8192 */
};

struct wk_model_info {
    char name[128];      /* from the model directory name */
    char model_type[64]; /* config.json model_type */
    char dtype[16];      /* weights: "bf16", "f32", "fp8_e4m3"... */
    int32_t vocab_size;
    int32_t hidden_size;
    int64_t max_context; /* max_position_embeddings */
    int32_t block_size;  /* MSA block = cache page, in tokens */
    int32_t n_layers;
    int32_t first_msa_layer; /* -1 when the model has no MSA layer */
    int32_t n_kv_groups;     /* num_key_value_heads */
    int32_t topk_blocks;
    int32_t image_token_id, video_token_id;
    int32_t eos_ids[8];
    int32_t n_eos;
    int64_t pages_total;
    int64_t bytes_per_page; /* KV + index cache bytes of one page over all layers */
    /* appended by the runtime: */
    int32_t n_index_heads; /* MSA index heads: the first dimension of wk_step_item.sel (n_kv_groups in M3) */
    int32_t local_blocks;  /* blocks forced into every MSA selection (the query's own block and before) */
    /* appended (media encoding beside forward): */
    int32_t concurrent_encode; /* 1 after wk_engine_set_encode_threads: the encode calls may run on another
                                  thread concurrently with every other call */
    /* appended (placeholder checks): */
    int32_t merge_factor; /* patch rows per media embedding (placeholder token): the vision config's
                             spatial_merge_size squared (4 for M3's 2x2 merge); 0 without a vision tower */
};

/** A media item ready for the vision tower: patch rows [n_rows, row_len] (row_len = C*T*P*P) in the
 * reference row order, and its grid. dtype is MM_DT_F32, MM_DT_BF16 or MM_DT_F16 (mm_dtype.h). */
struct wk_media {
    int32_t kind; /* 0 image, 1 video (same numbering as the plugin ABI) */
    int32_t dtype;
    const void *pixels;
    int64_t n_rows, row_len;
    int64_t grid_t, grid_h, grid_w;
};

struct wk_engine;
struct wk_seq;

int32_t wk_engine_open(const char *model_dir, const struct wk_engine_opts *opts, struct wk_engine **out,
                       struct mm_err *err);
void wk_engine_close(struct wk_engine *e);
const struct wk_model_info *wk_engine_info(const struct wk_engine *e);

/** Run the vision tower and projector on one item. *embeds (malloc'ed, caller frees) receives
 * [*n_tokens, hidden_size] f32 rows: one per placeholder token (t*h*w / info.merge_factor: t*h*w/4 for M3).
 */
int32_t wk_engine_encode_media(struct wk_engine *e, const struct wk_media *m, float **embeds,
                               int64_t *n_tokens, struct mm_err *err);

/* ---- sequences and pages ---- */
/** A new empty sequence (no pages yet). */
int32_t wk_seq_create(struct wk_engine *e, struct wk_seq **out, struct mm_err *err);
/** A new sequence sharing all of parent's tokens (full pages shared by reference count; the partial
 * last page copied), for n > 1 choices. */
int32_t wk_seq_fork(struct wk_engine *e, const struct wk_seq *parent, struct wk_seq **out,
                    struct mm_err *err);
/** Release a sequence and its page references (pages return to the pool at once). */
void wk_seq_free(struct wk_engine *e, struct wk_seq *s);
/** Tokens in the sequence's cache. */
int64_t wk_seq_len(const struct wk_seq *s);
/** Pages not referenced by any sequence or the prefix cache's pinned set. */
int64_t wk_engine_free_pages(const struct wk_engine *e);
/** Pages a sequence of n tokens needs. */
int64_t wk_engine_pages_for(const struct wk_engine *e, int64_t n_tokens);
/** Reuse cached full pages whose token prefix equals ids[0..k) (k a multiple of block_size, k < n, and
 * no page holding media placeholders unless media hashes match: pass media_hash 0 for text-only).
 * Attaches them to the empty sequence s and returns k (0 when nothing matches). */
int64_t wk_seq_reuse_prefix(struct wk_engine *e, struct wk_seq *s, const int32_t *ids, int64_t n,
                            uint64_t media_hash);

/* ---- forward ---- */
/** WK_LOGITS_ARGMAX: only the greedy token of the last position (wk_argmax of its logits) comes back, in
 * token: on a GPU the vocabulary's logits then stay on the device (800 KB per sequence at M3's 200K). */
/** WK_LOGITS_CANDS: the last position's candidates for top-k sampling (struct wk_cands): the few logits
 * wk_sample with that top_k and temperature can pick from, so that wk_sample on them alone gives what it
 * gives on the whole row (kernels/cpu/kn_cands.h); logits is the fallback for a row with more of them,
 * unless the request allows the draw (draw, u) and has no top-k: the backend then draws the token where
 * the logits lie (kernels/cpu/kn_draw.h: wk_sample's filters and draw with exact sums). */
enum wk_logits_mode {
    WK_LOGITS_NONE = 0,
    WK_LOGITS_LAST = 1,
    WK_LOGITS_ALL = 2,
    WK_LOGITS_ARGMAX = 3,
    WK_LOGITS_CANDS = 4
};

struct wk_cands {
    int32_t k;         /* in: top-k, >= 1 (INT32_MAX: none) */
    float temperature; /* in: > 0 */
    int32_t cap;       /* in: room in ids and logits, >= 1 */
    int32_t *ids;      /* out: the candidates' token ids, ascending; the drawn token (n = -2) */
    float *logits;     /* out: their logits */
    int32_t n;         /* out: how many; -1: more than cap, the item's logits holds the whole row instead;
                        * -2: drawn, the token in ids[0] and its logit in logits[0] */
    /* in, for the draw: it applies when draw is 1 and k is INT32_MAX */
    int32_t draw;
    float top_p, min_p; /* wk_sampling's filters */
    double u;           /* the uniform in [0, 1) wk_sample would take next (wk_sample_uniform on a copy) */
    /* in: MM_CANDS_EXACT (no floor: the top k however far below the best, for log-probabilities),
     * MM_CANDS_LSE (lse below); out: the row's log-sum-exp (mm_logsumexp's, as the worker's mm_logsumexp) */
    int32_t flags;
    float lse;
    /* in: > 0 with k INT32_MAX: the log-probabilities of a sampled token want the n_top largest logits too
     * (mm_cands.h): candidates keep them, and a drawn row (n = -2) returns its token's logit in logits[0] and
     * the top list after it, ids / logits [1, 1 + n_top_out) in any order (n_top_out out) */
    int32_t n_top, n_top_out;
};

/** Positions [at, at + n) of a step item take the embedding rows at rows ([n][hidden_size] f32): host memory,
 * or (kept 1) the backend's, from a struct wk_embeds whose place is not WK_EMBEDS_HOST. */
struct wk_embed_span {
    int32_t at, n;
    const float *rows;
    int32_t kept;
};

/** One sequence's part of a forward step: n new tokens appended at positions [len, len + n). */
struct wk_step_item {
    struct wk_seq *seq;
    const int32_t *ids; /* n token ids */
    int32_t n;
    /** Optional: embeddings to use instead of the token embedding where use_embed[i] is 1
     * ([n, hidden_size] f32, rows for other positions ignored). NULL = none. */
    const float *embeds;
    const uint8_t *use_embed;
    int32_t logits_mode; /* enum wk_logits_mode */
    float *logits;       /* out: [1 or n, vocab] f32 (caller-allocated), per logits_mode (not ARGMAX) */
    /** Optional out: the first MSA layer's selected blocks for these n positions,
     * [n_kv_groups, n, topk] i32 (n_index_heads rows in general; equal to n_kv_groups in M3), -1 = empty slot
     * (topk = min(topk_blocks, blocks so far)). The caller passes sel_k = the row stride it allocated (>=
     * topk_blocks). NULL = not wanted. */
    int32_t *sel;
    int32_t sel_k;
    int32_t token;          /* out: the greedy token, for WK_LOGITS_ARGMAX */
    struct wk_cands *cands; /* in / out, for WK_LOGITS_CANDS */
    /** Optional, instead of embeds / use_embed: n_spans runs of positions that take media embeddings, in
     * increasing order and apart, each read where it lies (host memory, or the backend's for kept
     * embeddings) without a staging copy. NULL = none. */
    const struct wk_embed_span *spans;
    int32_t n_spans;
};

/** Append every item's tokens to its sequence and compute the requested logits. Pages are taken from the
 * pool as needed; MM_EXHAUSTED (and no change to any sequence) when the pool cannot hold them. */
int32_t wk_engine_forward(struct wk_engine *e, struct wk_step_item *items, int32_t n_items,
                          struct mm_err *err);

/* ---- sampling ---- */
struct wk_sampling {
    float temperature; /* 0 = greedy */
    float top_p;       /* 1 = off */
    int32_t top_k;     /* 0 = off */
    float min_p;       /* 0 = off */
};

/** Pick a token from logits [vocab]. rng is the per-choice state (seeded by the caller with the request
 * seed). *logprob (optional) gets the chosen token's log-probability under the final distribution. */
int32_t wk_sample(const float *logits, int32_t vocab, const struct wk_sampling *sp, uint64_t *rng,
                  float *logprob);
/** The uniform in [0, 1) that wk_sample draws (one per sampled token), advancing rng as it does. */
double wk_sample_uniform(uint64_t *rng);
/** The greedy token: the first largest logit; NaN is never chosen (0 when every logit is NaN). */
int32_t wk_argmax(const float *logits, int32_t vocab);

/* ---- appended: media encoding beside forward() (the worker's encoder thread) ---- */
/** Give the vision tower its own compute context (CPU: `threads` threads with their own pool and scratch;
 * CUDA: its own stream, scratch and cuBLAS handle; the weights are shared read-only), so that the encode
 * calls may run on one other thread while the engine's thread drives forward() and the sequence calls;
 * info.concurrent_encode becomes 1. Encode calls are serialized among themselves. Call it once, before a
 * second thread uses the engine. MM_UNSUPPORTED when the backend cannot (no vision context, or no vision
 * tower): encoding then stays on the engine's thread. */
int32_t wk_engine_set_encode_threads(struct wk_engine *e, int32_t threads, struct mm_err *err);

/** wk_engine_encode_media that reads *cancel (an atomic load) between vision layers and stops with
 * MM_CANCELLED once it is nonzero, so an aborted request does not hold the encoder for the rest of a long
 * video. cancel may be NULL. */
int32_t wk_engine_encode_media_cancellable(struct wk_engine *e, const struct wk_media *m,
                                           const int32_t *cancel, float **embeds, int64_t *n_tokens,
                                           struct mm_err *err);

/* ---- appended: media embeddings kept where the vision tower made them ---- */
/** Where a struct wk_embeds lies. */
enum wk_embeds_place {
    WK_EMBEDS_HOST = 0,   /* malloc'ed host memory */
    WK_EMBEDS_ENGINE = 1, /* the backend's memory (a GPU's), allocated by the engine's own context */
    WK_EMBEDS_VISION = 2  /* the backend's memory, allocated by the vision context */
};

/** One item's embeddings, [n_tokens][hidden_size] f32. A forward reads them where they lie through
 * wk_step_item.spans: on a GPU, embeddings kept in device memory reach the prompt's rows without a trip
 * through the host (a download after the encode, then an upload in the step: 14 MB each way per M3 image). */
struct wk_embeds {
    float *data;
    int64_t n_tokens;
    int32_t place; /* enum wk_embeds_place */
};

/** wk_engine_encode_media_cancellable with the result left in the backend's memory when the backend can
 * read it from there (its copy / free_vision operations) and the bytes kept so far stay within the engine's
 * budget (wk_engine_set_media_keep); otherwise in host memory, as wk_engine_encode_media. The same threads
 * as wk_engine_encode_media_cancellable. Release with wk_engine_embeds_free; nothing to release on error. */
int32_t wk_engine_encode_media_kept(struct wk_engine *e, const struct wk_media *m, const int32_t *cancel,
                                    struct wk_embeds *out, struct mm_err *err);
/** Release embeddings (any place; data NULL is fine) and zero *x. On the engine's thread: a kept buffer is
 * freed after the forward steps already issued, which may still read it. */
void wk_engine_embeds_free(struct wk_engine *e, struct wk_embeds *x);
/** Most bytes of embeddings kept in the backend's memory at once (default WK_MEDIA_KEEP_DEFAULT; 0: never,
 * every result goes to the host). Call it before encoding starts. */
void wk_engine_set_media_keep(struct wk_engine *e, int64_t bytes);
/** Bytes of embeddings kept in the backend's memory now (for reports and tests). */
int64_t wk_engine_media_kept(const struct wk_engine *e);
#define WK_MEDIA_KEEP_DEFAULT ((int64_t)256 << 20)

#endif
