/* Top-k over block scores, one CTA per (index head, query) row: kn_topk_row (kn_topk_row.cuh) on the row,
 * then every slot of the selection row written. Deterministic: the order is (score descending, block id
 * ascending), the same as kn_msa_topk_local. */
#include "kn_msa_kernels.cuh"
#include "kn_topk_row.cuh"

#define TOPK_NT 256
#define TOPK_VPT 32 /* scores per thread per round: 8192 per row (1M context) in one round of loads */

__global__ void __launch_bounds__(TOPK_NT)
    k_topk(const float *__restrict__ scores, int32_t score_stride, const int64_t *__restrict__ pos, int32_t n,
           int32_t block, int32_t topk, int32_t n_local, int32_t *__restrict__ sel, int32_t sel_stride,
           int32_t branchfree)
{
    __shared__ kn_topk_smem<TOPK_NT> sm;
    __shared__ int32_t best[KN_CUDA_MAX_TOPK];
    const int64_t r = blockIdx.x; /* row = g * n + i */
    const int32_t i = (int32_t)(r % n);
    const int64_t own = pos[i] / block;
    int64_t lo = own - (n_local > 0 ? n_local : 1) + 1;
    if (lo < 0) lo = 0;
    int kk = topk < sel_stride ? topk : sel_stride;
    if (kk > KN_CUDA_MAX_TOPK) kk = KN_CUDA_MAX_TOPK;
    kn_topk_row<TOPK_NT, TOPK_VPT>(scores + r * score_stride, (int32_t)own + 1, lo, kk, sm, best, nullptr,
                                   branchfree != 0);
    int32_t *out = sel + r * sel_stride;
    for (int32_t j = threadIdx.x; j < sel_stride; j += TOPK_NT) out[j] = j < kk ? best[j] : -1;
}

int32_t kn_topk_launch(const float *scores, int32_t score_stride, const int64_t *pos, int32_t n,
                       int32_t n_heads, int32_t block, int32_t topk, int32_t n_local, int32_t *sel,
                       int32_t sel_stride, cudaStream_t stream, struct mm_err *err)
{
    if (topk <= 0 || topk > KN_CUDA_MAX_TOPK || sel_stride < 1)
        return mm_err_set(err, MM_INVALID, "kn_cuda_msa_topk: topk %d (max %d), sel_stride %d", topk,
                          KN_CUDA_MAX_TOPK, sel_stride);
    int64_t rows = (int64_t)n * n_heads;
    if (rows == 0) return MM_OK;
    if (rows > INT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_msa_topk: %lld rows", (long long)rows);
    k_topk<<<(unsigned)rows, TOPK_NT, 0, stream>>>(scores, score_stride, pos, n, block, topk, n_local, sel,
                                                   sel_stride, kn_cuda_knob("KN_CUDA_TOPK_BF", 1));
    KN_LAUNCHED("kn_cuda_msa_topk");
    return MM_OK;
}
