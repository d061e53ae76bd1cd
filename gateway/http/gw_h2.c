/* HTTP/2 on a connection, through nghttp2's memory I/O: frames in from the bufferevent input, frames out
 * into the bufferevent output only while it holds less than H2_OUT_HIGH bytes, so response data waits in
 * per-stream buffers where backpressure can see it. Requests are dispatched after nghttp2 returns (never
 * from inside its callbacks), and sending happens from a per-connection event, never inside a handler call.
 */
#include "gw_http_internal.h"

#include <nghttp2/nghttp2.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"

#define H2_OUT_HIGH (64 * 1024)
#define H2_OUT_LOW (16 * 1024)
#define H2_STREAM_WINDOW (1 << 20)
#define H2_CONN_WINDOW (16 << 20)
#define H2_CHECK_MS 1000
/* After an early error answer (413 while the client still uploads), the rest of the upload is read and
 * dropped for up to this long and this many bytes before the stream is reset: clients that cannot read a
 * response while they send (curl before 8.x fails the transfer on RST_STREAM) then get the answer, and a
 * client that keeps sending is still cut off. */
#define H2_DISCARD_LINGER_MS 2000
#define H2_DISCARD_MAX ((uint64_t)256 << 20)

struct h2;

struct h2_stream {
    struct h2_stream *prev, *next; /* all open streams */
    struct h2_stream *ready_next;  /* waiting for dispatch after nghttp2 returns */
    bool ready;
    struct h2 *h;
    int32_t id;
    struct gw__req *req;       /* transport reference; NULL once let go */
    const char *method, *path; /* pseudo-headers (request arena) */
    size_t method_len, path_len;
    int head_error;          /* 431 when the header list was too large */
    bool discard;            /* an early error response was sent: ignore further request data */
    int64_t linger_until_ns; /* discard: the answer is out; reset the stream if the upload goes on past it */
    uint64_t discarded;      /* request bytes dropped since the early answer */
    bool reset_sent;
    bool submitted;       /* response HEADERS submitted */
    struct evbuffer *out; /* response data not yet taken by nghttp2 */
    bool out_ended;
    bool deferred;  /* the data provider said "wait" */
    bool body_done; /* END_STREAM received */
    int64_t last_recv_ns, last_progress_ns;
};

struct h2 {
    struct gw_conn *c;
    nghttp2_session *session;
    struct h2_stream *streams;
    uint32_t n_streams;
    struct h2_stream *ready_head, *ready_tail;
    struct event *flush_ev;
    bool in_recv;
    bool goaway;
    int64_t idle_since_ns;
};

static const struct gw_stream_ops h2_ops;

static void h2_schedule_flush(struct h2 *h)
{
    if (!h->c->closing) event_active(h->flush_ev, EV_WRITE, 0);
}

static const struct gw_http_conf *hconf(const struct h2 *h)
{
    return &gw_loop_config(h->c->loop)->http;
}

/* ---- streams ---- */

static struct h2_stream *stream_new(struct h2 *h, int32_t id)
{
    struct h2_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->out = evbuffer_new();
    st->req = gw__req_create(h->c->loop, &h2_ops, st, GW_HTTP_2, h->c->remote);
    if (!st->out || !st->req) {
        if (st->out) evbuffer_free(st->out);
        if (st->req) {
            st->req->stream = NULL;
            gw__req_unref(st->req);
        }
        free(st);
        return NULL;
    }
    st->h = h;
    st->id = id;
    st->last_recv_ns = st->last_progress_ns = mm_now_ns();
    st->next = h->streams;
    if (h->streams) h->streams->prev = st;
    h->streams = st;
    h->n_streams++;
    return st;
}

static void ready_remove(struct h2 *h, struct h2_stream *st)
{
    if (!st->ready) return;
    struct h2_stream **pp = &h->ready_head;
    struct h2_stream *prev = NULL;
    while (*pp && *pp != st) {
        prev = *pp;
        pp = &(*pp)->ready_next;
    }
    if (*pp) *pp = st->ready_next;
    if (h->ready_tail == st) h->ready_tail = prev;
    st->ready = false;
}

static void stream_free(struct h2 *h, struct h2_stream *st, bool completed)
{
    ready_remove(h, st);
    if (st->req) {
        struct gw__req *r = st->req;
        st->req = NULL;
        if (completed)
            gw__req_transport_done(r);
        else
            gw__req_abort(r);
    }
    if (st->prev)
        st->prev->next = st->next;
    else
        h->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    h->n_streams--;
    if (h->n_streams == 0) h->idle_since_ns = mm_now_ns();
    evbuffer_free(st->out);
    free(st);
}

