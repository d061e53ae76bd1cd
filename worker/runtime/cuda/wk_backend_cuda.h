/* The CUDA backend of the model runtime (worker/runtime/wk_backend.h) on one GPU, over kernels/cuda.
 *
 * Precision (MMGW_CUDA_PRECISION): "bf16" (default, the production mode) keeps matrix weights in bf16 and
 * rounds activations to bf16 at each product (fp32 accumulation), except the MoE router and the MSA index
 * projections, whose outputs pick experts and blocks and are computed in fp32; K/V and index-key caches are
 * bf16 and the attention runs on the tensor-core kernels where the shapes allow. "fp32" is the exact mode:
 * every product in fp32 (no TF32), f32 caches, the generic attention kernels; it reproduces the CPU backend
 * to fp32 rounding (the acceptance check on the tiny checkpoints). Activations between operations are fp32
 * in both. MMGW_CUDA_INDEX=fp8|bf16|f32 overrides the index-key cache (fp8: e4m3 with a per-token scale).
 *
 * Decode steps (one new token per sequence) of 1-2 sequences run as CUDA graphs: the operations are recorded
 * and replayed as one launch once the same step has been seen twice (wk_cuda_steps.h; MMGW_CUDA_GRAPHS=0
 * turns this off), and their products with 1-2 activation rows run on kn_cuda_gemv_bf16 instead of cuBLAS
 * (MMGW_CUDA_GEMV=0 turns that off). Graphs leave every result bit for bit as it is without them; the
 * products differ from cuBLAS's by the order of their f32 sums. */
#ifndef WK_BACKEND_CUDA_H
#define WK_BACKEND_CUDA_H

#include <stdint.h>

#include "mm_status.h"
#include "wk_backend.h"

/** A CUDA backend on the current device; MM_UNAVAILABLE (with the reason) when there is no usable GPU. */
int32_t wk_backend_cuda_create(struct wk_be *out, struct mm_err *err);

#endif
