/* A fast path for the common PNGs: non-interlaced, 8- or 16-bit grey, grey+alpha, RGB, RGBA, or 8-bit
 * palette. The whole zlib stream is inflated at once with libdeflate (about twice zlib's speed), rows are
 * unfiltered (the Paeth filter, which photo encoders use for most rows, has an SSE2 version) and converted
 * to RGB8 as PIL's convert("RGB") does: grey replicated, alpha dropped, palette expanded, 16-bit samples
 * reduced to their high byte (LA;16B, RGB;16B, RGBA;16B) except 16-bit grey, which PIL opens as I;16 and
 * clips at 255. Every other PNG (interlaced, 1/2/4-bit, huge) answers MM_UNSUPPORTED and is
 * decoded by libvips instead. CRCs of IHDR, PLTE and IDAT are checked, as libpng does. */
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "gw_image_decode.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* Above this many bytes of raw (inflated) data, libvips' streaming decoder is used instead of inflating
 * the whole image at once. */
#define GW_PNG_MAX_RAW (96u << 20)

struct gw_png_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;
    uint8_t depth, color;
    uint32_t channels, bpp; /* samples per pixel; bytes per pixel for the filters (at least 1) */
    size_t rowbytes;
    uint8_t palette[256][3];
    uint32_t n_palette;
    size_t idat_off, idat_len; /* IDAT payloads, when they are one chunk (else copied at decode) */
    uint32_t n_idat;
};

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int gw_png_sniff(const uint8_t *data, size_t len)
{
    return len >= 8 && memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0;
}

void gw_png_close(struct gw_png_src *s)
{
    free(s);
}

int32_t gw_png_open(const uint8_t *data, size_t len, const char *label, struct gw_png_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (!gw_png_sniff(data, len) || len < 8 + 25) return MM_UNSUPPORTED; /* let libvips report it */
    struct gw_png_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    int32_t rc = MM_UNSUPPORTED;
    size_t p = 8;
    int seen_ihdr = 0, in_idat = 0, done_idat = 0;
    while (p + 12 <= len) {
        uint32_t clen = be32(data + p);
        const uint8_t *type = data + p + 4, *body = data + p + 8;
        if (clen > len - p - 12) break; /* truncated: libvips words the error */
        int critical = !(type[0] & 0x20);
        if (critical || memcmp(type, "tRNS", 4) == 0) {
            if (be32(body + clen) != (uint32_t)libdeflate_crc32(0, type, clen + 4)) {
                rc = mm_err_set(err, MM_FORMAT, "%s: bad PNG: CRC error in a %.4s chunk", label,
                                (const char *)type);
                goto out;
            }
        }
        if (!seen_ihdr) {
            if (memcmp(type, "IHDR", 4) != 0 || clen != 13) break;
            s->width = be32(body);
            s->height = be32(body + 4);
            s->depth = body[8];
            s->color = body[9];
            if (body[10] != 0 || body[11] != 0) break; /* unknown compression or filter method */
            if (body[12] != 0) goto out;               /* interlaced: libvips */
            seen_ihdr = 1;
        } else if (memcmp(type, "PLTE", 4) == 0) {
            if (clen % 3 || clen > 768) break;
            s->n_palette = clen / 3;
            memcpy(s->palette, body, clen);
        } else if (memcmp(type, "IDAT", 4) == 0) {
            if (done_idat) break; /* IDAT chunks must be consecutive */
            if (!in_idat) s->idat_off = p;
            in_idat = 1;
            s->idat_len += clen;
            s->n_idat++;
        } else {
            if (in_idat) done_idat = 1;
            if (memcmp(type, "IEND", 4) == 0) break;
        }
        p += 12 + (size_t)clen;
    }
    if (!seen_ihdr || !s->n_idat || s->width == 0 || s->height == 0) goto out;
    switch (s->color) {
    case 0:
        s->channels = 1;
        break;
    case 2:
        s->channels = 3;
        break;
    case 3:
        s->channels = 1;
        break;
    case 4:
        s->channels = 2;
        break;
    case 6:
        s->channels = 4;
        break;
    default:
        goto out;
    }
    if (!((s->depth == 8) || (s->depth == 16 && s->color != 3))) goto out;
    if (s->color == 3 && s->n_palette == 0) goto out;
    s->bpp = s->channels * s->depth / 8;
    s->rowbytes = (size_t)s->width * s->bpp;
    if ((s->rowbytes + 1) * s->height > GW_PNG_MAX_RAW) goto out;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
out:
    free(s);
    return rc;
}

