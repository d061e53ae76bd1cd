/* bench-decode [--model DIR] [--threads N] [--context P] [--steps D] [--reps R] [--conc N[,N...]]
 *
 * Decode throughput alone, for profiling the batched decode step: for each concurrency N (default 1,16),
 * N sequences of P prompt tokens are prefilled once; then every repetition forks them (full pages shared,
 * so the forks read the same cache) and decodes D steps of one token per fork, all N in one forward call.
 * Prints wall-clock tokens/s of the forward calls (median of R repetitions) and the ratio of the largest
 * concurrency to the smallest. Unlike bench-runtime no prefill runs between the timed steps, so
 * MMGW_PROFILE=decode (per-operation wall time of decode steps, logged at exit) sees decode only. As in
 * bench-runtime, a warm-up (the largest concurrency's prefill and two decode steps) runs first. With two or
 * more threads the backend times small decode steps both ways (pool or calling thread) and keeps the faster
 * (docs/design/runtime.md, "Threads: measured choice"): its first ~100 steps of each size include probes, and
 * MMGW_CPU_PAR=always|never pins one way; MMGW_PROFILE logs the choice at exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_model.h"
#include "wk_engine.h"

enum { MAX_CONC = 64, MAX_REPS = 50 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what, const struct mm_err *err)
{
    fprintf(stderr, "bench-decode: %s: %s\n", what, err->msg);
    exit(1);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* tokens/s of `steps` batched decode steps of forks of s[0..n) (median of reps) */
static double run_conc(struct wk_engine *e, int32_t vocab, int n, int plen, int steps, int reps)
{
    struct mm_err err = {0};
    struct wk_seq *s[MAX_CONC], *f[MAX_CONC];
    struct wk_step_item it[MAX_CONC];
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n * (size_t)plen), tok[MAX_CONC];
    float *logits = malloc(sizeof(float) * (size_t)n * (size_t)vocab);
    if (!ids || !logits) exit(1);
    uint32_t seed = 9;
    for (int64_t i = 0; i < (int64_t)n * plen; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int32_t)((seed >> 8) % (uint32_t)(vocab > 8010 ? 8000 : vocab - 90));
    }
    for (int j = 0; j < n; j++) {
        if (wk_seq_create(e, &s[j], &err)) die("seq", &err);
        it[j] = (struct wk_step_item){s[j],
                                      ids + (int64_t)j * plen,
                                      plen,
                                      NULL,
                                      NULL,
                                      WK_LOGITS_LAST,
                                      logits + (int64_t)j * vocab,
                                      NULL,
                                      0,
                                      0,
                                      NULL,
                                      NULL,
                                      0};
    }
    if (wk_engine_forward(e, it, n, &err)) die("prefill", &err);
    double rate[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        double t = 0;
        for (int j = 0; j < n; j++) {
            if (wk_seq_fork(e, s[j], &f[j], &err)) die("fork", &err);
            tok[j] = 100 + j;
        }
        for (int st = 0; st < steps; st++) {
            for (int j = 0; j < n; j++)
                it[j] = (struct wk_step_item){
                    f[j], &tok[j], 1,    NULL, NULL, WK_LOGITS_LAST, logits + (int64_t)j * vocab, NULL,
                    0,    0,       NULL, NULL, 0};
            double t0 = now_s();
            if (wk_engine_forward(e, it, n, &err)) die("decode", &err);
            t += now_s() - t0;
            for (int j = 0; j < n; j++) { /* greedy, outside the clock */
                const float *l = logits + (int64_t)j * vocab;
                int32_t b = 0;
                for (int32_t i = 1; i < vocab; i++)
                    if (l[i] > l[b]) b = i;
                tok[j] = b;
            }
        }
        for (int j = 0; j < n; j++) wk_seq_free(e, f[j]);
        rate[r] = (double)n * steps / t;
    }
    for (int j = 0; j < n; j++) wk_seq_free(e, s[j]);
    free(ids);
    free(logits);
    qsort(rate, (size_t)reps, sizeof rate[0], cmp_d);
    return reps % 2 ? rate[reps / 2] : 0.5 * (rate[reps / 2 - 1] + rate[reps / 2]);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *conc_list = "1,16";
    int threads = 0, plen = 512, steps = 32, reps = 9;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-decode: %s needs a value\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--context"))
            plen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conc"))
            conc_list = argv[i + 1];
        else {
            fprintf(stderr, "usage: bench-decode [--model DIR] [--threads N] [--context P] [--steps D] "
                            "[--reps R] [--conc N[,N...]]\n");
            return 2;
        }
    }
    if (plen < 1 || plen > 4096 || steps < 1 || steps > 1024 || reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "bench-decode: --context 1..4096, --steps 1..1024, --reps 1..%d\n", MAX_REPS);
        return 2;
    }
    int concs[16], nc = 0;
    for (const char *p = conc_list; *p && nc < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > MAX_CONC) {
            fprintf(stderr, "bench-decode: --conc takes 1..%d, comma-separated\n", MAX_CONC);
            return 2;
        }
        concs[nc++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    struct mm_err err = {0};
    static struct bench_model bm;
    if (bench_model_pick(&bm, model, &err)) die("mkdemo", &err);
    model = bm.dir;
    int64_t pages = 0, most = 0;
    for (int c = 0; c < nc; c++) {
        pages += (int64_t)concs[c] * ((plen + steps) / 16 + 4);
        if ((int64_t)concs[c] * plen > most) most = (int64_t)concs[c] * plen;
    }
    /* room for every prefilled sequence and its forks (pages of 16 tokens or more), a prefill in one step */
    struct wk_engine_opts eo = {.backend = WK_BACKEND_CPU,
                                .threads = threads,
                                .cache_pages = pages > 4096 ? 2 * pages : 4096,
                                .max_batch_tokens = (int32_t)(most > 8192 ? most : 8192)};
    struct wk_engine *e;
    if (wk_engine_open(model, &eo, &e, &err)) die("open", &err);
    int32_t vocab = wk_engine_info(e)->vocab_size;
    int most_conc = 1;
    for (int c = 0; c < nc; c++)
        if (concs[c] > most_conc) most_conc = concs[c];
    (void)run_conc(e, vocab, most_conc, plen, 2,
                   1); /* warm-up: scratch at the largest shape, threads placed */
    printf("model %s, threads %d, context %d-%d, %d steps, median of %d\n", model, threads, plen,
           plen + steps, steps, reps);
    double first = 0, last = 0;
    for (int c = 0; c < nc; c++) {
        double r = run_conc(e, vocab, concs[c], plen, steps, reps);
        printf("decode %2d sequences: %8.0f tok/s (%.1f us/token)\n", concs[c], r, 1e6 / r);
        if (!c) first = r;
        last = r;
    }
    if (nc > 1) printf("ratio %d vs %d sequences: %.2fx\n", concs[nc - 1], concs[0], last / first);
    wk_engine_close(e);
    bench_model_release(&bm);
    return 0;
}
