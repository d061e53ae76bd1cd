/* The gateway's handler API: what an HTTP handler sees of a request and how it answers.
 *
 * The same API serves HTTP/1.1 (keep-alive, pipelining, chunked bodies) and HTTP/2 (cleartext with prior
 * knowledge, or TLS with ALPN). A handler never knows which one it talks to.
 *
 * Threading. Every request belongs to one event loop (one thread). Every function in this header must be
 * called on that thread. Work done elsewhere (gRPC completion threads, the preprocessing pool) hands its
 * result back with gw_executor_post(req->executor, ...), and the posted function touches the request.
 *
 * Lifetime (reference counted, loop-thread only):
 *  - The transport holds one reference from the moment the request head is parsed until the response is
 *    complete or the client went away.
 *  - During the handler call the request is valid. A handler that answers later (almost all real ones)
 *    takes its own reference with gw_request_ref() before returning and drops it with gw_request_unref()
 *    when it will not touch the request again. req->arena lives as long as the last reference.
 *  - A handler that returns without having answered and without holding a reference gets an automatic
 *    500 JSON error (a bug). Likewise when the last handler reference is dropped before the response
 *    is complete: a complete response becomes a 500, a started stream is cut (HTTP/1.1: the connection
 *    is closed without the last chunk; HTTP/2: RST_STREAM INTERNAL_ERROR), so clients see a failure.
 *
 * Abort. When the client disconnects, resets the stream (RST_STREAM), or a timeout hits (send_timeout
 * while the client does not read), the request is aborted: the abort callback (gw_request_on_abort) runs
 * once, from the event loop (never from inside a gw_http_* call) right after the event is seen (measured:
 * well under 1 ms after the client's FIN/RST reaches us). Afterwards every response function is a no-op that
 * returns MM_CANCELLED.
 * The handler should cancel its worker call and drop its reference.
 *
 * Backpressure. gw_http_stream_queued() says how many bytes of this response are accepted but not yet
 * written to the socket. A streaming handler stops pulling from its source when that passes its high
 * watermark and resumes in the drain callback (gw_http_stream_on_drain) which fires once the queue is at
 * or below the low watermark. The transport never buffers more than the `stream_buffer_max` config
 * value for one response: a write past it returns MM_AGAIN and queues nothing.
 *
 * Errors. Every error response is an OpenAI-style JSON object, sent with gw_http_send_error():
 *   {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": null}}
 * gw_http_status_from_mm() is the one table mapping mm_status codes to HTTP status codes. */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gw_executor.h"
#include "mm_arena.h"
#include "mm_status.h"

struct event_base;
struct gw_config;

enum gw_http_version { GW_HTTP_1_0 = 10, GW_HTTP_1_1 = 11, GW_HTTP_2 = 20 };

/** Methods the gateway knows by name; anything else is GW_METHOD_OTHER (the text is in req->method). */
enum gw_method {
    GW_METHOD_OTHER = 0,
    GW_METHOD_GET,
    GW_METHOD_HEAD,
    GW_METHOD_POST,
    GW_METHOD_PUT,
    GW_METHOD_DELETE,
    GW_METHOD_OPTIONS,
    GW_METHOD_PATCH
};

/** One request header. Names are lower case (HTTP/2 requires it; HTTP/1.1 names are folded); values
 * have surrounding whitespace removed. Both are NUL-terminated and live in the request arena. */
struct gw_header {
    const char *name;
    const char *value;
    size_t name_len;
    size_t value_len;
};

