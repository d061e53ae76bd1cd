/* Decode products at 3-16 activation rows on the tensor cores: y[n][rows] = bf16(x[n][cols]) . W^T.
 *
 * Why: at 3-16 rows a product is still a stream over W, and cuBLAS reads the projections that give it few
 * 128-row tiles or an odd row count at 8-45 % of copy (512 x 6144 at 8 %, the LM head's 8199 rows at 16-42
 * %); the CUDA-core product (kn_gemv.cu) loses from 3 rows on (its activation loads per weight byte grow with
 * n). Here the weight rows are the mma's M (16 per warp) and the activation rows its N (8 or 16), so one
 * 16-byte weight load per row and thread feeds the tensor cores for two k-steps; no shared-memory staging: a
 * thread loads W[gid][k0 + 8 tig .. +7] and W[gid + 8][...] and x[t][same k], and the k order inside each
 * 32-wide block is permuted the same way for both operands (logical k 2tig+j <-> physical 8tig+j, logical
 * 2tig+8+j <-> 8tig+2+j for the first k-step, +4 for the second), which a dot product allows. A CTA of 8
 * warps takes 16 weight rows and splits the inner dimension over its warps (and over ksplit CTAs when the
 * rows alone give fewer than ~2 CTAs per SM: the ksplit CTAs form a cluster and add their sums in rank order
 * through distributed shared memory, so the result does not depend on timing; the workspace and second
 * kernel of the first version remain behind KN_CUDA_GS_CLUSTER=0). f32 sums; x rounded to bf16 as the bf16
 * path's conversion does. kn_cuda_gemm_small_prefer says where it beats cuBLAS (measured:
 * bench/cuda/README.md "Decode products at 3-16 rows"). */
#include "kn_gemm_small.cuh"

/* This thread's 8 activation values of a 32-wide k block (k = its first) for each tile's row 8 t + gid < n
 * (zeros past n) */
template <int NT>
__device__ __forceinline__ void gs_xload(float4 (&xa)[NT], float4 (&xb)[NT], const float *__restrict__ x,
                                         int64_t ldx, int32_t n, int64_t k, int gid)
{
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const int tok = 8 * t + gid;
        xa[t] = xb[t] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < n) {
            xa[t] = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k));
            xb[t] = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k + 4));
        }
    }
}

/* One 32-wide k block's products: the weight fragments of rows gid and gid + 8 (a0, a8: this thread's 8 k
 * values of each) against the same k values of the activation rows (gs_xload's), rounded to bf16 */
template <int NT>
__device__ __forceinline__ void gs_block_xv(float (&acc)[NT][4], uint4 a0, uint4 a8, const float4 (&xa)[NT],
                                            const float4 (&xb)[NT])
{
    const uint32_t af0[4] = {a0.x, a8.x, a0.y, a8.y}, af1[4] = {a0.z, a8.z, a0.w, a8.w};
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const uint32_t b0[2] = {kn_pack_bf16(xa[t].x, xa[t].y), kn_pack_bf16(xa[t].z, xa[t].w)};
        const uint32_t b1[2] = {kn_pack_bf16(xb[t].x, xb[t].y), kn_pack_bf16(xb[t].z, xb[t].w)};
        kn_mma_bf16(acc[t], af0, b0);
        kn_mma_bf16(acc[t], af1, b1);
    }
}

/* One 32-wide k block: the weight fragments of rows gid and gid + 8 against the same k values of every
 * activation row t < n, NT tiles of 8 */
template <int NT>
__device__ __forceinline__ void gs_block(float (&acc)[NT][4], uint4 a0, uint4 a8, const float *__restrict__ x,
                                         int64_t ldx, int32_t n, int64_t k, int gid)
{
    float4 xa[NT], xb[NT];
    gs_xload<NT>(xa, xb, x, ldx, n, k, gid);
    gs_block_xv<NT>(acc, a0, a8, xa, xb);
}

