/* Hopper (sm_90a) warpgroup primitives: wgmma m64n128k16 (bf16 in, f32 accumulate) with both operands in
 * shared memory or A in registers, the shared-memory matrix descriptors for 128-byte-swizzled tiles,
 * mbarriers, and the proxy fence. Internal to kernels/cuda.
 *
 * Tile layout ("sw128 tile"): R rows of 128 bf16 (a K/V block, a Q tile) stored as two slabs of 64 columns,
 * slab s at s * R * 128 bytes, row r of a slab at r * 128, its 16-byte chunk c (8 bf16) at chunk c ^ (r & 7).
 * The tile starts on a 1024-byte boundary, so each group of 8 rows is one 1024-byte swizzle atom: exactly
 * the 128B-swizzle pattern the tensor cores decode from address bits [4:6] ^ [7:9].
 *   - as a K-major operand (rows are M or N, the 128 columns are K): one k-step of 16 columns (32 bytes)
 *     starts at slab (kk / 4), byte (kk % 4) * 32; 8-row groups are SBO = 1024 apart; LBO unused (1).
 *   - as an MN-major B operand (rows are K, columns are N): one k-step of 16 rows starts at row 16 kk;
 *     8-row groups along K are SBO = 1024 apart, 64-column slabs along N are LBO = R * 128 apart
 *     (PTX ISA, "matrix descriptor": for MN-major swizzled layouts the leading-dimension offset is the stride
 *     between repeats of the swizzle atom along MN, the stride-dimension offset the one along K).
 * Accumulators of m64nNk16 (f32): warp w of the warpgroup holds rows 16w..16w+15; register 4*nt + e is row
 * 16w + gid + 8*(e >> 1), column 8*nt + 2*tig + (e & 1) (lane = 4*gid + tig), the mma.sync C layout per
 * 8-column tile. An A operand from registers uses the mma.sync m16n8k16 A layout per warp, so a score
 * accumulator converts to the P operand of the next product by packing pairs (see kn_msa_prefill_union.cu).
 */
#ifndef KN_WGMMA_CUH
#define KN_WGMMA_CUH

#include "kn_cuda_internal.cuh"

/* Byte offset of (row, 16-byte chunk 0..15) in an sw128 tile of `rows` rows. */
__device__ __forceinline__ uint32_t wg_sw128_off(int row, int chunk, int rows)
{
    return (uint32_t)((chunk >> 3) * rows * 128 + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/* Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits 62-63); base offset 0 because
 * every tile starts on a 1024-byte boundary and k-steps move the start only inside an atom row. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((smem_addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

/* K-major operand of an sw128 tile, k-step kk (16 columns). */
__device__ __forceinline__ uint64_t wg_desc_kmajor(uint32_t tile, int rows, int kk)
{
    return wg_desc(tile + (uint32_t)((kk >> 2) * rows * 128 + (kk & 3) * 32), 16, 1024);
}

/* MN-major B operand of an sw128 tile (rows = K), k-step kk (rows 16kk..16kk+15). */
__device__ __forceinline__ uint64_t wg_desc_mnmajor(uint32_t tile, int rows, int kk)
{
    return wg_desc(tile + (uint32_t)(kk * 16 * 128), (uint32_t)rows * 128, 1024);
}

/* ---- wgmma ordering ---- */

/* Before a wgmma that reads registers (accumulators, A fragments) written by ordinary instructions. */
__device__ __forceinline__ void wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Tell the compiler the accumulators change here: the wgmma writes them asynchronously, so no read may be
 * scheduled before the wait and no write after the issue (what CUTLASS calls warpgroup_fence_operand). */
__device__ __forceinline__ void wg_touch(float (&d)[64])
{
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* Ordinary (generic-proxy) shared-memory writes, cp.async included, before tensor-core reads of them. */
__device__ __forceinline__ void wg_fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

#define WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_D16(i) WG_D4(i), WG_D4(i + 4), WG_D4(i + 8), WG_D4(i + 12)
#define WG_D64 WG_D16(0), WG_D16(16), WG_D16(32), WG_D16(48)
#define WG_R64                                                                                               \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "  \
    "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "   \
    "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "   \
    "%62, %63}"

/* d (64 x 128, f32) = A (64 x 16, K-major in smem) * B (16 x 128, K-major in smem) + (accumulate ? d : 0). */
__device__ __forceinline__ void wg_mma_ss(float (&d)[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64
                 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : WG_D64
                 : "l"(da), "l"(db), "r"(accumulate));
}

/* d (64 x 128, f32) = A (64 x 32 e4m3, K-major in smem) * B (32 x 128 e4m3, K-major in smem) + (accumulate ?
 * d : 0). FP8 operands are K-major only; in an sw128 tile a row holds 128 e4m3 (one slab), so k-step kk of 32
 * starts at byte 32 kk: the descriptor wg_desc_kmajor gives for kk < 4. */
__device__ __forceinline__ void wg_mma_ss_e4m3(float (&d)[64], uint64_t da, uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WG_R64 ", %64, %65, p, 1, 1;\n}\n"
                 : WG_D64
                 : "l"(da), "l"(db), "r"(accumulate));
}
/* d = A (64 x 16 from registers, mma.sync A layout per warp) * B (16 x 128, MN-major in smem) +
 * (accumulate ? d : 0). */
__device__ __forceinline__ void wg_mma_rs_tb(float (&d)[64], const uint32_t a[4], uint64_t db, int accumulate)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WG_R64
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : WG_D64
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate));
}

#undef WG_D4
#undef WG_D16
#undef WG_D64
#undef WG_R64

/* ---- mbarriers (CTA scope) ---- */

__device__ __forceinline__ void mb_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* After a thread's mb_init calls, before the barriers are shared: makes their initialization visible to
 * the async proxy (TMA and bulk copies complete on them) and to the cluster. */
__device__ __forceinline__ void mb_init_fence(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mb_arrive(uint32_t bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

/* Arrive once this thread's earlier cp.async copies have landed; the count was set for it at init. */
__device__ __forceinline__ void mb_arrive_cp_async(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/* Wait until the phase of the given parity has completed. */
__device__ __forceinline__ void mb_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}

/* Named barrier `id` (1..15) over `count` threads (a warpgroup: 128). */
__device__ __forceinline__ void wg_bar_sync(int id, int count)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

#endif
