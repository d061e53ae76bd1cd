/* Helpers for the scheduler tests: build requests without protobuf and record what a sink receives. */
#ifndef SCHED_HARNESS_H
#define SCHED_HARNESS_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wk_request.h"
#include "wk_sched.h"

#define REC_MAX_CHOICES 8
#define REC_MAX_TOKENS 1024

struct rec {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t tok[REC_MAX_CHOICES][REC_MAX_TOKENS];
    float lp[REC_MAX_CHOICES][REC_MAX_TOKENS];
    int32_t top1[REC_MAX_CHOICES][REC_MAX_TOKENS];
    int32_t n_tok[REC_MAX_CHOICES];
    int32_t chunks;
    int32_t completes;
    struct wk_complete_ev comp[REC_MAX_CHOICES];
    char reason[REC_MAX_CHOICES][16];
    int32_t ended, status;
    char msg[256];
    int32_t order_ok; /* every complete came after the choice's chunks, end after every complete */
};

static void rec_chunk(void *ctx, const struct wk_chunk_ev *ev)
{
    struct rec *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->ended || r->comp[ev->index].finish_reason) r->order_ok = 0;
    for (int32_t i = 0; i < ev->n && r->n_tok[ev->index] < REC_MAX_TOKENS; i++) {
        int32_t k = r->n_tok[ev->index]++;
        r->tok[ev->index][k] = ev->ids[i];
        r->lp[ev->index][k] = ev->logprobs ? ev->logprobs[i] : 1.0f;
        r->top1[ev->index][k] = ev->top_n > 0 ? ev->top_ids[i * ev->top_n] : -1;
    }
    r->chunks++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void rec_complete(void *ctx, const struct wk_complete_ev *ev)
{
    struct rec *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->ended || r->comp[ev->index].finish_reason) r->order_ok = 0;
    r->comp[ev->index] = *ev;
    strncpy(r->reason[ev->index], ev->finish_reason, sizeof(r->reason[0]) - 1);
    r->comp[ev->index].finish_reason = r->reason[ev->index];
    r->completes++;
    pthread_mutex_unlock(&r->mu);
}

static void rec_end(void *ctx, int32_t status, const char *msg)
{
    struct rec *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->ended) r->order_ok = 0;
    r->ended = 1;
    r->status = status;
    strncpy(r->msg, msg ? msg : "", sizeof(r->msg) - 1);
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static struct rec *rec_new(void)
{
    struct rec *r = calloc(1, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->order_ok = 1;
    return r;
}

static void rec_free(struct rec *r)
{
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static struct wk_sched_sink rec_sink(struct rec *r)
{
    struct wk_sched_sink s = {.ctx = r, .chunk = rec_chunk, .complete = rec_complete, .end = rec_end};
    return s;
}

static void abs_deadline(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

/** Wait until the request ended; 0 on success, -1 on timeout. */
static int rec_wait_end(struct rec *r, int64_t ms)
{
    struct timespec ts;
    abs_deadline(&ts, ms);
    pthread_mutex_lock(&r->mu);
    while (!r->ended)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
    int ok = r->ended;
    pthread_mutex_unlock(&r->mu);
    return ok ? 0 : -1;
}

/** Wait until choice 0 streamed at least n tokens. */
static int rec_wait_tokens(struct rec *r, int32_t n, int64_t ms)
{
    struct timespec ts;
    abs_deadline(&ts, ms);
    pthread_mutex_lock(&r->mu);
    while (r->n_tok[0] < n && !r->ended)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) != 0) break;
    int ok = r->n_tok[0] >= n;
    pthread_mutex_unlock(&r->mu);
    return ok ? 0 : -1;
}

/** A text request; max_new < 0 leaves max_new_tokens unset (up to the context). */
static struct wk_request *mkreq(const char *id, const int32_t *ids, int64_t n, int64_t max_new,
                                int32_t n_choices, int64_t max_context)
{
    struct wk_request *r = calloc(1, sizeof(*r));
    r->id = strdup(id);
    r->ids = malloc((size_t)n * sizeof(int32_t));
    memcpy(r->ids, ids, (size_t)n * sizeof(int32_t));
    r->n_ids = n;
    r->sp.temperature = 0.0f;
    r->sp.top_p = 1.0f;
    r->sp.n = n_choices;
    r->sp.ignore_eos = 1;
    if (max_new >= 0) {
        r->sp.has_max_new_tokens = 1;
        r->sp.max_new_tokens = max_new < max_context - n ? max_new : max_context - n;
    } else {
        r->sp.max_new_tokens = max_context - n;
    }
    return r;
}

/** Deterministic pseudo-random prompt ids in [2, vocab - 8) (no eos, no media tokens). */
static void mkprompt(int32_t *ids, int64_t n, uint64_t seed, int32_t vocab)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = 2 + (int32_t)(x % (uint64_t)(vocab - 10));
    }
}

#endif
