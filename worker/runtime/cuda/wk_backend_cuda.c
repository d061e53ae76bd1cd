/* The CUDA backend: every operation of wk_backend.h on the GPU through kernels/cuda (kn_cuda.h) and cuBLAS.
 * Everything runs on one blocking stream (created, so that decode steps can be captured as graphs:
 * wk_cuda_steps.h; blocking, so that the synchronous host copies on the legacy stream order with its kernels
 * without events). Failures inside operations (which return nothing) are recorded and reported by the next
 * batch_end(). */
#include "wk_backend_cuda.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kn_cuda.h"
#include "mm_clock.h"
#include "mm_dtype.h"
#include "mm_log.h"
#include "wk_cuda_optime.h"
#include "wk_cuda_steps.h"
#include "wk_engine.h"

#define ST (c->stream)

/* Largest decode batch run as graphs by default (see cu_batch_begin; MMGW_CUDA_GRAPH_BATCH=N overrides, 0:
 * none). Measured up to 32 sequences. */
#define WK_CUDA_GRAPH_MAX_BATCH 64
/* Default of MMGW_CUDA_F32_STAGED: the fewest activation rows at which linear_multi's f32 weights take the
 * staged launch (kn_cuda_gemv_f32_multi). Measured (s5, dense 32K): batch 16 +3 % decode tok/s, the layer's
 * 5-weight product 88 -> 61 us; at batch 1 it read 2 % slower in two of two rounds although the product's
 * GPU time was equal, so 1-2 rows keep one kn_cuda_gemv_f32 each. */
#define WK_CUDA_F32_STAGED_MIN 3
/* Most activation rows a product streams an FP8 weight for on the CUDA cores (kn_cuda_gemv_fp8) where the
 * tensor-core route does not take it; more rows read it dequantized into scratch (bench/cuda/README.md "FP8
 * weights") */
#define WK_CUDA_FP8_ROWS 4
/* Fewest activation rows at which an FP8 weight's product takes the tensor cores (kn_cuda_gemm_small_fp8;
 * MMGW_CUDA_FP8_TC_MIN, 0: never); fewer rows take kn_cuda_gemv_fp8 */
#define WK_CUDA_FP8_TC_MIN 3

/* upload / download of this many bytes or more go through a pinned buffer of WK_CUDA_BOUNCE bytes */
#define WK_CUDA_BOUNCE_MIN (1 << 20)
#define WK_CUDA_BOUNCE (8 << 20)
#define WK_CUDA_BOUNCE_SLOTS 8 /* 1 MB chunks in flight (copy_bounced) */

struct wk_weight {
    int64_t rows, cols;
    void *bf16; /* device bf16 [rows][cols], or NULL */
    float *f32; /* device f32 [rows][cols], or NULL */
    /* an FP8-E4M3 weight kept as the checkpoint stores it (MMGW_CUDA_WEIGHTS=fp8): e4m3
     * [rows][cols] and f32 block scales [ceil(rows/bs_rows)][ceil(cols/bs_cols)]; then bf16 and f32 are NULL
     */
    uint8_t *fp8;
    float *fscale;
    int32_t bs_rows, bs_cols;
};

/* A device buffer that grows on demand. */
struct dbuf {
    void *p;
    size_t n;
};

struct cuda_be {
    cudaStream_t stream;
    /* a vision context (cu_vision_context): its own non-blocking stream and stream-ordered memory, so that
     * nothing it does waits for, or makes wait, the steps on the main context's stream; no weights, no cache
     */
    int32_t side;
    struct kn_cuda_blas *blas;
    /* decode steps as graphs (wk_cuda_steps.h): MMGW_CUDA_GRAPHS=0 turns them off */
    struct wk_steps *steps;
    int32_t graphs;       /* on, and no capture has failed */
    int32_t graph_batch;  /* largest decode batch run as graphs (MMGW_CUDA_GRAPH_BATCH) */
    int32_t defer;        /* this step's operations are recorded (a decode step with graphs on) */
    uint64_t scratch_gen; /* bumped whenever a scratch buffer moves: part of a segment's key */
    /* MMGW_CUDA_STEP_TIMING=1: where a decode step's time goes, logged at the end (GPU time of its segments
     * from the first one's start to the last one's end, against the host's batch_begin..batch_end) */
    int32_t timing, timed; /* on; this step's first segment has its start event */
    cudaEvent_t ev_a, ev_b;
    int64_t t_begin, n_timed;
    double gpu_ms, host_ms;
    /* MMGW_CUDA_OP_TIMING=1: decode steps run one by one with each operation's GPU time summed by kind */
    struct wk_optime *optime;
    int32_t op_step;    /* this step is a decode step being timed */
    int32_t fp32;       /* MMGW_CUDA_PRECISION=fp32 */
    int32_t idx_dtype;  /* KN_IDX_BF16, KN_IDX_FP8 or KN_IDX_F32 */
    int32_t kv_dtype;   /* KN_KV_BF16, or KN_KV_F32 in the fp32 mode */
    int32_t gemv;       /* decode-sized products on kn_cuda_gemv_bf16 (MMGW_CUDA_GEMV=0: cuBLAS for all) */
    int32_t add_norm;   /* the residual add and the next norm in one launch (MMGW_CUDA_ADD_NORM=0: two) */
    int32_t append_one; /* an MSA layer's K/V and index-key appends in one launch (MMGW_CUDA_APPEND_ONE=0) */
    int32_t multi;      /* linear_multi groups the 1-2-row bf16 products (MMGW_CUDA_LINEAR_MULTI=0: not) */
    int32_t q16; /* attn_layer's norm + RoPE launch writes the attention's bf16 q: 2 single-token steps (the
                    default), 0 never, 1 always (MMGW_CUDA_Q16=0 / 1) */
    int32_t small_gemm; /* 3-16-row products on kn_cuda_gemm_small_bf16 where it wins (MMGW_CUDA_SMALL_GEMM=0:
                           off) */
    int32_t f32_staged; /* linear_multi's f32 weights (the index projections) in one staged launch from this
                           many activation rows on (MMGW_CUDA_F32_STAGED; 0: one kn_cuda_gemv_f32 each) */
    int32_t rows_multi; /* linear_multi's same-shape bf16 pairs at 3-16 rows (gate/up) in one row-route launch
                           (MMGW_CUDA_ROWS_MULTI=0: one launch each) */
    int32_t w_fp8; /* FP8 checkpoint weights kept as FP8 (MMGW_CUDA_WEIGHTS=fp8; else bf16 copies at load) */
    int32_t fp8_rows; /* most activation rows a product streams an FP8 weight for (MMGW_CUDA_FP8_ROWS) */
    int32_t fp8_tc;   /* fewest rows for the FP8 tensor-core products (MMGW_CUDA_FP8_TC_MIN; 0: never) */
    int32_t fp8_pf;   /* products of more rows with FP8 weights: activations quantized to e4m3 per 128 values
                         and cuBLASLt's block-scaled FP8 product (MMGW_CUDA_FP8_PREFILL=e4m3); 0: the weight
                         dequantized into scratch and the bf16 routes (logits as the bf16 copies give) */
    int32_t fp8_pf_said; /* its first product was logged */
    int32_t moe_wgmma;   /* a prefill's MoE grouped on the device (kn_cuda_gemm_experts_bf16;
                            MMGW_CUDA_MOE_WGMMA=0: the host-grouped cuBLAS products) */
    int32_t dl_rows;     /* download_rows in one copy (MMGW_CUDA_DOWNLOAD_ROWS=0: one cudaMemcpy per row) */
    int32_t moe_pairs;   /* most pairs of the per-pair MoE route (MMGW_CUDA_MOE_PAIRS; MOE_PAIRS_MAX) */
    void *dl_host;       /* its pinned staging */
    size_t dl_cap;
    void *bounce; /* pinned staging of upload / download from WK_CUDA_BOUNCE_MIN bytes (copy) */
    cudaEvent_t bounce_ev[WK_CUDA_BOUNCE_SLOTS]; /* the last copy through each slot of it */
    int32_t bounce_ring; /* chunks pipelined through it (MMGW_CUDA_BOUNCE_RING=0: staged whole) */
    int32_t lt_bias; /* biased products with the bias in cuBLASLt's epilogue (MMGW_CUDA_LT_BIAS=0: a pass) */
    int32_t widen;   /* upload_typed widens 16-bit values on the device (MMGW_CUDA_WIDEN=0: on the host) */
    int32_t argmax;  /* argmax_rows on the device (MMGW_CUDA_ARGMAX=0: the rows downloaded, host argmax) */
    struct dbuf am_ids; /* its device ids (a fixed address: the kernel is part of a step's graph) */
    /* topk_rows: per-row requests (uploaded before the step's segment runs), counts, ids, logits */
    struct dbuf tk_kt, tk_out, tk_keys;
    int32_t failed;
    struct mm_err ferr;
    /* cache */
    struct wk_cache_geom geom;
    uint8_t *sparse;
    struct kn_cuda_cache *layer; /* [n_layers] */
    /* current batch */
    const struct wk_batch *b;
    struct kn_cuda_qbatch qb;
    int32_t *h_meta; /* host staging of the batch metadata */
    size_t h_meta_n;
    struct dbuf meta, ids, bad;
    /* scratch */
    struct dbuf xb, qb16, ob16, ws, sel, media, media_rows, small_ws, af_ws;
    struct dbuf m_logits, m_ids, m_wts, m_off, m_perm, m_inv, m_x, m_g, m_u, m_a, m_e, m_ctr;
    int32_t *h_off;
    int32_t h_off_n;
    /* FP8 weights for the products that read bf16: one weight at a time (two slots: gate and up of the
     * host-grouped experts), and a MoE layer's experts (xdq, with its table of bf16 pointers and tensor maps)
     */
    struct dbuf wdq[2], xdq;
    struct dbuf x16, x16s; /* activation rows as scaled f16 and their scales (the FP8 tensor-core products) */
    /* activation rows as e4m3 groups and their scales (MMGW_CUDA_FP8_PREFILL=e4m3's dense products) */
    struct dbuf xq;
    struct dbuf m_q8, m_q8s; /* a prefill's routed rows as e4m3 groups and their scales (the e4m3 experts) */
    int32_t fp8_ex_said;     /* the first e4m3 expert products were logged */
    struct moe_tab *xdq_tab;
    /* device tables of each MoE layer's expert weights (w1 | w3 | w2 pointers), keyed by the layer's w1 array
     */
    struct moe_tab *moe_tabs;
    int32_t n_moe_tabs;
};

struct moe_tab {
    const void *key;
    void **d;                  /* device [3][n_experts]: bf16 weights, or the e4m3 weights of FP8 experts */
    float **s;                 /* FP8 experts: device [3][n_experts] of their block scales; NULL for bf16 */
    int32_t bs_rows, bs_cols;  /* FP8: the experts' scale block */
    int32_t n_exp, rows, cols; /* the expert scratch's table (cuda_be.xdq_tab): the shape it was made for */
    void *maps_gu;   /* device tensor maps of w1 | w3 ([2][n_experts]) for the wgmma route's TMA, or NULL;
                        FP8 experts: of their e4m3 bytes, for kn_cuda_gemm_experts_e4m3 (MMGW_CUDA_FP8_PREFILL=
                        e4m3 only) */
    void *maps_down; /* of w2 ([n_experts]) */
};

static void fail(struct cuda_be *c, const struct mm_err *e, const char *what)
{
    if (c->failed) return;
    c->failed = 1;
    mm_err_set(&c->ferr, e && e->code ? e->code : MM_ERROR, "cuda backend: %s: %s", what, e ? e->msg : "");
}

static void failc(struct cuda_be *c, cudaError_t e, const char *what)
{
    struct mm_err tmp = {0};
    kn_cuda_check(e, what, &tmp);
    fail(c, &tmp, what);
}

/* Device memory: a vision context allocates and frees in its stream's order (cudaFree would wait for the
 * whole device, the steps included). */
static cudaError_t dev_malloc(struct cuda_be *c, void **p, size_t bytes)
{
    return c->side ? cudaMallocAsync(p, bytes, ST) : cudaMalloc(p, bytes);
}

static void dev_free(struct cuda_be *c, void *p)
{
    if (!p) return;
    if (c->side)
        cudaFreeAsync(p, ST);
    else
        cudaFree(p);
}

static void *grow(struct cuda_be *c, struct dbuf *d, size_t bytes)
{
    if (bytes == 0) bytes = 16;
    if (d->n >= bytes) return d->p;
    dev_free(c, d->p);
    d->p = NULL;
    d->n = 0;
    size_t want = bytes + bytes / 4;
    c->scratch_gen++; /* graphs captured with the old address must not replay */
    cudaError_t e = dev_malloc(c, &d->p, want);
    if (e != cudaSuccess) {
        failc(c, e, "scratch allocation");
        d->p = NULL;
        return NULL;
    }
    d->n = want;
    return d->p;
}

static void dbuf_free(struct cuda_be *c, struct dbuf *d)
{
    dev_free(c, d->p);
    d->p = NULL;
    d->n = 0;
}

/* What decides a recorded segment's launches besides the operations' own arguments: the batch's host
 * numbers and device pointers, and where the scratch buffers are. */
struct step_key {
    struct kn_cuda_qbatch qb;
    uint64_t scratch_gen;
    int64_t n_tokens;
    void *ids;
};

/* Run the recorded operations (a replay, a capture, or one by one: wk_cuda_steps.h). */
static void flush(struct cuda_be *c)
{
    if (!c->steps || !wk_steps_pending(c->steps)) return;
    struct step_key k;
    memset(&k, 0, sizeof k);
    k.qb = c->qb;
    k.scratch_gen = c->scratch_gen;
    k.n_tokens = c->b ? c->b->n_tokens : -1;
    k.ids = c->ids.p;
    const int32_t failed = c->failed;
    const struct mm_err ferr = c->ferr;
    if (c->timing && c->defer && !c->timed) {
        cudaEventRecord(c->ev_a, ST);
        c->timed = 1;
    }
    if (wk_steps_run(c->steps, c, ST, &k, sizeof k, c->graphs) == WK_STEPS_CAPTURE_FAILED) {
        /* the driver refused the capture: nothing ran; undo what the operations recorded, go on without */
        (void)cudaGetLastError();
        c->failed = failed;
        c->ferr = ferr;
        c->graphs = 0;
        mm_log_warn("cuda", "decode step graphs off: the capture of a step failed");
        (void)wk_steps_run(c->steps, c, ST, &k, sizeof k, 0);
    }
    if (c->timed) cudaEventRecord(c->ev_b, ST);
}

static const char *op_key(wk_step_fn fn, const void *args, char *buf, size_t n);

/* An operation: recorded in a decode step with graphs on, else run now (after what is recorded). */
static void run_op(struct cuda_be *c, wk_step_fn fn, const void *args, size_t n)
{
    if (c->defer && !wk_steps_push(c->steps, fn, args, n)) return;
    flush(c);
    if (c->op_step) {
        char key[64];
        wk_optime_begin(c->optime, op_key(fn, args, key, sizeof key));
        fn(c, args);
        wk_optime_end(c->optime);
        return;
    }
    fn(c, args);
}

/* ---- memory ---- */

