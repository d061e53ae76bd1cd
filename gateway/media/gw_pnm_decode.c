/* PBM/PGM/PPM (P1-P6) decoding, as PIL 9.4's PpmImagePlugin + convert("RGB") read them. libvips 8.14 has a
 * PPM loader, but only from files and sources, and it scales samples its own way (16-bit kept, maxval
 * rescaled to the full range), so this is a small decoder of its own with PIL's exact rules:
 *
 * - Header: the magic is read up to the first whitespace; then width, height and (not for P1/P4) maxval,
 *   each a token of at most 10 characters, where `#` skips to the end of the line without ending the token;
 *   the one whitespace byte after the last token is the last header byte. 0 < maxval < 65536.
 * - Samples: P4 is packed bits, P5/P6 with maxval 255 are bytes, P5 with 65535 is 16-bit big-endian; every
 *   other maxval goes through PIL's "ppm" decoder: round(v / maxval * out_max) in double, half to even,
 *   capped at out_max, where out_max is 65535 for grey with maxval > 255 (PIL mode I) and 255 otherwise.
 *   Mode I then converts to RGB clipped at 255 (as 16-bit grey PNGs do).
 * - Plain formats (P1-P3): PIL's ppm_plain decoder. Comments run from `#` to CR/LF inclusive and join the
 *   text around them; P1 takes every non-blank character as one pixel ('1' black, '0' white) and refuses
 *   any other character in the blocks of 1 MiB it has read; P2/P3 take blank-separated numbers of at most
 *   10 characters, each at most maxval, and stop reading at the last sample needed.
 * - Too little pixel data is an error, as it is for PIL ("image file is truncated", "not enough image
 *   data"). Stricter than PIL: header numbers and plain samples must be plain digits (Python's int() also
 *   takes a sign and underscores). */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

#define PNM_TOKEN_MAX 10 /* PIL's header and sample token limit */
/* PIL's ImageFile.SAFEBLOCK: the plain decoder reads this much at a time */
#define PNM_PLAIN_BLOCK (1u << 20)
/* room before a block for the token carried over from the previous one */
#define PNM_PLAIN_CARRY 16

struct gw_pnm_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;
    int kind;        /* 1..6 for P1..P6 */
    uint32_t maxval; /* 1 for P1/P4 */
    size_t offset;   /* first byte after the header */
};

static int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int gw_pnm_sniff(const uint8_t *data, size_t len)
{
    return len >= 3 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6' && is_ws(data[2]);
}

/* PIL's _read_token: skip leading blanks, `#` comments up to CR/LF (they do not end a token), stop at a blank
 * after the token (consumed) or at EOF. Returns 0 and the value, or -1 with a reason. */
static int read_token(const uint8_t *d, size_t len, size_t *pos, uint64_t *value, const char **why)
{
    char tok[PNM_TOKEN_MAX + 1];
    size_t n = 0, p = *pos;
    while (n <= PNM_TOKEN_MAX) {
        if (p >= len) break;
        uint8_t c = d[p++];
        if (is_ws(c)) {
            if (!n) continue;
            break;
        }
        if (c == '#') {
            while (p < len && d[p] != '\r' && d[p] != '\n') p++;
            if (p < len) p++;
            continue;
        }
        tok[n++] = (char)c;
    }
    *pos = p;
    if (!n) return *why = "header ends early", -1;
    if (n > PNM_TOKEN_MAX) return *why = "header token longer than 10 characters", -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (tok[i] < '0' || tok[i] > '9') return *why = "header value is not a number", -1;
        v = v * 10 + (uint64_t)(tok[i] - '0');
    }
    *value = v;
    return 0;
}

