/* The CUDA backend: every operation of wk_backend.h on the GPU through kernels/cuda (kn_cuda.h) and cuBLAS.
 * Everything runs on the legacy default stream, so host copies order with the kernels without events.
 * Failures inside operations (which return nothing) are recorded and reported by the next batch_end(). */
#include "wk_backend_cuda.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kn_cuda.h"
#include "mm_dtype.h"
#include "mm_log.h"

#define ST ((cudaStream_t)0)

struct wk_weight {
    int64_t rows, cols;
    void *bf16; /* device bf16 [rows][cols], or NULL */
    float *f32; /* device f32 [rows][cols], or NULL */
};

/* A device buffer that grows on demand. */
struct dbuf {
    void *p;
    size_t n;
};

struct cuda_be {
    struct kn_cuda_blas *blas;
    int32_t fp32;      /* MMGW_CUDA_PRECISION=fp32 */
    int32_t idx_dtype; /* KN_IDX_BF16, KN_IDX_FP8 or KN_IDX_F32 */
    int32_t kv_dtype;  /* KN_KV_BF16, or KN_KV_F32 in the fp32 mode */
    int32_t failed;
    struct mm_err ferr;
    /* cache */
    struct wk_cache_geom geom;
    uint8_t *sparse;
    struct kn_cuda_cache *layer; /* [n_layers] */
    /* current batch */
    const struct wk_batch *b;
    struct kn_cuda_qbatch qb;
    int32_t *h_meta; /* host staging of the batch metadata */
    size_t h_meta_n;
    struct dbuf meta, ids, bad;
    /* scratch */
    struct dbuf xb, qb16, ob16, ws, sel, media, media_rows;
    struct dbuf m_logits, m_ids, m_wts, m_off, m_perm, m_inv, m_x, m_g, m_u, m_a, m_e;
    int32_t *h_off;
    int32_t h_off_n;
};

static void fail(struct cuda_be *c, const struct mm_err *e, const char *what)
{
    if (c->failed) return;
    c->failed = 1;
    mm_err_set(&c->ferr, e && e->code ? e->code : MM_ERROR, "cuda backend: %s: %s", what, e ? e->msg : "");
}

static void failc(struct cuda_be *c, cudaError_t e, const char *what)
{
    struct mm_err tmp = {0};
    kn_cuda_check(e, what, &tmp);
    fail(c, &tmp, what);
}

static void *grow(struct cuda_be *c, struct dbuf *d, size_t bytes)
{
    if (bytes == 0) bytes = 16;
    if (d->n >= bytes) return d->p;
    if (d->p) cudaFree(d->p);
    d->p = NULL;
    d->n = 0;
    size_t want = bytes + bytes / 4;
    cudaError_t e = cudaMalloc(&d->p, want);
    if (e != cudaSuccess) {
        failc(c, e, "scratch allocation");
        d->p = NULL;
        return NULL;
    }
    d->n = want;
    return d->p;
}

static void dbuf_free(struct dbuf *d)
{
    if (d->p) cudaFree(d->p);
    d->p = NULL;
    d->n = 0;
}

/* ---- memory ---- */

