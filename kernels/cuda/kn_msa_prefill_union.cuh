/* Interface between the tile-union sparse prefill kernel (kn_msa_prefill_union.cu) and the KV-block-major
 * pair path that handles what it leaves (kn_msa_prefill.cu). Internal to kernels/cuda. */
#ifndef KN_MSA_PREFILL_UNION_CUH
#define KN_MSA_PREFILL_UNION_CUH

#include "kn_cuda_internal.cuh"

/* Default of the intra-warpgroup overlap (KN_CUDA_UNION_OVERLAP). */
#define KN_PF_UNION_OVERLAP 0

/* Variants of the union kernel's consumer (KN_CUDA_UNION_KERNEL; unset: KN_CUDA_UNION_OVERLAP picks 1 or
 * the default KN_PF_UNION_KERNEL). See kn_msa_prefill_union.cu and docs/design/cuda.md, "wgmma prefill". */
enum {
    KN_PF_UK_PLAIN = 0,     /* score product, softmax, value product in turn */
    KN_PF_UK_OVERLAP = 1,   /* value product under the next block's softmax */
    KN_PF_UK_PINGPONG = 2,  /* plain, the two warpgroups' products ordered by named barriers */
    KN_PF_UK_PP_FAST = 3,   /* pingpong with shorter softmax dependency chains */
    KN_PF_UK_FAST = 4,      /* plain with shorter softmax dependency chains */
    KN_PF_UK_PPS_FAST = 5,  /* pingpong of the score products only, shorter softmax chains */
    KN_PF_UK_SPLIT = 6,     /* fast, the value product in two halves, the first under the second's softmax */
    KN_PF_UK_SPLIT4 = 7,    /* the same in four quarters */
    KN_PF_UK_LOOKAHEAD = 8, /* fast, the next block's score product issued behind the value product */
    KN_PF_UK_COUNT
};
/* The default variant: the only one faster than plain in both device runs that compared them (prefill runs
 * 5 and 6, bench/cuda/README.md); pingpong and chunked value products measured equal or slower. */
#define KN_PF_UNION_KERNEL KN_PF_UK_FAST

/* Default minimum union efficiency, in percent: selected (query, block) pairs of an 8-query tile over the
 * pairs its two warpgroups compute (4 queries x the blocks any of their queries chose). Below it the tile
 * goes to the pair path. See docs/design/cuda.md, "wgmma prefill", for how it was chosen. */
#define KN_PF_UNION_MIN_EFF 50

/* Whether the union kernel runs for these shapes and this batch: head_dim 128, block 128, 16 heads per KV
 * group, ks (selected slots per row) <= 32, bf16 K/V, query tiles present, and enough shared memory. */
int kn_pf_union_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb, int32_t ks);

/* Workspace bytes of kn_pf_union_launch (item headers and union lists). */
size_t kn_pf_union_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb);

/* The items are 8 consecutive queries of a tile x one KV group. A plan kernel builds each item's union of
 * selected blocks and, when its efficiency is >= min_eff percent (and the union has <= 128 blocks), a
 * persistent kernel attends to it and writes the normalized output of those queries' heads straight into
 * out. handled[g * n + i] (one byte per (group, query)) says which (query, group) rows it did (1; 2: the
 * hybrid route, all but its rare slots); the pair path does the others. ws: kn_pf_union_ws bytes. overlap:
 * the consumer variant, KN_PF_UK_* (historically 0/1: run each block's value product under the next block's
 * softmax; out-of-range values mean the default). rare: NULL, or the hybrid route's partials. phases:
 * KN_PF_UNION_PLAN and/or KN_PF_UNION_ATTEND. */
/* Hybrid route (KN_CUDA_UNION_RARE): a block only one query of a warpgroup chose is left to the pair path
 * for that query (handled = 2, its slots in the workspace's rare masks), and the union kernel merges those
 * pairs' partials into the output. The pair path must run between the plan and the union kernel. */
struct kn_pf_union_rare {
    const void *part_o;  /* the pair path's partials: bf16 [n][n_kv][ks][16][128] */
    const float *part_l; /* their log2-sum-exp: [n][n_kv][ks][16] */
};
/* Default of KN_CUDA_UNION_RARE: on since pf run 1 (structured bench +5 to +9 %, random and layer level). */
#define KN_PF_UNION_RARE 1
/* Default of KN_CUDA_UNION_PLAN: the plan kernel's version (1: rows padded to 32 slots, vector scans; 0: the
 * first version, one candidate at a time with a division by ks each). Same results. */
#define KN_PF_UNION_PLAN_V 1
/* Default of KN_CUDA_UNION_DYN: items handed out from a global counter instead of round-robin (fast and
 * lookahead consumers). */
