#include "mkdemo.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"
#include "mm_text.h"

void mk_demo_defaults(struct mk_demo_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1234;
    o->dtype = MM_DT_BF16;
    o->vocab = 8199;
    o->hidden = 128;
    o->layers = 4;
    o->heads = 8;
    o->kv_heads = 2;
    o->head_dim = 32;
    o->rot_dim = 16;
    o->inter = 64;
    o->dense_inter = 256;
    o->shared_inter = 64;
    o->experts = 8;
    o->topk_experts = 2;
    o->idx_heads = 2;
    o->idx_dim = 32;
    o->block = 16;
    o->topk_blocks = 4;
    o->local_blocks = 1;
    snprintf(o->attn_pattern, sizeof o->attn_pattern, "dsss");
    snprintf(o->mlp_pattern, sizeof o->mlp_pattern, "dmmm");
    o->routed_scale = 2.0f;
    o->image_token = 8195;
    o->video_token = 8196;
    o->eos_token = 8194;
    o->vis_hidden = 64;
    o->vis_inter = 128;
    o->vis_layers = 2;
    o->vis_heads = 4;
    o->patch = 14;
    o->temporal = 2;
    o->merge = 2;
    o->proj_hidden = 128;
}

int32_t mk_demo_use_tokenizer(struct mk_demo_opts *o, const char *path, struct mm_err *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return mm_err_set(err, MM_FORMAT, "%s: %s (line %d)", path, je.text, je.line);
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    int64_t max_id = -1;
    int32_t img = -1, vid = -1, eos = -1;
    const char *k;
    json_t *v;
    if (json_is_object(vocab)) json_object_foreach(vocab, k, v)
        {
            if (json_is_integer(v) && json_integer_value(v) > max_id) max_id = json_integer_value(v);
        }
    for (size_t i = 0; json_is_array(added) && i < json_array_size(added); i++) {
        json_t *t = json_array_get(added, i);
        json_t *id = json_object_get(t, "id"), *content = json_object_get(t, "content");
        if (!json_is_integer(id) || !json_is_string(content)) continue;
        int64_t n = json_integer_value(id);
        if (n > max_id) max_id = n;
        const char *s = json_string_value(content);
        if (!strcmp(s, "]<]image[>["))
            img = (int32_t)n;
        else if (!strcmp(s, "]<]video[>["))
            vid = (int32_t)n;
        else if (!strcmp(s, "[e~["))
            eos = (int32_t)n;
    }
    json_decref(root);
    if (max_id < 0 || max_id >= (1 << 30))
        return mm_err_set(err, MM_FORMAT, "%s: no model.vocab / added_tokens ids", path);
    if (img < 0 || vid < 0)
        return mm_err_set(err, MM_FORMAT, "%s: no ']<]image[>[' / ']<]video[>[' among added_tokens", path);
    o->vocab = (int32_t)(max_id + 1);
    o->image_token = img;
    o->video_token = vid;
    o->eos_token = eos;
    return MM_OK;
}

struct field {
    const char *name;
    size_t off;
};
#define F(n)                                                                                                 \
    {                                                                                                        \
#n, offsetof(struct mk_demo_opts, n)                                                                 \
    }
static const struct field fields[] = {
    F(vocab),       F(hidden),    F(layers),      F(heads),        F(kv_heads),     F(head_dim),
    F(rot_dim),     F(inter),     F(dense_inter), F(shared_inter), F(experts),      F(topk_experts),
    F(idx_heads),   F(idx_dim),   F(block),       F(topk_blocks),  F(local_blocks), F(image_token),
    F(video_token), F(eos_token), F(no_vision),   F(vis_hidden),   F(vis_inter),    F(vis_layers),
    F(vis_heads),   F(patch),     F(temporal),    F(merge),        F(proj_hidden),
};
#undef F

