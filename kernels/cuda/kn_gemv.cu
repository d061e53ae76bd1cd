/* Decode-sized products: y[n][rows] = bf16(x[n][cols]) . W^T for n <= KN_GEMV_MAX_N rows of activations.
 *
 * Why not cuBLAS here: at n = 1..4 a product is a stream over W (the activations are a few KB), so its time
 * is W's bytes over the memory bandwidth; cuBLAS tiles the output features (64-128 per CTA), which leaves
 * most of the 132 SMs idle for the model's projections (a 2048-row MLP weight is 16-32 tiles) and reads each
 * weight at a fraction of the copy rate. Here a CTA takes GV_ROWS output rows and its 8 warps split the inner
 * dimension (cols / 8 each), so every projection of M3's shapes fills the GPU (2048 rows: 512 CTAs), each
 * lane keeps several 16-byte weight loads in flight, and the 8 warps' partial sums meet in shared memory.
 *
 * Numerics: x is read in f32 and rounded to bf16 (what the bf16 path's conversion before cuBLAS does), each
 * product is exact in f32, sums are f32 (lane, then warp shuffles, then the 8 warps in order). The result
 * differs from cuBLAS's only by the order of the f32 sums. */
#include "kn_gemv.cuh"

#include <string.h>

#define GV_ROWS 4

/* The 8 values of x at xk, each rounded to bf16 (one 16-byte chunk's worth of activations) */
__device__ __forceinline__ void gv_x8(const float *__restrict__ xk, float (&xv)[8])
{
    const float4 xa = __ldg(reinterpret_cast<const float4 *>(xk));
    const float4 xb = __ldg(reinterpret_cast<const float4 *>(xk + 4));
    xv[0] = gv_bf16r(xa.x), xv[1] = gv_bf16r(xa.y), xv[2] = gv_bf16r(xa.z), xv[3] = gv_bf16r(xa.w);
    xv[4] = gv_bf16r(xb.x), xv[5] = gv_bf16r(xb.y), xv[6] = gv_bf16r(xb.z), xv[7] = gv_bf16r(xb.w);
}

/* s plus one 16-byte chunk of 8 bf16 weights times xv, summed in order */
__device__ __forceinline__ float gv_dot8(float s, const uint4 wv, const float (&xv)[8])
{
    const uint32_t u[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        s = fmaf(__uint_as_float(u[e] << 16), xv[2 * e], s);
        s = fmaf(__uint_as_float(u[e] & 0xffff0000u), xv[2 * e + 1], s);
    }
    return s;
}

/* A 16-byte weight chunk: streamed (evict-first: read once), or KEEP: cached, for a next pass over the same
 * tile (k_gemv_experts_group) */
template <bool KEEP> __device__ __forceinline__ uint4 gv_ld(const uint4 *p)
{
    return KEEP ? __ldg(p) : __ldcs(p);
}

/* One CTA's GV_ROWS output rows r0.. of y[j][r] = bf16(x[j]) . W[r] for j < N (W rows x cols, contiguous). */
template <int N, bool KEEP = false>
__device__ __forceinline__ void gv_tile(const float *__restrict__ x, int64_t ldx, const uint4 *__restrict__ w,
                                        int64_t rows, int64_t cols, float *__restrict__ y, int64_t ldy,
                                        int64_t r0)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t chunks_row = cols / 8;             /* 16-byte chunks of a weight row */
    const int chunks = (int)(chunks_row / GV_WARPS); /* this warp's slice of every row */
    const int64_t c0 = (int64_t)warp * chunks;
    float acc[GV_ROWS][N];
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[r][j] = 0.0f;
#pragma unroll 2
    for (int c = lane; c < chunks; c += 32) {
        uint4 wv[GV_ROWS];
#pragma unroll
        for (int r = 0; r < GV_ROWS; r++)
            wv[r] =
                r0 + r < rows ? gv_ld<KEEP>(w + (r0 + r) * chunks_row + c0 + c) : make_uint4(0u, 0u, 0u, 0u);
        const int64_t k = (c0 + c) * 8;
#pragma unroll
        for (int j = 0; j < N; j++) {
            float xv[8];
            gv_x8(x + j * ldx + k, xv);
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++) acc[r][j] = gv_dot8(acc[r][j], wv[r], xv);
        }
    }
    gv_store<GV_ROWS, N>(acc, rows, y, ldy, r0);
}

/* One activation row and rows whose warp slices leave lanes idle: with 8 warps over the row, a warp's slice
 * of a 3072-wide row (the MoE down product's) is 48 chunks, so half the lanes idle in the second round, and
 * those products read at 61 % of copy against 89 % for 6144-wide rows (kn_bench fp8w, v111; 8 or 16 rows per
 * CTA instead measured slower; the halves 0.69-0.72x gv_tile's time at 3072 wide, v113). Here the 8 warps
 * take (row, half) units of the CTA's GV_ROWS rows: warp w row r0 + w / 2, half w % 2, every lane the same
 * number of chunks (gv_halves_ok). Sums: a lane's chunks in order, the lanes, then the two halves (not
 * gv_tile's order). */
