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
#include "kn_norm.h"
#include "kn_pattn.h"
#include "kn_rope.h"
#include "wk_backend_cpu_int.h"

/* Cache arrays are fresh anonymous mappings: zero pages that cost nothing until touched, asked for as huge
 * pages where the kernel allows (a decode step visits one 4 KiB page per block of every sequence and layer;
 * with 4 KiB pages that is a TLB miss for most of them). */
static void *cache_map(size_t bytes)
{
    if (!bytes) bytes = 1;
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (cpu_hugepages()) (void)madvise(p, bytes, MADV_HUGEPAGE); /* a hint: without it the pages are 4 KiB */
#endif
    return p;
}

static void cache_unmap(void *p, size_t bytes)
{
    if (p) munmap(p, bytes ? bytes : 1);
}

/* bytes of one cache element: 4 (fp32), or 2 with MMGW_CPU_KV=f16 */
static size_t elem(const struct cpu *c)
{
    return c->kv_f16 ? 2 : 4;
}

static size_t kv_bytes(const struct cpu *c)
{
    const struct wk_cache_geom *g = &c->geom;
    return (size_t)g->n_pages * (size_t)g->block * (size_t)g->n_kv * (size_t)g->head_dim * elem(c);
}

static size_t idx_bytes(const struct cpu *c)
{
    const struct wk_cache_geom *g = &c->geom;
    return (size_t)g->n_pages * (size_t)g->block * (size_t)g->idx_dim * elem(c);
}

void cpu_cache_free(struct cpu *c)
{
    for (int32_t l = 0; l < c->geom.n_layers; l++) {
        if (c->k) cache_unmap(c->k[l], kv_bytes(c));
        if (c->v) cache_unmap(c->v[l], kv_bytes(c));
        if (c->idx) cache_unmap(c->idx[l], idx_bytes(c));
    }
    free(c->k);
    free(c->v);
    free(c->idx);
    free(c->layer_sparse);
    c->k = c->v = c->idx = NULL;
    c->layer_sparse = NULL;
}

/* MMGW_CPU_KV: the cache's element type. f32 (the default) keeps the numerics of the fp32 reference; f16
 * halves the bytes a long-context decode step reads (attention is bound by them) at the cost of fp16 rounding
 * of every key, value and index key (see docs/design/runtime.md, "Performance"). */
int32_t cpu_kv_dtype(struct cpu *c, struct mm_err *err)
{
    const char *e = getenv("MMGW_CPU_KV");
    c->kv_f16 = 0;
    if (!e || !*e || !strcmp(e, "f32")) return MM_OK;
    if (!strcmp(e, "f16")) {
        c->kv_f16 = 1;
        return MM_OK;
    }
    return mm_err_set(err, MM_INVALID, "MMGW_CPU_KV: '%.32s' is not a cache type (f32 or f16)", e);
}

int64_t cpu_cache_page_bytes(void *ctx, const struct wk_cache_geom *g)
{
    const struct cpu *c = ctx;
    int64_t b = 0;
    for (int32_t l = 0; l < g->n_layers; l++) {
        b += 2LL * g->block * g->n_kv * g->head_dim * (int64_t)elem(c);
        if (g->layer_sparse[l]) b += (int64_t)g->block * g->idx_dim * (int64_t)elem(c);
    }
    return b;
}

