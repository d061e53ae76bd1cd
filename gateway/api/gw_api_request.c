/* The per-request context: creation, the client going away, release, metrics, body parsing. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_api_internal.h"
#include "mm_log.h"

static void on_abort(struct gw_request *req, void *ud)
{
    struct gw_api_req *r = ud;
    r->aborted = true;
    if (r->call) {
        gw_route_cancel(r->call); /* the worker gets an Abort now */
        r->call = NULL;
    }
    gw_api_req_metrics(r, 499); /* nginx's "client closed request" */
    gw_api_req_release(r);
}

void gw_api_req_init(struct gw_api_req *r, struct gw_request *http, struct gw_api_state *st,
                     enum gw_api_kind kind, const char *endpoint)
{
    memset(r, 0, sizeof *r);
    atomic_init(&r->stop_media, false);
    r->http = http;
    r->st = st;
    r->kind = kind;
    r->endpoint = endpoint;
    r->created = (int64_t)time(NULL);
    r->t_start_ns = http->start_ns;
    /* small prompts and answers live in the HTTP request's arena, which outlives r (NULL: the heap) */
    mm_buf_init_arena(&r->prompt, 0, http->arena);
    mm_buf_init_arena(&r->out, 0, http->arena);
    mm_buf_init_arena(&r->prefix, 0, http->arena);
    gw_tok_ids_init(&r->ids);
}

struct gw_api_req *gw_api_req_new(struct gw_request *http, struct gw_api_state *st, enum gw_api_kind kind,
                                  const char *endpoint)
{
    /* in the HTTP request's arena (reused per loop, no malloc): r holds a reference to the request until
     * req_destroy, so the arena outlives it */
    struct gw_api_req *r = mm_arena_calloc(http->arena, 1, sizeof *r);
    if (!r) return NULL;
    gw_api_req_init(r, http, st, kind, endpoint);
    gw_request_ref(http);
    gw_request_on_abort(http, on_abort, r);
    return r;
}

static void choice_free(struct gw_api_req *r, struct gw_api_choice *c)
{
    if (c->parser && r->model) r->model->vt->parser_destroy(c->parser);
    gw_api_stop_free(&c->stop);
    mm_buf_free(&c->text);
    mm_buf_free(&c->content);
    mm_buf_free(&c->reasoning);
    for (size_t i = 0; i < c->n_calls; i++) {
        free(c->calls[i].name);
        mm_buf_free(&c->calls[i].args);
    }
    free(c->calls);
    mm_buf_free(&c->lp);
    mm_buf_free(&c->lp_tokens);
    mm_buf_free(&c->lp_values);
    mm_buf_free(&c->lp_tops);
    mm_buf_free(&c->lp_offsets);
}

void gw_api_req_clear(struct gw_api_req *r)
{
    for (uint32_t i = 0; i < r->n_choices; i++) choice_free(r, &r->choices[i]);
    if (!r->http->arena) free(r->choices); /* else in the arena (gw_api_choices_init) */
    for (size_t i = 0; i < r->n_media; i++) {
        json_decref(r->media[i].src);
        free(r->media[i].bytes);
        gw_media_result_free(&r->media[i].res);
    }
    free(r->media);
    free(r->media_order);
    free(r->prompt_ids);
    free(r->norm_json);
    free(r->items);
    free(r->item_ptrs);
    free(r->tensors);
    free(r->ranges);
    free(r->range_ptrs);
    free(r->grids);
    mm_buf_free(&r->prompt);
    mm_buf_free(&r->out);
    mm_buf_free(&r->prefix);
    gw_tok_ids_free(&r->ids);
    json_decref(r->body);
}

static void req_destroy(struct gw_api_req *r)
{
    gw_api_req_clear(r);
    gw_request_unref(r->http); /* r lives in its arena: not touched after this */
}

void gw_api_req_release(struct gw_api_req *r)
{
    if (r->call) {
        gw_route_cancel(r->call);
        r->call = NULL;
    }
    if (!r->finished) {
        r->finished = true;
        /* nothing will read this request's media any more: preprocessing still running for it stops */
        atomic_store_explicit(&r->stop_media, true, memory_order_relaxed);
        gw_request_on_abort(r->http, NULL, NULL);
        if (r->streaming) gw_http_stream_on_drain(r->http, 0, NULL, NULL); /* r is going away */
    }
    if (r->pending == 0) req_destroy(r);
}

bool gw_api_req_async_back(struct gw_api_req *r)
{
    r->pending--;
    if (r->finished) {
        if (r->pending == 0) gw_api_req_release(r);
        return true;
    }
    return false;
}

void gw_api_req_metrics(struct gw_api_req *r, int status)
{
    if (r->metrics_done) return; /* recorded once */
    r->metrics_done = true;
    char s[8] = "000";
    if (status >= 100 && status <= 999) { /* a label per request: no printf */
        s[0] = (char)('0' + status / 100);
        s[1] = (char)('0' + status / 10 % 10);
        s[2] = (char)('0' + status % 10);
    }
    const char *model = r->model ? r->model->name : "(none)";
    const char *l3[] = {model, r->endpoint, s};
    const char *l2[] = {model, r->endpoint};
    gw_series_inc(gw_metric_series(r->st->m.requests, l3));
    gw_series_observe(gw_metric_series(r->st->m.duration, l2), (double)(mm_now_ns() - r->t_start_ns) / 1e9);
}

