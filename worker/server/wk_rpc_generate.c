/* The Generate server stream.
 *
 * Two threads touch a stream: the completion-queue thread (call start, send completions, the client
 * closing) and the scheduler thread (chunks, completes, the end). At most one SEND_MESSAGE may be in
 * flight on a call, so messages wait in an outbox (wk_outbox.h: a choice's tokens coalesce there while a
 * send is in flight) and the send completion starts the next one; the status goes last, in the same batch
 * as the last message when it is known by then. The struct lives
 * until every pending batch has completed and the scheduler has ended the request (a reference count). A
 * client that goes away (RECV_CLOSE_ON_SERVER says cancelled) cancels the request in the scheduler, which
 * frees its pages before its next step. */
#include <grpc/grpc.h>
#include <grpc/slice.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_log.h"
#include "worker.pb-c.h"
#include "wk_grpc_impl.h"
#include "wk_grpc_status.h"
#include "wk_outbox.h"
#include "wk_sched.h"
#include "wk_shm.h"

#define LOG "generate"

struct gen_call {
    struct wk_grpc *g;
    grpc_call *call;
    pthread_mutex_t mu;
    int32_t refs; /* under mu */
    char *request_id;
    /* outbox, under mu */
    struct wk_outbox out;
    int32_t send_busy, md_sent, dead;
    int32_t have_final, status_started;
    grpc_status_code final_code;
    grpc_slice final_details;
    /* the request in the scheduler */
    uint64_t ticket;
    int32_t in_sched, ended; /* under mu */
    /* batch outputs */
    grpc_byte_buffer *sending;
    int cancelled;
    struct wk_tag tag_send, tag_close, tag_status;
};

static void gen_unref(struct gen_call *c)
{
    pthread_mutex_lock(&c->mu);
    int32_t left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0) return;
    wk_outbox_clear(&c->out);
    if (c->have_final) grpc_slice_unref(c->final_details);
    grpc_call_unref(c->call);
    pthread_mutex_destroy(&c->mu);
    free(c->request_id);
    free(c);
}

/* Caller holds mu. Start the next send (a message, else the final status) if none is in flight. The
 * initial metadata rides on the first batch. */
static void pump_locked(struct gen_call *c)
{
    if (c->send_busy || c->status_started) return;
    uint8_t *buf = NULL;
    size_t len = 0;
    int32_t msg = !c->dead && wk_outbox_pop_packed(&c->out, c->request_id, &buf, &len) > 0;
    if (!msg && !c->have_final) return;
    grpc_op ops[3];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = 1;
    }
    if (msg) {
        /* the byte buffer takes the packed bytes as they are (no copy) */
        grpc_slice sl = grpc_slice_new(buf, len, free);
        c->sending = grpc_raw_byte_buffer_create(&sl, 1);
        grpc_slice_unref(sl);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->sending;
        n++;
        if (c->have_final && !c->out.head) {
            /* the last message: the status rides on the same batch (one write, one completion less) */
            ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
            ops[n].data.send_status_from_server.status = c->final_code;
            ops[n].data.send_status_from_server.status_details = &c->final_details;
            n++;
            c->status_started = 1;
        }
        c->send_busy = 1;
        c->refs++;
        if (grpc_call_start_batch(c->call, ops, n, &c->tag_send, NULL) != GRPC_CALL_OK) {
            mm_log_error(LOG, "'%s': send batch refused", c->request_id);
            grpc_byte_buffer_destroy(c->sending);
            c->sending = NULL;
            c->send_busy = 0;
            c->status_started = 0;
            c->refs--;
            c->dead = 1;
        }
        return;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = c->final_code;
    ops[n].data.send_status_from_server.status_details = &c->final_details;
    n++;
    c->status_started = 1;
    c->refs++;
    if (grpc_call_start_batch(c->call, ops, n, &c->tag_status, NULL) != GRPC_CALL_OK) {
        mm_log_error(LOG, "'%s': status batch refused", c->request_id);
        c->refs--;
    }
}

