/* Decode-sized products with FP8-E4M3 weights as the checkpoint stores them (DeepSeek-style block scales,
 * "weight_scale_inv"): y[n][rows] = bf16(x[n][cols]) . (W * scale)^T, and the MoE decode products over expert
 * tables; plus the expert dequantization the grouped (bf16) expert products of larger batches read.
 *
 * Why: a decode product is a stream over its weight, so its time is the weight's bytes over the memory
 * bandwidth; reading 1 byte per weight instead of the 2 of a bf16 copy halves it, and the weights stay in
 * the checkpoint's memory (no bf16 copy at load).
 *
 * Layout as kn_gemv.cu's (a CTA per R output rows, 8 warps over the inner dimension, sums in gv_store), with
 * two differences: a 16-byte chunk is 16 weights of one scale block (bs_cols a multiple of 16), and the warps
 * take the chunks of the CTA's slice interleaved (chunk c by lane c % 32 of warp (c / 32) % 8), so any cols
 * that is a multiple of 16 works (the tiny checkpoints' 64-wide expert products among them).
 *
 * Numerics: each weight is e4m3 -> f32 exactly (the hardware's e4m3x2 -> f16x2 conversion is exact, every
 * e4m3 value is an f16), the 16 products of a chunk are summed in f32, and that sum times the block's scale
 * is added to the f32 accumulator: W * scale is never rounded, so the result is the f32 product with the
 * exactly dequantized weight (the CPU backend's), up to the order of f32 sums. The bf16 route (the weight
 * dequantized to bf16 at load or into scratch) rounds each W * scale to bf16 instead. x is rounded to bf16 as
 * every bf16-product route rounds it. */
#include "kn_gemm_fp8.cuh"
#include "kn_gemv.cuh"

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <string.h>

/* 16 e4m3 weights (one 16-byte chunk, the first weight in the lowest byte) as f32 */
__device__ __forceinline__ void g8_unpack(const uint4 v, float (&f)[16])
{
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[i] & 0xffffu), __NV_E4M3);
        const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(u[i] >> 16), __NV_E4M3);
        const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
        f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
    }
}

/* 16 values of an activation row, each rounded to bf16 */
__device__ __forceinline__ void g8_load_x(const float *__restrict__ x, float (&xv)[16])
{
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(x + 4 * q));
        xv[4 * q] = gv_bf16r(v.x), xv[4 * q + 1] = gv_bf16r(v.y);
        xv[4 * q + 2] = gv_bf16r(v.z), xv[4 * q + 3] = gv_bf16r(v.w);
    }
}

/* One CTA's R output rows r0.. of y[j][r] for j < n (N >= n; N <= 4 is n exactly), over inner-dimension
 * slice kz of ks (the CTAs of a cluster when ks > 1, summed in gv_store). */
