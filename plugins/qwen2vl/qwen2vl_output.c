/* Qwen2-VL output: no reasoning or tool-call format to parse, so no parser; the host passes text through. */
#include "qwen2vl_internal.h"

int32_t qwen2vl_parser_create(const struct mmgw_plugin_instance *inst, const char *request_json,
                              uint64_t json_len, const char *prompt_text, uint64_t prompt_len,
                              struct mmgw_output_parser **out, struct mmgw_error *err)
{
    (void)inst, (void)request_json, (void)json_len, (void)prompt_text, (void)prompt_len, (void)err;
    if (out) *out = NULL;
    return MMGW_OK;
}

/* Never called: parser_create hands out no parser. */
int32_t qwen2vl_parser_feed(struct mmgw_output_parser *p, const char *text, uint64_t len,
                            struct mmgw_out_sink *sink, struct mmgw_error *err)
{
    (void)p, (void)text, (void)len, (void)sink, (void)err;
    return MMGW_E_UNSUPPORTED;
}

int32_t qwen2vl_parser_finish(struct mmgw_output_parser *p, struct mmgw_out_sink *sink,
                              struct mmgw_error *err)
{
    (void)p, (void)sink, (void)err;
    return MMGW_E_UNSUPPORTED;
}

void qwen2vl_parser_destroy(struct mmgw_output_parser *p)
{
    (void)p;
}
