#include "kn_norm.h"

#include <math.h>

static void rms_row(const float *x, const float *w, int64_t dim, float eps, float *out)
{
    double ss = 0.0;
    for (int64_t j = 0; j < dim; j++) ss += (double)x[j] * x[j];
    float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t j = 0; j < dim; j++) out[j] = x[j] * r * (1.0f + w[j]);
}

void kn_rmsnorm_gemma(const float *x, int64_t x_stride, const float *w, int64_t n, int64_t dim, float eps,
                      float *out, int64_t out_stride)
{
    for (int64_t i = 0; i < n; i++) rms_row(x + i * x_stride, w, dim, eps, out + i * out_stride);
}

void kn_head_rmsnorm_gemma(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                           const float *w, float eps)
{
    for (int64_t i = 0; i < n; i++)
        for (int32_t h = 0; h < n_heads; h++) {
            float *p = x + i * stride + (int64_t)h * head_dim;
            rms_row(p, w, head_dim, eps, p);
        }
}

void kn_layernorm(const float *x, int64_t x_stride, const float *w, const float *b, int64_t n, int64_t dim,
                  float eps, float *out, int64_t out_stride)
{
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * x_stride;
        float *oi = out + i * out_stride;
        double s = 0.0;
        for (int64_t j = 0; j < dim; j++) s += xi[j];
        double mean = s / (double)dim, v = 0.0;
        for (int64_t j = 0; j < dim; j++) v += ((double)xi[j] - mean) * ((double)xi[j] - mean);
        float r = (float)(1.0 / sqrt(v / (double)dim + (double)eps)), m = (float)mean;
        for (int64_t j = 0; j < dim; j++) oi[j] = (xi[j] - m) * r * w[j] + (b ? b[j] : 0.0f);
    }
}
