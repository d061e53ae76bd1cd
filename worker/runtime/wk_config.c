#include "wk_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kn_msa.h"
#include "mm_log.h"

/* Numbers may be written as integers or floats; defaults mirror the reference config classes so a key
 * the checkpoint leaves out means what it means to transformers. */
static int get_num(json_t *o, const char *key, double *out)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v))
        *out = (double)json_integer_value(v);
    else if (json_is_real(v))
        *out = json_real_value(v);
    else if (json_is_boolean(v))
        *out = json_is_true(v) ? 1.0 : 0.0;
    else
        return -1;
    return 1;
}

struct ctx {
    const char *label;
    struct mm_err *err;
    int32_t rc;
};

static int32_t geti(struct ctx *c, json_t *o, const char *sect, const char *key, int64_t def, int64_t lo,
                    int64_t hi, int64_t *out)
{
    double d;
    int r = get_num(o, key, &d);
    if (r < 0 || (r > 0 && (d != floor(d) || d < (double)lo || d > (double)hi)))
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: %s%s%s must be an integer in [%lld, %lld]",
                                  c->label, sect, *sect ? "." : "", key, (long long)lo, (long long)hi);
    *out = r ? (int64_t)d : def;
    return MM_OK;
}

static int32_t geti32(struct ctx *c, json_t *o, const char *sect, const char *key, int64_t def, int64_t lo,
                      int64_t hi, int32_t *out)
{
    int64_t v = 0;
    if (geti(c, o, sect, key, def, lo, hi, &v)) return c->rc;
    *out = (int32_t)v;
    return MM_OK;
}

static int32_t getf(struct ctx *c, json_t *o, const char *sect, const char *key, double def, double lo,
                    double hi, double *out)
{
    double d;
    int r = get_num(o, key, &d);
    if (r < 0 || (r > 0 && !(d >= lo && d <= hi)))
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: %s%s%s must be a number in [%g, %g]", c->label,
                                  sect, *sect ? "." : "", key, lo, hi);
    *out = r ? d : def;
    return MM_OK;
}

/* A per-layer 0/1 list: either a list of numbers (moe_layer_freq, sparse_attention_freq) or a list of
 * strings (layer_types, mlp_layer_types) where `one` names the 1 value and `zero` the 0 value. */
static int32_t get_layer_list(struct ctx *c, json_t *v, const char *what, int32_t n_layers, const char *one,
                              const char *zero, uint8_t *out)
{
    if (json_is_integer(v)) {
        /* a single frequency k: every k-th layer (M2-style) */
        json_int_t k = json_integer_value(v);
        for (int32_t i = 0; i < n_layers; i++) out[i] = k > 0 && i % k == 0;
        return MM_OK;
    }
    if (!json_is_array(v))
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: %s must be a list", c->label, what);
    if ((int32_t)json_array_size(v) != n_layers)
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: %s has %zu entries for %d layers", c->label, what,
                                  json_array_size(v), n_layers);
    for (int32_t i = 0; i < n_layers; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (json_is_string(e) && one) {
            const char *s = json_string_value(e);
            if (strcmp(s, one) == 0)
                out[i] = 1;
            else if (strcmp(s, zero) == 0)
                out[i] = 0;
            else
                return c->rc = mm_err_set(c->err, MM_UNSUPPORTED, "%s: %s[%d] = '%s' (expected '%s' or '%s')",
                                          c->label, what, i, s, one, zero);
        } else if (json_is_integer(e) || json_is_boolean(e)) {
            out[i] = json_is_integer(e) ? json_integer_value(e) != 0 : json_is_true(e);
        } else {
            return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: %s[%d] has the wrong type", c->label, what, i);
        }
    }
    return MM_OK;
}

