/* Client connections: accept, TLS handshake and ALPN, HTTP/2 preface detection on plain sockets, the one
 * timer per connection, flush-then-close with lingering, and deferred freeing. */
#include "gw_http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/bufferevent_ssl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mm_log.h"

#define LINGER_MS 2000
#define READ_HIGH_MIN (64 * 1024)
#define DIRECT_IOV 16 /* buffer pieces per sendmsg */

static const char h2_preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define H2_PREFACE_LEN 24

static void flush_unlink(struct gw_conn *c)
{
    if (!c->flush_queued) return;
    for (struct gw_conn **pp = &c->loop->flush_head; *pp; pp = &(*pp)->flush_next) {
        if (*pp == c) {
            *pp = c->flush_next;
            break;
        }
    }
    c->flush_queued = false;
}

static void conn_free(void *arg)
{
    struct gw_conn *c = arg;
    struct gw_loop *l = c->loop;
    flush_unlink(c);
    if (c->proto && c->proto->destroy) c->proto->destroy(c);
    if (c->timer) event_free(c->timer);
    if (c->bev) bufferevent_free(c->bev); /* closes the socket (and frees the SSL) */
    if (c->prev)
        c->prev->next = c->next;
    else
        l->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    free(c);
    gw_loop_conn_closed(l);
}

void gw_conn_close(struct gw_conn *c)
{
    if (c->closing) return;
    c->closing = true;
    c->state = GW_CONN_CLOSED;
    if (c->bev) bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    if (c->timer) evtimer_del(c->timer);
    if (gw_loop_defer(c->loop, conn_free, c) != 0) {
        /* no memory for the deferral: freeing now is the lesser risk than leaking the socket forever */
        mm_log_error(GW_LOG_COMP, "out of memory closing a connection");
    }
}

size_t gw_conn_output_len(const struct gw_conn *c)
{
    return evbuffer_get_length(bufferevent_get_output(c->bev));
}

void gw_conn_set_deadline(struct gw_conn *c, int64_t deadline_ns)
{
    if (c->closing || deadline_ns == c->deadline_ns) return;
    c->deadline_ns = deadline_ns;
    if (!deadline_ns) {
        evtimer_del(c->timer);
        return;
    }
    int64_t d = deadline_ns - mm_now_ns();
    if (d < 0) d = 0;
    struct timeval tv = {(time_t)(d / 1000000000LL), (suseconds_t)((d % 1000000000LL) / 1000)};
    evtimer_add(c->timer, &tv);
}

static void start_linger(struct gw_conn *c)
{
    /* half-close so the client sees our response and EOF, then swallow whatever it still sends: closing with
     * unread input would make the kernel send a reset that can destroy the response in flight */
    shutdown(c->fd, SHUT_WR);
    c->state = GW_CONN_LINGER;
    c->direct_write = false;
    bufferevent_disable(c->bev, EV_WRITE);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    bufferevent_enable(c->bev, EV_READ);
    evbuffer_drain(bufferevent_get_input(c->bev), evbuffer_get_length(bufferevent_get_input(c->bev)));
    gw_conn_set_deadline(c, mm_now_ns() + (int64_t)LINGER_MS * 1000000);
}

void gw_conn_close_after_flush(struct gw_conn *c, bool linger)
{
    if (c->closing) return;
    c->close_after_flush = true;
    c->linger = c->linger || linger;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    if (gw_conn_output_len(c) == 0) {
        if (c->linger && !c->tls)
            start_linger(c);
        else
            gw_conn_close(c);
        return;
    }
    /* bound the flush: a client that reads nothing must not keep the connection forever */
    int64_t send_ms = gw_loop_config(c->loop)->http.send_timeout_ms;
    gw_conn_set_deadline(c, mm_now_ns() + send_ms * 1000000);
}

/* ---- protocol selection ---- */

static void start_proto(struct gw_conn *c, bool h2)
{
    c->state = GW_CONN_PROTO;
    int rc;
    if (h2) {
        atomic_fetch_add(&c->loop->http->conns_h2, 1);
        if (!c->tls) bufferevent_enable(c->bev, EV_WRITE); /* HTTP/2 writes through the bufferevent */
        rc = gw_h2_start(c);
    } else {
        rc = gw_h1_start(c);
    }
    if (rc != 0) gw_conn_close(c);
}

static void detect(struct gw_conn *c)
{
    struct evbuffer *in = bufferevent_get_input(c->bev);
    size_t n = evbuffer_get_length(in);
    if (n == 0) return;
    size_t cmp = n < H2_PREFACE_LEN ? n : H2_PREFACE_LEN;
    unsigned char *p = evbuffer_pullup(in, (ev_ssize_t)cmp);
    if (!p) {
        gw_conn_close(c);
        return;
    }
    if (memcmp(p, h2_preface, cmp) != 0) {
        start_proto(c, false);
        return;
    }
    if (cmp == H2_PREFACE_LEN) start_proto(c, true);
    /* else: a prefix of the preface; wait for more */
}

