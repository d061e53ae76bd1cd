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
 * in a branch) and candidates get their slots from a CTA-wide prefix sum of per-thread counts. In the fused
 * decode tail this runs with one warp per scheduler, so every dependent step is paid in full: the candidate
 * gather stores every value (candidates at their slot, the rest into a spare slot) instead of branching per
 * value (measured on H200s: 1.9-3.3 us instead of 2.3-7 us for 8192 scores; KN_CUDA_TOPK_BF=0 keeps the
 * branch for comparison), candidates are ranked as 64-bit keys (one compare each), the thread maximum is a
 * balanced tree and the warp bound comes from 31 independent shuffles instead of a bitonic sort.
 * Loops with a run-time trip count stay rolled (#pragma unroll 1): in the fused decode tail this code runs
 * once per CTA and its time follows its executed code size (docs/progress/cuda-tail.md), so unrolled copies
 * and remainder loops only add cost.
 */
#ifndef KN_TOPK_ROW_CUH
#define KN_TOPK_ROW_CUH

#include <limits.h>

#include "kn_cuda_internal.cuh"
#include "kn_decode_prof.cuh"

/* candidates ranked in shared memory; more than this takes the slow path */
#define KN_TOPK_CAP 1024

__device__ __forceinline__ bool kn_topk_better(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

template <int NT> struct kn_topk_smem {
    unsigned long long ck[KN_TOPK_CAP + 1]; /* candidates as kn_topk_key, then a spare slot */
    float gm[NT];                           /* thread maxima, when BG > 1 threads share a bound group */
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

/* (score, block) as one 64-bit key whose unsigned order is the selection order (score descending, then
 * block ascending), so a rank is one 64-bit compare per candidate; only for candidates (not NaN). */
__device__ __forceinline__ unsigned long long kn_topk_key(float x, int32_t b)
{
    const uint32_t u = __float_as_uint(x == 0.0f ? 0.0f : x); /* -0 ties with +0, as in a float compare */
    const uint32_t o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (unsigned long long)o << 32 | (uint32_t) ~(uint32_t)b;
}

/* Entry r of the selection: the block of key (and the key itself when out_key is not NULL). */
__device__ __forceinline__ void kn_topk_put(int32_t *out, unsigned long long *out_key, int r,
                                            unsigned long long key)
{
    out[r] = (int32_t) ~(uint32_t)key;
    if (out_key) out_key[r] = key;
}

/* Slots from .. kk - 1 of the selection empty (-1, key 0), spread over the CTA's NT threads. */
template <int NT>
__device__ __forceinline__ void kn_topk_fill_empty(int32_t *out, unsigned long long *out_key, int from,
                                                   int kk)
{
#pragma unroll 1
    for (int k = from + (int)threadIdx.x; k < kk; k += NT) {
        out[k] = -1;
        if (out_key) out_key[k] = 0;
    }
}

/* The cnt distinct keys of ck ranked by counting the better ones (one thread per key): the kk best written
 * best first, the rest of the kk slots empty. */
template <int NT>
__device__ __forceinline__ void kn_topk_rank_all(const unsigned long long *ck, int cnt, int kk, int32_t *out,
                                                 unsigned long long *out_key)
{
#pragma unroll 1
    for (int j = threadIdx.x; j < cnt; j += NT) {
        const unsigned long long key = ck[j];
        int r = 0;
#pragma unroll 4
        for (int c = 0; c < cnt; c++) r += ck[c] > key;
        if (r < kk) kn_topk_put(out, out_key, r, key);
    }
    kn_topk_fill_empty<NT>(out, out_key, cnt, kk);
}

/* max of v[0..N) as a balanced tree of fmaxf (log2 N dependent steps instead of N; NaN never wins); one
 * template level per tree level, so that every index is a compile-time constant (registers, no stack) */
template <int W> __device__ __forceinline__ void kn_topk_tree_step(float *t)
{
#pragma unroll
    for (int u = 0; u < W; u++) t[u] = fmaxf(t[u], t[u + W]);
    if constexpr (W > 1) kn_topk_tree_step<W / 2>(t);
}

template <int N> __device__ __forceinline__ float kn_topk_tree_max(const float *v)
{
    static_assert(N > 0 && (N & (N - 1)) == 0, "a power of two");
    float t[N];
#pragma unroll
    for (int u = 0; u < N; u++) t[u] = v[u];
    if constexpr (N > 1) kn_topk_tree_step<N / 2>(t);
    return t[0];
}

__device__ __forceinline__ bool kn_topk_cand(float x, float T)
{
    return x > -INFINITY && x >= T; /* NaN is never a candidate */
}

/* v[u] for a run-time u, as a tree of selects on u's bits (N - 1 selects, registers only: an indexed
 * register array would live in local memory) */
template <int N> __device__ __forceinline__ float kn_topk_pick(const float *v, int u)
{
    static_assert(N > 0 && (N & (N - 1)) == 0, "a power of two");
    if constexpr (N == 1) {
        return v[0];
    } else {
        float t[N / 2];
#pragma unroll
        for (int k = 0; k < N / 2; k++) t[k] = (u & 1) ? v[2 * k + 1] : v[2 * k];
        return kn_topk_pick<N / 2>(t, u >> 1);
    }
}

/* Benchmark timestamps (kn_decode_prof.cuh): thread 0 records the end of each phase when ts is not NULL. */
#define KN_TOPK_TS(k)                                                                                        \
    do {                                                                                                     \
        if (ts && tid == 0) {                                                                                \
            uint64_t t__;                                                                                    \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t__));                                          \
            ts[k] = t__;                                                                                     \
        }                                                                                                    \
    } while (0)

/* All NT threads of the CTA call this with the same arguments. Writes out[0..kk) (shared memory; kk <= 32),
 * best first, -1 past the selectable entries; returns after a barrier, so out and sm may be reused.
 * BG: threads t, t + NT / BG, ... form one bound group (their maxima combined before the warp bound), so that
 * 8 warps of 32 scores per thread get the bound of 4 warps of 64 (a group of 32 scores has a weaker maximum:
 * about twice the candidates; the fused decode tail with 8 warps, KN_CUDA_TAIL_WARPS). ts:
 * NULL, or the KN_PROF_TOPK slots of kn_decode_prof.cuh: the times the loads, the bound, the gather and the
 * ranks were done, and the number of candidates (benchmark).
 * gather (KN_CUDA_TOPK_BF): how a thread writes its candidates: 0 a branch per value, 1 a store per value
 * (non-candidates into a spare slot), 2 one pass per candidate over the bits of the thread's candidate mask,
 * the value picked from the registers by a select tree (candidates are ~1 % of the values: a few passes of
 * VPT selects instead of VPT key computations and stores; one-round rows, else as 1).
 * A slice of a longer row: row points at block `base`, nb and lo count from there, and the ids written are
 * absolute (base + b). out_key (NULL or shared memory, kk slots): the same list as kn_topk_key, 0 for an
 * empty slot (every real key is > 0), for merging the lists of several slices (kn_topk_merge_lists). */
template <int NT, int VPT, int BG = 1>
__device__ void kn_topk_row(const float *row, int32_t nb, int64_t lo, int kk, kn_topk_smem<NT> &sm,
                            int32_t *out, unsigned long long *ts = nullptr, int gather = 0, int32_t base = 0,
                            unsigned long long *out_key = nullptr)
{
    static_assert(BG >= 1 && NT % (32 * BG) == 0, "bound groups of whole warps");
    static_assert(VPT <= 64, "a 64-bit candidate mask");
    const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    float v[VPT];
    auto load = [&](int32_t b0) { /* one round: value u of this thread is block b0 + u * NT */
#pragma unroll
                                  for (int u = 0; u < VPT; u++) v[u] = kn_topk_load(row, b0 + u * NT, nb, lo);
    };
#pragma unroll
    for (int u = 0; u < VPT; u++) v[u] = -INFINITY; /* threads past a short row never load */
    float tmax = -INFINITY;
#pragma unroll 1
    for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
        load(b0);
        tmax = fmaxf(tmax, kn_topk_tree_max<VPT>(v)); /* fmaxf: NaN never wins */
    }
    if constexpr (BG > 1) {
        /* the group's maximum (the same in the BG warps of a group, so their bounds agree) */
        sm.gm[tid] = tmax;
        __syncthreads();
#pragma unroll
        for (int k = 1; k < BG; k++) tmax = fmaxf(tmax, sm.gm[(tid + k * (NT / BG)) % NT]);
    }
    KN_TOPK_TS(0);
    /* the warp's bound: the kk-th largest of its 32 thread (group) maxima, found by each lane ranking its own
     * max against the 31 others (independent shuffles; ties by lane), then the lane of rank kk - 1 */
    const float x = tmax;
    int rk = 0;
#pragma unroll
    for (int j = 1; j < 32; j++) {
        const float y = __shfl_xor_sync(0xffffffffu, x, j);
        rk += y > x || (y == x && (lane ^ j) < lane);
    }
    const unsigned own_rank = __ballot_sync(0xffffffffu, rk == kk - 1);
    const float tw = __shfl_sync(0xffffffffu, x, __ffs((int)own_rank) - 1);
    if (lane == 0) sm.wt[wp] = tw;
    __syncthreads();
    float T = -INFINITY;
#pragma unroll
    for (int k = 0; k < NT / 32; k++) T = fmaxf(T, sm.wt[k]);
    KN_TOPK_TS(1);
    const bool one_round = nb <= NT * VPT; /* the registers still hold the whole row */
    /* this thread's candidates, then their slots: an exclusive prefix sum over the CTA */
    int mine = 0;
    unsigned long long cmask = 0; /* the last round's candidates (bit u: value u), a one-round row's all */
#pragma unroll 1
    for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
        if (!one_round) load(b0);
        cmask = 0;
#pragma unroll
        for (int u = 0; u < VPT; u++) cmask |= (unsigned long long)kn_topk_cand(v[u], T) << u;
        mine += __popcll(cmask);
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
    if (ts && tid == 0) ts[KN_PROF_TOPK_CAND - KN_PROF_TOPK] = (unsigned long long)cnt; /* benchmark */
    if (mine && cnt <= KN_TOPK_CAP) {
        if (gather == 2 && one_round) {
            /* one pass per candidate: its value picked from the registers by the bits of its index */
#pragma unroll 1
            for (unsigned long long m = cmask; m; m &= m - 1) {
                const int u = __ffsll((long long)m) - 1;
                sm.ck[at++] = kn_topk_key(kn_topk_pick<VPT>(v, u), base + tid + u * NT);
            }
        } else {
#pragma unroll 1
            for (int32_t b0 = tid; b0 < nb; b0 += NT * VPT) {
                if (!one_round) load(b0);
                if (gather) {
                    /* every value stores (non-candidates into a spare slot): no divergent branch per value */
#pragma unroll
                    for (int u = 0; u < VPT; u++) {
                        const bool c = kn_topk_cand(v[u], T);
                        sm.ck[c ? at : KN_TOPK_CAP] = kn_topk_key(v[u], base + b0 + u * NT);
                        at += c;
                    }
                } else {
#pragma unroll
                    for (int u = 0; u < VPT; u++)
                        if (kn_topk_cand(v[u], T)) sm.ck[at++] = kn_topk_key(v[u], base + b0 + u * NT);
                }
            }
        }
    }
    __syncthreads();
    KN_TOPK_TS(2);
    if (cnt <= NT / 2) {
        /* few candidates: P threads (neighbouring lanes) per candidate, each counting every P-th of the
         * better ones, summed by shuffles: the rank chain is P times shorter */
        const int P = cnt <= NT / 4 ? 4 : 2, j = tid / P, part = tid % P;
        const unsigned long long key = sm.ck[j < cnt ? j : KN_TOPK_CAP];
        int r = 0;
#pragma unroll 4
        for (int c = part; c < cnt; c += P) r += sm.ck[c] > key;
        r += __shfl_xor_sync(0xffffffffu, r, 1);
        if (P == 4) r += __shfl_xor_sync(0xffffffffu, r, 2);
        if (j < cnt && part == 0 && r < kk) kn_topk_put(out, out_key, r, key);
        kn_topk_fill_empty<NT>(out, out_key, cnt, kk);
        __syncthreads();
        KN_TOPK_TS(3);
        return;
    }
    if (cnt <= KN_TOPK_CAP) {
        kn_topk_rank_all<NT>(sm.ck, cnt, kk, out, out_key);
        __syncthreads();
        KN_TOPK_TS(3);
        return;
    }
    /* degenerate rows: kk rounds of "the best strictly below the previous pick" over the whole row */
    float ps = INFINITY;
    int32_t pi = -1; /* (+inf, -1) is better than every entry, the local +inf blocks included */
#pragma unroll 1
    for (int k = 0; k < kk; k++) {
        float bs = -INFINITY;
        int32_t bi = INT_MAX;
#pragma unroll 1
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
#pragma unroll 1
            for (int w = 1; w < NT / 32; w++)
                if (kn_topk_better(sm.rs[w], sm.ri[w], bs, bi)) bs = sm.rs[w], bi = sm.ri[w];
            out[k] = bi == INT_MAX ? -1 : base + bi;
            if (out_key) out_key[k] = bi == INT_MAX ? 0ull : kn_topk_key(bs, base + bi);
            sm.ps = bs, sm.pi = bi;
        }
        __syncthreads();
        ps = sm.ps, pi = sm.pi;
    }
    KN_TOPK_TS(3);
}

