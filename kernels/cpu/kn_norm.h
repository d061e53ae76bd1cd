/* Normalizations in fp32 (statistics accumulated in double so long rows stay exact to fp32 rounding). */
#ifndef KN_NORM_H
#define KN_NORM_H

#include <stdint.h>

/** Gemma RMSNorm of n rows of dim: out = x * rsqrt(mean(x^2) + eps) * (1 + w). x and out may alias.
 * Row i starts at x + i * x_stride and out + i * out_stride. */
void kn_rmsnorm_gemma(const float *x, int64_t x_stride, const float *w, int64_t n, int64_t dim, float eps,
                      float *out, int64_t out_stride);

/** Per-head Gemma RMSNorm in place: n rows of n_heads heads of head_dim (heads contiguous inside a row,
 * rows stride apart), one [head_dim] weight shared by all heads. */
void kn_head_rmsnorm_gemma(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                           const float *w, float eps);

/** LayerNorm of n rows: out = (x - mean) / sqrt(var + eps) * w + b (biased variance); b may be NULL. */
void kn_layernorm(const float *x, int64_t x_stride, const float *w, const float *b, int64_t n, int64_t dim,
                  float eps, float *out, int64_t out_stride);

#endif