/* ---- bufferevent callbacks ---- */

static void read_cb(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->closing) return;
    switch (c->state) {
    case GW_CONN_DETECT:
        detect(c);
        break;
    case GW_CONN_PROTO:
        c->proto->on_read(c);
        break;
    case GW_CONN_LINGER: {
        struct evbuffer *in = bufferevent_get_input(bev);
        evbuffer_drain(in, evbuffer_get_length(in));
        break;
    }
    default:
        break;
    }
}

static void write_cb(struct bufferevent *bev, void *arg)
{
    struct gw_conn *c = arg;
    if (c->closing) return;
    /* the socket took everything: back to writing from the loop's flush event */
    if (c->direct_write && gw_conn_output_len(c) == 0 && (bufferevent_get_enabled(bev) & EV_WRITE))
        bufferevent_disable(bev, EV_WRITE);
    if (c->close_after_flush) {
        if (gw_conn_output_len(c) == 0) {
            if (c->linger && !c->tls)
                start_linger(c);
            else
                gw_conn_close(c);
        }
        return;
    }
    if (c->state == GW_CONN_PROTO && c->proto->on_write) c->proto->on_write(c);
}

static void handshake_done(struct gw_conn *c)
{
    SSL *ssl = bufferevent_openssl_get_ssl(c->bev);
    const unsigned char *alpn = NULL;
    unsigned int alpn_len = 0;
    if (ssl) SSL_get0_alpn_selected(ssl, &alpn, &alpn_len);
    bool h2 = alpn_len == 2 && memcmp(alpn, "h2", 2) == 0;
    start_proto(c, h2);
}

static void event_cb(struct bufferevent *bev, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (c->closing) return;
    if (what & BEV_EVENT_CONNECTED) {
        if (c->state == GW_CONN_TLS_HANDSHAKE) handshake_done(c);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        c->peer_error = (what & BEV_EVENT_ERROR) != 0;
        if (c->state == GW_CONN_PROTO && c->proto->on_eof)
            c->proto->on_eof(c);
        else
            gw_conn_close(c);
    }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct gw_conn *c = arg;
    if (c->closing) return;
    c->deadline_ns = 0;
    if (c->close_after_flush && c->state != GW_CONN_LINGER) {
        gw_conn_close(c); /* the client did not read the last response in time */
        return;
    }
    if (c->state == GW_CONN_PROTO && c->proto->on_timer)
        c->proto->on_timer(c);
    else
        gw_conn_close(c); /* handshake, preface detection or lingering took too long */
}

/* ---- direct writes ---- */

static void flush_enqueue(struct gw_conn *c)
{
    if (c->flush_queued || c->closing) return;
    struct gw_loop *l = c->loop;
    bool wake = l->flush_head == NULL;
    c->flush_queued = true;
    c->flush_next = l->flush_head;
    l->flush_head = c;
    if (wake) event_active(l->flush_ev, EV_TIMEOUT, 0);
}

/* Write what the output holds with sendmsg (MSG_NOSIGNAL: a client gone mid-response must not raise SIGPIPE
 * in a process that did not ignore it). What the socket does not take is left to the bufferevent's write
 * event; the write callback runs as the bufferevent would run it, once the output is at or below its low
 * watermark. */
static void conn_write_direct(struct gw_conn *c)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t wrote = 0;
    while (evbuffer_get_length(out)) {
        struct evbuffer_iovec v[DIRECT_IOV];
        struct iovec iov[DIRECT_IOV];
        int n = evbuffer_peek(out, -1, NULL, v, DIRECT_IOV);
        if (n > DIRECT_IOV) n = DIRECT_IOV;
        size_t want = 0;
        for (int i = 0; i < n; i++) {
            iov[i].iov_base = v[i].iov_base;
            iov[i].iov_len = v[i].iov_len;
            want += v[i].iov_len;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            event_cb(c->bev, BEV_EVENT_ERROR | BEV_EVENT_WRITING, c); /* as the bufferevent reports it */
            return;
        }
        /* the bufferevent freezes the start of its output so only it drains it: we do its job here */
        evbuffer_unfreeze(out, 1);
        int d = evbuffer_drain(out, (size_t)w);
        evbuffer_freeze(out, 1);
        if (d != 0) {
            gw_conn_close(c);
            return;
        }
        wrote += (size_t)w;
        if ((size_t)w < want) break; /* the socket is full */
    }
    if (evbuffer_get_length(out)) bufferevent_enable(c->bev, EV_WRITE);
    size_t low = 0;
    bufferevent_getwatermark(c->bev, EV_WRITE, &low, NULL);
    if (wrote && evbuffer_get_length(out) <= low) write_cb(c->bev, c);
}

