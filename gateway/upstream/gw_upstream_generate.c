/* Generate: media staging (inline / shared memory / UploadTensor), then the server stream with
 * one-message read-ahead, pause/resume and cancel + Abort (see gw_upstream_generate.h). */
#include "gw_upstream_generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_upstream_internal.h"
#include "gw_upstream_media.h"
#include "gw_upstream_shm.h"
#include "mm_dtype.h"
#include "mm_log.h"

#define DEFAULT_INLINE_MAX (4ull << 20)
#define DEFAULT_SHM_MIN (256ull << 10)
/* protobuf framing and the non-tensor fields of a request stay well below this */
#define MESSAGE_SLACK (64u << 10)
#define ABORT_TIMEOUT_MS 5000

static const char *const gen_method = GW_WORKER_METHOD("Generate");
static atomic_uint_fast64_t upload_counter;
static atomic_int shm_warned;

struct staged_upload {
    char upload_id[128];
    const uint8_t *data;
    size_t len;
};

struct core_call {
    struct gw_gen_call base; /* kind GW_GEN_CORE */
    struct gw_up_tag tag_start, tag_status, tag_recv;
    struct gw_up_live live;
    struct gw_upstream_chan *ch;
    grpc_call *call; /* NULL until the uploads are done */
    pthread_mutex_t mu;
    atomic_int refs; /* the owner's, one per batch in flight, one per posted delivery, one per upload */
    struct gw_gen_opts opts;
    struct gw_executor ex;
    struct gw_gen_callbacks cb;
    void *arg;
    char request_id[128];

    grpc_byte_buffer *send; /* the packed request */
    grpc_byte_buffer *recv;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;

    /* guarded by mu */
    int cancelled, paused, recv_pending, delivering, eos, status_done, done_posted, local_failed;
    int owner_held;              /* the owner's reference is still counted in refs */
    int batches;                 /* gRPC batches in flight */
    int started;                 /* the Generate call was created (Abort makes sense) */
    grpc_status_code final_grpc; /* c->status, kept after the call is released */
    struct gw_call_status final;
    uint32_t responses; /* touched on the executor thread only */

    struct staged_upload *uploads;
    size_t n_uploads, next_upload;
    struct gw_upload *cur_upload;
    struct gw_shm_tensor **shm; /* the call's shared-memory objects */
    size_t n_shm;
    uint16_t **converted; /* BF16 copies of F32 tensors, one slot per item */
    size_t n_items;
    struct gw_gen_transport transport;
};

struct delivery {
    struct core_call *c;
    Mmgw__Worker__V1__GenerateResponse *resp;
};

static void gen_unref(struct core_call *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1) return;
    if (c->send) grpc_byte_buffer_destroy(c->send); /* never sent */
    /* A worker that answered OK has read its tensors (the prompt is prefilled before any token): the
     * objects may carry the next call's. After a failure or a cancel it may still be reading them. */
    const int reuse = c->status_done && c->final_grpc == GRPC_STATUS_OK && !c->cancelled && !c->local_failed;
    for (size_t i = 0; i < c->n_shm; i++) gw_shm_tensor_release(c->shm[i], reuse);
    free(c->shm);
    free(c->uploads);
    for (size_t i = 0; c->converted && i < c->n_items; i++) free(c->converted[i]);
    free(c->converted);
    pthread_mutex_destroy(&c->mu);
    gw_up_chan_unref(c->ch);
    free(c);
}

/* Once the status is in and no batch is left, give the gRPC call back (c->mu held): the client's
 * shutdown waits for exactly this, not for our deliveries to run. */
static void maybe_release(struct core_call *c)
{
    if (!c->call || c->batches > 0 || !(c->status_done || c->local_failed)) return;
    if (c->recv) grpc_byte_buffer_destroy(c->recv);
    c->recv = NULL;
    grpc_metadata_array_destroy(&c->initial_md);
    grpc_metadata_array_destroy(&c->trailing_md);
    grpc_slice_unref(c->details);
    c->details = grpc_empty_slice();
    gw_up_call_release(c->ch, &c->live);
    c->call = NULL;
    /* gRPC completes the status only after every message was read, so nothing is left to read */
    c->eos = 1;
}

