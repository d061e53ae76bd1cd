/* Windows icons (.ico), as PIL 9.4's IcoImagePlugin + convert("RGB") read them.
 *
 * - The entry: PIL sorts the directory by colour depth, then (stably) by width x height, and reverses, so it
 *   opens the largest entry, the deepest among equal sizes, and the last in the file among equal both.
 *   A width or height byte of 0 means 256; the depth is bpp, else ceil(log2(colours)), else 256.
 * - A PNG entry (PNG signature at its offset) is the PNG that starts there, decoded by the PNG path (only
 *   that: an entry is never opened as another container). Its own size wins over the directory's.
 * - Any other entry is a DIB: a BMP without the file header whose height counts the colour rows and the AND
 *   mask. It is decoded by gw_bmp_decode.c from a copy with a file header put in front and half the height
 *   (PIL keeps the first height/2 stored rows). The mask only becomes alpha, which convert("RGB") drops, but
 *   PIL still reads it and refuses the file when it is not all there: 32-bit entries (by the directory's
 *   bpp) need width x height x 4 bytes at the pixel data, others a 1-bit mask of 32-bit-padded rows that
 *   ends at the entry's offset + size. */
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"

struct gw_ico_src {
    struct gw_image_src *png; /* a PNG entry */
    struct gw_bmp_src *bmp;   /* a DIB entry, over dib */
    uint8_t *dib;             /* "BM" header + the entry's bytes to the end of the file */
};

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int gw_ico_sniff(const uint8_t *data, size_t len)
{
    return len >= 4 && data[0] == 0 && data[1] == 0 && data[2] == 1 && data[3] == 0;
}

static uint32_t color_depth(const uint8_t *e)
{
    uint32_t bpp = le16(e + 6), n = e[2];
    if (bpp) return bpp;
    uint32_t k = 0;
    while (n && (1u << k) < n) k++;
    return k ? k : 256; /* PIL: `bpp or (n and ceil(log(n, 2))) or 256` */
}

/* The DIB entry at off: a copy with a BMP file header (pixel offset 0 = right after the palette, as PIL's
 * DibImageFile) and the stored height halved, then the mask checks. */
static int32_t open_dib(struct gw_ico_src *s, const uint8_t *data, size_t len, const uint8_t *entry,
                        size_t off, const char *label, uint32_t *width, uint32_t *height, struct mm_err *err)
{
    const size_t n = len - off;
    if (n < 16) return mm_err_set(err, MM_NOT_FOUND, "%s: icon entry at %zu is truncated", label, off);
    s->dib = malloc(14 + n);
    if (!s->dib) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    memset(s->dib, 0, 14);
    s->dib[0] = 'B';
    s->dib[1] = 'M';
    memcpy(s->dib + 14, data + off, n);
    const uint32_t hsize = le32(s->dib + 14);
    uint8_t *hp = s->dib + 14 + (hsize == 12 ? 6 : 8); /* the height field */
    if (hsize == 12) {
        uint32_t h2 = le16(hp) / 2;
        hp[0] = (uint8_t)h2, hp[1] = (uint8_t)(h2 >> 8);
    } else if (n >= 12) {
        uint32_t raw = le32(hp);
        int top_down = (raw >> 31) != 0;
        uint32_t h2 = (top_down ? 0u - raw : raw) / 2;
        if (top_down) h2 = 0u - h2;
        for (int i = 0; i < 4; i++) hp[i] = (uint8_t)(h2 >> (8 * i));
    }
    int32_t rc = gw_bmp_open(s->dib, 14 + n, label, &s->bmp, width, height, err);
    if (rc) return rc;
    const uint64_t w = *width, h = *height;
    if (le16(entry + 6) == 32) {
        const uint64_t pix = (uint64_t)gw_bmp_pixel_offset(s->bmp) - 14 + off;
        if (pix > len || len - pix < w * h * 4)
            return mm_err_set(err, MM_FORMAT, "%s: icon alpha data is truncated", label);
    } else {
        const uint64_t mask = (w + 31) / 32 * 4 * h, end = (uint64_t)le32(entry + 12) + le32(entry + 8);
        if (end < mask || end - mask > len || len - (end - mask) < mask)
            return mm_err_set(err, MM_FORMAT, "%s: icon mask is not within the file", label);
    }
    return MM_OK;
}

int32_t gw_ico_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim, const char *label,
                    struct gw_ico_src **out, uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (len < 6 || !gw_ico_sniff(data, len)) return mm_err_set(err, MM_FORMAT, "%s: not an ICO", label);
    const uint32_t count = le16(data + 4);
    /* MM_NOT_FOUND: failures where PIL goes on to try its other formats (its IndexError / struct.error) */
    if (count == 0) return mm_err_set(err, MM_NOT_FOUND, "%s: icon with no entries", label);
    if ((len - 6) / 16 < count) return mm_err_set(err, MM_NOT_FOUND, "%s: truncated icon directory", label);
    const uint8_t *best = NULL;
    uint64_t best_sq = 0;
    uint32_t best_depth = 0;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = data + 6 + 16 * (size_t)i;
        uint64_t sq = (uint64_t)(e[0] ? e[0] : 256) * (e[1] ? e[1] : 256);
        uint32_t depth = color_depth(e);
        if (!best || sq > best_sq || (sq == best_sq && depth >= best_depth)) {
            best = e;
            best_sq = sq;
            best_depth = depth;
        }
    }
    const size_t off = le32(best + 12);
    if (off >= len) return mm_err_set(err, MM_NOT_FOUND, "%s: icon entry at %zu is past the end", label, off);
    struct gw_ico_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    int32_t rc;
    if (len - off >= 8 && memcmp(data + off, png_sig, 8) == 0)
        rc = gw_image_open(data + off, len - off, lim, label, &s->png, width, height, err);
    else
        rc = open_dib(s, data, len, best, off, label, width, height, err);
    if (rc) {
        gw_ico_close(s);
        return rc;
    }
    *out = s;
    return MM_OK;
}

int32_t gw_ico_decode(struct gw_ico_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    if (s->png) return gw_image_decode(s->png, 0, 0, 0, sink, err);
    return gw_bmp_decode(s->bmp, sink, err);
}

void gw_ico_close(struct gw_ico_src *s)
{
    if (!s) return;
    gw_image_close(s->png);
    gw_bmp_close(s->bmp);
    free(s->dib);
    free(s);
}
