/* The media fetcher: libcurl multi driven by libevent, redirects followed by hand under the policy. */
#include "gw_fetch.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "mm_clock.h"

#define DEFAULT_MAX_BYTES (64ull << 20)
#define DEFAULT_TIMEOUT_MS 30000u
#define DEFAULT_CONNECT_MS 5000u
#define DEFAULT_REDIRECTS 5u
/* bodies of error and redirect responses are read and dropped up to this much, then the hop ends */
#define DISCARD_CAP (64u << 10)

struct sock_ctx {
    struct event *ev;
    struct sock_ctx *prev, *next;
};

struct gw_fetch {
    struct gw_fetcher *f;
    struct gw_fetch *prev, *next;
    CURL *easy;
    CURLU *url; /* this hop's URL, exactly as the policy checked it */
    struct gw_fetch_target target;
    struct gw_fetch_limits lim;
    uint64_t deadline_ms;
    uint32_t redirects;
    struct mm_buf body;
    size_t discarded;
    int discard_abort; /* the hop was ended because an error/redirect body passed DISCARD_CAP */
    int too_large;
    int refused;
    struct mm_err refusal;
    gw_fetch_done_fn done;
    void *arg;
    char errbuf[CURL_ERROR_SIZE];
};

struct gw_fetcher {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    const struct gw_fetch_policy *policy;
    struct gw_fetch_limits lim;
    char *user_agent;
    struct curl_slist *resolve;
    struct gw_fetch *active;
    size_t n_active;
    struct sock_ctx *socks;
};

static pthread_once_t global_once = PTHREAD_ONCE_INIT;
static CURLcode global_rc = CURLE_FAILED_INIT;

static void global_init_once(void)
{
    global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int32_t gw_fetch_global_init(struct mm_err *err)
{
    pthread_once(&global_once, global_init_once);
    if (global_rc != CURLE_OK)
        return mm_err_set(err, MM_ERROR, "libcurl global init failed: %s", curl_easy_strerror(global_rc));
    return MM_OK;
}

static void fill_limits(struct gw_fetch_limits *dst, const struct gw_fetch_limits *src,
                        const struct gw_fetch_limits *defaults)
{
    *dst = *src;
    if (!dst->max_bytes) dst->max_bytes = defaults ? defaults->max_bytes : DEFAULT_MAX_BYTES;
    if (!dst->timeout_ms) dst->timeout_ms = defaults ? defaults->timeout_ms : DEFAULT_TIMEOUT_MS;
    if (!dst->connect_timeout_ms)
        dst->connect_timeout_ms = defaults ? defaults->connect_timeout_ms : DEFAULT_CONNECT_MS;
    if (!dst->max_redirects) dst->max_redirects = defaults ? defaults->max_redirects : DEFAULT_REDIRECTS;
}

/* ---- libcurl <-> libevent glue ---- */

static void check_done(struct gw_fetcher *f);

static void on_socket_event(evutil_socket_t fd, short kind, void *arg)
{
    struct gw_fetcher *f = arg;
    int action = ((kind & EV_READ) ? CURL_CSELECT_IN : 0) | ((kind & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running = 0;
    curl_multi_socket_action(f->multi, fd, action, &running);
    check_done(f);
}

static void on_timer(evutil_socket_t fd, short kind, void *arg)
{
    struct gw_fetcher *f = arg;
    int running = 0;
    curl_multi_socket_action(f->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_done(f);
}

static void sock_ctx_free(struct gw_fetcher *f, struct sock_ctx *sc)
{
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        f->socks = sc->next;
    if (sc->next) sc->next->prev = sc->prev;
    event_free(sc->ev);
    free(sc);
}

static int on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    struct gw_fetcher *f = userp;
    struct sock_ctx *sc = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (sc) {
            sock_ctx_free(f, sc);
            curl_multi_assign(f->multi, s, NULL);
        }
        return 0;
    }
    short kind =
        (short)(((what & CURL_POLL_IN) ? EV_READ : 0) | ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST);
    if (!sc) {
        sc = calloc(1, sizeof(*sc));
        if (!sc) return -1;
        sc->ev = event_new(f->base, s, kind, on_socket_event, f);
        if (!sc->ev) {
            free(sc);
            return -1;
        }
        sc->next = f->socks;
        if (f->socks) f->socks->prev = sc;
        f->socks = sc;
        curl_multi_assign(f->multi, s, sc);
    } else {
        event_del(sc->ev);
        event_assign(sc->ev, f->base, s, kind, on_socket_event, f);
    }
    return event_add(sc->ev, NULL) == 0 ? 0 : -1;
}

static int on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
    struct gw_fetcher *f = userp;
    if (timeout_ms < 0) return evtimer_del(f->timer);
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return evtimer_add(f->timer, &tv);
}

/* ---- per-transfer callbacks ---- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct gw_fetch *t = arg;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
        t->discarded += n;
        if (t->discarded > DISCARD_CAP) {
            t->discard_abort = 1;
            return 0;
        }
        return n;
    }
    if (n > t->lim.max_bytes - t->body.len) {
        t->too_large = 1; /* abort the moment the cap is passed */
        return 0;
    }
    if (mm_buf_append(&t->body, data, n) != 0) {
        t->too_large = 1;
        return 0;
    }
    return n;
}

