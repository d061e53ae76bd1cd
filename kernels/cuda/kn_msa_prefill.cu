/* Sparse prefill attention: the tile-union route first (kn_msa_prefill_union.cu: 8-query tiles whose queries
 * share their blocks, wgmma, no partials), then KV-block-major pairs for the (query, KV group) rows it left.
 *
 * KV-block-major pairs. Instead of each query tile walking its own selected blocks, the
 * (query, KV group, slot) pairs are bucketed by the block they selected, and each block's K/V is loaded into
 * shared memory once and streamed against the queries that chose it, gathered into full tiles whatever
 * their positions: no compute is wasted on rows that did not select the block, in the random regime as much
 * as in the structured one. Each pair yields a partial output (normalized, bf16) and its log2-sum-exp; a
 * merge kernel then combines the <= topk partials of every (query, head).
 *
 * Steps (all on the device, no host round trip):
 *   0. tile-union plan (+ its kernel, without the hybrid route): marks handled (query, group) rows,
 *      handled[g][i] = 1 (union) or 2 (hybrid: all but the rare slots, rare[g][i])
 *   1. count pairs per bucket (group, sequence, block)      atomics into counts; handled slots skipped
 *   2. exclusive scan of counts and of tiles per bucket      one CTA
 *   3. scatter pairs into bucket order; write tile list      atomics into fill
 *   4. attention: a persistent grid, each CTA a contiguous range of tiles (so consecutive tiles reuse the
 *      K/V in shared memory); a tile = 4 pairs of one bucket, one per warp (16 heads of one query)
 *   4b. hybrid route (default): the union kernel, which merges the rare slots' partials into its rows
 *   5. merge partials per (query, head) of the rows not handled (default: one warp per (query, group) row)
 * Shapes: head_dim 128, block 128, n_heads / n_kv <= 16, topk <= 32. The union route needs 16 heads per
 * group and query tiles (qb->tiles); without them every row takes the pair path.
 * Knobs (cached until kn_cuda_knobs_reload, for benchmarks): KN_CUDA_PREFILL_UNION=0 turns the union route
 * off; KN_CUDA_UNION_MIN=<percent> sets its minimum efficiency (0: every tile whose union fits; 101: none);
 * KN_CUDA_UNION_OVERLAP=0/1 picks the union kernel's variant, KN_CUDA_UNION_KERNEL=0..8 (KN_PF_UK_*, when
 * set) any of them; KN_CUDA_UNION_RARE=0/1 the hybrid route (blocks only one query of a union warpgroup chose
 * go through the pairs, merged by the union kernel: kn_msa_prefill_union.cuh; default 1);
 * KN_CUDA_PF_MERGE=0/1 the merge per (query, head) or per (query, group) row (default 1); KN_CUDA_UNION_PLAN,
 * KN_CUDA_UNION_DYN, KN_CUDA_UNION_QPF, KN_CUDA_UNION_RARE_COST, KN_CUDA_UNION_RARE_CAP, KN_CUDA_UNION_RPF
 * (kn_msa_prefill_union.cuh) and KN_CUDA_PF_PREFETCH (the next bucket's K/V into L2, default 0: measured
 * level) are the other measured options; KN_CUDA_PF_WGMMA=1 runs step 4 on the union kernel in pair mode
 * (kn_msa_prefill_union.cuh; =2 only for the hybrid route's rare pairs, the rows it left on k_pf_attn);
 * KN_CUDA_PF_DIAG_SKIP is a benchmark-only phase breakdown. kn_cuda_knobs.h lists them all (benchmarks and
 * tests unset them between routes): a new knob goes there too. */
#include <stdlib.h>

#include "kn_attn_warp.cuh"
#include "kn_msa_kernels.cuh"
#include "kn_msa_prefill_union.cuh"

#define PF_WARPS 4
#define PF_THREADS (PF_WARPS * 32)
#define PF_BLK 128
#define PF_TILE_BYTES (PF_BLK * AW_ROW_BYTES)
#define PF_Q_OFF (2 * PF_TILE_BYTES)
#define PF_Q_BYTES (16 * AW_ROW_BYTES)
#define PF_SMEM (PF_Q_OFF + PF_WARPS * 2 * PF_Q_BYTES)
#define PF_SCAN_THREADS 1024
/* Default of KN_CUDA_PF_MERGE: 0 one warp per (query, head), 1 one warp per (query, group) row (the default
 * since pf run 1: +1 to +3 % where the union route takes most rows, level in the random regime) */
