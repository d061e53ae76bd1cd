/* The set of loop threads: start, apply a site (listeners + routes), drain, stop. Commands are posted to
 * every loop and the control thread waits for all of them, so each command is atomic from its view. */
#include "gw_http_internal.h"
#include "gw_listener.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mm_log.h"

#define STOP_GRACE_MS 2000

static void *loop_main(void *arg)
{
    struct gw_loop *l = arg;
    event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
    gw__loop_close_queue(l);
    return NULL;
}

/* ---- barrier ---- */

struct loop_cmd {
    struct gw_loop *loop;
    struct gw_site *site;
    struct gw_listener_group **groups;
    size_t n_groups;
};

static void cmd_done(struct gw_http *h)
{
    pthread_mutex_lock(&h->mu);
    h->pending--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Post fn to every loop with its own cmd and wait until all ran. */
static int32_t run_on_all(struct gw_http *h, void (*fn)(void *), struct loop_cmd *cmds, struct mm_err *err)
{
    pthread_mutex_lock(&h->mu);
    h->pending = 0;
    pthread_mutex_unlock(&h->mu);
    int32_t rc = MM_OK;
    for (uint32_t i = 0; i < h->n; i++) {
        cmds[i].loop = &h->loops[i];
        pthread_mutex_lock(&h->mu);
        h->pending++;
        pthread_mutex_unlock(&h->mu);
        if (gw_executor_post(&h->loops[i].queue.exec, fn, &cmds[i]) != 0) {
            pthread_mutex_lock(&h->mu);
            h->pending--;
            pthread_mutex_unlock(&h->mu);
            rc = mm_err_set(err, MM_NOMEM, "cannot post to loop %u", i);
        }
    }
    pthread_mutex_lock(&h->mu);
    while (h->pending) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---- accepting ---- */

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    struct gw_loop_listener *ll = arg;
    struct gw_loop *l = ll->loop;
    if (l->draining || l->stopping) {
        close(fd);
        return;
    }
    gw_conn_accept(l, fd, sa, salen, ll->group->ssl);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_loop_listener *ll = arg;
    if (!ll->loop->accept_paused && !ll->loop->draining) evconnlistener_enable(ll->ev);
}

static void accept_error_cb(struct evconnlistener *lev, void *arg)
{
    struct gw_loop_listener *ll = arg;
    int e = EVUTIL_SOCKET_ERROR();
    mm_log_warn(GW_LOG_COMP, "accept on %s: %s; pausing 100 ms", ll->group->text, strerror(e));
    /* out of descriptors: retrying at once would spin on the readable listener */
    evconnlistener_disable(lev);
    struct timeval tv = {0, 100000};
    evtimer_add(ll->retry, &tv);
}

static void listener_free(struct gw_loop_listener *ll)
{
    if (!ll) return;
    if (ll->ev) evconnlistener_free(ll->ev);
    if (ll->retry) event_free(ll->retry);
    free(ll);
}

static struct gw_loop_listener *listener_attach(struct gw_loop *l, struct gw_listener_group *g)
{
    struct gw_loop_listener *ll = calloc(1, sizeof *ll);
    if (!ll) return NULL;
    ll->loop = l;
    ll->group = g;
    ll->ev = evconnlistener_new(l->base, accept_cb, ll, LEV_OPT_CLOSE_ON_EXEC, 0, g->fds[l->index]);
    ll->retry = evtimer_new(l->base, retry_cb, ll);
    if (!ll->ev || !ll->retry) {
        listener_free(ll);
        return NULL;
    }
    evconnlistener_set_error_cb(ll->ev, accept_error_cb);
    if (l->accept_paused) evconnlistener_disable(ll->ev);
    return ll;
}

static void set_accepting(struct gw_loop *l, bool on)
{
    l->accept_paused = !on;
    for (size_t i = 0; i < l->n_listeners; i++) {
        struct gw_loop_listener *ll = l->listeners[i];
        if (on)
            evconnlistener_enable(ll->ev);
        else
            evconnlistener_disable(ll->ev);
    }
}

static void free_loop_listeners(struct gw_loop *l)
{
    for (size_t i = 0; i < l->n_listeners; i++) listener_free(l->listeners[i]);
    free(l->listeners);
    l->listeners = NULL;
    l->n_listeners = 0;
}

/* ---- connection / request accounting (loop thread) ---- */

static void maybe_exit(struct gw_loop *l)
{
    if (l->stopping && l->n_conns == 0 && l->n_requests == 0) event_base_loopexit(l->base, NULL);
}

static void check_drained(struct gw_loop *l)
{
    struct gw_http *h = l->http;
    if (!l->draining || l->stopping || l->n_conns != 0 || l->drain_reported) return;
    l->drain_reported = true;
    if (atomic_fetch_sub(&h->drain_left, 1) == 1 && h->drain_done) h->drain_done(h->drain_ud);
}

void gw_loop_conn_closed(struct gw_loop *l)
{
    l->n_conns--;
    atomic_fetch_sub(&l->http->conns_open, 1);
    if (l->accept_paused && l->n_conns < l->max_conns && !l->draining && !l->stopping) set_accepting(l, true);
    check_drained(l);
    maybe_exit(l);
}

void gw_loop_request_freed(struct gw_loop *l)
{
    l->n_requests--;
    atomic_fetch_sub(&l->http->reqs_active, 1);
    maybe_exit(l);
}

void gw__loop_conn_opened(struct gw_loop *l)
{
    if (l->n_conns >= l->max_conns && !l->accept_paused) set_accepting(l, false);
}

/* ---- commands ---- */

static uint32_t loop_share(uint32_t total, uint32_t n)
{
    uint32_t s = (total + n - 1) / n;
    return s ? s : 1;
}

static void cmd_switch(void *arg)
{
    struct loop_cmd *c = arg;
    struct gw_loop *l = c->loop;
    struct gw_site *old = l->site;
    gw_site_ref(c->site);
    l->site = c->site;
    l->max_conns = loop_share((uint32_t)c->site->config->http.max_connections, l->http->n);
    size_t n_new = c->n_groups;
    struct gw_loop_listener **nl = calloc(n_new ? n_new : 1, sizeof *nl);
    size_t k = 0;
    for (size_t i = 0; nl && i < n_new; i++) {
        struct gw_loop_listener *found = NULL;
        for (size_t j = 0; j < l->n_listeners && !found; j++) {
            if (l->listeners[j] && l->listeners[j]->group == c->groups[i]) {
                found = l->listeners[j];
                l->listeners[j] = NULL; /* moved */
            }
        }
        if (!found) found = listener_attach(l, c->groups[i]);
        if (found)
            nl[k++] = found;
        else
            mm_log_error(GW_LOG_COMP, "loop %u: cannot attach listener %s", l->index, c->groups[i]->text);
    }
    /* whatever was not moved is no longer configured */
    for (size_t j = 0; j < l->n_listeners; j++) listener_free(l->listeners[j]);
    free(l->listeners);
    l->listeners = nl;
    l->n_listeners = k;
    if (l->n_conns >= l->max_conns)
        set_accepting(l, false);
    else if (l->accept_paused)
        set_accepting(l, true);
    if (old) gw_site_unref(old);
    cmd_done(l->http);
}

static void cmd_drain(void *arg)
{
    struct loop_cmd *c = arg;
    struct gw_loop *l = c->loop;
    l->draining = true;
    free_loop_listeners(l);
    l->accept_paused = false;
    gw_conn_drain_all(l);
    check_drained(l);
    cmd_done(l->http);
}

static void stop_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_loop *l = arg;
    mm_log_warn(GW_LOG_COMP, "loop %u: %u request(s) still referenced at stop", l->index, l->n_requests);
    event_base_loopexit(l->base, NULL);
}

