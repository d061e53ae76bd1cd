/* Element-wise and row-wise kernels of the model: norms, RoPE, activations, conversions, embedding rows,
 * FP8 block dequantization. All arithmetic in fp32; statistics of a row reduced by one warp or one CTA. */
#include "kn_cuda_internal.cuh"

#include <string.h>

#define OPS_THREADS 256

static int32_t bad(struct mm_err *err, const char *what)
{
    return mm_err_set(err, MM_INVALID, "%s: bad arguments", what);
}

__device__ __forceinline__ void store_out(void *out, int64_t idx, float v, int32_t bf16)
{
    if (bf16)
        ((uint16_t *)out)[idx] = kn_f32_to_bf16(v);
    else
        ((float *)out)[idx] = v;
}

/* Block-wide sum over OPS_THREADS threads (every thread gets the total). */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float part[OPS_THREADS / 32];
    __shared__ float total;
    v = kn_warp_sum(v);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < OPS_THREADS / 32 ? part[threadIdx.x] : 0.0f;
        t = kn_warp_sum(t);
        if (threadIdx.x == 0) total = t;
    }
    __syncthreads();
    const float r = total;
    __syncthreads(); /* part/total are reused by the next call */
    return r;
}

/* ---- RMSNorm (Gemma: weight + 1) and LayerNorm, one CTA per row ---- */

__global__ void __launch_bounds__(OPS_THREADS)
    k_rmsnorm(const float *__restrict__ x, int64_t xs, const float *__restrict__ w, int32_t dim, float eps,
              void *out, int64_t os, int32_t bf16)
{
    kn_chain_entry();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * xs;
    float ss = 0.0f;
    for (int32_t j = threadIdx.x; j < dim; j += OPS_THREADS) ss += xr[j] * xr[j];
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / (float)dim + eps);
    for (int32_t j = threadIdx.x; j < dim; j += OPS_THREADS)
        store_out(out, r * os + j, xr[j] * inv * (1.0f + w[j]), bf16);
}

/* y += x, then out = RMSNorm(y), a cluster of AR_CL CTAs per row (a decode step has 1-16 rows of 4-8K: one
 * CTA per row would leave the add on a handful of SMs): each CTA adds and squares its slice, the slices' sums
 * meet through distributed shared memory and are added in rank order in every CTA (all agree, run to run),
 * then each CTA normalizes its slice. */
#define AR_CL 8

__global__ void __launch_bounds__(OPS_THREADS)
    k_add_rmsnorm(float *__restrict__ y, const float *__restrict__ x, const float *__restrict__ w,
                  int32_t dim, float eps, float *__restrict__ out)
{
    kn_chain_entry();
    __shared__ float mine, all[AR_CL];
    const int64_t r = blockIdx.x / AR_CL;
    const int32_t z = (int32_t)kn_cluster_rank(), per = (dim + AR_CL - 1) / AR_CL, lo = z * per;
    const int32_t hi = lo + per < dim ? lo + per : dim;
    float *yr = y + r * dim;
    const float *xr = x + r * dim;
    float ss = 0.0f;
    for (int32_t j = lo + threadIdx.x; j < hi; j += OPS_THREADS) {
        const float v = yr[j] + xr[j];
        yr[j] = v;
        ss += v * v;
    }
    ss = block_sum(ss);
    if (threadIdx.x == 0) mine = ss;
    kn_cluster_sync();
    if (threadIdx.x < AR_CL)
        all[threadIdx.x] =
            kn_ld_cluster_f32(kn_cluster_map((uint32_t)__cvta_generic_to_shared(&mine), threadIdx.x));
    kn_cluster_sync(); /* every CTA has read the others' sums (and all[] is complete here) */
    float tot = 0.0f;
#pragma unroll
    for (int c = 0; c < AR_CL; c++) tot += all[c];
    const float inv = rsqrtf(tot / (float)dim + eps);
    for (int32_t j = lo + threadIdx.x; j < hi; j += OPS_THREADS)
        out[r * dim + j] = yr[j] * inv * (1.0f + w[j]);
}

extern "C" int32_t kn_cuda_add_rmsnorm(float *y, const float *x, const float *w, int64_t n, int32_t dim,
                                       float eps, float *out, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || dim <= 0 || n > INT32_MAX / AR_CL || (n > 0 && (!y || !x || !w || !out)))
        return bad(err, "kn_cuda_add_rmsnorm");
    if (n == 0) return MM_OK;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, dim3((unsigned)(n * AR_CL), 1, 1), OPS_THREADS, stream, AR_CL, 1);
    KN_CU(kn_launch_cfg(&cfg, k_add_rmsnorm, y, x, w, dim, eps, out), "kn_cuda_add_rmsnorm");
    return MM_OK;
}