static struct core_call *from_tag(struct gw_up_tag *tag, size_t offset)
{
    return (struct core_call *)(void *)((char *)tag - offset);
}

/* ---- delivery on the executor thread ---- */

static void arm_recv(struct core_call *c);
static void maybe_done(struct core_call *c);

static void deliver_done(void *arg)
{
    struct core_call *c = arg;
    pthread_mutex_lock(&c->mu);
    int cancelled = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    if (!cancelled) {
        c->cb.on_done(c->arg, &c->final, c->responses);
        pthread_mutex_lock(&c->mu);
        int owner = c->owner_held;
        c->owner_held = 0;
        pthread_mutex_unlock(&c->mu);
        if (owner) gen_unref(c); /* the handle is gone */
    }
    gen_unref(c);
}

static void deliver_response(void *arg)
{
    struct delivery *d = arg;
    struct core_call *c = d->c;
    pthread_mutex_lock(&c->mu);
    int cancelled = c->cancelled;
    pthread_mutex_unlock(&c->mu);
    if (!cancelled) {
        c->responses++;
        c->cb.on_response(c->arg, d->resp);
    }
    protobuf_c_message_free_unpacked(&d->resp->base, NULL);
    free(d);
    pthread_mutex_lock(&c->mu);
    c->delivering = 0;
    if (!c->cancelled && !c->paused) arm_recv(c);
    maybe_done(c);
    pthread_mutex_unlock(&c->mu);
    gen_unref(c);
}

/* ---- state machine; c->mu held ---- */

/* Read the next message if nothing is pending and reading is wanted. */
static void arm_recv(struct core_call *c)
{
    if (!c->call || c->recv_pending || c->delivering || c->eos || c->done_posted || c->cancelled) return;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv;
    atomic_fetch_add(&c->refs, 1);
    c->recv_pending = 1;
    c->batches++;
    if (grpc_call_start_batch(c->call, &op, 1, &c->tag_recv, NULL) != GRPC_CALL_OK) {
        c->recv_pending = 0;
        c->batches--;
        c->eos = 1;
        atomic_fetch_sub(&c->refs, 1);
    }
}

/* Post on_done once the stream is over: after the status, and after the last message was read (or,
 * on an error status, as soon as no read is in flight). */
static void maybe_done(struct core_call *c)
{
    if (c->done_posted || c->cancelled || c->delivering) return;
    int over = c->local_failed ||
               (c->status_done && (c->eos || (c->final_grpc != GRPC_STATUS_OK && !c->recv_pending)));
    if (!over) return;
    c->done_posted = 1;
    atomic_fetch_add(&c->refs, 1);
    if (gw_executor_post(&c->ex, deliver_done, c) != 0) {
        /* the loop is gone (shutdown): nobody to tell. Our caller holds a reference, so this never frees;
         * the owner's reference stays until the owner cancels */
        atomic_fetch_sub(&c->refs, 1);
    }
}

/* ---- completion-queue callbacks ---- */

static void on_start(struct gw_up_tag *tag, int ok)
{
    struct core_call *c = from_tag(tag, offsetof(struct core_call, tag_start));
    pthread_mutex_lock(&c->mu);
    if (c->send) grpc_byte_buffer_destroy(c->send);
    c->send = NULL;
    c->batches--;
    maybe_release(c);
    maybe_done(c);
    pthread_mutex_unlock(&c->mu);
    gen_unref(c); /* failures surface in the status */
}

static void on_status(struct gw_up_tag *tag, int ok)
{
    struct core_call *c = from_tag(tag, offsetof(struct core_call, tag_status));
    pthread_mutex_lock(&c->mu);
    c->status_done = 1;
    c->final_grpc = c->status;
    if (!c->local_failed) gw_up_status_fill(&c->final, c->ch, gen_method, c->status, &c->details);
    /* A worker on this host that cannot find our object lives with another /dev/shm (its own container,
     * a Kubernetes sidecar): stop using shared memory with it and let the router send this one again. */
    if (!c->local_failed && c->n_shm > 0 && c->status == GRPC_STATUS_NOT_FOUND) {
        c->final.shm_refused = 1;
        if (!atomic_exchange(&c->ch->shm_refused, 1))
            mm_log_warn(
                "upstream",
                "worker %s cannot open this gateway's shared memory (%s): sending it tensors inline or "
                "by upload from now on",
                c->ch->target, c->final.message + c->final.client);
    }
    c->batches--;
    maybe_release(c);
    maybe_done(c);
    pthread_mutex_unlock(&c->mu);
    gen_unref(c);
}