template <int R, int N>
__device__ __forceinline__ void g8_tile(const float *__restrict__ x, int64_t ldx, const uint4 *__restrict__ w,
                                        const float *__restrict__ scale, int32_t bs_rows, int32_t bs_cols,
                                        int64_t rows, int64_t cols, float *__restrict__ y, int64_t ldy,
                                        int64_t r0, int32_t n, int32_t ks, int32_t kz)
{
    const int64_t chunks_row = cols / 16, per = chunks_row / ks, c0 = (int64_t)kz * per;
    const int64_t scols = (cols + bs_cols - 1) / bs_cols;
    const int32_t nn = N <= 4 ? N : n;
    const float *srow[R];
#pragma unroll
    for (int r = 0; r < R; r++) srow[r] = scale + (r0 + r < rows ? (r0 + r) / bs_rows : 0) * scols;
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[r][j] = 0.0f;
    /* at 8 and 16 activation rows two chunks in flight would spill */
    constexpr int UNROLL = N <= 4 && R <= 4 ? 2 : 1;
#pragma unroll UNROLL
    for (int64_t c = threadIdx.x; c < per; c += GV_WARPS * 32) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            wv[r] = r0 + r < rows ? __ldcs(w + (r0 + r) * chunks_row + c0 + c) : make_uint4(0u, 0u, 0u, 0u);
        const int64_t k = (c0 + c) * 16, sb = k / bs_cols;
        float sc[R];
#pragma unroll
        for (int r = 0; r < R; r++) sc[r] = __ldg(srow[r] + sb);
        if constexpr (N <= 4) {
            /* x's chunk for every activation row first, then one weight row at a time: 16 unpacked weights
             * live at once, not 16 R */
            float xv[N][16];
#pragma unroll
            for (int j = 0; j < N; j++) g8_load_x(x + j * ldx + k, xv[j]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[16];
                g8_unpack(wv[r], wf);
#pragma unroll
                for (int j = 0; j < N; j++) {
                    float s = 0.0f;
#pragma unroll
                    for (int e = 0; e < 16; e++) s = fmaf(wf[e], xv[j][e], s);
                    acc[r][j] = fmaf(s, sc[r], acc[r][j]);
                }
            }
        } else {
            /* 5-16 activation rows: the weights unpacked once, x one row at a time */
            float wf[R][16];
#pragma unroll
            for (int r = 0; r < R; r++) g8_unpack(wv[r], wf[r]);
#pragma unroll
            for (int j = 0; j < N; j++) {
                float xv[16];
                if (j < nn)
                    g8_load_x(x + j * ldx + k, xv);
                else
#pragma unroll
                    for (int e = 0; e < 16; e++) xv[e] = 0.0f;
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float s = 0.0f;
#pragma unroll
                    for (int e = 0; e < 16; e++) s = fmaf(wf[r][e], xv[e], s);
                    acc[r][j] = fmaf(s, sc[r], acc[r][j]);
                }
            }
        }
    }
    gv_store<R, N>(acc, rows, y, ldy, r0, nn, ks);
}

template <int R, int N>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_fp8(const float *__restrict__ x, int64_t ldx, const uint4 *__restrict__ w,
               const float *__restrict__ scale, int32_t bs_rows, int32_t bs_cols, int64_t rows, int64_t cols,
               float *__restrict__ y, int64_t ldy, int32_t n)
{
    kn_chain_entry();
    g8_tile<R, N>(x, ldx, w, scale, bs_rows, bs_cols, rows, cols, y, ldy, (int64_t)blockIdx.x * R, n,
                  (int32_t)gridDim.y, (int32_t)blockIdx.y);
}

/* Several FP8 weights of one width and scale block that read the same x (q/k/v, gate/up): weight i =
 * blockIdx.y, its tiles of 4 rows along x (CTAs past its rows exit), no inner split */
struct g8_multi {
    const uint4 *w[KN_GEMV_MULTI_MAX];
    const float *s[KN_GEMV_MULTI_MAX];
    float *y[KN_GEMV_MULTI_MAX];
    int64_t rows[KN_GEMV_MULTI_MAX];
};

template <int N>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_fp8_multi(const float *__restrict__ x, int64_t ldx, int64_t cols, int32_t bs_rows, int32_t bs_cols,
                     const g8_multi m)
{
    kn_chain_entry();
    const uint4 *w = m.w[0];
    const float *s = m.s[0];
    float *y = m.y[0];
    int64_t rows = m.rows[0];
#pragma unroll
    for (int k = 1; k < KN_GEMV_MULTI_MAX; k++) /* constant indices: m stays in parameter space */
        if (k == (int)blockIdx.y) w = m.w[k], s = m.s[k], y = m.y[k], rows = m.rows[k];
    const int64_t r0 = (int64_t)blockIdx.x * 4;
    if (r0 >= rows) return;
    g8_tile<4, N>(x, ldx, w, s, bs_rows, bs_cols, rows, cols, y, rows, r0, N, 1, 0);
}

/* Rows per CTA of the expert products (one activation row per pair) */
#define G8_EXPERT_ROWS 4

/* MoE decode: pair p multiplies x row p / xdiv by its expert's weight (tables w_a / s_a, and w_b / s_b for
 * blockIdx.z = 1, indexed by expert[p]) into row p of y_a (y_b); PF: the pairs fastest (gv_pair) */
