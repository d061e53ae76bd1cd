/* Targa (.tga) decoding, as PIL 9.4's TgaImagePlugin + convert("RGB") read it. TGA has no signature: the
 * caller tries it only when no other format (ours or libvips') recognised the bytes, as PIL tries its TGA
 * plugin after the formats that have one.
 *
 * What PIL accepts, and so what we accept: colour-map type 0 or 1, non-zero size, depth 1/8/16/24/32;
 * image types 1/9 (colour-mapped, 8-bit indices), 2/10 (BGR 5-5-5, BGR, BGRA) and 3/11 (1-bit raw, 8-bit
 * grey, 16-bit grey + alpha); a colour map of 16 (BGR 5-5-5), 24 or 32-bit entries, placed at its first
 * index (earlier entries black, later ones PIL's grey ramp; a map of another depth is neither read nor
 * skipped, as in PIL), which also colours 8-bit grey images (PIL turns them into P) and is an error on
 * other pixel types; bottom-up or top-down rows, mirrored when the descriptor says right-to-left.
 * RLE follows PIL's decoder: a run may not cross the end of a row (an error), a literal packet may (its
 * pixels continue on the next rows). 5-bit channels expand as v * 255 / 31, truncated. Too little data is
 * an error ("image file is truncated"). */
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

enum tga_pix { TGA_INDEX, TGA_BITS, TGA_GREY, TGA_GREY_ALPHA, TGA_BGR15, TGA_BGR, TGA_BGRA };

struct gw_tga_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;
    enum tga_pix pix;
    uint32_t depth; /* bits per stored pixel */
    int rle, top_down, mirror;
    int mapped;    /* grey samples are colour-map indices (PIL turns L into P when the file has a map) */
    size_t offset; /* pixel data (may be past the end: then the data is missing) */
    uint8_t pal[256][3];
};

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint8_t c5(uint32_t v)
{
    return (uint8_t)((v & 31) * 255 / 31);
}

/* PIL's header checks (its SyntaxErrors) and the (type, depth) pairs it has a raw mode for. */
static int header_ok(const uint8_t *d, size_t len, enum tga_pix *pix)
{
    if (len < 18) return 0;
    const uint32_t type = d[2], depth = d[16];
    if (d[1] > 1 || le16(d + 12) == 0 || le16(d + 14) == 0) return 0;
    if (depth != 1 && depth != 8 && depth != 16 && depth != 24 && depth != 32) return 0;
    if (type != 1 && type != 9 && type != 2 && type != 10 && type != 3 && type != 11) return 0;
    switch ((type & 7) << 8 | depth) {
    case 1 << 8 | 8:
        *pix = TGA_INDEX;
        return 1;
    case 3 << 8 | 1:
        *pix = TGA_BITS;
        return 1;
    case 3 << 8 | 8:
        *pix = TGA_GREY;
        return 1;
    case 3 << 8 | 16:
        *pix = TGA_GREY_ALPHA;
        return 1;
    case 2 << 8 | 16:
        *pix = TGA_BGR15;
        return 1;
    case 2 << 8 | 24:
        *pix = TGA_BGR;
        return 1;
    case 2 << 8 | 32:
        *pix = TGA_BGRA;
        return 1;
    }
    return 0;
}

int gw_tga_sniff(const uint8_t *data, size_t len)
{
    enum tga_pix pix;
    return header_ok(data, len, &pix);
}

