/* Antialiased bicubic resampling (see gw_resample.h). The weights follow PyTorch's
 * _compute_weights_aa / _compute_index_ranges_int16_weights step by step (in double, like Pillow's
 * precompute_coeffs), because the integer window bounds and the int16 quantisation decide the last bit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gw_media_simd.h"
#include "gw_resample.h"

/* Keys' cubic convolution kernel with a = -0.5. */
static double cubic_aa(double x)
{
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    return 0.0;
}

int32_t gw_resample_axis_init(struct gw_resample_axis *ax, uint32_t in_size, uint32_t out_size,
                              struct mm_err *err)
{
    memset(ax, 0, sizeof *ax);
    if (in_size == 0 || out_size == 0)
        return mm_err_set(err, MM_INVALID, "resample: empty axis %u -> %u", in_size, out_size);
    ax->in_size = in_size;
    ax->out_size = out_size;
    if (in_size == out_size) {
        ax->identity = 1;
        return MM_OK;
    }
    const double scale = (double)in_size / (double)out_size;
    const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    const uint32_t max_interp = (uint32_t)ceil(support) * 2 + 1;
    if (max_interp > GW_RESAMPLE_MAX_TAPS)
        return mm_err_set(err, MM_TOO_LARGE, "resample: shrinking %u -> %u needs %u taps, over %d", in_size,
                          out_size, max_interp, GW_RESAMPLE_MAX_TAPS);
    uint32_t ksize = max_interp < in_size ? max_interp : in_size;
    uint32_t kpad = (ksize + 3) & ~3u;
    ax->ksize = ksize;
    ax->kpad = kpad;
    ax->start = malloc((size_t)out_size * sizeof *ax->start);
    ax->w = calloc((size_t)out_size * kpad, sizeof *ax->w);
    ax->wpair = calloc((size_t)out_size * (kpad / 2), sizeof *ax->wpair);
    double *wd = calloc((size_t)out_size * max_interp, sizeof *wd);
    int64_t *xmins = malloc((size_t)out_size * sizeof *xmins);
    int64_t *xsizes = malloc((size_t)out_size * sizeof *xsizes);
    int32_t rc = MM_OK;
    if (!ax->start || !ax->w || !ax->wpair || !wd || !xmins || !xsizes) {
        rc = mm_err_set(err, MM_NOMEM, "resample: out of memory for %u -> %u taps", in_size, out_size);
        goto out;
    }
    double w_max = 0.0;
    for (uint32_t i = 0; i < out_size; i++) {
        const double center = scale * (i + 0.5);
        int64_t xmin = (int64_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int64_t xmax = (int64_t)(center + support + 0.5);
        if (xmax > (int64_t)in_size) xmax = in_size;
        int64_t xsize = xmax - xmin;
        if (xsize > (int64_t)ksize) xsize = ksize; /* PyTorch clamps rare precision overshoots too */
        if (xsize < 0) xsize = 0;
        double *w = wd + (size_t)i * max_interp, total = 0.0;
        for (int64_t j = 0; j < xsize; j++) {
            w[j] = cubic_aa((j + xmin - center + 0.5) * invscale);
            total += w[j];
        }
        if (total != 0.0)
            for (int64_t j = 0; j < xsize; j++) {
                w[j] /= total;
                if (w[j] > w_max) w_max = w[j];
            }
        xmins[i] = xmin;
        xsizes[i] = xsize;
    }
    /* The largest precision (fractional bits, < 22) at which the biggest weight still fits in int16. */
    uint32_t prec;
    for (prec = 0; prec < 22; prec++) {
        int next = (int)(0.5 + w_max * (1 << (prec + 1)));
        if (next >= (1 << 15)) break;
    }
    ax->precision = prec;
    for (uint32_t i = 0; i < out_size; i++) {
        int64_t start = xmins[i];
        if (start + (int64_t)ksize > (int64_t)in_size) start = (int64_t)in_size - ksize;
        if (start < 0) start = 0;
        ax->start[i] = (uint32_t)start;
        const double *w = wd + (size_t)i * max_interp;
        int16_t *q = ax->w + (size_t)i * kpad;
        for (int64_t j = 0; j < xsizes[i]; j++) {
            double v = w[j] * (1 << prec);
            q[xmins[i] - start + j] = (int16_t)(v < 0 ? (int)(-0.5 + v) : (int)(0.5 + v));
        }
        uint32_t *pr = ax->wpair + (size_t)i * (kpad / 2);
        for (uint32_t j = 0; j < kpad; j += 2)
            pr[j / 2] = (uint32_t)(uint16_t)q[j] | (uint32_t)(uint16_t)q[j + 1] << 16;
    }
out:
    free(wd);
    free(xmins);
    free(xsizes);
    if (rc) gw_resample_axis_free(ax);
    return rc;
}

void gw_resample_axis_free(struct gw_resample_axis *ax)
{
    free(ax->start);
    free(ax->w);
    free(ax->wpair);
    ax->start = NULL;
    ax->w = NULL;
    ax->wpair = NULL;
}

int32_t gw_resizer_init(struct gw_resizer *r, uint32_t in_w, uint32_t in_h, uint32_t out_w, uint32_t out_h,
                        struct mm_err *err)
{
    memset(r, 0, sizeof *r);
    r->in_w = in_w;
    r->in_h = in_h;
    r->out_w = out_w;
    r->out_h = out_h;
    int32_t rc = gw_resample_axis_init(&r->x, in_w, out_w, err);
    if (!rc) rc = gw_resample_axis_init(&r->y, in_h, out_h, err);
    if (rc) {
        gw_resizer_free(r);
        return rc;
    }
    /* A row of the ring is overwritten only when every output window that contains it has been pulled:
     * ksize rows suffice because windows move forward monotonically. */
    r->ring_rows = r->y.identity ? 1 : r->y.ksize;
    r->hstride = (size_t)out_w * 3;
    size_t bytes = (size_t)r->ring_rows * r->hstride + GW_ROW_SLACK;
    r->ring = gw_aligned_alloc(bytes);
    if (!r->ring) {
        gw_resizer_free(r);
        return mm_err_set(err, MM_NOMEM, "resample: out of memory for %zu bytes of scratch", bytes);
    }
    memset(r->ring, 0, bytes);
    if (!r->x.identity) r->hprep = gw_simd_hpass_prepare(r->x.wpair, r->x.kpad, out_w);
    return MM_OK;
}

void gw_resizer_free(struct gw_resizer *r)
{
    gw_resample_axis_free(&r->x);
    gw_resample_axis_free(&r->y);
    gw_aligned_free(r->ring);
    gw_aligned_free(r->hprep);
    r->ring = NULL;
    r->hprep = NULL;
}

void gw_resizer_reset(struct gw_resizer *r)
{
    r->pushed = 0;
    r->emitted = 0;
}

void gw_resizer_push(struct gw_resizer *r, const uint8_t *row)
{
    uint8_t *dst = r->ring + (size_t)(r->pushed % r->ring_rows) * r->hstride;
    if (r->x.identity)
        memcpy(dst, row, r->hstride);
    else
        gw_simd_hpass_u8(row, r->x.start, r->x.wpair, r->hprep, r->x.kpad, r->x.precision, r->out_w, dst);
    r->pushed++;
}

int gw_resizer_can_pull(const struct gw_resizer *r)
{
    if (r->emitted >= r->out_h) return 0;
    if (r->y.identity) return r->pushed > r->emitted;
    return r->pushed >= r->y.start[r->emitted] + r->y.ksize;
}

const uint8_t *gw_resizer_pull(struct gw_resizer *r, uint8_t *out)
{
    const uint32_t y = r->emitted++;
    if (r->y.identity) return r->ring + (size_t)(y % r->ring_rows) * r->hstride;
    const uint8_t *rows[GW_RESAMPLE_MAX_TAPS];
    const uint32_t first = r->y.start[y], k = r->y.ksize;
    for (uint32_t j = 0; j < k; j++) rows[j] = r->ring + (size_t)((first + j) % r->ring_rows) * r->hstride;
    gw_simd_vpass_u8(rows, r->y.w + (size_t)y * r->y.kpad, k, r->y.precision, r->hstride, out);
    return out;
}
