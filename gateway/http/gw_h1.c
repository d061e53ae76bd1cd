/* HTTP/1.1 on a connection: keep-alive, pipelining (one request at a time, the rest waits in the input
 * buffer), Content-Length and chunked request bodies, chunked or close-delimited streaming responses,
 * 100-continue, timeouts, and error responses that close with lingering. */
#include "gw_http_internal.h"

#include <stdlib.h>
#include <string.h>

#include "mm_log.h"

/* The next pipelined request is parsed only while the output holds at most this much: a client that sends
 * requests and reads no responses must not make the server buffer every response (nginx reads the next
 * pipelined request only once the previous response is sent). Small responses still batch into one write. */
#define H1_PIPELINE_OUT_MAX (64 * 1024)

enum h1_state {
    H1_IDLE,   /* waiting for (the rest of) a request head */
    H1_BODY,   /* reading the request body */
    H1_ACTIVE, /* the handler has the request; later pipelined input waits */
    H1_DONE    /* closing */
};

struct h1 {
    struct gw_conn *c;
    enum h1_state state;
    struct gw__req *req; /* the request in progress (transport reference) */
    uint32_t served;
    bool first;
    bool in_process, again;
    int64_t idle_since_ns;
    int64_t head_start_ns; /* first byte of the head being read; 0 = none yet */
    int64_t last_body_ns;
    int64_t body_left;
    bool chunked;
    struct gw_h1_chunked ch;
    int version;
    bool keep_alive;      /* what the request allows */
    bool resp_keep_alive; /* what the response announced */
    bool resp_chunked;
    bool failing;  /* an error response: close with lingering afterwards */
    bool out_wait; /* pipelined input waits for the output to drain (H1_PIPELINE_OUT_MAX) */
    bool peer_eof; /* the client half-closed while pipelined input was waiting */
};

static void h1_process(struct h1 *h);

static const struct gw_http_conf *hconf(const struct h1 *h)
{
    return &gw_loop_config(h->c->loop)->http;
}

/* ---- timer ---- */

static void h1_arm(struct h1 *h)
{
    struct gw_conn *c = h->c;
    if (c->closing || c->close_after_flush) return;
    const struct gw_http_conf *hc = hconf(h);
    int64_t want = 0;
#define EARLIER(t)                                                                                           \
    do {                                                                                                     \
        int64_t t__ = (t);                                                                                   \
        if (!want || t__ < want) want = t__;                                                                 \
    } while (0)
    if (gw_conn_output_len(c)) EARLIER(c->last_progress_ns + hc->send_timeout_ms * 1000000);
    if (h->state == H1_IDLE) {
        if (h->head_start_ns)
            EARLIER(h->head_start_ns + hc->client_header_timeout_ms * 1000000);
        else
            EARLIER(h->idle_since_ns +
                    (h->first ? hc->client_header_timeout_ms : hc->keepalive_timeout_ms) * 1000000);
    } else if (h->state == H1_BODY) {
        EARLIER(h->last_body_ns + hc->client_body_timeout_ms * 1000000);
    }
#undef EARLIER
    /* only ever move the timer earlier: a timer that fires early re-arms, which is cheaper than re-adding it
     * on every write */
    if (want && (!c->deadline_ns || want < c->deadline_ns)) gw_conn_set_deadline(c, want);
}

/* ---- requests ---- */

static const struct gw_stream_ops h1_ops;

static void h1_fail(struct h1 *h, int status, const char *msg)
{
    struct gw_conn *c = h->c;
    if (!h->req) {
        h->req = gw__req_create(c->loop, &h1_ops, h, h->version == 10 ? GW_HTTP_1_0 : GW_HTTP_1_1, c->remote);
        if (!h->req) {
            gw_conn_close(c);
            return;
        }
    }
    h->keep_alive = false;
    h->failing = true;
    h->state = H1_ACTIVE;
    struct gw__req *r = h->req;
    if (!r->pub.method[0]) r->pub.method = "-";
    gw__req_fail(r, status, msg);
}

