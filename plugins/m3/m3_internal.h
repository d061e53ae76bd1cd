/* Internal interface of the M3 plugin: the entry table (m3_plugin.c) wires functions implemented by
 * m3_vision.c (constants, resize, frame sampling, placeholders, media expansion) and m3_chat.c /
 * m3_output.c (chat template, stop tokens, reasoning and tool-call parsing). */
#ifndef M3_INTERNAL_H
#define M3_INTERNAL_H

#include <mmgw/plugin.h>

struct mmgw_plugin_instance {
    const struct mmgw_host_api *host;
    struct mmgw_vision_params vision;
    uint64_t max_long_side; /* opt-in long-side mode (plugin_option max_long_side_pixel); 0 = off */
};

/* m3_vision.c */
int32_t m3_create(const struct mmgw_host_api *host, const struct mmgw_option *options, uint32_t n_options,
                  struct mmgw_plugin_instance **out, struct mmgw_error *err);
void m3_destroy(struct mmgw_plugin_instance *inst);
int32_t m3_match_model_type(const char *model_type);
const struct mmgw_vision_params *m3_vision_params(const struct mmgw_plugin_instance *inst);
int32_t m3_smart_resize(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height,
                        uint32_t width, uint32_t n_frames, uint32_t *out_height, uint32_t *out_width,
                        struct mmgw_error *err);
int32_t m3_sample_frames(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps,
                         uint32_t *indices, uint32_t cap, uint32_t *n_out, struct mmgw_error *err);
uint64_t m3_num_placeholder_tokens(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t grid_t,
                                   int64_t grid_h, int64_t grid_w);
const char *m3_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind);
int32_t m3_expand_media(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                        struct mmgw_seg_sink *sink, struct mmgw_error *err);

/* m3_chat.c */
int32_t m3_render_chat(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                       struct mmgw_sink *out, uint32_t *media_order, uint32_t media_cap, uint32_t *n_media,
                       struct mmgw_error *err);
const char *const *m3_stop_tokens(const struct mmgw_plugin_instance *inst);
const char *m3_bos_token(const struct mmgw_plugin_instance *inst);

/* m3_output.c */
int32_t m3_parser_create(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                         const char *prompt_text, uint64_t prompt_len, struct mmgw_output_parser **out,
                         struct mmgw_error *err);
int32_t m3_parser_feed(struct mmgw_output_parser *p, const char *text, uint64_t len,
                       struct mmgw_out_sink *sink, struct mmgw_error *err);
int32_t m3_parser_finish(struct mmgw_output_parser *p, struct mmgw_out_sink *sink, struct mmgw_error *err);
void m3_parser_destroy(struct mmgw_output_parser *p);
const char *const *m3_parser_tokens(const struct mmgw_plugin_instance *inst);

#endif
