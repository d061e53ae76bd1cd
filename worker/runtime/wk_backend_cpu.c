/* The CPU backend: fp32 everywhere, weights converted from their stored dtype at load (one copy, 4 bytes a
 * parameter: sgemm-ready, no per-step conversion), OpenBLAS for the products, a thread pool for the
 * per-token loops (attention, MSA selection). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_act.h"
#include "kn_attn.h"
#include "kn_gemm.h"
#include "kn_msa.h"
#include "kn_norm.h"
#include "kn_rope.h"
#include "mm_log.h"
#include "wk_backend.h"
#include "wk_pool.h"

struct wk_weight {
    float *data;
    int64_t rows, cols;
};

/* Scratch that grows on demand; one per thread where the loops need private buffers. */
struct grow {
    float *p;
    int64_t n;
};

static int grow_to(struct grow *g, int64_t n)
{
    if (g->n >= n) return 0;
    float *np = realloc(g->p, sizeof(float) * (size_t)n);
    if (!np) return -1;
    g->p = np;
    g->n = n;
    return 0;
}

struct cpu {
    struct wk_pool *pool;
    int32_t threads;
    /* cache */
    struct wk_cache_geom geom;
    float **k, **v, **idx; /* per layer */
    /* current batch */
    const struct wk_batch *b;
    int32_t failed; /* scratch allocation failed during the step */
    /* scratch */
    struct grow *tscr; /* per thread */
    struct grow moe_x, moe_g, moe_u, moe_d, moe_logits, attn;
    int32_t *moe_rows;
    float *moe_w;
    int64_t moe_cap;
};

static float *cpu_alloc(void *ctx, int64_t n)
{
    (void)ctx;
    if (n <= 0) n = 1;
    void *p = NULL;
    if (posix_memalign(&p, 64, sizeof(float) * (size_t)n)) return NULL;
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

static int32_t cpu_weight_load(void *ctx, const struct wk_wsrc *src, struct wk_weight **out,
                               struct mm_err *err)
{
    struct wk_weight *w = calloc(1, sizeof *w);
    if (!w) return mm_err_set(err, MM_NOMEM, "out of memory");
    w->rows = src->rows;
    w->cols = src->cols;
    w->data = cpu_alloc(ctx, w->rows * w->cols);
    if (!w->data) {
        free(w);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for tensor '%s' (%lld x %lld f32)", src->file,
                          src->name, (long long)src->rows, (long long)src->cols);
    }
    int32_t rc = wk_wsrc_to_f32(src, w->data, err);
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
    return w ? (int64_t)sizeof(float) * w->rows * w->cols : 0;
}

static void free_cache(struct cpu *c)
{
    for (int32_t l = 0; l < c->geom.n_layers; l++) {
        if (c->k) free(c->k[l]);
        if (c->v) free(c->v[l]);
        if (c->idx) free(c->idx[l]);
    }
    free(c->k);
    free(c->v);
    free(c->idx);
    c->k = c->v = c->idx = NULL;
}

static int32_t cpu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err)
{
    struct cpu *c = ctx;
    free_cache(c);
    c->geom = *g;
    c->k = calloc((size_t)g->n_layers, sizeof(float *));
    c->v = calloc((size_t)g->n_layers, sizeof(float *));
    c->idx = calloc((size_t)g->n_layers, sizeof(float *));
    if (!c->k || !c->v || !c->idx) goto nomem;
    size_t tok = (size_t)g->n_pages * (size_t)g->block;
    for (int32_t l = 0; l < g->n_layers; l++) {
        /* calloc of a large size maps fresh zero pages: untouched cache costs no memory */
        c->k[l] = calloc(tok * (size_t)g->n_kv * (size_t)g->head_dim, sizeof(float));
        c->v[l] = calloc(tok * (size_t)g->n_kv * (size_t)g->head_dim, sizeof(float));
        if (!c->k[l] || !c->v[l]) goto nomem;
        if (g->layer_sparse[l]) {
            c->idx[l] = calloc(tok * (size_t)g->idx_dim, sizeof(float));
            if (!c->idx[l]) goto nomem;
        }
    }
    return MM_OK;
nomem:
    free_cache(c);
    c->geom.n_layers = 0;
    return mm_err_set(err, MM_NOMEM, "out of memory for a cache of %lld pages", (long long)g->n_pages);
}

