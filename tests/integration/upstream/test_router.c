/* The router against fake_worker.py processes on 127.0.0.1: power of two choices on reported load,
 * prefix affinity, retry elsewhere before the first response and an error after it, status classes
 * (capacity pushback retried without hurting the breaker, bad requests not retried), the circuit
 * breaker opening on a killed worker and probing back when it returns, unhealthy workers skipped, and
 * cancel reaching the worker as an Abort. */
#include <event2/event.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_worker.h"
#include "gw_router.h"
#include "mmgw_test.h"
#include "test_loop.h"

static struct test_loop *loop;
static struct gw_upstream *up;

struct result {
    int done;
    int responses;
    uint32_t first_token;
    struct gw_call_status st;
    uint32_t attempts;
    int worker;
};

static void on_resp(void *arg, const Mmgw__Worker__V1__GenerateResponse *r)
{
    struct result *o = arg;
    if (r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK && o->responses == 0 &&
        r->chunk->n_token_ids)
        o->first_token = r->chunk->token_ids[0];
    o->responses++;
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses, uint32_t attempts,
                    int worker)
{
    struct result *o = arg;
    o->done = 1;
    o->st = *st;
    o->attempts = attempts;
    o->worker = worker;
}

static const struct gw_route_callbacks cbs = {on_resp, on_done};

static int is_done(void *arg)
{
    return ((struct result *)arg)->done;
}

struct req {
    Mmgw__Worker__V1__GenerateRequest m;
    uint32_t ids[64];
    char id[32];
};

static void make_req(struct req *q, const char *id, const uint32_t *ids, size_t n)
{
    mmgw__worker__v1__generate_request__init(&q->m);
    snprintf(q->id, sizeof(q->id), "%s", id);
    memcpy(q->ids, ids, n * sizeof(*ids));
    q->m.request_id = q->id;
    q->m.input_ids = q->ids;
    q->m.n_input_ids = n;
}

/* Run one request through the router to its end. */
static int32_t run(struct gw_router *r, const char *id, const uint32_t *ids, size_t n, struct result *o)
{
    struct req q;
    make_req(&q, id, ids, n);
    memset(o, 0, sizeof(*o));
    struct mm_err e;
    int32_t rc = gw_router_generate(r, &q.m, test_loop_executor(loop), &cbs, o, NULL, &e);
    if (rc != MM_OK) {
        o->st.code = rc;
        snprintf(o->st.message, sizeof(o->st.message), "%s", e.msg);
        return rc;
    }
    if (!test_loop_run(loop, is_done, o, 15000)) {
        fprintf(stderr, "%s: no result\n", id);
        return MM_TIMEOUT;
    }
    return o->st.code;
}

struct rounds {
    struct gw_router *r;
    uint64_t want;
};

static int rounds_reached(void *arg)
{
    struct rounds *x = arg;
    return gw_router_check_rounds(x->r) >= x->want;
}

/* Wait until n more health rounds have completed. */
static void wait_rounds(struct gw_router *r, int n)
{
    struct rounds x = {r, gw_router_check_rounds(r) + (uint64_t)n};
    CHECK_MSG(test_loop_run(loop, rounds_reached, &x, 10000), "health checks stalled");
}

static struct gw_router *router(const struct fake_worker *w, size_t n, struct gw_router_opts *o)
{
    const char *targets[8];
    for (size_t i = 0; i < n; i++) targets[i] = w[i].target;
    struct gw_router *r = NULL;
    struct mm_err e;
    if (!o->health_interval_ms) o->health_interval_ms = 100;
    if (!o->seed) o->seed = 42;
    CHECK_MSG(gw_router_create(up, "fake", targets, n, o, test_loop_base(loop), &r, &e) == MM_OK, "%s",
              e.msg);
    if (r) wait_rounds(r, 1);
    return r;
}

static int start_workers(struct fake_worker *w, size_t n, const char *const *const *args)
{
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof(name), "r%zu-%d", i, rand());
        if (fake_worker_start(&w[i], name, 0, args[i]) != 0) {
            for (size_t j = 0; j < i; j++) fake_worker_kill(&w[j]);
            CHECK(0);
            return -1;
        }
    }
    return 0;
}

static void stop_workers(struct fake_worker *w, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fake_worker_kill(&w[i]);
        fake_worker_cleanup(&w[i]);
    }
}

