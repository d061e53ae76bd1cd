/* Private to gateway/http: loops, connections, the request object and the protocol vtables. */
#ifndef GW_HTTP_INTERNAL_H
#define GW_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/ssl.h>

#include "gw_event_exec.h"
#include "gw_h1_parser.h"
#include "gw_http.h"
#include "gw_http_server.h"
#include "mm_buf.h"
#include "mm_clock.h"

#define GW_LOG_COMP "http"

/* ---- loop ---- */

struct gw_task {
    struct gw_task *next;
    void (*fn)(void *arg);
    void *arg;
};

struct gw_conn;
struct gw_listener_group;

/* Decimal (base 10) or lower-case hex (base 16) digits of v into buf (room for 20), returning their count;
 * no NUL. Status lines and lengths are written per response: no printf. */
static inline size_t gw__fmt_u64(char *buf, uint64_t v, unsigned base)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    return n;
}

#define GW_LOOP_ARENA_POOL 128             /* idle request arenas a loop keeps */
#define GW_REQ_ARENA_BLOCK 16384           /* a request arena's block size */
#define GW_REQ_ARENA_REUSE_MAX (32 * 1024) /* arenas that held more are freed, not kept */

/** A loop's listener on its own socket of a listener group (the group owns the socket). */
struct gw_loop_listener {
    struct gw_loop *loop;
    struct gw_listener_group *group;
    struct evconnlistener *ev;
    struct event *retry; /* re-enable after an accept error such as EMFILE */
};

struct gw_loop {
    struct gw_http *http;
    uint32_t index;
    pthread_t thread;
    bool started;
    struct event_base *base;
    struct gw_event_exec queue; /* the loop's gw_executor: any thread -> this loop */
    /* same-thread deferred calls: run from the loop, never inline */
    struct gw_task *d_head, *d_tail;
    struct event *defer_ev;
    /* state owned by the loop thread */
    struct gw_site *site;
    struct gw_loop_listener **listeners;
    size_t n_listeners;
    struct gw_conn *conns; /* doubly linked */
    uint32_t n_conns;
    uint32_t max_conns;
    bool accept_paused;
    bool drain_reported;
    uint32_t n_requests; /* live request objects */
    bool draining, stopping;
    struct event *stop_timer;
    /* connections whose output is written straight from the loop (see gw_conn_set_direct_write) */
    struct gw_conn *flush_head;
    struct event *flush_ev;
    /* request arenas kept for reuse (reset, one block each): a chat is served without a malloc of its own
     * arena block */
    struct mm_arena *arena_pool[GW_LOOP_ARENA_POOL];
    uint32_t n_arena_pool;
    struct gw_h1_field *fields; /* scratch for head parsing */
    uint32_t n_fields;
    char date[64]; /* cached IMF-fixdate */
    int64_t date_sec;
};

/** Run fn(arg) from this loop's event loop soon (same thread only). Returns 0 or -1 on out of memory. */
int gw_loop_defer(struct gw_loop *l, void (*fn)(void *arg), void *arg);
/** The cached "Date" header value. */
const char *gw_loop_date(struct gw_loop *l);
/** The loop's current config (its site's). */
const struct gw_config *gw_loop_config(const struct gw_loop *l);
void gw_loop_conn_closed(struct gw_loop *l);
/** A connection joined the loop (pauses accepting at the loop's share of max_connections). */
void gw__loop_conn_opened(struct gw_loop *l);
/* loop setup and teardown, used by gw_http_loops.c */
int32_t gw__loop_init(struct gw_loop *l, struct gw_http *h, uint32_t index, struct mm_err *err);
void gw__loop_fini(struct gw_loop *l);
/** Refuse further posts and run what is queued, on the loop's thread. */
void gw__loop_close_queue(struct gw_loop *l);
void gw_loop_request_freed(struct gw_loop *l);

/* ---- the set of loops ---- */

struct gw_http {
    uint32_t n;
    struct gw_loop *loops;
    struct gw_listener_group *groups; /* control thread only */
    struct gw_site *site;             /* current, control thread's reference */
    pthread_mutex_t mu;               /* barrier for synchronous commands */
    pthread_cond_t cv;
    uint32_t pending;
    _Atomic uint32_t drain_left;
    void (*drain_done)(void *ud);
    void *drain_ud;
    _Atomic uint64_t conns_open, conns_total, conns_h2, conns_tls, reqs_active, reqs_total;
};

/* ---- sites, routes ---- */