void gw__conn_flush_queued(struct gw_loop *l)
{
    /* connections queued while these are written go round again in a later pass */
    struct gw_conn *c = l->flush_head;
    l->flush_head = NULL;
    while (c) {
        struct gw_conn *next = c->flush_next;
        c->flush_queued = false;
        c->flush_next = NULL;
        if (!c->closing && c->direct_write && !(bufferevent_get_enabled(c->bev) & EV_WRITE))
            conn_write_direct(c);
        c = next;
    }
}

void gw_conn_set_direct_write(struct gw_conn *c)
{
    if (c->tls || c->closing) return;
    c->direct_write = true;
    if (bufferevent_get_enabled(c->bev) & EV_WRITE) bufferevent_disable(c->bev, EV_WRITE);
    if (gw_conn_output_len(c)) flush_enqueue(c);
}

/* Output progress (bytes written to the socket) for send_timeout and backpressure; new output on a
 * direct-write connection queues it for the loop's flush event. */
static void output_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    struct gw_conn *c = arg;
    if (info->n_deleted) c->last_progress_ns = mm_now_ns();
    if (info->n_added && c->direct_write && !(bufferevent_get_enabled(c->bev) & EV_WRITE)) flush_enqueue(c);
}

/* ---- accept ---- */

static void format_remote(const struct sockaddr *sa, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        snprintf(buf, size, "[%s]:%u", host, ntohs(a->sin6_port));
    } else if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        snprintf(buf, size, "%s:%u", host, ntohs(a->sin_port));
    } else {
        snprintf(buf, size, "unknown");
    }
}

void gw_conn_accept(struct gw_loop *l, int fd, const struct sockaddr *sa, int salen, bool tls)
{
    const struct gw_config *conf = gw_loop_config(l);
    struct gw_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return;
    }
    c->loop = l;
    c->fd = fd;
    c->tls = tls;
    c->h2_allowed = conf->http.http2;
    format_remote(sa, c->remote, sizeof c->remote);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    evutil_make_socket_nonblocking(fd);
    if (tls) {
        SSL *ssl = l->site->ssl_ctx ? SSL_new(l->site->ssl_ctx) : NULL;
        if (ssl)
            c->bev = bufferevent_openssl_socket_new(l->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                    BEV_OPT_CLOSE_ON_FREE);
        if (!c->bev && ssl) SSL_free(ssl);
        if (c->bev) bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
        c->state = GW_CONN_TLS_HANDSHAKE;
    } else {
        c->bev = bufferevent_socket_new(l->base, fd, BEV_OPT_CLOSE_ON_FREE);
        c->state = GW_CONN_DETECT;
    }
    c->timer = evtimer_new(l->base, timer_cb, c);
    if (!c->bev || !c->timer) {
        if (c->bev)
            bufferevent_free(c->bev);
        else
            close(fd);
        if (c->timer) event_free(c->timer);
        free(c);
        return;
    }
    c->next = l->conns;
    if (l->conns) l->conns->prev = c;
    l->conns = c;
    l->n_conns++;
    atomic_fetch_add(&l->http->conns_open, 1);
    atomic_fetch_add(&l->http->conns_total, 1);
    if (tls) atomic_fetch_add(&l->http->conns_tls, 1);
    gw__loop_conn_opened(l);

    size_t high = (size_t)conf->http.client_max_header_size * 2;
    if (high < READ_HIGH_MIN) high = READ_HIGH_MIN;
    bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
    bufferevent_setwatermark(c->bev, EV_READ, 0, high);
    evbuffer_add_cb(bufferevent_get_output(c->bev), output_cb, c);
    c->last_progress_ns = mm_now_ns();
    gw_conn_set_deadline(c, c->last_progress_ns + conf->http.client_header_timeout_ms * 1000000);
    if (!tls && !c->h2_allowed) {
        start_proto(c, false);
        if (c->closing) return;
    }
    /* plain sockets enable EV_WRITE only when a protocol needs it: enabling it adds the write event at once
     */
    bufferevent_enable(c->bev, tls ? EV_READ | EV_WRITE : EV_READ);
}

void gw_conn_drain_all(struct gw_loop *l)
{
    for (struct gw_conn *c = l->conns; c; c = c->next) {
        if (c->closing) continue;
        if (c->state == GW_CONN_PROTO && c->proto->drain)
            c->proto->drain(c);
        else if (c->state != GW_CONN_LINGER && !c->close_after_flush)
            gw_conn_close(c);
    }
}

void gw_conn_close_all(struct gw_loop *l)
{
    for (struct gw_conn *c = l->conns; c; c = c->next) gw_conn_close(c);
}