static void test_least_loaded(void)
{
    const char *a0[] = {"--id", "1", "--running", "10", NULL};
    const char *a1[] = {"--id", "2", "--running", "0", "--waiting", "1", NULL};
    const char *const *args[] = {a0, a1};
    struct fake_worker w[2];
    if (start_workers(w, 2, args) != 0) return;
    struct gw_router_opts o = {0};
    struct gw_router *r = router(w, 2, &o);
    if (!r) return;
    uint32_t ids[3] = {1, 2, 3};
    for (int i = 0; i < 10; i++) {
        struct result res;
        char id[32];
        snprintf(id, sizeof(id), "ll-%d", i);
        int32_t rc = run(r, id, ids, 3, &res);
        CHECK_MSG(rc == MM_OK, "%s: %s", id, res.st.message);
        CHECK_EQ_INT(res.worker, 1);
        CHECK_EQ_INT(res.first_token, 2000);
    }
    struct gw_worker_stats st[2];
    CHECK_EQ_INT(gw_router_stats(r, st, 2), 2);
    CHECK_EQ_INT(st[0].reported_load, 10);
    CHECK_EQ_INT(st[1].reported_load, 1);
    CHECK_EQ_INT(st[1].requests, 10);
    CHECK_EQ_INT(st[0].requests, 0);
    CHECK_EQ_INT(st[0].health, GW_WORKER_HEALTHY);
    gw_router_destroy(r);
    stop_workers(w, 2);
}

static void test_affinity(void)
{
    const char *a0[] = {"--id", "1", NULL};
    const char *a1[] = {"--id", "2", NULL};
    const char *a2[] = {"--id", "3", NULL};
    const char *const *args[] = {a0, a1, a2};
    struct fake_worker w[3];
    if (start_workers(w, 3, args) != 0) return;
    struct gw_router_opts o = {0}; /* page size from ModelInfo: the fake worker says 4 */
    struct gw_router *r = router(w, 3, &o);
    if (!r) return;
    /* conversations of growing prompts: every turn lands on the worker of its first turn */
    int first_worker[4];
    for (int conv = 0; conv < 4; conv++) {
        uint32_t ids[40];
        for (int i = 0; i < 40; i++) ids[i] = (uint32_t)(conv * 1000 + i);
        struct result res;
        char id[32];
        snprintf(id, sizeof(id), "c%d-t0", conv);
        CHECK_EQ_INT(run(r, id, ids, 8, &res), MM_OK);
        first_worker[conv] = res.worker;
        for (int turn = 1; turn <= 4; turn++) {
            snprintf(id, sizeof(id), "c%d-t%d", conv, turn);
            CHECK_EQ_INT(run(r, id, ids, (size_t)(8 + turn * 7), &res), MM_OK);
            CHECK_MSG(res.worker == first_worker[conv], "conversation %d turn %d went to %d, not %d", conv,
                      turn, res.worker, first_worker[conv]);
        }
    }
    struct gw_worker_stats st[3];
    gw_router_stats(r, st, 3);
    uint64_t hits = st[0].affinity_hits + st[1].affinity_hits + st[2].affinity_hits;
    CHECK_MSG(hits >= 16, "affinity decided %llu of 16 follow-up turns", (unsigned long long)hits);
    gw_router_destroy(r);
    stop_workers(w, 3);
}