/* The 16-row route: 16 weight rows per CTA, the inner dimension split over its 8 warps (PIPE: gs_stream's) */
template <int NT, int PIPE>
__global__ void __launch_bounds__(GS_WARPS * 32)
    k_gemm_small(const float *__restrict__ x, int64_t ldx, int32_t n, const uint4 *__restrict__ w,
                 int64_t rows, int64_t cols, int32_t ksplit, float *__restrict__ y, int64_t ldy,
                 float *__restrict__ part_ws)
{
    kn_chain_entry();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int64_t r0 = (int64_t)blockIdx.x * GS_ROWS;
    const int64_t kspan = cols / ksplit, k_begin = blockIdx.y * kspan + (int64_t)warp * (kspan / GS_WARPS);
    const int blocks = (int)(kspan / GS_WARPS / 32); /* 32-wide k blocks of this warp */
    const int64_t chunks_row = cols / 8;
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const uint4 *wa = w + (r0 + gid) * chunks_row + (k_begin >> 3) + tig;
    const uint4 *wb = w + (r0 + gid + 8) * chunks_row + (k_begin >> 3) + tig;
    const int64_t kt = k_begin + 8 * tig;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;
    gs_stream<PIPE>(blocks, wa, wb, ra, rb, [&](int b, uint4 a0, uint4 a8) {
        gs_block<NT>(acc, a0, a8, x, ldx, n, kt + 32 * b, gid);
    });
    /* ksplit > 1: a cluster of the ksplit CTAs sums in gs_store, or (part_ws given: the previous route,
     * KN_CUDA_GS_CLUSTER=0) this CTA's partial sums go to its slice of the workspace, [ksplit][n][rows] */
    if (ksplit == 1 || !part_ws)
        gs_store<NT>(acc, n, rows, r0, y, ldy, ksplit);
    else
        gs_store<NT>(acc, n, rows, r0, part_ws + (int64_t)blockIdx.y * n * rows, rows);
}

/* The row route (KN_CUDA_GS_ROWS; by default for weights of 2048+ rows and 4096+ columns): a CTA's 8 warps
 * take 16 weight rows each (128 in all) over the CTA's whole slice of the inner dimension, and the slice's
 * activations are staged once in shared memory as bf16 B fragments ([32-wide block][tile][lane] uint4) that
 * all 8 warps read. The route above gives each CTA 16 rows, so every CTA re-reads its slice of x as f32 from
 * L2: at 16 activation rows twice the weight bytes, which held 2048 x 6144 at ~30 % of copy (ncu, this
 * session). Here x costs a quarter of the weight bytes at 16 rows; no sums across warps; a k split over CTAs
 * (enough CTAs for ~2 per SM) adds its partial sums through the workspace and kn_ksplit_sum, in order. */
#define GR_ROWS (GS_WARPS * GS_ROWS)
#define GR_SMEM_MAX (64 << 10)

