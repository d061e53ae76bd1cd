/* Shared helpers of the media tests: file loading, plugin set-up, tensor comparison, and small in-memory
 * test images encoded with libvips (so the tests need no files). */
#ifndef MEDIA_FIXTURE_H
#define MEDIA_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vips/vips.h>

#include "gw_media.h"
#include "gw_plugin.h"
#include "mm_dtype.h"
#include "mmgw_test.h"

static inline uint8_t *fx_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n > 0 ? (size_t)n : 0;
    return buf;
}

struct fx_plugin {
    struct gw_plugin *p;
    struct mmgw_plugin_instance *inst;
};

static inline int fx_plugin_open(struct fx_plugin *fp, const char *name, const struct mmgw_option *opts,
                                 uint32_t n)
{
    struct mm_err err = {0};
    fp->p = NULL;
    fp->inst = NULL;
    if (gw_plugin_load(name, NULL, &fp->p, &err) ||
        gw_plugin_instance_create(fp->p, opts, n, &fp->inst, &err)) {
        fprintf(stderr, "plugin %s: %s\n", name, err.msg);
        gw_plugin_unload(fp->p);
        fp->p = NULL;
        return -1;
    }
    return 0;
}

static inline void fx_plugin_close(struct fx_plugin *fp)
{
    gw_plugin_instance_destroy(fp->p, fp->inst);
    gw_plugin_unload(fp->p);
    fp->p = NULL;
    fp->inst = NULL;
}

static inline int32_t fx_process(const struct fx_plugin *fp, int32_t kind, const uint8_t *data, size_t len,
                                 const char *label, int32_t dtype, struct gw_media_result *out,
                                 struct mm_err *err)
{
    struct gw_media_input in = {kind, data, len, label};
    struct gw_media_options opt = {.dtype = dtype};
    return gw_media_process(&in, &fp->p->vt, fp->inst, &opt, out, err);
}

/* Element i of a tensor of dtype dt as float. */
static inline float fx_get(const void *data, int32_t dt, uint64_t i)
{
    switch (dt) {
    case MM_DT_F32:
        return ((const float *)data)[i];
    case MM_DT_F16:
        return mm_f16_to_f32(((const uint16_t *)data)[i]);
    case MM_DT_BF16:
        return mm_bf16_to_f32(((const uint16_t *)data)[i]);
    }
    return NAN;
}

struct fx_diff {
    double mean, p99, max;
    uint64_t n, exact;
};

static inline int fx_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* |a - b| statistics over n elements; exact counts elements equal after rounding a to b's dtype. */
static inline struct fx_diff fx_compare(const void *a, int32_t adt, const void *b, int32_t bdt, uint64_t n)
{
    struct fx_diff d = {0, 0, 0, n, 0};
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return d;
    double sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        float x = fx_get(a, adt, i), y = fx_get(b, bdt, i);
        float xr = x;
        if (bdt == MM_DT_F16) xr = mm_f16_to_f32(mm_f32_to_f16(x));
        if (bdt == MM_DT_BF16) xr = mm_bf16_to_f32(mm_f32_to_bf16(x));
        if (xr == y) d.exact++;
        v[i] = fabs((double)x - (double)y);
        sum += v[i];
        if (v[i] > d.max) d.max = v[i];
    }
    d.mean = n ? sum / n : 0;
    if (n) {
        qsort(v, n, sizeof *v, fx_cmp_double);
        d.p99 = v[(uint64_t)((n - 1) * 0.99)];
    }
    free(v);
    return d;
}

/* Encode a w x h x bands uchar image to `format` (".png", ".jpg", ".webp", ".gif", ".tif") with libvips. */
static inline uint8_t *fx_encode(const uint8_t *pixels, int w, int h, int bands, const char *format,
                                 size_t *len)
{
    VipsImage *img =
        vips_image_new_from_memory_copy(pixels, (size_t)w * h * bands, w, h, bands, VIPS_FORMAT_UCHAR);
    if (!img) return NULL;
    void *buf = NULL;
    size_t n = 0;
    int rc = vips_image_write_to_buffer(img, format, &buf, &n, NULL);
    g_object_unref(img);
    if (rc) {
        vips_error_clear();
        return NULL;
    }
    uint8_t *out = malloc(n);
    if (out) memcpy(out, buf, n);
    g_free(buf);
    *len = n;
    return out;
}

/* A deterministic pseudo-random generator (xorshift64*), so tests do not depend on libc's rand. */
static inline uint64_t fx_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* A smooth test pattern with some edges: gradients plus a few rectangles. */
static inline uint8_t *fx_pattern(int w, int h, int bands, uint64_t seed)
{
    uint8_t *p = calloc((size_t)w * h * bands + 1, 1);
    if (!p) return NULL;
    uint64_t s = seed | 1;
    int rx = (int)(fx_rand(&s) % (uint64_t)(w > 1 ? w : 1)),
        ry = (int)(fx_rand(&s) % (uint64_t)(h > 1 ? h : 1));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < bands; c++) {
                int v = (x * (37 + c * 11) / (w > 1 ? w : 1) * 4 + y * (53 - c * 7) / (h > 1 ? h : 1) * 3 +
                         c * 40) &
                        255;
                if (x > rx && y > ry && x < rx + w / 3 + 1 && y < ry + h / 3 + 1) v = 255 - v;
                p[((size_t)y * w + x) * bands + c] = (uint8_t)v;
            }
    return p;
}

static inline double fx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#endif