static float *cu_alloc(void *ctx, int64_t n)
{
    void *p = NULL;
    if (n <= 0) n = 1;
    if (dev_malloc(ctx, &p, sizeof(float) * (size_t)n) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_free(void *ctx, float *p)
{
    flush(ctx); /* recorded operations may use p */
    dev_free(ctx, p);
}

/* The pinned bounce buffer as a ring of WK_CUDA_BOUNCE_SLOTS slots, each with the event of the last copy that
 * used it (allocated together, at the first large copy). */
static int32_t bounce_ready(struct cuda_be *c)
{
    if (c->bounce) return 1;
    if (cudaMallocHost(&c->bounce, WK_CUDA_BOUNCE) != cudaSuccess) {
        (void)cudaGetLastError();
        c->bounce = NULL;
        return 0;
    }
    for (int i = 0; i < WK_CUDA_BOUNCE_SLOTS; i++)
        if (cudaEventCreateWithFlags(&c->bounce_ev[i], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            while (i > 0) cudaEventDestroy(c->bounce_ev[--i]);
            cudaFreeHost(c->bounce);
            c->bounce = NULL;
            return 0;
        }
    return 1;
}

/* A large copy through the bounce ring in slot-sized chunks, the host's memcpy of one chunk overlapping the
 * DMA of the others: up, chunk i is staged once the DMA that last read its slot is done, then sent; down,
 * every chunk is fetched as soon as its slot is free and copied out one chunk behind. The sequential version
 * (stage all 8 MB, send, wait) paid the memcpy and the DMA one after the other. */
static cudaError_t copy_bounced(struct cuda_be *c, void *dst, const void *src, size_t bytes, int up)
{
    const size_t slot = WK_CUDA_BOUNCE / WK_CUDA_BOUNCE_SLOTS;
    const size_t n = (bytes + slot - 1) / slot;
    const enum cudaMemcpyKind kind = up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < n + 1 && e == cudaSuccess; i++) {
        if (i < n) { /* chunk i into / out of slot i % SLOTS */
            const size_t off = i * slot, len = bytes - off < slot ? bytes - off : slot;
            char *buf = (char *)c->bounce + (i % WK_CUDA_BOUNCE_SLOTS) * slot;
            if (i >= WK_CUDA_BOUNCE_SLOTS) e = cudaEventSynchronize(c->bounce_ev[i % WK_CUDA_BOUNCE_SLOTS]);
            if (e == cudaSuccess && up) memcpy(buf, (const char *)src + off, len);
            if (e == cudaSuccess)
                e = cudaMemcpyAsync(up ? (char *)dst + off : buf, up ? buf : (const char *)src + off, len,
                                    kind, ST);
            if (e == cudaSuccess) e = cudaEventRecord(c->bounce_ev[i % WK_CUDA_BOUNCE_SLOTS], ST);
        }
        if (!up && i >= 1 && e == cudaSuccess) { /* chunk i - 1 out, once its DMA is done */
            const size_t k = i - 1, off = k * slot, len = bytes - off < slot ? bytes - off : slot;
            e = cudaEventSynchronize(c->bounce_ev[k % WK_CUDA_BOUNCE_SLOTS]);
            if (e == cudaSuccess)
                memcpy((char *)dst + off, (char *)c->bounce + (k % WK_CUDA_BOUNCE_SLOTS) * slot, len);
        }
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(ST); /* done when it returns, and every slot free */
    return e;
}

/* A copy that is done when it returns: large ones through the pinned bounce ring on this context's stream
 * (MMGW_CUDA_BOUNCE_RING=0: the whole buffer staged at once, then sent, as before); otherwise the main
 * context's on the legacy stream (ordered after its blocking stream's work), a vision context's on its own
 * stream. */
static cudaError_t copy(struct cuda_be *c, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    /* large copies through pinned memory in chunks: a pageable copy of an encode's 14 MB of embeddings took
     * 12.6 ms of host time (encode_bench, op timing) */
    if (bytes >= WK_CUDA_BOUNCE_MIN && bounce_ready(c)) {
        const int up = kind == cudaMemcpyHostToDevice;
        if (c->bounce_ring) return copy_bounced(c, dst, src, bytes, up);
        for (size_t off = 0; off < bytes; off += WK_CUDA_BOUNCE) {
            const size_t len = bytes - off < WK_CUDA_BOUNCE ? bytes - off : WK_CUDA_BOUNCE;
            if (up) memcpy(c->bounce, (const char *)src + off, len);
            cudaError_t e = cudaMemcpyAsync(up ? (char *)dst + off : c->bounce,
                                            up ? c->bounce : (const char *)src + off, len, kind, ST);
            if (e == cudaSuccess) e = cudaStreamSynchronize(ST);
            if (e != cudaSuccess) return e;
            if (!up) memcpy((char *)dst + off, c->bounce, len);
        }
        return cudaSuccess;
    }
    if (!c->side) return cudaMemcpy(dst, src, bytes, kind);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, ST);
    return e != cudaSuccess ? e : cudaStreamSynchronize(ST);
}

static void cu_upload(void *ctx, float *dst, const float *src, int64_t n)
{
    struct cuda_be *c = ctx;
    if (n <= 0) return;
    flush(c); /* recorded operations may read dst as it was */
    if (c->op_step) wk_optime_begin(c->optime, "upload");
    cudaError_t e = copy(c, dst, src, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice);
    if (c->op_step) wk_optime_end(c->optime);
    if (e != cudaSuccess) failc(c, e, "upload");
}

static void cu_download(void *ctx, float *dst, const float *src, int64_t n)
{
    struct cuda_be *c = ctx;
    if (n <= 0) return;
    flush(c);
    if (c->op_step) wk_optime_begin(c->optime, "download");
    cudaError_t e = copy(c, dst, src, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost);
    if (c->op_step) wk_optime_end(c->optime);
    if (e != cudaSuccess) failc(c, e, "download");
}

/* 16-bit values cross as they came (half the bytes of f32, no host conversion pass) and are widened on the
 * device: an encode's 10.8 MB of f32 pixels were converted on the host, then copied up. */
static int32_t cu_upload_typed(void *ctx, float *dst, const void *src, int32_t dtype, int64_t n)
{
    struct cuda_be *c = ctx;
    if (dtype == MM_DT_F32) {
        cu_upload(ctx, dst, src, n);
        return 1;
    }
    if ((dtype != MM_DT_BF16 && dtype != MM_DT_F16) || !c->widen) return 0;
    if (n <= 0) return 1;
    flush(c);
    if (c->op_step) wk_optime_begin(c->optime, "upload");
    void *tmp = NULL;
    cudaError_t e = dev_malloc(c, &tmp, 2 * (size_t)n);
    if (e == cudaSuccess) e = copy(c, tmp, src, 2 * (size_t)n, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        struct mm_err err = {0};
        if (kn_cuda_widen16(tmp, dtype == MM_DT_F16, dst, n, ST, &err)) fail(c, &err, "upload (widen)");
    }
    if (tmp) dev_free(c, tmp); /* stream-ordered in a vision context; cudaFree waits for the widening */
    if (c->op_step) wk_optime_end(c->optime);
    if (e != cudaSuccess) failc(c, e, "upload");
    return 1;
}

/* Rows of logits, row i to dst[i]: one copy into pinned memory, then host copies. One pageable cudaMemcpy
 * per row was a synchronous round trip each (16 per batch-16 decode step). Without pinned memory: per row. */
static void cu_download_rows(void *ctx, float *const *dst, const float *src, int32_t rows, int64_t n)
{
    struct cuda_be *c = ctx;
    if (rows <= 0 || n <= 0) return;
    const size_t row_bytes = sizeof(float) * (size_t)n, bytes = row_bytes * (size_t)rows;
    if (c->dl_cap < bytes && c->dl_rows) {
        if (c->dl_host) cudaFreeHost(c->dl_host);
        c->dl_host = NULL, c->dl_cap = 0;
        if (cudaMallocHost(&c->dl_host, bytes) == cudaSuccess)
            c->dl_cap = bytes;
        else
            (void)cudaGetLastError(), c->dl_host = NULL;
    }
    if (!c->dl_host || !c->dl_rows) {
        for (int32_t i = 0; i < rows; i++) cu_download(ctx, dst[i], src + (int64_t)i * n, n);
        return;
    }
    flush(c);
    cudaError_t e = cudaMemcpy(c->dl_host, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        failc(c, e, "download");
        return;
    }
    for (int32_t i = 0; i < rows; i++)
        memcpy(dst[i], (const char *)c->dl_host + (size_t)i * row_bytes, row_bytes);
}

/* Greedy tokens of rows of logits: the argmax kernel is an operation of the step (inside its graph), then
 * rows x 4 bytes come back instead of rows x 4 x vocab (M3: 800 KB per row). */
struct a_argmax {
    const float *src;
    int64_t n;
    int32_t rows;
    int32_t *ids;
};

static void ex_argmax(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_argmax *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_argmax_rows(a->src, a->rows, a->n, a->n, a->ids, ST, &e__)) fail(c, &e__, "argmax");
}

static void cu_argmax_rows(void *ctx, const float *src, int32_t rows, int64_t n, int32_t *ids)
{
    struct cuda_be *c = ctx;
    if (rows <= 0 || n <= 0) return;
    if (!c->argmax) { /* MMGW_CUDA_ARGMAX=0: what a backend without the operation does */
        float *row = malloc(sizeof(float) * (size_t)n);
        for (int32_t i = 0; i < rows; i++) {
            ids[i] = 0;
            if (!row) continue;
            cu_download(ctx, row, src + (int64_t)i * n, n);
            ids[i] = wk_argmax(row, (int32_t)n);
        }
        free(row);
        return;
    }
    const size_t bytes = sizeof(int32_t) * (size_t)(rows < 64 ? 64 : rows);
    if (c->am_ids.n < bytes) flush(c); /* recorded operations may hold the old buffer */
    int32_t *d = grow(c, &c->am_ids, bytes);
    if (!d) {
        memset(ids, 0, sizeof(int32_t) * (size_t)rows);
        return;
    }
    struct a_argmax a;
    memset(&a, 0, sizeof a);
    a.src = src, a.n = n, a.rows = rows, a.ids = d;
    run_op(c, ex_argmax, &a, sizeof a);
    flush(c);
    cudaError_t e = cudaMemcpy(ids, d, sizeof(int32_t) * (size_t)rows, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        failc(c, e, "download");
        memset(ids, 0, sizeof(int32_t) * (size_t)rows);
    }
}

/* Sampling candidates of rows of logits (kn_cuda_topk_cands), an operation of the step like the argmax: the
 * rows' requests go to a fixed device buffer before it runs, so a step's graph replays whatever the requests
 * ask; a row drawn from on the device comes back as its token. */
struct a_topk {
    float *src;
    int64_t n;
    int32_t rows, cap;
    const struct mm_cand_req *req;
    int32_t *counts, *ids;
    float *vals, *lse;
    uint32_t *keys;
};

static void ex_topk(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_topk *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_topk_cands(a->src, a->rows, a->n, a->n, a->req, a->cap, a->counts, a->ids, a->vals, a->lse,
                           a->keys, ST, &e__))
        fail(c, &e__, "sampling candidates");
}

static void cu_topk_rows(void *ctx, float *src, int32_t rows, int64_t n, const struct mm_cand_req *req,
                         int32_t cap, int32_t *counts, int32_t *ids, float *vals, float *lse)
{
    struct cuda_be *c = ctx;
    for (int32_t i = 0; i < rows; i++) counts[i] = -1;
    if (rows <= 0 || n <= 0 || cap <= 0) return;
    const int32_t rr = rows < 32 ? 32 : rows;
    const size_t req_bytes = sizeof(struct mm_cand_req) * (size_t)rr,
                 out_bytes = (size_t)rr * (8 + 8 * (size_t)cap);
    /* a row that may be drawn from gets its draw's keys apart from its logits, so that the token's logit
     * comes back too (its log-probability); once grown the buffer is passed every time (the same arguments
     * each step: the step's graph replays) */
    int32_t any_draw = 0;
    for (int32_t i = 0; i < rows; i++) any_draw |= req[i].k > 0 && req[i].draw;
    const size_t key_full = sizeof(uint32_t) * (size_t)rows * (size_t)n,
                 key_bytes = any_draw || c->tk_keys.n >= key_full ? key_full : 0;
    if (c->tk_kt.n < req_bytes || c->tk_out.n < out_bytes || c->tk_keys.n < key_bytes)
        flush(c); /* recorded operations may hold them */
    char *kt = grow(c, &c->tk_kt, req_bytes), *out = grow(c, &c->tk_out, out_bytes);
    uint32_t *keys = key_bytes ? grow(c, &c->tk_keys, key_bytes) : NULL;
    if (!kt || !out || (key_bytes && !keys)) return;
    /* the requests in one upload, before anything recorded runs: nothing recorded reads them but this
     * step's own operation */
    cudaError_t e = cudaMemcpy(kt, req, sizeof(struct mm_cand_req) * (size_t)rows, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        failc(c, e, "upload");
        return;
    }
    struct a_topk a;
    memset(&a, 0, sizeof a);
    a.src = src, a.n = n, a.rows = rows, a.cap = cap;
    a.req = (const struct mm_cand_req *)kt;
    a.counts = (int32_t *)out, a.ids = (int32_t *)(out + 4 * (size_t)rr);
    a.vals = (float *)(out + 4 * (size_t)rr + 4 * (size_t)rr * cap);
    a.lse = (float *)(out + 4 * (size_t)rr + 8 * (size_t)rr * cap);
    a.keys = keys;
    run_op(c, ex_topk, &a, sizeof a);
    flush(c);
    /* three copies for the whole run (rows x cap ids and logits: 8 KB a row; a fourth for log-sum-exps), not
     * two round trips a row */
    e = cudaMemcpy(counts, a.counts, sizeof(int32_t) * (size_t)rows, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(ids, a.ids, sizeof(int32_t) * (size_t)rows * cap, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaMemcpy(vals, a.vals, sizeof(float) * (size_t)rows * cap, cudaMemcpyDeviceToHost);
    int32_t want_lse = 0;
    for (int32_t i = 0; i < rows; i++) want_lse |= req[i].k > 0 && (req[i].flags & MM_CANDS_LSE);
    if (e == cudaSuccess && want_lse)
        e = cudaMemcpy(lse, a.lse, sizeof(float) * (size_t)rows, cudaMemcpyDeviceToHost);
    for (int32_t i = 0; i < rows; i++)
        if (req[i].k <= 0) counts[i] = -1; /* rows that asked for none: whatever the device buffer held */
    if (e != cudaSuccess) {
        failc(c, e, "download");
        for (int32_t i = 0; i < rows; i++) counts[i] = -1;
    }
}

/* ---- weights ---- */

static int contains(const char *s, const char *sub)
{
    return s && strstr(s, sub) != NULL;
}

static void weight_release(struct wk_weight *w)
{
    if (!w) return;
    if (w->bf16) cudaFree(w->bf16);
    if (w->f32) cudaFree(w->f32);
    if (w->fp8) cudaFree(w->fp8);
    if (w->fscale) cudaFree(w->fscale);
    free(w);
}

static int32_t cu_weight_load(void *ctx, const struct wk_wsrc *src, struct wk_weight **out,
                              struct mm_err *err)
{
    struct cuda_be *c = ctx;
    const int64_t n = src->rows * src->cols;
    const int vec = src->rows == 1 || src->cols == 1;
    const int is_embed = contains(src->name, "embed_tokens");
    /* decision-making products stay in fp32: the router picks experts, the index projections pick blocks */
    const int critical = contains(src->name, "block_sparse_moe.gate.weight") ||
                         contains(src->name, "index_q_proj") || contains(src->name, "index_k_proj");
    const int keep_f32 = vec || c->fp32 || critical;
    const int keep_bf16 = !vec && ((!c->fp32 && !critical) || is_embed);
    struct wk_weight *w = calloc(1, sizeof *w);
    if (!w) return mm_err_set(err, MM_NOMEM, "out of memory");
    w->rows = src->rows;
    w->cols = src->cols;
    int32_t rc = MM_OK;
    void *raw = NULL;
    float *hf = NULL, *hs = NULL;
    /* a bf16 device copy first (the stored form for bf16 and fp8), then f32 from it where wanted; f32/f16
     * sources go to f32 on the host first so the f32 copy is exact */
    if (src->dtype == MM_DT_BF16) {
        rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(w->bf16, src->data, (size_t)n * 2, cudaMemcpyHostToDevice),
                               "weight", err);
    } else if (src->dtype == MM_DT_F8_E4M3) {
        hs = malloc(sizeof(float) * (size_t)(src->scale_rows * src->scale_cols));
        if (!hs) rc = mm_err_set(err, MM_NOMEM, "out of memory");
        if (!rc &&
            mm_convert_to_f32(hs, src->scale, src->scale_dtype, (size_t)(src->scale_rows * src->scale_cols)))
            rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': scale dtype %d", src->file, src->name,
                            src->scale_dtype);
        float *sd = NULL;
        if (!rc) rc = kn_cuda_check(cudaMalloc(&raw, (size_t)n), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(raw, src->data, (size_t)n, cudaMemcpyHostToDevice), "weight", err);
        if (!rc)
            rc = kn_cuda_check(
                cudaMalloc((void **)&sd, sizeof(float) * (size_t)(src->scale_rows * src->scale_cols)),
                "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(sd, hs, sizeof(float) * (size_t)(src->scale_rows * src->scale_cols),
                                          cudaMemcpyHostToDevice),
                               "weight", err);
        /* kept as stored where the products read FP8 (every weight but the embedding and those kept in f32)
         */
        const int keep_fp8 = c->w_fp8 && !keep_f32 && !is_embed && src->block_rows > 0 && src->block_cols > 0;
        if (!rc && keep_fp8) {
            w->fp8 = raw, w->fscale = sd, raw = NULL, sd = NULL;
            w->bs_rows = src->block_rows, w->bs_cols = src->block_cols;
        } else {
            if (!rc) rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
            if (!rc)
                rc = kn_cuda_dequant_fp8_block(raw, sd, src->rows, src->cols, src->block_rows,
                                               src->block_cols, w->bf16, ST, err);
        }
        if (sd) cudaFree(sd);
    } else if (src->dtype == MM_DT_F32 || src->dtype == MM_DT_F16) {
        hf = malloc(sizeof(float) * (size_t)n);
        if (!hf) rc = mm_err_set(err, MM_NOMEM, "out of memory for '%s'", src->name);
        if (!rc && mm_convert_to_f32(hf, src->data, src->dtype, (size_t)n))
            rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': dtype %d", src->file, src->name, src->dtype);
        if (!rc) rc = kn_cuda_check(cudaMalloc((void **)&w->f32, sizeof(float) * (size_t)n), "weight", err);
        if (!rc)
            rc = kn_cuda_check(cudaMemcpy(w->f32, hf, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice),
                               "weight", err);
        if (!rc && keep_bf16) {
            rc = kn_cuda_check(cudaMalloc(&w->bf16, (size_t)n * 2), "weight", err);
            if (!rc) rc = kn_cuda_convert(w->f32, w->bf16, n, 1, ST, err);
        }
    } else {
        rc = mm_err_set(err, MM_UNSUPPORTED, "%s: '%s': dtype %d", src->file, src->name, src->dtype);
    }
    if (!rc && keep_f32 && !w->f32 && w->bf16) {
        rc = kn_cuda_check(cudaMalloc((void **)&w->f32, sizeof(float) * (size_t)n), "weight", err);
        if (!rc) rc = kn_cuda_convert(w->bf16, w->f32, n, 0, ST, err);
    }
    if (!rc && !keep_bf16 && w->bf16) {
        cudaFree(w->bf16);
        w->bf16 = NULL;
    }
    if (!rc && !keep_f32 && w->f32 && w->bf16) {
        cudaFree(w->f32);
        w->f32 = NULL;
    }
    if (!rc) rc = kn_cuda_check(cudaDeviceSynchronize(), "weight", err);
    if (raw) cudaFree(raw);
    free(hf);
    free(hs);
    if (rc) {
        mm_err_prefix(err, "loading '%s'", src->name ? src->name : "?");
        weight_release(w);
        return rc;
    }
    *out = w;
    return MM_OK;
}

