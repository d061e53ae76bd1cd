/* Sparse prefill attention, tile-union route (sm_90a, wgmma). Neighbouring queries of a trained model select
 * mostly the same blocks, so the work unit ("item") is 8 consecutive queries of one sequence and one KV group
 * (128 rows: 8 queries x 16 heads) with the union of their selected blocks (deduplicated, ascending, with a
 * bit mask of the queries that chose each block): the union's K/V blocks are streamed once through a 3-stage
 * shared-memory ring and each query's normalized output is written once: no partial outputs, no merge.
 *
 * Two kernels:
 *   plan   one small CTA per item: builds the union, decides the route, writes the item's header and union
 *          list to the workspace and handled[g][i] for its queries (the pair path takes the rest).
 *   union  a persistent grid (one CTA per SM, items round-robin, so the union building, the Q loads and the
 *          ring's fill of the next item overlap the current one instead of costing each item a start).
 * In the union kernel, warps 0-3 and 4-7 are two consumer warpgroups of 64 rows (4 queries x 16 heads; warp w
 * holds query w of the item, which makes every per-query decision warp-uniform). For each union block a
 * warpgroup computes S = Q K^T (wgmma m64n128k16, Q and K K-major in 128B-swizzled smem), masks the rows of
 * queries that did not choose the block (their P is zero) and the token-level causal mask, runs the online
 * softmax in the log2 domain, and accumulates O += P V (P from registers, V MN-major in smem). A warpgroup
 * none of whose 4 queries chose a block skips it. Warps 8-11 are the producer warpgroup: cp.async copies of
 * each warpgroup's Q and of K and V (zero-filled past the last written token, so stale cache rows never reach
 * P V), each completing on an mbarrier; whole K/V blocks come by TMA instead (one thread, four boxes;
 * KN_CUDA_UNION_TMA, on by default: the producer's 128 threads of cp.async had competed with the consumers
 * for issue slots, 3 warps per scheduler, and TMA measured +5 to +9 % on the structured bench); consumers
 * release a stage on its "empty" mbarrier (one arrival per warp) and their Q after their last score product
 * of the item, so the two warpgroups drift apart by up to the ring depth instead of running in lockstep. 12
 * warps would leave 168 registers per thread (3 warps per SM sub-partition) and the consumers need ~190:
 * setmaxnreg moves registers from the producers (48) to the consumers (224). The consumer has an
 * intra-warpgroup overlap variant (OVERLAP = 1, KN_CUDA_UNION_OVERLAP=1): correct, measured 10-15 % slower on
 * an H200, so off by default (docs/design/cuda.md, "wgmma prefill"); pingpong variants (PP: the warpgroups'
 * products take turns on the tensor cores), shorter softmax chains (FAST = 1, the default) and value products
 * in chunks (FAST = 2, 4) are picked by KN_CUDA_UNION_KERNEL (KN_PF_UK_*); only FAST = 1 measured faster than
 * the plain consumer.
 *
 * An item pays for every union block with all 4 queries of a warpgroup, so it only wins when the queries
 * share their blocks. efficiency = selected pairs / (4 x (blocks of warpgroup 0 + blocks of warpgroup 1));
 * an item below the threshold (or with more than 128 union blocks) is left to the KV-block-major pair path
 * (kn_msa_prefill.cu). Hybrid route (a.rare, the default): a block only one query of a warpgroup chose would
 * cost that warpgroup 4 (query, block) products for 1, so the plan drops it from that warpgroup when that
 * is cheaper (KN_CUDA_UNION_RARE_COST, _CAP), the pair path attends to those pairs first, and the consumer's
 * epilogue merges their partials (pu_merge_rare). Also measured, off by default: a lookahead consumer (the
 * next block's score product issued behind the value product: slower) and a dynamic item order (items from a
 * global counter: level); see docs/progress/cuda-pf.md. Shapes: head_dim 128, block 128, 16 heads per group,
 * ks <= 32. Dense mode (DN, kn_pf_union_dense_launch): the dense layers' prefill on the same kernel, every
 * block up to an item's last query being its union, made on the fly without a plan (505-539 TFLOP/s at
 * 64K-256K on an H200 against 280 for the mma.sync flash kernel). */
#include "kn_msa_kernels.cuh"
#include "kn_msa_prefill_union.cuh"
#include "kn_tma.cuh"
#include "kn_wgmma.cuh"

#define PU_Q 8
#define PU_THREADS 384 /* 2 consumer warpgroups + 1 producer warpgroup */
#define PU_PRODUCER 8  /* first producer warp */
#define PU_STAGES 3
#define PU_UMAX 128
#define PU_BLK 128
#define PU_KV_BYTES (PU_BLK * 256)       /* one K or V block: 128 rows of 128 bf16 */
#define PU_STAGE_BYTES (2 * PU_KV_BYTES) /* K then V */
#define PU_QWG_BYTES (64 * 256)          /* one warpgroup's Q: 64 rows */
#define PU_PLAN_THREADS 256              /* >= PU_Q * ks */
/* shared memory: mbarriers and the per-stage (block, mask) words, then (1024-aligned) Q and the stages */
#define PU_BAR_FULL 0
#define PU_BAR_EMPTY (8 * PU_STAGES)
#define PU_BAR_QFULL (16 * PU_STAGES)
#define PU_BAR_QEMPTY (16 * PU_STAGES + 16)
#define PU_META (16 * PU_STAGES + 32)
/* dynamic item order (DYN): per consumer warpgroup its next item's header (16 bytes) and index (4), written
 * by producer thread 0 before its extra arrival on the warpgroup's qfull; then the producers' fetched item */
#define PU_ITEM_W ((PU_META + 8 * PU_STAGES + 15) & ~15)
#define PU_PROD_W (PU_ITEM_W + 64)
#define PU_HEAD_BYTES (PU_PROD_W + 16)
#define PU_BAR_PROD 3 /* named barrier of the producer warpgroup (DYN) */
#define PU_SMEM (PU_HEAD_BYTES + 1024 + 2 * PU_QWG_BYTES + PU_STAGES * PU_STAGE_BYTES)

/* Workspace: item headers int4 [n_items] (x first query, y queries (<= 8), z union blocks (-1: not this
 * route), w last union index that warpgroup 0 (+1, low 16 bits) and 1 (+1, high 16 bits) uses), then the
 * union lists int4 [n_items][PU_UMAX] (x block, y page, z query mask (bits 0-7) | valid rows << 8). */
struct pu_args {
    const uint16_t *q;
    const int32_t *sel;
    int32_t sel_stride, ks;
    const int32_t *tiles, *qseq;
    const int64_t *pos, *seq_last;
    const int32_t *bt;
    int32_t bt_stride;
    const uint16_t *kc, *vc;
    int32_t n, n_heads, n_kv, min_eff;
    int32_t n_oct, n_items; /* items: n_kv groups x n_oct query octets, group-major */
    float scale_log2;
    uint16_t *out;
    uint8_t *handled;
    int4 *hdr, *uarr;
    /* hybrid route (NULL: off): rare[g * n + i] = the slots of row (i, g) the pair path attends to; their
     * partials (part_o, part_l: the pair path's, [i][g][slot][16 rows]) are merged into the output here */
    uint32_t *rare;
    const uint16_t *part_o;
    const float *part_l;
    int32_t *counter; /* dynamic item order: the next item to hand out (zeroed by the plan kernel) */
    int q_prefetch;   /* KN_CUDA_UNION_QPF: the producer prefetches the next item's Q into L2 */
    /* hybrid decision (KN_CUDA_UNION_RARE_COST, _CAP): a rare pair's price in union products, and the
     * largest share of an item's pairs (percent) the pair path may take */
    int32_t rare_cost, rare_cap;
    int rare_pf; /* KN_CUDA_UNION_RPF: consumers prefetch their rare partials into L2 at the item's start */
    /* pair mode (RI = 1, KN_CUDA_PF_WGMMA): the pair path's tiles (4 pairs of one bucket) on this kernel, an
     * item = two tiles, one per consumer warpgroup; k_pf_pair_items writes hdr (x: the warpgroups' KV
     * groups, 16 bits each), uarr (stride 2, w: the entry's group) and ri_q (the 8 rows' pairs, query * 32 +
     * slot, -1: none); the consumers write each pair's partial (ri_part_o, ri_part_l) as the pair path does
     */
    const int32_t *ri_total; /* device: the number of tiles */
    int32_t *ri_q;
    const int4 *ri_tiles;
    const int32_t *ri_list, *seq_blk_off;
    int32_t n_seqs, total_blocks;
    uint16_t *ri_part_o;
    float *ri_part_l;
};

/* TMA producer (KN_CUDA_UNION_TMA): the K and V caches as 2-D maps [n_pages * block tokens][n_kv * 128]
 * in boxes of 64 columns x 128 tokens, one box per 64-column slab of a block's sw128 tile */
struct pu_maps {
    CUtensorMap k, v;
};

/* Items of this launch: the plan's, or (pair mode) two tiles each, their count on the device. */
template <int RI> __device__ __forceinline__ int32_t pu_n_items(const pu_args &a)
{
    return RI ? (*a.ri_total + 1) >> 1 : a.n_items;
}

