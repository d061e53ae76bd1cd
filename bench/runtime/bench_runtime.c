/* bench-runtime [--model DIR] [--threads N] [--prompt P] [--steps D] [--reps R] [--conc 1|4|16] [--no-memory]
 *
 * On the tiny checkpoint (../shared/testdata/m3-tiny-a, or a generated one of the same shape when absent):
 *  - prefill tokens/s with 1, 4 and 16 sequences of P tokens each in one batch;
 *  - decode tokens/s with 1, 4 and 16 sequences, one token each per step, all in one batch; the baseline in
 *    the same run is the same sequences decoded one at a time (no batching);
 *  - cache memory per token of context: resident growth while filling fresh pages against the formula
 *    sum over layers of 2 * n_kv * head_dim * 4 B (K and V, f32) + sum over MSA layers of idx_dim * 4 B.
 * Throughput is wall-clock tokens/s of wk_engine_forward alone (the greedy pick of the next token happens
 * outside the clock), the median of R repetitions; the CPU time per token (all threads) is shown beside it,
 * and the load average before and after, since wall time on a shared machine depends on it. Prints Markdown.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "bench_model.h"
#include "wk_config.h"
#include "wk_engine.h"

static struct wk_engine *E;
static int32_t V;

static double clock_s(clockid_t clk)
{
    struct timespec t;
    clock_gettime(clk, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* wall and process CPU seconds of the forward calls, summed */
struct tm2 {
    double wall, cpu;
};

static void forward_timed(struct wk_step_item *it, int n, struct tm2 *acc, const char *what)
{
    struct mm_err err = {0};
    double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    if (wk_engine_forward(E, it, n, &err)) {
        fprintf(stderr, "bench-runtime: %s: %s\n", what, err.msg);
        exit(1);
    }
    acc->wall += clock_s(CLOCK_MONOTONIC) - w0;
    acc->cpu += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
}

/* CPU seconds of each thread of this process so far (utime + stime from /proc), into out[]; returns the
 * count. Shows whether the worker threads (and any library threads) actually ran. */
static int thread_cpu(double *out, int max, int *tids)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return 0;
    struct dirent *de;
    long tick = sysconf(_SC_CLK_TCK);
    while ((de = readdir(d)) && n < max) {
        if (de->d_name[0] == '.') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = 0;
        char *p = strrchr(buf, ')'); /* fields after the command name */
        unsigned long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2) {
            tids[n] = atoi(de->d_name);
            out[n++] = (double)(ut + st) / (double)tick;
        }
    }
    closedir(d);
    return n;
}

static void loadavg(char *out, size_t n)
{
    FILE *f = fopen("/proc/loadavg", "r");
    out[0] = 0;
    if (f) {
        if (!fgets(out, (int)n, f)) out[0] = 0;
        fclose(f);
    }
    char *nl = strchr(out, '\n');
    if (nl) *nl = 0;
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

static void die(const char *what, const struct mm_err *err)
{
    fprintf(stderr, "bench-runtime: %s: %s\n", what, err->msg);
    exit(1);
}

/* Pseudo-random prompt ids in [10, min(V, 8010)): ordinary tokens of any vocabulary of over 100 (the demo
 * tokenizer's has 720, the tiny checkpoint's 8199), away from the special ids at the top. */
static void fill(int32_t *ids, int64_t n, uint32_t seed)
{
    uint32_t span = V > 8010 ? 8000 : (uint32_t)(V > 100 ? V - 90 : 1);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 10 + (int32_t)((seed >> 8) % span);
    }
}

/* Prefill `conc` sequences of `plen` tokens in one step. Sequences are left in s[]. */
static struct tm2 prefill(struct wk_seq **s, int conc, int plen, int32_t *ids, float *logits)
{
    struct mm_err err = {0};
    struct wk_step_item it[16];
    for (int j = 0; j < conc; j++) {
        if (wk_seq_create(E, &s[j], &err)) die("seq", &err);
        it[j] = (struct wk_step_item){s[j],
                                      ids + (int64_t)j * plen,
                                      plen,
                                      NULL,
                                      NULL,
                                      WK_LOGITS_LAST,
                                      logits + (int64_t)j * V,
                                      NULL,
                                      0,
                                      0,
                                      NULL,
                                      NULL,
                                      0};
    }
    struct tm2 t = {0, 0};
    forward_timed(it, conc, &t, "prefill");
    return t;
}

