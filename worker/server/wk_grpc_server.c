/* Server lifecycle: listen, register methods, the completion-queue thread, graceful shutdown. */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mm_clock.h"
#include "mm_log.h"
#include "wk_auth.h"
#include "wk_grpc_impl.h"

#define LOG "grpc"

static const char *const k_paths[WK_M_COUNT] = {
    "/mmgw.worker.v1.Worker/Generate",  "/mmgw.worker.v1.Worker/Abort", "/mmgw.worker.v1.Worker/Health",
    "/mmgw.worker.v1.Worker/ModelInfo", "/mmgw.worker.v1.Worker/Load",  "/mmgw.worker.v1.Worker/UploadTensor",
};

static void slot_fired(void *obj, int32_t ok);

static int32_t arm_slot(struct wk_slot *sl)
{
    struct wk_grpc *g = sl->g;
    sl->call = NULL;
    sl->payload = NULL;
    grpc_metadata_array_init(&sl->md);
    grpc_call_error e;
    if (sl->method == WK_M_UNKNOWN) {
        grpc_call_details_init(&sl->details);
        e = grpc_server_request_call(g->server, &sl->call, &sl->details, &sl->md, g->cq, g->cq, &sl->tag);
    } else {
        e = grpc_server_request_registered_call(g->server, sl->registered, &sl->call, &sl->deadline, &sl->md,
                                                sl->method == WK_M_UPLOAD ? NULL : &sl->payload, g->cq, g->cq,
                                                &sl->tag);
    }
    if (e != GRPC_CALL_OK) {
        mm_log_error(LOG, "cannot request calls for slot %d: %d", sl->method, (int)e);
        grpc_metadata_array_destroy(&sl->md);
        if (sl->method == WK_M_UNKNOWN) grpc_call_details_destroy(&sl->details);
        return -1;
    }
    return 0;
}

static void slot_fired(void *obj, int32_t ok)
{
    struct wk_slot *sl = obj;
    struct wk_grpc *g = sl->g;
    grpc_call *call = sl->call;
    grpc_byte_buffer *payload = sl->payload;
    /* checked before the slot's metadata goes (a re-armed slot reuses it) */
    const int authorized = !g->svc.auth || (ok && wk_auth_ok(&sl->md, g->svc.auth));
    grpc_metadata_array_destroy(&sl->md);
    if (sl->method == WK_M_UNKNOWN) grpc_call_details_destroy(&sl->details);
    if (!ok) { /* the server is shutting down: the slot is not re-armed */
        if (payload) grpc_byte_buffer_destroy(payload);
        if (call) grpc_call_unref(call);
        return;
    }
    if (!__atomic_load_n(&g->shutting_down, __ATOMIC_ACQUIRE)) arm_slot(sl);
    if (!authorized) {
        if (payload) grpc_byte_buffer_destroy(payload);
        wk_unary_reply(call, NULL, GRPC_STATUS_UNAUTHENTICATED,
                       "missing or wrong authorization token (the worker's --auth-token-file; the gateway's "
                       "upstream_token)");
        return;
    }
    switch (sl->method) {
    case WK_M_GENERATE:
        wk_rpc_generate(g, call, payload);
        break;
    case WK_M_ABORT:
        wk_rpc_abort(g, call, payload);
        break;
    case WK_M_HEALTH:
        wk_rpc_health(g, call, payload);
        break;
    case WK_M_MODEL_INFO:
        wk_rpc_model_info(g, call, payload);
        break;
    case WK_M_LOAD:
        wk_rpc_load(g, call, payload);
        break;
    case WK_M_UPLOAD:
        wk_rpc_upload(g, call);
        break;
    default:
        if (payload) grpc_byte_buffer_destroy(payload);
        wk_unary_reply(call, NULL, GRPC_STATUS_UNIMPLEMENTED,
                       "unknown method (this worker speaks mmgw.worker.v1)");
        break;
    }
}

static void shutdown_fired(void *obj, int32_t ok)
{
    struct wk_grpc *g = obj;
    pthread_mutex_lock(&g->mu);
    g->shutdown_done = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void *cq_main(void *arg)
{
    struct wk_grpc *g = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        struct wk_tag *t = ev.tag;
        t->fn(t->obj, ev.success);
    }
    return NULL;
}

int32_t wk_grpc_create(const char *addr, const struct wk_service *svc, struct wk_grpc **out, int32_t *port,
                       struct mm_err *err)
{
    *out = NULL;
    struct wk_grpc *g = calloc(1, sizeof(*g));
    if (!g) return mm_err_set(err, MM_NOMEM, "out of memory");
    g->svc = *svc;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    grpc_init();

