/* The CPU backend: fp32 everywhere, weights converted from their stored dtype at load and packed for the
 * product kernel (one copy, 4 bytes a parameter, no per-step conversion), one thread pool for every parallel
 * loop. This file: the operation table, memory, weights, element-wise ops and linear layers; the paged cache
 * and attention are in wk_cpu_attn.c, the routed experts in wk_cpu_moe.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kn_act.h"
#include "kn_attn.h"
#include "kn_cands.h"
#include "mm_dtype.h"
#include "mm_logprobs.h"
#include "kn_draw.h"
#include "kn_gemm.h"
#include "kn_isa.h"
#include "kn_norm.h"
#include "kn_rope.h"
#include "kn_wgemm.h"
#include "mm_log.h"
#include "wk_backend_cpu_int.h"
#include "wk_engine.h"

int grow_to(struct grow *g, int64_t n)
{
    if (g->n >= n) return 0;
    float *np = realloc(g->p, sizeof(float) * (size_t)n);
    if (!np) return -1;
    g->p = np;
    g->n = n;
    return 0;
}

int cpu_hugepages(void)
{
    const char *e = getenv("MMGW_HUGEPAGES"); /* read at every (rare) large allocation */
    return !(e && *e == '0');
}

/* Buffers of 2 MiB and more (weights, activations of long prompts) are asked for as huge pages: a decode
 * step streams every weight, and with 4 KiB pages that is a TLB miss per page. */
static float *cpu_alloc(void *ctx, int64_t n)
{
    (void)ctx;
    if (n <= 0) n = 1;
    size_t bytes = sizeof(float) * (size_t)n, huge = (size_t)2 << 20;
    void *p = NULL;
    if (bytes >= huge && cpu_hugepages()) {
        if (posix_memalign(&p, huge, (bytes + huge - 1) / huge * huge)) return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE); /* a hint */
#endif
        return p;
    }
    if (posix_memalign(&p, 64, bytes)) return NULL;
    return p;
}

static void cpu_free(void *ctx, float *p)
{
    (void)ctx;
    free(p);
}

static void cpu_copy(void *ctx, float *dst, const float *src, int64_t n)
{
    (void)ctx;
    if (n > 0) memcpy(dst, src, sizeof(float) * (size_t)n);
}

/* host memory: the widening straight into dst, no staging copy */
static int32_t cpu_upload_typed(void *ctx, float *dst, const void *src, int32_t dtype, int64_t n)
{
    (void)ctx;
    if (dtype != MM_DT_F32 && dtype != MM_DT_BF16 && dtype != MM_DT_F16) return 0;
    if (n > 0) (void)mm_convert_to_f32(dst, src, dtype, (size_t)n); /* cannot fail for these three */
    return 1;
}

/* the sampling candidates in place (kernels/cpu/kn_cands.c): the sampler then sorts a few, not the row; a
 * row without top-k whose candidates do not fit is drawn from here (kn_draw.c), as the GPU does */
static void cpu_topk_rows(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                          int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse)
{
    struct cpu *c = ctx;
    const int ok = grow_to(&c->cands, n) == 0;
    for (int32_t i = 0; i < rows; i++) {
        const struct mm_cand_req *r = &req[i];
        if (r->k <= 0) continue;
        const float *x = src + (int64_t)i * n;
        counts[i] = ok ? kn_cands_req(x, (int32_t)n, r, cap, ids + (int64_t)i * cap, vals + (int64_t)i * cap,
                                      c->cands.p)
                       : -1;
        if (r->flags & MM_CANDS_LSE) lse[i] = mm_logsumexp(x, (int32_t)n);
        if (counts[i] > cap && r->draw) {
            int32_t *ri = ids + (int64_t)i * cap;
            float *rv = vals + (int64_t)i * cap;
            /* with n_top, the n_top largest after the token's slot (the exact top list: no floor, no top-k);
             * the scratch is free again for the draw's keys afterwards */
            if (r->n_top > 0 && r->k == INT32_MAX && cap > 1) {
                const struct mm_cand_req top = {.k = r->n_top, .t = r->t, .flags = MM_CANDS_EXACT};
                const int32_t nt = kn_cands_req(x, (int32_t)n, &top, cap - 1, ri + 1, rv + 1, c->cands.p);
                if (nt < cap - 1) ri[1 + nt] = -1;
            }
            const int32_t tok = kn_draw(x, (int32_t)n, r, (uint32_t *)(void *)c->cands.p);
            if (tok >= 0) counts[i] = MM_CANDS_DRAWN, ri[0] = tok, rv[0] = x[tok];
        }
    }
}

