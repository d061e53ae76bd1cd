/* Recorders of the gRPC client's calls for the upstream tests (see upstream_calls.h). */
#include "upstream_calls.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void unary_rec_cb(void *arg, const struct gw_call_status *st, const ProtobufCMessage *resp)
{
    struct unary_rec *o = arg;
    o->done = 1;
    o->thread = pthread_self();
    o->st = *st;
    if (!resp) return;
    if (resp->descriptor == &mmgw__worker__v1__model_info_response__descriptor) {
        const Mmgw__Worker__V1__ModelInfoResponse *r = (const void *)resp;
        snprintf(o->model_name, sizeof o->model_name, "%s", r->model_name);
        o->block_size = r->block_size;
        o->supports_shm = r->supports_shm;
        o->image_token = r->image_token_id;
        o->vocab = r->vocab_size;
    } else if (resp->descriptor == &mmgw__worker__v1__health_response__descriptor) {
        const Mmgw__Worker__V1__HealthResponse *r = (const void *)resp;
        o->healthy = r->healthy;
        snprintf(o->health_msg, sizeof o->health_msg, "%s", r->message);
    } else if (resp->descriptor == &mmgw__worker__v1__load_response__descriptor) {
        const Mmgw__Worker__V1__LoadResponse *r = (const void *)resp;
        o->running = r->running_requests;
        o->waiting = r->waiting_requests;
    } else if (resp->descriptor == &mmgw__worker__v1__abort_response__descriptor) {
        o->found = ((const Mmgw__Worker__V1__AbortResponse *)resp)->found;
    }
}

int unary_rec_done(void *arg)
{
    return ((struct unary_rec *)arg)->done;
}

long health_yielded(struct test_loop *loop, struct gw_upstream_chan *ch)
{
    struct unary_rec o;
    memset(&o, 0, sizeof o);
    struct mm_err e;
    if (gw_upstream_health(ch, 2000, test_loop_executor(loop), unary_rec_cb, &o, &e) != MM_OK) return -1;
    if (!test_loop_run(loop, unary_rec_done, &o, 3000) || o.st.code != MM_OK) return -1;
    const char *y = strstr(o.health_msg, "yielded=");
    return y ? atol(y + 8) : -1;
}

static void on_resp(void *arg, const Mmgw__Worker__V1__GenerateResponse *r)
{
    struct stream_rec *s = arg;
    s->responses++;
    s->thread = pthread_self();
    if (r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_CHUNK) {
        s->chunks++;
        for (size_t i = 0; i < r->chunk->n_token_ids && s->n_tokens < 64; i++)
            s->tokens[s->n_tokens++] = r->chunk->token_ids[i];
        if (r->chunk_complete) { /* the choice's end in the same message (merge_complete) */
            s->completes++;
            s->merged++;
            s->completion_tokens = r->chunk_complete->completion_tokens;
            snprintf(s->finish, sizeof s->finish, "%s", r->chunk_complete->finish_reason);
        }
    } else if (r->response_case == MMGW__WORKER__V1__GENERATE_RESPONSE__RESPONSE_COMPLETE) {
        s->completes++;
        s->completion_tokens = r->complete->completion_tokens;
        snprintf(s->finish, sizeof s->finish, "%s", r->complete->finish_reason);
    }
    if (s->pause_after && s->responses == s->pause_after) gw_gen_pause(s->call);
    if (s->cancel_after && s->responses == s->cancel_after) gw_gen_cancel(s->call);
}

static void on_done(void *arg, const struct gw_call_status *st, uint32_t responses)
{
    struct stream_rec *s = arg;
    s->done++;
    s->thread = pthread_self();
    s->st = *st;
    s->reported = responses;
}

const struct gw_gen_callbacks stream_rec_callbacks = {on_resp, on_done};

int stream_rec_done(void *arg)
{
    return ((struct stream_rec *)arg)->done > 0;
}

int stream_recs_done(struct test_loop *loop, struct stream_rec *s, int n, int timeout_ms)
{
    for (int waited = 0; waited < timeout_ms; waited += 50) {
        int all = 1;
        for (int i = 0; i < n; i++) all &= s[i].done == 1;
        if (all) return 1;
        test_loop_run(loop, NULL, NULL, 50);
    }
    return 0;
}

int unused_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sin;
    int ok = bind(fd, (struct sockaddr *)&sin, sizeof sin) == 0 &&
             getsockname(fd, (struct sockaddr *)&sin, &sl) == 0;
    close(fd);
    return ok ? ntohs(sin.sin_port) : -1;
}