static void cmd_stop(void *arg)
{
    struct loop_cmd *c = arg;
    struct gw_loop *l = c->loop;
    l->stopping = true;
    free_loop_listeners(l);
    gw_conn_close_all(l);
    /* give handlers a moment to see their abort callbacks and let go of their requests */
    l->stop_timer = evtimer_new(l->base, stop_timeout_cb, l);
    struct timeval tv = {STOP_GRACE_MS / 1000, (STOP_GRACE_MS % 1000) * 1000};
    if (l->stop_timer) evtimer_add(l->stop_timer, &tv);
    maybe_exit(l);
    cmd_done(l->http);
}

/* ---- public ---- */

int32_t gw_http_create(uint32_t n_loops, struct gw_http **out, struct mm_err *err)
{
    if (n_loops == 0 || n_loops > 1024)
        return mm_err_set(err, MM_INVALID, "loop count %u out of range", n_loops);
    struct gw_http *h = calloc(1, sizeof *h);
    if (!h) return mm_err_set(err, MM_NOMEM, "out of memory");
    h->loops = calloc(n_loops, sizeof *h->loops);
    if (!h->loops) {
        free(h);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->n = n_loops;
    int32_t rc = MM_OK;
    /* loop threads never take signals: the control thread handles them */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (uint32_t i = 0; i < n_loops && rc == MM_OK; i++) {
        rc = gw__loop_init(&h->loops[i], h, i, err);
        if (rc == MM_OK) {
            int e = pthread_create(&h->loops[i].thread, NULL, loop_main, &h->loops[i]);
            if (e)
                rc = mm_err_set(err, MM_EXHAUSTED, "cannot start loop thread: %s", strerror(e));
            else
                h->loops[i].started = true;
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        gw_http_destroy(h);
        return rc;
    }
    *out = h;
    return MM_OK;
}

int32_t gw_http_apply(struct gw_http *h, struct gw_site *site, struct mm_err *err)
{
    const struct gw_http_conf *hc = &site->config->http;
    struct gw_listener_group **want = calloc(hc->n_listen ? hc->n_listen : 1, sizeof *want);
    struct loop_cmd *cmds = calloc(h->n, sizeof *cmds);
    if (!want || !cmds) {
        free(want);
        free(cmds);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    for (struct gw_listener_group *g = h->groups; g; g = g->next) g->in_use = false;
    struct gw_listener_group *fresh = NULL;
    int32_t rc = MM_OK;
    for (size_t i = 0; i < hc->n_listen && rc == MM_OK; i++) {
        const struct gw_listen_conf *lc = &hc->listen[i];
        struct gw_listener_group *g = NULL;
        for (struct gw_listener_group *e = h->groups; e && !g; e = e->next)
            if (!e->in_use && gw_listener_group_matches(e, lc)) g = e;
        if (!g) {
            /* the same address under another ssl flag is ours: it closes after the switch */
            bool ours = false;
            for (struct gw_listener_group *e = h->groups; e; e = e->next)
                ours |= e->addr_len == lc->addr_len && memcmp(&e->addr, &lc->addr, lc->addr_len) == 0;
            rc = gw_listener_group_open(lc, h->n, !ours, &g, err);
            if (rc) break;
            g->next = fresh;
            fresh = g;
        }
        g->in_use = true;
        want[i] = g;
    }
    if (rc) {
        while (fresh) {
            struct gw_listener_group *n = fresh->next;
            gw_listener_group_close(fresh);
            fresh = n;
        }
        free(want);
        free(cmds);
        return rc;
    }
    for (uint32_t i = 0; i < h->n; i++) {
        cmds[i].site = site;
        cmds[i].groups = want;
        cmds[i].n_groups = hc->n_listen;
    }
    rc = run_on_all(h, cmd_switch, cmds, err);
    /* close what no loop uses any more, then keep the fresh groups */
    struct gw_listener_group **pp = &h->groups;
    while (*pp) {
        struct gw_listener_group *g = *pp;
        if (!g->in_use) {
            *pp = g->next;
            gw_listener_group_close(g);
        } else {
            pp = &g->next;
        }
    }
    while (fresh) {
        struct gw_listener_group *n = fresh->next;
        fresh->next = h->groups;
        h->groups = fresh;
        fresh = n;
    }
    for (size_t i = 0; i < hc->n_listen; i++) {
        char addr[80];
        gw_listener_group_describe(want[i], addr, sizeof addr);
        mm_log_info(GW_LOG_COMP, "listening on %s (%s%s)", addr, want[i]->ssl ? "https" : "http",
                    hc->http2 ? (want[i]->ssl ? ", h2" : ", h2c") : "");
    }
    gw_site_ref(site);
    if (h->site) gw_site_unref(h->site);
    h->site = site;
    free(want);
    free(cmds);
    return rc;
}

void gw_http_drain(struct gw_http *h, void (*done)(void *ud), void *ud)
{
    h->drain_done = done;
    h->drain_ud = ud;
    atomic_store(&h->drain_left, h->n);
    struct loop_cmd *cmds = calloc(h->n, sizeof *cmds);
    if (cmds) {
        run_on_all(h, cmd_drain, cmds, NULL);
        free(cmds);
    }
    /* no loop accepts any more: close the sockets so new clients are refused rather than queued */
    while (h->groups) {
        struct gw_listener_group *n = h->groups->next;
        gw_listener_group_close(h->groups);
        h->groups = n;
    }
}

void gw_http_destroy(struct gw_http *h)
{
    if (!h) return;
    struct loop_cmd *cmds = calloc(h->n, sizeof *cmds);
    bool any_started = false;
    for (uint32_t i = 0; i < h->n; i++) any_started |= h->loops[i].started;
    if (cmds && any_started) run_on_all(h, cmd_stop, cmds, NULL);
    free(cmds);
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->loops[i].started) pthread_join(h->loops[i].thread, NULL);
        struct gw_loop *l = &h->loops[i];
        free_loop_listeners(l);
        if (l->site) gw_site_unref(l->site);
        l->site = NULL;
        if (l->base) gw__loop_fini(l);
    }
    while (h->groups) {
        struct gw_listener_group *n = h->groups->next;
        gw_listener_group_close(h->groups);
        h->groups = n;
    }
    if (h->site) gw_site_unref(h->site);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->loops);
    free(h);
}

