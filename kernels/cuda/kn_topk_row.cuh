/* Top-k of one row of block scores by a whole CTA, as kn_msa_topk_local: the blocks from `lo` on (the local
 * ones) are forced in as +inf, then the best by (score descending, block id ascending); -inf and NaN never
 * take a slot. Used by the top-k kernel (one CTA per row) and by the fused decode attention (each CTA selects
 * the pages of its own row before reading them).
 *
 * Why it looks like this: a decode row is a few thousand floats for a whole CTA, so the time is load latency
 * plus any serial chain after it. All of a thread's scores are loaded at once (VPT registers); the kk-th
 * largest of a warp's 32 thread maxima is a lower bound T_w of the row's kk-th score (kk threads hold a score
 * >= it), so only scores >= T = max_w T_w can be selected: typically 1-2 % of the row. Those candidates are
 * gathered in shared memory and each finds its own rank by counting the candidates better than it (a total
 * order, so ranks are distinct): one parallel pass, where the previous version spent kk serial rounds of a
 * warp arg-max. Too many candidates (massive ties) fall back to kk rounds of a CTA-wide "best below the
 * previous pick" scan: slow, but only for degenerate rows.
 * Loads are straight-line (the index is clamped into the row and the value replaced after, so no load sits
 * in a branch) and candidates get their slots from a CTA-wide prefix sum of per-thread counts (the previous
 * per-value shared atomic compiled to a vote/atomic/shuffle chain per value). Measured on an H200 this
 * changed nothing: inside the fused decode kernel the selection still takes ~6.5 us at 1M context, and the
 * top-k kernel costs the same for 1K or 8K scores per row (128K or 1M context), so the time is the latency of
 * the first reads after the index kernel, not this code (docs/design/cuda.md, "Decode speed"). Kept for
 * being simpler and no slower.
 */
#ifndef KN_TOPK_ROW_CUH
#define KN_TOPK_ROW_CUH

#include <limits.h>

#include "kn_cuda_internal.cuh"

/* candidates ranked in shared memory; more than this takes the slow path */
#define KN_TOPK_CAP 1024

__device__ __forceinline__ bool kn_topk_better(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

template <int NT> struct kn_topk_smem {
    float cs[KN_TOPK_CAP];
    int32_t ci[KN_TOPK_CAP];
    float wt[NT / 32];
    float rs[NT / 32];
    int32_t ri[NT / 32];
    int32_t wc[NT / 32]; /* candidates per warp */
    float ps;
    int32_t pi;
};

/* Score of block b of the row as top-k sees it (the local blocks forced to +inf, past the row -inf). The
 * load is unconditional (index clamped into the row, nb >= 1) so that a thread's loads issue back to back;
 * .cg: the row was written by the previous kernel, read it from L2. */
__device__ __forceinline__ float kn_topk_load(const float *row, int32_t b, int32_t nb, int64_t lo)
{
    const float x = __ldcg(row + (b < nb ? b : nb - 1));
    return b < nb ? (b >= lo ? INFINITY : x) : -INFINITY;
}

__device__ __forceinline__ bool kn_topk_cand(float x, float T)
{
    return x > -INFINITY && x >= T; /* NaN is never a candidate */
}

/* All NT threads of the CTA call this with the same arguments. Writes out[0..kk) (shared memory; kk <= 32),
 * best first, -1 past the selectable entries; returns after a barrier, so out and sm may be reused. */
template <int NT, int VPT>
__device__ void kn_topk_row(const float *row, int32_t nb, int64_t lo, int kk, kn_topk_smem<NT> &sm,
                            int32_t *out)
{
    const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    float v[VPT];
    float tmax = -INFINITY;
    for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
#pragma unroll
        for (int u = 0; u < VPT; u++) v[u] = kn_topk_load(row, b0 + u * NT, nb, lo);
#pragma unroll
        for (int u = 0; u < VPT; u++) tmax = v[u] > tmax ? v[u] : tmax; /* NaN never wins */
    }
    /* bitonic sort of the warp's 32 maxima, descending by lane; lane kk-1 holds the warp's bound */
    float x = tmax;
#pragma unroll
    for (int k = 2; k <= 32; k <<= 1)
#pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1) {
            const float y = __shfl_xor_sync(0xffffffffu, x, j);
            const bool keep_max = ((lane & j) == 0) == ((lane & k) == 0);
            x = keep_max ? fmaxf(x, y) : fminf(x, y);
        }
    const float tw = __shfl_sync(0xffffffffu, x, kk - 1);
    if (lane == 0) sm.wt[wp] = tw;
    __syncthreads();
    float T = -INFINITY;