static void on_recv(struct gw_up_tag *tag, int ok)
{
    struct core_call *c = from_tag(tag, offsetof(struct core_call, tag_recv));
    pthread_mutex_lock(&c->mu);
    c->recv_pending = 0;
    c->batches--;
    grpc_byte_buffer *bb = c->recv;
    c->recv = NULL;
    if (!bb) {
        c->eos = 1;
    } else if (!c->cancelled) {
        ProtobufCMessage *m = gw_up_unpack(bb, &mmgw__worker__v1__generate_response__descriptor);
        struct delivery *d = m ? malloc(sizeof(*d)) : NULL;
        if (!d) {
            if (m) protobuf_c_message_free_unpacked(m, NULL);
            grpc_call_cancel_with_status(c->call, GRPC_STATUS_INTERNAL,
                                         "malformed GenerateResponse from worker", NULL);
        } else {
            d->c = c;
            d->resp = (Mmgw__Worker__V1__GenerateResponse *)m;
            c->delivering = 1;
            atomic_fetch_add(&c->refs, 1);
            if (gw_executor_post(&c->ex, deliver_response, d) != 0) {
                c->delivering = 0;
                atomic_fetch_sub(&c->refs, 1);
                protobuf_c_message_free_unpacked(m, NULL);
                free(d);
                grpc_call_cancel(c->call, NULL);
            }
        }
    }
    if (bb) grpc_byte_buffer_destroy(bb);
    maybe_release(c);
    maybe_done(c);
    pthread_mutex_unlock(&c->mu);
    gen_unref(c);
}

/* Start the Generate call proper (any thread; c->mu held). */
static void start_call(struct core_call *c)
{
    c->call = gw_up_call_create(c->ch, gen_method, c->opts.timeout_ms, &c->live);
    if (!c->call) {
        gw_up_status_local(&c->final, c->ch, gen_method, MM_UNAVAILABLE, "the gateway is shutting down");
        c->local_failed = 1;
        maybe_done(c);
        return;
    }
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    gw_up_auth_op(c->ch, &ops[0]);
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = c->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &c->initial_md;
    grpc_op st;
    memset(&st, 0, sizeof(st));
    st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st.data.recv_status_on_client.trailing_metadata = &c->trailing_md;
    st.data.recv_status_on_client.status = &c->status;
    st.data.recv_status_on_client.status_details = &c->details;
    c->started = 1;
    atomic_fetch_add(&c->refs, 2);
    c->batches += 2;
    grpc_call_error e1 = grpc_call_start_batch(c->call, &st, 1, &c->tag_status, NULL);
    grpc_call_error e2 = grpc_call_start_batch(c->call, ops, 4, &c->tag_start, NULL);
    if (e1 != GRPC_CALL_OK) {
        atomic_fetch_sub(&c->refs, 1);
        c->batches--;
    }
    if (e2 != GRPC_CALL_OK) {
        atomic_fetch_sub(&c->refs, 1);
        c->batches--;
    }
    if (e1 != GRPC_CALL_OK || e2 != GRPC_CALL_OK) {
        grpc_call_cancel(c->call, NULL);
        gw_up_status_local(&c->final, c->ch, gen_method, MM_ERROR, "start_batch failed");
        c->local_failed = 1;
        maybe_release(c);
        maybe_done(c);
        return;
    }
    arm_recv(c);
}

static void start_next_upload(struct core_call *c);

/* An upload finished (completion-queue thread). */
static void on_upload_done(void *arg, const struct gw_call_status *st, uint64_t received)
{
    struct core_call *c = arg;
    pthread_mutex_lock(&c->mu);
    c->cur_upload = NULL;
    if (!c->cancelled) {
        if (st->code != MM_OK) {
            c->final = *st;
            c->local_failed = 1;
            maybe_done(c);
        } else if (c->next_upload < c->n_uploads) {
            start_next_upload(c);
        } else {
            start_call(c);
        }
    }
    pthread_mutex_unlock(&c->mu);
    gen_unref(c); /* the upload's reference */
}