static void test_retry_and_errors(void)
{
    /* worker 0 looks least loaded but refuses every Generate; worker 1 works */
    const char *a0[] = {"--id", "1", "--fail-all", "--fail-code", "UNAVAILABLE", NULL};
    const char *a1[] = {"--id", "2", "--running", "5", NULL};
    const char *const *args[] = {a0, a1};
    struct fake_worker w[2];
    if (start_workers(w, 2, args) != 0) return;
    struct gw_router_opts o = {.breaker = {.failures = 100}};
    struct gw_router *r = router(w, 2, &o);
    if (!r) return;
    uint32_t ids[3] = {1, 2, 3};
    struct result res;
    CHECK_EQ_INT(run(r, "retry-1", ids, 3, &res), MM_OK);
    CHECK_EQ_INT(res.attempts, 2);
    CHECK_EQ_INT(res.worker, 1);
    CHECK_EQ_INT(res.first_token, 2000);
    CHECK_EQ_INT(fake_worker_log_count(&w[0], "\"generate\"", "\"retry-1\"", NULL), 1);
    CHECK_EQ_INT(fake_worker_log_count(&w[1], "\"generate\"", "\"retry-1\"", NULL), 1);
    struct gw_worker_stats st[2];
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[0].failures, 1);
    CHECK_EQ_INT(st[0].retried, 1);
    gw_router_destroy(r);
    stop_workers(w, 2);

    /* no retries configured: the caller gets the error */
    const char *b0[] = {"--fail-all", "--fail-code", "UNAVAILABLE", NULL};
    const char *const *bargs[] = {b0};
    if (start_workers(w, 1, bargs) != 0) return;
    struct gw_router_opts o2 = {.retries = -1};
    r = router(w, 1, &o2);
    if (!r) return;
    CHECK_EQ_INT(run(r, "noretry", ids, 3, &res), MM_UNAVAILABLE);
    CHECK_EQ_INT(res.attempts, 1);
    gw_router_destroy(r);
    stop_workers(w, 1);

    /* capacity pushback is retried but is not a fault; a bad request is neither */
    const char *c0[] = {"--id", "1", "--fail-all", "--fail-code", "RESOURCE_EXHAUSTED", NULL};
    const char *c1[] = {"--id", "2", "--running", "5", NULL};
    const char *const *cargs[] = {c0, c1};
    if (start_workers(w, 2, cargs) != 0) return;
    struct gw_router_opts o3 = {.breaker = {.failures = 1}};
    r = router(w, 2, &o3);
    if (!r) return;
    CHECK_EQ_INT(run(r, "full-1", ids, 3, &res), MM_OK);
    CHECK_EQ_INT(res.attempts, 2);
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[0].failures, 0);
    CHECK_EQ_INT(st[0].breaker, GW_BREAKER_CLOSED);
    gw_router_destroy(r);
    stop_workers(w, 2);

    const char *d0[] = {"--fail-all", "--fail-code", "INVALID_ARGUMENT", NULL};
    const char *d1[] = {"--running", "5", NULL};
    const char *const *dargs[] = {d0, d1};
    if (start_workers(w, 2, dargs) != 0) return;
    r = router(w, 2, &o3);
    if (!r) return;
    CHECK_EQ_INT(run(r, "bad-1", ids, 3, &res), MM_INVALID);
    CHECK_EQ_INT(res.attempts, 1);
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[0].breaker, GW_BREAKER_CLOSED);
    gw_router_destroy(r);
    stop_workers(w, 2);

    /* a worker that dies after sending tokens: no retry, the caller gets an error after them */
    const char *e0[] = {"--id", "1", "--tokens", "10", "--die-after", "2", NULL};
    const char *e1[] = {"--id", "2", "--running", "5", NULL};
    const char *const *eargs[] = {e0, e1};
    if (start_workers(w, 2, eargs) != 0) return;
    r = router(w, 2, &o);
    if (!r) return;
    int32_t rc = run(r, "dies-1", ids, 3, &res);
    CHECK_MSG(rc == MM_UNAVAILABLE || rc == MM_ERROR, "rc %d: %s", rc, res.st.message);
    CHECK_EQ_INT(res.responses, 2);
    CHECK_EQ_INT(res.attempts, 1);
    CHECK_EQ_INT(fake_worker_log_count(&w[1], "\"generate\"", "\"dies-1\"", NULL), 0);
    /* the next request finds worker 0 gone (connection refused) and is retried on worker 1 */
    CHECK_EQ_INT(run(r, "after-death", ids, 3, &res), MM_OK);
    CHECK_EQ_INT(res.worker, 1);
    gw_router_destroy(r);
    stop_workers(w, 2);
}

/* The only worker is on this host but has a /dev/shm of its own: it cannot open the request's shared
 * memory (NOT_FOUND). The router sends the request to it again, now inline, even with retries off. */