__device__ __forceinline__ void pu_cp_async_wait_all(void)
{
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void pu_setmaxnreg_inc(void)
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N> __device__ __forceinline__ void pu_setmaxnreg_dec(void)
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* 2^x flushing subnormal results to zero: one MUFU.EX2, where exp2f (ex2.approx.f32 without ftz) adds a
 * range test and two multiplies around it. Probabilities below 2^-126 do not matter after bf16 rounding. */
__device__ __forceinline__ float pu_ex2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Named barriers of the pingpong variants: warpgroup w waits on PU_BAR_TURN + w (its turn on the tensor
 * cores, 128 waiting + 128 arriving threads), the other warpgroup arrives on it. Id 0 is __syncthreads. */
#define PU_BAR_TURN 1

__device__ __forceinline__ void pu_turn_wait(int id)
{
    asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}

__device__ __forceinline__ void pu_turn_pass(int id)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

/* ---- plan: one CTA per item ---- */

/* A warpgroup's bits of a block's query mask, dropped (hybrid route) when only one of its 4 queries chose
 * the block: that warpgroup would compute 4 queries x 128 keys for one query's 128. */
__device__ __forceinline__ uint32_t pu_keep_mask(uint32_t mask)
{
    uint32_t k = mask;
    if (__popc(mask & 0x0Fu) == 1) k &= 0xF0u;
    if (__popc(mask & 0xF0u) == 1) k &= 0x0Fu;
    return k;
}

/* V = 1 (the default): thread tid holds slot tid % 32 of query tid / 32 (rows padded to 32 slots, so no
 * division by ks and 16-byte loads of 4 candidates), and a block's query mask is 8 row scans; V = 0, the
 * first version: candidates packed (tid = query * ks + slot), every candidate compared one by one. */
template <int V> __global__ void __launch_bounds__(PU_PLAN_THREADS) k_pf_union_plan(const pu_args a)
{
    __shared__ __align__(16) int32_t cand[PU_PLAN_THREADS];
    __shared__ __align__(16) uint32_t cinfo[PU_PLAN_THREADS];
    __shared__ int32_t last[2];
    __shared__ uint32_t rare_q[PU_Q];
    const int tid = threadIdx.x;
    const int32_t oct = (int32_t)blockIdx.x, g = (int32_t)blockIdx.y, item = g * a.n_oct + oct;
    if (item == 0 && tid == 0) *a.counter = 0; /* the union kernel runs after this one, in stream order */
    const int32_t tile = oct >> 3, sub = oct & 7;
    const int32_t tcnt = a.tiles[2 * tile + 1];
    const int32_t i0 = a.tiles[2 * tile] + sub * PU_Q, cnt = min(PU_Q, tcnt - sub * PU_Q);
    if (cnt <= 0) {
        if (tid == 0) a.hdr[item] = make_int4(0, 0, -1, 0);
        return;
    }
    const int32_t ks = a.ks, nc = V ? PU_PLAN_THREADS : PU_Q * ks, seq = a.qseq[i0];
    if (tid < 2) last[tid] = -1;
    if (tid < PU_Q) rare_q[tid] = 0u;
    /* 1. candidates: every valid selected block of the 8 queries (-1 otherwise) */
    int32_t b = -1, jq = 0, slot = 0;
    if (tid < nc) {
        jq = V ? tid >> 5 : tid / ks;
        slot = V ? tid & 31 : tid - jq * ks;
        if (jq < cnt && slot < ks) {
            const int32_t i = i0 + jq;
            const int32_t x = a.sel[((int64_t)g * a.n + i) * a.sel_stride + slot];
            if (x >= 0 && (int64_t)x <= a.pos[i] / PU_BLK) b = x;
        }
        cand[tid] = b;
    }
    __syncthreads();
    /* 2. first occurrence of each block and the mask of the queries that chose it; with the hybrid route
     * (a.rare) also the mask without the warpgroups that only one query of theirs chose it for (bit 30: the
     * block keeps some query) and whether this candidate's pair is such a rare one */
    uint32_t info = 0, kmask = 0;
    if (tid < nc) {
        if (b >= 0) {
            uint32_t mask = 0, first = 1;
            if (V) {
                const int4 *c4 = (const int4 *)cand;
                for (int q2 = 0; q2 < PU_Q; q2++) {
                    bool hit = false;
                    for (int32_t j4 = 0; j4 < ks; j4 += 4) {
                        const int4 c = c4[q2 * 8 + (j4 >> 2)];
                        hit |= (c.x == b) | (c.y == b) | (c.z == b) | (c.w == b);
                    }
                    mask |= (uint32_t)hit << q2;
                }
                /* the first occurrence: no earlier query chose it, nor an earlier slot of this row (a row
                 * with duplicate blocks must still give each block one union entry) */
                bool dup = false;
                for (int32_t j4 = 0; j4 < ks; j4 += 4) {
                    const int4 c = c4[jq * 8 + (j4 >> 2)];
                    dup |= (c.x == b && j4 < slot) | (c.y == b && j4 + 1 < slot) |
                           (c.z == b && j4 + 2 < slot) | (c.w == b && j4 + 3 < slot);
                }
                first = !(mask & ((1u << jq) - 1u)) && !dup;
            } else {
                for (int32_t k = 0; k < nc; k++)
                    if (cand[k] == b) {
                        mask |= 1u << (k / ks);
                        if (k < tid) first = 0;
                    }
            }
            kmask = a.rare ? pu_keep_mask(mask) : mask;
            info = mask | (first << 31) | ((kmask != 0u) << 30);
        }
        cinfo[tid] = info;
    }
    const uint32_t mask = info & 0xFFu;
    const int first = (int)(info >> 31);
    const bool rare = b >= 0 && !((kmask >> jq) & 1u);
    const int nu = __syncthreads_count(first);
    const int pairs = __syncthreads_count(b >= 0);
    const int u0 = __syncthreads_count(first && (mask & 0x0Fu)),
              u1 = __syncthreads_count(first && (mask & 0xF0u));
    /* the hybrid route when it computes less: the rare pairs go to the pair path (priced at a.rare_cost
     * union (query, block) products each) and are merged into this item's output by its consumers. Each
     * rare pair removes its block from one warpgroup (4 products), so the price only decides on or off:
     * any cost < 4 takes every item with rare pairs (under the cap), any cost >= 4 none */
    int hyb = 0, nk = 0;
    if (a.rare) { /* uniform: the counts below are barriers every thread reaches */
        const int rp = __syncthreads_count(rare);
        const int k0 = __syncthreads_count(first && (kmask & 0x0Fu)),
                  k1 = __syncthreads_count(first && (kmask & 0xF0u));
        nk = __syncthreads_count(first && kmask != 0u);
        hyb = rp > 0 && 100 * rp <= a.rare_cap * pairs && nk <= PU_UMAX && k0 + k1 > 0 &&
              4 * (k0 + k1) + a.rare_cost * rp < 4 * (u0 + u1) &&
              (pairs - rp) * 100 >= a.min_eff * 4 * (k0 + k1);
    }
    const int take = hyb || (nu <= PU_UMAX && (u0 + u1 == 0 || pairs * 100 >= a.min_eff * 4 * (u0 + u1)));
    /* 3. each used first occurrence's rank among the used distinct blocks = its place in the ascending union
     */
    const uint32_t umask = hyb ? kmask : mask;
    const bool used = first && umask != 0u;
    int32_t rank = 0;
    if (take && used) {
        const uint32_t need = hyb ? 0xC0000000u : 0x80000000u;
        if (V) {
            const int4 *c4 = (const int4 *)cand;
            const uint4 *f4 = (const uint4 *)cinfo;
            for (int q2 = 0; q2 < PU_Q; q2++)
                for (int32_t j4 = 0; j4 < ks; j4 += 4) {
                    const int4 c = c4[q2 * 8 + (j4 >> 2)];
                    const uint4 f = f4[q2 * 8 + (j4 >> 2)];
                    rank += ((f.x & need) == need && c.x < b) + ((f.y & need) == need && c.y < b) +
                            ((f.z & need) == need && c.z < b) + ((f.w & need) == need && c.w < b);
                }
        } else {
            for (int32_t k = 0; k < nc; k++) rank += (cinfo[k] & need) == need && cand[k] < b;
        }
        if (umask & 0x0Fu) atomicMax(&last[0], rank);
        if (umask & 0xF0u) atomicMax(&last[1], rank);
    }
    if (hyb && rare) atomicOr(&rare_q[jq], 1u << slot);
    __syncthreads();
    if (tid < cnt) {
        a.handled[(int64_t)g * a.n + i0 + tid] = (uint8_t)(take ? (rare_q[tid] ? 2 : 1) : 0);
        if (a.rare) a.rare[(int64_t)g * a.n + i0 + tid] = rare_q[tid];
    }
    if (take && used) {
        const int32_t page = a.bt[(int64_t)seq * a.bt_stride + b];
        int64_t valid = a.seq_last[seq] - (int64_t)b * PU_BLK + 1;
        valid = page < 0 ? 0 : valid < PU_BLK ? valid : PU_BLK;
        a.uarr[(int64_t)item * PU_UMAX + rank] =
            make_int4(b, page < 0 ? 0 : page, (int32_t)((umask & 0xFFu) | ((uint32_t)valid << 8)), 0);
    }
    if (tid == 0)
        a.hdr[item] = make_int4(i0, cnt, take ? (hyb ? nk : nu) : -1, (last[0] + 1) | ((last[1] + 1) << 16));
}

/* ---- the persistent union kernel ---- */

/* Producer: warpgroup w's Q of an item (rows 4w.. of the item's queries x 16 heads), then arrive on qfull. */
__device__ __forceinline__ void pu_load_q(const pu_args &a, int32_t g, int32_t i0, int32_t cnt, int w,
                                          uint32_t qw_s, uint32_t bar, int pt)
{
    const int c = pt & 15;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int r = (pt >> 4) + 8 * j, rq = 4 * w + (r >> 4);
        const bool ok = rq < cnt;
        const uint16_t *src =
            ok ? a.q + ((int64_t)(i0 + rq) * a.n_heads + (int64_t)g * 16 + (r & 15)) * 128 + c * 8 : a.q;
        kn_cp_async16(qw_s + wg_sw128_off(r, c, 64), src, ok ? 16 : 0);
    }
    mb_arrive_cp_async(bar);
}

/* Pair mode: warpgroup w's Q rows are the queries of its tile's pairs (group g), zeros where it has none. */
__device__ __forceinline__ void pu_load_q_ri(const pu_args &a, int32_t item, int32_t g, int w, uint32_t qw_s,
                                             uint32_t bar, int pt)
{
    const int c = pt & 15;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int r = (pt >> 4) + 8 * j, rq = 4 * w + (r >> 4);
        const int32_t e = a.ri_q[(int64_t)item * PU_Q + rq];
        const bool ok = e >= 0;
        const uint16_t *src =
            ok ? a.q + ((int64_t)(e >> 5) * a.n_heads + (int64_t)g * 16 + (r & 15)) * 128 + c * 8 : a.q;
        kn_cp_async16(qw_s + wg_sw128_off(r, c, 64), src, ok ? 16 : 0);
    }
    mb_arrive_cp_async(bar);
}