int32_t cpu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err)
{
    struct cpu *c = ctx;
    cpu_cache_free(c);
    c->geom = *g;
    c->geom.n_layers = 0; /* nothing to unmap until the arrays exist */
    c->k = calloc((size_t)g->n_layers, sizeof(void *));
    c->v = calloc((size_t)g->n_layers, sizeof(void *));
    c->idx = calloc((size_t)g->n_layers, sizeof(void *));
    c->layer_sparse = malloc((size_t)g->n_layers);
    if (!c->k || !c->v || !c->idx || !c->layer_sparse) goto nomem;
    c->geom.n_layers = g->n_layers;
    memcpy(c->layer_sparse, g->layer_sparse, (size_t)g->n_layers);
    c->geom.layer_sparse = c->layer_sparse;
    for (int32_t l = 0; l < g->n_layers; l++) {
        c->k[l] = cache_map(kv_bytes(c));
        c->v[l] = cache_map(kv_bytes(c));
        if (!c->k[l] || !c->v[l]) goto nomem;
        if (g->layer_sparse[l]) {
            c->idx[l] = cache_map(idx_bytes(c));
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
    size_t es = elem(c), pg = (size_t)g->head_dim * (size_t)g->block * es,
           ix = (size_t)g->idx_dim * g->block * es;
    (void)n_tokens;
    for (int32_t l = 0; l < g->n_layers; l++) {
        char *k = c->k[l], *v = c->v[l], *idx = c->idx[l];
        for (int32_t h = 0; h < g->n_kv; h++) {
            size_t hb = (size_t)h * (size_t)g->n_pages * pg;
            memcpy(k + hb + (size_t)dst * pg, k + hb + (size_t)src * pg, pg);
            memcpy(v + hb + (size_t)dst * pg, v + hb + (size_t)src * pg, pg);
        }
        if (idx) memcpy(idx + (size_t)dst * ix, idx + (size_t)src * ix, ix);
    }
}

/* K and V rows of KV heads [h0, h1) of one token (rows of n_kv * head_dim) into page `page`, slot `slot`. */
static void write_kv(struct cpu *c, int32_t layer, int32_t h0, int32_t h1, int64_t page, int32_t slot,
                     const float *k_row, const float *v_row)
{
    const struct wk_cache_geom *g = &c->geom;
    int64_t hd = g->head_dim, head = (int64_t)g->n_pages * hd * g->block; /* one KV head's part of a layer */
    for (int32_t h = h0; h < h1; h++) {
        if (c->kv_f16) {
            struct kn_pkv16 one = {NULL, NULL, 1, g->head_dim, g->block, g->n_pages};
            kn_pkv_write_f16((uint16_t *)c->k[layer] + h * head, (uint16_t *)c->v[layer] + h * head, &one,
                             page, slot, k_row + h * hd, v_row + h * hd);
        } else {
            struct kn_pkv one = {NULL, NULL, 1, g->head_dim, g->block, g->n_pages};
            kn_pkv_write((float *)c->k[layer] + h * head, (float *)c->v[layer] + h * head, &one, page, slot,
                         k_row + h * hd, v_row + h * hd);
        }
    }
}

static void write_idx(struct cpu *c, int32_t layer, int64_t page, int32_t slot, const float *row)
{
    const struct wk_cache_geom *g = &c->geom;
    if (c->kv_f16)
        kn_pidx_write_f16(c->idx[layer], g->idx_dim, g->block, page, slot, row);
    else
        kn_pidx_write(c->idx[layer], g->idx_dim, g->block, page, slot, row);
}

/* G query heads sharing KV head kv against the blocks of bt (all up to pos, or the nb listed). */
static void attend(struct cpu *c, int32_t layer, const float *q, int32_t G, int64_t pos, float scale,
                   int32_t kv, const int32_t *bt, const int32_t *blocks, int32_t nb, float *out)
{
    const struct wk_cache_geom *g = &c->geom;
    if (c->kv_f16) {
        struct kn_pkv16 pkv = {c->k[layer], c->v[layer], g->n_kv, g->head_dim, g->block, g->n_pages};
        kn_pattn_gqa_f16(q, G, pos, scale, &pkv, kv, bt, blocks, nb, out);
    } else {
        struct kn_pkv pkv = {c->k[layer], c->v[layer], g->n_kv, g->head_dim, g->block, g->n_pages};
        kn_pattn_gqa(q, G, pos, scale, &pkv, kv, bt, blocks, nb, out);
    }
}

static void block_scores(struct cpu *c, int32_t layer, const float *iq, const struct wk_msa_params *p,
                         int64_t pos, const int32_t *bt, float *scores, int32_t nb)
{
    const struct wk_cache_geom *g = &c->geom;
    if (c->kv_f16)
        kn_pidx_scores_f16(iq, p->n_idx_heads, p->idx_dim, pos, c->idx[layer], g->block, bt, scores, nb, nb);
    else
        kn_pidx_scores(iq, p->n_idx_heads, p->idx_dim, pos, c->idx[layer], g->block, bt, scores, nb, nb);
}

void cpu_kv_write(void *ctx, int32_t layer, const float *k, const float *v)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int64_t row = (int64_t)g->n_kv * g->head_dim;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        write_kv(c, layer, 0, g->n_kv, b->block_tables[b->seq_of[i]][p / g->block], (int32_t)(p % g->block),
                 k + i * row, v + i * row);
    }
}