static int32_t parse_text(struct ctx *c, json_t *t, struct wk_text_config *tc)
{
    const char *S = "text_config";
    double d;
    if (geti32(c, t, S, "vocab_size", 200064, 1, 1 << 30, &tc->vocab_size) ||
        geti32(c, t, S, "hidden_size", 6144, 1, 1 << 20, &tc->hidden) ||
        geti32(c, t, S, "num_hidden_layers", 60, 1, WK_MAX_LAYERS, &tc->n_layers) ||
        geti32(c, t, S, "num_attention_heads", 64, 1, 4096, &tc->n_heads) ||
        geti32(c, t, S, "num_key_value_heads", tc->n_heads, 1, 4096, &tc->n_kv))
        return c->rc;
    if (tc->n_heads % tc->n_kv)
        return c->rc = mm_err_set(c->err, MM_FORMAT,
                                  "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                                  c->label, tc->n_heads, tc->n_kv);
    if (geti32(c, t, S, "head_dim", tc->hidden / tc->n_heads, 2, 4096, &tc->head_dim)) return c->rc;
    if (tc->head_dim % 2)
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: text_config.head_dim %d is odd", c->label,
                                  tc->head_dim);

    json_t *rp = json_object_get(t, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(t, "rope_scaling");
    if (!json_is_object(rp)) rp = NULL;
    if (rp) {
        json_t *ty = json_object_get(rp, "rope_type");
        if (json_is_string(ty) && strcmp(json_string_value(ty), "default") != 0)
            return c->rc = mm_err_set(c->err, MM_UNSUPPORTED, "%s: text rope_type '%s' (only 'default')",
                                      c->label, json_string_value(ty));
    }
    double theta = 5e6;
    if (getf(c, t, S, "rope_theta", theta, 1.0, 1e12, &theta)) return c->rc;
    if (rp && getf(c, rp, "text_config.rope_parameters", "rope_theta", theta, 1.0, 1e12, &theta))
        return c->rc;
    tc->rope_theta = theta;
    /* the reference derives the rotated width from partial_rotary_factor; rotary_dim is the fallback */
    int32_t rot = tc->head_dim;
    if (geti32(c, t, S, "rotary_dim", tc->head_dim, 0, tc->head_dim, &rot)) return c->rc;
    double prf;
    int has_prf = rp ? get_num(rp, "partial_rotary_factor", &prf) : 0;
    if (!has_prf) has_prf = get_num(t, "partial_rotary_factor", &prf);
    if (has_prf < 0 || (has_prf > 0 && !(prf > 0 && prf <= 1)))
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: partial_rotary_factor must be in (0, 1]", c->label);
    if (has_prf > 0) {
        int32_t r2 = (int32_t)(tc->head_dim * prf);
        if (r2 != rot && json_object_get(t, "rotary_dim"))
            mm_log_warn("runtime",
                        "%s: rotary_dim %d disagrees with head_dim * partial_rotary_factor = %d; using %d",
                        c->label, rot, r2, r2);
        rot = r2;
    }
    if (rot % 2 || rot <= 0)
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: rotated dims %d must be even and positive",
                                  c->label, rot);
    tc->rot_dim = rot;

    if (getf(c, t, S, "rms_norm_eps", 1e-6, 0.0, 1.0, &d)) return c->rc;
    tc->rms_eps = (float)d;
    if (geti(c, t, S, "max_position_embeddings", 524288, 1, (int64_t)1 << 40, &tc->max_pos)) return c->rc;
    if (geti32(c, t, S, "dense_intermediate_size", 12288, 1, 1 << 24, &tc->dense_inter) ||
        geti32(c, t, S, "intermediate_size", 3072, 1, 1 << 24, &tc->expert_inter) ||
        geti32(c, t, S, "num_local_experts", 128, 1, 1 << 16, &tc->n_experts) ||
        geti32(c, t, S, "num_experts_per_tok", 4, 1, KN_MSA_MAX_TOPK, &tc->topk_experts))
        return c->rc;
    if (tc->topk_experts > tc->n_experts)
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: num_experts_per_tok %d > num_local_experts %d",
                                  c->label, tc->topk_experts, tc->n_experts);
    int32_t shared = 0, n_shared = 1;
    if (geti32(c, t, S, "shared_intermediate_size", 3072, 0, 1 << 24, &shared) ||
        geti32(c, t, S, "n_shared_experts", 1, 0, 64, &n_shared))
        return c->rc;
    tc->shared_inter = shared * n_shared;
    if (getf(c, t, S, "routed_scaling_factor", 2.0, -1e6, 1e6, &d)) return c->rc;
    tc->routed_scale = (float)d;
    if (getf(c, t, S, "swiglu_alpha", 1.702, -1e6, 1e6, &d)) return c->rc;
    tc->swiglu_alpha = (float)d;
    if (getf(c, t, S, "swiglu_limit", 7.0, 0.0, 1e30, &d)) return c->rc;
    tc->swiglu_limit = (float)d;
    tc->use_routing_bias = 1;
    if (getf(c, t, S, "use_routing_bias", 1, 0, 1, &d)) return c->rc;
    tc->use_routing_bias = d != 0;
    json_t *sf = json_object_get(t, "scoring_func");
    if (json_is_string(sf) && strcmp(json_string_value(sf), "sigmoid") != 0)
        return c->rc = mm_err_set(c->err, MM_UNSUPPORTED, "%s: scoring_func '%s' (only 'sigmoid')", c->label,
                                  json_string_value(sf));

    /* MSA: flat index_* keys first, then the released sparse_attention_config overrides them (as the
     * reference config class does) */
    if (geti32(c, t, S, "index_n_heads", 4, 1, 4096, &tc->idx_heads) ||
        geti32(c, t, S, "index_head_dim", 128, 2, 4096, &tc->idx_dim) ||
        geti32(c, t, S, "index_block_size", 128, 1, 1 << 16, &tc->block) ||
        geti32(c, t, S, "index_topk_blocks", 16, 1, KN_MSA_MAX_TOPK, &tc->topk_blocks) ||
        geti32(c, t, S, "index_local_blocks", 1, 0, 1 << 16, &tc->local_blocks))
        return c->rc;
    json_t *sc = json_object_get(t, "sparse_attention_config");
    if (sc && !json_is_object(sc))
        return c->rc =
                   mm_err_set(c->err, MM_FORMAT, "%s: sparse_attention_config is not an object", c->label);
    const char *SS = "text_config.sparse_attention_config";
    if (sc &&
        (geti32(c, sc, SS, "sparse_num_index_heads", tc->idx_heads, 1, 4096, &tc->idx_heads) ||
         geti32(c, sc, SS, "sparse_index_dim", tc->idx_dim, 2, 4096, &tc->idx_dim) ||
         geti32(c, sc, SS, "sparse_block_size", tc->block, 1, 1 << 16, &tc->block) ||
         geti32(c, sc, SS, "sparse_topk_blocks", tc->topk_blocks, 1, KN_MSA_MAX_TOPK, &tc->topk_blocks) ||
         geti32(c, sc, SS, "sparse_local_block", tc->local_blocks, 0, 1 << 16, &tc->local_blocks)))
        return c->rc;
    if (tc->idx_dim % 2)
        return c->rc = mm_err_set(c->err, MM_FORMAT, "%s: index head dim %d is odd", c->label, tc->idx_dim);
    if (tc->n_heads % tc->idx_heads)
        return c->rc = mm_err_set(c->err, MM_FORMAT,
                                  "%s: num_attention_heads %d is not a multiple of index heads %d", c->label,
                                  tc->n_heads, tc->idx_heads);

    int32_t L = tc->n_layers;
    json_t *lt = json_object_get(t, "layer_types"),
           *sfq = sc ? json_object_get(sc, "sparse_attention_freq") : NULL;
    memset(tc->layer_sparse, 0, sizeof tc->layer_sparse);
    if (lt && !json_is_null(lt)) {
        if (get_layer_list(c, lt, "text_config.layer_types", L, "minimax_m3_sparse", "full_attention",
                           tc->layer_sparse))
            return c->rc;
    } else if (sfq && !json_is_null(sfq)) {
        if (get_layer_list(c, sfq, "sparse_attention_freq", L, NULL, NULL, tc->layer_sparse)) return c->rc;
    }
    json_t *mt = json_object_get(t, "mlp_layer_types"), *mf = json_object_get(t, "moe_layer_freq");
    if (mt && !json_is_null(mt)) {
        if (get_layer_list(c, mt, "text_config.mlp_layer_types", L, "sparse", "dense", tc->layer_moe))
            return c->rc;
    } else if (mf && !json_is_null(mf)) {
        if (get_layer_list(c, mf, "text_config.moe_layer_freq", L, NULL, NULL, tc->layer_moe)) return c->rc;
    } else {
        memset(tc->layer_moe, 1, (size_t)L); /* the reference's default: every layer MoE */
    }
    tc->first_msa = -1;
    for (int32_t i = 0; i < L; i++)
        if (tc->layer_sparse[i]) {
            tc->first_msa = i;
            break;
        }

    tc->n_eos = 0;
    json_t *eos = json_object_get(t, "eos_token_id");
    if (json_is_integer(eos)) {
        tc->eos[tc->n_eos++] = (int32_t)json_integer_value(eos);
    } else if (json_is_array(eos)) {
        for (size_t i = 0; i < json_array_size(eos) && tc->n_eos < 8; i++)
            if (json_is_integer(json_array_get(eos, i)))
                tc->eos[tc->n_eos++] = (int32_t)json_integer_value(json_array_get(eos, i));
    }
    tc->tie_embeddings = json_is_true(json_object_get(t, "tie_word_embeddings"));
    return MM_OK;
}

