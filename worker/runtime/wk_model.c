#include "wk_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_dtype.h"

struct loader {
    const struct wk_ckpt *ck;
    const struct wk_be *be;
    struct wk_model_w *m;
    struct mm_err *err;
    const char *text_prefix; /* "language_model.model." in the released checkpoints */
    const char *head_prefix; /* "language_model." */
    const char *vis_prefix;  /* "vision_tower.vision_model." */
    const char *mm_prefix;   /* "" (multi_modal_projector., patch_merge_mlp.) */
};

/* Load `prefix + fmt` with the given shape. */
static int32_t load(struct loader *L, struct wk_weight **out, int32_t ndim, const int64_t *shape,
                    const char *prefix, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static int32_t load(struct loader *L, struct wk_weight **out, int32_t ndim, const int64_t *shape,
                    const char *prefix, const char *fmt, ...)
{
    char name[512];
    int o = snprintf(name, sizeof name, "%s", prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + o, sizeof name - (size_t)o, fmt, ap);
    va_end(ap);
    struct wk_wsrc src;
    int32_t rc = wk_ckpt_weight(L->ck, name, ndim, shape, &src, L->err);
    if (rc) return rc;
    rc = L->be->iface->weight_load(L->be->ctx, &src, out, L->err);
    if (rc) return rc;
    L->m->bytes += L->be->iface->weight_bytes(L->be->ctx, *out);
    return MM_OK;
}

#define S1(a) ((const int64_t[]){(a)})
#define S2(a, b) ((const int64_t[]){(a), (b)})

static int32_t load_text_layer(struct loader *L, const struct wk_config *cfg, int32_t i, struct wk_layer_w *w)
{
    const struct wk_text_config *t = &cfg->text;
    const char *P = L->text_prefix;
    int64_t H = t->hidden, hd = t->head_dim;
    int32_t rc;
    if ((rc = load(L, &w->in_norm, 1, S1(H), P, "layers.%d.input_layernorm.weight", i)) ||
        (rc = load(L, &w->post_norm, 1, S1(H), P, "layers.%d.post_attention_layernorm.weight", i)) ||
        (rc = load(L, &w->q, 2, S2(t->n_heads * hd, H), P, "layers.%d.self_attn.q_proj.weight", i)) ||
        (rc = load(L, &w->k, 2, S2(t->n_kv * hd, H), P, "layers.%d.self_attn.k_proj.weight", i)) ||
        (rc = load(L, &w->v, 2, S2(t->n_kv * hd, H), P, "layers.%d.self_attn.v_proj.weight", i)) ||
        (rc = load(L, &w->o, 2, S2(H, t->n_heads * hd), P, "layers.%d.self_attn.o_proj.weight", i)) ||
        (rc = load(L, &w->q_norm, 1, S1(hd), P, "layers.%d.self_attn.q_norm.weight", i)) ||
        (rc = load(L, &w->k_norm, 1, S1(hd), P, "layers.%d.self_attn.k_norm.weight", i)))
        return rc;
    if (t->layer_sparse[i]) {
        int64_t id = t->idx_dim;
        if ((rc = load(L, &w->iq, 2, S2(t->idx_heads * id, H), P, "layers.%d.self_attn.index_q_proj.weight",
                       i)) ||
            (rc = load(L, &w->ik, 2, S2(id, H), P, "layers.%d.self_attn.index_k_proj.weight", i)) ||
            (rc = load(L, &w->iq_norm, 1, S1(id), P, "layers.%d.self_attn.index_q_norm.weight", i)) ||
            (rc = load(L, &w->ik_norm, 1, S1(id), P, "layers.%d.self_attn.index_k_norm.weight", i)))
            return rc;
    }
    if (!t->layer_moe[i]) {
        int64_t I = t->dense_inter;
        if ((rc = load(L, &w->gate, 2, S2(I, H), P, "layers.%d.mlp.gate_proj.weight", i)) ||
            (rc = load(L, &w->up, 2, S2(I, H), P, "layers.%d.mlp.up_proj.weight", i)) ||
            (rc = load(L, &w->down, 2, S2(H, I), P, "layers.%d.mlp.down_proj.weight", i)))
            return rc;
        return MM_OK;
    }
    int64_t E = t->n_experts, I = t->expert_inter;
    if ((rc = load(L, &w->router, 2, S2(E, H), P, "layers.%d.block_sparse_moe.gate.weight", i))) return rc;
    if (t->use_routing_bias &&
        (rc = load(L, &w->router_bias, 1, S1(E), P, "layers.%d.block_sparse_moe.e_score_correction_bias", i)))
        return rc;
    w->w1 = calloc((size_t)E + 1, sizeof *w->w1); /* NULL-terminated */
    w->w2 = calloc((size_t)E + 1, sizeof *w->w2);
    w->w3 = calloc((size_t)E + 1, sizeof *w->w3);
    if (!w->w1 || !w->w2 || !w->w3) return mm_err_set(L->err, MM_NOMEM, "out of memory");
    for (int32_t e = 0; e < E; e++)
        if ((rc = load(L, &w->w1[e], 2, S2(I, H), P, "layers.%d.block_sparse_moe.experts.%d.w1.weight", i,
                       e)) ||
            (rc = load(L, &w->w2[e], 2, S2(H, I), P, "layers.%d.block_sparse_moe.experts.%d.w2.weight", i,
                       e)) ||
            (rc =
                 load(L, &w->w3[e], 2, S2(I, H), P, "layers.%d.block_sparse_moe.experts.%d.w3.weight", i, e)))
            return rc;
    if (t->shared_inter > 0) {
        int64_t S = t->shared_inter;
        if ((rc = load(L, &w->sh_gate, 2, S2(S, H), P,
                       "layers.%d.block_sparse_moe.shared_experts.gate_proj.weight", i)) ||
            (rc = load(L, &w->sh_up, 2, S2(S, H), P,
                       "layers.%d.block_sparse_moe.shared_experts.up_proj.weight", i)) ||
            (rc = load(L, &w->sh_down, 2, S2(H, S), P,
                       "layers.%d.block_sparse_moe.shared_experts.down_proj.weight", i)))
            return rc;
    }
    return MM_OK;
}

static int32_t load_vision(struct loader *L, const struct wk_config *cfg)
{
    const struct wk_vision_config *v = &cfg->vision;
    struct wk_model_w *m = L->m;
    const char *P = L->vis_prefix;
    int64_t D = v->hidden, I = v->inter, H = cfg->text.hidden, PH = cfg->proj_hidden;
    int64_t mm = (int64_t)v->merge * v->merge;
    int32_t rc;
    int64_t pshape[5] = {D, v->channels, v->temporal, v->patch, v->patch};
    if ((rc = load(L, &m->patch, 5, pshape, P, "embeddings.patch_embedding.weight")) ||
        (rc = load(L, &m->pre_ln_w, 1, S1(D), P, "pre_layrnorm.weight")) ||
        (rc = load(L, &m->pre_ln_b, 1, S1(D), P, "pre_layrnorm.bias")))
        return rc;
    m->n_vlayers = v->n_layers;
    m->vlayers = calloc((size_t)(v->n_layers ? v->n_layers : 1), sizeof *m->vlayers);
    if (!m->vlayers) return mm_err_set(L->err, MM_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n_layers; i++) {
        struct wk_vlayer_w *w = &m->vlayers[i];
        if ((rc = load(L, &w->ln1_w, 1, S1(D), P, "encoder.layers.%d.layer_norm1.weight", i)) ||
            (rc = load(L, &w->ln1_b, 1, S1(D), P, "encoder.layers.%d.layer_norm1.bias", i)) ||
            (rc = load(L, &w->ln2_w, 1, S1(D), P, "encoder.layers.%d.layer_norm2.weight", i)) ||
            (rc = load(L, &w->ln2_b, 1, S1(D), P, "encoder.layers.%d.layer_norm2.bias", i)) ||
            (rc = load(L, &w->q_w, 2, S2(D, D), P, "encoder.layers.%d.self_attn.q_proj.weight", i)) ||
            (rc = load(L, &w->q_b, 1, S1(D), P, "encoder.layers.%d.self_attn.q_proj.bias", i)) ||
            (rc = load(L, &w->k_w, 2, S2(D, D), P, "encoder.layers.%d.self_attn.k_proj.weight", i)) ||
            (rc = load(L, &w->k_b, 1, S1(D), P, "encoder.layers.%d.self_attn.k_proj.bias", i)) ||
            (rc = load(L, &w->v_w, 2, S2(D, D), P, "encoder.layers.%d.self_attn.v_proj.weight", i)) ||
            (rc = load(L, &w->v_b, 1, S1(D), P, "encoder.layers.%d.self_attn.v_proj.bias", i)) ||
            (rc = load(L, &w->o_w, 2, S2(D, D), P, "encoder.layers.%d.self_attn.out_proj.weight", i)) ||
            (rc = load(L, &w->o_b, 1, S1(D), P, "encoder.layers.%d.self_attn.out_proj.bias", i)) ||
            (rc = load(L, &w->fc1_w, 2, S2(I, D), P, "encoder.layers.%d.mlp.fc1.weight", i)) ||
            (rc = load(L, &w->fc1_b, 1, S1(I), P, "encoder.layers.%d.mlp.fc1.bias", i)) ||
            (rc = load(L, &w->fc2_w, 2, S2(D, I), P, "encoder.layers.%d.mlp.fc2.weight", i)) ||
            (rc = load(L, &w->fc2_b, 1, S1(D), P, "encoder.layers.%d.mlp.fc2.bias", i)))
            return rc;
    }
    const char *Q = L->mm_prefix;
    if ((rc = load(L, &m->proj1_w, 2, S2(PH, D), Q, "multi_modal_projector.linear_1.weight")) ||
        (rc = load(L, &m->proj1_b, 1, S1(PH), Q, "multi_modal_projector.linear_1.bias")) ||
        (rc = load(L, &m->proj2_w, 2, S2(H, PH), Q, "multi_modal_projector.linear_2.weight")) ||
        (rc = load(L, &m->proj2_b, 1, S1(H), Q, "multi_modal_projector.linear_2.bias")) ||
        (rc = load(L, &m->merge1_w, 2, S2(PH, H * mm), Q, "patch_merge_mlp.linear_1.weight")) ||
        (rc = load(L, &m->merge1_b, 1, S1(PH), Q, "patch_merge_mlp.linear_1.bias")) ||
        (rc = load(L, &m->merge2_w, 2, S2(H, PH), Q, "patch_merge_mlp.linear_2.weight")) ||
        (rc = load(L, &m->merge2_b, 1, S1(H), Q, "patch_merge_mlp.linear_2.bias")))
        return rc;
    m->has_vision = 1;
    return MM_OK;
}

int32_t wk_model_load(const struct wk_config *cfg, const struct wk_ckpt *ck, const struct wk_be *be,
                      struct wk_model_w *m, struct mm_err *err)
{
    memset(m, 0, sizeof *m);
    struct loader L = {
        ck, be, m, err, "language_model.model.", "language_model.", "vision_tower.vision_model.", ""};
    /* the released naming first; the layout newer transformers versions save as a fallback */
    if (!wk_ckpt_has(ck, "language_model.model.embed_tokens.weight") &&
        wk_ckpt_has(ck, "model.language_model.embed_tokens.weight")) {
        L.text_prefix = "model.language_model.";
        L.head_prefix = "";
        L.vis_prefix = "model.vision_tower.vision_model.";
        L.mm_prefix = "model.";
    }
    const struct wk_text_config *t = &cfg->text;
    int64_t V = t->vocab_size, H = t->hidden;
    int32_t rc;
    char ename[256];
    snprintf(ename, sizeof ename, "%sembed_tokens.weight", L.text_prefix);
    if ((rc = load(&L, &m->embed, 2, S2(V, H), L.text_prefix, "embed_tokens.weight")) ||
        (rc = load(&L, &m->final_norm, 1, S1(H), L.text_prefix, "norm.weight")))
        return rc;
    struct wk_wsrc es;
    if (!wk_ckpt_weight(ck, ename, 2, S2(V, H), &es, NULL)) m->src_dtype = es.dtype;
    /* the linear weights tell a quantized checkpoint from a plain one */
    snprintf(ename, sizeof ename, "%slayers.0.self_attn.q_proj.weight", L.text_prefix);
    if (!wk_ckpt_weight(ck, ename, 2, S2((int64_t)t->n_heads * t->head_dim, H), &es, NULL))
        m->src_dtype = es.dtype;
    char hname[256];
    snprintf(hname, sizeof hname, "%slm_head.weight", L.head_prefix);
    if (t->tie_embeddings && !wk_ckpt_has(ck, hname)) {
        m->lm_head = m->embed;
        m->lm_head_shared = 1;
    } else if ((rc = load(&L, &m->lm_head, 2, S2(V, H), L.head_prefix, "lm_head.weight"))) {
        return rc;
    }
    m->n_layers = t->n_layers;
    m->layers = calloc((size_t)t->n_layers, sizeof *m->layers);
    if (!m->layers) return mm_err_set(err, MM_NOMEM, "out of memory");
    for (int32_t i = 0; i < t->n_layers; i++)
        if ((rc = load_text_layer(&L, cfg, i, &m->layers[i]))) return rc;
    if (cfg->vision.present && (rc = load_vision(&L, cfg))) return rc;
    return MM_OK;
}

static void wfree(const struct wk_be *be, struct wk_weight *w)
{
    if (w) be->iface->weight_free(be->ctx, w);
}

void wk_model_free(const struct wk_be *be, struct wk_model_w *m)
{
    if (!m) return;
    wfree(be, m->embed);
    if (!m->lm_head_shared) wfree(be, m->lm_head);
    wfree(be, m->final_norm);
    for (int32_t i = 0; m->layers && i < m->n_layers; i++) {
        struct wk_layer_w *w = &m->layers[i];
        struct wk_weight *all[] = {w->in_norm, w->post_norm,   w->q,       w->k,     w->v,
                                   w->o,       w->q_norm,      w->k_norm,  w->iq,    w->ik,
                                   w->iq_norm, w->ik_norm,     w->gate,    w->up,    w->down,
                                   w->router,  w->router_bias, w->sh_gate, w->sh_up, w->sh_down};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) wfree(be, all[j]);
        /* expert arrays are calloc'ed with n_experts entries; unloaded ones are NULL */
        for (int32_t e = 0; w->w1 && w->w1[e]; e++) wfree(be, w->w1[e]);
        for (int32_t e = 0; w->w2 && w->w2[e]; e++) wfree(be, w->w2[e]);
        for (int32_t e = 0; w->w3 && w->w3[e]; e++) wfree(be, w->w3[e]);
        free(w->w1);
        free(w->w2);
        free(w->w3);
    }
    free(m->layers);
    for (int32_t i = 0; m->vlayers && i < m->n_vlayers; i++) {
        struct wk_vlayer_w *w = &m->vlayers[i];
        struct wk_weight *all[] = {w->ln1_w, w->ln1_b, w->ln2_w, w->ln2_b, w->q_w, w->q_b,
                                   w->k_w,   w->k_b,   w->v_w,   w->v_b,   w->o_w, w->o_b,
                                   w->fc1_w, w->fc1_b, w->fc2_w, w->fc2_b};
        for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) wfree(be, all[j]);
    }
    free(m->vlayers);
    struct wk_weight *rest[] = {m->patch,   m->pre_ln_w, m->pre_ln_b, m->proj1_w,  m->proj1_b, m->proj2_w,
                                m->proj2_b, m->merge1_w, m->merge1_b, m->merge2_w, m->merge2_b};
    for (size_t j = 0; j < sizeof rest / sizeof rest[0]; j++) wfree(be, rest[j]);
    memset(m, 0, sizeof *m);
}
