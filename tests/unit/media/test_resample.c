/* The resampler (gateway/media/gw_resample.h): properties that must hold exactly, and agreement with an
 * independent implementation of the same filter (Pillow's: double weights, 22-bit fixed point) within one
 * level, for many sizes up and down. CTest runs this twice: with the AVX2 kernels and with MMGW_NO_AVX2=1,
 * so both code paths are held to the same checks. */
#include <math.h>

#include "gw_media_simd.h"
#include "gw_resample.h"
#include "media_fixture.h"

/* Resize a whole RGB8 image through the streaming API. */
static uint8_t *resize(const uint8_t *src, uint32_t iw, uint32_t ih, uint32_t ow, uint32_t oh)
{
    struct gw_resizer r;
    struct mm_err err = {0};
    if (gw_resizer_init(&r, iw, ih, ow, oh, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    uint8_t *out = malloc((size_t)ow * oh * 3), *row = malloc((size_t)ow * 3 + GW_ROW_SLACK);
    uint8_t *in = malloc((size_t)iw * 3 + GW_ROW_SLACK);
    memset(in, 0, (size_t)iw * 3 + GW_ROW_SLACK);
    uint32_t y = 0;
    gw_resizer_reset(&r);
    for (uint32_t yy = 0; yy < ih; yy++) {
        memcpy(in, src + (size_t)yy * iw * 3, (size_t)iw * 3);
        gw_resizer_push(&r, in);
        while (gw_resizer_can_pull(&r)) {
            const uint8_t *o = gw_resizer_pull(&r, row);
            memcpy(out + (size_t)y++ * ow * 3, o, (size_t)ow * 3);
        }
    }
    CHECK_EQ_INT(y, oh);
    gw_resizer_free(&r);
    free(row);
    free(in);
    return out;
}

/* ---- an independent implementation: Pillow's Resample.c (horizontal then vertical, 22-bit weights) ---- */

static double pil_bicubic(double x)
{
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static int pil_coeffs(int in, int out, int *bounds, int **kk_out)
{
    double scale = (double)in / out, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    int *kk = calloc((size_t)out * ksize, sizeof *kk);
    double *pre = calloc((size_t)ksize, sizeof *pre);
    for (int xx = 0; xx < out; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in) xmax = in;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            pre[x] = pil_bicubic((x + xmin - center + 0.5) * ss);
            ww += pre[x];
        }
        for (int x = 0; x < xmax; x++) {
            double w = ww != 0.0 ? pre[x] / ww : pre[x];
            kk[xx * ksize + x] = (int)(w < 0 ? -0.5 + w * (1 << 22) : 0.5 + w * (1 << 22));
        }
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    free(pre);
    *kk_out = kk;
    return ksize;
}

static uint8_t pil_clip(int64_t v)
{
    v >>= 22;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static uint8_t *pil_resize(const uint8_t *src, int iw, int ih, int ow, int oh)
{
    /* horizontal */
    uint8_t *tmp = malloc((size_t)ow * ih * 3);
    if (ow == iw)
        memcpy(tmp, src, (size_t)iw * ih * 3);
    else {
        int *b = malloc(sizeof(int) * 2 * ow), *kk;
        int ks = pil_coeffs(iw, ow, b, &kk);
        for (int y = 0; y < ih; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < 3; c++) {
                    int64_t s = 1 << 21;
                    for (int k = 0; k < b[x * 2 + 1]; k++)
                        s += (int64_t)src[((size_t)y * iw + b[x * 2] + k) * 3 + c] * kk[x * ks + k];
                    tmp[((size_t)y * ow + x) * 3 + c] = pil_clip(s);
                }
        free(b);
        free(kk);
    }
    uint8_t *out = malloc((size_t)ow * oh * 3);
    if (oh == ih)
        memcpy(out, tmp, (size_t)ow * oh * 3);
    else {
        int *b = malloc(sizeof(int) * 2 * oh), *kk;
        int ks = pil_coeffs(ih, oh, b, &kk);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow * 3; x++) {
                int64_t s = 1 << 21;
                for (int k = 0; k < b[y * 2 + 1]; k++)
                    s += (int64_t)tmp[(size_t)(b[y * 2] + k) * ow * 3 + x] * kk[y * ks + k];
                out[(size_t)y * ow * 3 + x] = pil_clip(s);
            }
        free(b);
        free(kk);
    }
    free(tmp);
    return out;
}

static void check_against_pil(uint32_t iw, uint32_t ih, uint32_t ow, uint32_t oh, uint64_t seed,
                              uint64_t *n_eq, uint64_t *n_all)
{
    uint8_t *src = fx_pattern((int)iw, (int)ih, 3, seed);
    uint8_t *a = resize(src, iw, ih, ow, oh), *b = pil_resize(src, (int)iw, (int)ih, (int)ow, (int)oh);
    if (a && b) {
        int worst = 0;
        for (size_t i = 0; i < (size_t)ow * oh * 3; i++) {
            int d = abs((int)a[i] - (int)b[i]);
            if (d > worst) worst = d;
            *n_eq += d == 0;
        }
        *n_all += (uint64_t)ow * oh * 3;
        /* One level in the intermediate row can become two after the vertical pass's overshooting weights. */
        CHECK_MSG(worst <= 2, "%ux%u -> %ux%u: differs from Pillow's algorithm by %d levels", iw, ih, ow, oh,
                  worst);
    }
    /* the portable kernels give the very same bytes */
    if (a && gw_simd_have_avx2()) {
        gw_simd_use_avx2(0);
        uint8_t *c = resize(src, iw, ih, ow, oh);
        gw_simd_use_avx2(1);
        CHECK_MSG(c && memcmp(a, c, (size_t)ow * oh * 3) == 0,
                  "%ux%u -> %ux%u: AVX2 and portable kernels differ", iw, ih, ow, oh);
        free(c);
    }
    free(src);
    free(a);
    free(b);
}

int main(void)
{
    printf("AVX2 kernels: %s\n", gw_simd_have_avx2() ? "yes" : "no");

    /* A constant image stays exactly constant, whatever the scale (weights sum to one). */
    const uint32_t sizes[][4] = {{1, 1, 28, 28},       {18, 11, 84, 56},    {640, 427, 644, 420},
                                 {3000, 20, 56, 28},   {97, 1501, 28, 336}, {5, 3, 5, 3},
                                 {300, 200, 300, 100}, {300, 200, 150, 200}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint32_t iw = sizes[s][0], ih = sizes[s][1], ow = sizes[s][2], oh = sizes[s][3];
        uint8_t *src = malloc((size_t)iw * ih * 3);
        for (size_t i = 0; i < (size_t)iw * ih; i++)
            src[i * 3] = 7, src[i * 3 + 1] = 128, src[i * 3 + 2] = 255;
        uint8_t *out = resize(src, iw, ih, ow, oh);
        int bad = 0;
        for (size_t i = 0; out && i < (size_t)ow * oh; i++)
            bad += out[i * 3] != 7 || out[i * 3 + 1] != 128 || out[i * 3 + 2] != 255;
        CHECK_MSG(out && bad == 0, "%ux%u -> %ux%u: %d pixels of a constant image changed", iw, ih, ow, oh,
                  bad);
        free(src);
        free(out);
    }

    /* The identity size returns the image unchanged. */
    {
        uint8_t *src = fx_pattern(61, 37, 3, 5);
        uint8_t *out = resize(src, 61, 37, 61, 37);
        CHECK(out && memcmp(src, out, 61 * 37 * 3) == 0);
        free(src);
        free(out);
    }

    /* Mirror symmetry: the filter is symmetric, so resizing a mirrored image gives the mirrored result. */
    {
        const uint32_t iw = 123, ih = 9, ow = 56, oh = 9;
        uint8_t *src = fx_pattern(iw, ih, 3, 11), *mir = malloc(iw * ih * 3);
        for (uint32_t y = 0; y < ih; y++)
            for (uint32_t x = 0; x < iw; x++)
                memcpy(mir + (y * iw + x) * 3, src + (y * iw + (iw - 1 - x)) * 3, 3);
        uint8_t *a = resize(src, iw, ih, ow, oh), *b = resize(mir, iw, ih, ow, oh);
        int bad = 0;
        for (uint32_t y = 0; a && b && y < oh; y++)
            for (uint32_t x = 0; x < ow; x++)
                bad += memcmp(a + (y * ow + x) * 3, b + (y * ow + (ow - 1 - x)) * 3, 3) != 0;
        CHECK_MSG(bad == 0, "mirror symmetry broken at %d pixels", bad);
        free(src);
        free(mir);
        free(a);
        free(b);
    }

    /* Against Pillow's algorithm (same filter, 22-bit weights instead of int16): within one level, and
     * equal almost everywhere. Sizes: the golden cases, big shrinks, upscales, odd widths (the vector
     * kernel pairs output pixels), tiny images. */
    uint64_t n_eq = 0, n_all = 0, seed = 42;
    const uint32_t cases[][4] = {{600, 400, 588, 392},   {512, 512, 504, 504}, {451, 300, 448, 308},
                                 {1600, 120, 1596, 112}, {18, 11, 84, 56},     {3000, 2000, 812, 532},
                                 {640, 360, 644, 364},   {1, 1, 28, 28},       {2, 700, 28, 140},
                                 {999, 3, 29, 3},        {33, 77, 57, 13}};
    for (size_t s = 0; s < sizeof cases / sizeof cases[0]; s++)
        check_against_pil(cases[s][0], cases[s][1], cases[s][2], cases[s][3], seed++, &n_eq, &n_all);
    for (int i = 0; i < 60; i++) {
        uint32_t iw = 1 + (uint32_t)(fx_rand(&seed) % 400), ih = 1 + (uint32_t)(fx_rand(&seed) % 200);
        uint32_t ow = 1 + (uint32_t)(fx_rand(&seed) % 300), oh = 1 + (uint32_t)(fx_rand(&seed) % 150);
        check_against_pil(iw, ih, ow, oh, seed, &n_eq, &n_all);
    }
    double frac = (double)n_eq / (double)n_all;
    printf("equal to Pillow's algorithm: %.4f%% of %llu values\n", 100 * frac, (unsigned long long)n_all);
    CHECK_MSG(frac > 0.99, "only %.4f%% equal", 100 * frac);

    /* Shrinks beyond the tap limit are refused, not attempted. */
    struct gw_resizer r;
    struct mm_err err = {0};
    CHECK(gw_resizer_init(&r, 65535, 1, 28, 1, &err) == MM_TOO_LARGE);
    CHECK(gw_resizer_init(&r, 0, 1, 28, 1, &err) == MM_INVALID);
    return test_done();
}
