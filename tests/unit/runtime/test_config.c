/* config.json parsing: the released layout, the flat spellings, defaults and refusals. */
#include <string.h>

#include "mmgw_test.h"
#include "wk_config.h"

static const char *released =
    "{\"model_type\": \"minimax_m3_vl\", \"image_token_index\": 8195, \"video_token_index\": 8196,"
    " \"projector_hidden_size\": 128,"
    " \"text_config\": {\"vocab_size\": 8199, \"hidden_size\": 128, \"intermediate_size\": 64,"
    "  \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"head_dim\": 32,"
    "  \"rms_norm_eps\": 1e-06, \"num_experts_per_tok\": 2, \"num_local_experts\": 8,"
    "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5000000.0, "
    "\"partial_rotary_factor\": 0.5},"
    "  \"dense_intermediate_size\": 256, \"shared_intermediate_size\": 64, \"routed_scaling_factor\": 2.0,"
    "  \"rotary_dim\": 16, \"swiglu_alpha\": 1.702, \"swiglu_limit\": 7.0, \"eos_token_id\": null,"
    "  \"sparse_attention_config\": {\"use_sparse_attention\": true, \"sparse_num_index_heads\": 2,"
    "   \"sparse_index_dim\": 32, \"sparse_block_size\": 16, \"sparse_topk_blocks\": 4, "
    "\"sparse_local_block\": 1,"
    "   \"sparse_init_block\": 0, \"sparse_score_type\": \"max\", \"sparse_attention_freq\": [0, 1, 1, 1]},"
    "  \"moe_layer_freq\": [0, 1, 1, 1], \"scoring_func\": \"sigmoid\", \"use_routing_bias\": true},"
    " \"vision_config\": {\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
    "  \"num_attention_heads\": 4, \"num_channels\": 3, \"patch_size\": 14, \"temporal_patch_size\": 2,"
    "  \"spatial_merge_size\": 2, \"hidden_act\": \"gelu\", \"layer_norm_eps\": 1e-05,"
    "  \"rope_parameters\": {\"rope_type\": \"axial\", \"rope_theta\": 10000.0},"
    "  \"img_token_compression_config\": {\"spatial_merge_size\": 2, \"temporal_patch_size\": 2}}}";

static void test_released(void)
{
    struct wk_config c;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_config_parse(released, strlen(released), "cfg", &c, &err), MM_OK);
    const struct wk_text_config *t = &c.text;
    CHECK_STR(c.model_type, "minimax_m3_vl");
    CHECK_EQ_INT(t->vocab_size, 8199);
    CHECK_EQ_INT(t->hidden, 128);
    CHECK_EQ_INT(t->n_heads, 8);
    CHECK_EQ_INT(t->n_kv, 2);
    CHECK_EQ_INT(t->head_dim, 32);
    CHECK_EQ_INT(t->rot_dim, 16);
    CHECK_NEAR(t->rope_theta, 5e6, 0);
    CHECK_EQ_INT(t->idx_heads, 2);
    CHECK_EQ_INT(t->idx_dim, 32);
    CHECK_EQ_INT(t->block, 16);
    CHECK_EQ_INT(t->topk_blocks, 4);
    CHECK_EQ_INT(t->local_blocks, 1);
    CHECK_EQ_INT(t->layer_sparse[0], 0);
    CHECK_EQ_INT(t->layer_sparse[3], 1);
    CHECK_EQ_INT(t->layer_moe[0], 0);
    CHECK_EQ_INT(t->layer_moe[1], 1);
    CHECK_EQ_INT(t->first_msa, 1);
    CHECK_EQ_INT(t->n_experts, 8);
    CHECK_EQ_INT(t->topk_experts, 2);
    CHECK_EQ_INT(t->shared_inter, 64);
    CHECK_EQ_INT(t->dense_inter, 256);
    CHECK_EQ_INT(t->expert_inter, 64);
    CHECK_NEAR(t->routed_scale, 2.0, 0);
    CHECK_EQ_INT(t->use_routing_bias, 1);
    CHECK_EQ_INT(t->n_eos, 0);
    CHECK_EQ_INT(c.image_token_id, 8195);
    CHECK_EQ_INT(c.video_token_id, 8196);
    CHECK_EQ_INT(c.proj_hidden, 128);
    CHECK_EQ_INT(c.vision.present, 1);
    CHECK_EQ_INT(c.vision.head_dim, 16);
    CHECK_EQ_INT(c.vision.merge, 2);
    CHECK_EQ_INT(c.vision.temporal, 2);
    CHECK_NEAR(c.vision.rope_theta, 1e4, 0);
}