static void h1_complete(struct h1 *h)
{
    struct gw__req *r = h->req;
    struct gw_conn *c = h->c;
    h->req = NULL;
    h->served++;
    if (r) gw__req_transport_done(r);
    if (c->closing) return;
    if (!h->resp_keep_alive) {
        h->state = H1_DONE;
        bool unread = evbuffer_get_length(bufferevent_get_input(c->bev)) > 0;
        gw_conn_close_after_flush(c, h->failing || unread);
        return;
    }
    h->state = H1_IDLE;
    h->first = false;
    h->head_start_ns = 0;
    h->idle_since_ns = mm_now_ns();
    h1_arm(h);
    h1_process(h); /* a pipelined request may be waiting */
}

static int body_sink(void *ud, const char *data, size_t len)
{
    int32_t rc = gw__req_add_body(ud, data, len);
    return rc == MM_OK ? 0 : rc == MM_TOO_LARGE ? -2 : -3;
}

static void h1_dispatch(struct h1 *h)
{
    h->state = H1_ACTIVE;
    h1_arm(h);
    gw__req_dispatch(h->req);
}

/* Read body bytes from the input; dispatch when complete. */
static void h1_read_body(struct h1 *h)
{
    struct evbuffer *in = bufferevent_get_input(h->c->bev);
    h->last_body_ns = mm_now_ns();
    if (!h->chunked) {
        size_t avail = evbuffer_get_length(in);
        size_t take = (int64_t)avail < h->body_left ? avail : (size_t)h->body_left;
        if (take) {
            struct mm_buf *b = &h->req->body;
            if (mm_buf_reserve(b, take) != 0) {
                h1_fail(h, 503, "out of memory reading the request body");
                return;
            }
            evbuffer_remove(in, b->data + b->len, take);
            b->len += take;
            b->data[b->len] = '\0';
            h->body_left -= (int64_t)take;
        }
        if (h->body_left == 0) h1_dispatch(h);
        return;
    }
    for (;;) {
        struct evbuffer_iovec v;
        if (evbuffer_peek(in, -1, NULL, &v, 1) < 1 || v.iov_len == 0) return;
        size_t used = 0;
        int rc = gw_h1_chunked_parse(&h->ch, v.iov_base, v.iov_len, &used, body_sink, h->req);
        evbuffer_drain(in, used);
        if (rc == GW_H1_DONE) {
            h1_dispatch(h);
            return;
        }
        if (rc == -2) {
            h1_fail(h, 413, "request body too large");
            return;
        }
        if (rc == -3) {
            h1_fail(h, 503, "out of memory reading the request body");
            return;
        }
        if (rc == GW_H1_ERROR) {
            h1_fail(h, 400, h->ch.error);
            return;
        }
    }
}

static bool ensure_fields(struct gw_loop *l, uint32_t n)
{
    if (l->n_fields >= n) return true;
    struct gw_h1_field *f = realloc(l->fields, n * sizeof *f);
    if (!f) return false;
    l->fields = f;
    l->n_fields = n;
    return true;
}

static void h1_read_head(struct h1 *h)
{
    struct gw_conn *c = h->c;
    struct gw_loop *l = c->loop;
    const struct gw_http_conf *hc = hconf(h);
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t len = evbuffer_get_length(in);
    if (len == 0) return;
    if (!h->head_start_ns) h->head_start_ns = mm_now_ns();
    if (!ensure_fields(l, (uint32_t)hc->client_max_headers)) {
        gw_conn_close(c);
        return;
    }
    size_t look = len < (size_t)hc->client_max_header_size ? len : (size_t)hc->client_max_header_size;
    const char *buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)look);
    if (!buf) {
        gw_conn_close(c);
        return;
    }
    struct gw_h1_limits lim = {.max_head = (size_t)hc->client_max_header_size,
                               .max_headers = (uint32_t)hc->client_max_headers};
    struct gw_h1_head hd;
    int rc = gw_h1_parse_head(buf, look, &lim, l->fields, &hd);
    if (rc == GW_H1_INCOMPLETE) {
        h1_arm(h);
        return;
    }
    h->version = hd.version ? hd.version : 11;
    if (rc == GW_H1_ERROR) {
        h1_fail(h, hd.status, hd.error);
        return;
    }
    struct gw__req *r =
        gw__req_create(l, &h1_ops, h, hd.version == 10 ? GW_HTTP_1_0 : GW_HTTP_1_1, c->remote);
    if (!r) {
        gw_conn_close(c);
        return;
    }
    h->req = r;
    h->keep_alive = hd.keep_alive;
    h->failing = false;
    int32_t st = gw__req_set_line(r, hd.method, hd.method_len, hd.target, hd.target_len);
    for (uint32_t i = 0; st == MM_OK && i < hd.n_fields; i++)
        st = gw__req_add_header(r, hd.fields[i].name, hd.fields[i].name_len, hd.fields[i].value,
                                hd.fields[i].value_len);
    evbuffer_drain(in, hd.head_len);
    if (st == MM_NOMEM) {
        h1_fail(h, 503, "out of memory");
        return;
    }
    if (st != MM_OK) {
        h1_fail(h, 400, "malformed request target");
        return;
    }
    r->pub.start_ns = h->head_start_ns;
    h->chunked = hd.chunked;
    h->body_left = hd.content_length > 0 ? hd.content_length : 0;
    if (hd.content_length > hc->client_max_body_size) {
        h1_fail(h, 413, "request body too large");
        return;
    }
    if (!h->chunked && h->body_left == 0) {
        h1_dispatch(h);
        return;
    }
    if (hd.expect_continue && hd.version == 11)
        evbuffer_add(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
    gw_h1_chunked_init(&h->ch);
    h->state = H1_BODY;
    h1_read_body(h);
}