__device__ __forceinline__ void gv_tile_halves(const float *__restrict__ x, const uint4 *__restrict__ w,
                                               int64_t rows, int64_t cols, float *__restrict__ y, int64_t r0)
{
    static_assert(GV_WARPS == 2 * GV_ROWS, "a (row, half) unit per warp");
    __shared__ float part[GV_WARPS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r = r0 + (warp >> 1), chunks_row = cols / 8, half = chunks_row / 2;
    const int64_t c0 = (warp & 1) * half;
    float s = 0.0f;
    if (r < rows) {
        const uint4 *wr = w + r * chunks_row + c0;
        const float *xk = x + c0 * 8;
#pragma unroll 4
        for (int c = lane; c < half; c += 32) {
            const uint4 wv = __ldcs(wr + c);
            float xv[8];
            gv_x8(xk + c * 8, xv);
            s = gv_dot8(s, wv, xv);
        }
    }
    s = kn_warp_sum(s);
    if (lane == 0) part[warp] = s;
    __syncthreads();
    const int t = threadIdx.x;
    if (t < GV_ROWS && r0 + t < rows) y[r0 + t] = part[2 * t] + part[2 * t + 1];
}

/* Whether gv_tile_halves takes a row width: gv_tile's warp slices (cols / 64 chunks) not a whole number of
 * lane rounds, the halves' (cols / 16) are, at 4 or more chunks a lane. Below that the halves lose: each
 * chunk reads its 8 values of x for one row instead of gv_tile's four, and at 1536 wide (3 chunks a lane)
 * they measured 1.23x gv_tile's time (v113) where at 3072 (6 a lane) 0.69-0.72x. KN_CUDA_GEMV_HALVES=0:
 * never, 2: wherever the lanes balance (tests and benchmarks). */
static bool gv_halves_ok(int64_t cols)
{
    const int k = kn_cuda_knob_int("KN_CUDA_GEMV_HALVES", 1);
    return k != 0 && (cols / 64) % 32 != 0 && cols % 512 == 0 && (k == 2 || cols / 512 >= 4);
}

/* The same with f32 weights (the MoE router and the index projections, kept in f32 because their outputs
 * pick experts and blocks): a 16-byte chunk is 4 weights, x is used as it is (no rounding), f32 products.
 * R output rows per CTA and the inner dimension split over ks = gridDim.y CTAs (clusters, summed in
 * gv_store): every CTA reads its k slice of the n activation rows once for its R weight rows, so the
 * activations' traffic is rows / R x n x cols x 4 bytes (with one row per CTA at 16 rows, 32x the weight
 * bytes). The activation loads are predicated, not branched around, so that a lane issues all of them before
 * its first product. gv_f32_plan picks R and ks. N >= n activation rows (N 8 serves n 5-8 and N 16 n 9-16:
 * rows j >= n are neither read nor stored; N <= 4 is n exactly). */
template <int R, int N>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_f32(const float *__restrict__ x, int64_t ldx, const float4 *__restrict__ w, int64_t rows,
               int64_t cols, float *__restrict__ y, int64_t ldy, int32_t n)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t r0 = (int64_t)blockIdx.x * R, chunks_row = cols / 4;
    const int chunks = (int)(chunks_row / gridDim.y / GV_WARPS);
    const int64_t c0 = ((int64_t)blockIdx.y * GV_WARPS + warp) * chunks;
    const int32_t nn = N <= 4 ? N : n; /* a constant where the kernel is the row count's own */
    float acc[R][N];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[r][j] = 0.0f;
#pragma unroll 2
    for (int c = lane; c < chunks; c += 32) {
        float4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            wv[r] =
                r0 + r < rows ? __ldcs(w + (r0 + r) * chunks_row + c0 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        const int64_t k = (c0 + c) * 4;
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 xv = j < nn ? __ldg(reinterpret_cast<const float4 *>(x + j * ldx + k))
                                     : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float s = acc[r][j];
                s = fmaf(wv[r].x, xv.x, s);
                s = fmaf(wv[r].y, xv.y, s);
                s = fmaf(wv[r].z, xv.z, s);
                s = fmaf(wv[r].w, xv.w, s);
                acc[r][j] = s;
            }
        }
    }
    gv_store<R, N>(acc, rows, y, ldy, r0, nn, (int)gridDim.y);
}

