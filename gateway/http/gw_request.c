/* The request object: creation by a transport, routing, the handler call, reference counting, abort and
 * drain notifications, and the log phase. Responses are in gw_response.c. */
#include "gw_http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "mm_log.h"

static _Atomic uint64_t req_counter;
static uint32_t id_salt;
static pthread_once_t salt_once = PTHREAD_ONCE_INIT;

static void init_salt(void)
{
    /* ids differ between runs, so log lines from two processes never share one */
    if (getrandom(&id_salt, sizeof id_salt, GRND_NONBLOCK) != sizeof id_salt)
        id_salt = (uint32_t)mm_now_ns() ^ (uint32_t)getpid();
}

/* "%08x%08llx" of (salt, id) without printf: it runs once per request. */
static void format_id(char *out, uint32_t salt, uint64_t id)
{
    static const char hex[] = "0123456789abcdef";
    for (int i = 7; i >= 0; i--, salt >>= 4) out[i] = hex[salt & 15];
    char tmp[16];
    int n = 0;
    do {
        tmp[n++] = hex[id & 15];
        id >>= 4;
    } while (id);
    while (n < 8) tmp[n++] = '0';
    for (int i = 0; i < n; i++) out[8 + i] = tmp[n - 1 - i];
    out[8 + n] = '\0';
}

static void body_free(void *arg)
{
    struct gw__req *r = arg;
    mm_buf_free(&r->body);
}

struct gw__req *gw__req_create(struct gw_loop *l, const struct gw_stream_ops *ops, void *stream,
                               enum gw_http_version v, const char *remote)
{
    pthread_once(&salt_once, init_salt);
    struct mm_arena *a =
        l->n_arena_pool ? l->arena_pool[--l->n_arena_pool] : mm_arena_create(GW_REQ_ARENA_BLOCK);
    if (!a) return NULL;
    struct gw__req *r = mm_arena_calloc(a, 1, sizeof *r);
    char *id = mm_arena_alloc(a, 25);
    char *rem = mm_arena_strdup(a, remote ? remote : "");
    if (!r || !id || !rem || mm_arena_cleanup_add(a, body_free, r) != 0) {
        mm_arena_destroy(a);
        return NULL;
    }
    mm_buf_init_arena(&r->body, 0, a); /* a small body: no malloc */
    r->loop = l;
    r->ops = ops;
    r->stream = stream;
    r->refs = 1;
    r->site = l->site;
    gw_site_ref(r->site);
    r->max_body = r->site->config->http.client_max_body_size;
    r->pub.arena = a;
    r->pub.version = v;
    r->pub.executor = &l->queue.exec;
    r->pub.base = l->base;
    r->pub.loop_index = l->index;
    r->pub.config = r->site->config;
    r->pub.method = "";
    r->pub.target = r->pub.path = r->pub.query = r->pub.authority = "";
    r->pub.body = "";
    r->pub.remote_addr = rem;
    r->pub.id = atomic_fetch_add(&req_counter, 1) + 1;
    format_id(id, id_salt, r->pub.id);
    r->pub.id_str = id;
    r->pub.start_ns = mm_now_ns();
    l->n_requests++;
    atomic_fetch_add(&l->http->reqs_active, 1);
    atomic_fetch_add(&l->http->reqs_total, 1);
    return r;
}

static void req_free(struct gw__req *r)
{
    struct gw_loop *l = r->loop;
    struct gw_site *site = r->site;
    struct mm_arena *a = r->pub.arena; /* r lives in it */
    /* a reset keeps one block, which after a large allocation is that allocation's own block: only arenas
     * that stayed small are kept, so the pool never holds more than GW_LOOP_ARENA_POOL small blocks */
    if (l->n_arena_pool < GW_LOOP_ARENA_POOL && mm_arena_used(a) <= GW_REQ_ARENA_REUSE_MAX) {
        mm_arena_reset(a); /* runs the cleanups, frees all but one block */
        l->arena_pool[l->n_arena_pool++] = a;
    } else {
        mm_arena_destroy(a);
    }
    gw_site_unref(site);
    gw_loop_request_freed(l);
}

void gw__req_ref(struct gw__req *r)
{
    r->refs++;
}

void gw__req_unref(struct gw__req *r)
{
    if (--r->refs == 0) req_free(r);
}

/* ---- building the request ---- */

static enum gw_method method_id(const char *m)
{
    static const struct {
        const char *name;
        enum gw_method id;
    } t[] = {{"GET", GW_METHOD_GET},    {"HEAD", GW_METHOD_HEAD},     {"POST", GW_METHOD_POST},
             {"PUT", GW_METHOD_PUT},    {"DELETE", GW_METHOD_DELETE}, {"OPTIONS", GW_METHOD_OPTIONS},
             {"PATCH", GW_METHOD_PATCH}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(m, t[i].name) == 0) return t[i].id;
    return GW_METHOD_OTHER;
}