/* `steps` decode steps; batched = all sequences per step, else one sequence per forward. */
static struct tm2 decode(struct wk_seq **s, int conc, int steps, int batched, float *logits)
{
    struct wk_step_item it[16];
    int32_t tok[16];
    struct tm2 tm = {0, 0};
    for (int j = 0; j < conc; j++) tok[j] = 100 + j;
    for (int t = 0; t < steps; t++) {
        for (int j = 0; j < conc; j++)
            it[j] = (struct wk_step_item){
                s[j], &tok[j], 1,    NULL, NULL, WK_LOGITS_LAST, logits + (int64_t)j * V, NULL,
                0,    0,       NULL, NULL, 0};
        if (batched)
            forward_timed(it, conc, &tm, "decode");
        else
            for (int j = 0; j < conc; j++) forward_timed(&it[j], 1, &tm, "decode");
        for (int j = 0; j < conc; j++) {
            const float *l = logits + (int64_t)j * V;
            int32_t b = 0;
            for (int32_t i = 1; i < V; i++)
                if (l[i] > l[b]) b = i;
            tok[j] = b;
        }
    }
    return tm;
}

/* Cache bytes per token: in a fresh engine, hold 8 sequences (every scratch buffer grown at that shape), then
 * fill 8 more: their pages are fresh, so the resident growth is their cache memory. */
static void print_memory(const char *model, const struct wk_model_info *mi_main)
{
    struct mm_err err = {0};
    struct wk_engine_opts eo = {WK_BACKEND_CPU, 1, 4096, 0, 8192};
    struct wk_engine *saved = E, *e2 = NULL;
    /* resident memory in 4 KiB steps: huge pages would round each layer's growth to 2 MiB */
    setenv("MMGW_HUGEPAGES", "0", 1);
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
    unsetenv("MMGW_HUGEPAGES");
    E = saved;
    free(ids);
    free(lg);
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int threads = 0, plen = 512, steps = 32, reps = 3, only = 0, memory = 1;
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--no-memory")) {
            memory = 0;
            i--;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "bench-runtime: %s needs a value\n", argv[i]);
            return 2;
        } else if (!strcmp(argv[i], "--model"))
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
                            "[--reps R] [--conc 1|4|16] [--no-memory]\n");
            return 2;
        }
    }
    if (plen < 1 || plen > 512 || steps < 1 || reps < 1 || reps > 50) {
        fprintf(stderr, "bench-runtime: --prompt 1..512, --steps >= 1, --reps 1..50\n");
        return 2;
    }
    struct mm_err err = {0};
    static struct bench_model bm;
    if (bench_model_pick(&bm, model, &err)) die("mkdemo", &err);
    model = bm.dir;
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
    for (int j = 0; j < 16; j++) wk_seq_free(E, warm[j]);

    char la0[128], la1[128];
    loadavg(la0, sizeof la0);
    printf("model: %s (%s), threads %d, prompt %d tokens, %d decode steps (context %d-%d), median of %d; "
           "wall-clock tokens/s of the forward calls; CPU = process CPU time per token (all threads)\n\n",
           model, mi->dtype, threads, plen, steps, plen, plen + steps, reps);
    printf("| sequences | prefill tok/s | decode tok/s (batched) | decode tok/s (one at a time) | decode CPU "
           "us/token (batched) |\n");
    printf("|---:|---:|---:|---:|---:|\n");
    int concs[3] = {1, 4, 16};
    double dec1 = 0, dec16 = 0;
    for (int c = 0; c < 3; c++) {
        int n = concs[c];
        if (only && n != only) continue;
        double pf[50], db[50], du[50], dc[50];
        for (int r = 0; r < reps; r++) {
            struct tm2 t = prefill(s, n, plen, ids, logits);
            pf[r] = (double)n * plen / t.wall;
            t = decode(s, n, steps, 1, logits);
            db[r] = (double)n * steps / t.wall;
            dc[r] = t.cpu / ((double)n * steps) * 1e6;
            t = decode(s, n, steps, 0, logits);
            du[r] = (double)n * steps / t.wall;
            for (int j = 0; j < n; j++) wk_seq_free(E, s[j]);
        }
        double p = median(pf, reps), b = median(db, reps), u = median(du, reps), cu = median(dc, reps);
        if (n == 1) dec1 = b;
        if (n == 16) dec16 = b;
        printf("| %d | %.0f | %.0f | %.0f | %.1f |\n", n, p, b, u, cu);
    }
    loadavg(la1, sizeof la1);
    if (!only) printf("\ndecode speed-up, 16 sequences batched vs 1: %.2fx\n", dec16 / dec1);
    printf("load average before: %s; after: %s\n", la0, la1);
    double tcpu[64];
    int tids[64], nt = thread_cpu(tcpu, 64, tids);
    printf("CPU seconds per thread of this process:");
    for (int i = 0; i < nt; i++) printf(" %d:%.2f", tids[i], tcpu[i]);
    printf("\n");

    if (memory) print_memory(model, mi);
    wk_engine_close(E);
    free(ids);
    free(logits);
    bench_model_release(&bm);
    return 0;
}