extern "C" int32_t kn_cuda_rmsnorm(const float *x, int64_t x_stride, const float *w, int64_t n, int32_t dim,
                                   float eps, void *out, int64_t out_stride, int32_t out_bf16,
                                   cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || dim <= 0 || n > INT32_MAX || (n > 0 && (!x || !w || !out)))
        return bad(err, "kn_cuda_rmsnorm");
    if (n == 0) return MM_OK;
    KN_CU(kn_launch(k_rmsnorm, dim3((unsigned)n), OPS_THREADS, 0, stream, x, x_stride, w, dim, eps, out,
                    out_stride, out_bf16),
          "kn_cuda_rmsnorm");
    return MM_OK;
}

/* one warp per (row, head) */
__global__ void k_head_rmsnorm(float *__restrict__ x, int64_t n, int32_t heads, int32_t hd, int64_t stride,
                               const float *__restrict__ w, float eps)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (item >= n * heads) return;
    float *p = x + (item / heads) * stride + (item % heads) * hd;
    float ss = 0.0f;
    for (int32_t j = lane; j < hd; j += 32) ss += p[j] * p[j];
    ss = kn_warp_sum(ss);
    const float inv = rsqrtf(ss / (float)hd + eps);
    for (int32_t j = lane; j < hd; j += 32) p[j] = p[j] * inv * (1.0f + w[j]);
}

extern "C" int32_t kn_cuda_head_rmsnorm(float *x, int64_t n, int32_t n_heads, int32_t head_dim,
                                        int64_t stride, const float *w, float eps, cudaStream_t stream,
                                        struct mm_err *err)
{
    if (n < 0 || n_heads <= 0 || head_dim <= 0 || (n > 0 && (!x || !w)))
        return bad(err, "kn_cuda_head_rmsnorm");
    const int64_t items = n * n_heads;
    if (items == 0) return MM_OK;
    KN_CU(kn_launch(k_head_rmsnorm, dim3((unsigned)kn_cdiv(items, 8)), 256, 0, stream, x, n, n_heads,
                    head_dim, stride, w, eps),
          "kn_cuda_head_rmsnorm");
    return MM_OK;
}

__global__ void __launch_bounds__(OPS_THREADS)
    k_layernorm(const float *__restrict__ x, int64_t xs, const float *__restrict__ w,
                const float *__restrict__ b, int32_t dim, float eps, void *out, int64_t os, int32_t bf16)
{
    kn_chain_entry();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * xs;
    float s = 0.0f;
    for (int32_t j = threadIdx.x; j < dim; j += OPS_THREADS) s += xr[j];
    const float mean = block_sum(s) / (float)dim;
    float v = 0.0f;
    for (int32_t j = threadIdx.x; j < dim; j += OPS_THREADS) v = fmaf(xr[j] - mean, xr[j] - mean, v);
    const float inv = rsqrtf(block_sum(v) / (float)dim + eps);
    /* fmaf spelled out: k_layernorm_reg computes the same bits whatever the compiler would contract */
    for (int32_t j = threadIdx.x; j < dim; j += OPS_THREADS)
        store_out(out, r * os + j, fmaf((xr[j] - mean) * inv, w[j], b ? b[j] : 0.0f), bf16);
}

/* The row read once into registers (C values per thread, dim <= C x OPS_THREADS) instead of once per pass:
 * the vision tower's 2304 rows of 1280 ran at ~1.7 TB/s with three reads. Each thread sums the same elements
 * in the same order as k_layernorm, so the result is bitwise the same. */
template <int C>
__global__ void __launch_bounds__(OPS_THREADS)
    k_layernorm_reg(const float *__restrict__ x, int64_t xs, const float *__restrict__ w,
                    const float *__restrict__ b, int32_t dim, float eps, void *out, int64_t os, int32_t bf16)
{
    kn_chain_entry();
    const int64_t r = blockIdx.x;
    const float *xr = x + r * xs;
    float v[C];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < C; k++) {
        const int32_t j = threadIdx.x + k * OPS_THREADS;
        v[k] = j < dim ? xr[j] : 0.0f;
        if (j < dim) s += v[k];
    }
    const float mean = block_sum(s) / (float)dim;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < C; k++)
        if (threadIdx.x + k * OPS_THREADS < dim) q = fmaf(v[k] - mean, v[k] - mean, q);
    const float inv = rsqrtf(block_sum(q) / (float)dim + eps);
#pragma unroll
    for (int k = 0; k < C; k++) {
        const int32_t j = threadIdx.x + k * OPS_THREADS;
        if (j < dim) store_out(out, r * os + j, fmaf((v[k] - mean) * inv, w[j], b ? b[j] : 0.0f), bf16);
    }
}