struct gw_route {
    char *method; /* NULL = any */
    char *pattern;
    size_t pattern_len;
    uint32_t flags;
    gw_handler_fn fn;
    void *ud;
};

struct gw_routes {
    struct gw_route *v;
    size_t n, cap;
};

/** Find the handler for (method, path). Returns the route, or NULL with *status 404 or 405 (and *allow the
 * comma-separated allowed methods, in buf). HEAD uses GET routes. */
const struct gw_route *gw_routes_match(const struct gw_routes *rt, const char *method, const char *path,
                                       int *status, char *allow, size_t allow_size);

struct gw_site {
    _Atomic int refs;
    struct gw_config *config;
    struct gw_routes *routes;
    SSL_CTX *ssl_ctx; /* NULL without ssl listeners */
    struct gw_site_hooks hooks;
};

/* ---- TLS ---- */

int32_t gw_tls_ctx_create(const struct gw_config *config, SSL_CTX **out, struct mm_err *err);

/* ---- connections ---- */

enum gw_conn_state { GW_CONN_TLS_HANDSHAKE, GW_CONN_DETECT, GW_CONN_PROTO, GW_CONN_LINGER, GW_CONN_CLOSED };

/** A protocol running on a connection (HTTP/1.1 or HTTP/2). */
struct gw_proto {
    const char *name;
    void (*on_read)(struct gw_conn *c);
    void (*on_write)(struct gw_conn *c); /* output at or below the write low watermark */
    void (*on_eof)(struct gw_conn *c);   /* peer closed, reset, or I/O error */
    void (*on_timer)(struct gw_conn *c);
    void (*drain)(struct gw_conn *c);   /* graceful shutdown */
    void (*destroy)(struct gw_conn *c); /* abort requests, free proto state */
};

struct gw_conn {
    struct gw_conn *prev, *next;
    struct gw_loop *loop;
    struct bufferevent *bev;
    int fd;
    bool tls;
    bool h2_allowed;
    enum gw_conn_state state;
    const struct gw_proto *proto;
    void *proto_ctx;
    struct event *timer;
    int64_t deadline_ns;
    int64_t last_progress_ns; /* last time output was drained to the socket */
    int64_t linger_until_ns;
    bool close_after_flush;
    bool linger;
    bool closing;      /* close requested: everything is freed from a deferred call */
    bool direct_write; /* output written by the loop's flush event, EV_WRITE only while the socket is full */
    bool flush_queued; /* on the loop's flush list */
    bool peer_error;   /* the last end of input was an error (reset, failed write), not a clean EOF */
    struct gw_conn *flush_next;
    char remote[64];
};

/** Close now (freed from a deferred call; every callback checks c->closing). */
void gw_conn_close(struct gw_conn *c);
/** Close once the output is written; with linger, shut down writing and discard input for a while first
 * so the client reads the response before any reset. */
void gw_conn_close_after_flush(struct gw_conn *c, bool linger);
/** Arm the connection's single timer for an absolute CLOCK_MONOTONIC deadline (0 = disarm). */
void gw_conn_set_deadline(struct gw_conn *c, int64_t deadline_ns);
/** Write the output straight to the socket once per loop round instead of through the bufferevent's write
 * event (plain sockets only; output must be empty). Saves the epoll_ctl add and delete around every response
 * and a loop round of latency; EV_WRITE is enabled only while the socket is full. */
void gw_conn_set_direct_write(struct gw_conn *c);
/** The loop's flush event: write the queued connections' output (gw_loop.c arms it, gw_conn.c runs it). */
void gw__conn_flush_queued(struct gw_loop *l);
/** Bytes waiting in the connection's output buffer. */
size_t gw_conn_output_len(const struct gw_conn *c);
/** Accept callback glue: set up a connection on fd for this loop. */
void gw_conn_accept(struct gw_loop *l, int fd, const struct sockaddr *sa, int salen, bool tls);
/** Drain: close idle connections, let busy ones finish. */
void gw_conn_drain_all(struct gw_loop *l);
/** Stop: close every connection now. */
void gw_conn_close_all(struct gw_loop *l);

extern const struct gw_proto gw_proto_h1;
extern const struct gw_proto gw_proto_h2;
/** Start a protocol on a connection whose first bytes (if any) are already in the input buffer. */
int gw_h1_start(struct gw_conn *c);
int gw_h2_start(struct gw_conn *c);

/* ---- requests ---- */

struct gw__req;

