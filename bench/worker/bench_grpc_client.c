/* bench-worker-client --port P --streams C [--prompt N] [--gen G] [--vocab V] [--seed S] [--stamps FILE]
 *
 * A load generator in C (gRPC C core, like the gateway's client) for bench_worker.py: C concurrent Generate
 * streams (greedy, ignore_eos, fresh random prompts of N tokens, G new tokens each) against a worker on
 * 127.0.0.1:P, all started at once from one completion-queue thread. A Python client saturates before the
 * worker does at high stream counts; this one does not, so the numbers are the worker's.
 * Prints: `C total_tok_s decode_tok_s ttft_p50_ms ttft_p90_ms ttft_max_ms` (decode = tokens after each
 * stream's first, over the time from the first first-token to the last stream's end). --stamps writes one
 * line per received chunk, `stream CLOCK_MONOTONIC-seconds tokens`, for inter-token gaps (bench_media.py). */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker.pb-c.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

struct stream {
    grpc_call *call;
    grpc_metadata_array md_in, trailing;
    grpc_byte_buffer *send, *recv;
    grpc_status_code status;
    grpc_slice details;
    int64_t tokens;
    double first, end;
    int done;
    int tag_kind[3]; /* addresses used as tags: 0 start, 1 message, 2 status */
};

/* chunk arrival times for --stamps */
struct stamp {
    int stream;
    double t;
    int64_t tokens;
};
static struct stamp *g_stamps;
static size_t g_n_stamps, g_cap_stamps;

static void add_stamp(int stream, double t, int64_t tokens)
{
    if (g_n_stamps == g_cap_stamps) {
        size_t cap = g_cap_stamps ? 2 * g_cap_stamps : 4096;
        struct stamp *p = realloc(g_stamps, cap * sizeof *p);
        if (!p) return; /* a benchmark tool: fewer stamps, not a crash */
        g_stamps = p;
        g_cap_stamps = cap;
    }
    g_stamps[g_n_stamps++] = (struct stamp){stream, t, tokens};
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void recv_next(struct stream *s)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->recv;
    grpc_call_start_batch(s->call, &op, 1, &s->tag_kind[1], NULL);
}

