/* The scheduler: one thread that owns the engine and runs continuous batching.
 *
 * Every step it admits waiting requests whose worst-case page need fits (see docs/design/worker-service.md
 * "Admission"), then runs one wk_engine_forward over: one token for every decoding choice, plus prompt
 * chunks of prefilling requests up to a token budget (chunked prefill). New requests join between steps.
 * n > 1 choices share the prompt's pages (wk_seq_fork after the prompt). A prefix already in the cache is
 * reused (wk_seq_reuse_prefix) and reported as cached tokens. When the engine can encode beside forward()
 * (info.concurrent_encode), media items go to a media encoder thread at admission and the request prefills
 * as they come back, so the running streams keep decoding during an encode (wk_sched_media.c).
 *
 * Results go to a per-request sink, always called from the scheduler thread: chunk and complete events,
 * then end exactly once (also after a cancel), after which the scheduler never touches the sink again. */
#ifndef WK_SCHED_H
#define WK_SCHED_H

#include <stdint.h>

#include "mm_status.h"
#include "wk_request.h"

struct wk_engine;

struct wk_sched_opts {
    int32_t max_waiting; /* requests queued but not admitted; past it submit says MM_EXHAUSTED (0 = 256) */
    int32_t max_seqs;    /* choices running at once (0 = 256) */
    int32_t step_tokens; /* tokens per forward: decode tokens + prefill chunks (0 = 2048) */
    int32_t grow_tokens; /* page reservation step for requests without max_new_tokens (0 = 256) */
    int32_t host_draw;   /* 1: a flat row of a request without top-k is sampled on the host from the whole
                          * row (wk_sample's own sums); 0: the engine draws it where it lies (kn_draw.h) */
};

/** New tokens of one choice in one step. */
struct wk_chunk_ev {
    int32_t index;
    const int32_t *ids;
    int32_t n;
    const float *logprobs;  /* [n] or NULL */
    int32_t top_n;          /* top log-probs per token (0 = none) */
    const int32_t *top_ids; /* [n * top_n] */
    const float *top_logprobs;
};

struct wk_complete_ev {
    int32_t index;
    const char *finish_reason; /* "stop" | "length" | "abort" */
    int64_t prompt_tokens, completion_tokens, cached_tokens;
    int32_t has_matched_stop;
    int32_t matched_stop;
};

struct wk_sched_sink {
    void *ctx;
    void (*chunk)(void *ctx, const struct wk_chunk_ev *ev);
    void (*complete)(void *ctx, const struct wk_complete_ev *ev);
    /** Last call: MM_OK when every choice completed, MM_CANCELLED after an abort or cancel, other codes on
     * failure (MM_INVALID for media the vision tower refused, MM_EXHAUSTED, MM_UNAVAILABLE on shutdown). */
    void (*end)(void *ctx, int32_t status, const char *msg);
    /** Optional (NULL: the sink sends each event as it comes). Called at the end of every scheduler step for
     * a request that got chunks or completes in it and is still running, so a sink may hold a step's events
     * and send them together (a choice's last chunk with its Complete, the status with the last message:
     * the request's end is the end call, which comes after its last events in the same step). */
    void (*flush)(void *ctx);
};

struct wk_sched_load {
    int32_t running_requests, waiting_requests, running_seqs, max_waiting;
    int64_t free_pages, total_pages, available_pages;
    int32_t page_tokens;
    int32_t draining;
    uint64_t steps;            /* forward calls so far */
    uint64_t preemptions;      /* requests sent back to the queue to be recomputed */
    int32_t encoding_requests; /* admitted, waiting for the media encoder (pages reserved, not prefilling) */
};

struct wk_sched;

int32_t wk_sched_create(struct wk_engine *e, const struct wk_sched_opts *opts, struct wk_sched **out,
                        struct mm_err *err);
/** The longest sequence (prompt + generated tokens) a request may reach: the model's context capped by the
 * cache pool (pages x block size), since one sequence longer than the pool could never be held. The worker
 * advertises it (ModelInfo.max_context) and refuses longer prompts at decode. */
int64_t wk_sched_max_context(const struct wk_sched *s);
/** Start the scheduler thread. */
int32_t wk_sched_start(struct wk_sched *s, struct mm_err *err);
/** Stop the thread; every live request ends with MM_UNAVAILABLE. Later submits say MM_UNAVAILABLE, aborts
 * and cancels are answered at once; the other calls keep working until wk_sched_destroy. Idempotent. */
void wk_sched_stop(struct wk_sched *s);
/** Stop (if not yet) and free everything. NULL is fine. */
void wk_sched_destroy(struct wk_sched *s);

/** Queue a request. On MM_OK the scheduler owns r and will call sink->end exactly once; *ticket names it
 * for wk_sched_cancel. On error r still belongs to the caller and the sink is never called:
 * MM_INVALID (request_id in use, or a reservation of all n choices larger than the whole cache pool, which
 * could never be admitted), MM_EXHAUSTED (queue full, n over max_seqs), MM_UNAVAILABLE (draining). */
int32_t wk_sched_submit(struct wk_sched *s, struct wk_request *r, const struct wk_sched_sink *sink,
                        uint64_t *ticket, struct mm_err *err);
/** The client went away: abort the request (its pages are freed before the next step). */
void wk_sched_cancel(struct wk_sched *s, uint64_t ticket);
/** Abort by request id. done(arg, found) is called once the pages are freed (from the scheduler thread,
 * or at once when the thread is not running). */
void wk_sched_abort(struct wk_sched *s, const char *request_id, void (*done)(void *arg, int32_t found),
                    void *arg);
/** A snapshot of the queue and the cache, as of the last step or abort. */
void wk_sched_load(struct wk_sched *s, struct wk_sched_load *out);
/** Stop admitting new submissions (MM_UNAVAILABLE); requests already accepted run on. After timeout_ms
 * (< 0: never) the ones still live end with MM_UNAVAILABLE. */
void wk_sched_drain(struct wk_sched *s, int64_t timeout_ms);
/** Wait until no request is live; MM_OK, or MM_TIMEOUT after timeout_ms (< 0: forever). */
int32_t wk_sched_wait_idle(struct wk_sched *s, int64_t timeout_ms);

#endif
