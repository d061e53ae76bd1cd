/* Paged attention for few queries per sequence (decode), sparse or dense: the KV-group dimension is flattened
 * into the batch, so each (query, KV group) row is an independent paged GQA problem with 16 query heads
 * against its own page list: the selected blocks (sparse) or every visible block (dense), read through a
 * strided view of the paged cache (token stride n_kv * head_dim). Long lists are split over several CTAs
 * (split-K) whose partial outputs are merged by their log-sum-exp.
 *
 * CTA = (row, split), 4 warps. Pages stream through a 3-stage cp.async ring (K and V of one 128-token page
 * per stage, rows past the query's position zero-filled); each warp folds 32 keys of every page into its own
 * online softmax, and the 4 warps are combined through shared memory at the end.
 * Shapes: head_dim 128, block 128, n_heads / n_kv <= 16.
 *
 * Fused variant (FUSED, kn_attn_decode_fused): the decode tail of an MSA layer in one launch. Each CTA
 * selects its row's blocks from the index scores itself (kn_topk_row; every split of a row does the same
 * selection from L2-resident scores, which costs less than a separate top-k launch and its gap), and the
 * splits of a row (<= 8, or <= 16 with non-portable clusters) form a thread-block cluster. CTA c of the
 * cluster owns heads c, c + n_split, ...: every CTA stores its normalized partial of each head and its
 * log-sum-exp straight into the owner's shared memory (st.async, counted on the owner's mbarrier), and the
 * owner merges once its bytes are in (KN_CUDA_MERGE_PUSH, default on; measured 1-4 us faster than the pulled
 * merge on H200s, which needs two cluster barriers: each compiles to a GPU-scope fence). So there are no
 * partials in global memory and no merge launch. KN_CUDA_MERGE_PUSH=0: the previous merge, each CTA writes
 * its partial to its own shared memory and after a cluster barrier reads its peers' through distributed
 * shared memory (all remote loads of its heads issued before any is used; KN_CUDA_MERGE_SERIAL=1: one at a
 * time). KN_CUDA_TOPK_SPLIT=1/2: each CTA selects only from its 1/n_split slice of the row and the lists are
 * pushed to every peer, then merged by rank (1) or by one warp's k-way merge (2); exact, but not faster than
 * every CTA selecting from the whole row (docs/progress/cuda-tail.md), so off. It is launched with
 * programmatic dependent launch: Q is loaded before waiting on the index kernel. With 16 splits a CTA holds
 * one page, so one stage of shared memory is enough (68 KB instead of 196 KB), which also lets it start on an
 * SM the index scan is still leaving; the launch pads it to one CTA per SM so that the page reads are spread
 * over 16 SMs.
 * What the tail's time is made of (timestamps and SASS, docs/progress/cuda-tail.md): each phase takes about
 * 0.1-0.15 us per KB of code it executes, whatever its memory traffic (one warp per scheduler running
 * dependent chains, or cold instruction fetch after the index scan): fewer instructions per warp is the
 * lever. Hence (docs/progress/cuda-t8.md): the 16-split tail runs 8 warps per CTA (KN_CUDA_TAIL_WARPS,
 * default 8; half the scores, page copies and keys per warp), top-k writes its candidates by walking each
 * thread's candidate mask instead of a store per score (KN_CUDA_TOPK_BF=2, default). */
#include <stdlib.h>
#include <string.h>

#include "kn_attn_warp.cuh"
#include "kn_decode_prof.cuh"
#include "kn_msa_kernels.cuh"
#include "kn_topk_row.cuh"

#define DEC_WARPS 4
#define DEC_THREADS (DEC_WARPS * 32)
#define DEC_BLK 128
#define DEC_STAGES 3
/* An item is ROWS tokens of a page: the whole page, or half of it when a batch has too few pages to give
 * every SM work (batch 1: 4 rows x 16 pages), so that twice as many CTAs share the reads. */
#define DEC_TILE_BYTES(ROWS) ((ROWS)*AW_ROW_BYTES)
#define DEC_STAGE_BYTES(ROWS) (2 * DEC_TILE_BYTES(ROWS))
#define DEC_Q_OFF_ST(ROWS, ST) ((ST)*DEC_STAGE_BYTES(ROWS))
#define DEC_SMEM_ST(ROWS, ST) (DEC_Q_OFF_ST(ROWS, ST) + 16 * AW_ROW_BYTES)
#define DEC_SMEM(ROWS) DEC_SMEM_ST(ROWS, DEC_STAGES)
/* fused: this split's merged partial [16][128] f32 + log2-sum-exp [16], clear of the 4-warp combine area */
#define DEC_X_OFF 40960
#define DEC_CO_STRIDE (AW_D + 8) /* floats per row of the 4-warp combine area (padded: no bank conflicts) */
#define DEC_FUSED_MAX_SPLIT 16   /* non-portable cluster size (8 is the portable one) */
#define DEC_PORTABLE_SPLIT 8
#define DEC_TOPK_VPT 64 /* scores per thread: 8192 blocks (1M context) in one round */
/* Dynamic shared memory that keeps a one-stage fused CTA alone on its SM (two would need > 228 KB) while an
 * index-scan CTA (<= 110 KB) can still share it. */
#define DEC_SMEM_ONE_PER_SM (114 * 1024)

/* Split selection (KN_CUDA_TOPK_SPLIT): scores per thread of a CTA's slice of the row (512 = 1/16 of a 1M
 * row in one round; longer slices take more rounds) */
#define DEC_TOPK_SPLIT_VPT 4
/* Pushed merge (KN_CUDA_MERGE_PUSH): the partials a CTA receives for the heads it owns, [slot][AW_D] f32
 * then [slot] log2-sum-exp, slot = split * heads_per_owner + j; past the stage ring and Q, so peers may write
 * it at any time. ns * ceil(hpg / ns) <= hpg + ns - 1 < 32 slots. */
#define DEC_RECV_SLOTS 32
#define DEC_RECV_BYTES (DEC_RECV_SLOTS * (AW_D + 1) * 4)
/* then the split selection's lists (u64 keys): every slice's [DEC_FUSED_MAX_SPLIT][KN_CUDA_MAX_TOPK], then
 * this slice's own. Dynamic, so that the default route's static shared memory stays small: a padded 16-split
 * CTA (DEC_SMEM_ONE_PER_SM) must still fit beside an index-scan CTA. */
#define DEC_XK_BYTES (DEC_FUSED_MAX_SPLIT * KN_CUDA_MAX_TOPK * 8)
#define DEC_XCHG_BYTES (DEC_RECV_BYTES + DEC_XK_BYTES + KN_CUDA_MAX_TOPK * 8)
/* The combine area of NW warps ([NW][16][DEC_CO_STRIDE] partials, then m and l), and where the receive area
 * starts: past the stage ring and Q, and past the combine area, which with 8 warps (70 KB) is larger than
 * one stage and Q (68 KB). */
