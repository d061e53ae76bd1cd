/* Generate through the router: choose, dispatch, feed the breaker, retry elsewhere before the first
 * response (see gw_router.h). Everything here runs on the caller's event loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_grpc_status.h"
#include "gw_router_internal.h"
#include "mm_log.h"

struct gw_route_call {
    struct gw_router *r;
    const Mmgw__Worker__V1__GenerateRequest *req;
    struct gw_executor ex;
    struct gw_up_loop loop; /* loop.base NULL: not on a loop */
    struct gw_route_callbacks cb;
    void *arg;
    struct gw_gen_call *gen; /* the current attempt */
    int worker;              /* its worker, -1 when none */
    int probe;               /* the attempt is its worker's breaker probe */
    int paused;
    int recorded;    /* affinity recorded for this call */
    int shm_retried; /* sent again after a worker could not open its shared memory */
    uint32_t attempts;
    uint64_t keys[GW_ROUTER_MAX_PAGES];
    size_t n_keys;
    uint8_t tried[GW_ROUTER_MAX_WORKERS];
};

static void route_free(struct gw_route_call *c)
{
    struct gw_router *r = c->r;
    free(c);
    gw_router_unref(r);
}

static void on_attempt_response(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp);
static void on_attempt_done(void *arg, const struct gw_call_status *st, uint32_t responses);

static const struct gw_gen_callbacks attempt_callbacks = {on_attempt_response, on_attempt_done};

/* Choose a worker not tried yet and start an attempt there. Returns MM_OK, or MM_UNAVAILABLE when no
 * worker is left (err says why, naming the last failure when there was one). */
static int32_t start_attempt(struct gw_route_call *c, struct mm_err *err)
{
    struct gw_router *r = c->r;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int by_affinity = 0;
        int w = gw_router_choose(r, c->keys, c->n_keys, c->tried, &by_affinity);
        if (w < 0) {
            pthread_mutex_unlock(&r->mu);
            return mm_err_set(err, MM_UNAVAILABLE, "model %s: no healthy worker available (%zu configured)",
                              r->model, r->n);
        }
        struct gw_router_worker *wk = &r->w[w];
        c->tried[w] = 1;
        c->worker = w;
        c->probe = gw_breaker_dispatch(&wk->breaker, gw_router_now_ms());
        wk->in_flight++;
        wk->requests++;
        if (by_affinity) wk->affinity_hits++;
        struct gw_upstream_chan *ch = wk->ch;
        pthread_mutex_unlock(&r->mu);

        c->attempts++;
        struct mm_err e;
        int32_t rc = c->loop.base ? gw_upstream_generate_loop(ch, c->req, &r->o.gen, &c->loop,
                                                              &attempt_callbacks, c, &c->gen, &e)
                                  : gw_upstream_generate(ch, c->req, &r->o.gen, &c->ex, &attempt_callbacks, c,
                                                         &c->gen, &e);
        if (rc == MM_OK) {
            if (c->paused) gw_gen_pause(c->gen);
            return MM_OK;
        }
        /* could not even start here (out of memory, shutting down): undo and try the next one */
        pthread_mutex_lock(&r->mu);
        wk->in_flight--;
        if (c->probe) gw_breaker_release_probe(&wk->breaker);
        pthread_mutex_unlock(&r->mu);
        c->gen = NULL;
        c->worker = -1;
        mm_log_warn("router", "%s: cannot start on %s: %s", r->model, wk->target, e.msg);
        if (rc == MM_NOMEM) return mm_err_set(err, rc, "%s", e.msg);
    }
}

static void on_attempt_response(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp)
{
    struct gw_route_call *c = arg;
    if (!c->recorded && c->n_keys) {
        /* the worker now holds this prefix's pages */
        pthread_mutex_lock(&c->r->mu);
        gw_affinity_record(c->r->aff, c->keys, c->n_keys, c->worker);
        pthread_mutex_unlock(&c->r->mu);
        c->recorded = 1;
    }
    c->cb.on_response(c->arg, resp);
}

/* Whether st says "try another worker" (no response reached the caller yet). */
static int retryable(const struct gw_call_status *st)
{
    if (st->grpc_code >= 0) return gw_grpc_retryable(st->grpc_code);
    return st->code == MM_UNAVAILABLE; /* a local failure to reach the worker */
}

static int worker_fault(const struct gw_call_status *st)
{
    if (st->grpc_code >= 0) return gw_grpc_worker_fault(st->grpc_code);
    return st->code == MM_UNAVAILABLE || st->code == MM_IO;
}

