/* Internals shared by gw_router.c (pool, choice, health) and gw_router_call.c (Generate with retries). */
#ifndef GW_ROUTER_INTERNAL_H
#define GW_ROUTER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "gw_affinity.h"
#include "gw_router.h"

#define GW_ROUTER_MAX_WORKERS 256
#define GW_ROUTER_MAX_PAGES 256

struct gw_router_worker {
    struct gw_upstream_chan *ch;
    char target[128];
    enum gw_worker_health health;
    uint32_t ok_streak, fail_streak;
    struct gw_breaker breaker;
    uint32_t in_flight;        /* our Generate calls on it */
    uint32_t inflight_at_poll; /* in_flight when its last Load answer arrived */
    uint32_t remote_load;      /* running + waiting in that answer */
    int have_load;
    uint64_t requests, failures, retried, affinity_hits;
};

struct gw_router {
    struct gw_upstream *up;
    char model[128];
    struct gw_router_opts o;
    struct event *timer;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t idle;
    struct gw_router_worker *w;
    size_t n;
    struct gw_affinity *aff;
    uint64_t rng;
    uint32_t outstanding; /* health/load/info calls in flight */
    uint32_t round_left;  /* health/load calls of the current round */
    uint64_t rounds;
    int closing;
    atomic_int refs; /* the owner's + one per route call */
};

uint64_t gw_router_now_ms(void);
/** Estimated load of a worker (r->mu held). */
uint32_t gw_router_load(const struct gw_router_worker *w);
/** Choose a worker not in tried (may be NULL) for a prompt with these prefix keys; -1 when none is
 * eligible. *by_affinity tells whether affinity decided. r->mu held. */
int gw_router_choose(struct gw_router *r, const uint64_t *keys, size_t n_keys, const uint8_t *tried,
                     int *by_affinity);
/** Prefix keys of a request (at most GW_ROUTER_MAX_PAGES). */
size_t gw_router_keys(struct gw_router *r, const Mmgw__Worker__V1__GenerateRequest *req, uint64_t *keys);
uint32_t gw_router_page_tokens(struct gw_router *r);
void gw_router_unref(struct gw_router *r);

#endif