static void moe_tables_free(struct cuda_be *c);

static void cu_weight_free(void *ctx, struct wk_weight *w)
{
    struct cuda_be *c = ctx;
    flush(c); /* recorded operations may use w */
    /* graphs and MoE tables that hold w's memory must not outlive it (a later weight may reuse the address)
     */
    c->scratch_gen++;
    moe_tables_free(c);
    weight_release(w);
}

static int64_t cu_weight_bytes(void *ctx, const struct wk_weight *w)
{
    (void)ctx;
    if (!w) return 0;
    const int64_t scales =
        w->fp8 ? (w->rows + w->bs_rows - 1) / w->bs_rows * ((w->cols + w->bs_cols - 1) / w->bs_cols) * 4 : 0;
    return ((w->bf16 ? 2 : 0) + (w->f32 ? 4 : 0) + (w->fp8 ? 1 : 0)) * w->rows * w->cols + scales;
}

/* ---- cache ---- */

static size_t idx_elem(const struct cuda_be *c)
{
    return c->idx_dtype == KN_IDX_FP8 ? 1 : c->idx_dtype == KN_IDX_F32 ? 4 : 2;
}

static void free_cache(struct cuda_be *c)
{
    if (c->layer)
        for (int32_t l = 0; l < c->geom.n_layers; l++) {
            cudaFree(c->layer[l].k);
            cudaFree(c->layer[l].v);
            if (c->layer[l].idx) cudaFree(c->layer[l].idx);
            if (c->layer[l].idx_scale) cudaFree(c->layer[l].idx_scale);
        }
    free(c->layer);
    free(c->sparse);
    c->layer = NULL;
    c->sparse = NULL;
}

/* Bytes of one page as cu_cache_init allocates it: bf16 K/V (f32 in the exact mode), index keys in their
 * own type, plus one f32 scale per token for fp8 index keys. */
static int64_t cu_cache_page_bytes(void *ctx, const struct wk_cache_geom *g)
{
    const struct cuda_be *c = ctx;
    const int64_t kv_elem = c->kv_dtype == KN_KV_F32 ? 4 : 2;
    int64_t b = 0;
    for (int32_t l = 0; l < g->n_layers; l++) {
        b += 2LL * g->block * g->n_kv * g->head_dim * kv_elem;
        if (g->layer_sparse[l])
            b += (int64_t)g->block *
                 ((int64_t)g->idx_dim * (int64_t)idx_elem(c) + (c->idx_dtype == KN_IDX_FP8 ? 4 : 0));
    }
    return b;
}

