/* The CPU backend's routed experts: route every token, group the batch's (token, expert) pairs by expert
 * (a counting sort, tokens in order within an expert), run each expert once over its gathered rows
 * (gate and up products, clamped SwiGLU, down product), with experts (and long row runs of one expert)
 * spread over the pool, then combine each token's expert outputs in ascending expert order. The order of
 * every sum is fixed by the routing alone, so a token's result does not depend on the batch around it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_act.h"
#include "kn_gemm.h"
#include "kn_msa.h"
#include "mm_topk.h"
#include "wk_backend_cpu_int.h"

#define MOE_TASK_ROWS 64 /* rows of one expert per task: enough for the product kernel, and work to share */

void cpu_moe_free(struct cpu *c)
{
    free(c->moe_x.p);
    free(c->moe_y.p);
    free(c->moe_logits.p);
    free(c->moe_choice);
    free(c->moe_slot);
    free(c->moe_w);
    free(c->moe_count);
    free(c->moe_first);
    free(c->tasks);
}

static int grow_i32(int32_t **p, int64_t n)
{
    int32_t *np = realloc(*p, sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!np) return -1;
    *p = np;
    return 0;
}

static int moe_reserve(struct cpu *c, int64_t n, const struct wk_moe *m)
{
    int64_t cap = n * m->topk;
    if (grow_to(&c->moe_x, cap * m->hidden) || grow_to(&c->moe_y, cap * m->hidden) ||
        grow_to(&c->moe_logits, n * m->n_experts))
        return -1;
    if (c->moe_cap < cap) {
        if (grow_i32(&c->moe_choice, cap) || grow_i32(&c->moe_slot, cap)) return -1;
        float *w = realloc(c->moe_w, sizeof(float) * (size_t)cap);
        if (!w) return -1;
        c->moe_w = w;
        c->moe_cap = cap;
    }
    if (c->moe_ecap < m->n_experts + 1) {
        if (grow_i32(&c->moe_count, m->n_experts + 1) || grow_i32(&c->moe_first, m->n_experts + 1)) return -1;
        c->moe_ecap = m->n_experts + 1;
    }
    int64_t max_tasks = cap / MOE_TASK_ROWS + m->n_experts + 1;
    if (c->tasks_cap < max_tasks) {
        int64_t *t = realloc(c->tasks, sizeof(int64_t) * 3 * (size_t)max_tasks);
        if (!t) return -1;
        c->tasks = t;
        c->tasks_cap = max_tasks;
    }
    int64_t rows = cap < MOE_TASK_ROWS ? cap : MOE_TASK_ROWS;
    for (int32_t t = 0; t < c->threads; t++)
        if (grow_to(&c->tscr[t].a, 2 * rows * m->inter)) return -1;
    return 0;
}

/* Sigmoid scores, the K best by score + bias (ties to the lower id), weights = the chosen raw sigmoids
 * renormalized. */
static void route(const struct wk_moe *m, float *lg, int64_t n, int32_t *choice, float *wt)
{
    int32_t E = m->n_experts, K = m->topk;
    for (int64_t i = 0; i < n; i++) {
        float *l = lg + i * E;
        for (int32_t e = 0; e < E; e++) l[e] = 1.0f / (1.0f + expf(-l[e]));
        int32_t *ci = choice + i * K;
        float best[KN_MSA_MAX_TOPK];
        int32_t cnt = 0;
        for (int32_t e = 0; e < E; e++) {
            mm_topk_offer(best, ci, &cnt, K, l[e] + (m->bias ? m->bias->data[e] : 0.0f), e);
        }
        double sum = 0.0;
        for (int32_t k = 0; k < K; k++) sum += l[ci[k]];
        for (int32_t k = 0; k < K; k++) wt[i * K + k] = (float)(l[ci[k]] / sum);
    }
}

struct moe_job {
    struct cpu *c;
    const struct wk_moe *m;
};

static void expert_task(void *arg, int64_t t, int32_t thread)
{
    const struct moe_job *j = arg;
    struct cpu *c = j->c;
    const struct wk_moe *m = j->m;
    int64_t e = c->tasks[3 * t], r0 = c->tasks[3 * t + 1], r = c->tasks[3 * t + 2];
    float *g = c->tscr[thread].a.p, *u = g + r * m->inter;
    const float *xs = c->moe_x.p + r0 * m->hidden;
    cpu_linear_1(m->w1[e], xs, r, g);
    cpu_linear_1(m->w3[e], xs, r, u);
    kn_swiglu_clamped(g, u, r * m->inter, m->alpha, m->limit, g);
    cpu_linear_1(m->w2[e], g, r, c->moe_y.p + r0 * m->hidden);
}

void cpu_moe(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out)
{
    struct cpu *c = ctx;
    if (moe_reserve(c, n, m)) {
        c->failed = 1;
        return;
    }
    int32_t E = m->n_experts, K = m->topk;
    int64_t H = m->hidden;
    cpu_linear_par(c, m->router, NULL, x, n, c->moe_logits.p);
    int32_t *choice = c->moe_choice, *slot = c->moe_slot;
    int32_t *count = c->moe_count, *first = c->moe_first;
    float *wt = c->moe_w;
    route(m, c->moe_logits.p, n, choice, wt);
    /* group (token, k) pairs by expert; gather the tokens' rows in that order */
    memset(count, 0, sizeof(int32_t) * (size_t)(E + 1));
    for (int64_t s = 0; s < n * K; s++) count[choice[s]]++;
    first[0] = 0;
    for (int32_t e = 0; e < E; e++) first[e + 1] = first[e] + count[e];
    memset(count, 0, sizeof(int32_t) * (size_t)E);
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = 0; k < K; k++) {
            int32_t e = choice[i * K + k], s = first[e] + count[e]++;
            slot[i * K + k] = s;
            memcpy(c->moe_x.p + (int64_t)s * H, x + i * H, sizeof(float) * (size_t)H);
        }
    int64_t nt = 0;
    for (int32_t e = 0; e < E; e++)
        for (int64_t r0 = first[e]; r0 < first[e + 1]; r0 += MOE_TASK_ROWS) {
            int64_t r = first[e + 1] - r0 < MOE_TASK_ROWS ? first[e + 1] - r0 : MOE_TASK_ROWS;
            c->tasks[3 * nt] = e;
            c->tasks[3 * nt + 1] = r0;
            c->tasks[3 * nt + 2] = r;
            nt++;
        }
    struct moe_job j = {c, m};
    cpu_par(c, nt, n * K * 3 * m->inter * H, expert_task, &j);
    /* out = scale * sum over the token's experts, in ascending expert id, of weight * expert output */
    for (int64_t i = 0; i < n; i++) {
        float *o = out + i * H;
        memset(o, 0, sizeof(float) * (size_t)H);
        int32_t last = -1;
        for (int32_t done = 0; done < K; done++) {
            int32_t kb = -1;
            for (int32_t k = 0; k < K; k++) {
                int32_t e = choice[i * K + k];
                if (e > last && (kb < 0 || e < choice[i * K + kb])) kb = k;
            }
            if (kb < 0) break;
            last = choice[i * K + kb];
            kn_axpy(o, c->moe_y.p + (int64_t)slot[i * K + kb] * H, wt[i * K + kb], H);
        }
        for (int64_t d = 0; d < H; d++) o[d] *= m->scale;
    }
}
