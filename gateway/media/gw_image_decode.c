/* Image decoding: dispatch between the direct JPEG path and libvips, the libvips path itself, and the
 * size checks that run on the header before any pixel is decoded. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vips/vips.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

struct gw_vips_src {
    VipsImage *img;
    const char *label;
};

struct gw_image_src {
    struct gw_jpeg_src *jpeg;
    struct gw_png_src *png;
    struct gw_gif_src *gif;
    struct gw_bmp_src *bmp;
    struct gw_pnm_src *pnm;
    struct gw_ico_src *ico;
    struct gw_tga_src *tga;
    struct gw_pcx_src *pcx;
    struct gw_tiff_src *tiff;
    struct gw_vips_src *vips;
    uint32_t width, height;
    const char *label;
};

void gw_rgb_image_free(struct gw_rgb_image *img)
{
    if (!img) return;
    gw_aligned_free(img->data);
    memset(img, 0, sizeof *img);
}

/* The libvips loaders we accept. Others (ImageMagick, FITS, Matlab, PDF...) are refused: a media URL comes
 * from a stranger, and those parsers are large and not what the reference reads anyway. */
static int vips_loader_allowed(const char *nick)
{
    static const char *const allowed[] = {"VipsForeignLoadJpegBuffer", "VipsForeignLoadPngBuffer",
                                          "VipsForeignLoadWebpBuffer", "VipsForeignLoadNsgifBuffer",
                                          "VipsForeignLoadGifBuffer",  "VipsForeignLoadTiffBuffer",
                                          "VipsForeignLoadHeifBuffer"};
    if (!nick) return 0;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        if (strcmp(nick, allowed[i]) == 0) return 1;
    return 0;
}

/* libvips errors accumulate in a per-thread buffer: take its last line for the message, then clear it. */
static const char *vips_last_error(char *buf, size_t cap)
{
    const char *e = vips_error_buffer();
    buf[0] = '\0';
    if (e && *e) {
        size_t n = strlen(e);
        while (n && (e[n - 1] == '\n' || e[n - 1] == ' ')) n--;
        size_t start = n;
        while (start && e[start - 1] != '\n') start--;
        size_t len = n - start < cap - 1 ? n - start : cap - 1;
        memcpy(buf, e + start, len);
        buf[len] = '\0';
    }
    vips_error_clear();
    return buf[0] ? buf : "unknown libvips error";
}

int32_t gw_vips_open(const uint8_t *data, size_t len, const char *label, struct gw_vips_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    char eb[256];
    const char *nick = vips_foreign_find_load_buffer(data, len);
    if (!nick) {
        vips_error_clear();
        return mm_err_set(err, MM_UNSUPPORTED, "%s: not an image in a known format", label);
    }
    if (!vips_loader_allowed(nick)) {
        /* name the format as a client knows it: "VipsForeignLoadSvgBuffer" -> "svg" */
        static const char pre[] = "VipsForeignLoad", suf[] = "Buffer";
        char fmt[48];
        size_t n = strlen(nick), pl = sizeof pre - 1, sl = sizeof suf - 1;
        const char *f = nick;
        if (n > pl + sl && strncmp(nick, pre, pl) == 0 && strcmp(nick + n - sl, suf) == 0) {
            f += pl;
            n -= pl + sl;
        }
        if (n >= sizeof fmt) n = sizeof fmt - 1;
        for (size_t i = 0; i < n; i++) fmt[i] = (char)tolower((unsigned char)f[i]);
        fmt[n] = '\0';
        if (strncmp(fmt, "magick", 6) == 0) snprintf(fmt, sizeof fmt, "%s", "ImageMagick");
        return mm_err_set(err, MM_UNSUPPORTED,
                          "%s: image format '%s' is not accepted (JPEG, PNG, WebP, GIF, BMP, TIFF, HEIF, "
                          "PNM, ICO, TGA and PCX are)",
                          label, fmt);
    }
    /* Only the header is read here: libvips decodes lazily. */
    VipsImage *img = vips_image_new_from_buffer(data, len, "", "access", VIPS_ACCESS_SEQUENTIAL, "fail_on",
                                                VIPS_FAIL_ON_ERROR, NULL);
    if (!img) return mm_err_set(err, MM_FORMAT, "%s: bad image: %s", label, vips_last_error(eb, sizeof eb));
    struct gw_vips_src *s = calloc(1, sizeof *s);
    if (!s) {
        g_object_unref(img);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    }
    s->img = img;
    s->label = label;
    *width = (uint32_t)vips_image_get_width(img);
    *height = (uint32_t)vips_image_get_height(img);
    *out = s;
    return MM_OK;
}

