/* The circuit breaker state machine (see gw_breaker.h). */
#include "gw_breaker.h"

#include <string.h>

static uint32_t opt_failures(const struct gw_breaker_opts *o)
{
    return o && o->failures ? o->failures : 5;
}

static uint32_t opt_cooldown(const struct gw_breaker_opts *o)
{
    return o && o->cooldown_ms ? o->cooldown_ms : 1000;
}

static uint32_t opt_max_cooldown(const struct gw_breaker_opts *o)
{
    uint32_t m = o && o->max_cooldown_ms ? o->max_cooldown_ms : 30000;
    return m < opt_cooldown(o) ? opt_cooldown(o) : m;
}

void gw_breaker_init(struct gw_breaker *b, const struct gw_breaker_opts *o)
{
    memset(b, 0, sizeof(*b));
    b->cooldown_ms = opt_cooldown(o);
}

int gw_breaker_available(const struct gw_breaker *b, uint64_t now_ms)
{
    switch (b->state) {
    case GW_BREAKER_CLOSED:
        return 1;
    case GW_BREAKER_OPEN:
        return now_ms >= b->open_until_ms;
    case GW_BREAKER_HALF_OPEN:
        return !b->probe_in_flight;
    }
    return 0;
}

int gw_breaker_dispatch(struct gw_breaker *b, uint64_t now_ms)
{
    if (b->state == GW_BREAKER_CLOSED) return 0;
    if (b->state == GW_BREAKER_OPEN && now_ms >= b->open_until_ms) b->state = GW_BREAKER_HALF_OPEN;
    if (b->state == GW_BREAKER_HALF_OPEN && !b->probe_in_flight) {
        b->probe_in_flight = 1;
        return 1;
    }
    return 0;
}

static void open_breaker(struct gw_breaker *b, uint64_t now_ms)
{
    b->state = GW_BREAKER_OPEN;
    b->open_until_ms = now_ms + b->cooldown_ms;
    b->probe_in_flight = 0;
    b->opens++;
}

void gw_breaker_success(struct gw_breaker *b, const struct gw_breaker_opts *o)
{
    b->state = GW_BREAKER_CLOSED;
    b->consecutive = 0;
    b->probe_in_flight = 0;
    b->cooldown_ms = opt_cooldown(o);
}

void gw_breaker_failure(struct gw_breaker *b, const struct gw_breaker_opts *o, uint64_t now_ms)
{
    b->consecutive++;
    if (b->state == GW_BREAKER_HALF_OPEN) {
        /* the probe failed: back off longer */
        uint64_t next = (uint64_t)b->cooldown_ms * 2;
        b->cooldown_ms = next > opt_max_cooldown(o) ? opt_max_cooldown(o) : (uint32_t)next;
        open_breaker(b, now_ms);
    } else if (b->state == GW_BREAKER_CLOSED && b->consecutive >= opt_failures(o)) {
        open_breaker(b, now_ms);
    }
    /* failures reported while already open (requests sent before it opened) change nothing */
}

void gw_breaker_release_probe(struct gw_breaker *b)
{
    b->probe_in_flight = 0;
}

const char *gw_breaker_state_name(enum gw_breaker_state s)
{
    switch (s) {
    case GW_BREAKER_CLOSED:
        return "closed";
    case GW_BREAKER_OPEN:
        return "open";
    case GW_BREAKER_HALF_OPEN:
        return "half_open";
    }
    return "unknown";
}
