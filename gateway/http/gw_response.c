/* Responses: headers, complete bodies, streams and SSE events, over whichever transport carries the request.
 */
#include "gw_http_internal.h"

#include <stdlib.h>
#include <string.h>

#include "mm_log.h"

/* A response function may run only while the transport still has the request and no response ended. */
static int32_t check_open(struct gw__req *r)
{
    if (r->aborted || !r->stream) return MM_CANCELLED;
    return MM_OK;
}

static bool valid_token(const char *s)
{
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                  c == '!' || c == '#' || c == '$' || c == '%' || c == '&' || c == '\'' || c == '*' ||
                  c == '+' || c == '^' || c == '`' || c == '|' || c == '~';
        if (!ok) return false;
    }
    return true;
}

static bool valid_value(const char *s)
{
    if (!s) return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f) return false;
    return true;
}

static int32_t push_header(struct gw__req *r, const char *name, const char *value)
{
    struct mm_arena *a = r->pub.arena;
    struct gw_resp_header *h = mm_arena_alloc(a, sizeof *h);
    if (!h) return MM_NOMEM;
    h->name = mm_arena_strdup(a, name);
    h->value = mm_arena_strdup(a, value);
    if (!h->name || !h->value) return MM_NOMEM;
    h->next = NULL;
    if (r->resp_headers_tail)
        r->resp_headers_tail->next = h;
    else
        r->resp_headers = h;
    r->resp_headers_tail = h;
    return MM_OK;
}

int32_t gw_http_add_header(struct gw_request *req, const char *name, const char *value)
{
    struct gw__req *r = gw__req_of(req);
    int32_t rc = check_open(r);
    if (rc) return rc;
    if (r->resp != GW_RESP_NONE || !valid_token(name) || !valid_value(value)) return MM_INVALID;
    return push_header(r, name, value);
}

static bool has_header(const struct gw__req *r, const char *name)
{
    for (const struct gw_resp_header *h = r->resp_headers; h; h = h->next)
        if (strcmp(h->name, name) == 0) return true; /* names are lower case (valid_token) */
    return false;
}

static int32_t begin(struct gw__req *r, int status, const char *content_type, int64_t length)
{
    int32_t rc = check_open(r);
    if (rc) return rc;
    if (r->resp != GW_RESP_NONE || status < 200 || status > 599) return MM_INVALID;
    if (content_type && (!valid_value(content_type) || push_header(r, "content-type", content_type)))
        return MM_NOMEM;
    if (push_header(r, "x-request-id", r->pub.id_str)) return MM_NOMEM;
    if (gw__cors_headers(r)) return MM_NOMEM;
    /* 429 and 503 are "try again": say when, unless the handler did (RFC 9110 §10.2.3). Every one the
     * gateway makes (a full worker, no healthy worker, draining, a full queue, out of memory) is a
     * momentary state, so one short value fits them all; see GW_HTTP_RETRY_AFTER */
    if ((status == 429 || status == 503) && !has_header(r, "retry-after") &&
        push_header(r, "retry-after", GW_HTTP_RETRY_AFTER))
        return MM_NOMEM;
    r->status = status;
    r->resp = length < 0 ? GW_RESP_STREAMING : GW_RESP_DONE;
    return r->ops->start(r, status, length);
}

int32_t gw_http_respond(struct gw_request *req, int status, const char *content_type, const void *body,
                        size_t len)
{
    struct gw__req *r = gw__req_of(req);
    int32_t rc = begin(r, status, content_type, (int64_t)len);
    if (rc) return rc;
    if (len && !r->head_only) {
        rc = r->ops->write(r, body, len);
        if (rc) return rc;
        r->bytes_out += len;
    }
    return r->ops->end(r);
}

int32_t gw_http_respond_json(struct gw_request *req, int status, const char *json)
{
    return gw_http_respond(req, status, "application/json", json, strlen(json));
}

int32_t gw_http_stream_start(struct gw_request *req, int status, const char *content_type)
{
    return begin(gw__req_of(req), status, content_type, -1);
}

