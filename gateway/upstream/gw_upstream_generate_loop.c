/* Generate from a caller on an event loop: over the loop's own HTTP/2 connection to the worker when the
 * request has no out-of-band tensors and the target is an address, else through gRPC C core
 * (see gw_upstream_generate.h). Everything here runs on the caller's loop thread. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>

#include "gw_upstream_h2.h"
#include "gw_upstream_internal.h"
#include "mm_clock.h"
#include "mm_log.h"

static const char *const gen_method = GW_WORKER_METHOD("Generate");

struct loop_call {
    struct gw_gen_call base; /* kind GW_GEN_LOOP */
    struct gw_upstream_chan *ch;
    struct gw_h2_stream *s;
    struct gw_gen_callbacks cb;
    void *arg;
    uint32_t responses;
    char request_id[128];
};

static void loop_call_free(struct loop_call *c)
{
    gw_up_chan_unref(c->ch);
    free(c);
}

/* protobuf-c's blocks for one response, from a stack array: a response of a few tokens is a handful of small
 * blocks (the message, its outputs, their id arrays) that live only for the on_response call; malloc past
 * the array */
struct scratch {
    unsigned char *p;
    size_t used, size;
};

static void *scratch_alloc(void *data, size_t n)
{
    struct scratch *s = data;
    size_t a = (n + 15) & ~(size_t)15;
    if (a >= n && s->size - s->used >= a) {
        void *p = s->p + s->used;
        s->used += a;
        return p;
    }
    return malloc(n);
}

static void scratch_free(void *data, void *p)
{
    struct scratch *s = data;
    uintptr_t u = (uintptr_t)p, lo = (uintptr_t)s->p;
    if (u >= lo && u < lo + s->size) return; /* the array goes with the call */
    free(p);
}

static void on_message(void *arg, const uint8_t *data, size_t len)
{
    struct loop_call *c = arg;
    _Alignas(16) unsigned char buf[2048];
    struct scratch sc = {buf, 0, sizeof buf};
    ProtobufCAllocator alloc = {.alloc = scratch_alloc, .free = scratch_free, .allocator_data = &sc};
    Mmgw__Worker__V1__GenerateResponse *r = mmgw__worker__v1__generate_response__unpack(&alloc, len, data);
    if (!r) {
        gw_h2_fail(c->s, 13, "malformed GenerateResponse from worker"); /* INTERNAL, as gRPC C core */
        return;
    }
    c->responses++;
    c->cb.on_response(c->arg, r); /* may cancel: c is gone then */
    protobuf_c_message_free_unpacked(&r->base, &alloc);
}

static void on_end(void *arg, const struct gw_call_status *st)
{
    struct loop_call *c = arg;
    c->s = NULL;
    c->cb.on_done(c->arg, st, c->responses);
    loop_call_free(c); /* the handle is gone after on_done */
}

static const struct gw_h2_stream_cbs stream_cbs = {on_message, on_end};

/* ---- the channel's loop side ---- */

/* "1.2.3.4:port", "[::1]:port" (optionally after gRPC's "ipv4:"/"ipv6:" scheme) and "unix:PATH"; names
 * (and "localhost", which gRPC resolves to several addresses) stay with gRPC C core's resolver. */
void gw_up_chan_parse_loop_addr(struct gw_upstream_chan *ch)
{
    const char *t = ch->target;
    memset(&ch->loop_addr, 0, sizeof ch->loop_addr);
    ch->loop_ok = 0;
    if (strncmp(t, "unix:", 5) == 0) {
        const char *path = t + 5;
        if (strncmp(path, "//", 2) == 0) path += 2; /* unix:///abs/path */
        struct sockaddr_un *un = (struct sockaddr_un *)&ch->loop_addr;
        if (!path[0] || strlen(path) >= sizeof un->sun_path) return;
        un->sun_family = AF_UNIX;
        strcpy(un->sun_path, path);
        ch->loop_addrlen = (uint32_t)sizeof *un;
        ch->loop_ok = 1;
        return;
    }
    if (strncmp(t, "ipv4:", 5) == 0 || strncmp(t, "ipv6:", 5) == 0) t += 5;
    if (strchr(t, ',')) return; /* an address list: gRPC's load balancing */
    const char *colon = strrchr(t, ':');
    if (!colon || !colon[1]) return;
    char *end;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (*end || port == 0 || port > 65535) return;
    char host[64];
    size_t n = (size_t)(colon - t);
    if (n >= 2 && t[0] == '[' && t[n - 1] == ']') {
        t++;
        n -= 2;
    }
    if (n == 0 || n >= sizeof host) return;
    memcpy(host, t, n);
    host[n] = '\0';
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ch->loop_addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ch->loop_addr;
    if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
        ch->loop_addrlen = (uint32_t)sizeof *in4;
        ch->loop_ok = 1;
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        ch->loop_addrlen = (uint32_t)sizeof *in6;
        ch->loop_ok = 1;
    }
}