static void cpu_cache_copy_page(void *ctx, int32_t dst, int32_t src, int32_t n_tokens)
{
    struct cpu *c = ctx;
    const struct wk_cache_geom *g = &c->geom;
    size_t kvrow = (size_t)g->n_kv * (size_t)g->head_dim;
    for (int32_t l = 0; l < g->n_layers; l++) {
        memcpy(c->k[l] + (size_t)dst * g->block * kvrow, c->k[l] + (size_t)src * g->block * kvrow,
               sizeof(float) * kvrow * (size_t)n_tokens);
        memcpy(c->v[l] + (size_t)dst * g->block * kvrow, c->v[l] + (size_t)src * g->block * kvrow,
               sizeof(float) * kvrow * (size_t)n_tokens);
        if (c->idx[l])
            memcpy(c->idx[l] + (size_t)dst * g->block * g->idx_dim,
                   c->idx[l] + (size_t)src * g->block * g->idx_dim,
                   sizeof(float) * (size_t)g->idx_dim * (size_t)n_tokens);
    }
}

static int32_t cpu_batch_begin(void *ctx, const struct wk_batch *b, struct mm_err *err)
{
    struct cpu *c = ctx;
    c->b = b;
    c->failed = 0;
    return MM_OK;
}

static int32_t cpu_batch_end(void *ctx, struct mm_err *err)
{
    struct cpu *c = ctx;
    c->b = NULL;
    if (c->failed) return mm_err_set(err, MM_NOMEM, "cpu backend: out of memory for scratch");
    return MM_OK;
}

static void cpu_embed(void *ctx, const struct wk_weight *table, float *out, int32_t dim)
{
    struct cpu *c = ctx;
    for (int64_t i = 0; i < c->b->n_tokens; i++)
        memcpy(out + i * dim, table->data + (int64_t)c->b->ids[i] * table->cols, sizeof(float) * (size_t)dim);
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

/* y = x . W^T split over column ranges of W, one range per thread: each is an independent single-threaded
 * product (the BLAS runs single-threaded; all parallelism is this pool's). */
struct lin_job {
    const struct wk_weight *w, *bias;
    const float *x;
    int64_t n, cols_per_task;
    float *y;
};

static void lin_task(void *arg, int64_t t, int32_t thread)
{
    const struct lin_job *j = arg;
    int64_t n0 = t * j->cols_per_task,
            n1 = n0 + j->cols_per_task < j->w->rows ? n0 + j->cols_per_task : j->w->rows;
    if (n0 >= n1) return;
    kn_sgemm_nt(j->n, n1 - n0, j->w->cols, j->x, j->w->cols, j->w->data + n0 * j->w->cols, j->w->cols, 0.0f,
                j->y + n0, j->w->rows);
    if (j->bias)
        for (int64_t i = 0; i < j->n; i++)
            kn_axpy(j->y + i * j->w->rows + n0, j->bias->data + n0, 1.0f, n1 - n0);
    (void)thread;
}

static void par_linear(struct cpu *c, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                       int64_t n, float *y)
{
    int64_t work = n * w->rows * w->cols, tasks = c->threads;
    if (work < (1 << 18) || tasks < 2 || w->rows < 32) tasks = 1; /* too small to be worth a hand-off */
    int64_t per = (w->rows + tasks - 1) / tasks;
    per = (per + 15) / 16 * 16;
    struct lin_job j = {w, bias, x, n, per, y};
    wk_pool_run(c->pool, (w->rows + per - 1) / per, lin_task, &j);
}

static void cpu_linear(void *ctx, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                       int64_t n, float *y)
{
    par_linear(ctx, w, bias, x, n, y);
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

static void cpu_kv_write(void *ctx, int32_t layer, const float *k, const float *v)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    size_t row = (size_t)g->n_kv * (size_t)g->head_dim;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        int64_t slot = (int64_t)b->block_tables[b->seq_of[i]][p / g->block] * g->block + p % g->block;
        memcpy(c->k[layer] + (size_t)slot * row, k + (size_t)i * row, sizeof(float) * row);
        memcpy(c->v[layer] + (size_t)slot * row, v + (size_t)i * row, sizeof(float) * row);
    }
}

static void cpu_idx_write(void *ctx, int32_t layer, const float *idx_k)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        int64_t slot = (int64_t)b->block_tables[b->seq_of[i]][p / g->block] * g->block + p % g->block;
        memcpy(c->idx[layer] + (size_t)slot * g->idx_dim, idx_k + (size_t)i * g->idx_dim,
               sizeof(float) * (size_t)g->idx_dim);
    }
}

/* ---- attention: one task per token ---- */

struct attn_job {
    struct cpu *c;
    int32_t layer, n_heads;
    float scale;
    const float *q, *iq;
    const struct wk_msa_params *p;
    const struct wk_sel_out *sel;
    float *out;
};

