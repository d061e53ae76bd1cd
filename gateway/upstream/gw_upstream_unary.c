/* Unary calls (Health, ModelInfo, Load, Abort): one batch with every op, one completion. */
#include <stdlib.h>
#include <string.h>

#include "gw_upstream_internal.h"

struct unary {
    struct gw_up_tag tag;
    struct gw_up_live live;
    struct gw_upstream_chan *ch;
    const char *method;
    const ProtobufCMessageDescriptor *resp_desc;
    grpc_byte_buffer *send;
    grpc_byte_buffer *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    struct gw_executor ex;
    int has_ex;
    gw_unary_cb cb;
    void *arg;
    /* the result, filled on the completion-queue thread */
    struct gw_call_status st;
    ProtobufCMessage *resp;
};

static void unary_free(struct unary *u)
{
    if (u->resp) protobuf_c_message_free_unpacked(u->resp, NULL);
    grpc_slice_unref(u->details);
    grpc_metadata_array_destroy(&u->initial_md);
    grpc_metadata_array_destroy(&u->trailing_md);
    free(u);
}

static void deliver(void *arg)
{
    struct unary *u = arg;
    u->cb(u->arg, &u->st, u->st.code == MM_OK ? u->resp : NULL);
    unary_free(u);
}

static void on_unary_done(struct gw_up_tag *tag, int ok)
{
    struct unary *u = (struct unary *)tag;
    if (u->send) grpc_byte_buffer_destroy(u->send);
    u->send = NULL;
    gw_up_status_fill(&u->st, u->ch, u->method, u->status, &u->details);
    if (u->st.code == MM_OK) {
        u->resp = u->recv ? gw_up_unpack(u->recv, u->resp_desc) : NULL;
        if (!u->resp)
            gw_up_status_local(&u->st, u->ch, u->method, MM_FORMAT, "malformed or missing response");
    }
    if (u->recv) grpc_byte_buffer_destroy(u->recv);
    u->recv = NULL;
    if (u->resp && u->resp_desc == &mmgw__worker__v1__model_info_response__descriptor)
        gw_up_chan_set_info(u->ch, (const Mmgw__Worker__V1__ModelInfoResponse *)u->resp);
    struct gw_upstream_chan *ch = u->ch;
    gw_up_call_release(ch, &u->live);
    if (!u->cb) {
        unary_free(u);
        return;
    }
    if (!u->has_ex) {
        deliver(u);
        return;
    }
    if (gw_executor_post(&u->ex, deliver, u) != 0) unary_free(u); /* the loop is going away */
}

int32_t gw_upstream_unary(struct gw_upstream_chan *ch, const char *method, const ProtobufCMessage *req,
                          const ProtobufCMessageDescriptor *resp_desc, uint32_t timeout_ms,
                          const struct gw_executor *ex, gw_unary_cb cb, void *arg, struct mm_err *err)
{
    if (!ch || !method || !req || !resp_desc) return mm_err_set(err, MM_INVALID, "upstream: bad unary call");
    struct unary *u = calloc(1, sizeof(*u));
    if (!u) return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    u->tag.fn = on_unary_done;
    u->ch = ch;
    u->method = method;
    u->resp_desc = resp_desc;
    u->cb = cb;
    u->arg = arg;
    if (ex) {
        u->ex = *ex;
        u->has_ex = 1;
    }
    u->details = grpc_empty_slice();
    grpc_metadata_array_init(&u->initial_md);
    grpc_metadata_array_init(&u->trailing_md);
    u->send = gw_up_pack(req);
    if (!u->send) {
        unary_free(u);
        return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    }
    grpc_call *call = gw_up_call_create(ch, method, timeout_ms, &u->live);
    if (!call) {
        grpc_byte_buffer_destroy(u->send);
        unary_free(u);
        return mm_err_set(err, MM_UNAVAILABLE, "upstream: cannot start %s on %s (shutting down?)", method,
                          ch->target);
    }
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    gw_up_auth_op(ch, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = u->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &u->initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &u->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
    ops[5].data.recv_status_on_client.status = &u->status;
    ops[5].data.recv_status_on_client.status_details = &u->details;
    grpc_call_error ce = grpc_call_start_batch(call, ops, 6, &u->tag, NULL);
    if (ce != GRPC_CALL_OK) {
        grpc_byte_buffer_destroy(u->send);
        gw_up_call_release(ch, &u->live);
        unary_free(u);
        return mm_err_set(err, MM_ERROR, "upstream: %s on %s: start_batch failed (%d)", method, ch->target,
                          ce);
    }
    return MM_OK;
}

int32_t gw_upstream_health(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                           gw_unary_cb cb, void *arg, struct mm_err *err)
{
    Mmgw__Worker__V1__HealthRequest req = MMGW__WORKER__V1__HEALTH_REQUEST__INIT;
    return gw_upstream_unary(ch, GW_WORKER_METHOD("Health"), &req.base,
                             &mmgw__worker__v1__health_response__descriptor, timeout_ms, ex, cb, arg, err);
}

int32_t gw_upstream_model_info(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                               gw_unary_cb cb, void *arg, struct mm_err *err)
{
    Mmgw__Worker__V1__ModelInfoRequest req = MMGW__WORKER__V1__MODEL_INFO_REQUEST__INIT;
    return gw_upstream_unary(ch, GW_WORKER_METHOD("ModelInfo"), &req.base,
                             &mmgw__worker__v1__model_info_response__descriptor, timeout_ms, ex, cb, arg,
                             err);
}

int32_t gw_upstream_load(struct gw_upstream_chan *ch, uint32_t timeout_ms, const struct gw_executor *ex,
                         gw_unary_cb cb, void *arg, struct mm_err *err)
{
    Mmgw__Worker__V1__LoadRequest req = MMGW__WORKER__V1__LOAD_REQUEST__INIT;
    return gw_upstream_unary(ch, GW_WORKER_METHOD("Load"), &req.base,
                             &mmgw__worker__v1__load_response__descriptor, timeout_ms, ex, cb, arg, err);
}

int32_t gw_upstream_abort(struct gw_upstream_chan *ch, const char *request_id, uint32_t timeout_ms,
                          const struct gw_executor *ex, gw_unary_cb cb, void *arg, struct mm_err *err)
{
    Mmgw__Worker__V1__AbortRequest req = MMGW__WORKER__V1__ABORT_REQUEST__INIT;
    req.request_id = (char *)(request_id ? request_id : "");
    return gw_upstream_unary(ch, GW_WORKER_METHOD("Abort"), &req.base,
                             &mmgw__worker__v1__abort_response__descriptor, timeout_ms, ex, cb, arg, err);
}
