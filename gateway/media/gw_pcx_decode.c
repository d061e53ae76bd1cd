/* PCX decoding, as PIL 9.4's PcxImagePlugin + PcxDecode.c + convert("RGB") read it.
 *
 * What PIL reads: manufacturer byte 10, version 0/2/3/5; 1-bit 1-plane (black/white), 1-bit 2 or 4 planes
 * (indices into the header's 16-entry palette), and with version 5: 8-bit 1 plane (grey, or colour-mapped
 * when the file ends with a 769-byte palette block that is not the grey ramp) and 8-bit 3 planes (RGB).
 * The size comes from the bounding box; the stride is PIL's own (width x bits, rounded up to bytes, plus one
 * when it is odd and differs from the header's). Pixel data is always RLE (a byte >= 0xC0 repeats the next
 * one); a run that goes past the end of a decoded line is PIL's overrun error, and PIL's quirk of moving
 * planes closer when the stride is padded is kept. Too little data is an error ("image file is truncated").
 * A bounding box PIL rejects makes it try its other formats; so does gw_image_open (MM_NOT_FOUND). */
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

enum pcx_pix { PCX_BITS, PCX_PLANES, PCX_GREY, PCX_PAL8, PCX_RGB };

struct gw_pcx_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;
    enum pcx_pix pix;
    uint32_t planes;
    size_t row_bytes; /* planes x stride: one decoded line */
    uint8_t pal[256][3];
};

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

int gw_pcx_sniff(const uint8_t *data, size_t len)
{
    return len >= 2 && data[0] == 10 && (data[1] == 0 || data[1] == 2 || data[1] == 3 || data[1] == 5);
}

int32_t gw_pcx_open(const uint8_t *data, size_t len, const char *label, struct gw_pcx_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (len < 128 || !gw_pcx_sniff(data, len))
        return mm_err_set(err, MM_NOT_FOUND, "%s: not a PCX image (short header)", label);
    const uint32_t x0 = le16(data + 4), y0 = le16(data + 6), x1 = le16(data + 8) + 1,
                   y1 = le16(data + 10) + 1;
    if (x1 <= x0 || y1 <= y0) return mm_err_set(err, MM_NOT_FOUND, "%s: bad PCX image size", label);
    const uint32_t version = data[1], bits = data[3], planes = data[65], given_stride = le16(data + 66);
    struct gw_pcx_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    s->width = x1 - x0;
    s->height = y1 - y0;
    s->planes = planes;
    for (uint32_t i = 0; i < 256; i++) s->pal[i][0] = s->pal[i][1] = s->pal[i][2] = (uint8_t)i;
    if (bits == 1 && planes == 1) {
        s->pix = PCX_BITS;
    } else if (bits == 1 && (planes == 2 || planes == 4)) {
        s->pix = PCX_PLANES;
        for (uint32_t i = 0; i < 16; i++) memcpy(s->pal[i], data + 16 + 3 * i, 3);
    } else if (version == 5 && bits == 8 && planes == 1) {
        s->pix = PCX_GREY;
        /* a trailing palette block that is not the grey ramp makes it colour-mapped */
        if (len >= 769 && data[len - 769] == 12) {
            const uint8_t *p = data + len - 768;
            for (uint32_t i = 0; i < 256 && s->pix == PCX_GREY; i++)
                if (p[3 * i] != i || p[3 * i + 1] != i || p[3 * i + 2] != i) s->pix = PCX_PAL8;
            if (s->pix == PCX_PAL8) memcpy(s->pal, p, 768);
        }
    } else if (version == 5 && bits == 8 && planes == 3) {
        s->pix = PCX_RGB;
    } else {
        free(s);
        return mm_err_set(err, MM_UNSUPPORTED,
                          "%s: PCX with %u bits and %u planes (version %u) PIL cannot read", label, bits,
                          planes, version);
    }
    size_t stride = ((size_t)s->width * bits + 7) / 8;
    if (given_stride != stride) stride += stride % 2;
    s->row_bytes = planes * stride;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
}