/* Dense mode (DN = 1, kn_pf_union_dense_launch: the dense layers' prefill): an item's union is every block
 * up to its last query's, in order, so no plan runs; the header is made from the tiles where it is needed.
 * Blocks a query does not see yet (past its own) have its mask bit clear, and its own block the token-level
 * causal mask, as in the union route. Warpgroup w's last block is its last query's (0: none). */
__device__ __forceinline__ int4 pu_dense_header(const pu_args &a, int32_t item)
{
    constexpr int32_t per_tile = KN_CUDA_QTILE / PU_Q;
    const int32_t oct = item % a.n_oct, t = oct / per_tile, j = oct % per_tile;
    const int32_t i0 = a.tiles[2 * t] + PU_Q * j, rem = a.tiles[2 * t + 1] - PU_Q * j;
    if (rem <= 0) return make_int4(0, 0, -1, 0);
    const int32_t cnt = rem < PU_Q ? rem : PU_Q;
    const int32_t b0 = (int32_t)(a.pos[i0 + (cnt < 4 ? cnt : 4) - 1] / PU_BLK) + 1,
                  b1 = cnt > 4 ? (int32_t)(a.pos[i0 + cnt - 1] / PU_BLK) + 1 : 0;
    return make_int4(i0, cnt, b0 > b1 ? b0 : b1, b0 | (b1 << 16));
}

/* Dense mode: union entry u of item header h (block u, its page, the queries that see it | rows written <<
 * 8), as the plan writes them for the union route. p0: the item's first query's position (it and every later
 * query see every block up to its own). */
__device__ __forceinline__ int4 pu_dense_entry(const pu_args &a, const int4 &h, int32_t u, int64_t p0,
                                               const int32_t *btr, int64_t last)
{
    const int32_t page = btr[u];
    uint32_t mask = (1u << h.y) - 1u;
    if ((int64_t)u * PU_BLK > p0)
        for (int q = 0; q < h.y; q++)
            if (a.pos[h.x + q] < (int64_t)u * PU_BLK) mask &= ~(1u << q);
    int64_t valid = last - (int64_t)u * PU_BLK + 1;
    valid = page < 0 ? 0 : valid < PU_BLK ? valid : PU_BLK;
    return make_int4(u, page < 0 ? 0 : page, (int32_t)(mask | ((uint32_t)valid << 8)), 0);
}

/* Thread 0 of the producer: a stage's two words (block id; query mask | rows written << 8) from the entry in
 * its registers, published by the releasing arrival that follows */
__device__ __forceinline__ void pu_put_words(uint32_t addr, const int4 &e)
{
    asm volatile("st.shared.v2.s32 [%0], {%1, %2};\n" ::"r"(addr), "r"(e.x), "r"(e.z) : "memory");
}

/* The next item this CTA works on (its header in h; false: none left). Static order (DYN = 0): items
 * blockIdx.x, + gridDim.x, ... (item starts at blockIdx.x - gridDim.x); dynamic (DYN = 1, producer warpgroup
 * only): thread 0 takes the next item from a global counter and shares it on a named barrier, so a CTA that
 * got short items takes more (a static order ends when the CTA with the most work does). Items the plan
 * declined are skipped. */
template <int DYN, int RI = 0, int DN = 0>
__device__ __forceinline__ bool pu_fetch(const pu_args &a, uint32_t s0, int pt, int32_t &item, int4 &h)
{
    for (;;) {
        if (DYN) {
            if (pt == 0) {
                const int32_t x = atomicAdd(a.counter, 1);
                asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(s0 + PU_PROD_W), "r"(x) : "memory");
            }
            wg_bar_sync(PU_BAR_PROD, 128);
            asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(item) : "r"(s0 + PU_PROD_W) : "memory");
            wg_bar_sync(PU_BAR_PROD, 128); /* every thread has read it before thread 0 writes the next */
        } else {
            item += gridDim.x;
        }
        if (item >= pu_n_items<RI>(a)) return false;
        h = DN ? pu_dense_header(a, item) : a.hdr[item];
        if (h.z >= 0) return true;
    }
}

/* The producer warpgroup (thread pt of 128): for each item, its first two union blocks, both Q tiles (once
 * the consumers are done with the previous ones), the other blocks. Thread pt copies 16-byte chunk
 * c = pt % 16 of rows r0 + 8j (r0 = pt / 16): the same swizzled column for all its rows, so each copy is a
 * constant offset from the last. Thread 0 also copies the block id and query mask into the stage's words,
 * and (DYN) the item and its header into each consumer warpgroup's words, then an item -1 at the end. TMA:
 * a block without rows past the last token is thread 0's four boxes instead (the stage's "full" barrier
 * then counts its expect_tx and the other 127 threads' plain arrivals, as it counts 128 cp.async arrivals
 * otherwise); partial blocks keep the zero-filling copies. */
template <int DYN, int RI = 0, int TMA = 0, int DN = 0>
__device__ __forceinline__ void pu_produce(const pu_args &a, const pu_maps &m, uint32_t s0, uint32_t q_s,
                                           uint32_t kv_s, int pt)
{
    const int c = pt & 15, r0 = pt >> 4;
    const int64_t tok8 = (int64_t)a.n_kv * 256 * 8; /* bytes from a token's K row to the row 8 tokens on */
    const uint32_t dst0 = wg_sw128_off(r0, c, PU_BLK);
    int s = 0;
    uint32_t ph = 0;
    int32_t blocks = 0, items = 0, item = DYN ? -1 : (int32_t)blockIdx.x - (int32_t)gridDim.x;
    int4 h;
    while (pu_fetch<DYN, RI, DN>(a, s0, pt, item, h)) {
        const int32_t g = RI ? 0 : item / a.n_oct, nu = h.z, pre = nu < 2 ? nu : 2;
        /* dense mode: the sequence's block table row, its last written position, the first query's */
        const int32_t dseq = DN ? a.qseq[h.x] : 0;
        const int32_t *dbtr = DN ? a.bt + (int64_t)dseq * a.bt_stride : nullptr;
        const int64_t dlast = DN ? a.seq_last[dseq] : 0, dp0 = DN ? a.pos[h.x] : 0;
        if (!DYN && !RI && a.q_prefetch && item + (int32_t)gridDim.x < a.n_items) {
            /* the next item's Q (loaded only once the consumers release this one's) into L2 now: thread pt,
             * 2 of the 32 lines of query pt / 16 (its 16 heads are 4 contiguous KB) */
            const int32_t nx = item + (int32_t)gridDim.x;
            const int4 hn = a.hdr[nx];
            const int qq = pt >> 4;
            if (hn.z >= 0 && qq < hn.y) {
                const uint8_t *qr = (const uint8_t *)(a.q + ((int64_t)(hn.x + qq) * a.n_heads +
                                                             (int64_t)(nx / a.n_oct) * 16) *
                                                                128) +
                                    (pt & 15) * 256;
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(qr));
                asm volatile("prefetch.global.L2 [%0];\n" ::"l"(qr + 128));
            }
        }
        const int64_t off0 = ((int64_t)r0 * a.n_kv + g) * 256 + c * 16; /* in a page, from its base */
        const int4 *ua = a.uarr + (int64_t)item * (RI ? 2 : PU_UMAX);
        for (int32_t u = 0; u <= nu; u++) {
            if (u == pre) { /* Q after the first blocks: they go into stages freed during the last item */
                for (int w = 0; w < 2; w++) {
                    if (items > 0) mb_wait(s0 + PU_BAR_QEMPTY + 8 * w, (uint32_t)(items - 1) & 1u);
                    if (DYN && pt == 0) {
                        const uint32_t wd = s0 + PU_ITEM_W + 32 * w;
                        asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"r"(wd), "r"(h.x),
                                     "r"(h.y), "r"(h.z), "r"(h.w)
                                     : "memory");
                        asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(wd + 16), "r"(item) : "memory");
                    }
                    if (RI)
                        pu_load_q_ri(a, item, (h.x >> (16 * w)) & 0xFFFF, w, q_s + (uint32_t)w * PU_QWG_BYTES,
                                     s0 + PU_BAR_QFULL + 8 * w, pt);
                    else
                        pu_load_q(a, g, h.x, h.y, w, q_s + (uint32_t)w * PU_QWG_BYTES,
                                  s0 + PU_BAR_QFULL + 8 * w, pt);
                    if (DYN && pt == 0) mb_arrive(s0 + PU_BAR_QFULL + 8 * w); /* releases the words */
                }
            }
            if (u == nu) break;
            if (blocks >= PU_STAGES) mb_wait(s0 + PU_BAR_EMPTY + 8 * s, ph ^ 1u); /* its last use is done */
            const int4 e = DN ? pu_dense_entry(a, h, u, dp0, dbtr, dlast) : ua[u];
            const int valid = (e.z >> 8) & 0xFF;
            if (TMA && valid == PU_BLK) {
                /* a whole block: thread 0 writes the stage's words (published by its arrive) and issues the
                 * four boxes (K, V x two slabs); the other threads' plain arrivals make up the count */
                const uint32_t full = s0 + PU_BAR_FULL + 8 * s;
                if (pt == 0) {
                    pu_put_words(s0 + PU_META + 8 * s, e);
                    kn_mb_arrive_expect_tx(full, PU_STAGE_BYTES);
                    if (DN) mb_arrive(full); /* the count is 129 in dense mode, see below */
                    const uint32_t st = kv_s + (uint32_t)s * PU_STAGE_BYTES;
                    const int32_t col = (RI ? e.w : g) * 128, row = e.y * PU_BLK;
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        kn_tma_box(st + h * PU_BLK * 128, (uint64_t)&m.k, col + 64 * h, row, full, false, 0);
                        kn_tma_box(st + PU_KV_BYTES + h * PU_BLK * 128, (uint64_t)&m.v, col + 64 * h, row,
                                   full, false, 0);
                    }
                } else {
                    mb_arrive(full);
                }
                if (++s == PU_STAGES) s = 0, ph ^= 1u;
                blocks++;
                continue;
            }
            if (pt == 0) {
                if (DN) { /* the words from registers, published by one more (plain, releasing) arrival */
                    pu_put_words(s0 + PU_META + 8 * s, e);
                    mb_arrive(s0 + PU_BAR_FULL + 8 * s);
                } else {
                    kn_cp_async4(s0 + PU_META + 8 * s, &ua[u].x);
                    kn_cp_async4(s0 + PU_META + 8 * s + 4, &ua[u].z);
                }
            }
            /* pair mode: each entry has its own group */
            const int64_t page_off = (int64_t)e.y * PU_BLK * a.n_kv * 256 +
                                     (RI ? ((int64_t)r0 * a.n_kv + e.w) * 256 + c * 16 : off0);
            const uint8_t *kb = (const uint8_t *)a.kc + page_off, *vb = (const uint8_t *)a.vc + page_off;
            const uint32_t st = kv_s + (uint32_t)s * PU_STAGE_BYTES + dst0;
