/* MiniMax-M3: the plugin's entry table. */
#include "m3_internal.h"

static const struct mmgw_plugin m3_plugin = {
    .abi_major = MMGW_PLUGIN_ABI_MAJOR,
    .abi_minor = MMGW_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct mmgw_plugin),
    .name = "m3",
    .description = "MiniMax-M3 (minimax_m3_vl): vision rules, chat template, reasoning and tool-call parsing",
    .create = m3_create,
    .destroy = m3_destroy,
    .match_model_type = m3_match_model_type,
    .vision_params = m3_vision_params,
    .smart_resize = m3_smart_resize,
    .sample_frames = m3_sample_frames,
    .num_placeholder_tokens = m3_num_placeholder_tokens,
    .render_chat = m3_render_chat,
    .media_marker = m3_media_marker,
    .expand_media = m3_expand_media,
    .stop_tokens = m3_stop_tokens,
    .bos_token = m3_bos_token,
    .parser_create = m3_parser_create,
    .parser_feed = m3_parser_feed,
    .parser_finish = m3_parser_finish,
    .parser_destroy = m3_parser_destroy,
    .parser_tokens = m3_parser_tokens,
};

MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry(const struct mmgw_host_api *host)
{
    (void)host;
    return &m3_plugin;
}
