/* The M3 weights as backend handles, loaded by their released checkpoint names. */
#ifndef WK_MODEL_H
#define WK_MODEL_H

#include <stdint.h>

#include "wk_backend.h"
#include "wk_ckpt.h"
#include "wk_config.h"

struct wk_layer_w {
    struct wk_weight *in_norm, *post_norm;
    struct wk_weight *q, *k, *v, *o, *q_norm, *k_norm;
    struct wk_weight *iq, *ik, *iq_norm, *ik_norm; /* MSA layers */
    struct wk_weight *gate, *up, *down;            /* dense MLP layers */
    struct wk_weight *router, *router_bias;        /* MoE layers */
    struct wk_weight **w1, **w2, **w3;             /* [n_experts] */
    struct wk_weight *sh_gate, *sh_up, *sh_down;   /* shared expert (NULL when shared_inter is 0) */
};

struct wk_vlayer_w {
    struct wk_weight *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    struct wk_weight *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *o_w, *o_b;
    struct wk_weight *fc1_w, *fc1_b, *fc2_w, *fc2_b;
};

struct wk_model_w {
    struct wk_weight *embed, *lm_head, *final_norm;
    struct wk_layer_w *layers;
    int32_t n_layers;
    int32_t lm_head_shared; /* tied to the embedding */
    /* vision (absent when the checkpoint has none) */
    int32_t has_vision;
    struct wk_weight *patch, *pre_ln_w, *pre_ln_b;
    struct wk_vlayer_w *vlayers;
    int32_t n_vlayers;
    struct wk_weight *proj1_w, *proj1_b, *proj2_w, *proj2_b, *merge1_w, *merge1_b, *merge2_w, *merge2_b;
    int32_t src_dtype; /* dtype of the embedding as stored (for reports) */
    int64_t bytes;     /* what the backend keeps for all weights */
};

/** Load every weight the config calls for; errors name the tensor and the file. */
int32_t wk_model_load(const struct wk_config *cfg, const struct wk_ckpt *ck, const struct wk_be *be,
                      struct wk_model_w *m, struct mm_err *err);
void wk_model_free(const struct wk_be *be, struct wk_model_w *m);

#endif
