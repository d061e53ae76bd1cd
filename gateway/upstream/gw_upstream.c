/* The gRPC client: completion queue and its threads, channels, and the helpers every call uses. */
#include "gw_upstream_internal.h"

#include <arpa/inet.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_grpc_status.h"
#include "mm_log.h"

/* Guards every client's channel list and each channel's link to its client. Global (not per client)
 * because a channel can outlive its client: deliveries still queued on an event loop when the client is
 * destroyed hold references, and their last unref must not touch the freed client. */
static pthread_mutex_t chans_mu = PTHREAD_MUTEX_INITIALIZER;

static void *cq_thread(void *arg)
{
    struct gw_upstream *up = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(up->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
        if (ev.type != GRPC_OP_COMPLETE || !ev.tag) continue;
        struct gw_up_tag *tag = ev.tag;
        tag->fn(tag, ev.success);
    }
    return NULL;
}

static grpc_channel_args *make_chan_args(const struct gw_upstream_opts *o)
{
    enum { N = 7 };
    grpc_channel_args *a = calloc(1, sizeof(*a));
    grpc_arg *args = calloc(N, sizeof(*args));
    if (!a || !args) {
        free(a);
        free(args);
        return NULL;
    }
    int keepalive = o->keepalive_ms ? (int)o->keepalive_ms : 20000;
    int rmin = o->reconnect_min_ms ? (int)o->reconnect_min_ms : 100;
    int rmax = o->reconnect_max_ms ? (int)o->reconnect_max_ms : 2000;
    struct {
        const char *key;
        int value;
    } kv[N] = {
        {GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1},
        {GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1},
        {GRPC_ARG_KEEPALIVE_TIME_MS, keepalive},
        {GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, rmin},
        /* not GRPC_ARG_MIN_RECONNECT_BACKOFF_MS: gRPC core also takes it as the minimum connect timeout,
         * and 100 ms fails connections to a busy worker */
        {GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, rmax},
        /* we retry across workers ourselves; gRPC's own retries would hide failures from the breaker */
        {GRPC_ARG_ENABLE_RETRIES, 0},
        /* keep each response stream's receive window small: a paused consumer then stalls its worker
         * within ~64 KiB instead of letting BDP probing grow the window to megabytes per stream */
        {GRPC_ARG_HTTP2_BDP_PROBE, 0},
    };
    for (int i = 0; i < N; i++) {
        args[i].type = GRPC_ARG_INTEGER;
        args[i].key = (char *)kv[i].key;
        args[i].value.integer = kv[i].value;
    }
    a->num_args = N;
    a->args = args;
    return a;
}

int32_t gw_upstream_create(const struct gw_upstream_opts *opts, struct gw_upstream **out, struct mm_err *err)
{
    static const struct gw_upstream_opts defaults;
    if (!opts) opts = &defaults;
    *out = NULL;
    struct gw_upstream *up = calloc(1, sizeof(*up));
    if (!up) return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    grpc_init();
    pthread_mutex_init(&up->mu, NULL);
    pthread_cond_init(&up->idle, NULL);
    up->chan_args = make_chan_args(opts);
    up->keepalive_ms = opts->keepalive_ms ? opts->keepalive_ms : 20000;
    up->cq = grpc_completion_queue_create_for_next(NULL);
    up->n_threads = opts->cq_threads ? opts->cq_threads : 1;
    up->threads = calloc(up->n_threads, sizeof(*up->threads));
    if (!up->chan_args || !up->cq || !up->threads) {
        if (up->cq) grpc_completion_queue_destroy(up->cq);
        up->cq = NULL;
        up->n_threads = 0;
        gw_upstream_destroy(up);
        return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    }
    for (uint32_t i = 0; i < up->n_threads; i++) {
        if (pthread_create(&up->threads[i], NULL, cq_thread, up) != 0) {
            up->n_threads = i;
            gw_upstream_destroy(up);
            return mm_err_set(err, MM_ERROR, "upstream: cannot start the completion-queue thread");
        }
    }
    *out = up;
    return MM_OK;
}

static void chan_unlink(struct gw_upstream_chan *ch)
{
    if (ch->prev)
        ch->prev->next = ch->next;
    else
        ch->up->chans = ch->next;
    if (ch->next) ch->next->prev = ch->prev;
    ch->prev = ch->next = NULL;
}

static void chan_free(struct gw_upstream_chan *ch)
{
    gw_up_chan_release_loop_conns(ch);
    pthread_mutex_lock(&chans_mu);
    if (ch->up) { /* still attached: otherwise the client's destroy already closed the gRPC channel */
        chan_unlink(ch);
        grpc_channel_destroy(ch->channel);
    }
    pthread_mutex_unlock(&chans_mu);
    pthread_mutex_destroy(&ch->mu);
    free(ch->auth);
    free(ch);
}

