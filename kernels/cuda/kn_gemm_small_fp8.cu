/* Decode products at 1-16 activation rows with FP8-E4M3 weights as stored, on the tensor cores: y[n][rows] =
 * bf16(x[n][cols]) . (W * scale)^T, and the MoE products of decode batches grouped by expert.
 *
 * Why: the CUDA-core FP8 product (kn_gemv_fp8.cu) converts every weight to f32 and pays one FMA per weight
 * and activation row, so from 3 rows on it lost to the bf16 tensor-core product (e.g. 8192 x 6144 at 16 rows
 * 241 against 35 us), and the products of more rows read the weight dequantized into scratch (twice its
 * bytes written and read again): FP8 weights made batch-16 decode 46 % slower than bf16 copies (v69). Here
 * the weight goes to the tensor cores as it is: e4m3 -> f16 is one exact conversion per two weights (every
 * e4m3 value is an f16), and the mma's f16 B operand is the activation row rounded to bf16 and scaled by a
 * power of two (kn_cuda_x_f16_scaled) so that it fits f16's range: a bf16 value times a power of two is an
 * f16 value as long as it is not below f16's normal range, and the scale puts the row's largest value in
 * [2^14, 2^15), so only values under 2^-28 of the row's largest lose bits. The products W_e4m3 * x are then
 * exact, summed in f32 per 64-wide block of one weight-scale block, and each scale block's sum times its
 * scale goes into the f32 accumulator; the output is multiplied back by 2^-k. So the arithmetic is
 * kn_gemv_fp8.cu's (W * scale exact, x rounded to bf16, f32 sums) up to the order of the sums.
 *
 * Layout: the weight rows are the mma's M (16 per warp, rows gid and gid + 8 of a lane), the activation rows
 * its N (8 or 16). A lane loads 16 e4m3 of each of its two rows per 64-wide k block (one 16-byte load each,
 * lanes tig 0-3 covering the block) and feeds 4 mma k-steps from them; inside the block the k order is
 * permuted the same way for both operands (step s takes physical k 16 tig + 4 s .. + 3 as the logical k 2
 * tig, 2 tig + 1, 2 tig + 8, 2 tig + 9), which a dot product allows. kn_gemm_small.cu's row route: a CTA of 8
 * warps takes 128 weight rows over a slice of the inner dimension whose activations are staged once in shared
 * memory in that order; a k split over CTAs adds its partial sums through the workspace (kn_ksplit_sum). The
 * expert route is kn_gemm_small.cu's: a CTA per 16 rows of one expert, its warps splitting the inner
 * dimension, the weights re-read for every 16 of the expert's activation rows. */
#include "kn_gemm_fp8.cuh"
#include "kn_gemm_small.cuh"
#include "kn_gemv.cuh"

#include <cuda_fp16.h>

#define G8_SMEM_MAX (64 << 10)

/* One row of x per CTA: the largest |bf16(x)| of the row, then the row rounded to bf16, times 2^k, as f16.
 * C > 0: the row (at most C float4 per thread) is loaded once, all loads in flight together, and kept in
 * registers (a decode batch's rows are short: a two-pass loop waited for ~12 dependent L2 round trips per
 * row); C == 0: any width, read twice. */