int32_t gw_pnm_open(const uint8_t *data, size_t len, const char *label, struct gw_pnm_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (!gw_pnm_sniff(data, len))
        return mm_err_set(err, MM_FORMAT, "%s: not a PNM (PBM/PGM/PPM) image", label);
    const int kind = data[1] - '0';
    size_t pos = 3; /* the magic and the blank after it */
    uint64_t v[3] = {0, 0, 1};
    const int n_tokens = kind == 1 || kind == 4 ? 2 : 3;
    const char *why = NULL;
    for (int i = 0; i < n_tokens; i++)
        if (read_token(data, len, &pos, &v[i], &why))
            return mm_err_set(err, MM_FORMAT, "%s: bad P%d header: %s", label, kind, why);
    if (v[2] == 0 || v[2] > 65535)
        return mm_err_set(err, MM_FORMAT, "%s: P%d maxval %llu is not in 1..65535", label, kind,
                          (unsigned long long)v[2]);
    if (v[0] > UINT32_MAX || v[1] > UINT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "%s: P%d size %llux%llu is too large", label, kind,
                          (unsigned long long)v[0], (unsigned long long)v[1]);
    struct gw_pnm_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    s->kind = kind;
    s->width = (uint32_t)v[0];
    s->height = (uint32_t)v[1];
    s->maxval = (uint32_t)v[2];
    s->offset = pos;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
}

/* Sample value -> 8-bit output for every possible input (PIL's ppm decoder formula, then mode I's clip). */
static uint8_t *make_lut(uint32_t maxval, int mode_i, size_t *n)
{
    *n = maxval < 256 ? 256 : 65536;
    uint8_t *lut = malloc(*n);
    if (!lut) return NULL;
    const double out_max = mode_i ? 65535.0 : 255.0;
    for (size_t x = 0; x < *n; x++) {
        double r = rint((double)x / (double)maxval * out_max); /* Python round(): half to even */
        if (r > out_max) r = out_max;
        lut[x] = r > 255.0 ? 255 : (uint8_t)r;
    }
    return lut;
}

/* Binary rows: P4 bits, P5/P6 samples of 1 or 2 bytes mapped through the LUT (identity for 255). */
static int32_t decode_raw(struct gw_pnm_src *s, const uint8_t *lut, uint8_t *rgb,
                          const struct gw_row_sink *sink, struct mm_err *err)
{
    const uint32_t w = s->width, h = s->height;
    const size_t bands = s->kind == 6 ? 3 : 1;
    const size_t bps = s->kind == 4 ? 0 : s->maxval < 256 ? 1 : 2;
    const size_t stride = s->kind == 4 ? ((size_t)w + 7) / 8 : (size_t)w * bands * bps;
    const uint8_t *p = s->data + s->offset;
    size_t avail = s->len - s->offset;
    for (uint32_t y = 0; y < h; y++, p += stride, avail -= stride) {
        if (avail < stride)
            return mm_err_set(err, MM_FORMAT, "%s: P%d pixel data ends at row %u of %u", s->label, s->kind, y,
                              h);
        if (s->kind == 4) {
            for (uint32_t x = 0; x < w; x++) {
                uint8_t g = (p[x >> 3] >> (7 - (x & 7))) & 1 ? 0 : 255; /* 1 is black */
                rgb[x * 3] = rgb[x * 3 + 1] = rgb[x * 3 + 2] = g;
            }
        } else {
            for (uint32_t x = 0; x < w; x++)
                for (size_t b = 0; b < 3; b++) {
                    const uint8_t *q = p + ((size_t)x * bands + (bands == 3 ? b : 0)) * bps;
                    rgb[x * 3 + b] = lut[bps == 1 ? q[0] : (size_t)q[0] << 8 | q[1]];
                }
        }
        int32_t rc = sink->row(sink->ctx, rgb, err);
        if (rc) return rc;
    }
    return MM_OK;
}

/* The plain formats, ported step by step from PIL's PpmPlainDecoder because its quirks decide what a file
 * decodes to: the file is read in blocks of 1 MiB; comments are cut out of each block (a comment running
 * past the block's end continues into the next one); a number cut by the block's end is carried into the
 * next block, and the carried text is never cleared, so at the end of the file it is repeated until the
 * image is full (a plain file that ends without a newline after a partial last row decodes in PIL). */
struct plain {
    const uint8_t *d;
    size_t pos, len; /* the file and the next unread byte */
    uint8_t *buf;    /* PNM_PLAIN_CARRY bytes for the carried token, then the current block */
    size_t blen;     /* bytes of the block (after the carried token's slot) */
    uint8_t carry[PNM_PLAIN_CARRY];
    size_t carry_len; /* PIL's half_token; 0 = none */
    int comment_spans;
};

/* PIL's _find_comment_end: the lowest of the next LF and CR at or after start, with its quirk of taking the
 * larger one when one of them is at index 0. -1 when none. */
