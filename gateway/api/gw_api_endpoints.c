/* The other endpoints: POST /v1/completions, POST /tokenize, POST /detokenize (vLLM's), GET /v1/models
 * and GET /health/models. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_api_internal.h"

/* ---- /v1/completions ---- */

/* prompt: a string, a list of token ids, or a one-element list of either. */
static int completion_prompt(struct gw_api_req *r, json_t *prompt, struct gw_api_error *e)
{
    if (!prompt || json_is_null(prompt)) return gw_api_fail(e, 400, "prompt", "'prompt' is required");
    if (json_is_array(prompt) && json_array_size(prompt) == 1 &&
        (json_is_string(json_array_get(prompt, 0)) || json_is_array(json_array_get(prompt, 0))))
        prompt = json_array_get(prompt, 0);
    if (json_is_string(prompt)) {
        if (mm_buf_append(&r->prompt, json_string_value(prompt), json_string_length(prompt)))
            return gw_api_fail(e, 503, NULL, "out of memory");
        return 0;
    }
    if (!json_is_array(prompt))
        return gw_api_fail(e, 400, "prompt", "'prompt' must be a string or an array of token ids");
    size_t n = json_array_size(prompt);
    if (n == 0) return gw_api_fail(e, 400, "prompt", "'prompt' is empty");
    if (json_is_string(json_array_get(prompt, 0)) || json_is_array(json_array_get(prompt, 0)))
        return gw_api_fail(e, 400, "prompt",
                           "batched prompts are not supported: send one request per prompt");
    r->prompt_ids = malloc(n * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return gw_api_fail(e, 503, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(prompt, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= (json_int_t)r->model->vocab)
            return gw_api_fail(e, 400, "prompt", "'prompt[%zu]' must be a token id below %u", i,
                               r->model->vocab);
        r->prompt_ids[i] = (uint32_t)json_integer_value(x);
    }
    r->n_prompt_ids = n;
    return 0;
}

int gw_api_completion_prepare(struct gw_api_req *r, struct gw_api_error *e)
{
    if (completion_prompt(r, json_object_get(r->body, "prompt"), e) || gw_api_completion_collect(r, e))
        return -1;
    r->p.add_special_tokens = true;
    json_t *ast = json_object_get(r->body, "add_special_tokens");
    if (json_is_boolean(ast)) r->p.add_special_tokens = json_is_true(ast);
    return 0;
}

static void completion_parsed(struct gw_api_req *r)
{
    struct gw_api_error e = {0};
    if (gw_api_params_parse(r->body, GW_API_COMPLETION, r->model->vocab, &r->p, &e) ||
        gw_api_completion_prepare(r, &e)) {
        gw_api_req_fail(r, &e);
        return;
    }
    gw_api_pipeline_start(r);
}

void gw_api_handle_completions(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct gw_api_req *r = gw_api_req_new(req, st, GW_API_COMPLETION, "completions");
    if (!r) {
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
        return;
    }
    gw_api_parse_then(r, completion_parsed);
}

/* ---- /tokenize ---- */

int gw_api_tokenize_prepare(struct gw_api_req *r, struct gw_api_error *e)
{
    json_t *b = r->body;
    json_t *ast = json_object_get(b, "add_special_tokens"), *rts = json_object_get(b, "return_token_strs");
    r->p.n = 1;
    r->p.return_token_strs = json_is_true(rts);
    if (json_object_get(b, "messages")) {
        r->p.add_special_tokens = json_is_true(ast); /* vLLM: false for chats */
        if (gw_api_chat_prepare(r, e)) return -1;
    } else {
        json_t *prompt = json_object_get(b, "prompt");
        if (!json_is_string(prompt))
            return gw_api_fail(e, 400, "prompt", "'prompt' (a string) or 'messages' is required");
        r->p.add_special_tokens = !json_is_false(ast); /* vLLM: true by default */
        r->tokenize_plain = true;
        if (mm_buf_append(&r->prompt, json_string_value(prompt), json_string_length(prompt)))
            return gw_api_fail(e, 503, NULL, "out of memory");
    }
    if ((ast && !json_is_boolean(ast)) || (rts && !json_is_boolean(rts)))
        return gw_api_fail(e, 400, ast && !json_is_boolean(ast) ? "add_special_tokens" : "return_token_strs",
                           "'%s' must be a boolean",
                           ast && !json_is_boolean(ast) ? "add_special_tokens" : "return_token_strs");
    return 0;
}

static void tokenize_parsed(struct gw_api_req *r)
{
    struct gw_api_error e = {0};
    if (gw_api_tokenize_prepare(r, &e)) {
        gw_api_req_fail(r, &e);
        return;
    }
    gw_api_pipeline_start(r);
}

void gw_api_handle_tokenize(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct gw_api_req *r = gw_api_req_new(req, st, GW_API_TOKENIZE, "tokenize");
    if (!r) {
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
        return;
    }
    gw_api_parse_then(r, tokenize_parsed);
}

/* ---- /detokenize ---- */

void gw_api_handle_detokenize(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct gw_api_error e = {0};
    json_t *body;
    struct gw_api_model *m;
    if (gw_api_parse_body(req, st, &body, &m, &e)) {
        json_decref(body);
        gw_api_send_error(req, &e);
        return;
    }
    json_t *toks = json_object_get(body, "tokens");
    uint32_t *ids = NULL;
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0;
    if (!json_is_array(toks)) {
        gw_api_fail(&e, 400, "tokens", "'tokens' (an array of token ids) is required");
    } else if (n && !(ids = malloc(n * sizeof *ids))) {
        gw_api_fail(&e, 503, NULL, "out of memory");
    } else {
        for (size_t i = 0; i < n && !e.status; i++) {
            json_t *x = json_array_get(toks, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) >= (json_int_t)m->vocab)
                gw_api_fail(&e, 400, "tokens", "'tokens[%zu]' must be a token id below %u", i, m->vocab);
            else
                ids[i] = (uint32_t)json_integer_value(x);
        }
    }
    struct mm_buf text, out;
    mm_buf_init(&text, 0);
    mm_buf_init(&out, 0);
    if (!e.status) {
        struct mm_err err;
        mm_err_clear(&err);
        if (gw_tokenizer_decode(m->tok, ids, n, 0, &text, &err) != MM_OK)
            gw_api_fail_mm(&e, &err, "tokens");
        else if (mm_buf_append_str(&out, "{\"prompt\":") ||
                 gw_json_str(&out, text.data ? text.data : "", text.len) || mm_buf_append(&out, "}", 1))
            gw_api_fail(&e, 503, NULL, "out of memory");
    }
    if (e.status)
        gw_api_send_error(req, &e);
    else
        gw_http_respond(req, 200, "application/json", out.data, out.len);
    free(ids);
    mm_buf_free(&text);
    mm_buf_free(&out);
    json_decref(body);
}