template <int C>
__global__ void __launch_bounds__(256) k_x_f16_scaled(const float *__restrict__ x, int64_t ldx, int64_t cols,
                                                      __half2 *__restrict__ xh, float *__restrict__ xs)
{
    kn_chain_entry();
    __shared__ float wmax[8];
    const float *row = x + (int64_t)blockIdx.x * ldx;
    constexpr int R = C > 0 ? C : 1;
    float4 v[R];
    float m = 0.0f;
    if (C > 0) {
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int64_t c = 4 * ((int64_t)threadIdx.x + 256 * i);
            v[i] =
                c < cols ? __ldg(reinterpret_cast<const float4 *>(row + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[i] = make_float4(gv_bf16r(v[i].x), gv_bf16r(v[i].y), gv_bf16r(v[i].z), gv_bf16r(v[i].w));
            m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
        }
    } else {
        for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * 256) {
            const float4 u = __ldg(reinterpret_cast<const float4 *>(row + c));
            m = fmaxf(m, fmaxf(fmaxf(fabsf(gv_bf16r(u.x)), fabsf(gv_bf16r(u.y))),
                               fmaxf(fabsf(gv_bf16r(u.z)), fabsf(gv_bf16r(u.w)))));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) wmax[threadIdx.x >> 5] = m;
    __syncthreads();
    m = wmax[0];
#pragma unroll
    for (int w = 1; w < 8; w++) m = fmaxf(m, wmax[w]);
    const int k = g8_exp(m);
    const float s = g8_pow2(k);
    __half2 *out = xh + (int64_t)blockIdx.x * (cols / 2);
    if (C > 0) {
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int64_t c = 4 * ((int64_t)threadIdx.x + 256 * i);
            if (c >= cols) continue;
            out[c / 2] = __floats2half2_rn(v[i].x * s, v[i].y * s);
            out[c / 2 + 1] = __floats2half2_rn(v[i].z * s, v[i].w * s);
        }
    } else {
        for (int64_t c = 4 * (int64_t)threadIdx.x; c < cols; c += 4 * 256) {
            const float4 u = __ldg(reinterpret_cast<const float4 *>(row + c));
            out[c / 2] = __floats2half2_rn(gv_bf16r(u.x) * s, gv_bf16r(u.y) * s);
            out[c / 2 + 1] = __floats2half2_rn(gv_bf16r(u.z) * s, gv_bf16r(u.w) * s);
        }
    }
    if (threadIdx.x == 0) xs[blockIdx.x] = g8_pow2(-k);
}

/* The row route: 8 warps x 16 weight rows over inner-dimension slice blockIdx.y (kspan wide) whose
 * activations are staged in shared memory as [64-wide block][tile][half][lane] uint4. Output: this CTA's
 * sums, times each token's 2^-k, to dst + blockIdx.y * slice (the workspace of a k split, or y). */
