/* The sparse-prefill knobs: environment variables that kn_msa_prefill.cu and kn_msa_prefill_union.cu read
 * through the knob cache (kn_cuda_knob, kn_cuda_knob_int; kn_cuda_knobs_reload after a change), so that a
 * benchmark or a test can compare routes in one process. This is the one list of their names: whoever sets
 * some of them for a route unsets all of them first (bench/cuda/kn_bench.cu pf_set_route, the "[prefill
 * union]" checks of test_kn_cuda_msa.c). The defaults are the KN_PF_* macros of kn_msa_prefill_union.cuh and
 * kn_msa_prefill.cu. Plain C, no CUDA. X(name, meaning) for each knob: */
#ifndef KN_CUDA_KNOBS_H
#define KN_CUDA_KNOBS_H

#define KN_CUDA_PF_KNOBS(X)                                                                                  \
    X("KN_CUDA_PREFILL_UNION", "0: the union route off, every (query, group) row on the pair path")          \
    X("KN_CUDA_UNION_MIN", "the union route's minimum efficiency in percent (0: every tile; 101: none)")     \
    X("KN_CUDA_UNION_OVERLAP", "1: the union kernel's overlap variant, when KN_CUDA_UNION_KERNEL is unset")  \
    X("KN_CUDA_UNION_KERNEL", "the union kernel's consumer variant, KN_PF_UK_* (0-8)")                       \
    X("KN_CUDA_UNION_RARE", "0/1: the hybrid route (blocks one query of a warpgroup chose go to the pairs)") \
    X("KN_CUDA_PF_MERGE", "0/1: the partials' merge per (query, head) or per (query, group) row")            \
    X("KN_CUDA_UNION_PLAN", "the plan kernel's version (0: the first, 1: rows padded to 32 slots)")          \
    X("KN_CUDA_UNION_DYN", "1: the union kernel takes its items from a global counter, not round-robin")     \
    X("KN_CUDA_PF_PREFETCH", "1: the pair path prefetches the next bucket's K/V into L2")                    \
    X("KN_CUDA_UNION_QPF", "1: the union producer prefetches the next item's Q into L2")                     \
    X("KN_CUDA_UNION_RARE_COST", "the hybrid decision: a rare pair's price in union products")               \
    X("KN_CUDA_UNION_RARE_CAP", "the hybrid decision: the largest share of an item's pairs (percent)")       \
    X("KN_CUDA_UNION_RPF", "1: the union consumers prefetch their rare partials into L2")                    \
    X("KN_CUDA_UNION_TMA", "1: whole K/V blocks reach the union kernel's ring by TMA, not cp.async")         \
    X("KN_CUDA_PF_DIAG_SKIP", "bench only, wrong output: bit 0 no pair attention, bit 1 no union kernel")    \
    X("KN_CUDA_PF_WGMMA", "1: pair tiles on the union kernel (wgmma); 2: only the hybrid's rare pairs")

/* the names alone, for an array: {KN_CUDA_PF_KNOBS(KN_CUDA_KNOB_NAME) NULL} */
#define KN_CUDA_KNOB_NAME(name, meaning) name,

#endif