static float *cu_alloc(void *ctx, int64_t n)
{
    (void)ctx;
    void *p = NULL;
    if (n <= 0) n = 1;
    if (cudaMalloc(&p, sizeof(float) * (size_t)n) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_free(void *ctx, float *p)
{
    (void)ctx;
    if (p) cudaFree(p);
}

static void cu_upload(void *ctx, float *dst, const float *src, int64_t n)
{
    struct cuda_be *c = ctx;
    if (n <= 0) return;
    cudaError_t e = cudaMemcpy(dst, src, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) failc(c, e, "upload");
}

static void cu_download(void *ctx, float *dst, const float *src, int64_t n)
{
    struct cuda_be *c = ctx;
    if (n <= 0) return;
    cudaError_t e = cudaMemcpy(dst, src, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) failc(c, e, "download");
}

/* ---- weights ---- */

static int contains(const char *s, const char *sub)
{
    return s && strstr(s, sub) != NULL;
}

static void weight_release(struct wk_weight *w)
{
    if (!w) return;
    if (w->bf16) cudaFree(w->bf16);
    if (w->f32) cudaFree(w->f32);
    free(w);
}

static int32_t cu_weight_load(void *ctx, const struct wk_wsrc *src, struct wk_weight **out,
                              struct mm_err *err)
{
    struct cuda_be *c = ctx;
    const int64_t n = src->rows * src->cols;
    const int vec = src->rows == 1 || src->cols == 1;
    const int is_embed = contains(src->name, "embed_tokens");
    /* decision-making products stay in fp32: the router picks experts, the index projections pick blocks */
    const int critical = contains(src->name, "block_sparse_moe.gate.weight") ||
                         contains(src->name, "index_q_proj") || contains(src->name, "index_k_proj");
    const int keep_f32 = vec || c->fp32 || critical;
    const int keep_bf16 = !vec && ((!c->fp32 && !critical) || is_embed);
    struct wk_weight *w = calloc(1, sizeof *w);
    if (!w) return mm_err_set(err, MM_NOMEM, "out of memory");
    w->rows = src->rows;
    w->cols = src->cols;
    int32_t rc = MM_OK;
    void *raw = NULL;
    float *hf = NULL, *hs = NULL;
    /* a bf16 device copy first (the stored form for bf16 and fp8), then f32 from it where wanted; f32/f16
     * sources go to f32 on the host first so the f32 copy is exact */
    if (src->dtype == MM_DT_BF16) {
        rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(w->bf16, src->data, (size_t)n * 2, cudaMemcpyHostToDevice),
                               "weight", err);
    } else if (src->dtype == MM_DT_F8_E4M3) {
        hs = malloc(sizeof(float) * (size_t)(src->scale_rows * src->scale_cols));
        if (!hs) rc = mm_err_set(err, MM_NOMEM, "out of memory");
        if (!rc &&
            mm_convert_to_f32(hs, src->scale, src->scale_dtype, (size_t)(src->scale_rows * src->scale_cols)))
            rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': scale dtype %d", src->file, src->name,
                            src->scale_dtype);
        float *sd = NULL;
        if (!rc) rc = kn_cuda_check(cudaMalloc(&raw, (size_t)n), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(raw, src->data, (size_t)n, cudaMemcpyHostToDevice), "weight", err);
        if (!rc)
            rc = kn_cuda_check(
                cudaMalloc((void **)&sd, sizeof(float) * (size_t)(src->scale_rows * src->scale_cols)),
                "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(sd, hs, sizeof(float) * (size_t)(src->scale_rows * src->scale_cols),
                                          cudaMemcpyHostToDevice),
                               "weight", err);
        if (!rc) rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
        if (!rc)
            rc = kn_cuda_dequant_fp8_block(raw, sd, src->rows, src->cols, src->block_rows, src->block_cols,
                                           w->bf16, ST, err);
        if (sd) cudaFree(sd);
    } else if (src->dtype == MM_DT_F32 || src->dtype == MM_DT_F16) {
        hf = malloc(sizeof(float) * (size_t)n);
        if (!hf) rc = mm_err_set(err, MM_NOMEM, "out of memory for '%s'", src->name);
        if (!rc && mm_convert_to_f32(hf, src->data, src->dtype, (size_t)n))
            rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': dtype %d", src->file, src->name, src->dtype);
        if (!rc) rc = kn_cuda_check(cudaMalloc((void **)&w->f32, sizeof(float) * (size_t)n), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(w->f32, hf, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice),
                               "weight", err);
        if (!rc && keep_bf16) {
            rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
            if (!rc) rc = kn_cuda_convert(w->f32, w->bf16, n, 1, ST, err);
        }
    } else {
        rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': dtype %d", src->file, src->name, src->dtype);
    }
    if (!rc && keep_f32 && !w->f32 && w->bf16) {
        rc = kn_cuda_check(cudaMalloc((void **)&w->f32, sizeof(float) * (size_t)n), "weight", err);
        if (!rc) rc = kn_cuda_convert(w->bf16, w->f32, n, 0, ST, err);
    }
    if (!rc && !keep_bf16 && w->bf16) {
        cudaFree(w->bf16);
        w->bf16 = NULL;
    }
    if (!rc && !keep_f32 && w->f32 && w->bf16) {
        cudaFree(w->f32);
        w->f32 = NULL;
    }
    if (!rc) rc = kn_cuda_check(cudaDeviceSynchronize(), "weight", err);
    if (raw) cudaFree(raw);
    free(hf);
    free(hs);
    if (rc) {
        mm_err_prefix(err, "loading '%s'", src->name ? src->name : "?");
        weight_release(w);
        return rc;
    }
    *out = w;
    return MM_OK;
}

static void cu_weight_free(void *ctx, struct wk_weight *w)
{
    (void)ctx;
    weight_release(w);
}

static int64_t cu_weight_bytes(void *ctx, const struct wk_weight *w)
{
    (void)ctx;
    if (!w) return 0;
    return (w->bf16 ? 2 : 0) * w->rows * w->cols + (w->f32 ? 4 : 0) * w->rows * w->cols;
}

/* ---- cache ---- */

static size_t idx_elem(const struct cuda_be *c)
{
    return c->idx_dtype == KN_IDX_FP8 ? 1 : c->idx_dtype == KN_IDX_F32 ? 4 : 2;
}

