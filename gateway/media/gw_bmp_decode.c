/* BMP decoding, as PIL's BmpImagePlugin + convert("RGB") read it (libvips 8.14 has no BMP loader of its own,
 * only ImageMagick's, which we do not accept).
 *
 * What PIL reads, and so what we read: the OS/2 1.x header (12 bytes) and the Windows headers of 40, 64,
 * 108 and 124 bytes; 1-, 4- and 8-bit palettes (indices past the palette read as the grey ramp), 16-bit
 * (5-5-5, or 5-6-5 through bit fields), 24-bit, 32-bit (the fourth byte ignored unless bit fields name it
 * alpha, which convert("RGB") drops anyway); the bit-field layouts PIL lists; RLE8 and RLE4 with PIL's
 * decoding rules (including its absolute-mode and alignment quirks); bottom-up and top-down rows.
 * Colour expansion of 5/6-bit fields is PIL's v * 255 / max, truncated. Pixel data that ends early is an
 * error (PIL: "image file is truncated"). */
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

enum bmp_pix {
    PIX_PAL,   /* 1/4/8-bit indices */
    PIX_BGR15, /* 16-bit 5-5-5 */
    PIX_BGR16, /* 16-bit 5-6-5 */
    PIX_BGR,   /* 24-bit B, G, R */
    PIX_BGRX,  /* 32-bit B, G, R, X/A */
    PIX_XBGR,  /* 32-bit X/A, B, G, R */
    PIX_RGBX,  /* 32-bit R, G, B, A */
};

struct gw_bmp_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;
    int top_down;
    uint32_t bits;
    uint32_t compression; /* 0 raw, 1 RLE8, 2 RLE4, 3 bit fields */
    enum bmp_pix pix;
    size_t offset; /* pixel data */
    size_t stride; /* raw rows */
    uint8_t pal[256][3];
};

int gw_bmp_sniff(const uint8_t *data, size_t len)
{
    return len >= 2 && data[0] == 'B' && data[1] == 'M';
}

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* PIL's supported bit-field layouts (BmpImagePlugin MASK_MODES). Returns 0 when accepted. */
static int bitfields_layout(uint32_t bits, const uint32_t m[4], enum bmp_pix *pix)
{
    if (bits == 32) {
        if (m[0] == 0xFF0000 && m[1] == 0xFF00 && m[2] == 0xFF && (m[3] == 0 || m[3] == 0xFF000000))
            *pix = PIX_BGRX;
        else if (m[0] == 0xFF000000 && m[1] == 0xFF0000 && m[2] == 0xFF00 && (m[3] == 0 || m[3] == 0xFF))
            *pix = PIX_XBGR;
        else if (m[0] == 0xFF && m[1] == 0xFF00 && m[2] == 0xFF0000 && m[3] == 0xFF000000)
            *pix = PIX_RGBX;
        else if (!m[0] && !m[1] && !m[2] && !m[3])
            *pix = PIX_BGRX;
        else
            return -1;
        return 0;
    }
    if (bits == 24 && m[0] == 0xFF0000 && m[1] == 0xFF00 && m[2] == 0xFF) {
        *pix = PIX_BGR;
        return 0;
    }
    if (bits == 16 && m[0] == 0xF800 && m[1] == 0x7E0 && m[2] == 0x1F) {
        *pix = PIX_BGR16;
        return 0;
    }
    if (bits == 16 && m[0] == 0x7C00 && m[1] == 0x3E0 && m[2] == 0x1F) {
        *pix = PIX_BGR15;
        return 0;
    }
    return -1;
}

