/* The MSA entry points of kn_cuda.h: argument checks, the choice of implementation, and appending a step's
 * keys and values to the paged caches. */
#include "kn_msa_kernels.cuh"

#include <string.h>

/* Queries of one sequence up to which the per-(query, KV group) paged kernels beat the tiled prefill ones. */
#define KN_DECODE_MAX_Q 4
/* The fused prefill selection with wgmma (kn_msa_index_prefill_wgmma.cu, four one-slab warpgroups) instead
 * of the mma.sync kernel: the device run that made it the default showed the same selections as the mma.sync
 * kernel and 1.8-2.1x its speed (565 vs 267-306 TFLOP/s; docs/design/cuda.md, "wgmma selection"). Where the
 * device cannot run it (not sm_90, too little shared memory) the mma.sync kernel runs. */
#define KN_SELECT_WGMMA_DEFAULT 1
/* FP8 index keys: 1 converts the keys to bf16 and keeps the queries bf16; 3 quantizes the queries to e4m3 as
 * well and runs e4m3 products (twice the tensor rate, coarser queries). */
#define KN_SELECT_WGMMA_FP8_DEFAULT 1

/* KN_CUDA_SELECT_WGMMA: 0 the mma.sync kernel, 1 wgmma with four one-slab warpgroups, 2 wgmma with two
 * two-slab warpgroups, 3 (FP8 keys) e4m3 products with e4m3 queries, else as 1; unset or anything else: the
 * default for the key type. A cached knob (benchmarks flip it). */
static int select_wgmma_knob(int fp8)
{
    const int v = kn_cuda_knob_int("KN_CUDA_SELECT_WGMMA", -1);
    if (v == 3) return fp8 ? 3 : 1;
    return v >= 0 && v <= 2 ? v : fp8 ? KN_SELECT_WGMMA_FP8_DEFAULT : KN_SELECT_WGMMA_DEFAULT;
}

static int32_t pick_select(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                           const struct kn_cuda_cache *c, int32_t path)
{
    const int dec_ok = kn_index_decode_supported(sh) && c->idx_dtype != KN_IDX_F32 &&
                       (c->idx_dtype != KN_IDX_FP8 || sh->idx_dim % 64 == 0);
    if (path == KN_PATH_AUTO) {
        if (qb->max_q_per_seq > KN_DECODE_MAX_Q && kn_index_prefill_supported(sh, c)) return KN_PATH_PREFILL;
        return dec_ok ? KN_PATH_DECODE : KN_PATH_GENERIC;
    }
    return path;
}

static int32_t pick_attention(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                              const struct kn_cuda_cache *c, int32_t sel_stride, int32_t path)
{
    if (path != KN_PATH_AUTO) return path;
    if (c && c->kv_dtype == KN_KV_F32) return KN_PATH_GENERIC;
    if (qb->max_q_per_seq <= KN_DECODE_MAX_Q && kn_attn_decode_supported(sh)) return KN_PATH_DECODE;
    if (kn_attn_prefill_supported(sh, sel_stride)) return KN_PATH_PREFILL;
    return kn_attn_decode_supported(sh) ? KN_PATH_DECODE : KN_PATH_GENERIC;
}

static int32_t pick_dense(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, int32_t path)
{
    if (path != KN_PATH_AUTO) return path;
    if (c && c->kv_dtype == KN_KV_F32) return KN_PATH_GENERIC;
    if (qb->max_q_per_seq <= KN_DECODE_MAX_Q && kn_attn_decode_supported(sh)) return KN_PATH_DECODE;
    if (kn_attn_dense_prefill_supported(sh)) return KN_PATH_PREFILL;
    return KN_PATH_GENERIC;
}

static int32_t check_cache(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c, int need_idx,
                           const char *what, struct mm_err *err)
{
    if (!c->k || !c->v) return mm_err_set(err, MM_INVALID, "%s: cache without K/V", what);
    if (c->kv_dtype != KN_KV_BF16 && c->kv_dtype != KN_KV_F32)
        return mm_err_set(err, MM_INVALID, "%s: K/V dtype %d", what, c->kv_dtype);
    if (need_idx) {
        if (!c->idx ||
            (c->idx_dtype != KN_IDX_BF16 && c->idx_dtype != KN_IDX_FP8 && c->idx_dtype != KN_IDX_F32) ||
            (c->idx_dtype == KN_IDX_FP8 && !c->idx_scale))
            return mm_err_set(err, MM_INVALID, "%s: bad index cache (dtype %d)", what, c->idx_dtype);
        if (sh->n_idx_heads <= 0 || sh->idx_dim <= 0)
            return mm_err_set(err, MM_INVALID, "%s: index heads %d, dim %d", what, sh->n_idx_heads,
                              sh->idx_dim);
    }
    return MM_OK;
}

