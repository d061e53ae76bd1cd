/* gRPC over one HTTP/2 connection per event loop and worker (see gw_upstream_h2.h).
 *
 * Life of a call: gw_h2_call submits HEADERS + one length-prefixed message + END_STREAM and arms the
 * connection's work event, so every request started while the loop handles a burst leaves in one write.
 * Reading runs nghttp2 over what the socket has; DATA bytes collect in the stream's buffer and the stream
 * goes on the connection's ready list. After nghttp2 returns, the ready streams are dispatched: complete
 * messages are handed to the consumer one by one (never from inside an nghttp2 callback, so a consumer may
 * start, cancel or pause calls freely), each one's bytes are then returned to the worker's flow-control
 * window, and once the stream is closed and its messages are out, on_end gets the gRPC status.
 *
 * References: a stream is held by its owner (until on_end or cancel), by the session (submit until
 * nghttp2 closes it, so nghttp2 never reads a freed request body) and by the ready list. A connection is
 * held by its owner (the channel's per-loop slot), by each of its streams and for the duration of any of
 * its event callbacks; the socket and session go when it fails or when the last reference does. */
#include "gw_upstream_h2.h"

#include <errno.h>
#include <pthread.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "gw_upstream_internal.h"
#include "mm_buf.h"
#include "mm_clock.h"
#include "mm_log.h"

#define STREAM_WINDOW 65535     /* the most a paused stream holds back (gRPC C core's default too) */
#define CONN_WINDOW (1 << 30)   /* one paused stream must not block the connection's others */
#define READ_CHUNK (64 * 1024)  /* bytes per recv() */
#define WRITE_HIGH (256 * 1024) /* frames pulled from nghttp2 per write */
#define MAX_MESSAGE (64u << 20) /* larger responses are a protocol error; larger requests use gRPC C core */
#define BACKOFF_MIN_MS 100      /* after a failed connect, calls go through gRPC C core for this long */
#define BACKOFF_MAX_MS 2000

/* Whether a loop's thread is still running. The gateway frees its loops (executor, base) after their threads
 * exited and before it retires the last configuration, whose channels then release their connections: by
 * then neither the executor nor the base may be touched. A thread-local value with a destructor tells us. */
struct loop_life {
    int alive; /* under life_mu */
    int refs;  /* the thread's + one per connection; under life_mu */
};

struct gw_h2_conn {
    int refs;
    struct loop_life *life;
    struct event_base *base;
    struct gw_executor ex;
    int fd;
    nghttp2_session *h2;
    struct event ev_read, ev_write, ev_work, ev_keepalive;
    bool connecting, failed, draining, work_armed, write_armed, ka_armed;
    uint32_t keepalive_ms;
    uint64_t last_rx_ms, ping_sent_ms; /* keepalive: last bytes read; an unanswered PING (0 = none) */
    uint32_t backoff_ms;               /* the wait after this connection fails to connect */
    uint64_t retry_at_ms;
    struct mm_buf out; /* frames nghttp2 produced that the socket has not taken yet, from out_off */
    size_t out_off;
    struct gw_h2_stream *streams; /* attached to the session */
    struct gw_h2_stream *ready_head, *ready_tail;
    char target[256];
    char authority[256];
    char *auth; /* "Bearer TOKEN" for the authorization header, or NULL */
};

struct gw_h2_stream {
    struct gw_h2_conn *c;
    int refs;
    int32_t id;
    struct gw_h2_stream_cbs cb;
    void *arg;
    const char *method;
    uint8_t *req; /* the framed request (after the struct, same block), until nghttp2 has taken all of it */
    size_t req_len, req_off;
    struct mm_buf rx;   /* received bytes not yet delivered, from rx_off */
    char rx_first[256]; /* rx's storage while a response is small (a message of a few tokens) */
    size_t rx_off;
    int http_status;
    bool have_grpc_status;
    int grpc_status;
    char grpc_msg[256];
    size_t grpc_msg_len;
    uint32_t close_error;
    bool attached, closed, paused, cancelled, ended, in_ready, has_deadline;
    bool abort_now;   /* a local failure (deadline, malformed message): end without delivering more */
    bool final_local; /* final holds a local status */
    struct gw_call_status final;
    struct event ev_deadline;
    struct gw_h2_stream *prev, *next; /* in c->streams */
    struct gw_h2_stream *ready_next;
};

