/* A tiny HTTP/1.1 server on a libevent loop, for the fetcher tests. It binds a loopback address only,
 * counts every accepted connection (so a test can prove a refused URL never reached it) and answers a
 * few fixed routes:
 *   /ok?n=N          200, N bytes of 'x' (Content-Length), Content-Type image/png
 *   /chunked?n=N     200, N bytes sent chunked (no Content-Length), in 16 KiB chunks as the peer reads
 *   /big             200 claiming Content-Length 1 GiB, then a few bytes
 *   /slow            200 headers, then one byte every 100 ms, forever
 *   /redirect?to=U   302 to U (U taken verbatim, not decoded)
 *   /loop            302 to /loop
 *   anything else    404 */
#ifndef HTTP_STUB_H
#define HTTP_STUB_H

#include <stdint.h>

struct event_base;
struct http_stub;

/** Listen on addr (dotted quad, loopback only) and port (0 = any); NULL on failure. */
struct http_stub *http_stub_start(struct event_base *base, const char *addr, uint16_t port);
void http_stub_stop(struct http_stub *s);
uint16_t http_stub_port(const struct http_stub *s);
/** Connections accepted and requests parsed so far. */
int http_stub_accepts(const struct http_stub *s);
int http_stub_requests(const struct http_stub *s);
/** Bytes of body written to sockets so far (all connections). */
uint64_t http_stub_body_bytes(const struct http_stub *s);

#endif