/* How a decoded libvips image maps to RGB: PIL's convert("RGB") rules per layout. */
enum vips_layout { LAYOUT_GREY, LAYOUT_RGB, LAYOUT_CMYK };

/* PIL's CMYK -> RGB (Convert.c cmyk2rgb): each channel (255 - k) - c * (255 - k) / 255, rounded as PIL's
 * MULDIV255 does. Not a colour-managed conversion: the reference applies none. */
static inline uint8_t cmyk_channel(uint32_t c, uint32_t k)
{
    uint32_t nk = 255 - k, t = c * nk + 128;
    return (uint8_t)(nk - (((t >> 8) + t) >> 8));
}

void gw_cmyk_to_rgb(const uint8_t *cmyk, size_t stride, uint32_t w, int invert, uint8_t *rgb)
{
    const uint8_t x = invert ? 0xFF : 0;
    for (uint32_t i = 0; i < w; i++) {
        const uint8_t *p = cmyk + (size_t)i * stride;
        uint32_t k = (uint8_t)(p[3] ^ x);
        rgb[i * 3] = cmyk_channel((uint8_t)(p[0] ^ x), k);
        rgb[i * 3 + 1] = cmyk_channel((uint8_t)(p[1] ^ x), k);
        rgb[i * 3 + 2] = cmyk_channel((uint8_t)(p[2] ^ x), k);
    }
}

/* One row of a libvips region (uchar or ushort samples, `bands` per pixel) to RGB8. 16-bit samples keep
 * their high byte (PIL's RGB;16B, LA;16B, CMYK;16) except single-band grey, which PIL opens as I;16 and
 * clips at 255 when converting. */
static void vips_row_to_rgb(const void *src, int ushort, int bands, enum vips_layout layout, uint32_t w,
                            uint8_t *tmp, uint8_t *rgb)
{
    const uint8_t *p8 = src;
    if (ushort) {
        const uint16_t *p16 = src;
        const size_t n = (size_t)w * (size_t)bands;
        if (layout == LAYOUT_GREY && bands == 1)
            for (size_t i = 0; i < n; i++) tmp[i] = p16[i] > 255 ? 255 : (uint8_t)p16[i];
        else
            for (size_t i = 0; i < n; i++) tmp[i] = (uint8_t)(p16[i] >> 8);
        p8 = tmp;
    }
    switch (layout) {
    case LAYOUT_GREY: /* grey (+ alpha): replicate, drop alpha */
        for (uint32_t x = 0; x < w; x++) rgb[x * 3] = rgb[x * 3 + 1] = rgb[x * 3 + 2] = p8[(size_t)x * bands];
        break;
    case LAYOUT_RGB: /* RGB (+ alpha and extras): drop what follows the colour (no compositing) */
        if (bands == 3) {
            memcpy(rgb, p8, (size_t)w * 3);
        } else {
            for (uint32_t x = 0; x < w; x++) memcpy(rgb + x * 3, p8 + (size_t)x * bands, 3);
        }
        break;
    case LAYOUT_CMYK:
        gw_cmyk_to_rgb(p8, (size_t)bands, w, 0, rgb);
        break;
    }
}

