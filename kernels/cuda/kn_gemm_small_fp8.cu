/* Decode products at 1-16 activation rows with FP8-E4M3 weights as stored, on the tensor cores: y[n][rows] =
 * bf16(x[n][cols]) . (W * scale)^T, and the MoE products of decode batches grouped by expert.
 *
 * Why: the CUDA-core FP8 product (kn_gemv_fp8.cu) converts every weight to f32 and pays one FMA per weight
 * and activation row, so from 3 rows on it lost to the bf16 tensor-core product (e.g. 8192 x 6144 at 16 rows
 * 241 against 35 us), and the products of more rows read the weight dequantized into scratch (twice its
 * bytes written and read again): FP8 weights made batch-16 decode 46 % slower than bf16 copies (v69). Here
 * the weight goes to the tensor cores as it is: e4m3 -> f16 is one exact conversion per two weights (every
 * e4m3 value is an f16), and the mma's f16 B operand is the activation row rounded to bf16 and scaled by a
 * power of two (per row and inner-dimension slice, inside the product; kn_cuda_x_f16_scaled for the expert
 * products' rows) so that it fits f16's range: a bf16 value times a power of two is an
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
 * memory in that order; the CTAs of a k split form a cluster and add their sums through distributed shared
 * memory (no workspace, one launch). The expert route is kn_gemm_small.cu's: a CTA per 16 rows of one expert,
 * its warps splitting the inner dimension, the weights re-read for every 16 of the expert's activation rows.
 */
#include "kn_gemm_small.cuh"
#include "kn_gemv.cuh"

#include <cuda_fp16.h>
#include <pthread.h>

#define G8_BLOCK 64 /* k values per 16-byte load of a weight row */
#define G8_SMEM_MAX (64 << 10)

/* 2^k as an f32, k in [-126, 127] */
__device__ __forceinline__ float g8_pow2(int k)
{
    return __int_as_float((127 + k) << 23);
}

/* The exponent k that puts a row's largest |value| m in [2^14, 2^15); 0 for a row of zeros or one with an
 * infinity or NaN (those propagate as in the bf16 route) */
__device__ __forceinline__ int g8_exp(float m)
{
    return m > 0.0f && m <= 3.0e38f ? max(-126, min(126, 14 - ilogbf(m))) : 0;
}

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

/* Step s's A fragment from a lane's 16 e4m3 of row gid (a) and row gid + 8 (b): physical k 4 s .. 4 s + 3 */
__device__ __forceinline__ void g8_afrag(uint32_t (&af)[4], uint32_t a, uint32_t b)
{
    af[0] = kn_e4m3x2_to_f16x2((uint16_t)(a & 0xffffu));
    af[1] = kn_e4m3x2_to_f16x2((uint16_t)(b & 0xffffu));
    af[2] = kn_e4m3x2_to_f16x2((uint16_t)(a >> 16));
    af[3] = kn_e4m3x2_to_f16x2((uint16_t)(b >> 16));
}

/* One 64-wide k block of NT activation tiles: bx[t][h] is the lane's 8 f16 activations of token 8 t + gid at
 * physical k 16 tig + 8 h .. + 7 */
template <int NT>
__device__ __forceinline__ void g8_block(float (&acc)[NT][4], uint4 a0, uint4 a8, const uint4 (&bx)[NT][2])
{
    const uint32_t wa[4] = {a0.x, a0.y, a0.z, a0.w}, wb[4] = {a8.x, a8.y, a8.z, a8.w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        uint32_t af[4];
        g8_afrag(af, wa[s], wb[s]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const uint4 v = bx[t][s >> 1];
            const uint32_t b[2] = {(s & 1) ? v.z : v.x, (s & 1) ? v.w : v.y};
            kn_mma_f16(acc[t], af, b);
        }
    }
}

/* The end of a weight-scale block: its sums times the scales of rows gid (sa) and gid + 8 (sb) into acc */
template <int NT>
__device__ __forceinline__ void g8_flush(float (&acc)[NT][4], float (&blk)[NT][4], float sa, float sb)
{
#pragma unroll
    for (int t = 0; t < NT; t++) {
        acc[t][0] = fmaf(blk[t][0], sa, acc[t][0]), acc[t][1] = fmaf(blk[t][1], sa, acc[t][1]);
        acc[t][2] = fmaf(blk[t][2], sb, acc[t][2]), acc[t][3] = fmaf(blk[t][3], sb, acc[t][3]);
#pragma unroll
        for (int e = 0; e < 4; e++) blk[t][e] = 0.0f;
    }
}

