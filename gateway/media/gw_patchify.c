/* Fused rescale/normalize/patchify (see gw_patchify.h). */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "gw_patchify.h"
#include "mm_dtype.h"

void gw_patch_lut_init(struct gw_patch_lut *lut, const struct mmgw_vision_params *vp)
{
    /* The reference (transformers' torchvision backend) folds the rescale into mean and std, in float32:
     * (x - mean * 255) / (std * 255). Computed the same way, in float, the table equals it bit for bit. */
    double inv = 1.0 / vp->rescale, near = nearbyint(inv);
    if (fabs(inv - near) < 1e-4 * near) inv = near; /* 1 / (float)(1/255) is 255 to the reference */
    const float r = (float)inv;
    for (int c = 0; c < 3; c++) {
        const float m = vp->image_mean[c] * r, s = vp->image_std[c] * r;
        for (int v = 0; v < 256; v++) {
            float f = ((float)v - m) / s;
            lut->f32[c][v] = f;
            lut->bf16[c][v] = mm_f32_to_bf16(f);
        }
    }
}

int gw_patch_geom_init(struct gw_patch_geom *g, const struct mmgw_vision_params *vp, uint32_t height,
                       uint32_t width)
{
    memset(g, 0, sizeof *g);
    if (vp->patch_size == 0 || vp->patch_size > 64 || vp->merge_size == 0 || vp->merge_size > 8 ||
        vp->temporal_patch_size == 0 || vp->temporal_patch_size > 16 || vp->channels != 3)
        return -1;
    uint32_t f = vp->patch_size * vp->merge_size;
    if (height == 0 || width == 0 || height % f || width % f) return -1;
    g->P = vp->patch_size;
    g->M = vp->merge_size;
    g->T = vp->temporal_patch_size;
    g->C = 3;
    g->gh = height / g->P;
    g->gw = width / g->P;
    g->dim = g->C * g->T * g->P * g->P;
    return 0;
}

/* One P-pixel run of one channel into nt temporal slots pp values apart. P is a compile-time constant in
 * the common case (14) so the loops unroll and the stores stay inline. */
static inline void run_f32(float *dst, size_t pp, uint32_t nt, const uint8_t *px, uint32_t c,
                           const float *lut, uint32_t P)
{
    for (uint32_t i = 0; i < P; i++) {
        const float v = lut[px[i * 3 + c]];
        for (uint32_t t = 0; t < nt; t++) dst[t * pp + i] = v;
    }
}

static inline void run_bf16(uint16_t *dst, size_t pp, uint32_t nt, const uint8_t *px, uint32_t c,
                            const uint16_t *lut, uint32_t P)
{
    for (uint32_t i = 0; i < P; i++) {
        const uint16_t v = lut[px[i * 3 + c]];
        for (uint32_t t = 0; t < nt; t++) dst[t * pp + i] = v;
    }
}

static inline void write_row(void *out, int32_t dtype, const struct gw_patch_geom *g, uint64_t group,
                             uint32_t t0, uint32_t nt, uint32_t y, const uint8_t *rgb,
                             const struct gw_patch_lut *lut, const uint32_t P)
{
    const uint32_t M = g->M, T = g->T;
    const uint32_t bh = y / P, py = y % P;
    const uint32_t bhm = bh / M, mh = bh % M;
    const uint64_t per_group = (uint64_t)g->gh * g->gw;
    const uint64_t row_base = group * per_group + (uint64_t)bhm * (g->gw / M) * M * M + (uint64_t)mh * M;
    const size_t pp = (size_t)P * P;
    for (uint32_t bx = 0; bx < g->gw; bx++) {
        const uint32_t bwm = bx / M, mw = bx % M;
        const uint64_t row = row_base + (uint64_t)bwm * M * M + mw;
        const uint8_t *px = rgb + (size_t)bx * P * 3;
        for (uint32_t c = 0; c < 3; c++) {
            const size_t col = (size_t)c * T * pp + (size_t)t0 * pp + (size_t)py * P;
            if (dtype == MM_DT_BF16)
                run_bf16((uint16_t *)out + row * g->dim + col, pp, nt, px, c, lut->bf16[c], P);
            else
                run_f32((float *)out + row * g->dim + col, pp, nt, px, c, lut->f32[c], P);
        }
    }
}

void gw_patch_write_row(void *out, int32_t dtype, const struct gw_patch_geom *g, uint64_t group, uint32_t t0,
                        uint32_t nt, uint32_t y, const uint8_t *rgb, const struct gw_patch_lut *lut)
{
    /* Constant patch size and slot count in the common cases (images: 2 slots; video frames: 1), so the
     * compiler unrolls the runs into straight-line stores. */
    if (g->P == 14 && nt == 2)
        write_row(out, dtype, g, group, t0, 2, y, rgb, lut, 14);
    else if (g->P == 14 && nt == 1)
        write_row(out, dtype, g, group, t0, 1, y, rgb, lut, 14);
    else
        write_row(out, dtype, g, group, t0, nt, y, rgb, lut, g->P);
}

