/* A route module for the HTTP integration tests: the server core (gw_server_main) with routes that
 * exercise every part of the handler API. Built into mmgw-httptest; never part of the product.
 *
 *   GET  /test/json                fixed JSON naming the first configured model (shows reloads)
 *   POST /test/echo                the request body back (x-body-len header)
 *   GET  /test/big?size=N          N bytes answered at once (a small request, a large response)
 *   GET  /test/sse?n=N&size=S      N SSE events of S bytes, honouring backpressure, then [DONE]
 *   GET  /test/hang                never answers; records the abort time
 *   GET  /test/slow?ms=N           answers after N ms (a timer on the request's loop)
 *   GET  /test/executor            answers from a task posted back by another thread
 *   GET  /test/noreply             returns without answering (the server must send 500)
 *   GET  /test/cut                 starts a stream and drops it unfinished (the client must see a failure)
 *   GET  /test/stats               counters as JSON (aborts, last abort time, max queued bytes, ...) */
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_module.h"

#define SSE_HIGH (64 * 1024)
#define SSE_LOW (16 * 1024)

static _Atomic long long stat_aborts, stat_last_abort_ns, stat_max_queued, stat_hang_active, stat_sse_done,
    stat_sse_started, stat_again, stat_noreply, stat_after_abort_rc = 1;

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long query_int(const struct gw_request *req, const char *key, long dflt)
{
    size_t kl = strlen(key);
    for (const char *p = req->query; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') return strtol(p + kl + 1, NULL, 10);
        p = strchr(p, '&');
        if (p) p++;
    }
    return dflt;
}

static void max_store(_Atomic long long *a, long long v)
{
    long long old = atomic_load(a);
    while (v > old && !atomic_compare_exchange_weak(a, &old, v)) {
    }
}

/* ---- simple routes ---- */

static void r_json(struct gw_request *req, void *ud)
{
    const struct gw_config *c = req->config;
    char buf[512];
    snprintf(buf, sizeof buf, "{\"ok\":true,\"model\":\"%s\",\"loop\":%u}",
             c->n_models ? c->models[0].name : "none", req->loop_index);
    gw_http_respond_json(req, 200, buf);
}

static void r_echo(struct gw_request *req, void *ud)
{
    char n[32];
    snprintf(n, sizeof n, "%zu", req->body_len);
    gw_http_add_header(req, "x-body-len", n);
    gw_http_respond(req, 200, "application/octet-stream", req->body, req->body_len);
}

static void r_big(struct gw_request *req, void *ud)
{
    long size = query_int(req, "size", 1 << 20);
    if (size < 0 || size > (64L << 20)) size = 0;
    char *body = malloc(size ? (size_t)size : 1);
    if (!body) {
        gw_http_respond(req, 503, "text/plain", "out of memory", 13);
        return;
    }
    for (long i = 0; i < size; i++) body[i] = (char)('a' + i % 26);
    gw_http_respond(req, 200, "application/octet-stream", body, (size_t)size);
    free(body);
}

static void r_noreply(struct gw_request *req, void *ud)
{
    atomic_fetch_add(&stat_noreply, 1);
}

static void r_cut(struct gw_request *req, void *ud)
{
    gw_http_sse_start(req);
    gw_http_sse_event(req, "partial", 7);
    /* no end, no reference kept: the transport must cut the stream */
}

static void r_stats(struct gw_request *req, void *ud)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "{\"aborts\":%lld,\"last_abort_ns\":%lld,\"max_queued\":%lld,\"hang_active\":%lld,\"sse_"
             "started\":%lld,"
             "\"sse_done\":%lld,\"again\":%lld,\"noreply\":%lld,\"after_abort_rc\":%lld}",
             atomic_load(&stat_aborts), atomic_load(&stat_last_abort_ns), atomic_load(&stat_max_queued),
             atomic_load(&stat_hang_active), atomic_load(&stat_sse_started), atomic_load(&stat_sse_done),
             atomic_load(&stat_again), atomic_load(&stat_noreply), atomic_load(&stat_after_abort_rc));
    gw_http_respond_json(req, 200, buf);
}

/* ---- hang: only the abort callback ends it ---- */

static void hang_abort(struct gw_request *req, void *ud)
{
    atomic_store(&stat_last_abort_ns, mono_ns());
    atomic_fetch_add(&stat_aborts, 1);
    /* after an abort, answering is a harmless no-op that says so */
    int32_t rc = gw_http_respond_json(req, 200, "{}");
    if (rc == MM_CANCELLED && gw_request_aborted(req) && gw_http_stream_queued(req) == 0)
        rc = gw_http_sse_start(req);
    atomic_store(&stat_after_abort_rc, rc);
    atomic_fetch_sub(&stat_hang_active, 1);
    gw_request_unref(req);
}

static void r_hang(struct gw_request *req, void *ud)
{
    gw_request_ref(req);
    gw_request_on_abort(req, hang_abort, NULL);
    atomic_fetch_add(&stat_hang_active, 1);
}

/* ---- slow: a timer on the request's loop ---- */

struct slow {
    struct gw_request *req;
    struct event *ev;
};

static void slow_finish(struct slow *s, bool answer)
{
    if (answer) gw_http_respond_json(s->req, 200, "{\"slow\":true}");
    event_free(s->ev);
    gw_request_unref(s->req);
    free(s);
}