template <int NT, int PIPE>
__global__ void __launch_bounds__(GS_WARPS * 32, 2)
    k_gemm_rows(const float *__restrict__ x, int64_t ldx, int32_t n, const uint4 *__restrict__ w0,
                const uint4 *__restrict__ w1, int64_t rows, int64_t cols, int32_t kspan,
                float *__restrict__ dst0, float *__restrict__ dst1, int64_t ld, int64_t slice)
{
    kn_chain_entry();
    extern __shared__ uint4 gr_xs[];
    /* blockIdx.z: which of two weights of the same shape that read the same x (gate and up in one launch) */
    const uint4 *__restrict__ w = blockIdx.z ? w1 : w0;
    float *__restrict__ dst = blockIdx.z ? dst1 : dst0;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
    const int64_t kb = (int64_t)blockIdx.y * kspan;
    const int blocks = kspan / 32;
    for (int e = threadIdx.x; e < blocks * NT * 32; e += GS_WARPS * 32) {
        const int l = e & 31, t = (e >> 5) % NT, j = e / (32 * NT), tok = 8 * t + (l >> 2);
        const int64_t k = kb + 32 * j + 8 * (l & 3);
        float4 xa = make_float4(0.f, 0.f, 0.f, 0.f), xb = xa;
        if (tok < n) {
            xa = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k));
            xb = __ldg(reinterpret_cast<const float4 *>(x + tok * ldx + k + 4));
        }
        gr_xs[e] = make_uint4(kn_pack_bf16(xa.x, xa.y), kn_pack_bf16(xa.z, xa.w), kn_pack_bf16(xb.x, xb.y),
                              kn_pack_bf16(xb.z, xb.w));
    }
    __syncthreads();
    const int64_t r0 = (int64_t)blockIdx.x * GR_ROWS + (int64_t)warp * GS_ROWS;
    if (r0 >= rows) return; /* no barrier follows */
    const int64_t chunks_row = cols / 8;
    const bool ra = r0 + gid < rows, rb = r0 + gid + 8 < rows;
    const uint4 *wa = w + (r0 + gid) * chunks_row + (kb >> 3) + tig;
    const uint4 *wb = w + (r0 + gid + 8) * chunks_row + (kb >> 3) + tig;
    float acc[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[t][e] = 0.0f;
    auto blk = [&](int j, uint4 a0, uint4 a8) {
        const uint32_t af0[4] = {a0.x, a8.x, a0.y, a8.y}, af1[4] = {a0.z, a8.z, a0.w, a8.w};
#pragma unroll
        for (int t = 0; t < NT; t++) {
            const uint4 bx = gr_xs[(j * NT + t) * 32 + lane];
            const uint32_t b0[2] = {bx.x, bx.y}, b1[2] = {bx.z, bx.w};
            kn_mma_bf16(acc[t], af0, b0);
            kn_mma_bf16(acc[t], af1, b1);
        }
    };
    gs_stream<PIPE>(blocks, wa, wb, ra, rb, blk);
    /* acc[t][0..1]: row gid, tokens 8t + 2tig (+1); acc[t][2..3]: row gid + 8 */
    float *out = dst + (int64_t)blockIdx.y * slice;
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = 8 * t + 2 * tig + h;
            if (tok >= n) continue;
            if (ra) out[tok * ld + r0 + gid] = acc[t][h];
            if (rb) out[tok * ld + r0 + gid + 8] = acc[t][2 + h];
        }
}

/* The row route's split of the inner dimension (0: the route does not apply): the largest divisor of the
 * 32-wide blocks (at most 64) that keeps the CTAs within ~2 per SM, then larger while the staged
 * activations exceed GR_SMEM_MAX. Where (KN_CUDA_GS_ROWS=1, the default): weights of at least 2048 rows and
 * 4096 columns, where it measured level or faster (% of copy, 16 rows: 2048 x 6144 45 against 30, 8199 x
 * 6144 72 against 52, 6144 x 8192 72 against 47; 4 rows: 8199 x 6144 77 against 63); on 512 x 6144 (a
 * 64-way split, 3 blocks per warp) 15-16 against 19-22 and on 6144 x 2048 at 1-8 rows 48-50 against 55 it
 * lost (bench/cuda/README.md "Fifth session"). 2: wherever there are 128 rows (tests),
 * 0: never. */