#pragma unroll
            for (int j = 0; j < PU_BLK / 8; j++) {
                const bool ok = r0 + 8 * j < valid;
                kn_cp_async16(st + j * 1024, ok ? kb + j * tok8 : (const uint8_t *)a.kc, ok ? 16 : 0);
                kn_cp_async16(st + PU_KV_BYTES + j * 1024, ok ? vb + j * tok8 : (const uint8_t *)a.kc,
                              ok ? 16 : 0);
            }
            mb_arrive_cp_async(s0 + PU_BAR_FULL + 8 * s);
            if (++s == PU_STAGES) s = 0, ph ^= 1u;
            blocks++;
        }
        items++;
    }
    if (DYN) /* no more items: item -1 to each consumer warpgroup, once it is done with the last Q */
        for (int w = 0; w < 2; w++) {
            if (items > 0) mb_wait(s0 + PU_BAR_QEMPTY + 8 * w, (uint32_t)(items - 1) & 1u);
            if (pt == 0)
                asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(s0 + PU_ITEM_W + 32 * w + 16), "r"(-1)
                             : "memory");
            mb_arrive(s0 + PU_BAR_QFULL + 8 * w);
            if (pt == 0) mb_arrive(s0 + PU_BAR_QFULL + 8 * w);
        }
    pu_cp_async_wait_all();
}

/* Consumer side of the item order: the next item and its header (false: none left). Static: the next item of
 * this CTA's sequence the plan took (the caller then waits for its Q); DYN: waits for the warpgroup's Q
 * (its qfull phase also publishes the item's words) and reads the item from shared memory. */
template <int DYN, int RI = 0, int DN = 0>
__device__ __forceinline__ bool pu_item_next(const pu_args &a, uint32_t s0, int wg, int32_t items,
                                             int32_t &item, int4 &h)
{
    if (DYN) {
        const uint32_t wd = s0 + PU_ITEM_W + 32 * wg;
        mb_wait(s0 + PU_BAR_QFULL + 8 * wg, (uint32_t)items & 1u);
        asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(item) : "r"(wd + 16) : "memory");
        asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(h.x), "=r"(h.y), "=r"(h.z), "=r"(h.w)
                     : "r"(wd)
                     : "memory");
        return item >= 0;
    } else {
        const int32_t n_items = pu_n_items<RI>(a);
        for (item += gridDim.x; item < n_items; item += gridDim.x) {
            h = DN ? pu_dense_header(a, item) : a.hdr[item];
            if (h.z >= 0) return true;
        }
        return false;
    }
}

/* Online softmax of one warp's 16 x 128 raw scores (its query's 16 heads; rows gid and gid + 8 per lane), the
 * running max m kept in the log2 domain (scale * log2 e folded in; scale > 0, so the max of the raw scores
 * scaled is the max of the scaled scores): keys past column rel are masked (only the query's own block has
 * any: MASK = 0 skips the test when rel says the whole block is visible); sc becomes the probabilities, l the
 * running sums, corr the factor the output accumulated so far must be scaled by. The scaling and the max
 * subtraction are one FFMA per score. FAST: the row max and the row sum use 4 partial accumulators per row
 * (dependency chains of 8 instead of 32 before the first exp2 can issue; the sum's order changes), and 2^x
 * is pu_ex2. FAST = 2 or 4 (consumer): as 1, and the value product is issued in 2 or 4 chunks of the keys
 * (see pu_pv_chunk). */
template <int MASK, int FAST>
__device__ __forceinline__ void pu_softmax_max(float (&sc)[64], int rel, float scale_log2, int tig,
                                               float (&m)[2], float (&l)[2], float (&corr)[2],
                                               float (&msafe)[2])
{
    float mx[2] = {-INFINITY, -INFINITY};
    float mp[2][4] = {{-INFINITY, -INFINITY, -INFINITY, -INFINITY},
                      {-INFINITY, -INFINITY, -INFINITY, -INFINITY}};
    if (MASK || rel < PU_BLK - 1) {
#pragma unroll
        for (int e = 0; e < 64; e++) {
            const int col = (e >> 2) * 8 + 2 * tig + (e & 1);
            sc[e] = col <= rel ? sc[e] : -INFINITY;
            if (FAST)
                mp[(e >> 1) & 1][(e >> 2) & 3] = fmaxf(mp[(e >> 1) & 1][(e >> 2) & 3], sc[e]);
            else
                mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], sc[e]);
        }
    } else {
#pragma unroll
        for (int e = 0; e < 64; e++) {
            if (FAST)
                mp[(e >> 1) & 1][(e >> 2) & 3] = fmaxf(mp[(e >> 1) & 1][(e >> 2) & 3], sc[e]);
            else
                mx[(e >> 1) & 1] = fmaxf(mx[(e >> 1) & 1], sc[e]);
        }
    }
    if (FAST) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
            mx[hh] = fmaxf(fmaxf(mp[hh][0], mp[hh][1]), fmaxf(mp[hh][2], mp[hh][3]));
    }
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
        mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
        const float mnew = fmaxf(m[hh], mx[hh] * scale_log2);
        msafe[hh] = mnew == -INFINITY ? 0.0f : mnew;
        corr[hh] = FAST ? pu_ex2(m[hh] - msafe[hh]) : exp2f(m[hh] - msafe[hh]);
        m[hh] = mnew;
        l[hh] *= corr[hh];
    }
}

/* Probabilities of scores [E0, E1) (columns 2 * E0 .. 2 * E1 - 1 of the block), added to the running sums. */
template <int E0, int E1, int FAST>
__device__ __forceinline__ void pu_softmax_exp(float (&sc)[64], const float (&msafe)[2], float scale_log2,
                                               float (&l)[2])
{
    if (FAST) {
        float lp[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int e = E0; e < E1; e++) {
            const float p = pu_ex2(fmaf(sc[e], scale_log2, -msafe[(e >> 1) & 1]));
            sc[e] = p;
            lp[(e >> 1) & 1][(e >> 2) & 3] += p;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) l[hh] += (lp[hh][0] + lp[hh][1]) + (lp[hh][2] + lp[hh][3]);
    } else {
#pragma unroll
        for (int e = E0; e < E1; e++) {
            const float p = exp2f(fmaf(sc[e], scale_log2, -msafe[(e >> 1) & 1]));
            sc[e] = p;
            l[(e >> 1) & 1] += p;
        }
    }
}

template <int MASK, int FAST>
__device__ __forceinline__ void pu_softmax(float (&sc)[64], int rel, float scale_log2, int tig, float (&m)[2],
                                           float (&l)[2], float (&corr)[2])
{
    float msafe[2];
    pu_softmax_max<MASK, FAST>(sc, rel, scale_log2, tig, m, l, corr, msafe);
    pu_softmax_exp<0, 64, FAST>(sc, msafe, scale_log2, l);
}

__device__ __forceinline__ void pu_rescale(float (&o)[64], const float (&corr)[2])
{
#pragma unroll
    for (int e = 0; e < 64; e++) o[e] *= corr[(e >> 1) & 1];
}

/* Probabilities (score accumulator layout) -> the A fragments of P V: keys 16kk.. of rows gid, gid + 8, for
 * k-steps K0 .. K1 - 1. */