/* The staged f32 route (kn_cuda_gemv_f32_multi): several f32 weights of one width that read the same x (the
 * index projections iq and ik of an MSA layer), GF_ROWS weight rows of one weight per CTA. The CTA first
 * copies its k slice of the n activation rows into shared memory; warp w then streams weight rows 4w..4w+3 of
 * the tile over it, lane l the 16-byte chunks l, l + 32, ... of the slice, so each x value read from shared
 * memory feeds 4 weight rows and x crosses L2 once per 32 weight rows. k_gemv_f32 reads its slice of x from
 * L2 once per 1-8 weight rows: at 16 activation rows that is 2-16x the weight bytes, and the index
 * projections ran at 7-21 % of copy there. Sums: a lane's chunks in order, the lanes by gv_warp_reduce, then
 * the ks slices of a tile (one cluster) in rank order through distributed shared memory: deterministic, but
 * not k_gemv_f32's order. N >= n (4, 8 or 16); rows j >= n are zeros in shared memory and not stored. */
#define GF_ROWS 32
#define GF_SMEM_MAX (96 * 1024) /* the staged slice: two CTAs per SM */

struct gf_multi {
    const float4 *w[KN_GEMV_MULTI_MAX];
    float *y[KN_GEMV_MULTI_MAX];
    int64_t rows[KN_GEMV_MULTI_MAX];
    int32_t tile0[KN_GEMV_MULTI_MAX]; /* first tile of each weight (INT32_MAX past the last) */
};

template <int N>
__global__ void __launch_bounds__(GV_WARPS * 32, 2)
    k_gemv_f32_staged(const float *__restrict__ x, int64_t ldx, int64_t cols, int32_t n, const gf_multi m)
{
    kn_chain_entry();
    extern __shared__ float4 gf_x[]; /* [N][kc4] */
    __shared__ float tot[GF_ROWS * N];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float4 *w = m.w[0];
    float *y = m.y[0];
    int64_t rows = m.rows[0];
    int32_t t0 = 0;
#pragma unroll
    for (int k = 1; k < KN_GEMV_MULTI_MAX; k++) /* constant indices: m stays in parameter space */
        if ((int32_t)blockIdx.x >= m.tile0[k]) w = m.w[k], y = m.y[k], rows = m.rows[k], t0 = m.tile0[k];
    const int64_t r0 = (int64_t)((int32_t)blockIdx.x - t0) * GF_ROWS, cols4 = cols / 4;
    const int ks = (int)gridDim.y;
    const int kc4 = (int)(cols4 / ks);            /* this CTA's 16-byte chunks of a row */
    const int64_t c0 = (int64_t)blockIdx.y * kc4; /* the first of them */
    const int64_t rw = r0 + 4 * warp;             /* this warp's first weight row */
    bool ok[4];
#pragma unroll
    for (int r = 0; r < 4; r++) ok[r] = rw + r < rows;
    const float4 *wr = w + rw * cols4 + c0;
    /* this lane's weight chunks into L2 while x is staged: the loop below then waits for L2, not for HBM,
     * at each of its few (kc4 / 32) steps */
    for (int c = lane; c < kc4; c += 32)
#pragma unroll
        for (int r = 0; r < 4; r++)
            if (ok[r]) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(wr + r * cols4 + c));
    /* the slice by asynchronous copies, all in flight at once (rows j >= n zero-filled) */
    const uint32_t xs = kn_smem_addr(gf_x);
    for (int e = threadIdx.x; e < N * kc4; e += GV_WARPS * 32) {
        const int j = e / kc4, c = e - j * kc4;
        const bool in = j < n;
        kn_cp_async16(xs + 16u * (uint32_t)e,
                      in ? (const void *)(x + j * ldx + 4 * (c0 + c)) : (const void *)x, in ? 16 : 0);
    }
    kn_cp_async_commit();
    kn_cp_async_wait<0>();
    __syncthreads();
    float acc[4][N];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int j = 0; j < N; j++) acc[r][j] = 0.0f;
    constexpr int UNROLL = N == 16 ? 1 : 2; /* 16 rows: two chunks in flight would spill at 128 registers */
#pragma unroll UNROLL
    for (int c = lane; c < kc4; c += 32) {
        float4 wv[4];
#pragma unroll
        for (int r = 0; r < 4; r++)
            wv[r] = ok[r] ? __ldcs(wr + r * cols4 + c) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int j = 0; j < N; j++) {
            const float4 xv = gf_x[j * kc4 + c];
#pragma unroll
            for (int r = 0; r < 4; r++) {
                float s = acc[r][j];
                s = fmaf(wv[r].x, xv.x, s);
                s = fmaf(wv[r].y, xv.y, s);
                s = fmaf(wv[r].z, xv.z, s);
                s = fmaf(wv[r].w, xv.w, s);
                acc[r][j] = s;
            }
        }
    }
    /* the lanes' sums: this warp's 4 rows x N values, C per lane from index base (V = 4N >= 16) */
    constexpr int V = 4 * N, C = V >= 32 ? V / 32 : 1, dup = V >= 32 ? 1 : 32 / V;
    float a[V];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int j = 0; j < N; j++) a[r * N + j] = acc[r][j];
    int base = 0;
    gv_warp_reduce<V, 16>(a, lane, base);
    if (lane % dup == 0)