static int32_t gr_ksplit(int64_t n, int64_t rows, int64_t cols)
{
    const int knob = kn_cuda_knob_int("KN_CUDA_GS_ROWS", 1);
    if (knob == 0 || rows < GR_ROWS || (knob == 1 && (rows < 2048 || cols < 4096))) return 0;
    const int64_t tiles = kn_cdiv(rows, GR_ROWS), want = 2 * (int64_t)kn_cuda_sm_count(), nb = cols / 32;
    const int64_t tile_bytes = (n > 8 ? 2 : 1) * 512; /* staged bytes per 32-wide block */
    int32_t ks = 1;
    for (int64_t d = 2; d <= nb && d <= 64; d++)
        if (nb % d == 0 && tiles * d <= want) ks = (int32_t)d;
    while (nb / ks * tile_bytes > GR_SMEM_MAX) {
        int64_t d = ks + 1;
        while (d <= nb && nb % d) d++;
        if (d > nb || d > 64) return 0;
        ks = (int32_t)d;
    }
    return ks;
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

extern "C" int kn_cuda_gemm_small_prefer(int64_t n, int64_t rows, int64_t cols)
{
    /* cuBLAS reads large weights with rows a multiple of its 128-row tiles at ~75 % of copy at 1-16 rows,
     * more than this kernel (52-69 %); everywhere else (fewer tiles than SMs, odd row counts) it reads them
     * at 8-45 % against 17-69 % here (session 3 run 3) */
    return n >= 1 && n <= 16 && !(rows % 128 == 0 && rows * cols >= ((int64_t)32 << 20));
}

/* CTAs of kern resident at once on the device (asked once per kernel variant) */
static int64_t gs_slots(void (*kern)(const float *, int64_t, int32_t, const uint4 *, int64_t, int64_t,
                                     int32_t, float *, int64_t, float *))
{
    static struct {
        const void *k;
        int occ;
    } memo[4];
    for (int i = 0; i < 4; i++) {
        if (memo[i].k == (const void *)kern) return (int64_t)memo[i].occ * kn_cuda_sm_count();
        if (memo[i].k) continue;
        int n = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, GS_WARPS * 32, 0) != cudaSuccess || n < 1)
            (void)cudaGetLastError(), n = 1;
        memo[i].k = (const void *)kern, memo[i].occ = n;
        return (int64_t)n * kn_cuda_sm_count();
    }
    return kn_cuda_sm_count();
}

/* Workspace bytes for a k split of ks: one [n][rows] slice of partial sums per part (none unsplit) */
static size_t gs_ws_bytes(int32_t ks, int64_t n, int64_t rows)
{
    return ks > 1 ? sizeof(float) * (size_t)ks * (size_t)n * (size_t)rows : 0;
}

extern "C" size_t kn_cuda_gemm_small_ws(int64_t n, int64_t rows, int64_t cols)
{
    const int32_t kr = gr_ksplit(n, rows, cols);
    return gs_ws_bytes(kr ? kr : gs_ksplit(rows, cols), n, rows);
}

/* The row route (see k_gemm_rows) for n_w (1 or 2) weights w[i] of one shape: partial sums of a k split into
 * the workspace (weight i's [ks][n][rows] after weight i - 1's), then kn_ksplit_sum for each */
static cudaError_t gr_launch(int64_t n, int64_t rows, int64_t cols, int32_t ks, const float *x, int64_t ldx,
                             int32_t n_w, const uint4 *const *w, float *const *y, int64_t ldy, float *ws,
                             cudaStream_t stream)
{
    const int32_t kspan = (int32_t)(cols / ks);
    const int nt = n > 8 ? 2 : 1, blocks = kspan / 32;
    const int smem = blocks * nt * 512;
    void (*kern)(const float *, int64_t, int32_t, const uint4 *, const uint4 *, int64_t, int64_t, int32_t,
                 float *, float *, int64_t, int64_t) =
        nt == 2 ? (blocks >= 2 * GS_GROUP ? k_gemm_rows<2, 1> : k_gemm_rows<2, 0>)
                : (blocks >= 2 * GS_GROUP ? k_gemm_rows<1, 1> : k_gemm_rows<1, 0>);
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid((unsigned)kn_cdiv(rows, GR_ROWS), (unsigned)ks, (unsigned)n_w);
    const uint4 *w1 = n_w > 1 ? w[1] : w[0];
    if (ks == 1) {
        return kn_launch(kern, grid, GS_WARPS * 32, smem, stream, x, ldx, (int32_t)n, w[0], w1, rows, cols,
                         kspan, y[0], n_w > 1 ? y[1] : y[0], ldy, (int64_t)0);
    }
    const int64_t part = (int64_t)ks * n * rows;
    e = kn_launch(kern, grid, GS_WARPS * 32, smem, stream, x, ldx, (int32_t)n, w[0], w1, rows, cols, kspan,
                  ws, ws + part, rows, n * rows);
    for (int32_t i = 0; i < n_w && e == cudaSuccess; i++)
        e = kn_ksplit_sum(ws + i * part, (int32_t)n, rows, ks, y[i], ldy, stream);
    return e;
}