int main(int argc, char **argv)
{
    int port = 0, C = 1, P = 64, G = 64, V = 8000;
    unsigned seed = 1;
    const char *stamps = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--port"))
            port = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--streams"))
            C = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt"))
            P = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--gen"))
            G = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--vocab"))
            V = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed"))
            seed = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--stamps"))
            stamps = argv[i + 1];
    }
    if (port <= 0 || C < 1 || P < 1 || G < 2 || V < 40) {
        fprintf(stderr, "usage: bench-worker-client --port P --streams C [--prompt N] [--gen G>=2] [--vocab "
                        "V] [--seed S] [--stamps FILE]\n");
        return 2;
    }
    grpc_init();
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_arg arg = {
        .type = GRPC_ARG_INTEGER, .key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, .value.integer = -1};
    grpc_channel_args ca = {.num_args = 1, .args = &arg};
    grpc_channel *ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    struct stream *st = calloc((size_t)C, sizeof *st);
    uint32_t *ids = malloc((size_t)P * sizeof(uint32_t));
    grpc_slice method = grpc_slice_from_static_string("/mmgw.worker.v1.Worker/Generate");
    gpr_timespec deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_seconds(600, GPR_TIMESPAN));
    srand(seed);
    double t0 = now();
    for (int i = 0; i < C; i++) {
        struct stream *s = &st[i];
        for (int k = 0; k < P; k++) ids[k] = 10 + (uint32_t)(rand() % (V - 20));
        char rid[48];
        snprintf(rid, sizeof rid, "bc-%u-%d", seed, i);
        Mmgw__Worker__V1__SamplingParams sp = MMGW__WORKER__V1__SAMPLING_PARAMS__INIT;
        sp.has_max_new_tokens_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_MAX_NEW_TOKENS_MAX_NEW_TOKENS;
        sp.max_new_tokens = (uint32_t)G;
        sp.has_temperature_case = MMGW__WORKER__V1__SAMPLING_PARAMS__HAS_TEMPERATURE_TEMPERATURE;
        sp.temperature = 0.0f;
        sp.ignore_eos = 1;
        Mmgw__Worker__V1__GenerateRequest req = MMGW__WORKER__V1__GENERATE_REQUEST__INIT;
        req.request_id = rid;
        req.n_input_ids = (size_t)P;
        req.input_ids = ids;
        req.sampling = &sp;
        size_t n = protobuf_c_message_get_packed_size(&req.base);
        grpc_slice sl = grpc_slice_malloc(n);
        protobuf_c_message_pack(&req.base, GRPC_SLICE_START_PTR(sl));
        s->send = grpc_raw_byte_buffer_create(&sl, 1);
        grpc_slice_unref(sl);
        s->call =
            grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method, NULL, deadline, NULL);
        grpc_metadata_array_init(&s->md_in);
        grpc_metadata_array_init(&s->trailing);
        grpc_op ops[4];
        memset(ops, 0, sizeof ops);
        ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
        ops[1].op = GRPC_OP_SEND_MESSAGE;
        ops[1].data.send_message.send_message = s->send;
        ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
        ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->md_in;
        grpc_call_start_batch(s->call, ops, 4, &s->tag_kind[0], NULL);
        grpc_op so;
        memset(&so, 0, sizeof so);
        so.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        so.data.recv_status_on_client.trailing_metadata = &s->trailing;
        so.data.recv_status_on_client.status = &s->status;
        so.data.recv_status_on_client.status_details = &s->details;
        grpc_call_start_batch(s->call, &so, 1, &s->tag_kind[2], NULL);
        recv_next(s);
    }
    int left = C, failed = 0;
    while (left > 0) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) break;
        /* a tag is &st[i].tag_kind[k]: the stream and the kind follow from its address */
        int *tag = ev.tag;
        size_t i = (size_t)((char *)tag - (char *)st) / sizeof(struct stream);
        if (i >= (size_t)C) continue;
        struct stream *s = &st[i];
        int k = (int)(tag - s->tag_kind);
        if (k == 1) {
            if (s->recv) {
                grpc_byte_buffer_reader r;
                grpc_byte_buffer_reader_init(&r, s->recv);
                grpc_slice sl = grpc_byte_buffer_reader_readall(&r);
                grpc_byte_buffer_reader_destroy(&r);
                grpc_byte_buffer_destroy(s->recv);
                s->recv = NULL;
                Mmgw__Worker__V1__GenerateResponse *m = mmgw__worker__v1__generate_response__unpack(
                    NULL, GRPC_SLICE_LENGTH(sl), GRPC_SLICE_START_PTR(sl));
                grpc_slice_unref(sl);
                if (m && m->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK) {
                    double t = now();
                    if (!s->tokens) s->first = t;
                    s->tokens += (int64_t)m->chunk->n_token_ids;
                    if (stamps) add_stamp((int)i, t, (int64_t)m->chunk->n_token_ids);
                }
                if (m) mmgw__worker__v1__generate_response__free_unpacked(m, NULL);
                recv_next(s);
            }
        } else if (k == 2) {
            s->end = now();
            s->done = 1;
            if (s->status != GRPC_STATUS_OK || s->tokens != G) failed++;
            left--;
        }
    }
    double first = 1e300, last = 0, total = 0;
    double *ttft = malloc((size_t)C * sizeof(double));
    for (int i = 0; i < C; i++) {
        if (st[i].first && st[i].first < first) first = st[i].first;
        if (st[i].end > last) last = st[i].end;
        total += (double)st[i].tokens;
        ttft[i] = st[i].first ? st[i].first - t0 : 1e9;
        grpc_call_unref(st[i].call);
        grpc_byte_buffer_destroy(st[i].send);
        grpc_metadata_array_destroy(&st[i].md_in);
        grpc_metadata_array_destroy(&st[i].trailing);
        grpc_slice_unref(st[i].details);
    }
    qsort(ttft, (size_t)C, sizeof(double), cmp_d);
    printf("%d %.1f %.1f %.2f %.2f %.2f\n", C, total / (last - t0), (total - C) / (last - first),
           1e3 * ttft[C / 2], 1e3 * ttft[(int)(0.9 * (C - 1))], 1e3 * ttft[C - 1]);
    if (failed) fprintf(stderr, "bench-worker-client: %d streams failed\n", failed);
    FILE *sf = stamps ? fopen(stamps, "w") : NULL;
    for (size_t k = 0; sf && k < g_n_stamps; k++)
        fprintf(sf, "%d %.6f %lld\n", g_stamps[k].stream, g_stamps[k].t, (long long)g_stamps[k].tokens);
    if (sf) fclose(sf);
    free(g_stamps);
    free(ttft);
    free(st);
    free(ids);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return failed ? 1 : 0;
}