/* ---- references ---- */

static pthread_mutex_t life_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t life_key;
static int life_key_ok;
static pthread_once_t life_once = PTHREAD_ONCE_INIT;

static void life_unref_locked(struct loop_life *l)
{
    if (--l->refs == 0) free(l);
}

/* The loop thread exits: its connections' executor and base are going away. */
static void life_thread_exit(void *arg)
{
    struct loop_life *l = arg;
    pthread_mutex_lock(&life_mu);
    l->alive = 0;
    life_unref_locked(l);
    pthread_mutex_unlock(&life_mu);
}

static void life_key_init(void)
{
    life_key_ok = pthread_key_create(&life_key, life_thread_exit) == 0;
}

/* This (loop) thread's liveness record, with a reference for the caller; NULL on failure. */
static struct loop_life *life_here(void)
{
    pthread_once(&life_once, life_key_init);
    if (!life_key_ok) return NULL;
    struct loop_life *l = pthread_getspecific(life_key);
    if (!l) {
        l = calloc(1, sizeof *l);
        if (!l) return NULL;
        l->alive = 1;
        l->refs = 1;
        if (pthread_setspecific(life_key, l) != 0) {
            free(l);
            return NULL;
        }
    }
    pthread_mutex_lock(&life_mu);
    l->refs++;
    pthread_mutex_unlock(&life_mu);
    return l;
}

static void conn_free(struct gw_h2_conn *c, bool touch_events)
{
    if (touch_events) {
        event_del(&c->ev_read);
        event_del(&c->ev_write);
        event_del(&c->ev_work);
        event_del(&c->ev_keepalive);
    }
    if (c->h2) nghttp2_session_del(c->h2);
    if (c->fd >= 0) close(c->fd);
    mm_buf_free(&c->out);
    if (c->life) {
        pthread_mutex_lock(&life_mu);
        life_unref_locked(c->life);
        pthread_mutex_unlock(&life_mu);
    }
    free(c->auth);
    free(c);
}

static void conn_unref(struct gw_h2_conn *c)
{
    if (--c->refs == 0) conn_free(c, true);
}

static void stream_unref(struct gw_h2_stream *s)
{
    if (--s->refs > 0) return;
    if (s->has_deadline) event_del(&s->ev_deadline);
    mm_buf_free(&s->rx);
    struct gw_h2_conn *c = s->c;
    free(s);
    conn_unref(c);
}

static void conn_work_soon(struct gw_h2_conn *c)
{
    if (c->work_armed) return;
    c->work_armed = true;
    event_active(&c->ev_work, EV_TIMEOUT, 0);
}

static void stream_ready(struct gw_h2_stream *s)
{
    if (s->in_ready || s->ended || s->cancelled) return;
    s->in_ready = true;
    s->refs++;
    s->ready_next = NULL;
    if (s->c->ready_tail)
        s->c->ready_tail->ready_next = s;
    else
        s->c->ready_head = s;
    s->c->ready_tail = s;
}

/* The session lets go of the stream (nghttp2 closed it, or the connection failed). */
static void stream_detach(struct gw_h2_stream *s)
{
    struct gw_h2_conn *c = s->c;
    if (!s->attached) return;
    s->attached = false;
    s->closed = true;
    if (s->prev)
        s->prev->next = s->next;
    else
        c->streams = s->next;
    if (s->next) s->next->prev = s->prev;
    s->prev = s->next = NULL;
    stream_ready(s); /* the end has to be delivered; the ready list keeps it alive until then */
    stream_unref(s); /* the session's reference */
}

/* ---- status ---- */

