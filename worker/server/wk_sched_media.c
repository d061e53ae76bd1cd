/* Media embeddings for the scheduler: encoder jobs started at admission, their results, and the placement of
 * embeddings into prompt chunks.
 *
 * With an encoder (engines with concurrent_encode) a request's items are encoded on the encoder thread
 * while the step loop keeps decoding the others; the request is admitted first (its pages reserved, its
 * prefix reused, so only items past the reused prefix are encoded), prefills the text before its first
 * item meanwhile, and the rest as the items come back. Without an encoder, an item is encoded on the
 * scheduler thread in the step whose prompt chunk first touches it. */
#include "wk_sched_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_clock.h"
#include "mm_log.h"

#define LOG "sched"

/* Whether item m has a placeholder at or after prompt position `from` (what prefill will still read). */
static int32_t item_needed(const struct wk_media_item *mi, int64_t from)
{
    for (int32_t j = 0; j < mi->n_runs; j++)
        if (mi->runs[j].offset + mi->runs[j].length > from) return 1;
    return 0;
}

/* The pixels are no longer needed once encoded: whoever holds them (the protobuf message, an upload, a
 * shared-memory mapping) lets go. A preempted request keeps its embeddings, never its pixels. */
static void release_pixels(struct wk_media_item *mi)
{
    if (mi->release) mi->release(mi->release_arg);
    mi->release = NULL;
    mi->release_arg = NULL;
    mi->pixels = NULL;
}

/* The encoder's view of an item's pixels (the encoder job and the in-step fallback both encode from it). */
static struct wk_media media_of(const struct wk_media_item *mi)
{
    return (struct wk_media){.kind = mi->kind,
                             .dtype = mi->dtype,
                             .pixels = mi->pixels,
                             .n_rows = mi->n_rows,
                             .row_len = mi->row_len,
                             .grid_t = mi->grid_t,
                             .grid_h = mi->grid_h,
                             .grid_w = mi->grid_w};
}

static void end_request(struct wk_sched *s, struct sreq *q, int32_t status, const char *msg)
{
    if (q->state == SREQ_WAITING) { /* a preempted request whose item came back */
        pthread_mutex_lock(&s->mu);
        s->n_queued--;
        pthread_mutex_unlock(&s->mu);
    }
    sched_end(s, q, status, msg);
}

int32_t sched_media_start(struct wk_sched *s, struct sreq *q)
{
    if (!s->enc) return 0;
    struct wk_request *r = q->r;
    for (int32_t m = 0; m < r->n_media; m++) {
        struct wk_media_item *mi = &r->media[m];
        if (q->embeds[m].data || q->jobs[m] || !item_needed(mi, q->prompt_fed)) continue;
        if (!mi->pixels) { /* cannot happen: pixels go only with embeddings */
            end_request(s, q, MM_ERROR, "media item has neither pixels nor embeddings");
            return -1;
        }
        struct wk_enc_job *j = calloc(1, sizeof(*j));
        if (!j) {
            end_request(s, q, MM_NOMEM, "out of memory for a media encoder job");
            return -1;
        }
        j->media = media_of(mi);
        j->owner = q;
        j->item = m;
        /* the job owns the bytes from now on: the request may end (and be freed) while the encoder reads
         * them, so they are released when the job comes back, whatever happened to the request */
        j->release = mi->release;
        j->release_arg = mi->release_arg;
        mi->release = NULL;
        mi->release_arg = NULL;
        mi->pixels = NULL;
        q->jobs[m] = j;
        q->n_encoding++;
        wk_encoder_submit(s->enc, j);
    }
    if (q->n_encoding) mm_log_debug(LOG, "'%s': %d media item(s) to the encoder", r->id, q->n_encoding);
    return 0;
}

int64_t sched_media_ready_until(const struct sreq *q)
{
    int64_t until = q->r->n_ids;
    if (!sched_encoding(q)) return until;
    for (int32_t m = 0; m < q->r->n_media; m++) {
        if (!q->jobs[m]) continue;
        const struct wk_media_item *mi = &q->r->media[m];
        for (int32_t j = 0; j < mi->n_runs; j++)
            if (mi->runs[j].offset + mi->runs[j].length > q->prompt_fed && mi->runs[j].offset < until)
                until = mi->runs[j].offset > q->prompt_fed ? mi->runs[j].offset : q->prompt_fed;
    }
    return until;
}

void sched_media_free_job(struct wk_sched *s, struct wk_enc_job *j)
{
    if (!j) return;
    if (j->release) j->release(j->release_arg);
    wk_engine_embeds_free(s->e, &j->embeds);
    free(j);
}

void sched_media_detach(struct sreq *q)
{
    if (!q->jobs) return;
    for (int32_t m = 0; m < q->r->n_media; m++) {
        struct wk_enc_job *j = q->jobs[m];
        if (!j) continue;
        j->owner = NULL; /* only this thread reads owner */
        wk_encoder_cancel(j);
        q->jobs[m] = NULL;
    }
    q->n_encoding = 0;
}