/* The row route in one launch: 8 warps x 16 weight rows over inner-dimension slice blockIdx.y (kspan wide).
 * The CTA first stages its slice of the activation rows rounded to bf16 in shared memory as [64-wide
 * block][tile][half][lane] uint4, taking each row's largest |value| on the way, then scales each row by its
 * 2^k into f16 in place: the scale is per (row, slice), as exact as one per row, x is read once, and no
 * conversion launch runs before (the first one-launch version read the slice twice, for the maxima and the
 * staging: 8192 x 6144 at 16 rows 48 against 36 us with a conversion launch, v72). Or, given xh / xs
 * (kn_cuda_x_f16_scaled's rows, converted once for the several products of one x, as q / k / v), the slice
 * is staged from them as it is. The ks CTAs of a split
 * form a cluster; each puts its sums (times each row's 2^-k) in a shared tile, and CTA z adds the outputs e =
 * z mod ks of all ks tiles in rank order through distributed shared memory (no workspace, no second launch,
 * the same result whatever the timing). */
#define G8_ROWS (GS_WARPS * GS_ROWS)
#define G8_KS_MAX 8 /* a portable cluster */

template <int NT, int PIPE>
__global__ void __launch_bounds__(GS_WARPS * 32, 2)
    k_gemm_rows_fp8(const float *__restrict__ x, int64_t ldx, const __half *__restrict__ xh,
                    const float *__restrict__ xs, int32_t n, const uint8_t *__restrict__ w,
                    const float *__restrict__ scale, int32_t bs_rows, int32_t bs_cols, int64_t rows,
                    int64_t cols, int32_t kspan, float *__restrict__ y, int64_t ldy)
{
    kn_chain_entry();
    extern __shared__ uint4 g8_xs[];
    __shared__ float up[16], dn[16];
    __shared__ float tile[G8_ROWS * NT * 8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t ks = (int32_t)gridDim.y;
    const int64_t kb = (int64_t)blockIdx.y * kspan;
    const int blocks = kspan / G8_BLOCK;
    if (xh) { /* rows converted before (kn_cuda_x_f16_scaled, shared by the products of one x) */
        if (threadIdx.x < n) dn[threadIdx.x] = __ldg(xs + threadIdx.x);
#pragma unroll 4
        for (int e = threadIdx.x; e < blocks * NT * 64; e += GS_WARPS * 32) {
            const int l = e & 31, h = (e >> 5) & 1, t = (e >> 6) % NT, j = e / (64 * NT),
                      tok = 8 * t + (l >> 2);
            const int64_t k = kb + G8_BLOCK * j + 16 * (l & 3) + 8 * h;
            g8_xs[e] = tok < n ? __ldg(reinterpret_cast<const uint4 *>(xh + tok * cols + k))
                               : make_uint4(0, 0, 0, 0);
        }
        __syncthreads();
    } else {
        /* one read of the slice: rounded to bf16 into the staging layout, each row's largest |value| on the
         * way (the 4 lanes of a row's 8-value groups combined first, then one shared atomic per group of 4)
         */
        __shared__ unsigned tmax[16];
        if (threadIdx.x < 16) tmax[threadIdx.x] = 0u;
        __syncthreads();
#pragma unroll 4
        for (int e = threadIdx.x; e < blocks * NT * 64; e += GS_WARPS * 32) {
            const int l = e & 31, h = (e >> 5) & 1, t = (e >> 6) % NT, j = e / (64 * NT),
                      tok = 8 * t + (l >> 2);
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            float m = 0.0f;
            if (tok < n) {
                const float *src = x + tok * ldx + kb + G8_BLOCK * j + 16 * (l & 3) + 8 * h;
                const float4 p = __ldg(reinterpret_cast<const float4 *>(src));
                const float4 q = __ldg(reinterpret_cast<const float4 *>(src + 4));
                v = make_uint4(kn_pack_bf16(p.x, p.y), kn_pack_bf16(p.z, p.w), kn_pack_bf16(q.x, q.y),
                               kn_pack_bf16(q.z, q.w));
                const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int i = 0; i < 4; i++)
                    m = fmaxf(m, fmaxf(fabsf(kn_bf16_lo(u[i])), fabsf(kn_bf16_hi(u[i]))));
            }
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
            m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            if (tok < n && (l & 3) == 0) atomicMax(&tmax[tok], __float_as_uint(m));
            g8_xs[e] = v;
        }
        __syncthreads();
        if (threadIdx.x < n) {
            const int k = g8_exp(__uint_as_float(tmax[threadIdx.x]));
            up[threadIdx.x] = g8_pow2(k), dn[threadIdx.x] = g8_pow2(-k);
        }
        __syncthreads();
        /* in place: each thread's own entries, bf16 -> times 2^k -> f16 */
#pragma unroll 4
        for (int e = threadIdx.x; e < blocks * NT * 64; e += GS_WARPS * 32) {
            const int l = e & 31, t = (e >> 6) % NT, tok = 8 * t + (l >> 2);
            if (tok >= n) continue;
            const uint4 v = g8_xs[e];
            const float s = up[tok];
            g8_xs[e] = make_uint4(kn_pack_f16(kn_bf16_lo(v.x) * s, kn_bf16_hi(v.x) * s),
                                  kn_pack_f16(kn_bf16_lo(v.y) * s, kn_bf16_hi(v.y) * s),
                                  kn_pack_f16(kn_bf16_lo(v.z) * s, kn_bf16_hi(v.z) * s),
                                  kn_pack_f16(kn_bf16_lo(v.w) * s, kn_bf16_hi(v.w) * s));
        }
        __syncthreads();
    }
    const int64_t rc = (int64_t)blockIdx.x * G8_ROWS, r0 = rc + (int64_t)warp * GS_ROWS;
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const int64_t scols = (cols + bs_cols - 1) / bs_cols;
    const float *sa = scale + (ra ? (r0 + gid) / bs_rows : 0) * scols;
    const float *sb = scale + (rb ? (r0 + gid + 8) / bs_rows : 0) * scols;
    float acc[NT][4], blk[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f, blk[t][e] = 0.0f;
    if (r0 < rows) { /* a warp past the rows still takes part in the cluster's sums */
        const uint4 *wa = reinterpret_cast<const uint4 *>(w + (ra ? r0 + gid : 0) * cols + kb) + tig;
        const uint4 *wb = reinterpret_cast<const uint4 *>(w + (rb ? r0 + gid + 8 : 0) * cols + kb) + tig;
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
    }
    /* acc[t][0..1]: row gid, tokens 8t + 2tig (+1); acc[t][2..3]: row gid + 8 */
    if (ks == 1) {
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * t + 2 * tig + h;
                if (tok >= n) continue;
                if (ra) y[tok * ldy + r0 + gid] = acc[t][h] * dn[tok];
                if (rb) y[tok * ldy + r0 + gid + 8] = acc[t][2 + h] * dn[tok];
            }
        return;
    }
    constexpr int TW = NT * 8; /* tokens per tile row */
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = 8 * t + 2 * tig + h, rl = warp * GS_ROWS + gid;
            const float u = tok < n ? dn[tok] : 0.0f;
            tile[rl * TW + tok] = acc[t][h] * u;
            tile[(rl + 8) * TW + tok] = acc[t][2 + h] * u;
        }
    kn_cluster_sync();
    const int z = (int)kn_cluster_rank();
    for (int e = z + ks * (int)threadIdx.x; e < G8_ROWS * TW; e += ks * GS_WARPS * 32) {
        const int r = e / TW, tok = e % TW;
        if (tok >= n || rc + r >= rows) continue;
        const uint32_t at = (uint32_t)__cvta_generic_to_shared(&tile[e]);
        float v = 0.0f;
        for (int c = 0; c < ks; c++) v += kn_ld_cluster_f32(kn_cluster_map(at, (uint32_t)c));
        y[tok * ldy + rc + r] = v;
    }
    kn_cluster_sync(); /* the peers have read this CTA's tile */
}