#define DEC_CO_BYTES(NW) ((NW)*16 * (DEC_CO_STRIDE + 2) * 4)
#define DEC_RECV_OFF(ROWS, ST, NW)                                                                           \
    (DEC_CO_BYTES(NW) > DEC_SMEM_ST(ROWS, ST) ? (DEC_CO_BYTES(NW) + 127) & ~127 : DEC_SMEM_ST(ROWS, ST))
/* 8 warps per CTA in the fused tail (KN_CUDA_TAIL_WARPS=8): the tail's phases cost about their executed
 * instructions per warp (docs/progress/cuda-tail.md), so twice the warps each load half the scores, gather
 * half the candidates, issue half the page copies and fold 16 instead of 32 keys of the page. Only with the
 * whole-row selection and the pushed merge. */
#define DEC_TAIL_WIDE 8
/* its register cap: 256 threads x 136 fit beside one index-scan CTA (8 warps x 120 allocated), so that a
 * tail CTA can start on an SM the scan is still leaving, as the 4-warp one (128 threads x 256) does */
#define DEC_TAIL_WIDE_REGS 136

/* ---- mbarriers and asynchronous stores into a peer's shared memory (sm_90) ----
 * Used by the split selection and the pushed merge: each CTA pushes its data into the owner's shared memory
 * with st.async, which counts the bytes on the owner's mbarrier, and the owner waits for the expected byte
 * count: one one-way trip, no cluster barrier (which compiles to a GPU-scope fence, ~1-2 us measured). */
__device__ __forceinline__ void dec_mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void dec_mbar_expect(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void dec_mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n\t.reg .pred p;\n"
                 "DEC_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra DEC_WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* the peers' mbarrier inits visible before any st.async reaches them: arrive at entry, wait before the first
 * push (the CTAs of a cluster start together, long before the index scan ends) */
__device__ __forceinline__ void dec_cluster_arrive_init(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n\tbarrier.cluster.arrive.relaxed.aligned;\n" ::
                     : "memory");
}

