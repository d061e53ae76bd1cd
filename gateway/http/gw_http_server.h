/* The transport as the server process drives it: event-loop threads, listeners, configuration
 * generations ("sites"), drain and stop. Handlers never need this header (they use gw_http.h).
 *
 * Threads: gw_http_create starts N loop threads, each with its own libevent base and its own
 * SO_REUSEPORT socket per listen address (the kernel spreads connections). Everything here is called from
 * one control thread (the process's main thread) unless a function says otherwise.
 *
 * Sites: a site is one configuration generation: the config snapshot, the route table, the TLS context and
 * hooks. gw_http_apply makes a site current on every loop (new requests use it; running requests keep
 * theirs). A site is reference counted (loops and requests hold references); when the last reference goes,
 * hooks.release runs, on whichever thread dropped it. */
#ifndef GW_HTTP_SERVER_H
#define GW_HTTP_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "gw_config.h"
#include "gw_http.h"

struct gw_http;
struct gw_site;

/** What the transport tells the server about a finished request (the log phase). */
struct gw_request_log {
    int status;         /* sent status; 499 when the client went away first */
    uint64_t bytes_out; /* body bytes queued */
    int64_t duration_ns;
    bool aborted;
};

struct gw_site_hooks {
    /** Called once per dispatched request when its response completes or it is aborted (loop thread). */
    void (*log)(void *ud, const struct gw_request *req, const struct gw_request_log *info);
    /** The site's last reference is gone (any thread). The site is freed after this returns. */
    void (*release)(void *ud, struct gw_site *site);
    void *ud;
};

/* ---- routes (the table handlers are registered in; see gw_routes_add in gw_http.h) ---- */

struct gw_routes *gw_routes_create(void);
void gw_routes_free(struct gw_routes *rt);
/** True when (method, pattern) is already registered (lets the server add built-ins only if absent). */
bool gw_routes_has(const struct gw_routes *rt, const char *method, const char *pattern);

/* ---- sites ---- */

/** A site with one reference. Takes a config reference and ownership of routes (also on failure). Loads
 * the TLS certificate when a listener uses ssl: errors name the file (err). */
int32_t gw_site_create(struct gw_config *config, struct gw_routes *routes, const struct gw_site_hooks *hooks,
                       struct gw_site **out, struct mm_err *err);
void gw_site_ref(struct gw_site *s);
void gw_site_unref(struct gw_site *s);
const struct gw_config *gw_site_config(const struct gw_site *s);

/** Check what only the transport can: the TLS key pair loads (for `mmgw -t`). */
int32_t gw_tls_check_config(const struct gw_config *config, struct mm_err *err);

/* ---- loops ---- */

/** Make libevent thread-safe (once per process). Call it before creating any event_base that other threads
 * will wake (event_active from another thread only works on bases created after this). */
void gw_http_global_init(void);

/** Start n_loops loop threads (none listening yet). */
int32_t gw_http_create(uint32_t n_loops, struct gw_http **out, struct mm_err *err);
/** Make `site` current: open the listeners it adds (keeping sockets of unchanged ones, so nothing is
 * dropped), switch every loop to it, close listeners it no longer has. Synchronous. On error nothing changes.
 */
int32_t gw_http_apply(struct gw_http *h, struct gw_site *site, struct mm_err *err);
/** Graceful shutdown: stop accepting, let running requests finish, close idle connections (HTTP/2: GOAWAY).
 * done(ud) runs once, on some loop thread, when no connection is left on any loop. */
void gw_http_drain(struct gw_http *h, void (*done)(void *ud), void *ud);
/** Stop: close every connection (aborting its requests), give handlers a moment to release, stop and join
 * the threads, free everything. */
void gw_http_destroy(struct gw_http *h);

/** The current site (control thread), or NULL before the first apply. */
const struct gw_site *gw_http_current_site(const struct gw_http *h);
/** The ud of a site's hooks (the server keeps its generation there). */
void *gw_site_hooks_ud(const struct gw_site *s);

uint32_t gw_http_n_loops(const struct gw_http *h);
struct event_base *gw_http_loop_base(struct gw_http *h, uint32_t i);
const struct gw_executor *gw_http_loop_executor(struct gw_http *h, uint32_t i);
/** The port a listener of the current site is bound to (useful with port 0), or 0 when i is out of range. */
uint16_t gw_http_listen_port(const struct gw_http *h, size_t i);

/** Transport counters (read from any thread). */
struct gw_http_stats {
    uint64_t connections_open;
    uint64_t connections_total;
    uint64_t connections_h2_total;
    uint64_t connections_tls_total;
    uint64_t requests_active;
    uint64_t requests_total;
};
void gw_http_get_stats(const struct gw_http *h, struct gw_http_stats *out);

#endif
