/* POST /v1/chat/completions: validate the messages, collect the media parts in order and normalise them
 * to {"type":"image"|"video","mmgw_media":K} (what plugins' render_chat expects, as vLLM's chat_utils
 * does before templating), render the prompt through the plugin, then run the pipeline. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gw_api_dataurl.h"
#include "gw_api_fileurl.h"
#include "gw_api_internal.h"
#include "mm_json.h"

/* The URL of a media part, or NULL when the field is missing or not a string / {"url": string}. */
static json_t *url_of(json_t *v)
{
    if (json_is_string(v)) return v;
    if (json_is_object(v)) {
        json_t *u = json_object_get(v, "url");
        if (json_is_string(u)) return u;
    }
    return NULL;
}

/* Add media item K for the URL string `src` (a reference is taken). 0 or -1 with e. */
static int add_media(struct gw_api_req *r, int32_t kind, json_t *src, const char *param,
                     struct gw_api_error *e)
{
    const struct gw_model_conf *mc = r->model->conf;
    if (!r->model->marker[kind])
        return gw_api_fail(e, 400, param, "model %s does not accept %s input", r->model->name,
                           kind ? "video" : "image");
    if (r->n_media >= (size_t)mc->max_media_per_request)
        return gw_api_fail(e, 400, param, "too many media items: model %s accepts at most %d per request",
                           r->model->name, mc->max_media_per_request);
    const char *url = json_string_value(src);
    size_t len = json_string_length(src);
    const struct gw_media_conf *media = &r->st->config->media;
    const char *root = r->st->local_media_real;
    const char *accepted = root ? "http, https, data and file" : "http, https and data";
    if (gw_api_is_data_url(url, len)) {
        if (!media->allow_data_urls)
            return gw_api_fail(e, 400, param,
                               "%s: data: URLs are disabled on this server (allow_data_urls off)", param);
    } else if (gw_api_is_file_url(url, len)) {
        if (!root)
            return gw_api_fail(e, 400, param,
                               "%s: file: URLs are disabled on this server (no allowed_local_media_path)",
                               param);
        /* refused here, before any work, when malformed or plainly outside the folder; the pool reads it */
        char *path = NULL;
        struct mm_err me;
        if (gw_api_file_url_path(url, len, &path, &me) != MM_OK)
            return gw_api_fail(e, me.code == MM_NOMEM ? 503 : 400, param, "%s: %s", param, me.msg);
        bool inside = gw_api_file_beneath(root, path) || gw_api_file_beneath(media->local_media_path, path);
        free(path);
        if (!inside)
            return gw_api_fail(e, 400, param,
                               "%s: the file is outside the folder this server reads media from", param);
    } else if (!(len >= 7 && strncasecmp(url, "http://", 7) == 0) &&
               !(len >= 8 && strncasecmp(url, "https://", 8) == 0)) {
        const char *colon = memchr(url, ':', len < 32 ? len : 32);
        if (!colon) /* a file path or a bare name: nothing is read from the server's disk */
            return gw_api_fail(e, 400, param, "%s: \"%.40s%s\" is not a URL (only %s URLs are accepted)",
                               param, url, len > 40 ? "..." : "", accepted);
        return gw_api_fail(e, 400, param, "%s: unsupported URL scheme \"%.*s\" (only %s are accepted)", param,
                           (int)(colon - url), url, accepted);
    }
    if (!r->media) {
        r->media = calloc((size_t)mc->max_media_per_request, sizeof *r->media);
        if (!r->media) return gw_api_fail(e, 503, NULL, "out of memory");
    }
    struct gw_api_media *m = &r->media[r->n_media++];
    m->kind = kind;
    m->src = json_incref(src);
    m->url = url;
    m->url_len = len;
    snprintf(m->param, sizeof m->param, "%s", param);
    return 0;
}