extern "C" int32_t kn_cuda_layernorm(const float *x, int64_t x_stride, const float *w, const float *b,
                                     int64_t n, int32_t dim, float eps, void *out, int64_t out_stride,
                                     int32_t out_bf16, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || dim <= 0 || n > INT32_MAX || (n > 0 && (!x || !w || !out)))
        return bad(err, "kn_cuda_layernorm");
    if (n == 0) return MM_OK;
    /* in place (out == x) is fine too: a thread writes only the elements it read */
    const int c = kn_cuda_knob("KN_CUDA_OPS_VEC", 1) ? (int)kn_cdiv(dim, OPS_THREADS) : 0;
#define LN_REG(C)                                                                                            \
    case C:                                                                                                  \
        KN_CU(kn_launch(k_layernorm_reg<C>, dim3((unsigned)n), OPS_THREADS, 0, stream, x, x_stride, w, b,    \
                        dim, eps, out, out_stride, out_bf16),                                                \
              "kn_cuda_layernorm");                                                                          \
        return MM_OK;
    switch (c) {
        LN_REG(1)
        LN_REG(2)
        LN_REG(3)
        LN_REG(4)
        LN_REG(5)
        LN_REG(6)
        LN_REG(7)
        LN_REG(8)
    default:
        break;
    }
#undef LN_REG
    KN_CU(kn_launch(k_layernorm, dim3((unsigned)n), OPS_THREADS, 0, stream, x, x_stride, w, b, dim, eps, out,
                    out_stride, out_bf16),
          "kn_cuda_layernorm");
    return MM_OK;
}

/* ---- RoPE ---- */

__global__ void k_rope_table(const int64_t *__restrict__ pos, int64_t n, int32_t rot, double theta,
                             float *__restrict__ ct, float *__restrict__ st)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t half = rot / 2;
    if (t >= n * half) return;
    const int64_t i = t / half;
    const int32_t k = (int32_t)(t % half);
    /* as the reference: fp32 inverse frequency and fp32 angle, then the trigonometry */
    const float e = (float)(2 * k) / (float)rot;
    const float inv = 1.0f / (float)pow((double)(float)theta, (double)e);
    const float a = (float)pos[i] * inv;
    double s, c;
    sincos((double)a, &s, &c);
    ct[i * rot + k] = ct[i * rot + k + half] = (float)c;
    st[i * rot + k] = st[i * rot + k + half] = (float)s;
}

extern "C" int32_t kn_cuda_rope_table(const int64_t *pos, int64_t n, int32_t rot, double theta, float *cos_t,
                                      float *sin_t, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || rot <= 0 || rot % 2 || (n > 0 && (!pos || !cos_t || !sin_t)))
        return bad(err, "kn_cuda_rope_table");
    const int64_t items = n * (rot / 2);
    if (items == 0) return MM_OK;
    KN_CU(kn_launch(k_rope_table, dim3((unsigned)kn_cdiv(items, 256)), 256, 0, stream, pos, n, rot, theta,
                    cos_t, sin_t),
          "kn_cuda_rope_table");
    return MM_OK;
}

/* rotate-half of one pair: out = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]. The roundings
 * are spelled out: three kernels rotate and must agree bit for bit (attn_layer's fused norm + RoPE is the
 * separate ops' result), whatever the compiler would contract in each. */
__device__ __forceinline__ void rope_pair(float *p0, float *p1, float c0, float s0, float c1, float s1)
{
    const float a = *p0, b = *p1;
    *p0 = __fsub_rn(__fmul_rn(a, c0), __fmul_rn(b, s0));
    *p1 = __fmaf_rn(b, c1, __fmul_rn(a, s1));
}

/* one thread per (row, head, pair j < rot/2): x[j], x[j + rot/2] rotated together */
__global__ void k_rope_apply(float *__restrict__ x, int64_t n, int32_t heads, int32_t hd, int64_t stride,
                             const float *__restrict__ ct, const float *__restrict__ st, int32_t ts,
                             int32_t rot)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t half = rot / 2;
    if (t >= n * heads * half) return;
    const int32_t j = (int32_t)(t % half);
    const int64_t rh = t / half;
    const int64_t i = rh / heads;
    float *p = x + i * stride + (rh % heads) * hd;
    rope_pair(p + j, p + j + half, ct[i * ts + j], st[i * ts + j], ct[i * ts + j + half],
              st[i * ts + j + half]);
}