static void start_next_upload(struct core_call *c)
{
    struct staged_upload *s = &c->uploads[c->next_upload++];
    struct mm_err e;
    atomic_fetch_add(&c->refs, 1);
    int32_t rc = gw_upstream_upload(c->ch, s->upload_id, s->data, s->len, c->opts.upload_chunk_bytes,
                                    c->opts.timeout_ms, NULL, on_upload_done, c, &c->cur_upload, &e);
    if (rc != MM_OK) {
        atomic_fetch_sub(&c->refs, 1);
        gw_up_status_local(&c->final, c->ch, gen_method, rc, e.msg);
        c->local_failed = 1;
        maybe_done(c);
    }
}

/* ---- planning: how each tensor travels ---- */

struct plan {
    Mmgw__Worker__V1__GenerateRequest req;    /* shallow copy of the caller's */
    Mmgw__Worker__V1__MultimodalItem **items; /* copies where changed */
    Mmgw__Worker__V1__MultimodalItem *item_store;
    Mmgw__Worker__V1__Tensor *tensor_store;
    Mmgw__Worker__V1__SharedMemoryRef *shm_store;
};

static void plan_free(struct plan *p)
{
    free(p->items);
    free(p->item_store);
    free(p->tensor_store);
    free(p->shm_store);
}

/* Item i's tensor t (the caller's, or a converted copy already in the stores) without its inline bytes,
 * ready to name an out-of-band source. */
static Mmgw__Worker__V1__Tensor *out_of_band(struct plan *p, size_t i,
                                             const Mmgw__Worker__V1__MultimodalItem *it,
                                             const Mmgw__Worker__V1__Tensor *t)
{
    if (p->items[i] != &p->item_store[i]) {
        p->item_store[i] = *it;
        p->tensor_store[i] = *t;
        p->item_store[i].pixel_values = &p->tensor_store[i];
        p->items[i] = &p->item_store[i];
    }
    p->tensor_store[i].data.data = NULL;
    p->tensor_store[i].data.len = 0;
    return &p->tensor_store[i];
}

static int32_t make_plan(struct core_call *c, const Mmgw__Worker__V1__GenerateRequest *req, struct plan *p,
                         struct mm_err *err)
{
    memset(p, 0, sizeof(*p));
    p->req = *req;
    size_t n = req->n_mm_inputs;
    if (n == 0) return MM_OK;
    p->items = calloc(n, sizeof(*p->items));
    p->item_store = calloc(n, sizeof(*p->item_store));
    p->tensor_store = calloc(n, sizeof(*p->tensor_store));
    p->shm_store = calloc(n, sizeof(*p->shm_store));
    c->uploads = calloc(n, sizeof(*c->uploads));
    c->shm = calloc(n, sizeof(*c->shm));
    c->converted = calloc(n, sizeof(*c->converted));
    c->n_items = n;
    if (!p->items || !p->item_store || !p->tensor_store || !p->shm_store || !c->uploads || !c->shm ||
        !c->converted)
        return mm_err_set(err, MM_NOMEM, "generate: out of memory");
    p->req.mm_inputs = p->items;

    struct gw_worker_info info;
    gw_upstream_chan_info(c->ch, &info);
    uint64_t inline_max = c->opts.inline_max_bytes ? c->opts.inline_max_bytes : DEFAULT_INLINE_MAX;
    const uint64_t shm_min = c->opts.shm_min_bytes ? c->opts.shm_min_bytes : DEFAULT_SHM_MIN;
    /* the whole request must also fit the worker's message limit (4 MiB, gRPC's default, if unknown) */
    uint64_t budget = info.max_message_bytes ? info.max_message_bytes : (4u << 20);
    budget = budget > MESSAGE_SLACK ? budget - MESSAGE_SLACK : 0;
    int shm_ok = !c->opts.no_shm && info.supports_shm && gw_upstream_chan_shm_usable(c->ch);
    uint64_t inline_total = 0;

