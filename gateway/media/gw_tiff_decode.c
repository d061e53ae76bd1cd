/* YCbCr TIFFs through libtiff's RGBA interface, as PIL reads them.
 *
 * libvips 8.14 refuses chroma-subsampled YCbCr TIFFs and hands 4:4:4 ones over unconverted. PIL decodes
 * every libtiff-compressed YCbCr TIFF (not JPEG-compressed ones: libjpeg converts those, and libvips does
 * the same) with TIFFRGBAImageGet, strip by strip: libtiff's own YCbCr -> RGB (the file's coefficients and
 * reference black/white, chroma replicated over each subsampling block). So do we, with the same library.
 * Every other TIFF answers MM_UNSUPPORTED here and goes to libvips.
 *
 * libtiff reads from our buffer through client procedures; its messages go to a per-file handler (libtiff
 * 4.5's TIFFOpenOptions), never to stderr, and the last error becomes our one-line message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

/* libtiff allocations above this are refused (a header can claim huge strips) */
#define GW_TIFF_MAX_ALLOC (256 << 20)
/* the RGBA raster of one strip (4 bytes a pixel) */
#define GW_TIFF_MAX_RASTER (512ull << 20)

struct gw_tiff_src {
    const uint8_t *data;
    size_t len, pos;
    const char *label;
    TIFF *tif;
    uint32_t width, height;
    uint32_t band; /* rows per TIFFRGBAImageGet call: a strip or a tile row, as PIL reads them */
    char msg[200];
};

int gw_tiff_sniff(const uint8_t *data, size_t len)
{
    return len >= 4 &&
           ((data[0] == 'I' && data[1] == 'I' && (data[2] == 42 || data[2] == 43) && data[3] == 0) ||
            (data[0] == 'M' && data[1] == 'M' && data[2] == 0 && (data[3] == 42 || data[3] == 43)));
}

static tmsize_t tiff_read(thandle_t h, void *buf, tmsize_t n)
{
    struct gw_tiff_src *s = h;
    if (n <= 0 || s->pos >= s->len) return 0;
    size_t k = s->len - s->pos < (size_t)n ? s->len - s->pos : (size_t)n;
    memcpy(buf, s->data + s->pos, k);
    s->pos += k;
    return (tmsize_t)k;
}

static tmsize_t tiff_write(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return -1;
}

static toff_t tiff_seek(thandle_t h, toff_t off, int whence)
{
    struct gw_tiff_src *s = h;
    uint64_t base = whence == SEEK_CUR ? s->pos : whence == SEEK_END ? s->len : 0;
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return (toff_t)-1;
    uint64_t np = base + off; /* libtiff passes negative SEEK_CUR/END offsets as wrapped unsigned values */
    if (np > s->len) return (toff_t)-1;
    s->pos = (size_t)np;
    return np;
}