static int32_t cu_cache_init(void *ctx, const struct wk_cache_geom *g, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    flush(c);
    c->scratch_gen++; /* captured graphs hold the old cache's addresses */
    free_cache(c);
    c->geom = *g;
    c->layer = calloc((size_t)g->n_layers, sizeof *c->layer);
    c->sparse = malloc((size_t)g->n_layers);
    if (!c->layer || !c->sparse) {
        c->geom.n_layers = 0;
        return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    memcpy(c->sparse, g->layer_sparse, (size_t)g->n_layers);
    const size_t tok = (size_t)g->n_pages * (size_t)g->block;
    const size_t kv = tok * (size_t)g->n_kv * (size_t)g->head_dim * (c->kv_dtype == KN_KV_F32 ? 4 : 2);
    int32_t rc = MM_OK;
    for (int32_t l = 0; l < g->n_layers && !rc; l++) {
        struct kn_cuda_cache *L = &c->layer[l];
        L->n_pages = g->n_pages;
        L->idx_dtype = c->idx_dtype;
        L->kv_dtype = c->kv_dtype;
        /* zeroed, so rows no sequence wrote hold finite values (they are masked, but P * V must not see NaN)
         */
        rc = kn_cuda_check(cudaMalloc(&L->k, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMalloc(&L->v, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMemset(L->k, 0, kv), "cache", err);
        if (!rc) rc = kn_cuda_check(cudaMemset(L->v, 0, kv), "cache", err);
        if (!rc && g->layer_sparse[l]) {
            const size_t ib = tok * (size_t)g->idx_dim * idx_elem(c);
            rc = kn_cuda_check(cudaMalloc(&L->idx, ib), "cache", err);
            if (!rc) rc = kn_cuda_check(cudaMemset(L->idx, 0, ib), "cache", err);
            if (!rc && c->idx_dtype == KN_IDX_FP8) {
                rc = kn_cuda_check(cudaMalloc((void **)&L->idx_scale, tok * 4), "cache", err);
                if (!rc) rc = kn_cuda_check(cudaMemset(L->idx_scale, 0, tok * 4), "cache", err);
            }
        }
    }
    if (rc) {
        free_cache(c);
        c->geom.n_layers = 0;
        return mm_err_prefix(err, "cuda backend: a cache of %lld pages", (long long)g->n_pages);
    }
    return MM_OK;
}

static void cu_cache_copy_page(void *ctx, int32_t dst, int32_t src, int32_t n_tokens)
{
    struct cuda_be *c = ctx;
    flush(c);
    const struct wk_cache_geom *g = &c->geom;
    const size_t row = (size_t)g->n_kv * (size_t)g->head_dim * (c->kv_dtype == KN_KV_F32 ? 4 : 2);
    const size_t irow = (size_t)g->idx_dim * idx_elem(c);
    for (int32_t l = 0; l < g->n_layers; l++) {
        struct kn_cuda_cache *L = &c->layer[l];
        const size_t d0 = (size_t)dst * g->block, s0 = (size_t)src * g->block;
        cudaError_t e = cudaMemcpy((uint8_t *)L->k + d0 * row, (uint8_t *)L->k + s0 * row,
                                   row * (size_t)n_tokens, cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy((uint8_t *)L->v + d0 * row, (uint8_t *)L->v + s0 * row, row * (size_t)n_tokens,
                           cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess && L->idx)
            e = cudaMemcpy((uint8_t *)L->idx + d0 * irow, (uint8_t *)L->idx + s0 * irow,
                           irow * (size_t)n_tokens, cudaMemcpyDeviceToDevice);
        if (e == cudaSuccess && L->idx_scale)
            e = cudaMemcpy(L->idx_scale + d0, L->idx_scale + s0, 4 * (size_t)n_tokens,
                           cudaMemcpyDeviceToDevice);
        if (e != cudaSuccess) failc(c, e, "cache page copy");
    }
}

/* ---- per step ---- */

static int32_t cu_batch_begin(void *ctx, const struct wk_batch *b, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    flush(c); /* nothing should be pending between steps; keep the order if something is */
    c->defer = 0;
    c->timed = 0;
    c->t_begin = c->timing ? mm_now_ns() : 0;
    c->b = b;
    c->failed = 0;
    mm_err_clear(&c->ferr);
    const int32_t n = (int32_t)b->n_tokens, S = b->n_seqs, B = c->geom.block;
    if (b->n_tokens > INT32_MAX / 4)
        return mm_err_set(err, MM_TOO_LARGE, "cuda backend: %lld tokens", (long long)b->n_tokens);
    int32_t bt_stride = 1;
    for (int32_t s = 0; s < S; s++) {
        int64_t nb = (b->seq_len[s] + B - 1) / B;
        if (nb > bt_stride) bt_stride = (int32_t)nb;
    }
    /* one host staging block, one upload: pos (i64) | seq_last (i64) | qseq | seq_blk_off | tiles | block
     * table | ids */
    const size_t n64 = (size_t)n + (size_t)S;
    const size_t n32 = (size_t)n + (size_t)(S + 1) + 2 * (size_t)(n + 1) + (size_t)S * bt_stride + (size_t)n;
    const size_t words = 2 * n64 + n32;
    if (c->h_meta_n < words) {
        free(c->h_meta);
        c->h_meta = malloc(sizeof(int32_t) * words);
        c->h_meta_n = c->h_meta ? words : 0;
        if (!c->h_meta) return mm_err_set(err, MM_NOMEM, "out of memory");
    }
    int64_t *pos = (int64_t *)c->h_meta, *last = pos + n;
    int32_t *qseq = (int32_t *)(last + S), *off = qseq + n, *tiles = off + (S + 1), *bt = tiles + 2 * (n + 1);
    int32_t *ids = bt + (size_t)S * bt_stride;
    memcpy(pos, b->pos, sizeof(int64_t) * (size_t)n);
    memcpy(qseq, b->seq_of, sizeof(int32_t) * (size_t)n);
    memcpy(ids, b->ids, sizeof(int32_t) * (size_t)n);
    for (int32_t s = 0; s < S; s++) {
        int64_t nb = (b->seq_len[s] + B - 1) / B;
        for (int32_t k = 0; k < bt_stride; k++)
            bt[(size_t)s * bt_stride + k] = k < nb ? b->block_tables[s][k] : 0;
    }
    memset(&c->qb, 0, sizeof c->qb);
    int32_t rc = kn_cuda_qbatch_plan(n, S, qseq, pos, B, off, last, tiles, &c->qb, err);
    if (rc) return rc;
    uint8_t *d = grow(c, &c->meta, sizeof(int32_t) * words);
    if (!d) return mm_err_set(err, MM_NOMEM, "cuda backend: batch metadata: %s", c->ferr.msg);
    rc = kn_cuda_check(cudaMemcpy(d, c->h_meta, sizeof(int32_t) * words, cudaMemcpyHostToDevice), "batch",
                       err);
    if (rc) return rc;
    const uint8_t *h0 = (const uint8_t *)c->h_meta;
    c->qb.pos = (const int64_t *)(d + ((const uint8_t *)pos - h0));
    c->qb.seq_last = (const int64_t *)(d + ((const uint8_t *)last - h0));
    c->qb.qseq = (const int32_t *)(d + ((const uint8_t *)qseq - h0));
    c->qb.seq_blk_off = (const int32_t *)(d + ((const uint8_t *)off - h0));
    c->qb.tiles = (const int32_t *)(d + ((const uint8_t *)tiles - h0));
    c->qb.block_table = (const int32_t *)(d + ((const uint8_t *)bt - h0));
    c->qb.bt_stride = bt_stride;
    c->ids.p = d + ((const uint8_t *)ids - h0);
    /* decode steps (one new token per sequence) of up to graph_batch sequences are recorded and run as
     * graphs: 1.3-1.6x faster at 1-2 sequences (second session); at 4-32 sequences +4 to +16 % since the
     * products at 3-16 rows run on our kernels (bench/cuda/README.md "Fifth session": eager steps left the
     * GPU idle ~40 % of a batch-16 step, the host launching ~83 kernels per step). Batch 16 had measured
     * level to 14 % slower when its products ran on cuBLAS. Prefill steps are few, long and of changing
     * shapes: launched directly. */
    const int decode = c->qb.max_q_per_seq == 1 && b->n_tokens == S;
    c->op_step = c->optime && decode;
    c->defer = c->graphs && c->steps && decode && !c->op_step && b->n_tokens <= c->graph_batch;
    return MM_OK;
}

static int32_t cu_batch_end(void *ctx, struct mm_err *err)
{
    struct cuda_be *c = ctx;
    flush(c);
    const int32_t timed = c->defer && c->timed;
    c->defer = 0;
    c->b = NULL;
    /* this context's stream only: a device-wide wait would also wait for a vision context's encode */
    cudaError_t e = cudaStreamSynchronize(ST);
    if (e != cudaSuccess) failc(c, e, "step");
    if (c->op_step && e == cudaSuccess) wk_optime_step_done(c->optime);
    c->op_step = c->side && c->optime; /* a vision context times every encode (one "step" each) */
    float ms = 0;
    if (timed && e == cudaSuccess && cudaEventElapsedTime(&ms, c->ev_a, c->ev_b) == cudaSuccess) {
        c->gpu_ms += ms;
        c->host_ms += (double)(mm_now_ns() - c->t_begin) * 1e-6;
        c->n_timed++;
    }
    e = cudaGetLastError();
    if (e != cudaSuccess) failc(c, e, "step");
    if (c->failed) {
        if (err) *err = c->ferr;
        return c->ferr.code ? c->ferr.code : MM_ERROR;
    }
    return MM_OK;
}

/* ---- text ops ---- */

/* Each deferrable operation: an argument struct (zeroed before it is filled: segments compare as bytes), the
 * operation's body as ex_NAME(ctx, args), and cu_NAME that records or runs it (run_op). */
struct a_embed {
    const struct wk_weight *table;
    float *out;
    int32_t dim;
};

static void ex_embed(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_embed *a = args;
    const struct wk_weight *table = a->table;
    float *out = a->out;
    const int32_t dim = a->dim;
    struct mm_err e__ = {0};
    if (!table->bf16) {
        mm_err_set(&e__, MM_UNSUPPORTED, "embedding table without a bf16 copy");
        fail(c, &e__, "embed");
        return;
    }
    if (kn_cuda_embed(table->bf16, (int32_t)table->rows, dim, c->ids.p, c->b->n_tokens, out, NULL, ST, &e__))
        fail(c, &e__, "embed");
}

static void cu_embed(void *ctx, const struct wk_weight *table, float *out, int32_t dim)
{
    struct a_embed a;
    memset(&a, 0, sizeof a);
    a.table = table, a.out = out, a.dim = dim;
    run_op(ctx, ex_embed, &a, sizeof a);
}

static void cu_set_rows(void *ctx, float *out, int32_t dim, const int64_t *rows, const float *data,
                        int64_t n_rows)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (n_rows <= 0) return;
    flush(c); /* host rows: copied now */
    float *dd = grow(c, &c->media, sizeof(float) * (size_t)(n_rows * dim));
    int64_t *rd = grow(c, &c->media_rows, sizeof(int64_t) * (size_t)n_rows);
    if (!dd || !rd) return;
    /* an image's rows (14 MB at M3's width) through the pinned buffer: a pageable copy moves about half as
     * fast */
    cudaError_t e = copy(c, dd, data, sizeof(float) * (size_t)(n_rows * dim), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(rd, rows, sizeof(int64_t) * (size_t)n_rows, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) {
        failc(c, e, "set_rows");
        return;
    }
    if (kn_cuda_scatter_rows(out, dim, rd, dd, n_rows, ST, &e__)) fail(c, &e__, "set_rows");
}

/* Media embeddings kept in device memory by the vision context: copied on this context's stream, after its
 * earlier work. The encode that wrote src synchronized its own stream before returning. */
static void cu_copy(void *ctx, float *dst, const float *src, int64_t n)
{
    struct cuda_be *c = ctx;
    if (n <= 0) return;
    flush(c);
    cudaError_t e = cudaMemcpyAsync(dst, src, sizeof(float) * (size_t)n, cudaMemcpyDeviceToDevice, ST);
    if (e != cudaSuccess) failc(c, e, "copy");
}

/* The vision context's memory comes from the stream-ordered allocator (cu_vision_context), so it is freed in
 * this context's stream order, after the copies that read it; a cudaFree would wait for the whole device,
 * the vision stream's encode included. */
static void cu_free_vision(void *ctx, float *p)
{
    struct cuda_be *c = ctx;
    if (!p) return;
    flush(c);
    cudaError_t e = cudaFreeAsync(p, ST);
    if (e != cudaSuccess) failc(c, e, "free (vision memory)");
}

/* out = RMSNorm(x), or with y: y += x, then out = RMSNorm(y) (add_rmsnorm) */
struct a_rmsnorm {
    const float *x;
    float *y;
    const struct wk_weight *w;
    int64_t n;
    int32_t dim;
    float eps;
    float *out;
};

static void ex_rmsnorm(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_rmsnorm *a = args;
    struct mm_err e__ = {0};
    if (a->y ? kn_cuda_add_rmsnorm(a->y, a->x, a->w->f32, a->n, a->dim, a->eps, a->out, ST, &e__)
             : kn_cuda_rmsnorm(a->x, a->dim, a->w->f32, a->n, a->dim, a->eps, a->out, a->dim, 0, ST, &e__))
        fail(c, &e__, a->y ? "add + rmsnorm" : "rmsnorm");
}

static void cu_rmsnorm(void *ctx, const float *x, const struct wk_weight *w, int64_t n, int32_t dim,
                       float eps, float *out)
{
    struct a_rmsnorm a;
    memset(&a, 0, sizeof a);
    a.x = x, a.w = w, a.n = n, a.dim = dim, a.eps = eps, a.out = out;
    run_op(ctx, ex_rmsnorm, &a, sizeof a);
}

struct a_head_rmsnorm {
    float *x;
    int64_t n;
    int32_t n_heads, head_dim;
    const struct wk_weight *w;
    float eps;
};

static void ex_head_rmsnorm(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_head_rmsnorm *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_head_rmsnorm(a->x, a->n, a->n_heads, a->head_dim, (int64_t)a->n_heads * a->head_dim,
                             a->w->f32, a->eps, ST, &e__))
        fail(c, &e__, "head_rmsnorm");
}

static void cu_head_rmsnorm(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim,
                            const struct wk_weight *w, float eps)
{
    struct a_head_rmsnorm a;
    memset(&a, 0, sizeof a);
    a.x = x, a.n = n, a.n_heads = n_heads, a.head_dim = head_dim, a.w = w, a.eps = eps;
    run_op(ctx, ex_head_rmsnorm, &a, sizeof a);
}

struct a_rope {
    float *x;
    int64_t n;
    int32_t n_heads, head_dim;
    const float *cos_t, *sin_t;
    int32_t table_stride, rot;
};

static void ex_rope(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_rope *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_rope_apply(a->x, a->n, a->n_heads, a->head_dim, (int64_t)a->n_heads * a->head_dim, a->cos_t,
                           a->sin_t, a->table_stride, a->rot, ST, &e__))
        fail(c, &e__, "rope");
}

static void cu_rope(void *ctx, float *x, int64_t n, int32_t n_heads, int32_t head_dim, const float *cos_t,
                    const float *sin_t, int32_t table_stride, int32_t rot)
{
    struct a_rope a;
    memset(&a, 0, sizeof a);
    a.x = x, a.n = n, a.n_heads = n_heads, a.head_dim = head_dim, a.cos_t = cos_t, a.sin_t = sin_t;
    a.table_stride = table_stride, a.rot = rot;
    run_op(ctx, ex_rope, &a, sizeof a);
}

/* The bf16 form of w for a product that reads bf16: its own copy, or an FP8 weight dequantized into scratch
 * slot 0 or 1 (the values a bf16 copy made at load holds); NULL after a failure. */
static const void *bf16_of(struct cuda_be *c, const struct wk_weight *w, int slot)
{
    if (w->bf16 || !w->fp8) return w->bf16;
    void *p = grow(c, &c->wdq[slot], (size_t)(w->rows * w->cols) * 2);
    if (!p) return NULL;
    struct mm_err e__ = {0};
    if (kn_cuda_dequant_fp8_block(w->fp8, w->fscale, w->rows, w->cols, w->bs_rows, w->bs_cols, p, ST, &e__)) {
        fail(c, &e__, "weight (fp8 to bf16)");
        return NULL;
    }
    return p;
}

/* Whether w is an FP8 weight whose product at n rows takes the tensor cores (kn_cuda_gemm_small_fp8) */
static int fp8_tc_takes(const struct cuda_be *c, const struct wk_weight *w, int64_t n, const float *x,
                        int64_t ldx)
{
    return w->fp8 && c->small_gemm && !c->fp32 && c->fp8_tc > 0 && n >= c->fp8_tc && (uintptr_t)x % 16 == 0 &&
           (uintptr_t)w->fp8 % 16 == 0 && kn_cuda_x_f16_scaled_ok(w->cols, ldx) &&
           kn_cuda_gemm_small_fp8_ok(n, w->rows, w->cols, w->bs_rows, w->bs_cols);
}

/* x's n rows as the FP8 tensor-core products read them (kn_cuda_x_f16_scaled) in the x16 / x16s scratch;
 * NULL after a failure */
static const void *x_f16_of(struct cuda_be *c, const float *x, int64_t ldx, int64_t n, int64_t cols,
                            const float **xs)
{
    void *xh = grow(c, &c->x16, (size_t)(n * cols) * 2);
    float *sc = grow(c, &c->x16s, sizeof(float) * (size_t)n);
    struct mm_err e__ = {0};
    if (!xh || !sc) return NULL;
    if (kn_cuda_x_f16_scaled(n, cols, x, ldx, xh, sc, ST, &e__)) {
        fail(c, &e__, "activations (to scaled f16)");
        return NULL;
    }
    *xs = sc;
    return xh;
}

/* The FP8 tensor-core product of w with x already in x16 form */
static void gemm_fp8_tc(struct cuda_be *c, const struct wk_weight *w, const void *xh, const float *xs,
                        int64_t n, float *y, int64_t ldy)
{
    struct mm_err e__ = {0};
    const size_t wsb = kn_cuda_gemm_small_fp8_ws(n, w->rows, w->cols);
    void *ws = wsb ? grow(c, &c->small_ws, wsb) : NULL;
    if (wsb && !ws) return;
    if (kn_cuda_gemm_small_fp8(n, w->rows, w->cols, xh, xs, w->fp8, w->fscale, w->bs_rows, w->bs_cols, y, ldy,
                               ws, wsb, ST, &e__))
        fail(c, &e__, "linear (fp8, tensor cores)");
}

/* y[n][rows] = x[n][cols] . W^T (+ bias: f32, NULL for none; added in the product's epilogue where the
 * cuBLAS route takes it, and then 1 is returned, else 0 and the caller adds it) */
static int gemm_bias(struct cuda_be *c, const struct wk_weight *w, const float *x, int64_t ldx, int64_t n,
                     float *y, int64_t ldy, const float *bias)
{
    struct mm_err e__ = {0};
    if (n <= 0) return 0;
    if (w->fp8) {
        /* decode-sized: a stream over the e4m3 weight (half a bf16 copy's bytes), on the tensor cores or (few
         * rows, shapes they do not take) the CUDA cores; more rows: the bf16 routes on the weight dequantized
         * into scratch (a prefill's products are bound by arithmetic, not bytes) */
        if (fp8_tc_takes(c, w, n, x, ldx)) {
            const float *xs = NULL;
            const void *xh = x_f16_of(c, x, ldx, n, w->cols, &xs);
            if (xh) gemm_fp8_tc(c, w, xh, xs, n, y, ldy);
            return 0;
        }
        if (c->gemv && n <= c->fp8_rows && kn_cuda_gemv_fp8_ok(n, w->cols, ldx, w->bs_rows, w->bs_cols) &&
            (uintptr_t)x % 16 == 0) {
            if (kn_cuda_gemv_fp8(n, w->rows, w->cols, x, ldx, w->fp8, w->fscale, w->bs_rows, w->bs_cols, y,
                                 ldy, ST, &e__))
                fail(c, &e__, "linear (gemv fp8)");
            return 0;
        }
        if (c->fp8_pf && !c->fp32 && kn_cuda_gemm_fp8_block_ok(w->rows, w->cols, w->bs_rows, w->bs_cols) &&
            kn_cuda_x_e4m3_groups_ok(w->cols, ldx) && (uintptr_t)x % 16 == 0) {
            const size_t wsb = kn_cuda_gemm_fp8_block_ws(n, w->rows, w->cols);
            void *ws = grow(c, &c->xq, wsb);
            if (!ws) return 0;
            const int32_t rc = kn_cuda_gemm_fp8_block(c->blas, n, w->rows, w->cols, x, ldx, w->fp8, w->fscale,
                                                      y, ldy, ws, wsb, &e__);
            if (rc == MM_OK) {
                if (!c->fp8_pf_said) {
                    c->fp8_pf_said = 1;
                    mm_log_info(
                        "cuda",
                        "FP8 prefill products: e4m3 activations, cuBLASLt block scaling (first: %lld rows "
                        "of %lld x %lld)",
                        (long long)n, (long long)w->rows, (long long)w->cols);
                }
                return 0;
            }
            if (rc != MM_UNSUPPORTED) {
                fail(c, &e__, "linear (fp8 block)");
                return 0;
            }
            mm_log_debug("cuda", "%s: %lld rows of %lld x %lld dequantized instead", e__.msg, (long long)n,
                         (long long)w->rows, (long long)w->cols);
            e__.code = 0; /* a shape cuBLASLt refuses: the dequantize-first route below */
        }
        struct wk_weight t = {.rows = w->rows, .cols = w->cols};
        t.bf16 = (void *)bf16_of(c, w, 0);
        return t.bf16 ? gemm_bias(c, &t, x, ldx, n, y, ldy, bias) : 0;
    }
    if (w->f32 && (c->fp32 || !w->bf16)) { /* fp32 run, or a decision-making weight kept only in fp32 */
        /* decode-sized in the bf16 mode: cuBLAS's f32 products read these weights at 3-13 % of copy at 1-16
         * rows, the slowest operations of a decode step (kn_bench --only skinny); the exact mode keeps cuBLAS
         */
        if (!c->fp32 && c->gemv && kn_cuda_gemv_f32_ok(n, w->cols, ldx) && (uintptr_t)x % 16 == 0 &&
            (uintptr_t)w->f32 % 16 == 0) {
            if (kn_cuda_gemv_f32(n, w->rows, w->cols, x, ldx, w->f32, y, ldy, ST, &e__))
                fail(c, &e__, "linear (gemv f32)");
            return 0;
        }
        if (kn_cuda_gemm_f32(c->blas, n, w->rows, w->cols, x, ldx, w->f32, w->cols, 0.0f, y, ldy, &e__))
            fail(c, &e__, "linear (fp32)");
        return 0;
    }
    /* decode-sized products: a stream over W (kn_gemv.cu), f32 x read as it is; at 3-4 rows cuBLAS reads the
     * widest projections faster (kn_bench --only skinny), so only 1-2 rows */
    if (c->gemv && n <= 2 && w->bf16 && kn_cuda_gemv_ok(n, w->cols, ldx) && (uintptr_t)x % 16 == 0 &&
        (uintptr_t)w->bf16 % 16 == 0) {
        if (kn_cuda_gemv_bf16(n, w->rows, w->cols, x, ldx, w->bf16, y, ldy, ST, &e__))
            fail(c, &e__, "linear (gemv)");
        return 0;
    }
    /* 3-16 rows on the tensor cores (kn_gemm_small.cu) for the shapes where cuBLAS's tiles waste the GPU */
    if (c->small_gemm && n >= 3 && w->bf16 && kn_cuda_gemm_small_ok(n, w->cols, ldx) &&
        kn_cuda_gemm_small_prefer(n, w->rows, w->cols) && (uintptr_t)x % 16 == 0 &&
        (uintptr_t)w->bf16 % 16 == 0) {
        const size_t wsb = kn_cuda_gemm_small_ws(n, w->rows, w->cols);
        void *ws = wsb ? grow(c, &c->small_ws, wsb) : NULL;
        if (wsb && !ws) return 0;
        if (kn_cuda_gemm_small_bf16(n, w->rows, w->cols, x, ldx, w->bf16, y, ldy, ws, wsb, ST, &e__))
            fail(c, &e__, "linear (small)");
        return 0;
    }
    void *xb = grow(c, &c->xb, (size_t)(n * w->cols) * 2);
    if (!xb) return 0;
    if (ldx != w->cols || !w->bf16) {
        mm_err_set(&e__, MM_INVALID, "row stride %lld for %lld columns", (long long)ldx, (long long)w->cols);
        fail(c, &e__, "linear");
        return 0;
    }
    if (kn_cuda_convert(x, xb, n * w->cols, 1, ST, &e__)) {
        fail(c, &e__, "linear (convert)");
        return 0;
    }
    /* the bias in cuBLASLt's epilogue: one pass over y less (MMGW_CUDA_LT_BIAS=0: the separate pass) */
    if (bias && c->lt_bias) {
        const int32_t rc = kn_cuda_gemm_bf16_bias(c->blas, n, w->rows, w->cols, xb, w->cols, w->bf16, w->cols,
                                                  bias, y, ldy, &e__);
        if (rc == MM_OK) return 1;
        if (rc != MM_UNSUPPORTED) {
            fail(c, &e__, "linear (bf16 + bias)");
            return 1;
        }
        e__.code = 0;
    }
    if (kn_cuda_gemm_bf16(c->blas, n, w->rows, w->cols, xb, w->cols, w->bf16, w->cols, 0.0f, y, ldy, 0, &e__))
        fail(c, &e__, "linear (bf16)");
    return 0;
}

static void gemm(struct cuda_be *c, const struct wk_weight *w, const float *x, int64_t ldx, int64_t n,
                 float *y, int64_t ldy)
{
    (void)gemm_bias(c, w, x, ldx, n, y, ldy, NULL);
}

struct a_linear {
    const struct wk_weight *w, *bias;
    const float *x;
    int64_t n;
    float *y;
};

static void ex_linear(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_linear *a = args;
    struct mm_err e__ = {0};
    const int biased =
        gemm_bias(c, a->w, a->x, a->w->cols, a->n, a->y, a->w->rows, a->bias ? a->bias->f32 : NULL);
    if (a->bias && a->n > 0 && !biased &&
        kn_cuda_add_bias_convert(a->y, a->bias->f32, a->n * a->w->rows, (int32_t)a->w->rows, a->y, 0, ST,
                                 &e__))
        fail(c, &e__, "linear (bias)");
}

static void cu_linear(void *ctx, const struct wk_weight *w, const struct wk_weight *bias, const float *x,
                      int64_t n, float *y)
{
    struct a_linear a;
    memset(&a, 0, sizeof a);
    a.w = w, a.bias = bias, a.x = x, a.n = n, a.y = y;
    run_op(ctx, ex_linear, &a, sizeof a);
}

/* Products of several weights with one input (q/k/v and the index projections, gate/up): the bf16 weights
 * that take the decode gemv (1-2 rows) in one launch (kn_cuda_gemv_bf16_multi, the same bits as one each),
 * every other weight as linear does it. */
struct a_linear_multi {
    int32_t n_w;
    const struct wk_weight *w[WK_LINEAR_MULTI_MAX];
    const float *x;
    int64_t n;
    float *y[WK_LINEAR_MULTI_MAX];
};

static void ex_linear_multi(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_linear_multi *a = args;
    struct mm_err e__ = {0};
    const void *gw[WK_LINEAR_MULTI_MAX];
    int64_t rows[WK_LINEAR_MULTI_MAX], cols = -1;
    float *gy[WK_LINEAR_MULTI_MAX];
    int32_t ng = 0, grouped[WK_LINEAR_MULTI_MAX] = {0};
    for (int32_t i = 0; i < a->n_w && ng < KN_GEMV_MULTI_MAX; i++) {
        const struct wk_weight *w = a->w[i];
        if (!c->multi || c->fp32 || !c->gemv || a->n > 2 || !w->bf16 || (cols >= 0 && w->cols != cols) ||
            !kn_cuda_gemv_ok(a->n, w->cols, w->cols) || (uintptr_t)a->x % 16 || (uintptr_t)w->bf16 % 16)
            continue;
        cols = w->cols, gw[ng] = w->bf16, rows[ng] = w->rows, gy[ng] = a->y[i], grouped[i] = 1, ng++;
    }
    if (ng >= 2) {
        if (kn_cuda_gemv_bf16_multi(ng, gw, rows, gy, a->n, cols, a->x, cols, ST, &e__))
            fail(c, &e__, "linear (gemv multi)");
    } else {
        memset(grouped, 0, sizeof grouped);
    }
    /* FP8 weights kept as stored at 1-4 rows (q/k/v, gate/up): one launch over the e4m3 weights */
    const uint8_t *w8[WK_LINEAR_MULTI_MAX];
    const float *s8[WK_LINEAR_MULTI_MAX];
    int64_t rows8[WK_LINEAR_MULTI_MAX], cols8 = -1;
    float *y8[WK_LINEAR_MULTI_MAX];
    int32_t n8 = 0, bsr8 = 0, bsc8 = 0, grouped8[WK_LINEAR_MULTI_MAX] = {0};
    if (c->multi && c->gemv && !c->fp32 && a->n <= 4 && a->n <= c->fp8_rows && (uintptr_t)a->x % 16 == 0)
        for (int32_t i = 0; i < a->n_w && n8 < KN_GEMV_MULTI_MAX; i++) {
            const struct wk_weight *w = a->w[i];
            if (grouped[i] || !w->fp8 || fp8_tc_takes(c, w, a->n, a->x, w->cols) ||
                (cols8 >= 0 && (w->cols != cols8 || w->bs_rows != bsr8 || w->bs_cols != bsc8)) ||
                !kn_cuda_gemv_fp8_ok(a->n, w->cols, w->cols, w->bs_rows, w->bs_cols))
                continue;
            cols8 = w->cols, bsr8 = w->bs_rows, bsc8 = w->bs_cols;
            w8[n8] = w->fp8, s8[n8] = w->fscale, rows8[n8] = w->rows, y8[n8] = a->y[i], grouped8[i] = 1, n8++;
        }
    if (n8 >= 2) {
        if (kn_cuda_gemv_fp8_multi(n8, w8, s8, rows8, y8, a->n, cols8, a->x, cols8, bsr8, bsc8, ST, &e__))
            fail(c, &e__, "linear (gemv fp8 multi)");
        for (int32_t i = 0; i < a->n_w; i++) grouped[i] |= grouped8[i];
    }
    /* the f32 weights (an MSA layer's index projections) at up to 16 rows: one staged launch, x read into
     * shared memory once per 32 weight rows (kn_gemv.cu); one kn_cuda_gemv_f32 each read it from L2 once
     * per 1-8 rows */
    const float *fw[WK_LINEAR_MULTI_MAX];
    int64_t frows[WK_LINEAR_MULTI_MAX], fcols = -1;
    float *fy[WK_LINEAR_MULTI_MAX];
    int32_t nf = 0, fgrouped[WK_LINEAR_MULTI_MAX] = {0};
    if (c->f32_staged > 0 && a->n >= c->f32_staged && !c->fp32 && c->gemv && (uintptr_t)a->x % 16 == 0)
        for (int32_t i = 0; i < a->n_w && nf < KN_GEMV_MULTI_MAX; i++) {
            const struct wk_weight *w = a->w[i];
            if (grouped[i] || !w->f32 || w->bf16 || (fcols >= 0 && w->cols != fcols) ||
                !kn_cuda_gemv_f32_multi_ok(a->n, w->cols, w->cols) || (uintptr_t)w->f32 % 16)
                continue;
            fcols = w->cols, fw[nf] = w->f32, frows[nf] = w->rows, fy[nf] = a->y[i], fgrouped[i] = 1, nf++;
        }
    if (nf >= 2) {
        if (kn_cuda_gemv_f32_multi(nf, fw, frows, fy, a->n, fcols, a->x, fcols, ST, &e__))
            fail(c, &e__, "linear (f32 staged)");
        for (int32_t i = 0; i < a->n_w; i++) grouped[i] |= fgrouped[i];
    }
    /* two bf16 weights of one shape at 3-16 rows where the row route takes them together (gate and up of a
     * dense MLP): one launch, its k split chosen for both (kn_gemm_small.cu) */
    for (int32_t i = 0;
         c->rows_multi && c->small_gemm && !c->fp32 && a->n >= 3 && (uintptr_t)a->x % 16 == 0 && i < a->n_w;
         i++) {
        const struct wk_weight *u = a->w[i];
        if (grouped[i] || !u->bf16 || (uintptr_t)u->bf16 % 16 ||
            !kn_cuda_gemm_small_prefer(a->n, u->rows, u->cols) ||
            !kn_cuda_gemm_small_multi_ok(2, a->n, u->rows, u->cols, u->cols))
            continue;
        for (int32_t k = i + 1; k < a->n_w; k++) {
            const struct wk_weight *v = a->w[k];
            if (grouped[k] || !v->bf16 || (uintptr_t)v->bf16 % 16 || v->rows != u->rows || v->cols != u->cols)
                continue;
            const size_t wsb = kn_cuda_gemm_small_multi_ws(2, a->n, u->rows, u->cols);
            void *ws = wsb ? grow(c, &c->small_ws, wsb) : NULL;
            if (wsb && !ws) return;
            const void *pw[2] = {u->bf16, v->bf16};
            float *py[2] = {a->y[i], a->y[k]};
            if (kn_cuda_gemm_small_bf16_multi(2, pw, a->n, u->rows, u->cols, a->x, u->cols, py, u->rows, ws,
                                              wsb, ST, &e__))
                fail(c, &e__, "linear (small, 2 weights)");
            grouped[i] = grouped[k] = 1;
            break;
        }
    }
    /* FP8 weights on the tensor cores: x converted once for all of them (one width) */
    const void *xh = NULL;
    const float *xs = NULL;
    int64_t xh_cols = -1;
    for (int32_t i = 0; c->multi && i < a->n_w; i++) {
        const struct wk_weight *w = a->w[i];
        if (grouped[i] || !fp8_tc_takes(c, w, a->n, a->x, w->cols) || (xh_cols >= 0 && w->cols != xh_cols))
            continue;
        if (!xh && !(xh = x_f16_of(c, a->x, w->cols, a->n, w->cols, &xs))) return;
        xh_cols = w->cols;
        gemm_fp8_tc(c, w, xh, xs, a->n, a->y[i], w->rows);
        grouped[i] = 1;
    }
    for (int32_t i = 0; i < a->n_w; i++)
        if (!grouped[i]) gemm(c, a->w[i], a->x, a->w[i]->cols, a->n, a->y[i], a->w[i]->rows);
}

static void cu_linear_multi(void *ctx, int32_t n_w, const struct wk_weight *const *w, const float *x,
                            int64_t n, float *const *y)
{
    struct cuda_be *c = ctx;
    if (n_w < 1 || n_w > WK_LINEAR_MULTI_MAX) {
        struct mm_err e__ = {0};
        mm_err_set(&e__, MM_INVALID, "%d weights (at most %d)", (int)n_w, WK_LINEAR_MULTI_MAX);
        fail(c, &e__, "linear_multi");
        return;
    }
    struct a_linear_multi a;
    memset(&a, 0, sizeof a);
    a.n_w = n_w, a.x = x, a.n = n;
    for (int32_t i = 0; i < n_w; i++) a.w[i] = w[i], a.y[i] = y[i];
    run_op(c, ex_linear_multi, &a, sizeof a);
}

struct a_add {
    float *y;
    const float *x;
    int64_t n;
};

static void ex_add(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_add *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_add(a->y, a->x, a->n, ST, &e__)) fail(c, &e__, "add");
}

static void cu_add(void *ctx, float *y, const float *x, int64_t n)
{
    struct a_add a;
    memset(&a, 0, sizeof a);
    a.y = y, a.x = x, a.n = n;
    run_op(ctx, ex_add, &a, sizeof a);
}

/* The residual add and the next RMSNorm in one launch (kn_cuda_add_rmsnorm: ex_rmsnorm with y) */
static void cu_add_rmsnorm(void *ctx, float *y, const float *x, const struct wk_weight *w, int64_t n,
                           int32_t dim, float eps, float *out)
{
    struct cuda_be *c = ctx;
    if (!c->add_norm) { /* MMGW_CUDA_ADD_NORM=0: the two launches (for comparisons) */
        cu_add(ctx, y, x, n * dim);
        cu_rmsnorm(ctx, y, w, n, dim, eps, out);
        return;
    }
    struct a_rmsnorm a;
    memset(&a, 0, sizeof a);
    a.y = y, a.x = x, a.w = w, a.n = n, a.dim = dim, a.eps = eps, a.out = out;
    run_op(ctx, ex_rmsnorm, &a, sizeof a);
}

struct a_swiglu {
    const float *gate, *up;
    int64_t n;
    float alpha, limit;
    float *out;
};

static void ex_swiglu(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_swiglu *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_swiglu(a->gate, a->up, 1, a->n, 1, a->alpha, a->limit, a->out, 1, 0, ST, &e__))
        fail(c, &e__, "swiglu");
}