void cpu_idx_write(void *ctx, int32_t layer, const float *idx_k)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t p = b->pos[i];
        write_idx(c, layer, b->block_tables[b->seq_of[i]][p / g->block], (int32_t)(p % g->block),
                  idx_k + i * g->idx_dim);
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
    attend(c, j->layer, j->q + off, group, b->pos[i], j->scale, kv, b->block_tables[b->seq_of[i]], NULL, 0,
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
    block_scores(c, j->layer, j->iq + i * (int64_t)p->n_idx_heads * p->idx_dim, p, pos, bt, scores, nb);
    int32_t k =
        kn_msa_topk_local(scores, p->n_idx_heads, 1, &pos, nb, g->block, p->topk, p->n_local, sel, p->topk);
    /* heads that share a KV head and an index head attend over the same blocks: one call per such run */
    int32_t per_sel = j->n_heads / p->n_idx_heads, per_kv = j->n_heads / g->n_kv;
    int64_t qrow = (int64_t)j->n_heads * g->head_dim;
    int32_t ids[KN_MSA_MAX_TOPK];
    for (int32_t h0 = 0; h0 < j->n_heads;) {
        int32_t kv = h0 / per_kv, s = h0 / per_sel, h1 = h0 + 1;
        while (h1 < j->n_heads && h1 / per_kv == kv && h1 / per_sel == s) h1++;
        int32_t n_ids = sorted_blocks(sel + (int64_t)s * p->topk, k, ids);
        attend(c, j->layer, j->q + i * qrow + (int64_t)h0 * g->head_dim, h1 - h0, pos, j->scale, kv, bt, ids,
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

/* Before an MSA attention over the batch's tokens (cpu_attn_msa, cpu_attn_layer): each thread's scratch
 * (scores [heads][nb] then the selection [heads][topk], int32 in float slots) and the multiply-adds for the
 * pool's threshold, added to *macs. Nonzero (and the backend failed) when the scratch cannot grow. */
static int msa_prepare(struct cpu *c, const struct wk_msa_params *p, int32_t n_heads, int64_t *macs)
{
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int64_t nb = b->max_pos / g->block + 1;
    int64_t need = (int64_t)p->n_idx_heads * nb + (int64_t)p->n_idx_heads * p->topk;
    for (int32_t t = 0; t < c->threads; t++)
        if (grow_to(&c->tscr[t].b, need)) {
            c->failed = 1;
            return -1;
        }
    for (int64_t i = 0; i < b->n_tokens; i++) {
        int64_t blocks = b->pos[i] / g->block + 1;
        *macs += blocks * g->block * p->n_idx_heads * p->idx_dim +
                 (blocks < p->topk ? blocks : p->topk) * g->block * n_heads * g->head_dim * 2;
    }
    return 0;
}

void cpu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads, float scale,
                  const struct wk_msa_params *p, const struct wk_sel_out *sel, float *out)
{
    struct cpu *c = ctx;
    int64_t macs = 0;
    if (msa_prepare(c, p, n_heads, &macs)) return;
    struct attn_job j = {c, layer, n_heads, scale, q, idx_q, p, sel, out};
    cpu_par(c, c->b->n_tokens, macs, msa_task, &j);
}

/* ---- one layer's attention with its per-token work (attn_layer) ----
 * The per-head norms, RoPE and cache writes are per token; run on the calling thread before the attention,
 * they were the serial part of a batched decode step (and the threads then read rows another core wrote).
 * When every sequence brings one token (decode), a token's attention reads only earlier steps' cache and its
 * own new row, so one task does the token's (or the token and KV head's) preparation and attention; for
 * longer runs all rows are written first (a prompt's tokens read each other's rows), then attended. The
 * kernels and their order are those of the separate ops: the results are the same bits. */

struct layer_job {
    struct cpu *c;
    const struct wk_attn_layer *a;
    struct attn_job att; /* for the attention part (dense_task / msa_task) */
};

/* Norms, RoPE and cache writes of token i: KV head kv and its query heads only, or (kv < 0) every head and
 * the index branch. */
static void prep_token(const struct layer_job *j, int64_t i, int32_t kv)
{
    struct cpu *c = j->c;
    const struct wk_attn_layer *a = j->a;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    int32_t hd = g->head_dim, per_kv = a->n_heads / g->n_kv;
    int32_t h0 = kv < 0 ? 0 : kv, h1 = kv < 0 ? g->n_kv : kv + 1;
    int64_t qrow = (int64_t)a->n_heads * hd, krow = (int64_t)g->n_kv * hd;
    const float *ct = a->cos_t + i * a->table_stride, *st = a->sin_t + i * a->table_stride;
    float *q = a->q + i * qrow + (int64_t)h0 * per_kv * hd, *k = a->k + i * krow + (int64_t)h0 * hd;
    int32_t nq = (h1 - h0) * per_kv, nk = h1 - h0;
    kn_head_rmsnorm_gemma(q, 1, nq, hd, (int64_t)nq * hd, a->q_norm->data, a->eps);
    kn_head_rmsnorm_gemma(k, 1, nk, hd, (int64_t)nk * hd, a->k_norm->data, a->eps);
    kn_rope_apply(q, 1, nq, hd, (int64_t)nq * hd, ct, st, a->table_stride, a->rot);
    kn_rope_apply(k, 1, nk, hd, (int64_t)nk * hd, ct, st, a->table_stride, a->rot);
    int64_t p = b->pos[i], page = b->block_tables[b->seq_of[i]][p / g->block];
    write_kv(c, a->layer, h0, h1, page, (int32_t)(p % g->block), a->k + i * krow, a->v + i * krow);
    if (kv >= 0 || !a->msa) return;
    int32_t nih = a->msa->n_idx_heads, idim = a->msa->idx_dim;
    float *iq = a->iq + i * (int64_t)nih * idim, *ik = a->ik + i * (int64_t)idim;
    kn_head_rmsnorm_gemma(iq, 1, nih, idim, (int64_t)nih * idim, a->iq_norm->data, a->eps);
    kn_head_rmsnorm_gemma(ik, 1, 1, idim, idim, a->ik_norm->data, a->eps);
    kn_rope_apply(iq, 1, nih, idim, (int64_t)nih * idim, ct, st, a->table_stride, a->irot);
    kn_rope_apply(ik, 1, 1, idim, idim, ct, st, a->table_stride, a->irot);
    write_idx(c, a->layer, page, (int32_t)(p % g->block), ik);
}

static void prep_task(void *arg, int64_t i, int32_t thread)
{
    prep_token(arg, i, -1);
    (void)thread;
}

/* decode, dense layer: task = (token, KV head) */
static void dense_layer_task(void *arg, int64_t task, int32_t thread)
{
    struct layer_job *j = arg;
    int32_t n_kv = j->c->geom.n_kv;
    prep_token(j, task / n_kv, (int32_t)(task % n_kv));
    dense_task(&j->att, task, thread);
}

/* decode, MSA layer: task = token */
static void msa_layer_task(void *arg, int64_t i, int32_t thread)
{
    struct layer_job *j = arg;
    prep_token(j, i, -1);
    msa_task(&j->att, i, thread);
}

void cpu_attn_layer(void *ctx, const struct wk_attn_layer *a)
{
    struct cpu *c = ctx;
    const struct wk_batch *b = c->b;
    const struct wk_cache_geom *g = &c->geom;
    struct layer_job j = {c, a, {c, a->layer, a->n_heads, a->scale, a->q, a->iq, a->msa, a->sel, a->out}};
    int64_t n = b->n_tokens;
    /* the per-token work, in multiply-adds for the pool's threshold: norms, RoPE, writes are a few per dim */
    int64_t prep = n * ((int64_t)a->n_heads + 2 * g->n_kv) * g->head_dim * 4;
    if (n != b->n_seqs) { /* a sequence brings several tokens: write every row, then attend */
        cpu_par(c, n, prep, prep_task, &j);
        if (a->msa)
            cpu_attn_msa(c, a->layer, a->q, a->iq, a->n_heads, a->scale, a->msa, a->sel, a->out);
        else
            cpu_attn_dense(c, a->layer, a->q, a->n_heads, a->scale, a->out);
        return;
    }
    int64_t macs = prep;
    if (a->msa) {
        if (msa_prepare(c, a->msa, a->n_heads, &macs)) return;
        cpu_par(c, n, macs, msa_layer_task, &j);
    } else {
        for (int64_t i = 0; i < n; i++) macs += (b->pos[i] + 1) * a->n_heads * g->head_dim * 2;
        cpu_par(c, n * g->n_kv, macs, dense_layer_task, &j);
    }
}