/* the logits are host memory already: the greedy tokens in place */
static void cpu_argmax_rows(void *ctx, const float *src, int32_t rows, int64_t n, int32_t *ids)
{
    (void)ctx;
    for (int32_t i = 0; i < rows; i++) ids[i] = wk_argmax(src + (int64_t)i * n, (int32_t)n);
}

/* 2-D weights are packed 16 output rows at a time, converted from the stored dtype one panel at a time (no
 * full-size fp32 copy besides the packed one). */
static int32_t cpu_weight_load(void *ctx, const struct wk_wsrc *src, struct wk_weight **out,
                               struct mm_err *err)
{
    struct wk_weight *w = calloc(1, sizeof *w);
    if (!w) return mm_err_set(err, MM_NOMEM, "out of memory");
    w->rows = src->rows;
    w->cols = src->cols;
    w->packed = src->ndim >= 2;
    int64_t n = w->packed ? kn_wpack_floats(w->rows, w->cols) : w->rows * w->cols;
    w->data = cpu_alloc(ctx, n);
    float *panel =
        w->packed ? malloc(sizeof(float) * (size_t)(KN_WPACK_NR * (w->cols > 0 ? w->cols : 1))) : NULL;
    if (!w->data || (w->packed && !panel)) {
        free(panel);
        free(w->data);
        free(w);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for tensor '%s' (%lld x %lld f32)", src->file,
                          src->name, (long long)src->rows, (long long)src->cols);
    }
    int32_t rc = MM_OK;
    if (!w->packed) {
        rc = wk_wsrc_to_f32(src, w->data, err);
    } else {
        for (int64_t r0 = 0; r0 < w->rows && !rc; r0 += KN_WPACK_NR) {
            int64_t r1 = r0 + KN_WPACK_NR < w->rows ? r0 + KN_WPACK_NR : w->rows;
            rc = wk_wsrc_rows_to_f32(src, r0, r1, panel, err);
            if (!rc) kn_wpack(panel, r1 - r0, w->cols, w->cols, w->data + r0 * w->cols);
        }
    }
    free(panel);
    if (rc) {
        free(w->data);
        free(w);
        return rc;
    }
    *out = w;
    return MM_OK;
}

static void cpu_weight_free(void *ctx, struct wk_weight *w)
{
    (void)ctx;
    if (!w) return;
    free(w->data);
    free(w);
}

static int64_t cpu_weight_bytes(void *ctx, const struct wk_weight *w)
{
    (void)ctx;
    if (!w) return 0;
    return (int64_t)sizeof(float) * (w->packed ? kn_wpack_floats(w->rows, w->cols) : w->rows * w->cols);
}

static int32_t cpu_batch_begin(void *ctx, const struct wk_batch *b, struct mm_err *err)
{
    struct cpu *c = ctx;
    c->b = b;
    c->failed = 0;
    cpu_par_step_begin(c, b->n_tokens, b->n_seqs);
    return MM_OK;
}

static int32_t cpu_batch_end(void *ctx, struct mm_err *err)
{
    struct cpu *c = ctx;
    c->b = NULL;
    cpu_par_step_end(c);
    c->par_off = c->par_policy == CPU_PAR_NEVER; /* vision ops run outside steps: on the pool */
    if (c->failed) return mm_err_set(err, MM_NOMEM, "cpu backend: out of memory for scratch");
    return MM_OK;
}

