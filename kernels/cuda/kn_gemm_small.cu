/* Decode products at 3-16 activation rows on the tensor cores: y[n][rows] = bf16(x[n][cols]) . W^T.
 *
 * Why: cuBLAS reads the projections at 9-78 % of copy at 16 rows (the 512 x 6144 K/V projections at 9 %, the
 * LM head's odd row count at 18 %), and the CUDA-core product (kn_gemv.cu) loses from 3 rows on (the x loads
 * per weight byte grow with n). Here the weight rows are the mma's M (16 per warp) and the activation rows
 * its N (8 or 16), so one 16-byte weight load per row and thread feeds the tensor cores for two k-steps; no
 * shared-memory staging: a thread loads W[gid][k0 + 8 tig .. +7] and W[gid + 8][...] and x[t][same k], and
 * the k order inside each 32-wide block is permuted the same way for both operands (logical k 2tig+j <->
 * physical 8tig+j, logical 2tig+8+j <-> 8tig+2+j for the first k-step, +4 for the second), which a dot
 * product allows. A CTA of 8 warps takes 16 weight rows and splits the inner dimension over its warps (and
 * over ksplit CTAs when the rows alone give fewer than ~2 CTAs per SM: partial sums in a workspace, summed in
 * order by a second kernel, so the result does not depend on timing). f32 sums; x rounded to bf16 as the bf16
 * path's conversion does. NOT DEVICE-VERIFIED (branch exp-skinny-mma). */
#include "kn_cuda_internal.cuh"

#include <cuda_bf16.h>

#define GS_WARPS 8
#define GS_ROWS 16

template <int NT> /* n-tiles of 8 activation rows */
__global__ void __launch_bounds__(GS_WARPS * 32)
    k_gemm_small(const float *__restrict__ x, int64_t ldx, int32_t n, const uint4 *__restrict__ w,
                 int64_t rows, int64_t cols, int32_t ksplit, float *__restrict__ y, int64_t ldy,
                 float *__restrict__ part_ws)
{
    __shared__ float part[GS_WARPS][GS_ROWS][NT * 8];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * GS_ROWS;
    const int64_t kspan = cols / ksplit, k_begin = blockIdx.y * kspan + (int64_t)warp * (kspan / GS_WARPS);
    const int blocks = (int)(kspan / GS_WARPS / 32); /* 32-wide k blocks of this warp */
    const int64_t chunks_row = cols / 8;
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const uint4 *wa = w + (r0 + gid) * chunks_row + (k_begin >> 3) + tig;
    const uint4 *wb = w + (r0 + gid + 8) * chunks_row + (k_begin >> 3) + tig;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;
#pragma unroll 4
    for (int b = 0; b < blocks; b++) {
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        const uint4 a0 = ra ? __ldcs(wa + 4 * b) : z, a8 = rb ? __ldcs(wb + 4 * b) : z;
        const int64_t k = k_begin + 32 * b + 8 * tig;
        const uint32_t af0[4] = {a0.x, a8.x, a0.y, a8.y}, af1[4] = {a0.z, a8.z, a0.w, a8.w};
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const int tok = 8 * t + gid;
            float4 xa = make_float4(0.f, 0.f, 0.f, 0.f), xb = xa;
            if (tok < n) {
                xa = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k));
                xb = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k + 4));
            }
            const uint32_t b0[2] = {kn_pack_bf16(xa.x, xa.y), kn_pack_bf16(xa.z, xa.w)};
            const uint32_t b1[2] = {kn_pack_bf16(xb.x, xb.y), kn_pack_bf16(xb.z, xb.w)};
            kn_mma_bf16(acc[t], af0, b0);
            kn_mma_bf16(acc[t], af1, b1);
        }
    }
    /* C fragment: acc[t][0..1] = (row gid, tokens 8t + 2tig, +1), acc[t][2..3] = (row gid + 8, same) */
