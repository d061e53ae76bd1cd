#include "kn_act.h"

#include <math.h>

#include "kn_simd.h"

/* exp through the vectorizable polynomial of kn_simd.h (relative error < 2e-7, like libm's expf within a few
 * ulp): the loop then runs 8 or 16 lanes wide instead of one libm call per element, which dominated the
 * MoE experts' time at small batches */
KN_INLINE void swiglu_body(const float *gate, const float *up, int64_t n, float alpha, float limit,
                           float *out)
{
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i], u = up[i];
        g = g < limit ? g : limit; /* fminf would turn NaN into limit; keep NaN visible */
        u = u < -limit ? -limit : (u > limit ? limit : u);
        out[i] = (u + 1.0f) * g / (1.0f + exp_body(-alpha * g));
    }
}

KN_DISPATCH(swiglu, (const float *gate, const float *up, int64_t n, float alpha, float limit, float *out),
            (gate, up, n, alpha, limit, out))

void kn_swiglu_clamped(const float *gate, const float *up, int64_t n, float alpha, float limit, float *out)
{
    KN_CALL(swiglu, (gate, up, n, alpha, limit, out));
}

void kn_gelu(float *x, int64_t n, int32_t kind)
{
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        if (kind == KN_GELU_TANH)
            x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
        else if (kind == KN_GELU_QUICK)
            x[i] = v / (1.0f + expf(-1.702f * v));
        else
            x[i] = (float)(0.5 * v * (1.0 + erf((double)v * 0.70710678118654752440)));
    }
}

float kn_softmax_row(float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    if (m == -INFINITY) {
        for (int64_t i = 0; i < n; i++) x[i] = 0.0f;
        return m;
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
    return m;
}
