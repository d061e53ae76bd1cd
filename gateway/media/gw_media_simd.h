/* The pipeline's hot inner loops: the two resampling passes. Each has a portable C version and, on x86-64,
 * an AVX2 version picked at run time when the CPU has AVX2; both give identical results.
 *
 * Both passes are exact integer arithmetic (int16 weights with `prec` fractional bits, int32 sums): each
 * result is clamp((2^(prec-1) + sum w * px) >> prec, 0, 255), as PyTorch and Pillow compute it. Plus
 * 64-byte aligned allocation for row buffers and tensors. */
#ifndef GW_MEDIA_SIMD_H
#define GW_MEDIA_SIMD_H

#include <stddef.h>
#include <stdint.h>

/** Bytes of slack every image buffer the passes read must have past its last pixel (vector loads). */
#define GW_ROW_SLACK 64

/** Vertical pass: out[i] = round(sum_j w[j] * rows[j][i]) for i < n (k taps, k row pointers). */
void gw_simd_vpass_u8(const uint8_t *const *rows, const int16_t *w, uint32_t k, uint32_t prec, size_t n,
                      uint8_t *out);

/** Horizontal pass of one RGB8 row: out pixel x = round(sum_j w[x][j] * in pixel start[x] + j), per channel,
 * for x < out_w. wpair holds the weights two by two (w[j] in the low 16 bits, w[j+1] in the high), kpad
 * (a multiple of 4) weights per output pixel, zero past the real taps. `in` must be readable for
 * GW_ROW_SLACK bytes past its last pixel. prepared is gw_simd_hpass_prepare's table for these weights (or
 * NULL: the portable loop). */
void gw_simd_hpass_u8(const uint8_t *in, const uint32_t *start, const uint32_t *wpair, const void *prepared,
                      uint32_t kpad, uint32_t prec, uint32_t out_w, uint8_t *out);

/** The weight layout the vector kernel wants (free with gw_aligned_free), or NULL when the portable loop will
 * run (no AVX2, or out of memory: still correct, only slower). */
void *gw_simd_hpass_prepare(const uint32_t *wpair, uint32_t kpad, uint32_t out_w);

/** Whether the AVX2 versions are in use (for the benchmark's report). */
int gw_simd_have_avx2(void);

/** Use the AVX2 versions (when the CPU has AVX2) or the portable ones: for tests comparing the two. Set it
 * while no resizer is in use (gw_simd_hpass_prepare's layout depends on it). The environment variable
 * MMGW_NO_AVX2=1 selects the portable ones at start. */
void gw_simd_use_avx2(int enable);

void *gw_aligned_alloc(size_t size);
void gw_aligned_free(void *p);

#endif