extern "C" int32_t kn_cuda_gemm_small_bf16(int64_t n, int64_t rows, int64_t cols, const float *x, int64_t ldx,
                                           const void *w, float *y, int64_t ldy, void *ws, size_t ws_bytes,
                                           cudaStream_t stream, struct mm_err *err)
{
    const int32_t kr = gr_ksplit(n, rows, cols), ks = kr ? kr : gs_ksplit(rows, cols);
    const size_t ws_need = gs_ws_bytes(ks, n, rows);
    if (rows < 0 || !kn_cuda_gemm_small_ok(n, cols, ldx) || ldy < rows || !x || !w || !y ||
        (uintptr_t)x % 16 || (uintptr_t)w % 16 || kn_cdiv(rows, GS_ROWS) > INT32_MAX || ws_bytes < ws_need ||
        (ws_need && !ws))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_bf16: bad arguments (n %lld rows %lld cols %lld)", (long long)n,
                          (long long)rows, (long long)cols);
    if (rows == 0) return MM_OK;
    if (kr) {
        const uint4 *wv = (const uint4 *)w;
        return kn_cuda_check(gr_launch(n, rows, cols, kr, x, ldx, 1, &wv, &y, ldy, (float *)ws, stream),
                             "kn_cuda_gemm_small_bf16", err);
    }
    /* the pipelined loads where each warp has at least 3 groups of blocks and one tile of activations: there
     * they measured 55 -> 69 % of copy (8199 x 6144, n 1-4); with fewer blocks, or 2 tiles (80 registers),
     * the plain loop's occupancy wins (session 3 run 3, bench/cuda/README.md) */
    const int64_t blocks = cols / ks / GS_WARPS / 32;
    const dim3 grid((unsigned)kn_cdiv(rows, GS_ROWS), (unsigned)ks);
    const uint4 *wv = (const uint4 *)w;
    float *pw = (float *)ws;
    void (*kern)(const float *, int64_t, int32_t, const uint4 *, int64_t, int64_t, int32_t, float *, int64_t,
                 float *) = n > 8                    ? k_gemm_small<2, 0>
                            : blocks >= 3 * GS_GROUP ? k_gemm_small<1, 1>
                                                     : k_gemm_small<1, 0>;
    /* the k split's sums: in a cluster of its CTAs where the grid runs in one wave, else through the
     * workspace and a second kernel (clusters in several waves measured slower: 2048 x 6144 at 16 rows 30 %
     * of copy against 39 %; one wave faster in every case, e.g. 512 x 6144 22 % against 20 %;
     * KN_CUDA_GS_CLUSTER=0 / 2 force the workspace / the cluster, for the benchmark) */
    const int knob = kn_cuda_knob_int("KN_CUDA_GS_CLUSTER", 1);
    const int cl = ks > 1 && (knob == 2 || (knob == 1 && (int64_t)grid.x * ks <= gs_slots(kern)));
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, grid, GS_WARPS * 32, stream, 1, cl ? (unsigned)ks : 1);
    cudaError_t e =
        kn_launch_cfg(&cfg, kern, x, ldx, (int32_t)n, wv, rows, cols, ks, y, ldy, cl ? (float *)NULL : pw);
    if (e == cudaSuccess && ks > 1 && !cl) e = kn_ksplit_sum(pw, (int32_t)n, rows, ks, y, ldy, stream);
    return kn_cuda_check(e, "kn_cuda_gemm_small_bf16", err);
}