static void test_shm_refused_resend(void)
{
    char dir[] = "/tmp/mmgw-noshm-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(0);
        return;
    }
    const char *a0[] = {"--id", "3", "--supports-shm", "--shm-dir", dir, NULL};
    const char *const *args[] = {a0};
    struct fake_worker w[1];
    if (start_workers(w, 1, args) != 0) {
        rmdir(dir);
        return;
    }
    struct gw_router_opts o = {.retries = -1};
    struct gw_router *r = router(w, 1, &o);
    if (!r) {
        stop_workers(w, 1);
        rmdir(dir);
        return;
    }
    wait_rounds(r, 2); /* ModelInfo (supports_shm) is in */
    static uint8_t px[1u << 20];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 7);
    Mmgw__Worker__V1__Tensor t = MMGW__WORKER__V1__TENSOR__INIT;
    int64_t shape[2] = {(int64_t)(sizeof px / 2352), 1176};
    t.dtype = MMGW__WORKER__V1__DTYPE__BF16;
    t.shape = shape;
    t.n_shape = 2;
    t.data.data = px;
    t.data.len = sizeof px;
    Mmgw__Worker__V1__MultimodalItem item = MMGW__WORKER__V1__MULTIMODAL_ITEM__INIT;
    item.modality = MMGW__WORKER__V1__MODALITY__IMAGE;
    item.pixel_values = &t;
    Mmgw__Worker__V1__MultimodalItem *items[1] = {&item};
    struct req q;
    uint32_t ids[3] = {1, 2, 3};
    make_req(&q, "shm-resend", ids, 3);
    q.m.mm_inputs = items;
    q.m.n_mm_inputs = 1;
    struct result res;
    memset(&res, 0, sizeof(res));
    struct mm_err e;
    CHECK_EQ_INT(gw_router_generate(r, &q.m, test_loop_executor(loop), &cbs, &res, NULL, &e), MM_OK);
    CHECK(test_loop_run(loop, is_done, &res, 15000));
    CHECK_MSG(res.st.code == MM_OK, "%s", res.st.message);
    CHECK_EQ_INT(res.attempts, 2);
    CHECK_EQ_INT(res.first_token, 3000);
    CHECK_EQ_INT(fake_worker_log_count(&w[0], "\"shm-resend\"", "shm_missing", NULL), 1);
    CHECK_EQ_INT(fake_worker_log_count(&w[0], "\"shm-resend\"", "\"transport\": \"inline\"", NULL), 1);
    gw_router_destroy(r);
    stop_workers(w, 1);
    rmdir(dir);
}

/* Kill the only worker: the breaker opens, requests are refused at once (503), health checks mark it
 * unhealthy; restart it on the same port: the half-open probe closes the breaker and requests flow. */
static void test_breaker(void)
{
    const char *a0[] = {"--id", "4", NULL};
    const char *const *args[] = {a0};
    struct fake_worker w[1];
    if (start_workers(w, 1, args) != 0) return;
    int port = w[0].port;
    struct gw_router_opts o = {.health_interval_ms = 100,
                               .breaker = {.failures = 2, .cooldown_ms = 300, .max_cooldown_ms = 1000},
                               .retries = -1};
    struct gw_router *r = router(w, 1, &o);
    if (!r) return;
    uint32_t ids[3] = {1, 2, 3};
    struct result res;
    CHECK_EQ_INT(run(r, "b-ok", ids, 3, &res), MM_OK);
    fake_worker_kill(&w[0]);
    CHECK_EQ_INT(run(r, "b-fail-1", ids, 3, &res), MM_UNAVAILABLE);
    CHECK_EQ_INT(run(r, "b-fail-2", ids, 3, &res), MM_UNAVAILABLE);
    struct gw_worker_stats st[1];
    gw_router_stats(r, st, 1);
    CHECK_EQ_INT(st[0].breaker, GW_BREAKER_OPEN);
    CHECK_EQ_INT(st[0].breaker_opens, 1);
    /* open: refused at once, without contacting anything */
    CHECK_EQ_INT(run(r, "b-refused", ids, 3, &res), MM_UNAVAILABLE);
    CHECK(strstr(res.st.message, "no healthy worker") != NULL);
    /* probes (health checks after the cooldown) fail while it is down: the breaker re-opens, longer */
    wait_rounds(r, 6);
    gw_router_stats(r, st, 1);
    CHECK_EQ_INT(st[0].health, GW_WORKER_UNHEALTHY);
    CHECK_MSG(st[0].breaker_opens >= 2, "breaker opened %llu times", (unsigned long long)st[0].breaker_opens);

    /* back on the same port */
    const char *again[] = {"--id", "5", NULL};
    if (fake_worker_start(&w[0], "breaker-back", port, again) != 0) {
        CHECK(0);
        gw_router_destroy(r);
        return;
    }
    /* health checks see it answer: healthy again, and the breaker lets a request be its probe */
    int ready = 0;
    for (int i = 0; i < 80 && !ready; i++) {
        wait_rounds(r, 1);
        gw_router_stats(r, st, 1);
        ready = st[0].breaker == GW_BREAKER_HALF_OPEN && st[0].health == GW_WORKER_HEALTHY;
    }
    CHECK_MSG(ready, "breaker %s, health %s after the worker came back", gw_breaker_state_name(st[0].breaker),
              gw_worker_health_name(st[0].health));
    CHECK_EQ_INT(run(r, "b-back", ids, 3, &res), MM_OK); /* the probe */
    CHECK_EQ_INT(res.first_token, 5000);
    gw_router_stats(r, st, 1);
    CHECK_EQ_INT(st[0].breaker, GW_BREAKER_CLOSED);
    gw_router_destroy(r);
    stop_workers(w, 1);
}

