/* Timestamps inside the decode kernels, for the benchmark only (bench/cuda/kn_bench.cu "layerprof"): with
 * hardware counters out of reach and a few device minutes per session, one run that records when each CTA
 * of the index scan and of the fused tail reaches each phase says where a decode layer's time goes. Off
 * unless a benchmark hands a buffer to kn_cuda_decode_prof_set() / kn_cuda_index_prof_set(): the launches
 * pass it as a kernel argument (NULL otherwise), so the production path pays a predictable branch on a
 * parameter and nothing else. */
#ifndef KN_DECODE_PROF_CUH
#define KN_DECODE_PROF_CUH

#include <stdint.h>

/* Slots per CTA of the fused decode kernel: globaltimer (ns) at each phase, clock64 at the same phases,
 * then the SM id. */
enum {
    KN_PROF_ENTRY,    /* kernel entry */
    KN_PROF_WAITED,   /* griddepcontrol.wait returned: the index scores are visible */
    KN_PROF_SELECTED, /* the row's blocks are chosen (top-k done, list in shared memory) */
    KN_PROF_PAGES,    /* every page of this split folded in */
    KN_PROF_COMBINED, /* the 4 warps combined, partial in shared memory */
    KN_PROF_MERGED,   /* this CTA's heads merged across the cluster and written */
    KN_PROF_EXIT,     /* after the last cluster barrier */
    KN_PROF_PHASES,
    KN_PROF_CLOCK = 8, /* clock64 at phase p: slot KN_PROF_CLOCK + p */
    KN_PROF_SMID = 15,
    KN_PROF_TOPK = 16,  /* globaltimer at the end of top-k's loads, bound, gather, ranks (kn_topk_row) */
    KN_PROF_XCHG = 20,  /* split selection (KN_CUDA_TOPK_SPLIT): every slice's list received */
    KN_PROF_RECV = 21,  /* pushed merge (KN_CUDA_MERGE_PUSH): the owned heads' partials received */
    KN_PROF_MERGE = 24, /* split selection, merging the lists: counted, compacted, ranked; survivors (27) */
    KN_PROF_TOPK_CAND = 28, /* top-k's candidates (kn_topk_row ts[4]) */
    KN_PROF_CTA_SLOTS = 32
};

/* Slots per warp of the index scan: entry, first tile landed, exit (globaltimer), SM id | pages << 32. */
enum { KN_PROF_IDX_ENTRY, KN_PROF_IDX_FIRST, KN_PROF_IDX_EXIT, KN_PROF_IDX_INFO, KN_PROF_IDX_SLOTS };

__device__ __forceinline__ uint64_t kn_prof_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint32_t kn_prof_smid(void)
{
    uint32_t s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}

#endif