const struct gw_site *gw_http_current_site(const struct gw_http *h)
{
    return h->site;
}

uint32_t gw_http_n_loops(const struct gw_http *h)
{
    return h->n;
}

struct event_base *gw_http_loop_base(struct gw_http *h, uint32_t i)
{
    return i < h->n ? h->loops[i].base : NULL;
}

const struct gw_executor *gw_http_loop_executor(struct gw_http *h, uint32_t i)
{
    return i < h->n ? &h->loops[i].queue.exec : NULL;
}

uint16_t gw_http_listen_port(const struct gw_http *h, size_t i)
{
    if (!h->site || i >= h->site->config->http.n_listen) return 0;
    const struct gw_listen_conf *lc = &h->site->config->http.listen[i];
    for (struct gw_listener_group *g = h->groups; g; g = g->next)
        if (gw_listener_group_matches(g, lc)) return g->port;
    return 0;
}

void gw_http_get_stats(const struct gw_http *h, struct gw_http_stats *out)
{
    out->connections_open = atomic_load(&h->conns_open);
    out->connections_total = atomic_load(&h->conns_total);
    out->connections_h2_total = atomic_load(&h->conns_h2);
    out->connections_tls_total = atomic_load(&h->conns_tls);
    out->requests_active = atomic_load(&h->reqs_active);
    out->requests_total = atomic_load(&h->reqs_total);
}