#define KN_PF_MERGE_ROWS 1
/* Default of KN_CUDA_PF_PREFETCH: the pair path's next bucket's K/V prefetched into L2 (0: off) */
#define KN_PF_PREFETCH 0

struct pf_ws {
    int32_t *counts, *fill, *offsets, *tile_off, *list;
    int4 *tiles; /* (bucket, first pair, pairs, -) */
    uint16_t *part_o;
    float *part_l;
    uint8_t *handled; /* [n_kv][n]: 1 = done by the union route */
    void *union_ws;   /* kn_pf_union_ws bytes */
    void *pair_items; /* KN_CUDA_PF_WGMMA: kn_pf_union_pairs_ws bytes */
};

static size_t pf_align(size_t x)
{
    return (x + 255) & ~(size_t)255;
}

static size_t pf_layout(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int32_t ks,
                        pf_ws *w, uint8_t *base)
{
    /* the (group, block) buckets twice over: the first half for the hybrid route's rare pairs, the second for
     * the pairs of rows the union route left, so that each half's tiles are one contiguous range
     * (KN_CUDA_PF_WGMMA=2 gives the halves different kernels) */
    const int64_t nb = 2 * (int64_t)sh->n_kv * qb->total_blocks;
    const int64_t pairs = (int64_t)qb->n * sh->n_kv * ks;
    const int64_t max_tiles = kn_cdiv(pairs, PF_WARPS) + nb;
    size_t off = 0;
    size_t sz[11] = {pf_align(nb * 4),
                     pf_align(nb * 4),
                     pf_align((nb + 1) * 4),
                     pf_align((nb + 1) * 4),
                     pf_align(pairs * 4),
                     pf_align(max_tiles * sizeof(int4)),
                     pf_align(pairs * 16 * AW_D * 2),
                     pf_align(pairs * 16 * 4),
                     pf_align((int64_t)sh->n_kv * qb->n),
                     pf_align(kn_pf_union_ws(sh, qb)),
                     pf_align(kn_pf_union_pairs_ws(max_tiles))};
    void **ptr[11] = {(void **)&w->counts,   (void **)&w->fill,      (void **)&w->offsets,
                      (void **)&w->tile_off, (void **)&w->list,      (void **)&w->tiles,
                      (void **)&w->part_o,   (void **)&w->part_l,    (void **)&w->handled,
                      (void **)&w->union_ws, (void **)&w->pair_items};
    for (int k = 0; k < 11; k++) {
        if (base) *ptr[k] = base + off;
        off += sz[k];
    }
    return off;
}

__device__ __forceinline__ int64_t pf_bucket(int32_t b, int32_t g, int32_t i, const int32_t *qseq,
                                             const int64_t *pos, const int32_t *seq_blk_off,
                                             int32_t total_blocks, int32_t block)
{
    if (b < 0 || (int64_t)b > pos[i] / block) return -1;
    return (int64_t)g * total_blocks + seq_blk_off[qseq[i]] + b;
}

/* 1 and 3: one thread per (group, query, slot) of the rows not handled (and the rare slots of hybrid rows);
 * scatter = 0 counts, 1 places the pair */