/* The last word before connect(): the exact address libcurl is about to use. */
static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *address)
{
    struct gw_fetch *t = arg;
    struct gw_ipaddr ip;
    if (purpose != CURLSOCKTYPE_IPCXN || gw_ipaddr_from_sockaddr(&address->addr, &ip) != 0) {
        t->refused = 1;
        mm_err_set(&t->refusal, MM_DENIED, "media URL host '%s': unsupported connection type",
                   t->target.host);
        return CURL_SOCKET_BAD;
    }
    struct mm_err e;
    mm_err_clear(&e);
    if (gw_fetch_policy_check_addr(t->f->policy, &t->target, &ip, &e) != MM_OK) {
        /* keep the first refusal: libcurl may try other addresses of the name */
        if (!t->refused) t->refusal = e;
        t->refused = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

/* A second check once a connection exists (new or reused), on the peer address libcurl reports. */
static int on_prereq(void *arg, char *primary_ip, char *local_ip, int primary_port, int local_port)
{
    struct gw_fetch *t = arg;
    struct gw_ipaddr ip;
    struct mm_err e;
    mm_err_clear(&e);
    if (!primary_ip || gw_ipaddr_parse_strict(primary_ip, strlen(primary_ip), &ip) != 0 ||
        gw_fetch_policy_check_addr(t->f->policy, &t->target, &ip, &e) != MM_OK) {
        if (!t->refused) {
            if (e.code == MM_OK)
                mm_err_set(&e, MM_DENIED, "media URL host '%s': unknown peer", t->target.host);
            t->refusal = e;
        }
        t->refused = 1;
        return CURL_PREREQFUNC_ABORT;
    }
    return CURL_PREREQFUNC_OK;
}

/* ---- transfer lifecycle ---- */

static void fetch_unlink(struct gw_fetch *t)
{
    struct gw_fetcher *f = t->f;
    if (t->prev)
        t->prev->next = t->next;
    else
        f->active = t->next;
    if (t->next) t->next->prev = t->prev;
    f->n_active--;
}

static void drop_easy(struct gw_fetch *t)
{
    if (!t->easy) return;
    curl_multi_remove_handle(t->f->multi, t->easy);
    curl_easy_cleanup(t->easy);
    t->easy = NULL;
}

static void fetch_free(struct gw_fetch *t)
{
    drop_easy(t);
    curl_url_cleanup(t->url);
    mm_buf_free(&t->body);
    free(t);
}

static char *url_text(CURLU *u)
{
    char *s = NULL;
    if (u && curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK) return s;
    return NULL;
}

/* Deliver the result and free the transfer. */
static void finish(struct gw_fetch *t, int32_t status, const char *message)
{
    struct gw_fetch_result r;
    memset(&r, 0, sizeof(r));
    r.status = status;
    char msg[sizeof(((struct mm_err *)0)->msg)];
    snprintf(msg, sizeof(msg), "%s", message ? message : ""); /* it may live in t, freed below */
    r.message = msg;
    r.redirects = t->redirects;
    char *final_url = url_text(t->url);
    r.final_url = final_url;
    char *ctype = NULL;
    if (t->easy) {
        char *ct = NULL;
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &r.http_status);
        if (curl_easy_getinfo(t->easy, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct) ctype = strdup(ct);
    }
    r.content_type = ctype;
    drop_easy(t);
    fetch_unlink(t);
    if (status == MM_OK) {
        r.body = t->body;
        mm_buf_init(&t->body, 0);
    }
    gw_fetch_done_fn done = t->done;
    void *arg = t->arg;
    fetch_free(t);
    done(arg, &r);
    mm_buf_free(&r.body);
    free(ctype);
    curl_free(final_url);
}

static int32_t start_hop(struct gw_fetch *t, struct mm_err *err)
{
    struct gw_fetcher *f = t->f;
    uint64_t now = (uint64_t)mm_now_ms();
    if (now >= t->deadline_ms)
        return mm_err_set(err, MM_TIMEOUT, "fetching media from '%s' took longer than %u ms", t->target.host,
                          t->lim.timeout_ms);
    long remaining = (long)(t->deadline_ms - now);
    long connect_ms =
        (long)t->lim.connect_timeout_ms < remaining ? (long)t->lim.connect_timeout_ms : remaining;

    mm_buf_free(&t->body);
    mm_buf_init(&t->body, 0);
    t->discarded = 0;
    t->discard_abort = 0;
    t->errbuf[0] = '\0';
    CURL *e = curl_easy_init();
    if (!e) return mm_err_set(err, MM_NOMEM, "media fetch: out of memory");
    t->easy = e;
    CURLcode c = CURLE_OK;
#define SETOPT(opt, val)                                                                                     \
    do {                                                                                                     \
        if (c == CURLE_OK) c = curl_easy_setopt(e, opt, val);                                                \
    } while (0)
    SETOPT(CURLOPT_CURLU, t->url);
    SETOPT(CURLOPT_PRIVATE, t);
    SETOPT(CURLOPT_NOSIGNAL, 1L);
    SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
    SETOPT(CURLOPT_FOLLOWLOCATION, 0L);
    SETOPT(CURLOPT_PROXY, ""); /* never a proxy from the environment: it would see a different host */
    SETOPT(CURLOPT_HTTPGET, 1L);
    SETOPT(CURLOPT_WRITEFUNCTION, on_body);
    SETOPT(CURLOPT_WRITEDATA, t);
    SETOPT(CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    SETOPT(CURLOPT_OPENSOCKETDATA, t);
    SETOPT(CURLOPT_PREREQFUNCTION, on_prereq);
    SETOPT(CURLOPT_PREREQDATA, t);
    SETOPT(CURLOPT_MAXFILESIZE_LARGE,
           (curl_off_t)(t->lim.max_bytes > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)t->lim.max_bytes));
    SETOPT(CURLOPT_TIMEOUT_MS, remaining);
    SETOPT(CURLOPT_CONNECTTIMEOUT_MS, connect_ms);
    SETOPT(CURLOPT_USERAGENT, f->user_agent);
    SETOPT(CURLOPT_ERRORBUFFER, t->errbuf);
    if (f->resolve) SETOPT(CURLOPT_RESOLVE, f->resolve);
#undef SETOPT
    if (c != CURLE_OK)
        return mm_err_set(err, MM_ERROR, "media fetch: libcurl setup failed: %s", curl_easy_strerror(c));
    CURLMcode mc = curl_multi_add_handle(f->multi, e);
    if (mc != CURLM_OK) {
        curl_easy_cleanup(e);
        t->easy = NULL;
        return mm_err_set(err, MM_ERROR, "media fetch: %s", curl_multi_strerror(mc));
    }
    return MM_OK;
}

static int is_redirect(long code)
{
    return code == 301 || code == 302 || code == 303 || code == 307 || code == 308;
}

/* The hop ended: deliver, or follow a redirect after re-checking it. */
static void hop_done(struct gw_fetch *t, CURLcode res)
{
    struct mm_err e;
    mm_err_clear(&e);
    if (t->refused && res != CURLE_OK) { /* a refused address only matters when no other one worked */
        finish(t, MM_DENIED, t->refusal.msg);
        return;
    }
    if (t->too_large || res == CURLE_FILESIZE_EXCEEDED) {
        mm_err_set(&e, MM_TOO_LARGE, "media at '%s' is larger than the %llu-byte cap", t->target.host,
                   (unsigned long long)t->lim.max_bytes);
        finish(t, e.code, e.msg);
        return;
    }
    if (res == CURLE_OPERATION_TIMEDOUT) {
        curl_off_t connect_us = 0;
        curl_easy_getinfo(t->easy, CURLINFO_CONNECT_TIME_T, &connect_us);
        if (connect_us == 0 && (uint64_t)mm_now_ms() < t->deadline_ms)
            mm_err_set(&e, MM_TIMEOUT, "connecting to media host '%s' took longer than %u ms", t->target.host,
                       t->lim.connect_timeout_ms);
        else
            mm_err_set(&e, MM_TIMEOUT, "fetching media from '%s' took longer than %u ms", t->target.host,
                       t->lim.timeout_ms);
        finish(t, e.code, e.msg);
        return;
    }
    if (res != CURLE_OK && !(res == CURLE_WRITE_ERROR && t->discard_abort)) {
        mm_err_set(&e, MM_IO, "fetching media from '%s' failed: %s", t->target.host,
                   t->errbuf[0] ? t->errbuf : curl_easy_strerror(res));
        finish(t, e.code, e.msg);
        return;
    }
    long code = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 200 && code < 300) {
        finish(t, MM_OK, "");
        return;
    }
    if (!is_redirect(code)) {
        mm_err_set(&e, code == 404 || code == 410 ? MM_NOT_FOUND : MM_IO,
                   "media URL on '%s' answered HTTP %ld", t->target.host, code);
        finish(t, e.code, e.msg);
        return;
    }
    char *location = NULL;
    if (curl_easy_getinfo(t->easy, CURLINFO_REDIRECT_URL, &location) != CURLE_OK || !location) {
        mm_err_set(&e, MM_IO, "media URL on '%s' answered HTTP %ld without a usable Location", t->target.host,
                   code);
        finish(t, e.code, e.msg);
        return;
    }
    if (t->lim.max_redirects == GW_FETCH_NO_REDIRECTS || t->redirects >= t->lim.max_redirects) {
        mm_err_set(&e, MM_INVALID, "media URL redirected more than %u times",
                   t->lim.max_redirects == GW_FETCH_NO_REDIRECTS ? 0u : t->lim.max_redirects);
        finish(t, e.code, e.msg);
        return;
    }
    /* every hop passes the whole policy again, as if the client had sent the Location itself */
    CURLU *next = NULL;
    struct gw_fetch_target target;
    int32_t rc = gw_fetch_policy_parse_url(t->f->policy, location, &next, &target, &e);
    if (rc != MM_OK) {
        mm_err_prefix(&e, "media URL redirected (hop %u)", t->redirects + 1);
        finish(t, rc, e.msg);
        return;
    }
    drop_easy(t);
    curl_url_cleanup(t->url);
    t->url = next;
    t->target = target;
    t->redirects++;
    rc = start_hop(t, &e);
    if (rc != MM_OK) finish(t, rc, e.msg);
}

static void check_done(struct gw_fetcher *f)
{
    CURLMsg *msg;
    int left = 0;
    while ((msg = curl_multi_info_read(f->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE) continue;
        CURL *easy = msg->easy_handle;
        CURLcode res = msg->data.result;
        struct gw_fetch *t = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
        if (t) hop_done(t, res);
    }
}

/* ---- public API ---- */

int32_t gw_fetcher_create(struct event_base *base, const struct gw_fetch_opts *opts, struct gw_fetcher **out,
                          struct mm_err *err)
{
    *out = NULL;
    if (!base || !opts) return mm_err_set(err, MM_INVALID, "media fetcher: no event loop or options");
    int32_t rc = gw_fetch_global_init(err);
    if (rc != MM_OK) return rc;
    struct gw_fetcher *f = calloc(1, sizeof(*f));
    if (!f) return mm_err_set(err, MM_NOMEM, "media fetcher: out of memory");
    f->base = base;
    f->policy = opts->policy;
    fill_limits(&f->lim, &opts->limits, NULL);
    f->user_agent = strdup(opts->user_agent ? opts->user_agent : "mmgw");
    f->multi = curl_multi_init();
    f->timer = evtimer_new(base, on_timer, f);
    if (!f->user_agent || !f->multi || !f->timer) {
        gw_fetcher_destroy(f);
        return mm_err_set(err, MM_NOMEM, "media fetcher: out of memory");
    }
    for (size_t i = 0; i < opts->n_resolve; i++) {
        struct curl_slist *l = curl_slist_append(f->resolve, opts->resolve[i]);
        if (!l) {
            gw_fetcher_destroy(f);
            return mm_err_set(err, MM_NOMEM, "media fetcher: out of memory");
        }
        f->resolve = l;
    }
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
    curl_multi_setopt(f->multi, CURLMOPT_SOCKETDATA, f);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
    curl_multi_setopt(f->multi, CURLMOPT_TIMERDATA, f);
    if (opts->max_connections)
        curl_multi_setopt(f->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)opts->max_connections);
    *out = f;
    return MM_OK;
}

void gw_fetcher_destroy(struct gw_fetcher *f)
{
    if (!f) return;
    while (f->active) finish(f->active, MM_CANCELLED, "media fetch cancelled: the gateway is shutting down");
    if (f->multi) curl_multi_cleanup(f->multi);
    while (f->socks) sock_ctx_free(f, f->socks);
    if (f->timer) event_free(f->timer);
    curl_slist_free_all(f->resolve);
    free(f->user_agent);
    free(f);
}

int32_t gw_fetch_start(struct gw_fetcher *f, const char *url, const struct gw_fetch_limits *limits,
                       gw_fetch_done_fn done, void *arg, struct gw_fetch **out, struct mm_err *err)
{
    if (out) *out = NULL;
    if (!f || !done) return mm_err_set(err, MM_INVALID, "media fetch: no fetcher or callback");
    struct gw_fetch *t = calloc(1, sizeof(*t));
    if (!t) return mm_err_set(err, MM_NOMEM, "media fetch: out of memory");
    t->f = f;
    t->done = done;
    t->arg = arg;
    if (limits)
        fill_limits(&t->lim, limits, &f->lim);
    else
        t->lim = f->lim;
    mm_buf_init(&t->body, 0);
    int32_t rc = gw_fetch_policy_parse_url(f->policy, url, &t->url, &t->target, err);
    if (rc != MM_OK) {
        free(t);
        return rc;
    }
    t->deadline_ms = (uint64_t)mm_now_ms() + t->lim.timeout_ms;
    t->next = f->active;
    if (f->active) f->active->prev = t;
    f->active = t;
    f->n_active++;
    rc = start_hop(t, err);
    if (rc != MM_OK) {
        fetch_unlink(t);
        fetch_free(t);
        return rc;
    }
    if (out) *out = t;
    return MM_OK;
}

void gw_fetch_cancel(struct gw_fetch *t)
{
    if (!t) return;
    fetch_unlink(t);
    fetch_free(t);
}

size_t gw_fetcher_active(const struct gw_fetcher *f)
{
    return f ? f->n_active : 0;
}