/* Which media kind a part is, and where its URL sits; -1 for a part that is not media. */
static int32_t part_media(json_t *part, const char *type, json_t **url, const char **field)
{
    static const char *const image_keys[] = {"image_url", "image", "url"};
    static const char *const video_keys[] = {"video_url", "video", "url"};
    int32_t kind;
    if (strcmp(type, "image_url") == 0 || strcmp(type, "image") == 0)
        kind = MMGW_MEDIA_IMAGE;
    else if (strcmp(type, "video_url") == 0 || strcmp(type, "video") == 0)
        kind = MMGW_MEDIA_VIDEO;
    else
        return -1;
    const char *const *keys = kind == MMGW_MEDIA_IMAGE ? image_keys : video_keys;
    *url = NULL;
    *field = keys[0];
    for (int i = 0; i < 3 && !*url; i++) {
        json_t *v = json_object_get(part, keys[i]);
        if (v) {
            *url = url_of(v);
            *field = keys[i];
        }
    }
    return kind;
}

int gw_api_chat_collect(struct gw_api_req *r, struct gw_api_error *e)
{
    json_t *msgs = json_object_get(r->body, "messages");
    if (!msgs) return gw_api_fail(e, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return gw_api_fail(e, 400, "messages", "'messages' must be a non-empty array");
    size_t i;
    json_t *msg;
    char param[96];
    json_array_foreach(msgs, i, msg)
    {
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg)) return gw_api_fail(e, 400, param, "'%s' must be an object", param);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_string(role)) return gw_api_fail(e, 400, param, "'%s.role' must be a string", param);
        json_t *content = json_object_get(msg, "content");
        if (!json_is_array(content)) continue;
        bool is_tool = strcmp(json_string_value(role), "tool") == 0;
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part)
        {
            snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
            if (!json_is_object(part)) continue; /* a bare string part: the template takes it as text */
            json_t *type = json_object_get(part, "type");
            const char *t = json_is_string(type) ? json_string_value(type) : NULL;
            if (!t) { /* vLLM also accepts {"image_url": ...} without a type */
                t = json_object_get(part, "image_url")   ? "image_url"
                    : json_object_get(part, "video_url") ? "video_url"
                                                         : NULL;
                if (!t) continue;
            }
            if (strcmp(t, "input_audio") == 0 || strcmp(t, "audio_url") == 0 || strcmp(t, "file") == 0)
                return gw_api_fail(e, 400, param, "'%s' has type \"%s\", which this server does not accept",
                                   param, t);
            json_t *url;
            const char *field;
            int32_t kind = part_media(part, t, &url, &field);
            if (kind < 0) {
                /* a part the template would silently drop (an "input_image" of the Responses API, a typo) is
                 * refused, as vLLM does: an image that vanishes is worse than a 400. Tool results keep their
                 * own part shapes ({"output": ...}). */
                if (strcmp(t, "text") != 0 && strcmp(t, "refusal") != 0 && !is_tool)
                    return gw_api_fail(e, 400, param,
                                       "'%s' has type \"%s\", which this server does not accept (text, "
                                       "image_url, video_url)",
                                       param, t);
                continue;
            }
            if (!url)
                return gw_api_fail(e, 400, param,
                                   "'%s' (type \"%s\") needs a URL in '%s' (a string or {\"url\": ...})",
                                   param, t, field);
            char p2[128];
            snprintf(p2, sizeof p2, "%.90s.%.30s", param, field);
            if (add_media(r, kind, url, p2, e)) return -1;
            json_t *norm = json_pack("{s:s, s:I}", "type", kind ? "video" : "image", "mmgw_media",
                                     (json_int_t)(r->n_media - 1));
            if (!norm || json_array_set_new(content, j, norm))
                return gw_api_fail(e, 503, NULL, "out of memory");
        }
    }
    return 0;
}

/* multi_modal_data (vLLM's offline name): {"image": URL | [URL...], "video": ...}; a URL is a string or
 * {"url": string}. The i-th marker of a kind in the prompt takes the i-th item of that kind. */