__global__ void k_pf_bucket(const int32_t *__restrict__ sel, int32_t sel_stride, int32_t ks, int32_t n,
                            int32_t n_kv, const int32_t *__restrict__ qseq, const int64_t *__restrict__ pos,
                            const int32_t *__restrict__ seq_blk_off, int32_t total_blocks, int32_t block,
                            const uint8_t *__restrict__ handled, const uint32_t *__restrict__ rare,
                            int32_t *__restrict__ counts, const int32_t *__restrict__ offsets,
                            int32_t *__restrict__ fill, int32_t *__restrict__ list, int scatter)
{
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n_kv * n * ks) return;
    const int32_t slot = (int32_t)(t % ks);
    const int64_t gi = t / ks;
    const uint8_t hd = handled[gi];
    /* 1: the union route did the row; 2: the hybrid route did all but its rare slots */
    if (hd == 1 || (hd == 2 && !((rare[gi] >> slot) & 1u))) return;
    const int32_t i = (int32_t)(gi % n), g = (int32_t)(gi / n);
    const int32_t b = sel[gi * sel_stride + slot];
    int64_t bucket = pf_bucket(b, g, i, qseq, pos, seq_blk_off, total_blocks, block);
    if (bucket < 0) return;
    if (hd == 0) bucket += (int64_t)n_kv * total_blocks; /* a row the union route left: the upper half */
    if (!scatter) {
        atomicAdd(&counts[bucket], 1);
    } else {
        const int32_t at = offsets[bucket] + atomicAdd(&fill[bucket], 1);
        list[at] = i * 32 + slot;
    }
}

/* 2: exclusive scans of counts and of ceil(counts / PF_WARPS), one CTA, each thread a contiguous run */
__global__ void __launch_bounds__(PF_SCAN_THREADS)
    k_pf_scan(const int32_t *__restrict__ counts, int64_t nb, int32_t *__restrict__ offsets,
              int32_t *__restrict__ tile_off)
{
    __shared__ int32_t sp[PF_SCAN_THREADS], st[PF_SCAN_THREADS];
    const int tid = threadIdx.x;
    const int64_t per = (nb + PF_SCAN_THREADS - 1) / PF_SCAN_THREADS;
    const int64_t lo = tid * per, hi = lo + per < nb ? lo + per : nb;
    int32_t sp_local = 0, st_local = 0;
    for (int64_t k = lo; k < hi; k++) {
        sp_local += counts[k];
        st_local += (counts[k] + PF_WARPS - 1) / PF_WARPS;
    }
    sp[tid] = sp_local;
    st[tid] = st_local;
    __syncthreads();
    /* Hillis-Steele inclusive scan over the per-thread sums */
    for (int o = 1; o < PF_SCAN_THREADS; o <<= 1) {
        int32_t a = tid >= o ? sp[tid - o] : 0, b = tid >= o ? st[tid - o] : 0;
        __syncthreads();
        sp[tid] += a;
        st[tid] += b;
        __syncthreads();
    }
    int32_t run_p = sp[tid] - sp_local, run_t = st[tid] - st_local;
    for (int64_t k = lo; k < hi; k++) {
        offsets[k] = run_p;
        tile_off[k] = run_t;
        run_p += counts[k];
        run_t += (counts[k] + PF_WARPS - 1) / PF_WARPS;
    }
    if (tid == PF_SCAN_THREADS - 1) {
        offsets[nb] = sp[tid];
        tile_off[nb] = st[tid];
    }
}

/* A tile's x is its (group, block) bucket, whichever half it came from; w the bucket index itself. */
__global__ void k_pf_tiles(const int32_t *__restrict__ counts, const int32_t *__restrict__ offsets,
                           const int32_t *__restrict__ tile_off, int64_t nb, int4 *__restrict__ tiles)
{
    const int64_t bkt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (bkt >= nb) return;
    const int32_t c = counts[bkt];
    const int32_t gb = (int32_t)(bkt < nb / 2 ? bkt : bkt - nb / 2);
    for (int32_t t = 0; t * PF_WARPS < c; t++)
        tiles[tile_off[bkt] + t] =
            make_int4(gb, offsets[bkt] + t * PF_WARPS, min(PF_WARPS, c - t * PF_WARPS), (int32_t)bkt);
}

struct pf_args {
    const uint16_t *q;
    const int32_t *qseq;
    const int64_t *pos;
    const int32_t *bt;
    int32_t bt_stride;
    const int32_t *seq_blk_off;
    const int64_t *seq_last;
    int32_t n_seqs, total_blocks;
    const uint16_t *kc, *vc;
    int32_t n, n_heads, n_kv, hpg, ks;
    float scale_log2;
    const int32_t *list;
    const int4 *tiles;
    const int32_t *t_first; /* device: the first tile of this kernel's range */
    const int32_t *n_tiles; /* device: the end of its range */
    uint16_t *part_o;
    float *part_l;
    const int32_t *tile_off; /* first tile of each bucket (KN_CUDA_PF_PREFETCH) */
    int prefetch;            /* KN_CUDA_PF_PREFETCH: the next bucket's K/V into L2 while this one computes */
};