static int32_t index_scores(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            const struct kn_cuda_cache *c, const float *q, float *scores,
                            int32_t score_stride, int32_t *steal, int32_t path, cudaStream_t stream,
                            struct mm_err *err)
{
    const char *what = "kn_cuda_msa_index_scores";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, 1, what, err);
    if (rc) return rc;
    if (qb->n > 0 && (!q || !scores || score_stride < qb->max_blocks))
        return mm_err_set(err, MM_INVALID, "%s: NULL q/scores or score_stride %d < %d", what, score_stride,
                          qb->max_blocks);
    if (path == KN_PATH_AUTO)
        path = pick_select(sh, qb, c, KN_PATH_AUTO) == KN_PATH_GENERIC ? KN_PATH_GENERIC : KN_PATH_DECODE;
    if (path == KN_PATH_DECODE) {
        if (!kn_index_decode_supported(sh) || c->idx_dtype == KN_IDX_F32)
            return mm_err_set(err, MM_UNSUPPORTED,
                              "%s: no tensor-core kernel for idx_dim %d, %d heads, block %d", what,
                              sh->idx_dim, sh->n_idx_heads, sh->block);
        return kn_index_scores_decode(sh, qb, c, q, scores, score_stride, steal, stream, err);
    }
    if (path != KN_PATH_GENERIC) return mm_err_set(err, MM_INVALID, "%s: path %d", what, path);
    return kn_index_scores_generic(sh, qb, c, q, scores, score_stride, stream, err);
}

extern "C" int32_t kn_cuda_msa_index_scores(const struct kn_cuda_msa_shape *sh,
                                            const struct kn_cuda_qbatch *qb, const struct kn_cuda_cache *c,
                                            const float *q, float *scores, int32_t score_stride, int32_t path,
                                            cudaStream_t stream, struct mm_err *err)
{
    return index_scores(sh, qb, c, q, scores, score_stride, NULL, path, stream, err);
}

extern "C" int32_t kn_cuda_msa_index_scores_dyn(const struct kn_cuda_msa_shape *sh,
                                                const struct kn_cuda_qbatch *qb,
                                                const struct kn_cuda_cache *c, const float *q, float *scores,
                                                int32_t score_stride, int32_t *counters, int32_t path,
                                                cudaStream_t stream, struct mm_err *err)
{
    if (qb && qb->n > 0 && !counters)
        return mm_err_set(err, MM_INVALID, "kn_cuda_msa_index_scores_dyn: NULL counters");
    return index_scores(sh, qb, c, q, scores, score_stride, counters, path, stream, err);
}

extern "C" int32_t kn_cuda_msa_topk(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                    const float *scores, int32_t score_stride, int32_t *sel,
                                    int32_t sel_stride, cudaStream_t stream, struct mm_err *err)
{
    if (!sh || !qb || (qb->n > 0 && (!scores || !sel || !qb->pos)) || score_stride < qb->max_blocks)
        return mm_err_set(err, MM_INVALID, "kn_cuda_msa_topk: bad arguments");
    return kn_topk_launch(scores, score_stride, qb->pos, qb->n, sh->n_idx_heads, sh->block, sh->topk,
                          sh->n_local, sel, sel_stride, stream, err);
}

/* Workspace of the unfused select: the score matrix, then (when there is room) the DECODE path's page
 * counters, one per query. */
static size_t scores_bytes(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb)
{
    return (size_t)sh->n_idx_heads * qb->n * qb->max_blocks * sizeof(float);
}

static size_t counters_bytes(const struct kn_cuda_qbatch *qb)
{
    return ((size_t)qb->n * sizeof(int32_t) + 255) / 256 * 256;
}

extern "C" size_t kn_cuda_msa_select_ws(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                        int32_t path)
{
    if (path == KN_PATH_PREFILL) return 0;
    return (scores_bytes(sh, qb) + 255) / 256 * 256 + counters_bytes(qb) + 256;
}