template <bool PF>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_experts_fp8(const float *__restrict__ x, int64_t ldx, int32_t xdiv,
                       const int32_t *__restrict__ expert, const uint8_t *const *__restrict__ w_a,
                       const float *const *__restrict__ s_a, const uint8_t *const *__restrict__ w_b,
                       const float *const *__restrict__ s_b, int32_t bs_rows, int32_t bs_cols, int64_t rows,
                       int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b, int64_t ldy)
{
    kn_chain_entry();
    const int64_t p = gv_pair<PF>();
    const int32_t e = expert[p];
    const uint4 *w = (const uint4 *)(blockIdx.z ? w_b : w_a)[e];
    const float *s = (blockIdx.z ? s_b : s_a)[e];
    float *y = (blockIdx.z ? y_b : y_a) + p * ldy;
    g8_tile<G8_EXPERT_ROWS, 1>(x + (p / xdiv) * ldx, ldx, w, s, bs_rows, bs_cols, rows, cols, y, ldy,
                               gv_pair_r0<PF, G8_EXPERT_ROWS>(), 1, 1, 0);
}

/* Elements i .. i + 15 of one FP8 weight (one row, one scale block: cols and bs_cols multiples of 16) to
 * bf16, each bf16(f32(q) * scale) */
__device__ __forceinline__ void g8_dequant16(const uint8_t *__restrict__ w, const float *__restrict__ scale,
                                             int64_t cols, int32_t bs_rows, int32_t bs_cols, uint16_t *out,
                                             int64_t i)
{
    const int64_t r = i / cols, col = i - r * cols, scols = (cols + bs_cols - 1) / bs_cols;
    const float sc = scale[(r / bs_rows) * scols + col / bs_cols];
    float f[16];
    g8_unpack(__ldcs(reinterpret_cast<const uint4 *>(w + i)), f);
    uint32_t o[8];
#pragma unroll
    for (int q = 0; q < 8; q++)
        o[q] = (uint32_t)kn_f32_to_bf16(f[2 * q] * sc) | (uint32_t)kn_f32_to_bf16(f[2 * q + 1] * sc) << 16;
    uint4 *dst = reinterpret_cast<uint4 *>(out + i);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

/* Expert weights to bf16 (the grouped products' input): set s = blockIdx.z, expert e = blockIdx.y of the
 * tables w / scale [n_sets][E] into out[s * E + e], 16 weights per thread; experts that got no rows
 * (off[e + 1] == off[e]; off NULL: none skipped) are left alone. */
__global__ void __launch_bounds__(256)
    k_dequant_fp8_experts(const int32_t *__restrict__ off, int32_t E, const uint8_t *const *__restrict__ w,
                          const float *const *__restrict__ scale, int64_t rows, int64_t cols, int32_t bs_rows,
                          int32_t bs_cols, void *const *__restrict__ out)
{
    kn_chain_entry();
    const int32_t e = (int32_t)blockIdx.y, t = (int32_t)blockIdx.z * E + e;
    if (off && off[e + 1] == off[e]) return;
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 16;
    if (i < rows * cols) g8_dequant16(w[t], scale[t], cols, bs_rows, bs_cols, (uint16_t *)out[t], i);
}

/* One FP8 weight to bf16, 16 weights per thread (kn_cuda_dequant_fp8_block where the shapes allow) */
__global__ void __launch_bounds__(256)
    k_dequant_fp8_16(const uint8_t *__restrict__ w, const float *__restrict__ scale, int64_t rows,
                     int64_t cols, int32_t bs_rows, int32_t bs_cols, uint16_t *__restrict__ out)
{
    kn_chain_entry();
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 16;
    if (i < rows * cols) g8_dequant16(w, scale, cols, bs_rows, bs_cols, out, i);
}

extern "C" int kn_cuda_gemv_fp8_ok(int64_t n, int64_t cols, int64_t ldx, int32_t bs_rows, int32_t bs_cols)
{
    return n >= 1 && n <= KN_GEMV_FP8_MAX_N && cols > 0 && cols % 16 == 0 && ldx >= cols && ldx % 4 == 0 &&
           bs_rows >= 1 && bs_cols >= 16 && bs_cols % 16 == 0;
}

/* Rows per CTA (8 at 1 activation row: the bytes per CTA of kn_gemv.cu's bf16 tiles, whose fixed cost per
 * CTA (the reduction) a 4-row FP8 tile pays for half the bytes; 4 from 2 rows on: at 2 rows it measured
 * faster on all six shapes of kn_bench fp8w (v71, e.g. 8192 x 6144 37 against 44 us), from 3 rows 8 spills)
 * and the inner-dimension split: 2 (a cluster pair) where the row tiles alone are fewer than the SMs and the
 * chunks divide. KN_CUDA_GEMV_FP8_R and KN_CUDA_GEMV_FP8_KS force them (benchmark). */
static void g8_plan(int64_t n, int64_t rows, int64_t cols, int *r, int32_t *ks)
{
    const int64_t sms = kn_cuda_sm_count(), chunks = cols / 16;
    const int fr = kn_cuda_knob_int("KN_CUDA_GEMV_FP8_R", 0),
              fks = kn_cuda_knob_int("KN_CUDA_GEMV_FP8_KS", 0);
    *r = fr == 4 || fr == 8 ? fr : n >= 2 ? 4 : 8;
    if (n > 2) *r = 4; /* 8 rows x 3 or more activation rows spill */
    int32_t k = fks == 1 || fks == 2 || fks == 4 || fks == 8 ? fks : kn_cdiv(rows, *r) < sms ? 2 : 1;
    while (k > 1 && chunks % k) k /= 2;
    *ks = k;
}

typedef void (*g8_kernel)(const float *, int64_t, const uint4 *, const float *, int32_t, int32_t, int64_t,
                          int64_t, float *, int64_t, int32_t);

extern "C" int32_t kn_cuda_gemv_fp8(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                    const uint8_t *w, const float *scale, int32_t bs_rows, int32_t bs_cols,
                                    float *y, int64_t ldy, cudaStream_t stream, struct mm_err *err)
{
    int r = 4;
    int32_t ks = 1;
    if (rows > 0 && cols > 0) g8_plan(n, rows, cols, &r, &ks);
    if (rows < 0 || !kn_cuda_gemv_fp8_ok(n, cols, ldx, bs_rows, bs_cols) || ldy < rows || !x || !w ||
        !scale || !y || (uintptr_t)x % 16 || (uintptr_t)w % 16 || kn_cdiv(rows, r) > INT32_MAX)
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemv_fp8: bad arguments (n %lld rows %lld cols %lld)",
                          (long long)n, (long long)rows, (long long)cols);
    if (rows == 0) return MM_OK;
    if (kn_cuda_gemv_fp8_bulk_ok(n, cols, ldx, bs_rows, bs_cols))
        return kn_gemv_fp8_bulk(1, &w, &scale, &rows, &y, &ldy, n, cols, x, ldx, bs_rows, bs_cols, stream,
                                err);
    static const g8_kernel k4[6] = {k_gemv_fp8<4, 1>, k_gemv_fp8<4, 2>, k_gemv_fp8<4, 3>,
                                    k_gemv_fp8<4, 4>, k_gemv_fp8<4, 8>, k_gemv_fp8<4, 16>};
    static const g8_kernel k8[2] = {k_gemv_fp8<8, 1>, k_gemv_fp8<8, 2>};
    const int ki = n <= 4 ? (int)n - 1 : n <= 8 ? 4 : 5;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, dim3((unsigned)kn_cdiv(rows, r), (unsigned)ks, 1), GV_WARPS * 32, stream, 1,
                   (unsigned)ks);
    return kn_cuda_check(kn_launch_cfg(&cfg, r == 8 ? k8[ki] : k4[ki], x, ldx, (const uint4 *)w, scale,
                                       bs_rows, bs_cols, rows, cols, y, ldy, (int32_t)n),
                         "kn_cuda_gemv_fp8", err);
}