    for (size_t i = 0; i < n; i++) {
        const Mmgw__Worker__V1__MultimodalItem *it = req->mm_inputs[i];
        p->items[i] = (Mmgw__Worker__V1__MultimodalItem *)it;
        const Mmgw__Worker__V1__Tensor *t = it ? it->pixel_values : NULL;
        if (!t || t->data.len == 0) continue; /* already out of band, or empty: sent as is */
        if (!c->opts.keep_f32 && t->dtype == MMGW__WORKER__V1__DTYPE__F32 && t->data.len % 4 == 0) {
            /* the model consumes BF16: half the bytes on the wire */
            size_t count = t->data.len / 4;
            uint16_t *bf = malloc(count ? count * 2 : 1);
            if (!bf) return mm_err_set(err, MM_NOMEM, "generate: out of memory converting a tensor to BF16");
            const uint8_t *src = t->data.data;
            for (size_t k = 0; k < count; k++) {
                float f;
                memcpy(&f, src + 4 * k, 4);
                bf[k] = mm_f32_to_bf16(f);
            }
            c->converted[i] = bf;
            p->item_store[i] = *it;
            p->tensor_store[i] = *t;
            p->tensor_store[i].dtype = MMGW__WORKER__V1__DTYPE__BF16;
            p->tensor_store[i].data.data = (uint8_t *)bf;
            p->tensor_store[i].data.len = count * 2;
            p->item_store[i].pixel_values = &p->tensor_store[i];
            p->items[i] = &p->item_store[i];
            t = &p->tensor_store[i];
            c->transport.converted_items++;
        }
        const uint64_t len = t->data.len;
        const uint8_t *bytes = t->data.data;
        const int fits = len <= inline_max && inline_total + len <= budget;
        /* To a worker on this host, a tensor of shm_min bytes or more goes through shared memory even where
         * it would fit inline: one copy, instead of protobuf packing, the socket's copies on both sides and
         * the worker's reassembly and unpacking (bench/api: the worker's CPU per 640x480 image 3.3 ms
         * inline, 0.45 ms by shared memory). */
        if (shm_ok && (!fits || len >= shm_min)) {
            struct mm_err e;
            if (gw_shm_tensor_create(bytes, len, &c->shm[c->n_shm], &e) == MM_OK) {
                Mmgw__Worker__V1__Tensor *ts = out_of_band(p, i, it, t);
                Mmgw__Worker__V1__SharedMemoryRef *ref = &p->shm_store[i];
                mmgw__worker__v1__shared_memory_ref__init(ref);
                ref->name = (char *)gw_shm_tensor_name(c->shm[c->n_shm]);
                ref->offset = GW_SHM_DATA_OFFSET;
                ref->length = len;
                ref->key.data = (uint8_t *)gw_shm_tensor_key(c->shm[c->n_shm]);
                ref->key.len = GW_SHM_KEY_BYTES;
                ts->shm = ref;
                c->n_shm++;
                c->transport.shm_items++;
                continue;
            }
            /* once per process as a warning (no /dev/shm, or a full one, would otherwise log every image) */
            if (!atomic_exchange(&shm_warned, 1))
                mm_log_warn("upstream",
                            "shared memory unavailable (%s); %s instead (further cases at debug level)",
                            e.msg, fits ? "sending the tensor inline" : "uploading");
            else
                mm_log_debug("upstream", "shared memory unavailable (%s)", e.msg);
        }
        if (fits) {
            inline_total += len;
            c->transport.inline_items++;
            continue;
        }
        Mmgw__Worker__V1__Tensor *ts = out_of_band(p, i, it, t);
        struct staged_upload *s = &c->uploads[c->n_uploads++];
        snprintf(s->upload_id, sizeof(s->upload_id), "%.80s-%zu-%llu", c->request_id, i,
                 (unsigned long long)atomic_fetch_add(&upload_counter, 1));
        s->data = bytes;
        s->len = len;
        ts->upload_id = s->upload_id;
        c->transport.upload_items++;
    }
    return MM_OK;
}

/* ---- public API ---- */