/* scores in ws; steal: NULL or the counters after them */
static int32_t select_unfused(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                              const struct kn_cuda_cache *c, const float *q, int32_t *sel, int32_t sel_stride,
                              void *ws, size_t ws_bytes, int32_t path, cudaStream_t stream,
                              struct mm_err *err)
{
    const size_t need = scores_bytes(sh, qb), at = (need + 255) / 256 * 256;
    if (!ws || ws_bytes < need)
        return mm_err_set(err, MM_INVALID, "kn_cuda_msa_select: workspace %zu < %zu bytes", ws_bytes, need);
    int32_t *steal = NULL; /* dynamic page hand-out when the workspace has room for the counters */
    if (path == KN_PATH_DECODE && ws_bytes >= at + counters_bytes(qb) && kn_cuda_knob("KN_CUDA_STEAL", 0))
        steal = (int32_t *)((char *)ws + at);
    int32_t rc = index_scores(sh, qb, c, q, (float *)ws, qb->max_blocks, steal, path, stream, err);
    if (rc) return rc;
    return kn_cuda_msa_topk(sh, qb, (const float *)ws, qb->max_blocks, sel, sel_stride, stream, err);
}

extern "C" int32_t kn_cuda_msa_select(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                      const struct kn_cuda_cache *c, const float *q, int32_t *sel,
                                      int32_t sel_stride, void *ws, size_t ws_bytes, int32_t path,
                                      cudaStream_t stream, struct mm_err *err)
{
    const char *what = "kn_cuda_msa_select";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, 1, what, err);
    if (rc) return rc;
    if (qb->n > 0 && (!q || !sel || sel_stride < 1))
        return mm_err_set(err, MM_INVALID, "%s: NULL q/sel or sel_stride %d", what, sel_stride);
    path = pick_select(sh, qb, c, path);
    if (path == KN_PATH_PREFILL) {
        if (!kn_index_prefill_supported(sh, c)) /* f32 keys are refused here */
            return mm_err_set(
                err, MM_UNSUPPORTED,
                "%s: the fused kernel needs idx_dim 128, block 128, <= 4 index heads, topk <= 16, "
                "bf16 keys (or FP8 on an sm_90 device)",
                what);
        int wgmma = select_wgmma_knob(c->idx_dtype == KN_IDX_FP8);
        if (c->idx_dtype == KN_IDX_FP8 && !wgmma) wgmma = 1; /* only the wgmma kernel reads FP8 keys */
        if (wgmma && kn_select_prefill_wgmma_ok(c->idx_dtype == KN_IDX_FP8))
            return kn_select_prefill_wgmma(sh, qb, c, q, sel, sel_stride, wgmma, stream, err);
        return kn_select_prefill(sh, qb, c, q, sel, sel_stride, stream, err);
    }
    return select_unfused(sh, qb, c, q, sel, sel_stride, ws, ws_bytes, path, stream, err);
}

extern "C" size_t kn_cuda_msa_attention_ws(const struct kn_cuda_msa_shape *sh,
                                           const struct kn_cuda_qbatch *qb, int32_t sel_stride, int32_t path)
{
    path = pick_attention(sh, qb, NULL, sel_stride, path);
    if (path == KN_PATH_DECODE) return kn_attn_decode_ws(sh, qb, 0);
    if (path == KN_PATH_PREFILL) return kn_attn_prefill_ws(sh, qb, sel_stride);
    return 0;
}

extern "C" int32_t kn_cuda_msa_attention(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                         const struct kn_cuda_cache *c, const void *q, const int32_t *sel,
                                         int32_t sel_stride, void *out, void *ws, size_t ws_bytes,
                                         int32_t path, cudaStream_t stream, struct mm_err *err)
{
    const char *what = "kn_cuda_msa_attention";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, 0, what, err);
    if (rc) return rc;
    if (qb->n > 0 && (!q || !sel || !out || sel_stride < 1))
        return mm_err_set(err, MM_INVALID, "%s: NULL q/sel/out or sel_stride %d", what, sel_stride);
    path = pick_attention(sh, qb, c, sel_stride, path);
    if (path != KN_PATH_GENERIC && c->kv_dtype == KN_KV_F32)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: f32 K/V caches run the generic path only", what);
    switch (path) {
    case KN_PATH_DECODE:
        if (!kn_attn_decode_supported(sh)) break;
        return kn_attn_decode(sh, qb, c, q, sel, sel_stride, out, ws, ws_bytes, stream, err);
    case KN_PATH_PREFILL:
        if (!kn_attn_prefill_supported(sh, sel_stride)) break;
        return kn_attn_prefill(sh, qb, c, q, sel, sel_stride, out, ws, ws_bytes, stream, err);
    case KN_PATH_GENERIC:
        return kn_attention_generic(sh, qb, c, q, sel, sel_stride, out, stream, err);
    default:
        return mm_err_set(err, MM_INVALID, "%s: path %d", what, path);
    }
    return mm_err_set(err, MM_UNSUPPORTED,
                      "%s: no tensor-core kernel for head_dim %d, block %d, %d heads per group", what,
                      sh->head_dim, sh->block, sh->n_heads / sh->n_kv);
}