/* Bucket -> its K and V rows (this group's slice of the page) and the rows written so far. */
__device__ __forceinline__ void pf_bucket_kv(const pf_args &a, int32_t bucket, const uint8_t *&kb,
                                             const uint8_t *&vb, int &valid, int32_t &b)
{
    const int32_t g = bucket / a.total_blocks, rem = bucket - g * a.total_blocks;
    int32_t lo = 0, hi = a.n_seqs - 1; /* last sequence whose first block is <= rem */
    while (lo < hi) {
        const int32_t mid = (lo + hi + 1) >> 1;
        if (a.seq_blk_off[mid] <= rem)
            lo = mid;
        else
            hi = mid - 1;
    }
    b = rem - a.seq_blk_off[lo];
    const int64_t page = a.bt[(int64_t)lo * a.bt_stride + b];
    valid = (int)min((int64_t)PF_BLK, a.seq_last[lo] - (int64_t)b * PF_BLK + 1);
    kb = (const uint8_t *)a.kc + (page * PF_BLK * a.n_kv + g) * AW_D * 2;
    vb = (const uint8_t *)a.vc + (page * PF_BLK * a.n_kv + g) * AW_D * 2;
}

__device__ __forceinline__ void pf_load_q(const pf_args &a, int32_t entry, int32_t g, uint32_t dst, int lane)
{
    const int32_t i = entry >> 5;
    aw_tile_load(dst, (const uint8_t *)(a.q + ((int64_t)i * a.n_heads + (int64_t)g * a.hpg) * AW_D), AW_D * 2,
                 16, a.hpg, lane, 32);
}

__global__ void __launch_bounds__(PF_THREADS, 2) k_pf_attn(const pf_args a)
{
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t first = *a.t_first, total = *a.n_tiles - first;
    const int32_t t0 = first + (int32_t)((int64_t)total * blockIdx.x / gridDim.x);
    const int32_t t1 = first + (int32_t)((int64_t)total * (blockIdx.x + 1) / gridDim.x);
    if (t0 >= t1) return;
    const uint32_t s_base = kn_smem_addr(smem);
    const uint32_t k_s = s_base, v_s = s_base + PF_TILE_BYTES;
    const uint32_t q_s = s_base + PF_Q_OFF + w * 2 * PF_Q_BYTES;
    const int64_t tok_bytes = (int64_t)a.n_kv * AW_D * 2;

    int32_t cur_bucket = -1, g = 0, b = 0;
    /* Q of this warp's first pair */
    {
        const int4 tl = a.tiles[t0];
        if (w < tl.z) pf_load_q(a, a.list[tl.y + w], tl.x / a.total_blocks, q_s, lane);
        kn_cp_async_commit();
    }
    for (int32_t t = t0; t < t1; t++) {
        const int4 tl = a.tiles[t];
        const bool kv_new = tl.x != cur_bucket;
        if (kv_new) {
            __syncthreads(); /* every warp is done with the previous block */
            cur_bucket = tl.x;
            g = cur_bucket / a.total_blocks;
            const uint8_t *kb, *vb;
            int valid;
            pf_bucket_kv(a, cur_bucket, kb, vb, valid, b);
            aw_tile_load(k_s, kb, tok_bytes, PF_BLK, valid, tid, PF_THREADS);
            aw_tile_load(v_s, vb, tok_bytes, PF_BLK, valid, tid, PF_THREADS);
            /* the hybrid route leaves few pairs per bucket, so each bucket's K/V load stalls the CTA: start
             * the next bucket's into L2 now (thread tid: K and V row tid, 2 lines each) */
            const int32_t tn = a.prefetch ? a.tile_off[tl.w + 1] : t1;
            if (tn < t1) {
                const uint8_t *kn, *vn;
                int vn_rows;
                int32_t bn;
                pf_bucket_kv(a, a.tiles[tn].x, kn, vn, vn_rows, bn);
                if (tid < vn_rows) {
                    const uint8_t *kr = kn + tid * tok_bytes, *vr = vn + tid * tok_bytes;
                    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(kr));
                    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(kr + 128));
                    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(vr));
                    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(vr + 128));
                }
            }
        }
        kn_cp_async_commit();
        /* prefetch the Q of this warp's pair in the next tile */
        if (t + 1 < t1) {
            const int4 tn = a.tiles[t + 1];
            if (w < tn.z)
                pf_load_q(a, a.list[tn.y + w], tn.x / a.total_blocks, q_s + ((t + 1 - t0) & 1) * PF_Q_BYTES,
                          lane);
        }
        kn_cp_async_commit();
        kn_cp_async_wait<1>();
        if (kv_new)
            __syncthreads();
        else
            __syncwarp();
        if (w < tl.z) {
            const int32_t entry = a.list[tl.y + w];
            const int32_t i = entry >> 5, slot = entry & 31;
            const int64_t qpos = a.pos[i];
            uint32_t qa[8][4];
            aw_load_q(qa, q_s + ((t - t0) & 1) * PF_Q_BYTES, lane);
            aw_state st;
            aw_init(st);
            aw_step<128>(st, qa, k_s, v_s, 0, (int64_t)b * PF_BLK, qpos, a.scale_log2, lane);
            aw_finish_l(st);
            const int64_t pr = ((int64_t)i * a.n_kv + g) * a.ks + slot; /* partial row block */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = gid + 8 * h;
                const float inv = st.l[h] > 0.0f ? 1.0f / st.l[h] : 0.0f;
                uint16_t *dst = a.part_o + (pr * 16 + row) * AW_D + 2 * tig;
#pragma unroll
                for (int dn = 0; dn < 16; dn++)
                    *(uint32_t *)(dst + dn * 8) =
                        kn_pack_bf16(st.o[dn][2 * h] * inv, st.o[dn][2 * h + 1] * inv);
                if (tig == 0) a.part_l[pr * 16 + row] = st.l[h] > 0.0f ? st.m[h] + log2f(st.l[h]) : -INFINITY;
            }
        }
        __syncwarp();
    }
    kn_cp_async_wait<0>();
}

