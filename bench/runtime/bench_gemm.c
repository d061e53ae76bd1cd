/* bench-gemm [--reps R]: the linear-layer product y = x . W^T of the CPU backend, one thread, at the shapes
 * of decode (1, 4, 16 rows) and prefill (512 rows), for the tiny checkpoint's layers and its LM head:
 * kn_sgemm_nt on row-major W (OpenBLAS, or the runtime's own small-row kernel up to 8 rows; the code before
 * the packed kernel) against kn_wgemm on W packed at load, at each instruction-set level the CPU has.
 * GFLOP/s, median of R runs of process CPU time (the machine is shared; CPU time does not count the time
 * other processes hold the core). */
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
    return 0;
}