int32_t gw_tga_open(const uint8_t *data, size_t len, const char *label, struct gw_tga_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    enum tga_pix pix;
    if (!header_ok(data, len, &pix))
        return mm_err_set(err, MM_FORMAT, "%s: not a TGA image PIL reads", label);
    struct gw_tga_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    s->pix = pix;
    s->depth = data[16];
    s->rle = (data[2] & 8) != 0;
    s->width = le16(data + 12);
    s->height = le16(data + 14);
    s->top_down = (data[17] & 0x20) != 0;
    s->mirror = (data[17] & 0x10) != 0;
    size_t pos = 18 + (size_t)data[0];
    for (uint32_t i = 0; i < 256; i++) s->pal[i][0] = s->pal[i][1] = s->pal[i][2] = (uint8_t)i;
    if (data[1]) {
        const uint32_t start = le16(data + 3), n = le16(data + 5), mapdepth = data[7];
        const size_t esize = mapdepth == 16 ? 2 : mapdepth == 24 ? 3 : mapdepth == 32 ? 4 : 0;
        /* PIL applies a map it read to the image when loading: a grey image becomes colour-mapped (P/PA), a
         * 32-bit map ("BGRA" palette) or a map on a 1-bit or colour image is an error there */
        if (esize == 4 || (esize && pix != TGA_INDEX && pix != TGA_GREY && pix != TGA_GREY_ALPHA)) {
            const uint32_t depth = s->depth;
            free(s);
            return mm_err_set(err, MM_UNSUPPORTED, "%s: TGA colour map of %u-bit entries on %u-bit pixels",
                              label, mapdepth, depth);
        }
        if (esize) s->mapped = 1;
        if (esize) {
            if (start + n > 256) {
                free(s);
                return mm_err_set(err, MM_FORMAT, "%s: TGA colour map of %u entries", label, start + n);
            }
            /* PIL puts `start` black entries first; what the file lacks keeps the grey ramp */
            size_t have = pos < len ? (len - pos) / esize : 0;
            for (uint32_t i = 0; i < start; i++) s->pal[i][0] = s->pal[i][1] = s->pal[i][2] = 0;
            for (uint32_t i = 0; i < n && i < have; i++) {
                const uint8_t *e = data + pos + (size_t)i * esize;
                uint8_t *p = s->pal[start + i];
                if (esize == 2) {
                    uint32_t v = le16(e);
                    p[0] = c5(v >> 10), p[1] = c5(v >> 5), p[2] = c5(v);
                } else {
                    p[0] = e[2], p[1] = e[1], p[2] = e[0];
                }
            }
            pos += (size_t)n * esize;
        }
    }
    s->offset = pos;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
}

/* One stored row (PIL's raw bytes for the mode) to RGB. */
static void row_to_rgb(const struct gw_tga_src *s, const uint8_t *p, uint8_t *rgb)
{
    const uint32_t w = s->width;
    for (uint32_t x = 0; x < w; x++) {
        uint8_t *o = rgb + (size_t)(s->mirror ? w - 1 - x : x) * 3;
        switch (s->pix) {
        case TGA_INDEX:
            memcpy(o, s->pal[p[x]], 3);
            break;
        case TGA_BITS:
            o[0] = o[1] = o[2] = (p[x >> 3] >> (7 - (x & 7))) & 1 ? 255 : 0;
            break;
        case TGA_GREY:
        case TGA_GREY_ALPHA: {
            uint8_t g = p[s->pix == TGA_GREY ? x : (size_t)x * 2];
            if (s->mapped)
                memcpy(o, s->pal[g], 3);
            else
                o[0] = o[1] = o[2] = g;
            break;
        }
        case TGA_BGR15: {
            uint32_t v = le16(p + (size_t)x * 2);
            o[0] = c5(v >> 10), o[1] = c5(v >> 5), o[2] = c5(v);
            break;
        }
        case TGA_BGR:
        case TGA_BGRA: {
            const uint8_t *q = p + (size_t)x * (s->pix == TGA_BGR ? 3 : 4);
            o[0] = q[2], o[1] = q[1], o[2] = q[0];
            break;
        }
        }
    }
}

/* Rows arrive in file order; the sink wants them top to bottom, so bottom-up images are collected first. */
struct rows {
    const struct gw_tga_src *s;
    const struct gw_row_sink *sink;
    uint8_t *rgb;  /* one row, or the whole image when bottom-up */
    uint32_t done; /* rows stored */
};