#pragma unroll
        for (int i = 0; i < C; i++) tot[warp * V + base + i] = a[i]; /* [row 4 warp + r][j] */
    if (ks == 1)
        __syncthreads();
    else
        kn_cluster_sync(); /* also a CTA barrier: every peer's tot is complete */
    const int zr = ks == 1 ? 0 : (int)kn_cluster_rank();
    for (int e = threadIdx.x; e < GF_ROWS * N; e += GV_WARPS * 32) {
        const int r = e / N, j = e - r * N;
        if (j >= n || r0 + r >= rows || e % ks != zr) continue;
        float t;
        if (ks == 1) {
            t = tot[e];
        } else {
            const uint32_t at = (uint32_t)__cvta_generic_to_shared(&tot[e]);
            t = 0.0f;
            for (int z = 0; z < ks; z++) t += kn_ld_cluster_f32(kn_cluster_map(at, (uint32_t)z));
        }
        y[j * rows + r0 + r] = t;
    }
    if (ks > 1) kn_cluster_sync(); /* the peers have read this CTA's sums */
}

template <int N>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_bf16(const float *__restrict__ x, int64_t ldx, const uint4 *__restrict__ w, int64_t rows,
                int64_t cols, float *__restrict__ y, int64_t ldy, int32_t n)
{
    kn_chain_entry();
    (void)n; /* N == n: one kernel per row count */
    gv_tile<N>(x, ldx, w, rows, cols, y, ldy, (int64_t)blockIdx.x * GV_ROWS);
}

__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_bf16_halves(const float *__restrict__ x, int64_t ldx, const uint4 *__restrict__ w, int64_t rows,
                       int64_t cols, float *__restrict__ y, int64_t ldy, int32_t n)
{
    kn_chain_entry();
    (void)ldx, (void)ldy, (void)n; /* one activation row */
    gv_tile_halves(x, w, rows, cols, y, (int64_t)blockIdx.x * GV_ROWS);
}

/* Several weights of the same width that read the same x (q/k/v, gate/up): weight i = blockIdx.y, its tiles
 * along x (CTAs past its rows exit); each tile is k_gemv_bf16's, so the outputs are the same bits. */
struct gv_multi {
    const uint4 *w[KN_GEMV_MULTI_MAX];
    float *y[KN_GEMV_MULTI_MAX];
    int64_t rows[KN_GEMV_MULTI_MAX];
};

template <int N>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_bf16_multi(const float *__restrict__ x, int64_t ldx, int64_t cols, const gv_multi m)
{
    kn_chain_entry();
    const uint4 *w = m.w[0];
    float *y = m.y[0];
    int64_t rows = m.rows[0];
#pragma unroll
    for (int k = 1; k < KN_GEMV_MULTI_MAX; k++) /* constant indices: m stays in parameter space */
        if (k == (int)blockIdx.y) w = m.w[k], y = m.y[k], rows = m.rows[k];
    const int64_t r0 = (int64_t)blockIdx.x * GV_ROWS;
    if (r0 >= rows) return;
    gv_tile<N>(x, ldx, w, rows, cols, y, rows, r0);
}

/* MoE decode: pair p multiplies x row p / xdiv by its expert's weight (tables w_a, and w_b for blockIdx.z =
 * 1, indexed by expert[p]) into row p of y_a (y_b); HALVES: over (row, half) units (gv_tile_halves) */
template <bool PF, bool HALVES>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_experts(const float *__restrict__ x, int64_t ldx, int32_t xdiv, const int32_t *__restrict__ expert,
                   const void *const *__restrict__ w_a, const void *const *__restrict__ w_b, int64_t rows,
                   int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b, int64_t ldy)
{
    kn_chain_entry();
    const int64_t p = gv_pair<PF>();
    const int32_t e = expert[p];
    const uint4 *w = (const uint4 *)(blockIdx.z ? w_b : w_a)[e];
    float *y = (blockIdx.z ? y_b : y_a) + p * ldy;
    if (HALVES)
        gv_tile_halves(x + (p / xdiv) * ldx, w, rows, cols, y, gv_pair_r0<PF, GV_ROWS>());
    else
        gv_tile<1>(x + (p / xdiv) * ldx, ldx, w, rows, cols, y, ldy, gv_pair_r0<PF, GV_ROWS>());
}