static void on_attempt_done(void *arg, const struct gw_call_status *st, uint32_t responses)
{
    struct gw_route_call *c = arg;
    struct gw_router *r = c->r;
    int w = c->worker;
    c->gen = NULL; /* the attempt's handle is gone */

    pthread_mutex_lock(&r->mu);
    struct gw_router_worker *wk = &r->w[w];
    wk->in_flight--;
    if (st->code == MM_OK) {
        gw_breaker_success(&wk->breaker, &r->o.breaker);
    } else if (worker_fault(st)) {
        wk->failures++;
        gw_breaker_failure(&wk->breaker, &r->o.breaker, gw_router_now_ms());
    } else if (c->probe) {
        gw_breaker_release_probe(&wk->breaker); /* the request was bad, not the worker */
    }
    int retry = st->code != MM_OK && responses == 0 && retryable(st) && c->attempts <= (uint32_t)r->o.retries;
    /* the worker could not open the attempt's shared memory: its channel has stopped using it, so the same
     * worker may take the request again (once, whatever the retries setting: nothing was wrong with it) */
    int again = !retry && st->shm_refused && responses == 0 && !c->shm_retried;
    if (again) {
        c->shm_retried = 1;
        c->tried[w] = 0;
        retry = 1;
    }
    if (retry) wk->retried++;
    pthread_mutex_unlock(&r->mu);

    if (retry) {
        mm_log_info("router", "%s: %s after %s", r->model,
                    again ? "sending it again without shared memory" : "retrying elsewhere", st->message);
        struct mm_err e;
        if (start_attempt(c, &e) == MM_OK) return;
        /* nobody else: the caller gets the worker's own error, which says more than "no worker" */
    }
    c->cb.on_done(c->arg, st, responses, c->attempts, w);
    route_free(c);
}

static int32_t route_start(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req,
                           const struct gw_executor *ex, const struct gw_up_loop *loop,
                           const struct gw_route_callbacks *cb, void *arg, struct gw_route_call **out,
                           struct mm_err *err)
{
    if (out) *out = NULL;
    if (!r || !req || !ex || !cb || !cb->on_response || !cb->on_done)
        return mm_err_set(err, MM_INVALID, "router: missing request, executor or callbacks");
    struct gw_route_call *c = calloc(1, sizeof(*c));
    if (!c) return mm_err_set(err, MM_NOMEM, "router: out of memory");
    c->r = r;
    atomic_fetch_add(&r->refs, 1);
    c->req = req;
    c->ex = *ex;
    if (loop) c->loop = *loop;
    c->cb = *cb;
    c->arg = arg;
    c->worker = -1;
    /* prefix affinity only chooses between workers: with one there is nothing to hash */
    c->n_keys = r->n > 1 ? gw_router_keys(r, req, c->keys) : 0;
    int32_t rc = start_attempt(c, err);
    if (rc != MM_OK) {
        route_free(c);
        return rc;
    }
    if (out) *out = c;
    return MM_OK;
}

int32_t gw_router_generate(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req,
                           const struct gw_executor *ex, const struct gw_route_callbacks *cb, void *arg,
                           struct gw_route_call **out, struct mm_err *err)
{
    return route_start(r, req, ex, NULL, cb, arg, out, err);
}

int32_t gw_router_generate_on(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req,
                              const struct gw_up_loop *loop, const struct gw_route_callbacks *cb, void *arg,
                              struct gw_route_call **out, struct mm_err *err)
{
    if (!loop || !loop->base || !loop->ex) {
        if (out) *out = NULL;
        return mm_err_set(err, MM_INVALID, "router: missing loop");
    }
    return route_start(r, req, loop->ex, loop, cb, arg, out, err);
}

void gw_route_pause(struct gw_route_call *c)
{
    c->paused = 1;
    if (c->gen) gw_gen_pause(c->gen);
}

void gw_route_resume(struct gw_route_call *c)
{
    c->paused = 0;
    if (c->gen) gw_gen_resume(c->gen);
}

void gw_route_cancel(struct gw_route_call *c)
{
    if (!c) return;
    if (c->gen) {
        gw_gen_cancel(c->gen); /* sends the Abort */
        struct gw_router *r = c->r;
        pthread_mutex_lock(&r->mu);
        r->w[c->worker].in_flight--;
        if (c->probe) gw_breaker_release_probe(&r->w[c->worker].breaker);
        pthread_mutex_unlock(&r->mu);
    }
    route_free(c);
}

int gw_route_worker(const struct gw_route_call *c)
{
    return c->worker;
}
