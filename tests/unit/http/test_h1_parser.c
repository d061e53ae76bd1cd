/* HTTP/1.1 head parser and chunked decoder: valid forms, every error class, limits, pipelining, and
 * incremental delivery at every split point. */
#include <stdlib.h>
#include <string.h>

#include "gw_h1_parser.h"
#include "mmgw_test.h"

static struct gw_h1_field fields[64];
static const struct gw_h1_limits lim = {.max_head = 1024, .max_headers = 8};

static int parse(const char *s, struct gw_h1_head *h)
{
    return gw_h1_parse_head(s, strlen(s), &lim, fields, h);
}

static int field_is(const struct gw_h1_field *f, const char *name, const char *value)
{
    return f->name_len == strlen(name) && memcmp(f->name, name, f->name_len) == 0 &&
           f->value_len == strlen(value) && memcmp(f->value, value, f->value_len) == 0;
}

static void expect_error(const char *s, int status)
{
    struct gw_h1_head h;
    int rc = parse(s, &h);
    CHECK_MSG(rc == GW_H1_ERROR && h.status == status, "%s -> rc %d status %d (want %d)", s, rc, h.status,
              status);
}

static void test_valid(void)
{
    struct gw_h1_head h;
    const char *req =
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: example\r\nContent-Type:application/json\r\n"
        "X-Pad:   spaced value  \t\r\nContent-Length: 12\r\n\r\n{\"a\":\"bcd\"}!";
    CHECK_EQ_INT(parse(req, &h), GW_H1_DONE);
    CHECK(h.method_len == 4 && memcmp(h.method, "POST", 4) == 0);
    CHECK(h.target_len == 24 && memcmp(h.target, "/v1/chat/completions?x=1", 24) == 0);
    CHECK_EQ_INT(h.version, 11);
    CHECK_EQ_INT(h.n_fields, 4);
    CHECK(field_is(&h.fields[0], "Host", "example"));
    CHECK(field_is(&h.fields[1], "Content-Type", "application/json"));
    CHECK(field_is(&h.fields[2], "X-Pad", "spaced value"));
    CHECK_EQ_INT(h.content_length, 12);
    CHECK(!h.chunked && h.keep_alive && !h.expect_continue);
    CHECK(h.host_len == 7 && memcmp(h.host, "example", 7) == 0);
    CHECK_EQ_INT(h.head_len, strlen(req) - 12); /* the body is not part of the head */

    CHECK_EQ_INT(parse("GET / HTTP/1.0\r\n\r\n", &h), GW_H1_DONE); /* 1.0 needs no Host */
    CHECK(h.version == 10 && !h.keep_alive && h.content_length == -1);
    CHECK_EQ_INT(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h), GW_H1_DONE);
    CHECK(h.keep_alive);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n", &h), GW_H1_DONE);
    CHECK(!h.keep_alive);
    /* leading blank lines and bare LF line ends are tolerated (RFC 9112 2.2) */
    CHECK_EQ_INT(parse("\r\n\nGET /x HTTP/1.1\nHost: a\n\n", &h), GW_H1_DONE);
    CHECK(h.target_len == 2 && h.head_len == strlen("\r\n\nGET /x HTTP/1.1\nHost: a\n\n"));
    CHECK_EQ_INT(
        parse("PUT /u HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\nExpect: 100-Continue\r\n\r\n", &h),
        GW_H1_DONE);
    CHECK(h.chunked && h.expect_continue && h.content_length == -1);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", &h), GW_H1_DONE);
    CHECK_EQ_INT(h.content_length, 5);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\n", &h),
                 GW_H1_DONE);
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nHost: a\r\nEmpty:\r\n\r\n", &h), GW_H1_DONE);
    CHECK(field_is(&h.fields[1], "Empty", ""));
    CHECK_EQ_INT(parse("GET / HTTP/1.1\r\nHost: a\r\nUtf8: caf\xc3\xa9\r\n\r\n", &h),
                 GW_H1_DONE); /* obs-text */
    CHECK_EQ_INT(parse("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", &h), GW_H1_DONE);
    CHECK_EQ_INT(parse("GET http://a/b HTTP/1.1\r\nHost: a\r\n\r\n", &h), GW_H1_DONE);
}

