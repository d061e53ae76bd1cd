/* PLACEHOLDER until the preprocessing work lands: every function refuses. */
#include <string.h>

#include "qwen2vl_internal.h"

int32_t qwen2vl_create(const struct mmgw_host_api *host, const struct mmgw_option *options, uint32_t n_options,
                  struct mmgw_plugin_instance **out, struct mmgw_error *err)
{
    *out = NULL;
    return host->set_error(err, MMGW_E_UNSUPPORTED, "not implemented yet");
}
void qwen2vl_destroy(struct mmgw_plugin_instance *inst) { (void)inst; }
int32_t qwen2vl_match_model_type(const char *model_type) { (void)model_type; return 0; }
const struct mmgw_vision_params *qwen2vl_vision_params(const struct mmgw_plugin_instance *inst) { return &inst->vision; }
int32_t qwen2vl_smart_resize(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height, uint32_t width,
                        uint32_t n_frames, uint32_t *out_height, uint32_t *out_width, struct mmgw_error *err)
{ return inst->host->set_error(err, MMGW_E_UNSUPPORTED, "not implemented yet"); }
int32_t qwen2vl_sample_frames(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps, uint32_t *indices,
                         uint32_t cap, uint32_t *n_out, struct mmgw_error *err)
{ return inst->host->set_error(err, MMGW_E_UNSUPPORTED, "not implemented yet"); }
uint64_t qwen2vl_num_placeholder_tokens(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t grid_t,
                                   int64_t grid_h, int64_t grid_w) { return 0; }
const char *qwen2vl_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind) { return NULL; }
int32_t qwen2vl_expand_media(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                        struct mmgw_seg_sink *sink, struct mmgw_error *err)
{ return inst->host->set_error(err, MMGW_E_UNSUPPORTED, "not implemented yet"); }