/* Two weights of one shape that read the same x (gate and up): the row route over both in one launch, its
 * split chosen for their rows together (fewer, longer k slices than one launch each). */
extern "C" int kn_cuda_gemm_small_multi_ok(int32_t n_w, int64_t n, int64_t rows, int64_t cols, int64_t ldx)
{
    /* only where each weight alone takes the row route (pairs of smaller weights are not measured) */
    return n_w >= 1 && n_w <= 2 && rows > 0 && kn_cuda_gemm_small_ok(n, cols, ldx) &&
           gr_ksplit(n, rows, cols) > 0 && gr_ksplit(n, n_w * rows, cols) > 0;
}

extern "C" size_t kn_cuda_gemm_small_multi_ws(int32_t n_w, int64_t n, int64_t rows, int64_t cols)
{
    if (!kn_cuda_gemm_small_multi_ok(n_w, n, rows, cols, cols)) return 0;
    return (size_t)n_w * gs_ws_bytes(gr_ksplit(n, n_w * rows, cols), n, rows);
}

extern "C" int32_t kn_cuda_gemm_small_bf16_multi(int32_t n_w, const void *const *w, int64_t n, int64_t rows,
                                                 int64_t cols, const float *x, int64_t ldx, float *const *y,
                                                 int64_t ldy, void *ws, size_t ws_bytes, cudaStream_t stream,
                                                 struct mm_err *err)
{
    int ok = kn_cuda_gemm_small_multi_ok(n_w, n, rows, cols, ldx) && w && y && x && (uintptr_t)x % 16 == 0 &&
             ldy >= rows && kn_cdiv(rows, GR_ROWS) <= INT32_MAX;
    for (int32_t i = 0; ok && i < n_w; i++) ok = w[i] && y[i] && (uintptr_t)w[i] % 16 == 0;
    const size_t ws_need = ok ? kn_cuda_gemm_small_multi_ws(n_w, n, rows, cols) : 0;
    if (!ok || ws_bytes < ws_need || (ws_need && !ws))
        return mm_err_set(
            err, MM_INVALID,
            "kn_cuda_gemm_small_bf16_multi: bad arguments (%d weights, n %lld rows %lld cols %lld)", (int)n_w,
            (long long)n, (long long)rows, (long long)cols);
    const uint4 *wv[2] = {(const uint4 *)w[0], (const uint4 *)w[n_w > 1 ? 1 : 0]};
    return kn_cuda_check(gr_launch(n, rows, cols, gr_ksplit(n, n_w * rows, cols), x, ldx, n_w, wv, y, ldy,
                                   (float *)ws, stream),
                         "kn_cuda_gemm_small_bf16_multi", err);
}

/* MoE products grouped by expert on the device: blockIdx.y = expert e, whose rows are off[e] .. off[e + 1]
 * of x and y (the routed rows sorted by expert); blockIdx.z picks the weight table (w_a, or w_b when
 * given: gate and up in one launch); each CTA takes 16 weight rows of its expert for every 16 of the
 * expert's rows in turn (the weights come back from L2 after the first 16), so it is for decode-sized
 * batches: the grouped GEMMs of a prefill belong to cuBLAS. An expert without rows exits. */