/* ---- /v1/models ---- */

/* One model object, as in OpenAI's list and retrieve answers. 0 or -1 (out of memory). */
static int write_model(struct mm_buf *b, struct gw_api_model *m)
{
    uint64_t mml = gw_api_max_model_len(m);
    return mm_buf_append_str(b, "{\"id\":") || gw_json_str(b, m->name, strlen(m->name)) ||
                   mm_buf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"mmgw\",\"root\":",
                                 (long long)m->created) < 0 ||
                   gw_json_str(b, m->name, strlen(m->name)) || mm_buf_append_str(b, ",\"max_model_len\":") ||
                   (mml ? mm_buf_printf(b, "%llu", (unsigned long long)mml) < 0
                        : mm_buf_append_str(b, "null")) ||
                   mm_buf_append(b, "}", 1)
               ? -1
               : 0;
}

void gw_api_handle_models(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct mm_buf b;
    mm_buf_init(&b, 0);
    int bad = mm_buf_append_str(&b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < st->n_models && !bad; i++)
        bad = (i && mm_buf_append(&b, ",", 1)) || write_model(&b, &st->models[i]);
    if (!bad) bad = mm_buf_append_str(&b, "]}");
    if (bad)
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
    else
        gw_http_respond(req, 200, "application/json", b.data, b.len);
    mm_buf_free(&b);
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* GET /v1/models/{model} (OpenAI's "retrieve model"). The name is the rest of the path, percent-decoded:
 * served names may hold '/' (SDKs send "org/name" either raw or as %2F). */
void gw_api_handle_model(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    static const char prefix[] = "/v1/models/";
    const char *p = req->path + sizeof prefix - 1;
    char name[256];
    size_t n = 0;
    bool ok = true;
    for (; *p && ok; p++) {
        char c = *p;
        if (c == '%') {
            int hi = hex_value(p[1]), lo = hi < 0 ? -1 : hex_value(p[2]);
            ok = lo >= 0;
            c = (char)(hi * 16 + lo);
            p += 2 * ok;
        }
        ok = ok && c != '\0' && n + 1 < sizeof name;
        if (ok) name[n++] = c;
    }
    name[n] = '\0';
    struct gw_api_model *m = ok && n ? gw_api_find_model(st, name) : NULL;
    if (!m) {
        char msg[320];
        snprintf(msg, sizeof msg, "The model `%.200s` does not exist.", ok ? name : "(malformed name)");
        gw_http_send_error(req, 404, "invalid_request_error", msg, "model", "model_not_found");
        return;
    }
    struct mm_buf b;
    mm_buf_init(&b, 0);
    if (write_model(&b, m))
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
    else
        gw_http_respond(req, 200, "application/json", b.data, b.len);
    mm_buf_free(&b);
}

/* ---- /health/models ---- */

void gw_api_handle_health(struct gw_request *req, void *ud)
{
    struct gw_api_state *st = ud;
    struct mm_buf b;
    mm_buf_init(&b, 0);
    bool all_ok = true;
    int bad = mm_buf_append_str(&b, "{\"models\":{");
    for (size_t i = 0; i < st->n_models && !bad; i++) {
        struct gw_api_model *m = &st->models[i];
        struct gw_worker_stats ws[64];
        size_t n = m->router ? gw_router_stats(m->router, ws, 64) : 0;
        if (n > 64) n = 64;
        size_t usable = 0;
        bad = (i && mm_buf_append(&b, ",", 1)) || gw_json_str(&b, m->name, strlen(m->name)) ||
              mm_buf_append_str(&b, ":{\"workers\":[");
        for (size_t k = 0; k < n && !bad; k++) {
            bool ok = ws[k].health != GW_WORKER_UNHEALTHY && ws[k].breaker != GW_BREAKER_OPEN;
            usable += ok;
            bad = (k && mm_buf_append(&b, ",", 1)) || mm_buf_append_str(&b, "{\"target\":") ||
                  gw_json_str(&b, ws[k].target, strlen(ws[k].target)) ||
                  mm_buf_printf(&b, ",\"health\":\"%s\",\"breaker\":\"%s\",\"in_flight\":%u,\"load\":%u}",
                                gw_worker_health_name(ws[k].health), gw_breaker_state_name(ws[k].breaker),
                                ws[k].in_flight, ws[k].reported_load) < 0;
        }
        if (!usable) all_ok = false;
        if (!bad) bad = mm_buf_printf(&b, "],\"status\":\"%s\"}", usable ? "ok" : "unavailable") < 0;
    }
    if (!bad) bad = mm_buf_printf(&b, "},\"status\":\"%s\"}", all_ok ? "ok" : "degraded") < 0;
    if (bad)
        gw_http_send_error(req, 503, NULL, "out of memory", NULL, NULL);
    else
        gw_http_respond(req, all_ok ? 200 : 503, "application/json", b.data, b.len);
    mm_buf_free(&b);
}