static inline uint8_t paeth(uint8_t a, uint8_t b, uint8_t c)
{
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : (pb <= pc ? b : c);
}

#if defined(__x86_64__)
/* Paeth for 3- or 4-byte pixels, one pixel per step in 16-bit lanes (the dependency on the left pixel
 * is inherent); the same selection as the scalar rule, branch-free. */
static void paeth_sse2(uint8_t *row, const uint8_t *prev, size_t rowbytes, uint32_t bpp)
{
    const __m128i z = _mm_setzero_si128();
    __m128i a = z, c = z;
    size_t i = 0;
    /* 4-byte loads: a 3-byte pixel's load takes one byte of the next pixel (or of the slack), unused */
    for (; i + bpp <= rowbytes; i += bpp) {
        uint32_t bw, xw;
        memcpy(&bw, prev + i, 4);
        memcpy(&xw, row + i, 4);
        __m128i b = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)bw), z);
        __m128i x = _mm_unpacklo_epi8(_mm_cvtsi32_si128((int)xw), z);
        __m128i pa = _mm_sub_epi16(b, c), pb = _mm_sub_epi16(a, c);
        __m128i pc = _mm_add_epi16(pa, pb);
        pa = _mm_max_epi16(pa, _mm_sub_epi16(z, pa));
        pb = _mm_max_epi16(pb, _mm_sub_epi16(z, pb));
        pc = _mm_max_epi16(pc, _mm_sub_epi16(z, pc));
        __m128i smallest = _mm_min_epi16(pc, _mm_min_epi16(pa, pb));
        /* c where pc is smallest, else b where pb is, else a */
        __m128i nearest = _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi16(smallest, pb), b),
                                       _mm_andnot_si128(_mm_cmpeq_epi16(smallest, pb), c));
        nearest = _mm_or_si128(_mm_and_si128(_mm_cmpeq_epi16(smallest, pa), a),
                               _mm_andnot_si128(_mm_cmpeq_epi16(smallest, pa), nearest));
        x = _mm_and_si128(_mm_add_epi16(x, nearest), _mm_set1_epi16(0xff));
        uint32_t outw = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(x, x));
        memcpy(row + i, &outw, bpp);
        a = x;
        c = b;
    }
    for (; i < rowbytes; i++) { /* the tail (a last 3-byte pixel whose 4-byte load would leave the row) */
        uint8_t left = i >= bpp ? row[i - bpp] : 0, up = prev[i], ul = i >= bpp ? prev[i - bpp] : 0;
        row[i] = (uint8_t)(row[i] + paeth(left, up, ul));
    }
}
#endif

/* Undo one row's filter in place; prev is the previous unfiltered row (zeros for the first). */
static int unfilter(uint8_t type, uint8_t *row, const uint8_t *prev, size_t n, uint32_t bpp)
{
    switch (type) {
    case 0:
        return 0;
    case 1:
        for (size_t i = bpp; i < n; i++) row[i] = (uint8_t)(row[i] + row[i - bpp]);
        return 0;
    case 2:
        for (size_t i = 0; i < n; i++) row[i] = (uint8_t)(row[i] + prev[i]);
        return 0;
    case 3:
        for (size_t i = 0; i < bpp && i < n; i++) row[i] = (uint8_t)(row[i] + (prev[i] >> 1));
        for (size_t i = bpp; i < n; i++) row[i] = (uint8_t)(row[i] + ((row[i - bpp] + prev[i]) >> 1));
        return 0;
    case 4:
#if defined(__x86_64__)
        if (bpp == 3 || bpp == 4) {
            paeth_sse2(row, prev, n, bpp);
            return 0;
        }
#endif
        for (size_t i = 0; i < bpp && i < n; i++) row[i] = (uint8_t)(row[i] + prev[i]);
        for (size_t i = bpp; i < n; i++)
            row[i] = (uint8_t)(row[i] + paeth(row[i - bpp], prev[i], prev[i - bpp]));
        return 0;
    }
    return -1;
}