int32_t gw_bmp_open(const uint8_t *data, size_t len, const char *label, struct gw_bmp_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (len < 18 || !gw_bmp_sniff(data, len)) return mm_err_set(err, MM_FORMAT, "%s: not a BMP", label);
    const uint32_t hsize = le32(data + 14);
    if (hsize != 12 && hsize != 40 && hsize != 64 && hsize != 108 && hsize != 124)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: unsupported BMP header size %u", label, hsize);
    if (len < 14 + (size_t)hsize) return mm_err_set(err, MM_FORMAT, "%s: truncated BMP header", label);
    struct gw_bmp_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    const uint8_t *h = data + 18; /* the header after its size field */
    size_t pos = 14 + (size_t)hsize;
    uint32_t colors = 0, pal_entry = 4;
    uint32_t masks[4] = {0, 0, 0, 0};
    if (hsize == 12) {
        s->width = le16(h);
        s->height = le16(h + 2);
        s->bits = le16(h + 6);
        pal_entry = 3;
    } else {
        s->width = le32(h);
        s->top_down = h[7] == 0xFF; /* a negative height */
        s->height = s->top_down ? (uint32_t)(0u - le32(h + 4)) : le32(h + 4);
        s->bits = le16(h + 10);
        s->compression = le32(h + 12);
        colors = le32(h + 28);
        if (s->compression == 3) {
            if (hsize >= 52) {
                for (int i = 0; i < 4; i++) masks[i] = le32(h + 36 + 4 * i);
            } else {
                /* a 40-byte header: three masks follow it (the fourth is reserved, not alpha) */
                if (len - pos < 12) goto truncated;
                for (int i = 0; i < 3; i++) masks[i] = le32(data + pos + 4 * (size_t)i);
                pos += 12;
            }
        }
    }
    if (colors == 0) colors = s->bits < 32 ? 1u << s->bits : 0;
    size_t offset = le32(data + 10);
    /* PIL's rule: an offset pointing right after the header means the palette still comes first */
    if (offset == 14 + (size_t)hsize && s->bits <= 8) offset += 4 * (size_t)colors;

    int32_t rc = MM_OK;
    switch (s->bits) {
    case 1:
    case 4:
    case 8:
        s->pix = PIX_PAL;
        break;
    case 16:
        s->pix = PIX_BGR15;
        break;
    case 24:
        s->pix = PIX_BGR;
        break;
    case 32:
        s->pix = PIX_BGRX;
        break;
    default:
        rc = mm_err_set(err, MM_UNSUPPORTED, "%s: unsupported BMP depth of %u bits", label, s->bits);
    }
    if (rc) {
        /* already refused */
    } else if (s->compression == 3) {
        if (bitfields_layout(s->bits, masks, &s->pix))
            rc = mm_err_set(err, MM_UNSUPPORTED, "%s: unsupported BMP bit-field layout", label);
    } else if ((s->compression == 1 && s->bits != 8) || (s->compression == 2 && s->bits != 4)) {
        rc = mm_err_set(err, MM_FORMAT, "%s: BMP RLE with %u bits per pixel", label, s->bits);
    } else if (s->compression > 3) {
        rc = mm_err_set(err, MM_UNSUPPORTED, "%s: unsupported BMP compression %u", label, s->compression);
    }
    if (rc) {
        free(s);
        return rc;
    }
    for (uint32_t i = 0; i < 256; i++) s->pal[i][0] = s->pal[i][1] = s->pal[i][2] = (uint8_t)i;
    if (s->pix == PIX_PAL) {
        if (colors == 0 || colors > 65536) {
            free(s);
            return mm_err_set(err, MM_FORMAT, "%s: BMP palette of %u colours", label, colors);
        }
        if (len - pos < (size_t)colors * pal_entry) goto truncated;
        for (uint32_t i = 0; i < colors && i < 256; i++) {
            const uint8_t *e = data + pos + (size_t)i * pal_entry;
            s->pal[i][0] = e[2], s->pal[i][1] = e[1], s->pal[i][2] = e[0];
        }
        pos += (size_t)colors * pal_entry;
    }
    s->offset = offset ? offset : pos;
    s->stride = (((uint64_t)s->width * s->bits + 31) >> 3) & ~(uint64_t)3;
    if (s->offset > len) goto truncated;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
truncated:
    free(s);
    return mm_err_set(err, MM_FORMAT, "%s: truncated BMP", label);
}

/* Raw pixels of one stored row to RGB. */
static void bmp_row_to_rgb(const struct gw_bmp_src *s, const uint8_t *p, uint8_t *rgb)
{
    const uint32_t w = s->width;
    switch (s->pix) {
    case PIX_PAL:
        for (uint32_t x = 0; x < w; x++) {
            uint32_t i;
            if (s->bits == 8)
                i = p[x];
            else if (s->bits == 4)
                i = (p[x >> 1] >> ((x & 1) ? 0 : 4)) & 15;
            else
                i = (p[x >> 3] >> (7 - (x & 7))) & 1;
            memcpy(rgb + (size_t)x * 3, s->pal[i], 3);
        }
        break;
    case PIX_BGR15:
    case PIX_BGR16:
        for (uint32_t x = 0; x < w; x++) {
            uint32_t v = le16(p + (size_t)x * 2);
            uint8_t *o = rgb + (size_t)x * 3;
            o[2] = (uint8_t)((v & 31) * 255 / 31);
            if (s->pix == PIX_BGR15) {
                o[1] = (uint8_t)(((v >> 5) & 31) * 255 / 31);
                o[0] = (uint8_t)(((v >> 10) & 31) * 255 / 31);
            } else {
                o[1] = (uint8_t)(((v >> 5) & 63) * 255 / 63);
                o[0] = (uint8_t)(((v >> 11) & 31) * 255 / 31);
            }
        }
        break;
    case PIX_BGR:
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *q = p + (size_t)x * 3;
            uint8_t *o = rgb + (size_t)x * 3;
            o[0] = q[2], o[1] = q[1], o[2] = q[0];
        }
        break;
    case PIX_BGRX:
    case PIX_XBGR:
    case PIX_RGBX:
        for (uint32_t x = 0; x < w; x++) {
            const uint8_t *q = p + (size_t)x * 4;
            uint8_t *o = rgb + (size_t)x * 3;
            if (s->pix == PIX_BGRX)
                o[0] = q[2], o[1] = q[1], o[2] = q[0];
            else if (s->pix == PIX_XBGR)
                o[0] = q[3], o[1] = q[2], o[2] = q[1];
            else
                o[0] = q[0], o[1] = q[1], o[2] = q[2];
        }
        break;
    }
}