/* MoE decode pairs of several tokens that share an expert (tokens routed to the same expert): the per-pair
 * kernels stream that expert's weights from HBM once per pair, and at 4 tokens x 4 of 32 experts about a
 * fifth of the pairs repeat an expert, a token's pairs apart (~150 MB of other weights: L2 does not keep
 * them). Here the CTAs of the first pair of an expert run the tile for each of the expert's pairs in turn,
 * every pass but the last loading the weights with the caching loads so that the next pass finds them in L1
 * or L2. Each pass is the per-pair kernel's tile (the same bits). Measured (v118-v119, 16 pairs over 12
 * experts, M3's expert shape): gate + up 249-250 us against 294 per pair; all of an expert's rows in one pass
 * instead was slower (2-4 rows of accumulators took the kernel to 128 registers from 54, and with them every
 * CTA's loads in flight), and so was an L2 evict-last policy for the passes instead of the caching loads
 * (262-268 us, v120). The (row, half) down products do not take it: grouped they measured 165-207 us against
 * 147-163 per pair (v119-v120; 48-54 registers against 40: a CTA or two fewer per SM for a kernel with one
 * load in flight per unrolled step), and so did an expert's pairs as columns of one pass (each weight chunk
 * loaded once for 2 or 4 pairs: 152-157 / 268-285 us against 130-135 per pair with the pairs fastest; 48 / 80
 * registers; v128, branch exp-halves-group). With the pairs fastest in the grid (gv_pair), the passes' tiles
 * are also the other pairs' reads of the moment. */
#define GV_GROUP_PAIRS 64 /* most pairs the grouped kernel takes: one 64-bit mask */

template <bool PF>
__global__ void __launch_bounds__(GV_WARPS * 32)
    k_gemv_experts_group(const float *__restrict__ x, int64_t ldx, int32_t xdiv,
                         const int32_t *__restrict__ expert, const void *const *__restrict__ w_a,
                         const void *const *__restrict__ w_b, int64_t rows, int64_t cols,
                         float *__restrict__ y_a, float *__restrict__ y_b, int64_t ldy, int32_t pairs)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31, p = (int)gv_pair<PF>();
    const int32_t e = expert[p];
    /* the pairs of this expert, every warp the same mask */
    uint64_t m = (uint64_t)__ballot_sync(0xffffffffu, lane < pairs && expert[lane] == e) |
                 (uint64_t)__ballot_sync(0xffffffffu, lane + 32 < pairs && expert[lane + 32] == e) << 32;
    if (m & ((1ull << p) - 1)) return; /* an earlier pair's CTAs do p's rows */
    const uint4 *w = (const uint4 *)(blockIdx.z ? w_b : w_a)[e];
    float *y = blockIdx.z ? y_b : y_a;
    const int64_t r0 = gv_pair_r0<PF, GV_ROWS>();
    while (m) { /* uniform over the CTA */
        const int q = __ffsll((long long)m) - 1;
        m &= m - 1;
        if (m) {
            gv_tile<1, true>(x + (q / xdiv) * ldx, ldx, w, rows, cols, y + q * ldy, ldy, r0);
            __syncthreads(); /* the next pass reuses the shared sums */
        } else {
            gv_tile<1>(x + (q / xdiv) * ldx, ldx, w, rows, cols, y + q * ldy, ldy, r0);
        }
    }
}

/* Shapes a tile takes: per_chunk weights per 16-byte load (8 bf16, 4 f32), a whole number of loads per warp
 */
static int gv_shape_ok(int64_t n, int64_t max_n, int64_t cols, int64_t ldx, int per_chunk)
{
    return n >= 1 && n <= max_n && cols > 0 && cols % (per_chunk * GV_WARPS) == 0 && ldx >= cols &&
           ldx % 4 == 0;
}

template <typename W>
using gv_kernel = void (*)(const float *, int64_t, const W *, int64_t, int64_t, float *, int64_t, int32_t);

/* Argument checks and the launch of kernel k over rows / rpc x ks CTAs (ks > 1: clusters of the ks CTAs of
 * a row tile) shared by the bf16 and f32 products */
template <typename W>
static int32_t gv_run(gv_kernel<W> k, int rpc, int32_t ks, int shape_ok, const char *what, int64_t n,
                      int64_t rows, int64_t cols, const float *x, int64_t ldx, const void *w, float *y,
                      int64_t ldy, cudaStream_t stream, struct mm_err *err)
{
    if (rows < 0 || !shape_ok || ldy < rows || !x || !w || !y || (uintptr_t)x % 16 || (uintptr_t)w % 16 ||
        kn_cdiv(rows, rpc) > INT32_MAX)
        return mm_err_set(err, MM_INVALID, "%s: bad arguments (n %lld rows %lld cols %lld)", what,
                          (long long)n, (long long)rows, (long long)cols);
    if (rows == 0) return MM_OK;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, dim3((unsigned)kn_cdiv(rows, rpc), (unsigned)ks, 1), GV_WARPS * 32, stream, 1,
                   (unsigned)ks);
    return kn_cuda_check(kn_launch_cfg(&cfg, k, x, ldx, (const W *)w, rows, cols, y, ldy, (int32_t)n), what,
                         err);
}

