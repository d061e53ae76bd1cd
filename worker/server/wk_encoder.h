/* The media encoder thread: runs the vision tower (wk_engine_encode_media) on jobs the scheduler hands it,
 * so that a large image or video does not stall the decode steps of the requests already running.
 *
 * Only for engines with info.concurrent_encode (after wk_engine_set_encode_threads: encoding is then safe
 * beside forward()). Jobs are encoded in
 * the order they were submitted, one at a time. Every submitted job comes back exactly once through the
 * done callback — encoded, failed, or cancelled — and the encoder never touches it afterwards, so whoever
 * receives it frees it. A job's pixel bytes stay valid until it comes back (the scheduler moves their
 * release hook into the job). */
#ifndef WK_ENCODER_H
#define WK_ENCODER_H

#include <stdint.h>

#include "mm_status.h"
#include "wk_engine.h"

struct wk_enc_job {
    struct wk_enc_job *next; /* the encoder's queue, then the receiver's list */
    /* in: set before wk_encoder_submit */
    struct wk_media media; /* the item (pixels referenced, not owned) */
    void *owner;           /* the receiver's bookkeeping: whom the result belongs to */
    int32_t item;          /* which media item of the owner */
    void (*release)(
        void *arg); /* frees the bytes behind media.pixels (called by the receiver); may be NULL */
    void *release_arg;
    int32_t cancel; /* atomic: 1 = the result is no longer wanted (wk_encoder_cancel); the engine polls it */
    /* out: valid in the done callback */
    int32_t status; /* MM_OK, MM_CANCELLED, or the engine's error */
    struct mm_err err;
    struct wk_embeds embeds; /* [n_tokens, hidden] on MM_OK (the receiver owns them: wk_engine_embeds_free on
                                the engine's thread) */
    int64_t n_tokens;
    int64_t encode_us; /* time in wk_engine_encode_media */
};

struct wk_encoder;

/** Start the encoder thread. done(arg, job) is called on the encoder thread, without any encoder lock held,
 * once per finished job. */
int32_t wk_encoder_start(struct wk_engine *e, void (*done)(void *arg, struct wk_enc_job *j), void *arg,
                         struct wk_encoder **out, struct mm_err *err);
/** Queue a job (FIFO). After wk_encoder_stop the job comes back at once, cancelled. */
void wk_encoder_submit(struct wk_encoder *x, struct wk_enc_job *j);
/** The result is no longer wanted: a queued job is skipped, a running one stops at the next vision layer.
 * The job still comes back through done. Safe from any thread while the job is out. */
void wk_encoder_cancel(struct wk_enc_job *j);
/** Finish the running job, hand back every queued one cancelled, and join the thread. Idempotent; NULL is
 * fine. */
void wk_encoder_stop(struct wk_encoder *x);
/** Stop (if not yet) and free. NULL is fine. */
void wk_encoder_destroy(struct wk_encoder *x);

#endif