template <int K0 = 0, int K1 = 8>
__device__ __forceinline__ void pu_pack_p(const float (&sc)[64], uint32_t (&pa)[8][4])
{
#pragma unroll
    for (int kk = K0; kk < K1; kk++) {
        pa[kk][0] = kn_pack_bf16(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = kn_pack_bf16(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = kn_pack_bf16(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = kn_pack_bf16(sc[8 * kk + 6], sc[8 * kk + 7]);
    }
}

__device__ __forceinline__ void pu_issue_s(float (&sc)[64], uint32_t qw_s, uint32_t k_s)
{
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wg_mma_ss(sc, wg_desc_kmajor(qw_s, 64, kk), wg_desc_kmajor(k_s, PU_BLK, kk), kk > 0);
    wg_commit();
}

template <int K0 = 0, int K1 = 8>
__device__ __forceinline__ void pu_issue_pv(float (&o)[64], const uint32_t (&pa)[8][4], uint32_t v_s)
{
#pragma unroll
    for (int kk = K0; kk < K1; kk++) wg_mma_rs_tb(o, pa[kk], wg_desc_mnmajor(v_s, PU_BLK, kk), 1);
    wg_commit();
}

/* Chunk C of NC (NC = 2 or 4; C >= NC: nothing) of a block's value product: the probabilities of its keys
 * (mine: this warp's query chose the block, else zeros), then its k-steps issued as one commit group. */
template <int C, int NC>
__device__ __forceinline__ void pu_pv_chunk(bool mine, float (&sc)[64], const float (&msafe)[2],
                                            float scale_log2, float (&l)[2], float (&o)[64],
                                            uint32_t (&pa)[8][4], uint32_t v_s)
{
    if (C >= NC) return;
    constexpr int E0 = C < NC ? C * 64 / NC : 0, E1 = C < NC ? (C + 1) * 64 / NC : 0;
    constexpr int K0 = E0 / 8, K1 = E1 / 8;
    if (mine) {
        pu_softmax_exp<E0, E1, 1>(sc, msafe, scale_log2, l);
        pu_pack_p<K0, K1>(sc, pa);
    } else {
#pragma unroll
        for (int kk = K0; kk < K1; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
    }
    wg_fence();
    pu_issue_pv<K0, K1>(o, pa, v_s);
}

/* Hybrid route: folds the pair path's partials of the rare slots of query i (normalized bf16 rows with their
 * log2-sum-exp) into this warp's unnormalized output rows of head row `row` (o, l over the union's blocks,
 * running max m in the log2 domain): both sides are rescaled to the joint max, so o / l afterwards is the
 * attention over all of the query's blocks. */
__device__ __forceinline__ void pu_merge_rare(const pu_args &a, float (&o)[64], float (&l)[2],
                                              const float (&m)[2], int hh, uint32_t rmask, int32_t i,
                                              int32_t g, int row, int tig)
{
    const int64_t pr0 = ((int64_t)i * a.n_kv + g) * a.ks;
    float mx = l[hh] > 0.0f ? m[hh] : -INFINITY;
    for (uint32_t r = rmask; r; r &= r - 1u) mx = fmaxf(mx, a.part_l[(pr0 + __ffs(r) - 1) * 16 + row]);
    const float ms = mx == -INFINITY ? 0.0f : mx;
    const float fu = l[hh] > 0.0f ? pu_ex2(m[hh] - ms) : 0.0f;
    float den = l[hh] * fu;
#pragma unroll
    for (int nt = 0; nt < 16; nt++) {
        o[4 * nt + 2 * hh] *= fu;
        o[4 * nt + 2 * hh + 1] *= fu;
    }
    for (uint32_t r = rmask; r; r &= r - 1u) {
        const int64_t pr = pr0 + __ffs(r) - 1;
        const float lj = a.part_l[pr * 16 + row];
        const float fj = lj == -INFINITY ? 0.0f : pu_ex2(lj - ms);
        den += fj;
        const uint32_t *src = (const uint32_t *)(a.part_o + (pr * 16 + row) * 128 + 2 * tig);
        uint32_t v[16];
#pragma unroll
        for (int nt = 0; nt < 16; nt++) v[nt] = src[4 * nt];
#pragma unroll
        for (int nt = 0; nt < 16; nt++) {
            o[4 * nt + 2 * hh] += fj * kn_bf16_lo(v[nt]);
            o[4 * nt + 2 * hh + 1] += fj * kn_bf16_hi(v[nt]);
        }
    }
    l[hh] = den;
}

/* KN_CUDA_UNION_RPF: the rare partials of query i (4 KB of bf16 rows and 64 bytes of log2-sum-exp per rare
 * slot, written by the pair path just before) into L2 at the start of the item, so that the epilogue's
 * pu_merge_rare does not wait for HBM: lane j prefetches line j of each partial. */
__device__ __forceinline__ void pu_prefetch_rare(const pu_args &a, int32_t i, int32_t g, int lane)
{
    const uint32_t rmask = a.rare[(int64_t)g * a.n + i];
    const int64_t pr0 = ((int64_t)i * a.n_kv + g) * a.ks;
    for (uint32_t r = rmask; r; r &= r - 1u) {
        const int64_t pr = pr0 + __ffs(r) - 1;
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.part_o + pr * 16 * 128 + lane * 64));
        if (lane == 0) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(a.part_l + pr * 16));
    }
}

/* The end of an item for a consumer warp whose query i0 + qi is valid (union route; pair mode writes
 * partials instead): each row's sum l over its quad, the hybrid route's rare slots merged in by log-sum-exp
 * (pu_merge_rare), then o / l stored as the query's bf16 output rows (heads gid and gid + 8 of group g). One
 * copy for the fast and the lookahead consumers, so the two stay bitwise equal. i0 and qi come apart so that
 * the rare mask's index is summed in 64 bits as before: the SASS of every k_pf_union is byte-identical. */
__device__ __forceinline__ void pu_store_query(const pu_args &a, float (&o)[64], float (&l)[2],
                                               const float (&m)[2], int32_t i0, int qi, int32_t g, int gid,
                                               int tig)
{
    /* hybrid route: the slots of this query the pair path attended to (warp-uniform) */
    const uint32_t rmask = a.rare ? a.rare[(int64_t)g * a.n + i0 + qi] : 0u;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
        l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
        if (rmask) pu_merge_rare(a, o, l, m, hh, rmask, i0 + qi, g, gid + 8 * hh, tig);
        const float inv = l[hh] > 0.0f ? 1.0f / l[hh] : 0.0f;
        uint16_t *dst =
            a.out + ((int64_t)(i0 + qi) * a.n_heads + (int64_t)g * 16 + gid + 8 * hh) * 128 + 2 * tig;
#pragma unroll
        for (int nt = 0; nt < 16; nt++)
            *(uint32_t *)(dst + nt * 8) =
                kn_pack_bf16(o[4 * nt + 2 * hh] * inv, o[4 * nt + 2 * hh + 1] * inv);
    }
}

/* A consumer warp (of 8): for each item, its warpgroup's share of the union blocks, then its query's output.
 * OVERLAP = 0: each block's score product, softmax and value product in turn. OVERLAP = 1: the value product
 * of a block runs on the tensor cores while the next block's softmax runs (FA3's intra-warpgroup overlap):
 * issue S(u) and P V(previous), wait for S(u), softmax, wait for P V, rescale O, pack P(u). The previous
 * block's stage is released only after its value product, so a warpgroup holds two stages; when its next
 * block is PU_STAGES or more blocks ahead, the pending product is finished first (its stage is the one that
 * block needs, and the producer could not fill it).
 * PP (pingpong, with OVERLAP = 0): on a block both warpgroups use, their products take turns on the tensor
 * cores, S(wg 0), S(wg 1), PV(wg 0), PV(wg 1), S(wg 0) of the next such block, ...: each issue waits for its
 * turn on a named barrier and passes the turn after it (FA3's warp scheduler barriers). Without this both
 * warpgroups issue at once, their products interleave and finish together, and both then run the softmax
 * while the tensor cores idle; in turns, one warpgroup's softmax runs under the other's products. Blocks only
 * one warpgroup uses are not ordered (both know which blocks those are from the stage's query mask, so they
 * agree on every turn). Warpgroup 1 passes one turn first, warpgroup 0 takes it back at the end. PP = 2:
 * only the score products take turns (S(wg 0), S(wg 1), S(wg 0), ...); the value products are not ordered. */