extern "C" int kn_cuda_gemv_ok(int64_t n, int64_t cols, int64_t ldx)
{
    return gv_shape_ok(n, KN_GEMV_MAX_N, cols, ldx, 8);
}

extern "C" int32_t kn_cuda_gemv_bf16(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                     const void *w, float *y, int64_t ldy, cudaStream_t stream,
                                     struct mm_err *err)
{
    static const gv_kernel<uint4> k[KN_GEMV_MAX_N] = {k_gemv_bf16<1>, k_gemv_bf16<2>, k_gemv_bf16<3>,
                                                      k_gemv_bf16<4>};
    const int ok = kn_cuda_gemv_ok(n, cols, ldx);
    const gv_kernel<uint4> kk = ok && n == 1 && gv_halves_ok(cols) ? k_gemv_bf16_halves
                                : ok                               ? k[n - 1]
                                                                   : k[0];
    return gv_run(kk, GV_ROWS, 1, ok, "kn_cuda_gemv_bf16", n, rows, cols, x, ldx, w, y, ldy, stream, err);
}

/* The argument checks the products of several weights share: 1..KN_GEMV_MULTI_MAX weights and outputs, none
 * NULL, rows >= 0, x and every weight 16-byte aligned */
static int gv_multi_args_ok(int32_t n_w, const void *const *w, const int64_t *rows, float *const *y,
                            const float *x)
{
    int ok = n_w >= 1 && n_w <= KN_GEMV_MULTI_MAX && w && rows && y && x && (uintptr_t)x % 16 == 0;
    for (int32_t i = 0; ok && i < n_w; i++) ok = w[i] && y[i] && rows[i] >= 0 && (uintptr_t)w[i] % 16 == 0;
    return ok;
}

extern "C" int32_t kn_cuda_gemv_bf16_multi(int32_t n_w, const void *const *w, const int64_t *rows,
                                           float *const *y, int64_t n, int64_t cols, const float *x,
                                           int64_t ldx, cudaStream_t stream, struct mm_err *err)
{
    gv_multi m;
    memset(&m, 0, sizeof m);
    int64_t tiles = 0;
    const int ok = kn_cuda_gemv_ok(n, cols, ldx) && gv_multi_args_ok(n_w, w, rows, y, x);
    for (int32_t i = 0; ok && i < n_w; i++) {
        m.w[i] = (const uint4 *)w[i], m.y[i] = y[i], m.rows[i] = rows[i];
        if (kn_cdiv(rows[i], GV_ROWS) > tiles) tiles = kn_cdiv(rows[i], GV_ROWS);
    }
    if (!ok || tiles > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemv_bf16_multi: bad arguments (%d weights, n %lld cols %lld)", (int)n_w,
                          (long long)n, (long long)cols);
    if (tiles == 0) return MM_OK;
    static void (*const k[KN_GEMV_MAX_N])(const float *, int64_t, int64_t, const gv_multi) = {
        k_gemv_bf16_multi<1>, k_gemv_bf16_multi<2>, k_gemv_bf16_multi<3>, k_gemv_bf16_multi<4>};
    return kn_cuda_check(
        kn_launch(k[n - 1], dim3((unsigned)tiles, (unsigned)n_w), GV_WARPS * 32, 0, stream, x, ldx, cols, m),
        "kn_cuda_gemv_bf16_multi", err);
}

