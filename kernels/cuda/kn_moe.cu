/* MoE routing on the GPU: the sigmoid router's top-k, grouping of (token, slot) pairs by expert, and the
 * gather / weighted combine around the per-expert GEMMs (cuBLAS, sized by the host from the offsets). */
#include "kn_cuda_internal.cuh"

#define MOE_MAX_EXP 4096
#define MOE_MAX_TOPK 16

static int32_t bad(struct mm_err *err, const char *what)
{
    return mm_err_set(err, MM_INVALID, "%s: bad arguments", what);
}

/* one warp per token: top_k rounds of a warp arg-max over sigmoid + bias (ties to the lower expert id) */
__global__ void k_moe_route(const float *__restrict__ logits, const float *__restrict__ bias, int64_t n,
                            int32_t n_exp, int32_t top_k, float scaling, int32_t *__restrict__ ids,
                            float *__restrict__ wts)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n) return;
    const float *lr = logits + r * n_exp;
    uint32_t taken[MOE_MAX_EXP / 32 / 32 + 1] = {0}; /* bit e/32 of word: lane-local experts already chosen */
    int32_t chosen[MOE_MAX_TOPK];
    float sig[MOE_MAX_TOPK];
    float total = 0.0f;
    for (int32_t k = 0; k < top_k; k++) {
        float best = -INFINITY;
        int32_t best_e = INT32_MAX;
        for (int32_t e = lane, c = 0; e < n_exp; e += 32, c++) {
            if (taken[c >> 5] >> (c & 31) & 1u) continue;
            const float s = 1.0f / (1.0f + expf(-lr[e]));
            const float v = s + (bias ? bias[e] : 0.0f);
            if (v > best || (v == best && e < best_e)) best = v, best_e = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, best, o);
            const int32_t oe = __shfl_xor_sync(0xffffffffu, best_e, o);
            if (ov > best || (ov == best && oe < best_e)) best = ov, best_e = oe;
        }
        if (best_e == INT32_MAX) best_e = 0; /* n_exp < top_k is refused on the host; keep indices valid */
        if ((best_e & 31) == lane) {
            const int32_t c = best_e >> 5;
            taken[c >> 5] |= 1u << (c & 31);
        }
        chosen[k] = best_e;
        sig[k] = 1.0f / (1.0f + expf(-lr[best_e]));
        total += sig[k];
    }
    if (lane == 0) {
        const float f = total > 0.0f ? scaling / total : 0.0f;
        for (int32_t k = 0; k < top_k; k++) {
            ids[r * top_k + k] = chosen[k];
            wts[r * top_k + k] = sig[k] * f;
        }
    }
}

extern "C" int32_t kn_cuda_moe_route(const float *logits, const float *bias, int64_t n, int32_t n_exp,
                                     int32_t top_k, float scaling, int32_t *ids, float *wts,
                                     cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n_exp <= 0 || n_exp > MOE_MAX_EXP || top_k <= 0 || top_k > MOE_MAX_TOPK || top_k > n_exp ||
        (n > 0 && (!logits || !ids || !wts)))
        return bad(err, "kn_cuda_moe_route");
    if (n == 0) return MM_OK;
    KN_CU(kn_launch(k_moe_route, dim3((unsigned)kn_cdiv(n, 8)), 256, 0, stream, logits, bias, n, n_exp, top_k,
                    scaling, ids, wts),
          "kn_cuda_moe_route");
    return MM_OK;
}

__global__ void __launch_bounds__(1024)
    k_moe_sort(const int32_t *__restrict__ ids, int64_t pairs, int32_t n_exp, int32_t *__restrict__ offsets,
               int32_t *__restrict__ perm, int32_t *__restrict__ inv)
{
    kn_chain_entry();
    __shared__ int32_t cnt[MOE_MAX_EXP], cur[MOE_MAX_EXP];
    for (int32_t e = threadIdx.x; e < n_exp; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int32_t e = ids[p];
        if (e >= 0 && e < n_exp) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t run = 0;
        for (int32_t e = 0; e < n_exp; e++) {
            offsets[e] = run;
            cur[e] = run;
            run += cnt[e];
        }
        offsets[n_exp] = run;
    }
    __syncthreads();
    for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
        const int32_t e = ids[p];
        if (e < 0 || e >= n_exp) {
            inv[p] = -1;
            continue;
        }
        const int32_t at = atomicAdd(&cur[e], 1);
        perm[at] = (int32_t)p;
        inv[p] = at;
    }
}