/* The best kk of m keys in shared memory (kn_topk_key order; 0 = an empty slot), the concatenated lists of
 * the slices of one row, each list best first with kk slots: writes out[0..kk) like kn_topk_row. Every list
 * that is full holds kk keys >= its last one, so the row's kk-th best is >= T = the largest last key, and
 * only keys >= T can be selected. That bound is weak for slices (the k-th best of a 512-score slice is only a
 * top-3 % score of a 1M row: ~170 of 256 keys survive, docs/progress/cuda-tail.md), which is why the warp
 * merge below is the faster one. Survivors are compacted into sm and each finds its rank
 * by counting the better ones, as in kn_topk_row. Keys are distinct (block ids are), so ranks are too. All
 * NT threads call it; m <= KN_TOPK_CAP; returns after a barrier. */
template <int NT>
__device__ void kn_topk_merge_lists(const unsigned long long *keys, int n_lists, int kk, kn_topk_smem<NT> &sm,
                                    int32_t *out, unsigned long long *ts = nullptr)
{
    const int tid = threadIdx.x, lane = tid & 31, wp = tid >> 5, m = n_lists * kk;
    unsigned long long T = 0;
#pragma unroll 1
    for (int c = 0; c < n_lists; c++) {
        const unsigned long long x = keys[c * kk + kk - 1];
        T = x > T ? x : T;
    }
    int mine = 0;
#pragma unroll 1
    for (int e = tid; e < m; e += NT) mine += keys[e] != 0 && keys[e] >= T;
    int incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) sm.wc[wp] = incl;
    __syncthreads();
    KN_TOPK_TS(0);
    int at = incl - mine, cnt = 0;