static void cpu_embed(void *ctx, const struct wk_weight *table, float *out, int32_t dim)
{
    struct cpu *c = ctx;
    for (int64_t i = 0; i < c->b->n_tokens; i++) {
        if (table->packed)
            kn_wpack_row(table->data, table->rows, table->cols, c->b->ids[i], out + i * dim);
        else
            memcpy(out + i * dim, table->data + (int64_t)c->b->ids[i] * table->cols,
                   sizeof(float) * (size_t)dim);
    }
}

static void cpu_set_rows(void *ctx, float *out, int32_t dim, const int64_t *rows, const float *data,
                         int64_t n_rows)
{
    (void)ctx;
    for (int64_t j = 0; j < n_rows; j++)
        memcpy(out + rows[j] * dim, data + j * dim, sizeof(float) * (size_t)dim);
}

static void cpu_rmsnorm(void *ctx, const float *x, const struct wk_weight *w, int64_t n, int32_t dim,
                        float eps, float *out)
{
    (void)ctx;
    kn_rmsnorm_gemma(x, dim, w->data, n, dim, eps, out, dim);
}

static void cpu_head_rmsnorm(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim,
                             const struct wk_weight *w, float eps)
{
    (void)ctx;
    kn_head_rmsnorm_gemma(x, n, n_heads, head_dim, (int64_t)n_heads * head_dim, w->data, eps);
}

static void cpu_rope(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim, const float *cos_t,
                     const float *sin_t, int32_t table_stride, int32_t rot)
{
    (void)ctx;
    kn_rope_apply(x, n, n_heads, head_dim, (int64_t)n_heads * head_dim, cos_t, sin_t, table_stride, rot);
}

void cpu_par(struct cpu *c, int64_t n_tasks, int64_t macs,
             void (*fn)(void *arg, int64_t task, int32_t thread), void *arg)
{
    if (c->threads < 2 || n_tasks < 2 || macs < CPU_PAR_MIN_MACS || c->par_off) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    wk_pool_run(c->pool, n_tasks, fn, arg);
}

void cpu_linear_1(const struct wk_weight *w, const float *x, int64_t n, float *y)
{
    if (w->packed)
        kn_wgemm(n, w->cols, x, w->cols, w->data, w->rows, 0, w->rows, y, w->rows);
    else /* a 1-D weight used as a [1][n] matrix */
        kn_sgemm_nt(n, w->rows, w->cols, x, w->cols, w->data, w->cols, 0.0f, y, w->rows);
}

/* y[:, n0:n1] = x . W[n0:n1]^T (+ bias) */
static void lin_cols(const struct wk_weight *w, const struct wk_weight *bias, const float *x, int64_t n,
                     int64_t n0, int64_t n1, float *y)
{
    if (n0 >= n1) return;
    if (w->packed)
        kn_wgemm(n, w->cols, x, w->cols, w->data, w->rows, n0, n1, y, w->rows);
    else
        kn_sgemm_nt(n, n1 - n0, w->cols, x, w->cols, w->data + n0 * w->cols, w->cols, 0.0f, y + n0, w->rows);
    if (bias)
        for (int64_t i = 0; i < n; i++) kn_axpy(y + i * w->rows + n0, bias->data + n0, 1.0f, n1 - n0);
}

/* Output columns per task: whole 16-column panels, about CPU_PAR_MIN_MACS / 2 multiply-adds each, at most
 * 4 tasks per thread (several per thread so that one descheduled on a busy machine holds the others up
 * for less); the whole range when the product stays on the calling thread. */