extern "C" int32_t kn_cuda_moe_sort(const int32_t *ids, int64_t n, int32_t top_k, int32_t n_exp,
                                    int32_t *offsets, int32_t *perm, int32_t *inv, cudaStream_t stream,
                                    struct mm_err *err)
{
    const int64_t pairs = n * top_k;
    if (n < 0 || top_k <= 0 || n_exp <= 0 || n_exp > MOE_MAX_EXP || pairs > (1 << 24) || !offsets ||
        (pairs > 0 && (!ids || !perm || !inv)))
        return bad(err, "kn_cuda_moe_sort");
    KN_CU(kn_launch(k_moe_sort, dim3(1), 1024, 0, stream, ids, pairs, n_exp, offsets, perm, inv),
          "kn_cuda_moe_sort");
    return MM_OK;
}

__global__ void k_moe_gather(const float *__restrict__ x, int64_t xs, const int32_t *__restrict__ perm,
                             int64_t m, int32_t top_k, int32_t dim, void *__restrict__ out, int32_t bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= m * dim) return;
    const int64_t j = t / dim;
    const int32_t d = (int32_t)(t % dim);
    const float v = x[(int64_t)(perm[j] / top_k) * xs + d];
    if (bf16)
        ((uint16_t *)out)[t] = kn_f32_to_bf16(v);
    else
        ((float *)out)[t] = v;
}

/* Why the 4-wide forms below: the one-element-per-thread kernels above divide a 64-bit index by dim per
 * element and move 4 (2) bytes per access; in a prefill at 8192 tokens (32768 pairs of 6144) the gather took
 * ~1 ms a call, about 3.5x its bytes at the copy rate (ncu, v108). Here blockIdx.x is the row and each thread
 * moves one 16-byte piece of it (blockIdx.y: which 256 pieces), so the row's source (gather) or its pairs
 * (combine) are looked up without a division, and a single decode row still spreads over several CTAs (one
 * CTA striding a whole row measured 3-4 % slower decode steps, v109). Same arithmetic per element, in the
 * same order: the same bits (KN_CUDA_OPS_VEC=0 keeps the old forms, the tests compare them). */
#define MOE_VEC_THREADS 256

__global__ void k_moe_gather4(const float *__restrict__ x, int64_t xs, const int32_t *__restrict__ perm,
                              int32_t top_k, int32_t dim4, void *__restrict__ out, int32_t bf16)
{
    kn_chain_entry();
    const int64_t j = blockIdx.x;
    const int32_t d = (int32_t)blockIdx.y * MOE_VEC_THREADS + (int32_t)threadIdx.x;
    if (d >= dim4) return;
    const float4 v = reinterpret_cast<const float4 *>(x + (int64_t)(perm[j] / top_k) * xs)[d];
    if (bf16)
        reinterpret_cast<uint2 *>(out)[j * dim4 + d] =
            make_uint2(kn_pack_bf16(v.x, v.y), kn_pack_bf16(v.z, v.w));
    else
        reinterpret_cast<float4 *>(out)[j * dim4 + d] = v;
}

/* whole 16-byte pieces in every row, and rows and pieces within the grid's limits */
static bool moe_vec4(int64_t rows, int32_t dim, int64_t s0, int64_t s1, const void *a, const void *b)
{
    return rows <= INT32_MAX && dim / 4 <= 65535 * MOE_VEC_THREADS && dim % 4 == 0 && s0 % 4 == 0 &&
           s1 % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 &&
           kn_cuda_knob("KN_CUDA_OPS_VEC", 1);
}

