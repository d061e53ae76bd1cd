/* The UploadTensor client stream (see gw_upstream_media.h). */
#include "gw_upstream_media.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_upstream_internal.h"

#define DEFAULT_CHUNK (1u << 20)

struct gw_upload {
    struct gw_up_tag tag_send, tag_final, tag_status;
    struct gw_up_live live;
    struct gw_upstream_chan *ch;
    grpc_call *call;
    pthread_mutex_t mu;
    atomic_int refs; /* the owner's + one per batch in flight */
    char upload_id[128];
    const uint8_t *data;
    uint64_t len, offset;
    uint32_t chunk;
    int cancelled, send_failed, final_done, status_done, delivered;
    int batches; /* gRPC batches in flight */
    grpc_byte_buffer *send, *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    uint64_t received;
    struct gw_executor ex;
    int has_ex;
    gw_upload_cb cb;
    void *arg;
    struct gw_call_status st;
};

static const char *const upload_method = GW_WORKER_METHOD("UploadTensor");

static void upload_unref(struct gw_upload *u)
{
    if (atomic_fetch_sub(&u->refs, 1) != 1) return;
    if (u->send) grpc_byte_buffer_destroy(u->send); /* never sent */
    if (u->call) {                                  /* never started */
        grpc_slice_unref(u->details);
        gw_up_call_release(u->ch, &u->live);
    }
    pthread_mutex_destroy(&u->mu);
    gw_up_chan_unref(u->ch);
    free(u);
}

/* Give the gRPC call back once its status is in and no batch is left (u->mu held), so that the
 * client's shutdown never waits for a delivery queued on an event loop. */
static void maybe_release(struct gw_upload *u)
{
    if (!u->call || u->batches > 0 || !u->status_done) return;
    if (u->recv) grpc_byte_buffer_destroy(u->recv);
    u->recv = NULL;
    grpc_metadata_array_destroy(&u->initial_md);
    grpc_metadata_array_destroy(&u->trailing_md);
    grpc_slice_unref(u->details);
    gw_up_call_release(u->ch, &u->live);
    u->call = NULL;
}

/* The next chunk as a byte buffer (copying from the caller's memory; u->mu held). */
static grpc_byte_buffer *next_chunk(struct gw_upload *u)
{
    Mmgw__Worker__V1__TensorChunk c = MMGW__WORKER__V1__TENSOR_CHUNK__INIT;
    uint64_t n = u->len - u->offset < u->chunk ? u->len - u->offset : u->chunk;
    c.upload_id = u->upload_id;
    c.offset = u->offset;
    if (u->offset == 0) c.total_bytes = u->len;
    c.data.data = (uint8_t *)(u->data + u->offset);
    c.data.len = (size_t)n;
    grpc_byte_buffer *bb = gw_up_pack(&c.base);
    if (bb) u->offset += n;
    return bb;
}

static void deliver(void *arg)
{
    struct gw_upload *u = arg;
    /* on an executor, cancel runs on the same thread: honour it. Without one the decision to deliver was
     * taken before any cancel (gw_upload_cancel then returned 0) */
    if (!(u->has_ex && u->cancelled)) u->cb(u->arg, &u->st, u->received);
    upload_unref(u);
}

/* Both the status and the last send/receive batch are in: report (once). u->mu held. */
static int maybe_finish(struct gw_upload *u)
{
    if (u->delivered || u->cancelled || !u->status_done || !(u->final_done || u->send_failed)) return 0;
    u->delivered = 1;
    if (u->st.code == MM_OK && u->received != u->len) {
        char what[128];
        snprintf(what, sizeof(what), "worker acknowledged %llu of %llu bytes",
                 (unsigned long long)u->received, (unsigned long long)u->len);
        gw_up_status_local(&u->st, u->ch, upload_method, MM_IO, what);
    }
    return 1;
}

static void report(struct gw_upload *u)
{
    if (!u->cb) {
        upload_unref(u);
        return;
    }
    if (!u->has_ex) {
        deliver(u);
        return;
    }
    if (gw_executor_post(&u->ex, deliver, u) != 0) upload_unref(u);
}