/* Parse and run whatever the input holds, one request at a time. Re-entrant calls (a handler answering
 * synchronously completes the request inside dispatch) just ask the outer loop to go round again. */
static void h1_process(struct h1 *h)
{
    if (h->in_process) {
        h->again = true;
        return;
    }
    h->in_process = true;
    do {
        h->again = false;
        if (h->c->closing || h->c->close_after_flush) break;
        if (h->state == H1_IDLE && gw_conn_output_len(h->c) > H1_PIPELINE_OUT_MAX &&
            evbuffer_get_length(bufferevent_get_input(h->c->bev))) {
            /* resumed from h1_on_write once the output is down to the limit; the input's high watermark
             * stops reading meanwhile */
            h->out_wait = true;
            bufferevent_setwatermark(h->c->bev, EV_WRITE, H1_PIPELINE_OUT_MAX, 0);
            break;
        }
        h->out_wait = false;
        enum h1_state before = h->state;
        if (h->state == H1_IDLE)
            h1_read_head(h);
        else if (h->state == H1_BODY)
            h1_read_body(h);
        if (h->state != before && (h->state == H1_IDLE || h->state == H1_BODY)) h->again = true;
    } while (h->again);
    h->in_process = false;
    if (h->peer_eof && !h->out_wait && !h->c->closing && !h->c->close_after_flush) {
        if (h->state == H1_IDLE) {
            /* the half-closed client's pipelined requests are all answered: deliver and close */
            h->state = H1_DONE;
            gw_conn_close_after_flush(h->c, false);
            return;
        }
        if (h->state == H1_BODY) {
            /* its body can never arrive: drop it, still deliver the answers before it */
            struct gw__req *r = h->req;
            h->req = NULL;
            if (r) gw__req_abort(r);
            h->state = H1_DONE;
            if (!h->c->closing) gw_conn_close_after_flush(h->c, false);
            return;
        }
    }
    h1_arm(h);
}

/* ---- stream ops (the response side) ---- */

static struct h1 *h1_of(const struct gw__req *r)
{
    return r->stream;
}

/* The response head is assembled with plain copies (no printf: it runs once per response) into a stack
 * buffer, or a heap one when custom headers are huge, and goes into the output with one copy. */
struct head_buf {
    char *p;
    size_t len, cap;
    bool failed;
    char stack[1024];
};

