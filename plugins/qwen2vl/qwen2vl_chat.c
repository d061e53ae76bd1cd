/* PLACEHOLDER until the chat-template work lands: every function refuses. */
#include "qwen2vl_internal.h"

int32_t qwen2vl_render_chat(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                       struct mmgw_sink *out, uint32_t *media_order, uint32_t media_cap, uint32_t *n_media,
                       struct mmgw_error *err)
{ return inst->host->set_error(err, MMGW_E_UNSUPPORTED, "not implemented yet"); }
static const char *const no_stop[] = {NULL};
const char *const *qwen2vl_stop_tokens(const struct mmgw_plugin_instance *inst) { return no_stop; }
const char *qwen2vl_bos_token(const struct mmgw_plugin_instance *inst) { return NULL; }
int32_t qwen2vl_parser_create(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                         const char *prompt_text, uint64_t prompt_len, struct mmgw_output_parser **out,
                         struct mmgw_error *err)
{ *out = NULL; return MMGW_OK; }
int32_t qwen2vl_parser_feed(struct mmgw_output_parser *p, const char *text, uint64_t len, struct mmgw_out_sink *sink,
                       struct mmgw_error *err) { return MMGW_E_UNSUPPORTED; }
int32_t qwen2vl_parser_finish(struct mmgw_output_parser *p, struct mmgw_out_sink *sink, struct mmgw_error *err) { return MMGW_E_UNSUPPORTED; }
void qwen2vl_parser_destroy(struct mmgw_output_parser *p) { (void)p; }