extern "C" int32_t kn_cuda_gemv_fp8_multi(int32_t n_w, const uint8_t *const *w, const float *const *scale,
                                          const int64_t *rows, float *const *y, int64_t n, int64_t cols,
                                          const float *x, int64_t ldx, int32_t bs_rows, int32_t bs_cols,
                                          cudaStream_t stream, struct mm_err *err)
{
    g8_multi m;
    memset(&m, 0, sizeof m);
    int64_t tiles = 0;
    int ok = n >= 1 && n <= 4 && kn_cuda_gemv_fp8_ok(n, cols, ldx, bs_rows, bs_cols) && n_w >= 1 &&
             n_w <= KN_GEMV_MULTI_MAX && w && scale && rows && y && x && (uintptr_t)x % 16 == 0;
    for (int32_t i = 0; ok && i < n_w; i++) {
        ok = w[i] && scale[i] && y[i] && rows[i] >= 0 && (uintptr_t)w[i] % 16 == 0;
        if (!ok) break;
        m.w[i] = (const uint4 *)w[i], m.s[i] = scale[i], m.y[i] = y[i], m.rows[i] = rows[i];
        if (kn_cdiv(rows[i], 4) > tiles) tiles = kn_cdiv(rows[i], 4);
    }
    if (!ok || tiles > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemv_fp8_multi: bad arguments (%d weights, n %lld cols %lld)", (int)n_w,
                          (long long)n, (long long)cols);
    if (tiles == 0) return MM_OK;
    if (kn_cuda_gemv_fp8_bulk_ok(n, cols, ldx, bs_rows, bs_cols))
        return kn_gemv_fp8_bulk(n_w, w, scale, rows, y, rows, n, cols, x, ldx, bs_rows, bs_cols, stream, err);
    static void (*const k[4])(const float *, int64_t, int64_t, int32_t, int32_t, const g8_multi) = {
        k_gemv_fp8_multi<1>, k_gemv_fp8_multi<2>, k_gemv_fp8_multi<3>, k_gemv_fp8_multi<4>};
    return kn_cuda_check(kn_launch(k[n - 1], dim3((unsigned)tiles, (unsigned)n_w), GV_WARPS * 32, 0, stream,
                                   x, ldx, cols, bs_rows, bs_cols, m),
                         "kn_cuda_gemv_fp8_multi", err);
}