static void cu_swiglu(void *ctx, const float *gate, const float *up, int64_t n, float alpha, float limit,
                      float *out)
{
    struct a_swiglu a;
    memset(&a, 0, sizeof a);
    a.gate = gate, a.up = up, a.n = n, a.alpha = alpha, a.limit = limit, a.out = out;
    run_op(ctx, ex_swiglu, &a, sizeof a);
}

static struct kn_cuda_msa_shape shape(const struct cuda_be *c, int32_t n_heads, float scale,
                                      const struct wk_msa_params *p)
{
    struct kn_cuda_msa_shape s;
    s.n_heads = n_heads;
    s.n_kv = c->geom.n_kv;
    s.head_dim = c->geom.head_dim;
    s.n_idx_heads = p ? p->n_idx_heads : c->geom.n_kv;
    s.idx_dim = p ? p->idx_dim : c->geom.idx_dim;
    s.block = c->geom.block;
    s.topk = p ? p->topk : 1;
    s.n_local = p ? p->n_local : 1;
    s.scale = scale;
    return s;
}

/* kv_write (k, v) and idx_write (k = the index keys, v = NULL) */
struct a_cache_write {
    int32_t layer;
    const float *k, *v; /* K/V rows, or NULL */
    const float *kidx;  /* index keys, or NULL */
};

/* one kn_cuda_cache_append (one launch) for the K/V rows and/or the index keys given */
static void ex_cache_write(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_cache_write *a = args;
    struct mm_err e__ = {0};
    struct kn_cuda_msa_shape s = shape(c, c->geom.n_kv, 1.0f, NULL);
    if (kn_cuda_cache_append(&s, &c->qb, &c->layer[a->layer], a->k, a->v,
                             (int64_t)c->geom.n_kv * c->geom.head_dim, a->kidx, c->geom.idx_dim, ST, &e__))
        fail(c, &e__, a->k ? "kv_write" : "idx_write");
}

static void cu_kv_write(void *ctx, int32_t layer, const float *k, const float *v)
{
    struct a_cache_write a;
    memset(&a, 0, sizeof a);
    a.layer = layer, a.k = k, a.v = v;
    run_op(ctx, ex_cache_write, &a, sizeof a);
}

static void cu_idx_write(void *ctx, int32_t layer, const float *idx_k)
{
    struct a_cache_write a;
    memset(&a, 0, sizeof a);
    a.layer = layer, a.kidx = idx_k;
    run_op(ctx, ex_cache_write, &a, sizeof a);
}

/* q f32 -> bf16 scratch; out bf16 scratch -> f32 after the attention (f32 caches: both used as they are) */
static int attn_io(struct cuda_be *c, const float *q, float *out, int64_t elems, int q_ready, void **qb,
                   void **ob)
{
    struct mm_err e__ = {0};
    if (c->kv_dtype == KN_KV_F32) {
        *qb = (void *)q;
        *ob = out;
        return 0;
    }
    *qb = grow(c, &c->qb16, (size_t)elems * 2);
    *ob = grow(c, &c->ob16, (size_t)elems * 2);
    if (!*qb || !*ob) return -1;
    if (q_ready) return 0; /* attn_layer's norm + RoPE launch wrote the bf16 q into qb16 */
    if (kn_cuda_convert(q, *qb, elems, 1, ST, &e__)) {
        fail(c, &e__, "attention (q)");
        return -1;
    }
    return 0;
}

struct a_attn_dense {
    int32_t layer, n_heads, q_ready;
    const float *q;
    float scale;
    float *out;
};

static void ex_attn_dense(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_attn_dense *a = args;
    const int32_t layer = a->layer, n_heads = a->n_heads;
    const float *q = a->q, scale = a->scale;
    float *out = a->out;
    struct mm_err e__ = {0};
    struct kn_cuda_msa_shape s = shape(c, n_heads, scale, NULL);
    const int64_t elems = c->b->n_tokens * n_heads * c->geom.head_dim;
    void *qb, *ob;
    if (attn_io(c, q, out, elems, a->q_ready, &qb, &ob)) return;
    size_t wsb = kn_cuda_dense_attention_ws(&s, &c->qb, KN_PATH_AUTO);
    void *ws = grow(c, &c->ws, wsb);
    if (!ws) return;
    if (kn_cuda_dense_attention(&s, &c->qb, &c->layer[layer], qb, ob, ws, wsb, KN_PATH_AUTO, ST, &e__)) {
        fail(c, &e__, "attn_dense");
        return;
    }
    if (ob != out && kn_cuda_convert(ob, out, elems, 0, ST, &e__)) fail(c, &e__, "attn_dense (out)");
}

/* q_ready: the bf16 q is in qb16 already (attn_layer's norm + RoPE launch wrote it) */
static void dense_op(struct cuda_be *c, int32_t layer, const float *q, int32_t n_heads, float scale,
                     float *out, int q_ready)
{
    struct a_attn_dense a;
    memset(&a, 0, sizeof a);
    a.layer = layer, a.n_heads = n_heads, a.q = q, a.scale = scale, a.out = out, a.q_ready = q_ready;
    run_op(c, ex_attn_dense, &a, sizeof a);
}

static void cu_attn_dense(void *ctx, int32_t layer, const float *q, int32_t n_heads, float scale, float *out)
{
    dense_op(ctx, layer, q, n_heads, scale, out, 0);
}

static void attn_msa(struct cuda_be *c, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                     float scale, const struct wk_msa_params *p, const struct wk_sel_out *so, float *out,
                     int q_ready)
{
    struct mm_err e__ = {0};
    if (p->n_idx_heads != c->geom.n_kv) {
        mm_err_set(&e__, MM_UNSUPPORTED, "%d index heads for %d KV groups", p->n_idx_heads, c->geom.n_kv);
        fail(c, &e__, "attn_msa");
        return;
    }
    struct kn_cuda_msa_shape s = shape(c, n_heads, scale, p);
    const int64_t T = c->b->n_tokens, elems = T * n_heads * c->geom.head_dim;
    void *qb, *ob;
    if (attn_io(c, q, out, elems, q_ready, &qb, &ob)) return;
    int32_t *sel = grow(c, &c->sel, sizeof(int32_t) * (size_t)(T * p->n_idx_heads * p->topk));
    /* selection and attention in one call: a decode step runs the fused route (two kernels) */
    void *ws = grow(c, &c->ws, kn_cuda_msa_select_attend_ws(&s, &c->qb, p->topk, KN_PATH_AUTO));
    if (!sel || !ws) return;
    const size_t wsb = c->ws.n;
    if (kn_cuda_msa_select_attend(&s, &c->qb, &c->layer[layer], idx_q, qb, sel, p->topk, ob, ws, wsb,
                                  KN_PATH_AUTO, ST, &e__)) {
        fail(c, &e__, "attn_msa");
        return;
    }
    if (ob != out && kn_cuda_convert(ob, out, elems, 0, ST, &e__)) fail(c, &e__, "attn_msa (out)");
    if (so && so->sel) {
        /* the caller reads these rows after batch_end: copy now ([heads][T][topk] -> stride so->stride) */
        const size_t cnt = (size_t)(T * p->n_idx_heads * p->topk);
        int32_t *h = malloc(sizeof(int32_t) * cnt);
        if (!h) {
            mm_err_set(&e__, MM_NOMEM, "out of memory");
            fail(c, &e__, "attn_msa (selections)");
            return;
        }
        cudaError_t e = cudaMemcpy(h, sel, sizeof(int32_t) * cnt, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) failc(c, e, "attn_msa (selections)");
        for (int64_t r = 0; r < T * p->n_idx_heads && e == cudaSuccess; r++)
            for (int32_t x = 0; x < so->stride; x++)
                so->sel[r * so->stride + x] = x < p->topk ? h[r * p->topk + x] : -1;
        free(h);
    }
}

struct a_attn_msa {
    int32_t layer, n_heads, q_ready;
    const float *q, *idx_q;
    float scale;
    struct wk_msa_params p;
    float *out;
};

static void ex_attn_msa(void *ctx, const void *args)
{
    const struct a_attn_msa *a = args;
    attn_msa(ctx, a->layer, a->q, a->idx_q, a->n_heads, a->scale, &a->p, NULL, a->out, a->q_ready);
}

/* q_ready: the bf16 q is in qb16 already (attn_layer's norm + RoPE launch wrote it) */
static void msa_op(struct cuda_be *c, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                   float scale, const struct wk_msa_params *p, const struct wk_sel_out *so, float *out,
                   int q_ready)
{
    if (so && so->sel) { /* the selections are copied out for the caller: runs now */
        flush(c);
        attn_msa(c, layer, q, idx_q, n_heads, scale, p, so, out, q_ready);
        return;
    }
    struct a_attn_msa a;
    memset(&a, 0, sizeof a);
    a.layer = layer, a.n_heads = n_heads, a.q = q, a.idx_q = idx_q, a.scale = scale, a.p = *p, a.out = out;
    a.q_ready = q_ready;
    run_op(c, ex_attn_msa, &a, sizeof a);
}

static void cu_attn_msa(void *ctx, int32_t layer, const float *q, const float *idx_q, int32_t n_heads,
                        float scale, const struct wk_msa_params *p, const struct wk_sel_out *so, float *out)
{
    msa_op(ctx, layer, q, idx_q, n_heads, scale, p, so, out, 0);
}

/* One layer's attention (attn_layer): the per-head norms and RoPE of q, k (and the index query and key) in
 * one launch (kn_cuda_head_norm_rope: the same bits as head_rmsnorm + rope per tensor), the cache writes
 * of K, V and the index key in one more, then the attention as the separate ops do it. A decode step launched
 * 8 tiny kernels per MSA layer for the norms and rotations alone. */
struct a_norm_rope {
    struct kn_norm_rope_part parts[KN_NORM_ROPE_MAX_PARTS];
    int32_t n_parts, q16; /* q16: part 0 (q) also as bf16 into qb16, the attention's input */
    int64_t n;
    const float *cos_t, *sin_t;
    int32_t table_stride;
    float eps;
};

static void ex_norm_rope(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_norm_rope *a = args;
    struct mm_err e__ = {0};
    struct kn_norm_rope_part parts[KN_NORM_ROPE_MAX_PARTS];
    memcpy(parts, a->parts, sizeof parts);
    if (a->q16) { /* the buffer attn_io hands the attention (grown here, at run time, like there) */
        parts[0].bf16 = grow(c, &c->qb16, (size_t)(a->n * parts[0].n_heads * parts[0].head_dim) * 2);
        if (!parts[0].bf16) return;
    }
    if (kn_cuda_head_norm_rope(parts, a->n_parts, a->n, a->cos_t, a->sin_t, a->table_stride, a->eps, ST,
                               &e__))
        fail(c, &e__, "head norm + rope");
}

static void cu_attn_layer(void *ctx, const struct wk_attn_layer *l)
{
    struct cuda_be *c = ctx;
    const int32_t hd = c->geom.head_dim;
    struct a_norm_rope a;
    memset(&a, 0, sizeof a);
    a.n = c->b->n_tokens, a.cos_t = l->cos_t, a.sin_t = l->sin_t, a.table_stride = l->table_stride;
    a.eps = l->eps;
    a.parts[a.n_parts++] = (struct kn_norm_rope_part){l->q, l->q_norm->f32, l->n_heads, hd, l->rot, NULL};
    a.parts[a.n_parts++] = (struct kn_norm_rope_part){l->k, l->k_norm->f32, c->geom.n_kv, hd, l->rot, NULL};
    if (l->msa) {
        const int32_t nih = l->msa->n_idx_heads, idim = l->msa->idx_dim;
        a.parts[a.n_parts++] = (struct kn_norm_rope_part){l->iq, l->iq_norm->f32, nih, idim, l->irot, NULL};
        a.parts[a.n_parts++] = (struct kn_norm_rope_part){l->ik, l->ik_norm->f32, 1, idim, l->irot, NULL};
    }
    /* the attention's bf16 q from this launch instead of a conversion of its own (which also leaves the
     * append right before the index scan, whose programmatic launch then overlaps it): at one token per step
     * +1.7 % tok/s, at 4 and 16 sequences 3-6 % slower (u run 10, not analysed); so single-token steps only
     */
    a.q16 = c->kv_dtype != KN_KV_F32 && (c->q16 == 1 || (c->q16 == 2 && a.n == 1));
    run_op(c, ex_norm_rope, &a, sizeof a);
    struct a_cache_write w; /* K/V and index keys in one append (MMGW_CUDA_APPEND_ONE=0: two) */
    memset(&w, 0, sizeof w);
    w.layer = l->layer, w.k = l->k, w.v = l->v, w.kidx = l->msa && c->append_one ? l->ik : NULL;
    run_op(c, ex_cache_write, &w, sizeof w);
    if (l->msa && !c->append_one) cu_idx_write(c, l->layer, l->ik);
    if (l->msa)
        msa_op(c, l->layer, l->q, l->iq, l->n_heads, l->scale, l->msa, l->sel, l->out, a.q16);
    else
        dense_op(c, l->layer, l->q, l->n_heads, l->scale, l->out, a.q16);
}

