/* The gateway's gRPC client for proto/worker.proto, on gRPC C core.
 *
 * One struct gw_upstream owns a completion queue and the thread(s) that service it; every worker
 * address is a struct gw_upstream_chan (one gRPC channel, which reconnects by itself). Calls complete
 * on the completion-queue thread and are handed to the caller's thread through a gw_executor, so a
 * request's state is only touched on its own event loop. Where a call takes a NULL executor its
 * callback runs on the completion-queue thread instead: it must then be short and thread-safe (the
 * router's health checks do this).
 *
 * Message limits are raised on our side (no 4 MiB cap); large tensors still go out of band (see
 * gw_upstream_generate.h). Errors come back as a struct gw_call_status whose code is an mm_status code
 * mapped from the gRPC status in one table (gw_grpc_status.h).
 *
 * Thread safety: everything here may be called from any thread unless a function says otherwise. */
#ifndef GW_UPSTREAM_H
#define GW_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "gw_executor.h"
#include "mm_status.h"
#include "worker.pb-c.h"

struct gw_upstream;
struct gw_upstream_chan;

struct gw_upstream_opts {
    uint32_t cq_threads;       /* completion-queue threads, default 1 (they only decode and post) */
    uint32_t keepalive_ms;     /* HTTP/2 keepalive pings, default 20 000; 0 keeps the default */
    uint32_t reconnect_min_ms; /* first reconnect backoff after a failure, default 100 */
    uint32_t reconnect_max_ms; /* default 2 000 */
};

/** How a call ended. */
struct gw_call_status {
    int32_t code;        /* mm_status: MM_OK, or mapped from the gRPC status */
    int grpc_code;       /* the gRPC status code as received */
    char message[512];   /* one line: the worker, the method and the status details */
    uint16_t client;     /* where the part a client may see starts: message without the worker's address
                            (the log keeps the whole line) */
    uint8_t shm_refused; /* the worker could not open the attempt's shared memory (another /dev/shm: a
                            container of its own): the channel no longer uses it, the same worker can take
                            the request again */
};

int32_t gw_upstream_create(const struct gw_upstream_opts *opts, struct gw_upstream **out, struct mm_err *err);
/** Cancel whatever is still in flight, wait for it to unwind, close every channel and stop the threads.
 * Callbacks already posted to executors may still run afterwards; calls cancelled by the caller never
 * call back. Not from a completion-queue callback. */
void gw_upstream_destroy(struct gw_upstream *up);

/** A channel to one worker. target: "host:port", "[v6]:port" or "unix:/path" (gRPC target syntax). */
int32_t gw_upstream_chan_open(struct gw_upstream *up, const char *target, struct gw_upstream_chan **out,
                              struct mm_err *err);

/** TLS to a worker (config upstream_tls). */
struct gw_upstream_tls {
    const char *ca_pem; /* PEM roots the worker's certificate must chain to; NULL = gRPC's default roots */
    const char *server_name; /* the name the certificate must carry; NULL = the target's host */
};
/** gw_upstream_chan_open over TLS when tls is not NULL. Its calls all go through gRPC C core (the loops'
 * own HTTP/2 connections are plaintext). */
int32_t gw_upstream_chan_open_tls(struct gw_upstream *up, const char *target,
                                  const struct gw_upstream_tls *tls, struct gw_upstream_chan **out,
                                  struct mm_err *err);
/** Send "authorization: Bearer token" with every call on ch (what a worker started with --auth-token-file
 * asks for; config upstream_token). Before the channel's first call. MM_INVALID for a token that is empty
 * or not visible ASCII. */
int32_t gw_upstream_chan_set_token(struct gw_upstream_chan *ch, const char *token, struct mm_err *err);
/** Drop the caller's reference; calls still running keep the channel alive until they end. */
void gw_upstream_chan_close(struct gw_upstream_chan *ch);
const char *gw_upstream_chan_target(const struct gw_upstream_chan *ch);
/** Whether the worker is on this host (loopback address, localhost or a unix socket), which makes a
 * shared-memory tensor handoff possible. */
int gw_upstream_chan_is_local(const struct gw_upstream_chan *ch);
/** Whether calls on ch may put tensors in shared memory: the worker is local, and has not failed to open
 * one of ours (after which the channel sends inline or by upload). */
int gw_upstream_chan_shm_usable(const struct gw_upstream_chan *ch);

/** What a worker said about itself in its last ModelInfo answer on this channel. */
struct gw_worker_info {
    int known; /* 0 until a ModelInfo answer arrived */
    char model_name[128];
    char model_type[64];
    uint32_t vocab_size;
    uint64_t max_context;
    uint32_t block_size;
    uint32_t protocol_version;
    int supports_shm;
    uint64_t max_message_bytes; /* 0 = not reported */
};
void gw_upstream_chan_info(struct gw_upstream_chan *ch, struct gw_worker_info *out);

/** Completion of a unary call: resp is the decoded answer on MM_OK (cast to the method's response type),
 * NULL otherwise; both are valid during the callback only. */
typedef void (*gw_unary_cb)(void *arg, const struct gw_call_status *st, const ProtobufCMessage *resp);

/** A unary call: method "/mmgw.worker.v1.Worker/<Name>", req packed here (the caller keeps it),
 * resp_desc the response type. timeout_ms 0 = no deadline. ex NULL: cb runs on the completion-queue
 * thread. cb may be NULL (fire and forget). */
int32_t gw_upstream_unary(struct gw_upstream_chan *ch, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, uint32_t timeout_ms,
                          const struct gw_executor *ex, gw_unary_cb cb, void *arg, struct mm_err *err);

/** Typed helpers for the unary methods. A ModelInfo answer also updates the channel's worker info. */
int32_t gw_upstream_health(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                           gw_unary_cb cb, void *arg, struct mm_err *err);
int32_t gw_upstream_model_info(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                               gw_unary_cb cb, void *arg, struct mm_err *err);
int32_t gw_upstream_load(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                         gw_unary_cb cb, void *arg, struct mm_err *err);
int32_t gw_upstream_abort(struct gw_upstream_chan *ch, const char *request_id, uint32_t timeout_ms,
                          const struct gw_executor *ex, gw_unary_cb cb, void *arg, struct mm_err *err);

/** Calls in flight on this client through gRPC C core (for tests and /metrics); Generate calls on an event
 * loop's own connection (gw_upstream_generate_loop) belong to that loop and are not counted. */
uint64_t gw_upstream_live_calls(struct gw_upstream *up);

#endif
