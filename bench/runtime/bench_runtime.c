/* bench-runtime [--model DIR] [--threads N] [--prompt P] [--steps D] [--reps R]
 *
 * On the tiny checkpoint (../shared/testdata/m3-tiny-a, or a generated one of the same shape when absent):
 *  - prefill tokens/s with 1, 4 and 16 sequences of P tokens each in one batch;
 *  - decode tokens/s with 1, 4 and 16 sequences, one token each per step, all in one batch; the baseline in
 *    the same run is the same 16 sequences decoded one at a time (no batching);
 *  - cache memory per token of context: resident growth while filling fresh pages against the formula
 *    sum over layers of 2 * n_kv * head_dim * 4 B (K and V, f32) + sum over MSA layers of idx_dim * 4 B.
 * Each number is the median of R repetitions. Prints a Markdown table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mkdemo.h"
#include "wk_config.h"
#include "wk_engine.h"

/* With one thread the clock is the process's CPU time: the build machine is shared, and CPU time does not
 * count the time other processes hold the core. With several threads it is wall time. */
static clockid_t clk = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static struct wk_engine *E;
static int32_t V;

static void die(const char *what, const struct mm_err *err)
{
    fprintf(stderr, "bench-runtime: %s: %s\n", what, err->msg);
    exit(1);
}

static void fill(int32_t *ids, int64_t n, uint32_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int32_t)((seed >> 8) % 8000);
    }
}

/* Prefill `conc` sequences of `plen` tokens in one step; returns seconds. Sequences are left in s[]. */
static double prefill(struct wk_seq **s, int conc, int plen, int32_t *ids, float *logits)
{
    struct mm_err err = {0};
    struct wk_step_item it[16];
    for (int j = 0; j < conc; j++) {
        if (wk_seq_create(E, &s[j], &err)) die("seq", &err);
        it[j] = (struct wk_step_item){s[j],           ids + (int64_t)j * plen, plen, NULL, NULL,
                                      WK_LOGITS_LAST, logits + (int64_t)j * V, NULL, 0};
    }
    double t0 = now();
    if (wk_engine_forward(E, it, conc, &err)) die("prefill", &err);
    return now() - t0;
}

/* `steps` decode steps; batched = all sequences per step, else one sequence per forward. Returns seconds. */
static double decode(struct wk_seq **s, int conc, int steps, int batched, float *logits)
{
    struct mm_err err = {0};
    struct wk_step_item it[16];
    int32_t tok[16];
    for (int j = 0; j < conc; j++) tok[j] = 100 + j;
    double t0 = now();
    for (int t = 0; t < steps; t++) {
        for (int j = 0; j < conc; j++)
            it[j] = (struct wk_step_item){
                s[j], &tok[j], 1, NULL, NULL, WK_LOGITS_LAST, logits + (int64_t)j * V, NULL, 0};
        if (batched) {
            if (wk_engine_forward(E, it, conc, &err)) die("decode", &err);
        } else {
            for (int j = 0; j < conc; j++)
                if (wk_engine_forward(E, &it[j], 1, &err)) die("decode", &err);
        }
        for (int j = 0; j < conc; j++) {
            const float *l = logits + (int64_t)j * V;
            int32_t b = 0;
            for (int32_t i = 1; i < V; i++)
                if (l[i] > l[b]) b = i;
            tok[j] = b;
        }
    }
    return now() - t0;
}

/* Cache bytes per token: in a fresh engine, hold 8 sequences (every scratch buffer grown at that shape), then
 * fill 8 more: their pages are fresh, so the resident growth is their cache memory. */