/* Routed experts: fp32 router and routing on the GPU, then products per (token, expert) pair (up to
 * c->moe_pairs, MOE_PAIRS_MAX by default) or grouped by expert on the device (more pairs), weighted combine;
 * no host read in the bf16 mode. The fp32 mode (and weights without 16-byte aligned bf16 copies) groups on
 * the host: it reads the expert offsets to size one cuBLAS product per expert that got tokens. */
static void moe_tab_clear(struct moe_tab *t)
{
    cudaFree(t->d);
    cudaFree(t->s);
    kn_cuda_experts_maps_free(t->maps_gu);
    kn_cuda_experts_maps_free(t->maps_down);
}

static void moe_tables_free(struct cuda_be *c)
{
    for (int32_t i = 0; i < c->n_moe_tabs; i++) moe_tab_clear(&c->moe_tabs[i]);
    free(c->moe_tabs);
    c->moe_tabs = NULL;
    c->n_moe_tabs = 0;
    if (c->xdq_tab) moe_tab_clear(c->xdq_tab);
    free(c->xdq_tab);
    c->xdq_tab = NULL;
}

/* A device copy of n host pointers (NULL on failure, the error cleared) */
static void **dev_ptr_table(void *const *h, size_t n)
{
    void **d = NULL;
    if (cudaMalloc((void **)&d, sizeof(void *) * n) == cudaSuccess &&
        cudaMemcpy(d, h, sizeof(void *) * n, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        d = NULL;
    }
    (void)cudaGetLastError();
    return d;
}

/* The tensor maps of a table's weights where the wgmma expert products take them (h: the host copy of its
 * [3][E] pointers): of bf16 weights, or (e4m3 = 1) of FP8 experts' e4m3 bytes for kn_cuda_gemm_experts_e4m3;
 * none where they cannot be made (bf16: the products load with cp.async; e4m3: the experts are dequantized)
 */
static void moe_tab_maps(struct moe_tab *t, const struct wk_moe *m, void *const *h, int e4m3)
{
    const int32_t E = m->n_experts;
    struct mm_err e2 = {0};
    const uint8_t *const *h8 = (const uint8_t *const *)h;
    if (e4m3 ? kn_cuda_experts_maps_create_e4m3(h8, 2 * E, m->inter, m->hidden, &t->maps_gu, &e2) ||
                   kn_cuda_experts_maps_create_e4m3(h8 + 2 * E, E, m->hidden, m->inter, &t->maps_down, &e2)
             : kn_cuda_experts_maps_create((const void *const *)h, 2 * E, m->inter, m->hidden, &t->maps_gu,
                                           &e2) ||
                   kn_cuda_experts_maps_create((const void *const *)h + 2 * E, E, m->hidden, m->inter,
                                               &t->maps_down, &e2)) {
        kn_cuda_experts_maps_free(t->maps_gu);
        t->maps_gu = t->maps_down = NULL;
        (void)cudaGetLastError();
    }
}

/* Whether kn_cuda_gemm_experts_bf16 takes both of a MoE layer's products (gate / up, then down) */
static int moe_wgmma_fits(const struct wk_moe *m)
{
    return kn_cuda_gemm_experts_ok(m->n_experts, m->inter, m->hidden, m->hidden) &&
           kn_cuda_gemm_experts_ok(m->n_experts, m->hidden, m->inter, m->inter);
}

/* Whether a prefill's FP8 experts run on the e4m3 tensor cores (kn_cuda_gemm_experts_e4m3, rows quantized
 * to e4m3 groups): MMGW_CUDA_FP8_PREFILL=e4m3 and shapes it takes; else they are dequantized into scratch */
static int moe_e4m3_fits(const struct cuda_be *c, const struct wk_moe *m)
{
    const int32_t bsr = m->w1[0]->bs_rows, bsc = m->w1[0]->bs_cols;
    return c->fp8_pf && m->w1[0]->fp8 &&
           kn_cuda_gemm_experts_e4m3_ok(m->n_experts, m->inter, m->hidden, bsr, bsc) &&
           kn_cuda_gemm_experts_e4m3_ok(m->n_experts, m->hidden, m->inter, bsr, bsc) &&
           kn_cuda_x_e4m3_groups_ok(m->hidden, m->hidden) && kn_cuda_x_e4m3_groups_ok(m->inter, m->inter);
}

/* The device table of a MoE layer's expert weights (pointers of w1, w3, w2), built on first use: of their
 * bf16 copies, with the tensor maps where the wgmma expert products take them, or of FP8 experts' e4m3
 * weights with a second table of their scales (every expert FP8 with one scale block). NULL when an expert
 * has neither form 16-byte aligned, the experts mix the two, or out of memory (the host-grouped path then
 * runs). */
static const struct moe_tab *moe_table(struct cuda_be *c, const struct wk_moe *m)
{
    for (int32_t i = 0; i < c->n_moe_tabs; i++)
        if (c->moe_tabs[i].key == (const void *)m->w1) return &c->moe_tabs[i];
    const int32_t E = m->n_experts;
    void **h = malloc(sizeof(void *) * 6 * (size_t)E); /* [3][E] weights, then [3][E] scales */
    struct moe_tab *t = realloc(c->moe_tabs, sizeof *t * (size_t)(c->n_moe_tabs + 1));
    if (!h || !t) {
        free(h);
        if (t) c->moe_tabs = t;
        return NULL;
    }
    c->moe_tabs = t;
    const int fp8 = m->w1[0]->fp8 != NULL;
    const int32_t bsr = m->w1[0]->bs_rows, bsc = m->w1[0]->bs_cols;
    int ok = 1;
    for (int32_t e = 0; e < E; e++) {
        const struct wk_weight *ws[3] = {m->w1[e], m->w3[e], m->w2[e]};
        for (int k = 0; k < 3; k++) {
            const void *p = fp8 ? (const void *)ws[k]->fp8 : ws[k]->bf16;
            h[k * E + e] = (void *)p;
            h[(3 + k) * E + e] = ws[k]->fscale;
            ok &= p != NULL && (uintptr_t)p % 16 == 0 &&
                  (!fp8 || (ws[k]->bs_rows == bsr && ws[k]->bs_cols == bsc && ws[k]->fscale));
        }
    }
    void **d = ok ? dev_ptr_table(h, 3 * (size_t)E) : NULL;
    void **sd = d && fp8 ? dev_ptr_table(h + 3 * E, 3 * (size_t)E) : NULL;
    struct moe_tab *nt = &c->moe_tabs[c->n_moe_tabs];
    memset(nt, 0, sizeof *nt);
    if (d && !fp8 && moe_wgmma_fits(m)) moe_tab_maps(nt, m, h, 0);
    if (d && sd && moe_e4m3_fits(c, m)) moe_tab_maps(nt, m, h, 1);
    free(h);
    if (!d || (fp8 && !sd)) {
        cudaFree(d);
        return NULL;
    }
    nt->key = m->w1;
    nt->d = d;
    nt->s = (float **)sd;
    nt->bs_rows = bsr, nt->bs_cols = bsc;
    c->n_moe_tabs++;
    return nt;
}

/* The table of the expert scratch the grouped routes of FP8 experts read (bf16 [E][I][H] for w1 and for w3,
 * then w2 [E][H][I] over w1's, dequantized in turn), with its tensor maps; rebuilt when a layer of another
 * shape needs more. NULL on failure (recorded). Called when the operation is issued, not run: the scratch
 * must not move under operations recorded before it, so a move is preceded by a flush. */
static const struct moe_tab *moe_scratch_table(struct cuda_be *c, const struct wk_moe *m)
{
    const int32_t E = m->n_experts;
    const int64_t I = m->inter, H = m->hidden;
    struct moe_tab *t = c->xdq_tab;
    if (t && t->n_exp == E && t->rows == I && t->cols == H && c->xdq.p) return t;
    const size_t bytes = (size_t)(2 * E) * (size_t)(I * H) * 2;
    flush(c); /* recorded operations may use the scratch or its table */
    if (t) moe_tab_clear(t);
    free(t);
    c->xdq_tab = NULL;
    c->scratch_gen++;
    if (!grow(c, &c->xdq, bytes)) return NULL;
    void **h = malloc(sizeof(void *) * 3 * (size_t)E);
    t = calloc(1, sizeof *t);
    if (!h || !t) {
        free(h);
        free(t);
        struct mm_err e__ = {0};
        mm_err_set(&e__, MM_NOMEM, "out of memory");
        fail(c, &e__, "moe (fp8 scratch)");
        return NULL;
    }
    uint8_t *base = c->xdq.p;
    for (int32_t e = 0; e < E; e++) {
        h[e] = base + (size_t)e * (size_t)(I * H) * 2;
        h[E + e] = base + (size_t)(E + e) * (size_t)(I * H) * 2;
        h[2 * E + e] = h[e];
    }
    t->d = dev_ptr_table(h, 3 * (size_t)E);
    if (t->d && moe_wgmma_fits(m)) moe_tab_maps(t, m, h, 0);
    free(h);
    if (!t->d) {
        free(t);
        struct mm_err e__ = {0};
        mm_err_set(&e__, MM_NOMEM, "out of device memory");
        fail(c, &e__, "moe (fp8 scratch)");
        return NULL;
    }
    t->n_exp = E, t->rows = (int32_t)I, t->cols = (int32_t)H;
    c->xdq_tab = t;
    return t;
}

/* Decode-sized MoE (few (token, expert) pairs): every step on the device, no host read, so it records and
 * replays with the rest of the step. Each pair streams its expert's weights (kn_cuda_gemv_experts_bf16: gate
 * and up in one launch; with several tokens the pairs run fastest in the grid, so a shared expert's repeats
 * come from L2, and bf16 gate / up pairs of one expert stream it once), the clamped SwiGLU, the down
 * product, and the weighted combine in pair order. Same
 * roundings as the grouped path (x and the activation rounded to bf16 at the products, f32 sums). */
struct a_moe_dev { /* both MoE routes without the host */
    const struct wk_weight *router, *bias;
    void *const *tab;                /* device [3][E] */
    const void *maps_gu, *maps_down; /* their tensor maps (the wgmma products), or NULL */
    /* FP8 experts: tab holds the e4m3 weights, stab their scales; the grouped products read xtab, the expert
     * scratch each product's experts are dequantized into (maps_gu / maps_down: its maps) */
    const float *const *stab;
    void *const *xtab;
    int32_t bs_rows, bs_cols;
    int32_t wgmma; /* ex_moe_sorted: a prefill's wgmma products, else the decode-sized ones */
    int32_t tc8;   /* ex_moe_sorted, decode-sized, FP8 experts: the e4m3 weights on the tensor cores */
    int32_t e4;    /* ex_moe_sorted, a prefill, FP8 experts: rows as e4m3 groups on the e4m3 tensor cores
                      (kn_cuda_gemm_experts_e4m3; maps_gu / maps_down: the e4m3 weights' maps) */
    const float *x;
    float *out;
    int64_t n;
    int32_t E, K, H, I;
    float scale, alpha, limit;
};

/* The end of both MoE routes without the host: out = the pairs' expert outputs eo weighted by wts, summed per
 * token (inv: where each pair's row went in the expert-sorted order, NULL for pair order) */
static void moe_combine_out(struct cuda_be *c, const struct a_moe_dev *a, const float *eo, const int32_t *inv,
                            const float *wts, const char *what)
{
    struct mm_err e__ = {0};
    cudaError_t ce = cudaMemsetAsync(a->out, 0, sizeof(float) * (size_t)(a->n * a->H), ST);
    if (ce != cudaSuccess) {
        failc(c, ce, what);
        return;
    }
    if (kn_cuda_moe_combine(eo, inv, wts, a->n, a->K, a->H, a->out, a->H, ST, &e__))
        fail(c, &e__, "moe (combine)");
}

static void ex_moe_pairs(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_moe_dev *a = args;
    struct mm_err e__ = {0};
    const int64_t n = a->n, pairs = n * a->K;
    float *lg = grow(c, &c->m_logits, sizeof(float) * (size_t)(n * a->E));
    int32_t *ids = grow(c, &c->m_ids, sizeof(int32_t) * (size_t)pairs);
    float *wts = grow(c, &c->m_wts, sizeof(float) * (size_t)pairs);
    float *g = grow(c, &c->m_g, sizeof(float) * (size_t)(pairs * a->I));
    float *u = grow(c, &c->m_u, sizeof(float) * (size_t)(pairs * a->I));
    float *act = grow(c, &c->m_a, sizeof(float) * (size_t)(pairs * a->I));
    float *eo = grow(c, &c->m_e, sizeof(float) * (size_t)(pairs * a->H));
    if (!lg || !ids || !wts || !g || !u || !act || !eo) return;
    const int32_t E = a->E;
    const uint8_t *const *t8 = (const uint8_t *const *)a->tab;
    const float *const *s8 = a->stab;
    gemm(c, a->router, a->x, a->H, n, lg, E);
    int32_t rc =
        kn_cuda_moe_route(lg, a->bias ? a->bias->f32 : NULL, n, E, a->K, a->scale, ids, wts, ST, &e__);
    if (!rc)
        rc = s8 ? kn_cuda_gemv_experts_fp8(pairs, a->K, a->I, a->H, a->x, a->H, ids, t8, s8, t8 + E, s8 + E,
                                           a->bs_rows, a->bs_cols, g, u, a->I, n > 1, ST, &e__)
                : kn_cuda_gemv_experts_bf16(pairs, a->K, a->I, a->H, a->x, a->H, ids,
                                            (const void *const *)a->tab, (const void *const *)a->tab + E, g,
                                            u, a->I, n > 1, ST, &e__);
    if (!rc) rc = kn_cuda_swiglu(g, u, a->I, pairs, a->I, a->alpha, a->limit, act, a->I, 0, ST, &e__);
    if (!rc)
        rc = s8 ? kn_cuda_gemv_experts_fp8(pairs, 1, a->H, a->I, act, a->I, ids, t8 + 2 * E, s8 + 2 * E, NULL,
                                           NULL, a->bs_rows, a->bs_cols, eo, NULL, a->H, n > 1, ST, &e__)
                : kn_cuda_gemv_experts_bf16(pairs, 1, a->H, a->I, act, a->I, ids,
                                            (const void *const *)a->tab + 2 * E, NULL, eo, NULL, a->H, n > 1,
                                            ST, &e__);
    if (rc) {
        fail(c, &e__, "moe (pairs)");
        return;
    }
    moe_combine_out(c, a, eo, NULL, wts, "moe (pairs)");
}

/* More pairs, still without the host: the routed rows sorted by expert on the device (kn_cuda_moe_sort) and
 * gathered, each expert's products over its rows by launches that read the expert offsets on the device (gate
 * and up together, then down), one SwiGLU over all pairs, the combine. Decode-sized batches:
 * kn_cuda_gemm_small_experts_bf16 (f32 rows; CTAs of experts without rows exit; the weights re-read every 16
 * rows). A prefill (a->wgmma): kn_cuda_gemm_experts_bf16, one persistent wgmma launch over every expert's
 * tiles with bf16 rows and TMA loads; the host-grouped route it replaces read the offsets back (a sync per
 * MoE layer) and launched 3 products and a SwiGLU per expert. Same roundings as the host-grouped path (x and
 * the activation rounded to bf16 at the products, f32 sums; the sums' order is the kernel's). */
static void ex_moe_sorted(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_moe_dev *a = args;
    struct mm_err e__ = {0};
    const int64_t n = a->n, pairs = n * a->K;
    const int32_t E = a->E, wg = a->wgmma, e4 = a->e4;
    /* gathered rows and activations: bf16 for the wgmma products, f32 for the others; none for the e4m3
     * products, whose rows are quantized as they are gathered and their activations as SwiGLU makes them */
    const size_t row_el = wg ? sizeof(uint16_t) : sizeof(float);
    float *lg = grow(c, &c->m_logits, sizeof(float) * (size_t)(n * E));
    int32_t *ids = grow(c, &c->m_ids, sizeof(int32_t) * (size_t)pairs);
    float *wts = grow(c, &c->m_wts, sizeof(float) * (size_t)pairs);
    int32_t *off = grow(c, &c->m_off, sizeof(int32_t) * (size_t)(E + 1));
    int32_t *perm = grow(c, &c->m_perm, sizeof(int32_t) * (size_t)pairs);
    int32_t *inv = grow(c, &c->m_inv, sizeof(int32_t) * (size_t)pairs);
    void *xs = e4 ? NULL : grow(c, &c->m_x, row_el * (size_t)(pairs * a->H));
    float *g = grow(c, &c->m_g, sizeof(float) * (size_t)(pairs * a->I));
    float *u = grow(c, &c->m_u, sizeof(float) * (size_t)(pairs * a->I));
    void *act = e4 ? NULL : grow(c, &c->m_a, row_el * (size_t)(pairs * a->I));
    float *eo = grow(c, &c->m_e, sizeof(float) * (size_t)(pairs * a->H));
    int32_t *ctr = wg ? grow(c, &c->m_ctr, sizeof(int32_t)) : NULL; /* the products' dynamic tile order */
    if (!lg || !ids || !wts || !off || !perm || !inv || (!e4 && (!xs || !act)) || !g || !u || !eo ||
        (wg && !ctr))
        return;
    gemm(c, a->router, a->x, a->H, n, lg, E);
    /* FP8 experts: the grouped products read the scratch, into which each product's experts that got rows
     * are dequantized right before it */
    const void *const *tab = (const void *const *)(a->stab ? a->xtab : a->tab);
    const uint8_t *const *t8 = (const uint8_t *const *)a->tab;
    const void *maps_up = a->maps_gu ? (const uint8_t *)a->maps_gu + (size_t)E * KN_CUDA_TMAP_BYTES : NULL;
    int32_t rc =
        kn_cuda_moe_route(lg, a->bias ? a->bias->f32 : NULL, n, E, a->K, a->scale, ids, wts, ST, &e__);
    if (!rc) rc = kn_cuda_moe_sort(ids, n, a->K, E, off, perm, inv, ST, &e__);
    if (!rc && !e4) rc = kn_cuda_moe_gather(a->x, a->H, perm, pairs, a->K, a->H, xs, wg, ST, &e__);
    if (!rc && e4) { /* FP8 experts as stored, rows as e4m3 groups (kn_gemm_experts.cu) */
        const int64_t wide = a->H > a->I ? a->H : a->I;
        uint8_t *q = grow(c, &c->m_q8, (size_t)(pairs * wide));
        float *qs = grow(c, &c->m_q8s, sizeof(float) * (size_t)(pairs * (wide / 128)));
        if (!q || !qs) return;
        rc = kn_cuda_moe_gather_e4m3(a->x, a->H, perm, pairs, a->K, a->H, q, qs, pairs, ST, &e__);
        if (!rc)
            rc = kn_cuda_gemm_experts_e4m3(E, off, pairs, a->I, a->H, q, qs, pairs, t8, a->stab, t8 + E,
                                           a->stab + E, a->maps_gu, maps_up, g, u, a->I, ctr, ST, &e__);
        if (!rc)
            rc = kn_cuda_swiglu_e4m3(g, u, a->I, pairs, a->I, a->alpha, a->limit, q, qs, pairs, ST, &e__);
        if (!rc)
            rc = kn_cuda_gemm_experts_e4m3(E, off, pairs, a->H, a->I, q, qs, pairs, t8 + 2 * E,
                                           a->stab + 2 * E, NULL, NULL, a->maps_down, NULL, eo, NULL, a->H,
                                           ctr, ST, &e__);
        if (rc) {
            fail(c, &e__, "moe (experts, e4m3)");
            return;
        }
        if (!c->fp8_ex_said) {
            c->fp8_ex_said = 1;
            mm_log_info("cuda",
                        "FP8 prefill experts: e4m3 rows on the e4m3 tensor cores (first: %lld rows over "
                        "%d experts)",
                        (long long)pairs, (int)E);
        }
        moe_combine_out(c, a, eo, inv, wts, "moe (experts, e4m3)");
        return;
    }
    if (!rc && a->tc8) { /* FP8 experts as stored, rows as scaled f16 (kn_gemm_small_fp8.cu) */
        const float *sx = NULL, *sa = NULL;
        const void *hx = x_f16_of(c, xs, a->H, pairs, a->H, &sx), *ha = NULL;
        if (!hx) return;
        rc = kn_cuda_gemm_small_experts_fp8(E, off, a->I, a->H, hx, sx, t8, a->stab, t8 + E, a->stab + E,
                                            a->bs_rows, a->bs_cols, g, u, a->I, ST, &e__);
        if (!rc) rc = kn_cuda_swiglu(g, u, a->I, pairs, a->I, a->alpha, a->limit, act, a->I, 0, ST, &e__);
        if (!rc && !(ha = x_f16_of(c, act, a->I, pairs, a->I, &sa))) return;
        if (!rc)
            rc = kn_cuda_gemm_small_experts_fp8(E, off, a->H, a->I, ha, sa, t8 + 2 * E, a->stab + 2 * E, NULL,
                                                NULL, a->bs_rows, a->bs_cols, eo, NULL, a->H, ST, &e__);
        if (rc) {
            fail(c, &e__, "moe (grouped, fp8)");
            return;
        }
        moe_combine_out(c, a, eo, inv, wts, "moe (grouped, fp8)");
        return;
    }
    if (!rc && a->stab)
        rc = kn_cuda_dequant_fp8_experts(2, E, off, t8, a->stab, a->I, a->H, a->bs_rows, a->bs_cols, a->xtab,
                                         ST, &e__);
    if (!rc)
        rc = wg ? kn_cuda_gemm_experts_bf16(E, off, pairs, a->I, a->H, xs, a->H, tab, tab + E, a->maps_gu,
                                            maps_up, g, u, a->I, ctr, ST, &e__)
                : kn_cuda_gemm_small_experts_bf16(E, off, a->I, a->H, xs, a->H, tab, tab + E, g, u, a->I, ST,
                                                  &e__);
    if (!rc) rc = kn_cuda_swiglu(g, u, a->I, pairs, a->I, a->alpha, a->limit, act, a->I, wg, ST, &e__);
    if (!rc && a->stab)
        rc = kn_cuda_dequant_fp8_experts(1, E, off, t8 + 2 * E, a->stab + 2 * E, a->H, a->I, a->bs_rows,
                                         a->bs_cols, a->xtab + 2 * E, ST, &e__);
    if (!rc)
        rc = wg ? kn_cuda_gemm_experts_bf16(E, off, pairs, a->H, a->I, act, a->I, tab + 2 * E, NULL,
                                            a->maps_down, NULL, eo, NULL, a->H, ctr, ST, &e__)
                : kn_cuda_gemm_small_experts_bf16(E, off, a->H, a->I, act, a->I, tab + 2 * E, NULL, eo, NULL,
                                                  a->H, ST, &e__);
    const char *what = wg ? "moe (experts, wgmma)" : "moe (grouped)";
    if (rc) {
        fail(c, &e__, what);
        return;
    }
    moe_combine_out(c, a, eo, inv, wts, what);
}

/* Most (token, expert) pairs that take the per-pair route by default (MMGW_CUDA_MOE_PAIRS): each pair reads
 * its expert's weights, the pairs fastest in the grid so that repeats of a shared expert come from L2, and a
 * shared expert's bf16 gate / up once; the grouped products beyond (each expert once per 16 rows, sized on
 * the device). Measured (twenty-sixth session, v125, 32 experts of M3's shape, top-4, 4K): 48 pairs
 * (batch 12) 3369-3385 tok/s per pair against 3034-3058 grouped, 64 pairs (batch 16) 3477-3492 against
 * 3678-3720, so the limit went from 32 to 48. Since the grouped products stream their weights through a
 * cp.async ring (twenty-seventh session, v130) the grouped route wins at 48 pairs (3543 against 3332 tok/s)
 * and loses at 32 (2767 against 2969): back to 32. */
#define MOE_PAIRS_MAX 32
/* Most pairs MMGW_CUDA_MOE_PAIRS may set: a decode batch (MOE_DEVICE_GROUPED_MAX tokens) at top-16; the
 * per-pair route's scratch grows with the pairs, and a prefill must not take it */
#define MOE_PAIRS_LIMIT 1024
/* Most tokens whose experts are grouped on the device (decode batches); more go to the host-grouped cuBLAS
 * products */
#define MOE_DEVICE_GROUPED_MAX 64

static void cu_moe(void *ctx, const struct wk_moe *m, const float *x, int64_t n, float *out)
{
    struct cuda_be *c = ctx;
    struct mm_err e__ = {0};
    if (n <= 0) return;
    /* few pairs: per-pair products; more pairs of a decode-sized batch: grouped by expert on the device
     * (products that re-read the weights every 16 rows); more tokens (a prefill): the wgmma expert products
     */
    wk_step_fn fn = NULL;
    int32_t wgmma = 0, tc8 = 0;
    /* FP8 experts (kept as stored): the per-pair products and a decode batch's grouped ones read the e4m3
     * bytes; a prefill's read them dequantized into the expert scratch */
    const int fp8 = m->w1[0]->fp8 != NULL;
    const int32_t bsr = m->w1[0]->bs_rows, bsc = m->w1[0]->bs_cols;
    const int64_t H = m->hidden, I = m->inter;
    if (!c->fp32 && (uintptr_t)x % 16 == 0) {
        const int pairs_ok =
            fp8 ? kn_cuda_gemv_fp8_ok(1, H, H, bsr, bsc) && kn_cuda_gemv_fp8_ok(1, I, I, bsr, bsc)
                : kn_cuda_gemv_ok(1, H, H) && kn_cuda_gemv_ok(1, I, I);
        const int dq_ok = !fp8 || (kn_cuda_dequant_fp8_experts_ok(I, H, bsr, bsc) &&
                                   kn_cuda_dequant_fp8_experts_ok(H, I, bsr, bsc));
        /* FP8 experts of a decode batch straight from their e4m3 bytes (no scratch dequantization) */
        tc8 = fp8 && c->fp8_tc > 0 && kn_cuda_gemm_small_experts_fp8_ok(H, bsr, bsc) &&
              kn_cuda_gemm_small_experts_fp8_ok(I, bsr, bsc) && kn_cuda_x_f16_scaled_ok(H, H) &&
              kn_cuda_x_f16_scaled_ok(I, I);
        if (c->gemv && n * m->topk <= c->moe_pairs && pairs_ok)
            fn = ex_moe_pairs;
        else if (c->small_gemm && n <= MOE_DEVICE_GROUPED_MAX && m->n_experts <= 65535 && (dq_ok || tc8) &&
                 kn_cuda_gemm_small_experts_ok(H, H) && kn_cuda_gemm_small_experts_ok(I, I))
            fn = ex_moe_sorted;
        else if (c->moe_wgmma && n > MOE_DEVICE_GROUPED_MAX && moe_wgmma_fits(m) && dq_ok &&
                 n * m->topk <= INT32_MAX)
            fn = ex_moe_sorted, wgmma = 1;
    }
    tc8 = tc8 && fn == ex_moe_sorted && !wgmma;
    const struct moe_tab *tab = fn ? moe_table(c, m) : NULL;
    /* a prefill's FP8 experts on the e4m3 tensor cores where their table has the e4m3 maps (the rows are
     * quantized as they are gathered: float4 reads of x) */
    const int e4 = tab && tab->s && wgmma && tab->maps_gu && tab->maps_down && moe_e4m3_fits(c, m) &&
                   (uintptr_t)x % 16 == 0;
    const int scratch = tab && tab->s && fn == ex_moe_sorted && !tc8 && !e4;
    const struct moe_tab *xt = scratch ? moe_scratch_table(c, m) : NULL;
    if (scratch && !xt) return; /* failed, recorded */
    if (tab) {
        struct a_moe_dev a;
        memset(&a, 0, sizeof a);
        a.router = m->router, a.bias = m->bias, a.tab = tab->d, a.x = x, a.out = out, a.n = n;
        a.maps_gu = tab->maps_gu, a.maps_down = tab->maps_down, a.wgmma = wgmma, a.tc8 = tc8, a.e4 = e4;
        a.stab = (const float *const *)tab->s, a.bs_rows = tab->bs_rows, a.bs_cols = tab->bs_cols;
        if (xt) a.xtab = xt->d, a.maps_gu = xt->maps_gu, a.maps_down = xt->maps_down;
        a.E = m->n_experts, a.K = m->topk, a.H = m->hidden, a.I = m->inter;
        a.scale = m->scale, a.alpha = m->alpha, a.limit = m->limit;
        run_op(c, fn, &a, sizeof a);
        return;
    }
    flush(c); /* the expert offsets are read on the host: runs now */
    if (c->op_step) wk_optime_begin(c->optime, "moe, grouped (host offsets)");
    const int32_t E = m->n_experts, K = m->topk;
    const int64_t pairs = n * K;
    float *lg = grow(c, &c->m_logits, sizeof(float) * (size_t)(n * E));
    int32_t *ids = grow(c, &c->m_ids, sizeof(int32_t) * (size_t)pairs);
    float *wts = grow(c, &c->m_wts, sizeof(float) * (size_t)pairs);
    int32_t *off = grow(c, &c->m_off, sizeof(int32_t) * (size_t)(E + 1));
    int32_t *perm = grow(c, &c->m_perm, sizeof(int32_t) * (size_t)pairs);
    int32_t *inv = grow(c, &c->m_inv, sizeof(int32_t) * (size_t)pairs);
    const int bf = !c->fp32;
    void *xs = grow(c, &c->m_x, (size_t)(pairs * H) * (bf ? 2 : 4));
    float *g = grow(c, &c->m_g, sizeof(float) * (size_t)(pairs * I));
    float *u = grow(c, &c->m_u, sizeof(float) * (size_t)(pairs * I));
    void *act = grow(c, &c->m_a, (size_t)(pairs * I) * (bf ? 2 : 4));
    float *eo = grow(c, &c->m_e, sizeof(float) * (size_t)(pairs * H));
    if (!lg || !ids || !wts || !off || !perm || !inv || !xs || !g || !u || !act || !eo) return;
    if (c->h_off_n < E + 1) {
        free(c->h_off);
        c->h_off = malloc(sizeof(int32_t) * (size_t)(E + 1));
        c->h_off_n = c->h_off ? E + 1 : 0;
        if (!c->h_off) {
            mm_err_set(&e__, MM_NOMEM, "out of memory");
            fail(c, &e__, "moe");
            return;
        }
    }
    gemm(c, m->router, x, H, n, lg, E);
    if (kn_cuda_moe_route(lg, m->bias ? m->bias->f32 : NULL, n, E, K, m->scale, ids, wts, ST, &e__) ||
        kn_cuda_moe_sort(ids, n, K, E, off, perm, inv, ST, &e__) ||
        kn_cuda_moe_gather(x, H, perm, pairs, K, H, xs, bf, ST, &e__)) {
        fail(c, &e__, "moe (routing)");
        return;
    }
    cudaError_t ce = cudaMemcpy(c->h_off, off, sizeof(int32_t) * (size_t)(E + 1), cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess) {
        failc(c, ce, "moe (offsets)");
        return;
    }
    /* gate and up per expert, one SwiGLU over every pair's row (the experts' rows are contiguous and cover
     * all pairs), down per expert */
    int32_t rc = 0;
    for (int32_t e = 0; e < E && !rc; e++) {
        const int64_t r0 = c->h_off[e], cnt = c->h_off[e + 1] - r0;
        if (cnt <= 0) continue;
        const struct wk_weight *w1 = m->w1[e], *w3 = m->w3[e];
        if (bf) {
            const uint16_t *xe = (const uint16_t *)xs + r0 * H;
            const void *b1 = bf16_of(c, w1, 0), *b3 = bf16_of(c, w3, 1);
            if (!b1 || !b3) return; /* failed, recorded */
            rc = kn_cuda_gemm_bf16(c->blas, cnt, I, H, xe, H, b1, H, 0.0f, g + r0 * I, I, 0, &e__);
            if (!rc) rc = kn_cuda_gemm_bf16(c->blas, cnt, I, H, xe, H, b3, H, 0.0f, u + r0 * I, I, 0, &e__);
        } else {
            const float *xe = (const float *)xs + r0 * H;
            rc = kn_cuda_gemm_f32(c->blas, cnt, I, H, xe, H, w1->f32, H, 0.0f, g + r0 * I, I, &e__);
            if (!rc) rc = kn_cuda_gemm_f32(c->blas, cnt, I, H, xe, H, w3->f32, H, 0.0f, u + r0 * I, I, &e__);
        }
    }
    if (!rc) rc = kn_cuda_swiglu(g, u, I, pairs, I, m->alpha, m->limit, act, I, bf, ST, &e__);
    for (int32_t e = 0; e < E && !rc; e++) {
        const int64_t r0 = c->h_off[e], cnt = c->h_off[e + 1] - r0;
        if (cnt <= 0) continue;
        const struct wk_weight *w2 = m->w2[e];
        const void *b2 = bf ? bf16_of(c, w2, 0) : NULL;
        if (bf && !b2) return; /* failed, recorded */
        if (bf)
            rc = kn_cuda_gemm_bf16(c->blas, cnt, H, I, (const uint16_t *)act + r0 * I, I, b2, I, 0.0f,
                                   eo + r0 * H, H, 0, &e__);
        else
            rc = kn_cuda_gemm_f32(c->blas, cnt, H, I, (const float *)act + r0 * I, I, w2->f32, I, 0.0f,
                                  eo + r0 * H, H, &e__);
    }
    if (rc) {
        fail(c, &e__, "moe (experts)");
        return;
    }
    ce = cudaMemsetAsync(out, 0, sizeof(float) * (size_t)(n * H), ST);
    if (ce != cudaSuccess) {
        failc(c, ce, "moe");
        return;
    }
    if (kn_cuda_moe_combine(eo, inv, wts, n, K, H, out, H, ST, &e__)) fail(c, &e__, "moe (combine)");
    if (c->op_step) wk_optime_end(c->optime);
}

/* ---- vision ---- */

/* The vision ops are operations like the text ones (run_op: after what is recorded, timed under
 * MMGW_CUDA_OP_TIMING), though no decode step records them. */
struct a_layernorm {
    const float *x;
    const struct wk_weight *w, *b;
    int64_t n;
    int32_t dim;
    float eps;
    float *out;
};

static void ex_layernorm(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_layernorm *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_layernorm(a->x, a->dim, a->w->f32, a->b ? a->b->f32 : NULL, a->n, a->dim, a->eps, a->out,
                          a->dim, 0, ST, &e__))
        fail(c, &e__, "layernorm");
}

