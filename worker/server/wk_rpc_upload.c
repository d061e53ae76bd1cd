/* UploadTensor: a client stream of TensorChunks staged in wk_uploads. Only the completion-queue thread
 * touches an upload call, one RECV_MESSAGE at a time. An upload left incomplete when the stream ends stays
 * staged (a later stream may continue it) until its time-to-live runs out. */
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "worker.pb-c.h"
#include "wk_grpc_impl.h"
#include "wk_grpc_status.h"
#include "wk_uploads.h"

struct upload_call {
    struct wk_grpc *g;
    grpc_call *call;
    grpc_byte_buffer *recv;
    char id[WK_UPLOAD_ID_MAX + 1];
    uint64_t received;
    struct wk_tag tag;
};

static void upload_next(struct upload_call *u);

static void upload_end(struct upload_call *u, grpc_status_code code, const char *msg)
{
    Mmgw__Worker__V1__UploadTensorResponse resp = MMGW__WORKER__V1__UPLOAD_TENSOR_RESPONSE__INIT;
    resp.upload_id = u->id;
    resp.received_bytes = u->received;
    wk_unary_reply(u->call, &resp.base, code, msg);
    free(u);
}

static void upload_recv(void *obj, int32_t ok)
{
    struct upload_call *u = obj;
    if (!ok) { /* the client broke off: nothing more to answer */
        if (u->recv) grpc_byte_buffer_destroy(u->recv);
        grpc_call_unref(u->call);
        free(u);
        return;
    }
    if (!u->recv) { /* end of the client's stream */
        upload_end(u, GRPC_STATUS_OK, NULL);
        return;
    }
    grpc_slice s = wk_flatten(u->recv);
    grpc_byte_buffer_destroy(u->recv);
    u->recv = NULL;
    Mmgw__Worker__V1__TensorChunk *ch =
        mmgw__worker__v1__tensor_chunk__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (!ch) {
        upload_end(u, GRPC_STATUS_INVALID_ARGUMENT, "TensorChunk does not parse");
        return;
    }
    const char *id = ch->upload_id && ch->upload_id[0] ? ch->upload_id : u->id;
    if (u->id[0] && strcmp(id, u->id) != 0) {
        mmgw__worker__v1__tensor_chunk__free_unpacked(ch, NULL);
        upload_end(u, GRPC_STATUS_INVALID_ARGUMENT, "one UploadTensor stream carries one upload_id");
        return;
    }
    if (!u->id[0] && strlen(id) <= WK_UPLOAD_ID_MAX) strcpy(u->id, id);
    struct mm_err err = {0};
    int32_t rc = wk_uploads_append(u->g->svc.uploads, id, ch->total_bytes, ch->offset, ch->data.data,
                                   ch->data.len, &u->received, &err);
    mmgw__worker__v1__tensor_chunk__free_unpacked(ch, NULL);
    if (rc != MM_OK) {
        upload_end(u, wk_grpc_status_from_mm(rc), err.msg);
        return;
    }
    upload_next(u);
}

static void upload_next(struct upload_call *u)
{
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &u->recv;
    if (grpc_call_start_batch(u->call, &op, 1, &u->tag, NULL) != GRPC_CALL_OK)
        upload_end(u, GRPC_STATUS_INTERNAL, "cannot read the stream");
}

void wk_rpc_upload(struct wk_grpc *g, grpc_call *call)
{
    struct upload_call *u = calloc(1, sizeof(*u));
    if (!u) {
        wk_unary_reply(call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    u->g = g;
    u->call = call;
    u->tag = (struct wk_tag){upload_recv, u};
    upload_next(u);
}