static int64_t cols_per_task(const struct cpu *c, const struct wk_weight *w, int64_t n, int64_t total_macs)
{
    int64_t tasks = 1;
    if (c->threads > 1 && total_macs >= CPU_PAR_MIN_MACS) {
        tasks = n * w->rows * w->cols / (CPU_PAR_MIN_MACS / 2);
        if (tasks > 4 * (int64_t)c->threads) tasks = 4 * (int64_t)c->threads;
        if (tasks < 1) tasks = 1;
    }
    int64_t per = (w->rows + tasks - 1) / tasks;
    return (per + KN_WPACK_NR - 1) / KN_WPACK_NR * KN_WPACK_NR;
}

/* One or several weights reading the same input, split into column ranges: task t belongs to the weight i
 * with first[i] <= t < first[i + 1]. */
struct lin_job {
    const struct wk_weight *w[WK_LINEAR_MULTI_MAX], *bias;
    float *y[WK_LINEAR_MULTI_MAX];
    const float *x;
    int64_t n, per[WK_LINEAR_MULTI_MAX], first[WK_LINEAR_MULTI_MAX + 1];
    int32_t n_w;
};

static void lin_task(void *arg, int64_t t, int32_t thread)
{
    const struct lin_job *j = arg;
    int32_t i = 0;
    while (i + 1 < j->n_w && t >= j->first[i + 1]) i++;
    const struct wk_weight *w = j->w[i];
    int64_t n0 = (t - j->first[i]) * j->per[i], n1 = n0 + j->per[i] < w->rows ? n0 + j->per[i] : w->rows;
    lin_cols(w, j->bias, j->x, j->n, n0, n1, j->y[i]);
    (void)thread;
}

static void lin_run(struct cpu *c, struct lin_job *j)
{
    int64_t macs = 0;
    for (int32_t i = 0; i < j->n_w; i++) macs += j->n * j->w[i]->rows * j->w[i]->cols;
    j->first[0] = 0;
    for (int32_t i = 0; i < j->n_w; i++) {
        j->per[i] = cols_per_task(c, j->w[i], j->n, macs);
        j->first[i + 1] = j->first[i] + (j->w[i]->rows + j->per[i] - 1) / j->per[i];
    }
    cpu_par(c, j->first[j->n_w], macs, lin_task, j);
}

void cpu_linear_par(struct cpu *c, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                    int64_t n, float *y)
{
    struct lin_job j = {.w = {w}, .bias = bias, .y = {y}, .x = x, .n = n, .n_w = 1};
    lin_run(c, &j);
}

static void cpu_linear(void *ctx, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                       int64_t n, float *y)
{
    cpu_linear_par(ctx, w, bias, x, n, y);
}

static void cpu_linear_multi(void *ctx, int32_t n_w, const struct wk_weight *const *w, const float *x,
                             int64_t n, float *const *y)
{
    struct lin_job j = {.x = x, .n = n, .n_w = n_w < WK_LINEAR_MULTI_MAX ? n_w : WK_LINEAR_MULTI_MAX};
    for (int32_t i = 0; i < j.n_w; i++) {
        j.w[i] = w[i];
        j.y[i] = y[i];
    }
    lin_run(ctx, &j);
}

static void cpu_add(void *ctx, float *y, const float *x, int64_t n)
{
    (void)ctx;
    kn_axpy(y, x, 1.0f, n);
}

static void cpu_swiglu(void *ctx, const float *gate, const float *up, int64_t n, float alpha, float limit,
                       float *out)
{
    (void)ctx;
    kn_swiglu_clamped(gate, up, n, alpha, limit, out);
}

/* ---- vision ---- */

static void cpu_layernorm(void *ctx, const float *x, const struct wk_weight *w, const struct wk_weight *b,
                          int64_t n, int32_t dim, float eps, float *out)
{
    (void)ctx;
    kn_layernorm(x, dim, w->data, b ? b->data : NULL, n, dim, eps, out, dim);
}

static void cpu_gelu(void *ctx, float *x, int64_t n, int32_t kind)
{
    (void)ctx;
    kn_gelu(x, n, kind);
}