void gw_api_req_fail(struct gw_api_req *r, const struct gw_api_error *e)
{
    if (!r->aborted) gw_api_send_error(r->http, e);
    gw_api_req_metrics(r, e->status);
    gw_api_req_release(r);
}

const char *gw_api_body_text(const struct gw_request *req, size_t *len)
{
    const char *text = req->body ? req->body : "";
    *len = req->body_len;
    /* one leading UTF-8 byte order mark, which RFC 8259 §8.1 lets a parser ignore (PowerShell and other
     * Windows tools write one); jansson and the plugins' parsers refuse it. Only one: a second is not JSON.
     * Error positions count from after it. */
    if (*len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0) {
        text += 3;
        *len -= 3;
    }
    return text;
}

int gw_api_parse_body(struct gw_request *req, struct gw_api_state *st, json_t **body,
                      struct gw_api_model **model, struct gw_api_error *e)
{
    *body = NULL;
    *model = NULL;
    json_error_t je;
    size_t len;
    const char *text = gw_api_body_text(req, &len);
    json_t *b = json_loadb(text, len, 0, &je);
    if (!b && json_error_code(&je) == json_error_null_character) /* valid JSON, but strings here are C's */
        return gw_api_fail(
            e, 400, NULL,
            "the request body holds \\u0000 (a NUL character) in a string (line %d, column %d), "
            "which this server does not accept",
            je.line, je.column);
    if (!b)
        return gw_api_fail(e, 400, NULL, "the request body is not valid JSON (line %d, column %d): %s",
                           je.line, je.column, je.text);
    if (!json_is_object(b)) {
        json_decref(b);
        return gw_api_fail(e, 400, NULL, "the request body must be a JSON object");
    }
    *body = b;
    json_t *m = json_object_get(b, "model");
    if ((!m || json_is_null(m)) && st->n_models == 1) { /* one model served: naming it is optional (vLLM) */
        *model = &st->models[0];
        return 0;
    }
    if (!m || json_is_null(m)) return gw_api_fail(e, 400, "model", "'model' is required");
    if (!json_is_string(m)) return gw_api_fail(e, 400, "model", "'model' must be a string");
    *model = gw_api_find_model(st, json_string_value(m));
    if (!*model) {
        gw_api_fail(e, 404, "model", "The model `%.200s` does not exist.", json_string_value(m));
        e->code = "model_not_found";
        return -1;
    }
    return 0;
}

/* ---- the body parsed off the loop ---- */

struct parse_job {
    struct gw_api_req *r;
    const struct gw_executor *ex;
    void (*next)(struct gw_api_req *r);
    json_t *body;
    struct gw_api_model *model;
    int rc;
    struct gw_api_error e;
};

static void parse_back(void *arg)
{
    struct parse_job *j = arg;
    struct gw_api_req *r = j->r;
    if (gw_api_req_async_back(r)) { /* the client left meanwhile */
        json_decref(j->body);
    } else if (j->rc) {
        json_decref(j->body);
        gw_api_req_fail(r, &j->e);
    } else {
        r->body = j->body;
        r->model = j->model;
        j->next(r);
    }
    free(j);
}

static void parse_run(void *arg)
{
    /* reads the request's body and the state's model table, neither of which changes while r is pending */
    struct parse_job *j = arg;
    j->rc = gw_api_parse_body(j->r->http, j->r->st, &j->body, &j->model, &j->e);
    if (gw_executor_post(j->ex, parse_back, j) != 0) { /* the loop is gone (shutdown) */
        json_decref(j->body);
        free(j);
    }
}

/* Any model's preprocessing pool will do: the parse does not depend on the model. */
static struct gw_pool *parse_pool(const struct gw_api_state *st)
{
    for (size_t i = 0; i < st->n_models; i++)
        if (st->models[i].pool) return st->models[i].pool;
    return NULL;
}

void gw_api_parse_then(struct gw_api_req *r, void (*next)(struct gw_api_req *r))
{
    struct gw_pool *pool = r->http->body_len > GW_API_INLINE_PARSE_MAX ? parse_pool(r->st) : NULL;
    struct parse_job *j = pool ? calloc(1, sizeof *j) : NULL;
    if (j) {
        j->r = r;
        j->ex = r->http->executor;
        j->next = next;
        if (gw_pool_submit(pool, parse_run, j) == MM_OK) {
            r->pending++;
            return;
        }
        free(j); /* queue full: parse here rather than refuse */
    }
    struct gw_api_error e = {0};
    if (gw_api_parse_body(r->http, r->st, &r->body, &r->model, &e)) {
        gw_api_req_fail(r, &e);
        return;
    }
    next(r);
}
