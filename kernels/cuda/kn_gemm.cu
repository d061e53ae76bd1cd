/* Linear layers through cuBLAS: bf16 operands, fp32 accumulation. Row-major C[m][n] = A[m][k] . W[n][k]^T is
 * the column-major product C^T = W . A^T, so W goes in transposed and A as is. */
#include "kn_cuda_internal.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdlib.h>
#include <string.h>

#define KN_BLAS_WS_BYTES (32u << 20)
/* cuBLASLt plans kept per handle: a vision tower has ~6 product shapes, a text prefill 2-3 per chunk size */
#define KN_LT_PLANS 16

/* The cuBLASLt products: bf16 with the bias in the epilogue; e4m3 x e4m3 with 128 x 128 weight-block and
 * 128-wide activation-group scales (kn_cuda_gemm_fp8_block) */
enum lt_kind { LT_BF16_BIAS = 0, LT_FP8_BLOCK = 1 };

/* One shape's cuBLASLt set-up: the heuristic's pick costs tens of microseconds of host time, so it is made
 * once per (kind, shape, strides, alignments) and reused */
struct lt_plan {
    enum lt_kind kind;
    int64_t m, n, k, lda, ldw, ldc;
    uint32_t align; /* the smallest alignment of A, W and C (= D), in bytes (<= 256) */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int ok; /* 0: the heuristic found nothing (the caller's two-pass route then) */
};

struct kn_cuda_blas {
    cublasHandle_t h;
    void *ws;
    cublasLtHandle_t lt; /* created on the first bias product */
    cudaStream_t stream;
    struct lt_plan plans[KN_LT_PLANS];
    int n_plans, next;
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
    b->stream = stream;
    /* bf16 operands with fp32 accumulation and no reduced-precision shortcuts */
    if (rc == MM_OK) rc = blas_err(cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH), "kn_cuda_blas_create", err);
    if (rc) {
        kn_cuda_blas_destroy(b);
        return rc;
    }
    *out = b;
    return MM_OK;
}

static void lt_plan_free(struct lt_plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof(*p));
}

extern "C" void kn_cuda_blas_destroy(struct kn_cuda_blas *b)
{
    if (!b) return;
    for (int i = 0; i < b->n_plans; i++) lt_plan_free(&b->plans[i]);
    if (b->lt) cublasLtDestroy(b->lt);
    if (b->h) cublasDestroy(b->h);
    if (b->ws) cudaFree(b->ws);
    free(b);
}

extern "C" int32_t kn_cuda_blas_set_stream(struct kn_cuda_blas *b, cudaStream_t stream, struct mm_err *err)
{
    if (!b) return mm_err_set(err, MM_INVALID, "kn_cuda_blas_set_stream: NULL handle");
    b->stream = stream;
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

static uint32_t ptr_align(const void *p)
{
    const uintptr_t a = (uintptr_t)p;
    return a % 256 == 0 ? 256u : (uint32_t)(a & (~a + 1));
}

/* The plan for one call's shape, made on first use (NULL: cuBLASLt refused the set-up) */
/* sw / sx: an FP8 plan's scale pointers (the heuristic finds nothing while they are unset; each call sets its
 * own again) */
static struct lt_plan *lt_plan_get(struct kn_cuda_blas *b, enum lt_kind kind, int64_t m, int64_t n, int64_t k,
                                   int64_t lda, int64_t ldw, int64_t ldc, uint32_t align, const float *sw,
                                   const float *sx)
{
    for (int i = 0; i < b->n_plans; i++) {
        struct lt_plan *p = &b->plans[i];
        if (p->kind == kind && p->m == m && p->n == n && p->k == k && p->lda == lda && p->ldw == ldw &&
            p->ldc == ldc && p->align == align)
            return p->ok ? p : NULL;
    }
    if (!b->lt && cublasLtCreate(&b->lt) != CUBLAS_STATUS_SUCCESS) return NULL;
    struct lt_plan *p;
    if (b->n_plans < KN_LT_PLANS) {
        p = &b->plans[b->n_plans++];
    } else { /* round robin over the full table */
        p = &b->plans[b->next];
        b->next = (b->next + 1) % KN_LT_PLANS;
        lt_plan_free(p);
    }
    p->kind = kind, p->m = m, p->n = n, p->k = k, p->lda = lda, p->ldw = ldw, p->ldc = ldc, p->align = align;
    p->ok = 0;
    /* column-major: D[n][m] = op(W)[n][k] . X[k][m] (+ bias[n]), W stored k x n (transposed in), X k x m */
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_t = CUDA_R_32F;
    /* FP8: W's scales per 128 x 128 block, X's per 128 values of a row (both f32, multiplied) */
    const int32_t sc_w = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                  sc_x = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int fp8 = kind == LT_FP8_BLOCK;
    const cudaDataType_t in_t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const uint64_t ws = KN_BLAS_WS_BYTES;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ||
        (!fp8 && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) ||
        (!fp8 && cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                                sizeof bias_t)) ||
        (fp8 &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &sc_w, sizeof sc_w)) ||
        (fp8 &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &sc_x, sizeof sc_x)) ||
        (fp8 &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sw, sizeof sw)) ||
        (fp8 &&
         cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sx, sizeof sx)) ||
        cublasLtMatrixLayoutCreate(&p->la, in_t, (uint64_t)k, (uint64_t)n, ldw) ||
        cublasLtMatrixLayoutCreate(&p->lb, in_t, (uint64_t)k, (uint64_t)m, lda) ||
        cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, (uint64_t)n, (uint64_t)m, ldc) ||
        cublasLtMatmulPreferenceCreate(&pref) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align,
                                             sizeof align) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align,
                                             sizeof align) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align,
                                             sizeof align) ||
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align,
                                             sizeof align) ||
        cublasLtMatmulAlgoGetHeuristic(b->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &nres) ||
        nres < 1) {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        return NULL; /* kept with ok = 0: the same shape is not asked again */
    }
    cublasLtMatmulPreferenceDestroy(pref);
    p->algo = res.algo;
    p->ok = 1;
    return p;
}