int32_t gw_vips_decode(struct gw_vips_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    char eb[256];
    VipsImage *cur = s->img;
    g_object_ref(cur);
    const int bands = vips_image_get_bands(cur);
    const VipsInterpretation interp = vips_image_get_interpretation(cur);
    VipsBandFormat fmt = vips_image_get_format(cur);
    if (fmt != VIPS_FORMAT_UCHAR && fmt != VIPS_FORMAT_USHORT) {
        /* float / 32-bit TIFFs and the like: libvips' cast (rare inputs, PIL handles few of them) */
        VipsImage *t = NULL;
        if (vips_cast_uchar(cur, &t, NULL)) {
            g_object_unref(cur);
            return mm_err_set(err, MM_FORMAT, "%s: bad image: %s", s->label, vips_last_error(eb, sizeof eb));
        }
        g_object_unref(cur);
        cur = t;
        fmt = VIPS_FORMAT_UCHAR;
    }
    enum vips_layout layout;
    if (interp == VIPS_INTERPRETATION_CMYK && bands >= 4)
        layout = LAYOUT_CMYK;
    else if (bands == 1 || bands == 2)
        layout = LAYOUT_GREY;
    else if (bands >= 3)
        layout = LAYOUT_RGB;
    else {
        g_object_unref(cur);
        return mm_err_set(err, MM_UNSUPPORTED, "%s: image with %d bands", s->label, bands);
    }
    const int ushort = fmt == VIPS_FORMAT_USHORT;

    /* Stream the image out strip by strip: libvips decodes lazily as the region moves down. */
    const uint32_t w = (uint32_t)vips_image_get_width(cur), h = (uint32_t)vips_image_get_height(cur);
    int32_t rc = sink->begin(sink->ctx, w, h, err);
    if (rc) {
        g_object_unref(cur);
        return rc;
    }
    const size_t stride = (size_t)w * 3;
    uint8_t *row = gw_aligned_alloc(stride + GW_ROW_SLACK);
    uint8_t *tmp = ushort ? malloc((size_t)w * (size_t)bands) : NULL;
    VipsRegion *reg = row && (tmp || !ushort) ? vips_region_new(cur) : NULL;
    if (!reg) {
        gw_aligned_free(row);
        free(tmp);
        g_object_unref(cur);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    }
    memset(row + stride, 0, GW_ROW_SLACK);
    for (uint32_t y = 0; y < h && !rc; y += 16) {
        VipsRect rect = {0, (int)y, (int)w, (int)(h - y < 16 ? h - y : 16)};
        if (vips_region_prepare(reg, &rect)) {
            rc = mm_err_set(err, MM_FORMAT, "%s: bad image: %s", s->label, vips_last_error(eb, sizeof eb));
            break;
        }
        for (int i = 0; i < rect.height && !rc; i++) {
            /* converted into our own row: the region's rows have no slack for the vector loads */
            vips_row_to_rgb(VIPS_REGION_ADDR(reg, 0, rect.top + i), ushort, bands, layout, w, tmp, row);
            rc = sink->row(sink->ctx, row, err);
        }
    }
    g_object_unref(reg);
    g_object_unref(cur);
    gw_aligned_free(row);
    free(tmp);
    return rc;
}

void gw_vips_close(struct gw_vips_src *s)
{
    if (!s) return;
    if (s->img) g_object_unref(s->img);
    free(s);
}

int32_t gw_image_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim, const char *label,
                      struct gw_image_src **out, uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (!label) label = "image";
    if (!data || len == 0) return mm_err_set(err, MM_FORMAT, "%s: empty input", label);
    if (len > lim->max_input_bytes)
        return mm_err_set(err, MM_TOO_LARGE, "%s: %zu bytes, over the limit of %llu", label, len,
                          (unsigned long long)lim->max_input_bytes);
    struct gw_image_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->label = label;
    int32_t rc = MM_UNSUPPORTED;
    if (gw_jpeg_sniff(data, len)) {
        rc = gw_jpeg_open(data, len, label, &s->jpeg, &s->width, &s->height, err);
        if (rc != MM_OK && rc != MM_UNSUPPORTED) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_png_sniff(data, len)) {
        rc = gw_png_open(data, len, label, &s->png, &s->width, &s->height, err);
        if (rc != MM_OK && rc != MM_UNSUPPORTED) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_gif_sniff(data, len)) {
        rc = gw_gif_open(data, len, label, &s->gif, &s->width, &s->height, err);
        if (rc) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_bmp_sniff(data, len)) {
        rc = gw_bmp_open(data, len, label, &s->bmp, &s->width, &s->height, err);
        if (rc) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_pnm_sniff(data, len)) {
        rc = gw_pnm_open(data, len, label, &s->pnm, &s->width, &s->height, err);
        if (rc) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_pcx_sniff(data, len)) {
        rc = gw_pcx_open(data, len, label, &s->pcx, &s->width, &s->height, err);
        if (rc == MM_NOT_FOUND) rc = MM_UNSUPPORTED; /* PIL then tries its other formats */
        if (rc && rc != MM_UNSUPPORTED) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_ico_sniff(data, len)) {
        rc = gw_ico_open(data, len, lim, label, &s->ico, &s->width, &s->height, err);
        /* a directory PIL cannot read makes it try its next formats (TGA: no signature) */
        if (rc == MM_NOT_FOUND) rc = MM_UNSUPPORTED;
        if (rc && rc != MM_UNSUPPORTED) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_tiff_sniff(data, len)) {
        rc = gw_tiff_open(data, len, label, &s->tiff, &s->width, &s->height, err);
        if (rc != MM_OK && rc != MM_UNSUPPORTED) {
            free(s);
            return rc;
        }
    }
    if (rc == MM_UNSUPPORTED && gw_tga_sniff(data, len)) {
        /* TGA has no signature: only bytes no accepted libvips loader claims (PIL's order: its TGA plugin
         * comes after the formats with one) */
        const char *nick = vips_foreign_find_load_buffer(data, len);
        vips_error_clear();
        if (!vips_loader_allowed(nick)) {
            rc = gw_tga_open(data, len, label, &s->tga, &s->width, &s->height, err);
            if (rc) {
                free(s);
                return rc;
            }
        }
    }
    if (rc == MM_UNSUPPORTED) {
        rc = gw_vips_open(data, len, label, &s->vips, &s->width, &s->height, err);
        if (rc) {
            free(s);
            return rc;
        }
    }
    /* The header's claims, checked before decoding anything. */
    uint64_t px = (uint64_t)s->width * s->height;
    if (s->width == 0 || s->height == 0)
        rc = mm_err_set(err, MM_FORMAT, "%s: image has no pixels", label);
    else if (s->width > lim->max_source_side || s->height > lim->max_source_side ||
             px > lim->max_source_pixels)
        rc = mm_err_set(err, MM_TOO_LARGE, "%s: image claims %ux%u pixels, over the limit of %llu (side %u)",
                        label, s->width, s->height, (unsigned long long)lim->max_source_pixels,
                        lim->max_source_side);
    if (rc) {
        gw_image_close(s);
        return rc;
    }
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
}