/* The fused decode route: index scoring (pages handed out dynamically) and one kernel for top-k + attention +
 * merge, when the step is a decode step on the fast shapes and the device can launch the clusters. */
static int use_fused_decode(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                            const struct kn_cuda_cache *c, int32_t sel_stride, int32_t path)
{
    if (path != KN_PATH_AUTO || !kn_cuda_knob("KN_CUDA_FUSED_DECODE", 1)) return 0;
    if (c->kv_dtype != KN_KV_BF16 || qb->max_q_per_seq > KN_DECODE_MAX_Q || qb->n == 0 || qb->max_blocks == 0)
        return 0;
    if (pick_select(sh, qb, c, KN_PATH_AUTO) != KN_PATH_DECODE) return 0;
    return kn_attn_decode_fused_ok(sh, qb, sel_stride);
}

extern "C" size_t kn_cuda_msa_select_attend_ws(const struct kn_cuda_msa_shape *sh,
                                               const struct kn_cuda_qbatch *qb, int32_t sel_stride,
                                               int32_t path)
{
    size_t w1 = kn_cuda_msa_select_ws(sh, qb, path);
    size_t w2 = kn_cuda_msa_attention_ws(sh, qb, sel_stride, path);
    return w1 > w2 ? w1 : w2; /* the fused route needs the select workspace (scores + counters) only */
}

extern "C" int32_t kn_cuda_msa_select_attend(const struct kn_cuda_msa_shape *sh,
                                             const struct kn_cuda_qbatch *qb, const struct kn_cuda_cache *c,
                                             const float *idx_q, const void *q, int32_t *sel,
                                             int32_t sel_stride, void *out, void *ws, size_t ws_bytes,
                                             int32_t path, cudaStream_t stream, struct mm_err *err)
{
    const char *what = "kn_cuda_msa_select_attend";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, 1, what, err);
    if (rc) return rc;
    if (qb->n > 0 && (!idx_q || !q || !sel || !out || sel_stride < 1))
        return mm_err_set(err, MM_INVALID, "%s: NULL idx_q/q/sel/out or sel_stride %d", what, sel_stride);
    if (use_fused_decode(sh, qb, c, sel_stride, path)) {
        const size_t need = scores_bytes(sh, qb), at = (need + 255) / 256 * 256;
        if (!ws || ws_bytes < at + counters_bytes(qb))
            return mm_err_set(err, MM_INVALID, "%s: workspace %zu < %zu bytes", what, ws_bytes,
                              at + counters_bytes(qb));
        int32_t *steal = kn_cuda_knob("KN_CUDA_STEAL", 0) ? (int32_t *)((char *)ws + at) : NULL;
        rc = kn_index_scores_decode(sh, qb, c, idx_q, (float *)ws, qb->max_blocks, steal, stream, err);
        if (rc) return rc;
        rc = kn_attn_decode_fused(sh, qb, c, q, (const float *)ws, qb->max_blocks, sel, sel_stride, out,
                                  stream, err);
        if (rc == MM_OK || rc == MM_NOMEM || cudaPeekAtLastError() != cudaSuccess) return rc;
        /* the cluster launch was refused (no sticky error): finish with top-k and attention on the scores */
        rc = kn_cuda_msa_topk(sh, qb, (const float *)ws, qb->max_blocks, sel, sel_stride, stream, err);
        if (rc) return rc;
        return kn_cuda_msa_attention(sh, qb, c, q, sel, sel_stride, out, ws, ws_bytes, KN_PATH_DECODE, stream,
                                     err);
    }
    rc = kn_cuda_msa_select(sh, qb, c, idx_q, sel, sel_stride, ws, ws_bytes, path, stream, err);
    if (rc) return rc;
    return kn_cuda_msa_attention(sh, qb, c, q, sel, sel_stride, out, ws, ws_bytes, path, stream, err);
}

extern "C" size_t kn_cuda_dense_attention_ws(const struct kn_cuda_msa_shape *sh,
                                             const struct kn_cuda_qbatch *qb, int32_t path)
{
    return pick_dense(sh, qb, NULL, path) == KN_PATH_DECODE ? kn_attn_decode_ws(sh, qb, 1) : 0;
}

