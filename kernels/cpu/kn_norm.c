#include "kn_norm.h"

#include <math.h>

#include "kn_simd.h"

/* The sum of squares in double over 8 running partial sums: independent chains that vectorize (one long
 * chain of double adds is latency-bound and was most of a decode step's norm time). */
KN_INLINE void rms_row_body(const float *x, const float *w, int64_t dim, float eps, float *out)
{
    double p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= dim; j += 8)
        for (int k = 0; k < 8; k++) p[k] += (double)x[j + k] * (double)x[j + k];
    double ss = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
    for (; j < dim; j++) ss += (double)x[j] * (double)x[j];
    float r = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (j = 0; j < dim; j++) out[j] = x[j] * r * (1.0f + w[j]);
}

KN_INLINE void rms_rows_body(const float *x, int64_t x_stride, const float *w, int64_t n, int64_t n_sub,
                             int64_t dim, float eps, float *out, int64_t out_stride)
{
    /* row i, sub-row h (a head) at x + i * x_stride + h * dim */
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < n_sub; h++)
            rms_row_body(x + i * x_stride + h * dim, w, dim, eps, out + i * out_stride + h * dim);
}

KN_DISPATCH(rms_rows,
            (const float *x, int64_t x_stride, const float *w, int64_t n, int64_t n_sub, int64_t dim,
             float eps, float *out, int64_t out_stride),
            (x, x_stride, w, n, n_sub, dim, eps, out, out_stride))

void kn_rmsnorm_gemma(const float *x, int64_t x_stride, const float *w, int64_t n, int64_t dim, float eps,
                      float *out, int64_t out_stride)
{
    KN_CALL(rms_rows, (x, x_stride, w, n, 1, dim, eps, out, out_stride));
}

void kn_head_rmsnorm_gemma(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                           const float *w, float eps)
{
    KN_CALL(rms_rows, (x, stride, w, n, n_heads, head_dim, eps, x, stride));
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
