/* Activation rows to e4m3 in 128-wide groups, each with its own f32 scale: the B operand of the FP8
 * block-scaled prefill products (kn_cuda_gemm_fp8_block, MMGW_CUDA_FP8_PREFILL=e4m3), whose weights are the
 * checkpoint's e4m3 bytes with their 128 x 128 block scales. The rule is the FP8 index keys' (s = amax / 448,
 * 1 for an all-zero group; CPU twin kn_quant_e4m3_groups). One warp per (row, group): a lane holds 4 values
 * (one float4), the group's amax is a warp reduction, the 4 codes go out as one 32-bit store. */
#include "kn_cuda_internal.cuh"

#define XQ_GROUP 128
#define XQ_WARPS 8

__global__ void __launch_bounds__(XQ_WARPS * 32)
    k_x_e4m3_groups(const float *__restrict__ x, int64_t ldx, int64_t n, int32_t groups,
                    uint32_t *__restrict__ q, float *__restrict__ qs, int64_t ldqs)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * XQ_WARPS + (threadIdx.x >> 5);
    if (item >= n * groups) return;
    const int64_t r = item / groups;
    const int32_t g = (int32_t)(item % groups);
    const float4 v = *(const float4 *)(x + r * ldx + (int64_t)g * XQ_GROUP + 4 * lane);
    float m = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float s = m > 0.0f ? m / 448.0f : 1.0f;
    const float f[4] = {v.x / s, v.y / s, v.z / s, v.w / s};
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < 4; e++)
        w |= (uint32_t)__nv_cvt_float_to_fp8(f[e], __NV_SATFINITE, __NV_E4M3) << (8 * e);
    q[(r * groups * XQ_GROUP + (int64_t)g * XQ_GROUP) / 4 + lane] = w;
    if (lane == 0) qs[(int64_t)g * ldqs + r] = s;
}

extern "C" int kn_cuda_x_e4m3_groups_ok(int64_t cols, int64_t ldx)
{
    return cols > 0 && cols % XQ_GROUP == 0 && ldx >= cols && ldx % 4 == 0;
}

extern "C" int32_t kn_cuda_x_e4m3_groups(int64_t n, int64_t cols, const float *x, int64_t ldx, uint8_t *q,
                                         float *qs, int64_t ldqs, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n > INT32_MAX || ldqs < n || !kn_cuda_x_e4m3_groups_ok(cols, ldx) ||
        (n > 0 && (!x || !q || !qs || (uintptr_t)x % 16 || (uintptr_t)q % 4)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_x_e4m3_groups: bad arguments (n %lld cols %lld ldx %lld)",
                          (long long)n, (long long)cols, (long long)ldx);
    if (n == 0) return MM_OK;
    const int32_t groups = (int32_t)(cols / XQ_GROUP);
    const int64_t items = n * groups;
    return kn_cuda_check(kn_launch(k_x_e4m3_groups, dim3((unsigned)kn_cdiv(items, XQ_WARPS)), XQ_WARPS * 32,
                                   0, stream, x, ldx, n, groups, (uint32_t *)q, qs, ldqs),
                         "kn_cuda_x_e4m3_groups", err);
}
