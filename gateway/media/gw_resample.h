/* Separable antialiased bicubic resampling of RGB8 images, bit-exact with the reference: PyTorch's native
 * uint8 path of `interpolate(mode="bicubic", antialias=True)` that torchvision uses for uint8 images (the
 * algorithm of Pillow's BICUBIC resize): Keys' cubic with a = -0.5, support 2 scaled by the downscale factor
 * when shrinking, weights normalised per output pixel in double, then quantised to int16 with the largest
 * precision (<= 22 bits) that keeps the axis' biggest weight in range; horizontal pass first into uint8,
 * then the vertical pass; each pass rounds (adds half) and clamps to [0, 255]. An axis whose size does not
 * change is not filtered at all.
 *
 * Use: gw_resizer_init once per (input size, output size); per source image gw_resizer_reset, then push
 * source rows top to bottom and pull each output row as soon as gw_resizer_can_pull says its inputs are in.
 * Not thread-safe per resizer (it owns scratch). */
#ifndef GW_RESAMPLE_H
#define GW_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/* Taps per output pixel are 4 x the shrink factor + 1: a cap of 1025 allows shrinking 256x per axis (a
 * 65,535-pixel side to 256), far beyond any budget the plugins produce. */
#define GW_RESAMPLE_MAX_TAPS 1025

/** Filter taps along one axis: output i reads input [start[i], start[i] + ksize) with int16 weights
 * w[i * kpad ..] in fixed point with `precision` fractional bits (zero past the real taps; the window is
 * shifted to stay inside the input; kpad = ksize rounded up to 4). wpair holds the same weights packed two
 * per uint32 for the horizontal kernel. identity: in_size == out_size, no filtering. */
struct gw_resample_axis {
    uint32_t in_size, out_size;
    uint32_t ksize, kpad;
    uint32_t precision;
    int identity;
    uint32_t *start;
    int16_t *w;
    uint32_t *wpair;
};

int32_t gw_resample_axis_init(struct gw_resample_axis *ax, uint32_t in_size, uint32_t out_size,
                              struct mm_err *err);
void gw_resample_axis_free(struct gw_resample_axis *ax);

/** A streaming resizer: push source rows in order, pull output rows as soon as their inputs are in. Only
 * the last ksize horizontally filtered rows are kept (a ring), so a whole source image never needs to
 * be in memory. */
struct gw_resizer {
    uint32_t in_w, in_h, out_w, out_h;
    struct gw_resample_axis x, y;
    uint8_t *ring; /* ring_rows rows of hstride bytes (+ slack): horizontally filtered source rows */
    uint32_t ring_rows;
    size_t hstride;   /* out_w * 3 */
    uint32_t pushed;  /* source rows pushed since the last reset */
    uint32_t emitted; /* output rows pulled since the last reset */
    void *hprep;      /* the horizontal weights in the vector kernel's layout (NULL: portable loop) */
};

int32_t gw_resizer_init(struct gw_resizer *r, uint32_t in_w, uint32_t in_h, uint32_t out_w, uint32_t out_h,
                        struct mm_err *err);
void gw_resizer_free(struct gw_resizer *r);

/** Start a new source image (same size). */
void gw_resizer_reset(struct gw_resizer *r);

/** Push the next source row (in_w RGB8 pixels, readable for GW_ROW_SLACK bytes past its last pixel). */
void gw_resizer_push(struct gw_resizer *r, const uint8_t *row);

/** Whether the next output row (number r->emitted) has all its source rows pushed. */
int gw_resizer_can_pull(const struct gw_resizer *r);

/** The next output row (out_w RGB8 pixels): written to out, or a pointer into the ring when the vertical
 * axis is the identity. Call only when gw_resizer_can_pull; valid until the next push. */
const uint8_t *gw_resizer_pull(struct gw_resizer *r, uint8_t *out);

#endif