static void status_local(struct gw_h2_stream *s, int grpc_code, const char *what)
{
    if (s->final_local) return;
    s->final_local = true;
    gw_up_status_fill_text(&s->final, s->c->target, s->method, grpc_code, what, strlen(what));
}

static int grpc_from_http(int status)
{
    switch (status) {
    case 400:
        return 13; /* INTERNAL */
    case 401:
        return 16; /* UNAUTHENTICATED */
    case 403:
        return 7; /* PERMISSION_DENIED */
    case 404:
        return 12; /* UNIMPLEMENTED */
    case 429:
    case 502:
    case 503:
    case 504:
        return 14; /* UNAVAILABLE */
    default:
        return 2; /* UNKNOWN */
    }
}

static int grpc_from_rst(uint32_t error_code)
{
    switch (error_code) {
    case NGHTTP2_REFUSED_STREAM:
        return 14; /* UNAVAILABLE: the worker never started it, another may */
    case NGHTTP2_CANCEL:
        return 1; /* CANCELLED */
    case NGHTTP2_ENHANCE_YOUR_CALM:
        return 8; /* RESOURCE_EXHAUSTED */
    case NGHTTP2_INADEQUATE_SECURITY:
        return 7; /* PERMISSION_DENIED */
    default:
        return 13; /* INTERNAL */
    }
}

/* The call's status once its stream is over (gRPC's rules: trailers, else the HTTP status, else the
 * reset code). */
static void final_status(struct gw_h2_stream *s, struct gw_call_status *st)
{
    if (s->final_local) {
        *st = s->final;
        return;
    }
    const char *target = s->c->target;
    char why[96];
    if (s->have_grpc_status) {
        if (s->grpc_status == 0 && s->rx.len > s->rx_off) {
            gw_up_status_fill_text(st, target, s->method, 13, "the stream ended inside a message", 33);
            return;
        }
        gw_up_status_fill_text(st, target, s->method, s->grpc_status, s->grpc_msg, s->grpc_msg_len);
    } else if (s->http_status && s->http_status != 200) {
        int n = snprintf(why, sizeof why, "HTTP status %d", s->http_status);
        gw_up_status_fill_text(st, target, s->method, grpc_from_http(s->http_status), why, (size_t)n);
    } else if (s->close_error != NGHTTP2_NO_ERROR) {
        int n = snprintf(why, sizeof why, "stream reset by the worker (%s)",
                         nghttp2_http2_strerror(s->close_error));
        gw_up_status_fill_text(st, target, s->method, grpc_from_rst(s->close_error), why, (size_t)n);
    } else {
        gw_up_status_fill_text(st, target, s->method, 13, "the stream ended without a gRPC status", 38);
    }
}

/* ---- delivery (loop thread, outside nghttp2) ---- */

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void stream_reset(struct gw_h2_stream *s)
{
    if (s->attached && s->c->h2) {
        nghttp2_submit_rst_stream(s->c->h2, NGHTTP2_FLAG_NONE, s->id, NGHTTP2_CANCEL);
        conn_work_soon(s->c);
    }
}

static void stream_end(struct gw_h2_stream *s)
{
    struct gw_call_status st;
    final_status(s, &st);
    s->ended = true;
    if (s->has_deadline) {
        event_del(&s->ev_deadline);
        s->has_deadline = false;
    }
    s->cb.on_end(s->arg, &st);
    stream_unref(s); /* the owner's: the handle is gone */
}

