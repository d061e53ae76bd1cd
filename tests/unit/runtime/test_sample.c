/* Sampling: greedy, temperature, top-k, top-p, min-p, seeds and log-probabilities. */
#include <math.h>

#include "mmgw_test.h"
#include "wk_engine.h"

static double softmax_p(const float *l, int n, int i, double t)
{
    double m = -1e30, z = 0;
    for (int j = 0; j < n; j++) m = l[j] > m ? l[j] : m;
    for (int j = 0; j < n; j++) z += exp((l[j] - m) / t);
    return exp((l[i] - m) / t) / z;
}

int main(void)
{
    const float l[4] = {1, 3, 2, 0};
    uint64_t rng = 42;
    float lp;
    struct wk_sampling greedy = {0, 1, 0, 0};
    CHECK_EQ_INT(wk_sample(l, 4, &greedy, &rng, &lp), 1);
    CHECK_NEAR(lp, log(softmax_p(l, 4, 1, 1)), 1e-6);
    struct wk_sampling k1 = {1.0f, 1.0f, 1, 0};
    CHECK_EQ_INT(wk_sample(l, 4, &k1, &rng, NULL), 1);
    /* top-p 0.1: only the best token survives; its log-prob under the filtered distribution is 0 */
    struct wk_sampling p01 = {1.0f, 0.1f, 0, 0};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(wk_sample(l, 4, &p01, &rng, &lp), 1);
    CHECK_NEAR(lp, 0, 1e-6);
    /* min-p 0.5: p(2)/p(1) = e^-1 < 0.5, so only token 1 */
    struct wk_sampling mp = {1.0f, 1.0f, 0, 0.5f};
    for (int i = 0; i < 20; i++) CHECK_EQ_INT(wk_sample(l, 4, &mp, &rng, NULL), 1);
    /* plain temperature 1: frequencies follow the softmax */
    struct wk_sampling t1 = {1.0f, 1.0f, 0, 0};
    int cnt[4] = {0};
    enum { N = 40000 };
    for (int i = 0; i < N; i++) cnt[wk_sample(l, 4, &t1, &rng, NULL)]++;
    for (int i = 0; i < 4; i++) CHECK_NEAR((double)cnt[i] / N, softmax_p(l, 4, i, 1), 0.01);
    /* temperature 0.5 sharpens */
    struct wk_sampling t05 = {0.5f, 1.0f, 0, 0};
    int c1 = 0;
    for (int i = 0; i < N; i++) c1 += wk_sample(l, 4, &t05, &rng, NULL) == 1;
    CHECK_NEAR((double)c1 / N, softmax_p(l, 4, 1, 0.5), 0.01);
    /* top-k 2: only tokens 1 and 2, in ratio e^3 : e^2; the log-prob is under the renormalized pair */
    struct wk_sampling k2 = {1.0f, 1.0f, 2, 0};
    int c[4] = {0};
    for (int i = 0; i < N; i++) {
        int id = wk_sample(l, 4, &k2, &rng, &lp);
        c[id]++;
        double pr = id == 1 ? 1 / (1 + exp(-1.0)) : 1 / (1 + exp(1.0));
        if (i < 50) CHECK_NEAR(lp, log(pr), 1e-5);
    }
    CHECK_EQ_INT(c[0] + c[3], 0);
    CHECK_NEAR((double)c[1] / N, 1 / (1 + exp(-1.0)), 0.01);
    /* top-p 0.8 over (0.665, 0.245, 0.090, 0.033): tokens 1 and 2 */
    struct wk_sampling p08 = {1.0f, 0.8f, 0, 0};
    int d[4] = {0};
    for (int i = 0; i < 2000; i++) d[wk_sample(l, 4, &p08, &rng, NULL)]++;
    CHECK_EQ_INT(d[0] + d[3], 0);
    CHECK(d[2] > 0);
    /* the same seed gives the same sequence */
    uint64_t r1 = 7, r2 = 7;
    int same = 1;
    for (int i = 0; i < 100; i++) same &= wk_sample(l, 4, &t1, &r1, NULL) == wk_sample(l, 4, &t1, &r2, NULL);
    CHECK(same);
    /* ties go to the lower id under greedy */
    const float tie[3] = {2, 5, 5};
    CHECK_EQ_INT(wk_sample(tie, 3, &greedy, &rng, NULL), 1);
    CHECK_EQ_INT(wk_sample(NULL, 3, &greedy, &rng, NULL), -1);
    return test_done();
}