static void finish(struct gen_call *c, grpc_status_code code, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    if (!c->have_final) {
        c->have_final = 1;
        c->final_code = code;
        c->final_details = grpc_slice_from_copied_string(msg ? msg : "");
    }
    pump_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void on_send(void *obj, int32_t ok)
{
    struct gen_call *c = obj;
    pthread_mutex_lock(&c->mu);
    grpc_byte_buffer_destroy(c->sending);
    c->sending = NULL;
    c->send_busy = 0;
    if (!ok) c->dead = 1; /* the client is gone; RECV_CLOSE_ON_SERVER tells the scheduler */
    pump_locked(c);
    pthread_mutex_unlock(&c->mu);
    gen_unref(c);
}

static void on_status(void *obj, int32_t ok)
{
    gen_unref(obj);
}

static void on_close(void *obj, int32_t ok)
{
    struct gen_call *c = obj;
    pthread_mutex_lock(&c->mu);
    int32_t cancel = c->cancelled && c->in_sched && !c->ended;
    if (c->cancelled) c->dead = 1;
    uint64_t ticket = c->ticket;
    pthread_mutex_unlock(&c->mu);
    if (cancel) {
        mm_log_debug(LOG, "'%s': client went away, aborting", c->request_id);
        wk_sched_cancel(c->g->svc.sched, ticket);
    }
    gen_unref(c);
}

/* ---- the scheduler's sink (scheduler thread) ---- */

/* Chunks and completes wait in the outbox until the scheduler's step is over (sink_flush) or the request
 * ends (sink_end): a choice's last chunk and its Complete then leave as one message when the client merges,
 * with the status in the same batch when the request ended in that step. */
static void sink_chunk(void *ctx, const struct wk_chunk_ev *ev)
{
    struct gen_call *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (!c->dead && wk_outbox_add_chunk(&c->out, ev) != 0)
        mm_log_error(LOG, "'%s': out of memory, tokens lost", c->request_id);
    pthread_mutex_unlock(&c->mu);
}

static void sink_complete(void *ctx, const struct wk_complete_ev *ev)
{
    struct gen_call *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (!c->dead && wk_outbox_add_complete(&c->out, ev) != 0)
        mm_log_error(LOG, "'%s': out of memory", c->request_id);
    pthread_mutex_unlock(&c->mu);
}

static void sink_flush(void *ctx)
{
    struct gen_call *c = ctx;
    pthread_mutex_lock(&c->mu);
    pump_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void sink_end(void *ctx, int32_t status, const char *msg)
{
    struct gen_call *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->ended = 1;
    pthread_mutex_unlock(&c->mu);
    if (status != MM_OK) mm_log_debug(LOG, "'%s' ended: %s: %s", c->request_id, mm_status_name(status), msg);
    finish(c, wk_grpc_status_from_mm(status), status == MM_OK ? "" : msg);
    gen_unref(c); /* the scheduler's reference */
}

void wk_rpc_generate(struct wk_grpc *g, grpc_call *call, grpc_byte_buffer *payload)
{
    struct gen_call *c = calloc(1, sizeof(*c));
    if (!c) {
        if (payload) grpc_byte_buffer_destroy(payload);
        wk_unary_reply(call, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    c->g = g;
    c->call = call;
    pthread_mutex_init(&c->mu, NULL);
    c->refs = 1; /* ours until the end of this function */
    c->tag_send = (struct wk_tag){on_send, c};
    c->tag_close = (struct wk_tag){on_close, c};
    c->tag_status = (struct wk_tag){on_status, c};

    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    c->refs++;
    if (grpc_call_start_batch(call, &op, 1, &c->tag_close, NULL) != GRPC_CALL_OK) c->refs--;

    struct mm_err err = {0};
    int32_t rc = MM_OK;
    Mmgw__Worker__V1__GenerateRequest *msg = NULL;
    if (!payload) {
        rc = mm_err_set(&err, MM_INVALID, "Generate needs a request message");
    } else {
        grpc_slice s = wk_flatten(payload);
        grpc_byte_buffer_destroy(payload);
        msg = mmgw__worker__v1__generate_request__unpack(NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
        grpc_slice_unref(s);
        if (!msg) rc = mm_err_set(&err, MM_INVALID, "GenerateRequest does not parse");
    }
    struct wk_request *r = NULL;
    if (rc == MM_OK) {
        char fallback[48];
        snprintf(fallback, sizeof(fallback), "wk-%llu",
                 (unsigned long long)__atomic_add_fetch(&g->id_counter, 1, __ATOMIC_RELAXED));
        c->out.merge_complete = msg->merge_complete; /* before decode takes msg */
        struct wk_decode_limits lim = g->svc.limits;
        lim.allow_shm = lim.allow_shm && wk_shm_call_local(call);
        rc = wk_request_decode(msg, &lim, fallback, &r, &err); /* takes msg */
    }
    if (rc == MM_OK) {
        c->request_id = strdup(r->id);
        if (!c->request_id) rc = mm_err_set(&err, MM_NOMEM, "out of memory");
    }
    if (rc == MM_OK) {
        struct wk_sched_sink sink = {
            .ctx = c, .chunk = sink_chunk, .complete = sink_complete, .end = sink_end, .flush = sink_flush};
        /* under mu, so that on_close (another completion-queue thread) sees in_sched and the ticket together;
         * the scheduler never holds its lock while it calls a sink, so this order cannot deadlock */
        pthread_mutex_lock(&c->mu);
        c->refs++; /* the scheduler's, dropped in sink_end */
        uint64_t ticket = 0;
        rc = wk_sched_submit(g->svc.sched, r, &sink, &ticket, &err);
        int32_t gone = 0;
        if (rc == MM_OK) {
            c->ticket = ticket;
            c->in_sched = 1;
            gone = c->cancelled; /* the client left while we decoded, before on_close could see the ticket */
        } else {
            c->refs--;
        }
        pthread_mutex_unlock(&c->mu);
        if (gone) wk_sched_cancel(g->svc.sched, ticket);
        if (rc != MM_OK) wk_request_free(r);
    }
    if (rc != MM_OK) {
        mm_log_info(LOG, "refused '%s': %s: %s", c->request_id ? c->request_id : "?", mm_status_name(rc),
                    err.msg);
        finish(c, wk_grpc_status_from_mm(rc), err.msg);
    }
    gen_unref(c);
}