template <int NT, int PIPE>
__global__ void __launch_bounds__(GS_WARPS * 32, 2)
    k_gemm_rows_fp8(const __half *__restrict__ xh, const float *__restrict__ xs, int32_t n,
                    const uint8_t *__restrict__ w, const float *__restrict__ scale, int32_t bs_rows,
                    int32_t bs_cols, int64_t rows, int64_t cols, int32_t kspan, float *__restrict__ dst,
                    int64_t ld, int64_t slice)
{
    kn_chain_entry();
    extern __shared__ uint4 g8_xs[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int64_t kb = (int64_t)blockIdx.y * kspan;
    const int blocks = kspan / G8_BLOCK;
    /* unrolled: several of these L2 loads in flight per thread */
#pragma unroll 4
    for (int e = threadIdx.x; e < blocks * NT * 64; e += GS_WARPS * 32) {
        const int l = e & 31, h = (e >> 5) & 1, t = (e >> 6) % NT, j = e / (64 * NT), tok = 8 * t + (l >> 2);
        const int64_t k = kb + G8_BLOCK * j + 16 * (l & 3) + 8 * h;
        g8_xs[e] =
            tok < n ? __ldg(reinterpret_cast<const uint4 *>(xh + tok * cols + k)) : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    const int64_t r0 = (int64_t)blockIdx.x * (GS_WARPS * GS_ROWS) + (int64_t)warp * GS_ROWS;
    if (r0 >= rows) return; /* no barrier follows */
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const int64_t scols = (cols + bs_cols - 1) / bs_cols;
    const float *sa = scale + (ra ? (r0 + gid) / bs_rows : 0) * scols;
    const float *sb = scale + (rb ? (r0 + gid + 8) / bs_rows : 0) * scols;
    const uint4 *wa = reinterpret_cast<const uint4 *>(w + (r0 + gid) * cols + kb) + tig;
    const uint4 *wb = reinterpret_cast<const uint4 *>(w + (r0 + gid + 8) * cols + kb) + tig;
    float acc[NT][4], blk[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f, blk[t][e] = 0.0f;
    gs_stream<PIPE>(blocks, wa, wb, ra, rb, [&](int j, uint4 a0, uint4 a8) {
        uint4 bx[NT][2];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int h = 0; h < 2; h++) bx[t][h] = g8_xs[((j * NT + t) * 2 + h) * 32 + lane];
        g8_block<NT>(blk, a0, a8, bx);
        const int64_t c = kb + G8_BLOCK * j;
        if (j + 1 == blocks || (c + G8_BLOCK) % bs_cols == 0)
            g8_flush<NT>(acc, blk, __ldg(sa + c / bs_cols), __ldg(sb + c / bs_cols));
    });
    float *out = dst + (int64_t)blockIdx.y * slice;
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = 8 * t + 2 * tig + h;
            if (tok >= n) continue;
            const float u = __ldg(xs + tok);
            if (ra) out[tok * ld + r0 + gid] = acc[t][h] * u;
            if (rb) out[tok * ld + r0 + gid + 8] = acc[t][2 + h] * u;
        }
}

/* The split of the inner dimension: the largest divisor of the 64-wide blocks (at most 64) that keeps the
 * CTAs within ~2 per SM, then larger while the staged activations exceed G8_SMEM_MAX (KN_CUDA_GEMM_FP8_KS
 * forces a split that divides and fits) */
static int32_t g8_ksplit(int64_t n, int64_t rows, int64_t cols)
{
    const int64_t tiles = kn_cdiv(rows, GS_WARPS * GS_ROWS), want = 2 * (int64_t)kn_cuda_sm_count();
    const int64_t nb = cols / G8_BLOCK, block_bytes = (n > 8 ? 2 : 1) * 1024;
    const int forced = kn_cuda_knob_int("KN_CUDA_GEMM_FP8_KS", 0); /* benchmark: a forced split */
    if (forced > 0 && nb % forced == 0 && nb / forced * block_bytes <= G8_SMEM_MAX) return forced;
    int32_t ks = 1;
    for (int64_t d = 2; d <= nb && d <= 64; d++)
        if (nb % d == 0 && tiles * d <= want) ks = (int32_t)d;
    while (nb / ks * block_bytes > G8_SMEM_MAX) {
        int64_t d = ks + 1;
        while (d <= nb && nb % d) d++;
        if (d > nb) return 0;
        ks = (int32_t)d;
    }
    return ks;
}

extern "C" int kn_cuda_gemm_small_fp8_ok(int64_t n, int64_t rows, int64_t cols, int32_t bs_rows,
                                         int32_t bs_cols)
{
    return n >= 1 && n <= 16 && rows >= 1 && cols > 0 && cols % G8_BLOCK == 0 && bs_rows > 0 && bs_cols > 0 &&
           bs_cols % G8_BLOCK == 0 && kn_cdiv(rows, GS_WARPS * GS_ROWS) <= INT32_MAX &&
           g8_ksplit(n, rows, cols);
}

extern "C" size_t kn_cuda_gemm_small_fp8_ws(int64_t n, int64_t rows, int64_t cols)
{
    const int32_t ks = g8_ksplit(n, rows, cols);
    return ks > 1 ? sizeof(float) * (size_t)ks * (size_t)n * (size_t)rows : 0;
}

extern "C" int kn_cuda_x_f16_scaled_ok(int64_t cols, int64_t ldx)
{
    return cols > 0 && cols % 4 == 0 && ldx >= cols && ldx % 4 == 0;
}

extern "C" int32_t kn_cuda_x_f16_scaled(int64_t n, int64_t cols, const float *x, int64_t ldx, void *xh,
                                        float *xs, cudaStream_t stream, struct mm_err *err)
{
    if (n < 0 || n > INT32_MAX || !kn_cuda_x_f16_scaled_ok(cols, ldx) ||
        (n > 0 && (!x || !xh || !xs || (uintptr_t)x % 16 || (uintptr_t)xh % 8)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_x_f16_scaled: bad arguments (n %lld cols %lld ldx %lld)",
                          (long long)n, (long long)cols, (long long)ldx);
    if (n == 0) return MM_OK;
    /* the row in registers up to 8192 columns (8 float4 per thread) */
    void (*kern)(const float *, int64_t, int64_t, __half2 *, float *) = cols <= 2048   ? k_x_f16_scaled<2>
                                                                        : cols <= 4096 ? k_x_f16_scaled<4>
                                                                        : cols <= 8192 ? k_x_f16_scaled<8>
                                                                                       : k_x_f16_scaled<0>;
    return kn_cuda_check(kn_launch(kern, dim3((unsigned)n), 256, 0, stream, x, ldx, cols, (__half2 *)xh, xs),
                         "kn_cuda_x_f16_scaled", err);
}

extern "C" int32_t kn_cuda_gemm_small_fp8(int64_t n, int64_t rows, int64_t cols, const void *xh,
                                          const float *xs, const uint8_t *w, const float *scale,
                                          int32_t bs_rows, int32_t bs_cols, float *y, int64_t ldy, void *ws,
                                          size_t ws_bytes, cudaStream_t stream, struct mm_err *err)
{
    const int ok = kn_cuda_gemm_small_fp8_ok(n, rows, cols, bs_rows, bs_cols);
    const size_t ws_need = ok ? kn_cuda_gemm_small_fp8_ws(n, rows, cols) : 0;
    if (!ok || ldy < rows || !xh || !xs || !w || !scale || !y || (uintptr_t)xh % 16 || (uintptr_t)w % 16 ||
        ws_bytes < ws_need || (ws_need && !ws))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_fp8: bad arguments (n %lld rows %lld cols %lld blocks %dx%d)",
                          (long long)n, (long long)rows, (long long)cols, (int)bs_rows, (int)bs_cols);
    const int32_t ks = g8_ksplit(n, rows, cols), kspan = (int32_t)(cols / ks);
    const int nt = n > 8 ? 2 : 1, blocks = kspan / G8_BLOCK, smem = blocks * nt * 1024;
    /* the pipelined loads where a warp has two groups of blocks or more (as the bf16 row route) */
    void (*kern)(const __half *, const float *, int32_t, const uint8_t *, const float *, int32_t, int32_t,
                 int64_t, int64_t, int32_t, float *, int64_t, int64_t) =
        nt == 2 ? (blocks >= 2 * GS_GROUP ? k_gemm_rows_fp8<2, 1> : k_gemm_rows_fp8<2, 0>)
                : (blocks >= 2 * GS_GROUP ? k_gemm_rows_fp8<1, 1> : k_gemm_rows_fp8<1, 0>);
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    const dim3 grid((unsigned)kn_cdiv(rows, GS_WARPS * GS_ROWS), (unsigned)ks);
    const __half *xv = (const __half *)xh;
    if (e == cudaSuccess && ks == 1)
        e = kn_launch(kern, grid, GS_WARPS * 32, smem, stream, xv, xs, (int32_t)n, w, scale, bs_rows, bs_cols,
                      rows, cols, kspan, y, ldy, (int64_t)0);
    else if (e == cudaSuccess) {
        float *part = (float *)ws;
        e = kn_launch(kern, grid, GS_WARPS * 32, smem, stream, xv, xs, (int32_t)n, w, scale, bs_rows, bs_cols,
                      rows, cols, kspan, part, rows, n * rows);
        if (e == cudaSuccess) e = kn_ksplit_sum(part, (int32_t)n, rows, ks, y, ldy, stream);
    }
    return kn_cuda_check(e, "kn_cuda_gemm_small_fp8", err);
}

/* The grouped expert kernels' per-lane pieces (ge_cta, kn_gemm_small.cuh). sa / sb: the scale rows of this
 * lane's weight rows gid and gid + 8 (row 0's for one past the weight's end). */
__device__ __forceinline__ void ge8_scales(const ge_cta &c, const float *scale, int32_t bs_rows,
                                           int32_t bs_cols, int64_t cols, const float *&sa, const float *&sb)
{
    const int64_t scols = (cols + bs_cols - 1) / bs_cols;
    sa = scale + (c.ra ? (c.r0 + c.gid) / bs_rows : 0) * scols;
    sb = scale + (c.rb ? (c.r0 + c.gid + 8) / bs_rows : 0) * scols;
}

/* each token's activation scale xs[tok] on its sums (tokens 8 t + 2 tig + h below n; zero beyond) */
__device__ __forceinline__ void ge8_xscale(float (&acc)[2][4], const float *__restrict__ xs, int32_t n,
                                           int tig)
{
#pragma unroll
    for (int t = 0; t < 2; t++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = 8 * t + 2 * tig + h;
            const float u = tok < n ? __ldg(xs + tok) : 0.0f;
            acc[t][h] *= u, acc[t][2 + h] *= u;
        }
}

/* this lane's activation fragments of a 64-wide block at column c for tiles' rows 8 t + gid < n */
__device__ __forceinline__ void ge8_xload(uint4 (&bx)[2][2], const __half *__restrict__ xt, int64_t cols,
                                          int32_t n, int64_t c, int gid, int tig)
{
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int tok = 8 * t + gid;
#pragma unroll
        for (int h = 0; h < 2; h++)
            bx[t][h] =
                tok < n ? __ldg(reinterpret_cast<const uint4 *>(xt + tok * cols + c + 16 * tig + 8 * h)) : z;
    }
}

