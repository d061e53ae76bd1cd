/* Shared internals of the gRPC client: the completion-queue tag, the client and channel structs, and
 * helpers to pack/unpack protobuf-c messages to gRPC byte buffers. Not a public header. */
#ifndef GW_UPSTREAM_INTERNAL_H
#define GW_UPSTREAM_INTERNAL_H

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "gw_upstream.h"
#include "gw_upstream_generate.h"

struct gw_h2_conn;

#define GW_WORKER_METHOD(name) "/mmgw.worker.v1.Worker/" name

/* Every batch carries one of these as its tag; the completion-queue thread calls fn. */
struct gw_up_tag {
    void (*fn)(struct gw_up_tag *tag, int ok);
};

/* A call in flight, linked into the client so that destroy can cancel it. */
struct gw_up_live {
    grpc_call *call;
    struct gw_up_live *prev, *next;
};

struct gw_upstream {
    grpc_completion_queue *cq;
    pthread_t *threads;
    uint32_t n_threads;
    grpc_channel_args *chan_args;
    pthread_mutex_t mu;
    pthread_cond_t idle;
    struct gw_up_live *live; /* guarded by mu */
    uint64_t n_live;
    struct gw_upstream_chan *chans; /* open channels, guarded by a global lock (see gw_upstream.c) */
    int closing;
    uint32_t keepalive_ms; /* also for the loops' own connections */
};

struct gw_upstream_chan {
    struct gw_upstream *up; /* NULL once the client is destroyed */
    grpc_channel *channel;
    char target[256];
    int local;
    /* the target as an address event loops connect to themselves (gw_upstream_h2.h); loop_ok 0 for
     * names, which only gRPC C core resolves */
    int loop_ok;
    struct sockaddr_storage loop_addr;
    uint32_t loop_addrlen;
    struct gw_h2_conn **loop_conns; /* [n_loop_conns] by loop index: array under mu, a slot by its loop */
    uint32_t n_loop_conns;
    uint32_t keepalive_ms;
    atomic_int refs;        /* the owner's + one per call */
    atomic_int detached;    /* the client was destroyed: no new calls */
    atomic_int shm_refused; /* the worker failed to open our shared memory once: inline/upload from now on */
    char *auth;             /* "Bearer TOKEN" sent with every call (gw_upstream_chan_set_token), or NULL */
    grpc_metadata auth_md;  /* auth as gRPC C core's initial metadata */
    int user_closed;
    pthread_mutex_t mu; /* guards info */
    struct gw_worker_info info;
    struct gw_upstream_chan *prev, *next; /* in up->chans */
};

/** Make op (a GRPC_OP_SEND_INITIAL_METADATA) carry the channel's authorization, if it has one. */
void gw_up_auth_op(struct gw_upstream_chan *ch, grpc_op *op);

/** Create a call on ch with a deadline (0 = none) and register it as live. NULL when the client is
 * closing or out of memory. Takes a channel reference. */
grpc_call *gw_up_call_create(struct gw_upstream_chan *ch, const char *method, uint32_t timeout_ms,
                             struct gw_up_live *live);
/** Unregister and unref a call made by gw_up_call_create; drops the channel reference. */
void gw_up_call_release(struct gw_upstream_chan *ch, struct gw_up_live *live);

void gw_up_chan_ref(struct gw_upstream_chan *ch);
void gw_up_chan_unref(struct gw_upstream_chan *ch);

/** Pack a message into a new byte buffer (NULL on out of memory). */
grpc_byte_buffer *gw_up_pack(const ProtobufCMessage *m);
/** A byte buffer over bytes the caller already packed; takes ownership of buf (freed with free()). */
grpc_byte_buffer *gw_up_buffer_take(void *buf, size_t len);
/** Decode a received message; NULL when malformed (free with protobuf_c_message_free_unpacked). */
ProtobufCMessage *gw_up_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d);

/* Generate calls come in two kinds behind one handle (gw_upstream_generate.h). */
enum gw_gen_kind { GW_GEN_CORE = 0, GW_GEN_LOOP = 1 };
struct gw_gen_call {
    int kind; /* the first member of each kind's call struct */
};
void gw_up_loop_gen_pause(struct gw_gen_call *g);
void gw_up_loop_gen_resume(struct gw_gen_call *g);
void gw_up_loop_gen_cancel(struct gw_gen_call *g);
/** Fire-and-forget Abort(request_id) through gRPC C core (after a cancel). */
void gw_up_send_abort(struct gw_upstream_chan *ch, const char *request_id);
/** Resolve a gRPC target into ch->loop_addr when it is an IP literal or a unix socket path. */
void gw_up_chan_parse_loop_addr(struct gw_upstream_chan *ch);
/** Release the channel's per-loop connections (any thread; see gw_h2_conn_release). */
void gw_up_chan_release_loop_conns(struct gw_upstream_chan *ch);

/** Fill st from a gRPC status code and details text, naming the target and method. */
void gw_up_status_fill_text(struct gw_call_status *st, const char *target, const char *method, int grpc_code,
                            const char *details, size_t details_len);
/** Fill st from a gRPC status and its details, naming the channel and method. */
void gw_up_status_fill(struct gw_call_status *st, const struct gw_upstream_chan *ch, const char *method,
                       grpc_status_code code, const grpc_slice *details);
/** Fill st with an mm code of our own (a local failure), naming the channel and method. */
void gw_up_status_local(struct gw_call_status *st, const struct gw_upstream_chan *ch, const char *method,
                        int32_t code, const char *what);

/** Record a ModelInfo answer on the channel. */
void gw_up_chan_set_info(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__ModelInfoResponse *r);

#endif