static void dense_task(void *arg, int64_t task, int32_t thread)
{
    struct attn_job *j = arg;
    struct cpu *c = j->c;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int64_t i = task / g->n_kv;
    int32_t kv = (int32_t)(task % g->n_kv), group = j->n_heads / g->n_kv;
    int64_t off = (i * j->n_heads + (int64_t)kv * group) * g->head_dim;
    kn_attn_group_blocks(j->q + off, group, b->pos[i], g->head_dim, j->scale, c->k[j->layer], c->v[j->layer],
                         g->n_kv, kv, g->block, b->block_tables[b->seq_of[i]], NULL, 0, j->out + off);
    (void)thread;
}

static void cpu_attn_dense(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out)
{
    struct cpu *c = ctx;
    struct attn_job j = {c, layer, n_heads, scale, q, NULL, NULL, NULL, out};
    wk_pool_run(c->pool, c->b->n_tokens * c->geom.n_kv, dense_task, &j);
}

/* Sorted, -1-free copy of a selection row, so the attention sums in block order. */
static int32_t sorted_blocks(const int32_t *row, int32_t k, int32_t *ids)
{
    int32_t nb = 0;
    for (int32_t x = 0; x < k; x++) {
        int32_t bl = row[x];
        if (bl < 0) continue;
        int32_t at = nb++;
        while (at > 0 && ids[at - 1] > bl) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = bl;
    }
    return nb;
}

static void msa_task(void *arg, int64_t i, int32_t thread)
{
    struct attn_job *j = arg;
    struct cpu *c = j->c;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    const struct wk_msa_params *p = j->p;
    int32_t s = b->seq_of[i];
    struct kn_paged_seq seq = {b->block_tables[s], b->seq_len[s]};
    int32_t nb = (int32_t)(b->pos[i] / g->block) + 1;
    float *scores = c->tscr[thread].p;
    int32_t *sel = (int32_t *)(scores + (int64_t)p->n_idx_heads * nb);
    kn_msa_index_scores(j->iq + i * (int64_t)p->n_idx_heads * p->idx_dim, 1, &b->pos[i], p->n_idx_heads,
                        p->idx_dim, c->idx[j->layer], g->block, &seq, scores, nb);
    int32_t k = kn_msa_topk_local(scores, p->n_idx_heads, 1, &b->pos[i], nb, g->block, p->topk, p->n_local,
                                  sel, p->topk);
    int64_t qrow = (int64_t)j->n_heads * g->head_dim;
    if (p->n_idx_heads == g->n_kv) {
        kn_msa_sparse_attention(j->q + i * qrow, 1, &b->pos[i], j->n_heads, g->n_kv, g->head_dim, j->scale,
                                c->k[j->layer], c->v[j->layer], g->block, &seq, sel, k, p->topk,
                                j->out + i * qrow);
    } else {
        /* index heads grouped differently from KV heads: head h uses selection h / (heads / n_idx_heads) */
        int32_t ids[KN_MSA_MAX_TOPK];
        int32_t per_sel = j->n_heads / p->n_idx_heads, per_kv = j->n_heads / g->n_kv;
        for (int32_t h = 0; h < j->n_heads; h++) {
            int32_t n_ids = sorted_blocks(sel + (int64_t)(h / per_sel) * p->topk, k, ids);
            kn_attn_query_blocks(j->q + i * qrow + (int64_t)h * g->head_dim, b->pos[i], g->head_dim, j->scale,
                                 c->k[j->layer], c->v[j->layer], g->n_kv, h / per_kv, g->block,
                                 seq.block_table, ids, n_ids, j->out + i * qrow + (int64_t)h * g->head_dim);
        }
    }
    if (j->sel && j->sel->sel) {
        for (int32_t h = 0; h < p->n_idx_heads; h++) {
            int32_t *dst = j->sel->sel + ((int64_t)h * b->n_tokens + i) * j->sel->stride;
            for (int32_t x = 0; x < j->sel->stride; x++) dst[x] = x < k ? sel[(int64_t)h * p->topk + x] : -1;
        }
    }
}

static void cpu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                         float scale, const struct wk_msa_params *p, const struct wk_sel_out *sel, float *out)
{
    struct cpu *c = ctx;
    int64_t nb = c->b->max_pos / c->geom.block + 1;
    /* per thread: scores [heads][nb] then the selection [heads][topk] (int32 in float slots) */
    int64_t need = (int64_t)p->n_idx_heads * nb + (int64_t)p->n_idx_heads * p->topk;
    for (int32_t t = 0; t < c->threads; t++)
        if (grow_to(&c->tscr[t], need)) {
            c->failed = 1;
            return;
        }
    struct attn_job j = {c, layer, n_heads, scale, q, idx_q, p, sel, out};
    wk_pool_run(c->pool, c->b->n_tokens, msa_task, &j);
}