extern "C" int32_t kn_cuda_rope_apply(float *x, int64_t n, int32_t n_heads, int32_t head_dim, int64_t stride,
                                      const float *cos_t, const float *sin_t, int32_t table_stride,
                                      int32_t rot, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n_heads <= 0 || rot <= 0 || rot % 2 || rot > head_dim || rot > table_stride ||
        (n > 0 && (!x || !cos_t || !sin_t)))
        return bad(err, "kn_cuda_rope_apply");
    const int64_t items = n * n_heads * (rot / 2);
    if (items == 0) return MM_OK;
    KN_CU(kn_launch(k_rope_apply, dim3((unsigned)kn_cdiv(items, 256)), 256, 0, stream, x, n, n_heads,
                    head_dim, stride, cos_t, sin_t, table_stride, rot),
          "kn_cuda_rope_apply");
    return MM_OK;
}

/* ---- per-head norm and RoPE of several tensors in one launch (a layer's q, k, index q and key) ---- */

struct nr_args {
    struct kn_norm_rope_part p[KN_NORM_ROPE_MAX_PARTS];
    int32_t n_parts, heads; /* heads: of all parts, per row */
    int64_t n;
    const float *ct, *st;
    int32_t ts;
    float eps;
};

/* one warp per (row, head of any part): k_head_rmsnorm's loop, then k_rope_apply's over the head's pairs
 * (after __syncwarp: a lane rotates values other lanes normalized) */
__global__ void k_head_norm_rope(const nr_args a)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (item >= a.n * a.heads) return;
    const int64_t i = item / a.heads;
    int32_t h = (int32_t)(item % a.heads), nh = 0, hd = 0, rot = 0;
    float *x = NULL;
    const float *w = NULL;
    uint16_t *bf = NULL;
#pragma unroll
    for (int k = 0; k < KN_NORM_ROPE_MAX_PARTS; k++) /* constant indices: the parts stay in parameter space */
        if (k < a.n_parts && !x) {
            if (h < a.p[k].n_heads)
                x = a.p[k].x, w = a.p[k].w, nh = a.p[k].n_heads, hd = a.p[k].head_dim, rot = a.p[k].rot,
                bf = (uint16_t *)a.p[k].bf16;
            else
                h -= a.p[k].n_heads;
        }
    const int64_t off = i * ((int64_t)nh * hd) + (int64_t)h * hd;
    float *p = x + off;
    float ss = 0.0f;
    for (int32_t j = lane; j < hd; j += 32) ss += p[j] * p[j];
    ss = kn_warp_sum(ss);
    const float inv = rsqrtf(ss / (float)hd + a.eps);
    for (int32_t j = lane; j < hd; j += 32) p[j] = p[j] * inv * (1.0f + w[j]);
    __syncwarp();
    const int32_t half = rot / 2;
    for (int32_t j = lane; j < half; j += 32) {
        rope_pair(p + j, p + j + half, a.ct[i * a.ts + j], a.st[i * a.ts + j], a.ct[i * a.ts + j + half],
                  a.st[i * a.ts + j + half]);
    }
    if (!bf) return;
    __syncwarp(); /* the rotated values other lanes wrote */
    for (int32_t j = lane; j < hd; j += 32) bf[off + j] = kn_f32_to_bf16(p[j]);
}

extern "C" int32_t kn_cuda_head_norm_rope(const struct kn_norm_rope_part *parts, int32_t n_parts, int64_t n,
                                          const float *cos_t, const float *sin_t, int32_t table_stride,
                                          float eps, cudaStream_t stream, struct mm_err *err)
{
    nr_args a;
    memset(&a, 0, sizeof a);
    if (n < 0 || n_parts < 1 || n_parts > KN_NORM_ROPE_MAX_PARTS || !parts)
        return bad(err, "kn_cuda_head_norm_rope");
    for (int32_t k = 0; k < n_parts; k++) {
        const struct kn_norm_rope_part *q = &parts[k];
        if (q->n_heads <= 0 || q->head_dim <= 0 || q->rot < 0 || q->rot % 2 || q->rot > q->head_dim ||
            (q->rot > 0 && (q->rot > table_stride || (n > 0 && (!cos_t || !sin_t)))) ||
            (n > 0 && (!q->x || !q->w)) || a.heads > INT32_MAX - q->n_heads)
            return bad(err, "kn_cuda_head_norm_rope");
        a.p[k] = *q;
        a.heads += q->n_heads;
    }
    a.n_parts = n_parts, a.n = n, a.ct = cos_t, a.st = sin_t, a.ts = table_stride, a.eps = eps;
    const int64_t items = n * a.heads;
    if (items == 0) return MM_OK;
    KN_CU(kn_launch(k_head_norm_rope, dim3((unsigned)kn_cdiv(items, 8)), 256, 0, stream, a),
          "kn_cuda_head_norm_rope");
    return MM_OK;
}

/* ---- activations and conversions ---- */