    int max = svc->max_message_bytes > 0 && svc->max_message_bytes < INT_MAX ? (int)svc->max_message_bytes
                                                                             : INT_MAX;
    grpc_arg args[4];
    memset(args, 0, sizeof(args));
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = max;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = max;
    /* streams are long-lived and the gateway keeps one channel: allow its keepalive pings */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS;
    args[2].value.integer = 5000;
    /* the worker owns its port: with SO_REUSEPORT (gRPC's default) a second worker on the same port, or a
     * bind to port 0 that lands on a port another server holds, would silently share the connections */
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[3].value.integer = 0;
    grpc_channel_args ca = {.num_args = 4, .args = args};
    g->server = grpc_server_create(&ca, NULL);
    g->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(g->server, g->cq, NULL);
    for (int32_t m = 0; m < WK_M_COUNT; m++) {
        g->slots[m].registered = grpc_server_register_method(
            g->server, k_paths[m], NULL,
            m == WK_M_UPLOAD ? GRPC_SRM_PAYLOAD_NONE : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = svc->tls_key_pem, .cert_chain = svc->tls_cert_pem};
    grpc_server_credentials *creds = svc->tls_cert_pem
                                         ? grpc_ssl_server_credentials_create(NULL, &pair, 1, 0, NULL)
                                         : grpc_insecure_server_credentials_create();
    int bound = grpc_server_add_http2_port(g->server, addr, creds);
    grpc_server_credentials_release(creds);
    if (bound == 0) {
        grpc_server_destroy(g->server);
        grpc_completion_queue_shutdown(g->cq);
        while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(g->cq);
        grpc_shutdown();
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
        return mm_err_set(err, MM_IO, "cannot listen on '%s' (address in use or malformed%s)", addr,
                          svc->tls_cert_pem ? ", or a certificate and key gRPC refused" : "");
    }
    grpc_server_start(g->server);
    for (int32_t m = 0; m <= WK_M_COUNT; m++) {
        struct wk_slot *sl = &g->slots[m];
        sl->g = g;
        sl->method = m;
        sl->tag.fn = slot_fired;
        sl->tag.obj = sl;
        arm_slot(sl);
    }
    g->shutdown_tag.fn = shutdown_fired;
    g->shutdown_tag.obj = g;
    int32_t want = svc->threads > 0 ? svc->threads : 2;
    if (want > WK_GRPC_MAX_THREADS) want = WK_GRPC_MAX_THREADS;
    for (int32_t i = 0; i < want; i++)
        if (pthread_create(&g->th[g->n_threads], NULL, cq_main, g) == 0) g->n_threads++;
    if (g->n_threads == 0) {
        wk_grpc_destroy(g);
        return mm_err_set(err, MM_ERROR, "cannot start the completion-queue threads");
    }
    g->thread_started = 1;
    *port = bound;
    *out = g;
    return MM_OK;
}

void wk_grpc_shutdown(struct wk_grpc *g, int64_t timeout_ms)
{
    if (__atomic_exchange_n(&g->shutting_down, 1, __ATOMIC_ACQ_REL)) return;
    grpc_server_shutdown_and_notify(g->server, g->cq, &g->shutdown_tag);
    struct timespec ts = mm_realtime_after_ms(timeout_ms < 0 ? 0 : timeout_ms);
    pthread_mutex_lock(&g->mu);
    while (!g->shutdown_done && g->thread_started) {
        if (pthread_cond_timedwait(&g->cv, &g->mu, &ts) != 0) break;
    }
    int32_t done = g->shutdown_done;
    pthread_mutex_unlock(&g->mu);
    if (!done) {
        mm_log_warn(LOG, "calls still open after %lld ms: cancelling them", (long long)timeout_ms);
        grpc_server_cancel_all_calls(g->server);
        pthread_mutex_lock(&g->mu);
        while (!g->shutdown_done && g->thread_started) pthread_cond_wait(&g->cv, &g->mu);
        pthread_mutex_unlock(&g->mu);
    }
}

void wk_grpc_destroy(struct wk_grpc *g)
{
    if (!g) return;
    if (g->thread_started) {
        wk_grpc_shutdown(g, 0);
        grpc_server_destroy(g->server);
        grpc_completion_queue_shutdown(g->cq);
        for (int32_t i = 0; i < g->n_threads; i++) pthread_join(g->th[i], NULL);
    } else {
        grpc_server_shutdown_and_notify(g->server, g->cq, &g->shutdown_tag);
        grpc_server_cancel_all_calls(g->server);
        grpc_completion_queue_shutdown(g->cq);
        cq_main(g);
        grpc_server_destroy(g->server);
    }
    grpc_completion_queue_destroy(g->cq);
    grpc_shutdown();
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
