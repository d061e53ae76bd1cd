/* The vision tower and projector on one media item: patch embedding, pre-LayerNorm, CLIP layers with 3-D
 * rotary (the item attends only to itself), then per patch linear-GELU-linear and the 2x2 merge MLP. */
#include <stdlib.h>
#include <string.h>

#include "kn_act.h"
#include "kn_rope.h"
#include "mm_dtype.h"
#include "wk_engine_int.h"

static int32_t check_media(const struct wk_engine *e, const struct wk_media *m, struct mm_err *err)
{
    const struct wk_vision_config *v = &e->cfg.vision;
    if (!e->w.has_vision)
        return mm_err_set(err, MM_UNSUPPORTED, "encode_media: the model has no vision tower");
    if (!m || !m->pixels) return mm_err_set(err, MM_INVALID, "encode_media: no pixels");
    if (m->kind != 0 && m->kind != 1) return mm_err_set(err, MM_INVALID, "encode_media: kind %d", m->kind);
    if (m->dtype != MM_DT_F32 && m->dtype != MM_DT_BF16 && m->dtype != MM_DT_F16)
        return mm_err_set(err, MM_INVALID, "encode_media: pixel dtype %d (F32, BF16 or F16)", m->dtype);
    int64_t row_len = (int64_t)v->channels * v->temporal * v->patch * v->patch;
    if (m->row_len != row_len)
        return mm_err_set(err, MM_INVALID, "encode_media: rows of %lld values, the model takes %lld",
                          (long long)m->row_len, (long long)row_len);
    if (m->grid_t <= 0 || m->grid_h <= 0 || m->grid_w <= 0 || m->grid_h % v->merge || m->grid_w % v->merge ||
        m->grid_t > (1 << 20) || m->grid_h > (1 << 20) || m->grid_w > (1 << 20))
        return mm_err_set(err, MM_INVALID,
                          "encode_media: grid (%lld, %lld, %lld) is not positive with h and w "
                          "multiples of %d",
                          (long long)m->grid_t, (long long)m->grid_h, (long long)m->grid_w, v->merge);
    if (m->n_rows != m->grid_t * m->grid_h * m->grid_w)
        return mm_err_set(err, MM_INVALID, "encode_media: %lld rows for a grid of %lld patches",
                          (long long)m->n_rows, (long long)(m->grid_t * m->grid_h * m->grid_w));
    if (m->n_rows > (int64_t)1 << 24)
        return mm_err_set(err, MM_TOO_LARGE, "encode_media: %lld patches", (long long)m->n_rows);
    return MM_OK;
}

int32_t wk_vision_encode(struct wk_engine *e, const struct wk_media *m, float **embeds, int64_t *n_tokens,
                         struct mm_err *err)
{
    return wk_vision_encode_on(e, &e->be, m, NULL, 0, embeds, n_tokens, err);
}

int32_t wk_vision_encode_on(const struct wk_engine *e, const struct wk_be *be, const struct wk_media *m,
                            const int32_t *cancel, int32_t keep, float **embeds, int64_t *n_tokens,
                            struct mm_err *err)
{
    *embeds = NULL;
    *n_tokens = 0;
    int32_t rc = check_media(e, m, err);
    if (rc) return rc;
    const struct wk_vision_config *v = &e->cfg.vision;
    const struct wk_backend_iface *B = be->iface;
    void *bc = be->ctx;
    const struct wk_model_w *w = &e->w;
    int64_t n = m->n_rows, RL = m->row_len, D = v->hidden, I = v->inter, H = e->cfg.text.hidden;
    int64_t PH = e->cfg.proj_hidden, mm = (int64_t)v->merge * v->merge, nt = n / mm;
    int32_t hd = v->head_dim, rd = 3 * kn_rope_vision_axis_dim(hd);
    int32_t act = v->act == WK_ACT_GELU_TANH    ? KN_GELU_TANH
                  : v->act == WK_ACT_QUICK_GELU ? KN_GELU_QUICK
                                                : KN_GELU_ERF;