extern "C" int32_t kn_cuda_gemm_bf16_bias(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k,
                                          const void *a, int64_t lda, const void *w, int64_t ldw,
                                          const float *bias, float *c, int64_t ldc, struct mm_err *err)
{
    if (!b || !dims_ok(m, n, k, lda, ldw, ldc) || (m * n > 0 && (!a || !w || !c || !bias)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemm_bf16_bias: bad arguments (m %lld n %lld k %lld)",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0 || n == 0) return MM_OK;
    if (ptr_align(bias) < 16) /* the epilogue reads the bias in 16-byte vectors */
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_bf16_bias: bias not 16-byte aligned");
    /* the lowest set bit of the three addresses together: the smallest of their alignments */
    const uint32_t al = ptr_align((const void *)((uintptr_t)a | (uintptr_t)w | (uintptr_t)c));
    struct lt_plan *p = lt_plan_get(b, LT_BF16_BIAS, m, n, k, lda, ldw, ldc, al, NULL, NULL);
    if (!p) return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_bf16_bias: no cuBLASLt algorithm");
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s =
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(b->lt, p->op, &alpha, w, p->la, a, p->lb, &beta, c, p->lc, c, p->lc, &p->algo,
                           b->ws, KN_BLAS_WS_BYTES, b->stream);
    return blas_err(s, "kn_cuda_gemm_bf16_bias", err);
}

extern "C" int kn_cuda_gemm_fp8_block_ok(int64_t n, int64_t k, int32_t bs_rows, int32_t bs_cols)
{
    /* W's block scales are read as cuBLASLt's 128 x 128 layout: [n / 128][k / 128] with that row length a
     * multiple of 4 is the checkpoint's own order; 16-byte rows of e4m3 for the tensor-core loads */
    return bs_rows == 128 && bs_cols == 128 && k > 0 && k % 512 == 0 && n > 0 && n % 16 == 0 &&
           k <= INT32_MAX && n <= INT32_MAX;
}

static size_t al256(size_t v)
{
    return (v + 255) & ~(size_t)255;
}

/* Workspace parts: the first m4 = m - m % 4 rows quantized (xq [m4][k], xqs [k/128][m4]); the 1-3 rows after
 * them quantized into 4-row buffers (cuBLASLt's 128-wide scales want a row count that is a multiple of 4:
 * 37 rows were refused, 300 taken), the padding rows zero, and their 4-row product */
struct fp8_ws {
    uint8_t *xq, *xq_t;
    float *xqs, *xqs_t, *y_t;
    size_t bytes;
};

static struct fp8_ws fp8_ws_parts(void *ws, int64_t m, int64_t n, int64_t k)
{
    const int64_t m4 = m - m % 4, g = k / 128;
    size_t o[6] = {0}; /* offsets of xq, xqs, xq_t, xqs_t, y_t, and the end */
    o[1] = al256((size_t)(m4 * k));
    o[2] = o[1] + al256(sizeof(float) * (size_t)(g * m4));
    o[3] = o[2] + (m % 4 ? al256((size_t)(4 * k)) : 0);
    o[4] = o[3] + (m % 4 ? al256(sizeof(float) * (size_t)(4 * g)) : 0);
    o[5] = o[4] + (m % 4 ? al256(sizeof(float) * (size_t)(4 * n)) : 0);
    struct fp8_ws p = {};
    p.bytes = o[5];
    if (ws) {
        char *base = (char *)ws;
        p.xq = (uint8_t *)base, p.xqs = (float *)(base + o[1]);
        if (m % 4)
            p.xq_t = (uint8_t *)(base + o[2]), p.xqs_t = (float *)(base + o[3]),
            p.y_t = (float *)(base + o[4]);
    }
    return p;
}

extern "C" size_t kn_cuda_gemm_fp8_block_ws(int64_t m, int64_t n, int64_t k)
{
    return m > 0 && n > 0 && k > 0 ? fp8_ws_parts(NULL, m, n, k).bytes : 0;
}

/* One cuBLASLt product of p's m (a multiple of 4) quantized rows xq / xqs into c, with this call's scales */
static int32_t fp8_block_run(struct kn_cuda_blas *b, struct lt_plan *p, const uint8_t *xq, const float *xqs,
                             const uint8_t *w, const float *w_scale, float *c, struct mm_err *err)
{
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t s =
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scale, sizeof w_scale);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xqs, sizeof xqs);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(b->lt, p->op, &alpha, w, p->la, xq, p->lb, &beta, c, p->lc, c, p->lc, &p->algo,
                           b->ws, KN_BLAS_WS_BYTES, b->stream);
    return blas_err(s, "kn_cuda_gemm_fp8_block", err);
}