int32_t gw_image_decode(struct gw_image_src *s, int allow_reduce, uint32_t min_width, uint32_t min_height,
                        const struct gw_row_sink *sink, struct mm_err *err)
{
    if (s->jpeg) {
        uint32_t denom = 1;
        if (allow_reduce) {
            /* The largest 1/2^k whose decoded size (libjpeg rounds up) still covers the minimum. */
            for (uint32_t d = 8; d >= 2; d /= 2) {
                uint32_t w = (s->width + d - 1) / d, h = (s->height + d - 1) / d;
                if (w >= min_width && h >= min_height) {
                    denom = d;
                    break;
                }
            }
        }
        return gw_jpeg_decode(s->jpeg, denom, sink, err);
    }
    if (s->png) return gw_png_decode(s->png, sink, err);
    if (s->gif) return gw_gif_decode(s->gif, sink, err);
    if (s->bmp) return gw_bmp_decode(s->bmp, sink, err);
    if (s->pnm) return gw_pnm_decode(s->pnm, sink, err);
    if (s->ico) return gw_ico_decode(s->ico, sink, err);
    if (s->tga) return gw_tga_decode(s->tga, sink, err);
    if (s->pcx) return gw_pcx_decode(s->pcx, sink, err);
    if (s->tiff) return gw_tiff_decode(s->tiff, sink, err);
    return gw_vips_decode(s->vips, sink, err);
}

struct full_ctx {
    struct gw_rgb_image *img;
    uint32_t y;
};

static int32_t full_begin(void *ctx, uint32_t w, uint32_t h, struct mm_err *err)
{
    struct full_ctx *c = ctx;
    c->img->data = gw_aligned_alloc((size_t)w * h * 3 + GW_ROW_SLACK);
    if (!c->img->data) return mm_err_set(err, MM_NOMEM, "out of memory for a %ux%u image", w, h);
    memset(c->img->data + (size_t)w * h * 3, 0, GW_ROW_SLACK);
    c->img->width = w;
    c->img->height = h;
    c->img->stride = (size_t)w * 3;
    return MM_OK;
}

static int32_t full_row(void *ctx, const uint8_t *rgb, struct mm_err *err)
{
    struct full_ctx *c = ctx;
    if (c->y >= c->img->height) return mm_err_set(err, MM_ERROR, "decoder produced too many rows");
    memcpy(c->img->data + (size_t)c->y++ * c->img->stride, rgb, c->img->stride);
    return MM_OK;
}

int32_t gw_image_decode_full(struct gw_image_src *s, struct gw_rgb_image *out, struct mm_err *err)
{
    memset(out, 0, sizeof *out);
    struct full_ctx c = {out, 0};
    struct gw_row_sink sink = {&c, full_begin, full_row};
    int32_t rc = gw_image_decode(s, 0, 0, 0, &sink, err);
    if (!rc && c.y != out->height)
        rc = mm_err_set(err, MM_ERROR, "decoder produced %u of %u rows", c.y, out->height);
    if (rc) gw_rgb_image_free(out);
    return rc;
}

void gw_image_close(struct gw_image_src *s)
{
    if (!s) return;
    gw_jpeg_close(s->jpeg);
    gw_png_close(s->png);
    gw_gif_close(s->gif);
    gw_bmp_close(s->bmp);
    gw_pnm_close(s->pnm);
    gw_ico_close(s->ico);
    gw_tga_close(s->tga);
    gw_pcx_close(s->pcx);
    gw_tiff_close(s->tiff);
    gw_vips_close(s->vips);
    free(s);
}