/** A request. All fields are read-only for handlers and valid while the handler holds a reference. */
struct gw_request {
    const char *method;       /* "POST" */
    enum gw_method method_id; /* GW_METHOD_POST */
    const char *target;       /* raw request-target: "/v1/models?x=1" */
    const char *path;         /* target up to '?' (not percent-decoded): "/v1/models" */
    const char *query;        /* after '?', without it; "" when there is none */
    const char *authority;    /* Host header or :authority; "" when absent */
    enum gw_http_version version;
    const struct gw_header *headers; /* in arrival order; repeated names appear several times */
    size_t n_headers;
    const char *body;        /* the complete request body (chunked bodies decoded), NUL-terminated */
    size_t body_len;         /* bytes, without the terminating NUL */
    const char *remote_addr; /* "127.0.0.1:53124" or "[::1]:53124" */
    struct mm_arena *arena;  /* per-request memory, freed with the request */
    const struct gw_executor *executor; /* post completions here: they run on this request's loop */
    struct event_base *base;            /* this loop's libevent base (timers, libcurl multi, ...) */
    uint32_t loop_index;                /* 0 .. number of loops - 1 */
    uint64_t id;                        /* unique within the process */
    const char *id_str;                 /* the same as text, also sent as the x-request-id header */
    int64_t start_ns;                   /* CLOCK_MONOTONIC ns when the request head was complete */
    const struct gw_config *config;     /* the configuration this request runs under (kept across a
                                           reload until the request is released) */
    const char *route;                  /* the matched route's path pattern, for metrics and logs */
};

/* ---- request ---- */

/** The value of the first header named `name` (case-insensitive), or NULL. */
const char *gw_request_header(const struct gw_request *req, const char *name);
/** Take a reference (see "Lifetime" above). */
void gw_request_ref(struct gw_request *req);
/** Drop a reference; the request may be freed before this returns. */
void gw_request_unref(struct gw_request *req);
/** True once the client went away or the request timed out; responses are no-ops from then on. */
bool gw_request_aborted(const struct gw_request *req);
/** Call cb(req, ud) once when the request is aborted (replaces an earlier callback; cb NULL clears it).
 * If the request is already aborted, cb runs from the event loop soon after (never inline). The callback
 * runs on the loop thread while the caller's reference is still held. */
void gw_request_on_abort(struct gw_request *req, void (*cb)(struct gw_request *req, void *ud), void *ud);

/* ---- response headers ---- */

/** Add a response header (name and value are copied) before the response starts. Names must be lower
 * case tokens; values must not contain CR, LF or NUL. The transport sets date, server, content-type,
 * content-length / transfer-encoding, connection and x-request-id itself.
 * Returns MM_OK, MM_INVALID (bad name/value, or the response already started), MM_NOMEM, MM_CANCELLED. */
int32_t gw_http_add_header(struct gw_request *req, const char *name, const char *value);

/* ---- complete responses ---- */

/** The retry-after value (seconds) every 429 and 503 response gets unless its handler added its own
 * (gw_http_add_header): the gateway's causes (a full worker or queue, no healthy worker, draining, out of
 * memory) are momentary, and SDKs back off on their own from there. */
#define GW_HTTP_RETRY_AFTER "1"

/** Send a complete response (body copied). content_type may be NULL for an empty body.
 * Returns MM_OK, MM_INVALID (response already started, status outside 200..599), MM_NOMEM, MM_CANCELLED. */
int32_t gw_http_respond(struct gw_request *req, int status, const char *content_type, const void *body,
                        size_t len);
/** gw_http_respond with content type application/json and a NUL-terminated body. */
int32_t gw_http_respond_json(struct gw_request *req, int status, const char *json);
/** Send the OpenAI-style JSON error object. type NULL picks the usual one for the status
 * ("invalid_request_error" for 4xx, "rate_limit_error" for 429, "server_error" for 5xx); message NULL uses
 * the reason phrase; param and code NULL are sent as JSON null. Safe to call before or instead of any other
 * response; after a stream has started it sends the error as one SSE event `data: {"error":...}` and ends
 * the stream. */
int32_t gw_http_send_error(struct gw_request *req, int status, const char *type, const char *message,
                           const char *param, const char *code);
/** gw_http_send_error with the status from gw_http_status_from_mm(err->code), err->msg as message and the
 * lower-case status name as code ("too_large"). */