static void deliver(struct gw_h2_stream *s)
{
    struct gw_h2_conn *c = s->c;
    while (!s->cancelled && !s->ended && !s->paused && !s->abort_now) {
        size_t avail = s->rx.len - s->rx_off;
        if (avail < 5) break;
        const uint8_t *p = (const uint8_t *)s->rx.data + s->rx_off;
        uint32_t len = be32(p + 1);
        if (p[0] != 0 || len > MAX_MESSAGE) {
            /* we never offer compression; and nothing the worker sends is that large */
            status_local(s, 13, p[0] != 0 ? "compressed message (not negotiated)" : "message too large");
            s->abort_now = true;
            stream_reset(s);
            break;
        }
        if (avail - 5 < len) break;
        s->cb.on_message(s->arg, p + 5, len);
        s->rx_off += 5 + (size_t)len;
        /* the message is consumed: give its bytes back to the worker's window */
        if (s->attached && c->h2 && nghttp2_session_consume_stream(c->h2, s->id, 5 + (size_t)len) == 0)
            conn_work_soon(c);
    }
    if (s->rx_off == s->rx.len) {
        mm_buf_reset(&s->rx);
        s->rx_off = 0;
    } else if (s->rx_off >= 16384) {
        /* a message is still partial: move it to the front, or a long stream read in pieces that always
         * end mid-message would grow the buffer by everything it ever received */
        mm_buf_consume(&s->rx, s->rx_off);
        s->rx_off = 0;
    }
    if (s->cancelled || s->ended) return;
    if (!s->abort_now && !s->closed) return;
    if (!s->abort_now && s->paused) {
        /* over, but messages are still held back: an OK end waits for them (as gRPC delivers every
         * message before the status); an error ends now and drops them */
        struct gw_call_status st;
        final_status(s, &st);
        if (st.code == MM_OK && s->rx.len > s->rx_off) return;
    }
    stream_end(s);
}

static void dispatch(struct gw_h2_conn *c)
{
    while (c->ready_head) {
        struct gw_h2_stream *s = c->ready_head;
        c->ready_head = s->ready_next;
        if (!c->ready_head) c->ready_tail = NULL;
        s->in_ready = false;
        deliver(s);
        stream_unref(s); /* the ready list's */
    }
}

/* ---- failure ---- */

static void conn_fail(struct gw_h2_conn *c, const char *why)
{
    if (c->failed) return;
    c->failed = true;
    if (c->connecting) {
        c->retry_at_ms = (uint64_t)mm_now_ms() + c->backoff_ms;
        mm_log_debug("upstream", "connect to %s failed (%s); gRPC C core for %u ms", c->target, why,
                     c->backoff_ms);
    } else {
        c->retry_at_ms = (uint64_t)mm_now_ms();
        c->backoff_ms = 0;
    }
    c->connecting = false;
    event_del(&c->ev_read);
    event_del(&c->ev_write);
    event_del(&c->ev_keepalive);
    c->ka_armed = false;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    char msg[200];
    snprintf(msg, sizeof msg, "connection to the worker lost: %s", why);
    while (c->streams) {
        struct gw_h2_stream *s = c->streams;
        if (!s->have_grpc_status) status_local(s, 14, msg); /* UNAVAILABLE */
        stream_detach(s);
    }
    if (c->h2) nghttp2_session_del(c->h2);
    c->h2 = NULL;
    mm_buf_reset(&c->out);
    c->out_off = 0;
    /* the ends are delivered by dispatch(): a failure found by conn_flush (a send() that meets the RST of a
     * worker killed since the last read) or by a timer comes after the handler's dispatch, and the read and
     * write events are gone, so without this the streams would wait for ever */
    if (c->ready_head) conn_work_soon(c);
}

/* ---- I/O ---- */