static void mark_ready(struct h2 *h, struct h2_stream *st)
{
    if (st->ready || st->discard || !st->req) return;
    st->ready = true;
    st->ready_next = NULL;
    if (h->ready_tail)
        h->ready_tail->ready_next = st;
    else
        h->ready_head = st;
    h->ready_tail = st;
}

/* An error answered before dispatch; further request data is discarded. */
static void stream_fail(struct h2_stream *st, int status, const char *msg)
{
    if (st->discard || !st->req) return;
    st->discard = true;
    ready_remove(st->h, st);
    gw__req_fail(st->req, status, msg);
}

/* ---- nghttp2 callbacks ---- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
    struct h2 *h = ud;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
    struct h2_stream *st = stream_new(h, frame->hd.stream_id);
    if (!st) {
        nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
        return 0;
    }
    nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, st);
    return 0;
}

static bool name_is(const uint8_t *n, size_t nl, const char *want)
{
    size_t wl = strlen(want);
    return nl == wl && memcmp(n, want, wl) == 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
                     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers */
    struct h2_stream *st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    if (!st || !st->req || st->head_error) return 0;
    struct gw__req *r = st->req;
    if (nl && name[0] == ':') {
        char *v = mm_arena_strndup(r->pub.arena, (const char *)value, vl);
        if (!v) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        if (name_is(name, nl, ":method")) {
            st->method = v;
            st->method_len = vl;
        } else if (name_is(name, nl, ":path")) {
            st->path = v;
            st->path_len = vl;
        } else if (name_is(name, nl, ":authority")) {
            r->pub.authority = v;
        }
        r->header_bytes += nl + vl + 32;
        return 0;
    }
    int32_t rc = gw__req_add_header(r, (const char *)name, nl, (const char *)value, vl);
    if (rc == MM_TOO_LARGE) st->head_error = 431;
    if (rc == MM_NOMEM) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
}

static void head_complete(struct h2 *h, struct h2_stream *st)
{
    struct gw__req *r = st->req;
    if (st->head_error) {
        stream_fail(st, 431, "request header fields too large");
        return;
    }
    if (!st->method || !st->path ||
        gw__req_set_line(r, st->method, st->method_len, st->path, st->path_len) != MM_OK) {
        stream_fail(st, 400, "malformed request pseudo-headers");
        return;
    }
    /* the headers become public at dispatch; look at them now, so an announced oversized body is refused
     * before it is uploaded (not only once 64 MiB of it have been read) */
    r->pub.headers = r->hdrs;
    r->pub.n_headers = r->n_hdrs;
    const char *cl = gw_request_header(&r->pub, "content-length");
    if (cl) {
        char *end;
        long long v = strtoll(cl, &end, 10);
        if (*end == '\0' && v > r->max_body) stream_fail(st, 413, "request body too large");
    }
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
    struct h2 *h = ud;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    if (!st) return 0;
    st->last_recv_ns = mm_now_ns();
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) head_complete(h, st);
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        st->body_done = true;
        mark_ready(h, st);
    }
    return 0;
}

/* The early answer is out but the client is still uploading past the linger bounds: stop it (RFC 9113 8.1).
 */
static void discard_reset(nghttp2_session *s, struct h2_stream *st)
{
    if (st->reset_sent) return;
    st->reset_sent = true;
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
}

static int on_data_chunk(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                         void *ud)
{
    struct h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (st && st->discard) {
        st->discarded += len;
        if (st->linger_until_ns && (st->discarded > H2_DISCARD_MAX || mm_now_ns() > st->linger_until_ns))
            discard_reset(s, st);
        return 0;
    }
    if (!st || !st->req) return 0;
    st->last_recv_ns = mm_now_ns();
    int32_t rc = gw__req_add_body(st->req, data, len);
    if (rc == MM_TOO_LARGE) stream_fail(st, 413, "request body too large");
    if (rc == MM_NOMEM) stream_fail(st, 503, "out of memory reading the request body");
    return 0;
}

static int on_frame_send(nghttp2_session *s, const nghttp2_frame *frame, void *ud)
{
    if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(s, frame->hd.stream_id);
    /* an early error answer while the client still uploads: read and drop the rest for a while (above) */
    if (st && st->discard && !st->body_done && !st->linger_until_ns)
        st->linger_until_ns = mm_now_ns() + (int64_t)H2_DISCARD_LINGER_MS * 1000000;
    return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error_code, void *ud)
{
    struct h2 *h = ud;
    struct h2_stream *st = nghttp2_session_get_stream_user_data(s, id);
    if (!st) return 0;
    nghttp2_session_set_stream_user_data(s, id, NULL);
    bool completed =
        st->req && st->req->resp == GW_RESP_DONE && st->out_ended && evbuffer_get_length(st->out) == 0;
    stream_free(h, st, completed);
    return 0;
}

