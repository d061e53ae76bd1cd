/* Qwen2-VL: the plugin's entry table. */
#include "qwen2vl_internal.h"

static const struct mmgw_plugin qwen2vl_plugin = {
    .abi_major = MMGW_PLUGIN_ABI_MAJOR,
    .abi_minor = MMGW_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct mmgw_plugin),
    .name = "qwen2vl",
    .description = "Qwen2-VL (qwen2_vl): vision rules, chat template",
    .create = qwen2vl_create,
    .destroy = qwen2vl_destroy,
    .match_model_type = qwen2vl_match_model_type,
    .vision_params = qwen2vl_vision_params,
    .smart_resize = qwen2vl_smart_resize,
    .sample_frames = qwen2vl_sample_frames,
    .num_placeholder_tokens = qwen2vl_num_placeholder_tokens,
    .render_chat = qwen2vl_render_chat,
    .media_marker = qwen2vl_media_marker,
    .expand_media = qwen2vl_expand_media,
    .stop_tokens = qwen2vl_stop_tokens,
    .bos_token = qwen2vl_bos_token,
    .parser_create = qwen2vl_parser_create,
    .parser_feed = qwen2vl_parser_feed,
    .parser_finish = qwen2vl_parser_finish,
    .parser_destroy = qwen2vl_parser_destroy,
};

MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry(const struct mmgw_host_api *host)
{
    (void)host;
    return &qwen2vl_plugin;
}