static void conn_flush(struct gw_h2_conn *c)
{
    if (c->failed || c->connecting || c->write_armed) return;
    for (;;) {
        while (c->out.len - c->out_off < WRITE_HIGH) {
            const uint8_t *d;
            ssize_t n = nghttp2_session_mem_send(c->h2, &d);
            if (n < 0) {
                conn_fail(c, nghttp2_strerror((int)n));
                return;
            }
            if (n == 0) break;
            if (mm_buf_append(&c->out, d, (size_t)n)) {
                conn_fail(c, "out of memory");
                return;
            }
        }
        size_t pending = c->out.len - c->out_off;
        if (!pending) break;
        ssize_t w = send(c->fd, c->out.data + c->out_off, pending, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                c->write_armed = true;
                event_add(&c->ev_write, NULL);
                return;
            }
            conn_fail(c, strerror(errno));
            return;
        }
        c->out_off += (size_t)w;
        if (c->out_off == c->out.len) {
            mm_buf_reset(&c->out);
            c->out_off = 0;
        }
    }
    if (!nghttp2_session_want_read(c->h2) && !nghttp2_session_want_write(c->h2))
        conn_fail(c, "the connection was closed (GOAWAY)");
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct gw_h2_conn *c = arg;
    uint8_t buf[READ_CHUNK];
    c->refs++;
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n > 0) {
            if (c->keepalive_ms) c->last_rx_ms = (uint64_t)mm_now_ms();
            ssize_t r = nghttp2_session_mem_recv(c->h2, buf, (size_t)n);
            if (r < 0) {
                conn_fail(c, nghttp2_strerror((int)r));
                break;
            }
            if ((size_t)n < sizeof buf) break;
            continue;
        }
        if (n == 0) {
            conn_fail(c, "the worker closed the connection");
            break;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) conn_fail(c, strerror(errno));
        break;
    }
    dispatch(c);
    conn_flush(c);
    conn_unref(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct gw_h2_conn *c = arg;
    c->refs++;
    c->write_armed = false;
    if (c->connecting) {
        int e = 0;
        socklen_t len = sizeof e;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
        if (e != 0) {
            conn_fail(c, strerror(e));
        } else {
            c->connecting = false;
            c->backoff_ms = 0;
            event_add(&c->ev_read, NULL);
        }
    }
    dispatch(c);
    conn_flush(c);
    conn_unref(c);
}

static void on_work(evutil_socket_t fd, short what, void *arg)
{
    struct gw_h2_conn *c = arg;
    c->refs++;
    c->work_armed = false;
    dispatch(c);
    conn_flush(c);
    conn_unref(c);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct gw_h2_stream *s = arg;
    s->has_deadline = false;
    gw_h2_fail(s, 4, "deadline exceeded"); /* DEADLINE_EXCEEDED */
}

static void keepalive_arm(struct gw_h2_conn *c)
{
    if (c->ka_armed || !c->keepalive_ms || c->failed) return;
    /* checked a few times per period, so a PING leaves at most a third late */
    uint32_t tick = c->keepalive_ms / 3 ? c->keepalive_ms / 3 : 1;
    struct timeval tv = {(time_t)(tick / 1000), (suseconds_t)(tick % 1000) * 1000};
    evtimer_add(&c->ev_keepalive, &tv);
    c->ka_armed = true;
}

/* While streams are open: PING after keepalive_ms of silence; fail when the answer takes as long again. */
static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
    struct gw_h2_conn *c = arg;
    c->ka_armed = false;
    if (c->failed) return;
    if (!c->streams) {
        c->ping_sent_ms = 0; /* idle: nothing to protect, no pings (a worker may count them as abuse) */
        return;
    }
    c->refs++;
    uint64_t now = (uint64_t)mm_now_ms();
    if (c->connecting && now - c->last_rx_ms >= c->keepalive_ms) {
        conn_fail(c, "connect timed out");
        dispatch(c);
    } else if (c->ping_sent_ms && now - c->ping_sent_ms >= c->keepalive_ms) {
        conn_fail(c, "no answer to a keepalive PING");
        dispatch(c);
    } else {
        if (!c->ping_sent_ms && now - c->last_rx_ms >= c->keepalive_ms && !c->connecting &&
            nghttp2_submit_ping(c->h2, NGHTTP2_FLAG_NONE, NULL) == 0) {
            c->ping_sent_ms = now;
            conn_flush(c);
        }
        keepalive_arm(c);
    }
    conn_unref(c);
}

/* ---- nghttp2 callbacks (inside mem_recv / mem_send: only record, never call consumers) ---- */

static struct gw_h2_stream *stream_of(nghttp2_session *h2, int32_t id)
{
    return nghttp2_session_get_stream_user_data(h2, id);
}

