/* The worker pool: state, choice, health checks (see gw_router.h). Retries live in gw_router_call.c. */
#include "gw_router_internal.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mm_clock.h"
#include "mm_log.h"

uint64_t gw_router_now_ms(void)
{
    return (uint64_t)mm_now_ms();
}

const char *gw_worker_health_name(enum gw_worker_health h)
{
    switch (h) {
    case GW_WORKER_UNKNOWN:
        return "unknown";
    case GW_WORKER_HEALTHY:
        return "healthy";
    case GW_WORKER_UNHEALTHY:
        return "unhealthy";
    }
    return "unknown";
}

static void fill_defaults(struct gw_router_opts *o)
{
    if (!o->health_interval_ms) o->health_interval_ms = 5000;
    if (!o->health_timeout_ms) o->health_timeout_ms = 2000;
    if (!o->unhealthy_after) o->unhealthy_after = 3;
    if (!o->healthy_after) o->healthy_after = 2;
    if (o->retries == 0) o->retries = 2;
    if (o->retries < 0) o->retries = 0;
    if (!o->affinity_entries) o->affinity_entries = 65536;
    if (!o->affinity_max_pages) o->affinity_max_pages = 64;
    if (o->affinity_max_pages > GW_ROUTER_MAX_PAGES) o->affinity_max_pages = GW_ROUTER_MAX_PAGES;
    if (!o->affinity_slack) o->affinity_slack = 4;
}

/* xorshift64*: cheap, and seeded per router so tests can be deterministic. r->mu held. */
static uint64_t next_random(struct gw_router *r)
{
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return r->rng * 0x2545f4914f6cdd1dull;
}

/* ---- load and choice; r->mu held ---- */

uint32_t gw_router_load(const struct gw_router_worker *w)
{
    if (!w->have_load) return w->in_flight;
    /* what the worker reported, plus what we sent (or finished) since it reported */
    int64_t est = (int64_t)w->remote_load + (int64_t)w->in_flight - (int64_t)w->inflight_at_poll;
    return est < (int64_t)w->in_flight ? w->in_flight : (uint32_t)est;
}

static int eligible(const struct gw_router_worker *w, uint64_t now)
{
    return w->health != GW_WORKER_UNHEALTHY && gw_breaker_available(&w->breaker, now);
}

int gw_router_choose(struct gw_router *r, const uint64_t *keys, size_t n_keys, const uint8_t *tried,
                     int *by_affinity)
{
    uint64_t now = gw_router_now_ms();
    int cand[GW_ROUTER_MAX_WORKERS];
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        if ((!tried || !tried[i]) && eligible(&r->w[i], now)) cand[k++] = (int)i;
    if (by_affinity) *by_affinity = 0;
    if (k == 0) return -1;
    int pick = cand[0];
    if (k > 1) {
        size_t a = (size_t)(next_random(r) % k);
        size_t b = (size_t)(next_random(r) % (k - 1));
        if (b >= a) b++;
        uint32_t la = gw_router_load(&r->w[cand[a]]), lb = gw_router_load(&r->w[cand[b]]);
        pick = lb < la ? cand[b] : cand[a];
    }
    if (n_keys && r->aff) {
        size_t pages = 0;
        int aff = gw_affinity_lookup(r->aff, keys, n_keys, &pages);
        if (aff >= 0 && (size_t)aff < r->n && aff != pick && (!tried || !tried[aff]) &&
            eligible(&r->w[aff], now) &&
            gw_router_load(&r->w[aff]) <= gw_router_load(&r->w[pick]) + r->o.affinity_slack) {
            pick = aff;
            if (by_affinity) *by_affinity = 1;
        } else if (aff == pick && by_affinity) {
            *by_affinity = 1;
        }
    }
    return pick;
}

uint32_t gw_router_page_tokens(struct gw_router *r)
{
    if (r->o.affinity_page_tokens) return r->o.affinity_page_tokens;
    for (size_t i = 0; i < r->n; i++) {
        struct gw_worker_info info;
        gw_upstream_chan_info(r->w[i].ch, &info);
        if (info.known && info.block_size) return info.block_size;
    }
    return 128;
}

size_t gw_router_keys(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req, uint64_t *keys)
{
    if (!req->input_ids || req->n_input_ids == 0) return 0;
    struct gw_affinity_media media[32];
    size_t nm = 0, n_tokens = req->n_input_ids;
    for (size_t i = 0; i < req->n_mm_inputs; i++) {
        const Mmgw__Worker__V1__MultimodalItem *it = req->mm_inputs[i];
        if (!it || it->n_placeholders == 0 || !it->placeholders[0]) continue;
        uint32_t off = it->placeholders[0]->offset;
        /* without a content hash two different images look the same: stop before it */
        if (it->content_hash == 0 || nm == sizeof(media) / sizeof(media[0])) {
            if (off < n_tokens) n_tokens = off;
            continue;
        }
        size_t j = nm++;
        while (j > 0 && media[j - 1].offset > off) {
            media[j] = media[j - 1];
            j--;
        }
        media[j].offset = off;
        media[j].content_hash = it->content_hash;
    }
    return gw_affinity_keys(req->input_ids, n_tokens, gw_router_page_tokens(r), media, nm, keys,
                            r->o.affinity_max_pages);
}