typedef void (*g8_rows_kernel)(const float *, int64_t, const __half *, const float *, int32_t,
                               const uint8_t *, const float *, int32_t, int32_t, int64_t, int64_t, int32_t,
                               float *, int64_t);

/* The row route's kernel for n activation rows and a slice of blocks 64-wide blocks: the pipelined loads
 * where a warp has two groups of blocks or more (as the bf16 row route) */
static g8_rows_kernel g8_kernel(int64_t n, int blocks)
{
    return n > 8 ? (blocks >= 2 * GS_GROUP ? k_gemm_rows_fp8<2, 1> : k_gemm_rows_fp8<2, 0>)
                 : (blocks >= 2 * GS_GROUP ? k_gemm_rows_fp8<1, 1> : k_gemm_rows_fp8<1, 0>);
}

/* CTAs of a split of ks that the device holds at once: co-resident clusters of ks CTAs times ks (asked once
 * per kernel, shared memory size and ks). A grid of clusters that does not fit runs a second, mostly idle
 * wave: 8192 x 6144 at 16 rows, 256 CTAs in clusters of 4, 48 us against 36 for 192 in one wave (v72). */
static int64_t g8_slots(g8_rows_kernel kern, int smem, int32_t ks)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static struct {
        g8_rows_kernel k;
        int smem;
        int32_t ks;
        int64_t slots;
    } memo[48];
    static int used;
    int64_t slots = -1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < used && slots < 0; i++)
        if (memo[i].k == kern && memo[i].smem == smem && memo[i].ks == ks) slots = memo[i].slots;
    pthread_mutex_unlock(&mu);
    if (slots >= 0) return slots;
    int got = 0;
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    if (e == cudaSuccess && ks == 1) {
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&got, kern, GS_WARPS * 32, (size_t)smem);
        got *= kn_cuda_sm_count();
    } else if (e == cudaSuccess) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        kn_cluster_cfg(&cfg, &at, dim3(1, (unsigned)ks), GS_WARPS * 32, 0, 1, (unsigned)ks);
        cfg.dynamicSmemBytes = (size_t)smem;
        e = cudaOccupancyMaxActiveClusters(&got, (const void *)kern, &cfg);
        got *= ks;
    }
    if (e != cudaSuccess) (void)cudaGetLastError(), got = 0;
    slots = got;
    pthread_mutex_lock(&mu);
    if (used < (int)(sizeof memo / sizeof memo[0]))
        memo[used].k = kern, memo[used].smem = smem, memo[used].ks = ks, memo[used].slots = slots, used++;
    pthread_mutex_unlock(&mu);
    return slots;
}

