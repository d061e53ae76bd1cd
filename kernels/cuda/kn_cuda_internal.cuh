/* Helpers shared by the kn_cuda kernels: tensor-core fragments (mma.sync m16n8k16), async copies, bf16
 * packing, and the argument checks every entry point uses. Internal to kernels/cuda. */
#ifndef KN_CUDA_INTERNAL_CUH
#define KN_CUDA_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kn_cuda.h"

#define KN_WARP 32

/* Set err and return from the enclosing host function when a CUDA call fails. */
#define KN_CU(call, what)                                                                                    \
    do {                                                                                                     \
        cudaError_t kn_e__ = (call);                                                                         \
        if (kn_e__ != cudaSuccess) return kn_cuda_check(kn_e__, what, err);                                  \
    } while (0)

/* After a launch: report launch-configuration errors (not the asynchronous execution errors). */
#define KN_LAUNCHED(what) KN_CU(cudaGetLastError(), what)

static inline int64_t kn_cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* ---- bf16 packing ---- */

__device__ __forceinline__ uint32_t kn_pack_bf16(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t kn_pack_f16(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float kn_bf16_lo(uint32_t w)
{
    return __uint_as_float(w << 16);
}

__device__ __forceinline__ float kn_bf16_hi(uint32_t w)
{
    return __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ float kn_bf16_to_f32(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ uint16_t kn_f32_to_bf16(float f)
{
    __nv_bfloat16 b = __float2bfloat16_rn(f);
    return *reinterpret_cast<uint16_t *>(&b);
}

/* Two e4m3 values (low byte first) -> f16x2, exact (every e4m3 value is an f16 value). */
__device__ __forceinline__ uint32_t kn_e4m3x2_to_f16x2(uint16_t v)
{
    __half2_raw r = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)v, __NV_E4M3);
    return (uint32_t)r.x | ((uint32_t)r.y << 16);
}

/* ---- tensor cores: D = A(16x16, row) * B(16x8, col) + D, fp32 accumulate ----
 * Fragment ownership for lane = 4*gid + tig:
 *   A: a[0] = (row gid,   k 2tig..2tig+1)   a[1] = (row gid+8, k 2tig..)
 *      a[2] = (row gid,   k 2tig+8..+9)     a[3] = (row gid+8, k 2tig+8..)
 *   B: b[0] = (k 2tig..2tig+1, col gid)     b[1] = (k 2tig+8..+9, col gid)
 *   C: c[0..1] = (row gid, col 2tig..+1)    c[2..3] = (row gid+8, col 2tig..+1) */
__device__ __forceinline__ void kn_mma_bf16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void kn_mma_f16(float c[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* ---- shared memory: ldmatrix and cp.async ---- */

__device__ __forceinline__ uint32_t kn_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Four 8x8 b16 matrices; lane l supplies the row address of matrix l/8, row l%8. */
__device__ __forceinline__ void kn_ldsm_x4(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void kn_ldsm_x4_trans(uint32_t r[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* 16-byte global -> shared copy that bypasses registers; src_bytes < 16 zero-fills the rest. */
__device__ __forceinline__ void kn_cp_async16(uint32_t dst, const void *src, int32_t src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}

/* 4-byte global -> shared copy (through L1: .ca is the only kind for sizes below 16). */
__device__ __forceinline__ void kn_cp_async4(uint32_t dst, const void *src)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void kn_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void kn_cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Streaming 16-byte global load (read once: do not keep in L1). */
__device__ __forceinline__ uint4 kn_ldg_stream(const void *p)
{
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* 128-byte rows of 16-byte chunks: chunk c of row r lives at chunk c ^ (r & 7), so that the 8 rows an
 * ldmatrix reads at one column fall in 8 different bank groups. Rows of 256 bytes (16 chunks) swizzle the
 * low 3 bits of the chunk index the same way. */
__device__ __forceinline__ int kn_swz(int row, int chunk)
{
    return chunk ^ (row & 7);
}

/* ---- programmatic dependent launch (sm_90) ----
 * launch_dependents lets the next kernel of the stream, when it was launched with programmatic stream
 * serialization, be scheduled before this one ends (its launch latency hides behind our tail); wait blocks
 * until the previous kernel has completed and its writes are visible. Both are no-ops without PDL. */
__device__ __forceinline__ void kn_griddep_launch(void)
{
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ void kn_griddep_wait(void)
{
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

/* Host side: launch kern with cfg's first na attributes (at[], room for one more) and, when pdl, programmatic
 * stream serialization appended; a stream or driver that refuses it gets the same kernel plainly serialized.
 * Returns the launch's error (a refusal of the attribute alone is cleared). */
template <typename... P, typename... A>
static cudaError_t kn_launch_pdl(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *at, unsigned na, bool pdl,
                                 void (*kern)(P...), A... args)
{
    if (pdl) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
    }
    cfg->attrs = at;
    cfg->numAttrs = na + (pdl ? 1 : 0);
    cudaError_t e = cudaLaunchKernelEx(cfg, kern, args...);
    if (e != cudaSuccess && pdl) {
        (void)cudaGetLastError();
        cfg->numAttrs = na;
        e = cudaLaunchKernelEx(cfg, kern, args...);
    }
    return e;
}

/* ---- the launch chain: every kernel of a model step launched as a programmatic dependent ----
 * Between two dependent kernels of a decode step the GPU otherwise idles for the second's launch and ramp
 * (a few us, against kernels of 2-20 us at batch 1). Kernels started through kn_launch / kn_launch_cfg get
 * programmatic stream serialization (KN_CUDA_PDL_CHAIN=0: plain launches) and must call kn_chain_entry()
 * before they touch global memory: it waits until the kernel before has completed and its writes are visible
 * (so every kernel of the chain has waited for its predecessor before it ends: completion is transitive),
 * then lets the next kernel be scheduled onto the SMs this one leaves (an L2 prefetch of the products' first
 * weight lines before the wait measured level, t run 1, and is not kept). */
__device__ __forceinline__ void kn_chain_entry(void)
{
    kn_griddep_wait();
    kn_griddep_launch();
}

/* ---- thread-block clusters (sm_90): rank, barrier, distributed shared memory ---- */

/* Host side: cfg launches grid x threads on stream, as clusters of cx x cy CTAs when cx * cy > 1 (the
 * attribute goes in *at, which must outlive the launch call). */
static inline void kn_cluster_cfg(cudaLaunchConfig_t *cfg, cudaLaunchAttribute *at, dim3 grid,
                                  unsigned threads, cudaStream_t stream, unsigned cx, unsigned cy)
{
    *cfg = cudaLaunchConfig_t{};
    cfg->gridDim = grid;
    cfg->blockDim = dim3(threads, 1, 1);
    cfg->stream = stream;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = cx;
    at->val.clusterDim.y = cy;
    at->val.clusterDim.z = 1;
    cfg->attrs = at;
    cfg->numAttrs = cx * cy > 1 ? 1 : 0;
}

__device__ __forceinline__ uint32_t kn_cluster_rank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/* Every thread of every CTA of the cluster; orders shared-memory writes before it with reads after it. */
__device__ __forceinline__ void kn_cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

/* The address of the same shared-memory location in CTA `rank` of the cluster. */
__device__ __forceinline__ uint32_t kn_cluster_map(uint32_t smem_addr, uint32_t rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
    return r;
}

__device__ __forceinline__ float kn_ld_cluster_f32(uint32_t addr)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
    return v;
}

/* M3's clamped SwiGLU of one element; the rounding steps spelled out so that every kernel that applies it
 * (kn_ops.cu, the fused quantization of kn_x_e4m3.cu) gives the same bits whatever the compiler would
 * contract in its context */
__device__ __forceinline__ float kn_swiglu_f(float gate, float up, float alpha, float limit)
{
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return __fdiv_rn(__fmul_rn(__fadd_rn(u, 1.0f), g), __fadd_rn(1.0f, expf(-alpha * g)));
}

/* ---- warp reductions ---- */

__device__ __forceinline__ float kn_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float kn_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- host-side argument checks shared by the MSA entry points ---- */

int32_t kn_check_msa_args(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, const char *what, struct mm_err *err);

/* Streaming multiprocessors of the current device (cached). */
int32_t kn_cuda_sm_count(void);

/* Raise kern's dynamic shared-memory limit to at least smem bytes on the current device: the driver call only
 * the first time a kernel needs more than before (a host cost of every synced decode layer otherwise; table
 * of kn_cuda_util.cu, 64 kernels; past that, every call). KN_CUDA_ATTR_MEMO=0: the call every time. */
cudaError_t kn_smem_attr(const void *kern, int smem);

/* Tuning knobs from the environment, cached per thread until kn_cuda_knobs_reload (kn_cuda.h), so that a
 * benchmark or a test can compare settings in one process: kn_cuda_knob is "0" off, anything else on, unset
 * or empty dflt; kn_cuda_knob_int is atoi, unset or empty dflt. The MSA knobs are listed in
 * kn_msa_kernels.cuh, the sparse-prefill ones in kn_cuda_knobs.h; the products' (KN_CUDA_GEMV_F32_R / _KS,
 * KN_CUDA_GS_CLUSTER) where they are read. */
int kn_cuda_knob(const char *name, int dflt);
int kn_cuda_knob_int(const char *name, int dflt);

/* The end of an inner-dimension split over ks CTAs: y[t][r] (row stride ldy) = the sum over s of
 * part[s][t][r] ([ks][n][rows]), in order, so the result does not depend on which CTA finished first. */
cudaError_t kn_ksplit_sum(const float *part, int32_t n, int64_t rows, int32_t ks, float *y, int64_t ldy,
                          cudaStream_t stream);

/* The launch chain's host side (see kn_chain_entry): cfg as built (its attributes, at most 3, are copied),
 * plus the chain's programmatic serialization; kn_launch builds a plain cfg. */
template <typename... P, typename... A>
static cudaError_t kn_launch_cfg(cudaLaunchConfig_t *cfg, void (*kern)(P...), A... args)
{
    cudaLaunchAttribute at[4];
    const unsigned na = cfg->numAttrs < 3 ? cfg->numAttrs : 3;
    for (unsigned i = 0; i < na; i++) at[i] = cfg->attrs[i];
    return kn_launch_pdl(cfg, at, na, kn_cuda_knob("KN_CUDA_PDL_CHAIN", 1) != 0, kern, args...);
}

template <typename... P, typename... A>
static cudaError_t kn_launch(void (*kern)(P...), dim3 grid, unsigned threads, size_t smem,
                             cudaStream_t stream, A... args)
{
    cudaLaunchConfig_t cfg = cudaLaunchConfig_t{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    return kn_launch_cfg(&cfg, kern, args...);
}

#endif
