/* A random-weight MiniMax-M3 checkpoint in the released format (config.json + model.safetensors), for demos
 * and tests on machines without real weights. Shapes default to a tiny model (the m3-tiny-a layout); every
 * size can be overridden, so tests can build checkpoints of other shapes. */
#ifndef MKDEMO_H
#define MKDEMO_H

#include <stdint.h>

#include "mm_status.h"

struct mk_demo_opts {
    uint64_t seed;
    int32_t dtype; /* MM_DT_BF16 (default), MM_DT_F16 or MM_DT_F32 */
    /* text */
    int32_t vocab, hidden, layers, heads, kv_heads, head_dim, rot_dim;
    int32_t inter, dense_inter, shared_inter, experts, topk_experts;
    int32_t idx_heads, idx_dim, block, topk_blocks, local_blocks;
    char attn_pattern[64]; /* per layer: 'd' dense attention, 's' MSA; default "dsss" */
    char mlp_pattern[64];  /* per layer: 'd' dense MLP, 'm' MoE; default "dmmm" */
    float routed_scale;
    int32_t image_token, video_token, eos_token;
    /* vision (vis_layers 0 and no_vision 1 = a text-only checkpoint) */
    int32_t no_vision;
    int32_t vis_hidden, vis_inter, vis_layers, vis_heads, patch, temporal, merge, proj_hidden;
};

/** Defaults: the m3-tiny-a shapes, vocabulary 8199 with image 8195 and video 8196. */
void mk_demo_defaults(struct mk_demo_opts *o);

/** Take vocab size, image/video and eos ids from a HF tokenizer.json (model.vocab + added_tokens: ids of
 * "]<]image[>[", "]<]video[>[" and "[e~[" ). */
int32_t mk_demo_use_tokenizer(struct mk_demo_opts *o, const char *tokenizer_json, struct mm_err *err);

/** Set one size by name ("hidden=96", "attn_pattern=dss"...); the names are the struct members. */
int32_t mk_demo_set(struct mk_demo_opts *o, const char *assignment, struct mm_err *err);

/** Write dir/config.json and dir/model.safetensors (dir must exist). */
int32_t mk_demo_write(const char *dir, const struct mk_demo_opts *o, struct mm_err *err);

#endif