static int32_t put_row(struct rows *r, const uint8_t *stored, struct mm_err *err)
{
    const struct gw_tga_src *s = r->s;
    const size_t stride = (size_t)s->width * 3;
    if (s->top_down) {
        row_to_rgb(s, stored, r->rgb);
        r->done++;
        return r->sink->row(r->sink->ctx, r->rgb, err);
    }
    row_to_rgb(s, stored, r->rgb + (size_t)(s->height - 1 - r->done) * stride);
    if (++r->done < s->height) return MM_OK;
    for (uint32_t y = 0; y < s->height; y++) {
        int32_t rc = r->sink->row(r->sink->ctx, r->rgb + (size_t)y * stride, err);
        if (rc) return rc;
    }
    return MM_OK;
}

static int32_t truncated(const struct gw_tga_src *s, uint32_t row, struct mm_err *err)
{
    return mm_err_set(err, MM_FORMAT, "%s: TGA pixel data ends at row %u of %u", s->label, row, s->height);
}

int32_t gw_tga_decode(struct gw_tga_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const size_t stride = ((size_t)s->depth * s->width + 7) / 8, rgb_stride = (size_t)s->width * 3;
    const size_t pixel = s->depth / 8; /* PIL's RLE pixel size: 0 for 1-bit, which never decodes */
    if (s->rle && pixel == 0)
        return mm_err_set(err, MM_FORMAT, "%s: 1-bit RLE TGA (PIL cannot decode it)", s->label);
    const size_t rows_kept = s->top_down ? 1 : s->height;
    uint8_t *rgb = gw_aligned_alloc(rgb_stride * rows_kept + GW_ROW_SLACK);
    uint8_t *line = s->rle ? malloc(stride) : NULL;
    if (!rgb || (s->rle && !line)) {
        gw_aligned_free(rgb);
        free(line);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for a %ux%u TGA", s->label, s->width, s->height);
    }
    memset(rgb + rgb_stride * rows_kept, 0, GW_ROW_SLACK);
    struct rows r = {s, sink, rgb, 0};
    int32_t rc = sink->begin(sink->ctx, s->width, s->height, err);
    const uint8_t *p = s->offset < s->len ? s->data + s->offset : s->data + s->len;
    size_t avail = s->offset < s->len ? s->len - s->offset : 0;
    if (!rc && !s->rle) {
        for (uint32_t y = 0; y < s->height && !rc; y++, p += stride, avail -= stride)
            rc = avail < stride ? truncated(s, y, err) : put_row(&r, p, err);
    } else if (!rc) {
        size_t x = 0;
        while (!rc && r.done < s->height) {
            if (avail < 1) {
                rc = truncated(s, r.done, err);
                break;
            }
            size_t n = pixel * (size_t)((p[0] & 0x7F) + 1);
            if (p[0] & 0x80) {
                if (avail < 1 + pixel) {
                    rc = truncated(s, r.done, err);
                    break;
                }
                if (x + n > stride) {
                    rc = mm_err_set(err, MM_FORMAT, "%s: TGA RLE run crosses the end of row %u", s->label,
                                    r.done);
                    break;
                }
                for (size_t i = 0; i < n; i += pixel) memcpy(line + x + i, p + 1, pixel);
                p += 1 + pixel, avail -= 1 + pixel;
                x += n;
                if (x == stride) {
                    rc = put_row(&r, line, err);
                    x = 0;
                }
            } else {
                if (avail < 1 + n) {
                    rc = truncated(s, r.done, err);
                    break;
                }
                const uint8_t *src = p + 1;
                p += 1 + n, avail -= 1 + n;
                while (n && !rc && r.done < s->height) { /* a literal continues on the next rows */
                    size_t k = stride - x < n ? stride - x : n;
                    memcpy(line + x, src, k);
                    src += k, n -= k, x += k;
                    if (x == stride) {
                        rc = put_row(&r, line, err);
                        x = 0;
                    }
                }
            }
        }
    }
    gw_aligned_free(rgb);
    free(line);
    return rc;
}

void gw_tga_close(struct gw_tga_src *s)
{
    free(s);
}
