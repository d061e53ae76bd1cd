/* The draw from a row without top-k on the device (kernels/cpu/kn_draw.h's rule, kn_draw.c its twin), in
 * kn_cands.cu's cluster of CTAs per row, each over its slice [lo, hi) of the row: the row's logits are
 * overwritten by their weight keys, then each boundary is found by 4 rounds of a 256-bin histogram of
 * weights over the keys' bytes (the CTAs' histograms summed through distributed shared memory) and its
 * key's ties in id order. Integer weights make every sum exact, so neither the CTAs' split nor the order of
 * the atomics matters: each CTA takes the same decisions from the same totals. */
#pragma once

#include "kn_cuda_internal.cuh"
#include "mm_cands.h"

/* elements each thread loads before it uses them: the passes are bound by L2 latency */
#define KN_DRAW_ILP 8

struct kn_draw_smem {
    unsigned long long hm[256]; /* this CTA's weights per bin */
    uint32_t hc[256];           /* its tokens per bin */
    int32_t hid[256];           /* last round: a token of the bin (the token, when it is alone) */
    unsigned long long tot_hm[256];
    uint32_t tot_hc[256];
    uint32_t wc[32];            /* tie scan: flags per warp */
    unsigned long long sums[4]; /* kn_cl_sum's slots, each used once */
    unsigned long long above, target, total;
    uint32_t prefix, ties;
    int32_t bin, id, x_id; /* x_id: rank 0's, the token the holder of the ties found */
};

/* This thread's KN_DRAW_ILP elements of a pass from base, NT apart, fill past hi: all loaded before any is
 * used */
template <int NT, typename T>
__device__ __forceinline__ void kn_draw_load(const T *p, int32_t base, int32_t hi, T fill,
                                             T (&v)[KN_DRAW_ILP])
{
#pragma unroll
    for (int u = 0; u < KN_DRAW_ILP; u++) {
        const int32_t i = base + u * NT + (int32_t)threadIdx.x;
        v[u] = i < hi ? __ldcg(p + i) : fill;
    }
}