void gw_up_chan_release_loop_conns(struct gw_upstream_chan *ch)
{
    /* the channel's last reference: no call uses these connections any more */
    for (uint32_t i = 0; i < ch->n_loop_conns; i++) gw_h2_conn_release(ch->loop_conns[i]);
    free(ch->loop_conns);
    ch->loop_conns = NULL;
    ch->n_loop_conns = 0;
}

/* The channel's connection on this loop: the existing one, a new one replacing a dead or draining one,
 * or NULL (the call then goes through gRPC C core: a failed connect is in backoff, or opening failed). */
static struct gw_h2_conn *loop_conn(struct gw_upstream_chan *ch, const struct gw_up_loop *loop)
{
    struct gw_h2_conn *c = NULL, *old = NULL;
    pthread_mutex_lock(&ch->mu);
    if (loop->index >= ch->n_loop_conns) {
        uint32_t n = loop->index + 1 < 8 ? 8 : loop->index + 1;
        struct gw_h2_conn **a = realloc(ch->loop_conns, n * sizeof *a);
        if (!a) goto out;
        memset(a + ch->n_loop_conns, 0, (n - ch->n_loop_conns) * sizeof *a);
        ch->loop_conns = a;
        ch->n_loop_conns = n;
    }
    c = ch->loop_conns[loop->index];
    uint32_t backoff = 0;
    if (c && !gw_h2_conn_usable(c)) {
        if ((uint64_t)mm_now_ms() < gw_h2_conn_retry_at_ms(c)) {
            c = NULL; /* a connect failed a moment ago */
            goto out;
        }
        backoff = gw_h2_conn_next_backoff_ms(c);
        old = c;
        c = NULL;
        ch->loop_conns[loop->index] = NULL;
    }
    if (!c) {
        struct mm_err e;
        c = gw_h2_conn_open(loop->base, loop->ex, ch->target, (const struct sockaddr *)&ch->loop_addr,
                            ch->loop_addrlen, ch->keepalive_ms, ch->auth, &e);
        if (c) {
            gw_h2_conn_set_backoff(c, backoff);
            ch->loop_conns[loop->index] = c;
        } else {
            mm_log_debug("upstream", "%s: %s; using gRPC C core", ch->target, e.msg);
        }
    }
out:
    pthread_mutex_unlock(&ch->mu);
    if (old) gw_h2_conn_release(old); /* its running streams keep it until they end */
    return c;
}

int32_t gw_upstream_generate_loop(struct gw_upstream_chan *ch, const Mmgw__Worker__V1__GenerateRequest *req,
                                  const struct gw_gen_opts *opts, const struct gw_up_loop *loop,
                                  const struct gw_gen_callbacks *cb, void *arg, struct gw_gen_call **out,
                                  struct mm_err *err)
{
    if (out) *out = NULL;
    if (!ch || !req || !loop || !loop->base || !loop->ex || !cb || !cb->on_response || !cb->on_done)
        return mm_err_set(err, MM_INVALID, "generate: missing channel, request, loop or callbacks");
    int eligible =
        ch->loop_ok && req->n_mm_inputs == 0 && !(opts && opts->core_only) && !atomic_load(&ch->detached);
    struct gw_h2_conn *conn = eligible ? loop_conn(ch, loop) : NULL;
    struct loop_call *c = conn ? calloc(1, sizeof *c) : NULL;
    if (c) {
        c->base.kind = GW_GEN_LOOP;
        c->ch = ch;
        c->cb = *cb;
        c->arg = arg;
        snprintf(c->request_id, sizeof c->request_id, "%s", req->request_id ? req->request_id : "");
        c->s = gw_h2_call(conn, gen_method, &req->base, opts ? opts->timeout_ms : 0, &stream_cbs, c);
        if (!c->s) {
            free(c);
            c = NULL;
        }
    }
    if (!c) return gw_upstream_generate(ch, req, opts, loop->ex, cb, arg, out, err);
    gw_up_chan_ref(ch);
    if (out) *out = &c->base;
    return MM_OK;
}

void gw_up_loop_gen_pause(struct gw_gen_call *g)
{
    struct loop_call *c = (struct loop_call *)g;
    if (c->s) gw_h2_pause(c->s);
}

void gw_up_loop_gen_resume(struct gw_gen_call *g)
{
    struct loop_call *c = (struct loop_call *)g;
    if (c->s) gw_h2_resume(c->s);
}

void gw_up_loop_gen_cancel(struct gw_gen_call *g)
{
    struct loop_call *c = (struct loop_call *)g;
    if (c->s) gw_h2_cancel(c->s); /* the reset tells the worker at once */
    /* and an Abort, as on gRPC C core: the request id is the worker's handle whatever the stream does */
    if (c->request_id[0]) gw_up_send_abort(c->ch, c->request_id);
    loop_call_free(c);
}