/* The split of the inner dimension: the largest divisor ks of the 64-wide blocks (at most G8_KS_MAX, a
 * cluster) whose staged activations fit G8_SMEM_MAX and whose grid fits the device in one wave
 * (g8_slots); where none does, the smallest that fits shared memory; 0: none fits (KN_CUDA_GEMM_FP8_KS
 * forces a split that divides and fits) */
static int32_t g8_ksplit(int64_t n, int64_t rows, int64_t cols)
{
    const int64_t tiles = kn_cdiv(rows, G8_ROWS), nb = cols / G8_BLOCK, block_bytes = (n > 8 ? 2 : 1) * 1024;
    const int forced = kn_cuda_knob_int("KN_CUDA_GEMM_FP8_KS", 0); /* benchmark: a forced split */
    if (forced > 0 && forced <= G8_KS_MAX && nb % forced == 0 && nb / forced * block_bytes <= G8_SMEM_MAX)
        return forced;
    int32_t best = 0, first = 0;
    for (int32_t d = 1; d <= G8_KS_MAX && d <= nb; d++) {
        if (nb % d || nb / d * block_bytes > G8_SMEM_MAX) continue;
        if (!first) first = d;
        const int blocks = (int)(nb / d);
        if (tiles * d <= g8_slots(g8_kernel(n, blocks), blocks * (int)block_bytes, d)) best = d;
    }
    return best ? best : first;
}