__device__ __forceinline__ void dec_cluster_wait(void)
{
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void dec_st_async_u64(uint32_t addr, unsigned long long v, uint32_t bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64 [%0], %1, [%2];\n" ::"r"(addr),
                 "l"(v), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void dec_st_async_f32(uint32_t addr, float v, uint32_t bar)
{
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(addr),
                 "f"(v), "r"(bar)
                 : "memory");
}

__device__ __forceinline__ void dec_st_async_f32x4(uint32_t addr, float4 v, uint32_t bar)
{
    asm volatile(
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(
            addr),
        "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
        : "memory");
}

/* aw_step (kn_attn_warp.cuh) with Q's fragments read from shared memory at each k-step instead of held in
 * 32 registers: the 8-warp tail under its register cap (DEC_TAIL_WIDE_REGS) does not spill. A CTA of the
 * 16-split tail folds one page, so Q is read once either way. */
template <int NK>
__device__ __forceinline__ void dec_step_qs(aw_state &st, uint32_t q_s, uint32_t k_s, uint32_t v_s, int key0,
                                            int64_t kpos, int64_t qpos, float scale_log2, int lane)
{
    const int m = lane >> 3;
    aw_step_q<NK>(
        st,
        [&](int ks, uint32_t f[4]) {
            kn_ldsm_x4(f, aw_row_addr(q_s, (m & 1) * 8 + (lane & 7), 2 * ks + (m >> 1)));
        },
        k_s, v_s, key0, kpos, qpos, scale_log2, lane);
}

/* heads of the row that CTA c of a cluster of ns merges (h = c, c + ns, ...) */
__device__ __forceinline__ int dec_owned_heads(int c, int ns, int hpg)
{
    return c < hpg ? (hpg - c + ns - 1) / ns : 0;
}

/* Benchmark hook (kn_decode_prof.cuh): where the fused kernel writes per-CTA timestamps, NULL when off. */
static unsigned long long *g_dec_prof;

struct dec_args {
    const uint16_t *q;
    const int32_t *qseq;
    const int64_t *pos;
    const int32_t *bt;
    int32_t bt_stride;
    const uint16_t *kc, *vc;
    int32_t n, n_heads, n_kv, hpg;
    float scale_log2;
    const int32_t *sel; /* NULL = dense */
    int32_t sel_k, sel_stride;
    int32_t n_split;
    uint16_t *out; /* final output when n_split == 1 */
    float *part_o; /* [rows][n_split][16][128] */
    float *part_l; /* [rows][n_split][16] log2-sum-exp */
    /* FUSED */
    const float *scores; /* [n_kv][n][score_stride] block scores (index head g = KV group g) */
    int32_t score_stride, n_local;
    int32_t *sel_out;     /* NULL or [n_kv][n][sel_stride]: the selections, written by split 0 */
    int32_t serial_merge; /* benchmark knob: the previous merge, one split's remote loads at a time */
    int32_t topk_bf;      /* benchmark knob: top-k's gather (kn_topk_row: 0 branchy, 1 branch-free, 2 mask) */
    int32_t topk_split;   /* CLUSTER: each CTA selects from 1/n_split of the row, lists exchanged and
                             merged by rank (1) or by one warp's k-way merge (2) */
    int32_t merge_push;   /* CLUSTER: partials pushed to the head owner (st.async), no cluster barrier */
    unsigned long long *prof; /* benchmark hook: KN_PROF_CTA_SLOTS per CTA, or NULL */
};

/* Record phase ph of this CTA (thread 0) when a benchmark asked for timestamps. */
#define DEC_PROF(ph)                                                                                         \
    do {                                                                                                     \
        unsigned long long *pp__ = a.prof;                                                                   \
        if (pp__ && tid == 0) {                                                                              \
            pp__ += ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * KN_PROF_CTA_SLOTS;                      \
            pp__[ph] = kn_prof_ns();                                                                         \
            pp__[KN_PROF_CLOCK + (ph)] = (unsigned long long)clock64();                                      \
            if ((ph) == KN_PROF_ENTRY) pp__[KN_PROF_SMID] = kn_prof_smid();                                  \
        }                                                                                                    \
    } while (0)

template <int ROWS, bool FUSED, bool CLUSTER, int STAGES, int NW = DEC_WARPS>
__global__ void __launch_bounds__(NW * 32) __maxnreg__(NW == DEC_TAIL_WIDE ? DEC_TAIL_WIDE_REGS : 255)
    k_attn_decode(const dec_args a)
{
    constexpr int NT = NW * 32;
    /* 8 warps (KN_CUDA_TAIL_WARPS): the pushed merge and the whole-row selection only, so the pulled merge's
     * area (DEC_X_OFF, inside the 8-warp combine area) and the split selection are never used */
    constexpr bool WIDE = NW != DEC_WARPS;
    static_assert(NW == DEC_WARPS || (NW == DEC_TAIL_WIDE && FUSED && CLUSTER), "8 warps: fused tail only");
    static_assert(
        STAGES >= 1 && (!FUSED || STAGES * DEC_STAGE_BYTES(ROWS) >= DEC_X_OFF + 16 * (AW_D + 1) * 4) &&
            (WIDE || (DEC_CO_BYTES(NW) <= DEC_X_OFF && DEC_CO_BYTES(NW) <= STAGES * DEC_STAGE_BYTES(ROWS))) &&
            DEC_CO_BYTES(NW) <= DEC_RECV_OFF(ROWS, STAGES, NW),
        "the combine area and the fused merge area live in the stage area, apart");
    constexpr int P = DEC_BLK / ROWS; /* items per page */
    const int topk_split = WIDE ? 0 : a.topk_split;
    const bool merge_push = WIDE || a.merge_push;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int32_t blist[KN_CUDA_MAX_TOPK];
    __shared__ int32_t bcount;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int64_t r = blockIdx.x; /* row = g * n + i */
    const int32_t z = blockIdx.y;
    const int32_t i = (int32_t)(r % a.n), g = (int32_t)(r / a.n);
    const int64_t qpos = a.pos[i];
    const int32_t own = (int32_t)(qpos / DEC_BLK);
    const int32_t *btr = a.bt + (int64_t)a.qseq[i] * a.bt_stride;
    const uint32_t s_base = kn_smem_addr(smem);
    if (FUSED) DEC_PROF(KN_PROF_ENTRY);
    /* split selection / pushed merge: [0] counts the peers' lists, [1] the partials of the heads owned here
     */
    __shared__ __align__(8) unsigned long long xbar[2];
    const bool xchg = CLUSTER && FUSED && (topk_split || merge_push);
    const uint32_t bar_s = kn_smem_addr(xbar), recv_s = s_base + DEC_RECV_OFF(ROWS, STAGES, NW);
    unsigned long long *xkeys =
        (unsigned long long *)(smem + DEC_RECV_OFF(ROWS, STAGES, NW) + DEC_RECV_BYTES);
    unsigned long long *lkeys = xkeys + DEC_FUSED_MAX_SPLIT * KN_CUDA_MAX_TOPK;
    if (xchg) {
        if (tid == 0) {
            const uint32_t rank = kn_cluster_rank();
            dec_mbar_init(bar_s, 1);
            dec_mbar_init(bar_s + 8, 1);
            if (topk_split) dec_mbar_expect(bar_s, (uint32_t)(a.n_split * a.sel_k * 8));
            const int oh = dec_owned_heads((int)rank, a.n_split, a.hpg);
            if (merge_push && oh) dec_mbar_expect(bar_s + 8, (uint32_t)(a.n_split * oh * (AW_D + 1) * 4));
        }
        dec_cluster_arrive_init();
    }

    /* Q rows: the hpg heads of group g (rows past hpg zero). Written before the previous kernel started, so
     * this may run before the dependency wait of a programmatic launch. */
    aw_tile_load(s_base + DEC_Q_OFF_ST(ROWS, STAGES),
                 (const uint8_t *)(a.q + ((int64_t)i * a.n_heads + (int64_t)g * a.hpg) * AW_D), AW_D * 2, 16,
                 a.hpg, tid, NT);
    kn_cp_async_commit();

    /* this split's blocks: [first, first + count) of the list (sparse lists compacted to valid entries) */
    int32_t first, count;
    if (FUSED || a.sel) {
        if (FUSED) {
            int64_t lo = (int64_t)own - (a.n_local > 0 ? a.n_local : 1) + 1;
            if (lo < 0) lo = 0;
            /* scratch at the start of the stage area: no copy is in flight there yet */
            unsigned long long *tts =
                a.prof ? a.prof + ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * KN_PROF_CTA_SLOTS +
                             KN_PROF_TOPK
                       : nullptr;
            kn_topk_smem<NT> &tsm = *reinterpret_cast<kn_topk_smem<NT> *>(smem);
            static_assert(sizeof(kn_topk_smem<NT>) <= STAGES * DEC_STAGE_BYTES(ROWS),
                          "top-k scratch fits the stage area");
            const int32_t nb = own + 1, ns = a.n_split, kk = a.sel_k;
            kn_griddep_wait();   /* the index scores */
            kn_griddep_launch(); /* the step's next kernel (a chain entry) may take the SMs this grid leaves
                                  */
            DEC_PROF(KN_PROF_WAITED);
            if (CLUSTER && topk_split) {
                /* CTA z selects the best of its slice of the row (1/n_split: 16x fewer loads and candidates
                 * than the whole row), pushes its list (keys, best first) into every peer, and each CTA
                 * merges the n_split lists the same way, so all agree on the row's selection */
                const int32_t S = ((nb + ns - 1) / ns + 31) & ~31;
                const int32_t b0 = min(z * S, nb), len = min(nb - b0, S);
                kn_topk_row<NT, DEC_TOPK_SPLIT_VPT>(a.scores + r * a.score_stride + b0, len, lo - b0, kk, tsm,
                                                    blist, tts, a.topk_bf, b0, lkeys);
                dec_cluster_wait(); /* the peers' mbarriers are initialized */
                const uint32_t rank = kn_cluster_rank(), xk_s = kn_smem_addr(xkeys);
#pragma unroll 1
                for (int e = tid; e < ns * kk; e += NT) {
                    const uint32_t c = (uint32_t)(e / kk), j = (uint32_t)(e % kk);
                    dec_st_async_u64(kn_cluster_map(xk_s + (rank * kk + j) * 8, c), lkeys[j],
                                     kn_cluster_map(bar_s, c));
                }
                dec_mbar_wait(bar_s, 0);
                if (a.prof && tid == 0)
                    a.prof[((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * KN_PROF_CTA_SLOTS +
                           KN_PROF_XCHG] = kn_prof_ns();
                unsigned long long *mts =
                    a.prof ? a.prof + ((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * KN_PROF_CTA_SLOTS +
                                 KN_PROF_MERGE
                           : nullptr;
                if (topk_split == 2)
                    kn_topk_merge_lists_warp<NT>(xkeys, ns, kk, blist, mts);
                else
                    kn_topk_merge_lists<NT>(xkeys, ns, kk, tsm, blist, mts);
            } else {
                /* 8 warps: half the scores per thread, bound groups of 2 threads (the 4-warp bound) */
                constexpr int VPT = DEC_TOPK_VPT * DEC_WARPS / NW, BG = NW / DEC_WARPS;
                kn_topk_row<NT, VPT, BG>(a.scores + r * a.score_stride, nb, lo, kk, tsm, blist, tts,
                                         a.topk_bf);
            }
            if (w == 0) { /* best first, empty slots at the end: count the filled ones at once */
                const uint32_t m = __ballot_sync(0xffffffffu, lane < a.sel_k && blist[lane] >= 0);
                if (lane == 0) bcount = __popc(m);
            }
            if (z == 0 && a.sel_out)
#pragma unroll 1
                for (int32_t j = tid; j < a.sel_stride; j += NT)
                    a.sel_out[r * a.sel_stride + j] = j < a.sel_k ? blist[j] : -1;
        } else if (w == 0) {
            /* one warp compacts the row's valid entries in order (ballot + prefix popcount): all loads at
             * once */
            const int32_t b = lane < a.sel_k ? a.sel[r * a.sel_stride + lane] : -1;
            const bool ok = b >= 0 && b <= own;
            const uint32_t m = __ballot_sync(0xffffffffu, ok);
            if (ok) blist[__popc(m & ((1u << lane) - 1u))] = b;
            if (lane == 0) bcount = __popc(m);
        }
        __syncthreads();
        if (FUSED) DEC_PROF(KN_PROF_SELECTED);
        const int32_t per = (bcount * P + a.n_split - 1) / a.n_split;
        first = z * per;
        count = min(bcount * P - first, per);
    } else {
        const int32_t nb = own + 1, per = (nb * P + a.n_split - 1) / a.n_split;
        first = z * per;
        count = min(nb * P - first, per);
    }
    if (count < 0) count = 0;

    const int64_t tok_bytes = (int64_t)a.n_kv * AW_D * 2;
    const uint8_t *kbase = (const uint8_t *)a.kc + (int64_t)g * AW_D * 2;
    const uint8_t *vbase = (const uint8_t *)a.vc + (int64_t)g * AW_D * 2;

    /* item j of this CTA: block of list entry (first + j) / P, rows [part * ROWS, part * ROWS + ROWS) */
#define DEC_ITEM(j, b, row0)                                                                                 \
    const int32_t it__ = first + (j), ent__ = it__ / P;                                                      \
    const int32_t b = (FUSED || a.sel) ? blist[ent__] : ent__;                                               \
    const int32_t row0 = (it__ - ent__ * P) * ROWS
#define DEC_LOAD(j, stage_addr)                                                                              \
    do {                                                                                                     \
        DEC_ITEM(j, b__, r0__);                                                                              \
        const int64_t page__ = btr[b__];                                                                     \
        const int64_t vis__ = qpos - ((int64_t)b__ * DEC_BLK + r0__) + 1;                                    \
        const int valid__ = (int)(vis__ < 0 ? 0 : vis__ > ROWS ? ROWS : vis__);                              \
        const int64_t off__ = (page__ * DEC_BLK + r0__) * tok_bytes;                                         \
        aw_tile_load((stage_addr), kbase + off__, tok_bytes, ROWS, valid__, tid, NT);                        \
        aw_tile_load((stage_addr) + DEC_TILE_BYTES(ROWS), vbase + off__, tok_bytes, ROWS, valid__, tid, NT); \
    } while (0)
    /* ring of STAGES pages; one stage: load, wait, fold, then the next (a 16-split CTA has one page) */
#pragma unroll
    for (int s = 0; s < (STAGES > 1 ? STAGES - 1 : 1); s++) {
        if (s < count) DEC_LOAD(s, s_base + s * DEC_STAGE_BYTES(ROWS));
        kn_cp_async_commit();
    }

    aw_state st;
    aw_init(st);
    uint32_t qa[8][4];
    for (int32_t j = 0; j < count; j++) {
        kn_cp_async_wait<(STAGES > 1 ? STAGES - 2 : 0)>();
        __syncthreads();
        if (!WIDE && j == 0) aw_load_q(qa, s_base + DEC_Q_OFF_ST(ROWS, STAGES), lane);
        if (STAGES > 1) {
            const int32_t jn = j + STAGES - 1;
            if (jn < count) DEC_LOAD(jn, s_base + (jn % STAGES) * DEC_STAGE_BYTES(ROWS));
            kn_cp_async_commit();
        }
        DEC_ITEM(j, b, row0);
        const uint32_t sc = s_base + (j % STAGES) * DEC_STAGE_BYTES(ROWS);
        constexpr int KW = ROWS / NW; /* keys per warp per item */
        static_assert(KW % 16 == 0, "aw_step folds 16 keys at a time");
        if (WIDE)
            dec_step_qs<KW>(st, s_base + DEC_Q_OFF_ST(ROWS, STAGES), sc, sc + DEC_TILE_BYTES(ROWS), KW * w,
                            (int64_t)b * DEC_BLK + row0 + KW * w, qpos, a.scale_log2, lane);
        else
            aw_step<KW>(st, qa, sc, sc + DEC_TILE_BYTES(ROWS), KW * w, (int64_t)b * DEC_BLK + row0 + KW * w,
                        qpos, a.scale_log2, lane);
        if (STAGES == 1 && j + 1 < count) {
            __syncthreads(); /* every warp is done with the stage */
            DEC_LOAD(j + 1, s_base);
            kn_cp_async_commit();
        }
    }
#undef DEC_LOAD
#undef DEC_ITEM
    kn_cp_async_wait<0>();
    aw_finish_l(st);
    if (FUSED) DEC_PROF(KN_PROF_PAGES);
    __syncthreads(); /* stages are reused for the combine */

    /* combine the NW warps: o [warp][16][DEC_CO_STRIDE] f32, m/l [warp][16]. Rows padded by 8 floats: a
     * half-warp's float2 stores (8 rows x 4 column pairs) and a quarter-warp's float4 reads (one row, 128
     * contiguous bytes) hit 32 distinct banks. Unpadded, the stores were 8-way and the reads 16-way bank
     * conflicts: ~1.5 us of the fused tail (bench/cuda "layer prof"). */
    float *co = (float *)smem;
    float *cm = co + NW * 16 * DEC_CO_STRIDE;
    float *cl = cm + NW * 16;
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int dn = 0; dn < 16; dn++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            *(float2 *)&co[(w * 16 + gid + 8 * h) * DEC_CO_STRIDE + dn * 8 + 2 * tig] =
                make_float2(st.o[dn][2 * h], st.o[dn][2 * h + 1]);
    if (tig == 0) {
        cm[w * 16 + gid] = st.m[0], cm[w * 16 + gid + 8] = st.m[1];
        cl[w * 16 + gid] = st.l[0], cl[w * 16 + gid + 8] = st.l[1];
    }
    __syncthreads();
    {
        /* thread: row tid / TPR, dims q4 + CS k + j (k < NV, j < 4): TPR threads per row, NV float4 each */
        constexpr int TPR = NT / 16, NV = AW_D / (4 * TPR), CS = 4 * TPR;
        const int row = tid / TPR, q4 = (tid % TPR) * 4;
        float mm = -INFINITY;
#pragma unroll
        for (int ww = 0; ww < NW; ww++) mm = fmaxf(mm, cm[ww * 16 + row]);
        const float msafe = mm == -INFINITY ? 0.0f : mm;
        float f[NW], L = 0.0f;
#pragma unroll
        for (int ww = 0; ww < NW; ww++) {
            f[ww] = exp2f(cm[ww * 16 + row] - msafe);
            L += f[ww] * cl[ww * 16 + row];
        }
        const float inv = L > 0.0f ? 1.0f / L : 0.0f;
        float4 o[NV];
#pragma unroll
        for (int k = 0; k < NV; k++) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int ww = 0; ww < NW; ww++) {
                const float4 x = *(const float4 *)&co[(ww * 16 + row) * DEC_CO_STRIDE + q4 + CS * k];
                acc.x += f[ww] * x.x, acc.y += f[ww] * x.y, acc.z += f[ww] * x.z, acc.w += f[ww] * x.w;
            }
            o[k] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
        }
        if (CLUSTER && merge_push) {
            /* this split's normalized partial of head `row` straight into its owner's receive area */
            const int ns = a.n_split, nh = (a.hpg + ns - 1) / ns;
            const uint32_t rank = kn_cluster_rank();
            if (!topk_split) dec_cluster_wait(); /* the peers' mbarriers are initialized */
            if (row < a.hpg) {
                const uint32_t owner = (uint32_t)(row % ns), slot = rank * nh + (uint32_t)(row / ns);
                const uint32_t bar = kn_cluster_map(bar_s + 8, owner);
                const uint32_t dst = kn_cluster_map(recv_s + (slot * AW_D + q4) * 4, owner);
#pragma unroll
                for (int k = 0; k < NV; k++) dec_st_async_f32x4(dst + 4 * CS * k, o[k], bar);
                if (tid % TPR == 0)
                    dec_st_async_f32(kn_cluster_map(recv_s + (DEC_RECV_SLOTS * AW_D + slot) * 4, owner),
                                     L > 0.0f ? msafe + log2f(L) : -INFINITY, bar);
            }
        } else if (CLUSTER) {
            /* this split's normalized partial, for the peers to read after the cluster barrier */
            float *xo = (float *)(smem + DEC_X_OFF) + row * AW_D + q4;
#pragma unroll
            for (int k = 0; k < NV; k++) *(float4 *)(xo + CS * k) = o[k];
            if (tid % TPR == 0)
                ((float *)(smem + DEC_X_OFF))[16 * AW_D + row] = L > 0.0f ? msafe + log2f(L) : -INFINITY;
        } else if (a.n_split == 1) {
            if (row < a.hpg) {
                uint16_t *dst = a.out + ((int64_t)i * a.n_heads + (int64_t)g * a.hpg + row) * AW_D + q4;
#pragma unroll
                for (int k = 0; k < NV; k++)
                    *(uint2 *)(dst + CS * k) =
                        make_uint2(kn_pack_bf16(o[k].x, o[k].y), kn_pack_bf16(o[k].z, o[k].w));
            }
        } else {
            float *dst = a.part_o + ((r * a.n_split + z) * 16 + row) * AW_D + q4;
#pragma unroll
            for (int k = 0; k < NV; k++) *(float4 *)(dst + CS * k) = o[k];
            if (tid % TPR == 0)
                a.part_l[(r * a.n_split + z) * 16 + row] = L > 0.0f ? msafe + log2f(L) : -INFINITY;
        }
    }
    if (CLUSTER) {
        /* merge the row's splits: CTA `rank` of the cluster takes heads rank, rank + n_split, ...; thread tid
         * owns dim tid of the head and reads the peers' partials through distributed shared memory */
        if (FUSED) DEC_PROF(KN_PROF_COMBINED);
        if (merge_push) {
            /* the owned heads' partials have been pushed here: wait for their bytes, merge, done (nothing of
             * ours is read by a peer, and no peer writes here after our wait: no exit barrier) */
            const int ns = a.n_split, nh = (a.hpg + ns - 1) / ns;
            const int rank = (int)kn_cluster_rank(), oh = dec_owned_heads(rank, ns, a.hpg);
            if (oh) {
                dec_mbar_wait(bar_s + 8, 0);
                if (a.prof && tid == 0)
                    a.prof[((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * KN_PROF_CTA_SLOTS +
                           KN_PROF_RECV] = kn_prof_ns();
            }
            const float *ro = (const float *)(smem + DEC_RECV_OFF(ROWS, STAGES, NW));
            const float *rl = ro + DEC_RECV_SLOTS * AW_D;
            /* rolled loops: this code runs once per CTA, so its size (instruction fetch), not its latency,
             * is what it costs (docs/progress/cuda-tail.md). Thread: dim tid % AW_D of every (NT / AW_D)-th
             * owned head. */
            const int dim = tid % AW_D;
#pragma unroll 1
            for (int jh = tid / AW_D; jh < oh; jh += NT / AW_D) {
                float mm = -INFINITY;
#pragma unroll 1
                for (int zz = 0; zz < ns; zz++) mm = fmaxf(mm, rl[zz * nh + jh]);
                const float msafe = mm == -INFINITY ? 0.0f : mm;
                float L = 0.0f, acc = 0.0f;
#pragma unroll 4
                for (int zz = 0; zz < ns; zz++) {
                    const float f = exp2f(rl[zz * nh + jh] - msafe); /* 0 for empty splits */
                    L += f;
                    acc += f * ro[(zz * nh + jh) * AW_D + dim];
                }
                const int h = rank + jh * ns;
                a.out[((int64_t)i * a.n_heads + (int64_t)g * a.hpg + h) * AW_D + dim] =
                    kn_f32_to_bf16(L > 0.0f ? acc / L : 0.0f);
            }
            if (FUSED) DEC_PROF(KN_PROF_MERGED);
            if (FUSED) DEC_PROF(KN_PROF_EXIT);
            return;
        }
        kn_cluster_sync();
        const uint32_t rank = kn_cluster_rank();
        const uint32_t xo_s = s_base + DEC_X_OFF, xl_off = 16 * AW_D * 4;
        const int ns = a.n_split;
        if (a.serial_merge) {
            for (int h = (int)rank; h < a.hpg; h += ns) {
                float mm = -INFINITY;
                for (int zz = 0; zz < ns; zz++)
                    mm = fmaxf(mm, kn_ld_cluster_f32(kn_cluster_map(xo_s + xl_off + 4 * h, (uint32_t)zz)));
                const float msafe = mm == -INFINITY ? 0.0f : mm;
                float L = 0.0f, acc = 0.0f;
                for (int zz = 0; zz < ns; zz++) {
                    const float f =
                        exp2f(kn_ld_cluster_f32(kn_cluster_map(xo_s + xl_off + 4 * h, (uint32_t)zz)) - msafe);
                    L += f;
                    acc += f * kn_ld_cluster_f32(kn_cluster_map(xo_s + 4 * (h * AW_D + tid), (uint32_t)zz));
                }
                a.out[((int64_t)i * a.n_heads + (int64_t)g * a.hpg + h) * AW_D + tid] =
                    kn_f32_to_bf16(L > 0.0f ? acc / L : 0.0f);
            }
        } else {
            /* every remote load of up to two heads in flight before the first use: one round trip */
            uint32_t peer[DEC_FUSED_MAX_SPLIT];
#pragma unroll
            for (int zz = 0; zz < DEC_FUSED_MAX_SPLIT; zz++)
                peer[zz] = zz < ns ? kn_cluster_map(xo_s, (uint32_t)zz) : 0u;
            for (int h0 = (int)rank; h0 < a.hpg; h0 += 2 * ns) {
                const int h1 = h0 + ns;
                const bool two = h1 < a.hpg;
                float l0[DEC_FUSED_MAX_SPLIT], o0[DEC_FUSED_MAX_SPLIT], l1[DEC_FUSED_MAX_SPLIT],
                    o1[DEC_FUSED_MAX_SPLIT];
#pragma unroll
                for (int zz = 0; zz < DEC_FUSED_MAX_SPLIT; zz++) {
                    l0[zz] = l1[zz] = -INFINITY;
                    o0[zz] = o1[zz] = 0.0f;
                    if (zz < ns) {
                        l0[zz] = kn_ld_cluster_f32(peer[zz] + xl_off + 4 * h0);
                        o0[zz] = kn_ld_cluster_f32(peer[zz] + 4 * (h0 * AW_D + tid));
                        if (two) {
                            l1[zz] = kn_ld_cluster_f32(peer[zz] + xl_off + 4 * h1);
                            o1[zz] = kn_ld_cluster_f32(peer[zz] + 4 * (h1 * AW_D + tid));
                        }
                    }
                }
#pragma unroll
                for (int hh = 0; hh < 2; hh++) {
                    const float *lv = hh ? l1 : l0, *ov = hh ? o1 : o0;
                    if (hh && !two) break;
                    float mm = -INFINITY;
#pragma unroll
                    for (int zz = 0; zz < DEC_FUSED_MAX_SPLIT; zz++) mm = fmaxf(mm, lv[zz]);
                    const float msafe = mm == -INFINITY ? 0.0f : mm;
                    float L = 0.0f, acc = 0.0f;
#pragma unroll
                    for (int zz = 0; zz < DEC_FUSED_MAX_SPLIT; zz++) {
                        const float f = exp2f(lv[zz] - msafe); /* 0 for empty splits and unused slots */
                        L += f;
                        acc += f * ov[zz];
                    }
                    const int h = hh ? h1 : h0;
                    a.out[((int64_t)i * a.n_heads + (int64_t)g * a.hpg + h) * AW_D + tid] =
                        kn_f32_to_bf16(L > 0.0f ? acc / L : 0.0f);
                }
            }
        }
        if (FUSED) DEC_PROF(KN_PROF_MERGED);
        kn_cluster_sync(); /* no CTA leaves while a peer may still read its shared memory */
    }
    if (FUSED) DEC_PROF(KN_PROF_EXIT);
}

/* One warp per (row, head): merge the splits' partial outputs by their log2-sum-exp. The lanes read the
 * splits' LSEs together, then the partial rows 4 at a time (independent loads in flight). */
__global__ void k_attn_decode_merge(const float *__restrict__ part_o, const float *__restrict__ part_l,
                                    int32_t n, int32_t n_heads, int32_t hpg, int32_t n_split, int64_t items,
                                    uint16_t *__restrict__ out)
{
    const int lane = threadIdx.x & 31;
    const int64_t item = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (item >= items) return;
    const int64_t r = item / hpg;
    const int32_t row = (int32_t)(item % hpg);
    const int32_t i = (int32_t)(r % n), g = (int32_t)(r / n);
    const float *pl = part_l + r * n_split * 16 + row;
    const float *po = part_o + (r * n_split * 16 + row) * AW_D + 4 * lane;
    float mm = -INFINITY;
    for (int32_t z = lane; z < n_split; z += 32) mm = fmaxf(mm, pl[z * 16]);
    mm = kn_warp_max(mm);
    const float msafe = mm == -INFINITY ? 0.0f : mm;
    float L = 0.0f, o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int32_t z0 = 0; z0 < n_split; z0 += 4) {
        float f[4];
        float4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int32_t z = z0 + u;
            f[u] = z < n_split ? exp2f(pl[z * 16] - msafe) : 0.0f;
            v[u] = z < n_split ? *(const float4 *)(po + (int64_t)z * 16 * AW_D)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            L += f[u];
            o[0] += f[u] * v[u].x, o[1] += f[u] * v[u].y, o[2] += f[u] * v[u].z, o[3] += f[u] * v[u].w;
        }
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    uint16_t *dst = out + ((int64_t)i * n_heads + (int64_t)g * hpg + row) * AW_D + 4 * lane;
    *(uint2 *)dst = make_uint2(kn_pack_bf16(o[0] * inv, o[1] * inv), kn_pack_bf16(o[2] * inv, o[3] * inv));
}

int kn_attn_decode_supported(const struct kn_cuda_msa_shape *sh)
{
    return sh->head_dim == AW_D && sh->block == DEC_BLK && sh->n_heads / sh->n_kv <= 16;
}

/* Half pages when whole ones would leave SMs idle (sparse lists only). Measured on an H200 (bench/cuda): at
 * batch 1 the half-page grid was not faster (launch and merge latency dominate), so it is off unless
 * KN_CUDA_DECODE_HALF=1 asks for it (a tuning knob for benchmarks, read once). */
static int dec_half(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int dense)
{
    static int knob = -1;
    if (knob < 0) {
        const char *e = getenv("KN_CUDA_DECODE_HALF");
        knob = e && e[0] == '1';
    }
    return knob && !dense && (int64_t)qb->n * sh->n_kv * sh->topk < 2 * (int64_t)kn_cuda_sm_count();
}

static int32_t dec_splits(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int dense)
{
    const int64_t rows = (int64_t)qb->n * sh->n_kv;
    const int64_t list = dense ? qb->max_blocks : (int64_t)sh->topk * (dec_half(sh, qb, dense) ? 2 : 1);
    int64_t want = kn_cdiv(2 * (int64_t)kn_cuda_sm_count(), rows > 0 ? rows : 1);
    int64_t most = dense ? kn_cdiv(list, 4) : list; /* dense: at least 4 pages per split */
    if (want > most) want = most;
    if (want > 1024) want = 1024;
    return want < 1 ? 1 : (int32_t)want;
}

size_t kn_attn_decode_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int dense)
{
    const int64_t rows = (int64_t)qb->n * sh->n_kv, ns = dec_splits(sh, qb, dense);
    if (ns == 1) return 0;
    return (size_t)(rows * ns * 16 * (AW_D + 1) * sizeof(float)) + 256;
}

int32_t kn_attn_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                       const struct kn_cuda_cache *c, const void *q, const int32_t *sel, int32_t sel_stride,
                       void *out, void *ws, size_t ws_bytes, cudaStream_t stream, struct mm_err *err)
{
    const int64_t rows = (int64_t)qb->n * sh->n_kv;
    if (rows == 0) return MM_OK;
    const int dense = sel == NULL;
    dec_args a;
    memset(&a, 0, sizeof(a));
    a.q = (const uint16_t *)q;
    a.qseq = qb->qseq;
    a.pos = qb->pos;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.kc = (const uint16_t *)c->k;
    a.vc = (const uint16_t *)c->v;
    a.n = qb->n;
    a.n_heads = sh->n_heads;
    a.n_kv = sh->n_kv;
    a.hpg = sh->n_heads / sh->n_kv;
    a.scale_log2 = sh->scale * 1.4426950408889634f;
    a.sel = sel;
    a.sel_k = sel ? (sh->topk < sel_stride ? sh->topk : sel_stride) : 0;
    a.sel_stride = sel_stride;
    a.n_split = dec_splits(sh, qb, dense);
    a.out = (uint16_t *)out;
    a.part_o = NULL;
    a.part_l = NULL;
    a.scores = NULL;
    a.score_stride = 0;
    a.n_local = sh->n_local;
    a.sel_out = NULL;
    a.serial_merge = 0;
    a.prof = NULL;
    if (a.n_split > 1) {
        size_t need = kn_attn_decode_ws(sh, qb, dense);
        if (!ws || ws_bytes < need)
            return mm_err_set(err, MM_INVALID, "kn_cuda attention (decode): workspace %zu < %zu bytes",
                              ws_bytes, need);
        a.part_o = (float *)ws;
        a.part_l = a.part_o + rows * a.n_split * 16 * AW_D;
    }
    if (rows > INT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda attention (decode): %lld rows", (long long)rows);
    const dim3 grid((unsigned)rows, (unsigned)a.n_split);
    if (dec_half(sh, qb, dense)) {
        KN_CU(kn_smem_attr((const void *)k_attn_decode<64, false, false, DEC_STAGES>, DEC_SMEM(64)),
              "kn_cuda attention (decode): shared memory");
        k_attn_decode<64, false, false, DEC_STAGES><<<grid, DEC_THREADS, DEC_SMEM(64), stream>>>(a);
    } else {
        KN_CU(kn_smem_attr((const void *)k_attn_decode<128, false, false, DEC_STAGES>, DEC_SMEM(128)),
              "kn_cuda attention (decode): shared memory");
        k_attn_decode<128, false, false, DEC_STAGES><<<grid, DEC_THREADS, DEC_SMEM(128), stream>>>(a);
    }
    KN_LAUNCHED("kn_cuda attention (decode)");
    if (a.n_split > 1) {
        const int64_t items = rows * a.hpg;
        k_attn_decode_merge<<<(unsigned)kn_cdiv(items, 8), 256, 0, stream>>>(
            a.part_o, a.part_l, a.n, a.n_heads, a.hpg, a.n_split, items, a.out);
        KN_LAUNCHED("kn_cuda attention (decode merge)");
    }
    return MM_OK;
}

/* ---- the fused decode tail ---- */

/* Launch shape of the fused kernel: splits per row (the cluster size), stages of the page ring, dynamic
 * shared memory. More than 8 splits (up to KN_CUDA_FUSED_SPLIT, default 16; when the device can hold one
 * cluster per row at once): non-portable clusters, one page per CTA at top-16, one stage, padded to one CTA
 * per SM unless KN_CUDA_FUSED_PACK=1. Measured on H200s at 1M batch 1 (bench/cuda/README.md): 0.8-5.8 us
 * faster than 8 splits in two runs and three timings; padded faster than packed in 3 of 4 comparisons.
 * Otherwise up to 8 splits (the portable cluster size), three stages (a CTA holds up to 2 pages at top-16).
 */
struct fused_cfg {
    int32_t ns, stages, smem, threads;
    void (*kern)(const dec_args);
};

/* Clusters of ns CTAs of kern with smem bytes each that the device can run at once (asked once per shape);
 * 0 when it cannot launch them. */
static int cluster_capacity(int32_t ns, void (*kern)(const dec_args), int32_t smem, int32_t threads)
{
    static struct {
        void (*kern)(const dec_args);
        int32_t ns, smem;
        int cap;
    } memo[32];
    static int n_memo;
    for (int k = 0; k < n_memo; k++)
        if (memo[k].kern == kern && memo[k].ns == ns && memo[k].smem == smem) return memo[k].cap;
    int n = 0;
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = 1;
    at[0].val.clusterDim.y = (unsigned)ns;
    at[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(1, (unsigned)ns, 1);
    cfg.blockDim = dim3((unsigned)threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaError_t e = kn_smem_attr((const void *)kern, smem);
    if (e == cudaSuccess && ns > DEC_PORTABLE_SPLIT)
        e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveClusters(&n, kern, &cfg);
    if (e != cudaSuccess) (void)cudaGetLastError();
    const int cap = e == cudaSuccess && n > 0 ? n : 0;
    if (n_memo < 32) {
        memo[n_memo].kern = kern, memo[n_memo].ns = ns, memo[n_memo].smem = smem, memo[n_memo].cap = cap;
        n_memo++;
    }
    return cap;
}

/* The pushed merge (KN_CUDA_MERGE_PUSH) and the split selection (KN_CUDA_TOPK_SPLIT) receive into shared
 * memory past the stage ring, Q and the combine area of nw warps. */
static int32_t fused_smem(int32_t smem, int32_t stages, int xchg, int nw)
{
    const int32_t need = xchg ? (nw == DEC_TAIL_WIDE ? DEC_RECV_OFF(128, 1, DEC_TAIL_WIDE)
                                                     : DEC_RECV_OFF(128, stages, DEC_WARPS)) +
                                    DEC_XCHG_BYTES
                              : DEC_SMEM_ST(128, stages);
    return smem > need ? smem : need;
}

static struct fused_cfg fused_config(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb)
{
    const int32_t ns0 = dec_splits(sh, qb, 0);
    const int64_t rows = (int64_t)qb->n * sh->n_kv;
    const int push = kn_cuda_knob("KN_CUDA_MERGE_PUSH", 1), tsplit = kn_cuda_knob("KN_CUDA_TOPK_SPLIT", 0);
    const int xchg = push || tsplit;
    struct fused_cfg f;
    const int want = kn_cuda_knob_int("KN_CUDA_FUSED_SPLIT", DEC_FUSED_MAX_SPLIT);
    if (want > DEC_PORTABLE_SPLIT && ns0 > DEC_PORTABLE_SPLIT) {
        /* 8 warps (KN_CUDA_TAIL_WARPS=8): with the pushed merge and the whole-row selection only */
        const int wide =
            kn_cuda_knob_int("KN_CUDA_TAIL_WARPS", DEC_TAIL_WIDE) == DEC_TAIL_WIDE && push && !tsplit;
        f.ns = ns0 < want ? ns0 : want;
        if (f.ns > DEC_FUSED_MAX_SPLIT) f.ns = DEC_FUSED_MAX_SPLIT;
        f.stages = 1;
        f.smem = fused_smem(kn_cuda_knob("KN_CUDA_FUSED_PACK", 0) ? DEC_SMEM_ST(128, 1) : DEC_SMEM_ONE_PER_SM,
                            1, xchg, wide ? DEC_TAIL_WIDE : DEC_WARPS);
        f.threads = (wide ? DEC_TAIL_WIDE : DEC_WARPS) * 32;
        f.kern = wide ? k_attn_decode<128, true, true, 1, DEC_TAIL_WIDE> : k_attn_decode<128, true, true, 1>;
        if (cluster_capacity(f.ns, f.kern, f.smem, f.threads) >= rows) return f;
    }
    f.ns = ns0 > DEC_PORTABLE_SPLIT ? DEC_PORTABLE_SPLIT : ns0;
    if (want >= 1 && f.ns > want) f.ns = want; /* KN_CUDA_FUSED_SPLIT below 8 caps this route too */
    f.stages = DEC_STAGES;
    f.threads = DEC_THREADS;
    f.smem = fused_smem(DEC_SMEM(128), DEC_STAGES, xchg && f.ns > 1, DEC_WARPS);
    f.kern = k_attn_decode<128, true, true, DEC_STAGES>;
    if (f.ns > 1 && !cluster_capacity(f.ns, f.kern, f.smem, f.threads)) f.ns = 0; /* cannot launch: unfused */
    /* fewer splits until every row's cluster is resident at once: each CTA selects its row's blocks
     * whatever its share of pages, so a second wave of clusters costs a whole selection and more than the
     * pages it spreads. Measured at 32K and 128K (bench/cuda/README.md): 4 splits beat 5-8 at 16 rows, 3
     * beat 4-8 at 32 rows, 2 beat 3-5 at 64, 1 beat 2 at 128 (a 2-split cluster per row: 66 fit) */
    if (!kn_cuda_knob("KN_CUDA_FUSED_WAVES", 0))
        while (f.ns > 1 && cluster_capacity(f.ns, f.kern, f.smem, f.threads) < rows) f.ns--;
    if (f.ns == 1) {
        f.smem = fused_smem(DEC_SMEM(128), DEC_STAGES, 0, DEC_WARPS);
        f.kern = k_attn_decode<128, true, false, DEC_STAGES>;
    }
    return f;
}

int kn_attn_decode_fused_ok(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            int32_t sel_stride)
{
    if (!kn_attn_decode_supported(sh) || sh->n_idx_heads != sh->n_kv || sh->topk < 1 ||
        sh->topk > KN_CUDA_MAX_TOPK || sel_stride < 1 || qb->n < 1 || (int64_t)qb->n * sh->n_kv > INT32_MAX)
        return 0;
    return fused_config(sh, qb).ns > 0;
}

int32_t kn_attn_decode_fused(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                             const struct kn_cuda_cache *c, const void *q, const float *scores,
                             int32_t score_stride, int32_t *sel, int32_t sel_stride, void *out,
                             cudaStream_t stream, struct mm_err *err)
{
    const int64_t rows = (int64_t)qb->n * sh->n_kv;
    if (rows == 0) return MM_OK;
    const struct fused_cfg f = fused_config(sh, qb);
    if (f.ns < 1) return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda fused decode: clusters cannot be launched");
    dec_args a;
    memset(&a, 0, sizeof(a));
    a.q = (const uint16_t *)q;
    a.qseq = qb->qseq;
    a.pos = qb->pos;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.kc = (const uint16_t *)c->k;
    a.vc = (const uint16_t *)c->v;
    a.n = qb->n;
    a.n_heads = sh->n_heads;
    a.n_kv = sh->n_kv;
    a.hpg = sh->n_heads / sh->n_kv;
    a.scale_log2 = sh->scale * 1.4426950408889634f;
    a.sel = NULL;
    a.sel_k = sh->topk < sel_stride ? sh->topk : sel_stride;
    a.sel_stride = sel_stride;
    a.n_split = f.ns;
    a.out = (uint16_t *)out;
    a.scores = scores;
    a.score_stride = score_stride;
    a.n_local = sh->n_local;
    a.sel_out = sel;
    a.serial_merge = kn_cuda_knob("KN_CUDA_MERGE_SERIAL", 0);
    a.prof = g_dec_prof;
    a.topk_bf = kn_cuda_knob_int("KN_CUDA_TOPK_BF", 2);
    a.topk_split = f.ns > 1 ? kn_cuda_knob_int("KN_CUDA_TOPK_SPLIT", 0) : 0;
    a.merge_push = f.ns > 1 && kn_cuda_knob("KN_CUDA_MERGE_PUSH", 1);
    if (f.threads != DEC_THREADS) a.topk_split = 0, a.merge_push = 1; /* what the 8-warp kernel does */

    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute at[2];
    unsigned na = 0;
    if (a.n_split > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = 1;
        at[na].val.clusterDim.y = (unsigned)a.n_split;
        at[na].val.clusterDim.z = 1;
        na++;
    }
    const bool pdl = kn_cuda_knob("KN_CUDA_PDL", 1);
    cfg.gridDim = dim3((unsigned)rows, (unsigned)a.n_split, 1);
    cfg.blockDim = dim3((unsigned)f.threads, 1, 1);
    cfg.dynamicSmemBytes = (size_t)f.smem;
    cfg.stream = stream;
    void (*kern)(const dec_args) = f.kern;
    KN_CU(kn_smem_attr((const void *)kern, f.smem), "kn_cuda fused decode: shared memory");
    cudaError_t e = kn_launch_pdl(&cfg, at, na, pdl, kern, a);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the caller may take the unfused route instead */
        return kn_cuda_check(e, "kn_cuda fused decode: launch", err);
    }
    return MM_OK;
}

/* Benchmark hook (kn_decode_prof.cuh): buf receives KN_PROF_CTA_SLOTS u64 per CTA of each later fused launch
 * (NULL: off). Not part of kn_cuda.h: only bench/cuda/kn_bench.cu declares and calls it. */
extern "C" int32_t kn_cuda_decode_prof_set(unsigned long long *buf)
{
    g_dec_prof = buf;
    return MM_OK;
}

/* Test hook: the fused decode tail alone on given index scores (rows with ties, -inf and NaN, longer than a
 * CTA's registers hold), so that its selection can be checked against kn_msa_topk_local exactly. Not part of
 * kn_cuda.h: only tests/unit/kernels_cuda/test_kn_cuda_msa.c declares and calls it. */
extern "C" int32_t kn_cuda_decode_fused_scores(const struct kn_cuda_msa_shape *sh,
                                               const struct kn_cuda_qbatch *qb, const struct kn_cuda_cache *c,
                                               const void *q, const float *scores, int32_t score_stride,
                                               int32_t *sel, int32_t sel_stride, void *out,
                                               struct mm_err *err)
{
    if (!kn_attn_decode_fused_ok(sh, qb, sel_stride))
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda fused decode: shapes or device not supported");
    return kn_attn_decode_fused(sh, qb, c, q, scores, score_stride, sel, sel_stride, out, 0, err);
}