extern "C" int32_t kn_cuda_dense_attention(const struct kn_cuda_msa_shape *sh,
                                           const struct kn_cuda_qbatch *qb, const struct kn_cuda_cache *c,
                                           const void *q, void *out, void *ws, size_t ws_bytes, int32_t path,
                                           cudaStream_t stream, struct mm_err *err)
{
    const char *what = "kn_cuda_dense_attention";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, 0, what, err);
    if (rc) return rc;
    if (qb->n > 0 && (!q || !out)) return mm_err_set(err, MM_INVALID, "%s: NULL q/out", what);
    path = pick_dense(sh, qb, c, path);
    if (path != KN_PATH_GENERIC && c->kv_dtype == KN_KV_F32)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: f32 K/V caches run the generic path only", what);
    switch (path) {
    case KN_PATH_DECODE:
        if (!kn_attn_decode_supported(sh)) break;
        return kn_attn_decode(sh, qb, c, q, NULL, 0, out, ws, ws_bytes, stream, err);
    case KN_PATH_PREFILL:
        if (!kn_attn_dense_prefill_supported(sh)) break;
        return kn_attn_dense_prefill(sh, qb, c, q, out, stream, err);
    case KN_PATH_GENERIC:
        return kn_attention_generic(sh, qb, c, q, NULL, 0, out, stream, err);
    default:
        return mm_err_set(err, MM_INVALID, "%s: path %d", what, path);
    }
    return mm_err_set(err, MM_UNSUPPORTED, "%s: no tensor-core kernel for head_dim %d, block %d", what,
                      sh->head_dim, sh->block);
}

/* ---- appending keys and values ---- */

/* Test hook (declared only by test_kn_cuda_msa): the index append holds its writes back this long after it
 * has triggered its dependents. A setter rather than a knob so that production appends read no environment.
 */
static int64_t g_append_delay_ns;
extern "C" void kn_cuda_test_append_delay_us(int32_t us)
{
    g_append_delay_ns = us > 0 ? (int64_t)us * 1000 : 0;
}

/* K and V rows: one thread per element t < total of the tokens' rows */
__device__ __forceinline__ void append_kv(int64_t t, const float *__restrict__ k, const float *__restrict__ v,
                                          int64_t kv_stride, const int32_t *__restrict__ qseq,
                                          const int64_t *__restrict__ pos, const int32_t *__restrict__ bt,
                                          int32_t bt_stride, int32_t block, int32_t width,
                                          void *__restrict__ kc, void *__restrict__ vc, int64_t total,
                                          int32_t f32)
{
    if (t >= total) return;
    const int32_t i = (int32_t)(t / width), e = (int32_t)(t % width);
    const int64_t p = pos[i];
    const int64_t page = bt[(int64_t)qseq[i] * bt_stride + p / block];
    const int64_t dst = (page * block + p % block) * width + e;
    if (f32) {
        ((float *)kc)[dst] = k[i * kv_stride + e];
        ((float *)vc)[dst] = v[i * kv_stride + e];
    } else {
        ((uint16_t *)kc)[dst] = kn_f32_to_bf16(k[i * kv_stride + e]);
        ((uint16_t *)vc)[dst] = kn_f32_to_bf16(v[i * kv_stride + e]);
    }
}

/* Index keys: one warp per token i < n; FP8: scale = amax / 448 so the largest element maps to the top of
 * e4m3's range. delay_ns (tests only, kn_cuda_test_append_delay_us): hold the writes back that long, so that
 * a test can tell a scan that reads the new rows before its griddepcontrol.wait. */