int32_t mk_demo_set(struct mk_demo_opts *o, const char *a, struct mm_err *err)
{
    const char *eq = strchr(a, '=');
    if (!eq) return mm_err_set(err, MM_INVALID, "'%s': expected name=value", a);
    size_t nl = (size_t)(eq - a);
    const char *val = eq + 1;
    if (nl == 12 && !strncmp(a, "attn_pattern", nl)) {
        if (strlen(val) >= sizeof o->attn_pattern || strspn(val, "ds") != strlen(val) || !*val)
            return mm_err_set(err, MM_INVALID, "attn_pattern '%s': letters d/s", val);
        snprintf(o->attn_pattern, sizeof o->attn_pattern, "%s", val);
        return MM_OK;
    }
    if (nl == 11 && !strncmp(a, "mlp_pattern", nl)) {
        if (strlen(val) >= sizeof o->mlp_pattern || strspn(val, "dm") != strlen(val) || !*val)
            return mm_err_set(err, MM_INVALID, "mlp_pattern '%s': letters d/m", val);
        snprintf(o->mlp_pattern, sizeof o->mlp_pattern, "%s", val);
        return MM_OK;
    }
    if (nl == 5 && !strncmp(a, "dtype", nl)) {
        int32_t dt = mm_dtype_parse(val);
        if (dt != MM_DT_BF16 && dt != MM_DT_F16 && dt != MM_DT_F32)
            return mm_err_set(err, MM_INVALID, "dtype '%s': BF16, F16 or F32", val);
        o->dtype = dt;
        return MM_OK;
    }
    char *end;
    if (nl == 12 && !strncmp(a, "routed_scale", nl)) {
        o->routed_scale = strtof(val, &end);
        return *end ? mm_err_set(err, MM_INVALID, "'%s': not a number", a) : MM_OK;
    }
    int64_t v;
    if (mm_parse_i64(val, -1, 1 << 30, &v)) return mm_err_set(err, MM_INVALID, "'%s': bad value", a);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strlen(fields[i].name) == nl && !strncmp(fields[i].name, a, nl)) {
            *(int32_t *)((char *)o + fields[i].off) = (int32_t)v;
            return MM_OK;
        }
    return mm_err_set(err, MM_INVALID, "'%.*s': unknown size", (int)nl, a);
}

/* ---- random numbers: splitmix64 + Box-Muller, the same stream for a given seed ---- */

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Values are drawn in blocks of MK_BLOCK, each block from its own stream (the tensor's seed and the block's
 * index), so that threads can fill the blocks in any order and a seed still gives the same bytes: a
 * checkpoint with M3's expert shapes is tens of GB, which one thread drew at ~60 MB/s. */
#define MK_BLOCK 65536
#define MK_THREADS_MAX 64

/* mean + std * N(0, 1) into out[0 .. n) from stream s: Box-Muller, both values of each pair */
static void normal_block(uint64_t s, float *out, size_t n, double mean, double std)
{
    for (size_t i = 0; i < n; i += 2) {
        const uint64_t r = next_u64(&s);
        const double u1 = ((double)(r >> 40) + 0.5) / 16777216.0, u2 = (double)(r & 0xffffffu) / 16777216.0;
        const double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
        out[i] = (float)(mean + std * m * cos(a));
        if (i + 1 < n) out[i + 1] = (float)(mean + std * m * sin(a));
    }
}

struct fill_job {
    float *buf;
    void *raw; /* the tensor in its dtype (NULL: buf is it) */
    int32_t dtype;
    size_t n, esz;
    uint64_t seed;
    double mean, std;
    atomic_size_t next; /* the next block to fill */
    atomic_int failed;
};

static void *fill_worker(void *arg)
{
    struct fill_job *j = arg;
    for (;;) {
        const size_t b = atomic_fetch_add(&j->next, 1), i0 = b * MK_BLOCK;
        if (i0 >= j->n) return NULL;
        const size_t len = j->n - i0 < MK_BLOCK ? j->n - i0 : MK_BLOCK;
        uint64_t s = j->seed ^ (b * 0xd1b54a32d192ed03ull);
        normal_block(next_u64(&s), j->buf + i0, len, j->mean, j->std);
        if (j->raw && mm_convert_from_f32((char *)j->raw + i0 * j->esz, j->dtype, j->buf + i0, len))
            atomic_store(&j->failed, 1);
    }
}