template <int OVERLAP, int PP, int FAST, int DYN, int RI = 0, int DN = 0>
__device__ __forceinline__ void pu_consume(const pu_args &a, uint32_t s0, uint32_t q_s, uint32_t kv_s,
                                           int warp, int lane)
{
    const int wg = warp >> 2, qi = warp, gid = lane >> 2, tig = lane & 3; /* qi: this warp's query */
    const uint32_t qw_s = q_s + (uint32_t)wg * PU_QWG_BYTES, wmask = 0xFu << (4 * wg);
    const uint32_t bar_qe = s0 + PU_BAR_QEMPTY + 8 * wg;
    const int turn_mine = PU_BAR_TURN + wg, turn_other = PU_BAR_TURN + 1 - wg;
    if (PP && wg == 1) pu_turn_pass(PU_BAR_TURN); /* warpgroup 0 goes first */
    int s = 0;
    uint32_t ph = 0;
    int32_t items = 0, item = DYN ? 0 : (int32_t)blockIdx.x - (int32_t)gridDim.x;
    int4 h;
    while (pu_item_next<DYN, RI, DN>(a, s0, wg, items, item, h)) {
        /* pair mode: this warp's pair (query * 32 + slot) and its warpgroup's group */
        const int32_t ri_e = RI ? a.ri_q[(int64_t)item * PU_Q + qi] : 0;
        const int32_t g = RI ? (h.x >> (16 * wg)) & 0xFFFF : item / a.n_oct, i0 = h.x, nu = h.z;
        const int32_t last_w = ((h.w >> (16 * wg)) & 0xFFFF) - 1; /* this warpgroup's last block (-1: none) */
        const bool qvalid = RI ? ri_e >= 0 : qi < h.y;
        const int32_t qrow = RI ? ri_e >> 5 : i0 + qi;
        const int64_t qpos = qvalid ? a.pos[qrow] : -1;
        if (!RI && a.rare_pf && a.rare && qvalid) pu_prefetch_rare(a, i0 + qi, g, lane);
        if (!DYN) mb_wait(s0 + PU_BAR_QFULL + 8 * wg, (uint32_t)items & 1u);
        wg_fence_proxy_async();
        if (last_w < 0) { /* nothing to do with this Q */
            __syncwarp();
            if (lane == 0) mb_arrive(bar_qe);
        }
        float o[64];
#pragma unroll
        for (int e = 0; e < 64; e++) o[e] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        uint32_t pa[8][4];
        int32_t pend = -1; /* OVERLAP: the block whose value product is still to run or running */
        uint32_t pend_s = 0;
        for (int32_t u = 0; u < nu; u++) {
            const uint32_t k_s = kv_s + (uint32_t)s * PU_STAGE_BYTES, v_s = k_s + PU_KV_BYTES;
            if (OVERLAP && pend >= 0 && u - pend >= PU_STAGES) {
                wg_touch(o);
                wg_fence();
                pu_issue_pv(o, pa, kv_s + pend_s * PU_STAGE_BYTES + PU_KV_BYTES);
                wg_wait<0>();
                wg_touch(o);
                __syncwarp();
                if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * pend_s);
                pend = -1;
            }
            mb_wait(s0 + PU_BAR_FULL + 8 * s, ph);
            uint32_t blk, uin;
            asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                         : "=r"(blk), "=r"(uin)
                         : "r"(s0 + PU_META + 8 * s));
            /* PP: both warpgroups use this block, so their products take turns (a vote: warp-uniform) */
            const bool turns = PP && __any_sync(0xffffffffu, (uin & 0x0Fu) != 0 && (uin & 0xF0u) != 0);
            /* warpgroup-uniform; a vote, so that the compiler knows the branch does not diverge */
            if (__any_sync(0xffffffffu, (uin & wmask) != 0)) {
                wg_fence_proxy_async(); /* the producer's cp.async writes (generic proxy) before wgmma reads
                                         */
                float sc[64];
                if (OVERLAP) { /* no pending block: its value product below runs with zero P */
                    const uint32_t keep = pend >= 0 ? 0xffffffffu : 0u; /* a mask, not a branch */
#pragma unroll
                    for (int kk = 0; kk < 8; kk++)
#pragma unroll
                        for (int j = 0; j < 4; j++) pa[kk][j] &= keep;
                }
                wg_touch(sc);
                wg_touch(o);
                wg_fence();
                if (turns) pu_turn_wait(turn_mine);
                pu_issue_s(sc, qw_s, k_s);
                if (turns) pu_turn_pass(turn_other);
                if (OVERLAP) { /* the previous block's value product, unconditional (zero P if none) */
                    pu_issue_pv(o, pa,
                                kv_s + (pend >= 0 ? pend_s : (uint32_t)s) * PU_STAGE_BYTES + PU_KV_BYTES);
                    wg_wait<1>();
                } else {
                    wg_wait<0>();
                }
                wg_touch(sc);
                /* warp-uniform: did this warp's query choose the block? */
                const bool mine = qvalid && ((uin >> qi) & 1u);
                /* keys the query sees: columns <= rel (a chosen block never starts after it); -1: none */
                const int64_t rel64 = mine ? qpos - (int64_t)blk * PU_BLK : -1;
                const int rel = rel64 < PU_BLK ? (int)rel64 : PU_BLK;
                float corr[2] = {1.0f, 1.0f};
                if (OVERLAP) {
                    /* no divergent code while the value product runs (ptxas would serialize the wgmma):
                     * every warp runs the softmax, a warp whose query did not choose the block on -inf */
                    pu_softmax<1, FAST>(sc, rel, a.scale_log2, tig, m, l, corr);
                    wg_wait<0>();
                    wg_touch(o);
                    __syncwarp();
                    if (pend >= 0 && lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * pend_s);
                    if (u == last_w) { /* Q is free for the next item */
                        __syncwarp();
                        if (lane == 0) mb_arrive(bar_qe);
                    }
                    pu_rescale(o, corr);
                    pu_pack_p(sc, pa);
                    pend = u;
                    pend_s = (uint32_t)s;
                } else {
                    if (u == last_w) { /* Q is free for the next item */
                        __syncwarp();
                        if (lane == 0) mb_arrive(bar_qe);
                    }
                    if (FAST >= 2) {
                        /* the value product in FAST chunks of the keys: each runs on the tensor cores while
                         * the next chunk's probabilities are computed (a vote: the branch is warp-uniform) */
                        const bool mine_w = __any_sync(0xffffffffu, mine);
                        float msafe[2] = {0.0f, 0.0f};
                        if (mine_w) {
                            pu_softmax_max<0, 1>(sc, rel, a.scale_log2, tig, m, l, corr, msafe);
                            if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f))
                                pu_rescale(o, corr);
                        }
                        wg_touch(o);
                        pu_pv_chunk<0, FAST>(mine_w, sc, msafe, a.scale_log2, l, o, pa, v_s);
                        pu_pv_chunk<1, FAST>(mine_w, sc, msafe, a.scale_log2, l, o, pa, v_s);
                        pu_pv_chunk<2, FAST>(mine_w, sc, msafe, a.scale_log2, l, o, pa, v_s);
                        pu_pv_chunk<3, FAST>(mine_w, sc, msafe, a.scale_log2, l, o, pa, v_s);
                        wg_wait<0>();
                        wg_touch(o);
                        __syncwarp();
                        if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * s);
                    } else {
                        if (mine) {
                            pu_softmax<0, FAST>(sc, rel, a.scale_log2, tig, m, l, corr);
                            /* the max rarely moves after the first blocks: skip the 64 multiplies then */
                            if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f))
                                pu_rescale(o, corr);
                            pu_pack_p(sc, pa);
                        } else {
#pragma unroll
                            for (int kk = 0; kk < 8; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
                        }
                        wg_touch(o);
                        wg_fence();
                        if (PP == 1 && turns) pu_turn_wait(turn_mine);
                        pu_issue_pv(o, pa, v_s);
                        if (PP == 1 && turns) pu_turn_pass(turn_other);
                        wg_wait<0>();
                        wg_touch(o);
                        __syncwarp();
                        if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * s);
                    }
                }
            } else {
                __syncwarp();
                if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * s);
            }
            if (++s == PU_STAGES) s = 0, ph ^= 1u;
        }
        if (OVERLAP) {
            /* the last value product, unconditional (with zero P when there is none: every stage holds finite
             * data, see the kernel's start), since ptxas serializes wgmma behind a divergent branch here */
            const uint32_t keep = pend >= 0 ? 0xffffffffu : 0u; /* a mask, not a branch */
#pragma unroll
            for (int kk = 0; kk < 8; kk++)
#pragma unroll
                for (int j = 0; j < 4; j++) pa[kk][j] &= keep;
            wg_touch(o);
            wg_fence();
            pu_issue_pv(o, pa, kv_s + (pend >= 0 ? pend_s : 0u) * PU_STAGE_BYTES + PU_KV_BYTES);
            wg_wait<0>();
            wg_touch(o);
            __syncwarp();
            if (pend >= 0 && lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * pend_s);
        }
        items++;
        if (!qvalid) continue;
        if (RI) { /* the pair's partial: normalized rows and their log2-sum-exp, as k_pf_attn writes them */
            const int64_t pr = ((int64_t)qrow * a.n_kv + g) * a.ks + (ri_e & 31);
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
                l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
                const int row = gid + 8 * hh;
                const float inv = l[hh] > 0.0f ? 1.0f / l[hh] : 0.0f;
                uint16_t *dst = a.ri_part_o + (pr * 16 + row) * 128 + 2 * tig;
#pragma unroll
                for (int nt = 0; nt < 16; nt++)
                    *(uint32_t *)(dst + nt * 8) =
                        kn_pack_bf16(o[4 * nt + 2 * hh] * inv, o[4 * nt + 2 * hh + 1] * inv);
                if (tig == 0) a.ri_part_l[pr * 16 + row] = l[hh] > 0.0f ? m[hh] + log2f(l[hh]) : -INFINITY;
            }
            continue;
        }
        pu_store_query(a, o, l, m, i0, qi, g, gid, tig);
    }
    if (PP && wg == 0) pu_turn_wait(PU_BAR_TURN); /* the turn warpgroup 1 passed last */
}

/* Lookahead consumer (KN_PF_UK_LOOKAHEAD): the fast consumer (FAST = 1), except that the score product of the
 * warpgroup's next block is issued right behind the value product of the current one, so the tensor cores get
 * both back to back instead of idling through the stage wait, mask load, votes and fences between them. The
 * next block is found (its stage waited for, unused blocks on the way released) before the value product is
 * issued, so no divergent code runs while a product is in flight (ptxas serializes wgmma otherwise), and the
 * stage release between the two waits is a predicated arrive, not a branch. Only blocks less than PU_STAGES
 * ahead are looked for: the current block's stage is still held, and the producer cannot fill a block
 * PU_STAGES ahead before it is released. */

/* mbarrier arrive by lane 0 only, as a predicated instruction (no branch while a wgmma is in flight) */
__device__ __forceinline__ void pu_arrive_lane0(uint32_t bar, int lane)
{
    asm volatile("{\n.reg .pred p;\n.reg .b64 st;\nsetp.eq.u32 p, %1, 0;\n"
                 "@p mbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar),
                 "r"(lane)
                 : "memory");
}

__device__ __forceinline__ void pu_step(int32_t &u, int &s, uint32_t &ph)
{
    u++;
    if (++s == PU_STAGES) s = 0, ph ^= 1u;
}

/* From block u on (cursor u, stage s, phase ph), up to block lim - 1: the first block this warpgroup uses
 * (true: the cursor stays on it, its stage full, its (block, mask) words in blk, uin); the others are waited
 * for and released. false: the cursor is at lim. */
__device__ __forceinline__ bool pu_next_used(uint32_t s0, uint32_t wmask, int lane, int32_t lim, int32_t &u,
                                             int &s, uint32_t &ph, uint32_t &blk, uint32_t &uin)
{
    while (u < lim) {
        mb_wait(s0 + PU_BAR_FULL + 8 * s, ph);
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(blk), "=r"(uin) : "r"(s0 + PU_META + 8 * s));
        if (__any_sync(0xffffffffu, (uin & wmask) != 0)) {
            wg_fence_proxy_async(); /* the producer's cp.async writes (generic proxy) before wgmma reads */
            return true;
        }
        __syncwarp();
        if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * s);
        pu_step(u, s, ph);
    }
    return false;
}