/* The expert route: blockIdx.y = expert e with activation rows off[e] .. off[e + 1] of xh / y (sorted by
 * expert), blockIdx.z the weight table (w_a, or w_b: gate and up in one launch); 16 weight rows per CTA, the
 * 64-wide blocks of the inner dimension split over its 8 warps; an expert without rows exits. */
__global__ void __launch_bounds__(GS_WARPS * 32)
    k_gemm_experts_fp8(const __half *__restrict__ xh, const float *__restrict__ xs,
                       const int32_t *__restrict__ off, const uint8_t *const *__restrict__ w_a,
                       const float *const *__restrict__ s_a, const uint8_t *const *__restrict__ w_b,
                       const float *const *__restrict__ s_b, int32_t bs_rows, int32_t bs_cols, int64_t rows,
                       int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b, int64_t ldy)
{
    kn_chain_entry();
    ge_cta c;
    if (!ge_cta_make(c, off, rows, cols / G8_BLOCK)) return;
    const uint8_t *w = (blockIdx.z ? w_b : w_a)[c.e];
    float *y = (blockIdx.z ? y_b : y_a) + (int64_t)c.p0 * ldy;
    const float *sa, *sb;
    ge8_scales(c, (blockIdx.z ? s_b : s_a)[c.e], bs_rows, bs_cols, cols, sa, sb);
    const uint4 *wa = reinterpret_cast<const uint4 *>(w + (c.r0 + c.gid) * cols) + 4 * c.b_begin + c.tig;
    const uint4 *wb = reinterpret_cast<const uint4 *>(w + (c.r0 + c.gid + 8) * cols) + 4 * c.b_begin + c.tig;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    for (int32_t t0 = 0; t0 < c.cnt; t0 += 16) {
        const int32_t n = c.cnt - t0 < 16 ? c.cnt - t0 : 16;
        const __half *xt = xh + (int64_t)(c.p0 + t0) * cols;
        float acc[2][4], blk[2][4];
        gs_zero<2>(acc);
        gs_zero<2>(blk);
#pragma unroll 2
        for (int b = 0; b < c.blocks; b++) {
            const int64_t k = G8_BLOCK * (c.b_begin + b);
            uint4 bx[2][2];
            ge8_xload(bx, xt, cols, n, k, c.gid, c.tig);
            g8_block<2>(blk, c.ra ? __ldcs(wa + 4 * b) : z, c.rb ? __ldcs(wb + 4 * b) : z, bx);
            if (b + 1 == c.blocks || (k + G8_BLOCK) % bs_cols == 0)
                g8_flush<2>(acc, blk, __ldg(sa + k / bs_cols), __ldg(sb + k / bs_cols));
        }
        ge8_xscale(acc, xs + c.p0 + t0, n, c.tig);
        if (t0) __syncthreads(); /* the previous chunk's sums are read */
        gs_store<2>(acc, n, rows, c.r0, y + (int64_t)t0 * ldy, ldy);
    }
}

