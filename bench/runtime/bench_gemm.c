/* bench-gemm [--reps R]: the linear-layer product y = x . W^T of the CPU backend, one thread, at the shapes
 * of decode (1, 4, 16 rows) and prefill (512 rows), for the tiny checkpoint's layers and its LM head:
 * kn_sgemm_nt on row-major W (OpenBLAS, or the runtime's own small-row kernel up to 8 rows; the code before
 * the packed kernel) against kn_wgemm on W packed at load, at each instruction-set level the CPU has.
 * GFLOP/s, median of R runs of process CPU time (the machine is shared; CPU time does not count the time
 * other processes hold the core). Then the chain of every product of one decode step of the tiny checkpoint
 * (8.7 MB of packed weights, streamed from L3 as in a real step; routed experts at 1/4 of the rows), at 1 and
 * 16 rows: GFLOP/s of the best of R * 20 chains, wall clock. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_gemm.h"
#include "kn_isa.h"
#include "kn_wgemm.h"

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* seconds per call, median over reps of (enough calls for ~20 ms) */
static double timeit(int which, int64_t m, int64_t n, int64_t k, const float *a, const float *w,
                     const float *p, float *c, int reps)
{
    double t[64];
    int64_t calls = 1 + (int64_t)(2e7 / (double)(m * n * k + 1000));
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        for (int64_t i = 0; i < calls; i++) {
            if (which == 0)
                kn_sgemm_nt(m, n, k, a, k, w, k, 0.0f, c, n);
            else
                kn_wgemm(m, k, a, k, p, n, 0, n, c, n);
        }
        t[r] = (cpu_now() - t0) / (double)calls;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

static double wall_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* The products of one decode step, in order: per layer q, k, v (and the index q, k of the MSA layers), o;
 * layer 0 a dense MLP, layers 1-3 the router, 8 experts (a quarter of the rows each: top-2 of 8) and the
 * shared expert; then the LM head. */
static void step_chain(int reps)
{
    struct {
        int64_t n, k;
        int div;
        float *p;
    } w[128];
    int nw = 0;
#define ADD(N, K, D) (w[nw].n = (N), w[nw].k = (K), w[nw].div = (D), nw++)
    for (int l = 0; l < 4; l++) {
        ADD(256, 128, 1), ADD(64, 128, 1), ADD(64, 128, 1);
        if (l) ADD(64, 128, 1), ADD(32, 128, 1);
        ADD(128, 256, 1);
        if (!l) {
            ADD(256, 128, 1), ADD(256, 128, 1), ADD(128, 256, 1);
        } else {
            ADD(8, 128, 1);
            for (int e = 0; e < 8; e++) ADD(64, 128, 4), ADD(64, 128, 4), ADD(128, 64, 4);
            ADD(64, 128, 1), ADD(64, 128, 1), ADD(128, 64, 1);
        }
    }
    ADD(8199, 128, 1);
#undef ADD
    int64_t bytes = 0;
    for (int i = 0; i < nw; i++) {
        int64_t f = kn_wpack_floats(w[i].n, w[i].k);
        w[i].p = aligned_alloc(64, (size_t)(f * 4 + 63) / 64 * 64);
        if (!w[i].p) return;
        for (int64_t j = 0; j < f; j++) w[i].p[j] = (float)(j % 7) * 0.1f;
        bytes += f * 4;
    }
    float *a = malloc(sizeof(float) * 16 * 256), *c = malloc(sizeof(float) * 16 * 8208);
    if (!a || !c) return;
    for (int i = 0; i < 16 * 256; i++) a[i] = (float)(i % 13) * 0.1f;
    int32_t top = kn_isa_get();
    printf("\nproducts of one decode step (%d weights, %.1f MB packed), GFLOP/s of the best of %d chains, "
           "wall\n\n",
           nw, (double)bytes / 1e6, reps * 20);
    printf("| rows |");
    for (int32_t lv = top; lv >= 0; lv--) printf(" %s |", kn_isa_name(lv));
    printf("\n|---:|");
    for (int32_t lv = top; lv >= 0; lv--) printf("---:|");
    printf("\n");
    static const int ms[] = {1, 16};
    for (int mi = 0; mi < 2; mi++) {
        int m = ms[mi];
        double fl = 0;
        for (int i = 0; i < nw; i++) fl += 2.0 * (m / w[i].div > 0 ? m / w[i].div : 1) * w[i].n * w[i].k;
        printf("| %d |", m);
        for (int32_t lv = top; lv >= 0; lv--) {
            kn_isa_limit(lv);
            double best = 1e30;
            for (int r = 0; r < reps * 20; r++) {
                double t0 = wall_now();
                for (int i = 0; i < nw; i++) {
                    int64_t mr = m / w[i].div > 0 ? m / w[i].div : 1;
                    kn_wgemm(mr, w[i].k, a, w[i].k, w[i].p, w[i].n, 0, w[i].n, c, w[i].n);
                }
                double t = wall_now() - t0;
                best = t < best ? t : best;
            }
            printf(" %.1f |", fl / best * 1e-9);
        }
        printf("\n");
    }
    kn_isa_limit(top);
    for (int i = 0; i < nw; i++) free(w[i].p);
    free(a);
    free(c);
}

int main(int argc, char **argv)
{
    int reps = 5;
    if (argc == 3 && !strcmp(argv[1], "--reps")) reps = atoi(argv[2]);
    if (reps < 1 || reps > 64) reps = 5;
    kn_gemm_set_threads(1);
    static const struct {
        const char *what;
        int64_t n, k;
    } shapes[] = {{"q_proj 256x128", 256, 128},    {"o_proj 128x256", 128, 256},
                  {"expert 64x128", 64, 128},      {"dense down 128x256", 128, 256},
                  {"lm_head 8199x128", 8199, 128}, {"mid-size 2048x1024", 2048, 1024}};
    static const int64_t ms[] = {1, 4, 16, 512};
    int32_t top = kn_isa_get();
    printf(
        "GFLOP/s, one thread, median of %d (process CPU time); kn_sgemm_nt = %s up to 8 rows, %s above\n\n",
        reps, "own small-row kernel", kn_gemm_has_blas() ? "OpenBLAS" : "plain loop");
    printf("| shape | rows | kn_sgemm_nt (before) |");
    for (int32_t lv = top; lv >= 0; lv--) printf(" kn_wgemm %s |", kn_isa_name(lv));
    printf("\n|---|---:|---:|");
    for (int32_t lv = top; lv >= 0; lv--) printf("---:|");
    printf("\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            int64_t m = ms[mi], n = shapes[s].n, k = shapes[s].k;
            if (m * n * k > (int64_t)1 << 31) continue;
            float *a = malloc(sizeof(float) * (size_t)(m * k)), *w = malloc(sizeof(float) * (size_t)(n * k));
            float *c = malloc(sizeof(float) * (size_t)(m * n));
            float *p = aligned_alloc(64, (size_t)(kn_wpack_floats(n, k) * 4 + 63) / 64 * 64);
            if (!a || !w || !c || !p) return 1;
            for (int64_t i = 0; i < m * k; i++) a[i] = (float)(i % 13) * 0.1f;
            for (int64_t i = 0; i < n * k; i++) w[i] = (float)(i % 7) * 0.1f;
            kn_wpack(w, n, k, k, p);
            double fl = 2.0 * (double)(m * n * k);
            kn_isa_limit(top);
            printf("| %s | %lld | %.1f |", shapes[s].what, (long long)m,
                   fl / timeit(0, m, n, k, a, w, p, c, reps) * 1e-9);
            for (int32_t lv = top; lv >= 0; lv--) {
                kn_isa_limit(lv);
                printf(" %.1f |", fl / timeit(1, m, n, k, a, w, p, c, reps) * 1e-9);
            }
            printf("\n");
            kn_isa_limit(top);
            free(a);
            free(w);
            free(c);
            free(p);
        }
    step_chain(reps);
    return 0;
}