void gw_up_chan_ref(struct gw_upstream_chan *ch)
{
    atomic_fetch_add(&ch->refs, 1);
}

void gw_up_chan_unref(struct gw_upstream_chan *ch)
{
    if (atomic_fetch_sub(&ch->refs, 1) == 1) chan_free(ch);
}

void gw_upstream_destroy(struct gw_upstream *up)
{
    if (!up) return;
    pthread_mutex_lock(&up->mu);
    up->closing = 1;
    for (struct gw_up_live *l = up->live; l; l = l->next) grpc_call_cancel(l->call, NULL);
    /* every call unwinds through the completion queue; wait for the last one */
    while (up->n_live > 0 && up->n_threads > 0) pthread_cond_wait(&up->idle, &up->mu);
    pthread_mutex_unlock(&up->mu);
    /* detach every channel: ones the owner left open lose that reference here, ones still referenced by
     * queued deliveries are freed later without touching this client */
    struct gw_upstream_chan *open_list = NULL;
    pthread_mutex_lock(&chans_mu);
    while (up->chans) {
        struct gw_upstream_chan *ch = up->chans;
        chan_unlink(ch);
        grpc_channel_destroy(ch->channel);
        ch->channel = NULL;
        ch->up = NULL;
        atomic_store(&ch->detached, 1);
        if (!ch->user_closed) {
            mm_log_warn("upstream", "channel to %s still open at shutdown", ch->target);
            ch->user_closed = 1;
            ch->next = open_list;
            open_list = ch;
        }
    }
    pthread_mutex_unlock(&chans_mu);
    while (open_list) {
        struct gw_upstream_chan *next = open_list->next;
        gw_up_chan_unref(open_list);
        open_list = next;
    }
    if (up->cq) {
        grpc_completion_queue_shutdown(up->cq);
        for (uint32_t i = 0; i < up->n_threads; i++) pthread_join(up->threads[i], NULL);
        grpc_completion_queue_destroy(up->cq);
    }
    if (up->chan_args) free(up->chan_args->args);
    free(up->chan_args);
    free(up->threads);
    pthread_cond_destroy(&up->idle);
    pthread_mutex_destroy(&up->mu);
    free(up);
    grpc_shutdown();
}

/* Loopback address, localhost or a unix socket. */
static int target_is_local(const char *target)
{
    if (strncmp(target, "unix:", 5) == 0 || strncmp(target, "unix-abstract:", 14) == 0) return 1;
    const char *t = target;
    if (strncmp(t, "dns:///", 7) == 0)
        t += 7;
    else if (strncmp(t, "ipv4:", 5) == 0)
        t += 5;
    else if (strncmp(t, "ipv6:", 5) == 0)
        t += 5;
    char host[256];
    size_t n;
    if (t[0] == '[') {
        const char *end = strchr(t, ']');
        if (!end) return 0;
        n = (size_t)(end - t - 1);
        t++;
    } else {
        const char *colon = strrchr(t, ':');
        n = colon ? (size_t)(colon - t) : strlen(t);
    }
    if (n == 0 || n >= sizeof(host)) return 0;
    memcpy(host, t, n);
    host[n] = '\0';
    if (strcasecmp(host, "localhost") == 0) return 1;
    unsigned char a[16];
    if (inet_pton(AF_INET, host, a) == 1) return a[0] == 127;
    if (inet_pton(AF_INET6, host, a) == 1) {
        static const unsigned char v6lo[16] = {[15] = 1};
        static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
        return memcmp(a, v6lo, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127);
    }
    return 0;
}

/* The client's channel arguments plus the TLS name override (the worker's certificate name when it is not
 * the address's host); the caller frees the array and the struct. */
static grpc_channel_args *args_with_name(const grpc_channel_args *base, const char *name)
{
    grpc_channel_args *a = calloc(1, sizeof *a);
    grpc_arg *args = calloc(base->num_args + 1, sizeof *args);
    if (!a || !args) {
        free(a);
        free(args);
        return NULL;
    }
    memcpy(args, base->args, base->num_args * sizeof *args);
    args[base->num_args].type = GRPC_ARG_STRING;
    args[base->num_args].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
    args[base->num_args].value.string = (char *)name;
    a->num_args = base->num_args + 1;
    a->args = args;
    return a;
}

int32_t gw_upstream_chan_open(struct gw_upstream *up, const char *target, struct gw_upstream_chan **out,
                              struct mm_err *err)
{
    return gw_upstream_chan_open_tls(up, target, NULL, out, err);
}