static void slow_fire(evutil_socket_t fd, short what, void *arg)
{
    slow_finish(arg, true);
}

static void slow_abort(struct gw_request *req, void *ud)
{
    atomic_store(&stat_last_abort_ns, mono_ns());
    atomic_fetch_add(&stat_aborts, 1);
    slow_finish(ud, false);
}

static void r_slow(struct gw_request *req, void *ud)
{
    long ms = query_int(req, "ms", 500);
    struct slow *s = calloc(1, sizeof *s);
    if (!s) {
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
        return;
    }
    s->req = req;
    s->ev = evtimer_new(req->base, slow_fire, s);
    gw_request_ref(req);
    gw_request_on_abort(req, slow_abort, s);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(s->ev, &tv);
}

/* ---- executor: another thread posts the answer back ---- */

static void exec_answer(void *arg)
{
    struct gw_request *req = arg;
    if (!gw_request_aborted(req)) gw_http_respond_json(req, 200, "{\"from\":\"executor\"}");
    gw_request_unref(req);
}

static void *exec_thread(void *arg)
{
    struct gw_request *req = arg;
    /* touching req here would be a bug: only its executor may */
    const struct gw_executor *ex = req->executor;
    if (gw_executor_post(ex, exec_answer, req) != 0) fprintf(stderr, "executor post failed\n");
    return NULL;
}

static void r_executor(struct gw_request *req, void *ud)
{
    gw_request_ref(req);
    pthread_t t;
    if (pthread_create(&t, NULL, exec_thread, req) != 0) {
        gw_request_unref(req);
        gw_http_send_error(req, 503, NULL, "no thread", NULL, NULL);
        return;
    }
    pthread_detach(t);
}

/* ---- SSE with backpressure ---- */

struct sse {
    struct gw_request *req;
    long left, size;
    long seq;
    char *payload;
};

static void sse_free(struct sse *s)
{
    free(s->payload);
    free(s);
}

static void sse_abort(struct gw_request *req, void *ud)
{
    atomic_store(&stat_last_abort_ns, mono_ns());
    atomic_fetch_add(&stat_aborts, 1);
    sse_free(ud);
    gw_request_unref(req);
}

static void sse_pump(struct gw_request *req, void *ud)
{
    struct sse *s = ud;
    while (s->left > 0) {
        size_t q = gw_http_stream_queued(req);
        max_store(&stat_max_queued, (long long)q);
        if (q > SSE_HIGH) {
            /* the client is slower than us: stop producing until the queue drains */
            gw_http_stream_on_drain(req, SSE_LOW, sse_pump, s);
            return;
        }
        int n = snprintf(s->payload, 24, "%012ld", s->seq);
        if (n < 12) n = 12;
        s->payload[12] = ' ';
        int32_t rc = gw_http_sse_event(req, s->payload, (size_t)s->size);
        if (rc == MM_AGAIN) {
            atomic_fetch_add(&stat_again, 1);
            gw_http_stream_on_drain(req, SSE_LOW, sse_pump, s);
            return;
        }
        if (rc != MM_OK) return; /* aborted: the abort callback cleans up */
        s->seq++;
        s->left--;
    }
    gw_http_sse_event(req, "[DONE]", 6);
    gw_http_stream_end(req);
    atomic_fetch_add(&stat_sse_done, 1);
    gw_request_on_abort(req, NULL, NULL);
    sse_free(s);
    gw_request_unref(req);
}

static void r_sse(struct gw_request *req, void *ud)
{
    struct sse *s = calloc(1, sizeof *s);
    long size = query_int(req, "size", 64);
    if (size < 16) size = 16;
    if (size > 1 << 20) size = 1 << 20;
    if (s) s->payload = malloc((size_t)size + 24);
    if (!s || !s->payload) {
        if (s) sse_free(s);
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
        return;
    }
    memset(s->payload, 'x', (size_t)size);
    s->req = req;
    s->left = query_int(req, "n", 10);
    s->size = size;
    atomic_fetch_add(&stat_sse_started, 1);
    gw_request_ref(req);
    gw_request_on_abort(req, sse_abort, s);
    gw_http_sse_start(req);
    sse_pump(req, s);
}

/* ---- module ---- */

static int32_t test_init(const struct gw_module_ctx *ctx, void *prev, void **state, struct mm_err *err)
{
    static const struct {
        const char *method, *path;
        gw_handler_fn fn;
    } routes[] = {
        {"GET", "/test/json", r_json},       {"POST", "/test/echo", r_echo},
        {"GET", "/test/sse", r_sse},         {"GET", "/test/hang", r_hang},
        {"GET", "/test/slow", r_slow},       {"GET", "/test/executor", r_executor},
        {"GET", "/test/noreply", r_noreply}, {"GET", "/test/cut", r_cut},
        {"GET", "/test/stats", r_stats},     {"GET", "/test/big", r_big},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int32_t rc = gw_routes_add(ctx->routes, routes[i].method, routes[i].path, GW_ROUTE_EXACT,
                                   routes[i].fn, NULL, false, err);
        if (rc) return rc;
    }
    *state = NULL;
    return MM_OK;
}

static void test_fini(void *state) {}

static const struct gw_module http_test_module = {.name = "http-test", .init = test_init, .fini = test_fini};

int main(int argc, char **argv)
{
    static const struct gw_module *const modules[] = {&http_test_module, NULL};
    return gw_server_main(argc, argv, modules);
}
