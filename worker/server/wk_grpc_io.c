/* Byte buffers <-> protobuf-c, and the one-batch reply that ends a unary call. */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "wk_grpc_impl.h"

grpc_byte_buffer *wk_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_slice wk_flatten(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

struct unary {
    grpc_call *call;
    grpc_byte_buffer *bb;
    grpc_slice details;
    int cancelled;
    struct wk_tag tag;
};

static void unary_done(void *obj, int32_t ok)
{
    struct unary *u = obj;
    if (u->bb) grpc_byte_buffer_destroy(u->bb);
    grpc_slice_unref(u->details);
    grpc_call_unref(u->call);
    free(u);
}

void wk_unary_reply(grpc_call *call, const ProtobufCMessage *m, grpc_status_code code, const char *msg)
{
    struct unary *u = calloc(1, sizeof(*u));
    if (!u) {
        grpc_call_cancel(call, NULL);
        grpc_call_unref(call);
        return;
    }
    u->call = call;
    u->tag.fn = unary_done;
    u->tag.obj = u;
    u->details = grpc_slice_from_copied_string(msg ? msg : "");
    if (m && code == GRPC_STATUS_OK) u->bb = wk_pack(m);
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    int n = 0;
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    n++;
    if (u->bb) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = u->bb;
        n++;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &u->details;
    n++;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n].data.recv_close_on_server.cancelled = &u->cancelled;
    n++;
    grpc_call_error e = grpc_call_start_batch(call, ops, (size_t)n, &u->tag, NULL);
    if (e != GRPC_CALL_OK) {
        mm_log_error("grpc", "reply batch refused: %d", (int)e);
        unary_done(u, 0);
    }
}
