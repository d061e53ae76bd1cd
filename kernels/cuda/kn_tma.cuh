/* Tensor memory access (TMA) shared by the kernels that load tiles with bulk tensor copies: the 2-D map
 * encoder (host) and the one-box copy (device). Internal to kernels/cuda. */
#ifndef KN_TMA_CUH
#define KN_TMA_CUH

#include <cuda.h> /* CUtensorMap and the encoder's signature only: the driver is reached through the runtime */

#include "kn_cuda_internal.cuh"

/* A 2-D map of bf16 (f8 = 0) or 8-bit (f8 = 1) elements [rows][cols], row stride ld elements, in boxes of
 * box_cols x box_rows with the 128-byte swizzle (box_cols x element size = 128 bytes gives the sw128 tile
 * layout of kn_wgmma.cuh). 0 when the driver has no encoder or refuses the shape. */
int kn_tma_encode_2d(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int64_t ld, uint32_t box_cols,
                     uint32_t box_rows, int f8);

/* One box at (col, row) of map into shared memory at dst, completing on the mbarrier full (which expects its
 * bytes); with hint, under the L2 eviction policy pol. */
__device__ __forceinline__ void kn_tma_box(uint32_t dst, uint64_t map, int32_t col, int32_t row,
                                           uint32_t full, bool hint, uint64_t pol)
{
    if (hint)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
            "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
            "l"(map), "r"(col), "r"(row), "r"(full), "l"(pol)
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
            "%3}], [%4];\n" ::"r"(dst),
            "l"(map), "r"(col), "r"(row), "r"(full)
            : "memory");
}

/* Arrive on full and add bytes to the transaction count its phase waits for. */
__device__ __forceinline__ void kn_mb_arrive_expect_tx(uint32_t full, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(full), "r"(bytes)
                 : "memory");
}

#endif