/** The transport side of one request (implemented by HTTP/1.1 and HTTP/2). */
struct gw_stream_ops {
    /** Send status and headers; content_length -1 = streaming (chunked / DATA frames until end). */
    int32_t (*start)(struct gw__req *r, int status, int64_t content_length);
    int32_t (*write)(struct gw__req *r, const void *data, size_t len);
    /** The response is complete. The transport releases its reference when it no longer needs it. */
    int32_t (*end)(struct gw__req *r);
    /** Cut a started response so the client sees a failure (HTTP/1.1 close, HTTP/2 RST_STREAM). */
    void (*reset)(struct gw__req *r);
    size_t (*queued)(const struct gw__req *r);
    /** The drain callback or watermark changed: arrange to call gw__req_drained when queued <= low. */
    void (*watch_drain)(struct gw__req *r);
};

struct gw_resp_header {
    struct gw_resp_header *next;
    const char *name;
    const char *value;
};

enum gw_resp_state { GW_RESP_NONE, GW_RESP_STREAMING, GW_RESP_DONE };

struct gw__req {
    struct gw_request pub; /* first: the public view */
    struct gw_loop *loop;
    struct gw_site *site;
    const struct gw_stream_ops *ops;
    void *stream; /* the transport's object; NULL once the transport let go */
    int refs;     /* all references */
    int ext_refs; /* references held through gw_request_ref by handlers */
    bool dispatched, in_handler, aborted, abort_delivered, logged;
    bool head_only; /* HEAD: no body bytes */
    enum gw_resp_state resp;
    int status;
    uint64_t bytes_out;
    struct gw_resp_header *resp_headers, *resp_headers_tail;
    void (*abort_cb)(struct gw_request *, void *);
    void *abort_ud;
    void (*drain_cb)(struct gw_request *, void *);
    void *drain_ud;
    size_t drain_low;
    bool drain_pending; /* a deferred drain notification is queued */
    /* built while the request arrives */
    struct gw_header *hdrs;
    size_t n_hdrs, cap_hdrs;
    size_t header_bytes;
    struct mm_buf body;
    int64_t max_body;
};

/** A new request on loop l with one (transport) reference. NULL on out of memory. */
struct gw__req *gw__req_create(struct gw_loop *l, const struct gw_stream_ops *ops, void *stream,
                               enum gw_http_version v, const char *remote);
/** Append a header (copied into the arena, name lower-cased). Returns MM_OK, MM_NOMEM, MM_TOO_LARGE. */
int32_t gw__req_add_header(struct gw__req *r, const char *name, size_t nl, const char *value, size_t vl);
/** Set method / target (copied). Returns MM_OK, MM_NOMEM, or MM_INVALID for a target without a path. */
int32_t gw__req_set_line(struct gw__req *r, const char *method, size_t ml, const char *target, size_t tl);
/** Append body bytes; MM_TOO_LARGE past client_max_body_size. */
int32_t gw__req_add_body(struct gw__req *r, const void *p, size_t n);
/** Route and call the handler (or answer 404/405). */
void gw__req_dispatch(struct gw__req *r);
/** cors_allow_origin (gw_cors.c): answer a preflight from an allowed origin (true: answered, or refused
 * with 403); add Access-Control-Allow-Origin for an allowed Origin to a response being started. */
bool gw__cors_preflight(struct gw__req *r);
int32_t gw__cors_headers(struct gw__req *r);
/** Answer an error before dispatch (400/408/413/431...), then the transport lets go as usual. */
void gw__req_fail(struct gw__req *r, int status, const char *message);
/** The transport is done with the request (response complete or never started): log, detach, unref. */
void gw__req_transport_done(struct gw__req *r);
/** The client went away or timed out: mark aborted, schedule the abort callback, detach, unref. */
void gw__req_abort(struct gw__req *r);
/** Output dropped to or below the drain watermark (called by the transport from the event loop). */
void gw__req_drained(struct gw__req *r);
/** The handler let go without finishing: a 500 if nothing was sent, else cut the stream. */
void gw__req_finish_unanswered(struct gw__req *r);
/** On a started stream: one SSE event carrying json (past the stream_buffer_max cap), then the end. */
int32_t gw__req_sse_error(struct gw__req *r, const char *json);
/** Internal references (not the handler's). */
void gw__req_ref(struct gw__req *r);
void gw__req_unref(struct gw__req *r);

static inline struct gw__req *gw__req_of(struct gw_request *req)
{
    return (struct gw__req *)req;
}

#endif
