/* Deliberately broken test plugins: one source, built once per defect (BROKEN_* defines one). Each one
 * starts from a complete, valid table and breaks exactly one thing the loader must refuse. */
#include <string.h>

#include <mmgw/plugin.h>

static int32_t t_create(const struct mmgw_host_api *host, const struct mmgw_option *options,
                        uint32_t n_options, struct mmgw_plugin_instance **out, struct mmgw_error *err)
{
    *out = NULL;
    return host->set_error(err, MMGW_E_UNSUPPORTED, "test plugin");
}
static void t_destroy(struct mmgw_plugin_instance *inst)
{
    (void)inst;
}
static int32_t t_match(const char *model_type)
{
    (void)model_type;
    return 0;
}
static const struct mmgw_vision_params *t_vision(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return NULL;
}
static int32_t t_resize(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height,
                        uint32_t width, uint32_t n_frames, uint32_t *out_height, uint32_t *out_width,
                        struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}
static int32_t t_sample(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps,
                        uint32_t *indices, uint32_t cap, uint32_t *n_out, struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}
static uint64_t t_tokens(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t t, int64_t h,
                         int64_t w)
{
    return 0;
}
static int32_t t_render(const struct mmgw_plugin_instance *inst, const char *request_json, uint64_t json_len,
                        struct mmgw_sink *out, uint32_t *media_order, uint32_t media_cap, uint32_t *n_media,
                        struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}
static const char *t_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    return "<m>";
}
static int32_t t_expand(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                        struct mmgw_seg_sink *sink, struct mmgw_error *err)
{
    return MMGW_E_UNSUPPORTED;
}
static const char *const t_stops[] = {NULL};
static const char *const *t_stop_tokens(const struct mmgw_plugin_instance *inst)
{
    return t_stops;
}

static const struct mmgw_plugin good = {
    .abi_major = MMGW_PLUGIN_ABI_MAJOR,
    .abi_minor = MMGW_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(struct mmgw_plugin),
    .name = "broken",
    .description = "a deliberately broken test plugin",
    .create = t_create,
    .destroy = t_destroy,
    .match_model_type = t_match,
    .vision_params = t_vision,
    .smart_resize = t_resize,
    .sample_frames = t_sample,
    .num_placeholder_tokens = t_tokens,
    .render_chat = t_render,
    .media_marker = t_marker,
    .expand_media = t_expand,
    .stop_tokens = t_stop_tokens,
};

static struct mmgw_plugin table;

static const struct mmgw_plugin *broken_table(void)
{
    table = good;
#if defined(BROKEN_MAJOR)
    table.abi_major = MMGW_PLUGIN_ABI_MAJOR + 1;
#elif defined(BROKEN_NEWER_MINOR)
    table.abi_minor = MMGW_PLUGIN_ABI_MINOR + 1;
#elif defined(BROKEN_SMALL_STRUCT)
    table.struct_size = 40;
#elif defined(BROKEN_NULL_MEMBER)
    table.smart_resize = NULL;
#elif defined(BROKEN_NULL_ENTRY)
    return NULL;
#elif defined(VALID_MINIMAL)
    /* valid: optional members (bos_token, parser_*) left NULL on purpose */
#else
#error "define one BROKEN_* (or VALID_MINIMAL)"
#endif
    return &table;
}

#if defined(BROKEN_NO_ENTRY)
/* Exports a differently named symbol: the loader must report the missing entry point. */
MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry_v0(const struct mmgw_host_api *host);
MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry_v0(const struct mmgw_host_api *host)
{
    (void)host;
    return broken_table();
}
#else
MMGW_PLUGIN_EXPORT const struct mmgw_plugin *mmgw_plugin_entry(const struct mmgw_host_api *host)
{
    (void)host;
    return broken_table();
}
#endif