/* Copy a block of n floats to dst. The output tensor is large and not read again by us, so on x86 the copy
 * uses non-temporal stores when dst is 16-byte aligned: no read-for-ownership of every destination line,
 * half the memory traffic. gw_patch_fence() makes them visible before the result is handed over. */
static inline void put_f32(float *dst, const float *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE__)
    if (((uintptr_t)dst & 15) == 0 && n % 4 == 0) {
        for (size_t i = 0; i < n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
        return;
    }
#endif
    memcpy(dst, src, n * sizeof *dst);
}

/* The same for bf16 blocks, with 8-byte non-temporal stores (bf16 blocks are only 8-byte aligned). */
static inline void put_bf16(uint16_t *dst, const uint16_t *src, size_t n)
{
#if defined(__x86_64__) && defined(__SSE2__)
    if (((uintptr_t)dst & 7) == 0 && n % 4 == 0) {
        for (size_t i = 0; i < n; i += 4) {
            long long v;
            memcpy(&v, src + i, sizeof v);
            _mm_stream_si64((long long *)(void *)(dst + i), v);
        }
        return;
    }
#endif
    memcpy(dst, src, n * sizeof *dst);
}

void gw_patch_fence(void)
{
#if defined(__x86_64__) && defined(__SSE__)
    _mm_sfence();
#endif
}

/* One patch: for each channel the P x P block is looked up once into a small buffer, then copied to every
 * temporal slot it fills (the slots of a channel are adjacent, so a still image's patch is one contiguous
 * run of C * T * P * P values, written front to back). */
static inline void band_f32(float *out, const struct gw_patch_geom *g, uint64_t row0, uint32_t t0,
                            uint32_t nt, const uint8_t *const *rows, const struct gw_patch_lut *lut,
                            const uint32_t P)
{
    const uint32_t M = g->M, T = g->T;
    const size_t pp = (size_t)P * P;
    float blk[64 * 64];
    for (uint32_t bx = 0; bx < g->gw; bx++) {
        const uint64_t row = row0 + (uint64_t)(bx / M) * M * M + bx % M;
        float *dst = out + row * g->dim;
        for (uint32_t c = 0; c < 3; c++) {
            const float *lc = lut->f32[c];
            for (uint32_t py = 0; py < P; py++) {
                const uint8_t *px = rows[py] + (size_t)bx * P * 3 + c;
                for (uint32_t i = 0; i < P; i++) blk[py * P + i] = lc[px[i * 3]];
            }
            for (uint32_t t = 0; t < nt; t++) put_f32(dst + ((size_t)c * T + t0 + t) * pp, blk, pp);
        }
    }
}

static inline void band_bf16(uint16_t *out, const struct gw_patch_geom *g, uint64_t row0, uint32_t t0,
                             uint32_t nt, const uint8_t *const *rows, const struct gw_patch_lut *lut,
                             const uint32_t P)
{
    const uint32_t M = g->M, T = g->T;
    const size_t pp = (size_t)P * P;
    uint16_t blk[64 * 64];
    for (uint32_t bx = 0; bx < g->gw; bx++) {
        const uint64_t row = row0 + (uint64_t)(bx / M) * M * M + bx % M;
        uint16_t *dst = out + row * g->dim;
        for (uint32_t c = 0; c < 3; c++) {
            const uint16_t *lc = lut->bf16[c];
            for (uint32_t py = 0; py < P; py++) {
                const uint8_t *px = rows[py] + (size_t)bx * P * 3 + c;
                for (uint32_t i = 0; i < P; i++) blk[py * P + i] = lc[px[i * 3]];
            }
            for (uint32_t t = 0; t < nt; t++) put_bf16(dst + ((size_t)c * T + t0 + t) * pp, blk, pp);
        }
    }
}

void gw_patch_write_band(void *out, int32_t dtype, const struct gw_patch_geom *g, uint64_t group, uint32_t t0,
                         uint32_t nt, uint32_t band, const uint8_t *const *rows,
                         const struct gw_patch_lut *lut)
{
    const uint32_t M = g->M;
    const uint64_t row0 = group * (uint64_t)g->gh * g->gw + (uint64_t)(band / M) * (g->gw / M) * M * M +
                          (uint64_t)(band % M) * M;
    if (dtype == MM_DT_BF16) {
        if (g->P == 14)
            band_bf16(out, g, row0, t0, nt, rows, lut, 14);
        else
            band_bf16(out, g, row0, t0, nt, rows, lut, g->P);
    } else {
        if (g->P == 14)
            band_f32(out, g, row0, t0, nt, rows, lut, 14);
        else
            band_f32(out, g, row0, t0, nt, rows, lut, g->P);
    }
}