int32_t gw__req_set_line(struct gw__req *r, const char *method, size_t ml, const char *target, size_t tl)
{
    struct mm_arena *a = r->pub.arena;
    char *m = mm_arena_strndup(a, method, ml);
    char *t = mm_arena_strndup(a, target, tl);
    if (!m || !t) return MM_NOMEM;
    r->pub.method = m;
    r->pub.method_id = method_id(m);
    r->head_only = r->pub.method_id == GW_METHOD_HEAD;
    r->pub.target = t;
    const char *p = t;
    if (strncmp(t, "http://", 7) == 0 || strncmp(t, "https://", 8) == 0) {
        /* absolute-form: the path starts at the first slash after the authority */
        const char *auth = strstr(t, "//") + 2;
        p = auth + strcspn(auth, "/?");
        if (*p != '/') p = "/";
    } else if (strcmp(t, "*") == 0 && r->pub.method_id == GW_METHOD_OPTIONS) {
        p = "*";
    } else if (t[0] != '/') {
        return MM_INVALID;
    }
    const char *q = strchr(p, '?');
    if (q) {
        char *path = mm_arena_strndup(a, p, (size_t)(q - p));
        if (!path) return MM_NOMEM;
        r->pub.path = path[0] ? path : "/";
        r->pub.query = q + 1;
    } else {
        r->pub.path = p;
        r->pub.query = "";
    }
    return MM_OK;
}

int32_t gw__req_add_header(struct gw__req *r, const char *name, size_t nl, const char *value, size_t vl)
{
    const struct gw_http_conf *hc = &r->site->config->http;
    r->header_bytes += nl + vl + 32; /* the HTTP/2 header-list accounting (RFC 9113 6.5.2) */
    if (r->n_hdrs >= (size_t)hc->client_max_headers || r->header_bytes > (size_t)hc->client_max_header_size)
        return MM_TOO_LARGE;
    struct mm_arena *a = r->pub.arena;
    if (r->n_hdrs == r->cap_hdrs) {
        size_t cap = r->cap_hdrs ? r->cap_hdrs * 2 : 16;
        struct gw_header *nh = mm_arena_alloc(a, cap * sizeof *nh);
        if (!nh) return MM_NOMEM;
        if (r->n_hdrs) memcpy(nh, r->hdrs, r->n_hdrs * sizeof *nh);
        r->hdrs = nh;
        r->cap_hdrs = cap;
    }
    char *n = mm_arena_strndup(a, name, nl);
    char *v = mm_arena_strndup(a, value, vl);
    if (!n || !v) return MM_NOMEM;
    for (size_t i = 0; i < nl; i++)
        if (n[i] >= 'A' && n[i] <= 'Z') n[i] = (char)(n[i] + 32);
    r->hdrs[r->n_hdrs++] = (struct gw_header){n, v, nl, vl};
    if (nl == 4 && memcmp(n, "host", 4) == 0 && !r->pub.authority[0]) r->pub.authority = v;
    return MM_OK;
}

int32_t gw__req_add_body(struct gw__req *r, const void *p, size_t n)
{
    if ((int64_t)(r->body.len + n) > r->max_body) return MM_TOO_LARGE;
    return mm_buf_append(&r->body, p, n) == 0 ? MM_OK : MM_NOMEM;
}