static ssize_t data_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    struct h2_stream *st = src->ptr;
    size_t avail = evbuffer_get_length(st->out);
    if (avail == 0) {
        if (st->out_ended) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return 0;
        }
        st->deferred = true;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = avail < length ? avail : length;
    if (evbuffer_remove(st->out, buf, n) != (int)n) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    st->last_progress_ns = mm_now_ns();
    if (st->out_ended && n == avail) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* ---- sending ---- */

static void h2_arm(struct h2 *h);

static void notify_drains(struct h2 *h)
{
    struct h2_stream *st = h->streams;
    while (st) {
        struct h2_stream *next = st->next;
        struct gw__req *r = st->req;
        if (r && r->drain_cb && evbuffer_get_length(st->out) <= r->drain_low) gw__req_drained(r);
        st = next;
    }
}

static void h2_flush(struct h2 *h)
{
    struct gw_conn *c = h->c;
    if (c->closing || c->close_after_flush) return;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    while (evbuffer_get_length(out) < H2_OUT_HIGH) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(h->session, &data);
        if (n < 0) {
            mm_log_debug(GW_LOG_COMP, "%s: nghttp2 send: %s", c->remote, nghttp2_strerror((int)n));
            gw_conn_close(c);
            return;
        }
        if (n == 0) break;
        if (evbuffer_add(out, data, (size_t)n) != 0) {
            gw_conn_close(c);
            return;
        }
    }
    if (!nghttp2_session_want_read(h->session) && !nghttp2_session_want_write(h->session)) {
        gw_conn_close_after_flush(c, false);
        return;
    }
    notify_drains(h);
    h2_arm(h);
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    h2_flush(arg);
}

/* ---- stream ops ---- */

static bool hop_by_hop(const char *n)
{
    return strcmp(n, "connection") == 0 || strcmp(n, "keep-alive") == 0 ||
           strcmp(n, "transfer-encoding") == 0 || strcmp(n, "upgrade") == 0 ||
           strcmp(n, "proxy-connection") == 0;
}

static nghttp2_nv make_nv(const char *name, const char *value)
{
    nghttp2_nv nv = {(uint8_t *)(uintptr_t)name, (uint8_t *)(uintptr_t)value, strlen(name), strlen(value),
                     NGHTTP2_NV_FLAG_NONE};
    return nv;
}

static int32_t h2_start(struct gw__req *r, int status, int64_t length)
{
    struct h2_stream *st = r->stream;
    struct h2 *h = st->h;
    size_t n = 4;
    for (const struct gw_resp_header *x = r->resp_headers; x; x = x->next) n++;
    nghttp2_nv *nva = mm_arena_alloc(r->pub.arena, n * sizeof *nva);
    char *status_s = mm_arena_alloc(r->pub.arena, 8);
    char *len_s = mm_arena_alloc(r->pub.arena, 24);
    if (!nva || !status_s || !len_s) return MM_NOMEM;
    if (status >= 0 && status < 1000000)
        status_s[gw__fmt_u64(status_s, (uint64_t)status, 10)] = '\0'; /* no printf per response */
    else
        snprintf(status_s, 8, "%d", status);
    size_t k = 0;
    nva[k++] = make_nv(":status", status_s);
    nva[k++] = make_nv("date", gw_loop_date(h->c->loop));
    nva[k++] = make_nv("server", "mmgw");
    if (length >= 0 && status != 204 && status != 304) { /* RFC 9110 §8.6: never on a 204 */
        len_s[gw__fmt_u64(len_s, (uint64_t)length, 10)] = '\0';
        nva[k++] = make_nv("content-length", len_s);
    }
    for (const struct gw_resp_header *x = r->resp_headers; x; x = x->next)
        if (!hop_by_hop(x->name)) nva[k++] = make_nv(x->name, x->value);
    nghttp2_data_provider prd = {.source.ptr = st, .read_callback = data_read};
    bool body = !(length == 0 || r->head_only);
    if (!body) st->out_ended = true;
    int rc = nghttp2_submit_response(h->session, st->id, nva, k, body ? &prd : NULL);
    if (rc != 0) return rc == NGHTTP2_ERR_NOMEM ? MM_NOMEM : MM_CANCELLED;
    st->submitted = true;
    h2_schedule_flush(h);
    return MM_OK;
}