__global__ void __launch_bounds__(GS_WARPS * 32)
    k_gemm_small_experts(const float *__restrict__ x, int64_t ldx, const int32_t *__restrict__ off,
                         const void *const *__restrict__ w_a, const void *const *__restrict__ w_b,
                         int64_t rows, int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b,
                         int64_t ldy)
{
    kn_chain_entry();
    /* warp v takes 32-wide k blocks [v B / 8, (v + 1) B / 8) of the B in a row: any multiple of 32 */
    ge_cta c;
    if (!ge_cta_make(c, off, rows, cols / 32)) return;
    const uint4 *w = (const uint4 *)(blockIdx.z ? w_b : w_a)[c.e];
    float *y = (blockIdx.z ? y_b : y_a) + (int64_t)c.p0 * ldy;
    const int64_t chunks_row = cols / 8, k_begin = 32 * c.b_begin;
    const uint4 *wa = w + (c.r0 + c.gid) * chunks_row + (k_begin >> 3) + c.tig;
    const uint4 *wb = w + (c.r0 + c.gid + 8) * chunks_row + (k_begin >> 3) + c.tig;
    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
    for (int32_t t0 = 0; t0 < c.cnt; t0 += 16) {
        const int32_t n = c.cnt - t0 < 16 ? c.cnt - t0 : 16;
        const float *xt = x + (int64_t)(c.p0 + t0) * ldx;
        float acc[2][4];
        gs_zero<2>(acc);
#pragma unroll 4
        for (int b = 0; b < c.blocks; b++)
            gs_block<2>(acc, c.ra ? __ldcs(wa + 4 * b) : z, c.rb ? __ldcs(wb + 4 * b) : z, xt, ldx, n,
                        k_begin + 8 * c.tig + 32 * b, c.gid);
        if (t0) __syncthreads(); /* the previous chunk's sums are read */
        gs_store<2>(acc, n, rows, c.r0, y + (int64_t)t0 * ldy, ldy);
    }
}

/* The same products with the weights fed through a per-warp cp.async ring (the FP8 pairs' design,
 * kn_gemv_fp8_bulk.cu): every lane copies exactly the two 16-byte chunks it multiplies of each k block
 * (rows gid and gid + 8) into its own slots, GS_RING_DEPTH blocks ahead (gs_ring), so its own
 * cp.async.wait_group is the only synchronisation. Why: the register-fed kernel above holds 98 registers (2
 * CTAs per SM) and its loads come in bursts of one unrolled step, so a decode batch's grouped products read
 * at ~57 % of copy (kn_bench fp8w "grouped bf16", 128 rows over 64 of M3's experts; ncu of a batch-16 step:
 * 79 % of the step's kernel time at 2.39 TB/s). XP: each block's activations loaded one block ahead
 * (registers) instead of in the block. The same products in the same order as k_gemm_small_experts: the same
 * bits. */
/* KN_CUDA_GS_EXPERTS_RING: the ring (x a block ahead measured 3 % slower, v130) */
#define GE_RING_DEFAULT 1

template <int XP>
__global__ void __launch_bounds__(GS_WARPS * 32, 3)
    k_gemm_small_experts_ring(const float *__restrict__ x, int64_t ldx, const int32_t *__restrict__ off,
                              const void *const *__restrict__ w_a, const void *const *__restrict__ w_b,
                              int64_t rows, int64_t cols, float *__restrict__ y_a, float *__restrict__ y_b,
                              int64_t ldy)
{
    extern __shared__ __align__(128) uint8_t ge_sm[];
    kn_chain_entry();
    ge_cta c;
    if (!ge_cta_make(c, off, rows, cols / 32)) return;
    const uint4 *w = (const uint4 *)(blockIdx.z ? w_b : w_a)[c.e];
    float *y = (blockIdx.z ? y_b : y_a) + (int64_t)c.p0 * ldy;
    const int64_t chunks_row = cols / 8, k_begin = 32 * c.b_begin;
    /* a row past the weight's end copies nothing from row r0 (zero-filled: the products add zeros) */
    const uint4 *wa = w + (c.r0 + (c.ra ? c.gid : 0)) * chunks_row + (k_begin >> 3) + c.tig;
    const uint4 *wb = w + (c.r0 + (c.rb ? c.gid + 8 : 0)) * chunks_row + (k_begin >> 3) + c.tig;
    const gs_ring ring = gs_ring_make(ge_sm, c.warp, c.lane, wa, wb, c.ra, c.rb, c.blocks);
    for (int32_t t0 = 0; t0 < c.cnt; t0 += 16) {
        const int32_t n = c.cnt - t0 < 16 ? c.cnt - t0 : 16;
        const float *xt = x + (int64_t)(c.p0 + t0) * ldx;
#pragma unroll
        for (int i = 0; i < GS_RING_DEPTH; i++) ring.issue(i);
        float acc[2][4];
        gs_zero<2>(acc);
        float4 xa[2], xb[2], na[2], nb8[2];
        if (XP && c.blocks > 0) gs_xload<2>(na, nb8, xt, ldx, n, k_begin + 8 * c.tig, c.gid);
        for (int b = 0; b < c.blocks; b++) {
            const int64_t k = k_begin + 8 * c.tig + 32 * b;
            if (XP) {
#pragma unroll
                for (int t = 0; t < 2; t++) xa[t] = na[t], xb[t] = nb8[t];
                if (b + 1 < c.blocks) gs_xload<2>(na, nb8, xt, ldx, n, k + 32, c.gid);
            } else {
                gs_xload<2>(xa, xb, xt, ldx, n, k, c.gid);
            }
            uint4 a0, a8;
            ring.take(b, a0, a8);
            gs_block_xv<2>(acc, a0, a8, xa, xb);
            ring.issue(b + GS_RING_DEPTH); /* after this block's reads of the slot it refills */
        }
        kn_cp_async_wait<0>();
        if (t0) __syncthreads(); /* the previous chunk's sums are read */
        gs_store<2>(acc, n, rows, c.r0, y + (int64_t)t0 * ldy, ldy);
    }
}