extern "C" int32_t kn_cuda_gemv_experts_bf16(int64_t pairs, int32_t xdiv, int64_t rows, int64_t cols,
                                             const float *x, int64_t ldx, const int32_t *expert,
                                             const void *const *w_a, const void *const *w_b, float *y_a,
                                             float *y_b, int64_t ldy, int32_t group, cudaStream_t stream,
                                             struct mm_err *err)
{
    if (pairs < 0 || pairs > 65535 || xdiv < 1 || rows < 0 || !kn_cuda_gemv_ok(1, cols, ldx) || ldy < rows ||
        (uintptr_t)x % 16 || (pairs > 0 && (!x || !expert || !w_a || !y_a || (w_b && !y_b))) ||
        kn_cdiv(rows, GV_ROWS) > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemv_experts_bf16: bad arguments (pairs %lld rows %lld cols %lld)",
                          (long long)pairs, (long long)rows, (long long)cols);
    if (pairs == 0 || rows == 0) return MM_OK;
    const int64_t tiles = kn_cdiv(rows, GV_ROWS);
    const bool halves = gv_halves_ok(cols), pf = gv_pair_fast(group, tiles);
    const dim3 grid = gv_pair_grid(pf, tiles, pairs, w_b ? 2u : 1u);
    if (group && !halves && pairs > 1 && pairs <= GV_GROUP_PAIRS && kn_cuda_knob_int("KN_CUDA_GEMV_GROUP", 1))
        return kn_cuda_check(kn_launch(pf ? k_gemv_experts_group<true> : k_gemv_experts_group<false>, grid,
                                       GV_WARPS * 32, 0, stream, x, ldx, xdiv, expert, w_a, w_b, rows, cols,
                                       y_a, y_b, ldy, (int32_t)pairs),
                             "kn_cuda_gemv_experts_bf16", err);
    auto k = halves ? (pf ? k_gemv_experts<true, true> : k_gemv_experts<false, true>)
                    : (pf ? k_gemv_experts<true, false> : k_gemv_experts<false, false>);
    return kn_cuda_check(kn_launch(k, grid, GV_WARPS * 32, 0, stream, x, ldx, xdiv, expert, w_a, w_b, rows,
                                   cols, y_a, y_b, ldy),
                         "kn_cuda_gemv_experts_bf16", err);
}

extern "C" int kn_cuda_gemv_f32_ok(int64_t n, int64_t cols, int64_t ldx)
{
    return gv_shape_ok(n, KN_GEMV_F32_MAX_N, cols, ldx, 4);
}

/* The f32 kernel for r weight rows per CTA (1, 4 or 8; 8 only from 5 activation rows on) and kernel index
 * ki = n <= 4 ? n - 1 : n <= 8 ? 4 : 5 (N 8 serves 5-8 rows, N 16 9-16) */
static gv_kernel<float4> gv_f32_kernel(int r, int ki)
{
    static const gv_kernel<float4> k1[6] = {k_gemv_f32<1, 1>, k_gemv_f32<1, 2>, k_gemv_f32<1, 3>,
                                            k_gemv_f32<1, 4>, k_gemv_f32<1, 8>, k_gemv_f32<1, 16>};
    static const gv_kernel<float4> k4[6] = {k_gemv_f32<4, 1>, k_gemv_f32<4, 2>, k_gemv_f32<4, 3>,
                                            k_gemv_f32<4, 4>, k_gemv_f32<4, 8>, k_gemv_f32<4, 16>};
    static const gv_kernel<float4> k8[2] = {k_gemv_f32<8, 8>, k_gemv_f32<8, 16>};
    return r == 1 ? k1[ki] : r == 8 && ki >= 4 ? k8[ki - 4] : k4[ki];
}

/* Rows per CTA and inner-dimension split of the f32 product (see k_gemv_f32), as measured on an H200
 * (bench/cuda/README.md, "f32 products"): at 1-4 activation rows 1 weight row per CTA where 4 would give
 * fewer CTAs than 4 per SM, else 4; from 5 rows on 8 weight rows per CTA for weights of at least 2 rows per
 * SM (half the activation traffic of 4), else 1; then a 2-way split where the tiles are fewer than the SMs
 * (more CTAs in the one wave; 4- and 8-way splits and second waves measured slower: the product is latency-
 * bound). KN_CUDA_GEMV_F32_R (1, 4, 8) and KN_CUDA_GEMV_F32_KS (1, 2, 4, 8) force the choice (benchmark). */
struct gv_plan {
    int r, ki;
    int32_t ks;
};

static struct gv_plan gv_f32_plan(int64_t n, int64_t rows, int64_t cols)
{
    struct gv_plan p;
    const int64_t sms = kn_cuda_sm_count(), chunks = cols / 4;
    p.ki = n <= 4 ? (int)n - 1 : n <= 8 ? 4 : 5;
    const int fr = kn_cuda_knob_int("KN_CUDA_GEMV_F32_R", 0),
              fks = kn_cuda_knob_int("KN_CUDA_GEMV_F32_KS", 0);
    if (fr == 1 || fr == 4 || (fr == 8 && n > 4))
        p.r = fr;
    else if (n <= 4)
        p.r = rows < GV_ROWS * sms ? 1 : GV_ROWS;
    else
        p.r = rows >= 2 * sms ? 8 : 1;
    int ks = fks == 1 || fks == 2 || fks == 4 || fks == 8 ? fks : kn_cdiv(rows, p.r) < sms ? 2 : 1;
    p.ks = chunks % ((int64_t)GV_WARPS * ks) == 0 ? ks : 1;
    return p;
}

extern "C" int kn_cuda_gemv_f32_split(int64_t n, int64_t rows, int64_t cols)
{
    return n >= 1 && n <= KN_GEMV_F32_MAX_N && rows >= 1 && cols >= 1 ? gv_f32_plan(n, rows, cols).ks : 1;
}