int gw_router_pick(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req)
{
    uint64_t keys[GW_ROUTER_MAX_PAGES];
    size_t n = gw_router_keys(r, req, keys);
    pthread_mutex_lock(&r->mu);
    int w = gw_router_choose(r, keys, n, NULL, NULL);
    pthread_mutex_unlock(&r->mu);
    return w;
}

/* ---- health checks ---- */

enum check_kind { CHECK_HEALTH, CHECK_LOAD, CHECK_INFO };

struct check {
    struct gw_router *r;
    size_t idx;
    enum check_kind kind;
    int probe; /* this health check is the breaker's half-open probe */
};

static void check_finished(struct gw_router *r, enum check_kind kind)
{
    if (kind != CHECK_INFO && --r->round_left == 0) r->rounds++;
    if (--r->outstanding == 0) pthread_cond_broadcast(&r->idle);
}

static void start_check(struct gw_router *r, size_t idx, enum check_kind kind);

/* On the completion-queue thread: update the worker under the lock. */
static void on_check(void *arg, const struct gw_call_status *st, const ProtobufCMessage *resp)
{
    struct check *c = arg;
    struct gw_router *r = c->r;
    pthread_mutex_lock(&r->mu);
    struct gw_router_worker *w = &r->w[c->idx];
    uint64_t now = gw_router_now_ms();
    if (c->kind == CHECK_HEALTH) {
        int ok = st->code == MM_OK && resp && ((const Mmgw__Worker__V1__HealthResponse *)resp)->healthy;
        if (ok) {
            w->fail_streak = 0;
            w->ok_streak++;
            enum gw_worker_health before = w->health;
            if (w->health == GW_WORKER_UNKNOWN ||
                (w->health == GW_WORKER_UNHEALTHY && w->ok_streak >= r->o.healthy_after))
                w->health = GW_WORKER_HEALTHY;
            if (before == GW_WORKER_UNHEALTHY && w->health == GW_WORKER_HEALTHY) {
                mm_log_info("router", "%s: worker %s is healthy again", r->model, w->target);
                if (!r->closing)
                    start_check(r, c->idx, CHECK_INFO); /* it may have restarted with another model */
            }
            /* a live worker is not yet a working one: let the next request be the real probe */
            if (c->probe) gw_breaker_release_probe(&w->breaker);
        } else {
            w->ok_streak = 0;
            w->fail_streak++;
            if (w->health != GW_WORKER_UNHEALTHY && w->fail_streak >= r->o.unhealthy_after) {
                w->health = GW_WORKER_UNHEALTHY;
                mm_log_warn("router", "%s: worker %s is unhealthy: %s", r->model, w->target,
                            st->code == MM_OK ? "it says so" : st->message);
            }
            if (c->probe) gw_breaker_failure(&w->breaker, &r->o.breaker, now);
        }
    } else if (c->kind == CHECK_LOAD && st->code == MM_OK && resp) {
        const Mmgw__Worker__V1__LoadResponse *l = (const Mmgw__Worker__V1__LoadResponse *)resp;
        w->remote_load = l->running_requests + l->waiting_requests;
        w->inflight_at_poll = w->in_flight;
        w->have_load = 1;
    }
    check_finished(r, c->kind);
    pthread_mutex_unlock(&r->mu);
    free(c);
}

/* r->mu held. */
static void start_check(struct gw_router *r, size_t idx, enum check_kind kind)
{
    struct check *c = calloc(1, sizeof(*c));
    if (!c) return;
    c->r = r;
    c->idx = idx;
    c->kind = kind;
    struct gw_router_worker *w = &r->w[idx];
    uint64_t now = gw_router_now_ms();
    /* an open breaker past its cooldown: this check goes first. No answer opens it again for longer; an
     * answer lets the next request be the half-open probe that closes it */
    if (kind == CHECK_HEALTH && w->breaker.state == GW_BREAKER_OPEN && gw_breaker_available(&w->breaker, now))
        c->probe = gw_breaker_dispatch(&w->breaker, now);
    struct mm_err e;
    int32_t rc;
    r->outstanding++;
    if (kind != CHECK_INFO) r->round_left++;
    /* callbacks run on the completion-queue thread: they take r->mu, which we hold, so they wait */
    if (kind == CHECK_HEALTH)
        rc = gw_upstream_health(w->ch, r->o.health_timeout_ms, NULL, on_check, c, &e);
    else if (kind == CHECK_LOAD)
        rc = gw_upstream_load(w->ch, r->o.health_timeout_ms, NULL, on_check, c, &e);
    else
        rc = gw_upstream_model_info(w->ch, r->o.health_timeout_ms, NULL, on_check, c, &e);
    if (rc != MM_OK) {
        r->outstanding--;
        if (kind != CHECK_INFO) r->round_left--;
        if (c->probe) gw_breaker_release_probe(&w->breaker);
        free(c);
    }
}

