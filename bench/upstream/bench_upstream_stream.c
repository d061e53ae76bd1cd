/* What our Generate client costs per streamed message.
 *
 * An in-process gRPC C-core server (127.0.0.1, its own thread) streams M one-token GenerateResponses on
 * each of S concurrent Generate calls. Two clients read them, same process, same server:
 *   baseline: bare gRPC C core, decode with protobuf-c and re-arm RECV_MESSAGE right on the
 *             completion-queue thread (the fastest a client can read);
 *   mmgw:     gw_upstream_generate with its flow control: one message read ahead, each delivered to a
 *             libevent loop through an executor and re-armed from there.
 * Prints messages/s for both and the ratio. Usage: bench_upstream_stream [streams] [messages] [rounds] */
#include <event2/event.h>
#include <event2/thread.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_event_exec.h"
#include "gw_upstream.h"
#include "gw_upstream_generate.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------- the server ---------------- */

static int n_messages;
static grpc_slice chunk_slice, complete_slice;

struct srv_call {
    int stage; /* 0 requested, 1 started, 2 streaming, 3 status sent */
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *req, *send;
    int sent;
    int cancelled;
    int close_done, status_done;
};

static grpc_server *server;
static grpc_completion_queue *scq;

struct srv_tag {
    struct srv_call *c;
    int kind; /* 0 = call arrived/step, 1 = close */
};

static void request_call(void);

static void *server_thread(void *arg)
{
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(scq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        struct srv_tag *tag = ev.tag;
        struct srv_call *c = tag->c;
        if (tag->kind == 1) {
            c->close_done = 1;
            free(tag);
        } else {
            grpc_op ops[3];
            memset(ops, 0, sizeof(ops));
            size_t n = 0;
            if (c->stage == 0) {
                request_call();
                if (!ev.success) {
                    free(tag);
                    free(c);
                    continue;
                }
                struct srv_tag *ct = malloc(sizeof(*ct));
                ct->c = c;
                ct->kind = 1;
                grpc_op cl;
                memset(&cl, 0, sizeof(cl));
                cl.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
                cl.data.recv_close_on_server.cancelled = &c->cancelled;
                grpc_call_start_batch(c->call, &cl, 1, ct, NULL);
                ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
                ops[n].op = GRPC_OP_RECV_MESSAGE;
                ops[n++].data.recv_message.recv_message = &c->req;
                c->stage = 1;
            } else if (c->stage == 1 || c->stage == 2) {
                if (c->req) grpc_byte_buffer_destroy(c->req);
                c->req = NULL;
                if (c->send) grpc_byte_buffer_destroy(c->send);
                c->send = NULL;
                c->stage = 2;
                if (!ev.success) {
                    c->stage = 3;
                    c->status_done = 1; /* nothing more will be sent */
                } else if (c->sent < n_messages) {
                    c->send = grpc_raw_byte_buffer_create(&chunk_slice, 1);
                    ops[n].op = GRPC_OP_SEND_MESSAGE;
                    ops[n++].data.send_message.send_message = c->send;
                    c->sent++;
                } else {
                    c->send = grpc_raw_byte_buffer_create(&complete_slice, 1);
                    ops[n].op = GRPC_OP_SEND_MESSAGE;
                    ops[n++].data.send_message.send_message = c->send;
                    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
                    ops[n].data.send_status_from_server.status = GRPC_STATUS_OK;
                    n++;
                    c->stage = 3;
                }
            } else {
                if (c->send) grpc_byte_buffer_destroy(c->send);
                c->send = NULL;
                c->status_done = 1;
            }
            if (n) {
                grpc_call_start_batch(c->call, ops, n, tag, NULL);
                continue;
            }
            free(tag);
        }
        if (c->close_done && c->status_done) {
            if (c->send) grpc_byte_buffer_destroy(c->send);
            grpc_call_unref(c->call);
            grpc_call_details_destroy(&c->details);
            grpc_metadata_array_destroy(&c->md);
            free(c);
        }
    }
    return NULL;
}

static void request_call(void)
{
    struct srv_call *c = calloc(1, sizeof(*c));
    struct srv_tag *tag = malloc(sizeof(*tag));
    tag->c = c;
    tag->kind = 0;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    grpc_server_request_call(server, &c->call, &c->details, &c->md, scq, scq, tag);
}

