/* The worker pool of one model: choosing a worker, health checks, circuit breakers and retries.
 *
 * Choice: among eligible workers (not unhealthy, breaker not open), power of two random choices on
 * the estimated load, i.e. the running + waiting requests the worker reported in its last Load answer,
 * corrected by our own in-flight count since then (so a burst between two polls is seen at once). The
 * worker that last served the longest known prefix of the prompt (gw_affinity.h) is preferred unless
 * its load exceeds the power-of-two pick's by more than affinity_slack.
 *
 * Health: every health_interval_ms each worker gets Health and Load calls; unhealthy_after failed
 * checks in a row take it out, healthy_after good ones bring it back; a worker starts "unknown", which
 * is eligible, so a gateway serves at once. ModelInfo is asked at start and after every recovery.
 *
 * Resilience: each worker has a circuit breaker (gw_breaker.h) fed by request outcomes that say
 * something about the worker (gw_grpc_worker_fault). Past the cooldown the next health check goes first:
 * no answer re-opens the breaker for longer; an answer lets the next request be the half-open probe
 * that closes it (a worker that answers Health is not yet one whose Generate works). A Generate that fails
 * before any response reached the caller with a retryable status (gw_grpc_retryable) is sent to another
 * worker, up to `retries` times; after the first response an error goes to the caller, who turns it into an
 * SSE error event.
 *
 * Threading: a router is shared by every event loop. gw_router_generate and the per-call functions run
 * on the calling loop (callbacks come back on its executor); the health timer runs on the loop given
 * at creation, where gw_router_destroy must be called too. Stats may be read from any thread. */
#ifndef GW_ROUTER_H
#define GW_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "gw_breaker.h"
#include "gw_upstream.h"
#include "gw_upstream_generate.h"

struct event_base;
struct gw_router;
struct gw_route_call;

struct gw_router_opts {
    uint32_t health_interval_ms;    /* default 5 000; config health_check_interval */
    uint32_t health_timeout_ms;     /* default 2 000; config health_check_timeout */
    uint32_t unhealthy_after;       /* default 3 */
    uint32_t healthy_after;         /* default 2 */
    struct gw_breaker_opts breaker; /* config breaker_failures, breaker_cooldown */
    int32_t retries;                /* other workers tried before the first response; default 2, -1 = none */
    uint32_t affinity_entries;      /* prefix map size, default 65 536 */
    uint32_t affinity_page_tokens;  /* 0 = the worker's block_size (ModelInfo), else 128 */
    uint32_t affinity_max_pages;    /* pages hashed per prompt, default 64 */
    uint32_t affinity_slack;        /* default 4 requests */
    uint64_t seed;                  /* power-of-two randomness; 0 = from the clock */
    struct gw_gen_opts gen;         /* per Generate: deadline (config request_timeout), media transport */
    const char *auth_token;         /* sent to every worker (gw_upstream_chan_set_token); NULL = none */
    const struct gw_upstream_tls
        *tls; /* workers over TLS (gw_upstream_chan_open_tls; read at creation only) */
};

/** A pool over targets ("host:port" each), all serving model, on the client up. Health checks start
 * at once on base's loop. */
int32_t gw_router_create(struct gw_upstream *up, const char *model, const char *const *targets,
                         size_t n_targets, const struct gw_router_opts *opts, struct event_base *base,
                         struct gw_router **out, struct mm_err *err);
/** Stop health checks and drop the pool; route calls still running keep what they need until they
 * end. On the loop given at creation. */
void gw_router_destroy(struct gw_router *r);

enum gw_worker_health { GW_WORKER_UNKNOWN = 0, GW_WORKER_HEALTHY = 1, GW_WORKER_UNHEALTHY = 2 };

/** Per-worker numbers for /metrics. */
struct gw_worker_stats {
    char target[128];
    enum gw_worker_health health;
    enum gw_breaker_state breaker;
    uint32_t in_flight;     /* our Generate calls on it now */
    uint32_t reported_load; /* running + waiting in its last Load answer */
    uint64_t requests;      /* Generate attempts sent to it */
    uint64_t failures;      /* attempts that failed with a worker fault */
    uint64_t retried;       /* failed attempts that were sent elsewhere */
    uint64_t breaker_opens;
    uint64_t affinity_hits; /* picks decided by prefix affinity */
};
/** Fill up to max entries; returns the number of workers. */
size_t gw_router_stats(struct gw_router *r, struct gw_worker_stats *out, size_t max);
const char *gw_worker_health_name(enum gw_worker_health h);

/** Run health checks now (tests; the timer does this every interval). */
void gw_router_check_now(struct gw_router *r);
/** Health-check rounds completed (all answers in), for tests. */
uint64_t gw_router_check_rounds(struct gw_router *r);

struct gw_route_callbacks {
    /** A response from the worker (valid during the callback only). */
    void (*on_response)(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp);
    /** The call ended (after retries). MM_UNAVAILABLE when no worker could take it. attempts = workers
     * tried; worker = the index of the last one (-1 when none). */
    void (*on_done)(void *arg, const struct gw_call_status *st, uint32_t responses, uint32_t attempts,
                    int worker);
};

/** Start Generate(req) on the best worker. req and its tensor bytes must stay valid until on_done has
 * run or the call is cancelled (a retry resends it). MM_UNAVAILABLE at once when no worker is
 * eligible (the API answers 503). */
int32_t gw_router_generate(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req,
                           const struct gw_executor *ex, const struct gw_route_callbacks *cb, void *arg,
                           struct gw_route_call **out, struct mm_err *err);
/** gw_router_generate for a caller on an event loop: each attempt uses gw_upstream_generate_loop (the
 * loop's own connection to the worker when possible); callbacks run on that loop. */
int32_t gw_router_generate_on(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req,
                              const struct gw_up_loop *loop, const struct gw_route_callbacks *cb, void *arg,
                              struct gw_route_call **out, struct mm_err *err);
void gw_route_pause(struct gw_route_call *c);
void gw_route_resume(struct gw_route_call *c);
/** Cancel (the worker gets an Abort); no callback runs afterwards. */
void gw_route_cancel(struct gw_route_call *c);
/** The worker the call is on now (index in the pool), or -1. */
int gw_route_worker(const struct gw_route_call *c);

/** Which worker would be chosen for req now, without sending anything (tests, debugging). */
int gw_router_pick(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req);

#endif