/* The element-wise kernels move 4 elements per thread (16-byte loads) where the count and the pointers
 * allow it: one float per thread read the vision tower's 2304 x 5120 activations at ~1 TB/s (encode_bench
 * op timing). Same arithmetic per element either way. KN_CUDA_OPS_VEC=0: one element per thread. */
static bool vec4_ok(int64_t n, const void *a, const void *b, const void *c)
{
    return n % 4 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)c % 16 == 0 &&
           kn_cuda_knob("KN_CUDA_OPS_VEC", 1);
}

__global__ void k_swiglu(const float *__restrict__ gate, const float *__restrict__ up, int64_t is, int64_t n,
                         int32_t dim, float alpha, float limit, void *out, int64_t os, int32_t bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * dim) return;
    const int64_t r = t / dim;
    const int32_t j = (int32_t)(t % dim);
    store_out(out, r * os + j, kn_swiglu_f(gate[r * is + j], up[r * is + j], alpha, limit), bf16);
}

/* Rows packed (strides = dim): one flat run of values, 4 per thread, no index division (the dense MLP's
 * call has dim 1 and paid a 64-bit division per element). Same element function, same bits. */
__global__ void k_swiglu4(const float4 *__restrict__ gate, const float4 *__restrict__ up, int64_t n4,
                          float alpha, float limit, void *out, int32_t bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    const float4 g = gate[t], u = up[t];
    const float4 v = make_float4(kn_swiglu_f(g.x, u.x, alpha, limit), kn_swiglu_f(g.y, u.y, alpha, limit),
                                 kn_swiglu_f(g.z, u.z, alpha, limit), kn_swiglu_f(g.w, u.w, alpha, limit));
    if (bf16)
        ((uint2 *)out)[t] = make_uint2(kn_pack_bf16(v.x, v.y), kn_pack_bf16(v.z, v.w));
    else
        ((float4 *)out)[t] = v;
}

extern "C" int32_t kn_cuda_swiglu(const float *gate, const float *up, int64_t in_stride, int64_t n,
                                  int32_t dim, float alpha, float limit, void *out, int64_t out_stride,
                                  int32_t out_bf16, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || dim <= 0 || (n > 0 && (!gate || !up || !out))) return bad(err, "kn_cuda_swiglu");
    if (n == 0) return MM_OK;
    const int64_t total = n * dim;
    if (in_stride == dim && out_stride == dim && vec4_ok(total, gate, up, out_bf16 ? NULL : out) &&
        (uintptr_t)out % 8 == 0) {
        KN_CU(kn_launch(k_swiglu4, dim3((unsigned)kn_cdiv(total / 4, 256)), 256, 0, stream,
                        (const float4 *)gate, (const float4 *)up, total / 4, alpha, limit, out, out_bf16),
              "kn_cuda_swiglu");
        return MM_OK;
    }
    KN_CU(kn_launch(k_swiglu, dim3((unsigned)kn_cdiv(total, 256)), 256, 0, stream, gate, up, in_stride, n,
                    dim, alpha, limit, out, out_stride, out_bf16),
          "kn_cuda_swiglu");
    return MM_OK;
}

__device__ __forceinline__ float gelu_f(float v, int32_t kind)
{
    if (kind == 1) return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    if (kind == 2) return v / (1.0f + expf(-1.702f * v));
    return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
}

__global__ void k_gelu(float *__restrict__ x, int64_t n, int32_t kind)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    x[t] = gelu_f(x[t], kind);
}

__global__ void k_gelu4(float4 *__restrict__ x, int64_t n4, int32_t kind)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    float4 v = x[t];
    v.x = gelu_f(v.x, kind), v.y = gelu_f(v.y, kind), v.z = gelu_f(v.z, kind), v.w = gelu_f(v.w, kind);
    x[t] = v;
}

extern "C" int32_t kn_cuda_gelu(float *x, int64_t n, int32_t kind, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || (n > 0 && !x) || kind < 0 || kind > 2) return bad(err, "kn_cuda_gelu");
    if (n == 0) return MM_OK;
    if (vec4_ok(n, x, x, x))
        KN_CU(
            kn_launch(k_gelu4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream, (float4 *)x, n / 4, kind),
            "kn_cuda_gelu");
    else
        KN_CU(kn_launch(k_gelu, dim3((unsigned)kn_cdiv(n, 256)), 256, 0, stream, x, n, kind), "kn_cuda_gelu");
    return MM_OK;
}

__global__ void k_add_bias_convert(const float *__restrict__ x, const float *__restrict__ bias, int64_t n,
                                   int32_t dim, void *y, int32_t bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    store_out(y, t, x[t] + (bias ? bias[t % dim] : 0.0f), bf16);
}

