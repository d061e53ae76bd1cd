/* The media fetcher: HTTP(S) GETs of media URLs on libcurl's multi interface, driven by one libevent
 * loop, under the media-fetch policy (gw_fetch_policy.h).
 *
 * One fetcher belongs to one event loop and is only touched from that loop's thread; completion
 * callbacks run there too, never inside gw_fetch_start. Every transfer:
 *   - is checked by the policy before it starts (a refused URL fails gw_fetch_start synchronously with
 *     MM_DENIED or MM_INVALID, and nothing is contacted);
 *   - connects only to addresses the policy accepts, checked in libcurl's open-socket hook on the
 *     exact address about to be connected, whatever DNS answered (no rebinding);
 *   - follows redirects itself, one hop at a time, re-applying the whole policy to every Location;
 *   - is capped in bytes (a Content-Length over the cap fails before the body, a body passing the cap
 *     aborts the moment it does), in total time across all hops, in connect time and in hops;
 *   - ignores proxy environment variables and speaks only http and https.
 *
 * Result codes: MM_OK (2xx with a body), MM_DENIED (policy, with the reason), MM_INVALID (malformed
 * URL or Location, too many redirects), MM_TOO_LARGE (byte cap), MM_TIMEOUT (time caps), MM_NOT_FOUND
 * (HTTP 404/410), MM_IO (connection failures and other HTTP statuses), MM_CANCELLED (fetcher destroyed
 * while the transfer ran). The API maps DENIED/INVALID/NOT_FOUND/IO/TIMEOUT to 400 and TOO_LARGE to 413. */
#ifndef GW_FETCH_H
#define GW_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "gw_fetch_policy.h"
#include "mm_buf.h"
#include "mm_status.h"

struct event_base;
struct gw_fetcher;
struct gw_fetch;

/** Caps on one fetch; a zero field takes the default shown. */
struct gw_fetch_limits {
    uint64_t max_bytes;          /* body bytes, default 64 MiB */
    uint32_t timeout_ms;         /* the whole fetch, all hops, default 30 000 */
    uint32_t connect_timeout_ms; /* each connection, default 5 000 */
    uint32_t max_redirects;      /* hops followed, default 5; GW_FETCH_NO_REDIRECTS to follow none */
};
#define GW_FETCH_NO_REDIRECTS UINT32_MAX

struct gw_fetch_opts {
    const struct gw_fetch_policy *policy; /* not owned; must outlive the fetcher; NULL = default policy */
    struct gw_fetch_limits limits;        /* per-fetch defaults */
    const char *user_agent;               /* NULL = "mmgw/<version>" */
    uint32_t max_connections;             /* open connections in all, 0 = libcurl's default */
    /* "host:port:address[,address]" entries that bypass DNS for those names (libcurl CURLOPT_RESOLVE
     * syntax), for operators pinning hosts and for tests. The policy still checks every address. */
    const char *const *resolve;
    size_t n_resolve;
};

/** What a finished fetch produced. Valid during the callback; the callback may take the body
 * (mm_buf_detach) and keep it. */
struct gw_fetch_result {
    int32_t status;           /* MM_OK or an error code (see above) */
    const char *message;      /* why, one line, for the client; "" on success */
    struct mm_buf body;       /* the response body on MM_OK */
    long http_status;         /* last response's status, 0 if none */
    const char *content_type; /* last response's Content-Type, or NULL */
    const char *final_url;    /* the URL that produced the body */
    uint32_t redirects;       /* hops followed */
};

typedef void (*gw_fetch_done_fn)(void *arg, struct gw_fetch_result *result);

/** A fetcher on base (libcurl's global init must have run: gw_fetch_global_init). */
int32_t gw_fetcher_create(struct event_base *base, const struct gw_fetch_opts *opts, struct gw_fetcher **out,
                          struct mm_err *err);
/** Stop every transfer (their callbacks run with MM_CANCELLED) and free the fetcher. Not from inside a
 * fetch callback. */
void gw_fetcher_destroy(struct gw_fetcher *f);

/** Start fetching url; limits NULL = the fetcher's. On MM_OK, done(arg, result) runs exactly once later
 * on the loop, unless the fetch is cancelled first; *out (may be NULL) is a handle for gw_fetch_cancel,
 * valid until done runs. A URL the policy refuses returns MM_DENIED/MM_INVALID here, with the reason,
 * and nothing is contacted. */
int32_t gw_fetch_start(struct gw_fetcher *f, const char *url, const struct gw_fetch_limits *limits,
                       gw_fetch_done_fn done, void *arg, struct gw_fetch **out, struct mm_err *err);
/** Stop a fetch; its callback will not run. Only before the callback has run. */
void gw_fetch_cancel(struct gw_fetch *t);

/** Fetches in flight (for /metrics and tests). */
size_t gw_fetcher_active(const struct gw_fetcher *f);

/** curl_global_init, once per process, thread-safe; returns MM_OK or MM_ERROR. */
int32_t gw_fetch_global_init(struct mm_err *err);

#endif