static void cu_layernorm(void *ctx, const float *x, const struct wk_weight *w, const struct wk_weight *b,
                         int64_t n, int32_t dim, float eps, float *out)
{
    struct a_layernorm a;
    memset(&a, 0, sizeof a);
    a.x = x, a.w = w, a.b = b, a.n = n, a.dim = dim, a.eps = eps, a.out = out;
    run_op(ctx, ex_layernorm, &a, sizeof a);
}

struct a_gelu {
    float *x;
    int64_t n;
    int32_t kind;
};

static void ex_gelu(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_gelu *a = args;
    struct mm_err e__ = {0};
    if (kn_cuda_gelu(a->x, a->n, a->kind, ST, &e__)) fail(c, &e__, "gelu");
}

static void cu_gelu(void *ctx, float *x, int64_t n, int32_t kind)
{
    struct a_gelu a;
    memset(&a, 0, sizeof a);
    a.x = x, a.n = n, a.kind = kind;
    run_op(ctx, ex_gelu, &a, sizeof a);
}

struct a_attn_full {
    const float *q, *k, *v;
    int64_t n;
    int32_t n_heads, head_dim;
    float *out;
};

static void ex_attn_full(void *ctx, const void *args)
{
    struct cuda_be *c = ctx;
    const struct a_attn_full *a = args;
    struct mm_err e__ = {0};
    const int64_t stride = (int64_t)a->n_heads * a->head_dim;
    const float scale = 1.0f / sqrtf((float)a->head_dim);
    /* bf16 mode: on the tensor cores (the products feeding it are bf16 already); fp32 mode: the exact kernel
     */
    const size_t wsb = c->fp32 ? 0 : kn_cuda_attn_full_tc_ws(a->n, a->n_heads, a->head_dim);
    if (wsb) {
        void *ws = grow(c, &c->af_ws, wsb);
        if (ws && kn_cuda_attn_full_tc(a->q, a->k, a->v, stride, a->n, a->n_heads, a->head_dim, scale, a->out,
                                       stride, ws, wsb, ST, &e__))
            fail(c, &e__, "attn_full");
    } else if (kn_cuda_attn_full(a->q, a->k, a->v, stride, a->n, a->n_heads, a->head_dim, scale, a->out,
                                 stride, ST, &e__)) {
        fail(c, &e__, "attn_full");
    }
}

