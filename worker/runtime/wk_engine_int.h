/* Engine internals shared by wk_engine.c (lifecycle, sequences, pages), wk_forward.c and wk_vision.c. */
#ifndef WK_ENGINE_INT_H
#define WK_ENGINE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "wk_backend.h"
#include "wk_cache.h"
#include "wk_config.h"
#include "wk_engine.h"
#include "wk_model.h"

struct wk_seq {
    int64_t len; /* tokens in the cache */
    int32_t *bt; /* block table: page per block */
    int64_t n_blocks, bt_cap;
    /* prefix publishing: the chain key of the last full page and the ids of the current partial page */
    uint64_t last_key;
    uint64_t media_hash;
    int32_t *cur_ids;           /* [block] */
    uint8_t cur_media;          /* the partial page holds media placeholders */
    uint8_t no_publish;         /* a page had media without a media hash: nothing after it can be shared */
    uint8_t in_step;            /* set while a forward validates its items (duplicates are refused) */
    struct wk_seq *prev, *next; /* the engine's list of live sequences */
};

/* Device activations for one forward step of up to max_tokens tokens. */
struct wk_acts {
    int64_t max_tokens;
    float *x, *h, *q, *k, *v, *attn, *tmp, *y, *iq, *ik, *g, *u, *cos_t, *sin_t, *logits;
    int32_t logits_rows;
};

/* Host staging for one step. */
struct wk_host {
    int32_t *ids, *seq_of;
    int64_t *pos;
    float *cos_t, *sin_t;
    int32_t *sel;        /* [idx_heads][max_tokens][topk] */
    int64_t *media_rows; /* the batch rows of the step's media positions, in item order */
    /* per item */
    int64_t *seq_first, *seq_len;
    int32_t *seq_n;
    const int32_t **tables;
    int64_t *old_blocks; /* block counts before the step (to undo a failed one) */
    int32_t items_cap;
    /* sampling candidates as the backend returns them (allocated at the first WK_LOGITS_CANDS item):
     * [LOGIT_ROWS][CANDS_CAP] ids and logits, and one row's (id, slot) pairs for sorting */
    int32_t *cand_ids;
    float *cand_vals;
    int64_t *cand_pairs;
};

struct wk_engine {
    struct wk_config cfg;
    struct wk_model_info info;
    struct wk_be be;
    struct wk_model_w w;
    struct wk_cache *cache;
    struct wk_acts a;
    struct wk_host hs;
    struct wk_seq *seqs; /* live sequences */
    int32_t threads;
    /* after wk_engine_set_encode_threads: a second backend context for the vision tower (own threads and
     * scratch, the weights of `be` read-only), so encoding may run beside forward(); venc_mu serializes
     * encodes */
    struct wk_be venc;
    pthread_mutex_t venc_mu;
    int32_t has_venc;
    /* embeddings kept in the backend's memory (wk_engine_encode_media_kept): the budget and the bytes held,
     * the latter updated atomically (encodes reserve on their thread, frees return on the engine's) */
    int64_t keep_cap, kept;
};

/* wk_forward.c */
int32_t wk_forward_run(struct wk_engine *e, struct wk_step_item *items, int32_t n_items, struct mm_err *err);
int32_t wk_forward_alloc(struct wk_engine *e, int64_t max_tokens, struct mm_err *err);
void wk_forward_free(struct wk_engine *e);
void wk_forward_profile_report(void);

/* wk_vision.c */
int32_t wk_vision_encode(struct wk_engine *e, const struct wk_media *m, float **embeds, int64_t *n_tokens,
                         struct mm_err *err);
/* The same on backend context be (e's own or e->venc); reads e's config and weights only. Stops with
 * MM_CANCELLED between layers once *cancel (may be NULL) is nonzero. keep: *embeds is left in be's memory
 * (be->iface->alloc'ed, to be freed there) instead of downloaded into a malloc'ed host buffer. */
int32_t wk_vision_encode_on(const struct wk_engine *e, const struct wk_be *be, const struct wk_media *m,
                            const int32_t *cancel, int32_t keep, float **embeds, int64_t *n_tokens,
                            struct mm_err *err);

#endif
