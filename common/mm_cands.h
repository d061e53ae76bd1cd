/* The margins of sampling candidates, shared by the CPU (kernels/cpu/kn_cands.c) and CUDA
 * (kn_cuda_topk_cands) versions: the first k tokens in the sampler's order (probability
 * float(exp((l - m) / t)) descending, id ascending) all have l >= l_k - MM_CANDS_TIE x t, l_k the k-th
 * largest logit (two logits closer than ~1.2e-7 t can round to one probability); every token the sampler
 * keeps (probability >= 1e-12 of the best: l >= m - 27.7 t) has l >= m - MM_CANDS_FLOOR x t. */
#ifndef MM_CANDS_H
#define MM_CANDS_H

#define MM_CANDS_TIE 1e-5f
#define MM_CANDS_FLOOR 28.6f

#endif