/* Fill a tensor of n values on up to the machine's cores (one thread for small tensors) */
static int fill_tensor(struct fill_job *j)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = (j->n + MK_BLOCK - 1) / MK_BLOCK;
    if (cpus < 1) cpus = 1;
    if (nt > (size_t)cpus) nt = (size_t)cpus;
    if (nt > MK_THREADS_MAX) nt = MK_THREADS_MAX;
    pthread_t th[MK_THREADS_MAX];
    size_t started = 0;
    for (size_t t = 1; t < nt; t++, started++)
        if (pthread_create(&th[t], NULL, fill_worker, j)) break;
    fill_worker(j); /* the caller's thread works too; if a thread did not start, the others take its blocks */
    for (size_t t = 1; t <= started; t++) pthread_join(th[t], NULL);
    return atomic_load(&j->failed) ? -1 : 0;
}

struct gen {
    struct mm_st_writer *w;
    const struct mk_demo_opts *o;
    uint64_t rng;
    float *buf;
    size_t cap;
    struct mm_err *err;
};

/* A tensor of `shape` filled with mean + std * N(0, 1). */
static int32_t put(struct gen *g, const char *name, int32_t ndim, const int64_t *shape, double mean,
                   double std)
{
    size_t n = 1;
    for (int32_t i = 0; i < ndim; i++) n *= (size_t)shape[i];
    if (n > g->cap) {
        float *nb = realloc(g->buf, n * sizeof(float) * 2);
        if (!nb) return mm_err_set(g->err, MM_NOMEM, "out of memory");
        g->buf = nb;
        g->cap = n;
    }
    size_t esz = mm_dtype_size(g->o->dtype);
    struct fill_job j = {.buf = g->buf,
                         .raw = esz == 4 ? NULL : (char *)g->buf + n * sizeof(float), /* second half */
                         .dtype = g->o->dtype,
                         .n = n,
                         .esz = esz,
                         .seed = next_u64(&g->rng),
                         .mean = mean,
                         .std = std};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    if (fill_tensor(&j))
        return mm_err_set(g->err, MM_INVALID, "cannot convert to %s", mm_dtype_name(g->o->dtype));
    return mm_st_writer_add(g->w, name, g->o->dtype, ndim, shape, j.raw ? j.raw : g->buf, n * esz, g->err);
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static int32_t put_linear(struct gen *g, const char *name, int64_t out, int64_t in)
{
    /* std 1/sqrt(fan_in): activations keep their scale through each product */
    return put(g, name, 2, SH(out, in), 0.0, 1.0 / sqrt((double)in));
}

static int32_t text_tensors(struct gen *g)
{
    const struct mk_demo_opts *o = g->o;
    int64_t H = o->hidden, hd = o->head_dim;
    char n[256];
    int32_t rc;
    const char *P = "language_model.model.";
    snprintf(n, sizeof n, "%sembed_tokens.weight", P);
    if ((rc = put(g, n, 2, SH(o->vocab, H), 0.0, 1.0))) return rc;
    snprintf(n, sizeof n, "%snorm.weight", P);
    if ((rc = put(g, n, 1, SH(H), 0.0, 0.1))) return rc;
    /* a larger head than 1/sqrt(H) gives peaked, readable next-token distributions */
    if ((rc = put(g, "language_model.lm_head.weight", 2, SH(o->vocab, H), 0.0, 3.0 / sqrt((double)H))))
        return rc;
    for (int32_t l = 0; l < o->layers; l++) {
#define L(fmt) (snprintf(n, sizeof n, "%slayers.%d." fmt, P, l), n)
        if ((rc = put(g, L("input_layernorm.weight"), 1, SH(H), 0.0, 0.1)) ||
            (rc = put(g, L("post_attention_layernorm.weight"), 1, SH(H), 0.0, 0.1)) ||
            (rc = put_linear(g, L("self_attn.q_proj.weight"), (int64_t)o->heads * hd, H)) ||
            (rc = put_linear(g, L("self_attn.k_proj.weight"), (int64_t)o->kv_heads * hd, H)) ||
            (rc = put_linear(g, L("self_attn.v_proj.weight"), (int64_t)o->kv_heads * hd, H)) ||
            (rc = put_linear(g, L("self_attn.o_proj.weight"), H, (int64_t)o->heads * hd)) ||
            (rc = put(g, L("self_attn.q_norm.weight"), 1, SH(hd), 0.0, 0.1)) ||
            (rc = put(g, L("self_attn.k_norm.weight"), 1, SH(hd), 0.0, 0.1)))
            return rc;
        if (o->attn_pattern[l] == 's' &&
            ((rc =
                  put_linear(g, L("self_attn.index_q_proj.weight"), (int64_t)o->idx_heads * o->idx_dim, H)) ||
             (rc = put_linear(g, L("self_attn.index_k_proj.weight"), o->idx_dim, H)) ||
             (rc = put(g, L("self_attn.index_q_norm.weight"), 1, SH(o->idx_dim), 0.0, 0.1)) ||
             (rc = put(g, L("self_attn.index_k_norm.weight"), 1, SH(o->idx_dim), 0.0, 0.1))))
            return rc;
        if (o->mlp_pattern[l] != 'm') {
            if ((rc = put_linear(g, L("mlp.gate_proj.weight"), o->dense_inter, H)) ||
                (rc = put_linear(g, L("mlp.up_proj.weight"), o->dense_inter, H)) ||
                (rc = put_linear(g, L("mlp.down_proj.weight"), H, o->dense_inter)))
                return rc;
            continue;
        }
        if ((rc = put_linear(g, L("block_sparse_moe.gate.weight"), o->experts, H)) ||
            (rc = put(g, L("block_sparse_moe.e_score_correction_bias"), 1, SH(o->experts), 0.0, 0.05)))
            return rc;
        for (int32_t e = 0; e < o->experts; e++) {
            char m[256];
            snprintf(m, sizeof m, "%slayers.%d.block_sparse_moe.experts.%d.", P, l, e);
            char a[300];
            snprintf(a, sizeof a, "%sw1.weight", m);
            if ((rc = put_linear(g, a, o->inter, H))) return rc;
            snprintf(a, sizeof a, "%sw2.weight", m);
            if ((rc = put_linear(g, a, H, o->inter))) return rc;
            snprintf(a, sizeof a, "%sw3.weight", m);
            if ((rc = put_linear(g, a, o->inter, H))) return rc;
        }
        if (o->shared_inter > 0 &&
            ((rc =
                  put_linear(g, L("block_sparse_moe.shared_experts.gate_proj.weight"), o->shared_inter, H)) ||
             (rc = put_linear(g, L("block_sparse_moe.shared_experts.up_proj.weight"), o->shared_inter, H)) ||
             (rc = put_linear(g, L("block_sparse_moe.shared_experts.down_proj.weight"), H, o->shared_inter))))
            return rc;
#undef L
    }
    return MM_OK;
}

static int32_t vision_tensors(struct gen *g)
{
    const struct mk_demo_opts *o = g->o;
    int64_t D = o->vis_hidden, I = o->vis_inter, H = o->hidden, PH = o->proj_hidden;
    int64_t row = 3LL * o->temporal * o->patch * o->patch, mm = (int64_t)o->merge * o->merge;
    char n[256];
    int32_t rc;
    const char *P = "vision_tower.vision_model.";
    snprintf(n, sizeof n, "%sembeddings.patch_embedding.weight", P);
    if ((rc = put(g, n, 5, SH(D, 3, o->temporal, o->patch, o->patch), 0.0, 1.0 / sqrt((double)row))))
        return rc;
    snprintf(n, sizeof n, "%spre_layrnorm.weight", P);
    if ((rc = put(g, n, 1, SH(D), 1.0, 0.1))) return rc;
    snprintf(n, sizeof n, "%spre_layrnorm.bias", P);
    if ((rc = put(g, n, 1, SH(D), 0.0, 0.1))) return rc;
    for (int32_t l = 0; l < o->vis_layers; l++) {
#define L(fmt) (snprintf(n, sizeof n, "%sencoder.layers.%d." fmt, P, l), n)
        if ((rc = put(g, L("layer_norm1.weight"), 1, SH(D), 1.0, 0.1)) ||
            (rc = put(g, L("layer_norm1.bias"), 1, SH(D), 0.0, 0.1)) ||
            (rc = put(g, L("layer_norm2.weight"), 1, SH(D), 1.0, 0.1)) ||
            (rc = put(g, L("layer_norm2.bias"), 1, SH(D), 0.0, 0.1)))
            return rc;
        const char *lin[4] = {"q_proj", "k_proj", "v_proj", "out_proj"};
        for (int i = 0; i < 4; i++) {
            char a[300];
            snprintf(a, sizeof a, "%sencoder.layers.%d.self_attn.%s.weight", P, l, lin[i]);
            if ((rc = put_linear(g, a, D, D))) return rc;
            snprintf(a, sizeof a, "%sencoder.layers.%d.self_attn.%s.bias", P, l, lin[i]);
            if ((rc = put(g, a, 1, SH(D), 0.0, 0.05))) return rc;
        }
        if ((rc = put_linear(g, L("mlp.fc1.weight"), I, D)) ||
            (rc = put(g, L("mlp.fc1.bias"), 1, SH(I), 0.0, 0.05)) ||
            (rc = put_linear(g, L("mlp.fc2.weight"), D, I)) ||
            (rc = put(g, L("mlp.fc2.bias"), 1, SH(D), 0.0, 0.05)))
            return rc;
#undef L
    }
    if ((rc = put_linear(g, "multi_modal_projector.linear_1.weight", PH, D)) ||
        (rc = put(g, "multi_modal_projector.linear_1.bias", 1, SH(PH), 0.0, 0.05)) ||
        (rc = put_linear(g, "multi_modal_projector.linear_2.weight", H, PH)) ||
        (rc = put(g, "multi_modal_projector.linear_2.bias", 1, SH(H), 0.0, 0.05)) ||
        (rc = put_linear(g, "patch_merge_mlp.linear_1.weight", PH, H * mm)) ||
        (rc = put(g, "patch_merge_mlp.linear_1.bias", 1, SH(PH), 0.0, 0.05)) ||
        (rc = put_linear(g, "patch_merge_mlp.linear_2.weight", H, PH)) ||
        (rc = put(g, "patch_merge_mlp.linear_2.bias", 1, SH(H), 0.0, 1.0)))
        return rc;
    return MM_OK;
}

static json_t *int_list(const char *pattern, char one, int32_t n)
{
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(a, json_integer(pattern[i] == one));
    return a;
}

static json_t *make_config(const struct mk_demo_opts *o)
{
    json_t *sparse = json_pack(
        "{s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:o}", "use_sparse_attention", 1, "sparse_num_index_heads",
        o->idx_heads, "sparse_index_dim", o->idx_dim, "sparse_block_size", o->block, "sparse_topk_blocks",
        o->topk_blocks, "sparse_local_block", o->local_blocks, "sparse_init_block", 0, "sparse_score_type",
        "max", "sparse_attention_freq", int_list(o->attn_pattern, 's', o->layers));
    json_t *rope = json_pack("{s:s, s:f, s:f}", "rope_type", "default", "rope_theta", 5000000.0,
                             "partial_rotary_factor", (double)o->rot_dim / o->head_dim);
    json_t *text = json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:I, s:f, s:i, s:i, s:i, s:i, s:o, s:i, "
        "s:f, s:i, s:f, s:f, s:o, s:o, s:s, s:b, s:b}",
        "model_type", "minimax_m3_vl_text", "vocab_size", o->vocab, "hidden_size", o->hidden,
        "intermediate_size", o->inter, "num_hidden_layers", o->layers, "num_attention_heads", o->heads,
        "num_key_value_heads", o->kv_heads, "head_dim", o->head_dim, "hidden_act", "swigluoai",
        "max_position_embeddings", (json_int_t)524288, "rms_norm_eps", 1e-6, "num_experts_per_tok",
        o->topk_experts, "num_local_experts", o->experts, "dense_intermediate_size", o->dense_inter,
        "shared_intermediate_size", o->shared_inter, "rope_parameters", rope, "rotary_dim", o->rot_dim,
        "routed_scaling_factor", (double)o->routed_scale, "n_shared_experts", 1, "swiglu_alpha", 1.702,
        "swiglu_limit", 7.0, "sparse_attention_config", sparse, "moe_layer_freq",
        int_list(o->mlp_pattern, 'm', o->layers), "scoring_func", "sigmoid", "use_routing_bias", 1,
        "tie_word_embeddings", 0);
    if (o->eos_token >= 0) json_object_set_new(text, "eos_token_id", json_integer(o->eos_token));
    json_t *root =
        json_pack("{s:[s], s:s, s:o, s:i, s:i, s:i, s:b}", "architectures",
                  "MiniMaxM3SparseForConditionalGeneration", "model_type", "minimax_m3_vl", "text_config",
                  text, "image_token_index", o->image_token, "video_token_index", o->video_token,
                  "projector_hidden_size", o->proj_hidden, "tie_word_embeddings", 0);
    if (!o->no_vision) {
        json_t *vis = json_pack(
            "{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:{s:s, s:f}, s:{s:i, s:i}}",
            "model_type", "minimax_m3_vl_vision", "hidden_size", o->vis_hidden, "intermediate_size",
            o->vis_inter, "num_hidden_layers", o->vis_layers, "num_attention_heads", o->vis_heads,
            "num_channels", 3, "patch_size", o->patch, "temporal_patch_size", o->temporal,
            "spatial_merge_size", o->merge, "hidden_act", "gelu", "layer_norm_eps", 1e-5, "rope_parameters",
            "rope_type", "axial", "rope_theta", 10000.0, "img_token_compression_config", "spatial_merge_size",
            o->merge, "temporal_patch_size", o->temporal);
        json_object_set_new(root, "vision_config", vis);
    }
    return root;
}

