/* GPU time per kind of operation (wk_cuda_optime.h). */
#include "wk_cuda_optime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_clock.h"
#include "mm_log.h"

#define OT_PER_STEP 2048 /* operations timed per step */
#define OT_KEYS 128

struct ot_key {
    char key[64];
    double us, host_us; /* GPU time; host time inside the operation's calls */
    int64_t calls;
};

struct wk_optime {
    cudaStream_t stream;
    cudaEvent_t ev[2 * OT_PER_STEP];
    char keys[OT_PER_STEP][64];
    int32_t n, open;          /* intervals this step; an interval begun and not ended */
    int64_t h_begin, h_end;   /* host clock at the open interval's start, at the step's last end */
    double host[OT_PER_STEP]; /* host us of each interval */
    double host_gap;          /* host us between operations within steps (the time from one step to the next
                                 is not counted: untimed prefill steps may run in between) */
    struct ot_key tot[OT_KEYS];
    int32_t n_keys;
    int64_t steps;
};

struct wk_optime *wk_optime_new(cudaStream_t stream)
{
    struct wk_optime *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->stream = stream;
    for (int i = 0; i < 2 * OT_PER_STEP; i++)
        if (cudaEventCreate(&t->ev[i]) != cudaSuccess) {
            for (int j = 0; j < i; j++) cudaEventDestroy(t->ev[j]);
            free(t);
            return NULL;
        }
    return t;
}

void wk_optime_free(struct wk_optime *t)
{
    if (!t) return;
    for (int i = 0; i < 2 * OT_PER_STEP; i++) cudaEventDestroy(t->ev[i]);
    free(t);
}

void wk_optime_begin(struct wk_optime *t, const char *key)
{
    t->open = 0;
    if (t->n >= OT_PER_STEP) return;
    snprintf(t->keys[t->n], sizeof t->keys[t->n], "%s", key);
    const int64_t now = mm_now_ns();
    if (t->n) t->host_gap += 1e-3 * (double)(now - t->h_end);
    t->h_begin = now;
    cudaEventRecord(t->ev[2 * t->n], t->stream);
    t->open = 1;
}

void wk_optime_end(struct wk_optime *t)
{
    if (!t->open) return;
    cudaEventRecord(t->ev[2 * t->n + 1], t->stream);
    t->h_end = mm_now_ns();
    t->host[t->n] = 1e-3 * (double)(t->h_end - t->h_begin);
    t->n++;
    t->open = 0;
}

void wk_optime_step_done(struct wk_optime *t)
{
    if (!t->n) return;
    for (int32_t i = 0; i < t->n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]) != cudaSuccess) continue;
        int32_t k = 0;
        while (k < t->n_keys && strcmp(t->tot[k].key, t->keys[i])) k++;
        if (k == t->n_keys) {
            if (t->n_keys == OT_KEYS) continue;
            snprintf(t->tot[k].key, sizeof t->tot[k].key, "%s", t->keys[i]);
            t->n_keys++;
        }
        t->tot[k].us += 1e3 * ms;
        t->tot[k].host_us += t->host[i];
        t->tot[k].calls++;
    }
    (void)cudaGetLastError();
    t->n = 0;
    t->steps++;
}

static int by_time(const void *a, const void *b)
{
    const struct ot_key *x = a, *y = b;
    return x->us < y->us ? 1 : x->us > y->us ? -1 : 0;
}

void wk_optime_log(const struct wk_optime *t)
{
    if (!t->steps) return;
    struct ot_key *s = malloc(sizeof *s * (size_t)(t->n_keys ? t->n_keys : 1));
    if (!s) return;
    memcpy(s, t->tot, sizeof *s * (size_t)t->n_keys);
    qsort(s, (size_t)t->n_keys, sizeof *s, by_time);
    double sum = 0, hsum = 0;
    for (int32_t k = 0; k < t->n_keys; k++) sum += s[k].us, hsum += s[k].host_us;
    const double st = (double)t->steps;
    mm_log_info("cuda",
                "operation GPU time over %lld decode steps: %.1f us per step in all; host %.1f us inside the "
                "operations, %.1f between them",
                (long long)t->steps, sum / st, hsum / st, t->host_gap / st);
    for (int32_t k = 0; k < t->n_keys; k++)
        mm_log_info("cuda", "  %-40s %9.1f us per step %6.1f calls per step  host %7.1f us per step",
                    s[k].key, s[k].us / st, (double)s[k].calls / st, s[k].host_us / st);
    free(s);
}
