/* bench-sample: the worker's token sampler (wk_sample) at M3's vocabulary, per sampling setting, against the
 * qsort sampler it replaced (tests/unit/runtime/sample_ref.h) in the same run: milliseconds per token on
 * the scheduler's thread, which samples every sequence of a step in turn. Median of `reps` draws. For the
 * settings without a top-k also the draw (kernels/cpu/kn_draw.c: what the CPU backend does for a flat row
 * of such a request, and the CUDA kernel's twin).
 *
 *   bench-sample [--vocab 200064] [--reps 15]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_draw.h"
#include "sample_ref.h"
#include "wk_engine.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef int32_t (*sampler)(const float *, int32_t, const struct wk_sampling *, uint64_t *, float *);

static double median_ms(sampler f, const float *l, int32_t V, const struct wk_sampling *sp, int reps)
{
    double t[64];
    uint64_t rng = 9;
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms();
        (void)f(l, V, sp, &rng, NULL);
        t[r] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

static double median_draw_ms(const float *l, int32_t V, const struct wk_sampling *sp, uint32_t *keys,
                             int reps)
{
    double t[64];
    uint64_t rng = 9;
    for (int r = 0; r < reps; r++) {
        const struct mm_cand_req q = {.k = INT32_MAX,
                                      .t = sp->temperature,
                                      .top_p = sp->top_p,
                                      .min_p = sp->min_p,
                                      .draw = 1,
                                      .u = wk_sample_uniform(&rng)};
        double t0 = now_ms();
        (void)kn_draw(l, V, &q, keys);
        t[r] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

int main(int argc, char **argv)
{
    int32_t V = 200064;
    int reps = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--vocab"))
            V = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    if (V < 2 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: bench-sample [--vocab N] [--reps 1-64]\n");
        return 2;
    }
    float *l = malloc(sizeof(float) * (size_t)V);
    uint32_t *keys = malloc(sizeof(uint32_t) * (size_t)V);
    if (!l || !keys) return 1;
    for (int peaked = 0; peaked < 2; peaked++) {
        ref_logits(l, V, 1, 0, peaked ? 30.0f : 0.0f);
        static const struct {
            const char *name;
            struct wk_sampling sp;
        } cfgs[] = {{"temperature 1", {1.0f, 1.0f, 0, 0}},
                    {"temperature 0.7, top-p 0.9", {0.7f, 0.9f, 0, 0}},
                    {"temperature 0.7, top-k 50", {0.7f, 1.0f, 50, 0}},
                    {"temperature 1, top-p 0.95, top-k 40, min-p 0.05", {1.0f, 0.95f, 40, 0.05f}},
                    {"temperature 0.2", {0.2f, 1.0f, 0, 0}}};
        printf("vocabulary %d, logits: normal (sd 3) plus 8 tokens raised 5-12%s; median of %d draws\n", V,
               peaked ? " and one 30 above (a confident position)" : " (a flat position)", reps);
        printf("%-50s %12s %12s %8s %12s\n", "setting", "wk_sample", "qsort (old)", "speedup", "kn_draw");
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
            double a = median_ms(wk_sample, l, V, &cfgs[i].sp, reps);
            double b = median_ms(ref_sample, l, V, &cfgs[i].sp, reps);
            printf("%-50s %9.2f ms %9.2f ms %7.1fx", cfgs[i].name, a, b, b / a);
            if (cfgs[i].sp.top_k == 0)
                printf(" %9.2f ms\n", median_draw_ms(l, V, &cfgs[i].sp, keys, reps));
            else
                printf(" %12s\n", "-");
        }
    }
    free(l), free(keys);
    return 0;
}
