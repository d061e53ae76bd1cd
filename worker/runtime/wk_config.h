/* config.json of a MiniMax-M3 checkpoint, parsed into plain numbers.
 *
 * Accepts the released layout (model_type minimax_m3_vl; text_config with sparse_attention_config,
 * moe_layer_freq, rope_parameters; vision_config with img_token_compression_config; image_token_index,
 * video_token_index) and the flat spellings transformers writes back (index_n_heads, index_head_dim,
 * index_block_size, index_topk_blocks, index_local_blocks, layer_types, mlp_layer_types). Every value
 * the runtime needs is checked for range here, so the model code can trust it. */
#ifndef WK_CONFIG_H
#define WK_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

#define WK_MAX_LAYERS 1024

enum wk_vision_act { WK_ACT_GELU = 0, WK_ACT_GELU_TANH = 1, WK_ACT_QUICK_GELU = 2 };

struct wk_text_config {
    int32_t vocab_size, hidden, n_layers, n_heads, n_kv, head_dim;
    int32_t rot_dim; /* rotated dims per head (head_dim * partial_rotary_factor) */
    double rope_theta;
    float rms_eps;
    int64_t max_pos;
    /* MLPs */
    int32_t dense_inter;  /* dense layers */
    int32_t expert_inter; /* each routed expert */
    int32_t shared_inter; /* shared_intermediate_size * n_shared_experts; 0 = no shared expert */
    int32_t n_experts, topk_experts;
    float routed_scale;
    int32_t use_routing_bias;
    float swiglu_alpha, swiglu_limit;
    /* MSA */
    int32_t idx_heads, idx_dim, block, topk_blocks, local_blocks;
    uint8_t layer_sparse[WK_MAX_LAYERS]; /* 1 = MSA attention */
    uint8_t layer_moe[WK_MAX_LAYERS];    /* 1 = MoE MLP */
    int32_t first_msa;                   /* -1 when none */
    int32_t eos[8], n_eos;
    int32_t tie_embeddings;
};

struct wk_vision_config {
    int32_t present;
    int32_t hidden, inter, n_layers, n_heads, head_dim, channels, patch, temporal, merge;
    float ln_eps;
    double rope_theta;
    int32_t act; /* enum wk_vision_act */
};

struct wk_config {
    char model_type[64];
    struct wk_text_config text;
    struct wk_vision_config vision;
    int32_t image_token_id, video_token_id; /* -1 when absent */
    int32_t proj_hidden;
    int32_t fp8_block[2]; /* quantization_config.weight_block_size, {0,0} when absent */
};

/** Parse config.json text (label names it in errors). */
int32_t wk_config_parse(const char *json, size_t len, const char *label, struct wk_config *c,
                        struct mm_err *err);
/** Read and parse a config.json file. */
int32_t wk_config_load(const char *path, struct wk_config *c, struct mm_err *err);

#endif