static void test_errors(void)
{
    expect_error("GET\r\n\r\n", 400);
    expect_error(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400);
    expect_error("G@T / HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("GET / HTTP/1.x\r\nHost: a\r\n\r\n", 400);
    expect_error("GET / http/1.1\r\nHost: a\r\n\r\n", 400);
    expect_error("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505);
    expect_error("GET / HTTP/1.1\r\n\r\n", 400);                           /* no Host */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);     /* two Hosts */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400); /* space in the name */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nName : x\r\n\r\n", 400);    /* space before the colon */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\n: x\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n  folded\r\n\r\n", 400); /* obs-fold */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400);          /* bare CR */
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400);
    {
        static const char nul[] = "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00z\r\n\r\n";
        struct gw_h1_head h;
        CHECK(gw_h1_parse_head(nul, sizeof nul - 1, &lim, fields, &h) == GW_H1_ERROR && h.status == 400);
    }
    expect_error("GET / HTTP/1.1\rHost: a\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1x\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1234567890123456789\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400);
    expect_error("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n\r\n", 400);
    expect_error("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400);
}

static void test_limits(void)
{
    struct gw_h1_head h;
    /* a request line that fills max_head: 414; headers that do: 431; too many fields: 431 */
    char *big = malloc(4096);
    memset(big, 'a', 4096);
    memcpy(big, "GET /", 5);
    CHECK(gw_h1_parse_head(big, 2000, &lim, fields, &h) == GW_H1_ERROR && h.status == 414);
    CHECK(gw_h1_parse_head(big, 1000, &lim, fields, &h) == GW_H1_INCOMPLETE);
    const char *pre = "GET / HTTP/1.1\r\nHost: a\r\nX: ";
    memcpy(big, pre, strlen(pre));
    CHECK(gw_h1_parse_head(big, 2000, &lim, fields, &h) == GW_H1_ERROR && h.status == 431);
    char many[1024] = "GET / HTTP/1.1\r\n";
    for (int i = 0; i < 9; i++) strcat(many, "A: b\r\n");
    strcat(many, "\r\n");
    expect_error(many, 431);
    /* a head ending exactly at max_head is accepted */
    struct gw_h1_limits small = {.max_head = 30, .max_headers = 8};
    const char *exact = "GET / HTTP/1.1\r\nHost: ab\r\n\r\n"; /* 28 bytes */
    CHECK(gw_h1_parse_head(exact, strlen(exact), &small, fields, &h) == GW_H1_DONE);
    small.max_head = 27;
    CHECK(gw_h1_parse_head(exact, strlen(exact), &small, fields, &h) == GW_H1_ERROR && h.status == 431);
    free(big);
}

static void test_incremental_and_pipelined(void)
{
    const char *two =
        "GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok";
    size_t first_len = strlen("GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    struct gw_h1_head h;
    for (size_t n = 0; n < first_len; n++)
        CHECK_MSG(gw_h1_parse_head(two, n, &lim, fields, &h) == GW_H1_INCOMPLETE, "prefix %zu", n);
    CHECK(gw_h1_parse_head(two, first_len, &lim, fields, &h) == GW_H1_DONE && h.head_len == first_len);
    CHECK(gw_h1_parse_head(two, strlen(two), &lim, fields, &h) == GW_H1_DONE && h.head_len == first_len);
    const char *second = two + first_len;
    CHECK(gw_h1_parse_head(second, strlen(second), &lim, fields, &h) == GW_H1_DONE);
    CHECK(h.method_len == 4 && h.content_length == 2 && second[h.head_len] == 'o');
}

/* ---- chunked ---- */

struct sink {
    char buf[4096];
    size_t len;
    size_t cap; /* stop with -7 past this */
};

static int sink_fn(void *ud, const char *data, size_t len)
{
    struct sink *s = ud;
    if (s->cap && s->len + len > s->cap) return -7;
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

/* Decode in pieces of `step` bytes (0 = all at once); returns the final rc and sets *used. */
static int decode(const char *in, size_t len, size_t step, struct sink *s, size_t *used)
{
    struct gw_h1_chunked c;
    gw_h1_chunked_init(&c);
    memset(s, 0, sizeof *s);
    size_t off = 0;
    int rc = GW_H1_INCOMPLETE;
    while (off < len) {
        size_t n = step && len - off > step ? step : len - off;
        size_t u = 0;
        rc = gw_h1_chunked_parse(&c, in + off, n, &u, sink_fn, s);
        off += u;
        if (rc != GW_H1_INCOMPLETE) break;
        CHECK(u == n);
    }
    *used = off;
    return rc;
}

static void test_chunked(void)
{
    const char *body = "5\r\nhello\r\n1;name=val;x=\"q\"\r\n \r\n000005\r\nworld\r\nA "
                       "\r\n0123456789\r\n0\r\nTrailer-A: 1\r\n"
                       "Trailer-B: two\r\n\r\nNEXT";
    size_t body_len = strlen(body) - 4;
    struct sink s;
    size_t used;
    for (size_t step = 0; step <= body_len; step++) {
        int rc = decode(body, strlen(body), step, &s, &used);
        CHECK_MSG(rc == GW_H1_DONE && used == body_len, "step %zu rc %d used %zu", step, rc, used);
        CHECK_MSG(s.len == 21 && memcmp(s.buf, "hello world0123456789", 21) == 0, "step %zu data", step);
    }
    CHECK(decode("0\r\n\r\n", 5, 0, &s, &used) == GW_H1_DONE && s.len == 0 && used == 5);
    CHECK(decode("3\nabc\n0\n\n", 9, 0, &s, &used) == GW_H1_DONE && s.len == 3); /* bare LF tolerated */
    CHECK(decode("3\r\nab", 5, 0, &s, &used) == GW_H1_INCOMPLETE);
    static const char *const bad[] = {
        "\r\n",                  /* no size */
        "x\r\n",                 /* not hex */
        "3\r\nabcX\r\n",         /* data not followed by CRLF */
        "3\r\nabc\rX",           /* CR without LF */
        "3\rX",                  /* bare CR in the size line */
        "fffffffffffffffff\r\n", /* 17 hex digits */
        "3 x\r\n",               /* junk after the size */
        "3;a\x01\r\n",           /* control character in an extension */
        "0\r\n bad\r\n\r\n",     /* a trailer line starting with a space */
        "0\r\nX: a\x01\r\n\r\n", /* control character in a trailer */
        "0\r\n\rX",              /* bare CR after the last chunk */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = decode(bad[i], strlen(bad[i]), 0, &s, &used);
        CHECK_MSG(rc == GW_H1_ERROR, "bad chunked #%zu rc %d", i, rc);
    }
    /* the sink can stop decoding (body too large) */
    struct gw_h1_chunked c;
    gw_h1_chunked_init(&c);
    memset(&s, 0, sizeof s);
    s.cap = 4;
    CHECK(gw_h1_chunked_parse(&c, "5\r\nhello\r\n0\r\n\r\n", 15, &used, sink_fn, &s) == -7);
    /* an error is sticky */
    gw_h1_chunked_init(&c);
    CHECK(gw_h1_chunked_parse(&c, "z", 1, &used, NULL, NULL) == GW_H1_ERROR);
    CHECK(gw_h1_chunked_parse(&c, "0\r\n\r\n", 5, &used, NULL, NULL) == GW_H1_ERROR && c.error != NULL);
    /* a huge chunk size is carried across calls without buffering it */
    gw_h1_chunked_init(&c);
    CHECK(gw_h1_chunked_parse(&c, "ffffffff\r\n", 10, &used, NULL, NULL) == GW_H1_INCOMPLETE);
    CHECK(c.remaining == 0xffffffffull);
}

int main(void)
{
    test_valid();
    test_errors();
    test_limits();
    test_incremental_and_pipelined();
    test_chunked();
    return test_done();
}