static void free_cache(struct cuda_be *c)
{
    if (c->layer)
        for (int32_t l = 0; l < c->geom.n_layers; l++) {
            cudaFree(c->layer[l].k);
            cudaFree(c->layer[l].v);
            if (c->layer[l].idx) cudaFree(c->layer[l].idx);
            if (c->layer[l].idx_scale) cudaFree(c->layer[l].idx_scale);
        }
    free(c->layer);
    free(c->sparse);
    c->layer = NULL;
    c->sparse = NULL;
}

/* Bytes of one page as cu_cache_init allocates it: bf16 K/V (f32 in the exact mode), index keys in their
 * own type, plus one f32 scale per token for fp8 index keys. */
static int64_t cu_cache_page_bytes(void *ctx, const struct wk_cache_geom *g)
{
    const struct cuda_be *c = ctx;
    const int64_t kv_elem = c->kv_dtype == KN_KV_F32 ? 4 : 2;
    int64_t b = 0;
    for (int32_t l = 0; l < g->n_layers; l++) {
        b += 2LL * g->block * g->n_kv * g->head_dim * kv_elem;
        if (g->layer_sparse[l])
            b += (int64_t)g->block *
                 ((int64_t)g->idx_dim * (int64_t)idx_elem(c) + (c->idx_dtype == KN_IDX_FP8 ? 4 : 0));
    }
    return b;
}