static void print_memory(const char *model, const struct wk_model_info *mi_main)
{
    struct mm_err err = {0};
    struct wk_engine_opts eo = {WK_BACKEND_CPU, 1, 4096, 0, 8192};
    struct wk_engine *saved = E, *e2 = NULL;
    if (wk_engine_open(model, &eo, &e2, &err)) die("open", &err);
    E = e2;
    enum { N = 8, P = 512 };
    int32_t *ids = malloc(sizeof(int32_t) * N * P);
    float *lg = malloc(sizeof(float) * N * (size_t)V);
    fill(ids, (int64_t)N * P, 77);
    struct wk_seq *a[N], *b[N];
    prefill(a, N, P, ids, lg);
    int64_t before = rss_bytes();
    prefill(b, N, P, ids, lg);
    int64_t after = rss_bytes();
    struct wk_config cfg;
    char cp[4200];
    snprintf(cp, sizeof cp, "%s/config.json", model);
    if (wk_config_load(cp, &cfg, &err)) die("config", &err);
    int64_t formula = 0;
    int32_t n_msa = 0;
    for (int32_t l = 0; l < cfg.text.n_layers; l++) {
        formula += 2LL * cfg.text.n_kv * cfg.text.head_dim * 4 +
                   (cfg.text.layer_sparse[l] ? cfg.text.idx_dim * 4 : 0);
        n_msa += cfg.text.layer_sparse[l];
    }
    printf(
        "\ncache memory per token of context: measured %.1f B (resident growth %.2f MiB while %d x %d tokens "
        "filled fresh pages); formula %lld B = %d layers x (K+V) 2 x %d KV heads x %d dims x 4 B + %d MSA "
        "layers x "
        "%d index dims x 4 B; page = %d tokens = %lld B\n",
        (double)(after - before) / (double)(N * P), (double)(after - before) / 1048576.0, N, P,
        (long long)formula, cfg.text.n_layers, cfg.text.n_kv, cfg.text.head_dim, n_msa, cfg.text.idx_dim,
        mi_main->block_size, (long long)mi_main->bytes_per_page);
    for (int j = 0; j < N; j++) {
        wk_seq_free(E, a[j]);
        wk_seq_free(E, b[j]);
    }
    wk_engine_close(e2);
    E = saved;
    free(ids);
    free(lg);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int threads = 0, plen = 512, steps = 32, reps = 3, only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt"))
            plen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--conc"))
            only = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench-runtime [--model DIR] [--threads N] [--prompt P] [--steps D] "
                            "[--reps R] [--conc 1|4|16]\n");
            return 2;
        }
    }
    if (plen < 1 || plen > 512 || steps < 1 || reps < 1 || reps > 50) {
        fprintf(stderr, "bench-runtime: --prompt 1..512, --steps >= 1, --reps 1..50\n");
        return 2;
    }
    char tmpdir[64] = "";
    struct mm_err err = {0};
    static char gold[4096];
    const char *td = getenv("MMGW_TESTDATA");
    snprintf(gold, sizeof gold, "%s/m3-tiny-a", td ? td : "../shared/testdata");
    struct stat st;
    if (!model && stat(gold, &st) == 0) model = gold;
    if (!model) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/mmgw_bench_XXXXXX");
        if (!mkdtemp(tmpdir)) return 1;
        struct mk_demo_opts o;
        mk_demo_defaults(&o);
        if (mk_demo_write(tmpdir, &o, &err)) die("mkdemo", &err);
        model = tmpdir;
    }
    if (threads == 1) clk = CLOCK_PROCESS_CPUTIME_ID;
    struct wk_engine_opts eo = {WK_BACKEND_CPU, threads, 4096, 0, 8192};
    if (wk_engine_open(model, &eo, &E, &err)) die("open", &err);
    const struct wk_model_info *mi = wk_engine_info(E);
    V = mi->vocab_size;
    int32_t *ids = malloc(sizeof(int32_t) * 16 * (size_t)plen);
    float *logits = malloc(sizeof(float) * 16 * (size_t)V);
    fill(ids, 16LL * plen, 9);
    struct wk_seq *s[16];

    /* warm-up at the largest shape grows every scratch buffer */
    struct wk_seq *warm[16];
    prefill(warm, 16, plen, ids, logits);
    decode(warm, 16, 2, 1, logits);

    printf("model: %s (%s), threads %d (%s), prompt %d tokens, %d decode steps, median of %d\n\n", model,
           mi->dtype, threads, threads == 1 ? "process CPU time" : "wall time", plen, steps, reps);
    printf("| sequences | prefill tok/s | decode tok/s (batched) | decode tok/s (one at a time) |\n");
    printf("|---:|---:|---:|---:|\n");
    int concs[3] = {1, 4, 16};
    double dec1 = 0, dec16 = 0;
    for (int c = 0; c < 3; c++) {
        int n = concs[c];
        if (only && n != only) continue;
        double pf[50], db[50], du[50];
        for (int r = 0; r < reps; r++) {
            pf[r] = (double)n * plen / prefill(s, n, plen, ids, logits);
            db[r] = (double)n * steps / decode(s, n, steps, 1, logits);
            du[r] = (double)n * steps / decode(s, n, steps, 0, logits);
            for (int j = 0; j < n; j++) wk_seq_free(E, s[j]);
        }
        double p = median(pf, reps), b = median(db, reps), u = median(du, reps);
        if (n == 1) dec1 = b;
        if (n == 16) dec16 = b;
        printf("| %d | %.0f | %.0f | %.0f |\n", n, p, b, u);
    }
    if (!only) printf("\ndecode speed-up, 16 sequences batched vs 1: %.2fx\n", dec16 / dec1);

    for (int j = 0; j < 16; j++) wk_seq_free(E, warm[j]);
    print_memory(model, mi);
    wk_engine_close(E);
    free(ids);
    free(logits);
    if (tmpdir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd)) fprintf(stderr, "cleanup failed\n");
    }
    return 0;
}
