/* The fetcher tests' HTTP stub server (see http_stub.h). */
#include "http_stub.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct http_stub {
    struct event_base *base;
    struct evconnlistener *listener;
    uint16_t port;
    int accepts;
    int requests;
    uint64_t body_bytes;
    struct conn *conns;
};

enum mode { MODE_NONE, MODE_CHUNKED, MODE_SLOW };

struct conn {
    struct http_stub *s;
    struct bufferevent *bev;
    struct event *tick;
    enum mode mode;
    uint64_t left; /* chunked bytes still to send */
    struct conn *prev, *next;
};

static void conn_free(struct conn *c)
{
    struct http_stub *s = c->s;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->tick) event_free(c->tick);
    bufferevent_free(c->bev);
    free(c);
}

static uint64_t query_n(const char *path)
{
    const char *q = strstr(path, "n=");
    return q ? strtoull(q + 2, NULL, 10) : 0;
}

static void send_filler(struct conn *c, struct evbuffer *out, uint64_t n)
{
    static char block[16384];
    if (!block[0]) memset(block, 'x', sizeof(block));
    while (n) {
        size_t k = n < sizeof(block) ? (size_t)n : sizeof(block);
        evbuffer_add(out, block, k);
        n -= k;
        c->s->body_bytes += k;
    }
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    evbuffer_add(bufferevent_get_output(c->bev), "x", 1);
    c->s->body_bytes++;
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    if (c->mode != MODE_CHUNKED || c->left == 0) return;
    struct evbuffer *out = bufferevent_get_output(bev);
    uint64_t k = c->left < 16384 ? c->left : 16384;
    evbuffer_add_printf(out, "%llx\r\n", (unsigned long long)k);
    send_filler(c, out, k);
    evbuffer_add(out, "\r\n", 2);
    c->left -= k;
    if (c->left == 0) evbuffer_add(out, "0\r\n\r\n", 5);
}

static void respond(struct conn *c, const char *path)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    if (strncmp(path, "/ok", 3) == 0) {
        uint64_t n = query_n(path);
        evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: %llu\r\n\r\n",
                            (unsigned long long)n);
        send_filler(c, out, n);
    } else if (strncmp(path, "/chunked", 8) == 0) {
        c->mode = MODE_CHUNKED;
        c->left = query_n(path);
        evbuffer_add_printf(
            out, "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nTransfer-Encoding: chunked\r\n\r\n");
        on_write(c->bev, c);
    } else if (strncmp(path, "/big", 4) == 0) {
        evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n");
        send_filler(c, out, 100);
    } else if (strncmp(path, "/slow", 5) == 0) {
        c->mode = MODE_SLOW;
        evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n");
        struct timeval tv = {0, 100000};
        c->tick = event_new(c->s->base, -1, EV_PERSIST, on_tick, c);
        if (c->tick) event_add(c->tick, &tv);
    } else if (strncmp(path, "/redirect?to=", 13) == 0) {
        evbuffer_add_printf(out, "HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n",
                            path + 13);
    } else if (strcmp(path, "/loop") == 0) {
        evbuffer_add_printf(out, "HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n");
    } else {
        evbuffer_add_printf(out, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found");
    }
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
        if (end.pos < 0) return;
        size_t n = (size_t)end.pos + 4;
        char *req = malloc(n + 1);
        if (!req) return;
        evbuffer_remove(in, req, n);
        req[n] = '\0';
        c->s->requests++;
        char path[2048] = "/";
        sscanf(req, "GET %2047s", path);
        free(req);
        respond(c, path);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) conn_free(arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len, void *arg)
{
    struct http_stub *s = arg;
    s->accepts++;
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    c->s = s;
    c->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    if (!c->bev) {
        free(c);
        evutil_closesocket(fd);
        return;
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

struct http_stub *http_stub_start(struct event_base *base, const char *addr, uint16_t port)
{
    struct sockaddr_in sin;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons(port);
    if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1) return NULL;
    if ((ntohl(sin.sin_addr.s_addr) >> 24) != 127) return NULL; /* loopback only, ever */
    struct http_stub *s = calloc(1, sizeof(*s));
    if (!s) return NULL;
    s->base = base;
    s->listener = evconnlistener_new_bind(base, on_accept, s, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                          (struct sockaddr *)&sin, sizeof(sin));
    if (!s->listener) {
        free(s);
        return NULL;
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    getsockname(evconnlistener_get_fd(s->listener), (struct sockaddr *)&bound, &blen);
    s->port = ntohs(bound.sin_port);
    return s;
}

void http_stub_stop(struct http_stub *s)
{
    if (!s) return;
    while (s->conns) conn_free(s->conns);
    evconnlistener_free(s->listener);
    free(s);
}

uint16_t http_stub_port(const struct http_stub *s)
{
    return s->port;
}

int http_stub_accepts(const struct http_stub *s)
{
    return s->accepts;
}

int http_stub_requests(const struct http_stub *s)
{
    return s->requests;
}

uint64_t http_stub_body_bytes(const struct http_stub *s)
{
    return s->body_bytes;
}