static int cb_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    if (f->hd.type != NGHTTP2_HEADERS) return 0;
    struct gw_h2_stream *s = stream_of(h2, f->hd.stream_id);
    if (!s) return 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 4; i++) v = v * 10 + (value[i] - '0');
        s->http_status = v;
    } else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0) {
        int v = 0;
        for (size_t i = 0; i < valuelen && i < 3 && value[i] >= '0' && value[i] <= '9'; i++)
            v = v * 10 + (value[i] - '0');
        s->have_grpc_status = true;
        s->grpc_status = v;
    } else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0) {
        /* percent-encoded (gRPC over HTTP/2, "Status-Message") */
        size_t o = 0;
        for (size_t i = 0; i < valuelen && o + 1 < sizeof s->grpc_msg; i++) {
            static const char hex[] = "0123456789ABCDEF0123456789abcdef";
            if (value[i] == '%' && i + 2 < valuelen) {
                const char *a = memchr(hex, value[i + 1], 32), *b = memchr(hex, value[i + 2], 32);
                if (a && b) {
                    s->grpc_msg[o++] = (char)(((a - hex) % 16) << 4 | ((b - hex) % 16));
                    i += 2;
                    continue;
                }
            }
            s->grpc_msg[o++] = (char)value[i];
        }
        s->grpc_msg_len = o;
    }
    return 0;
}

static int cb_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud)
{
    /* the connection window is ours to manage: give it back at once; the stream's waits for delivery */
    nghttp2_session_consume_connection(h2, len);
    struct gw_h2_stream *s = stream_of(h2, id);
    if (!s || s->cancelled || s->ended || s->abort_now) {
        nghttp2_session_consume_stream(h2, id, len);
        return 0;
    }
    if (mm_buf_append(&s->rx, data, len)) {
        status_local(s, 8, "out of memory buffering a response"); /* RESOURCE_EXHAUSTED */
        s->abort_now = true;
        nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
    }
    stream_ready(s);
    return 0;
}

static int cb_close(nghttp2_session *h2, int32_t id, uint32_t error_code, void *ud)
{
    struct gw_h2_stream *s = stream_of(h2, id);
    if (!s) return 0;
    s->close_error = error_code;
    stream_detach(s);
    return 0;
}

static int cb_frame(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    struct gw_h2_conn *c = ud;
    if (f->hd.type == NGHTTP2_GOAWAY) c->draining = true; /* no new streams; running ones may finish */
    if (f->hd.type == NGHTTP2_PING && (f->hd.flags & NGHTTP2_FLAG_ACK)) c->ping_sent_ms = 0;
    return 0;
}

static ssize_t read_body(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud)
{
    struct gw_h2_stream *s = src->ptr;
    size_t n = s->req_len - s->req_off;
    if (n > len) n = len;
    if (n) memcpy(buf, s->req + s->req_off, n);
    s->req_off += n;
    if (s->req_off == s->req_len) {
        *flags |= NGHTTP2_DATA_FLAG_EOF; /* END_STREAM: the client's half-close */
        s->req = NULL;                   /* in the stream's block */
        s->req_len = s->req_off = 0;
    }
    return (ssize_t)n;
}

/* ---- public ---- */

static nghttp2_session_callbacks *h2_callbacks;

static void init_callbacks(void)
{
    if (nghttp2_session_callbacks_new(&h2_callbacks) != 0) return;
    nghttp2_session_callbacks_set_on_header_callback(h2_callbacks, cb_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h2_callbacks, cb_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks, cb_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(h2_callbacks, cb_frame);
}

static nghttp2_session_callbacks *callbacks(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_callbacks);
    return h2_callbacks;
}