static int32_t cu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    free_cache(c);
    c->geom = *g;
    c->layer = calloc((size_t)g->n_layers, sizeof *c->layer);
    c->sparse = malloc((size_t)g->n_layers);
    if (!c->layer || !c->sparse) {
        c->geom.n_layers = 0;
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    memcpy(c->sparse, g->layer_sparse, (size_t)g->n_layers);
    const size_t tok = (size_t)g->n_pages * (size_t)g->block;
    const size_t kv = tok * (size_t)g->n_kv * (size_t)g->head_dim * (c->kv_dtype == KN_KV_F32 ? 4 : 2);
    int32_t rc = MM_OK;
    for (int32_t l = 0; l < g->n_layers && !rc; l++) {
        struct kn_cuda_cache *L = &c->layer[l];
        L->n_pages = g->n_pages;
        L->idx_dtype = c->idx_dtype;
        L->kv_dtype = c->kv_dtype;
        /* zeroed, so rows no sequence wrote hold finite values (they are masked, but P * V must not see NaN)
         */
        rc = kn_cuda_check(cudaMalloc(&L->k, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMalloc(&L->v, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMemset(L->k, 0, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMemset(L->v, 0, kv), "cache", err);
        if (!rc && g->layer_sparse[l]) {
            const size_t ib = tok * (size_t)g->idx_dim * idx_elem(c);
            rc = kn_cuda_check(cudaMalloc(&L->idx, ib), "cache", err);
            if (!rc) rc = kn_cuda_check(cudaMemset(L->idx, 0, ib), "cache", err);
            if (!rc && c->idx_dtype == KN_IDX_FP8) {
                rc = kn_cuda_check(cudaMalloc((void **)&L->idx_scale, tok * 4), "cache", err);
                if (!rc) rc = kn_cuda_check(cudaMemset(L->idx_scale, 0, tok * 4), "cache", err);
            }
        }
    }
    if (rc) {
        free_cache(c);
        c->geom.n_layers = 0;
        return mm_err_prefix(err, "cuda backend: a cache of %lld pages", (long long)g->n_pages);
    }
    return MM_OK;
}

static void cu_cache_copy_page(void *ctx, int32_t dst, int32_t src, int32_t n_tokens)
{
    struct cuda_be *c = ctx;
    const struct wk_cache_geom *g = &c->geom;
    const size_t row = (size_t)g->n_kv * (size_t)g->head_dim * (c->kv_dtype == KN_KV_F32 ? 4 : 2);
    const size_t irow = (size_t)g->idx_dim * idx_elem(c);
    for (int32_t l = 0; l < g->n_layers; l++) {
        struct kn_cuda_cache *L = &c->layer[l];
        const size_t d0 = (size_t)dst * g->block, s0 = (size_t)src * g->block;
        cudaError_t e = cudaMemcpy((uint8_t *)L->k + d0 * row, (uint8_t *)L->k + s0 * row,
                                   row * (size_t)n_tokens, cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy((uint8_t *)L->v + d0 * row, (uint8_t *)L->v + s0 * row, row * (size_t)n_tokens,
                           cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess && L->idx)
            e = cudaMemcpy((uint8_t *)L->idx + d0 * irow, (uint8_t *)L->idx + s0 * irow,
                           irow * (size_t)n_tokens, cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess && L->idx_scale)
            e = cudaMemcpy(L->idx_scale + d0, L->idx_scale + s0, 4 * (size_t)n_tokens,
                           cudaMemcpyDeviceToDevice);
        if (e != cudaSuccess) failc(c, e, "cache page copy");
    }
}

/* ---- per step ---- */

static int32_t cu_batch_begin(void *ctx, const struct wk_batch *b, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    c->b = b;
    c->failed = 0;
    mm_err_clear(&c->ferr);
    const int32_t n = (int32_t)b->n_tokens, S = b->n_seqs, B = c->geom.block;
    if (b->n_tokens > INT32_MAX / 4)
        return mm_err_set(err, MM_TOO_LARGE, "cuda backend: %lld tokens", (long long)b->n_tokens);
    int32_t bt_stride = 1;
    for (int32_t s = 0; s < S; s++) {
        int64_t nb = (b->seq_len[s] + B - 1) / B;
        if (nb > bt_stride) bt_stride = (int32_t)nb;
    }
    /* one host staging block, one upload: pos (i64) | seq_last (i64) | qseq | seq_blk_off | tiles | block
     * table | ids */
    const size_t n64 = (size_t)n + (size_t)S;
    const size_t n32 = (size_t)n + (size_t)(S + 1) + 2 * (size_t)(n + 1) + (size_t)S * bt_stride + (size_t)n;
    const size_t words = 2 * n64 + n32;
    if (c->h_meta_n < words) {
        free(c->h_meta);
        c->h_meta = malloc(sizeof(int32_t) * words);
        c->h_meta_n = c->h_meta ? words : 0;
        if (!c->h_meta) return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    int64_t *pos = (int64_t *)c->h_meta, *last = pos + n;
    int32_t *qseq = (int32_t *)(last + S), *off = qseq + n, *tiles = off + (S + 1), *bt = tiles + 2 * (n + 1);
    int32_t *ids = bt + (size_t)S * bt_stride;
    memcpy(pos, b->pos, sizeof(int64_t) * (size_t)n);
    memcpy(qseq, b->seq_of, sizeof(int32_t) * (size_t)n);
    memcpy(ids, b->ids, sizeof(int32_t) * (size_t)n);
    for (int32_t s = 0; s < S; s++) {
        int64_t nb = (b->seq_len[s] + B - 1) / B;
        for (int32_t k = 0; k < bt_stride; k++)
            bt[(size_t)s * bt_stride + k] = k < nb ? b->block_tables[s][k] : 0;
    }
    memset(&c->qb, 0, sizeof c->qb);
    int32_t rc = kn_cuda_qbatch_plan(n, S, qseq, pos, B, off, last, tiles, &c->qb, err);
    if (rc) return rc;
    uint8_t *d = grow(c, &c->meta, sizeof(int32_t) * words);
    if (!d) return mm_err_set(err, MM_NOMEM, "cuda backend: batch metadata: %s", c->ferr.msg);
    rc = kn_cuda_check(cudaMemcpy(d, c->h_meta, sizeof(int32_t) * words, cudaMemcpyHostToDevice), "batch",
                       err);
    if (rc) return rc;
    const uint8_t *h0 = (const uint8_t *)c->h_meta;
    c->qb.pos = (const int64_t *)(d + ((const uint8_t *)pos - h0));
    c->qb.seq_last = (const int64_t *)(d + ((const uint8_t *)last - h0));
    c->qb.qseq = (const int32_t *)(d + ((const uint8_t *)qseq - h0));
    c->qb.seq_blk_off = (const int32_t *)(d + ((const uint8_t *)off - h0));
    c->qb.tiles = (const int32_t *)(d + ((const uint8_t *)tiles - h0));
    c->qb.block_table = (const int32_t *)(d + ((const uint8_t *)bt - h0));
    c->qb.bt_stride = bt_stride;
    c->ids.p = d + ((const uint8_t *)ids - h0);
    return MM_OK;
}

static int32_t cu_batch_end(void *ctx, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    c->b = NULL;
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) failc(c, e, "step");
    e = cudaGetLastError();
    if (e != cudaSuccess) failc(c, e, "step");
    if (c->failed) {
        if (err) *err = c->ferr;
        return c->ferr.code ? c->ferr.code : MM_ERROR;
    }
    return MM_OK;
}

/* ---- text ops ---- */

static void cu_embed(void *ctx, const struct wk_weight *table, float *out, int32_t dim)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (!table->bf16) {
        mm_err_set(&e__, MM_UNSUPPORTED, "embedding table without a bf16 copy");
        fail(c, &e__, "embed");
        return;
    }
    if (kn_cuda_embed(table->bf16, (int32_t)table->rows, dim, c->ids.p, c->b->n_tokens, out, NULL, ST, &e__))
        fail(c, &e__, "embed");
}

static void cu_set_rows(void *ctx, float *out, int32_t dim, const int64_t *rows, const float *data,
                        int64_t n_rows)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (n_rows <= 0) return;
    float *dd = grow(c, &c->media, sizeof(float) * (size_t)(n_rows * dim));
    int64_t *rd = grow(c, &c->media_rows, sizeof(int64_t) * (size_t)n_rows);
    if (!dd || !rd) return;
    cudaError_t e = cudaMemcpy(dd, data, sizeof(float) * (size_t)(n_rows * dim), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(rd, rows, sizeof(int64_t) * (size_t)n_rows, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        failc(c, e, "set_rows");
        return;
    }
    if (kn_cuda_scatter_rows(out, dim, rd, dd, n_rows, ST, &e__)) fail(c, &e__, "set_rows");
}

static void cu_rmsnorm(void *ctx, const float *x, const struct wk_weight *w, int64_t n, int32_t dim,
                       float eps, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_rmsnorm(x, dim, w->f32, n, dim, eps, out, dim, 0, ST, &e__)) fail(c, &e__, "rmsnorm");
}

static void cu_head_rmsnorm(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim,
                            const struct wk_weight *w, float eps)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_head_rmsnorm(x, n, n_heads, head_dim, (int64_t)n_heads * head_dim, w->f32, eps, ST, &e__))
        fail(c, &e__, "head_rmsnorm");
}

