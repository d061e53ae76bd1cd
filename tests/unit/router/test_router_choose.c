/* Worker choice on a router built by hand (no gRPC): power of two choices on estimated load, the
 * correction by local in-flight counts, eligibility (health, breaker), exclusion of tried workers, and
 * prefix affinity with its load slack. */
#include <stdlib.h>

#include "gw_router_internal.h"
#include "mmgw_test.h"

static struct gw_router *router(size_t n)
{
    struct gw_router *r = calloc(1, sizeof(*r));
    r->w = calloc(n, sizeof(*r->w));
    r->n = n;
    r->rng = 12345;
    r->o.affinity_slack = 4;
    r->aff = gw_affinity_create(256);
    for (size_t i = 0; i < n; i++) gw_breaker_init(&r->w[i].breaker, NULL);
    return r;
}

static void router_free(struct gw_router *r)
{
    gw_affinity_destroy(r->aff);
    free(r->w);
    free(r);
}

static void set_load(struct gw_router_worker *w, uint32_t reported, uint32_t in_flight_then,
                     uint32_t in_flight_now)
{
    w->have_load = 1;
    w->remote_load = reported;
    w->inflight_at_poll = in_flight_then;
    w->in_flight = in_flight_now;
}

int main(void)
{
    struct gw_router *r = router(3);
    /* load estimate: reported, corrected by what we sent since */
    set_load(&r->w[0], 10, 2, 5);
    CHECK_EQ_INT(gw_router_load(&r->w[0]), 13);
    set_load(&r->w[0], 10, 8, 1);
    CHECK_EQ_INT(gw_router_load(&r->w[0]), 3);
    set_load(&r->w[0], 0, 5, 1);
    CHECK_EQ_INT(gw_router_load(&r->w[0]), 1); /* never below our own in-flight */
    r->w[1].have_load = 0;
    r->w[1].in_flight = 7;
    CHECK_EQ_INT(gw_router_load(&r->w[1]), 7);

    /* p2c: with loads 0, 10, 10 worker 0 wins every time it is sampled: 2/3 of picks */
    set_load(&r->w[0], 0, 0, 0);
    set_load(&r->w[1], 10, 0, 0);
    set_load(&r->w[2], 10, 0, 0);
    int hits[3] = {0, 0, 0};
    for (int i = 0; i < 3000; i++) hits[gw_router_choose(r, NULL, 0, NULL, NULL)]++;
    CHECK_MSG(hits[0] > 1800 && hits[0] < 2200, "worker 0 chosen %d of 3000", hits[0]);
    CHECK(hits[1] > 300 && hits[2] > 300);
    /* two workers: the less loaded always */
    struct gw_router *r2 = router(2);
    set_load(&r2->w[0], 3, 0, 0);
    set_load(&r2->w[1], 1, 0, 0);
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(gw_router_choose(r2, NULL, 0, NULL, NULL), 1);
    /* ... until our own requests to it make it the busier one */
    r2->w[1].in_flight = 3;
    CHECK_EQ_INT(gw_router_choose(r2, NULL, 0, NULL, NULL), 0);

    /* eligibility: unhealthy and open-breaker workers are skipped, tried ones too */
    r->w[0].health = GW_WORKER_UNHEALTHY;
    for (int i = 0; i < 50; i++) CHECK(gw_router_choose(r, NULL, 0, NULL, NULL) != 0);
    r->w[0].health = GW_WORKER_HEALTHY;
    for (int i = 0; i < 5; i++) gw_breaker_failure(&r->w[0].breaker, NULL, gw_router_now_ms());
    for (int i = 0; i < 50; i++) CHECK(gw_router_choose(r, NULL, 0, NULL, NULL) != 0);
    gw_breaker_success(&r->w[0].breaker, NULL);
    uint8_t tried[3] = {1, 0, 1};
    CHECK_EQ_INT(gw_router_choose(r, NULL, 0, tried, NULL), 1);
    uint8_t all[3] = {1, 1, 1};
    CHECK_EQ_INT(gw_router_choose(r, NULL, 0, all, NULL), -1);

    /* affinity: worker 2 holds the prefix; it wins while its load stays within the slack */
    uint32_t toks[16];
    for (int i = 0; i < 16; i++) toks[i] = (uint32_t)i;
    uint64_t keys[4];
    size_t nk = gw_affinity_keys(toks, 16, 4, NULL, 0, keys, 4);
    gw_affinity_record(r->aff, keys, nk, 2);
    set_load(&r->w[0], 0, 0, 0);
    set_load(&r->w[1], 0, 0, 0);
    set_load(&r->w[2], 4, 0, 0);
    int by = 0;
    for (int i = 0; i < 50; i++) {
        CHECK_EQ_INT(gw_router_choose(r, keys, nk, NULL, &by), 2);
        CHECK_EQ_INT(by, 1);
    }
    set_load(&r->w[2], 5, 0, 0); /* 5 > 0 + slack 4: load wins */
    for (int i = 0; i < 50; i++) CHECK(gw_router_choose(r, keys, nk, NULL, &by) != 2);
    /* an ineligible affine worker is not chosen */
    set_load(&r->w[2], 0, 0, 0);
    r->w[2].health = GW_WORKER_UNHEALTHY;
    for (int i = 0; i < 50; i++) CHECK(gw_router_choose(r, keys, nk, NULL, NULL) != 2);

    router_free(r);
    router_free(r2);
    return test_done();
}