template <int DYN>
__device__ __forceinline__ void pu_consume_la(const pu_args &a, uint32_t s0, uint32_t q_s, uint32_t kv_s,
                                              int warp, int lane)
{
    const int wg = warp >> 2, qi = warp, gid = lane >> 2, tig = lane & 3;
    const uint32_t qw_s = q_s + (uint32_t)wg * PU_QWG_BYTES, wmask = 0xFu << (4 * wg);
    const uint32_t bar_qe = s0 + PU_BAR_QEMPTY + 8 * wg;
    int s = 0;
    uint32_t ph = 0;
    int32_t items = 0, item = DYN ? 0 : (int32_t)blockIdx.x - (int32_t)gridDim.x;
    int4 h;
    while (pu_item_next<DYN>(a, s0, wg, items, item, h)) {
        const int32_t g = item / a.n_oct, i0 = h.x, nu = h.z;
        const int32_t last_w = ((h.w >> (16 * wg)) & 0xFFFF) - 1;
        const bool qvalid = qi < h.y;
        const int64_t qpos = qvalid ? a.pos[i0 + qi] : -1;
        if (a.rare_pf && a.rare && qvalid) pu_prefetch_rare(a, i0 + qi, g, lane);
        if (!DYN) mb_wait(s0 + PU_BAR_QFULL + 8 * wg, (uint32_t)items & 1u);
        wg_fence_proxy_async();
        if (last_w < 0) {
            __syncwarp();
            if (lane == 0) mb_arrive(bar_qe);
        }
        float o[64], sc[64];
#pragma unroll
        for (int e = 0; e < 64; e++) o[e] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
        uint32_t pa[8][4];
        int32_t u = 0;
        uint32_t blk = 0, uin = 0;
        bool have = pu_next_used(s0, wmask, lane, nu, u, s, ph, blk, uin);
        if (__any_sync(0xffffffffu, have)) {
            wg_touch(sc);
            wg_touch(o);
            wg_fence();
            pu_issue_s(sc, qw_s, kv_s + (uint32_t)s * PU_STAGE_BYTES);
            wg_wait<0>();
            wg_touch(sc);
        }
        while (__any_sync(0xffffffffu, have)) {
            const int32_t cu = u;
            const int cs = s;
            const bool mine = qvalid && ((uin >> qi) & 1u);
            const int64_t rel64 = mine ? qpos - (int64_t)blk * PU_BLK : -1;
            const int rel = rel64 < PU_BLK ? (int)rel64 : PU_BLK;
            if (cu == last_w) { /* the warpgroup's last score product of the item is done: Q is free */
                __syncwarp();
                if (lane == 0) mb_arrive(bar_qe);
            }
            if (mine) {
                float corr[2] = {1.0f, 1.0f};
                pu_softmax<0, 1>(sc, rel, a.scale_log2, tig, m, l, corr);
                if (!__all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f)) pu_rescale(o, corr);
                pu_pack_p(sc, pa);
            } else {
#pragma unroll
                for (int kk = 0; kk < 8; kk++) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
            }
            pu_step(u, s, ph);
            /* the next block this warpgroup uses, if it is less than PU_STAGES ahead */
            const int32_t lim = cu + PU_STAGES < nu ? cu + PU_STAGES : nu;
            uint32_t nblk = 0, nuin = 0;
            const bool near = pu_next_used(s0, wmask, lane, lim, u, s, ph, nblk, nuin);
            const uint32_t v_s = kv_s + (uint32_t)cs * PU_STAGE_BYTES + PU_KV_BYTES;
            wg_touch(o);
            wg_fence();
            pu_issue_pv(o, pa, v_s);
            if (__any_sync(0xffffffffu, near)) {
                wg_touch(sc);
                wg_fence(); /* orders the score registers' last reads (the packing) before the product */
                pu_issue_s(sc, qw_s, kv_s + (uint32_t)s * PU_STAGE_BYTES);
                wg_wait<1>();
                wg_touch(o);
                pu_arrive_lane0(s0 + PU_BAR_EMPTY + 8 * cs, lane);
                wg_wait<0>();
                wg_touch(sc);
                blk = nblk;
                uin = nuin;
                have = true;
            } else {
                wg_wait<0>();
                wg_touch(o);
                __syncwarp();
                if (lane == 0) mb_arrive(s0 + PU_BAR_EMPTY + 8 * cs);
                /* nothing held now: the next used block may be any distance ahead */
                have = pu_next_used(s0, wmask, lane, nu, u, s, ph, blk, uin);
                if (__any_sync(0xffffffffu, have)) {
                    wg_touch(sc);
                    wg_fence();
                    pu_issue_s(sc, qw_s, kv_s + (uint32_t)s * PU_STAGE_BYTES);
                    wg_wait<0>();
                    wg_touch(sc);
                }
            }
        }
        items++;
        if (!qvalid) continue;
        pu_store_query(a, o, l, m, i0, qi, g, gid, tig);
    }
}

template <int OVERLAP, int PP, int FAST, int LA = 0, int DYN = 0, int RI = 0, int TMA = 0, int DN = 0>
__global__ void __launch_bounds__(PU_THREADS, 1)
    k_pf_union(const pu_args a, const __grid_constant__ pu_maps m)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t s0 = kn_smem_addr(smem);
    const uint32_t q_s = (s0 + PU_HEAD_BYTES + 1023u) & ~1023u, kv_s = q_s + 2 * PU_QWG_BYTES;
    /* stages start as zeros, so that a product over a stage the producer has not filled yet (the overlap
     * variant's zero-P value product) never meets NaN bit patterns */
    for (int32_t k = tid; k < PU_STAGES * PU_STAGE_BYTES / 16; k += PU_THREADS)
        *(uint4 *)(smem + (kv_s - s0) + 16 * k) = make_uint4(0u, 0u, 0u, 0u);
    wg_fence_proxy_async();
    if (tid == 0) {
        for (int s = 0; s < PU_STAGES; s++) {
            /* every producer thread, through cp.async (or plain arrivals beside thread 0's expect_tx); DN:
             * thread 0 once more, after it wrote the stage's words from registers */
            mb_init(s0 + PU_BAR_FULL + 8 * s, 128 + DN);
            mb_init(s0 + PU_BAR_EMPTY + 8 * s, 8); /* one arrival per consumer warp */
        }
        for (int w = 0; w < 2; w++) {
            /* every producer thread, through cp.async; DYN: thread 0 once more, for the item words */
            mb_init(s0 + PU_BAR_QFULL + 8 * w, 128 + DYN);
            mb_init(s0 + PU_BAR_QEMPTY + 8 * w, 4); /* the warpgroup's warps */
        }
        mb_init_fence(); /* the TMA producer's copies complete on them */
    }
    __syncthreads();
    if (warp >= PU_PRODUCER) {
        pu_setmaxnreg_dec<DN ? 56 : 48>(); /* DN: makes the entries; 168 - 56 frees what 224 takes */
        pu_produce<DYN, RI, TMA, DN>(a, m, s0, q_s, kv_s, tid - 32 * PU_PRODUCER);
    } else {
        pu_setmaxnreg_inc<224>();
        if (LA)
            pu_consume_la<DYN>(a, s0, q_s, kv_s, warp, lane);
        else
            pu_consume<OVERLAP, PP, FAST, DYN, RI, DN>(a, s0, q_s, kv_s, warp, lane);
    }
}

/* Pair mode: item it = tiles 2 it (consumer warpgroup 0) and 2 it + 1 (warpgroup 1) of the pair path, one
 * union entry per distinct bucket (block, page, query mask | rows written << 8, group). */
__global__ void k_pf_pair_items(const pu_args a)
{
    const int32_t it = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x), total = *a.ri_total;
    if (2 * it >= total) return;
    int4 ent[2] = {make_int4(0, 0, 0, 0), make_int4(0, 0, 0, 0)};
    int32_t nu = 0, bucket0 = -1, gw[2] = {0, 0}, last[2] = {-1, -1};
    for (int w = 0; w < 2; w++) {
        const int32_t t = 2 * it + w;
        const int4 tl = t < total ? a.ri_tiles[t] : make_int4(-1, 0, 0, 0);
        for (int j = 0; j < 4; j++)
            a.ri_q[(int64_t)it * PU_Q + 4 * w + j] = j < tl.z ? a.ri_list[tl.y + j] : -1;
        if (tl.z <= 0) continue;
        const uint32_t bits = ((1u << tl.z) - 1u) << (4 * w);
        if (nu == 1 && tl.x == bucket0) { /* both tiles of one bucket: one block for both warpgroups */
            ent[0].z |= (int32_t)bits;
            gw[w] = gw[0];
            last[w] = 0;
            continue;
        }
        const int32_t g = tl.x / a.total_blocks, rem = tl.x - g * a.total_blocks;
        int32_t lo = 0, hi = a.n_seqs - 1; /* the last sequence whose first block is <= rem */
        while (lo < hi) {
            const int32_t mid = (lo + hi + 1) >> 1;
            if (a.seq_blk_off[mid] <= rem)
                lo = mid;
            else
                hi = mid - 1;
        }
        const int32_t b = rem - a.seq_blk_off[lo];
        const int32_t page = a.bt[(int64_t)lo * a.bt_stride + b];
        int64_t valid = a.seq_last[lo] - (int64_t)b * PU_BLK + 1;
        valid = page < 0 ? 0 : valid < PU_BLK ? valid : PU_BLK;
        ent[nu] = make_int4(b, page < 0 ? 0 : page, (int32_t)(bits | ((uint32_t)valid << 8)), g);
        if (nu == 0) bucket0 = tl.x;
        gw[w] = g;
        last[w] = nu++;
    }
    for (int32_t u = 0; u < nu; u++) a.uarr[(int64_t)it * 2 + u] = ent[u];
    a.hdr[it] = make_int4(gw[0] | (gw[1] << 16), PU_Q, nu, (last[0] + 1) | ((last[1] + 1) << 16));
}

/* ---- host ---- */

static int32_t pu_items(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb)
{
    return qb->n_tiles * (KN_CUDA_QTILE / PU_Q) * sh->n_kv;
}

int kn_pf_union_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int32_t ks)
{
    static int smem_ok = -1; /* the device's opt-in shared memory per block holds the ring */
    if (smem_ok < 0) {
        int dev = 0, v = 0;
        smem_ok = cudaGetDevice(&dev) == cudaSuccess &&
                  cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
                  v >= PU_SMEM;
    }
    return smem_ok && sh->head_dim == 128 && sh->block == PU_BLK && sh->n_heads == 16 * sh->n_kv &&
           sh->scale > 0 && ks >= 1 && PU_Q * ks <= PU_PLAN_THREADS && qb->tiles && qb->n_tiles > 0 &&
           (int64_t)qb->n_tiles * (KN_CUDA_QTILE / PU_Q) * sh->n_kv < INT32_MAX / PU_UMAX;
}

const uint32_t *kn_pf_union_rare_masks(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                       const void *ws)
{
    return (const uint32_t *)((const int4 *)ws + (size_t)pu_items(sh, qb) * (1 + PU_UMAX));
}

size_t kn_pf_union_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb)
{
    if (!qb->n_tiles) return 0;
    /* headers, union lists, the hybrid route's rare-slot masks (one word per (group, query)), a counter */
    return (size_t)pu_items(sh, qb) * sizeof(int4) * (1 + PU_UMAX) +
           sizeof(uint32_t) * (size_t)sh->n_kv * qb->n + 16; /* + the dynamic order's item counter */
}

/* The kernel arguments every union launch (tile unions, pair mode) takes from the batch, cache and shape. */
static pu_args pu_args_base(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            const struct kn_cuda_cache *c, const void *q, int32_t ks)
{
    pu_args a = {};
    a.q = (const uint16_t *)q;
    a.ks = ks;
    a.pos = qb->pos;
    a.seq_last = qb->seq_last;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.kc = (const uint16_t *)c->k;
    a.vc = (const uint16_t *)c->v;
    a.n = qb->n;
    a.n_heads = sh->n_heads;
    a.n_kv = sh->n_kv;
    a.scale_log2 = sh->scale * 1.4426950408889634f;
    return a;
}

/* The TMA producer's maps of this cache (KN_CUDA_UNION_TMA; false: the cp.async producer, as when the cache's
 * page count is unknown or the driver has no encoder) */