int32_t gw_upstream_chan_open_tls(struct gw_upstream *up, const char *target,
                                  const struct gw_upstream_tls *tls, struct gw_upstream_chan **out,
                                  struct mm_err *err)
{
    *out = NULL;
    if (!up || !target || !target[0]) return mm_err_set(err, MM_INVALID, "upstream: no worker address");
    if (strlen(target) >= sizeof(((struct gw_upstream_chan *)0)->target))
        return mm_err_set(err, MM_INVALID, "upstream: worker address '%.64s...' is too long", target);
    struct gw_upstream_chan *ch = calloc(1, sizeof(*ch));
    if (!ch) return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    grpc_channel_credentials *creds =
        tls ? grpc_ssl_credentials_create(tls->ca_pem, NULL, NULL, NULL) : grpc_insecure_credentials_create();
    const int rename = tls && tls->server_name;
    grpc_channel_args *named = rename ? args_with_name(up->chan_args, tls->server_name) : NULL;
    if (creds && (named || !rename))
        ch->channel = grpc_channel_create(target, creds, named ? named : up->chan_args);
    if (creds) grpc_channel_credentials_release(creds);
    if (named) {
        free(named->args);
        free(named);
    }
    if (!ch->channel) {
        free(ch);
        return mm_err_set(err, MM_INVALID, "upstream: cannot create a%s channel to '%s'", tls ? " TLS" : "",
                          target);
    }
    ch->up = up;
    snprintf(ch->target, sizeof(ch->target), "%s", target);
    ch->local = target_is_local(target);
    ch->keepalive_ms = up->keepalive_ms;
    gw_up_chan_parse_loop_addr(ch);
    if (tls) ch->loop_ok = 0; /* the loops' own connections speak plaintext HTTP/2 only */
    atomic_init(&ch->refs, 1);
    atomic_init(&ch->detached, 0);
    pthread_mutex_init(&ch->mu, NULL);
    pthread_mutex_lock(&chans_mu);
    ch->next = up->chans;
    if (up->chans) up->chans->prev = ch;
    up->chans = ch;
    pthread_mutex_unlock(&chans_mu);
    *out = ch;
    return MM_OK;
}

int32_t gw_upstream_chan_set_token(struct gw_upstream_chan *ch, const char *token, struct mm_err *err)
{
    size_t n = token ? strlen(token) : 0;
    if (n == 0) return mm_err_set(err, MM_INVALID, "upstream: empty worker token");
    for (size_t i = 0; i < n; i++)
        if (token[i] <= ' ' || token[i] > '~')
            return mm_err_set(err, MM_INVALID,
                              "upstream: the worker token has a character other than visible ASCII");
    char *a = malloc(n + 8);
    if (!a) return mm_err_set(err, MM_NOMEM, "upstream: out of memory");
    memcpy(a, "Bearer ", 7);
    memcpy(a + 7, token, n + 1);
    free(ch->auth);
    ch->auth = a;
    memset(&ch->auth_md, 0, sizeof ch->auth_md);
    ch->auth_md.key = grpc_slice_from_static_string("authorization");
    ch->auth_md.value = grpc_slice_from_static_string(ch->auth); /* lives as long as ch, which a call holds */
    return MM_OK;
}

void gw_up_auth_op(struct gw_upstream_chan *ch, grpc_op *op)
{
    if (!ch->auth) return;
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = &ch->auth_md;
}

void gw_upstream_chan_close(struct gw_upstream_chan *ch)
{
    if (!ch || ch->user_closed) return;
    ch->user_closed = 1;
    gw_up_chan_unref(ch);
}

const char *gw_upstream_chan_target(const struct gw_upstream_chan *ch)
{
    return ch->target;
}

int gw_upstream_chan_is_local(const struct gw_upstream_chan *ch)
{
    return ch->local;
}

int gw_upstream_chan_shm_usable(const struct gw_upstream_chan *ch)
{
    return ch->local && !atomic_load(&ch->shm_refused);
}

void gw_upstream_chan_info(struct gw_upstream_chan *ch, struct gw_worker_info *out)
{
    pthread_mutex_lock(&ch->mu);
    *out = ch->info;
    pthread_mutex_unlock(&ch->mu);
}