extern "C" int32_t kn_cuda_moe_gather(const float *x, int64_t x_stride, const int32_t *perm, int64_t m,
                                      int32_t top_k, int32_t dim, void *out, int32_t out_bf16,
                                      cudaStream_t stream, struct mm_err *err)
{
    if (m < 0 || top_k <= 0 || dim <= 0 || (m > 0 && (!x || !perm || !out)))
        return bad(err, "kn_cuda_moe_gather");
    if (m == 0) return MM_OK;
    if (moe_vec4(m, dim, x_stride, dim, x, out)) {
        KN_CU(kn_launch(k_moe_gather4, dim3((unsigned)m, (unsigned)kn_cdiv(dim / 4, MOE_VEC_THREADS)),
                        MOE_VEC_THREADS, 0, stream, x, x_stride, perm, top_k, dim / 4, out, out_bf16),
              "kn_cuda_moe_gather");
        return MM_OK;
    }
    KN_CU(kn_launch(k_moe_gather, dim3((unsigned)kn_cdiv(m * dim, 256)), 256, 0, stream, x, x_stride, perm, m,
                    top_k, dim, out, out_bf16),
          "kn_cuda_moe_gather");
    return MM_OK;
}

__global__ void k_moe_combine(const float *__restrict__ e, const int32_t *__restrict__ inv,
                              const float *__restrict__ wts, int64_t n, int32_t top_k, int32_t dim,
                              float *__restrict__ y, int64_t ys)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * dim) return;
    const int64_t r = t / dim;
    const int32_t d = (int32_t)(t % dim);
    float acc = 0.0f;
    for (int32_t s = 0; s < top_k; s++) {
        const int32_t j = inv ? inv[r * top_k + s] : (int32_t)(r * top_k + s);
        if (j >= 0) acc += wts[r * top_k + s] * e[(int64_t)j * dim + d];
    }
    y[r * ys + d] += acc;
}

__global__ void k_moe_combine4(const float *__restrict__ e, const int32_t *__restrict__ inv,
                               const float *__restrict__ wts, int32_t top_k, int32_t dim4,
                               float *__restrict__ y, int64_t ys)
{
    kn_chain_entry();
    const int64_t r = blockIdx.x;
    const int32_t d = (int32_t)blockIdx.y * MOE_VEC_THREADS + (int32_t)threadIdx.x;
    if (d >= dim4) return;
    const float4 *e4 = reinterpret_cast<const float4 *>(e);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int32_t s = 0; s < top_k; s++) {
        const int32_t j = inv ? inv[r * top_k + s] : (int32_t)(r * top_k + s);
        if (j >= 0) {
            const float w = wts[r * top_k + s];
            const float4 v = e4[(int64_t)j * dim4 + d];
            acc.x += w * v.x, acc.y += w * v.y, acc.z += w * v.z, acc.w += w * v.w;
        }
    }
    float4 *yr = reinterpret_cast<float4 *>(y + r * ys);
    float4 o = yr[d];
    o.x += acc.x, o.y += acc.y, o.z += acc.z, o.w += acc.w;
    yr[d] = o;
}

extern "C" int32_t kn_cuda_moe_combine(const float *e, const int32_t *inv, const float *wts, int64_t n,
                                       int32_t top_k, int32_t dim, float *y, int64_t y_stride,
                                       cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || top_k <= 0 || dim <= 0 || (n > 0 && (!e || !wts || !y)))
        return bad(err, "kn_cuda_moe_combine");
    if (n == 0) return MM_OK;
    if (moe_vec4(n, dim, dim, y_stride, e, y)) {
        KN_CU(kn_launch(k_moe_combine4, dim3((unsigned)n, (unsigned)kn_cdiv(dim / 4, MOE_VEC_THREADS)),
                        MOE_VEC_THREADS, 0, stream, e, inv, wts, top_k, dim / 4, y, y_stride),
              "kn_cuda_moe_combine");
        return MM_OK;
    }
    KN_CU(kn_launch(k_moe_combine, dim3((unsigned)kn_cdiv(n * dim, 256)), 256, 0, stream, e, inv, wts, n,
                    top_k, dim, y, y_stride),
          "kn_cuda_moe_combine");
    return MM_OK;
}