/* 4 elements of one row (dim % 4 == 0) */
__global__ void k_add_bias_convert4(const float4 *__restrict__ x, const float4 *__restrict__ bias, int64_t n4,
                                    int32_t dim4, void *y, int32_t bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    float4 v = x[t];
    if (bias) {
        const float4 b = bias[t % dim4];
        v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
    }
    if (bf16)
        ((uint2 *)y)[t] = make_uint2(kn_pack_bf16(v.x, v.y), kn_pack_bf16(v.z, v.w));
    else
        ((float4 *)y)[t] = v;
}

extern "C" int32_t kn_cuda_add_bias_convert(const float *x, const float *bias, int64_t n, int32_t dim,
                                            void *y, int32_t y_bf16, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || dim <= 0 || (n > 0 && (!x || !y))) return bad(err, "kn_cuda_add_bias_convert");
    if (n == 0) return MM_OK;
    if (dim % 4 == 0 && vec4_ok(n, x, bias, y) && (y_bf16 ? (uintptr_t)y % 8 == 0 : 1))
        KN_CU(kn_launch(k_add_bias_convert4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream,
                        (const float4 *)x, (const float4 *)bias, n / 4, dim / 4, y, y_bf16),
              "kn_cuda_add_bias_convert");
    else
        KN_CU(kn_launch(k_add_bias_convert, dim3((unsigned)kn_cdiv(n, 256)), 256, 0, stream, x, bias, n, dim,
                        y, y_bf16),
              "kn_cuda_add_bias_convert");
    return MM_OK;
}

__global__ void k_add(float *__restrict__ y, const float *__restrict__ x, int64_t n)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) y[t] += x[t];
}

__global__ void k_add4(float4 *__restrict__ y, const float4 *__restrict__ x, int64_t n4)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    float4 a = y[t];
    const float4 b = x[t];
    a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    y[t] = a;
}

extern "C" int32_t kn_cuda_add(float *y, const float *x, int64_t n, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || (n > 0 && (!x || !y))) return bad(err, "kn_cuda_add");
    if (n == 0) return MM_OK;
    if (vec4_ok(n, x, y, y))
        KN_CU(kn_launch(k_add4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream, (float4 *)y,
                        (const float4 *)x, n / 4),
              "kn_cuda_add");
    else
        KN_CU(kn_launch(k_add, dim3((unsigned)kn_cdiv(n, 256)), 256, 0, stream, y, x, n), "kn_cuda_add");
    return MM_OK;
}

/* f32 -> bf16, 4 elements per thread */
__global__ void k_convert4(const float4 *__restrict__ src, uint2 *__restrict__ dst, int64_t n4)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    const float4 v = src[t];
    dst[t] = make_uint2(kn_pack_bf16(v.x, v.y), kn_pack_bf16(v.z, v.w));
}

__global__ void k_convert(const void *__restrict__ src, void *__restrict__ dst, int64_t n, int32_t to_bf16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    if (to_bf16)
        ((uint16_t *)dst)[t] = kn_f32_to_bf16(((const float *)src)[t]);
    else
        ((float *)dst)[t] = kn_bf16_to_f32(((const uint16_t *)src)[t]);
}

/* ---- 16-bit floats widened to f32 (kn_cuda_widen16) ---- */

/* mm_f16_to_f32 / mm_bf16_to_f32 bit for bit: a half's subnormals normalized, NaN payloads kept */
__device__ __forceinline__ float widen16(uint32_t h, int32_t f16)
{
    if (!f16) return __uint_as_float(h << 16);
    const uint32_t sign = (h >> 15) << 31, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* shift the leading one to bit 10: k = 10 - msb(man) */
            const uint32_t k = (uint32_t)__clz((int)man) - 21u;
            u = sign | ((113u - k) << 23) | (((man << k) & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    }
    return __uint_as_float(u);
}

__global__ void k_widen16(const uint16_t *__restrict__ src, float *__restrict__ dst, int64_t n, int32_t f16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) dst[t] = widen16(src[t], f16);
}

/* 4 per thread: an 8-byte load, a 16-byte store */
__global__ void k_widen16x4(const uint2 *__restrict__ src, float4 *__restrict__ dst, int64_t n4, int32_t f16)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n4) return;
    const uint2 v = src[t];
    dst[t] = make_float4(widen16(v.x & 0xffffu, f16), widen16(v.x >> 16, f16), widen16(v.y & 0xffffu, f16),
                         widen16(v.y >> 16, f16));
}