#pragma unroll
    for (int t = 0; t < NT; t++) {
        part[warp][gid][8 * t + 2 * tig] = acc[t][0];
        part[warp][gid][8 * t + 2 * tig + 1] = acc[t][1];
        part[warp][gid + 8][8 * t + 2 * tig] = acc[t][2];
        part[warp][gid + 8][8 * t + 2 * tig + 1] = acc[t][3];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < GS_ROWS * NT * 8; e += GS_WARPS * 32) {
        const int r = e / (NT * 8), tok = e % (NT * 8);
        if (tok >= n || r0 + r >= rows) continue;
        float s = 0.0f;
#pragma unroll
        for (int v = 0; v < GS_WARPS; v++) s += part[v][r][tok];
        if (ksplit == 1)
            y[tok * ldy + r0 + r] = s;
        else
            part_ws[((int64_t)blockIdx.y * n + tok) * rows + r0 + r] = s;
    }
}

/* ksplit > 1: y[t][r] = sum over s of part_ws[s][t][r], in order */
__global__ void k_gemm_small_sum(const float *__restrict__ part_ws, int32_t n, int64_t rows, int32_t ksplit,
                                 float *__restrict__ y, int64_t ldy)
{
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * rows) return;
    const int64_t t = i / rows, r = i % rows;
    float s = 0.0f;
    for (int32_t k = 0; k < ksplit; k++) s += part_ws[((int64_t)k * n + t) * rows + r];
    y[t * ldy + r] = s;
}

/* Inner-dimension split: enough CTAs for ~2 per SM, a whole number of 32-wide blocks per warp */
static int32_t gs_ksplit(int64_t rows, int64_t cols)
{
    const int64_t tiles = kn_cdiv(rows, GS_ROWS), want = 2 * (int64_t)kn_cuda_sm_count();
    int32_t ks = 1;
    while (ks < 8 && tiles * ks < want && cols % (GS_WARPS * 32 * ks * 2) == 0) ks *= 2;
    return ks;
}

extern "C" int kn_cuda_gemm_small_ok(int64_t n, int64_t cols, int64_t ldx)
{
    return n >= 1 && n <= 16 && cols > 0 && cols % (GS_WARPS * 32) == 0 && ldx >= cols && ldx % 4 == 0;
}

extern "C" size_t kn_cuda_gemm_small_ws(int64_t n, int64_t rows, int64_t cols)
{
    const int32_t ks = gs_ksplit(rows, cols);
    return ks > 1 ? sizeof(float) * (size_t)ks * (size_t)n * (size_t)rows : 0;
}

extern "C" int32_t kn_cuda_gemm_small_bf16(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                           const void *w, float *y, int64_t ldy, void *ws, size_t ws_bytes,
                                           cudaStream_t stream, struct mm_err *err)
{
    if (rows < 0 || !kn_cuda_gemm_small_ok(n, cols, ldx) || ldy < rows || !x || !w || !y ||
        (uintptr_t)x % 16 || (uintptr_t)w % 16 || kn_cdiv(rows, GS_ROWS) > INT32_MAX ||
        ws_bytes < kn_cuda_gemm_small_ws(n, rows, cols) || (kn_cuda_gemm_small_ws(n, rows, cols) && !ws))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_bf16: bad arguments (n %lld rows %lld cols %lld)", (long long)n,
                          (long long)rows, (long long)cols);
    if (rows == 0) return MM_OK;
    const int32_t ks = gs_ksplit(rows, cols);
    const dim3 grid((unsigned)kn_cdiv(rows, GS_ROWS), (unsigned)ks);
    const uint4 *wv = (const uint4 *)w;
    if (n <= 8)
        k_gemm_small<1>
            <<<grid, GS_WARPS * 32, 0, stream>>>(x, ldx, (int32_t)n, wv, rows, cols, ks, y, ldy, (float *)ws);
    else
        k_gemm_small<2>
            <<<grid, GS_WARPS * 32, 0, stream>>>(x, ldx, (int32_t)n, wv, rows, cols, ks, y, ldy, (float *)ws);
    if (ks > 1)
        k_gemm_small_sum<<<(unsigned)kn_cdiv(n * rows, 256), 256, 0, stream>>>((const float *)ws, (int32_t)n,
                                                                               rows, ks, y, ldy);
    return kn_cuda_check(cudaGetLastError(), "kn_cuda_gemm_small_bf16", err);
}
