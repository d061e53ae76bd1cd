/* bench-worker-offline --model DIR --streams C [--prompt P] [--gen G] [--threads N] [--mode engine|sched]
 *                      [--step-tokens N] [--reps R]
 *
 * The worker's work without gRPC, as the baseline of bench_worker.py:
 *   engine: a plain loop over wk_engine_forward: C prompts of P tokens prefilled in one step (chunks of
 *           --step-tokens), then greedy decode of G tokens, all C sequences batched in every step;
 *   sched:  the same C requests through the worker's scheduler (wk_sched) in-process, results to a counting
 *           sink: the scheduler's own overhead, still without gRPC.
 * Prints one line: `mode C total_tok_s decode_tok_s cpu_us_per_token` (generated tokens / wall time; the
 * tokens after each stream's first over the time after the first token; CPU time of the process per
 * generated token, prefill included), each the median of R runs. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "wk_engine.h"
#include "wk_sched.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* CPU seconds of the whole process (every thread): what a loaded machine distorts least */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the same prompts as bench_worker.py cannot be reproduced bit for bit (numpy RNG); any ids in range do */
static void fill(int32_t *ids, int64_t n, uint64_t seed, int32_t vocab)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    int32_t hi = (vocab < 8000 ? vocab : 8000) - 20;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = 10 + (int32_t)(x % (uint64_t)hi);
    }
}

static void die(const char *what, const struct mm_err *e)
{
    fprintf(stderr, "bench-worker-offline: %s: %s\n", what, e->msg);
    exit(1);
}

/* ---- engine mode ---- */
static void run_engine(struct wk_engine *e, int c, int64_t P, int G, int step, int rep, double *total,
                       double *decode)
{
    const struct wk_model_info *mi = wk_engine_info(e);
    struct mm_err err = {0};
    struct wk_seq **seq = calloc((size_t)c, sizeof(*seq));
    int32_t *ids = malloc((size_t)(c * P) * sizeof(int32_t));
    int32_t *tok = malloc((size_t)c * sizeof(int32_t));
    float *logits = malloc((size_t)c * (size_t)mi->vocab_size * sizeof(float));
    struct wk_step_item *it = calloc((size_t)c, sizeof(*it));
    struct wk_sampling sp = {.temperature = 0.0f, .top_p = 1.0f};
    for (int i = 0; i < c; i++) {
        fill(ids + i * P, P, (uint64_t)(i + 1 + 1000 * rep),
             mi->vocab_size); /* fresh prompts: no prefix reuse */
        if (wk_seq_create(e, &seq[i], &err)) die("seq", &err);
    }
    double t0 = now();
    /* prefill: as many prompt chunks per step as the budget holds */
    int64_t *fed = calloc((size_t)c, sizeof(int64_t));
    for (;;) {
        int n = 0, budget = step;
        for (int i = 0; i < c && budget > 0; i++) {
            if (fed[i] == P) continue;
            int64_t k = P - fed[i] < budget ? P - fed[i] : budget;
            it[n] = (struct wk_step_item){.seq = seq[i],
                                          .ids = ids + i * P + fed[i],
                                          .n = (int32_t)k,
                                          .logits_mode = fed[i] + k == P ? WK_LOGITS_LAST : WK_LOGITS_NONE,
                                          .logits = logits + (size_t)i * mi->vocab_size};
            fed[i] += k;
            budget -= (int)k;
            n++;
        }
        if (!n) break;
        if (wk_engine_forward(e, it, n, &err)) die("prefill", &err);
    }
    uint64_t rng = 1;
    for (int i = 0; i < c; i++)
        tok[i] = wk_sample(logits + (size_t)i * mi->vocab_size, mi->vocab_size, &sp, &rng, NULL);
    double t1 = now();
    for (int g = 1; g < G; g++) {
        for (int i = 0; i < c; i++)
            it[i] = (struct wk_step_item){.seq = seq[i],
                                          .ids = &tok[i],
                                          .n = 1,
                                          .logits_mode = WK_LOGITS_LAST,
                                          .logits = logits + (size_t)i * mi->vocab_size};
        if (wk_engine_forward(e, it, c, &err)) die("decode", &err);
        for (int i = 0; i < c; i++)
            tok[i] = wk_sample(logits + (size_t)i * mi->vocab_size, mi->vocab_size, &sp, &rng, NULL);
    }
    double t2 = now();
    *total = (double)c * G / (t2 - t0);
    *decode = (double)c * (G - 1) / (t2 - t1);
    for (int i = 0; i < c; i++) wk_seq_free(e, seq[i]);
    free(fed);
    free(seq);
    free(ids);
    free(tok);
    free(logits);
    free(it);
}

