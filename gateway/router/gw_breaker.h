/* A per-worker circuit breaker. Pure state machine: the caller passes the time and holds any lock.
 *
 *   closed --(failures consecutive failures)--> open --(cooldown elapsed)--> half-open
 *   half-open --(the single probe succeeds)--> closed;  --(it fails)--> open, cooldown doubled (capped)
 *
 * While open the worker takes no requests; once the cooldown has passed exactly one probe (a request or
 * a health check) may go; its outcome decides. A success anywhere resets the count and the cooldown. */
#ifndef GW_BREAKER_H
#define GW_BREAKER_H

#include <stdint.h>

enum gw_breaker_state { GW_BREAKER_CLOSED = 0, GW_BREAKER_OPEN = 1, GW_BREAKER_HALF_OPEN = 2 };

struct gw_breaker_opts {
    uint32_t failures;        /* consecutive failures that open it, default 5 */
    uint32_t cooldown_ms;     /* first open period, default 1 000 */
    uint32_t max_cooldown_ms; /* cap for the doubling, default 30 000 */
};

struct gw_breaker {
    enum gw_breaker_state state;
    uint32_t consecutive;
    uint32_t cooldown_ms; /* current open period */
    uint64_t open_until_ms;
    int probe_in_flight;
    uint64_t opens; /* times it opened, for metrics */
};

void gw_breaker_init(struct gw_breaker *b, const struct gw_breaker_opts *o);
/** Whether a request (or probe) may be sent now; does not change state. */
int gw_breaker_available(const struct gw_breaker *b, uint64_t now_ms);
/** A request or probe is being sent: past the cooldown an open breaker turns half-open and this
 * becomes its one probe. Returns 1 when it is a probe. */
int gw_breaker_dispatch(struct gw_breaker *b, uint64_t now_ms);
void gw_breaker_success(struct gw_breaker *b, const struct gw_breaker_opts *o);
void gw_breaker_failure(struct gw_breaker *b, const struct gw_breaker_opts *o, uint64_t now_ms);
/** A probe ended without telling anything (cancelled by the client): let another one go. */
void gw_breaker_release_probe(struct gw_breaker *b);
const char *gw_breaker_state_name(enum gw_breaker_state s);

#endif