static int32_t check(const struct mk_demo_opts *o, struct mm_err *err)
{
    if (o->layers < 1 || o->layers > 63 || (int32_t)strlen(o->attn_pattern) < o->layers ||
        (int32_t)strlen(o->mlp_pattern) < o->layers)
        return mm_err_set(err, MM_INVALID, "layers %d needs attn_pattern and mlp_pattern of that length",
                          o->layers);
    if (o->hidden < 1 || o->heads < 1 || o->kv_heads < 1 || o->heads % o->kv_heads || o->head_dim < 2 ||
        o->head_dim % 2 || o->rot_dim < 2 || o->rot_dim % 2 || o->rot_dim > o->head_dim || o->idx_heads < 1 ||
        o->heads % o->idx_heads || o->idx_dim < 2 || o->idx_dim % 2 || o->block < 1 || o->topk_blocks < 1 ||
        o->experts < 1 || o->topk_experts < 1 || o->topk_experts > o->experts || o->inter < 1 ||
        o->dense_inter < 1 || o->vocab < 2 || o->image_token >= o->vocab || o->video_token >= o->vocab)
        return mm_err_set(err, MM_INVALID, "inconsistent sizes");
    if (!o->no_vision && (o->vis_hidden < 1 || o->vis_heads < 1 || o->vis_hidden % o->vis_heads ||
                          o->merge < 1 || o->patch < 1 || o->temporal < 1 || o->proj_hidden < 1))
        return mm_err_set(err, MM_INVALID, "inconsistent vision sizes");
    return MM_OK;
}

int32_t mk_demo_write(const char *dir, const struct mk_demo_opts *o, struct mm_err *err)
{
    int32_t rc = check(o, err);
    if (rc) return rc;
    struct gen g = {mm_st_writer_create(), o, o->seed, NULL, 0, err};
    if (!g.w) return mm_err_set(err, MM_NOMEM, "out of memory");
    if (!(rc = text_tensors(&g)) && !o->no_vision) rc = vision_tensors(&g);
    char path[4096];
    if (!rc && !(rc = mm_st_writer_add_metadata(g.w, "format", "pt", err))) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = mm_st_writer_save(g.w, path, err);
    }
    mm_st_writer_destroy(g.w);
    free(g.buf);
    if (rc) return rc;
    json_t *cfg = make_config(o);
    if (!cfg) return mm_err_set(err, MM_NOMEM, "cannot build config.json");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (json_dump_file(cfg, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER))
        rc = mm_err_set(err, MM_IO, "%s: write failed", path);
    json_decref(cfg);
    return rc;
}