static void cu_rope(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim, const float *cos_t,
                    const float *sin_t, int32_t table_stride, int32_t rot)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_rope_apply(x, n, n_heads, head_dim, (int64_t)n_heads * head_dim, cos_t, sin_t, table_stride,
                           rot, ST, &e__))
        fail(c, &e__, "rope");
}

/* y[n][rows] = x[n][cols] . W^T */
static void gemm(struct cuda_be *c, const struct wk_weight *w, const float *x, int64_t ldx, int64_t n,
                 float *y, int64_t ldy)
{
    struct mm_err e__ = {0};
    if (n <= 0) return;
    if (w->f32 && (c->fp32 || !w->bf16)) { /* fp32 run, or a decision-making weight kept only in fp32 */
        if (kn_cuda_gemm_f32(c->blas, n, w->rows, w->cols, x, ldx, w->f32, w->cols, 0.0f, y, ldy, &e__))
            fail(c, &e__, "linear (fp32)");
        return;
    }
    void *xb = grow(c, &c->xb, (size_t)(n * w->cols) * 2);
    if (!xb) return;
    if (ldx != w->cols || !w->bf16) {
        mm_err_set(&e__, MM_INVALID, "row stride %lld for %lld columns", (long long)ldx, (long long)w->cols);
        fail(c, &e__, "linear");
        return;
    }
    if (kn_cuda_convert(x, xb, n * w->cols, 1, ST, &e__)) {
        fail(c, &e__, "linear (convert)");
        return;
    }
    if (kn_cuda_gemm_bf16(c->blas, n, w->rows, w->cols, xb, w->cols, w->bf16, w->cols, 0.0f, y, ldy, 0, &e__))
        fail(c, &e__, "linear (bf16)");
}

static void cu_linear(void *ctx, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                      int64_t n, float *y)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    gemm(c, w, x, w->cols, n, y, w->rows);
    if (bias && n > 0 &&
        kn_cuda_add_bias_convert(y, bias->f32, n * w->rows, (int32_t)w->rows, y, 0, ST, &e__))
        fail(c, &e__, "linear (bias)");
}

static void cu_add(void *ctx, float *y, const float *x, int64_t n)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_add(y, x, n, ST, &e__)) fail(c, &e__, "add");
}

static void cu_swiglu(void *ctx, const float *gate, const float *up, int64_t n, float alpha, float limit,
                      float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_swiglu(gate, up, 1, n, 1, alpha, limit, out, 1, 0, ST, &e__)) fail(c, &e__, "swiglu");
}

static struct kn_cuda_msa_shape shape(const struct cuda_be *c, int32_t n_heads, float scale,
                                      const struct wk_msa_params *p)
{
    struct kn_cuda_msa_shape s;
    s.n_heads = n_heads;
    s.n_kv = c->geom.n_kv;
    s.head_dim = c->geom.head_dim;
    s.n_idx_heads = p ? p->n_idx_heads : c->geom.n_kv;
    s.idx_dim = p ? p->idx_dim : c->geom.idx_dim;
    s.block = c->geom.block;
    s.topk = p ? p->topk : 1;
    s.n_local = p ? p->n_local : 1;
    s.scale = scale;
    return s;
}

static void cu_kv_write(void *ctx, int32_t layer, const float *k, const float *v)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    struct kn_cuda_msa_shape s = shape(c, c->geom.n_kv, 1.0f, NULL);
    if (kn_cuda_cache_append(&s, &c->qb, &c->layer[layer], k, v, (int64_t)c->geom.n_kv * c->geom.head_dim,
                             NULL, 0, ST, &e__))
        fail(c, &e__, "kv_write");
}

