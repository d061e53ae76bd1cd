/* Listening sockets: one SO_REUSEPORT socket per loop for every listen address, so the kernel spreads
 * connections between loops without a shared accept lock. */
#include "gw_listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint16_t addr_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
}

static int open_one(const struct sockaddr_storage *ss, socklen_t len, int backlog, const char *text,
                    struct mm_err *err)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        mm_err_set(err, MM_IO, "listen %s: socket: %s", text, strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) != 0) {
        mm_err_set(err, MM_IO, "listen %s: SO_REUSEPORT: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    /* [::]:port must not also take IPv4, or it would clash with a separate 0.0.0.0:port line */
    if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    if (bind(fd, (const struct sockaddr *)ss, len) != 0) {
        mm_err_set(err, MM_IO, "listen %s: bind: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    if (listen(fd, backlog) != 0) {
        mm_err_set(err, MM_IO, "listen %s: listen: %s", text, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* SO_REUSEPORT would let a second mmgw (same user) silently share the port with us, splitting the traffic:
 * first make sure nobody listens there, with a plain bind that such a listener would refuse. */
static int32_t probe_free(const struct sockaddr_storage *ss, socklen_t len, const char *text,
                          struct mm_err *err)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return mm_err_set(err, MM_IO, "listen %s: socket: %s", text, strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ss->ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int rc = bind(fd, (const struct sockaddr *)ss, len);
    int e = errno;
    close(fd);
    if (rc != 0) return mm_err_set(err, MM_IO, "listen %s: bind: %s", text, strerror(e));
    return MM_OK;
}

int32_t gw_listener_group_open(const struct gw_listen_conf *lc, uint32_t n, bool probe,
                               struct gw_listener_group **out, struct mm_err *err)
{
    struct gw_listener_group *g = calloc(1, sizeof *g);
    if (!g) return mm_err_set(err, MM_NOMEM, "out of memory");
    g->fds = malloc(n * sizeof *g->fds);
    g->text = strdup(lc->text);
    if (!g->fds || !g->text) {
        free(g->fds);
        free(g->text);
        free(g);
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    g->n = n;
    g->addr = lc->addr;
    g->addr_len = lc->addr_len;
    g->ssl = lc->ssl;
    struct sockaddr_storage bind_addr = lc->addr;
    if (probe && addr_port(&lc->addr) != 0) {
        int32_t rc = probe_free(&lc->addr, lc->addr_len, lc->text, err);
        if (rc) {
            g->n = 0;
            gw_listener_group_close(g);
            return rc;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        int fd = open_one(&bind_addr, lc->addr_len, lc->backlog, lc->text, err);
        if (fd < 0) {
            g->n = i;
            gw_listener_group_close(g);
            return err ? err->code : MM_IO;
        }
        g->fds[i] = fd;
        if (i == 0) {
            /* with port 0 the kernel picked a port: the other loops' sockets share it */
            struct sockaddr_storage got;
            socklen_t gl = sizeof got;
            if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0) g->port = addr_port(&got);
            set_port(&bind_addr, g->port);
        }
    }
    *out = g;
    return MM_OK;
}

void gw_listener_group_close(struct gw_listener_group *g)
{
    if (!g) return;
    for (uint32_t i = 0; i < g->n; i++)
        if (g->fds[i] >= 0) close(g->fds[i]);
    free(g->fds);
    free(g->text);
    free(g);
}

bool gw_listener_group_matches(const struct gw_listener_group *g, const struct gw_listen_conf *lc)
{
    return g->ssl == lc->ssl && g->addr_len == lc->addr_len && memcmp(&g->addr, &lc->addr, lc->addr_len) == 0;
}

void gw_listener_group_describe(const struct gw_listener_group *g, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (g->addr.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)&g->addr)->sin6_addr, host, sizeof host);
        snprintf(buf, size, "[%s]:%u", host, g->port);
    } else {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)&g->addr)->sin_addr, host, sizeof host);
        snprintf(buf, size, "%s:%u", host, g->port);
    }
}