/* ---- MoE: route, then one grouped product per expert over the tokens it got ---- */

static int moe_reserve(struct cpu *c, int64_t n, const struct wk_moe *m)
{
    if (grow_to(&c->moe_x, n * m->hidden) || grow_to(&c->moe_g, n * m->inter) ||
        grow_to(&c->moe_u, n * m->inter) || grow_to(&c->moe_d, n * m->hidden) ||
        grow_to(&c->moe_logits, n * m->n_experts))
        return -1;
    int64_t cap = n * m->topk;
    if (c->moe_cap < cap) {
        int32_t *r = realloc(c->moe_rows, sizeof(int32_t) * (size_t)cap * 2);
        if (!r) return -1;
        c->moe_rows = r;
        float *w = realloc(c->moe_w, sizeof(float) * (size_t)cap * 2);
        if (!w) return -1;
        c->moe_w = w;
        c->moe_cap = cap;
    }
    return 0;
}

static void cpu_moe(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out)
{
    struct cpu *c = ctx;
    if (moe_reserve(c, n, m)) {
        c->failed = 1;
        return;
    }
    int32_t E = m->n_experts, K = m->topk;
    float *lg = c->moe_logits.p;
    par_linear(c, m->router, NULL, x, n, lg);
    /* per token: the K experts with the largest sigmoid + bias (ties to the lower id); weights are the raw
     * sigmoids renormalized. Choices land in moe_rows as (token, expert) pairs, weights in moe_w. */
    int32_t *choice = c->moe_rows + n * K; /* second half: [n][K] expert ids */
    float *wt = c->moe_w + n * K;          /* second half: [n][K] weights */
    for (int64_t i = 0; i < n; i++) {
        float *l = lg + i * E;
        for (int32_t e = 0; e < E; e++) l[e] = 1.0f / (1.0f + expf(-l[e]));
        int32_t *ci = choice + i * K;
        float best[KN_MSA_MAX_TOPK];
        int32_t cnt = 0;
        for (int32_t e = 0; e < E; e++) {
            float v = l[e] + (m->bias ? m->bias->data[e] : 0.0f);
            if (cnt == K && !(v > best[K - 1])) continue;
            int32_t at = cnt < K ? cnt : K - 1;
            while (at > 0 && v > best[at - 1]) {
                best[at] = best[at - 1];
                ci[at] = ci[at - 1];
                at--;
            }
            best[at] = v;
            ci[at] = e;
            if (cnt < K) cnt++;
        }
        double sum = 0.0;
        for (int32_t k = 0; k < K; k++) sum += l[ci[k]];
        for (int32_t k = 0; k < K; k++) wt[i * K + k] = (float)(l[ci[k]] / sum);
    }
    memset(out, 0, sizeof(float) * (size_t)(n * m->hidden));
    int32_t *rows = c->moe_rows;
    float *rw = c->moe_w;
    for (int32_t e = 0; e < E; e++) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < n; i++)
            for (int32_t k = 0; k < K; k++)
                if (choice[i * K + k] == e) {
                    rows[cnt] = (int32_t)i;
                    rw[cnt] = wt[i * K + k];
                    memcpy(c->moe_x.p + cnt * m->hidden, x + i * m->hidden,
                           sizeof(float) * (size_t)m->hidden);
                    cnt++;
                }
        if (!cnt) continue;
        par_linear(c, m->w1[e], NULL, c->moe_x.p, cnt, c->moe_g.p);
        par_linear(c, m->w3[e], NULL, c->moe_x.p, cnt, c->moe_u.p);
        kn_swiglu_clamped(c->moe_g.p, c->moe_u.p, cnt * m->inter, m->alpha, m->limit, c->moe_g.p);
        par_linear(c, m->w2[e], NULL, c->moe_g.p, cnt, c->moe_d.p);
        for (int64_t r = 0; r < cnt; r++)
            kn_axpy(out + (int64_t)rows[r] * m->hidden, c->moe_d.p + r * m->hidden, rw[r], m->hidden);
    }
    for (int64_t i = 0; i < n * m->hidden; i++) out[i] *= m->scale;
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
    free_cache(c);
    if (c->tscr)
        for (int32_t t = 0; t < c->threads; t++) free(c->tscr[t].p);
    free(c->tscr);
    free(c->moe_x.p);
    free(c->moe_g.p);
    free(c->moe_u.p);
    free(c->moe_d.p);
    free(c->moe_logits.p);
    free(c->attn.p);
    free(c->moe_rows);
    free(c->moe_w);
    wk_pool_destroy(c->pool);
    free(c);
}

static const struct wk_backend_iface cpu_iface = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
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
