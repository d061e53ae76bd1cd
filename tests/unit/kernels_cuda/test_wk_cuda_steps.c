/* Decode steps as CUDA graphs (worker/runtime/cuda/wk_cuda_steps.h): a "step" of recorded operations (y += x
 * over device buffers, kn_cuda_add) runs one by one the first time, is captured the second time and replayed
 * after that; every replay must read the device data as it is at that step (new x every step); a changed key
 * or changed operations must not replay a graph of another segment; graphs off runs one by one; a refused
 * capture (the legacy stream cannot be captured) leaves the operations recorded for the caller's retry. */
#include "cuda_test_util.h"
#include "wk_cuda_steps.h"

enum { N = 4096, OPS = 12 };

struct add_args {
    float *y;
    const float *x;
    int64_t n;
};

static int g_calls; /* host calls of op_add: recording must not call, replays must not call */

static void op_add(void *ctx, const void *args)
{
    const struct add_args *a = args;
    cudaStream_t st = *(cudaStream_t *)ctx;
    struct mm_err err = {0};
    g_calls++;
    CHECK_MSG(kn_cuda_add(a->y, a->x, a->n, st, &err) == MM_OK, "kn_cuda_add: %s", err.msg);
}

/* one step: x = step value everywhere, OPS recorded adds of x into y (y starts at 0), then run */
static int run_step(struct wk_steps *s, cudaStream_t st, float *y, float *x, float v, int64_t n, int key,
                    int graphs)
{
    float *h = ct_hmalloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) h[i] = v;
    CT_CU(cudaMemcpy(x, h, sizeof(float) * N, cudaMemcpyHostToDevice));
    CT_CU(cudaMemset(y, 0, sizeof(float) * N));
    for (int k = 0; k < OPS; k++) {
        struct add_args a;
        memset(&a, 0, sizeof a);
        a.y = y, a.x = x, a.n = n;
        CHECK(wk_steps_push(s, op_add, &a, sizeof a) == 0);
    }
    CHECK(wk_steps_pending(s) == OPS);
    cudaStream_t ctx = st;
    const int rc = wk_steps_run(s, &ctx, st, &key, sizeof key, graphs);
    if (rc == WK_STEPS_OK) {
        CHECK(wk_steps_pending(s) == 0);
        ct_download(h, y, sizeof(float) * N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += h[i] != (i < n ? (float)OPS * v : 0.0f);
        CHECK_MSG(bad == 0, "step with x = %g: %d wrong sums", v, bad);
    }
    free(h);
    return rc;
}

static void expect(const struct wk_steps *s, int64_t eager, int64_t captures, int64_t replays,
                   const char *when)
{
    struct wk_steps_stats t;
    wk_steps_get_stats(s, &t);
    CHECK_MSG(t.eager == eager && t.captures == captures && t.replays == replays,
              "%s: %lld one by one, %lld captured, %lld replayed (want %lld, %lld, %lld)", when,
              (long long)t.eager, (long long)t.captures, (long long)t.replays, (long long)eager,
              (long long)captures, (long long)replays);
}

int main(void)
{
    ct_require_gpu();
    cudaStream_t st;
    CT_CU(cudaStreamCreate(&st));
    float *y = ct_dmalloc(sizeof(float) * N), *x = ct_dmalloc(sizeof(float) * N);
    struct wk_steps *s = wk_steps_new();
    CHECK(s != NULL);

    /* the same segment six times: one by one, captured, then replays that see each step's x */
    g_calls = 0;
    for (int k = 0; k < 6; k++) CHECK(run_step(s, st, y, x, 1.0f + (float)k, N, 1, 1) == WK_STEPS_OK);
    expect(s, 1, 1, 4, "six equal steps");
    CHECK_MSG(g_calls == 2 * OPS, "host calls %d, want %d (eager and capture only)", g_calls, 2 * OPS);

    /* another key: not the captured graph (one by one, then captured); back to key 1: replayed */
    CHECK(run_step(s, st, y, x, 7.0f, N, 2, 1) == WK_STEPS_OK);
    expect(s, 2, 1, 4, "a new key");
    CHECK(run_step(s, st, y, x, 8.0f, N, 2, 1) == WK_STEPS_OK);
    expect(s, 2, 2, 4, "the new key again");
    CHECK(run_step(s, st, y, x, 9.0f, N, 1, 1) == WK_STEPS_OK);
    expect(s, 2, 2, 5, "the first key again");

    /* other arguments (half the elements): a new segment, its own graph */
    CHECK(run_step(s, st, y, x, 10.0f, N / 2, 1, 1) == WK_STEPS_OK);
    CHECK(run_step(s, st, y, x, 11.0f, N / 2, 1, 1) == WK_STEPS_OK);
    CHECK(run_step(s, st, y, x, 12.0f, N / 2, 1, 1) == WK_STEPS_OK);
    expect(s, 3, 3, 6, "other arguments");

    /* graphs off: one by one, whatever was captured */
    CHECK(run_step(s, st, y, x, 13.0f, N, 1, 0) == WK_STEPS_OK);
    expect(s, 4, 3, 6, "graphs off");

    /* the legacy stream cannot be captured: a new segment runs one by one, its second sighting is refused
     * with the operations still recorded, and runs when asked again without graphs */
    struct wk_steps *s2 = wk_steps_new();
    CHECK(s2 != NULL);
    CHECK(run_step(s2, 0, y, x, 2.0f, N, 5, 1) == WK_STEPS_OK);
    CHECK(run_step(s2, 0, y, x, 3.0f, N, 5, 1) == WK_STEPS_CAPTURE_FAILED);
    CHECK(wk_steps_pending(s2) == OPS);
    (void)cudaGetLastError();
    cudaStream_t legacy = 0;
    int key = 5;
    CHECK(wk_steps_run(s2, &legacy, 0, &key, sizeof key, 0) == WK_STEPS_OK);
    float *h = ct_hmalloc(sizeof(float) * N);
    ct_download(h, y, sizeof(float) * N);
    CHECK_MSG(h[0] == (float)OPS * 3.0f && h[N - 1] == (float)OPS * 3.0f, "retry without graphs: %g %g", h[0],
              h[N - 1]);
    expect(s2, 2, 0, 0, "refused capture, retried");
    free(h);
    wk_steps_free(s2);

    wk_steps_free(s);
    cudaFree(y);
    cudaFree(x);
    CT_CU(cudaStreamDestroy(st));
    CT_CU(cudaDeviceSynchronize());
    return test_done();
}