static int32_t parse_vision(struct ctx *c, json_t *v, struct wk_vision_config *vc)
{
    const char *S = "vision_config";
    double d;
    vc->present = 1;
    if (geti32(c, v, S, "hidden_size", 1280, 1, 1 << 20, &vc->hidden) ||
        geti32(c, v, S, "intermediate_size", 5120, 1, 1 << 24, &vc->inter) ||
        geti32(c, v, S, "num_hidden_layers", 32, 0, WK_MAX_LAYERS, &vc->n_layers) ||
        geti32(c, v, S, "num_attention_heads", 16, 1, 4096, &vc->n_heads) ||
        geti32(c, v, S, "num_channels", 3, 1, 64, &vc->channels) ||
        geti32(c, v, S, "patch_size", 14, 1, 1024, &vc->patch) ||
        geti32(c, v, S, "temporal_patch_size", 2, 1, 64, &vc->temporal))
        return c->rc;
    json_t *comp = json_object_get(v, "img_token_compression_config");
    int32_t merge = 2;
    if (json_is_object(comp) && geti32(c, comp, "vision_config.img_token_compression_config",
                                       "spatial_merge_size", merge, 1, 64, &merge))
        return c->rc;
    if (geti32(c, v, S, "spatial_merge_size", merge, 1, 64, &vc->merge)) return c->rc;
    if (vc->hidden % vc->n_heads)
        return c->rc =
                   mm_err_set(c->err, MM_FORMAT, "%s: vision hidden_size %d is not a multiple of %d heads",
                              c->label, vc->hidden, vc->n_heads);
    vc->head_dim = vc->hidden / vc->n_heads;
    if (vc->head_dim > 384)
        return c->rc = mm_err_set(c->err, MM_UNSUPPORTED, "%s: vision head dim %d (at most 384)", c->label,
                                  vc->head_dim);
    if (getf(c, v, S, "layer_norm_eps", 1e-5, 0.0, 1.0, &d)) return c->rc;
    vc->ln_eps = (float)d;
    double theta = 10000.0;
    if (getf(c, v, S, "rope_theta", theta, 1.0, 1e12, &theta)) return c->rc;
    json_t *rp = json_object_get(v, "rope_parameters");
    if (json_is_object(rp) &&
        getf(c, rp, "vision_config.rope_parameters", "rope_theta", theta, 1.0, 1e12, &theta))
        return c->rc;
    vc->rope_theta = theta;
    json_t *act = json_object_get(v, "hidden_act");
    vc->act = WK_ACT_GELU;
    if (json_is_string(act)) {
        const char *a = json_string_value(act);
        if (strcmp(a, "gelu") == 0)
            vc->act = WK_ACT_GELU;
        else if (strcmp(a, "gelu_pytorch_tanh") == 0 || strcmp(a, "gelu_new") == 0)
            vc->act = WK_ACT_GELU_TANH;
        else if (strcmp(a, "quick_gelu") == 0)
            vc->act = WK_ACT_QUICK_GELU;
        else
            return c->rc = mm_err_set(c->err, MM_UNSUPPORTED, "%s: vision hidden_act '%s'", c->label, a);
    }
    return MM_OK;
}

