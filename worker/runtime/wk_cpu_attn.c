/* The CPU backend's paged cache and attention. Pages use the key-transposed layout of kernels/cpu/kn_pattn.h
 * (K [n_kv][page][head_dim][block], V [n_kv][page][block][head_dim], index keys [page][idx_dim][block]): the
 * same bytes per token as the reference layout of kn_msa.h, but a vector load covers consecutive keys, so
 * scores need no horizontal sums. Work is split over (token, KV head) for dense layers and over tokens for
 * MSA layers, on the pool only when it outweighs the hand-off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kn_msa.h"
#include "kn_pattn.h"
#include "wk_backend_cpu_int.h"

/* Cache arrays are fresh anonymous mappings: zero pages that cost nothing until touched, asked for as huge
 * pages where the kernel allows (a decode step visits one 4 KiB page per block of every sequence and layer;
 * with 4 KiB pages that is a TLB miss for most of them). */
static float *cache_map(size_t n_floats)
{
    size_t bytes = n_floats * sizeof(float);
    if (!bytes) bytes = sizeof(float);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (cpu_hugepages()) (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without it the pages are 4 KiB */
#endif
    return p;
}

static void cache_unmap(float *p, size_t n_floats)
{
    if (p) munmap(p, n_floats ? n_floats * sizeof(float) : sizeof(float));
}

static size_t kv_floats(const struct wk_cache_geom *g)
{
    return (size_t)g->n_pages * (size_t)g->block * (size_t)g->n_kv * (size_t)g->head_dim;
}

static size_t idx_floats(const struct wk_cache_geom *g)
{
    return (size_t)g->n_pages * (size_t)g->block * (size_t)g->idx_dim;
}

void cpu_cache_free(struct cpu *c)
{
    for (int32_t l = 0; l < c->geom.n_layers; l++) {
        if (c->k) cache_unmap(c->k[l], kv_floats(&c->geom));
        if (c->v) cache_unmap(c->v[l], kv_floats(&c->geom));
        if (c->idx) cache_unmap(c->idx[l], idx_floats(&c->geom));
    }
    free(c->k);
    free(c->v);
    free(c->idx);
    free(c->layer_sparse);
    c->k = c->v = c->idx = NULL;
    c->layer_sparse = NULL;
}

int32_t cpu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err)
{
    struct cpu *c = ctx;
    cpu_cache_free(c);
    c->geom = *g;
    c->k = calloc((size_t)g->n_layers, sizeof(float *));
    c->v = calloc((size_t)g->n_layers, sizeof(float *));
    c->idx = calloc((size_t)g->n_layers, sizeof(float *));
    c->layer_sparse = malloc((size_t)g->n_layers);
    if (!c->k || !c->v || !c->idx || !c->layer_sparse) goto nomem;
    memcpy(c->layer_sparse, g->layer_sparse, (size_t)g->n_layers);
    c->geom.layer_sparse = c->layer_sparse;
    for (int32_t l = 0; l < g->n_layers; l++) {
        c->k[l] = cache_map(kv_floats(g));
        c->v[l] = cache_map(kv_floats(g));
        if (!c->k[l] || !c->v[l]) goto nomem;
        if (g->layer_sparse[l]) {
            c->idx[l] = cache_map(idx_floats(g));
            if (!c->idx[l]) goto nomem;
        }
    }
    return MM_OK;
nomem:
    cpu_cache_free(c);
    c->geom.n_layers = 0;
    return mm_err_set(err, MM_NOMEM, "out of memory for a cache of %lld pages", (long long)g->n_pages);
}

/* Whole pages are copied (each KV head's part of K and V, and the index keys): in the transposed layout a
 * page's first tokens are not one contiguous range, and the slots after n_tokens are never read before being
 * written. */
void cpu_cache_copy_page(void *ctx, int32_t dst, int32_t src, int32_t n_tokens)
{
    struct cpu *c = ctx;
    const struct wk_cache_geom *g = &c->geom;
    size_t pg = (size_t)g->head_dim * (size_t)g->block, ix = (size_t)g->idx_dim * g->block;
    (void)n_tokens;
    for (int32_t l = 0; l < g->n_layers; l++) {
        for (int32_t h = 0; h < g->n_kv; h++) {
            size_t hb = (size_t)h * (size_t)g->n_pages * pg;
            memcpy(c->k[l] + hb + (size_t)dst * pg, c->k[l] + hb + (size_t)src * pg, sizeof(float) * pg);
            memcpy(c->v[l] + hb + (size_t)dst * pg, c->v[l] + hb + (size_t)src * pg, sizeof(float) * pg);
        }
        if (c->idx[l]) memcpy(c->idx[l] + (size_t)dst * ix, c->idx[l] + (size_t)src * ix, sizeof(float) * ix);
    }
}