static bool pu_maps_make(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c, pu_maps *m)
{
    memset(m, 0, sizeof *m);
    if (!kn_cuda_knob("KN_CUDA_UNION_TMA", KN_PF_UNION_TMA) || c->n_pages <= 0 ||
        c->n_pages > INT32_MAX / PU_BLK)
        return false;
    const int64_t rows = c->n_pages * PU_BLK, cols = (int64_t)sh->n_kv * 128;
    return kn_tma_encode_2d(&m->k, c->k, rows, cols, cols, 64, PU_BLK, 0) &&
           kn_tma_encode_2d(&m->v, c->v, rows, cols, cols, 64, PU_BLK, 0);
}

extern "C" int kn_cuda_prefill_tma(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c)
{
    pu_maps m;
    CUtensorMap km;
    const bool sel =
        kn_index_prefill_supported(sh, c) && kn_select_prefill_wgmma_ok(0) && kn_select_prefill_tma(c, &km);
    return (pu_maps_make(sh, c, &m) ? 1 : 0) | (sel ? 2 : 0);
}

int32_t kn_pf_union_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                           const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                           int32_t sel_stride, int32_t ks, int32_t min_eff, int overlap, void *out,
                           uint8_t *handled, void *ws, const struct kn_pf_union_rare *rare, int phases,
                           cudaStream_t stream, struct mm_err *err)
{
    pu_args a = pu_args_base(sh, qb, c, q, ks);
    a.sel = sel;
    a.sel_stride = sel_stride;
    a.tiles = qb->tiles;
    a.qseq = qb->qseq;
    a.min_eff = min_eff;
    a.n_oct = qb->n_tiles * (KN_CUDA_QTILE / PU_Q);
    a.n_items = pu_items(sh, qb);
    a.out = (uint16_t *)out;
    a.handled = handled;
    a.hdr = (int4 *)ws;
    a.uarr = a.hdr + a.n_items;
    a.rare = rare ? (uint32_t *)(a.uarr + (int64_t)a.n_items * PU_UMAX) : NULL;
    a.part_o = rare ? (const uint16_t *)rare->part_o : NULL;
    a.part_l = rare ? rare->part_l : NULL;
    a.counter = (int32_t *)(a.uarr + (int64_t)a.n_items * PU_UMAX) + (int64_t)sh->n_kv * qb->n;
    a.q_prefetch = kn_cuda_knob("KN_CUDA_UNION_QPF", KN_PF_UNION_QPF);
    a.rare_cost = kn_cuda_knob_int("KN_CUDA_UNION_RARE_COST", KN_PF_UNION_RARE_COST);
    a.rare_cap = kn_cuda_knob_int("KN_CUDA_UNION_RARE_CAP", KN_PF_UNION_RARE_CAP);
    a.rare_pf = kn_cuda_knob("KN_CUDA_UNION_RPF", KN_PF_UNION_RPF);
    if (phases & KN_PF_UNION_PLAN) {
        const dim3 pg((unsigned)a.n_oct, (unsigned)sh->n_kv);
        if (kn_cuda_knob("KN_CUDA_UNION_PLAN", KN_PF_UNION_PLAN_V))
            k_pf_union_plan<1><<<pg, PU_PLAN_THREADS, 0, stream>>>(a);
        else
            k_pf_union_plan<0><<<pg, PU_PLAN_THREADS, 0, stream>>>(a);
        KN_LAUNCHED("kn_cuda attention (prefill union plan)");
    }
    if (!(phases & KN_PF_UNION_ATTEND)) return MM_OK;
    const int v = overlap >= 0 && overlap < KN_PF_UK_COUNT ? overlap : KN_PF_UNION_KERNEL;
    /* dynamic item order, for the fast and lookahead consumers */
    const int dyn = kn_cuda_knob("KN_CUDA_UNION_DYN", KN_PF_UNION_DYN);
    pu_maps m;
    const bool tma = pu_maps_make(sh, c, &m);
    void (*kern)(pu_args, pu_maps) =
        tma && v == KN_PF_UK_FAST && !dyn ? k_pf_union<0, 0, 1, 0, 0, 0, 1>
        : v == KN_PF_UK_OVERLAP           ? k_pf_union<1, 0, 0>
        : v == KN_PF_UK_PINGPONG          ? k_pf_union<0, 1, 0>
        : v == KN_PF_UK_PP_FAST           ? k_pf_union<0, 1, 1>
        : v == KN_PF_UK_FAST              ? (dyn ? k_pf_union<0, 0, 1, 0, 1> : k_pf_union<0, 0, 1>)
        : v == KN_PF_UK_PPS_FAST          ? k_pf_union<0, 2, 1>
        : v == KN_PF_UK_SPLIT             ? k_pf_union<0, 0, 2>
        : v == KN_PF_UK_SPLIT4            ? k_pf_union<0, 0, 4>
        : v == KN_PF_UK_LOOKAHEAD         ? (dyn ? k_pf_union<0, 0, 1, 1, 1> : k_pf_union<0, 0, 1, 1>)
                                          : k_pf_union<0, 0, 0>;
    KN_CU(kn_smem_attr((const void *)kern, PU_SMEM), "kn_cuda attention (prefill union): shared memory");
    const int32_t grid = kn_cuda_sm_count() < a.n_items ? kn_cuda_sm_count() : a.n_items;
    kern<<<(unsigned)grid, PU_THREADS, PU_SMEM, stream>>>(a, m);
    KN_LAUNCHED("kn_cuda attention (prefill union)");
    return MM_OK;
}

int kn_pf_union_dense_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb)
{
    /* the header's 16-bit last-block fields bound the context: 65535 blocks (8M tokens at 128) */
    return kn_pf_union_supported(sh, qb, 1) && qb->max_blocks < 65535;
}

int32_t kn_pf_union_dense_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const void *q, void *out, cudaStream_t stream,
                                 struct mm_err *err)
{
    pu_args a = pu_args_base(sh, qb, c, q, 1);
    a.tiles = qb->tiles;
    a.qseq = qb->qseq;
    a.n_oct = qb->n_tiles * (KN_CUDA_QTILE / PU_Q);
    a.n_items = pu_items(sh, qb);
    a.out = (uint16_t *)out;
    pu_maps m;
    /* the consumer (KN_CUDA_DENSE_KERNEL, KN_PF_UK_*: fast, overlap, pingpong fast, score pingpong fast,
     * split), measured in dense mode where every warp uses every block but its queries' last; TMA only */
    const int v = kn_cuda_knob_int("KN_CUDA_DENSE_KERNEL", KN_PF_UK_FAST);
    void (*kern)(pu_args, pu_maps) = !pu_maps_make(sh, c, &m) ? k_pf_union<0, 0, 1, 0, 0, 0, 0, 1>
                                     : v == KN_PF_UK_OVERLAP  ? k_pf_union<1, 0, 0, 0, 0, 0, 1, 1>
                                     : v == KN_PF_UK_PP_FAST  ? k_pf_union<0, 1, 1, 0, 0, 0, 1, 1>
                                     : v == KN_PF_UK_PPS_FAST ? k_pf_union<0, 2, 1, 0, 0, 0, 1, 1>
                                     : v == KN_PF_UK_SPLIT    ? k_pf_union<0, 0, 2, 0, 0, 0, 1, 1>
                                                              : k_pf_union<0, 0, 1, 0, 0, 0, 1, 1>;
    KN_CU(kn_smem_attr((const void *)kern, PU_SMEM),
          "kn_cuda attention (dense prefill, wgmma): shared memory");
    const int32_t grid = kn_cuda_sm_count() < a.n_items ? kn_cuda_sm_count() : a.n_items;
    kern<<<(unsigned)grid, PU_THREADS, PU_SMEM, stream>>>(a, m);
    KN_LAUNCHED("kn_cuda attention (dense prefill, wgmma)");
    return MM_OK;
}

int kn_pf_union_pairs_supported(const struct kn_cuda_msa_shape *sh)
{
    int dev = 0, v = 0;
    return sh->head_dim == 128 && sh->block == PU_BLK && sh->n_heads == 16 * sh->n_kv && sh->n_kv < 65536 &&
           sh->scale > 0 && cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
           v >= PU_SMEM;
}

size_t kn_pf_union_pairs_ws(int64_t max_tiles)
{
    const int64_t items = (max_tiles + 1) / 2;
    /* headers, 2 union entries and 8 pair entries per item */
    return (size_t)items * (3 * sizeof(int4) + PU_Q * sizeof(int32_t));
}

int32_t kn_pf_union_pairs_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const void *q, int32_t ks,
                                 const struct kn_pf_union_pairs *p, cudaStream_t stream, struct mm_err *err)
{
    const int64_t max_items = (p->max_tiles + 1) / 2;
    if (max_items <= 0) return MM_OK;
    if (max_items >= INT32_MAX / 2)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda attention (prefill pairs, wgmma): %lld tiles",
                          (long long)p->max_tiles);
    pu_args a = pu_args_base(sh, qb, c, q, ks);
    a.n_oct = 1;
    a.n_items = (int32_t)max_items;
    a.hdr = (int4 *)p->items;
    a.uarr = a.hdr + max_items;
    a.ri_q = (int32_t *)(a.uarr + 2 * max_items);
    a.ri_total = p->n_tiles;
    a.ri_tiles = p->tiles;
    a.ri_list = p->list;
    a.seq_blk_off = qb->seq_blk_off;
    a.n_seqs = qb->n_seqs;
    a.total_blocks = qb->total_blocks;
    a.ri_part_o = (uint16_t *)p->part_o;
    a.ri_part_l = p->part_l;
    k_pf_pair_items<<<(unsigned)((max_items + 255) / 256), 256, 0, stream>>>(a);
    KN_LAUNCHED("kn_cuda attention (prefill pairs, wgmma items)");
    pu_maps m;
    void (*kern)(pu_args, pu_maps) =
        pu_maps_make(sh, c, &m) ? k_pf_union<0, 0, 1, 0, 0, 1, 1> : k_pf_union<0, 0, 1, 0, 0, 1>;
    KN_CU(kn_smem_attr((const void *)kern, PU_SMEM),
          "kn_cuda attention (prefill pairs, wgmma): shared memory");
    const int64_t grid = kn_cuda_sm_count() < max_items ? kn_cuda_sm_count() : max_items;
    kern<<<(unsigned)grid, PU_THREADS, PU_SMEM, stream>>>(a, m);
    KN_LAUNCHED("kn_cuda attention (prefill pairs, wgmma)");
    return MM_OK;
}
