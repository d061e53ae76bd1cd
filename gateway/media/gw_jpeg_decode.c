/* JPEG decoding with libjpeg-turbo, set up exactly as PIL does (ISLOW IDCT, fancy upsampling, RGB output;
 * CMYK/YCCK to CMYK then PIL's inverted-CMYK -> RGB formula), with optional DCT-domain downscaling. libjpeg
 * reports fatal errors through error_exit, which must not return: it longjmps back to the call that started
 * the libjpeg operation. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jerror.h>
#include <jpeglib.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

/* A progressive JPEG may carry any number of scans, each re-reading all coefficients: a tiny file could
 * take minutes. libjpeg-turbo's own tools suggest 500 as a safe bound; real encoders emit about 10. */
#define GW_JPEG_MAX_SCANS 500
#define GW_JPEG_MAX_MEMORY (768L << 20)

struct gw_jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int truncated;
    char msg[JMSG_LENGTH_MAX];
};

struct gw_jpeg_src {
    struct jpeg_decompress_struct cinfo;
    struct gw_jpeg_err jerr;
    struct jpeg_progress_mgr progress;
    int created;
    int cmyk; /* 4 components (CMYK or YCCK): decoded to CMYK, then converted as PIL does */
    const char *label;
};

static void gw_jpeg_error_exit(j_common_ptr cinfo)
{
    struct gw_jpeg_err *e = (struct gw_jpeg_err *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

static void gw_jpeg_emit_message(j_common_ptr cinfo, int level)
{
    struct gw_jpeg_err *e = (struct gw_jpeg_err *)cinfo->err;
    /* Warnings (level -1) are ignored as PIL ignores them, except running out of data: PIL refuses a
     * truncated file, so do we. */
    if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) e->truncated = 1;
}

static void gw_jpeg_progress(j_common_ptr cinfo)
{
    if (cinfo->is_decompressor) {
        j_decompress_ptr d = (j_decompress_ptr)cinfo;
        if (d->input_scan_number > GW_JPEG_MAX_SCANS) {
            struct gw_jpeg_err *e = (struct gw_jpeg_err *)cinfo->err;
            snprintf(e->msg, sizeof e->msg, "more than %d progressive scans", GW_JPEG_MAX_SCANS);
            longjmp(e->jump, 1);
        }
    }
}

int gw_jpeg_sniff(const uint8_t *data, size_t len)
{
    return len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
}

int32_t gw_jpeg_open(const uint8_t *data, size_t len, const char *label, struct gw_jpeg_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (len > (size_t)0xFFFFFFFFu) return mm_err_set(err, MM_TOO_LARGE, "%s: JPEG over 4 GiB", label);
    struct gw_jpeg_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->label = label;
    s->cinfo.err = jpeg_std_error(&s->jerr.pub);
    s->jerr.pub.error_exit = gw_jpeg_error_exit;
    s->jerr.pub.emit_message = gw_jpeg_emit_message;
    if (setjmp(s->jerr.jump)) {
        int32_t rc = mm_err_set(err, MM_FORMAT, "%s: bad JPEG: %s", label, s->jerr.msg);
        gw_jpeg_close(s);
        return rc;
    }
    jpeg_create_decompress(&s->cinfo);
    s->created = 1;
    /* Progressive JPEGs keep every coefficient in memory (2 bytes per sample): cap what libjpeg may use so a
     * huge claimed size fails cleanly instead of taking gigabytes. */
    s->cinfo.mem->max_memory_to_use = GW_JPEG_MAX_MEMORY;
    s->progress.progress_monitor = gw_jpeg_progress;
    s->cinfo.progress = &s->progress;
    jpeg_mem_src(&s->cinfo, data, (unsigned long)len);
    jpeg_read_header(&s->cinfo, TRUE);
    if (s->jerr.truncated) {
        gw_jpeg_close(s);
        return mm_err_set(err, MM_FORMAT, "%s: truncated JPEG (the data ends inside the header)", label);
    }
    J_COLOR_SPACE cs = s->cinfo.jpeg_color_space;
    if (cs == JCS_CMYK || cs == JCS_YCCK) {
        s->cmyk = 1;
    } else if (cs != JCS_YCbCr && cs != JCS_GRAYSCALE && cs != JCS_RGB) {
        gw_jpeg_close(s);
        return mm_err_set(err, MM_UNSUPPORTED, "%s: JPEG colour space %d is not supported", label, (int)cs);
    }
    *width = s->cinfo.image_width;
    *height = s->cinfo.image_height;
    *out = s;
    return MM_OK;
}

int32_t gw_jpeg_decode(struct gw_jpeg_src *s, uint32_t scale_denom, const struct gw_row_sink *sink,
                       struct mm_err *err)
{
    /* volatile: modified between setjmp and a possible longjmp */
    uint8_t *volatile buf = NULL;
    if (setjmp(s->jerr.jump)) {
        gw_aligned_free(buf);
        return mm_err_set(err, MM_FORMAT, "%s: bad JPEG: %s", s->label, s->jerr.msg);
    }
    /* CMYK: libjpeg turns YCCK into CMYK; PIL then reads the samples inverted ("CMYK;I", Adobe's
     * polarity, assumed for every CMYK JPEG) and applies its CMYK -> RGB formula. */
    s->cinfo.out_color_space = s->cmyk ? JCS_CMYK : JCS_RGB;
    s->cinfo.dct_method = JDCT_ISLOW;
    s->cinfo.do_fancy_upsampling = TRUE;
    s->cinfo.scale_num = 1;
    s->cinfo.scale_denom = scale_denom == 2 || scale_denom == 4 || scale_denom == 8 ? scale_denom : 1;
    jpeg_start_decompress(&s->cinfo);
    const uint32_t w = s->cinfo.output_width, h = s->cinfo.output_height;
    const int comps = s->cmyk ? 4 : 3;
    if (s->cinfo.output_components != comps || w == 0 || h == 0) {
        jpeg_abort_decompress(&s->cinfo);
        return mm_err_set(err, MM_FORMAT, "%s: JPEG decodes to %d components", s->label,
                          s->cinfo.output_components);
    }
    int32_t rc = sink->begin(sink->ctx, w, h, err);
    if (rc) {
        jpeg_abort_decompress(&s->cinfo);
        return rc;
    }
    /* A few rows at a time (libjpeg's natural unit) into a small buffer with slack for the vector loads.
     * libjpeg-turbo's SIMD colour conversion writes a 16/32-byte aligned output row with non-temporal
     * stores, which push it out to memory just before the resampler reads it back (the horizontal pass
     * measured 3x slower for it on an Intel Xeon). Each row therefore starts ROW_SKEW bytes past a 64-byte
     * boundary, where libjpeg takes its ordinary-store path and the row stays in cache. */
    enum { ROW_SKEW = 8 };
    const size_t stride = (size_t)w * (size_t)comps, pitch = (stride + 63) & ~(size_t)63;
    const uint32_t batch = s->cinfo.rec_outbuf_height > 0 && s->cinfo.rec_outbuf_height <= 16
                               ? (uint32_t)s->cinfo.rec_outbuf_height
                               : 1;
    /* CMYK rows are converted into one extra RGB row (with slack) after the batch */
    const size_t rgb_off = ROW_SKEW + pitch * batch;
    buf = gw_aligned_alloc(rgb_off + (s->cmyk ? (size_t)w * 3 : 0) + GW_ROW_SLACK);
    if (!buf) {
        jpeg_abort_decompress(&s->cinfo);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for a %u-pixel row", s->label, w);
    }
    memset(buf + rgb_off + (s->cmyk ? (size_t)w * 3 : 0), 0, GW_ROW_SLACK);
    while (s->cinfo.output_scanline < h) {
        JSAMPROW rows[16];
        for (uint32_t i = 0; i < batch; i++) rows[i] = buf + ROW_SKEW + (size_t)i * pitch;
        JDIMENSION got = jpeg_read_scanlines(&s->cinfo, rows, batch);
        if (got == 0 || s->jerr.truncated) break;
        for (JDIMENSION i = 0; i < got && !rc; i++) {
            const uint8_t *r = buf + ROW_SKEW + (size_t)i * pitch;
            if (s->cmyk) {
                gw_cmyk_to_rgb(r, 4, w, 1, buf + rgb_off);
                r = buf + rgb_off;
            }
            rc = sink->row(sink->ctx, r, err);
        }
        if (rc) break;
    }
    if (!rc && (s->jerr.truncated || s->cinfo.output_scanline < h))
        rc = mm_err_set(err, MM_FORMAT, "%s: truncated JPEG (image data ends early)", s->label);
    gw_aligned_free(buf);
    buf = NULL;
    if (rc) {
        jpeg_abort_decompress(&s->cinfo);
        return rc;
    }
    jpeg_finish_decompress(&s->cinfo);
    return MM_OK;
}

void gw_jpeg_close(struct gw_jpeg_src *s)
{
    if (!s) return;
    if (s->created) jpeg_destroy_decompress(&s->cinfo);
    free(s);
}