static void test_flat_spelling(void)
{
    /* the keys transformers writes back, strings for layer kinds, eos as a list */
    const char *j =
        "{\"model_type\": \"minimax_m3_vl\", \"text_config\": {\"vocab_size\": 100, \"hidden_size\": 16,"
        " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 8,"
        " \"rotary_dim\": 4, \"index_n_heads\": 1, \"index_head_dim\": 6, \"index_block_size\": 8,"
        " \"index_topk_blocks\": 3, \"index_local_blocks\": 2,"
        " \"layer_types\": [\"full_attention\", \"minimax_m3_sparse\", \"minimax_m3_sparse\"],"
        " \"mlp_layer_types\": [\"dense\", \"dense\", \"sparse\"], \"eos_token_id\": [7, 9],"
        " \"num_local_experts\": 4, \"num_experts_per_tok\": 2}}";
    struct wk_config c;
    struct mm_err err = {0};
    CHECK_EQ_INT(wk_config_parse(j, strlen(j), "flat", &c, &err), MM_OK);
    CHECK_EQ_INT(c.text.rot_dim, 4); /* no partial_rotary_factor: rotary_dim decides */
    CHECK_EQ_INT(c.text.idx_heads, 1);
    CHECK_EQ_INT(c.text.idx_dim, 6);
    CHECK_EQ_INT(c.text.block, 8);
    CHECK_EQ_INT(c.text.topk_blocks, 3);
    CHECK_EQ_INT(c.text.local_blocks, 2);
    CHECK_EQ_INT(c.text.layer_sparse[0], 0);
    CHECK_EQ_INT(c.text.layer_sparse[1], 1);
    CHECK_EQ_INT(c.text.layer_moe[1], 0);
    CHECK_EQ_INT(c.text.layer_moe[2], 1);
    CHECK_EQ_INT(c.text.first_msa, 1);
    CHECK_EQ_INT(c.text.n_eos, 2);
    CHECK_EQ_INT(c.text.eos[1], 9);
    CHECK_EQ_INT(c.vision.present, 0);
    /* the reference's defaults for what is left out */
    CHECK_EQ_INT(c.image_token_id, 200025);
    CHECK_NEAR(c.text.swiglu_limit, 7.0, 0);
    CHECK_NEAR(c.text.rms_eps, 1e-6, 1e-12);

    /* sparse_attention_config overrides the flat keys, as the reference config class does */
    const char *j2 =
        "{\"text_config\": {\"vocab_size\": 10, \"hidden_size\": 8, \"num_hidden_layers\": 1,"
        " \"num_attention_heads\": 2, \"head_dim\": 4, \"index_block_size\": 8, \"index_n_heads\": 2, "
        "\"moe_layer_freq\": [0],"
        " \"sparse_attention_config\": {\"sparse_block_size\": 32, \"sparse_attention_freq\": [1]}}}";
    CHECK_EQ_INT(wk_config_parse(j2, strlen(j2), "j2", &c, &err), MM_OK);
    CHECK_EQ_INT(c.text.block, 32);
    CHECK_EQ_INT(c.text.n_kv, 2); /* num_key_value_heads defaults to the head count */
    CHECK_EQ_INT(c.text.rot_dim, 4);
}

static void expect_error(const char *json, int32_t code, const char *needle)
{
    struct wk_config c;
    struct mm_err err = {0};
    int32_t rc = wk_config_parse(json, strlen(json), "bad.json", &c, &err);
    CHECK_EQ_INT(rc, code);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'", err.msg, needle);
}

static void test_refusals(void)
{
    expect_error("{\"text_config\": ", MM_FORMAT, "bad.json");
    expect_error("[1, 2]", MM_FORMAT, "not a JSON object");
    expect_error("{\"model_type\": \"llama\"}", MM_UNSUPPORTED, "llama");
    expect_error("{\"text_config\": {\"num_attention_heads\": 6, \"num_key_value_heads\": 4}}", MM_FORMAT,
                 "num_key_value_heads");
    expect_error("{\"text_config\": {\"head_dim\": 7, \"num_hidden_layers\": 1}}", MM_FORMAT, "head_dim");
    expect_error("{\"text_config\": {\"hidden_size\": -5}}", MM_FORMAT, "hidden_size");
    expect_error("{\"text_config\": {\"hidden_size\": \"big\"}}", MM_FORMAT, "hidden_size");
    expect_error("{\"text_config\": {\"num_hidden_layers\": 2, \"scoring_func\": \"softmax\"}}",
                 MM_UNSUPPORTED, "softmax");
    expect_error("{\"text_config\": {\"num_hidden_layers\": 2, \"moe_layer_freq\": [1]}}", MM_FORMAT,
                 "moe_layer_freq");
    expect_error("{\"text_config\": {\"num_hidden_layers\": 1, \"layer_types\": [\"sliding_attention\"]}}",
                 MM_UNSUPPORTED, "sliding_attention");
    expect_error("{\"text_config\": {\"num_hidden_layers\": 1, \"sparse_attention_config\": "
                 "{\"sparse_topk_blocks\": 0}}}",
                 MM_FORMAT, "sparse_topk_blocks");
    expect_error("{\"text_config\": {\"num_hidden_layers\": 1}, \"vision_config\": {\"hidden_size\": 10,"
                 " \"num_attention_heads\": 3}}",
                 MM_FORMAT, "vision");
}

int main(void)
{
    test_released();
    test_flat_spelling();
    test_refusals();
    return test_done();
}