/* The same products with the e4m3 weights fed through a per-warp cp.async ring (k_gemm_small_experts_ring's
 * design, kn_gemm_small.cu: each lane copies its own two 16-byte chunks of every 64-wide block, GS_RING_DEPTH
 * blocks ahead (gs_ring); the register-fed kernel above reads a decode batch's grouped experts at ~44 % of
 * copy, kn_bench fp8w "grouped fp8 tc"). XP: each block's activation fragments loaded one block ahead. The
 * same products in the same order: the same bits. */
#define GE8_RING_DEFAULT 2 /* KN_CUDA_GS_EXPERTS_RING: the ring with x a block ahead (v130) */

template <int XP>
__global__ void __launch_bounds__(GS_WARPS * 32, 2) /* 3 CTAs per SM spill (80 registers) */
    k_gemm_experts_fp8_ring(const __half *__restrict__ xh, const float *__restrict__ xs,
                            const int32_t *__restrict__ off, const uint8_t *const *__restrict__ w_a,
                            const float *const *__restrict__ s_a, const uint8_t *const *__restrict__ w_b,
                            const float *const *__restrict__ s_b, int32_t bs_rows, int32_t bs_cols,
                            int64_t rows, int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b,
                            int64_t ldy)
{
    extern __shared__ __align__(128) uint8_t ge8_sm[];
    kn_chain_entry();
    ge_cta c;
    if (!ge_cta_make(c, off, rows, cols / G8_BLOCK)) return;
    const uint8_t *w = (blockIdx.z ? w_b : w_a)[c.e];
    float *y = (blockIdx.z ? y_b : y_a) + (int64_t)c.p0 * ldy;
    const float *sa, *sb;
    ge8_scales(c, (blockIdx.z ? s_b : s_a)[c.e], bs_rows, bs_cols, cols, sa, sb);
    /* a row past the weight's end copies nothing from row r0 (zero-filled) */
    const uint4 *wa =
        reinterpret_cast<const uint4 *>(w + (c.r0 + (c.ra ? c.gid : 0)) * cols) + 4 * c.b_begin + c.tig;
    const uint4 *wb =
        reinterpret_cast<const uint4 *>(w + (c.r0 + (c.rb ? c.gid + 8 : 0)) * cols) + 4 * c.b_begin + c.tig;
    const gs_ring ring = gs_ring_make(ge8_sm, c.warp, c.lane, wa, wb, c.ra, c.rb, c.blocks);
    for (int32_t t0 = 0; t0 < c.cnt; t0 += 16) {
        const int32_t n = c.cnt - t0 < 16 ? c.cnt - t0 : 16;
        const __half *xt = xh + (int64_t)(c.p0 + t0) * cols;
#pragma unroll
        for (int i = 0; i < GS_RING_DEPTH; i++) ring.issue(i);
        float acc[2][4], blk[2][4];
        gs_zero<2>(acc);
        gs_zero<2>(blk);
        uint4 bx[2][2], bn[2][2];
        if (XP && c.blocks > 0) ge8_xload(bn, xt, cols, n, G8_BLOCK * c.b_begin, c.gid, c.tig);
        for (int b = 0; b < c.blocks; b++) {
            const int64_t k = G8_BLOCK * (c.b_begin + b);
            if (XP) {
#pragma unroll
                for (int t = 0; t < 2; t++) bx[t][0] = bn[t][0], bx[t][1] = bn[t][1];
                if (b + 1 < c.blocks) ge8_xload(bn, xt, cols, n, k + G8_BLOCK, c.gid, c.tig);
            } else {
                ge8_xload(bx, xt, cols, n, k, c.gid, c.tig);
            }
            uint4 a0, a8;
            ring.take(b, a0, a8);
            g8_block<2>(blk, a0, a8, bx);
            if (b + 1 == c.blocks || (k + G8_BLOCK) % bs_cols == 0)
                g8_flush<2>(acc, blk, __ldg(sa + k / bs_cols), __ldg(sb + k / bs_cols));
            ring.issue(b + GS_RING_DEPTH); /* after this block's reads of the slot it refills */
        }
        kn_cp_async_wait<0>();
        ge8_xscale(acc, xs + c.p0 + t0, n, c.tig);
        if (t0) __syncthreads(); /* the previous chunk's sums are read */
        gs_store<2>(acc, n, rows, c.r0, y + (int64_t)t0 * ldy, ldy);
    }
}