static grpc_slice packed(const Mmgw__Worker__V1__GenerateResponse *r)
{
    size_t n = mmgw__worker__v1__generate_response__get_packed_size(r);
    grpc_slice s = grpc_slice_malloc(n);
    mmgw__worker__v1__generate_response__pack(r, GRPC_SLICE_START_PTR(s));
    return s;
}

static int start_server(void)
{
    uint32_t tok = 4242;
    Mmgw__Worker__V1__GenerateChunk ch = MMGW__WORKER__V1__GENERATE_CHUNK__INIT;
    ch.token_ids = &tok;
    ch.n_token_ids = 1;
    Mmgw__Worker__V1__GenerateResponse r = MMGW__WORKER__V1__GENERATE_RESPONSE__INIT;
    r.request_id = "bench";
    r.response_case = MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK;
    r.chunk = &ch;
    chunk_slice = packed(&r);
    Mmgw__Worker__V1__GenerateComplete done = MMGW__WORKER__V1__GENERATE_COMPLETE__INIT;
    done.finish_reason = "length";
    r.response_case = MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE;
    r.complete = &done;
    complete_slice = packed(&r);

    server = grpc_server_create(NULL, NULL);
    scq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(server, scq, NULL);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    int port = grpc_server_add_http2_port(server, "127.0.0.1:0", creds);
    grpc_server_credentials_release(creds);
    grpc_server_start(server);
    for (int i = 0; i < 64; i++) request_call();
    pthread_t t;
    pthread_create(&t, NULL, server_thread, NULL);
    pthread_detach(t);
    return port;
}

/* ---------------- baseline client ---------------- */

struct raw_stream {
    grpc_call *call;
    grpc_byte_buffer *recv;
    grpc_metadata_array imd, tmd;
    grpc_status_code status;
    grpc_slice details;
    int ended;
};

static atomic_long raw_msgs;
static atomic_int raw_open;