extern "C" int kn_cuda_gemm_small_experts_ok(int64_t cols, int64_t ldx)
{
    return cols > 0 && cols % 32 == 0 && ldx >= cols && ldx % 4 == 0;
}

extern "C" int32_t kn_cuda_gemm_small_experts_bf16(int32_t n_exp, const int32_t *off, int64_t rows,
                                                   int64_t cols, const float *x, int64_t ldx,
                                                   const void *const *w_a, const void *const *w_b, float *y_a,
                                                   float *y_b, int64_t ldy, cudaStream_t stream,
                                                   struct mm_err *err)
{
    if (n_exp < 0 || n_exp > 65535 || rows < 0 || !kn_cuda_gemm_small_experts_ok(cols, ldx) || ldy < rows ||
        (uintptr_t)x % 16 || (n_exp > 0 && (!x || !off || !w_a || !y_a || (w_b && !y_b))) ||
        kn_cdiv(rows, GS_ROWS) > INT32_MAX)
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_gemm_small_experts_bf16: bad arguments (experts %d rows %lld cols %lld)",
                          (int)n_exp, (long long)rows, (long long)cols);
    if (n_exp == 0 || rows == 0) return MM_OK;
    const dim3 grid((unsigned)kn_cdiv(rows, GS_ROWS), (unsigned)n_exp, w_b ? 2u : 1u);
    /* KN_CUDA_GS_EXPERTS_RING: 0 the register-fed kernel, 1 the ring, 2 the ring with the activations a
     * block ahead */
    const int ring = kn_cuda_knob_int("KN_CUDA_GS_EXPERTS_RING", GE_RING_DEFAULT);
    if (ring == 1 || ring == 2) {
        auto k = ring == 2 ? k_gemm_small_experts_ring<1> : k_gemm_small_experts_ring<0>;
        if (kn_smem_attr((const void *)k, GS_RING_SMEM) == cudaSuccess)
            return kn_cuda_check(kn_launch(k, grid, GS_WARPS * 32, GS_RING_SMEM, stream, x, ldx, off, w_a,
                                           w_b, rows, cols, y_a, y_b, ldy),
                                 "kn_cuda_gemm_small_experts_bf16", err);
        (void)cudaGetLastError(); /* the register-fed kernel instead */
    }
    return kn_cuda_check(kn_launch(k_gemm_small_experts, grid, GS_WARPS * 32, 0, stream, x, ldx, off, w_a,
                                   w_b, rows, cols, y_a, y_b, ldy),
                         "kn_cuda_gemm_small_experts_bf16", err);
}