#pragma unroll
    for (int k = 0; k < NT / 32; k++) {
        at += k < wp ? sm.wc[k] : 0;
        cnt += sm.wc[k];
    }
#pragma unroll 1
    for (int e = tid; e < m; e += NT) {
        const unsigned long long x = keys[e];
        if (x != 0 && x >= T) sm.ck[at++] = x;
    }
    __syncthreads();
    KN_TOPK_TS(1);
    if (ts && tid == 0) ts[3] = (unsigned long long)cnt;
    kn_topk_rank_all<NT>(sm.ck, cnt, kk, out, nullptr);
    __syncthreads();
    KN_TOPK_TS(2);
}

/* The same result by one warp, as a k-way merge of the sorted lists: lane c holds the head of list c; each of
 * kk rounds takes the best head (two warp max-reductions: score bits, then block id among equal scores) and
 * the lane that held it moves to its next entry. kk dependent rounds of a few instructions, no compaction and
 * one barrier: little code (the fused decode tail pays for code size, see kn_msa_decode.cu). n_lists <= 32,
 * keys distinct (block ids are). */
template <int NT>
__device__ void kn_topk_merge_lists_warp(const unsigned long long *keys, int n_lists, int kk, int32_t *out,
                                         unsigned long long *ts = nullptr)
{
    const int tid = threadIdx.x;
    if (tid < 32) {
        int pos = 0;
        unsigned long long head = tid < n_lists ? keys[tid * kk] : 0ull;
#pragma unroll 1
        for (int k = 0; k < kk; k++) {
            const uint32_t hi = (uint32_t)(head >> 32), lo = (uint32_t)head;
            const uint32_t mh = __reduce_max_sync(0xffffffffu, hi);
            const uint32_t ml = __reduce_max_sync(0xffffffffu, hi == mh ? lo : 0u);
            const unsigned long long best = (unsigned long long)mh << 32 | ml;
            if (best != 0 && head == best) {
                pos++;
                head = pos < kk ? keys[tid * kk + pos] : 0ull;
            }
            if (tid == 0) out[k] = best != 0 ? (int32_t) ~(uint32_t)best : -1;
        }
    }
    __syncthreads();
    KN_TOPK_TS(2);
}

#undef KN_TOPK_TS

#endif
