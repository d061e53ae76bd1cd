/* The media encoder thread (see wk_encoder.h). */
#include "wk_encoder.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mm_clock.h"
#include "mm_log.h"

#define LOG "encoder"

struct wk_encoder {
    struct wk_engine *e;
    void (*done)(void *arg, struct wk_enc_job *j);
    void *arg;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    struct wk_enc_job *head, **tail;
    int32_t stop;   /* no new jobs are encoded */
    int32_t joined; /* wk_encoder_stop has run */
};

static int32_t is_cancelled(const struct wk_enc_job *j)
{
    return __atomic_load_n(&j->cancel, __ATOMIC_RELAXED) != 0;
}

static void run_job(struct wk_encoder *x, struct wk_enc_job *j)
{
    j->embeds = (struct wk_embeds){0};
    j->n_tokens = 0;
    j->encode_us = 0;
    if (is_cancelled(j)) {
        j->status = mm_err_set(&j->err, MM_CANCELLED, "cancelled before encoding");
        return;
    }
    int64_t t0 = mm_now_ns();
    /* kept where the engine can (a GPU's memory): the prefill then reads them without a trip through the host
     */
    j->status = wk_engine_encode_media_kept(x->e, &j->media, &j->cancel, &j->embeds, &j->err);
    j->n_tokens = j->embeds.n_tokens;
    j->encode_us = (mm_now_ns() - t0) / 1000;
    mm_log_debug(LOG, "item %d: %lld patch rows -> %lld embeddings in %lld us (%s)", j->item,
                 (long long)j->media.n_rows, (long long)j->n_tokens, (long long)j->encode_us,
                 mm_status_name(j->status));
}

static void *encoder_main(void *arg)
{
    struct wk_encoder *x = arg;
    pthread_mutex_lock(&x->mu);
    for (;;) {
        while (!x->stop && !x->head) pthread_cond_wait(&x->cv, &x->mu);
        struct wk_enc_job *j = x->head;
        if (!j) break; /* stopping and nothing queued */
        x->head = j->next;
        if (!x->head) x->tail = &x->head;
        j->next = NULL;
        if (x->stop) __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED); /* hand back, do not encode */
        pthread_mutex_unlock(&x->mu);
        run_job(x, j);
        x->done(x->arg, j); /* the job is the receiver's from here on */
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int32_t wk_encoder_start(struct wk_engine *e, void (*done)(void *arg, struct wk_enc_job *j), void *arg,
                         struct wk_encoder **out, struct mm_err *err)
{
    *out = NULL;
    struct wk_encoder *x = calloc(1, sizeof(*x));
    if (!x) return mm_err_set(err, MM_NOMEM, "out of memory");
    x->e = e;
    x->done = done;
    x->arg = arg;
    x->tail = &x->head;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    int rc = pthread_create(&x->th, NULL, encoder_main, x);
    if (rc) {
        pthread_mutex_destroy(&x->mu);
        pthread_cond_destroy(&x->cv);
        free(x);
        return mm_err_set(err, MM_ERROR, "cannot start the media encoder thread: %s", strerror(rc));
    }
    *out = x;
    return MM_OK;
}

void wk_encoder_submit(struct wk_encoder *x, struct wk_enc_job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&x->mu);
    int32_t stopped = x->joined;
    if (!stopped) {
        *x->tail = j;
        x->tail = &j->next;
        pthread_cond_signal(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    if (stopped) { /* no thread left to hand it back: do it here */
        j->embeds = (struct wk_embeds){0};
        j->n_tokens = 0;
        j->status = mm_err_set(&j->err, MM_CANCELLED, "the media encoder has stopped");
        x->done(x->arg, j);
    }
}

void wk_encoder_cancel(struct wk_enc_job *j)
{
    __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED);
}

void wk_encoder_stop(struct wk_encoder *x)
{
    if (!x) return;
    pthread_mutex_lock(&x->mu);
    int32_t was = x->stop;
    x->stop = 1;
    /* the running job stops at its next layer; queued ones come back without encoding */
    for (struct wk_enc_job *j = x->head; j; j = j->next) __atomic_store_n(&j->cancel, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
    if (was) return;
    pthread_join(x->th, NULL);
    pthread_mutex_lock(&x->mu);
    x->joined = 1;
    pthread_mutex_unlock(&x->mu);
}

void wk_encoder_destroy(struct wk_encoder *x)
{
    if (!x) return;
    wk_encoder_stop(x);
    pthread_mutex_destroy(&x->mu);
    pthread_cond_destroy(&x->cv);
    free(x);
}