int gw_api_completion_collect(struct gw_api_req *r, struct gw_api_error *e)
{
    json_t *mmd = json_object_get(r->body, "multi_modal_data");
    if (!mmd || json_is_null(mmd)) return 0;
    if (!json_is_object(mmd))
        return gw_api_fail(e, 400, "multi_modal_data", "'multi_modal_data' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(mmd, key, v)
    {
        int32_t kind = strcmp(key, "image") == 0   ? MMGW_MEDIA_IMAGE
                       : strcmp(key, "video") == 0 ? MMGW_MEDIA_VIDEO
                                                   : -1;
        if (kind < 0)
            return gw_api_fail(e, 400, "multi_modal_data",
                               "'multi_modal_data.%s' is not supported (image, video)", key);
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        for (size_t i = 0; i < n; i++) {
            json_t *item = json_is_array(v) ? json_array_get(v, i) : v;
            char param[96];
            snprintf(param, sizeof param,
                     json_is_array(v) ? "multi_modal_data.%s[%zu]" : "multi_modal_data.%s", key, i);
            json_t *url = url_of(item);
            if (!url) return gw_api_fail(e, 400, param, "'%s' must be a URL string or {\"url\": ...}", param);
            if (add_media(r, kind, url, param, e)) return -1;
            r->media[r->n_media - 1].rendered = true; /* every item is used: markers are matched later */
        }
    }
    return 0;
}

/* The parameter a template error is about: the plugin's messages start with the offending field's path
 * ("tools[0]: ...", "messages[2]: ..."); tool definitions are their own parameter. */
static const char *template_error_param(const char *msg)
{
    return strncmp(msg, "tools", 5) == 0 && (msg[5] == '[' || msg[5] == ':' || msg[5] == '.') ? "tools"
                                                                                              : "messages";
}

static int32_t sink_append(void *ctx, const char *data, uint64_t len)
{
    return mm_buf_append(ctx, data, (size_t)len) ? MMGW_E_NOMEM : MMGW_OK;
}

int gw_api_chat_prepare(struct gw_api_req *r, struct gw_api_error *e)
{
    r->chat_prompt = true;
    if (gw_api_chat_collect(r, e)) return -1;
    int64_t t0 = mm_now_ns();
    if (r->n_media == 0 && r->http->body && r->kind == GW_API_CHAT) {
        /* nothing was rewritten: the body as received (less a BOM) is what the plugin expects */
        r->norm = gw_api_body_text(r->http, &r->norm_len);
    } else {
        r->norm_json = mm_json_dumps(r->body, JSON_COMPACT); /* free()d: not json_dumps */
        if (!r->norm_json) return gw_api_fail(e, 503, NULL, "out of memory");
        r->norm = r->norm_json;
        r->norm_len = strlen(r->norm_json);
    }
    if (r->n_media && !(r->media_order = calloc(r->n_media, sizeof *r->media_order)))
        return gw_api_fail(e, 503, NULL, "out of memory");
    struct mmgw_sink sink = {.ctx = &r->prompt, .append = sink_append};
    struct mmgw_error perr;
    mm_err_clear(&perr.e);
    int32_t rc = r->model->vt->render_chat(r->model->inst, r->norm, r->norm_len, &sink, r->media_order,
                                           (uint32_t)r->n_media, &r->n_order, &perr);
    if (rc != MMGW_OK) {
        if (!perr.e.msg[0]) snprintf(perr.e.msg, sizeof perr.e.msg, "the chat template failed (%d)", (int)rc);
        perr.e.code = rc;
        return gw_api_fail_mm(e, &perr.e, template_error_param(perr.e.msg));
    }
    for (uint32_t k = 0; k < r->n_order; k++)
        if (r->media_order[k] < r->n_media) r->media[r->media_order[k]].rendered = true;
    r->tokenize_ns += (uint64_t)(mm_now_ns() - t0);
    return 0;
}

static void chat_parsed(struct gw_api_req *r)
{
    struct gw_api_error e = {0};
    if (gw_api_params_parse(r->body, GW_API_CHAT, r->model->vocab, &r->p, &e) || gw_api_chat_prepare(r, &e)) {
        gw_api_req_fail(r, &e);
        return;
    }
    gw_api_pipeline_start(r);
}

void gw_api_handle_chat(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct gw_api_req *r = gw_api_req_new(req, st, GW_API_CHAT, "chat");
    if (!r) {
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
        return;
    }
    gw_api_parse_then(r, chat_parsed);
}