#pragma unroll
    for (int k = 0; k < NT / 32; k++) T = fmaxf(T, sm.wt[k]);
    const bool one_round = nb <= NT * VPT; /* the registers still hold the whole row */
    /* this thread's candidates, then their slots: an exclusive prefix sum over the CTA */
    int mine = 0;
    for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
        if (!one_round) {
#pragma unroll
            for (int u = 0; u < VPT; u++) v[u] = kn_topk_load(row, b0 + u * NT, nb, lo);
        }
#pragma unroll
        for (int u = 0; u < VPT; u++) mine += kn_topk_cand(v[u], T);
    }
    int incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) sm.wc[wp] = incl;
    __syncthreads();
    int at = incl - mine, cnt = 0;
#pragma unroll
    for (int k = 0; k < NT / 32; k++) {
        at += k < wp ? sm.wc[k] : 0;
        cnt += sm.wc[k];
    }
    if (mine && cnt <= KN_TOPK_CAP)
        for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
            if (!one_round) {
#pragma unroll
                for (int u = 0; u < VPT; u++) v[u] = kn_topk_load(row, b0 + u * NT, nb, lo);
            }
#pragma unroll
            for (int u = 0; u < VPT; u++)
                if (kn_topk_cand(v[u], T)) {
                    sm.cs[at] = v[u], sm.ci[at] = b0 + u * NT;
                    at++;
                }
        }
    __syncthreads();
    if (cnt <= KN_TOPK_CAP) {
        for (int j = tid; j < cnt; j += NT) {
            const float s = sm.cs[j];
            const int32_t id = sm.ci[j];
            int r = 0;
            for (int c = 0; c < cnt; c++) r += kn_topk_better(sm.cs[c], sm.ci[c], s, id);
            if (r < kk) out[r] = id;
        }
        for (int k = cnt + tid; k < kk; k += NT) out[k] = -1;
        __syncthreads();
        return;
    }
    /* degenerate rows: kk rounds of "the best strictly below the previous pick" over the whole row */
    float ps = INFINITY;
    int32_t pi = -1; /* (+inf, -1) is better than every entry, the local +inf blocks included */
    for (int k = 0; k < kk; k++) {
        float bs = -INFINITY;
        int32_t bi = INT_MAX;
        for (int32_t b = tid; b < nb; b += NT) {
            const float s = kn_topk_load(row, b, nb, lo);
            if (s > -INFINITY && kn_topk_better(ps, pi, s, b) && kn_topk_better(s, b, bs, bi)) bs = s, bi = b;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float os = __shfl_xor_sync(0xffffffffu, bs, o);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (kn_topk_better(os, oi, bs, bi)) bs = os, bi = oi;
        }
        if (lane == 0) sm.rs[wp] = bs, sm.ri[wp] = bi;
        __syncthreads();
        if (tid == 0) {
            for (int w = 1; w < NT / 32; w++)
                if (kn_topk_better(sm.rs[w], sm.ri[w], bs, bi)) bs = sm.rs[w], bi = sm.ri[w];
            out[k] = bi == INT_MAX ? -1 : bi;
            sm.ps = bs, sm.pi = bi;
        }
        __syncthreads();
        ps = sm.ps, pi = sm.pi;
    }
}

#endif