extern "C" int32_t kn_cuda_gemv_experts_fp8(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols,
                                            const float *x, int64_t ldx, const int32_t *expert,
                                            const uint8_t *const *w_a, const float *const *s_a,
                                            const uint8_t *const *w_b, const float *const *s_b,
                                            int32_t bs_rows, int32_t bs_cols, float *y_a, float *y_b,
                                            int64_t ldy, int32_t group, cudaStream_t stream,
                                            struct mm_err *err)
{
    if (pairs < 0 || pairs > 65535 || xdiv < 1 || rows < 0 ||
        !kn_cuda_gemv_fp8_ok(1, cols, ldx, bs_rows, bs_cols) || ldy < rows || (uintptr_t)x % 16 ||
        (pairs > 0 && (!x || !expert || !w_a || !s_a || !y_a || (w_b && (!s_b || !y_b)))) ||
        kn_cdiv(rows, G8_EXPERT_ROWS) > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemv_experts_fp8: bad arguments (pairs %lld rows %lld cols %lld)",
                          (long long)pairs, (long long)rows, (long long)cols);
    if (pairs == 0 || rows == 0) return MM_OK;
    const int bulk = kn_cuda_gemv_fp8_bulk_ok(1, cols, ldx, bs_rows, bs_cols);
    const int64_t tiles = kn_cdiv(rows, G8_EXPERT_ROWS);
    const int pf = gv_pair_fast(group, tiles);
    if (bulk || kn_cuda_gemv_fp8_ring_experts_ok(cols, ldx, bs_rows, bs_cols))
        return kn_gemv_fp8_bulk_experts(pairs, xdiv, rows, cols, x, ldx, expert, w_a, s_a, w_b, s_b, bs_rows,
                                        bs_cols, y_a, y_b, ldy, !bulk, pf, stream, err);
    const dim3 grid = gv_pair_grid(pf, tiles, pairs, w_b ? 2u : 1u);
    return kn_cuda_check(kn_launch(pf ? k_gemv_experts_fp8<true> : k_gemv_experts_fp8<false>, grid,
                                   GV_WARPS * 32, 0, stream, x, ldx, xdiv, expert, w_a, s_a, w_b, s_b,
                                   bs_rows, bs_cols, rows, cols, y_a, y_b, ldy),
                         "kn_cuda_gemv_experts_fp8", err);
}