const char *gw_request_header(const struct gw_request *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

/* ---- log phase ---- */

static void req_log(struct gw__req *r, bool aborted)
{
    if (r->logged) return;
    r->logged = true;
    if (!r->site->hooks.log) return;
    struct gw_request_log info = {
        .status = aborted && r->resp != GW_RESP_DONE ? 499 : r->status,
        .bytes_out = r->bytes_out,
        .duration_ns = mm_now_ns() - r->pub.start_ns,
        .aborted = aborted,
    };
    r->site->hooks.log(r->site->hooks.ud, &r->pub, &info);
}

void gw__req_transport_done(struct gw__req *r)
{
    if (!r->stream) return;
    if (r->dispatched || r->status) req_log(r, false);
    r->stream = NULL;
    gw__req_unref(r);
}

static void deliver_abort(void *arg)
{
    struct gw__req *r = arg;
    if (!r->abort_delivered && r->abort_cb) {
        r->abort_delivered = true;
        r->abort_cb(&r->pub, r->abort_ud);
    }
    gw__req_unref(r);
}

void gw__req_abort(struct gw__req *r)
{
    if (r->aborted || !r->stream) return;
    r->aborted = true;
    if (r->dispatched) req_log(r, true);
    r->stream = NULL;
    if (r->dispatched && r->abort_cb) {
        gw__req_ref(r);
        if (gw_loop_defer(r->loop, deliver_abort, r) != 0) gw__req_unref(r);
    }
    gw__req_unref(r);
}

bool gw_request_aborted(const struct gw_request *req)
{
    return ((const struct gw__req *)req)->aborted;
}

void gw_request_on_abort(struct gw_request *req, void (*cb)(struct gw_request *req, void *ud), void *ud)
{
    struct gw__req *r = gw__req_of(req);
    r->abort_cb = cb;
    r->abort_ud = ud;
    if (cb && r->aborted && !r->abort_delivered) {
        gw__req_ref(r);
        if (gw_loop_defer(r->loop, deliver_abort, r) != 0) gw__req_unref(r);
    }
}

/* ---- drain ---- */

void gw__req_drained(struct gw__req *r)
{
    if (!r->drain_cb || r->aborted) return;
    void (*cb)(struct gw_request *, void *) = r->drain_cb;
    r->drain_cb = NULL; /* one shot: the handler re-arms when it blocks again */
    gw__req_ref(r);
    cb(&r->pub, r->drain_ud);
    gw__req_unref(r);
}

static void deliver_drain(void *arg)
{
    struct gw__req *r = arg;
    r->drain_pending = false;
    if (r->drain_cb && !r->aborted && (!r->stream || r->ops->queued(r) <= r->drain_low)) gw__req_drained(r);
    gw__req_unref(r);
}

void gw_http_stream_on_drain(struct gw_request *req, size_t low_watermark,
                             void (*cb)(struct gw_request *req, void *ud), void *ud)
{
    struct gw__req *r = gw__req_of(req);
    r->drain_cb = cb;
    r->drain_ud = ud;
    r->drain_low = low_watermark;
    if (!cb || r->aborted) return;
    if (!r->stream || r->ops->queued(r) <= low_watermark) {
        if (r->drain_pending) return;
        r->drain_pending = true;
        gw__req_ref(r);
        if (gw_loop_defer(r->loop, deliver_drain, r) != 0) {
            r->drain_pending = false;
            gw__req_unref(r);
        }
        return;
    }
    r->ops->watch_drain(r);
}

size_t gw_http_stream_queued(const struct gw_request *req)
{
    const struct gw__req *r = (const struct gw__req *)req;
    if (!r->stream || r->aborted) return 0;
    return r->ops->queued(r);
}

/* ---- references held by handlers ---- */

void gw_request_ref(struct gw_request *req)
{
    struct gw__req *r = gw__req_of(req);
    r->ext_refs++;
    r->refs++;
}

void gw_request_unref(struct gw_request *req)
{
    struct gw__req *r = gw__req_of(req);
    if (r->ext_refs <= 0) {
        mm_log_error(GW_LOG_COMP, "request %s: unref without a matching ref (ignored)", r->pub.id_str);
        return;
    }
    r->ext_refs--;
    if (r->ext_refs == 0 && !r->in_handler && r->dispatched) gw__req_finish_unanswered(r);
    gw__req_unref(r);
}

/* ---- dispatch ---- */

void gw__req_dispatch(struct gw__req *r)
{
    struct gw_request *pub = &r->pub;
    pub->headers = r->hdrs;
    pub->n_headers = r->n_hdrs;
    pub->body = r->body.data ? r->body.data : "";
    pub->body_len = r->body.len;
    r->dispatched = true;
    int status = 404;
    char allow[128];
    const struct gw_route *route =
        gw_routes_match(r->site->routes, pub->method, pub->path, &status, allow, sizeof allow);
    gw__req_ref(r);
    if (gw__cors_preflight(r)) { /* a CORS preflight is answered whatever the route: OPTIONS has none */
        pub->route = "";
    } else if (!route) {
        pub->route = "";
        if (status == 405 && allow[0]) gw_http_add_header(pub, "allow", allow);
        char msg[160];
        snprintf(msg, sizeof msg,
                 status == 405 ? "method %.16s is not allowed for this path" : "no route for %.100s",
                 status == 405 ? pub->method : pub->path);
        gw_http_send_error(pub, status, NULL, msg, NULL, status == 405 ? "method_not_allowed" : "not_found");
    } else {
        pub->route = route->pattern;
        r->in_handler = true;
        route->fn(pub, route->ud);
        r->in_handler = false;
        if (r->ext_refs == 0) gw__req_finish_unanswered(r);
    }
    gw__req_unref(r);
}

void gw__req_fail(struct gw__req *r, int status, const char *message)
{
    gw__req_ref(r);
    gw_http_send_error(&r->pub, status, NULL, message, NULL, NULL);
    gw__req_unref(r);
}
