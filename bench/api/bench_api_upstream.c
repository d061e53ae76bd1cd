/* bench-api-upstream --target HOST:PORT --prompt N --gen G --requests R [--transport loop|grpc-core]
 *
 * The worker-side baseline of the API benchmark's "added latency": R sequential Generate calls (the same
 * prompt of N token ids every time, G new tokens, greedy, ignore_eos, merge_complete as the gateway sends
 * it) through the gateway's own client (gateway/upstream), the way the gateway makes them: by default on an
 * event loop over the loop's own connection (gw_upstream_generate_loop), or with --transport grpc-core
 * through gRPC C core with callbacks handed to this thread through an executor. What the gateway adds on top
 * of this is HTTP, JSON, the template, tokenization and the output path. Prints: `mean_ms p50_ms p90_ms`. */
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_upstream.h"
#include "gw_upstream_generate.h"

struct task {
    void (*fn)(void *arg);
    void *arg;
    struct task *next;
};

/* A queue drained by the main thread: the executor the gRPC client posts completions to. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct task *head, *tail;
static struct event *wake; /* with an event loop: tasks are run from it */

static int post(void *ctx, void (*fn)(void *arg), void *arg)
{
    struct task *t = malloc(sizeof *t);
    if (!t) return -1;
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&mu);
    if (tail)
        tail->next = t;
    else
        head = t;
    tail = t;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    if (wake) event_active(wake, EV_READ, 0);
    return 0;
}

static struct task *take(void)
{
    pthread_mutex_lock(&mu);
    struct task *t = head;
    if (t) {
        head = t->next;
        if (!head) tail = NULL;
    }
    pthread_mutex_unlock(&mu);
    return t;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    for (struct task *t; (t = take());) {
        t->fn(t->arg);
        free(t);
    }
}

static int done;

static void run_until_done(void)
{
    while (!done) {
        pthread_mutex_lock(&mu);
        while (!head) pthread_cond_wait(&cv, &mu);
        struct task *t = head;
        head = t->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        t->fn(t->arg);
        free(t);
    }
}

static void on_response(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp)
{
    (void)arg;
    (void)resp;
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses)
{
    if (st->code != MM_OK) fprintf(stderr, "generate: %s\n", st->message);
    done = 1;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    const char *target = NULL, *transport = "loop";
    long n_prompt = 400, gen = 2, requests = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--target"))
            target = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt"))
            n_prompt = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--gen"))
            gen = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--requests"))
            requests = strtol(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--transport"))
            transport = argv[i + 1];
    }
    int use_loop = strcmp(transport, "grpc-core") != 0;
    if (!target || n_prompt < 1 || gen < 1 || requests < 1) {
        fprintf(stderr,
                "usage: bench-api-upstream --target HOST:PORT [--prompt N] [--gen G] [--requests R]\n");
        return 2;
    }
    struct mm_err err = {0};
    struct gw_upstream *up;
    struct gw_upstream_chan *ch;
    if (gw_upstream_create(NULL, &up, &err) != MM_OK ||
        gw_upstream_chan_open(up, target, &ch, &err) != MM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    uint32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
    double *lat = malloc((size_t)requests * sizeof *lat);
    if (!ids || !lat) return 1;
    for (long i = 0; i < n_prompt; i++) ids[i] = (uint32_t)(10 + (i * 37) % 500);
    struct gw_executor ex = {post, NULL};
    struct event_base *base = NULL;
    if (use_loop) {
        evthread_use_pthreads(); /* gRPC C core threads may post (Abort, fallback calls) */
        base = event_base_new();
        wake = base ? event_new(base, -1, EV_PERSIST, on_wake, NULL) : NULL;
        if (!wake) return 1;
    }
    struct gw_up_loop loop = {base, &ex, 0};
    static const struct gw_gen_callbacks cbs = {on_response, on_done};
    for (long r = -20; r < requests; r++) { /* 20 warm-up calls: connect, prefix cache */
        Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
        Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
        char rid[32];
        snprintf(rid, sizeof rid, "bench-%ld", r);
        req.request_id = rid;
        req.merge_complete = 1;
        req.input_ids = ids;
        req.n_input_ids = (size_t)n_prompt;
        req.sampling = &sp;
        sp.has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
        sp.max_new_tokens = (uint32_t)gen;
        sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
        sp.temperature = 0;
        sp.ignore_eos = 1;
        done = 0;
        struct gw_gen_call *call;
        double t0 = now_ms();
        int32_t rc = use_loop ? gw_upstream_generate_loop(ch, &req, NULL, &loop, &cbs, NULL, &call, &err)
                              : gw_upstream_generate(ch, &req, NULL, &ex, &cbs, NULL, &call, &err);
        if (rc != MM_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        if (use_loop)
            while (!done) event_base_loop(base, EVLOOP_ONCE);
        else
            run_until_done();
        if (r >= 0) lat[r] = now_ms() - t0;
    }
    double sum = 0;
    for (long r = 0; r < requests; r++) sum += lat[r];
    qsort(lat, (size_t)requests, sizeof *lat, cmp);
    printf("%.4f %.4f %.4f\n", sum / (double)requests, lat[requests / 2], lat[requests * 9 / 10]);
    gw_upstream_chan_close(ch);
    if (base) { /* the connection's teardown was posted to this loop */
        on_wake(-1, 0, NULL);
        event_free(wake);
        wake = NULL;
        event_base_free(base);
    }
    gw_upstream_destroy(up);
    free(ids);
    free(lat);
    return 0;
}