static void head_put(struct head_buf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (n > b->cap - b->len) {
        size_t cap = (b->len + n) * 2;
        char *np = b->p == b->stack ? malloc(cap) : realloc(b->p, cap);
        if (!np) {
            b->failed = true;
            return;
        }
        if (b->p == b->stack) memcpy(np, b->stack, b->len);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void head_str(struct head_buf *b, const char *s)
{
    head_put(b, s, strlen(s));
}

static int32_t h1_start(struct gw__req *r, int status, int64_t length)
{
    struct h1 *h = h1_of(r);
    struct gw_conn *c = h->c;
    const struct gw_http_conf *hc = hconf(h);
    bool streaming = length < 0;
    h->resp_chunked = streaming && h->version == 11;
    h->resp_keep_alive = h->keep_alive && !c->loop->draining && !c->loop->stopping &&
                         h->served + 1 < (uint32_t)hc->keepalive_requests && !(streaming && h->version == 10);
    struct head_buf hb = {.p = hb.stack, .cap = sizeof hb.stack};
    char num[24];
    head_put(&hb, "HTTP/1.1 ", 9);
    head_put(&hb, num, gw__fmt_u64(num, (uint64_t)status, 10));
    head_put(&hb, " ", 1);
    head_str(&hb, gw_http_reason(status));
    head_put(&hb, "\r\ndate: ", 8);
    head_str(&hb, gw_loop_date(c->loop));
    head_put(&hb, "\r\nserver: mmgw\r\n", 16);
    if (!streaming && status != 204 && status != 304) { /* RFC 9110 §8.6: never on a 204 */
        head_put(&hb, "content-length: ", 16);
        head_put(&hb, num, gw__fmt_u64(num, (uint64_t)length, 10));
        head_put(&hb, "\r\n", 2);
    }
    if (h->resp_chunked) head_str(&hb, "transfer-encoding: chunked\r\n");
    if (!h->resp_keep_alive) head_str(&hb, "connection: close\r\n");
    if (h->resp_keep_alive && h->version == 10) head_str(&hb, "connection: keep-alive\r\n");
    for (const struct gw_resp_header *x = r->resp_headers; x; x = x->next) {
        head_str(&hb, x->name);
        head_put(&hb, ": ", 2);
        head_str(&hb, x->value);
        head_put(&hb, "\r\n", 2);
    }
    head_put(&hb, "\r\n", 2);
    int rc = hb.failed ? -1 : evbuffer_add(bufferevent_get_output(c->bev), hb.p, hb.len);
    if (hb.p != hb.stack) free(hb.p);
    if (rc < 0) return MM_NOMEM;
    h1_arm(h);
    return MM_OK;
}

static int32_t h1_write(struct gw__req *r, const void *data, size_t len)
{
    struct h1 *h = h1_of(r);
    struct evbuffer *out = bufferevent_get_output(h->c->bev);
    int rc = 0;
    if (h->resp_chunked && r->resp == GW_RESP_STREAMING) {
        char size[24];
        size_t n = gw__fmt_u64(size, len, 16);
        size[n++] = '\r';
        size[n++] = '\n';
        rc = evbuffer_add(out, size, n);
        if (rc >= 0) rc = evbuffer_add(out, data, len);
        if (rc >= 0) rc = evbuffer_add(out, "\r\n", 2);
    } else {
        rc = evbuffer_add(out, data, len);
    }
    h1_arm(h);
    return rc < 0 ? MM_NOMEM : MM_OK;
}

static int32_t h1_end(struct gw__req *r)
{
    struct h1 *h = h1_of(r);
    if (h->resp_chunked && !r->head_only &&
        evbuffer_add(bufferevent_get_output(h->c->bev), "0\r\n\r\n", 5) != 0)
        return MM_NOMEM;
    h1_complete(h);
    return MM_OK;
}

static void h1_reset(struct gw__req *r)
{
    struct h1 *h = h1_of(r);
    /* closing without the last chunk is how HTTP/1.1 tells the client the body is incomplete */
    r->abort_cb = NULL;
    h->req = NULL;
    h->state = H1_DONE;
    gw__req_abort(r);
    gw_conn_close(h->c);
}

static size_t h1_queued(const struct gw__req *r)
{
    return gw_conn_output_len(h1_of(r)->c);
}

static void h1_watch_drain(struct gw__req *r)
{
    struct h1 *h = h1_of(r);
    if (!h->c->close_after_flush) bufferevent_setwatermark(h->c->bev, EV_WRITE, r->drain_low, 0);
}

static const struct gw_stream_ops h1_ops = {
    .start = h1_start,
    .write = h1_write,
    .end = h1_end,
    .reset = h1_reset,
    .queued = h1_queued,
    .watch_drain = h1_watch_drain,
};

/* ---- connection callbacks ---- */

static void h1_on_read(struct gw_conn *c)
{
    h1_process(c->proto_ctx);
}

static void h1_on_write(struct gw_conn *c)
{
    struct h1 *h = c->proto_ctx;
    struct gw__req *r = h->req;
    if (h->out_wait && h->state == H1_IDLE && gw_conn_output_len(c) <= H1_PIPELINE_OUT_MAX) {
        h1_process(h);
        return;
    }
    if (r && r->drain_cb && gw_conn_output_len(c) <= r->drain_low) gw__req_drained(r);
}

/* The client went away, reset, or timed out. deliver: it half-closed cleanly, so what is queued still goes
 * out (not after a reset or a failed write, where nothing can be delivered, nor after a send timeout, which
 * would only wait for the same output again). */
static void h1_gone(struct gw_conn *c, bool deliver)
{
    struct h1 *h = c->proto_ctx;
    if (deliver && h->state == H1_IDLE && !h->head_start_ns && gw_conn_output_len(c)) {
        /* the client half-closed after its last request */
        h->state = H1_DONE;
        gw_conn_close_after_flush(c, false);
        return;
    }
    if (h->req) {
        struct gw__req *r = h->req;
        h->req = NULL;
        gw__req_abort(r);
    }
    h->state = H1_DONE;
    gw_conn_close(c);
}

static void h1_on_eof(struct gw_conn *c)
{
    struct h1 *h = c->proto_ctx;
    if (h->state == H1_IDLE && h->out_wait && !c->peer_error && !h->peer_eof) {
        h->peer_eof = true; /* a clean half-close: answer the pipelined requests still in the input first */
        return;
    }
    h1_gone(c, !c->peer_error);
}

static void h1_on_timer(struct gw_conn *c)
{
    struct h1 *h = c->proto_ctx;
    const struct gw_http_conf *hc = hconf(h);
    int64_t now = mm_now_ns();
    if (gw_conn_output_len(c) && now - c->last_progress_ns >= hc->send_timeout_ms * 1000000) {
        mm_log_debug(GW_LOG_COMP, "%s: send timeout", c->remote);
        h1_gone(c, false); /* same as a reset: abort and close */
        return;
    }
    if (h->state == H1_IDLE) {
        if (h->head_start_ns && now - h->head_start_ns >= hc->client_header_timeout_ms * 1000000) {
            h1_fail(h, 408, "timed out reading the request head");
            return;
        }
        int64_t idle = (h->first ? hc->client_header_timeout_ms : hc->keepalive_timeout_ms) * 1000000;
        if (!h->head_start_ns && !gw_conn_output_len(c) && now - h->idle_since_ns >= idle) {
            h->state = H1_DONE;
            gw_conn_close(c);
            return;
        }
    } else if (h->state == H1_BODY && now - h->last_body_ns >= hc->client_body_timeout_ms * 1000000) {
        h1_fail(h, 408, "timed out reading the request body");
        return;
    }
    h1_arm(h);
}

static void h1_drain(struct gw_conn *c)
{
    struct h1 *h = c->proto_ctx;
    h->keep_alive = false;
    if (h->state == H1_IDLE && !h->head_start_ns) {
        h->state = H1_DONE;
        gw_conn_close_after_flush(c, false);
    }
}

static void h1_destroy(struct gw_conn *c)
{
    struct h1 *h = c->proto_ctx;
    if (!h) return;
    if (h->req) {
        struct gw__req *r = h->req;
        h->req = NULL;
        gw__req_abort(r);
    }
    free(h);
    c->proto_ctx = NULL;
}

const struct gw_proto gw_proto_h1 = {
    .name = "http/1.1",
    .on_read = h1_on_read,
    .on_write = h1_on_write,
    .on_eof = h1_on_eof,
    .on_timer = h1_on_timer,
    .drain = h1_drain,
    .destroy = h1_destroy,
};

int gw_h1_start(struct gw_conn *c)
{
    struct h1 *h = calloc(1, sizeof *h);
    if (!h) return -1;
    h->c = c;
    h->state = H1_IDLE;
    h->first = true;
    h->version = 11;
    h->idle_since_ns = mm_now_ns();
    c->proto = &gw_proto_h1;
    c->proto_ctx = h;
    gw_conn_set_direct_write(c);
    c->deadline_ns = 0;
    evtimer_del(c->timer);
    h1_arm(h);
    if (evbuffer_get_length(bufferevent_get_input(c->bev))) h1_process(h);
    return 0;
}