/* 5: merge of one (query i, head row of group g): combine the valid slots of its selection row */
__device__ __forceinline__ void pf_merge_one(const uint16_t *__restrict__ part_o,
                                             const float *__restrict__ part_l, bool ok, int32_t ks, int32_t i,
                                             int32_t g, int32_t row, int32_t n_heads, int32_t n_kv,
                                             int32_t hpg, int lane, uint16_t *__restrict__ out)
{
    const int64_t pr0 = ((int64_t)i * n_kv + g) * ks;
    /* lane j holds slot j's weight (ks <= 32): one round of loads, then the rows 4 at a time */
    const float lj = ok ? part_l[(pr0 + lane) * 16 + row] : -INFINITY;
    const float mm = kn_warp_max(lj);
    const float msafe = mm == -INFINITY ? 0.0f : mm;
    const float fj = ok ? exp2f(lj - msafe) : 0.0f;
    const float L = kn_warp_sum(fj);
    const uint32_t valid = __ballot_sync(0xffffffffu, fj > 0.0f);
    float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const uint16_t *pbase = part_o + (pr0 * 16 + row) * AW_D + 4 * lane;
    for (int32_t j0 = 0; j0 < ks; j0 += 4) {
        uint2 v[4];
        float f[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int32_t j = j0 + u;
            f[u] = __shfl_sync(0xffffffffu, fj, j & 31);
            const bool use = j < ks && (valid >> (j & 31) & 1u);
            v[u] = use ? *(const uint2 *)(pbase + (int64_t)j * 16 * AW_D) : make_uint2(0u, 0u);
            if (!use) f[u] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            o[0] += f[u] * kn_bf16_lo(v[u].x), o[1] += f[u] * kn_bf16_hi(v[u].x);
            o[2] += f[u] * kn_bf16_lo(v[u].y), o[3] += f[u] * kn_bf16_hi(v[u].y);
        }
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    uint16_t *dst = out + ((int64_t)i * n_heads + (int64_t)g * hpg + row) * AW_D + 4 * lane;
    *(uint2 *)dst = make_uint2(kn_pack_bf16(o[0] * inv, o[1] * inv), kn_pack_bf16(o[2] * inv, o[3] * inv));
}

/* 5: one warp per (query, head) of the rows not handled */
__global__ void k_pf_merge(const uint16_t *__restrict__ part_o, const float *__restrict__ part_l,
                           const int32_t *__restrict__ sel, int32_t sel_stride, int32_t ks,
                           const int64_t *__restrict__ pos, int32_t block, int32_t n, int32_t n_heads,
                           int32_t n_kv, int32_t hpg, const uint8_t *__restrict__ handled,
                           uint16_t *__restrict__ out)
{
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (item >= (int64_t)n * n_heads) return;
    const int32_t i = (int32_t)(item / n_heads), h = (int32_t)(item % n_heads);
    const int32_t g = h / hpg, row = h % hpg;
    if (handled[(int64_t)g * n + i]) return;
    const int32_t *sr = sel + ((int64_t)g * n + i) * sel_stride;
    const int32_t b = lane < ks ? sr[lane] : -1;
    const bool ok = b >= 0 && b <= pos[i] / block;
    pf_merge_one(part_o, part_l, ok, ks, i, g, row, n_heads, n_kv, hpg, lane, out);
}

/* 5, KN_CUDA_PF_MERGE=1: one warp per (query, group) row, its heads in turn: 1/hpg of the CTAs, so rows the
 * union route handled cost one flag load per row instead of a CTA launch per 8 heads. */
__global__ void k_pf_merge_rows(const uint16_t *__restrict__ part_o, const float *__restrict__ part_l,
                                const int32_t *__restrict__ sel, int32_t sel_stride, int32_t ks,
                                const int64_t *__restrict__ pos, int32_t block, int32_t n, int32_t n_heads,
                                int32_t n_kv, int32_t hpg, const uint8_t *__restrict__ handled,
                                uint16_t *__restrict__ out)
{
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= (int64_t)n * n_kv) return;
    const int32_t i = (int32_t)(r / n_kv), g = (int32_t)(r % n_kv);
    if (handled[(int64_t)g * n + i]) return;
    const int32_t *sr = sel + ((int64_t)g * n + i) * sel_stride;
    const int32_t b = lane < ks ? sr[lane] : -1;
    const bool ok = b >= 0 && b <= pos[i] / block;
#pragma unroll 2
    for (int32_t row = 0; row < hpg; row++)
        pf_merge_one(part_o, part_l, ok, ks, i, g, row, n_heads, n_kv, hpg, lane, out);
}