extern "C" int kn_cuda_dequant_fp8_experts_ok(int64_t rows, int64_t cols, int32_t bs_rows, int32_t bs_cols)
{
    return rows >= 0 && cols > 0 && cols % 16 == 0 && bs_rows >= 1 && bs_cols >= 16 && bs_cols % 16 == 0 &&
           kn_cdiv(rows * cols / 16, 256) <= INT32_MAX;
}

extern "C" int32_t kn_cuda_dequant_fp8_experts(int32_t n_sets, int32_t n_exp, const int32_t *off,
                                               const uint8_t *const *w, const float *const *scale,
                                               int64_t rows, int64_t cols, int32_t bs_rows, int32_t bs_cols,
                                               void *const *out, cudaStream_t stream, struct mm_err *err)
{
    if (n_sets < 1 || n_sets > 65535 || n_exp < 0 || n_exp > 65535 ||
        !kn_cuda_dequant_fp8_experts_ok(rows, cols, bs_rows, bs_cols) ||
        (n_exp > 0 && (!w || !scale || !out)))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_dequant_fp8_experts: bad arguments (%d x %d experts, rows %lld cols %lld)",
                          (int)n_sets, (int)n_exp, (long long)rows, (long long)cols);
    if (n_exp == 0 || rows == 0) return MM_OK;
    const dim3 grid((unsigned)kn_cdiv(rows * cols / 16, 256), (unsigned)n_exp, (unsigned)n_sets);
    return kn_cuda_check(kn_launch(k_dequant_fp8_experts, grid, 256, 0, stream, off, n_exp, w, scale, rows,
                                   cols, bs_rows, bs_cols, out),
                         "kn_cuda_dequant_fp8_experts", err);
}

/* One FP8 weight, any shape: one weight per thread (the rounding of the 16-wide kernels) */
__global__ void k_dequant_fp8(const uint8_t *__restrict__ w, const float *__restrict__ scale, int64_t rows,
                              int64_t cols, int32_t bsr, int32_t bsc, uint16_t *__restrict__ out)
{
    kn_chain_entry();
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= rows * cols) return;
    const int64_t r = t / cols, c = t % cols, scols = (cols + bsc - 1) / bsc;
    __nv_fp8_e4m3 v;
    v.__x = w[t];
    out[t] = kn_f32_to_bf16((float)v * scale[(r / bsr) * scols + c / bsc]);
}

extern "C" int32_t kn_cuda_dequant_fp8_block(const uint8_t *w, const float *scale, int64_t rows, int64_t cols,
                                             int32_t bs_rows, int32_t bs_cols, void *out_bf16,
                                             cudaStream_t stream, struct mm_err *err)
{
    if (rows < 0 || cols < 0 || bs_rows <= 0 || bs_cols <= 0 ||
        (rows * cols > 0 && (!w || !scale || !out_bf16)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_dequant_fp8_block: bad arguments");
    if (rows * cols == 0) return MM_OK;
    if (kn_cuda_dequant_fp8_experts_ok(rows, cols, bs_rows, bs_cols) && (uintptr_t)w % 16 == 0 &&
        (uintptr_t)out_bf16 % 16 == 0)
        return kn_cuda_check(kn_launch(k_dequant_fp8_16, dim3((unsigned)kn_cdiv(rows * cols / 16, 256)), 256,
                                       0, stream, w, scale, rows, cols, bs_rows, bs_cols,
                                       (uint16_t *)out_bf16),
                             "kn_cuda_dequant_fp8_block", err);
    return kn_cuda_check(kn_launch(k_dequant_fp8, dim3((unsigned)kn_cdiv(rows * cols, 256)), 256, 0, stream,
                                   w, scale, rows, cols, bs_rows, bs_cols, (uint16_t *)out_bf16),
                         "kn_cuda_dequant_fp8_block", err);
}