void cpu_kv_write(void *ctx, int32_t layer, const float *k, const float *v)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int64_t row = (int64_t)g->n_kv * g->head_dim;
    struct kn_pkv geo = {NULL, NULL, g->n_kv, g->head_dim, g->block, g->n_pages};
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        kn_pkv_write(c->k[layer], c->v[layer], &geo, b->block_tables[b->seq_of[i]][p / g->block],
                     (int32_t)(p % g->block), k + i * row, v + i * row);
    }
}

void cpu_idx_write(void *ctx, int32_t layer, const float *idx_k)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        kn_pidx_write(c->idx[layer], g->idx_dim, g->block, b->block_tables[b->seq_of[i]][p / g->block],
                      (int32_t)(p % g->block), idx_k + i * g->idx_dim);
    }
}

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
    struct kn_pkv pkv = {c->k[j->layer], c->v[j->layer], g->n_kv, g->head_dim, g->block, g->n_pages};
    kn_pattn_gqa(j->q + off, group, b->pos[i], j->scale, &pkv, kv, b->block_tables[b->seq_of[i]], NULL, 0,
                 j->out + off);
    (void)thread;
}

void cpu_attn_dense(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    int64_t keys = 0;
    for (int64_t i = 0; i < b->n_tokens; i++) keys += b->pos[i] + 1;
    struct attn_job j = {c, layer, n_heads, scale, q, NULL, NULL, NULL, out};
    cpu_par(c, b->n_tokens * c->geom.n_kv, keys * n_heads * c->geom.head_dim * 2, dense_task, &j);
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
    const int32_t *bt = b->block_tables[b->seq_of[i]];
    int64_t pos = b->pos[i];
    int32_t nb = (int32_t)(pos / g->block) + 1;
    float *scores = c->tscr[thread].b.p;
    int32_t *sel = (int32_t *)(scores + (int64_t)p->n_idx_heads * nb);
    kn_pidx_scores(j->iq + i * (int64_t)p->n_idx_heads * p->idx_dim, p->n_idx_heads, p->idx_dim, pos,
                   c->idx[j->layer], g->block, bt, scores, nb, nb);
    int32_t k =
        kn_msa_topk_local(scores, p->n_idx_heads, 1, &pos, nb, g->block, p->topk, p->n_local, sel, p->topk);
    /* heads that share a KV head and an index head attend over the same blocks: one call per such run */
    struct kn_pkv pkv = {c->k[j->layer], c->v[j->layer], g->n_kv, g->head_dim, g->block, g->n_pages};
    int32_t per_sel = j->n_heads / p->n_idx_heads, per_kv = j->n_heads / g->n_kv;
    int64_t qrow = (int64_t)j->n_heads * g->head_dim;
    int32_t ids[KN_MSA_MAX_TOPK];
    for (int32_t h0 = 0; h0 < j->n_heads;) {
        int32_t kv = h0 / per_kv, s = h0 / per_sel, h1 = h0 + 1;
        while (h1 < j->n_heads && h1 / per_kv == kv && h1 / per_sel == s) h1++;
        int32_t n_ids = sorted_blocks(sel + (int64_t)s * p->topk, k, ids);
        kn_pattn_gqa(j->q + i * qrow + (int64_t)h0 * g->head_dim, h1 - h0, pos, j->scale, &pkv, kv, bt, ids,
                     n_ids, j->out + i * qrow + (int64_t)h0 * g->head_dim);
        h0 = h1;
    }
    if (j->sel && j->sel->sel) {
        for (int32_t h = 0; h < p->n_idx_heads; h++) {
            int32_t *dst = j->sel->sel + ((int64_t)h * b->n_tokens + i) * j->sel->stride;
            for (int32_t x = 0; x < j->sel->stride; x++) dst[x] = x < k ? sel[(int64_t)h * p->topk + x] : -1;
        }
    }
}

void cpu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads, float scale,
                  const struct wk_msa_params *p, const struct wk_sel_out *sel, float *out)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int64_t nb = b->max_pos / g->block + 1;
    /* per thread: scores [heads][nb] then the selection [heads][topk] (int32 in float slots) */
    int64_t need = (int64_t)p->n_idx_heads * nb + (int64_t)p->n_idx_heads * p->topk;
    for (int32_t t = 0; t < c->threads; t++)
        if (grow_to(&c->tscr[t].b, need)) {
            c->failed = 1;
            return;
        }
    int64_t macs = 0;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t blocks = b->pos[i] / g->block + 1;
        macs += blocks * g->block * p->n_idx_heads * p->idx_dim +
                (blocks < p->topk ? blocks : p->topk) * g->block * n_heads * g->head_dim * 2;
    }
    struct attn_job j = {c, layer, n_heads, scale, q, idx_q, p, sel, out};
    cpu_par(c, b->n_tokens, macs, msa_task, &j);
}