static void on_status(struct gw_up_tag *tag, int ok)
{
    struct gw_upload *u = (struct gw_upload *)((char *)tag - offsetof(struct gw_upload, tag_status));
    pthread_mutex_lock(&u->mu);
    u->status_done = 1;
    u->batches--;
    gw_up_status_fill(&u->st, u->ch, upload_method, u->status, &u->details);
    int fin = maybe_finish(u);
    maybe_release(u);
    pthread_mutex_unlock(&u->mu);
    if (fin) report(u); /* hands over the owner's reference */
    upload_unref(u);
}

static void on_final(struct gw_up_tag *tag, int ok)
{
    struct gw_upload *u = (struct gw_upload *)((char *)tag - offsetof(struct gw_upload, tag_final));
    pthread_mutex_lock(&u->mu);
    u->final_done = 1;
    if (ok && u->recv) {
        ProtobufCMessage *m = gw_up_unpack(u->recv, &mmgw__worker__v1__upload_tensor_response__descriptor);
        if (m) {
            u->received = ((Mmgw__Worker__V1__UploadTensorResponse *)m)->received_bytes;
            protobuf_c_message_free_unpacked(m, NULL);
        }
    }
    u->batches--;
    int fin = maybe_finish(u);
    maybe_release(u);
    pthread_mutex_unlock(&u->mu);
    if (fin) report(u);
    upload_unref(u);
}