extern "C" int32_t kn_cuda_convert(const void *src, void *dst, int64_t n, int32_t to_bf16,
                                   cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || (n > 0 && (!src || !dst))) return bad(err, "kn_cuda_convert");
    if (n == 0) return MM_OK;
    if (to_bf16 && vec4_ok(n, src, src, src) && (uintptr_t)dst % 8 == 0)
        KN_CU(kn_launch(k_convert4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream, (const float4 *)src,
                        (uint2 *)dst, n / 4),
              "kn_cuda_convert");
    else if (!to_bf16 && vec4_ok(n, dst, dst, dst) && (uintptr_t)src % 8 == 0)
        /* bf16 -> f32 (an attention output widened for the engine: ~67 M values a prefill chunk) */
        KN_CU(kn_launch(k_widen16x4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream, (const uint2 *)src,
                        (float4 *)dst, n / 4, 0),
              "kn_cuda_convert");
    else
        KN_CU(kn_launch(k_convert, dim3((unsigned)kn_cdiv(n, 256)), 256, 0, stream, src, dst, n, to_bf16),
              "kn_cuda_convert");
    return MM_OK;
}

extern "C" int32_t kn_cuda_widen16(const void *src, int32_t f16, float *dst, int64_t n, cudaStream_t stream,
                                   struct mm_err *err)
{
    if (n < 0 || (n > 0 && (!src || !dst))) return bad(err, "kn_cuda_widen16");
    if (n == 0) return MM_OK;
    f16 = f16 != 0;
    if (n % 4 == 0 && (uintptr_t)src % 8 == 0 && (uintptr_t)dst % 16 == 0 &&
        kn_cuda_knob("KN_CUDA_OPS_VEC", 1))
        KN_CU(kn_launch(k_widen16x4, dim3((unsigned)kn_cdiv(n / 4, 256)), 256, 0, stream, (const uint2 *)src,
                        (float4 *)dst, n / 4, f16),
              "kn_cuda_widen16");
    else
        KN_CU(kn_launch(k_widen16, dim3((unsigned)kn_cdiv(n, 256)), 256, 0, stream, (const uint16_t *)src,
                        dst, n, f16),
              "kn_cuda_widen16");
    return MM_OK;
}

__global__ void k_embed(const uint16_t *__restrict__ table, int32_t vocab, int32_t dim,
                        const int32_t *__restrict__ ids, int64_t n, float *__restrict__ out,
                        int32_t *bad_flag)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * dim) return;
    const int64_t i = t / dim;
    const int32_t j = (int32_t)(t % dim), id = ids[i];
    if (id < 0 || id >= vocab) {
        out[t] = 0.0f;
        if (bad_flag && j == 0) *bad_flag = 1;
        return;
    }
    out[t] = kn_bf16_to_f32(table[(int64_t)id * dim + j]);
}

extern "C" int32_t kn_cuda_embed(const void *table, int32_t vocab, int32_t dim, const int32_t *ids, int64_t n,
                                 float *out, int32_t *bad_flag, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || vocab <= 0 || dim <= 0 || (n > 0 && (!table || !ids || !out)))
        return bad(err, "kn_cuda_embed");
    if (n == 0) return MM_OK;
    KN_CU(kn_launch(k_embed, dim3((unsigned)kn_cdiv(n * dim, 256)), 256, 0, stream, (const uint16_t *)table,
                    vocab, dim, ids, n, out, bad_flag),
          "kn_cuda_embed");
    return MM_OK;
}

/* wk_argmax's rule: (v, i) beats (bv, bi) when v is a number and larger, or equal at a smaller index */
__device__ __forceinline__ bool am_better(float v, int32_t i, float bv, int32_t bi)
{
    if (isnan(v)) return false;
    if (isnan(bv)) return true;
    return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void am_warp(float &bv, int32_t &bi)
{
    for (int o = 16; o; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
}

#define AM_THREADS 1024
/* One CTA per row: each thread its strided elements, then warps, then the CTA */
__global__ void __launch_bounds__(AM_THREADS)
    k_argmax_rows(const float *__restrict__ x, int64_t n, int64_t ld, int32_t *__restrict__ ids)
{
    kn_chain_entry();
    __shared__ float sv[AM_THREADS / 32];
    __shared__ int32_t si[AM_THREADS / 32];
    const float *row = x + (int64_t)blockIdx.x * ld;
    float bv = __int_as_float(0x7fc00000); /* NaN: nothing yet */
    int32_t bi = INT32_MAX;
    for (int64_t i = threadIdx.x; i < n; i += AM_THREADS) {
        const float v = __ldg(row + i);
        if (am_better(v, (int32_t)i, bv, bi)) bv = v, bi = (int32_t)i;
    }
    am_warp(bv, bi);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sv[warp] = bv, si[warp] = bi;
    __syncthreads();
    if (warp) return;
    bv = sv[lane], bi = si[lane];
    am_warp(bv, bi);
    if (lane == 0) ids[blockIdx.x] = bi == INT32_MAX ? 0 : bi;
}

extern "C" int32_t kn_cuda_argmax_rows(const float *x, int32_t rows, int64_t n, int64_t ld, int32_t *ids,
                                       cudaStream_t stream, struct mm_err *err)
{
    if (rows < 0 || n <= 0 || n > INT32_MAX || ld < n || (rows > 0 && (!x || !ids)))
        return bad(err, "kn_cuda_argmax_rows");
    if (rows == 0) return MM_OK;
    KN_CU(kn_launch(k_argmax_rows, dim3((unsigned)rows), AM_THREADS, 0, stream, x, n, ld, ids),
          "kn_cuda_argmax_rows");
    return MM_OK;
}

__global__ void k_scatter_rows(float *__restrict__ out, int32_t dim, const int64_t *__restrict__ rows,
                               const float *__restrict__ data, int64_t n_rows)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_rows * dim) return;
    out[rows[t / dim] * dim + t % dim] = data[t];
}

