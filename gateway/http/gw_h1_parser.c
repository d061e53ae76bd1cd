#include "gw_h1_parser.h"

#include <string.h>

#include "mm_text.h"

/* RFC 9110 tchar */
static const uint8_t tchar[256] = {
    ['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1, ['-'] = 1,
    ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,  ['0'] = 1, ['1'] = 1, ['2'] = 1,
    ['3'] = 1, ['4'] = 1, ['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1,  ['9'] = 1, ['A'] = 1, ['B'] = 1,
    ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1, ['G'] = 1, ['H'] = 1,  ['I'] = 1, ['J'] = 1, ['K'] = 1,
    ['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1,  ['R'] = 1, ['S'] = 1, ['T'] = 1,
    ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1, ['Y'] = 1, ['Z'] = 1,  ['a'] = 1, ['b'] = 1, ['c'] = 1,
    ['d'] = 1, ['e'] = 1, ['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1,  ['j'] = 1, ['k'] = 1, ['l'] = 1,
    ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,  ['s'] = 1, ['t'] = 1, ['u'] = 1,
    ['v'] = 1, ['w'] = 1, ['x'] = 1, ['y'] = 1, ['z'] = 1,
};

static int fail(struct gw_h1_head *h, int status, const char *why)
{
    h->status = status;
    h->error = why;
    return GW_H1_ERROR;
}

static bool ieq(const char *a, size_t alen, const char *b)
{
    size_t bl = strlen(b);
    if (alen != bl) return false;
    for (size_t i = 0; i < alen; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c + 32);
        if (c != b[i]) return false;
    }
    return true;
}

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Field value characters: VCHAR, obs-text, SP, HTAB. */
static bool is_value_char(unsigned char c)
{
    return c >= 0x20 ? c != 0x7f : c == '\t';
}

/* Visit the comma-separated tokens of a list value. */
struct list_iter {
    const char *p, *end;
};

static bool list_next(struct list_iter *it, const char **tok, size_t *len)
{
    for (;;) {
        while (it->p < it->end && (is_ows(*it->p) || *it->p == ',')) it->p++;
        if (it->p >= it->end) return false;
        const char *s = it->p;
        while (it->p < it->end && *it->p != ',') it->p++;
        const char *e = it->p;
        while (e > s && is_ows(e[-1])) e--;
        if (e > s) {
            *tok = s;
            *len = (size_t)(e - s);
            return true;
        }
    }
}

/* Content-Length: 1*DIGIT, or a list of identical values. */
static int parse_content_length(const char *v, size_t n, int64_t *out)
{
    struct list_iter it = {v, v + n};
    const char *t;
    size_t tl;
    int64_t val = -1;
    bool any = false;
    while (list_next(&it, &t, &tl)) {
        int64_t x = 0;
        if (tl == 0 || tl > 18) return -1; /* 18 digits cannot overflow int64 */
        for (size_t i = 0; i < tl; i++) {
            if (t[i] < '0' || t[i] > '9') return -1;
            x = x * 10 + (t[i] - '0');
        }
        if (any && x != val) return -1;
        val = x;
        any = true;
    }
    if (!any) return -1;
    *out = val;
    return 0;
}

/* Find the end of the line starting at p: returns the index of LF, or -1. Bare CR is an error (-2). */
static long line_end(const char *buf, size_t start, size_t len)
{
    const char *lf = memchr(buf + start, '\n', len - start);
    if (!lf) {
        /* a CR that is not the last byte and not followed by LF is malformed */
        const char *cr = memchr(buf + start, '\r', len - start);
        if (cr && (size_t)(cr - buf) + 1 < len) return -2;
        return -1;
    }
    return (long)(lf - buf);
}

int gw_h1_parse_head(const char *buf, size_t len, const struct gw_h1_limits *lim, struct gw_h1_field *fields,
                     struct gw_h1_head *h)
{
    memset(h, 0, sizeof *h);
    h->fields = fields;
    h->content_length = -1;
    size_t limit = len < lim->max_head ? len : lim->max_head;
    size_t pos = 0;
    /* RFC 9112 2.2: ignore blank lines before the request line */
    while (pos < limit && (buf[pos] == '\r' || buf[pos] == '\n')) {
        if (buf[pos] == '\r' && pos + 1 < limit && buf[pos + 1] != '\n') return fail(h, 400, "bare CR");
        pos++;
    }
    long le = line_end(buf, pos, limit);
    if (le == -2) return fail(h, 400, "bare CR in request line");
    if (le < 0) {
        if (len >= lim->max_head) return fail(h, 414, "request line too long");
        return GW_H1_INCOMPLETE;
    }
    size_t eol = (size_t)le; /* index of LF */
    size_t lend = eol > pos && buf[eol - 1] == '\r' ? eol - 1 : eol;
    /* method SP target SP version */
    size_t p = pos;
    while (p < lend && tchar[(unsigned char)buf[p]]) p++;
    if (p == pos || p >= lend || buf[p] != ' ') return fail(h, 400, "malformed request line");
    h->method = buf + pos;
    h->method_len = p - pos;
    size_t ts = ++p;
    while (p < lend && (unsigned char)buf[p] > 0x20 && (unsigned char)buf[p] < 0x7f) p++;
    if (p == ts || p >= lend || buf[p] != ' ') return fail(h, 400, "malformed request target");
    h->target = buf + ts;
    h->target_len = p - ts;
    p++;
    size_t vl = lend - p;
    if (vl == 8 && memcmp(buf + p, "HTTP/1.1", 8) == 0) {
        h->version = 11;
    } else if (vl == 8 && memcmp(buf + p, "HTTP/1.0", 8) == 0) {
        h->version = 10;
    } else if (vl == 8 && memcmp(buf + p, "HTTP/", 5) == 0 && buf[p + 5] >= '0' && buf[p + 5] <= '9' &&
               buf[p + 6] == '.' && buf[p + 7] >= '0' && buf[p + 7] <= '9') {
        return fail(h, 505, "HTTP version not supported");
    } else {
        return fail(h, 400, "malformed HTTP version");
    }
    pos = eol + 1;
    bool te_seen = false, cl_seen = false, host_seen = false, conn_close = false, conn_keep = false;
    for (;;) {
        le = line_end(buf, pos, limit);
        if (le == -2) return fail(h, 400, "bare CR in header");
        if (le < 0) {
            if (len >= lim->max_head) return fail(h, 431, "request header fields too large");
            return GW_H1_INCOMPLETE;
        }
        eol = (size_t)le;
        lend = eol > pos && buf[eol - 1] == '\r' ? eol - 1 : eol;
        if (lend == pos) break; /* the blank line */
        if (is_ows(buf[pos])) return fail(h, 400, "obsolete line folding");
        size_t ns = pos;
        p = pos;
        while (p < lend && tchar[(unsigned char)buf[p]]) p++;
        if (p == ns || p >= lend || buf[p] != ':') return fail(h, 400, "malformed header field name");
        size_t nl = p - ns;
        p++;
        while (p < lend && is_ows(buf[p])) p++;
        size_t vs = p, ve = lend;
        while (ve > vs && is_ows(buf[ve - 1])) ve--;
        for (size_t i = vs; i < ve; i++)
            if (!is_value_char((unsigned char)buf[i]))
                return fail(h, 400, "invalid character in header value");
        if (h->n_fields == lim->max_headers) return fail(h, 431, "too many header fields");
        struct gw_h1_field *f = &fields[h->n_fields++];
        f->name = buf + ns;
        f->name_len = nl;
        f->value = buf + vs;
        f->value_len = ve - vs;
        const char *v = f->value;
        size_t vn = f->value_len;
        if (ieq(f->name, nl, "content-length")) {
            int64_t cl;
            if (parse_content_length(v, vn, &cl)) return fail(h, 400, "invalid content-length");
            if (cl_seen && cl != h->content_length) return fail(h, 400, "conflicting content-length");
            cl_seen = true;
            h->content_length = cl;
        } else if (ieq(f->name, nl, "transfer-encoding")) {
            struct list_iter it = {v, v + vn};
            const char *t;
            size_t tl;
            /* chunked must be the last coding and appear once; we implement no other coding */
            while (list_next(&it, &t, &tl)) {
                if (h->chunked) return fail(h, 400, "chunked is not the last transfer coding");
                if (ieq(t, tl, "chunked"))
                    h->chunked = true;
                else
                    return fail(h, 501, "unsupported transfer coding");
            }
            if (!h->chunked) return fail(h, 400, "empty transfer-encoding");
            te_seen = true;
        } else if (ieq(f->name, nl, "connection")) {
            struct list_iter it = {v, v + vn};
            const char *t;
            size_t tl;
            while (list_next(&it, &t, &tl)) {
                if (ieq(t, tl, "close")) conn_close = true;
                if (ieq(t, tl, "keep-alive")) conn_keep = true;
            }
        } else if (ieq(f->name, nl, "host")) {
            if (host_seen) return fail(h, 400, "duplicate host header");
            host_seen = true;
            h->host = v;
            h->host_len = vn;
        } else if (ieq(f->name, nl, "expect")) {
            if (ieq(v, vn, "100-continue")) h->expect_continue = true;
        }
        pos = eol + 1;
    }
    h->head_len = eol + 1;
    if (te_seen && cl_seen) return fail(h, 400, "both transfer-encoding and content-length");
    if (te_seen && h->version == 10) return fail(h, 400, "transfer-encoding in an HTTP/1.0 request");
    if (h->version == 11 && !host_seen) return fail(h, 400, "missing host header");
    h->keep_alive = h->version == 11 ? !conn_close : (conn_keep && !conn_close);
    return GW_H1_DONE;
}

/* ---- chunked ---- */

enum {
    CH_SIZE = 0, /* hex digits */
    CH_SIZE_WS,  /* whitespace after the size */
    CH_EXT,      /* ;extension up to the line end */
    CH_SIZE_LF,  /* after CR */
    CH_DATA,
    CH_DATA_CR,
    CH_DATA_LF,
    CH_TRAILER_START, /* start of a trailer line or the final blank line */
    CH_TRAILER,       /* inside a trailer line */
    CH_TRAILER_LF,    /* after CR of a trailer line */
    CH_FINAL_LF,      /* after CR of the final blank line */
    CH_DONE,
    CH_ERROR
};

#define CH_MAX_SIZE_DIGITS 16
#define CH_MAX_LINE 4096
#define CH_MAX_TRAILERS 16384

void gw_h1_chunked_init(struct gw_h1_chunked *c)
{
    memset(c, 0, sizeof *c);
}

static int ch_fail(struct gw_h1_chunked *c, const char *why)
{
    c->state = CH_ERROR;
    c->error = why;
    return GW_H1_ERROR;
}

/* after a size line: data, or the trailer section for the last chunk */
static void size_line_done(struct gw_h1_chunked *c)
{
    c->line_bytes = 0;
    c->state = c->remaining ? CH_DATA : CH_TRAILER_START;
}

int gw_h1_chunked_parse(struct gw_h1_chunked *c, const char *in, size_t len, size_t *consumed,
                        gw_h1_data_fn on_data, void *ud)
{
    size_t i = 0;
    *consumed = 0;
    if (c->state == CH_ERROR) return GW_H1_ERROR;
    while (i < len) {
        char ch = in[i];
        switch (c->state) {
        case CH_SIZE: {
            int hv = mm_hex_digit(ch);
            if (hv >= 0) {
                if (++c->size_digits > CH_MAX_SIZE_DIGITS - 1) return ch_fail(c, "chunk size too large");
                c->remaining = c->remaining * 16 + (uint64_t)hv;
                i++;
                break;
            }
            if (c->size_digits == 0) return ch_fail(c, "missing chunk size");
            if (is_ows(ch)) {
                c->state = CH_SIZE_WS;
            } else if (ch == ';') {
                c->state = CH_EXT;
            } else if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else if (ch == '\n') {
                size_line_done(c);
            } else {
                return ch_fail(c, "invalid chunk size");
            }
            i++;
            break;
        }
        case CH_SIZE_WS:
            if (ch == ';')
                c->state = CH_EXT;
            else if (ch == '\r')
                c->state = CH_SIZE_LF;
            else if (ch == '\n')
                size_line_done(c);
            else if (!is_ows(ch))
                return ch_fail(c, "invalid chunk size line");
            i++;
            break;
        case CH_EXT:
            /* extensions are ignored, but bounded and free of control characters */
            if (ch == '\r') {
                c->state = CH_SIZE_LF;
            } else if (ch == '\n') {
                size_line_done(c);
            } else {
                if (!is_value_char((unsigned char)ch)) return ch_fail(c, "invalid chunk extension");
                if (++c->line_bytes > CH_MAX_LINE) return ch_fail(c, "chunk extension too long");
            }
            i++;
            break;
        case CH_SIZE_LF:
            if (ch != '\n') return ch_fail(c, "bare CR in chunk size line");
            size_line_done(c);
            i++;
            break;
        case CH_DATA: {
            size_t avail = len - i;
            size_t n = c->remaining < avail ? (size_t)c->remaining : avail;
            if (on_data) {
                int rc = on_data(ud, in + i, n);
                if (rc < 0) {
                    *consumed = i;
                    return rc;
                }
            }
            i += n;
            c->remaining -= n;
            if (c->remaining == 0) c->state = CH_DATA_CR;
            break;
        }
        case CH_DATA_CR:
            if (ch == '\r')
                c->state = CH_DATA_LF;
            else if (ch == '\n')
                c->state = CH_SIZE, c->size_digits = 0;
            else
                return ch_fail(c, "missing CRLF after chunk data");
            i++;
            break;
        case CH_DATA_LF:
            if (ch != '\n') return ch_fail(c, "missing LF after chunk data");
            c->state = CH_SIZE;
            c->size_digits = 0;
            i++;
            break;
        case CH_TRAILER_START:
            if (ch == '\r') {
                c->state = CH_FINAL_LF;
            } else if (ch == '\n') {
                c->state = CH_DONE;
            } else {
                if (!tchar[(unsigned char)ch]) return ch_fail(c, "malformed trailer field");
                c->state = CH_TRAILER;
                c->line_bytes = 1;
                if (++c->trailer_bytes > CH_MAX_TRAILERS) return ch_fail(c, "trailers too large");
            }
            i++;
            break;
        case CH_TRAILER:
            if (ch == '\r') {
                c->state = CH_TRAILER_LF;
            } else if (ch == '\n') {
                c->state = CH_TRAILER_START;
            } else {
                if (!is_value_char((unsigned char)ch)) return ch_fail(c, "invalid character in trailer");
                if (++c->trailer_bytes > CH_MAX_TRAILERS) return ch_fail(c, "trailers too large");
            }
            i++;
            break;
        case CH_TRAILER_LF:
            if (ch != '\n') return ch_fail(c, "bare CR in trailer");
            c->state = CH_TRAILER_START;
            i++;
            break;
        case CH_FINAL_LF:
            if (ch != '\n') return ch_fail(c, "bare CR after the last chunk");
            c->state = CH_DONE;
            i++;
            break;
        default:
            break;
        }
        if (c->state == CH_DONE) {
            *consumed = i;
            return GW_H1_DONE;
        }
    }
    *consumed = i;
    return c->state == CH_DONE ? GW_H1_DONE : GW_H1_INCOMPLETE;
}
