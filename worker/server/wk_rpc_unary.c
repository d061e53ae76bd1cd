/* The unary methods: Abort, Health, ModelInfo, Load. */
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "worker.pb-c.h"
#include "wk_engine.h"
#include "wk_grpc_impl.h"
#include "wk_sched.h"
#include "wk_shm.h"

#define PROTOCOL_VERSION 1

/* Unpack the request message of a unary call; NULL (and the call answered) when it does not parse. */
static ProtobufCMessage *unpack_or_reply(grpc_call *call, grpc_byte_buffer *payload,
                                         const ProtobufCMessageDescriptor *d)
{
    if (!payload) {
        wk_unary_reply(call, NULL, GRPC_STATUS_INVALID_ARGUMENT, "missing request message");
        return NULL;
    }
    grpc_slice s = wk_flatten(payload);
    grpc_byte_buffer_destroy(payload);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!m) wk_unary_reply(call, NULL, GRPC_STATUS_INVALID_ARGUMENT, "request message does not parse");
    return m;
}

static void abort_done(void *arg, int32_t found)
{
    Mmgw__Worker__V1__AbortResponse resp = MMGW__WORKER__V1__ABORT_RESPONSE__INIT;
    resp.found = found ? 1 : 0;
    wk_unary_reply(arg, &resp.base, GRPC_STATUS_OK, NULL);
}

void wk_rpc_abort(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload)
{
    Mmgw__Worker__V1__AbortRequest *req = (Mmgw__Worker__V1__AbortRequest *)unpack_or_reply(
        call, payload, &mmgw__worker__v1__abort_request__descriptor);
    if (!req) return;
    /* the reply waits until the scheduler has freed the request's pages, so Load right after sees them */
    wk_sched_abort(g->svc.sched, req->request_id, abort_done, call);
    mmgw__worker__v1__abort_request__free_unpacked(req, NULL);
}

void wk_rpc_health(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload)
{
    if (payload) grpc_byte_buffer_destroy(payload);
    struct wk_sched_load l;
    wk_sched_load(g->svc.sched, &l);
    Mmgw__Worker__V1__HealthResponse resp = MMGW__WORKER__V1__HEALTH_RESPONSE__INIT;
    resp.healthy = !l.draining;
    resp.message = l.draining ? "draining" : "ok";
    wk_unary_reply(call, &resp.base, GRPC_STATUS_OK, NULL);
}

void wk_rpc_model_info(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload)
{
    if (payload) grpc_byte_buffer_destroy(payload);
    const struct wk_model_info *mi = g->svc.info;
    uint32_t eos[8];
    int32_t n_eos = mi->n_eos < 8 ? mi->n_eos : 8;
    for (int32_t i = 0; i < n_eos; i++) eos[i] = (uint32_t)mi->eos_ids[i];
    Mmgw__Worker__V1__ModelInfoResponse resp = MMGW__WORKER__V1__MODEL_INFO_RESPONSE__INIT;
    resp.model_name = (char *)mi->name;
    resp.vocab_size = (uint32_t)mi->vocab_size;
    resp.max_context = (uint64_t)g->svc.limits.max_context; /* the model's, capped by the cache */
    resp.n_eos_token_ids = (size_t)n_eos;
    resp.eos_token_ids = eos;
    resp.block_size = (uint32_t)mi->block_size;
    resp.dtype = (char *)mi->dtype;
    resp.model_type = (char *)mi->model_type;
    resp.image_token_id = (uint32_t)mi->image_token_id;
    resp.video_token_id = (uint32_t)mi->video_token_id;
    resp.merge_factor = (uint32_t)g->svc.limits.merge_factor;
    resp.protocol_version = PROTOCOL_VERSION;
    resp.supports_shm = g->svc.limits.allow_shm && wk_shm_call_local(call); /* only to callers on this host */
    resp.max_message_bytes = (uint64_t)(g->svc.max_message_bytes > 0 ? g->svc.max_message_bytes : INT_MAX);
    wk_unary_reply(call, &resp.base, GRPC_STATUS_OK, NULL);
}

void wk_rpc_load(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload)
{
    if (payload) grpc_byte_buffer_destroy(payload);
    struct wk_sched_load l;
    wk_sched_load(g->svc.sched, &l);
    Mmgw__Worker__V1__LoadResponse resp = MMGW__WORKER__V1__LOAD_RESPONSE__INIT;
    resp.running_requests = (uint32_t)l.running_requests;
    resp.waiting_requests = (uint32_t)l.waiting_requests;
    resp.free_kv_pages = (uint64_t)l.free_pages;
    resp.total_kv_pages = (uint64_t)l.total_pages;
    resp.page_tokens = (uint32_t)l.page_tokens;
    resp.available_kv_pages = (uint64_t)l.available_pages;
    resp.running_sequences = (uint32_t)l.running_seqs;
    resp.max_waiting = (uint32_t)l.max_waiting;
    resp.encoding_requests = (uint32_t)l.encoding_requests;
    wk_unary_reply(call, &resp.base, GRPC_STATUS_OK, NULL);
}