struct gw_h2_conn *gw_h2_conn_open(struct event_base *base, const struct gw_executor *ex, const char *target,
                                   const struct sockaddr *addr, uint32_t addrlen, uint32_t keepalive_ms,
                                   const char *auth, struct mm_err *err)
{
    nghttp2_session_callbacks *cbs = callbacks();
    if (!cbs) {
        mm_err_set(err, MM_NOMEM, "upstream: out of memory");
        return NULL;
    }
    struct gw_h2_conn *c = calloc(1, sizeof *c);
    if (!c) {
        mm_err_set(err, MM_NOMEM, "upstream: out of memory");
        return NULL;
    }
    c->refs = 1;
    c->base = base;
    c->ex = *ex;
    c->fd = -1;
    c->life = life_here();
    if (!c->life || (auth && !(c->auth = strdup(auth)))) {
        if (c->life) {
            pthread_mutex_lock(&life_mu);
            life_unref_locked(c->life);
            pthread_mutex_unlock(&life_mu);
        }
        free(c);
        mm_err_set(err, MM_NOMEM, "upstream: out of memory");
        return NULL;
    }
    c->backoff_ms = BACKOFF_MIN_MS;
    mm_buf_init(&c->out, 0);
    snprintf(c->target, sizeof c->target, "%s", target);
    /* gRPC's :authority is the target without a scheme; a unix socket's is "localhost" */
    snprintf(c->authority, sizeof c->authority, "%s", addr->sa_family == AF_UNIX ? "localhost" : target);
    event_assign(&c->ev_work, base, -1, 0, on_work, c);
    evtimer_assign(&c->ev_keepalive, base, on_keepalive, c);
    c->keepalive_ms = keepalive_ms;
    c->last_rx_ms = (uint64_t)mm_now_ms();

    nghttp2_option *opt = NULL;
    if (nghttp2_option_new(&opt) != 0) goto nomem;
    nghttp2_option_set_no_auto_window_update(opt, 1);
    int rc = nghttp2_session_client_new2(&c->h2, cbs, c, opt);
    nghttp2_option_del(opt);
    if (rc != 0) goto nomem;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW}};
    if (nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, iv, 2) != 0 ||
        nghttp2_session_set_local_window_size(c->h2, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW) != 0)
        goto nomem;

    c->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        mm_err_set(err, MM_IO, "upstream: socket: %s", strerror(errno));
        conn_free(c, false);
        return NULL;
    }
    if (addr->sa_family != AF_UNIX) {
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    }
    event_assign(&c->ev_read, base, c->fd, EV_READ | EV_PERSIST, on_read, c);
    event_assign(&c->ev_write, base, c->fd, EV_WRITE, on_write, c);
    if (connect(c->fd, addr, addrlen) == 0) {
        c->backoff_ms = 0;
        event_add(&c->ev_read, NULL);
    } else if (errno == EINPROGRESS) {
        c->connecting = true;
        c->write_armed = true;
        event_add(&c->ev_write, NULL);
    } else {
        /* refused at once (loopback, unix sockets): a failed connection that keeps the backoff */
        c->connecting = true;
        conn_fail(c, strerror(errno));
        return c;
    }
    conn_work_soon(c); /* the preface and SETTINGS */
    return c;
nomem:
    mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    conn_free(c, false);
    return NULL;
}

int gw_h2_conn_usable(const struct gw_h2_conn *c)
{
    return !c->failed && !c->draining;
}

uint64_t gw_h2_conn_retry_at_ms(const struct gw_h2_conn *c)
{
    return c->retry_at_ms;
}

uint32_t gw_h2_conn_next_backoff_ms(const struct gw_h2_conn *c)
{
    if (c->backoff_ms == 0) return 0;
    uint32_t b = c->backoff_ms * 2;
    return b > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b;
}

void gw_h2_conn_set_backoff(struct gw_h2_conn *c, uint32_t backoff_ms)
{
    if (backoff_ms && c->connecting) c->backoff_ms = backoff_ms;
}

static void release_on_loop(void *arg)
{
    conn_unref(arg);
}

void gw_h2_conn_release(struct gw_h2_conn *c)
{
    if (!c) return;
    /* While the loop's thread runs, its executor takes the teardown (a loop runs what it accepted before its
     * thread ends, with its base alive). Once the thread is gone, so are its executor and (by the time a
     * channel is released) its base: nothing may touch them, and nothing else holds c. */
    pthread_mutex_lock(&life_mu);
    int posted = c->life && c->life->alive && gw_executor_post(&c->ex, release_on_loop, c) == 0;
    pthread_mutex_unlock(&life_mu);
    if (!posted && --c->refs == 0) conn_free(c, false);
}

