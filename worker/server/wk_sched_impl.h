/* Internals shared by the scheduler's files: wk_sched.c (thread, queue, admission) and wk_sched_step.c
 * (one batched forward step). Only the scheduler thread touches struct sreq after it left the inbox. */
#ifndef WK_SCHED_IMPL_H
#define WK_SCHED_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "wk_encoder.h"
#include "wk_engine.h"
#include "wk_sched.h"

enum sreq_state {
    SREQ_WAITING = 0, /* queued (also after a preemption) */
    SREQ_PREFILL,     /* admitted; the prompt is entering choice 0's sequence */
    SREQ_RUNNING,     /* prompt done and forked: every choice catches up or decodes */
};

struct choice {
    struct wk_seq *seq;
    int32_t *gen; /* tokens emitted so far */
    int64_t n_gen, cap_gen;
    int64_t fed;     /* gen tokens already in seq; in steady decode fed == n_gen - 1 */
    int64_t horizon; /* tokens reserved for this choice's sequence */
    uint64_t rng;
    int32_t finished;
};

struct sreq {
    struct sreq *next;      /* in the inbox / waiting / running list */
    struct sreq *live_next; /* in the live list (under the mutex) */
    struct wk_request *r;
    struct wk_sched_sink sink;
    uint64_t ticket;
    int32_t state;
    int32_t admitted_once;
    int32_t bounded; /* max_new_tokens given: reservation is final */
    int64_t prompt_fed;
    int64_t cached;
    int64_t admit_seq;        /* admission order, for choosing whom to preempt (youngest first) */
    struct wk_embeds *embeds; /* per media item, encoded on first need, [n_tokens, hidden] */
    struct wk_enc_job **jobs; /* per media item: its encoder job while the encoder has it (else NULL) */
    int32_t n_encoding;       /* jobs out; prefill stops at the first placeholder of an item still out */
    int64_t encode_us;        /* vision tower time, for the access log line */
    int32_t n_done;
    int32_t dirty;                   /* got events since the last flush (sink.flush) */
    int64_t t_submit_ms, t_first_ms; /* for the access log line */
    struct choice ch[];
};

enum cmd_kind { CMD_CANCEL = 1, CMD_ABORT = 2 };

struct cmd {
    struct cmd *next;
    int32_t kind;
    uint64_t ticket;
    char *id;
    void (*done)(void *arg, int32_t found);
    void *arg;
};

struct wk_sched {
    struct wk_engine *e;
    const struct wk_model_info *info;
    struct wk_sched_opts o;
    int64_t max_context; /* the model's context capped by the pool: what one sequence can ever hold */

    pthread_t th;
    int32_t started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the scheduler */
    pthread_cond_t idle_cv; /* wakes wk_sched_wait_idle */
    /* under mu */
    struct sreq *inbox, **inbox_tail;
    struct cmd *cmds, **cmds_tail;
    struct sreq *live;        /* every request between submit and end */
    int32_t n_live, n_queued; /* n_queued: inbox + waiting */
    int32_t stop, draining;
    int64_t drain_deadline_ms; /* < 0: none */
    uint64_t next_ticket;
    struct wk_sched_load load;
    struct wk_enc_job *enc_done, **enc_done_tail; /* jobs the encoder handed back */

    /* set at start; NULL: media is encoded on the scheduler thread inside the step that first needs it */
    struct wk_encoder *enc;

    /* scheduler thread only */
    struct sreq *waiting, *running;
    int64_t admit_counter;
    uint64_t seed_counter;
    float *logits;
    int64_t logits_cap; /* floats */
    struct wk_step_item *items;
    struct sreq **item_req;
    int32_t *item_choice;        /* -1 = prompt chunk */
    struct wk_cands *item_cands; /* per item: the candidates a WK_LOGITS_CANDS item asks for */
    int32_t *cand_ids;           /* [items_cap][SCHED_CANDS] */
    float *cand_logits;
    int32_t items_cap;
    float *scratch; /* one vocab row for sampling from shared prompt logits */
    uint64_t steps;
    uint64_t preemptions;
};

/* wk_sched.c */
int64_t sched_pages(const struct wk_sched *s, int64_t tokens);
void sched_end(struct wk_sched *s, struct sreq *q, int32_t status, const char *msg);
void sched_preempt(struct wk_sched *s, struct sreq *q);
int64_t sched_growth_all(const struct wk_sched *s);
int64_t sched_growth(const struct wk_sched *s, const struct sreq *q);

/* wk_sched_media.c */
/** Hand q's media items that the prompt still needs (placeholders at or after prompt_fed, not encoded and
 * not out yet) to the encoder. Returns 0, or -1 after ending q. */
int32_t sched_media_start(struct wk_sched *s, struct sreq *q);
/** Take the jobs the encoder handed back: store embeddings, end requests whose item failed, free jobs whose
 * request has gone. */
void sched_media_collect(struct wk_sched *s);
/** q is ending: its jobs are cancelled and forgotten (they come back ownerless and are freed then). */
void sched_media_detach(struct sreq *q);
/** The encoder's done callback (encoder thread): queue the job for the scheduler and wake it. */
void sched_media_done(void *arg, struct wk_enc_job *j);
/** Free a job that came back (its embeddings, its pixel bytes); on the engine's thread. */
void sched_media_free_job(struct wk_sched *s, struct wk_enc_job *j);
/** The media spans of prompt positions [a, a + n) of q (encoding items on this thread when no encoder job
 * did), positions relative to a, rows where the item's embeddings lie. Returns 0 and fills *spans (malloc'ed,
 * NULL when the chunk has no media) and *n_spans, or -1 after ending q. */
int32_t sched_chunk_embeds(struct wk_sched *s, struct sreq *q, int64_t a, int64_t n,
                           struct wk_embed_span **spans, int32_t *n_spans);
/** q has items with the encoder (admitted, pages reserved). */
static inline int32_t sched_encoding(const struct sreq *q)
{
    return q->n_encoding > 0;
}
/** The first prompt position whose embedding is still with the encoder (n_ids when none is): prefill may
 * run up to there. */
int64_t sched_media_ready_until(const struct sreq *q);
/** q is prefilling and its next prompt position waits for the encoder. */
static inline int32_t sched_waits_for_encoder(const struct sreq *q)
{
    return q->state == SREQ_PREFILL && sched_encoding(q) && sched_media_ready_until(q) <= q->prompt_fed;
}

/* wk_sched_step.c */
/** Top-k values up to which a sampled token is picked from the engine's candidates (WK_LOGITS_CANDS) instead
 * of the whole logits row; each item has room for this many. */
#define SCHED_CANDS 1024
/** Run one batched forward over the running requests. Returns 1 when a step ran, 0 when nothing to do. */
int32_t sched_step(struct wk_sched *s);
/** Finish a choice: free its sequence, emit its Complete. */
void sched_finish_choice(struct wk_sched *s, struct sreq *q, int32_t i, const char *reason,
                         int32_t has_matched, int32_t matched);

#endif