void gw_router_check_now(struct gw_router *r)
{
    pthread_mutex_lock(&r->mu);
    if (!r->closing && r->round_left == 0) { /* a slow round is not piled on */
        for (size_t i = 0; i < r->n; i++) {
            start_check(r, i, CHECK_HEALTH);
            start_check(r, i, CHECK_LOAD);
        }
    }
    pthread_mutex_unlock(&r->mu);
}

uint64_t gw_router_check_rounds(struct gw_router *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->rounds;
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    gw_router_check_now(arg);
}

/* ---- lifecycle ---- */

int32_t gw_router_create(struct gw_upstream *up, const char *model, const char *const *targets,
                         size_t n_targets, const struct gw_router_opts *opts, struct event_base *base,
                         struct gw_router **out, struct mm_err *err)
{
    *out = NULL;
    if (!up || !targets || n_targets == 0)
        return mm_err_set(err, MM_INVALID, "model %s: no upstream workers", model ? model : "?");
    if (n_targets > GW_ROUTER_MAX_WORKERS)
        return mm_err_set(err, MM_INVALID, "model %s: %zu upstreams, at most %d", model ? model : "?",
                          n_targets, GW_ROUTER_MAX_WORKERS);
    struct gw_router *r = calloc(1, sizeof(*r));
    if (!r) return mm_err_set(err, MM_NOMEM, "router: out of memory");
    r->up = up;
    snprintf(r->model, sizeof(r->model), "%s", model ? model : "");
    if (opts) r->o = *opts;
    fill_defaults(&r->o);
    r->rng = r->o.seed ? r->o.seed : (gw_router_now_ms() ^ (uint64_t)(uintptr_t)r) | 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->idle, NULL);
    atomic_init(&r->refs, 1);
    r->w = calloc(n_targets, sizeof(*r->w));
    r->aff = gw_affinity_create(r->o.affinity_entries);
    if (!r->w || !r->aff) {
        gw_router_destroy(r);
        return mm_err_set(err, MM_NOMEM, "router: out of memory");
    }
    for (size_t i = 0; i < n_targets; i++) {
        struct gw_router_worker *w = &r->w[i];
        snprintf(w->target, sizeof(w->target), "%s", targets[i]);
        gw_breaker_init(&w->breaker, &r->o.breaker);
        int32_t rc = gw_upstream_chan_open_tls(up, targets[i], r->o.tls, &w->ch, err);
        if (rc != MM_OK) {
            gw_router_destroy(r);
            return mm_err_prefix(err, "model %s", model ? model : "?");
        }
        r->n++;
        if (r->o.auth_token && (rc = gw_upstream_chan_set_token(w->ch, r->o.auth_token, err)) != MM_OK) {
            gw_router_destroy(r);
            return mm_err_prefix(err, "model %s", model ? model : "?");
        }
    }
    if (base) {
        r->timer = event_new(base, -1, EV_PERSIST, on_timer, r);
        if (!r->timer) {
            gw_router_destroy(r);
            return mm_err_set(err, MM_NOMEM, "router: out of memory");
        }
        struct timeval tv = {r->o.health_interval_ms / 1000, (r->o.health_interval_ms % 1000) * 1000};
        event_add(r->timer, &tv);
    }
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n; i++) start_check(r, i, CHECK_INFO);
    pthread_mutex_unlock(&r->mu);
    gw_router_check_now(r);
    *out = r;
    return MM_OK;
}

void gw_router_unref(struct gw_router *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (size_t i = 0; i < r->n; i++) gw_upstream_chan_close(r->w[i].ch);
    gw_affinity_destroy(r->aff);
    free(r->w);
    pthread_cond_destroy(&r->idle);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void gw_router_destroy(struct gw_router *r)
{
    if (!r) return;
    if (r->timer) event_free(r->timer);
    r->timer = NULL;
    pthread_mutex_lock(&r->mu);
    r->closing = 1;
    /* health answers arrive within their timeout; they reference the router */
    while (r->outstanding > 0) pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
    gw_router_unref(r);
}

size_t gw_router_stats(struct gw_router *r, struct gw_worker_stats *out, size_t max)
{
    pthread_mutex_lock(&r->mu);
    uint64_t now = gw_router_now_ms();
    for (size_t i = 0; i < r->n && i < max; i++) {
        const struct gw_router_worker *w = &r->w[i];
        struct gw_worker_stats *s = &out[i];
        memset(s, 0, sizeof(*s));
        snprintf(s->target, sizeof(s->target), "%s", w->target);
        s->health = w->health;
        s->breaker = w->breaker.state;
        /* an open breaker past its cooldown is waiting for its probe */
        if (s->breaker == GW_BREAKER_OPEN && now >= w->breaker.open_until_ms)
            s->breaker = GW_BREAKER_HALF_OPEN;
        s->in_flight = w->in_flight;
        s->reported_load = w->remote_load;
        s->requests = w->requests;
        s->failures = w->failures;
        s->retried = w->retried;
        s->breaker_opens = w->breaker.opens;
        s->affinity_hits = w->affinity_hits;
    }
    size_t n = r->n;
    pthread_mutex_unlock(&r->mu);
    return n;
}
