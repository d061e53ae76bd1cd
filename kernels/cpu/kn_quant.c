#include "kn_quant.h"

#include <math.h>

#include "mm_dtype.h"

void kn_quant_e4m3_groups(const float *x, int64_t n, int64_t cols, int64_t ldx, int32_t group, uint8_t *q,
                          float *qs)
{
    const int64_t groups = (cols + group - 1) / group;
    for (int64_t r = 0; r < n; r++)
        for (int64_t g = 0; g < groups; g++) {
            const int64_t c0 = g * group, c1 = c0 + group < cols ? c0 + group : cols;
            float amax = 0.0f;
            for (int64_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[r * ldx + c]));
            const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
            for (int64_t c = c0; c < c1; c++) q[r * cols + c] = mm_f32_to_f8e4m3(x[r * ldx + c] / s);
            qs[g * n + r] = s;
        }
}