    /* a backend that takes the pixels' own type widens them itself; else they are widened here first */
    const int typed = B->upload_typed != NULL;
    /* the output (unless it stays in the backend's memory) and the pixels widened here */
    const int64_t out_n = keep ? 0 : nt * H, host_n = !typed && n * RL > out_n ? n * RL : out_n;
    float *host = host_n > 0 ? malloc(sizeof(float) * (size_t)host_n) : NULL;
    float *hc = malloc(sizeof(float) * (size_t)(n * (rd ? rd : 1))),
          *hsn = malloc(sizeof(float) * (size_t)(n * (rd ? rd : 1)));
    float *px = B->alloc(bc, n * RL), *x = B->alloc(bc, n * D), *h = B->alloc(bc, n * D);
    float *q = B->alloc(bc, n * D), *k = B->alloc(bc, n * D), *vv = B->alloc(bc, n * D),
          *o = B->alloc(bc, n * D);
    float *f = B->alloc(bc, n * (I > PH ? I : PH)), *p2 = B->alloc(bc, n * H);
    float *ct = B->alloc(bc, n * (rd ? rd : 1)), *st = B->alloc(bc, n * (rd ? rd : 1));
    float *m1 = B->alloc(bc, nt * PH), *m2 = B->alloc(bc, nt * H);
    if ((host_n > 0 && !host) || !hc || !hsn || !px || !x || !h || !q || !k || !vv || !o || !f || !p2 ||
        !ct || !st || !m1 || !m2) {
        rc = mm_err_set(err, MM_NOMEM, "encode_media: out of memory for %lld patches", (long long)n);
        goto out;
    }
    if (!typed || !B->upload_typed(bc, px, m->pixels, m->dtype, n * RL)) {
        if (n * RL > host_n) { /* the backend declined this dtype: the f32 pixels need more than the output */
            float *h2 = realloc(host, sizeof(float) * (size_t)(n * RL));
            if (!h2) {
                rc = mm_err_set(err, MM_NOMEM, "encode_media: out of memory for %lld patches", (long long)n);
                goto out;
            }
            host = h2;
        }
        if (mm_convert_to_f32(host, m->pixels, m->dtype, (size_t)(n * RL))) {
            rc = mm_err_set(err, MM_INVALID, "encode_media: cannot convert pixels");
            goto out;
        }
        B->upload(bc, px, host, n * RL);
    }
    kn_rope_vision_table(m->grid_t, m->grid_h, m->grid_w, v->merge, hd, v->rope_theta, hc, hsn);
    B->upload(bc, ct, hc, n * rd);
    B->upload(bc, st, hsn, n * rd);

    /* Conv3d with stride = kernel over flat (C, T, P, P) rows is a plain product */
    B->linear(bc, w->patch, NULL, px, n, x);
    B->layernorm(bc, x, w->pre_ln_w, w->pre_ln_b, n, (int32_t)D, v->ln_eps, x);
    for (int32_t l = 0; l < v->n_layers; l++) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_RELAXED)) {
            struct mm_err ignore = {0};
            (void)B->batch_end(bc, &ignore); /* resets the backend's failure flag for the next encode */
            rc = mm_err_set(err, MM_CANCELLED, "encode_media: cancelled");
            goto out;
        }
        const struct wk_vlayer_w *L = &w->vlayers[l];
        B->layernorm(bc, x, L->ln1_w, L->ln1_b, n, (int32_t)D, v->ln_eps, h);
        B->linear(bc, L->q_w, L->q_b, h, n, q);
        B->linear(bc, L->k_w, L->k_b, h, n, k);
        B->linear(bc, L->v_w, L->v_b, h, n, vv);
        if (rd > 0) {
            B->rope(bc, q, n, v->n_heads, hd, ct, st, rd, rd);
            B->rope(bc, k, n, v->n_heads, hd, ct, st, rd, rd);
        }
        B->attn_full(bc, q, k, vv, n, v->n_heads, hd, o);
        B->linear(bc, L->o_w, L->o_b, o, n, h);
        B->add(bc, x, h, n * D);
        B->layernorm(bc, x, L->ln2_w, L->ln2_b, n, (int32_t)D, v->ln_eps, h);
        B->linear(bc, L->fc1_w, L->fc1_b, h, n, f);
        B->gelu(bc, f, n * I, act);
        B->linear(bc, L->fc2_w, L->fc2_b, f, n, h);
        B->add(bc, x, h, n * D);
    }
    /* project every patch, then fuse each run of merge^2 consecutive rows (one 2x2 group) */
    B->linear(bc, w->proj1_w, w->proj1_b, x, n, f);
    B->gelu(bc, f, n * PH, KN_GELU_ERF);
    B->linear(bc, w->proj2_w, w->proj2_b, f, n, p2);
    B->linear(bc, w->merge1_w, w->merge1_b, p2, nt, m1); /* p2 viewed as [nt][mm * H] */
    B->gelu(bc, m1, nt * PH, KN_GELU_ERF);
    B->linear(bc, w->merge2_w, w->merge2_b, m1, nt, m2);
    if (!keep) B->download(bc, host, m2, nt * H);
    if ((rc = B->batch_end(bc, err))) goto out; /* collects failures of the ops above */
    if (keep) {
        *embeds = m2; /* done: batch_end waited for the ops that wrote it */
        m2 = NULL;
    } else {
        *embeds = host;
        host = NULL;
    }
    *n_tokens = nt;
out:;
    float *all[] = {px, x, h, q, k, vv, o, f, p2, ct, st, m1, m2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]) B->free(bc, all[i]);
    free(host);
    free(hc);
    free(hsn);
    return rc;
}