static void run_baseline(const char *target, int streams, long *msgs, double *secs)
{
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_arg args[2] = {{GRPC_ARG_INTEGER, GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, {.integer = -1}},
                        {GRPC_ARG_INTEGER, GRPC_ARG_HTTP2_BDP_PROBE, {.integer = 0}}};
    grpc_channel_args ca = {2, args};
    grpc_channel *ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    struct raw_stream *s = calloc((size_t)streams, sizeof(*s));
    Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    uint32_t ids[4] = {1, 2, 3, 4};
    req.request_id = "raw";
    req.input_ids = ids;
    req.n_input_ids = 4;
    size_t n = mmgw__worker__v1__generate_request__get_packed_size(&req);
    grpc_slice rs = grpc_slice_malloc(n);
    mmgw__worker__v1__generate_request__pack(&req, GRPC_SLICE_START_PTR(rs));
    atomic_store(&raw_msgs, 0);
    atomic_store(&raw_open, streams);
    double t0 = now_s();
    for (int i = 0; i < streams; i++) {
        s[i].call = grpc_channel_create_call(ch, NULL, 0, cq,
                                             grpc_slice_from_static_string("/mmgw.worker.v1.Worker/Generate"),
                                             NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        grpc_metadata_array_init(&s[i].imd);
        grpc_metadata_array_init(&s[i].tmd);
        grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&rs, 1);
        grpc_op ops[5];
        memset(ops, 0, sizeof(ops));
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = bb;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &s[i].imd;
        grpc_call_start_batch(s[i].call, ops, 4, (void *)(uintptr_t)(3 * i + 0), NULL);
        grpc_op st;
        memset(&st, 0, sizeof(st));
        st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        st.data.recv_status_on_client.trailing_metadata = &s[i].tmd;
        st.data.recv_status_on_client.status = &s[i].status;
        st.data.recv_status_on_client.status_details = &s[i].details;
        grpc_call_start_batch(s[i].call, &st, 1, (void *)(uintptr_t)(3 * i + 1), NULL);
        grpc_op rm;
        memset(&rm, 0, sizeof(rm));
        rm.op = GRPC_OP_RECV_MESSAGE;
        rm.data.recv_message.recv_message = &s[i].recv;
        grpc_call_start_batch(s[i].call, &rm, 1, (void *)(uintptr_t)(3 * i + 2), NULL);
        grpc_byte_buffer_destroy(bb);
    }
    int pending = 3 * streams;
    while (pending > 0) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        uintptr_t tag = (uintptr_t)ev.tag;
        struct raw_stream *x = &s[tag / 3];
        pending--;
        if (tag % 3 != 2) continue;
        if (!x->recv) continue;
        grpc_byte_buffer_reader rd;
        grpc_byte_buffer_reader_init(&rd, x->recv);
        grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
        grpc_byte_buffer_reader_destroy(&rd);
        Mmgw__Worker__V1__GenerateResponse *m = mmgw__worker__v1__generate_response__unpack(
            NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
        if (m) mmgw__worker__v1__generate_response__free_unpacked(m, NULL);
        grpc_slice_unref(all);
        grpc_byte_buffer_destroy(x->recv);
        x->recv = NULL;
        atomic_fetch_add(&raw_msgs, 1);
        grpc_op rm;
        memset(&rm, 0, sizeof(rm));
        rm.op = GRPC_OP_RECV_MESSAGE;
        rm.data.recv_message.recv_message = &x->recv;
        grpc_call_start_batch(x->call, &rm, 1, ev.tag, NULL);
        pending++;
    }
    *secs = now_s() - t0;
    *msgs = atomic_load(&raw_msgs);
    for (int i = 0; i < streams; i++) {
        grpc_call_unref(s[i].call);
        grpc_metadata_array_destroy(&s[i].imd);
        grpc_metadata_array_destroy(&s[i].tmd);
        grpc_slice_unref(s[i].details);
    }
    free(s);
    grpc_slice_unref(rs);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

/* ---------------- our client on a libevent loop ---------------- */

static long mm_msgs;
static int mm_open;
static struct event_base *the_base;
static struct gw_event_exec the_exec; /* the product's loop executor */

static void on_resp(void *arg, const Mmgw__Worker__V1__GenerateResponse *r)
{
    mm_msgs++;
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses)
{
    if (st->code != MM_OK) fprintf(stderr, "stream failed: %s\n", st->message);
    if (--mm_open == 0) event_base_loopbreak(the_base);
}

static void run_mmgw(struct gw_upstream_chan *ch, int streams, long *msgs, double *secs)
{
    static const struct gw_gen_callbacks cbs = {on_resp, on_done};
    uint32_t ids[4] = {1, 2, 3, 4};
    Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
    req.request_id = "mmgw";
    req.input_ids = ids;
    req.n_input_ids = 4;
    mm_msgs = 0;
    mm_open = streams;
    double t0 = now_s();
    for (int i = 0; i < streams; i++) {
        struct mm_err e;
        if (gw_upstream_generate(ch, &req, NULL, &the_exec.exec, &cbs, NULL, NULL, &e) != MM_OK) {
            fprintf(stderr, "%s\n", e.msg);
            exit(1);
        }
    }
    event_base_loop(the_base, EVLOOP_NO_EXIT_ON_EMPTY); /* the wake event is only ever activated */
    *secs = now_s() - t0;
    *msgs = mm_msgs;
}

int main(int argc, char **argv)
{
    int streams = argc > 1 ? atoi(argv[1]) : 16;
    n_messages = argc > 2 ? atoi(argv[2]) : 20000;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    evthread_use_pthreads();
    grpc_init();
    int port = start_server();
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", port);

    the_base = event_base_new();
    if (!the_base || gw_event_exec_init(&the_exec, the_base) != 0) {
        fprintf(stderr, "cannot create the event loop\n");
        return 1;
    }
    struct gw_upstream *up;
    struct gw_upstream_chan *ch;
    struct mm_err e;
    if (gw_upstream_create(NULL, &up, &e) != MM_OK || gw_upstream_chan_open(up, target, &ch, &e) != MM_OK) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("streams %d x %d one-token messages, best of %d rounds\n", streams, n_messages, rounds);
    double best_raw = 0, best_mm = 0;
    for (int r = 0; r < rounds; r++) {
        long m;
        double s;
        run_baseline(target, streams, &m, &s);
        if (m / s > best_raw) best_raw = m / s;
        run_mmgw(ch, streams, &m, &s);
        if (m != (long)streams * (n_messages + 1)) fprintf(stderr, "mmgw: %ld messages, expected more\n", m);
        if (m / s > best_mm) best_mm = m / s;
    }
    printf("baseline (bare gRPC core, re-arm on the CQ thread): %10.0f msg/s\n", best_raw);
    printf("mmgw gw_upstream_generate (1 read-ahead, loop hop): %10.0f msg/s (%.2fx baseline)\n", best_mm,
           best_mm / best_raw);
    gw_upstream_chan_close(ch);
    gw_upstream_destroy(up);
    return 0;
}