#define KN_PF_UNION_DYN 0
/* Default of KN_CUDA_UNION_QPF: the union producer prefetches the next item's Q into L2 (static order) */
#define KN_PF_UNION_QPF 0
/* Defaults of the hybrid decision: KN_CUDA_UNION_RARE_COST, what one rare pair costs on the pair path in
 * union (query, block) products (the union kernel computes ~400 dense-equivalent TFLOP/s, the pair path
 * ~165 effective: 2.4, rounded up; only < 4 vs >= 4 matters, see the plan kernel), and
 * KN_CUDA_UNION_RARE_CAP, the largest share (percent) of an item's pairs that may go to the pair path. */
#define KN_PF_UNION_RARE_COST 3
#define KN_PF_UNION_RARE_CAP 25
/* Default of KN_CUDA_UNION_RPF: the consumers prefetch their rare partials into L2 when an item starts */
#define KN_PF_UNION_RPF 0
/* Default of KN_CUDA_UNION_TMA: whole K/V blocks reach the ring by TMA (one producer thread, four boxes a
 * block) instead of 128 producer threads' cp.async; blocks with rows past the last token stay on cp.async,
 * which zero-fills them. The fast consumer (static order) and the pair mode only. On since v101: the
 * structured given-selection bench +2 to +8 %, random level (bench/cuda/README.md "Twenty-fourth session").
 */
#define KN_PF_UNION_TMA 1
/* Dense causal attention (the dense layers' prefill) on the union kernel: each 8-query item attends to every
 * block up to its last query's (the union route with every block chosen), by the fast consumer and the TMA
 * ring; no plan, no workspace. Shapes as kn_pf_union_supported, contexts under 65535 blocks. Default of
 * KN_CUDA_DENSE_WGMMA (0: the mma.sync flash kernel of kn_attn_dense.cu). */
#define KN_DENSE_WGMMA 1
int kn_pf_union_dense_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb);
int32_t kn_pf_union_dense_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const void *q, void *out, cudaStream_t stream,
                                 struct mm_err *err);
/* phases of kn_pf_union_launch */
#define KN_PF_UNION_PLAN 1
#define KN_PF_UNION_ATTEND 2
/* The rare-slot masks in a workspace of kn_pf_union_ws bytes: uint32 [n_kv][n], slot bits of the pairs the
 * pair path takes for a row of handled = 2. */
const uint32_t *kn_pf_union_rare_masks(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                       const void *ws);

int32_t kn_pf_union_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                           const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                           int32_t sel_stride, int32_t ks, int32_t min_eff, int overlap, void *out,
                           uint8_t *handled, void *ws, const struct kn_pf_union_rare *rare, int phases,
                           cudaStream_t stream, struct mm_err *err);

/* Pair mode (KN_CUDA_PF_WGMMA): the KV-block-major pair path's attention (its tiles of 4 pairs of one bucket
 * and their pair lists, built by kn_msa_prefill.cu) on the union kernel: an item is two tiles, one per
 * consumer warpgroup (64 rows: 4 queries x 16 heads against the bucket's block, wgmma), and each pair's
 * partial (normalized bf16 rows, log2-sum-exp) is written where k_pf_attn writes it. */
struct kn_pf_union_pairs {
    const int4 *tiles;      /* (bucket, first pair, pairs, -) */
    const int32_t *list;    /* pairs in bucket order: query * 32 + slot */
    const int32_t *n_tiles; /* device: the number of tiles */
    int64_t max_tiles;      /* host: an upper bound of it (sizes the grid and the workspace) */
    void *items;            /* kn_pf_union_pairs_ws(max_tiles) bytes */
    void *part_o;           /* bf16 [n][n_kv][ks][16][128] */
    float *part_l;          /* [n][n_kv][ks][16] */
};
/* Default of KN_CUDA_PF_WGMMA (0: the mma.sync pair kernel k_pf_attn) */
#define KN_PF_WGMMA 0
/* Whether pair mode runs for these shapes: head_dim 128, block 128, 16 heads per KV group, shared memory. */
int kn_pf_union_pairs_supported(const struct kn_cuda_msa_shape *sh);
size_t kn_pf_union_pairs_ws(int64_t max_tiles);
/* The pair-mode launches (items from the tiles, then the union kernel); needs qb->seq_blk_off and seq_last.
 */
int32_t kn_pf_union_pairs_launch(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                 const struct kn_cuda_cache *c, const void *q, int32_t ks,
                                 const struct kn_pf_union_pairs *p, cudaStream_t stream, struct mm_err *err);

#endif
