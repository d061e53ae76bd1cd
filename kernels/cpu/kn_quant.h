/* Activation quantization for FP8 products: the reference the CUDA quantizer (kernels/cuda/kn_x_e4m3.cu) is
 * tested against. */
#ifndef KN_QUANT_H
#define KN_QUANT_H

#include <stdint.h>

/** Rows of x [n][cols] (row stride ldx) as the FP8 block-scaled products read them (CUDA,
 * MMGW_CUDA_FP8_PREFILL=e4m3): each row cut into groups of `group` values (the last may be shorter), each
 * group quantized to e4m3 with s = amax / 448 (1 for an all-zero group), the rule of the FP8 index keys
 * (kn_msa_quant_q8): q [n][cols] = e4m3(x / s), qs [ceil(cols / group)][n] = s, group-major (the layout
 * cuBLASLt's 128-wide vector scales take). */
void kn_quant_e4m3_groups(const float *x, int64_t n, int64_t cols, int64_t ldx, int32_t group, uint8_t *q,
                          float *qs);

#endif
