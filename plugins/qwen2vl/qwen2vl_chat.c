/* Qwen2-VL chat template: ChatML with a default system prompt, as the checkpoint's chat_template.json
 * (Qwen/Qwen2-VL-7B-Instruct) renders it under HF semantics. Sources and the media-marker convention are in
 * docs/design/chat.md.
 *
 * Media parts write only the bare pad marker (qwen2vl_media_marker: `<|image_pad|>` / `<|video_pad|>`);
 * qwen2vl_expand_media writes `<|vision_start|>` + N pads + `<|vision_end|>` around it, so the tokens
 * equal the template's `<|vision_start|><|image_pad|><|vision_end|>` after the processor's expansion. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "qwen2vl_internal.h"

struct qbuf {
    const struct mmgw_host_api *host;
    char *p;
    size_t len, cap;
    int oom;
};

static void put(struct qbuf *b, const char *s, size_t n)
{
    if (b->oom || n == 0) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = 1;
                return;
            }
            cap *= 2;
        }
        char *p = b->host->alloc(cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        if (b->len) memcpy(p, b->p, b->len);
        b->host->free(b->p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(struct qbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

static int str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* Jinja truthiness of a kwarg (NULL = undefined). */
static int truthy(const json_t *v)
{
    if (!v) return 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return json_object_size(v) > 0;
    case JSON_ARRAY:
        return json_array_size(v) > 0;
    case JSON_STRING:
        return json_string_length(v) > 0;
    case JSON_INTEGER:
        return json_integer_value(v) != 0;
    case JSON_REAL:
        return json_real_value(v) != 0.0;
    case JSON_TRUE:
        return 1;
    default:
        return 0;
    }
}

/* Control characters in an error message (jansson quotes the input) would break it over lines. */
static const char *one_line(char *s)
{
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return s;
}

struct qrender {
    const struct mmgw_plugin_instance *inst;
    struct qbuf out;
    uint32_t *media_order;
    uint32_t media_cap, n_media;
    unsigned image_count, video_count;
    int add_vision_id;
    struct mmgw_error *err;
};

static int32_t put_media(struct qrender *r, const json_t *part, int32_t kind, size_t msg, size_t idx)
{
    const struct mmgw_host_api *host = r->inst->host;
    json_t *k = json_object_get(part, "mmgw_media");
    if (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > (json_int_t)UINT32_MAX)
        return host->set_error(r->err, MMGW_E_INVALID,
                               "messages[%zu].content[%zu]: media part without a valid mmgw_media index", msg,
                               idx);
    if (r->n_media >= r->media_cap)
        return host->set_error(r->err, MMGW_E_TOO_LARGE, "request: more media parts than room for (%u)",
                               (unsigned)r->media_cap);
    const char *marker = qwen2vl_media_marker(r->inst, kind);
    if (!marker)
        return host->set_error(r->err, MMGW_E_ERROR, "qwen2vl: no media marker for kind %d", (int)kind);
    if (r->add_vision_id) {
        char label[40];
        if (kind == MMGW_MEDIA_IMAGE)
            snprintf(label, sizeof(label), "Picture %u: ", ++r->image_count);
        else
            snprintf(label, sizeof(label), "Video %u: ", ++r->video_count);
        puts_(&r->out, label);
    }
    puts_(&r->out, marker);
    r->media_order[r->n_media++] = (uint32_t)json_integer_value(k);
    return MMGW_OK;
}

static int32_t put_content(struct qrender *r, const json_t *content, size_t msg)
{
    const struct mmgw_host_api *host = r->inst->host;
    if (json_is_string(content)) {
        put(&r->out, json_string_value(content), json_string_length(content));
        return MMGW_OK;
    }
    if (!content || json_is_null(content)) return MMGW_OK; /* e.g. an assistant turn with only tool calls */
    if (!json_is_array(content))
        return host->set_error(r->err, MMGW_E_INVALID,
                               "messages[%zu].content must be a string, an array of parts or null", msg);
    for (size_t i = 0; i < json_array_size(content); i++) {
        const json_t *part = json_array_get(content, i);
        if (!json_is_object(part))
            return host->set_error(r->err, MMGW_E_INVALID, "messages[%zu].content[%zu] must be an object",
                                   msg, i);
        const json_t *type = json_object_get(part, "type");
        int32_t rc = MMGW_OK;
        if (str_eq(type, "image") || json_object_get(part, "image") || json_object_get(part, "image_url")) {
            rc = put_media(r, part, MMGW_MEDIA_IMAGE, msg, i);
        } else if (str_eq(type, "video") || json_object_get(part, "video")) {
            rc = put_media(r, part, MMGW_MEDIA_VIDEO, msg, i);
        } else if (json_object_get(part, "text")) {
            const json_t *text = json_object_get(part, "text");
            if (!json_is_string(text))
                return host->set_error(r->err, MMGW_E_INVALID,
                                       "messages[%zu].content[%zu].text must be a string", msg, i);
            put(&r->out, json_string_value(text), json_string_length(text));
        }
        if (rc != MMGW_OK) return rc;
    }
    return MMGW_OK;
}