extern "C" int kn_cuda_gemm_small_fp8_ok(int64_t n, int64_t rows, int64_t cols, int64_t ldx, int32_t bs_rows,
                                         int32_t bs_cols)
{
    return n >= 1 && n <= 16 && rows >= 1 && cols > 0 && cols % G8_BLOCK == 0 && ldx >= cols &&
           ldx % 4 == 0 && bs_rows > 0 && bs_cols > 0 && bs_cols % G8_BLOCK == 0 &&
           kn_cdiv(rows, G8_ROWS) <= INT32_MAX && g8_ksplit(n, rows, cols);
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

extern "C" int32_t kn_cuda_gemm_small_fp8(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                          const void *xh, const float *xs, const uint8_t *w,
                                          const float *scale, int32_t bs_rows, int32_t bs_cols, float *y,
                                          int64_t ldy, cudaStream_t stream, struct mm_err *err)
{
    if (!kn_cuda_gemm_small_fp8_ok(n, rows, cols, xh ? cols : ldx, bs_rows, bs_cols) || ldy < rows ||
        (xh ? !xs || (uintptr_t)xh % 16 : !x || (uintptr_t)x % 16) || !w || !scale || !y || (uintptr_t)w % 16)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_fp8: bad arguments (n %lld rows %lld cols %lld blocks %dx%d)",
                          (long long)n, (long long)rows, (long long)cols, (int)bs_rows, (int)bs_cols);
    const int32_t ks = g8_ksplit(n, rows, cols), kspan = (int32_t)(cols / ks);
    const int nt = n > 8 ? 2 : 1, blocks = kspan / G8_BLOCK, smem = blocks * nt * 1024;
    const g8_rows_kernel kern = g8_kernel(n, blocks);
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    if (e == cudaSuccess) {
        cudaLaunchConfig_t cfg;
        cudaLaunchAttribute at;
        kn_cluster_cfg(&cfg, &at, dim3((unsigned)kn_cdiv(rows, G8_ROWS), (unsigned)ks), GS_WARPS * 32, stream,
                       1, (unsigned)ks);
        cfg.dynamicSmemBytes = (size_t)smem;
        e = kn_launch_cfg(&cfg, kern, xh ? (const float *)NULL : x, ldx, (const __half *)xh, xs, (int32_t)n,
                          w, scale, bs_rows, bs_cols, rows, cols, kspan, y, ldy);
    }
    return kn_cuda_check(e, "kn_cuda_gemm_small_fp8", err);
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
    const int e = blockIdx.y;
    const int32_t p0 = off[e], cnt = off[e + 1] - p0;
    if (cnt <= 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const uint8_t *w = (blockIdx.z ? w_b : w_a)[e];
    const float *scale = (blockIdx.z ? s_b : s_a)[e];
    float *y = (blockIdx.z ? y_b : y_a) + (int64_t)p0 * ldy;
    const int64_t r0 = (int64_t)blockIdx.x * GS_ROWS, nb = cols / G8_BLOCK;
    const int64_t b_begin = warp * nb / GS_WARPS;
    const int blocks = (int)((warp + 1) * nb / GS_WARPS - b_begin);
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const int64_t scols = (cols + bs_cols - 1) / bs_cols;
    const float *sa = scale + (ra ? (r0 + gid) / bs_rows : 0) * scols;
    const float *sb = scale + (rb ? (r0 + gid + 8) / bs_rows : 0) * scols;
    const uint4 *wa = reinterpret_cast<const uint4 *>(w + (r0 + gid) * cols) + 4 * b_begin + tig;
    const uint4 *wb = reinterpret_cast<const uint4 *>(w + (r0 + gid + 8) * cols) + 4 * b_begin + tig;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    for (int32_t t0 = 0; t0 < cnt; t0 += 16) {
        const int32_t n = cnt - t0 < 16 ? cnt - t0 : 16;
        const __half *xt = xh + (int64_t)(p0 + t0) * cols;
        float acc[2][4], blk[2][4];
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
            for (int v = 0; v < 4; v++) acc[t][v] = 0.0f, blk[t][v] = 0.0f;
#pragma unroll 2
        for (int b = 0; b < blocks; b++) {
            const int64_t c = G8_BLOCK * (b_begin + b);
            uint4 bx[2][2];
#pragma unroll
            for (int t = 0; t < 2; t++) {
                const int tok = 8 * t + gid;
#pragma unroll
                for (int h = 0; h < 2; h++)
                    bx[t][h] =
                        tok < n
                            ? __ldg(reinterpret_cast<const uint4 *>(xt + tok * cols + c + 16 * tig + 8 * h))
                            : z;
            }
            g8_block<2>(blk, ra ? __ldcs(wa + 4 * b) : z, rb ? __ldcs(wb + 4 * b) : z, bx);
            if (b + 1 == blocks || (c + G8_BLOCK) % bs_cols == 0)
                g8_flush<2>(acc, blk, __ldg(sa + c / bs_cols), __ldg(sb + c / bs_cols));
        }
#pragma unroll
        for (int t = 0; t < 2; t++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = 8 * t + 2 * tig + h;
                const float u = tok < n ? __ldg(xs + p0 + t0 + tok) : 0.0f;
                acc[t][h] *= u, acc[t][2 + h] *= u;
            }
        if (t0) __syncthreads(); /* the previous chunk's sums are read */
        gs_store<2>(acc, n, rows, r0, y + (int64_t)t0 * ldy, ldy);
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
    return kn_cuda_check(kn_launch(k_gemm_experts_fp8, grid, GS_WARPS * 32, 0, stream, (const __half *)xh, xs,
                                   off, w_a, s_a, w_b, s_b, bs_rows, bs_cols, rows, cols, y_a, y_b, ldy),
                         "kn_cuda_gemm_small_experts_fp8", err);
}