static void cpu_attn_full(void *ctx, const float *q, const float *k, const float *v, int64_t n,
                          int32_t n_heads, int32_t head_dim, float *out)
{
    struct cpu *c = ctx;
    /* up to 64 query rows share one product (and at least one row) */
    int64_t want = n * (n < 64 ? n : 64);
    if (grow_to(&c->attn, want)) {
        if (grow_to(&c->attn, n)) {
            c->failed = 1;
            return;
        }
    }
    int64_t stride = (int64_t)n_heads * head_dim;
    kn_attn_full(q, k, v, stride, n, n_heads, head_dim, 1.0f / sqrtf((float)head_dim), out, stride, c->attn.p,
                 c->attn.n);
}

static void cpu_destroy(void *ctx)
{
    struct cpu *c = ctx;
    if (!c) return;
    cpu_par_report(c);
    cpu_cache_free(c);
    cpu_moe_free(c);
    if (c->tscr)
        for (int32_t t = 0; t < c->threads; t++) {
            free(c->tscr[t].a.p);
            free(c->tscr[t].b.p);
        }
    free(c->tscr);
    free(c->attn.p);
    free(c->cands.p);
    wk_pool_destroy(c->pool);
    free(c);
}

/* A CPU instance with its own pool and scratch (what one instance must not share between threads); CPU
 * weights are plain host memory that any instance reads. */
static int32_t cpu_vision_context(void *ctx, int32_t threads, struct wk_be *out, struct mm_err *err)
{
    (void)ctx;
    (void)kn_isa_get(); /* settle the lazily detected ISA level before a second thread runs kernels */
    return wk_backend_cpu_create(threads, out, err);
}

static const struct wk_backend_iface cpu_iface = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .argmax_rows = cpu_argmax_rows,
    .topk_rows = cpu_topk_rows,
    .weight_load = cpu_weight_load,
    .weight_free = cpu_weight_free,
    .weight_bytes = cpu_weight_bytes,
    .cache_init = cpu_cache_init,
    .cache_copy_page = cpu_cache_copy_page,
    .batch_begin = cpu_batch_begin,
    .batch_end = cpu_batch_end,
    .embed = cpu_embed,
    .set_rows = cpu_set_rows,
    .rmsnorm = cpu_rmsnorm,
    .head_rmsnorm = cpu_head_rmsnorm,
    .rope = cpu_rope,
    .linear = cpu_linear,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .kv_write = cpu_kv_write,
    .idx_write = cpu_idx_write,
    .attn_dense = cpu_attn_dense,
    .attn_msa = cpu_attn_msa,
    .moe = cpu_moe,
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
    .attn_full = cpu_attn_full,
    .linear_multi = cpu_linear_multi,
    .attn_layer = cpu_attn_layer,
    .cache_page_bytes = cpu_cache_page_bytes,
    .vision_context = cpu_vision_context,
    .upload_typed = cpu_upload_typed,
    .copy = cpu_copy,
    .free_vision = cpu_free, /* a vision context's memory is the same heap */
};

int32_t wk_backend_cpu_create(int32_t threads, struct wk_be *out, struct mm_err *err)
{
    struct cpu *c = calloc(1, sizeof *c);
    if (!c) return mm_err_set(err, MM_NOMEM, "out of memory");
    c->pool = wk_pool_create(threads);
    if (!c->pool) {
        free(c);
        return mm_err_set(err, MM_NOMEM, "cpu backend: cannot start %d threads", threads);
    }
    c->threads = wk_pool_threads(c->pool);
    int32_t rc = cpu_kv_dtype(c, err);
    if (!rc) rc = cpu_par_mode_init(c, err);
    if (rc) {
        cpu_destroy(c);
        return rc;
    }
    c->tscr = calloc((size_t)c->threads, sizeof *c->tscr);
    if (!c->tscr) {
        cpu_destroy(c);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    kn_gemm_set_threads(1); /* the pool parallelizes; a threaded BLAS would spin against it */
    out->iface = &cpu_iface;
    out->ctx = c;
    return MM_OK;
}