int32_t wk_config_parse(const char *json, size_t len, const char *label, struct wk_config *cfg,
                        struct mm_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return mm_err_set(err, MM_FORMAT, "%s: not valid JSON: %s (line %d)", label, je.text, je.line);
    struct ctx c = {label, err, MM_OK};
    if (!json_is_object(root)) {
        json_decref(root);
        return mm_err_set(err, MM_FORMAT, "%s: not a JSON object", label);
    }
    json_t *mt = json_object_get(root, "model_type");
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", json_is_string(mt) ? json_string_value(mt) : "");
    if (cfg->model_type[0] && strncmp(cfg->model_type, "minimax_m3", 10) != 0) {
        json_decref(root);
        return mm_err_set(err, MM_UNSUPPORTED, "%s: model_type '%s' (expected minimax_m3_vl)", label,
                          cfg->model_type);
    }
    json_t *t = json_object_get(root, "text_config");
    if (t && !json_is_object(t)) {
        json_decref(root);
        return mm_err_set(err, MM_FORMAT, "%s: text_config is not an object", label);
    }
    if (!t) t = root; /* a text-only checkpoint keeps its keys at the top */
    int32_t rc = parse_text(&c, t, &cfg->text);
    json_t *v = json_object_get(root, "vision_config");
    if (!rc && v && !json_is_null(v)) {
        if (!json_is_object(v))
            rc = mm_err_set(err, MM_FORMAT, "%s: vision_config is not an object", label);
        else
            rc = parse_vision(&c, v, &cfg->vision);
    }
    if (!rc) {
        int32_t img = 200025, vid = 200026;
        if (geti32(&c, root, "", "image_token_id", img, -1, 1 << 30, &img) ||
            geti32(&c, root, "", "image_token_index", img, -1, 1 << 30, &img) ||
            geti32(&c, root, "", "video_token_id", vid, -1, 1 << 30, &vid) ||
            geti32(&c, root, "", "video_token_index", vid, -1, 1 << 30, &vid) ||
            geti32(&c, root, "", "projector_hidden_size", 6144, 1, 1 << 24, &cfg->proj_hidden))
            rc = c.rc;
        cfg->image_token_id = img;
        cfg->video_token_id = vid;
        if (json_is_true(json_object_get(root, "tie_word_embeddings"))) cfg->text.tie_embeddings = 1;
    }
    json_t *q = json_object_get(root, "quantization_config");
    if (!rc && json_is_object(q)) {
        json_t *bs = json_object_get(q, "weight_block_size");
        if (json_is_array(bs) && json_array_size(bs) == 2 && json_is_integer(json_array_get(bs, 0)) &&
            json_is_integer(json_array_get(bs, 1))) {
            cfg->fp8_block[0] = (int32_t)json_integer_value(json_array_get(bs, 0));
            cfg->fp8_block[1] = (int32_t)json_integer_value(json_array_get(bs, 1));
            if (cfg->fp8_block[0] <= 0 || cfg->fp8_block[1] <= 0)
                rc = mm_err_set(err, MM_FORMAT, "%s: quantization_config.weight_block_size must be positive",
                                label);
        }
    }
    json_decref(root);
    return rc;
}

int32_t wk_config_load(const char *path, struct wk_config *c, struct mm_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return mm_err_set(err, MM_NOT_FOUND, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= (16u << 20)) {
                free(buf);
                fclose(f);
                return mm_err_set(err, MM_TOO_LARGE, "%s: larger than 16 MiB", path);
            }
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return mm_err_set(err, MM_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return mm_err_set(err, MM_IO, "%s: read error", path);
    }
    int32_t rc = wk_config_parse(buf, len, path, c, err);
    free(buf);
    return rc;
}