static void cu_idx_write(void *ctx, int32_t layer, const float *idx_k)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    struct kn_cuda_msa_shape s = shape(c, c->geom.n_kv, 1.0f, NULL);
    if (kn_cuda_cache_append(&s, &c->qb, &c->layer[layer], NULL, NULL, 0, idx_k, c->geom.idx_dim, ST, &e__))
        fail(c, &e__, "idx_write");
}

/* q f32 -> bf16 scratch; out bf16 scratch -> f32 after the attention (f32 caches: both used as they are) */
static int attn_io(struct cuda_be *c, const float *q, float *out, int64_t elems, void **qb, void **ob)
{
    struct mm_err e__ = {0};
    if (c->kv_dtype == KN_KV_F32) {
        *qb = (void *)q;
        *ob = out;
        return 0;
    }
    *qb = grow(c, &c->qb16, (size_t)elems * 2);
    *ob = grow(c, &c->ob16, (size_t)elems * 2);
    if (!*qb || !*ob) return -1;
    if (kn_cuda_convert(q, *qb, elems, 1, ST, &e__)) {
        fail(c, &e__, "attention (q)");
        return -1;
    }
    return 0;
}

static void cu_attn_dense(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    struct kn_cuda_msa_shape s = shape(c, n_heads, scale, NULL);
    const int64_t elems = c->b->n_tokens * n_heads * c->geom.head_dim;
    void *qb, *ob;
    if (attn_io(c, q, out, elems, &qb, &ob)) return;
    size_t wsb = kn_cuda_dense_attention_ws(&s, &c->qb, KN_PATH_AUTO);
    void *ws = grow(c, &c->ws, wsb);
    if (!ws) return;
    if (kn_cuda_dense_attention(&s, &c->qb, &c->layer[layer], qb, ob, ws, wsb, KN_PATH_AUTO, ST, &e__)) {
        fail(c, &e__, "attn_dense");
        return;
    }
    if (ob != out && kn_cuda_convert(ob, out, elems, 0, ST, &e__)) fail(c, &e__, "attn_dense (out)");
}

static void cu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                        float scale, const struct wk_msa_params *p, const struct wk_sel_out *so, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (p->n_idx_heads != c->geom.n_kv) {
        mm_err_set(&e__, MM_UNSUPPORTED, "%d index heads for %d KV groups", p->n_idx_heads, c->geom.n_kv);
        fail(c, &e__, "attn_msa");
        return;
    }
    struct kn_cuda_msa_shape s = shape(c, n_heads, scale, p);
    const int64_t T = c->b->n_tokens, elems = T * n_heads * c->geom.head_dim;
    void *qb, *ob;
    if (attn_io(c, q, out, elems, &qb, &ob)) return;
    int32_t *sel = grow(c, &c->sel, sizeof(int32_t) * (size_t)(T * p->n_idx_heads * p->topk));
    /* selection and attention in one call: a decode step runs the fused route (two kernels) */
    void *ws = grow(c, &c->ws, kn_cuda_msa_select_attend_ws(&s, &c->qb, p->topk, KN_PATH_AUTO));
    if (!sel || !ws) return;
    const size_t wsb = c->ws.n;
    if (kn_cuda_msa_select_attend(&s, &c->qb, &c->layer[layer], idx_q, qb, sel, p->topk, ob, ws, wsb,
                                  KN_PATH_AUTO, ST, &e__)) {
        fail(c, &e__, "attn_msa");
        return;
    }
    if (ob != out && kn_cuda_convert(ob, out, elems, 0, ST, &e__)) fail(c, &e__, "attn_msa (out)");
    if (so && so->sel) {
        /* the caller reads these rows after batch_end: copy now ([heads][T][topk] -> stride so->stride) */
        const size_t cnt = (size_t)(T * p->n_idx_heads * p->topk);
        int32_t *h = malloc(sizeof(int32_t) * cnt);
        if (!h) {
            mm_err_set(&e__, MM_NOMEM, "out of memory");
            fail(c, &e__, "attn_msa (selections)");
            return;
        }
        cudaError_t e = cudaMemcpy(h, sel, sizeof(int32_t) * cnt, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) failc(c, e, "attn_msa (selections)");
        for (int64_t r = 0; r < T * p->n_idx_heads && e == cudaSuccess; r++)
            for (int32_t x = 0; x < so->stride; x++)
                so->sel[r * so->stride + x] = x < p->topk ? h[r * p->topk + x] : -1;
        free(h);
    }
}

/* Routed experts: fp32 router, GPU routing and grouping, one product per expert that got tokens (the host
 * reads the expert offsets to size them), weighted combine. */