static void resume(struct h2_stream *st)
{
    if (st->deferred) {
        st->deferred = false;
        nghttp2_session_resume_data(st->h->session, st->id);
    }
    h2_schedule_flush(st->h);
}

static int32_t h2_write(struct gw__req *r, const void *data, size_t len)
{
    struct h2_stream *st = r->stream;
    if (evbuffer_add(st->out, data, len) != 0) return MM_NOMEM;
    resume(st);
    return MM_OK;
}

static int32_t h2_end(struct gw__req *r)
{
    struct h2_stream *st = r->stream;
    st->out_ended = true;
    resume(st);
    /* the transport lets go when the stream closes (on_stream_close) */
    return MM_OK;
}

static void h2_reset(struct gw__req *r)
{
    struct h2_stream *st = r->stream;
    r->abort_cb = NULL;
    st->req = NULL;
    gw__req_abort(r);
    nghttp2_submit_rst_stream(st->h->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
    h2_schedule_flush(st->h);
}

static size_t h2_queued(const struct gw__req *r)
{
    const struct h2_stream *st = r->stream;
    return evbuffer_get_length(st->out);
}

static void h2_watch_drain(struct gw__req *r)
{
    /* every flush checks each stream's watermark */
}

static const struct gw_stream_ops h2_ops = {
    .start = h2_start,
    .write = h2_write,
    .end = h2_end,
    .reset = h2_reset,
    .queued = h2_queued,
    .watch_drain = h2_watch_drain,
};

/* ---- connection callbacks ---- */

static void dispatch_ready(struct h2 *h)
{
    while (h->ready_head && !h->c->closing) {
        struct h2_stream *st = h->ready_head;
        h->ready_head = st->ready_next;
        if (!h->ready_head) h->ready_tail = NULL;
        st->ready = false;
        if (st->req && !st->discard) gw__req_dispatch(st->req);
    }
}

static void h2_on_read(struct gw_conn *c)
{
    struct h2 *h = c->proto_ctx;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    struct evbuffer_iovec v[8];
    for (;;) {
        int nv = evbuffer_peek(in, -1, NULL, v, 8);
        if (nv <= 0) break;
        size_t total = 0;
        for (int i = 0; i < nv && i < 8; i++) {
            ssize_t n = nghttp2_session_mem_recv(h->session, v[i].iov_base, v[i].iov_len);
            if (n < 0) {
                mm_log_debug(GW_LOG_COMP, "%s: nghttp2 recv: %s", c->remote, nghttp2_strerror((int)n));
                evbuffer_drain(in, total);
                /* let nghttp2 send its GOAWAY, then close */
                const uint8_t *data;
                ssize_t k;
                while ((k = nghttp2_session_mem_send(h->session, &data)) > 0)
                    evbuffer_add(bufferevent_get_output(c->bev), data, (size_t)k);
                gw_conn_close_after_flush(c, false);
                return;
            }
            total += v[i].iov_len;
        }
        evbuffer_drain(in, total);
    }
    dispatch_ready(h);
    h2_flush(h);
}

static void h2_on_write(struct gw_conn *c)
{
    h2_flush(c->proto_ctx);
}

static void h2_on_eof(struct gw_conn *c)
{
    gw_conn_close(c); /* destroy aborts every open stream */
}

static void h2_arm(struct h2 *h)
{
    struct gw_conn *c = h->c;
    if (c->closing || c->close_after_flush) return;
    const struct gw_http_conf *hc = hconf(h);
    int64_t want;
    if (h->n_streams == 0 && !gw_conn_output_len(c)) {
        want = h->idle_since_ns + hc->keepalive_timeout_ms * 1000000;
    } else {
        /* streams are checked periodically (body, send and progress timeouts) */
        int64_t step = H2_CHECK_MS;
        if (hc->client_body_timeout_ms < step) step = hc->client_body_timeout_ms;
        if (hc->send_timeout_ms < step) step = hc->send_timeout_ms;
        want = mm_now_ns() + step * 1000000;
    }
    if (!c->deadline_ns || want < c->deadline_ns) gw_conn_set_deadline(c, want);
}

static void h2_on_timer(struct gw_conn *c)
{
    struct h2 *h = c->proto_ctx;
    const struct gw_http_conf *hc = hconf(h);
    int64_t now = mm_now_ns();
    int64_t send_ns = hc->send_timeout_ms * 1000000;
    if (gw_conn_output_len(c) && now - c->last_progress_ns >= send_ns) {
        gw_conn_close(c);
        return;
    }
    if (h->n_streams == 0 && !gw_conn_output_len(c)) {
        if (now - h->idle_since_ns >= hc->keepalive_timeout_ms * 1000000) {
            nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE,
                                  nghttp2_session_get_last_proc_stream_id(h->session), NGHTTP2_NO_ERROR, NULL,
                                  0);
            h->goaway = true;
            h2_flush(h);
            if (!c->closing) gw_conn_close_after_flush(c, false);
            return;
        }
        h2_arm(h);
        return;
    }
    for (struct h2_stream *st = h->streams; st; st = st->next) {
        struct gw__req *r = st->req;
        if (st->discard && st->linger_until_ns && !st->body_done && now > st->linger_until_ns)
            discard_reset(h->session, st); /* the client stalled mid-upload after our answer */
        if (!r || st->discard) continue;
        if (!st->body_done && !r->dispatched &&
            now - st->last_recv_ns >= hc->client_body_timeout_ms * 1000000) {
            stream_fail(st, 408, "timed out reading the request");
        } else if (r->dispatched && evbuffer_get_length(st->out) && now - st->last_progress_ns >= send_ns) {
            /* the client stopped reading this stream (its window stays closed): give up on it */
            st->req = NULL;
            gw__req_abort(r);
            nghttp2_submit_rst_stream(h->session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_CANCEL);
        }
    }
    h2_schedule_flush(h);
    h2_arm(h);
}