static void cu_attn_full(void *ctx, const float *q, const float *k, const float *v, int64_t n,
                         int32_t n_heads, int32_t head_dim, float *out)
{
    struct a_attn_full a;
    memset(&a, 0, sizeof a);
    a.q = q, a.k = k, a.v = v, a.n = n, a.n_heads = n_heads, a.head_dim = head_dim, a.out = out;
    run_op(ctx, ex_attn_full, &a, sizeof a);
}

static void cu_destroy(void *ctx)
{
    struct cuda_be *c = ctx;
    if (!c) return;
    if (c->side)
        cudaStreamSynchronize(ST);
    else
        cudaDeviceSynchronize();
    if (c->n_timed)
        mm_log_info("cuda",
                    "decode steps: %lld timed, GPU %.1f us per step (first segment start to last end), "
                    "host %.1f us per step (batch_begin to batch_end)",
                    (long long)c->n_timed, 1e3 * c->gpu_ms / (double)c->n_timed,
                    1e3 * c->host_ms / (double)c->n_timed);
    if (c->timing) cudaEventDestroy(c->ev_a), cudaEventDestroy(c->ev_b);
    if (c->optime) {
        wk_optime_log(c->optime);
        wk_optime_free(c->optime);
    }
    if (c->steps) {
        struct wk_steps_stats st;
        wk_steps_get_stats(c->steps, &st);
        mm_log_info("cuda", "decode step graphs: %lld segments replayed, %lld captured, %lld run one by one",
                    (long long)st.replays, (long long)st.captures, (long long)st.eager);
        wk_steps_free(c->steps);
    }
    free_cache(c);
    if (c->dl_host) cudaFreeHost(c->dl_host);
    if (c->bounce) {
        for (int i = 0; i < WK_CUDA_BOUNCE_SLOTS; i++) cudaEventDestroy(c->bounce_ev[i]);
        cudaFreeHost(c->bounce);
    }
    struct dbuf *all[] = {&c->small_ws, &c->meta,    &c->bad,    &c->xb,         &c->qb16,     &c->ob16,
                          &c->ws,       &c->sel,     &c->media,  &c->media_rows, &c->m_logits, &c->m_ids,
                          &c->m_wts,    &c->m_off,   &c->m_perm, &c->m_inv,      &c->m_x,      &c->m_g,
                          &c->m_u,      &c->m_a,     &c->m_e,    &c->am_ids,     &c->tk_kt,    &c->tk_out,
                          &c->af_ws,    &c->tk_keys, &c->m_ctr,  &c->wdq[0],     &c->wdq[1],   &c->xdq,
                          &c->x16,      &c->x16s,    &c->xq,     &c->m_q8,       &c->m_q8s};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(c, all[i]);
    if (c->side) cudaStreamSynchronize(ST); /* the stream-ordered frees */
    kn_cuda_blas_destroy(c->blas);
    moe_tables_free(c);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->h_meta);
    free(c->h_off);
    free(c);
}

/* MMGW_CUDA_OP_TIMING's key of an operation: its name, and the weight shape and rows of a product. Not
 * inlined: inlined into run_op for another operation's arguments, GCC's bounds check sees them read as a
 * product's (under an fn test it cannot follow) and warns. */
__attribute__((noinline)) static const char *op_key(wk_step_fn fn, const void *args, char *buf, size_t n)
{
    if (fn == ex_linear_multi) {
        const struct a_linear_multi *a = args;
        snprintf(buf, n, "linear multi, %d weights, %lld rows", (int)a->n_w, (long long)a->n);
        return buf;
    }
    if (fn == ex_rmsnorm) return ((const struct a_rmsnorm *)args)->y ? "add + rmsnorm" : "rmsnorm";
    if (fn == ex_linear) {
        const struct a_linear *a = args;
        snprintf(buf, n, "linear %lld x %lld, %s%lld rows", (long long)a->w->rows, (long long)a->w->cols,
                 a->w->f32 && (!a->w->bf16) ? "f32, " : "", (long long)a->n);
        return buf;
    }
    static const struct {
        wk_step_fn fn;
        const char *name;
    } names[] = {{ex_embed, "embed"},
                 {ex_head_rmsnorm, "head rmsnorm"},
                 {ex_rope, "rope"},
                 {ex_layernorm, "layernorm"},
                 {ex_gelu, "gelu"},
                 {ex_attn_full, "vision attention"},
                 {ex_norm_rope, "head norm + rope"},
                 {ex_add, "add"},
                 {ex_argmax, "argmax"},
                 {ex_topk, "sampling candidates"},
                 {ex_swiglu, "swiglu"},
                 {ex_cache_write, "cache write"},
                 {ex_attn_dense, "attention, dense"},
                 {ex_attn_msa, "attention, msa"},
                 {ex_moe_pairs, "moe, pairs on the device"},
                 {ex_moe_sorted, "moe, grouped on the device"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].fn == fn) return names[i].name;
    snprintf(buf, n, "other");
    return buf;
}

static int32_t cu_vision_context(void *ctx, int32_t threads, struct wk_be *out, struct mm_err *err);

static const struct wk_backend_iface cuda_iface = {
    .name = "cuda",
    .destroy = cu_destroy,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .download_rows = cu_download_rows,
    .argmax_rows = cu_argmax_rows,
    .topk_rows = cu_topk_rows,
    .weight_load = cu_weight_load,
    .weight_free = cu_weight_free,
    .weight_bytes = cu_weight_bytes,
    .cache_init = cu_cache_init,
    .cache_copy_page = cu_cache_copy_page,
    .batch_begin = cu_batch_begin,
    .batch_end = cu_batch_end,
    .embed = cu_embed,
    .set_rows = cu_set_rows,
    .rmsnorm = cu_rmsnorm,
    .head_rmsnorm = cu_head_rmsnorm,
    .rope = cu_rope,
    .linear = cu_linear,
    .add = cu_add,
    .swiglu = cu_swiglu,
    .kv_write = cu_kv_write,
    .idx_write = cu_idx_write,
    .attn_dense = cu_attn_dense,
    .attn_msa = cu_attn_msa,
    .moe = cu_moe,
    .layernorm = cu_layernorm,
    .gelu = cu_gelu,
    .attn_full = cu_attn_full,
    .linear_multi = cu_linear_multi,
    .attn_layer = cu_attn_layer,
    .add_rmsnorm = cu_add_rmsnorm,
    .cache_page_bytes = cu_cache_page_bytes,
    .vision_context = cu_vision_context,
    .upload_typed = cu_upload_typed,
    .copy = cu_copy,
    .free_vision = cu_free_vision,
};

/* The knobs (environment) that decide how operations run; a vision context reads them too and takes its
 * parent's precision and cache types, so that its products are the main context's. */
static void read_knobs(struct cuda_be *c)
{
    const char *prec = getenv("MMGW_CUDA_PRECISION");
    c->fp32 = prec && !strcmp(prec, "fp32");
    /* fp32 runs keep f32 caches too (the exact mode: the generic kernels); MMGW_CUDA_INDEX overrides the
     * index-key cache: bf16, fp8 or f32 */
    c->kv_dtype = c->fp32 ? KN_KV_F32 : KN_KV_BF16;
    const char *idx = getenv("MMGW_CUDA_INDEX");
    c->idx_dtype = c->fp32 ? KN_IDX_F32 : KN_IDX_BF16;
    if (idx && !strcmp(idx, "fp8")) c->idx_dtype = KN_IDX_FP8;
    if (idx && !strcmp(idx, "bf16")) c->idx_dtype = KN_IDX_BF16;
    if (idx && !strcmp(idx, "f32")) c->idx_dtype = KN_IDX_F32;
    const char *sg = getenv("MMGW_CUDA_SMALL_GEMM");
    c->small_gemm = !(sg && !strcmp(sg, "0"));
    const char *gv = getenv("MMGW_CUDA_GEMV");
    c->gemv = !(gv && !strcmp(gv, "0"));
    const char *an = getenv("MMGW_CUDA_ADD_NORM"), *ao = getenv("MMGW_CUDA_APPEND_ONE");
    c->add_norm = !(an && !strcmp(an, "0"));
    c->append_one = !(ao && !strcmp(ao, "0"));
    const char *lm = getenv("MMGW_CUDA_LINEAR_MULTI"), *q16 = getenv("MMGW_CUDA_Q16");
    c->multi = !(lm && !strcmp(lm, "0"));
    c->q16 = q16 && !strcmp(q16, "0") ? 0 : q16 && !strcmp(q16, "1") ? 1 : 2;
    const char *fs = getenv("MMGW_CUDA_F32_STAGED");
    c->f32_staged = fs && atoi(fs) >= 0 ? atoi(fs) : WK_CUDA_F32_STAGED_MIN;
    const char *wt = getenv("MMGW_CUDA_WEIGHTS"), *fr = getenv("MMGW_CUDA_FP8_ROWS");
    c->w_fp8 = wt && !strcmp(wt, "fp8");
    c->fp8_rows = fr && atoi(fr) >= 0 ? atoi(fr) : WK_CUDA_FP8_ROWS;
    const char *fp = getenv("MMGW_CUDA_FP8_PREFILL");
    c->fp8_pf = fp && !strcmp(fp, "e4m3");
    const char *ft = getenv("MMGW_CUDA_FP8_TC_MIN");
    c->fp8_tc = ft && atoi(ft) >= 0 ? atoi(ft) : WK_CUDA_FP8_TC_MIN;
    const char *mw = getenv("MMGW_CUDA_MOE_WGMMA");
    c->moe_wgmma = !(mw && !strcmp(mw, "0"));
    const char *dr = getenv("MMGW_CUDA_DOWNLOAD_ROWS"), *mp = getenv("MMGW_CUDA_MOE_PAIRS");
    c->dl_rows = !(dr && !strcmp(dr, "0"));
    c->moe_pairs = MOE_PAIRS_MAX;
    if (mp) { /* 0 .. MOE_PAIRS_LIMIT pairs; anything else keeps the default, with a warning */
        char *end = NULL;
        const long v = strtol(mp, &end, 10);
        if (end != mp && !*end && v >= 0 && v <= MOE_PAIRS_LIMIT)
            c->moe_pairs = (int32_t)v;
        else
            mm_log_warn("cuda", "MMGW_CUDA_MOE_PAIRS=%s: not a pair count in 0..%d, using %d", mp,
                        MOE_PAIRS_LIMIT, MOE_PAIRS_MAX);
    }
    const char *am = getenv("MMGW_CUDA_ARGMAX");
    c->argmax = !(am && !strcmp(am, "0"));
    const char *rm = getenv("MMGW_CUDA_ROWS_MULTI");
    c->rows_multi = !(rm && !strcmp(rm, "0"));
    const char *lb = getenv("MMGW_CUDA_LT_BIAS");
    c->lt_bias = !(lb && !strcmp(lb, "0"));
    const char *wd = getenv("MMGW_CUDA_WIDEN");
    c->widen = !(wd && !strcmp(wd, "0"));
    const char *br = getenv("MMGW_CUDA_BOUNCE_RING");
    c->bounce_ring = !(br && !strcmp(br, "0"));
}

/* A context with its stream (flags: cudaStreamDefault or cudaStreamNonBlocking; top: the device's greatest
 * stream priority, else the lowest) and cuBLAS handle. */
static int32_t context_new(unsigned flags, int top, struct cuda_be **out, struct mm_err *err)
{
    struct cuda_be *c = calloc(1, sizeof *c);
    if (!c) return mm_err_set(err, MM_NOMEM, "out of memory");
    int least = 0, greatest = 0;
    if (cudaDeviceGetStreamPriorityRange(&least, &greatest) != cudaSuccess) {
        (void)cudaGetLastError();
        least = greatest = 0;
    }
    int32_t rc = kn_cuda_check(cudaStreamCreateWithPriority(&c->stream, flags, top ? greatest : least),
                               "cuda backend: stream", err);
    if (!rc) rc = kn_cuda_blas_create(&c->blas, ST, err);
    if (rc) {
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
        return rc;
    }
    *out = c;
    return MM_OK;
}

/* The vision context: the same knobs, no graphs, timing or cache. Its stream is non-blocking, so neither the
 * main context's legacy-stream copies nor its graph captures ever depend on it; its copies, allocations and
 * waits stay on that stream (side); its products use its own cuBLAS handle. */
static int32_t cu_vision_context(void *ctx, int32_t threads, struct wk_be *out, struct mm_err *err)
{
    (void)threads; /* the GPU's: no host threads */
    int dev = 0, pools = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, dev) != cudaSuccess || !pools) {
        (void)cudaGetLastError();
        return mm_err_set(err, MM_UNSUPPORTED,
                          "cuda backend: the device has no stream-ordered allocator for a vision context");
    }
    struct cuda_be *c = NULL;
    int32_t rc = context_new(cudaStreamNonBlocking, 0, &c, err);
    if (rc) return rc;
    read_knobs(c);
    const struct cuda_be *parent = ctx;
    c->fp32 = parent->fp32, c->kv_dtype = parent->kv_dtype, c->idx_dtype = parent->idx_dtype;
    c->side = 1;
    /* MMGW_CUDA_OP_TIMING=1: every encode's operations timed (logged at the end, one "step" per encode) */
    const char *ot = getenv("MMGW_CUDA_OP_TIMING");
    if (ot && !strcmp(ot, "1")) c->optime = wk_optime_new(c->stream);
    c->op_step = c->optime != NULL;
    out->iface = &cuda_iface;
    out->ctx = c;
    return MM_OK;
}

int32_t wk_backend_cuda_create(struct wk_be *out, struct mm_err *err)
{
    if (kn_cuda_device_count() <= 0)
        return mm_err_set(err, MM_UNAVAILABLE,
                          "cuda backend: no CUDA device (cudaGetDeviceCount failed or returned 0)");
    /* the steps' stream at the greatest priority: where an encode beside them (a vision context, lowest
     * priority) and a step both have blocks waiting, the block scheduler starts the step's first
     * (MMGW_CUDA_STREAM_PRIORITY=0: both at the lowest, the default priority) */
    const char *sp = getenv("MMGW_CUDA_STREAM_PRIORITY");
    struct cuda_be *c = NULL;
    int32_t rc = context_new(cudaStreamDefault, !(sp && !strcmp(sp, "0")), &c, err);
    if (rc) return rc;
    read_knobs(c);
    const char *tm = getenv("MMGW_CUDA_STEP_TIMING");
    c->timing = tm && !strcmp(tm, "1") && cudaEventCreate(&c->ev_a) == cudaSuccess;
    if (c->timing && cudaEventCreate(&c->ev_b) != cudaSuccess) cudaEventDestroy(c->ev_a), c->timing = 0;
    const char *ot = getenv("MMGW_CUDA_OP_TIMING");
    if (ot && !strcmp(ot, "1")) c->optime = wk_optime_new(c->stream);
    const char *gr = getenv("MMGW_CUDA_GRAPHS");
    c->graphs = !(gr && !strcmp(gr, "0"));
    const char *gb = getenv("MMGW_CUDA_GRAPH_BATCH");
    c->graph_batch = gb && atoi(gb) >= 0 ? atoi(gb) : WK_CUDA_GRAPH_MAX_BATCH;
    if (c->graphs) c->steps = wk_steps_new(); /* NULL (out of memory): steps run without graphs */
    mm_log_info("cuda", "backend on the GPU: %s products, %s K/V cache, %s index cache",
                c->fp32 ? "fp32" : "bf16", c->kv_dtype == KN_KV_F32 ? "f32" : "bf16",
                c->idx_dtype == KN_IDX_FP8   ? "fp8"
                : c->idx_dtype == KN_IDX_F32 ? "f32"
                                             : "bf16");
    out->iface = &cuda_iface;
    out->ctx = c;
    return MM_OK;
}