static void cu_moe(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (n <= 0) return;
    const int32_t E = m->n_experts, K = m->topk, H = m->hidden, I = m->inter;
    const int64_t pairs = n * K;
    float *lg = grow(c, &c->m_logits, sizeof(float) * (size_t)(n * E));
    int32_t *ids = grow(c, &c->m_ids, sizeof(int32_t) * (size_t)pairs);
    float *wts = grow(c, &c->m_wts, sizeof(float) * (size_t)pairs);
    int32_t *off = grow(c, &c->m_off, sizeof(int32_t) * (size_t)(E + 1));
    int32_t *perm = grow(c, &c->m_perm, sizeof(int32_t) * (size_t)pairs);
    int32_t *inv = grow(c, &c->m_inv, sizeof(int32_t) * (size_t)pairs);
    const int bf = !c->fp32;
    void *xs = grow(c, &c->m_x, (size_t)(pairs * H) * (bf ? 2 : 4));
    float *g = grow(c, &c->m_g, sizeof(float) * (size_t)(pairs * I));
    float *u = grow(c, &c->m_u, sizeof(float) * (size_t)(pairs * I));
    void *act = grow(c, &c->m_a, (size_t)(pairs * I) * (bf ? 2 : 4));
    float *eo = grow(c, &c->m_e, sizeof(float) * (size_t)(pairs * H));
    if (!lg || !ids || !wts || !off || !perm || !inv || !xs || !g || !u || !act || !eo) return;
    if (c->h_off_n < E + 1) {
        free(c->h_off);
        c->h_off = malloc(sizeof(int32_t) * (size_t)(E + 1));
        c->h_off_n = c->h_off ? E + 1 : 0;
        if (!c->h_off) {
            mm_err_set(&e__, MM_NOMEM, "out of memory");
            fail(c, &e__, "moe");
            return;
        }
    }
    gemm(c, m->router, x, H, n, lg, E);
    if (kn_cuda_moe_route(lg, m->bias ? m->bias->f32 : NULL, n, E, K, m->scale, ids, wts, ST, &e__) ||
        kn_cuda_moe_sort(ids, n, K, E, off, perm, inv, ST, &e__) ||
        kn_cuda_moe_gather(x, H, perm, pairs, K, H, xs, bf, ST, &e__)) {
        fail(c, &e__, "moe (routing)");
        return;
    }
    cudaError_t ce = cudaMemcpy(c->h_off, off, sizeof(int32_t) * (size_t)(E + 1), cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
        failc(c, ce, "moe (offsets)");
        return;
    }
    for (int32_t e = 0; e < E; e++) {
        const int64_t r0 = c->h_off[e], cnt = c->h_off[e + 1] - r0;
        if (cnt <= 0) continue;
        const struct wk_weight *w1 = m->w1[e], *w3 = m->w3[e], *w2 = m->w2[e];
        int32_t rc;
        if (bf) {
            const uint16_t *xe = (const uint16_t *)xs + r0 * H;
            rc = kn_cuda_gemm_bf16(c->blas, cnt, I, H, xe, H, w1->bf16, H, 0.0f, g + r0 * I, I, 0, &e__);
            if (!rc)
                rc = kn_cuda_gemm_bf16(c->blas, cnt, I, H, xe, H, w3->bf16, H, 0.0f, u + r0 * I, I, 0, &e__);
        } else {
            const float *xe = (const float *)xs + r0 * H;
            rc = kn_cuda_gemm_f32(c->blas, cnt, I, H, xe, H, w1->f32, H, 0.0f, g + r0 * I, I, &e__);
            if (!rc) rc = kn_cuda_gemm_f32(c->blas, cnt, I, H, xe, H, w3->f32, H, 0.0f, u + r0 * I, I, &e__);
        }
        if (!rc)
            rc = kn_cuda_swiglu(g + r0 * I, u + r0 * I, I, cnt, I, m->alpha, m->limit,
                                (uint8_t *)act + (size_t)(r0 * I) * (bf ? 2 : 4), I, bf, ST, &e__);
        if (!rc) {
            if (bf)
                rc = kn_cuda_gemm_bf16(c->blas, cnt, H, I, (const uint16_t *)act + r0 * I, I, w2->bf16, I,
                                       0.0f, eo + r0 * H, H, 0, &e__);
            else
                rc = kn_cuda_gemm_f32(c->blas, cnt, H, I, (const float *)act + r0 * I, I, w2->f32, I, 0.0f,
                                      eo + r0 * H, H, &e__);
        }
        if (rc) {
            fail(c, &e__, "moe (experts)");
            return;
        }
    }
    ce = cudaMemsetAsync(out, 0, sizeof(float) * (size_t)(n * H), ST);
    if (ce != cudaSuccess) {
        failc(c, ce, "moe");
        return;
    }
    if (kn_cuda_moe_combine(eo, inv, wts, n, K, H, out, H, ST, &e__)) fail(c, &e__, "moe (combine)");
}