extern "C" int32_t kn_cuda_scatter_rows(float *out, int32_t dim, const int64_t *rows, const float *data,
                                        int64_t n_rows, cudaStream_t stream, struct mm_err *err)
{
    if (dim <= 0 || n_rows < 0 || (n_rows > 0 && (!out || !rows || !data)))
        return bad(err, "kn_cuda_scatter_rows");
    if (n_rows == 0) return MM_OK;
    KN_CU(kn_launch(k_scatter_rows, dim3((unsigned)kn_cdiv(n_rows * dim, 256)), 256, 0, stream, out, dim,
                    rows, data, n_rows),
          "kn_cuda_scatter_rows");
    return MM_OK;
}

/* ---- bidirectional attention of one vision item: one warp per (query row, head), online softmax ---- */

#define FULL_MAX_DIM 256
__global__ void k_attn_full(const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, int64_t stride, int64_t n, int32_t heads, int32_t hd,
                            float scale, float *__restrict__ out, int64_t os)
{
    kn_chain_entry();
    __shared__ float qs[8][FULL_MAX_DIM];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t item = (int64_t)blockIdx.x * 8 + w;
    if (item >= n * heads) return;
    const int64_t i = item / heads;
    const int32_t h = (int32_t)(item % heads);
    for (int32_t d = lane; d < hd; d += 32) qs[w][d] = q[i * stride + (int64_t)h * hd + d];
    __syncwarp();
    float m = -INFINITY, l = 0.0f, acc[FULL_MAX_DIM / 32];
#pragma unroll
    for (int c = 0; c < FULL_MAX_DIM / 32; c++) acc[c] = 0.0f;
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
        const int64_t j = j0 + lane;
        float s = -INFINITY;
        if (j < n) {
            const float *kr = k + j * stride + (int64_t)h * hd;
            s = 0.0f;
            for (int32_t d = 0; d < hd; d++) s += qs[w][d] * kr[d];
            s *= scale;
        }
        const float mn = fmaxf(m, kn_warp_max(s));
        const float corr = m == -INFINITY ? 0.0f : __expf(m - mn);
        const float p = j < n ? __expf(s - mn) : 0.0f;
        l = l * corr + kn_warp_sum(p);
#pragma unroll
        for (int c = 0; c < FULL_MAX_DIM / 32; c++) acc[c] *= corr;
        m = mn;
        const int32_t cnt = n - j0 < 32 ? (int32_t)(n - j0) : 32;
        for (int32_t t = 0; t < cnt; t++) {
            const float pt = __shfl_sync(0xffffffffu, p, t);
            const float *vr = v + (j0 + t) * stride + (int64_t)h * hd;
#pragma unroll
            for (int c = 0; c < FULL_MAX_DIM / 32; c++) {
                const int32_t d = lane + 32 * c;
                if (d < hd) acc[c] += pt * vr[d];
            }
        }
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int c = 0; c < FULL_MAX_DIM / 32; c++) {
        const int32_t d = lane + 32 * c;
        if (d < hd) out[i * os + (int64_t)h * hd + d] = acc[c] * inv;
    }
}

extern "C" int32_t kn_cuda_attn_full(const float *q, const float *k, const float *v, int64_t stride,
                                     int64_t n, int32_t n_heads, int32_t head_dim, float scale, float *out,
                                     int64_t out_stride, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n_heads <= 0 || head_dim <= 0 || head_dim > FULL_MAX_DIM ||
        (n > 0 && (!q || !k || !v || !out)))
        return bad(err, "kn_cuda_attn_full");
    const int64_t items = n * n_heads;
    if (items == 0) return MM_OK;
    KN_CU(kn_launch(k_attn_full, dim3((unsigned)kn_cdiv(items, 8)), 256, 0, stream, q, k, v, stride, n,
                    n_heads, head_dim, scale, out, out_stride),
          "kn_cuda_attn_full");
    return MM_OK;
}
