/* gRPC calls over an HTTP/2 connection owned by one event loop (nghttp2 on the loop's libevent base).
 *
 * Why: through gRPC C core every call costs a completion-queue thread, gRPC's executor thread and a hop
 * back to the loop per message, and each call's first write is a syscall of its own. Here a loop keeps one
 * connection per worker (what nginx's grpc_pass and h2o's proxy do): requests submitted while the loop
 * handles a burst of client requests leave in one write, responses are read, framed and delivered on the
 * same thread, and nothing crosses a thread.
 *
 * Scope: server-streaming and unary calls whose request is one message (Generate without out-of-band
 * tensors). Everything else stays on gRPC C core (gw_upstream.c). A connection that cannot be opened,
 * is in reconnect backoff or is draining (GOAWAY) makes the caller fall back to gRPC C core for that call.
 *
 * Threading: every function here runs on the connection's loop thread, except gw_h2_conn_release, which
 * any thread may call: while the loop's thread runs, the teardown is posted to its executor (which must run
 * every task it accepted before its thread ends, as gateway/http's loops do); once that thread has exited,
 * the connection is freed without touching the executor or the base, which the gateway frees after its loop
 * threads end and before it retires the last configuration (whose channels release the connections).
 *
 * Flow control: each stream's receive window is 64 KiB and bytes are handed back to the worker
 * (WINDOW_UPDATE) only once their message has been delivered to a consumer that is not paused, so a paused
 * consumer stalls its worker after at most one window, as with gRPC C core. The connection window is large
 * (one paused stream must not block the others). */
#ifndef GW_UPSTREAM_H2_H
#define GW_UPSTREAM_H2_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <protobuf-c/protobuf-c.h>

#include "gw_upstream.h"

struct event_base;
struct gw_h2_conn;
struct gw_h2_stream;

struct gw_h2_stream_cbs {
    /** One complete message; the bytes are valid during the call. The stream may be paused, failed or
     * cancelled from here. */
    void (*on_message)(void *arg, const uint8_t *data, size_t len);
    /** The call is over (after the last message was delivered). Runs once, last, never after a cancel.
     * The stream handle is gone when this returns. */
    void (*on_end)(void *arg, const struct gw_call_status *st);
};

/** A connection to target (a parsed address) on the loop with this base; the caller holds the one
 * reference. Connecting starts at once. keepalive_ms: while streams are open and nothing arrived for that
 * long, a PING goes out, and no answer within as long fails the connection (a worker host that vanished
 * without a FIN), as gRPC C core's keepalive does; 0 = off. auth: an "authorization" value sent with every
 * stream ("Bearer TOKEN"; copied), or NULL. NULL on failure (err says why). */
struct gw_h2_conn *gw_h2_conn_open(struct event_base *base, const struct gw_executor *ex, const char *target,
                                   const struct sockaddr *addr, uint32_t addrlen, uint32_t keepalive_ms,
                                   const char *auth, struct mm_err *err);
/** Whether new streams can go on this connection (not failed, not draining, not in reconnect backoff). */
int gw_h2_conn_usable(const struct gw_h2_conn *c);
/** When a failed connection may be replaced by a new one (CLOCK_MONOTONIC ms): reconnect backoff. */
uint64_t gw_h2_conn_retry_at_ms(const struct gw_h2_conn *c);
/** The backoff the next connection should use after this one failed to connect (0: it had connected). */
uint32_t gw_h2_conn_next_backoff_ms(const struct gw_h2_conn *c);
/** Start the connection's backoff state from a predecessor's (so repeated failures back off further). */
void gw_h2_conn_set_backoff(struct gw_h2_conn *c, uint32_t backoff_ms);
/** Drop the caller's reference from any thread (see Threading above). */
void gw_h2_conn_release(struct gw_h2_conn *c);

/** Start a call: method "/pkg.Service/Method" (a string that outlives the call), msg the request (packed
 * here). timeout_ms 0 = none. NULL when the connection cannot take a stream or memory ran out (the caller
 * falls back). */
struct gw_h2_stream *gw_h2_call(struct gw_h2_conn *c, const char *method, const ProtobufCMessage *msg,
                                uint32_t timeout_ms, const struct gw_h2_stream_cbs *cb, void *arg);
/** Stop / restart delivering messages (backpressure; resume delivers from the loop, never inline). */
void gw_h2_pause(struct gw_h2_stream *s);
void gw_h2_resume(struct gw_h2_stream *s);
/** End the call with this gRPC status from our side (e.g. a malformed message): the stream is reset and
 * on_end follows from the loop, without further messages. */
void gw_h2_fail(struct gw_h2_stream *s, int grpc_code, const char *what);
/** Cancel: the stream is reset (the worker sees the cancellation); no callback runs afterwards and the
 * handle is gone. */
void gw_h2_cancel(struct gw_h2_stream *s);

#endif