static int tiff_close(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t tiff_size(thandle_t h)
{
    return ((struct gw_tiff_src *)h)->len;
}

static int tiff_map(thandle_t h, void **base, toff_t *size)
{
    struct gw_tiff_src *s = h;
    *base = (void *)(uintptr_t)s->data; /* read-only: libtiff only reads through a mapping opened "r" */
    *size = s->len;
    return 1;
}

static void tiff_unmap(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

__attribute__((format(printf, 4, 0))) static int tiff_error(TIFF *tif, void *ud, const char *module,
                                                            const char *fmt, va_list ap)
{
    (void)tif, (void)module;
    struct gw_tiff_src *s = ud;
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    for (char *p = s->msg; *p; p++)
        if (*p == '\n') *p = ' ';
    return 1; /* handled: libtiff's global handlers (stderr) are not called */
}

__attribute__((format(printf, 4, 0))) static int tiff_warning(TIFF *tif, void *ud, const char *module,
                                                              const char *fmt, va_list ap)
{
    (void)tif, (void)ud, (void)module, (void)fmt, (void)ap;
    return 1; /* PIL ignores libtiff's warnings; so do we */
}

void gw_tiff_close(struct gw_tiff_src *s)
{
    if (!s) return;
    if (s->tif) TIFFClose(s->tif);
    free(s);
}

int32_t gw_tiff_open(const uint8_t *data, size_t len, const char *label, struct gw_tiff_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    struct gw_tiff_src *s = calloc(1, sizeof *s);
    TIFFOpenOptions *opts = s ? TIFFOpenOptionsAlloc() : NULL;
    if (!opts) {
        free(s);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    }
    s->data = data;
    s->len = len;
    s->label = label;
    TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_error, s);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_warning, s);
    TIFFOpenOptionsSetMaxSingleMemAlloc(opts, GW_TIFF_MAX_ALLOC);
    s->tif = TIFFClientOpenExt(label, "r", s, tiff_read, tiff_write, tiff_seek, tiff_close, tiff_size,
                               tiff_map, tiff_unmap, opts);
    TIFFOpenOptionsFree(opts);
    if (!s->tif) {
        int32_t rc = mm_err_set(err, MM_FORMAT, "%s: bad TIFF: %s", label, s->msg[0] ? s->msg : "unreadable");
        free(s);
        return rc;
    }
    uint16_t photo = 0, compression = 1;
    TIFFGetFieldDefaulted(s->tif, TIFFTAG_COMPRESSION, &compression);
    if (!TIFFGetField(s->tif, TIFFTAG_PHOTOMETRIC, &photo) || photo != PHOTOMETRIC_YCBCR ||
        compression == COMPRESSION_JPEG || compression == COMPRESSION_OJPEG) {
        gw_tiff_close(s);
        return MM_UNSUPPORTED; /* libvips reads these as PIL does */
    }
    uint32_t w = 0, h = 0, rows = 0;
    TIFFGetField(s->tif, TIFFTAG_IMAGEWIDTH, &w);
    TIFFGetField(s->tif, TIFFTAG_IMAGELENGTH, &h);
    if (TIFFIsTiled(s->tif))
        TIFFGetField(s->tif, TIFFTAG_TILELENGTH, &rows);
    else
        TIFFGetFieldDefaulted(s->tif, TIFFTAG_ROWSPERSTRIP, &rows);
    char emsg[1024] = "";
    if (!TIFFRGBAImageOK(s->tif, emsg)) {
        int32_t rc = mm_err_set(err, MM_UNSUPPORTED, "%s: unsupported YCbCr TIFF: %s", label, emsg);
        gw_tiff_close(s);
        return rc;
    }
    s->width = w;
    s->height = h;
    s->band = rows == 0 || rows > h ? h : rows;
    /* a strip is decoded whole (smaller bands would decode it again for each): refuse absurd strips */
    if ((uint64_t)w * s->band * 4 > GW_TIFF_MAX_RASTER) {
        int32_t rc = mm_err_set(err, MM_TOO_LARGE, "%s: YCbCr TIFF strips of %ux%u pixels are too large",
                                label, w, s->band);
        gw_tiff_close(s);
        return rc;
    }
    *width = w;
    *height = h;
    *out = s;
    return MM_OK;
}

int32_t gw_tiff_decode(struct gw_tiff_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    char emsg[1024] = "";
    TIFFRGBAImage img;
    if (!TIFFRGBAImageBegin(&img, s->tif, 1, emsg)) /* stop on errors: truncation fails */
        return mm_err_set(err, MM_FORMAT, "%s: bad TIFF: %s", s->label, emsg);
    img.req_orientation = ORIENTATION_TOPLEFT;
    const uint32_t w = s->width, h = s->height;
    const size_t stride = (size_t)w * 3;
    uint32_t *raster = malloc((size_t)w * s->band * sizeof *raster);
    uint8_t *row = gw_aligned_alloc(stride + GW_ROW_SLACK);
    int32_t rc = MM_OK;
    if (!raster || !row) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory for %u TIFF rows", s->label, s->band);
        goto out;
    }
    memset(row + stride, 0, GW_ROW_SLACK);
    if ((rc = sink->begin(sink->ctx, w, h, err))) goto out;
    for (uint32_t y = 0; y < h && !rc; y += s->band) {
        uint32_t n = h - y < s->band ? h - y : s->band;
        img.row_offset = (int)y;
        img.col_offset = 0;
        s->msg[0] = '\0';
        if (!TIFFRGBAImageGet(&img, raster, w, n)) {
            rc = mm_err_set(err, MM_FORMAT, "%s: bad TIFF: %s", s->label,
                            s->msg[0] ? s->msg : "decoding failed");
            break;
        }
        for (uint32_t i = 0; i < n && !rc; i++) {
            const uint32_t *p = raster + (size_t)i * w;
            for (uint32_t x = 0; x < w; x++) {
                row[x * 3] = (uint8_t)TIFFGetR(p[x]);
                row[x * 3 + 1] = (uint8_t)TIFFGetG(p[x]);
                row[x * 3 + 2] = (uint8_t)TIFFGetB(p[x]);
            }
            rc = sink->row(sink->ctx, row, err);
        }
    }
out:
    TIFFRGBAImageEnd(&img);
    free(raster);
    gw_aligned_free(row);
    return rc;
}
