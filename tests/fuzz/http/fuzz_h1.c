/* libFuzzer target: the HTTP/1.1 head parser and the chunked decoder. Besides "no crash, no UB" it checks
 * invariants: results stay inside the input, and decoding a chunked body in one call or byte by byte gives
 * the same bytes and the same verdict. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_h1_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct acc {
    char *buf;
    size_t len, cap;
};

static int acc_fn(void *ud, const char *d, size_t n)
{
    struct acc *a = ud;
    if (a->len + n > a->cap) return -9; /* a bounded body, like the server's client_max_body_size */
    memcpy(a->buf + a->len, d, n);
    a->len += n;
    return 0;
}

static int decode(const char *in, size_t len, size_t step, struct acc *a, size_t *used)
{
    struct gw_h1_chunked c;
    gw_h1_chunked_init(&c);
    size_t off = 0;
    int rc = GW_H1_INCOMPLETE;
    while (off < len) {
        size_t n = step && len - off > step ? step : len - off;
        size_t u = 0;
        rc = gw_h1_chunked_parse(&c, in + off, n, &u, acc_fn, a);
        if (u > n) abort();
        off += u;
        if (rc != GW_H1_INCOMPLETE) break;
    }
    *used = off;
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gw_h1_field fields[32];
    const struct gw_h1_limits lim = {.max_head = 4096, .max_headers = 32};
    const char *buf = (const char *)data;
    struct gw_h1_head h;
    int rc = gw_h1_parse_head(buf, size, &lim, fields, &h);
    size_t body_at = 0;
    if (rc == GW_H1_DONE) {
        if (h.head_len > size || h.n_fields > lim.max_headers) abort();
        if (h.method < buf || h.method + h.method_len > buf + size) abort();
        for (uint32_t i = 0; i < h.n_fields; i++)
            if (h.fields[i].value < buf || h.fields[i].value + h.fields[i].value_len > buf + size) abort();
        body_at = h.head_len;
    } else if (rc == GW_H1_ERROR) {
        if (h.status < 400 || h.status > 505 || !h.error) abort();
    }
    /* the chunked decoder on whatever follows the head (or on the whole input) */
    const char *in = buf + body_at;
    size_t len = size - body_at;
    struct acc a1 = {malloc(len + 1), 0, len}, a2 = {malloc(len + 1), 0, len};
    size_t u1, u2;
    int r1 = decode(in, len, 0, &a1, &u1);
    int r2 = decode(in, len, 1, &a2, &u2);
    if (r1 != r2 || a1.len != a2.len || memcmp(a1.buf, a2.buf, a1.len) != 0) abort();
    if (r1 == GW_H1_DONE && u1 != u2) abort();
    free(a1.buf);
    free(a2.buf);
    return 0;
}