static int32_t render(struct qrender *r, const json_t *req)
{
    const struct mmgw_host_api *host = r->inst->host;
    if (!json_is_object(req))
        return host->set_error(r->err, MMGW_E_INVALID, "request: the body must be a JSON object");
    const json_t *messages = json_object_get(req, "messages");
    if (!json_is_array(messages))
        return host->set_error(r->err, MMGW_E_INVALID, "messages: must be an array");
    const json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs))
        return host->set_error(r->err, MMGW_E_INVALID, "chat_template_kwargs: must be an object");
    r->add_vision_id = truthy(json_object_get(kwargs, "add_vision_id"));
    const json_t *agp = json_object_get(req, "add_generation_prompt");
    int add_generation_prompt = agp ? truthy(agp) : 1;

    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *msg = json_array_get(messages, i);
        if (!json_is_object(msg))
            return host->set_error(r->err, MMGW_E_INVALID, "messages[%zu]: a message must be an object", i);
        const json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role))
            return host->set_error(r->err, MMGW_E_INVALID, "messages[%zu]: role must be a string", i);
        if (i == 0 && !str_eq(role, "system"))
            puts_(&r->out, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n");
        puts_(&r->out, "<|im_start|>");
        put(&r->out, json_string_value(role), json_string_length(role));
        puts_(&r->out, "\n");
        int32_t rc = put_content(r, json_object_get(msg, "content"), i);
        if (rc != MMGW_OK) return rc;
        puts_(&r->out, "<|im_end|>\n");
    }
    if (add_generation_prompt) puts_(&r->out, "<|im_start|>assistant\n");
    return r->out.oom ? host->set_error(r->err, MMGW_E_NOMEM, "qwen2vl render_chat: out of memory") : MMGW_OK;
}

int32_t qwen2vl_render_chat(const struct mmgw_plugin_instance *inst, const char *request_json,
                            uint64_t json_len, struct mmgw_sink *out, uint32_t *media_order,
                            uint32_t media_cap, uint32_t *n_media, struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    if (n_media) *n_media = 0;
    if (!request_json || !out || !out->append || !n_media || (media_cap && !media_order))
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl render_chat: missing argument");
    json_error_t jerr;
    json_t *req = json_loadb(request_json, (size_t)json_len, JSON_ALLOW_NUL, &jerr);
    if (!req)
        return host->set_error(err, MMGW_E_INVALID, "request: invalid JSON at line %d column %d: %s",
                               jerr.line, jerr.column, one_line(jerr.text));
    struct qrender r;
    memset(&r, 0, sizeof(r));
    r.inst = inst;
    r.out.host = host;
    r.media_order = media_order;
    r.media_cap = media_cap;
    r.err = err;
    int32_t rc = render(&r, req);
    if (rc == MMGW_OK) {
        rc = out->append(out->ctx, r.out.p ? r.out.p : "", r.out.len);
        if (rc != MMGW_OK)
            rc = host->set_error(err, rc, "render_chat: the output sink refused %zu bytes", r.out.len);
    }
    *n_media = rc == MMGW_OK ? r.n_media : 0;
    host->free(r.out.p);
    json_decref(req);
    return rc;
}

static const char *const qwen2vl_stops[] = {"<|im_end|>", "<|endoftext|>", NULL};

const char *const *qwen2vl_stop_tokens(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return qwen2vl_stops;
}

const char *qwen2vl_bos_token(const struct mmgw_plugin_instance *inst)
{
    (void)inst;
    return NULL; /* Qwen2 adds no BOS (add_bos_token is false) */
}