static void on_send(struct gw_up_tag *tag, int ok)
{
    struct gw_upload *u = (struct gw_upload *)((char *)tag - offsetof(struct gw_upload, tag_send));
    pthread_mutex_lock(&u->mu);
    if (u->send) grpc_byte_buffer_destroy(u->send);
    u->send = NULL;
    u->batches--;
    int fin = 0;
    if (!ok || u->cancelled) {
        u->send_failed = 1; /* the status says why */
        fin = maybe_finish(u);
    } else {
        grpc_op ops[3];
        memset(ops, 0, sizeof(ops));
        size_t n = 0;
        struct gw_up_tag *next_tag;
        if (u->offset < u->len) {
            u->send = next_chunk(u);
            if (!u->send) {
                grpc_call_cancel_with_status(u->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory", NULL);
                u->send_failed = 1;
                fin = maybe_finish(u);
                goto out;
            }
            ops[n].op = GRPC_OP_SEND_MESSAGE;
            ops[n++].data.send_message.send_message = u->send;
            next_tag = &u->tag_send;
        } else {
            ops[n++].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
            ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
            ops[n++].data.recv_initial_metadata.recv_initial_metadata = &u->initial_md;
            ops[n].op = GRPC_OP_RECV_MESSAGE;
            ops[n++].data.recv_message.recv_message = &u->recv;
            next_tag = &u->tag_final;
        }
        atomic_fetch_add(&u->refs, 1);
        u->batches++;
        if (grpc_call_start_batch(u->call, ops, n, next_tag, NULL) != GRPC_CALL_OK) {
            atomic_fetch_sub(&u->refs, 1);
            u->batches--;
            grpc_call_cancel(u->call, NULL);
            u->send_failed = 1;
            fin = maybe_finish(u);
        }
    }
out:
    maybe_release(u);
    pthread_mutex_unlock(&u->mu);
    if (fin) report(u);
    upload_unref(u);
}

int32_t gw_upstream_upload(struct gw_upstream_chan *ch, const char *upload_id, const void *data, uint64_t len,
                           uint32_t chunk_bytes, uint32_t timeout_ms, const struct gw_executor *ex,
                           gw_upload_cb cb, void *arg, struct gw_upload **out, struct mm_err *err)
{
    if (out) *out = NULL;
    if (!ch || !upload_id || (!data && len)) return mm_err_set(err, MM_INVALID, "upload: bad arguments");
    if (strlen(upload_id) >= sizeof(((struct gw_upload *)0)->upload_id))
        return mm_err_set(err, MM_INVALID, "upload: upload id too long");
    struct gw_upload *u = calloc(1, sizeof(*u));
    if (!u) return mm_err_set(err, MM_NOMEM, "upload: out of memory");
    u->tag_send.fn = on_send;
    u->tag_final.fn = on_final;
    u->tag_status.fn = on_status;
    u->ch = ch;
    gw_up_chan_ref(ch);
    pthread_mutex_init(&u->mu, NULL);
    atomic_init(&u->refs, 1);
    snprintf(u->upload_id, sizeof(u->upload_id), "%s", upload_id);
    u->data = data;
    u->len = len;
    u->chunk = chunk_bytes ? chunk_bytes : DEFAULT_CHUNK;
    u->cb = cb;
    u->arg = arg;
    if (ex) {
        u->ex = *ex;
        u->has_ex = 1;
    }
    u->details = grpc_empty_slice();
    grpc_metadata_array_init(&u->initial_md);
    grpc_metadata_array_init(&u->trailing_md);
    u->send = next_chunk(u); /* the first chunk carries total_bytes, even for an empty tensor */
    if (!u->send) {
        upload_unref(u);
        return mm_err_set(err, MM_NOMEM, "upload: out of memory");
    }
    u->call = gw_up_call_create(ch, upload_method, timeout_ms, &u->live);
    if (!u->call) {
        upload_unref(u);
        return mm_err_set(err, MM_UNAVAILABLE, "upload to %s: the client is shutting down", ch->target);
    }
    grpc_op st[1];
    memset(st, 0, sizeof(st));
    st[0].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st[0].data.recv_status_on_client.trailing_metadata = &u->trailing_md;
    st[0].data.recv_status_on_client.status = &u->status;
    st[0].data.recv_status_on_client.status_details = &u->details;
    grpc_op first[2];
    memset(first, 0, sizeof(first));
    first[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    gw_up_auth_op(ch, &first[0]);
    first[1].op = GRPC_OP_SEND_MESSAGE;
    first[1].data.send_message.send_message = u->send;
    pthread_mutex_lock(&u->mu);
    atomic_fetch_add(&u->refs, 2);
    u->batches = 2;
    grpc_call_error e1 = grpc_call_start_batch(u->call, st, 1, &u->tag_status, NULL);
    grpc_call_error e2 =
        e1 == GRPC_CALL_OK ? grpc_call_start_batch(u->call, first, 2, &u->tag_send, NULL) : GRPC_CALL_ERROR;
    pthread_mutex_unlock(&u->mu);
    if (e1 != GRPC_CALL_OK) {
        atomic_fetch_sub(&u->refs, 2);
        u->batches = 0;
        grpc_metadata_array_destroy(&u->initial_md);
        grpc_metadata_array_destroy(&u->trailing_md);
        upload_unref(u);
        return mm_err_set(err, MM_ERROR, "upload to %s: start_batch failed", ch->target);
    }
    if (e2 != GRPC_CALL_OK) {
        /* the status batch is running: cancel and let it unwind; the caller gets the error now */
        atomic_fetch_sub(&u->refs, 1);
        pthread_mutex_lock(&u->mu);
        u->batches--;
        u->cancelled = 1;
        grpc_call_cancel(u->call, NULL);
        pthread_mutex_unlock(&u->mu);
        upload_unref(u);
        return mm_err_set(err, MM_ERROR, "upload to %s: start_batch failed", ch->target);
    }
    if (out) *out = u;
    return MM_OK;
}

int gw_upload_cancel(struct gw_upload *u)
{
    if (!u) return 1;
    pthread_mutex_lock(&u->mu);
    int owner = !u->delivered && !u->cancelled;
    int suppressed = !u->delivered || u->has_ex;
    u->cancelled = 1;
    if (u->call) grpc_call_cancel(u->call, NULL);
    pthread_mutex_unlock(&u->mu);
    if (owner) upload_unref(u); /* the owner's reference; otherwise it travels with the delivery */
    return suppressed;
}