int32_t gw_png_decode(struct gw_png_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const size_t stride = s->rowbytes + 1, raw_len = stride * s->height;
    uint8_t *raw = malloc(raw_len + GW_ROW_SLACK), *zbuf = NULL, *prev = calloc(1, s->rowbytes + 16);
    uint8_t *rgb = gw_aligned_alloc((size_t)s->width * 3 + GW_ROW_SLACK);
    struct libdeflate_decompressor *dc = libdeflate_alloc_decompressor();
    int32_t rc = MM_OK;
    if (!raw || !prev || !rgb || !dc) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory for a %ux%u PNG", s->label, s->width, s->height);
        goto out;
    }
    memset(rgb + (size_t)s->width * 3, 0, GW_ROW_SLACK);
    /* The zlib stream: the IDAT payloads, joined when there are several chunks. */
    const uint8_t *z = s->data + s->idat_off + 8;
    if (s->n_idat > 1) {
        zbuf = malloc(s->idat_len);
        if (!zbuf) {
            rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
            goto out;
        }
        size_t p = s->idat_off, o = 0;
        for (uint32_t i = 0; i < s->n_idat; i++) {
            uint32_t clen = be32(s->data + p);
            memcpy(zbuf + o, s->data + p + 8, clen);
            o += clen;
            p += 12 + (size_t)clen;
        }
        z = zbuf;
    }
    size_t got = 0;
    enum libdeflate_result zr = libdeflate_zlib_decompress(dc, z, s->idat_len, raw, raw_len, &got);
    if (zr != LIBDEFLATE_SUCCESS || got != raw_len) {
        rc =
            mm_err_set(err, MM_FORMAT, "%s: bad PNG: %s", s->label,
                       zr == LIBDEFLATE_SUCCESS || zr == LIBDEFLATE_SHORT_OUTPUT ? "image data ends early"
                                                                                 : "corrupt compressed data");
        goto out;
    }
    if ((rc = sink->begin(sink->ctx, s->width, s->height, err))) goto out;
    const uint8_t *up = prev;
    for (uint32_t y = 0; y < s->height && !rc; y++) {
        uint8_t *row = raw + (size_t)y * stride;
        if (unfilter(row[0], row + 1, up, s->rowbytes, s->bpp)) {
            rc = mm_err_set(err, MM_FORMAT, "%s: bad PNG: unknown filter %u in row %u", s->label, row[0], y);
            break;
        }
        const uint8_t *px = row + 1;
        up = px;
        const uint32_t w = s->width, step = s->depth / 8; /* 16-bit: the high byte comes first */
        switch (s->color) {
        case 0:
            if (step == 2) {
                /* 16-bit grey: PIL opens it as I;16 and convert("RGB") clips at 255 (not >> 8) */
                for (uint32_t x = 0; x < w; x++) {
                    const uint8_t *v = px + (size_t)x * 2;
                    uint8_t g = v[0] ? 255 : v[1];
                    rgb[x * 3] = rgb[x * 3 + 1] = rgb[x * 3 + 2] = g;
                }
                break;
            }
            /* 8-bit grey reads like grey+alpha's first byte */
            __attribute__((fallthrough));
        case 4:
            for (uint32_t x = 0; x < w; x++) {
                uint8_t g = px[(size_t)x * s->bpp];
                rgb[x * 3] = rgb[x * 3 + 1] = rgb[x * 3 + 2] = g;
            }
            break;
        case 2:
            if (step == 1) {
                /* already RGB8: hand the row over in place (raw has GW_ROW_SLACK bytes after its end) */
                rc = sink->row(sink->ctx, px, err);
                continue;
            }
            for (uint32_t x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) rgb[x * 3 + c] = px[(size_t)x * 6 + c * 2];
            break;
        case 6:
            for (uint32_t x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) rgb[x * 3 + c] = px[(size_t)x * s->bpp + c * step];
            break;
        case 3:
            for (uint32_t x = 0; x < w; x++) {
                uint8_t i = px[x];
                if (i < s->n_palette)
                    memcpy(rgb + x * 3, s->palette[i], 3);
                else /* past the palette: PIL's palettes start out as the grey ramp */
                    rgb[x * 3] = rgb[x * 3 + 1] = rgb[x * 3 + 2] = i;
            }
            break;
        }
        rc = sink->row(sink->ctx, rgb, err);
    }
out:
    if (dc) libdeflate_free_decompressor(dc);
    free(raw);
    free(zbuf);
    free(prev);
    gw_aligned_free(rgb);
    return rc;
}