/* With health checks out of the way, the half-open probe is a real request. */
static void test_breaker_request_probe(void)
{
    const char *a0[] = {"--id", "1", "--fail-first", "2", NULL};
    const char *const *args[] = {a0};
    struct fake_worker w[1];
    if (start_workers(w, 1, args) != 0) return;
    struct gw_router_opts o = {
        .health_interval_ms = 60000, .breaker = {.failures = 2, .cooldown_ms = 200}, .retries = -1};
    struct gw_router *r = router(w, 1, &o);
    if (!r) return;
    uint32_t ids[3] = {1, 2, 3};
    struct result res;
    CHECK_EQ_INT(run(r, "p-1", ids, 3, &res), MM_UNAVAILABLE);
    CHECK_EQ_INT(run(r, "p-2", ids, 3, &res), MM_UNAVAILABLE);
    CHECK_EQ_INT(run(r, "p-3", ids, 3, &res), MM_UNAVAILABLE); /* open: refused locally */
    CHECK_EQ_INT(fake_worker_log_count(&w[0], "\"generate\"", "\"p-3\"", NULL), 0);
    test_loop_run(loop, NULL, NULL, 250);
    CHECK_EQ_INT(run(r, "p-4", ids, 3, &res), MM_OK); /* the probe, and it succeeds */
    struct gw_worker_stats st[1];
    gw_router_stats(r, st, 1);
    CHECK_EQ_INT(st[0].breaker, GW_BREAKER_CLOSED);
    gw_router_destroy(r);
    stop_workers(w, 1);
}

static void test_unhealthy_and_cancel(void)
{
    const char *a0[] = {"--id", "1", "--unhealthy", NULL};
    const char *a1[] = {"--id", "2", "--running", "50", "--tokens", "500", "--delay-ms", "10", NULL};
    const char *const *args[] = {a0, a1};
    struct fake_worker w[2];
    if (start_workers(w, 2, args) != 0) return;
    struct gw_router_opts o = {.unhealthy_after = 2};
    struct gw_router *r = router(w, 2, &o);
    if (!r) return;
    wait_rounds(r, 2);
    struct gw_worker_stats st[2];
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[0].health, GW_WORKER_UNHEALTHY);
    /* worker 0 reports no load but says it is unhealthy: everything goes to worker 1 */
    struct req q;
    uint32_t ids[3] = {1, 2, 3};
    make_req(&q, "cancel-route", ids, 3);
    struct result res;
    memset(&res, 0, sizeof(res));
    struct gw_route_call *call = NULL;
    struct mm_err e;
    CHECK_EQ_INT(gw_router_generate(r, &q.m, test_loop_executor(loop), &cbs, &res, &call, &e), MM_OK);
    CHECK_EQ_INT(gw_route_worker(call), 1);
    test_loop_run(loop, NULL, NULL, 200);
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[1].in_flight, 1);
    CHECK(res.responses > 0);
    gw_route_cancel(call);
    gw_router_stats(r, st, 2);
    CHECK_EQ_INT(st[1].in_flight, 0);
    int aborted = 0;
    for (int i = 0; i < 100 && !aborted; i++) {
        aborted = fake_worker_log_count(&w[1], "\"abort\"", "\"cancel-route\"", NULL);
        if (!aborted) test_loop_run(loop, NULL, NULL, 20);
    }
    CHECK_MSG(aborted, "Abort never reached the worker");
    CHECK_EQ_INT(res.done, 0);
    gw_router_destroy(r);
    stop_workers(w, 2);
}

int main(void)
{
    srand((unsigned)getpid());
    loop = test_loop_new();
    struct mm_err e;
    if (!loop || gw_upstream_create(NULL, &up, &e) != MM_OK) {
        fprintf(stderr, "setup failed\n");
        return 1;
    }
    printf("-- least loaded\n");
    test_least_loaded();
    printf("-- affinity\n");
    test_affinity();
    printf("-- retries and errors\n");
    test_retry_and_errors();
    test_shm_refused_resend();
    printf("-- breaker\n");
    test_breaker();
    printf("-- breaker request probe\n");
    test_breaker_request_probe();
    printf("-- unhealthy and cancel\n");
    test_unhealthy_and_cancel();
    gw_upstream_destroy(up);
    test_loop_free(loop);
    return test_done();
}
