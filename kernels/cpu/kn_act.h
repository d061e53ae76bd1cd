/* Element-wise activations of the M3 MLPs and the vision tower. */
#ifndef KN_ACT_H
#define KN_ACT_H

#include <stdint.h>

/** M3's clamped SwiGLU ("swigluoai", not interleaved): g = min(gate, limit), u = clamp(up, -limit, limit),
 * out = (u + 1) * g * sigmoid(alpha * g), over n elements. out may alias gate or up. */
void kn_swiglu_clamped(const float *gate, const float *up, int64_t n, float alpha, float limit, float *out);

enum kn_gelu_kind { KN_GELU_ERF = 0, KN_GELU_TANH = 1, KN_GELU_QUICK = 2 };

/** GELU in place over n elements: exact (erf), tanh approximation, or x * sigmoid(1.702 x). */
void kn_gelu(float *x, int64_t n, int32_t kind);

/** Numerically stable softmax of one row in place; -INFINITY entries get 0. Returns the row max. */
float kn_softmax_row(float *x, int64_t n);

#endif