/* ---- vision ---- */

static void cu_layernorm(void *ctx, const float *x, const struct wk_weight *w, const struct wk_weight *b,
                         int64_t n, int32_t dim, float eps, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_layernorm(x, dim, w->f32, b ? b->f32 : NULL, n, dim, eps, out, dim, 0, ST, &e__))
        fail(c, &e__, "layernorm");
}

static void cu_gelu(void *ctx, float *x, int64_t n, int32_t kind)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (kn_cuda_gelu(x, n, kind, ST, &e__)) fail(c, &e__, "gelu");
}

static void cu_attn_full(void *ctx, const float *q, const float *k, const float *v, int64_t n,
                         int32_t n_heads, int32_t head_dim, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    const int64_t stride = (int64_t)n_heads * head_dim;
    if (kn_cuda_attn_full(q, k, v, stride, n, n_heads, head_dim, 1.0f / sqrtf((float)head_dim), out, stride,
                          ST, &e__))
        fail(c, &e__, "attn_full");
}

static void cu_destroy(void *ctx)
{
    struct cuda_be *c = ctx;
    if (!c) return;
    cudaDeviceSynchronize();
    free_cache(c);
    struct dbuf *all[] = {&c->meta,  &c->bad,   &c->xb,    &c->qb16,       &c->ob16,
                          &c->ws,    &c->sel,   &c->media, &c->media_rows, &c->m_logits,
                          &c->m_ids, &c->m_wts, &c->m_off, &c->m_perm,     &c->m_inv,
                          &c->m_x,   &c->m_g,   &c->m_u,   &c->m_a,        &c->m_e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
    kn_cuda_blas_destroy(c->blas);
    free(c->h_meta);
    free(c->h_off);
    free(c);
}

static const struct wk_backend_iface cuda_iface = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .weight_load = cu_weight_load,
    .weight_free = cu_weight_free,
    .weight_bytes = cu_weight_bytes,
    .cache_init = cu_cache_init,
    .cache_copy_page = cu_cache_copy_page,
    .batch_begin = cu_batch_begin,
    .batch_end = cu_batch_end,
    .embed = cu_embed,
    .set_rows = cu_set_rows,
    .rmsnorm = cu_rmsnorm,
    .head_rmsnorm = cu_head_rmsnorm,
    .rope = cu_rope,
    .linear = cu_linear,
    .add = cu_add,
    .swiglu = cu_swiglu,
    .kv_write = cu_kv_write,
    .idx_write = cu_idx_write,
    .attn_dense = cu_attn_dense,
    .attn_msa = cu_attn_msa,
    .moe = cu_moe,
    .layernorm = cu_layernorm,
    .gelu = cu_gelu,
    .attn_full = cu_attn_full,
    .cache_page_bytes = cu_cache_page_bytes,
};

int32_t wk_backend_cuda_create(struct wk_be *out, struct mm_err *err)
{
    if (kn_cuda_device_count() <= 0)
        return mm_err_set(err, MM_UNAVAILABLE,
                          "cuda backend: no CUDA device (cudaGetDeviceCount failed or returned 0)");
    struct cuda_be *c = calloc(1, sizeof *c);
    if (!c) return mm_err_set(err, MM_NOMEM, "out of memory");
    const char *prec = getenv("MMGW_CUDA_PRECISION");
    c->fp32 = prec && !strcmp(prec, "fp32");
    /* fp32 runs keep f32 caches too (the exact mode: the generic kernels); MMGW_CUDA_INDEX overrides the
     * index-key cache: bf16, fp8 or f32 */
    c->kv_dtype = c->fp32 ? KN_KV_F32 : KN_KV_BF16;
    const char *idx = getenv("MMGW_CUDA_INDEX");
    c->idx_dtype = c->fp32 ? KN_IDX_F32 : KN_IDX_BF16;
    if (idx && !strcmp(idx, "fp8")) c->idx_dtype = KN_IDX_FP8;
    if (idx && !strcmp(idx, "bf16")) c->idx_dtype = KN_IDX_BF16;
    if (idx && !strcmp(idx, "f32")) c->idx_dtype = KN_IDX_F32;
    int32_t rc = kn_cuda_blas_create(&c->blas, ST, err);
    if (rc) {
        free(c);
        return rc;
    }
    mm_log_info("cuda", "backend on the GPU: %s products, %s K/V cache, %s index cache",
                c->fp32 ? "fp32" : "bf16", c->kv_dtype == KN_KV_F32 ? "f32" : "bf16",
                c->idx_dtype == KN_IDX_FP8   ? "fp8"
                : c->idx_dtype == KN_IDX_F32 ? "f32"
                                             : "bf16");
    out->iface = &cuda_iface;
    out->ctx = c;
    return MM_OK;
}