/* The union kernel's variant: KN_CUDA_UNION_KERNEL when set, else KN_CUDA_UNION_OVERLAP=1 (the overlap
 * variant), else the default. */
static int pf_union_kernel(void)
{
    const int v = kn_cuda_knob_int("KN_CUDA_UNION_KERNEL", -1);
    if (v >= 0) return v;
    return kn_cuda_knob("KN_CUDA_UNION_OVERLAP", KN_PF_UNION_OVERLAP) ? KN_PF_UK_OVERLAP : KN_PF_UNION_KERNEL;
}

int kn_attn_prefill_supported(const struct kn_cuda_msa_shape *sh, int32_t sel_stride)
{
    return sh->head_dim == AW_D && sh->block == PF_BLK && sh->n_heads / sh->n_kv <= 16 && sel_stride >= 1 &&
           (sh->topk < sel_stride ? sh->topk : sel_stride) <= 32;
}

size_t kn_attn_prefill_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          int32_t sel_stride)
{
    pf_ws w;
    const int32_t ks = sh->topk < sel_stride ? sh->topk : sel_stride;
    return pf_layout(sh, qb, ks, &w, NULL);
}

int32_t kn_attn_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                        const struct kn_cuda_cache *c, const void *q, const int32_t *sel, int32_t sel_stride,
                        void *out, void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err)
{
    if (qb->n == 0) return MM_OK;
    if (!qb->seq_blk_off || !qb->seq_last)
        return mm_err_set(err, MM_INVALID, "kn_cuda attention (prefill): batch without seq_blk_off/seq_last");
    const int32_t ks = sh->topk < sel_stride ? sh->topk : sel_stride;
    pf_ws w;
    const size_t need = pf_layout(sh, qb, ks, &w, NULL);
    if (!ws || ws_bytes < need)
        return mm_err_set(err, MM_INVALID, "kn_cuda attention (prefill): workspace %zu < %zu bytes", ws_bytes,
                          need);
    pf_layout(sh, qb, ks, &w, (uint8_t *)ws);
    const int64_t nb = 2 * (int64_t)sh->n_kv * qb->total_blocks; /* both halves (pf_layout) */
    const int64_t pairs = (int64_t)qb->n * sh->n_kv * ks;
    if (pairs >= INT32_MAX / 2 || qb->n >= (1 << 26))
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda attention (prefill): %lld pairs", (long long)pairs);
    KN_CU(cudaMemsetAsync(w.counts, 0, (size_t)nb * 4, stream), "kn_cuda attention (prefill): memset");
    KN_CU(cudaMemsetAsync(w.fill, 0, (size_t)nb * 4, stream), "kn_cuda attention (prefill): memset");
    /* rows no union tile covers (all, without the route) stay with the pair path */
    KN_CU(cudaMemsetAsync(w.handled, 0, (size_t)sh->n_kv * qb->n, stream),
          "kn_cuda attention (prefill): memset");
    /* the union route: plan, then (without the hybrid route) its kernel; with the hybrid route the pair path
     * runs first, since the union kernel merges the rare pairs' partials into its output */
    const int use_union = kn_cuda_knob("KN_CUDA_PREFILL_UNION", 1) && kn_pf_union_supported(sh, qb, ks);
    const int hybrid = use_union && kn_cuda_knob("KN_CUDA_UNION_RARE", KN_PF_UNION_RARE);
    const struct kn_pf_union_rare rare = {w.part_o, w.part_l};
    const int32_t min_eff = kn_cuda_knob_int("KN_CUDA_UNION_MIN", KN_PF_UNION_MIN_EFF);
    if (use_union) {
        const int32_t rc = kn_pf_union_launch(
            sh, qb, c, q, sel, sel_stride, ks, min_eff, pf_union_kernel(), out, w.handled, w.union_ws,
            hybrid ? &rare : NULL, hybrid ? KN_PF_UNION_PLAN : KN_PF_UNION_PLAN | KN_PF_UNION_ATTEND, stream,
            err);
        if (rc) return rc;
    }
    const uint32_t *rare_masks = hybrid ? kn_pf_union_rare_masks(sh, qb, w.union_ws) : NULL;
    const unsigned pb = (unsigned)kn_cdiv(pairs, 256);
    k_pf_bucket<<<pb, 256, 0, stream>>>(sel, sel_stride, ks, qb->n, sh->n_kv, qb->qseq, qb->pos,
                                        qb->seq_blk_off, qb->total_blocks, sh->block, w.handled, rare_masks,
                                        w.counts, w.offsets, w.fill, w.list, 0);
    KN_LAUNCHED("kn_cuda attention (prefill count)");
    k_pf_scan<<<1, PF_SCAN_THREADS, 0, stream>>>(w.counts, nb, w.offsets, w.tile_off);
    KN_LAUNCHED("kn_cuda attention (prefill scan)");
    k_pf_bucket<<<pb, 256, 0, stream>>>(sel, sel_stride, ks, qb->n, sh->n_kv, qb->qseq, qb->pos,
                                        qb->seq_blk_off, qb->total_blocks, sh->block, w.handled, rare_masks,
                                        w.counts, w.offsets, w.fill, w.list, 1);
    KN_LAUNCHED("kn_cuda attention (prefill scatter)");
    k_pf_tiles<<<(unsigned)kn_cdiv(nb, 256), 256, 0, stream>>>(w.counts, w.offsets, w.tile_off, nb, w.tiles);
    KN_LAUNCHED("kn_cuda attention (prefill tiles)");

    pf_args a;
    a.q = (const uint16_t *)q;
    a.qseq = qb->qseq;
    a.pos = qb->pos;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.seq_blk_off = qb->seq_blk_off;
    a.seq_last = qb->seq_last;
    a.n_seqs = qb->n_seqs;
    a.total_blocks = qb->total_blocks;
    a.kc = (const uint16_t *)c->k;
    a.vc = (const uint16_t *)c->v;
    a.n = qb->n;
    a.n_heads = sh->n_heads;
    a.n_kv = sh->n_kv;
    a.hpg = sh->n_heads / sh->n_kv;
    a.ks = ks;
    a.scale_log2 = sh->scale * 1.4426950408889634f;
    a.list = w.list;
    a.tiles = w.tiles;
    a.t_first = w.tile_off; /* tile_off[0] = 0: every tile */
    a.n_tiles = w.tile_off + nb;
    a.part_o = w.part_o;
    a.part_l = w.part_l;
    a.tile_off = w.tile_off;
    a.prefetch = kn_cuda_knob("KN_CUDA_PF_PREFETCH", KN_PF_PREFETCH);
    KN_CU(kn_smem_attr((const void *)k_pf_attn, PF_SMEM), "kn_cuda attention (prefill): shared memory");
    const int64_t max_tiles = kn_cdiv(pairs, PF_WARPS) + nb;
    int64_t grid = 2 * (int64_t)kn_cuda_sm_count();
    if (grid > max_tiles) grid = max_tiles;
    /* KN_CUDA_PF_DIAG_SKIP (benchmarks only, the output is wrong): bit 0 skips the pair path's attention,
     * bit 1 the hybrid route's union kernel, so the time of each phase is the difference to the full call */
    const int skip = kn_cuda_knob_int("KN_CUDA_PF_DIAG_SKIP", 0);
    /* KN_CUDA_PF_WGMMA=1: the tiles on the union kernel in pair mode (wgmma, 8 pairs per item); =2: only the
     * hybrid route's rare pairs (the lower half of the buckets, tiles [0, tile_off[nb / 2])), the rows the
     * union route left on k_pf_attn */
    const int pair_wgmma =
        kn_pf_union_pairs_supported(sh) ? kn_cuda_knob_int("KN_CUDA_PF_WGMMA", KN_PF_WGMMA) : 0;
    if (!(skip & 1) && pair_wgmma) {
        const struct kn_pf_union_pairs pp = {
            w.tiles,  w.list,  w.tile_off + (pair_wgmma == 2 ? nb / 2 : nb), max_tiles, w.pair_items,
            w.part_o, w.part_l};
        const int32_t rc = kn_pf_union_pairs_launch(sh, qb, c, q, ks, &pp, stream, err);
        if (rc) return rc;
    }
    if (!(skip & 1) && pair_wgmma != 1) {
        if (pair_wgmma == 2) a.t_first = w.tile_off + nb / 2;
        k_pf_attn<<<(unsigned)grid, PF_THREADS, PF_SMEM, stream>>>(a);
        KN_LAUNCHED("kn_cuda attention (prefill)");
    }
    if (hybrid && !(skip & 2)) {
        const int32_t rc =
            kn_pf_union_launch(sh, qb, c, q, sel, sel_stride, ks, min_eff, pf_union_kernel(), out, w.handled,
                               w.union_ws, &rare, KN_PF_UNION_ATTEND, stream, err);
        if (rc) return rc;
    }
    if (kn_cuda_knob("KN_CUDA_PF_MERGE", KN_PF_MERGE_ROWS)) {
        const int64_t rows = (int64_t)qb->n * sh->n_kv;
        k_pf_merge_rows<<<(unsigned)kn_cdiv(rows, 8), 256, 0, stream>>>(
            w.part_o, w.part_l, sel, sel_stride, ks, qb->pos, sh->block, qb->n, sh->n_heads, sh->n_kv, a.hpg,
            w.handled, (uint16_t *)out);
    } else {
        const int64_t items = (int64_t)qb->n * sh->n_heads;
        k_pf_merge<<<(unsigned)kn_cdiv(items, 8), 256, 0, stream>>>(
            w.part_o, w.part_l, sel, sel_stride, ks, qb->pos, sh->block, qb->n, sh->n_heads, sh->n_kv, a.hpg,
            w.handled, (uint16_t *)out);
    }
    KN_LAUNCHED("kn_cuda attention (prefill merge)");
    return MM_OK;
}
