/* Sampling candidates and the draw (kn_cuda_topk_cands; kernels/cpu/kn_cands.h and kn_draw.h the rules):
 * a cluster of CANDS_CLUSTER CTAs per row, each over a contiguous slice of it. The CTAs exchange partial
 * maxima, histograms and counts through distributed shared memory and each takes every decision itself from
 * the same totals; one CTA per row left 124 of the H200's 132 SMs idle at batch 16 and was bound by its
 * loads' latency. */
#include "kn_cuda_internal.cuh"
#include "kn_draw.cuh"
#include "mm_cands.h"

#define CANDS_THREADS 1024
#define CANDS_CLUSTER 8

static int32_t bad(struct mm_err *err, const char *what)
{
    return mm_err_set(err, MM_INVALID, "%s: bad arguments", what);
}

/* order-preserving keys of the logits for the radix select of the k-th largest */
__device__ __forceinline__ uint32_t cand_key(float f)
{
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float cand_key_float(uint32_t key)
{
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

struct cands_smem {
    float w_max[CANDS_THREADS / 32];
    int32_t w_cnt[CANDS_THREADS / 32];
    float x_max; /* this CTA's, for its peers */
    int32_t x_nv;
    uint32_t x_pos; /* rank 0's: the cluster's candidate counter */
    uint32_t x_top; /* rank 0's: the counter of a drawn row's top list */
    double x_lse;   /* this CTA's sum of exp(x - m), for its peers */
    uint32_t hist[256], tot[256];
    uint32_t prefix;
    int32_t rem;
    kn_draw_smem d;
};

__global__ void __launch_bounds__(CANDS_THREADS)
    k_topk_cands(float *x, int64_t ld, int32_t n, const mm_cand_req *__restrict__ reqs, int32_t cap,
                 int32_t *__restrict__ counts, int32_t *__restrict__ ids, float *__restrict__ vals,
                 float *__restrict__ lse, uint32_t *keys)
{
    kn_chain_entry();
    __shared__ cands_smem s;
    const int C = CANDS_CLUSTER;
    const uint32_t rank = kn_cluster_rank();
    const int32_t row = blockIdx.x / C, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const mm_cand_req req = reqs[row];
    const int32_t k = req.k;
    if (k <= 0) return; /* a row that wants its logits, not candidates (the whole cluster leaves) */
    const float t = req.t;
    float *xr = x + (int64_t)row * ld;
    const int32_t per = (n + C - 1) / C, lo = (int32_t)rank * per < n ? (int32_t)rank * per : n,
                  hi = lo + per < n ? lo + per : n;
    if (tid < 4) s.d.sums[tid] = 0;
    if (tid == 0) s.x_pos = 0, s.x_top = 0, s.d.x_id = 0, s.x_lse = 0.0;

    /* the largest logit and the non-NaN count */
    float m = -INFINITY;
    int32_t nv = 0;
    for (int32_t base = lo; base < hi; base += CANDS_THREADS * KN_DRAW_ILP) {
        float v[KN_DRAW_ILP];
        kn_draw_load<CANDS_THREADS>(xr, base, hi, nanf(""), v);
#pragma unroll
        for (int u = 0; u < KN_DRAW_ILP; u++)
            if (!isnan(v[u])) nv++, m = fmaxf(m, v[u]);
    }
    for (int o = 16; o; o >>= 1) {
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        nv += __shfl_xor_sync(0xffffffffu, nv, o);
    }
    if (lane == 0) s.w_max[warp] = m, s.w_cnt[warp] = nv;
    __syncthreads();
    if (tid == 0) {
        float cm = -INFINITY;
        int32_t cn = 0;
        for (int w = 0; w < CANDS_THREADS / 32; w++) cm = fmaxf(cm, s.w_max[w]), cn += s.w_cnt[w];
        s.x_max = cm, s.x_nv = cn;
    }
    kn_cluster_sync(); /* also publishes the zeroed counters */
    m = -INFINITY, nv = 0;
    for (int c = 0; c < C; c++) {
        m = fmaxf(m, kn_ld_cluster_f32(kn_cluster_map(kn_smem_addr(&s.x_max), (uint32_t)c)));
        nv += (int32_t)kn_cl_ld_u32(kn_cluster_map(kn_smem_addr(&s.x_nv), (uint32_t)c));
    }
    if (req.flags & MM_CANDS_LSE) { /* mm_logsumexp's arithmetic; the double sum in the cluster's order */
        double sum = 0.0;
        if (isfinite(m))
            for (int32_t base = lo; base < hi; base += CANDS_THREADS * KN_DRAW_ILP) {
                float v[KN_DRAW_ILP];
                kn_draw_load<CANDS_THREADS>(xr, base, hi, -INFINITY, v);
#pragma unroll
                for (int u = 0; u < KN_DRAW_ILP; u++) sum += exp((double)(v[u] - m));
            }
        for (int o = 16; o; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) atomicAdd(&s.x_lse, sum);
        kn_cluster_sync();
        double tot = 0.0;
        for (int c = 0; c < C; c++) tot += kn_cl_ld_f64(kn_cluster_map(kn_smem_addr(&s.x_lse), (uint32_t)c));
        if (rank == 0 && tid == 0) lse[row] = isfinite(m) ? m + (float)log(tot) : m;
    }
    if (nv == 0) {
        if (rank == 0 && tid == 0) counts[row] = 0;
        kn_cluster_sync(); /* the peers have read x_max and x_nv */
        return;
    }

    /* the k-th largest (or without a top-k the n_top-th, for a sampled row's log-probabilities): a radix
     * select over the cluster's histograms */
    float thr = (req.flags & MM_CANDS_EXACT) ? -INFINITY : m - MM_CANDS_FLOOR * t, thr_top = -INFINITY;
    const int32_t nt = req.n_top > 0 && k == INT32_MAX ? (req.n_top < nv ? req.n_top : nv) : 0;
    const int32_t sel = k <= nv ? k : nt;
    if (sel > 0) {
        uint32_t prefix = 0, mask = 0;
        int32_t rem = sel;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int d = tid; d < 256; d += CANDS_THREADS) s.hist[d] = 0;
            __syncthreads();
            for (int32_t base = lo; base < hi; base += CANDS_THREADS * KN_DRAW_ILP) {
                float v[KN_DRAW_ILP];
                kn_draw_load<CANDS_THREADS>(xr, base, hi, nanf(""), v);
#pragma unroll
                for (int u = 0; u < KN_DRAW_ILP; u++) {
                    const uint32_t key = cand_key(v[u]);
                    const int dig =
                        !isnan(v[u]) && (key & mask) == prefix ? (int)((key >> shift) & 255u) : -1;
                    if (!__any_sync(0xffffffffu, dig >= 0)) continue;
                    const unsigned peers = __match_any_sync(0xffffffffu, dig);
                    if (dig >= 0 && lane == __ffs(peers) - 1)
                        atomicAdd(&s.hist[dig], (uint32_t)__popc(peers));
                }
            }
            kn_cluster_sync(); /* every CTA's histogram is complete */
            for (int d = tid; d < 256; d += CANDS_THREADS) {
                uint32_t c = 0;
                for (int r = 0; r < C; r++)
                    c += kn_cl_ld_u32(kn_cluster_map(kn_smem_addr(&s.hist[d]), (uint32_t)r));
                s.tot[d] = c;
            }
            __syncthreads();
            if (tid == 0) {
                int32_t r = rem, d = 255;
                for (; d > 0; d--) {
                    if ((int32_t)s.tot[d] >= r) break;
                    r -= (int32_t)s.tot[d];
                }
                s.prefix = prefix | ((uint32_t)d << shift);
                s.rem = r;
            }
            __syncthreads();
            prefix = s.prefix, rem = s.rem, mask |= 255u << shift;
            kn_cluster_sync(); /* the peers have read this CTA's histogram before it is cleared */
        }
        const float lk = cand_key_float(prefix) - MM_CANDS_TIE * t;
        if (k <= nv && lk > thr) thr = lk;
        if (k > nv) thr_top = lk, thr = lk < thr ? lk : thr;
    }

    /* the candidates, counted at rank 0 (warp-aggregated: a flat row makes most tokens candidates) */
    const uint32_t pos_at = kn_cluster_map(kn_smem_addr(&s.x_pos), 0);
    for (int32_t base = lo; base < hi; base += CANDS_THREADS * KN_DRAW_ILP) {
        float v[KN_DRAW_ILP];
        kn_draw_load<CANDS_THREADS>(xr, base, hi, nanf(""), v);
#pragma unroll
        for (int u = 0; u < KN_DRAW_ILP; u++) {
            const bool in = v[u] >= thr;
            const unsigned bal = __ballot_sync(0xffffffffu, in);
            if (!bal) continue;
            uint32_t pos = 0;
            if (lane == __ffs(bal) - 1) pos = kn_cl_atom_add_u32(pos_at, (uint32_t)__popc(bal));
            pos = __shfl_sync(0xffffffffu, pos, __ffs(bal) - 1) + (uint32_t)__popc(bal & ((1u << lane) - 1u));
            const int32_t i = base + u * CANDS_THREADS + tid;
            if (in && pos < (uint32_t)cap)
                ids[(int64_t)row * cap + pos] = i, vals[(int64_t)row * cap + pos] = v[u];
        }
    }
    kn_cluster_sync(); /* every CTA has counted */
    const int32_t count = (int32_t)kn_cl_ld_u32(pos_at);
    kn_cluster_sync(); /* the count is read before rank 0 may leave */

    /* too many to return and no top-k that cuts: the draw, here (the keys in keys' row, or in place) */
    if (count > cap && req.draw && k >= nv && isfinite(m) && n <= MM_DRAW_MAX_VOCAB) {
        if (nt > 0 && cap > 1) { /* the top list first, into slots 1 .. cap - 1 */
            const uint32_t top_at = kn_cluster_map(kn_smem_addr(&s.x_top), 0);
            for (int32_t base = lo; base < hi; base += CANDS_THREADS * KN_DRAW_ILP) {
                float v[KN_DRAW_ILP];
                kn_draw_load<CANDS_THREADS>(xr, base, hi, nanf(""), v);
#pragma unroll
                for (int u = 0; u < KN_DRAW_ILP; u++) {
                    const bool in = v[u] >= thr_top;
                    const unsigned bal = __ballot_sync(0xffffffffu, in);
                    if (!bal) continue;
                    uint32_t pos = 0;
                    if (lane == __ffs(bal) - 1) pos = kn_cl_atom_add_u32(top_at, (uint32_t)__popc(bal));
                    pos = __shfl_sync(0xffffffffu, pos, __ffs(bal) - 1) +
                          (uint32_t)__popc(bal & ((1u << lane) - 1u));
                    if (in && pos < (uint32_t)cap - 1)
                        ids[(int64_t)row * cap + 1 + pos] = base + u * CANDS_THREADS + tid,
                                                     vals[(int64_t)row * cap + 1 + pos] = v[u];
                }
            }
        }
        uint32_t *kr = keys ? keys + (int64_t)row * ld : reinterpret_cast<uint32_t *>(xr);
        const int32_t tok = kn_draw_row<CANDS_THREADS, CANDS_CLUSTER>(xr, kr, lo, hi, m, req, s.d);
        if (rank == 0 && tid == 0) { /* the top list's counter is complete: the draw has cluster barriers */
            const int32_t tk = tok >= 0 ? tok : 0;
            counts[row] = MM_CANDS_DRAWN, ids[(int64_t)row * cap] = tk;
            vals[(int64_t)row * cap] = keys ? xr[tk] : nanf("");
            if (nt > 0 && cap > 1 && s.x_top < (uint32_t)cap - 1) ids[(int64_t)row * cap + 1 + s.x_top] = -1;
        }
        return;
    }
    if (rank == 0 && tid == 0) counts[row] = count;
}

extern "C" int32_t kn_cuda_topk_cands(float *x, int32_t rows, int64_t n, int64_t ld,
                                      const struct mm_cand_req *req, int32_t cap, int32_t *counts,
                                      int32_t *ids, float *vals, float *lse, uint32_t *keys,
                                      cudaStream_t stream, struct mm_err *err)
{
    if (rows < 0 || rows > 65535 || n <= 0 || n > INT32_MAX || ld < n || cap <= 0 ||
        (rows > 0 && (!x || !req || !counts || !ids || !vals || !lse)))
        return bad(err, "kn_cuda_topk_cands");
    if (rows == 0) return MM_OK;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute at;
    kn_cluster_cfg(&cfg, &at, dim3((unsigned)rows * CANDS_CLUSTER), CANDS_THREADS, stream, CANDS_CLUSTER, 1);
    KN_CU(kn_launch_cfg(&cfg, k_topk_cands, x, ld, (int32_t)n, req, cap, counts, ids, vals, lse, keys),
          "kn_cuda_topk_cands");
    return MM_OK;
}
