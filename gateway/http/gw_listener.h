/* Listener groups: for one listen address, one bound SO_REUSEPORT socket per loop. Owned by the control
 * thread (gw_http); loops attach an evconnlistener to their own socket without owning it. */
#ifndef GW_LISTENER_H
#define GW_LISTENER_H

#include <stdbool.h>
#include <stdint.h>

#include "gw_config.h"

struct gw_listener_group {
    struct gw_listener_group *next;
    char *text;
    struct sockaddr_storage addr; /* as configured (port 0 stays 0, so reloads match it) */
    socklen_t addr_len;
    bool ssl;
    uint16_t port; /* the bound port */
    int *fds;      /* one per loop */
    uint32_t n;
    bool in_use; /* scratch for gw_http_apply */
};

/** Bind n sockets for lc. With probe, first check that no other socket listens there (SO_REUSEPORT would
 * otherwise let another process share the port unnoticed); skip it when our own old group holds the address.
 * Errors name the address ("listen 127.0.0.1:80: bind: Permission denied"). */
int32_t gw_listener_group_open(const struct gw_listen_conf *lc, uint32_t n, bool probe,
                               struct gw_listener_group **out, struct mm_err *err);
void gw_listener_group_close(struct gw_listener_group *g);
/** Same configured address and TLS flag (a reload keeps such a socket). */
bool gw_listener_group_matches(const struct gw_listener_group *g, const struct gw_listen_conf *lc);
/** "127.0.0.1:8080" with the bound port. */
void gw_listener_group_describe(const struct gw_listener_group *g, char *buf, size_t size);

#endif