static ptrdiff_t comment_end(const uint8_t *b, size_t n, size_t start)
{
    ptrdiff_t a = -1, c = -1;
    for (size_t i = start; i < n && (a < 0 || c < 0); i++) {
        if (b[i] == '\n' && a < 0) a = (ptrdiff_t)i;
        if (b[i] == '\r' && c < 0) c = (ptrdiff_t)i;
    }
    return a * c > 0 ? (a < c ? a : c) : (a > c ? a : c);
}

/* Read the next block into p->buf + PNM_PLAIN_CARRY; returns its length (0 at the end of the file). */
static size_t plain_read(struct plain *p)
{
    size_t n = p->len - p->pos < PNM_PLAIN_BLOCK ? p->len - p->pos : PNM_PLAIN_BLOCK;
    memcpy(p->buf + PNM_PLAIN_CARRY, p->d + p->pos, n);
    p->pos += n;
    return p->blen = n;
}

/* PIL's _ignore_comments on the block in p->buf (may read further blocks while a comment continues). */
static void plain_ignore_comments(struct plain *p)
{
    uint8_t *b = p->buf + PNM_PLAIN_CARRY;
    if (p->comment_spans) {
        while (p->blen) {
            ptrdiff_t e = comment_end(b, p->blen, 0);
            if (e >= 0) {
                memmove(b, b + e + 1, p->blen - (size_t)e - 1);
                p->blen -= (size_t)e + 1;
                break;
            }
            plain_read(p);
        }
    }
    p->comment_spans = 0;
    /* one compacting pass (PIL cuts one comment at a time: the same text, without its quadratic cost) */
    size_t r = 0, w = 0;
    while (r < p->blen) {
        if (b[r] != '#') {
            b[w++] = b[r++];
            continue;
        }
        size_t e = r;
        while (e < p->blen && b[e] != '\n' && b[e] != '\r') e++;
        if (e == p->blen) {
            p->comment_spans = 1;
            break;
        }
        r = e + 1;
    }
    p->blen = w;
}

/* Output of the plain decoder: samples in file order, rows handed to the sink as they fill. */
struct plain_out {
    struct gw_pnm_src *s;
    const uint8_t *lut;
    uint8_t *rgb;
    const struct gw_row_sink *sink;
    uint64_t done, total; /* samples (P2: one per pixel; P3: three; P1: one) */
};

static int32_t plain_put(struct plain_out *o, uint8_t v, struct mm_err *err)
{
    const uint32_t w = o->s->width;
    const uint64_t per_row = (uint64_t)w * (o->s->kind == 3 ? 3 : 1);
    const size_t i = (size_t)(o->done % per_row);
    if (o->s->kind == 3)
        o->rgb[i] = v;
    else
        o->rgb[i * 3] = o->rgb[i * 3 + 1] = o->rgb[i * 3 + 2] = v;
    o->done++;
    return o->done % per_row ? MM_OK : o->sink->row(o->sink->ctx, o->rgb, err);
}

/* One PIL token: at most 10 bytes of digits (Python's int() would also take a sign or underscores). */
static int32_t plain_sample(struct plain_out *o, const uint8_t *t, size_t n, struct mm_err *err)
{
    struct gw_pnm_src *s = o->s;
    if (n > PNM_TOKEN_MAX)
        return mm_err_set(err, MM_FORMAT, "%s: P%d sample longer than 10 characters", s->label, s->kind);
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] < '0' || t[i] > '9')
            return mm_err_set(err, MM_FORMAT, "%s: P%d sample is not a number", s->label, s->kind);
        v = v * 10 + (uint64_t)(t[i] - '0');
    }
    if (v > s->maxval)
        return mm_err_set(err, MM_FORMAT, "%s: P%d sample %llu is over maxval %u", s->label, s->kind,
                          (unsigned long long)v, s->maxval);
    return plain_put(o, o->lut[v], err);
}