void sched_media_done(void *arg, struct wk_enc_job *j)
{
    struct wk_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    j->next = NULL;
    *s->enc_done_tail = j;
    s->enc_done_tail = &j->next;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_media_collect(struct wk_sched *s)
{
    pthread_mutex_lock(&s->mu);
    struct wk_enc_job *j = s->enc_done;
    s->enc_done = NULL;
    s->enc_done_tail = &s->enc_done;
    pthread_mutex_unlock(&s->mu);
    while (j) {
        struct wk_enc_job *next = j->next;
        struct sreq *q = j->owner;
        if (!q) { /* its request ended while it was out */
            mm_log_debug(LOG, "dropped the encode of an ended request's item (%s after %lld us)",
                         mm_status_name(j->status), (long long)j->encode_us);
            sched_media_free_job(s, j);
            j = next;
            continue;
        }
        const int32_t m = j->item;
        const struct wk_media_item *mi = &q->r->media[m];
        q->jobs[m] = NULL;
        q->n_encoding--;
        q->encode_us += j->encode_us;
        int32_t rc = j->status;
        struct mm_err err = j->err;
        if (rc == MM_OK && j->n_tokens != mi->n_tokens) {
            rc =
                mm_err_set(&err, MM_INVALID,
                           "mm_inputs[%d]: the vision tower made %lld embeddings, the placeholders hold %lld",
                           m, (long long)j->n_tokens, (long long)mi->n_tokens);
        } else if (rc != MM_OK) {
            mm_err_prefix(&err, "mm_inputs[%d]", m);
        }
        if (rc == MM_OK) {
            q->embeds[m] = j->embeds;
            j->embeds = (struct wk_embeds){0};
        }
        sched_media_free_job(s, j); /* releases the pixels */
        if (rc != MM_OK) {
            /* only this request fails; its other jobs come back ownerless */
            end_request(s, q, rc, err.msg);
        } else if (!sched_encoding(q)) {
            mm_log_debug(LOG, "'%s': media encoded (%lld us), ready to prefill", q->r->id,
                         (long long)q->encode_us);
        }
        j = next;
    }
}

int32_t sched_chunk_embeds(struct wk_sched *s, struct sreq *q, int64_t a, int64_t n,
                           struct wk_embed_span **spans_out, int32_t *n_out)
{
    struct wk_request *r = q->r;
    const int64_t H = s->info->hidden_size;
    struct wk_embed_span *spans = NULL;
    int32_t ns = 0, cap = 0;
    *spans_out = NULL;
    *n_out = 0;
    for (int32_t m = 0; m < r->n_media; m++) {
        struct wk_media_item *mi = &r->media[m];
        int64_t row = 0; /* embedding row of the run's first position */
        for (int32_t j = 0; j < mi->n_runs; j++) {
            const struct wk_placeholder_run *run = &mi->runs[j];
            int64_t lo = run->offset > a ? run->offset : a;
            int64_t hi = run->offset + run->length < a + n ? run->offset + run->length : a + n;
            if (lo < hi) {
                if (!q->embeds[m].data) {
                    /* no encoder (or, defensively, an item no job covered): encode here, in the step */
                    struct wk_media wm = media_of(mi);
                    struct mm_err err = {0};
                    int64_t t0 = mm_now_ns();
                    int32_t rc = mi->pixels
                                     ? wk_engine_encode_media_kept(s->e, &wm, NULL, &q->embeds[m], &err)
                                     : mm_err_set(&err, MM_ERROR, "no pixels left to encode");
                    q->encode_us += (mm_now_ns() - t0) / 1000;
                    if (rc == MM_OK && q->embeds[m].n_tokens != mi->n_tokens) {
                        rc = mm_err_set(&err, MM_INVALID,
                                        "mm_inputs[%d]: the vision tower made %lld embeddings, the "
                                        "placeholders hold %lld",
                                        m, (long long)q->embeds[m].n_tokens, (long long)mi->n_tokens);
                    } else if (rc != MM_OK) {
                        mm_err_prefix(&err, "mm_inputs[%d]", m);
                    }
                    if (rc != MM_OK) {
                        wk_engine_embeds_free(s->e, &q->embeds[m]);
                        free(spans);
                        sched_end(s, q, rc, err.msg);
                        return -1;
                    }
                    release_pixels(mi);
                }
                if (ns == cap) {
                    cap = cap ? 2 * cap : 4;
                    struct wk_embed_span *sp = realloc(spans, (size_t)cap * sizeof(*sp));
                    if (!sp) {
                        free(spans);
                        sched_end(s, q, MM_NOMEM, "out of memory for media spans");
                        return -1;
                    }
                    spans = sp;
                }
                spans[ns++] = (struct wk_embed_span){.at = (int32_t)(lo - a),
                                                     .n = (int32_t)(hi - lo),
                                                     .rows = q->embeds[m].data + (row + lo - run->offset) * H,
                                                     .kept = q->embeds[m].place != WK_EMBEDS_HOST};
            }
            row += run->length;
        }
    }
    /* the forward wants them in position order; items' runs interleave only in odd prompts */
    for (int32_t i = 1; i < ns; i++)
        for (int32_t k = i; k > 0 && spans[k - 1].at > spans[k].at; k--) {
            struct wk_embed_span t = spans[k];
            spans[k] = spans[k - 1];
            spans[k - 1] = t;
        }
    *spans_out = spans;
    *n_out = ns;
    return 0;
}