/* PIL's BmpRleDecoder: indices appended in stored row order until the image is full or the bitmap ends.
 * Returns the number of indices produced (the rest stays 0). */
static size_t rle_decode(const struct gw_bmp_src *s, uint8_t *out, size_t total)
{
    const int rle4 = s->compression == 2;
    const uint32_t w = s->width;
    size_t n = 0, pos = s->offset, x = 0;
    while (n < total) {
        if (pos > s->len || s->len - pos < 2) break; /* pos can pass the end by the alignment byte */
        uint32_t count = s->data[pos], byte = s->data[pos + 1];
        pos += 2;
        if (count) { /* a run, clipped to the row */
            if (x + count > w) count = x < w ? (uint32_t)(w - x) : 0;
            for (uint32_t i = 0; i < count && n < total; i++)
                out[n++] = (uint8_t)(rle4 ? (i % 2 ? byte & 15 : byte >> 4) : byte);
            x += count;
        } else if (byte == 0) { /* end of line: pad the row */
            while (n % w && n < total) out[n++] = 0;
            x = 0;
        } else if (byte == 1) { /* end of bitmap */
            break;
        } else if (byte == 2) { /* delta: right, up */
            if (pos > s->len || s->len - pos < 2) break;
            size_t skip = s->data[pos] + (size_t)s->data[pos + 1] * w;
            pos += 2;
            n = n + skip < total ? n + skip : total;
            x = n % w;
        } else { /* absolute: `byte` literal pixels (RLE4: PIL reads byte/2 bytes, two pixels each) */
            size_t nbytes = rle4 ? byte / 2 : byte;
            size_t left = pos < s->len ? s->len - pos : 0, avail = left < nbytes ? left : nbytes;
            for (size_t i = 0; i < avail; i++) {
                uint8_t v = s->data[pos + i];
                if (rle4) {
                    if (n < total) out[n++] = v >> 4;
                    if (n < total) out[n++] = v & 15;
                } else if (n < total) {
                    out[n++] = v;
                }
            }
            pos += avail;
            if (avail < nbytes) break;
            x += byte;
            if (pos % 2) pos++; /* word alignment, counted from the start of the file as PIL does */
        }
    }
    return n;
}

int32_t gw_bmp_decode(struct gw_bmp_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const uint32_t w = s->width, h = s->height;
    const size_t rgb_stride = (size_t)w * 3;
    uint8_t *rgb = gw_aligned_alloc(rgb_stride + GW_ROW_SLACK);
    uint8_t *idx = NULL;
    if (!rgb) return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    memset(rgb + rgb_stride, 0, GW_ROW_SLACK);
    int32_t rc = MM_OK;
    const int rle = s->compression == 1 || s->compression == 2;
    if (rle) {
        const size_t total = (size_t)w * h;
        idx = calloc(total ? total : 1, 1);
        if (!idx) {
            gw_aligned_free(rgb);
            return mm_err_set(err, MM_NOMEM, "%s: out of memory for a %ux%u BMP", s->label, w, h);
        }
        /* a bitmap that ends before every pixel is set is refused, as PIL does ("not enough image data") */
        if (rle_decode(s, idx, total) < total) {
            free(idx);
            gw_aligned_free(rgb);
            return mm_err_set(err, MM_FORMAT, "%s: truncated BMP (RLE data ends early)", s->label);
        }
    } else {
        /* every stored row must be there: the last one up to its final pixel */
        const size_t last = ((uint64_t)w * s->bits + 7) / 8;
        if (h && (s->len - s->offset < last || (s->len - s->offset - last) / s->stride < (size_t)h - 1)) {
            gw_aligned_free(rgb);
            return mm_err_set(err, MM_FORMAT, "%s: truncated BMP (pixel data ends early)", s->label);
        }
    }
    rc = sink->begin(sink->ctx, w, h, err);
    for (uint32_t y = 0; y < h && !rc; y++) {
        const uint32_t stored = s->top_down ? y : h - 1 - y;
        if (rle) {
            const uint8_t *r = idx + (size_t)stored * w;
            for (uint32_t x = 0; x < w; x++) memcpy(rgb + (size_t)x * 3, s->pal[r[x]], 3);
        } else {
            bmp_row_to_rgb(s, s->data + s->offset + (size_t)stored * s->stride, rgb);
        }
        rc = sink->row(sink->ctx, rgb, err);
    }
    free(idx);
    gw_aligned_free(rgb);
    return rc;
}

void gw_bmp_close(struct gw_bmp_src *s)
{
    free(s);
}

size_t gw_bmp_pixel_offset(const struct gw_bmp_src *s)
{
    return s->offset;
}
