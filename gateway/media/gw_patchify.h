/* Rescale + normalize + temporal patching, fused: resized RGB8 rows go straight into their places in the
 * patch tensor through a per-channel lookup table (256 normalised values per channel), one output row at a
 * time, so no full-size float image ever exists.
 *
 * Layout (the reference processors'): rows (t, h/M, w/M, M, M), columns (C, T, P, P); a row of pixels y of
 * frame slot t lands in the P-wide runs of every patch of patch-row y / P. */
#ifndef GW_PATCHIFY_H
#define GW_PATCHIFY_H

#include <stddef.h>
#include <stdint.h>

#include <mmgw/plugin.h>

struct gw_patch_geom {
    uint32_t P, M, T, C; /* patch, merge, temporal patch, channels (3) */
    uint32_t gh, gw;     /* grid in patches: height / P, width / P (multiples of M) */
    uint32_t dim;        /* C * T * P * P */
};

/** Normalised value of every uint8 level per channel, in the output dtype. */
struct gw_patch_lut {
    float f32[3][256];
    uint16_t bf16[3][256];
};

void gw_patch_lut_init(struct gw_patch_lut *lut, const struct mmgw_vision_params *vp);

/** Geometry of a (height x width) frame; returns -1 when the sizes are not multiples of P * M or the
 * parameters are out of range. */
int gw_patch_geom_init(struct gw_patch_geom *g, const struct mmgw_vision_params *vp, uint32_t height,
                       uint32_t width);

/** Write a band of P pixel rows (rows[0..P-1], each width RGB8 pixels; patch row `band`) of temporal group
 * `group` into slots t0 .. t0 + nt - 1: patch after patch, each written front to back, so the output is
 * filled sequentially. dtype is MM_DT_F32 or MM_DT_BF16; out is the whole tensor. */
void gw_patch_write_band(void *out, int32_t dtype, const struct gw_patch_geom *g, uint64_t group, uint32_t t0,
                         uint32_t nt, uint32_t band, const uint8_t *const *rows,
                         const struct gw_patch_lut *lut);

/** Order the band writer's non-temporal stores before anything that follows (call once per item, before
 * the result is handed to another thread). */
void gw_patch_fence(void);

/** Write pixel row y (width RGB8 pixels) of temporal group `group` into slots t0 .. t0 + nt - 1.
 * dtype is MM_DT_F32 or MM_DT_BF16; out is the whole tensor. */
void gw_patch_write_row(void *out, int32_t dtype, const struct gw_patch_geom *g, uint64_t group, uint32_t t0,
                        uint32_t nt, uint32_t y, const uint8_t *rgb, const struct gw_patch_lut *lut);

#endif