extern "C" int kn_cuda_gemm_small_experts_fp8_ok(int64_t cols, int32_t bs_rows, int32_t bs_cols)
{
    return cols > 0 && cols % G8_BLOCK == 0 && bs_rows > 0 && bs_cols > 0 && bs_cols % G8_BLOCK == 0;
}

extern "C" int32_t kn_cuda_gemm_small_experts_fp8(int32_t n_exp, const int32_t *off, int64_t rows,
                                                  int64_t cols, const void *xh, const float *xs,
                                                  const uint8_t *const *w_a, const float *const *s_a,
                                                  const uint8_t *const *w_b, const float *const *s_b,
                                                  int32_t bs_rows, int32_t bs_cols, float *y_a, float *y_b,
                                                  int64_t ldy, cudaStream_t stream, struct mm_err *err)
{
    if (n_exp < 0 || n_exp > 65535 || rows < 0 ||
        !kn_cuda_gemm_small_experts_fp8_ok(cols, bs_rows, bs_cols) || ldy < rows || (uintptr_t)xh % 16 ||
        (n_exp > 0 && (!xh || !xs || !off || !w_a || !s_a || !y_a || (w_b && (!y_b || !s_b)))) ||
        kn_cdiv(rows, GS_ROWS) > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_experts_fp8: bad arguments (experts %d rows %lld cols %lld)",
                          (int)n_exp, (long long)rows, (long long)cols);
    if (n_exp == 0 || rows == 0) return MM_OK;
    const dim3 grid((unsigned)kn_cdiv(rows, GS_ROWS), (unsigned)n_exp, w_b ? 2u : 1u);
    /* KN_CUDA_GS_EXPERTS_RING: 0 the register-fed kernel, 1 the ring, 2 the ring with x a block ahead */
    const int ring = kn_cuda_knob_int("KN_CUDA_GS_EXPERTS_RING", GE8_RING_DEFAULT);
    if (ring == 1 || ring == 2) {
        auto k = ring == 2 ? k_gemm_experts_fp8_ring<1> : k_gemm_experts_fp8_ring<0>;
        if (kn_smem_attr((const void *)k, GS_RING_SMEM) == cudaSuccess)
            return kn_cuda_check(kn_launch(k, grid, GS_WARPS * 32, GS_RING_SMEM, stream, (const __half *)xh,
                                           xs, off, w_a, s_a, w_b, s_b, bs_rows, bs_cols, rows, cols, y_a,
                                           y_b, ldy),
                                 "kn_cuda_gemm_small_experts_fp8", err);
        (void)cudaGetLastError(); /* the register-fed kernel instead */
    }
    return kn_cuda_check(kn_launch(k_gemm_experts_fp8, grid, GS_WARPS * 32, 0, stream, (const __half *)xh, xs,
                                   off, w_a, s_a, w_b, s_b, bs_rows, bs_cols, rows, cols, y_a, y_b, ldy),
                         "kn_cuda_gemm_small_experts_fp8", err);
}