static void h2_drain(struct gw_conn *c)
{
    struct h2 *h = c->proto_ctx;
    if (h->goaway) return;
    h->goaway = true;
    nghttp2_submit_goaway(h->session, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->session),
                          NGHTTP2_NO_ERROR, NULL, 0);
    h2_schedule_flush(h);
}

static void h2_destroy(struct gw_conn *c)
{
    struct h2 *h = c->proto_ctx;
    if (!h) return;
    while (h->streams) stream_free(h, h->streams, false);
    if (h->session) nghttp2_session_del(h->session);
    if (h->flush_ev) event_free(h->flush_ev);
    free(h);
    c->proto_ctx = NULL;
}

const struct gw_proto gw_proto_h2 = {
    .name = "h2",
    .on_read = h2_on_read,
    .on_write = h2_on_write,
    .on_eof = h2_on_eof,
    .on_timer = h2_on_timer,
    .drain = h2_drain,
    .destroy = h2_destroy,
};

int gw_h2_start(struct gw_conn *c)
{
    struct h2 *h = calloc(1, sizeof *h);
    if (!h) return -1;
    h->c = c;
    h->idle_since_ns = mm_now_ns();
    c->proto = &gw_proto_h2;
    c->proto_ctx = h; /* from here on destroy frees h */
    h->flush_ev = event_new(c->loop->base, -1, 0, flush_cb, h);
    nghttp2_session_callbacks *cb;
    if (!h->flush_ev || nghttp2_session_callbacks_new(&cb) != 0) return -1;
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    /* responses are encoded without HPACK's dynamic table (static-table names, literal values), as nginx
     * encodes them: keeping the table (a new date entry every second, lookups and evictions per header)
     * cost ~1.5 us of CPU per 1-token chat for ~60 bytes less per response; and closed streams are not kept
     * in the RFC 7540 priority tree (a PRIORITY frame naming one falls back to the root): ~0.6 us per chat
     * (bench/api/README.md, "gw-perf") */
    nghttp2_option *opt = NULL;
    int rc = nghttp2_option_new(&opt);
    if (rc == 0) {
        nghttp2_option_set_max_deflate_dynamic_table_size(opt, 0);
        nghttp2_option_set_no_closed_streams(opt, 1);
        rc = nghttp2_session_server_new2(&h->session, cb, h, opt);
        nghttp2_option_del(opt);
    }
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) return -1;
    const struct gw_http_conf *hc = hconf(h);
    nghttp2_settings_entry iv[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, (uint32_t)hc->http2_max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2_STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)hc->client_max_header_size},
    };
    if (nghttp2_submit_settings(h->session, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0) return -1;
    nghttp2_session_set_local_window_size(h->session, NGHTTP2_FLAG_NONE, 0, H2_CONN_WINDOW);
    bufferevent_setwatermark(c->bev, EV_WRITE, H2_OUT_LOW, 0);
    c->deadline_ns = 0;
    evtimer_del(c->timer);
    if (c->loop->draining) h2_drain(c);
    if (evbuffer_get_length(bufferevent_get_input(c->bev)))
        h2_on_read(c);
    else
        h2_flush(h);
    return 0;
}