int32_t gw_upstream_generate(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__GenerateRequest *req,
                             const struct gw_gen_opts *opts, const struct gw_executor *ex,
                             const struct gw_gen_callbacks *cb, void *arg, struct gw_gen_call **out,
                             struct mm_err *err)
{
    if (out) *out = NULL;
    if (!ch || !req || !ex || !cb || !cb->on_response || !cb->on_done)
        return mm_err_set(err, MM_INVALID, "generate: missing channel, request, executor or callbacks");
    struct core_call *c = calloc(1, sizeof(*c));
    if (!c) return mm_err_set(err, MM_NOMEM, "generate: out of memory");
    c->base.kind = GW_GEN_CORE;
    c->tag_start.fn = on_start;
    c->tag_status.fn = on_status;
    c->tag_recv.fn = on_recv;
    c->ch = ch;
    gw_up_chan_ref(ch);
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->refs, 1);
    c->owner_held = 1;
    if (opts) c->opts = *opts;
    c->ex = *ex;
    c->cb = *cb;
    c->arg = arg;
    snprintf(c->request_id, sizeof(c->request_id), "%s", req->request_id ? req->request_id : "");
    c->details = grpc_empty_slice();
    grpc_metadata_array_init(&c->initial_md);
    grpc_metadata_array_init(&c->trailing_md);

    struct plan p;
    int32_t rc = make_plan(c, req, &p, err);
    if (rc == MM_OK) {
        c->send = gw_up_pack(&p.req.base);
        if (!c->send) rc = mm_err_set(err, MM_NOMEM, "generate: out of memory packing the request");
    }
    plan_free(&p);
    if (rc != MM_OK) {
        gen_unref(c);
        return rc;
    }
    pthread_mutex_lock(&c->mu);
    if (c->n_uploads > 0)
        start_next_upload(c);
    else
        start_call(c);
    pthread_mutex_unlock(&c->mu);
    /* a failure to start is reported through on_done, like any other */
    if (out) *out = &c->base;
    return MM_OK;
}

void gw_gen_pause(struct gw_gen_call *g)
{
    if (g->kind == GW_GEN_LOOP) {
        gw_up_loop_gen_pause(g);
        return;
    }
    struct core_call *c = (struct core_call *)g;
    pthread_mutex_lock(&c->mu);
    c->paused = 1;
    pthread_mutex_unlock(&c->mu);
}

void gw_gen_resume(struct gw_gen_call *g)
{
    if (g->kind == GW_GEN_LOOP) {
        gw_up_loop_gen_resume(g);
        return;
    }
    struct core_call *c = (struct core_call *)g;
    pthread_mutex_lock(&c->mu);
    c->paused = 0;
    arm_recv(c);
    maybe_done(c);
    pthread_mutex_unlock(&c->mu);
}

void gw_gen_cancel(struct gw_gen_call *g)
{
    if (!g) return;
    if (g->kind == GW_GEN_LOOP) {
        gw_up_loop_gen_cancel(g);
        return;
    }
    struct core_call *c = (struct core_call *)g;
    pthread_mutex_lock(&c->mu);
    int owner = c->owner_held;
    c->owner_held = 0;
    c->cancelled = 1;
    int started = c->started;
    if (c->call) grpc_call_cancel(c->call, NULL);
    if (c->cur_upload) {
        /* when its callback can no longer run, drop the reference the upload held on us here */
        if (gw_upload_cancel(c->cur_upload)) atomic_fetch_sub(&c->refs, 1);
        c->cur_upload = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (started && c->request_id[0]) gw_up_send_abort(c->ch, c->request_id);
    if (owner) gen_unref(c);
}

void gw_up_send_abort(struct gw_upstream_chan *ch, const char *request_id)
{
    struct mm_err e;
    if (gw_upstream_abort(ch, request_id, ABORT_TIMEOUT_MS, NULL, NULL, NULL, &e) != MM_OK)
        mm_log_warn("upstream", "abort %s on %s: %s", request_id, ch->target, e.msg);
}

void gw_gen_transport(const struct gw_gen_call *g, struct gw_gen_transport *out)
{
    if (g->kind == GW_GEN_LOOP) {
        memset(out, 0, sizeof *out); /* only requests without out-of-band tensors go this way */
        return;
    }
    *out = ((const struct core_call *)g)->transport;
}