int32_t gw_http_sse_start(struct gw_request *req)
{
    struct gw__req *r = gw__req_of(req);
    int32_t rc = check_open(r);
    if (rc) return rc;
    if (r->resp != GW_RESP_NONE) return MM_INVALID;
    if (push_header(r, "cache-control", "no-cache")) return MM_NOMEM;
    return gw_http_stream_start(req, 200, "text/event-stream");
}

static int32_t stream_write(struct gw__req *r, const void *data, size_t len, bool capped)
{
    int32_t rc = check_open(r);
    if (rc) return rc;
    if (r->resp != GW_RESP_STREAMING) return MM_INVALID;
    if (len == 0 || r->head_only) return MM_OK;
    size_t queued = r->ops->queued(r);
    /* an empty queue always takes one write, however large, so a big event cannot wedge the stream */
    if (capped && queued && queued + len > (size_t)r->site->config->http.stream_buffer_max) return MM_AGAIN;
    rc = r->ops->write(r, data, len);
    if (rc == MM_OK) r->bytes_out += len;
    return rc;
}

int32_t gw_http_stream_write(struct gw_request *req, const void *data, size_t len)
{
    return stream_write(gw__req_of(req), data, len, true);
}

/* One SSE event: "data: " per line, a blank line after the event; CR LF and lone CR end lines too (SSE spec).
 */
static int32_t sse_event(struct gw__req *r, const char *data, size_t len, bool capped)
{
    int32_t rc = check_open(r);
    if (rc) return rc;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        if (data[i] == '\n' || (data[i] == '\r' && !(i + 1 < len && data[i + 1] == '\n'))) lines++;
    size_t cap = len + lines * 7 + 2;
    char stackbuf[4096];
    char *buf = cap <= sizeof stackbuf ? stackbuf : malloc(cap);
    if (!buf) return MM_NOMEM;
    size_t n = 0;
    memcpy(buf + n, "data: ", 6);
    n += 6;
    for (size_t i = 0; i < len; i++) {
        char c = data[i];
        if (c == '\r' || c == '\n') {
            if (c == '\r' && i + 1 < len && data[i + 1] == '\n') i++;
            memcpy(buf + n, "\ndata: ", 7);
            n += 7;
        } else {
            buf[n++] = c;
        }
    }
    buf[n++] = '\n';
    buf[n++] = '\n';
    rc = stream_write(r, buf, n, capped);
    if (buf != stackbuf) free(buf);
    return rc;
}

int32_t gw_http_sse_event(struct gw_request *req, const char *data, size_t len)
{
    return sse_event(gw__req_of(req), data, len, true);
}

/* For gw_http_send_error on a started stream: the error event must get through whatever is queued. */
int32_t gw__req_sse_error(struct gw__req *r, const char *json)
{
    int32_t rc = sse_event(r, json, strlen(json), false);
    if (rc != MM_OK) return rc;
    return gw_http_stream_end(&r->pub);
}

int32_t gw_http_stream_end(struct gw_request *req)
{
    struct gw__req *r = gw__req_of(req);
    int32_t rc = check_open(r);
    if (rc) return rc;
    if (r->resp != GW_RESP_STREAMING) return MM_INVALID;
    r->resp = GW_RESP_DONE;
    return r->ops->end(r);
}

/* The handler let go without finishing its response: make the failure visible to the client. */
void gw__req_finish_unanswered(struct gw__req *r)
{
    if (r->aborted || !r->stream || r->resp == GW_RESP_DONE) return;
    if (r->resp == GW_RESP_NONE) {
        mm_log_error(GW_LOG_COMP, "request %s %s %s: the handler released it without a response",
                     r->pub.id_str, r->pub.method, r->pub.path);
        gw_http_send_error(&r->pub, 500, NULL, "the handler did not produce a response", NULL,
                           "internal_error");
        return;
    }
    mm_log_warn(GW_LOG_COMP, "request %s: stream released before it ended; cutting it", r->pub.id_str);
    r->ops->reset(r);
}