int32_t gw_http_send_mm_error(struct gw_request *req, const struct mm_err *err);

/** The one mapping from mm_status codes to HTTP status codes (MM_INVALID 400, MM_NOT_FOUND 404,
 * MM_TOO_LARGE 413, MM_EXHAUSTED 429, MM_UNAVAILABLE/MM_AGAIN 503, MM_TIMEOUT 504, MM_DENIED 400 ...).
 * Unknown codes map to 500. */
int gw_http_status_from_mm(int32_t code);
/** The reason phrase of a status ("Not Found"); "Unknown" when not in the table. */
const char *gw_http_reason(int status);
/** Build the OpenAI error JSON into a malloc'ed NUL-terminated string (NULL on out of memory). Used by
 * gw_http_send_error; exposed for handlers that embed errors elsewhere (SSE error events). */
char *gw_http_error_json(int status, const char *type, const char *message, const char *param,
                         const char *code);

/* ---- streaming responses (SSE) ---- */

/** Start a streaming response: status and headers now, body in pieces. HTTP/1.1 uses chunked encoding
 * (HTTP/1.0: the body ends when the connection closes), HTTP/2 DATA frames.
 * Returns MM_OK, MM_INVALID (already started), MM_NOMEM, MM_CANCELLED. */
int32_t gw_http_stream_start(struct gw_request *req, int status, const char *content_type);
/** gw_http_stream_start(req, 200, "text/event-stream") plus cache-control: no-cache. */
int32_t gw_http_sse_start(struct gw_request *req);
/** Queue len bytes of body (copied). Returns MM_OK, MM_AGAIN (would pass stream_buffer_max: nothing
 * queued; wait for the drain callback), MM_INVALID (not started or already ended), MM_NOMEM,
 * MM_CANCELLED (aborted). */
int32_t gw_http_stream_write(struct gw_request *req, const void *data, size_t len);
/** Queue one SSE event: "data: <line>\n" for each line of data, then "\n". Same returns as above. */
int32_t gw_http_sse_event(struct gw_request *req, const char *data, size_t len);
/** Finish the stream. The request's transport reference is released once the last byte is queued.
 * Returns MM_OK, MM_INVALID, MM_CANCELLED. */
int32_t gw_http_stream_end(struct gw_request *req);
/** Bytes of this response accepted but not yet written to the socket (0 after abort). */
size_t gw_http_stream_queued(const struct gw_request *req);
/** Call cb(req, ud) once when gw_http_stream_queued(req) <= low_watermark (immediately from the event loop
 * if it already is). Registering again replaces the previous callback; cb NULL clears it. Not called after
 * an abort (the abort callback is). */
void gw_http_stream_on_drain(struct gw_request *req, size_t low_watermark,
                             void (*cb)(struct gw_request *req, void *ud), void *ud);

/* ---- routes ---- */

/** A handler. Runs on the request's loop; must not block. */
typedef void (*gw_handler_fn)(struct gw_request *req, void *ud);

enum gw_route_flags {
    GW_ROUTE_EXACT = 0,  /* the path equals the pattern */
    GW_ROUTE_PREFIX = 1, /* the path starts with the pattern (longest prefix wins; exact beats prefix) */
};

/** A route table: (method, path) -> handler. Built once per configuration generation on the main
 * thread, read-only (and shared by every loop) once the generation is published. */
struct gw_routes;

/** Add a route. method is "GET", "POST", ... or NULL for any method. Adding the same method and pattern
 * twice is an error (MM_INVALID) unless replace is true, which lets a module override a built-in route.
 * Unknown paths get 404 JSON, a known path with another method 405 JSON with an allow header. */
int32_t gw_routes_add(struct gw_routes *rt, const char *method, const char *pattern, uint32_t flags,
                      gw_handler_fn fn, void *ud, bool replace, struct mm_err *err);

#endif
