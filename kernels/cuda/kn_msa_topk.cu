/* Top-k over block scores, one CTA per (index head, query) row: every thread keeps a sorted list of its
 * best KMAX entries in registers (insertion only when an entry beats the list's last, so after the first
 * few it is one compare per score), then the lists are merged pairwise in shared memory. Deterministic:
 * the order is (score descending, block id ascending), the same as kn_msa_topk_local.
 * Scores are read TOPK_BATCH at a time into registers before any is used: a decode row is a few thousand
 * floats in one CTA, so the time is load latency unless many loads are in flight. */
#include "kn_msa_kernels.cuh"

#include <limits.h>

#define TOPK_BATCH 8
#define TOPK_VPT 32 /* fast path: scores per thread per round (8192 per row with 256 threads) */

__device__ __forceinline__ bool topk_better(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* NT threads per row: 256 for top-16, 128 for top-32 (the lists must fit in 48 KB of shared memory) */
template <int KMAX, int NT>
__global__ void __launch_bounds__(NT)
    k_topk(const float *__restrict__ scores, int32_t score_stride, const int64_t *__restrict__ pos, int32_t n,
           int32_t block, int32_t topk, int32_t n_local, int32_t *__restrict__ sel, int32_t sel_stride)
{
    __shared__ float ls[NT][KMAX + 1];
    __shared__ int32_t li[NT][KMAX + 1];
    int64_t r = blockIdx.x; /* row = g * n + i */
    int32_t i = (int32_t)(r % n);
    int64_t own = pos[i] / block;
    int64_t lo = own - (n_local > 0 ? n_local : 1) + 1;
    if (lo < 0) lo = 0;
    int32_t nb = (int32_t)own + 1;
    const float *row = scores + r * score_stride;

    if (KMAX == 16) {
        /* Fast path. T = the largest over warps of the warp's 16th-largest thread maximum is a lower bound of
         * the row's 16th-largest score (16 threads each hold a score >= it), so only scores >= T can be
         * selected: usually a few hundred of the row. They are gathered in shared memory (the list arrays'
         * space) and one warp picks the best 16 by repeated arg-max. Too many candidates (massive ties): the
         * general path below. */
        __shared__ float wt[NT / 32];
        __shared__ int32_t count;
        float *cs = &ls[0][0];
        int32_t *ci = &li[0][0];
        const int cap = NT * (KMAX + 1);
        const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
        /* all of a row up to NT * TOPK_VPT scores in registers at once: one round of loads in flight */
        float v[TOPK_VPT];
        float tmax = -INFINITY;
        for (int32_t b0 = threadIdx.x; b0 < nb; b0 += NT * TOPK_VPT) {
#pragma unroll
            for (int u = 0; u < TOPK_VPT; u++) {
                const int32_t b = b0 + u * NT;
                v[u] = b < nb ? (b >= lo ? INFINITY : row[b]) : -INFINITY;
            }
#pragma unroll
            for (int u = 0; u < TOPK_VPT; u++) tmax = v[u] > tmax ? v[u] : tmax; /* NaN never wins */
        }
        /* bitonic sort of the warp's 32 maxima, descending by lane */
        float x = tmax;
#pragma unroll
        for (int k = 2; k <= 32; k <<= 1)
#pragma unroll
            for (int j = k >> 1; j > 0; j >>= 1) {
                const float y = __shfl_xor_sync(0xffffffffu, x, j);
                const bool keep_max = ((lane & j) == 0) == ((lane & k) == 0);
                x = keep_max ? fmaxf(x, y) : fminf(x, y);
            }
        const float m16 = __shfl_sync(0xffffffffu, x, 15);
        if (lane == 0) wt[wp] = m16;
        if (threadIdx.x == 0) count = 0;
        __syncthreads();
        float T = -INFINITY;
#pragma unroll
        for (int k = 0; k < NT / 32; k++) T = fmaxf(T, wt[k]);
        const bool one_round = nb <= NT * TOPK_VPT; /* the registers still hold the whole row */
        for (int32_t b0 = threadIdx.x; b0 < nb; b0 += NT * TOPK_VPT) {
            if (!one_round) {
#pragma unroll
                for (int u = 0; u < TOPK_VPT; u++) {
                    const int32_t b = b0 + u * NT;
                    v[u] = b < nb ? (b >= lo ? INFINITY : row[b]) : -INFINITY;
                }
            }
#pragma unroll
            for (int u = 0; u < TOPK_VPT; u++) {
                if (!(v[u] > -INFINITY) || !(v[u] >= T)) continue;
                const int at = atomicAdd(&count, 1);
                if (at < cap) cs[at] = v[u], ci[at] = b0 + u * NT;
            }
        }
        __syncthreads();
        const int cnt = count;
        if (cnt <= cap) {
            if (wp == 0) {
                int32_t *out = sel + r * sel_stride;
                int kk = topk < KMAX ? topk : KMAX;
                if (kk > sel_stride) kk = sel_stride;
                for (int k = 0; k < kk; k++) {
                    float bs = -INFINITY;
                    int32_t bi = INT_MAX, bat = -1;
                    for (int j = lane; j < cnt; j += 32)
                        if (topk_better(cs[j], ci[j], bs, bi)) bs = cs[j], bi = ci[j], bat = j;
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) {
                        const float os = __shfl_xor_sync(0xffffffffu, bs, o);
                        const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
                        const int32_t oat = __shfl_xor_sync(0xffffffffu, bat, o);
                        if (topk_better(os, oi, bs, bi)) bs = os, bi = oi, bat = oat;
                    }
                    if (lane == 0) {
                        out[k] = bi == INT_MAX ? -1 : bi;
                        if (bat >= 0) cs[bat] = -INFINITY, ci[bat] = INT_MAX; /* taken */
                    }
                    __syncwarp();
                }
                for (int k = kk + lane; k < sel_stride; k += 32) out[k] = -1;
            }
            return;
        }
    }

    float s[KMAX];
    int32_t id[KMAX];
#pragma unroll
    for (int k = 0; k < KMAX; k++) s[k] = -INFINITY, id[k] = INT_MAX;
    for (int32_t b0 = threadIdx.x; b0 < nb; b0 += NT * TOPK_BATCH) {
        float v[TOPK_BATCH];
#pragma unroll
        for (int u = 0; u < TOPK_BATCH; u++) {
            const int32_t b = b0 + u * NT;
            v[u] = b < nb ? (b >= lo ? INFINITY : row[b]) : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < TOPK_BATCH; u++) {
            const int32_t b = b0 + u * NT;
            if (!(v[u] > -INFINITY)) continue; /* -inf, NaN and past-the-row never take a slot */
            if (!topk_better(v[u], b, s[KMAX - 1], id[KMAX - 1])) continue;
            s[KMAX - 1] = v[u];
            id[KMAX - 1] = b;
#pragma unroll
            for (int k = KMAX - 1; k > 0; k--) {
                if (topk_better(s[k], id[k], s[k - 1], id[k - 1])) {
                    float ts = s[k];
                    s[k] = s[k - 1];
                    s[k - 1] = ts;
                    int32_t ti = id[k];
                    id[k] = id[k - 1];
                    id[k - 1] = ti;
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < KMAX; k++) ls[threadIdx.x][k] = s[k], li[threadIdx.x][k] = id[k];
    __syncthreads();
    for (int st = 1; st < NT; st <<= 1) {
        int t = threadIdx.x;
        if ((t & (2 * st - 1)) == 0) {
            int a = 0, b = 0;
#pragma unroll
            for (int k = 0; k < KMAX; k++) {
                bool take_a = topk_better(ls[t][a], li[t][a], ls[t + st][b], li[t + st][b]);
                s[k] = take_a ? ls[t][a] : ls[t + st][b];
                id[k] = take_a ? li[t][a] : li[t + st][b];
                a += take_a;
                b += !take_a;
            }
#pragma unroll
            for (int k = 0; k < KMAX; k++) ls[t][k] = s[k], li[t][k] = id[k];
        }
        __syncthreads();
    }
    int32_t *out = sel + r * sel_stride;
    for (int32_t j = threadIdx.x; j < sel_stride; j += NT) {
        int32_t v = -1;
        if (j < topk && j < KMAX && li[0][j] != INT_MAX) v = li[0][j];
        out[j] = v;
    }
}

int32_t kn_topk_launch(const float *scores, int32_t score_stride, const int64_t *pos, int32_t n,
                       int32_t n_heads, int32_t block, int32_t topk, int32_t n_local, int32_t *sel,
                       int32_t sel_stride, cudaStream_t stream, struct mm_err *err)
{
    if (topk <= 0 || topk > KN_CUDA_MAX_TOPK || sel_stride < 1)
        return mm_err_set(err, MM_INVALID, "kn_cuda_msa_topk: topk %d (max %d), sel_stride %d", topk,
                          KN_CUDA_MAX_TOPK, sel_stride);
    int64_t rows = (int64_t)n * n_heads;
    if (rows == 0) return MM_OK;
    if (rows > INT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_msa_topk: %lld rows", (long long)rows);
    if (topk <= 16)
        k_topk<16, 256><<<(unsigned)rows, 256, 0, stream>>>(scores, score_stride, pos, n, block, topk,
                                                            n_local, sel, sel_stride);
    else
        k_topk<32, 128><<<(unsigned)rows, 128, 0, stream>>>(scores, score_stride, pos, n, block, topk,
                                                            n_local, sel, sel_stride);
    KN_LAUNCHED("kn_cuda_msa_topk");
    return MM_OK;
}