/* PIL's _decode_blocks (P2, P3). */
static int32_t plain_numbers(struct plain *p, struct plain_out *o, struct mm_err *err)
{
    while (o->done != o->total) {
        if (!plain_read(p)) {
            if (!p->carry_len) break;
            p->buf[PNM_PLAIN_CARRY] = ' '; /* flush the carried token */
            p->blen = 1;
        }
        plain_ignore_comments(p);
        uint8_t *b = p->buf + PNM_PLAIN_CARRY - p->carry_len; /* the carried token, then the block */
        memcpy(b, p->carry, p->carry_len);
        size_t n = p->blen + p->carry_len;
        size_t end = n; /* tokens before end are decoded */
        if (n && !is_ws(b[n - 1])) {
            /* the last token is carried into the next block */
            size_t t = n;
            while (t && !is_ws(b[t - 1])) t--;
            if (n - t > PNM_TOKEN_MAX)
                return mm_err_set(err, MM_FORMAT, "%s: P%d sample longer than 10 characters", o->s->label,
                                  o->s->kind);
            memcpy(p->carry, b + t, n - t);
            p->carry_len = n - t;
            end = t;
        }
        for (size_t i = 0; i < end && o->done != o->total;) {
            while (i < end && is_ws(b[i])) i++;
            size_t t = i;
            while (i < end && !is_ws(b[i])) i++;
            if (i > t) {
                int32_t rc = plain_sample(o, b + t, i - t, err);
                if (rc) return rc;
            }
        }
    }
    return MM_OK;
}

/* PIL's _decode_bitonal (P1): every non-blank character of each block read is a pixel, and must be 0 or 1. */
static int32_t plain_bits(struct plain *p, struct plain_out *o, struct mm_err *err)
{
    while (o->done != o->total) {
        if (!plain_read(p)) break;
        plain_ignore_comments(p);
        const uint8_t *b = p->buf + PNM_PLAIN_CARRY;
        for (size_t i = 0; i < p->blen; i++)
            if (!is_ws(b[i]) && b[i] != '0' && b[i] != '1')
                return mm_err_set(err, MM_FORMAT, "%s: P1 pixel byte 0x%02x is not '0' or '1'", o->s->label,
                                  (unsigned)b[i]);
        for (size_t i = 0; i < p->blen && o->done != o->total; i++) {
            if (is_ws(b[i])) continue;
            int32_t rc = plain_put(o, b[i] == '1' ? 0 : 255, err); /* 1 is black */
            if (rc) return rc;
        }
    }
    return MM_OK;
}

static int32_t decode_plain(struct gw_pnm_src *s, const uint8_t *lut, uint8_t *rgb,
                            const struct gw_row_sink *sink, struct mm_err *err)
{
    struct plain p = {.d = s->data, .pos = s->offset, .len = s->len};
    size_t body = s->len - s->offset;
    p.buf = malloc(PNM_PLAIN_CARRY + (body < PNM_PLAIN_BLOCK ? (body ? body : 1) : PNM_PLAIN_BLOCK));
    if (!p.buf) return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    struct plain_out o = {s, lut, rgb, sink, 0, (uint64_t)s->width * s->height * (s->kind == 3 ? 3 : 1)};
    int32_t rc = s->kind == 1 ? plain_bits(&p, &o, err) : plain_numbers(&p, &o, err);
    free(p.buf);
    if (!rc && o.done != o.total)
        rc = mm_err_set(err, MM_FORMAT, "%s: P%d pixel data ends at row %llu of %u", s->label, s->kind,
                        (unsigned long long)(o.done / ((uint64_t)s->width * (s->kind == 3 ? 3 : 1))),
                        s->height);
    return rc;
}

int32_t gw_pnm_decode(struct gw_pnm_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const int bitonal = s->kind == 1 || s->kind == 4;
    size_t lut_n = 0;
    uint8_t *lut =
        bitonal ? NULL : make_lut(s->maxval, (s->kind == 2 || s->kind == 5) && s->maxval > 255, &lut_n);
    const size_t rgb_stride = (size_t)s->width * 3;
    uint8_t *rgb = gw_aligned_alloc(rgb_stride + GW_ROW_SLACK);
    if (!rgb || (!bitonal && !lut)) {
        gw_aligned_free(rgb);
        free(lut);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    }
    memset(rgb + rgb_stride, 0, GW_ROW_SLACK);
    int32_t rc = sink->begin(sink->ctx, s->width, s->height, err);
    if (!rc) rc = s->kind <= 3 ? decode_plain(s, lut, rgb, sink, err) : decode_raw(s, lut, rgb, sink, err);
    gw_aligned_free(rgb);
    free(lut);
    return rc;
}

void gw_pnm_close(struct gw_pnm_src *s)
{
    free(s);
}
