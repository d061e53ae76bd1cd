/* Internals shared by the gRPC server files: tags, the server struct, (de)serialization helpers and the
 * per-method entry points. */
#ifndef WK_GRPC_IMPL_H
#define WK_GRPC_IMPL_H

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>

#include "wk_grpc_server.h"

#define WK_GRPC_MAX_THREADS 16

/** A completion-queue tag: the CQ thread calls fn(obj, ok) when the batch completes. */
struct wk_tag {
    void (*fn)(void *obj, int32_t ok);
    void *obj;
};

enum wk_method {
    WK_M_GENERATE = 0,
    WK_M_ABORT,
    WK_M_HEALTH,
    WK_M_MODEL_INFO,
    WK_M_LOAD,
    WK_M_UPLOAD,
    WK_M_COUNT,
    WK_M_UNKNOWN = WK_M_COUNT /* the generic slot: anything not registered */
};

/** One outstanding grpc_server_request_*call, re-armed after every new call. */
struct wk_slot {
    struct wk_grpc *g;
    int32_t method;
    void *registered;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    struct wk_tag tag;
};

struct wk_grpc {
    grpc_server *server;
    grpc_completion_queue *cq;
    pthread_t th[WK_GRPC_MAX_THREADS];
    int32_t n_threads; /* completion-queue threads running */
    int32_t thread_started;
    struct wk_service svc;
    struct wk_slot slots[WK_M_COUNT + 1];
    int32_t shutting_down; /* atomic */
    uint64_t id_counter;   /* atomic: ids for requests that came without one */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t shutdown_done; /* under mu */
    int32_t destroyed;
    struct wk_tag shutdown_tag;
};

/* wk_grpc_io.c */
/** Serialize a message into a new byte buffer; NULL on out of memory. */
grpc_byte_buffer *wk_pack(const ProtobufCMessage *m);
/** The bytes of a received message as one slice (unref it after unpacking). */
grpc_slice wk_flatten(grpc_byte_buffer *bb);
/** Finish a unary call: send m (or nothing when m is NULL) with the status, then free the call. Takes the
 * call's reference. Callable from any thread. */
void wk_unary_reply(grpc_call *call, const ProtobufCMessage *m, grpc_status_code code, const char *msg);

/* the methods (wk_rpc_*.c); each takes ownership of call and payload */
void wk_rpc_generate(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload);
void wk_rpc_abort(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload);
void wk_rpc_health(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload);
void wk_rpc_model_info(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload);
void wk_rpc_load(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload);
void wk_rpc_upload(struct wk_grpc *g, grpc_call *call);

#endif