struct gw_h2_stream *gw_h2_call(struct gw_h2_conn *c, const char *method, const ProtobufCMessage *msg,
                                uint32_t timeout_ms, const struct gw_h2_stream_cbs *cb, void *arg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (!gw_h2_conn_usable(c) || len > MAX_MESSAGE) return NULL;
    /* the stream and its framed request in one block (the request is short-lived: sent at the next write) */
    struct gw_h2_stream *s = malloc(sizeof *s + len + 5);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->req = (uint8_t *)(s + 1);
    s->c = c;
    s->refs = 1;
    s->cb = *cb;
    s->arg = arg;
    s->method = method;
    mm_buf_init_with(&s->rx, 0, s->rx_first, sizeof s->rx_first);
    s->req[0] = 0;
    s->req[1] = (uint8_t)(len >> 24);
    s->req[2] = (uint8_t)(len >> 16);
    s->req[3] = (uint8_t)(len >> 8);
    s->req[4] = (uint8_t)len;
    protobuf_c_message_pack(msg, s->req + 5);
    s->req_len = len + 5;

#define NV(n, v, fl)                                                                                         \
    {                                                                                                        \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_COPY_NAME | (fl)        \
    }
    char timeout[24];
    nghttp2_nv nva[9] = {
        NV(":method", "POST", NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV(":scheme", "http", NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV(":path", method, NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV(":authority", c->authority, NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV("te", "trailers", NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV("content-type", "application/grpc", NGHTTP2_NV_FLAG_NO_COPY_VALUE),
        NV("user-agent", "mmgw", NGHTTP2_NV_FLAG_NO_COPY_VALUE),
    };
    size_t n_nv = 7;
    if (timeout_ms) {
        snprintf(timeout, sizeof timeout, "%um", timeout_ms);
        nva[n_nv++] = (nghttp2_nv)NV("grpc-timeout", timeout, NGHTTP2_NV_FLAG_NONE);
    }
    if (c->auth) /* never indexed: a secret */
        nva[n_nv++] = (nghttp2_nv)NV("authorization", c->auth,
                                     NGHTTP2_NV_FLAG_NO_COPY_VALUE | NGHTTP2_NV_FLAG_NO_INDEX);
#undef NV
    nghttp2_data_provider prd;
    prd.source.ptr = s;
    prd.read_callback = read_body;
    int32_t id = nghttp2_submit_request(c->h2, NULL, nva, n_nv, &prd, s);
    if (id < 0) {
        if (id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE) c->draining = true; /* ids used up: a new one */
        free(s);
        return NULL;
    }
    c->refs++;
    s->id = id;
    s->attached = true;
    s->refs++; /* the session's */
    s->next = c->streams;
    if (c->streams) c->streams->prev = s;
    c->streams = s;
    keepalive_arm(c);
    if (timeout_ms) {
        evtimer_assign(&s->ev_deadline, c->base, on_deadline, s);
        struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
        evtimer_add(&s->ev_deadline, &tv);
        s->has_deadline = true;
    }
    conn_work_soon(c);
    return s;
}

void gw_h2_pause(struct gw_h2_stream *s)
{
    s->paused = true;
}

void gw_h2_resume(struct gw_h2_stream *s)
{
    if (!s->paused) return;
    s->paused = false;
    stream_ready(s);
    conn_work_soon(s->c);
}

void gw_h2_fail(struct gw_h2_stream *s, int grpc_code, const char *what)
{
    if (s->ended || s->cancelled) return;
    status_local(s, grpc_code, what);
    s->abort_now = true;
    stream_reset(s);
    stream_ready(s);
    conn_work_soon(s->c);
}

void gw_h2_cancel(struct gw_h2_stream *s)
{
    if (!s || s->ended || s->cancelled) return;
    s->cancelled = true;
    if (s->has_deadline) {
        event_del(&s->ev_deadline);
        s->has_deadline = false;
    }
    stream_reset(s);
    stream_unref(s); /* the owner's */
}