__device__ __forceinline__ void append_idx(int64_t i, const float *__restrict__ kidx, int64_t stride,
                                           const int32_t *__restrict__ qseq, const int64_t *__restrict__ pos,
                                           const int32_t *__restrict__ bt, int32_t bt_stride, int32_t block,
                                           int32_t dim, int32_t dtype, void *__restrict__ cache,
                                           float *__restrict__ scale, int32_t n, int64_t delay_ns)
{
    if (delay_ns > 0) {
        uint64_t t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        while (t - t0 < (uint64_t)delay_ns);
    }
    const int lane = threadIdx.x & 31;
    if (i >= n) return;
    const int64_t p = pos[i];
    const int64_t page = bt[(int64_t)qseq[i] * bt_stride + p / block];
    const int64_t row = page * block + p % block;
    const float *src = kidx + i * stride;
    if (dtype == KN_IDX_BF16) {
        for (int32_t d = lane; d < dim; d += 32) ((uint16_t *)cache)[row * dim + d] = kn_f32_to_bf16(src[d]);
        return;
    }
    if (dtype == KN_IDX_F32) {
        for (int32_t d = lane; d < dim; d += 32) ((float *)cache)[row * dim + d] = src[d];
        return;
    }
    float amax = 0.0f;
    for (int32_t d = lane; d < dim; d += 32) amax = fmaxf(amax, fabsf(src[d]));
    amax = kn_warp_max(amax);
    const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int32_t d = lane; d < dim; d += 32)
        ((uint8_t *)cache)[row * dim + d] =
            (uint8_t)__nv_cvt_float_to_fp8(src[d] / s, __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scale[row] = s;
}

struct append_args {
    const float *k, *v, *kidx;
    int64_t kv_stride, kidx_stride;
    const int32_t *qseq;
    const int64_t *pos;
    const int32_t *bt;
    int32_t bt_stride, block, width, idx_dim, idx_dtype, n, kv_f32;
    void *kc, *vc, *ic;
    float *iscale;
    int64_t kv_total, kv_blocks, delay_ns;
};

/* One launch for a step's K/V rows (CTAs below kv_blocks, a thread per element) and index keys (the CTAs
 * after, a warp per token). A chain entry (kn_chain_entry: it waits for the kernel before, then triggers its
 * dependents): a decode index scan launched with KN_CUDA_IDX_PDL=1 may start its part that does not read
 * these rows (kn_msa_index_decode_ring.cu). */
__global__ void k_append(const append_args a)
{
    kn_chain_entry();
    const int64_t b = blockIdx.x;
    if (b < a.kv_blocks)
        append_kv(b * blockDim.x + threadIdx.x, a.k, a.v, a.kv_stride, a.qseq, a.pos, a.bt, a.bt_stride,
                  a.block, a.width, a.kc, a.vc, a.kv_total, a.kv_f32);
    else
        append_idx((b - a.kv_blocks) * (blockDim.x >> 5) + (threadIdx.x >> 5), a.kidx, a.kidx_stride, a.qseq,
                   a.pos, a.bt, a.bt_stride, a.block, a.idx_dim, a.idx_dtype, a.ic, a.iscale, a.n,
                   a.delay_ns);
}

extern "C" int32_t kn_cuda_cache_append(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                        const struct kn_cuda_cache *c, const float *k, const float *v,
                                        int64_t kv_stride, const float *kidx, int64_t kidx_stride,
                                        cudaStream_t stream, struct mm_err *err)
{
    const char *what = "kn_cuda_cache_append";
    int32_t rc = kn_check_msa_args(sh, qb, c, what, err);
    if (rc == MM_OK) rc = check_cache(sh, c, kidx != NULL, what, err);
    if (rc) return rc;
    if (qb->n == 0) return MM_OK;
    const int32_t width = sh->n_kv * sh->head_dim;
    if ((!k) != (!v) || (k && kv_stride < width) || (kidx && kidx_stride < sh->idx_dim))
        return mm_err_set(err, MM_INVALID, "%s: only one of k/v, or strides %lld/%lld too small", what,
                          (long long)kv_stride, (long long)kidx_stride);
    append_args a;
    memset(&a, 0, sizeof a);
    a.k = k, a.v = v, a.kidx = kidx, a.kv_stride = kv_stride, a.kidx_stride = kidx_stride;
    a.qseq = qb->qseq, a.pos = qb->pos, a.bt = qb->block_table, a.bt_stride = qb->bt_stride;
    a.block = sh->block, a.width = width, a.idx_dim = sh->idx_dim, a.idx_dtype = c->idx_dtype, a.n = qb->n;
    a.kv_f32 = c->kv_dtype == KN_KV_F32, a.kc = c->k, a.vc = c->v, a.ic = c->idx, a.iscale = c->idx_scale;
    a.kv_total = k ? (int64_t)qb->n * width : 0, a.kv_blocks = kn_cdiv(a.kv_total, 256);
    a.delay_ns = g_append_delay_ns;
    const int64_t blocks = a.kv_blocks + (kidx ? kn_cdiv(qb->n, 8) : 0);
    if (blocks == 0) return MM_OK;
    KN_CU(kn_launch(k_append, dim3((unsigned)blocks), 256, 0, stream, a), what);
    return MM_OK;
}
