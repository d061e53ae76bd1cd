/* Activation rows to e4m3 in 128-wide groups, each with its own f32 scale: the B operand of the FP8
 * block-scaled prefill products (kn_cuda_gemm_fp8_block, MMGW_CUDA_FP8_PREFILL=e4m3), whose weights are the
 * checkpoint's e4m3 bytes with their 128 x 128 block scales, and the rows of the e4m3 expert products. The
 * rule is the FP8 index keys' (s = amax / 448, 1 for an all-zero group; CPU twin kn_quant_e4m3_groups). One
 * warp per (row, group): a lane holds 4 values (one float4), the group's amax is a warp reduction, the 4
 * codes go out as one 32-bit store.
 *
 * The expert products' two inputs are quantized where they are made (template SRC): the routed rows as they
 * are gathered (kn_cuda_moe_gather's rows) and the SwiGLU of the gate and up products (kn_cuda_swiglu's
 * values), so that neither f32 intermediate is written and read back (at M3's shape and 8192 tokens 0.8 GB
 * and 0.4 GB a layer); the values, hence the codes and scales, are the two-pass route's bit for bit. */
#include "kn_cuda_internal.cuh"

#define XQ_GROUP 128
#define XQ_WARPS 8

#define XQ_ROWS 0   /* x rows */
#define XQ_GATHER 1 /* x rows perm[r] / top_k */
#define XQ_SWIGLU 2 /* kn_swiglu_f of the rows of x (gate) and u (up) */

template <int SRC>
__global__ void __launch_bounds__(XQ_WARPS * 32)
    k_x_e4m3_groups(const float *__restrict__ x, const float *__restrict__ u, int64_t ldx, int64_t n,
                    int32_t groups, const int32_t *__restrict__ perm, int32_t top_k, float alpha, float limit,
                    uint32_t *__restrict__ q, float *__restrict__ qs, int64_t ldqs)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * XQ_WARPS + (threadIdx.x >> 5);
    if (item >= n * groups) return;
    const int64_t r = item / groups;
    const int32_t g = (int32_t)(item % groups);
    const int64_t src = SRC == XQ_GATHER ? (int64_t)(perm[r] / top_k) : r,
                  at = src * ldx + (int64_t)g * XQ_GROUP;
    float4 v = *(const float4 *)(x + at + 4 * lane);
    if (SRC == XQ_SWIGLU) {
        const float4 w = *(const float4 *)(u + at + 4 * lane);
        v = make_float4(kn_swiglu_f(v.x, w.x, alpha, limit), kn_swiglu_f(v.y, w.y, alpha, limit),
                        kn_swiglu_f(v.z, w.z, alpha, limit), kn_swiglu_f(v.w, w.w, alpha, limit));
    }
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

/* The three sources' common checks and launch (u: SwiGLU's up rows; perm: the gather's) */
template <int SRC>
static int32_t xq_run(const char *what, int64_t n, int64_t cols, const float *x, const float *u, int64_t ldx,
                      const int32_t *perm, int32_t top_k, float alpha, float limit, uint8_t *q, float *qs,
                      int64_t ldqs, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n > INT32_MAX || ldqs < n || !kn_cuda_x_e4m3_groups_ok(cols, ldx) ||
        (SRC == XQ_GATHER && top_k <= 0) ||
        (n > 0 && (!x || !q || !qs || (uintptr_t)x % 16 || (uintptr_t)q % 4 ||
                   (SRC == XQ_SWIGLU && (!u || (uintptr_t)u % 16)) || (SRC == XQ_GATHER && !perm))))
        return mm_err_set(err, MM_INVALID, "%s: bad arguments (n %lld cols %lld ldx %lld)", what,
                          (long long)n, (long long)cols, (long long)ldx);
    if (n == 0) return MM_OK;
    const int32_t groups = (int32_t)(cols / XQ_GROUP);
    const int64_t items = n * groups;
    return kn_cuda_check(kn_launch(k_x_e4m3_groups<SRC>, dim3((unsigned)kn_cdiv(items, XQ_WARPS)),
                                   XQ_WARPS * 32, 0, stream, x, u, ldx, n, groups, perm, top_k, alpha, limit,
                                   (uint32_t *)q, qs, ldqs),
                         what, err);
}

extern "C" int32_t kn_cuda_x_e4m3_groups(int64_t n, int64_t cols, const float *x, int64_t ldx, uint8_t *q,
                                         float *qs, int64_t ldqs, cudaStream_t stream, struct mm_err *err)
{
    return xq_run<XQ_ROWS>("kn_cuda_x_e4m3_groups", n, cols, x, NULL, ldx, NULL, 1, 0.0f, 0.0f, q, qs, ldqs,
                           stream, err);
}

extern "C" int32_t kn_cuda_moe_gather_e4m3(const float *x, int64_t x_stride, const int32_t *perm, int64_t m,
                                           int32_t top_k, int64_t cols, uint8_t *q, float *qs, int64_t ldqs,
                                           cudaStream_t stream, struct mm_err *err)
{
    return xq_run<XQ_GATHER>("kn_cuda_moe_gather_e4m3", m, cols, x, NULL, x_stride, perm, top_k, 0.0f, 0.0f,
                             q, qs, ldqs, stream, err);
}

extern "C" int32_t kn_cuda_swiglu_e4m3(const float *gate, const float *up, int64_t in_stride, int64_t n,
                                       int64_t cols, float alpha, float limit, uint8_t *q, float *qs,
                                       int64_t ldqs, cudaStream_t stream, struct mm_err *err)
{
    return xq_run<XQ_SWIGLU>("kn_cuda_swiglu_e4m3", n, cols, gate, up, in_stride, NULL, 1, alpha, limit, q,
                             qs, ldqs, stream, err);
}