/* One decoded line to RGB: PIL's band move for padded strides, then its unpacker for the mode. */
static void line_to_rgb(const struct gw_pcx_src *s, uint8_t *b, uint8_t *rgb)
{
    const size_t w = s->width, bytes = s->row_bytes;
    if (bytes % w && bytes > w) {
        const size_t bands = bytes / w, stride = bytes / bands;
        for (size_t i = 1; i < bands; i++) memmove(b + i * w, b + i * stride, w);
    }
    const size_t sp = (w + 7) / 8; /* PIL's plane size for the P;2L / P;4L unpackers */
    for (size_t x = 0; x < w; x++) {
        uint8_t *o = rgb + x * 3;
        const size_t j = x >> 3;
        const uint8_t m = (uint8_t)(0x80 >> (x & 7));
        switch (s->pix) {
        case PCX_BITS:
            o[0] = o[1] = o[2] = b[j] & m ? 255 : 0;
            break;
        case PCX_PLANES: {
            uint32_t i = (b[j] & m ? 1u : 0) | (b[j + sp] & m ? 2u : 0);
            if (s->planes == 4) i |= (b[j + 2 * sp] & m ? 4u : 0) | (b[j + 3 * sp] & m ? 8u : 0);
            memcpy(o, s->pal[i], 3);
            break;
        }
        case PCX_GREY:
            o[0] = o[1] = o[2] = b[x];
            break;
        case PCX_PAL8:
            memcpy(o, s->pal[b[x]], 3);
            break;
        case PCX_RGB:
            o[0] = b[x], o[1] = b[w + x], o[2] = b[2 * w + x];
            break;
        }
    }
}

int32_t gw_pcx_decode(struct gw_pcx_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const size_t bytes = s->row_bytes, w = s->width;
    /* the unpackers read up to 4 planes of (w + 7) / 8 bytes or 3 x w bytes, whatever the stride says */
    const size_t cap = bytes + 4 * ((w + 7) / 8) + 3 * w + 16;
    uint8_t *line = calloc(1, cap);
    uint8_t *rgb = gw_aligned_alloc(w * 3 + GW_ROW_SLACK);
    if (!line || !rgb) {
        free(line);
        gw_aligned_free(rgb);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    }
    memset(rgb + w * 3, 0, GW_ROW_SLACK);
    int32_t rc = sink->begin(sink->ctx, s->width, s->height, err);
    const uint8_t *p = s->data + 128, *end = s->data + s->len;
    size_t x = 0;
    uint32_t y = 0;
    int overrun = 0;
    while (!rc && y < s->height) {
        if (p >= end) {
            rc =
                mm_err_set(err, MM_FORMAT, "%s: PCX pixel data ends at row %u of %u", s->label, y, s->height);
            break;
        }
        if ((p[0] & 0xC0) == 0xC0) {
            if (end - p < 2) {
                rc = mm_err_set(err, MM_FORMAT, "%s: PCX pixel data ends at row %u of %u", s->label, y,
                                s->height);
                break;
            }
            size_t n = p[0] & 0x3F;
            if (n > bytes - x) {
                overrun = 1; /* PIL fills the row, records the error and reports it at the end */
                n = bytes - x;
            }
            memset(line + x, p[1], n);
            x += n;
            p += 2;
        } else {
            line[x++] = *p++;
        }
        if (x >= bytes) {
            line_to_rgb(s, line, rgb);
            rc = sink->row(sink->ctx, rgb, err);
            x = 0;
            y++;
        }
    }
    if (!rc && overrun) rc = mm_err_set(err, MM_FORMAT, "%s: PCX run overflows a row", s->label);
    free(line);
    gw_aligned_free(rgb);
    return rc;
}

void gw_pcx_close(struct gw_pcx_src *s)
{
    free(s);
}