__device__ __forceinline__ uint32_t kn_cl_ld_u32(uint32_t addr)
{
    uint32_t v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long kn_cl_ld_u64(uint32_t addr)
{
    unsigned long long v;
    asm volatile("ld.shared::cluster.u64 %0, [%1];\n" : "=l"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ double kn_cl_ld_f64(uint32_t addr)
{
    double v;
    asm volatile("ld.shared::cluster.f64 %0, [%1];\n" : "=d"(v) : "r"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void kn_cl_st_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t kn_cl_atom_add_u32(uint32_t addr, uint32_t v)
{
    uint32_t r;
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;\n" : "=r"(r) : "r"(addr), "r"(v) : "memory");
    return r;
}

__device__ __forceinline__ uint32_t kn_draw_key_d(float v, float m, float t)
{
    if (isnan(v)) return 0u;
    const double x = ((double)v - (double)m) / (double)t; /* wk_sample's arithmetic */
    if (x < -28.5) return 0u;
    const float p = (float)exp(x);
    return p >= 1e-12f ? __float_as_uint(p) : 0u;
}

__device__ __forceinline__ unsigned long long kn_draw_mass_d(uint32_t key)
{
    return (unsigned long long)((double)__uint_as_float(key) * MM_DRAW_ONE);
}

/* The cluster's sum of v (every thread of every CTA gets it), through slot `slot` of each CTA (zeroed at
 * the kernel's start) */
template <int C> __device__ unsigned long long kn_cl_sum(unsigned long long v, kn_draw_smem &s, int slot)
{
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0 && v) atomicAdd(&s.sums[slot], v);
    kn_cluster_sync();
    unsigned long long t = 0;
    const uint32_t a = kn_smem_addr(&s.sums[slot]);
    for (int c = 0; c < C; c++) t += kn_cl_ld_u64(kn_cluster_map(a, (uint32_t)c));
    return t;
}

/* The first token of the set {key > kb, or key == kb at id <= idc}, in the order key descending, id
 * ascending, whose running weight exceeds target (clamped below the set's weight), as kn_draw.c's
 * first_over: its id (-1 for an empty set), *key its key, *cum the running weight through it. Every thread
 * of the cluster calls it; keys[lo, hi) is this CTA's slice. */
template <int NT, int C>
__device__ int32_t kn_draw_first_over(const uint32_t *keys, int32_t lo, int32_t hi, uint32_t kb, int32_t idc,
                                      unsigned long long target, kn_draw_smem &s, uint32_t *key,
                                      unsigned long long *cum)
{
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t rank = kn_cluster_rank();
    uint32_t prefix = 0, mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = tid; d < 256; d += NT) s.hm[d] = 0, s.hc[d] = 0;
        __syncthreads();
        for (int32_t base = lo; base < hi; base += NT * KN_DRAW_ILP) {
            uint32_t kv[KN_DRAW_ILP];
            kn_draw_load<NT>(keys, base, hi, 0u, kv);
#pragma unroll
            for (int u = 0; u < KN_DRAW_ILP; u++) {
                const int32_t i = base + u * NT + tid;
                const uint32_t k = kv[u];
                const bool in = k && (k & mask) == prefix && (k > kb || (k == kb && i <= idc));
                if (!__any_sync(0xffffffffu, in)) continue; /* later rounds: most tokens are out */
                const int dig = in ? (int)((k >> shift) & 255u) : -1;
                const unsigned long long w = in ? kn_draw_mass_d(k) : 0ull;
                /* warp-aggregated: the lanes of one bin sum their weights (below 2^45: 24 + 21 bits) */
                const unsigned peers = __match_any_sync(0xffffffffu, dig);
                const uint32_t wlo = __reduce_add_sync(peers, (uint32_t)(w & 0xffffffull));
                const uint32_t whi = __reduce_add_sync(peers, (uint32_t)(w >> 24));
                if (in && lane == __ffs(peers) - 1) {
                    atomicAdd(&s.hm[dig], ((unsigned long long)whi << 24) + wlo);
                    atomicAdd(&s.hc[dig], (uint32_t)__popc(peers));
                    if (shift == 0) s.hid[dig] = i; /* the token itself when the bin holds one */
                }
            }
        }
        kn_cluster_sync(); /* every CTA's histogram is complete */
        for (int d = tid; d < 256; d += NT) {
            unsigned long long m = 0;
            uint32_t c = 0;
            const uint32_t am = kn_smem_addr(&s.hm[d]), ac = kn_smem_addr(&s.hc[d]);
            for (int r = 0; r < C; r++) {
                m += kn_cl_ld_u64(kn_cluster_map(am, (uint32_t)r));
                c += kn_cl_ld_u32(kn_cluster_map(ac, (uint32_t)r));
            }
            s.tot_hm[d] = m, s.tot_hc[d] = c;
        }
        __syncthreads();
        if (warp == 0) {
            /* the bin that holds the target, by one warp: lane l sums bins 255 - 8l ... 248 - 8l, the lanes
             * scan from the highest bins down, and the first lane past the target walks its 8 */
            unsigned long long tg = shift == 24 ? target : s.target, above = shift == 24 ? 0ull : s.above;
            unsigned long long m[8], sum = 0;
#pragma unroll
            for (int q = 0; q < 8; q++) m[q] = s.tot_hm[255 - 8 * lane - q], sum += m[q];
            unsigned long long incl = sum;
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned long long t = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += t;
            }
            if (shift == 24) {
                const unsigned long long tot = __shfl_sync(0xffffffffu, incl, 31);
                if (lane == 0) s.total = tot;
                if (tot && tg >= tot) tg = tot - 1;
            }
            const unsigned hit = __ballot_sync(0xffffffffu, above + incl > tg);
            const int L = hit ? __ffs(hit) - 1 : 31;
            if (lane == L) {
                unsigned long long a = above + incl - sum;
                int q = 0;
                for (; q < 7; q++) { /* above <= target < above + this prefix's weight: some bin holds it */
                    if (m[q] && a + m[q] > tg) break;
                    a += m[q];
                }
                const int d = 255 - 8 * L - q;
                s.prefix = prefix | ((uint32_t)d << shift), s.ties = s.tot_hc[d], s.above = a, s.target = tg;
                s.bin = d;
            }
        }
        __syncthreads();
        if (s.total == 0) {
            kn_cluster_sync(); /* the peers have read this CTA's histogram */
            return -1;
        }
        prefix = s.prefix, mask |= 255u << shift;
        if (shift) kn_cluster_sync(); /* the peers have read this CTA's histogram before it is cleared */
    }
    const unsigned long long per = kn_draw_mass_d(prefix), above = s.above;
    unsigned long long j = (s.target - above) / per + 1;
    if (j > s.ties) j = s.ties;
    /* the j-th token of this key in id order: the CTAs' slices are in id order, so it is in the CTA whose
     * earlier peers hold fewer than j of them; there, the one of its bin when it is alone, else a scan over
     * tiles of NT ids */
    const int d = s.bin;
    const uint32_t mine = s.hc[d], ahc = kn_smem_addr(&s.hc[d]);
    unsigned long long before = 0;
    for (uint32_t r = 0; r < rank; r++) before += kn_cl_ld_u32(kn_cluster_map(ahc, r));
    if (before < j && j <= before + mine) {
        const unsigned long long jl = j - before;
        if (tid == 0) s.id = s.hid[d];
        unsigned long long run = mine > 1 ? 0ull : jl; /* the same in every thread */
        __syncthreads();
        for (int32_t base = lo; base < hi && run < jl; base += NT) {
            const int32_t i = base + tid;
            const bool f = i < hi && __ldcg(keys + i) == prefix && (prefix > kb || i <= idc);
            const unsigned bal = __ballot_sync(0xffffffffu, f);
            if (lane == 0) s.wc[warp] = (uint32_t)__popc(bal);
            __syncthreads();
            uint32_t off = 0, tot = 0;
            for (int w = 0; w < NT / 32; w++) {
                const uint32_t c = s.wc[w];
                off += w < warp ? c : 0u;
                tot += c;
            }
            if (f && run + off + (uint32_t)__popc(bal & ((1u << lane) - 1u)) + 1 == jl) s.id = i;
            run += tot;
            __syncthreads();
        }
        if (tid == 0) kn_cl_st_u32(kn_cluster_map(kn_smem_addr(&s.x_id), 0), (uint32_t)s.id);
    }
    kn_cluster_sync(); /* the token is at rank 0; the peers have read this CTA's counts */
    const int32_t id = (int32_t)kn_cl_ld_u32(kn_cluster_map(kn_smem_addr(&s.x_id), 0));
    *key = prefix;
    *cum = above + j * per;
    kn_cluster_sync(); /* rank 0's token is read before it is written again or rank 0 leaves */
    return id;
}

/* The token drawn from the row (largest non-NaN logit m, finite) under r: kn_draw's rule. xr[lo, hi) is this
 * CTA's slice; its keys go to keys[lo, hi) (the row itself when keys aliases xr). Every thread of the cluster
 * calls it. */
template <int NT, int C>
__device__ int32_t kn_draw_row(const float *xr, uint32_t *keys, int32_t lo, int32_t hi, float m,
                               const mm_cand_req &r, kn_draw_smem &s)
{
    unsigned long long total = 0;
    for (int32_t base = lo; base < hi; base += NT * KN_DRAW_ILP) {
        float v[KN_DRAW_ILP];
        kn_draw_load<NT>(xr, base, hi, 0.0f, v);
#pragma unroll
        for (int u = 0; u < KN_DRAW_ILP; u++) {
            const int32_t i = base + u * NT + (int32_t)threadIdx.x;
            if (i >= hi) continue;
            const uint32_t k = kn_draw_key_d(v[u], m, r.t);
            __stcg(keys + i, k);
            total += kn_draw_mass_d(k);
        }
    }
    total = kn_cl_sum<C>(total, s, 0); /* its cluster barrier also orders the keys before their reads */
    uint32_t kb = 0, kp = 0, kx;
    int32_t idc = -1, idp = -1;
    unsigned long long weight = total, cum_p = 0, cx;
    const bool top_p = r.top_p > 0.0f && r.top_p<1.0f, min_p = r.min_p> 0.0f;
    if (top_p) {
        const unsigned long long tp = (unsigned long long)((double)r.top_p * (double)total);
        idp = kn_draw_first_over<NT, C>(keys, lo, hi, 0u, -1, tp ? tp - 1 : 0ull, s, &kp, &cum_p);
    }
    if (min_p) {
        const uint32_t mk = __float_as_uint(r.min_p); /* p >= min_p (the first token's p is 1) */
        unsigned long long wm = 0;
        for (int32_t base = lo; base < hi; base += NT * KN_DRAW_ILP) {
            uint32_t kv[KN_DRAW_ILP];
            kn_draw_load<NT>(keys, base, hi, 0u, kv);
#pragma unroll
            for (int u = 0; u < KN_DRAW_ILP; u++) wm += kv[u] >= mk ? kn_draw_mass_d(kv[u]) : 0ull;
        }
        wm = kn_cl_sum<C>(wm, s, 1);
        if (!wm) /* the first alone */
            return kn_draw_first_over<NT, C>(keys, lo, hi, 0u, -1, 0ull, s, &kx, &cx);
        if (!top_p || mk > kp)
            kb = mk - 1, idc = -1, weight = wm;
        else
            kb = kp, idc = idp, weight = cum_p;
    } else if (top_p) {
        kb = kp, idc = idp, weight = cum_p;
    }
    const double u = r.u > 0.0 ? r.u : 0.0;
    unsigned long long tu = (unsigned long long)(u * (double)weight);
    if (tu >= weight) tu = weight - 1;
    return kn_draw_first_over<NT, C>(keys, lo, hi, kb, idc, tu, s, &kx, &cx);
}