extern "C" int32_t kn_cuda_gemm_fp8_block(struct kn_cuda_blas *b, int64_t m, int64_t n, int64_t k,
                                          const float *x, int64_t ldx, const uint8_t *w, const float *w_scale,
                                          float *c, int64_t ldc, void *ws, size_t ws_bytes,
                                          struct mm_err *err)
{
    if (!b || m < 0 || m > INT32_MAX || !kn_cuda_gemm_fp8_block_ok(n, k, 128, 128) || ldc < n ||
        ldc > INT32_MAX || !kn_cuda_x_e4m3_groups_ok(k, ldx) ||
        (m > 0 && (!x || !w || !w_scale || !c || !ws || ws_bytes < kn_cuda_gemm_fp8_block_ws(m, n, k))))
        return mm_err_set(err, MM_INVALID, "kn_cuda_gemm_fp8_block: bad arguments (m %lld n %lld k %lld)",
                          (long long)m, (long long)n, (long long)k);
    if (m == 0) return MM_OK;
    const struct fp8_ws q = fp8_ws_parts(ws, m, n, k);
    const int64_t m4 = m - m % 4, r = m % 4;
    if (ptr_align(w_scale) < 16 || ptr_align(ws) < 256)
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_fp8_block: scales or workspace not aligned");
    /* both plans asked before anything runs (a refused shape costs nothing but the cached question), and
     * again right before each product: the second lookup may have evicted the first from a full table */
    const uint32_t al_h = ptr_align((const void *)((uintptr_t)w | (uintptr_t)c)), al_t = ptr_align(w);
    if ((r && !lt_plan_get(b, LT_FP8_BLOCK, 4, n, k, k, k, n, al_t, w_scale, q.xqs_t)) ||
        (m4 && !lt_plan_get(b, LT_FP8_BLOCK, m4, n, k, k, k, ldc, al_h, w_scale, q.xqs)))
        return mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_fp8_block: no cuBLASLt algorithm");
    int32_t rc = MM_OK;
    if (m4) {
        struct lt_plan *ph = lt_plan_get(b, LT_FP8_BLOCK, m4, n, k, k, k, ldc, al_h, w_scale, q.xqs);
        rc = ph ? kn_cuda_x_e4m3_groups(m4, k, x, ldx, q.xq, q.xqs, m4, b->stream, err)
                : mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_fp8_block: cuBLASLt plan lost");
        if (!rc) rc = fp8_block_run(b, ph, q.xq, q.xqs, w, w_scale, c, err);
    }
    if (!rc && r) {
        rc = kn_cuda_check(cudaMemsetAsync(q.xq_t, 0, (size_t)(4 * k), b->stream), "kn_cuda_gemm_fp8_block",
                           err);
        if (!rc)
            rc =
                kn_cuda_check(cudaMemsetAsync(q.xqs_t, 0, sizeof(float) * (size_t)(4 * (k / 128)), b->stream),
                              "kn_cuda_gemm_fp8_block", err);
        if (!rc) rc = kn_cuda_x_e4m3_groups(r, k, x + m4 * ldx, ldx, q.xq_t, q.xqs_t, 4, b->stream, err);
        struct lt_plan *pt =
            rc ? NULL : lt_plan_get(b, LT_FP8_BLOCK, 4, n, k, k, k, n, al_t, w_scale, q.xqs_t);
        if (!rc && !pt) rc = mm_err_set(err, MM_UNSUPPORTED, "kn_cuda_gemm_fp8_block: cuBLASLt plan lost");
        if (!rc) rc = fp8_block_run(b, pt, q.xq_t, q.xqs_t, w, w_scale, q.y_t, err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy2DAsync(c + m4 * ldc, sizeof(float) * (size_t)ldc, q.y_t,
                                                 sizeof(float) * (size_t)n, sizeof(float) * (size_t)n,
                                                 (size_t)r, cudaMemcpyDeviceToDevice, b->stream),
                               "kn_cuda_gemm_fp8_block", err);
    }
    return rc;
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
