#include "kn_rope.h"

#include <math.h>

#define KN_ROPE_MAX_HALF 512 /* frequencies kept in a table; more (never seen) are recomputed */

void kn_rope_text_table(const int64_t *pos, int64_t n, int32_t rot_dim, double theta, float *cos_t,
                        float *sin_t)
{
    int32_t half = rot_dim / 2;
    /* the reference: inv_freq = 1 / theta^(2k/dim) in fp32 (the same for every token: computed once; a pow
     * per token and frequency was a visible part of a decode step), angle = fp32(pos * inv_freq) */
    float inv[KN_ROPE_MAX_HALF];
    int32_t nk = half < KN_ROPE_MAX_HALF ? half : KN_ROPE_MAX_HALF;
    for (int32_t k = 0; k < nk; k++) {
        float e = (float)(2 * k) / (float)rot_dim;
        inv[k] = 1.0f / (float)pow((double)(float)theta, (double)e);
    }
    for (int64_t i = 0; i < n; i++) {
        float p = (float)pos[i];
        for (int32_t k = 0; k < half; k++) {
            float e = (float)(2 * k) / (float)rot_dim;
            float a = p * (k < nk ? inv[k] : 1.0f / (float)pow((double)(float)theta, (double)e));
            float c = (float)cos((double)a), s = (float)sin((double)a);
            cos_t[i * rot_dim + k] = cos_t[i * rot_dim + k + half] = c;
            sin_t[i * rot_dim + k] = sin_t[i * rot_dim + k + half] = s;
        }
    }
}

int32_t kn_rope_vision_axis_dim(int32_t head_dim)
{
    int32_t rope_dims = 2 * (head_dim / 2);
    return 2 * ((rope_dims / 3) / 2);
}

void kn_rope_vision_table(int64_t t, int64_t h, int64_t w, int32_t merge, int32_t head_dim, double theta,
                          float *cos_t, float *sin_t)
{
    int32_t axis = kn_rope_vision_axis_dim(head_dim), nf = axis / 2, rd = 3 * axis;
    float inv[64];
    if (nf > 64) nf = 64; /* head_dim up to 384; larger heads are refused by the config loader */
    for (int32_t k = 0; k < nf; k++) {
        float e = (float)(2 * k) / (float)axis;
        inv[k] = 1.0f / (float)pow((double)(float)theta, (double)e);
    }
    int64_t row = 0;
    for (int64_t ti = 0; ti < t; ti++)
        for (int64_t hb = 0; hb < h / merge; hb++)
            for (int64_t wb = 0; wb < w / merge; wb++)
                for (int32_t mh = 0; mh < merge; mh++)
                    for (int32_t mw = 0; mw < merge; mw++, row++) {
                        double coord[3] = {(double)ti, (double)(hb * merge + mh), (double)(wb * merge + mw)};
                        float *c = cos_t + row * rd, *s = sin_t + row * rd;
                        for (int32_t ax = 0; ax < 3; ax++)
                            for (int32_t k = 0; k < nf; k++) {
                                /* fp32 inverse frequencies, angle in double (the fp64 reference promotes) */
                                double a = coord[ax] * (double)inv[k];
                                int32_t j = ax * nf + k;
                                c[j] = c[j + rd / 2] = (float)cos(a);
                                s[j] = s[j + rd / 2] = (float)sin(a);
                            }
                    }
}

void kn_rope_apply(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride, const float *cos_t,
                   const float *sin_t, int32_t table_stride, int32_t rot)
{
    int32_t half = rot / 2;
    for (int64_t i = 0; i < n; i++) {
        const float *c = cos_t + i * table_stride, *s = sin_t + i * table_stride;
        for (int32_t h = 0; h < n_heads; h++) {
            float *p = x + i * stride + (int64_t)h * head_dim;
            for (int32_t j = 0; j < half; j++) {
                float a = p[j], b = p[j + half];
                p[j] = a * c[j] - b * s[j];
                p[j + half] = b * c[j + half] + a * s[j + half];
            }
        }
    }
}
