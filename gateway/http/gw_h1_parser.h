/* HTTP/1.1 request parsing (RFC 9112): the request head and chunked bodies.
 *
 * Pure functions over bytes, no I/O and no allocation, so they can be fuzzed and unit-tested alone. The
 * head parser is called again with more bytes until the blank line arrives (the connection bounds the
 * buffer by max_head); results point into the caller's buffer. Strict where request smuggling lives
 * (Transfer-Encoding with Content-Length, duplicate or malformed Content-Length, obs-fold, whitespace before
 * the colon, bare CR), tolerant where RFC 9112 allows (leading blank lines, bare LF line ends). */
#ifndef GW_H1_PARSER_H
#define GW_H1_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gw_h1_result {
    GW_H1_DONE = 0,       /* a complete head / body */
    GW_H1_INCOMPLETE = 1, /* need more bytes */
    GW_H1_ERROR = -1      /* malformed: see status and error */
};

struct gw_h1_field {
    const char *name;
    size_t name_len;
    const char *value; /* surrounding whitespace removed */
    size_t value_len;
};

struct gw_h1_head {
    const char *method;
    size_t method_len;
    const char *target;
    size_t target_len;
    int version;                /* 10 or 11 */
    struct gw_h1_field *fields; /* the caller's array (max_headers entries) */
    uint32_t n_fields;
    size_t head_len;        /* bytes of the head including leading blank lines and the final blank line */
    int64_t content_length; /* -1 when absent */
    bool chunked;           /* Transfer-Encoding: chunked */
    bool keep_alive;        /* after version defaults and Connection */
    bool expect_continue;   /* Expect: 100-continue */
    const char *host;       /* the Host value (not NUL-terminated), NULL if absent */
    size_t host_len;
    /* on GW_H1_ERROR */
    int status;        /* 400, 414, 431, 501 or 505 */
    const char *error; /* a short static reason */
};

struct gw_h1_limits {
    size_t max_head;      /* request line + headers */
    uint32_t max_headers; /* entries in the fields array */
};

/** Parse a request head from buf[0..len). `fields` has lim->max_headers entries. Returns GW_H1_DONE (the
 * head is head->head_len bytes), GW_H1_INCOMPLETE, or GW_H1_ERROR (head->status, head->error). */
int gw_h1_parse_head(const char *buf, size_t len, const struct gw_h1_limits *lim, struct gw_h1_field *fields,
                     struct gw_h1_head *head);

/** Incremental chunked-body decoder state; zero it (or gw_h1_chunked_init) before the first call. */
struct gw_h1_chunked {
    int state;
    uint64_t remaining; /* data bytes left in the current chunk */
    uint32_t size_digits;
    uint32_t line_bytes; /* extension / trailer bytes on the current line */
    uint32_t trailer_bytes;
    const char *error;
};

void gw_h1_chunked_init(struct gw_h1_chunked *c);

/** Receives decoded body bytes; return 0 to go on, negative to stop (the value is returned). */
typedef int (*gw_h1_data_fn)(void *ud, const char *data, size_t len);

/** Decode in[0..len). *consumed is set to the bytes used (bytes after the body stay for the next request).
 * Returns GW_H1_DONE once the last chunk and trailers are read, GW_H1_INCOMPLETE when all input was used,
 * GW_H1_ERROR (c->error) on malformed input, or on_data's negative return. */
int gw_h1_chunked_parse(struct gw_h1_chunked *c, const char *in, size_t len, size_t *consumed,
                        gw_h1_data_fn on_data, void *ud);

#endif
