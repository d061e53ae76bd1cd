/* Linear layers through cuBLAS: bf16 operands, fp32 accumulation. Row-major C[m][n] = A[m][k] . W[n][k]^T is
 * the column-major product C^T = W . A^T, so W goes in transposed and A as is. */
#include "kn_cuda_internal.cuh"

#include <cublas_v2.h>
#include <stdlib.h>

#define KN_BLAS_WS_BYTES (32u << 20)

struct kn_cuda_blas {
    cublasHandle_t h;
    void *ws;
};

static int32_t blas_err(cublasStatus_t s, const char *what, struct mm_err *err)
{
    if (s == CUBLAS_STATUS_SUCCESS) return MM_OK;
    return mm_err_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? MM_NOMEM : MM_ERROR, "%s: cuBLAS %s", what,
                      cublasGetStatusName(s));
}

extern "C" int32_t kn_cuda_blas_create(struct kn_cuda_blas **out, cudaStream_t stream, struct mm_err *err)
{
    if (!out) return mm_err_set(err, MM_INVALID, "kn_cuda_blas_create: NULL out");
    *out = NULL;
    struct kn_cuda_blas *b = (struct kn_cuda_blas *)calloc(1, sizeof(*b));
    if (!b) return mm_err_set(err, MM_NOMEM, "kn_cuda_blas_create: out of memory");
    int32_t rc = blas_err(cublasCreate(&b->h), "kn_cuda_blas_create", err);
    if (rc == MM_OK)
        rc = kn_cuda_check(cudaMalloc(&b->ws, KN_BLAS_WS_BYTES), "kn_cuda_blas_create: workspace", err);
    if (rc == MM_OK)
        rc = blas_err(cublasSetWorkspace(b->h, b->ws, KN_BLAS_WS_BYTES), "kn_cuda_blas_create", err);
    if (rc == MM_OK) rc = blas_err(cublasSetStream(b->h, stream), "kn_cuda_blas_create", err);
    /* bf16 operands with fp32 accumulation and no reduced-precision shortcuts */
    if (rc == MM_OK) rc = blas_err(cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH), "kn_cuda_blas_create", err);
    if (rc) {
        kn_cuda_blas_destroy(b);
        return rc;
    }
    *out = b;
    return MM_OK;
}

extern "C" void kn_cuda_blas_destroy(struct kn_cuda_blas *b)
{
    if (!b) return;
    if (b->h) cublasDestroy(b->h);
    if (b->ws) cudaFree(b->ws);
    free(b);
}

extern "C" int32_t kn_cuda_blas_set_stream(struct kn_cuda_blas *b, cudaStream_t stream, struct mm_err *err)
{
    if (!b) return mm_err_set(err, MM_INVALID, "kn_cuda_blas_set_stream: NULL handle");
    return blas_err(cublasSetStream(b->h, stream), "kn_cuda_blas_set_stream", err);
}

static int dims_ok(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldw, int64_t ldc)
{
    return m >= 0 && n >= 0 && k >= 0 && m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda >= k &&
           ldw >= k && ldc >= n && lda <= INT32_MAX && ldw <= INT32_MAX && ldc <= INT32_MAX;
}

extern "C" int32_t kn_cuda_gemm_bf16(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const void *a,
                                     int64_t lda, const void *w, int64_t ldw, float beta, void *c,
                                     int64_t ldc, int32_t c_bf16, struct mm_err *err)
{
    if (!b || !dims_ok(m, n, k, lda, ldw, ldc) || (m * n > 0 && (!a || !w || !c)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemm_bf16: bad arguments (m %lld n %lld k %lld)",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0) return MM_OK;
    const float alpha = 1.0f;
    return blas_err(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, w,
                                 CUDA_R_16BF, (int)ldw, a, CUDA_R_16BF, (int)lda, &beta, c,
                                 c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT),
                    "kn_cuda_gemm_bf16", err);
}

extern "C" int32_t kn_cuda_gemm_f32(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k, const float *a,
                                    int64_t lda, const float *w, int64_t ldw, float beta, float *c,
                                    int64_t ldc, struct mm_err *err)
{
    if (!b || !dims_ok(m, n, k, lda, ldw, ldc) || (m * n > 0 && (!a || !w || !c)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemm_f32: bad arguments (m %lld n %lld k %lld)",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0) return MM_OK;
    const float alpha = 1.0f;
    return blas_err(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, w,
                                 CUDA_R_32F, (int)ldw, a, CUDA_R_32F, (int)lda, &beta, c, CUDA_R_32F,
                                 (int)ldc, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
                    "kn_cuda_gemm_f32", err);
}

extern "C" int32_t kn_cuda_gemm_bf16_batched(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k,
                                             const void *a, int64_t lda, int64_t batch_a, const void *w,
                                             int64_t ldw, int64_t batch_w, float beta, void *c, int64_t ldc,
                                             int64_t batch_c, int32_t c_bf16, int32_t batch,
                                             struct mm_err *err)
{
    if (!b || !dims_ok(m, n, k, lda, ldw, ldc) || batch < 0 || (m * n * batch > 0 && (!a || !w || !c)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemm_bf16_batched: bad arguments");
    if (m == 0 || n == 0 || batch == 0) return MM_OK;
    const float alpha = 1.0f;
    return blas_err(cublasGemmStridedBatchedEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha,
                                               w, CUDA_R_16BF, (int)ldw, batch_w, a, CUDA_R_16BF, (int)lda,
                                               batch_a, &beta, c, c_bf16 ? CUDA_R_16BF : CUDA_R_32F, (int)ldc,
                                               batch_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                    "kn_cuda_gemm_bf16_batched", err);
}