void gw_up_chan_set_info(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__ModelInfoResponse *r)
{
    struct gw_worker_info in;
    memset(&in, 0, sizeof(in));
    in.known = 1;
    snprintf(in.model_name, sizeof(in.model_name), "%s", r->model_name ? r->model_name : "");
    snprintf(in.model_type, sizeof(in.model_type), "%s", r->model_type ? r->model_type : "");
    in.vocab_size = r->vocab_size;
    in.max_context = r->max_context;
    in.block_size = r->block_size;
    in.protocol_version = r->protocol_version;
    in.supports_shm = r->supports_shm;
    in.max_message_bytes = r->max_message_bytes;
    pthread_mutex_lock(&ch->mu);
    ch->info = in;
    pthread_mutex_unlock(&ch->mu);
}

uint64_t gw_upstream_live_calls(struct gw_upstream *up)
{
    pthread_mutex_lock(&up->mu);
    uint64_t n = up->n_live;
    pthread_mutex_unlock(&up->mu);
    return n;
}

grpc_call *gw_up_call_create(struct gw_upstream_chan *ch, const char *method, uint32_t timeout_ms,
                             struct gw_up_live *live)
{
    if (atomic_load(&ch->detached)) return NULL; /* its client is gone */
    struct gw_upstream *up = ch->up;
    gpr_timespec deadline = timeout_ms ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                      gpr_time_from_millis(timeout_ms, GPR_TIMESPAN))
                                       : gpr_inf_future(GPR_CLOCK_REALTIME);
    pthread_mutex_lock(&up->mu);
    if (up->closing) {
        pthread_mutex_unlock(&up->mu);
        return NULL;
    }
    grpc_call *call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, up->cq,
                                               grpc_slice_from_static_string(method), NULL, deadline, NULL);
    if (call) {
        live->call = call;
        live->prev = NULL;
        live->next = up->live;
        if (up->live) up->live->prev = live;
        up->live = live;
        up->n_live++;
        gw_up_chan_ref(ch);
    }
    pthread_mutex_unlock(&up->mu);
    return call;
}

void gw_up_call_release(struct gw_upstream_chan *ch, struct gw_up_live *live)
{
    struct gw_upstream *up = ch->up;
    grpc_call_unref(live->call);
    pthread_mutex_lock(&up->mu);
    if (live->prev)
        live->prev->next = live->next;
    else
        up->live = live->next;
    if (live->next) live->next->prev = live->prev;
    up->n_live--;
    if (up->n_live == 0) pthread_cond_broadcast(&up->idle);
    pthread_mutex_unlock(&up->mu);
    gw_up_chan_unref(ch);
}

grpc_byte_buffer *gw_up_buffer_take(void *buf, size_t len)
{
    grpc_slice s = grpc_slice_new(buf, len, free);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_byte_buffer *gw_up_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return NULL;
    protobuf_c_message_pack(m, buf);
    return gw_up_buffer_take(buf, n);
}

ProtobufCMessage *gw_up_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb)) return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

/* "worker TARGET " at the start of st->message; st->client marks where the rest (what a client may see)
 * starts. Returns that offset. */
static size_t status_worker(struct gw_call_status *st, const char *target)
{
    int pre = snprintf(st->message, sizeof(st->message), "worker %.128s ", target);
    st->client = pre > 0 && (size_t)pre < sizeof(st->message) ? (uint16_t)pre : 0;
    return st->client;
}

void gw_up_status_fill_text(struct gw_call_status *st, const char *target, const char *method, int grpc_code,
                            const char *details, size_t details_len)
{
    st->grpc_code = grpc_code;
    st->code = gw_grpc_to_mm(grpc_code);
    st->client = 0;
    if (grpc_code == GRPC_STATUS_OK) {
        st->message[0] = '\0';
        return;
    }
    const char *m = strrchr(method, '/');
    int dlen = details_len > 200 ? 200 : (int)details_len;
    const size_t at = status_worker(st, target);
    snprintf(st->message + at, sizeof(st->message) - at, "%s: %s%s%.*s", m ? m + 1 : method,
             gw_grpc_code_name(grpc_code), dlen ? ": " : "", dlen, dlen ? details : "");
}

void gw_up_status_fill(struct gw_call_status *st, const struct gw_upstream_chan *ch, const char *method,
                       grpc_status_code code, const grpc_slice *details)
{
    size_t dlen = details ? GRPC_SLICE_LENGTH(*details) : 0;
    gw_up_status_fill_text(st, ch->target, method, (int)code,
                           dlen ? (const char *)GRPC_SLICE_START_PTR(*details) : "", dlen);
}

void gw_up_status_local(struct gw_call_status *st, const struct gw_upstream_chan *ch, const char *method,
                        int32_t code, const char *what)
{
    const char *m = strrchr(method, '/');
    st->code = code;
    st->grpc_code = -1;
    const size_t at = status_worker(st, ch->target);
    snprintf(st->message + at, sizeof(st->message) - at, "%s: %.300s", m ? m + 1 : method, what);
}