/* ---- sched mode ---- */
struct counter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ended;
    int64_t tokens;
    double first;
};

static void on_chunk(void *ctx, const struct wk_chunk_ev *ev)
{
    struct counter *k = ctx;
    pthread_mutex_lock(&k->mu);
    if (k->first == 0) k->first = now();
    k->tokens += ev->n;
    pthread_mutex_unlock(&k->mu);
}

static void on_complete(void *ctx, const struct wk_complete_ev *ev) {}

static void on_end(void *ctx, int32_t status, const char *msg)
{
    struct counter *k = ctx;
    pthread_mutex_lock(&k->mu);
    if (status) fprintf(stderr, "bench-worker-offline: request ended %d: %s\n", status, msg);
    k->ended++;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

static void run_sched(struct wk_engine *e, int c, int64_t P, int G, int step, int rep, double *total,
                      double *decode)
{
    const struct wk_model_info *mi = wk_engine_info(e);
    struct mm_err err = {0};
    struct wk_sched_opts so = {.step_tokens = step, .max_waiting = c + 1};
    struct wk_sched *s;
    if (wk_sched_create(e, &so, &s, &err) || wk_sched_start(s, &err)) die("sched", &err);
    struct counter k = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    struct wk_sched_sink sink = {.ctx = &k, .chunk = on_chunk, .complete = on_complete, .end = on_end};
    double t0 = now();
    for (int i = 0; i < c; i++) {
        struct wk_request *r = calloc(1, sizeof(*r));
        char id[32];
        snprintf(id, sizeof id, "b%d-%d", rep, i);
        r->id = strdup(id);
        r->ids = malloc((size_t)P * sizeof(int32_t));
        fill(r->ids, P, (uint64_t)(i + 1 + 1000 * rep), mi->vocab_size);
        r->n_ids = P;
        r->sp = (struct wk_sampling_req){.has_max_new_tokens = 1,
                                         .max_new_tokens = G,
                                         .temperature = 0.0f,
                                         .top_p = 1.0f,
                                         .n = 1,
                                         .ignore_eos = 1};
        uint64_t t;
        if (wk_sched_submit(s, r, &sink, &t, &err)) die("submit", &err);
    }
    pthread_mutex_lock(&k.mu);
    while (k.ended < c) pthread_cond_wait(&k.cv, &k.mu);
    pthread_mutex_unlock(&k.mu);
    double t2 = now();
    *total = (double)k.tokens / (t2 - t0);
    *decode = (double)(k.tokens - c) / (t2 - k.first);
    wk_sched_destroy(s);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *mode = "engine";
    int c = 1, G = 64, threads = 0, step = 2048, reps = 3;
    int64_t P = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--mode"))
            mode = v;
        else if (!strcmp(a, "--streams"))
            c = atoi(v);
        else if (!strcmp(a, "--prompt"))
            P = atoll(v);
        else if (!strcmp(a, "--gen"))
            G = atoi(v);
        else if (!strcmp(a, "--threads"))
            threads = atoi(v);
        else if (!strcmp(a, "--step-tokens"))
            step = atoi(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
    }
    if (!model || c < 1 || G < 2 || P < 1 || reps < 1 || reps > 64) {
        fprintf(stderr,
                "usage: bench-worker-offline --model DIR --streams C [--prompt P] [--gen G>=2] [--threads N] "
                "[--mode engine|sched] [--step-tokens N] [--reps R]\n");
        return 2;
    }
    struct mm_err err = {0};
    struct wk_engine_opts eo = {.threads = threads, .max_batch_tokens = step};
    struct wk_engine *e;
    if (wk_engine_open(model, &eo, &e, &err)) die("open", &err);
    double tot[64], dec[64], cpu[64];
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_s();
        if (!strcmp(mode, "sched"))
            run_sched(e, c, P, G, step, r, &tot[r], &dec[r]);
        else
            run_engine(e, c, P, G, step, r, &tot[r], &dec[r]);
        cpu[r] = (cpu_s() - c0) / ((double)c * G) * 1e6;
    }
    qsort(tot, (size_t)reps, sizeof(double), cmp_d);
    qsort(dec, (size_t)reps, sizeof(double), cmp_d);
    qsort(cpu, (size_t)reps, sizeof(double), cmp_d);
    printf("%s %d %.1f %.1f %.1f\n", mode, c, tot[reps / 2], dec[reps / 2], cpu[reps / 2]);
    wk_engine_close(e);
    return 0;
}
