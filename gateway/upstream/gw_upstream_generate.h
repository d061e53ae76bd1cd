/* Generate: a server stream of GenerateResponse messages, with flow control and cancellation.
 *
 * Flow control: at most one message is read ahead. The next one is requested from the worker only
 * after the consumer's on_response callback has returned and only while the call is not paused, so a
 * consumer that pauses (its HTTP client reads slowly) stops reading, gRPC's HTTP/2 window fills, and
 * the worker's stream is backpressured instead of the gateway buffering without bound.
 *
 * Media: each MultimodalItem's pixel_values must arrive as inline `data`. F32 tensors are sent as BF16
 * (what the model consumes; half the bytes) unless keep_f32 is set. Per call the client decides
 * how each tensor travels: via a POSIX shared-memory object when the worker is on this host, its
 * ModelInfo reported supports_shm and the tensor is not small (created with shm_open, unlinked when the
 * call ends); else inline when it fits the message; otherwise staged with UploadTensor chunks before
 * Generate starts. The caller's tensor bytes
 * are read until the uploads finish or the call is cancelled, whichever comes first.
 *
 * Threading: start, pause, resume and cancel are called on the executor's thread, where the callbacks
 * run.
 *
 * Two transports behind one handle. gw_upstream_generate goes through gRPC C core (its completion-queue
 * thread decodes, the executor hands each response to the caller's thread). gw_upstream_generate_loop is
 * for callers on an event loop (the gateway's HTTP loops): a request without out-of-band tensors then goes
 * over that loop's own HTTP/2 connection to the worker (gw_upstream_h2.h), and its responses are read and
 * delivered on the loop itself. Same contract, same statuses; anything the loop path does not do (media
 * staging, names to resolve, a connection in reconnect backoff) falls back to gRPC C core per call. */
#ifndef GW_UPSTREAM_GENERATE_H
#define GW_UPSTREAM_GENERATE_H

#include "gw_upstream.h"

struct event_base;

struct gw_gen_call;

struct gw_gen_opts {
    uint32_t timeout_ms;         /* deadline of the Generate call itself, 0 = none */
    uint64_t inline_max_bytes;   /* a tensor larger than this goes out of band; 0 = 4 MiB */
    int no_shm;                  /* never use shared memory (uploads instead) */
    uint64_t shm_min_bytes;      /* to a local worker with shared memory, a tensor this large or larger goes
                                    through it even where it fits inline; 0 = 256 KiB */
    uint32_t upload_chunk_bytes; /* UploadTensor chunk size, 0 = 1 MiB */
    int keep_f32;                /* send F32 tensors as they are instead of converting them to BF16 */
    int core_only;               /* gw_upstream_generate_loop: always through gRPC C core */
};

struct gw_gen_callbacks {
    /** One response (a chunk or a complete); valid during the callback only. The call may be paused or
     * cancelled from here. */
    void (*on_response)(void *arg, const Mmgw__Worker__V1__GenerateResponse *resp);
    /** The stream ended: st->code is MM_OK after the worker's OK status. Runs once, last, unless the
     * call was cancelled. responses = how many on_response calls were made. */
    void (*on_done)(void *arg, const struct gw_call_status *st, uint32_t responses);
};

/** Start Generate(req) on ch. req (and its tensor bytes) is only read during this call and, for
 * uploaded tensors, until the uploads finish. On MM_OK the callbacks will run on ex; *out is the
 * handle (valid until on_done has run or the call is cancelled). */
int32_t gw_upstream_generate(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__GenerateRequest *req,
                             const struct gw_gen_opts *opts, const struct gw_executor *ex,
                             const struct gw_gen_callbacks *cb, void *arg, struct gw_gen_call **out,
                             struct mm_err *err);

/** Where a caller on an event loop runs. */
struct gw_up_loop {
    struct event_base *base;      /* the loop's libevent base */
    const struct gw_executor *ex; /* its executor (stays valid as long as the loop) */
    uint32_t index;               /* which loop: each keeps its own connection per worker */
};

/** gw_upstream_generate from a caller running on loop (see above). The callbacks run on that loop. */
int32_t gw_upstream_generate_loop(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__GenerateRequest *req,
                                  const struct gw_gen_opts *opts, const struct gw_up_loop *loop,
                                  const struct gw_gen_callbacks *cb, void *arg, struct gw_gen_call **out,
                                  struct mm_err *err);

/** Stop reading responses until resume (backpressure). */
void gw_gen_pause(struct gw_gen_call *c);
void gw_gen_resume(struct gw_gen_call *c);
/** Cancel: the gRPC call is cancelled and an Abort for its request_id is sent to the worker. No
 * callback runs after this returns; the handle is gone. */
void gw_gen_cancel(struct gw_gen_call *c);

/** How the call's tensors were sent (for tests and metrics). */
struct gw_gen_transport {
    uint32_t inline_items, shm_items, upload_items;
    uint32_t converted_items; /* F32 tensors sent as BF16 */
};
void gw_gen_transport(const struct gw_gen_call *c, struct gw_gen_transport *out);

#endif