extern "C" int32_t kn_cuda_gemv_f32(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                    const float *w, float *y, int64_t ldy, cudaStream_t stream,
                                    struct mm_err *err)
{
    const int ok = kn_cuda_gemv_f32_ok(n, cols, ldx);
    const struct gv_plan p = ok && rows > 0 ? gv_f32_plan(n, rows, cols) : gv_plan{GV_ROWS, 0, 1};
    return gv_run(gv_f32_kernel(p.r, p.ki), p.r, p.ks, ok, "kn_cuda_gemv_f32", n, rows, cols, x, ldx, w, y,
                  ldy, stream, err);
}

/* The staged route's inner-dimension split: a divisor of cols / 128 (whole chunks per lane), at most 8 (a
 * portable cluster), large enough for the staged x to fit GF_SMEM_MAX; the smallest that gives every SM a
 * CTA (KN_CUDA_GEMV_F32_STAGED_KS: the smallest from this one on), else the largest there is; 0: none. */
static int32_t gf_split(int32_t nt, int64_t tiles, int64_t cols)
{
    const int64_t units = cols / 128, sms = kn_cuda_sm_count();
    const int64_t smin = kn_cdiv((int64_t)nt * cols * 4, GF_SMEM_MAX);
    int64_t want = kn_cdiv(sms, tiles > 0 ? tiles : 1);
    const int32_t force = kn_cuda_knob_int("KN_CUDA_GEMV_F32_STAGED_KS", 0); /* benchmark: this split */
    if (force >= 1) want = force;
    if (want > 8) want = 8;
    if (want < smin) want = smin;
    for (int64_t ks = want; ks <= 8; ks++)
        if (units % ks == 0) return (int32_t)ks;
    for (int64_t ks = want - 1; ks >= smin && ks >= 1; ks--)
        if (units % ks == 0) return (int32_t)ks;
    return 0;
}

extern "C" int kn_cuda_gemv_f32_multi_ok(int64_t n, int64_t cols, int64_t ldx)
{
    const int32_t nt = n <= 4 ? 4 : n <= 8 ? 8 : 16;
    return n >= 1 && n <= KN_GEMV_F32_MAX_N && cols > 0 && cols % 128 == 0 && ldx >= cols && ldx % 4 == 0 &&
           gf_split(nt, 1, cols) > 0;
}

extern "C" int32_t kn_cuda_gemv_f32_multi(int32_t n_w, const float *const *w, const int64_t *rows,
                                          float *const *y, int64_t n, int64_t cols, const float *x,
                                          int64_t ldx, cudaStream_t stream, struct mm_err *err)
{
    gf_multi m;
    memset(&m, 0, sizeof m);
    int64_t tiles = 0;
    int ok =
        kn_cuda_gemv_f32_multi_ok(n, cols, ldx) && gv_multi_args_ok(n_w, (const void *const *)w, rows, y, x);
    for (int32_t i = 0; ok && i < n_w; i++) {
        m.w[i] = (const float4 *)w[i], m.y[i] = y[i], m.rows[i] = rows[i], m.tile0[i] = (int32_t)tiles;
        tiles += kn_cdiv(rows[i], GF_ROWS);
        ok = tiles < INT32_MAX / 2;
    }
    if (!ok)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemv_f32_multi: bad arguments (%d weights, n %lld cols %lld)", (int)n_w,
                          (long long)n, (long long)cols);
    for (int32_t i = n_w; i < KN_GEMV_MULTI_MAX; i++) m.tile0[i] = INT32_MAX;
    if (tiles == 0) return MM_OK;
    const int32_t nt = n <= 4 ? 4 : n <= 8 ? 8 : 16, ks = gf_split(nt, tiles, cols);
    void (*k)(const float *, int64_t, int64_t, int32_t, const gf_multi) = nt == 4   ? k_gemv_f32_staged<4>
                                                                          : nt == 8 ? k_gemv_f32_staged<8>
                                                                                    : k_gemv_f32_staged<16>;
    const size_t smem = (size_t)nt * (size_t)cols * 4 / (size_t)ks;
    if (kn_smem_attr((const void *)k, smem) != cudaSuccess)
        return kn_cuda_check(cudaGetLastError(), "kn_cuda_gemv_f32_multi: shared memory", err);
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, dim3((unsigned)tiles, (unsigned)ks, 1), GV_WARPS * 32, stream, 1, (unsigned)ks);
    cfg.dynamicSmemBytes = smem;
    return kn_cuda_check(kn_launch_cfg(&cfg, k, x, ldx, cols, (int32_t)n, m), "kn_cuda_gemv_f32_multi", err);
}
