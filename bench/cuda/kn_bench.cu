/* Benchmarks of the CUDA MSA kernels on one GPU, by the methods of the device notes: CUDA events around
 * each timed region, medians of repeated runs after a warm-up, inputs rotated among several sets when one
 * set would fit in L2, and the ceilings measured in the same run (a device-to-device copy and a cuBLAS bf16
 * GEMM). Results go to stdout as a table and, one line per measurement, to the TSV file given with --out.
 *
 *   kn_bench [--quick] [--out results.tsv] [--only NAME[,NAME...]] [--prof-raw timestamps.tsv]
 *   NAMES: ceil index topk decode prefill layer layerdec layerprof tail fp8agree select8 skinny fp8w
 *          fp8pf experts
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "kn_cuda.h"
#include "kn_cuda_knobs.h"
#include "kn_decode_prof.cuh"
#include "kn_index_v0.cuh"

/* Benchmark hooks of kernels/cuda (kn_decode_prof.cuh): per-CTA / per-warp timestamps of the decode kernels
 */
extern "C" int32_t kn_cuda_decode_prof_set(unsigned long long *buf);
extern "C" int32_t kn_cuda_index_prof_set(unsigned long long *buf);
/* Test hook of kernels/cuda (kn_msa_decode.cu): the fused decode tail alone on given index scores */
extern "C" int32_t kn_cuda_decode_fused_scores(const struct kn_cuda_msa_shape *sh,
                                               const struct kn_cuda_qbatch *qb, const struct kn_cuda_cache *c,
                                               const void *q, const float *scores, int32_t score_stride,
                                               int32_t *sel, int32_t sel_stride, void *out,
                                               struct mm_err *err);

/* ---------------------------------------------------------------------------------------------------- */
/* plumbing                                                                                               */

#define CK(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e__ = (call);                                                                            \
        if (e__ != cudaSuccess) {                                                                            \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e__));    \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static struct mm_err g_err;
#define KC(call)                                                                                             \
    do {                                                                                                     \
        int32_t rc__ = (call);                                                                               \
        if (rc__ != MM_OK) {                                                                                 \
            fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, g_err.msg);                  \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

static int g_quick;
static FILE *g_prof_raw;          /* --prof-raw: every warp's / CTA's timestamps of the last profiled call */
static cudaStream_t g_stream = 0; /* the stream the timed kn_cuda calls use (a capture stream for graphs) */
static FILE *g_tsv;
static double g_copy_tbs = 0, g_gemm_tflops = 0;

static void *dmalloc(size_t n)
{
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 1));
    return p;
}

static void *hmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "FATAL: host out of memory (%zu)\n", n);
        exit(1);
    }
    return p;
}

static void *upload(const void *h, size_t n)
{
    void *d = dmalloc(n);
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* setenv / unsetenv of a kernel knob: the kernels cache knob values until kn_cuda_knobs_reload */
static int knob_setenv(const char *name, const char *val, int overwrite)
{
    int r = setenv(name, val, overwrite);
    kn_cuda_knobs_reload();
    return r;
}

static int knob_unsetenv(const char *name)
{
    int r = unsetenv(name);
    kn_cuda_knobs_reload();
    return r;
}

typedef void (*bench_fn)(void *arg, int iter);

static double host_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* time_ms's median host time inside f (the calls' own CPU cost: argument checks, knobs, launches), us */
static double g_host_us;

/* Median milliseconds of iters runs of f (after warm runs), each bracketed by events. */
static double time_ms(bench_fn f, void *arg, int warm, int iters)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) f(arg, i);
    CK(cudaDeviceSynchronize());
    double *t = (double *)hmalloc(sizeof(double) * (size_t)iters);
    double *h = (double *)hmalloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(a, 0));
        const double h0 = host_us();
        f(arg, warm + i);
        h[i] = host_us() - h0;
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t[i] = ms;
    }
    CK(cudaGetLastError());
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    qsort(h, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    g_host_us = h[iters / 2];
    free(t);
    free(h);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return med;
}

/* Back-to-back: median over iters of (time of reps consecutive calls) / reps, as a serving loop issues them
 * (60 layers per token, no host round trip in between). Per-call-synced times (time_ms) include the launch
 * latency and the idle gap of every call; on this VM that is ~10 us for a small kernel. */
static double time_b2b_ms(bench_fn f, void *arg, int warm, int iters, int reps)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) f(arg, i);
    CK(cudaDeviceSynchronize());
    double *t = (double *)hmalloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(a, 0));
        for (int r = 0; r < reps; r++) f(arg, i * reps + r);
        CK(cudaEventRecord(b, 0));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t[i] = ms / reps;
    }
    CK(cudaGetLastError());
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    free(t);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return med;
}

/* Median ms of replays of graphs captured from f(arg, k) for k = 0..n_graphs-1 (rotated), after warm runs. */
static double time_graph_ms(bench_fn f, void *arg, int n_graphs, int warm, int iters)
{
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraphExec_t ex[8];
    for (int k = 0; k < n_graphs; k++) {
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
        g_stream = st;
        f(arg, k);
        g_stream = 0;
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&ex[k], g, 0));
        CK(cudaGraphDestroy(g));
    }
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warm; i++) CK(cudaGraphLaunch(ex[i % n_graphs], st));
    CK(cudaStreamSynchronize(st));
    double *t = (double *)hmalloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(a, st));
        CK(cudaGraphLaunch(ex[i % n_graphs], st));
        CK(cudaEventRecord(b, st));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t[i] = ms;
    }
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double med = t[iters / 2];
    free(t);
    for (int k = 0; k < n_graphs; k++) CK(cudaGraphExecDestroy(ex[k]));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaStreamDestroy(st));
    return med;
}

static void emit(const char *bench, const char *config, const char *metric, double value, const char *unit)
{
    printf("  %-14s %-44s %-18s %12.4g %s\n", bench, config, metric, value, unit);
    if (g_tsv) {
        fprintf(g_tsv, "%s\t%s\t%s\t%.6g\t%s\n", bench, config, metric, value, unit);
        fflush(g_tsv);
    }
    fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------------- */
/* data fill kernels                                                                                      */

__device__ __forceinline__ uint64_t hash64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

__device__ __forceinline__ float hnormal(uint64_t i, uint64_t seed)
{
    uint64_t h = hash64(i * 2654435761ull + seed * 0x9E3779B97F4A7C15ull + 1);
    float u = ((float)(h >> 40) + 0.5f) / 16777216.0f, v = (float)((h >> 8) & 0xffffff) / 16777216.0f;
    return sqrtf(-2.0f * logf(u)) * cospif(2.0f * v);
}

__global__ void k_fill_bf16(uint16_t *p, int64_t n, uint64_t seed, float sd)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        __nv_bfloat16 b = __float2bfloat16_rn(hnormal((uint64_t)i, seed) * sd);
        p[i] = *(uint16_t *)&b;
    }
}

__global__ void k_fill_f32(float *p, int64_t n, uint64_t seed, float sd)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = hnormal((uint64_t)i, seed) * sd;
}

/* q[i] = base[i / share] + eps * noise: runs of `share` consecutive queries with nearly equal vectors */
__global__ void k_fill_shared_q(float *q, int64_t n_q, int32_t width, int32_t share, uint64_t seed, float eps)
{
    int64_t tot = n_q * width;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < tot;
         t += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = t / width, e = t % width;
        float base = hnormal((uint64_t)((i / share) * width + e), seed);
        q[t] = base + eps * hnormal((uint64_t)t, seed + 7);
    }
}

/* bf16 index keys [tokens][dim] -> e4m3 + per-token scale (amax / 448), one warp per token */
__global__ void k_quant_fp8(const uint16_t *src, int64_t tokens, int32_t dim, uint8_t *dst, float *scale)
{
    int lane = threadIdx.x & 31;
    int64_t t = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= tokens) return;
    float amax = 0;
    for (int32_t d = lane; d < dim; d += 32)
        amax = fmaxf(amax, fabsf(__uint_as_float((uint32_t)src[t * dim + d] << 16)));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float s = amax > 0 ? amax / 448.0f : 1.0f;
    for (int32_t d = lane; d < dim; d += 32)
        dst[t * dim + d] = (uint8_t)__nv_cvt_float_to_fp8(
            __uint_as_float((uint32_t)src[t * dim + d] << 16) / s, __NV_SATFINITE, __NV_E4M3);
    if (lane == 0) scale[t] = s;
}

static void fill_bf16(void *p, int64_t n, uint64_t seed, float sd)
{
    k_fill_bf16<<<4096, 256>>>((uint16_t *)p, n, seed, sd);
    CK(cudaGetLastError());
}

static void fill_f32(float *p, int64_t n, uint64_t seed, float sd)
{
    k_fill_f32<<<4096, 256>>>(p, n, seed, sd);
    CK(cudaGetLastError());
}

/* ---------------------------------------------------------------------------------------------------- */
/* shapes and batches                                                                                     */

static const struct kn_cuda_msa_shape M3 = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};

/* A query batch on the device: one query per listed (seq, pos); block tables given. */
struct dbatch {
    struct kn_cuda_qbatch qb;
    void *mem[6];
};

static void dbatch_make(struct dbatch *d, int32_t n, int32_t n_seqs, const int32_t *qseq, const int64_t *pos,
                        const int32_t *bt, int32_t bt_stride)
{
    memset(d, 0, sizeof(*d));
    int32_t *off = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)(n_seqs + 1));
    int64_t *last = (int64_t *)hmalloc(sizeof(int64_t) * (size_t)n_seqs);
    int32_t *tiles = (int32_t *)hmalloc(sizeof(int32_t) * 2 * (size_t)(n + 1));
    KC(kn_cuda_qbatch_plan(n, n_seqs, qseq, pos, M3.block, off, last, tiles, &d->qb, &g_err));
    d->mem[0] = upload(qseq, sizeof(int32_t) * (size_t)n);
    d->mem[1] = upload(pos, sizeof(int64_t) * (size_t)n);
    d->mem[2] = upload(off, sizeof(int32_t) * (size_t)(n_seqs + 1));
    d->mem[3] = upload(last, sizeof(int64_t) * (size_t)n_seqs);
    d->mem[4] = upload(tiles, sizeof(int32_t) * 2 * (size_t)d->qb.n_tiles);
    d->mem[5] = upload(bt, sizeof(int32_t) * (size_t)n_seqs * bt_stride);
    d->qb.qseq = (const int32_t *)d->mem[0];
    d->qb.pos = (const int64_t *)d->mem[1];
    d->qb.seq_blk_off = (const int32_t *)d->mem[2];
    d->qb.seq_last = (const int64_t *)d->mem[3];
    d->qb.tiles = (const int32_t *)d->mem[4];
    d->qb.block_table = (const int32_t *)d->mem[5];
    d->qb.bt_stride = bt_stride;
    free(off), free(last), free(tiles);
}

/* batch decode queries, one per sequence at position ctx - 1, every sequence on pages 0..nb-1 (the layer and
 * tail benchmarks: all read the same cache) */
/* batch sequences of ctx tokens each, one query each at the end; all share pages 0..nb-1, or with own set
 * sequence s has pages s nb .. s nb + nb - 1 (as in a serving cache: no sharing through L2) */
static void dbatch_pages(struct dbatch *d, int32_t batch, int32_t nb, int64_t ctx, int own)
{
    int32_t *bt = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)nb * batch);
    int32_t *qseq = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch);
    int64_t *pos = (int64_t *)hmalloc(sizeof(int64_t) * (size_t)batch);
    for (int32_t s = 0; s < batch; s++) {
        for (int32_t b = 0; b < nb; b++) bt[(size_t)s * nb + b] = own ? s * nb + b : b;
        qseq[s] = s, pos[s] = ctx - 1;
    }
    dbatch_make(d, batch, batch, qseq, pos, bt, nb);
    free(bt), free(qseq), free(pos);
}

static void dbatch_shared_pages(struct dbatch *d, int32_t batch, int32_t nb, int64_t ctx)
{
    dbatch_pages(d, batch, nb, ctx, 0);
}

static void dbatch_free(struct dbatch *d)
{
    for (int k = 0; k < 6; k++) cudaFree(d->mem[k]);
}

/* ---------------------------------------------------------------------------------------------------- */
/* ceilings                                                                                               */

struct copy_arg {
    void *a, *b;
    size_t n;
};

static void run_copy(void *p, int it)
{
    struct copy_arg *c = (struct copy_arg *)p;
    (void)it;
    CK(cudaMemcpyAsync(c->b, c->a, c->n, cudaMemcpyDeviceToDevice, 0));
}

struct gemm_arg {
    struct kn_cuda_blas *bl;
    void *a, *w, *c;
    int64_t m, n, k;
};

static void run_gemm(void *p, int it)
{
    struct gemm_arg *g = (struct gemm_arg *)p;
    (void)it;
    KC(kn_cuda_gemm_bf16(g->bl, g->m, g->n, g->k, g->a, g->k, g->w, g->k, 0.0f, g->c, g->n, 1, &g_err));
}

__global__ void k_empty(void) {}

static void run_empty(void *p, int it)
{
    (void)p, (void)it;
    k_empty<<<132, 128>>>();
}

static void bench_ceilings(void)
{
    printf("== ceilings\n");
    struct copy_arg c;
    c.n = g_quick ? (256u << 20) : (size_t)4 << 30;
    c.a = dmalloc(c.n);
    c.b = dmalloc(c.n);
    fill_bf16(c.a, (int64_t)(c.n / 2), 1, 1.0f);
    double ms = time_ms(run_copy, &c, 3, g_quick ? 5 : 20);
    g_copy_tbs = 2.0 * (double)c.n / (ms * 1e-3) / 1e12;
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%.1f GB device-to-device", c.n / 1e9);
    emit("ceiling", cfg, "copy (rd+wr)", g_copy_tbs, "TB/s");
    cudaFree(c.a), cudaFree(c.b);

    struct gemm_arg g;
    g.m = g.n = g.k = g_quick ? 2048 : 8192;
    KC(kn_cuda_blas_create(&g.bl, 0, &g_err));
    g.a = dmalloc((size_t)(g.m * g.k * 2));
    g.w = dmalloc((size_t)(g.n * g.k * 2));
    g.c = dmalloc((size_t)(g.m * g.n * 2));
    fill_bf16(g.a, g.m * g.k, 2, 1.0f);
    fill_bf16(g.w, g.n * g.k, 3, 1.0f);
    ms = time_ms(run_gemm, &g, 3, g_quick ? 5 : 20);
    g_gemm_tflops = 2.0 * (double)g.m * g.n * g.k / (ms * 1e-3) / 1e12;
    snprintf(cfg, sizeof cfg, "cuBLAS bf16 %lldx%lldx%lld random", (long long)g.m, (long long)g.n,
             (long long)g.k);
    emit("ceiling", cfg, "gemm", g_gemm_tflops, "TFLOP/s");
    cudaFree(g.a), cudaFree(g.w), cudaFree(g.c);
    kn_cuda_blas_destroy(g.bl);
    /* the floor under every small kernel on this machine: an empty launch */
    emit("ceiling", "empty kernel, synced per call", "launch floor", time_ms(run_empty, NULL, 10, 50) * 1e3,
         "us");
    emit("ceiling", "empty kernel, synced per call", "host time", g_host_us, "us");
    /* what one knob read (kn_cuda_knob: a getenv of an unset name) costs with this process's environment */
    {
        extern char **environ;
        int n_env = 0;
        while (environ[n_env]) n_env++;
        volatile int sink = 0;
        const double h0 = host_us();
        for (int i = 0; i < 10000; i++) sink += getenv("KN_CUDA_NOT_A_KNOB") != NULL;
        char cfg2[64];
        snprintf(cfg2, sizeof cfg2, "getenv of an unset name, %d variables", n_env);
        emit("ceiling", cfg2, "host time", (host_us() - h0) / 10000 * 1e3, "ns");
    }
    emit("ceiling", "empty kernel, back to back", "launch floor",
         time_b2b_ms(run_empty, NULL, 10, 9, 50) * 1e3, "us");
}

/* ---------------------------------------------------------------------------------------------------- */
/* decode index scoring and top-k                                                                         */

struct idx_arg {
    int32_t n_sets;
    struct dbatch *sets;
    struct kn_cuda_cache *cache; /* per set */
    float *q, *scores;
    int32_t *sel;
    int32_t score_stride, mode; /* 0 scores, 1 topk, 2 both */
    int32_t v0;                 /* the index kernel of commit 9c4498e (kn_index_v0.cuh) */
    int32_t append;             /* append one index key per query (from q) before the scan */
};

static int g_sm_count;

static void run_idx(void *p, int it)
{
    struct idx_arg *a = (struct idx_arg *)p;
    int s = it % a->n_sets;
    if (a->mode != 1 && a->append)
        KC(kn_cuda_cache_append(&M3, &a->sets[s].qb, &a->cache[s], NULL, NULL, 0, a->q,
                                (int64_t)M3.n_idx_heads * M3.idx_dim, g_stream, &g_err));
    if (a->mode != 1 && a->v0) {
        v0_index_scores(&M3, &a->sets[s].qb, &a->cache[s], a->q, a->scores, a->score_stride, g_sm_count,
                        g_stream);
        CK(cudaGetLastError());
    } else if (a->mode != 1) {
        KC(kn_cuda_msa_index_scores(&M3, &a->sets[s].qb, &a->cache[s], a->q, a->scores, a->score_stride,
                                    KN_PATH_DECODE, g_stream, &g_err));
    }
    if (a->mode != 0)
        KC(kn_cuda_msa_topk(&M3, &a->sets[s].qb, a->scores, a->score_stride, a->sel, M3.topk, g_stream,
                            &g_err));
}

/* The index-scan variants compared in one run: the default route, its knobs (KN_CUDA_IDX_* set on top of the
 * defaults: kn_msa_index_decode_ring.cu) and the loop of commit 9c4498e (v0, not in the list now). The older
 * scans (KN_CUDA_IDX=0..3, per-lane copies, 16-token FP8 steps, the normal L2 policy) and the knobs measured
 * level or slower (KN_CUDA_IDX_CHUNK, KN_CUDA_IDX_SPLIT=4/8) were measured in the sessions before
 * (bench/cuda/README.md, docs/progress/cuda-scan.md) and left out to keep the run short; they stay
 * selectable. */
struct idx_variant {
    const char *name;
    int fp8, v0;
    int append;      /* the step's index-key append before each scan */
    const char *env; /* "KEY=VAL KEY=VAL" on top of the defaults */
    int graph;       /* also timed as calls replayed from a graph ("NAME graph") */
};
static const struct idx_variant g_idx_variants[] = {
    /* the default: the ring scan launched as a programmatic dependent of the kernel before it up to 32768
     * pages (batch 1, batch 8 to 512K); here that kernel is the scan before, so those b2b rows overlap a
     * scan's start with the end of the one before, which a decode step cannot do (the append precedes the
     * scan there: the "append +" rows) */
    {"index bf16 default", 0, 0, 0, "", 1},
    {"index fp8 default", 1, 0, 0, "", 1},
    /* plain launches (the previous default; b2b rows comparable with the sessions before) */
    {"index bf16 no pdl", 0, 0, 0, "KN_CUDA_IDX_PDL=0"},
    {"index fp8 no pdl", 1, 0, 0, "KN_CUDA_IDX_PDL=0"},
    /* 2 warps per page (small sizes: all warps busy; large sizes: pairs of warps on each page) */
    {"index bf16 split 2", 0, 0, 0, "KN_CUDA_IDX_SPLIT=2 KN_CUDA_IDX_PDL=0"},
    {"index fp8 split 2", 1, 0, 0, "KN_CUDA_IDX_SPLIT=2 KN_CUDA_IDX_PDL=0"},
    /* a decode step's order: the append of one index key per query (kn_cuda_cache_append), then the scan
     * (default: its programmatic dependent), and the same with a plain launch ("of copy": the scan's bytes
     * over the time of both) */
    {"append + index bf16", 0, 0, 1, "", 1},
    {"append + index fp8", 1, 0, 1, "", 1},
    {"append + index bf16 no pdl", 0, 0, 1, "KN_CUDA_IDX_PDL=0"},
    {"append + index fp8 no pdl", 1, 0, 1, "KN_CUDA_IDX_PDL=0"},
    /* where the FP8 scan loses against a read of its bytes (timing only: KN_CUDA_IDX_DIAG gives wrong scores;
     * bit 0 no scale copies, bit 1 no products) and the grid sweeping the sequence together (INTER) */
    {"index fp8 diag no scales", 1, 0, 0, "KN_CUDA_IDX_DIAG=1 KN_CUDA_IDX_PDL=0"},
    {"index fp8 diag no math", 1, 0, 0, "KN_CUDA_IDX_DIAG=2 KN_CUDA_IDX_PDL=0"},
    {"index fp8 diag neither", 1, 0, 0, "KN_CUDA_IDX_DIAG=3 KN_CUDA_IDX_PDL=0"},
    {"index bf16 diag no math", 0, 0, 0, "KN_CUDA_IDX_DIAG=2 KN_CUDA_IDX_PDL=0"},
    {"index fp8 inter", 1, 0, 0, "KN_CUDA_IDX_INTER=1 KN_CUDA_IDX_PDL=0"},
    {"index bf16 inter", 0, 0, 0, "KN_CUDA_IDX_INTER=1 KN_CUDA_IDX_PDL=0"},
};

/* Knob strings ("KEY=VAL KEY=VAL", as the routes of every section give them): the next pair of *k, advanced
 * past it (0 at the end). */
static int knob_next(const char **k, char name[64], char val[16])
{
    int used = 0;
    if (!*k || sscanf(*k, " %63[^=]=%15s%n", name, val, &used) != 2) return 0;
    *k += used;
    return 1;
}

/* the knobs of `clear` (n of them) unset, then those env sets (NULL: none) */
static void env_set(const char *const *clear, size_t n, const char *env)
{
    for (size_t k = 0; k < n; k++) knob_unsetenv(clear[k]);
    char name[64], val[16];
    for (const char *k = env; knob_next(&k, name, val);) knob_setenv(name, val, 1);
}

/* Whether `name` is one of the '|'-separated names of environment variable `var` (every name when unset or
 * empty): the benchmarks' filters, so that a short device run can time a few variants */
static int name_listed(const char *var, const char *name)
{
    const char *f = getenv(var);
    if (!f || !f[0]) return 1;
    const size_t n = strlen(name);
    for (const char *p = f; p; p = strchr(p, '|')) {
        if (*p == '|') p++;
        if (!strncmp(p, name, n) && (p[n] == '|' || p[n] == 0)) return 1;
    }
    return 0;
}

/* Set (env) or clear (NULL) the knobs a variant may set. */
static void idx_set_env(const char *env)
{
    static const char *const knobs[] = {"KN_CUDA_IDX",       "KN_CUDA_IDX_TILE",  "KN_CUDA_IDX_LINES",
                                        "KN_CUDA_IDX_EVICT", "KN_CUDA_IDX_SPLIT", "KN_CUDA_IDX_CHUNK",
                                        "KN_CUDA_IDX_PDL",   "KN_CUDA_IDX_DIAG",  "KN_CUDA_IDX_INTER"};
    env_set(knobs, sizeof knobs / sizeof knobs[0], env);
}

/* The read-only ceiling at a given size: a grid-stride stream of 16-byte loads over the same bytes as a
 * scan (one wave of CTAs, 8 loads in flight per thread), so that small sizes, where launch and ramp weigh,
 * get a ceiling measured the same way. */
__global__ void __launch_bounds__(256) k_read(const uint4 *__restrict__ p, int64_t n16, unsigned *sink)
{
    uint32_t acc = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 7 * stride < n16; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < 8; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) *sink = acc; /* keeps the loads; practically never stores */
}

struct read_arg {
    const uint8_t *base;
    int64_t set_bytes;
    int32_t n_sets;
    unsigned *sink;
};

static void run_read(void *p, int it)
{
    struct read_arg *r = (struct read_arg *)p;
    const uint8_t *b = r->base + (int64_t)(it % r->n_sets) * r->set_bytes;
    k_read<<<g_sm_count * 4, 256, 0, g_stream>>>((const uint4 *)b, r->set_bytes / 16, r->sink);
}

/* A device-to-device copy of `bytes` from set (it % n_sets) of the bf16 keys */
struct same_copy_arg {
    const uint8_t *base;
    int64_t bytes;
    double set_bytes;
    int32_t n_sets;
    uint8_t *dst;
};

static void run_copy_same(void *p, int it)
{
    struct same_copy_arg *c = (struct same_copy_arg *)p;
    CK(cudaMemcpyAsync(c->dst, c->base + (int64_t)(it % c->n_sets) * (int64_t)c->set_bytes, (size_t)c->bytes,
                       cudaMemcpyDeviceToDevice, g_stream));
}

static int g_idx_rounds = 1;

/* One size cell's row pair of a streaming kernel: synced (time, optionally bandwidth, % of copy) and back to
 * back ("NAME b2b": time, % of copy), bytes being what it must move. */
/* reps calls of f in a row (call k of this function makes calls k * reps .. k * reps + reps - 1) */
struct reps_arg {
    bench_fn f;
    void *arg;
    int reps;
};

static void run_reps(void *p, int k)
{
    const struct reps_arg *r = (const struct reps_arg *)p;
    for (int i = 0; i < r->reps; i++) r->f(r->arg, k * r->reps + i);
}

/* Back to back inside graphs: reps calls captured in one graph (two graphs, inputs rotated through both),
 * each replay timed, divided by reps. How a decode step runs them (graphs, wk_cuda_steps.h); METHOD.md's
 * timing for small launches: the host's launch gaps between the calls are gone. */
static double time_graph_b2b_ms(bench_fn f, void *arg, int reps)
{
    struct reps_arg r = {f, arg, reps};
    return time_graph_ms(run_reps, &r, 2, 2, g_quick ? 3 : 9) / reps;
}

static void time_emit_stream(const char *name, const char *cfg, bench_fn f, void *arg, double bytes,
                             int iters, int reps, int with_bw, int graph = 0)
{
    char nb[96];
    double ms = time_ms(f, arg, 3, iters);
    double tbs = bytes / (ms * 1e-3) / 1e12;
    emit(name, cfg, "time", ms * 1e3, "us");
    emit(name, cfg, "host time", g_host_us, "us");
    if (with_bw) emit(name, cfg, "bandwidth", tbs, "TB/s");
    emit(name, cfg, "of copy", 100.0 * tbs / g_copy_tbs, "%");
    ms = time_b2b_ms(f, arg, 3, g_quick ? 3 : 9, reps);
    tbs = bytes / (ms * 1e-3) / 1e12;
    snprintf(nb, sizeof nb, "%s b2b", name);
    emit(nb, cfg, "time", ms * 1e3, "us");
    emit(nb, cfg, "of copy", 100.0 * tbs / g_copy_tbs, "%");
    if (!graph) return;
    ms = time_graph_b2b_ms(f, arg, reps);
    tbs = bytes / (ms * 1e-3) / 1e12;
    snprintf(nb, sizeof nb, "%s graph", name);
    emit(nb, cfg, "time", ms * 1e3, "us");
    emit(nb, cfg, "of copy", 100.0 * tbs / g_copy_tbs, "%");
}

static void bench_index(int do_topk)
{
    const char *r = getenv("KN_BENCH_IDX_ROUNDS");
    g_idx_rounds = r && atoi(r) > 0 ? atoi(r) : 1;
    printf("== decode index scoring (tensor cores, one pass per query) and top-k\n");
    static const int64_t ctxs[] = {131072, 524288, 1048576};
    static const int32_t batches[] = {1, 8, 64};
    for (int ci = 0; ci < 3; ci++)
        for (int bi = 0; bi < 3; bi++) {
            const int64_t ctx = g_quick ? ctxs[ci] / 16 : ctxs[ci];
            const int32_t batch = batches[bi], nb = (int32_t)(ctx / M3.block);
            const int64_t set_pages = (int64_t)batch * nb;
            const double set_bytes = (double)set_pages * M3.block * M3.idx_dim * 2;
            int32_t n_sets = (int32_t)ceil(2e9 / set_bytes);
            if (n_sets < 1) n_sets = 1;
            if (n_sets > 8) n_sets = 8;
            const int64_t pages = set_pages * n_sets;
            uint16_t *idx = (uint16_t *)dmalloc((size_t)pages * M3.block * M3.idx_dim * 2);
            uint8_t *idx8 = (uint8_t *)dmalloc((size_t)pages * M3.block * M3.idx_dim);
            uint8_t *cdst = (uint8_t *)dmalloc((size_t)(set_bytes / 2)); /* the same-size copy's target */
            float *sc8 = (float *)dmalloc((size_t)pages * M3.block * 4);
            fill_bf16(idx, pages * M3.block * M3.idx_dim, 11, 1.0f);
            k_quant_fp8<<<(unsigned)((pages * M3.block + 7) / 8), 256>>>(idx, pages * M3.block, M3.idx_dim,
                                                                         idx8, sc8);
            CK(cudaGetLastError());
            struct dbatch *sets = (struct dbatch *)hmalloc(sizeof(struct dbatch) * (size_t)n_sets);
            struct kn_cuda_cache *cb =
                (struct kn_cuda_cache *)hmalloc(sizeof(struct kn_cuda_cache) * (size_t)n_sets);
            struct kn_cuda_cache *c8 =
                (struct kn_cuda_cache *)hmalloc(sizeof(struct kn_cuda_cache) * (size_t)n_sets);
            int32_t *qseq = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch);
            int64_t *pos = (int64_t *)hmalloc(sizeof(int64_t) * (size_t)batch);
            int32_t *bt = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch * nb);
            for (int32_t s = 0; s < n_sets; s++) {
                for (int32_t i = 0; i < batch; i++) {
                    qseq[i] = i;
                    pos[i] = ctx - 1;
                    for (int32_t b = 0; b < nb; b++)
                        bt[(int64_t)i * nb + b] = (int32_t)(s * set_pages + (int64_t)i * nb + b);
                }
                dbatch_make(&sets[s], batch, batch, qseq, pos, bt, nb);
                memset(&cb[s], 0, sizeof(cb[s]));
                cb[s].k = cb[s].v = idx; /* not read by index scoring */
                cb[s].idx = idx;
                cb[s].idx_dtype = KN_IDX_BF16;
                cb[s].n_pages = pages;
                c8[s] = cb[s];
                c8[s].idx = idx8;
                c8[s].idx_scale = sc8;
                c8[s].idx_dtype = KN_IDX_FP8;
            }
            float *q = (float *)dmalloc(sizeof(float) * (size_t)batch * M3.n_idx_heads * M3.idx_dim);
            fill_f32(q, (int64_t)batch * M3.n_idx_heads * M3.idx_dim, 12, 1.0f);
            float *scores = (float *)dmalloc(sizeof(float) * (size_t)M3.n_idx_heads * batch * nb);
            int32_t *sel = (int32_t *)dmalloc(sizeof(int32_t) * (size_t)M3.n_idx_heads * batch * M3.topk);
            struct idx_arg a = {n_sets, sets, cb, q, scores, sel, nb, 0, 0, 0};
            char cfg[96];
            snprintf(cfg, sizeof cfg, "ctx %lldK batch %d (%d sets)", (long long)(ctx / 1024), batch, n_sets);
            const int iters = g_quick ? 5 : 30;
            const int reps = set_bytes < 1e9 ? 20 : 4;
            const double bytes8 = (double)set_pages * M3.block * (M3.idx_dim + 4);
            const int nv = (int)(sizeof(g_idx_variants) / sizeof(g_idx_variants[0]));
            char vn[64];
            /* KN_BENCH_IDX_ROUNDS=R: the whole list R times (rounds after the first named "#2", ...), so that
             * order effects and run-to-run noise show next to the differences between variants */
            const int rounds = g_idx_rounds;
            for (int rd = 0; rd < rounds; rd++)
                for (int v = 0; v < nv; v++) {
                    const struct idx_variant *iv = &g_idx_variants[v];
                    if (!name_listed("KN_BENCH_IDX_VARIANTS", iv->name)) continue;
                    a.cache = iv->fp8 ? c8 : cb;
                    a.v0 = iv->v0;
                    a.append = iv->append;
                    idx_set_env(iv->env);
                    if (rd)
                        snprintf(vn, sizeof vn, "%s #%d", iv->name, rd + 1);
                    else
                        snprintf(vn, sizeof vn, "%s", iv->name);
                    time_emit_stream(vn, cfg, run_idx, &a, iv->fp8 ? bytes8 : set_bytes, iters, reps, 1,
                                     iv->graph);
                }
            idx_set_env(NULL);
            a.append = 0;
            /* the same bytes read by a plain streaming kernel: the ceiling at this size */
            for (int f8 = 0; f8 < 2; f8++) {
                struct read_arg ra = {f8 ? idx8 : (const uint8_t *)idx,
                                      (int64_t)(f8 ? set_pages * M3.block * M3.idx_dim : set_bytes), n_sets,
                                      (unsigned *)sel};
                time_emit_stream(f8 ? "read, fp8 key bytes" : "read, bf16 key bytes", cfg, run_read, &ra,
                                 (double)ra.set_bytes, iters, reps, 0, 1);
            }
            /* the same-size copy: a device-to-device copy of half the scan's bytes (read + write = what the
             * scan reads), what any single operation of this size pays in launch and ramp */
            for (int f8 = 0; f8 < 2; f8++) {
                struct same_copy_arg ca = {(const uint8_t *)idx, (int64_t)(f8 ? bytes8 : set_bytes) / 2,
                                           set_bytes, n_sets, cdst};
                time_emit_stream(f8 ? "copy, fp8 scan bytes" : "copy, bf16 scan bytes", cfg, run_copy_same,
                                 &ca, 2.0 * (double)ca.bytes, iters, reps, 0, 1);
            }
            cudaFree(cdst);
            a.cache = cb;
            a.v0 = 0;
            if (do_topk) {
                a.mode = 1;
                /* the standalone kernel's gathers (KN_CUDA_TOPK_BF): its default, the store per value (1),
                 * and the fused tail's default, the mask gather (2), measured beside it */
                static const char *const gathers[] = {"1", "2"};
                for (int gi = 0; gi < 2; gi++) {
                    knob_setenv("KN_CUDA_TOPK_BF", gathers[gi], 1);
                    char tn[32];
                    snprintf(tn, sizeof tn, "topk%s", gi ? " mask" : "");
                    double ms = time_ms(run_idx, &a, 3, iters);
                    emit(tn, cfg, "time", ms * 1e3, "us");
                    ms = time_b2b_ms(run_idx, &a, 3, g_quick ? 3 : 9, 20);
                    snprintf(tn, sizeof tn, "topk%s b2b", gi ? " mask" : "");
                    emit(tn, cfg, "time", ms * 1e3, "us");
                }
                knob_unsetenv("KN_CUDA_TOPK_BF");
            }
            for (int32_t s = 0; s < n_sets; s++) dbatch_free(&sets[s]);
            free(sets), free(cb), free(c8), free(qseq), free(pos), free(bt);
            cudaFree(idx), cudaFree(idx8), cudaFree(sc8), cudaFree(q), cudaFree(scores), cudaFree(sel);
        }
}

/* ---------------------------------------------------------------------------------------------------- */
/* paged sparse decode attention                                                                          */

struct dec_arg {
    int32_t n_sets;
    struct dbatch *sets;
    struct kn_cuda_cache c;
    void *q, *out, *ws;
    size_t ws_bytes;
    int32_t **sel; /* per set, device [G][batch][topk] */
    int dense;
};

static void run_dec(void *p, int it)
{
    struct dec_arg *a = (struct dec_arg *)p;
    int s = it % a->n_sets;
    if (a->dense)
        KC(kn_cuda_dense_attention(&M3, &a->sets[s].qb, &a->c, a->q, a->out, a->ws, a->ws_bytes,
                                   KN_PATH_DECODE, 0, &g_err));
    else
        KC(kn_cuda_msa_attention(&M3, &a->sets[s].qb, &a->c, a->q, a->sel[s], M3.topk, a->out, a->ws,
                                 a->ws_bytes, KN_PATH_DECODE, 0, &g_err));
}

/* distinct random blocks < own, own first; n = min(topk, own + 1) valid, rest -1 */
static void random_selection(int32_t *row, int64_t own, int32_t topk)
{
    int32_t n = own + 1 < topk ? (int32_t)own + 1 : topk;
    row[0] = (int32_t)own;
    for (int32_t j = 1; j < n; j++) {
        int32_t b, dup;
        do {
            b = (int32_t)(rnd() % (uint64_t)own);
            dup = 0;
            for (int32_t m = 0; m < j; m++) dup |= row[m] == b;
        } while (dup);
        row[j] = b;
    }
    for (int32_t j = n; j < topk; j++) row[j] = -1;
}

static void bench_decode(void)
{
    printf("== paged sparse decode attention (selected pages only)\n");
    static const int32_t batches[] = {1, 16, 64};
    const int64_t ctx = g_quick ? 65536 : 1048576;
    const int32_t nb = (int32_t)(ctx / M3.block), G = M3.n_kv;
    for (int bi = 0; bi < 3; bi++) {
        const int32_t batch = batches[bi];
        const int32_t n_sets = batch >= 64 ? 4 : 8;
        /* pages only for the selected blocks: bt maps them to distinct pages, everything else to page 0 */
        int32_t *bt = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch * nb);
        int32_t *sel = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)G * batch * M3.topk);
        int32_t *qseq = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch);
        int64_t *pos = (int64_t *)hmalloc(sizeof(int64_t) * (size_t)batch);
        struct dbatch *sets = (struct dbatch *)hmalloc(sizeof(struct dbatch) * (size_t)n_sets);
        int32_t **seld = (int32_t **)hmalloc(sizeof(int32_t *) * (size_t)n_sets);
        int64_t next_page = 1;
        double bytes = 0;
        for (int32_t s = 0; s < n_sets; s++) {
            memset(bt, 0, sizeof(int32_t) * (size_t)batch * nb);
            for (int32_t i = 0; i < batch; i++) {
                qseq[i] = i;
                pos[i] = ctx - 1 - (int64_t)(rnd() % 64);
                for (int32_t g = 0; g < G; g++) {
                    int32_t *row = sel + ((int64_t)g * batch + i) * M3.topk;
                    random_selection(row, pos[i] / M3.block, M3.topk);
                    for (int32_t j = 0; j < M3.topk; j++)
                        if (row[j] >= 0 && bt[(int64_t)i * nb + row[j]] == 0)
                            bt[(int64_t)i * nb + row[j]] = (int32_t)next_page++;
                }
            }
            dbatch_make(&sets[s], batch, batch, qseq, pos, bt, nb);
            seld[s] = (int32_t *)upload(sel, sizeof(int32_t) * (size_t)G * batch * M3.topk);
        }
        /* bytes over the selected pages: K and V of the group's slice, visible tokens only */
        for (int32_t i = 0; i < batch; i++) bytes += (double)G * M3.topk * M3.block * M3.head_dim * 2 * 2;
        const int64_t pages = next_page;
        const size_t kv = (size_t)pages * M3.block * G * M3.head_dim * 2;
        struct dec_arg a;
        memset(&a, 0, sizeof(a));
        a.n_sets = n_sets;
        a.sets = sets;
        a.sel = seld;
        a.c.k = dmalloc(kv);
        a.c.v = dmalloc(kv);
        a.c.n_pages = pages;
        fill_bf16(a.c.k, (int64_t)(kv / 2), 21, 1.0f);
        fill_bf16(a.c.v, (int64_t)(kv / 2), 22, 1.0f);
        a.q = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
        fill_bf16(a.q, (int64_t)batch * M3.n_heads * M3.head_dim, 23, 1.0f);
        a.out = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
        a.ws_bytes = kn_cuda_msa_attention_ws(&M3, &sets[0].qb, M3.topk, KN_PATH_DECODE);
        a.ws = dmalloc(a.ws_bytes);
        char cfg[96];
        snprintf(cfg, sizeof cfg, "ctx %lldK batch %d top-16 (%d sets)", (long long)(ctx / 1024), batch,
                 n_sets);
        double ms = time_ms(run_dec, &a, 3, g_quick ? 5 : 50);
        double tbs = bytes / (ms * 1e-3) / 1e12;
        emit("sparse decode", cfg, "time", ms * 1e3, "us");
        emit("sparse decode", cfg, "bandwidth", tbs, "TB/s");
        emit("sparse decode", cfg, "of copy", 100.0 * tbs / g_copy_tbs, "%");
        ms = time_b2b_ms(run_dec, &a, 3, g_quick ? 3 : 9, 20);
        tbs = bytes / (ms * 1e-3) / 1e12;
        emit("sparse decode b2b", cfg, "time", ms * 1e3, "us");
        emit("sparse decode b2b", cfg, "of copy", 100.0 * tbs / g_copy_tbs, "%");
        for (int32_t s = 0; s < n_sets; s++) dbatch_free(&sets[s]), cudaFree(seld[s]);
        free(sets), free(seld), free(bt), free(sel), free(qseq), free(pos);
        cudaFree(a.c.k), cudaFree(a.c.v), cudaFree(a.q), cudaFree(a.out), cudaFree(a.ws);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* sparse prefill attention (KV-block-major) and the dense prefill baseline                              */

/* Selections for a whole prefill of L tokens, [G][L][topk]. structured: per 128-query tile and group a shared
 * set (own block + 15 earlier ones), each query swapping every shared block with probability swap for a
 * random other one; random: own block + independent random earlier blocks. Returns the mean fraction of a
 * query's selected blocks that are in its tile's shared set. */
static double make_prefill_selection(int32_t *sel, int64_t L, int structured, double swap)
{
    const int32_t G = M3.n_kv, K = M3.topk;
    double shared_sum = 0;
    int64_t shared_n = 0;
    int32_t tile_set[16];
    for (int32_t g = 0; g < G; g++)
        for (int64_t t0 = 0; t0 < L; t0 += M3.block) {
            const int64_t own = t0 / M3.block;
            random_selection(tile_set, own, K);
            for (int64_t i = t0; i < t0 + M3.block && i < L; i++) {
                int32_t *row = sel + ((int64_t)g * L + i) * K;
                if (!structured) {
                    random_selection(row, own, K);
                    continue;
                }
                memcpy(row, tile_set, sizeof(int32_t) * K);
                int32_t n = own + 1 < K ? (int32_t)own + 1 : K;
                if (own + 1 > K) /* only when there are other blocks to swap in */
                    for (int32_t j = 1; j < n; j++) {
                        if ((double)(rnd() % 1000000) / 1e6 >= swap) continue;
                        int32_t b, dup;
                        do {
                            b = (int32_t)(rnd() % (uint64_t)own);
                            dup = 0;
                            for (int32_t m = 0; m < n; m++) dup |= row[m] == b;
                        } while (dup);
                        row[j] = b;
                    }
                int32_t hit = 0;
                for (int32_t j = 0; j < n; j++)
                    for (int32_t m = 0; m < n; m++) hit += row[j] == tile_set[m];
                shared_sum += (double)hit / n;
                shared_n++;
            }
        }
    return shared_n ? shared_sum / shared_n : 0.0;
}

/* Useful FLOPs of attention over the selections: 4 * head_dim per (query head, visible key). */
static double sparse_flops(const int32_t *sel, int64_t L)
{
    const int32_t G = M3.n_kv, K = M3.topk, hpg = M3.n_heads / M3.n_kv;
    double keys = 0;
    for (int32_t g = 0; g < G; g++)
        for (int64_t i = 0; i < L; i++)
            for (int32_t j = 0; j < K; j++) {
                int32_t b = sel[((int64_t)g * L + i) * K + j];
                if (b < 0) continue;
                int64_t vis = i - (int64_t)b * M3.block + 1;
                keys += vis < M3.block ? vis : M3.block;
            }
    return keys * hpg * 4.0 * M3.head_dim;
}

struct pf_arg {
    int64_t L, chunk;
    struct dbatch *chunks;
    int32_t n_chunks;
    struct kn_cuda_cache c;
    uint16_t *q, *out;
    float *qi;
    int32_t *sel;
    void *ws;
    size_t ws_bytes;
    int what; /* 0 sparse attention, 1 dense attention, 2 select (fused), 3 select + sparse attention */
};

static void run_pf(void *p, int it)
{
    struct pf_arg *a = (struct pf_arg *)p;
    (void)it;
    const int64_t hd = (int64_t)M3.n_heads * M3.head_dim;
    for (int32_t c = 0; c < a->n_chunks; c++) {
        const struct kn_cuda_qbatch *qb = &a->chunks[c].qb;
        const int64_t i0 = c * a->chunk;
        /* selections are stored per chunk, [G][n][K] at c * G * chunk * K (a [G][L][K] array would not give
         * the kernels their [G][n][K] rows) */
        int32_t *sel = a->sel + (int64_t)c * M3.n_kv * a->chunk * M3.topk;
        if (a->what == 1)
            KC(kn_cuda_dense_attention(&M3, qb, &a->c, a->q + i0 * hd, a->out + i0 * hd, a->ws, a->ws_bytes,
                                       KN_PATH_PREFILL, 0, &g_err));
        if (a->what == 2 || a->what == 3)
            KC(kn_cuda_msa_select(&M3, qb, &a->c, a->qi + i0 * M3.n_idx_heads * M3.idx_dim, sel, M3.topk,
                                  a->ws, a->ws_bytes, KN_PATH_PREFILL, 0, &g_err));
        if (a->what == 0 || a->what == 3)
            KC(kn_cuda_msa_attention(&M3, qb, &a->c, a->q + i0 * hd, sel, M3.topk, a->out + i0 * hd, a->ws,
                                     a->ws_bytes, KN_PATH_PREFILL, 0, &g_err));
    }
}

/* One sequence of L tokens in pages 0..L/128-1, queries chunked; caches random. */
static void pf_setup(struct pf_arg *a, int64_t L, int64_t chunk)
{
    memset(a, 0, sizeof(*a));
    a->L = L;
    a->chunk = chunk;
    a->n_chunks = (int32_t)((L + chunk - 1) / chunk);
    const int32_t nb = (int32_t)(L / M3.block);
    const size_t kv = (size_t)nb * M3.block * M3.n_kv * M3.head_dim * 2;
    a->c.k = dmalloc(kv);
    a->c.v = dmalloc(kv);
    a->c.idx = dmalloc((size_t)nb * M3.block * M3.idx_dim * 2);
    a->c.idx_dtype = KN_IDX_BF16;
    a->c.n_pages = nb;
    fill_bf16(a->c.k, (int64_t)(kv / 2), 31, 1.0f);
    fill_bf16(a->c.v, (int64_t)(kv / 2), 32, 1.0f);
    fill_bf16(a->c.idx, (int64_t)nb * M3.block * M3.idx_dim, 33, 1.0f);
    a->q = (uint16_t *)dmalloc((size_t)L * M3.n_heads * M3.head_dim * 2);
    a->out = (uint16_t *)dmalloc((size_t)L * M3.n_heads * M3.head_dim * 2);
    fill_bf16(a->q, L * M3.n_heads * M3.head_dim, 34, 1.0f);
    a->qi = (float *)dmalloc(sizeof(float) * (size_t)L * M3.n_idx_heads * M3.idx_dim);
    a->sel = (int32_t *)dmalloc(sizeof(int32_t) * (size_t)a->n_chunks * M3.n_kv * chunk * M3.topk);
    int32_t *bt = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)nb);
    for (int32_t b = 0; b < nb; b++) bt[b] = b;
    a->chunks = (struct dbatch *)hmalloc(sizeof(struct dbatch) * (size_t)a->n_chunks);
    int32_t *qseq = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)chunk);
    int64_t *pos = (int64_t *)hmalloc(sizeof(int64_t) * (size_t)chunk);
    size_t ws = 0;
    for (int32_t c = 0; c < a->n_chunks; c++) {
        int64_t i0 = c * chunk, n = L - i0 < chunk ? L - i0 : chunk;
        for (int64_t i = 0; i < n; i++) qseq[i] = 0, pos[i] = i0 + i;
        dbatch_make(&a->chunks[c], (int32_t)n, 1, qseq, pos, bt, nb);
        size_t w1 = kn_cuda_msa_attention_ws(&M3, &a->chunks[c].qb, M3.topk, KN_PATH_PREFILL);
        if (w1 > ws) ws = w1;
    }
    a->ws_bytes = ws;
    a->ws = dmalloc(ws);
    free(bt), free(qseq), free(pos);
}

static void pf_free(struct pf_arg *a)
{
    for (int32_t c = 0; c < a->n_chunks; c++) dbatch_free(&a->chunks[c]);
    free(a->chunks);
    cudaFree(a->c.k), cudaFree(a->c.v), cudaFree(a->c.idx), cudaFree(a->q), cudaFree(a->out), cudaFree(a->qi);
    cudaFree(a->sel), cudaFree(a->ws);
}

/* host selections [G][L][K] -> device per-chunk layout [chunk][G][n][K] */
static void pf_upload_sel(struct pf_arg *a, const int32_t *sel)
{
    const int32_t G = M3.n_kv, K = M3.topk;
    int32_t *tmp = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)a->n_chunks * G * a->chunk * K);
    for (int32_t c = 0; c < a->n_chunks; c++) {
        int64_t i0 = c * a->chunk, n = a->L - i0 < a->chunk ? a->L - i0 : a->chunk;
        for (int32_t g = 0; g < G; g++)
            memcpy(tmp + (int64_t)c * G * a->chunk * K + (int64_t)g * n * K,
                   sel + ((int64_t)g * a->L + i0) * K, sizeof(int32_t) * (size_t)(n * K));
    }
    CK(cudaMemcpy(a->sel, tmp, sizeof(int32_t) * (size_t)a->n_chunks * G * a->chunk * K,
                  cudaMemcpyHostToDevice));
    free(tmp);
}

/* The union route's view of a prefill's selections [G][L][K]: 8-query tiles from query 0 (the chunks start at
 * multiples of 64, so these are the kernel's tiles), efficiency = selected pairs / (4 x (blocks chosen by
 * queries 0-3 + blocks chosen by queries 4-7)). Returns the fraction of (query, group) rows whose tile
 * reaches min_eff percent; *eff_mean: selected / computed pairs over all tiles; *computed: FLOPs the union
 * route computes when every tile takes it (whole blocks, 4 queries x 16 heads per block and half). */
static double union_stats(const int32_t *sel, int64_t L, int32_t min_eff, double *eff_mean, double *computed)
{
    const int32_t G = M3.n_kv, K = M3.topk, hpg = M3.n_heads / M3.n_kv;
    int64_t rows_taken = 0, sel_all = 0, comp_all = 0;
    for (int32_t g = 0; g < G; g++)
        for (int64_t i0 = 0; i0 < L; i0 += 8) {
            int32_t half[2][8 * 32], nh[2] = {0, 0}, pairs = 0, all[8 * 32], na = 0;
            const int32_t cnt = L - i0 < 8 ? (int32_t)(L - i0) : 8;
            for (int32_t q = 0; q < cnt; q++)
                for (int32_t j = 0; j < K; j++) {
                    const int32_t b = sel[((int64_t)g * L + i0 + q) * K + j];
                    if (b < 0) continue;
                    pairs++;
                    int in = 0;
                    for (int32_t m = 0; m < nh[q / 4]; m++) in |= half[q / 4][m] == b;
                    if (!in) half[q / 4][nh[q / 4]++] = b;
                    in = 0;
                    for (int32_t m = 0; m < na; m++) in |= all[m] == b;
                    if (!in) all[na++] = b;
                }
            const int32_t w = nh[0] + nh[1];
            if (na <= 128 && (w == 0 || pairs * 100 >= min_eff * 4 * w)) rows_taken += cnt;
            sel_all += pairs;
            comp_all += 4 * w;
        }
    *eff_mean = comp_all ? (double)sel_all / comp_all : 0;
    *computed = (double)comp_all * hpg * M3.block * 4.0 * M3.head_dim;
    return (double)rows_taken / ((double)G * L);
}

/* The hybrid route's view (KN_CUDA_UNION_RARE, every tile taking it): a warpgroup drops a block only one of
 * its 4 queries chose, that pair going to the pair path. *eff: the pairs left to the union over what it
 * computes; returns the fraction of selected pairs that are rare. */
static double rare_stats(const int32_t *sel, int64_t L, double *eff, double *computed)
{
    const int32_t G = M3.n_kv, K = M3.topk;
    int64_t pairs_all = 0, rare_all = 0, comp_all = 0;
    for (int32_t g = 0; g < G; g++)
        for (int64_t i0 = 0; i0 < L; i0 += 8) {
            int32_t blk[8 * 32], nb = 0;
            uint32_t mask[8 * 32];
            const int32_t cnt = L - i0 < 8 ? (int32_t)(L - i0) : 8;
            for (int32_t q = 0; q < cnt; q++)
                for (int32_t j = 0; j < K; j++) {
                    const int32_t b = sel[((int64_t)g * L + i0 + q) * K + j];
                    if (b < 0) continue;
                    pairs_all++;
                    int32_t m = 0;
                    while (m < nb && blk[m] != b) m++;
                    if (m == nb) blk[nb] = b, mask[nb++] = 0;
                    mask[m] |= 1u << q;
                }
            for (int32_t m = 0; m < nb; m++)
                for (int h = 0; h < 2; h++) {
                    const int c = __builtin_popcount(mask[m] & (0xFu << (4 * h)));
                    if (c == 1) rare_all++;
                    if (c >= 2) comp_all += 4;
                }
        }
    *eff = comp_all ? (double)(pairs_all - rare_all) / comp_all : 0;
    *computed = (double)comp_all * (M3.n_heads / M3.n_kv) * M3.block * 4.0 * M3.head_dim;
    return pairs_all ? (double)rare_all / pairs_all : 0;
}

/* the attention routes compared in one run, each a knob string: prefill knobs (kn_cuda_knobs.h says what
 * each means) as "NAME=value" separated by spaces, on top of the library defaults (every other prefill knob
 * unset). KN_CUDA_UNION_KERNEL's variants (KN_PF_UK_*): 0 plain, 1 overlap, 2 pingpong, 3 pingpong + fast
 * softmax, 4 fast softmax, 5 score-only pingpong + fast softmax, 6 fast softmax + value product in halves, 7
 * in quarters, 8 fast softmax with the next block's score product issued behind the value product
 * (lookahead). "diag" routes (KN_CUDA_PF_DIAG_SKIP) compute a wrong output, only their time means something.
 * A route's index is its number for KN_BENCH_PF_ONLY and PF_R_* below. */
struct pf_route {
    const char *name, *knobs;
};
static const struct pf_route g_pf_routes[] = {
    {"pairs only (previous design)", "KN_CUDA_PREFILL_UNION=0"},
    {"union + pairs (default)", ""},
    {"union everywhere", "KN_CUDA_UNION_MIN=0"},
    {"union + pairs, plain", "KN_CUDA_UNION_KERNEL=0"},
    {"union + pairs, overlap", "KN_CUDA_UNION_KERNEL=1"},
    {"union + pairs, pingpong", "KN_CUDA_UNION_KERNEL=2"},
    {"union + pairs, pingpong fast", "KN_CUDA_UNION_KERNEL=3"},
    {"union + pairs, fast", "KN_CUDA_UNION_KERNEL=4"},
    {"union + pairs, pingpong S fast", "KN_CUDA_UNION_KERNEL=5"},
    {"union + pairs, split", "KN_CUDA_UNION_KERNEL=6"},
    {"union + pairs, split4", "KN_CUDA_UNION_KERNEL=7"},
    {"union + pairs, previous default", "KN_CUDA_UNION_RARE=0 KN_CUDA_PF_MERGE=0 KN_CUDA_UNION_PLAN=0"},
    {"union + pairs, rare", "KN_CUDA_UNION_RARE=1 KN_CUDA_PF_MERGE=0"},
    {"union + pairs, row merge", "KN_CUDA_UNION_RARE=0 KN_CUDA_PF_MERGE=1"},
    {"union + pairs, rare + row merge", "KN_CUDA_UNION_RARE=1 KN_CUDA_PF_MERGE=1"},
    {"pairs only, row merge", "KN_CUDA_PREFILL_UNION=0 KN_CUDA_PF_MERGE=1"},
    {"union everywhere, plain", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=0"},
    {"union everywhere, pingpong", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=2"},
    {"union everywhere, pingpong fast", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=3"},
    {"union everywhere, fast", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=4"},
    {"union everywhere, pingpong S fast", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=5"},
    {"union everywhere, split", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=6"},
    {"union everywhere, split4", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=7"},
    {"union everywhere, rare", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_RARE=1"},
    {"union + pairs at 40%", "KN_CUDA_UNION_MIN=40"},
    {"union + pairs, lookahead", "KN_CUDA_UNION_KERNEL=8"},
    {"union everywhere, lookahead", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_KERNEL=8"},
    {"union + pairs, lookahead, no rare", "KN_CUDA_UNION_KERNEL=8 KN_CUDA_UNION_RARE=0"},
    {"union + pairs, plan v0", "KN_CUDA_UNION_PLAN=0"},
    {"union + pairs, dynamic order", "KN_CUDA_UNION_DYN=1"},
    {"union + pairs, lookahead + dynamic order", "KN_CUDA_UNION_KERNEL=8 KN_CUDA_UNION_DYN=1"},
    {"union + pairs, pair-path prefetch", "KN_CUDA_PF_PREFETCH=1"},
    {"union + pairs, Q prefetch", "KN_CUDA_UNION_QPF=1"},
    {"union + pairs, both prefetches", "KN_CUDA_PF_PREFETCH=1 KN_CUDA_UNION_QPF=1"},
    {"pairs only, pair-path prefetch", "KN_CUDA_PREFILL_UNION=0 KN_CUDA_PF_PREFETCH=1"},
    {"union + pairs, rare cost 2", "KN_CUDA_UNION_RARE_COST=2"},
    {"union + pairs, rare cost 4", "KN_CUDA_UNION_RARE_COST=4"},
    {"union + pairs, rare cap 10%", "KN_CUDA_UNION_RARE_CAP=10"},
    {"union + pairs, rare cap 40%", "KN_CUDA_UNION_RARE_CAP=40"},
    {"union + pairs, rare cap 100%", "KN_CUDA_UNION_RARE_CAP=100"},
    {"union + pairs, rare prefetch", "KN_CUDA_UNION_RPF=1"},
    {"diag: default without pair attention", "KN_CUDA_PF_DIAG_SKIP=1"},
    {"diag: default without union kernel", "KN_CUDA_PF_DIAG_SKIP=2"},
    {"diag: default without either", "KN_CUDA_PF_DIAG_SKIP=3"},
    {"pairs only, wgmma pairs", "KN_CUDA_PREFILL_UNION=0 KN_CUDA_PF_WGMMA=1"},
    {"union + pairs, wgmma pairs", "KN_CUDA_PF_WGMMA=1"},
    {"union + pairs, wgmma pairs, rare cap 100%", "KN_CUDA_PF_WGMMA=1 KN_CUDA_UNION_RARE_CAP=100"},
    {"union + pairs, wgmma rare pairs", "KN_CUDA_PF_WGMMA=2"},
    {"union + pairs, wgmma rare pairs, rare prefetch", "KN_CUDA_PF_WGMMA=2 KN_CUDA_UNION_RPF=1"},
    {"union + pairs, cp.async ring (previous default)", "KN_CUDA_UNION_TMA=0"},
    {"union + pairs, cp.async ring, wgmma rare pairs, rare prefetch",
     "KN_CUDA_UNION_TMA=0 KN_CUDA_PF_WGMMA=2 KN_CUDA_UNION_RPF=1"},
    {"union everywhere, cp.async ring", "KN_CUDA_UNION_MIN=0 KN_CUDA_UNION_TMA=0"},
};
enum {
    PF_R_PAIRS = 0,
    PF_R_PLAIN = 3,
    PF_R_PP = 5,
    PF_R_PP_FAST = 6,
    PF_R_FAST = 7,
    PF_R_PPS_FAST = 8,
    PF_R_SPLIT = 9,
    PF_R_SPLIT4 = 10,
    PF_R_OLD = 11,
    PF_R_RARE = 12,
    PF_R_ROWM = 13,
    PF_R_RARE_ROWM = 14,
    PF_R_PAIRS_ROWM = 15,
    PF_R_OVL = 4,
    PF_R_LA = 25,
    PF_R_LA_NORARE = 27,
    PF_R_PLAN0 = 28,
    PF_R_DYN = 29,
    PF_R_LA_DYN = 30,
    PF_R_PFX = 31,
    PF_R_QPF = 32,
    PF_R_PFX_QPF = 33,
    PF_R_PAIRS_PFX = 34,
    PF_R_COST2 = 35,
    PF_R_COST4 = 36,
    PF_R_CAP10 = 37,
    PF_R_CAP40 = 38,
    PF_R_CAP100 = 39,
    PF_R_RPF = 40,
    PF_R_DIAG_NOPAIR = 41,
    PF_R_DIAG_NOUNION = 42,
    PF_R_DIAG_NEITHER = 43,
    PF_R_PW_PAIRS = 44,
    PF_R_PW = 45,
    PF_R_PW_CAP100 = 46,
    PF_R_PW2 = 47,
    PF_R_PW2_RPF = 48,
    PF_R_CPA = 49,
    PF_R_CPA_PW2_RPF = 50,
    PF_R_CPA_ALL = 51
};

/* the value route r gives knob `name`, copied to val (0: the route leaves it at the library default) */
static int pf_route_knob(const struct pf_route *r, const char *name, char val[16])
{
    char n[64];
    for (const char *k = r->knobs; knob_next(&k, n, val);)
        if (!strcmp(n, name)) return 1;
    return 0;
}

/* whether route r sets knob `name` to `val` */
static int pf_route_sets(const struct pf_route *r, const char *name, const char *val)
{
    char v[16];
    return pf_route_knob(r, name, v) && !strcmp(v, val);
}

/* KN_BENCH_PF_KERNELS=<digits>: measure only routes whose union kernel variant (KN_CUDA_UNION_KERNEL) is
 * listed (or unset); KN_BENCH_PF_NODYN=1: none with the dynamic item order (KN_CUDA_UNION_DYN set);
 * KN_BENCH_PF_ONLY=<i,j,...>: only these routes (indices into g_pf_routes) */
static int pf_route_on(const struct pf_route *r)
{
    const char *k = getenv("KN_BENCH_PF_KERNELS"), *only = getenv("KN_BENCH_PF_ONLY");
    char v[16];
    if (pf_route_knob(r, "KN_CUDA_UNION_DYN", v) && getenv("KN_BENCH_PF_NODYN")) return 0;
    if (only) {
        char list[256], key[16];
        snprintf(list, sizeof list, ",%s,", only);
        snprintf(key, sizeof key, ",%d,", (int)(r - g_pf_routes));
        if (!strstr(list, key)) return 0;
    }
    return !k || !pf_route_knob(r, "KN_CUDA_UNION_KERNEL", v) || strchr(k, v[0]) != NULL;
}

/* every prefill knob unset, then route r's set (NULL: the library defaults) */
static void pf_set_route(const struct pf_route *r)
{
    static const char *const knobs[] = {KN_CUDA_PF_KNOBS(KN_CUDA_KNOB_NAME) NULL};
    env_set(knobs, sizeof knobs / sizeof knobs[0] - 1, r ? r->knobs : NULL);
}

/* KN_BENCH_PF_REPEAT=n (1-9, default 1): every route of a configuration timed in n interleaved rounds, the
 * median reported (with the lowest and highest when n > 1), so drifts of the machine during the process hit
 * every route alike */
static int pf_repeats(void)
{
    const char *e = getenv("KN_BENCH_PF_REPEAT");
    const int n = e ? atoi(e) : 1;
    return n < 1 ? 1 : n > 9 ? 9 : n;
}

static double pf_median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            const double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* whether a route takes the hybrid route (KN_CUDA_UNION_RARE unset means the library default: on) */
static int pf_route_hybrid(const struct pf_route *r)
{
    return !pf_route_sets(r, "KN_CUDA_PREFILL_UNION", "0") && !pf_route_sets(r, "KN_CUDA_UNION_RARE", "0");
}

static void bench_prefill(void)
{
    printf(
        "== sparse prefill attention (given selections): tile-union wgmma route and KV-block-major pairs\n");
    static const int64_t Ls[] = {65536, 131072, 262144};
    enum { NRT = sizeof g_pf_routes / sizeof g_pf_routes[0] };
    const int reps = pf_repeats();
    for (int li = 0; li < 3; li++) {
        const int64_t L = g_quick ? Ls[li] / 16 : Ls[li];
        struct pf_arg a;
        pf_setup(&a, L, 16384);
        int32_t *sel = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)M3.n_kv * L * M3.topk);
        for (int structured = 1; structured >= 0; structured--) {
            double overlap = make_prefill_selection(sel, L, structured, 0.08);
            double flops = sparse_flops(sel, L), eff = 0, computed = 0;
            const double taken = union_stats(sel, L, 50, &eff, &computed);
            pf_upload_sel(&a, sel);
            a.what = 0;
            char cfg[96];
            snprintf(cfg, sizeof cfg, "L %lldK %s", (long long)(L / 1024),
                     structured ? "structured" : "random");
            if (structured) emit("sparse prefill", cfg, "shared w/ tile", 100.0 * overlap, "%");
            emit("sparse prefill", cfg, "union efficiency", 100.0 * eff, "%");
            emit("sparse prefill", cfg, "rows by union at 50%", 100.0 * taken, "%");
            double eff_h = 0, computed_h = 0;
            const double rare_frac = rare_stats(sel, L, &eff_h, &computed_h);
            emit("sparse prefill", cfg, "hybrid: rare pairs", 100.0 * rare_frac, "%");
            emit("sparse prefill", cfg, "hybrid: union efficiency", 100.0 * eff_h, "%");
            /* 1: the routes that leave KN_CUDA_UNION_TMA unset load whole blocks by TMA */
            pf_set_route(NULL);
            emit("sparse prefill", cfg, "TMA ring by default", (kn_cuda_prefill_tma(&M3, &a.c) & 1), "");
            static double ms_r[NRT][9];
            for (int rep = 0; rep < reps; rep++)
                for (size_t r = 0; r < NRT; r++) {
                    if (!pf_route_on(&g_pf_routes[r])) continue;
                    pf_set_route(&g_pf_routes[r]);
                    ms_r[r][rep] = time_ms(run_pf, &a, 1, g_quick ? 2 : 5);
                }
            for (size_t r = 0; r < NRT; r++) {
                if (!pf_route_on(&g_pf_routes[r])) continue;
                const double ms = pf_median(ms_r[r], reps); /* sorts: [0] fastest */
                char name[128];
                snprintf(name, sizeof name, "%s: time", g_pf_routes[r].name);
                emit("sparse prefill", cfg, name, ms, "ms");
                snprintf(name, sizeof name, "%s: effective", g_pf_routes[r].name);
                emit("sparse prefill", cfg, name, flops / (ms * 1e-3) / 1e12, "TFLOP/s");
                if (reps > 1) {
                    snprintf(name, sizeof name, "%s: effective, slowest round", g_pf_routes[r].name);
                    emit("sparse prefill", cfg, name, flops / (ms_r[r][reps - 1] * 1e-3) / 1e12, "TFLOP/s");
                    snprintf(name, sizeof name, "%s: effective, fastest round", g_pf_routes[r].name);
                    emit("sparse prefill", cfg, name, flops / (ms_r[r][0] * 1e-3) / 1e12, "TFLOP/s");
                }
                if (pf_route_sets(&g_pf_routes[r], "KN_CUDA_UNION_MIN", "0")) {
                    /* the union route's dense-equivalent FLOPs over the whole time (the hybrid's pairs
                     * included in the time, not in the FLOPs) */
                    snprintf(name, sizeof name, "%s: computed", g_pf_routes[r].name);
                    emit("sparse prefill", cfg, name,
                         (pf_route_hybrid(&g_pf_routes[r]) ? computed_h : computed) / (ms * 1e-3) / 1e12,
                         "TFLOP/s");
                }
            }
            pf_set_route(NULL);
        }
        free(sel);
        pf_free(&a);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* one MSA layer (index + select + attend) against dense attention, same shapes, same run                 */

struct layer_dec_arg {
    struct dbatch b;
    struct kn_cuda_cache c;
    float *qi[4];
    void *q, *out, *ws;
    size_t ws_bytes;
    int32_t *sel;
    int dense;
};

static void run_layer_dec(void *p, int it)
{
    struct layer_dec_arg *a = (struct layer_dec_arg *)p;
    if (a->dense) {
        KC(kn_cuda_dense_attention(&M3, &a->b.qb, &a->c, a->q, a->out, a->ws, a->ws_bytes, KN_PATH_DECODE,
                                   g_stream, &g_err));
        return;
    }
    /* index + top-k + attention; the route (fused or select-then-attend) follows the KN_CUDA_* knobs */
    KC(kn_cuda_msa_select_attend(&M3, &a->b.qb, &a->c, a->qi[it % 4], a->q, a->sel, M3.topk, a->out, a->ws,
                                 a->ws_bytes, KN_PATH_AUTO, g_stream, &g_err));
}

/* The MSA decode routes compared in one run: the previous one (index with a static split, top-k kernel,
 * split-K attention, merge kernel) and the fused one with its options, each a set of KN_CUDA_* knobs on top
 * of the defaults. b2b: also timed back to back and replayed from graphs. */
struct layer_route {
    const char *name, *env; /* env: "KEY=VAL KEY=VAL" */
    int b2b;
};
static const struct layer_route g_routes[] = {
    {"unfused", "KN_CUDA_FUSED_DECODE=0", 1},
    {"fused", "", 1}, /* the default: up to 16 splits, one CTA per SM, partials pushed to the head owner */
    {"fused 8", "KN_CUDA_FUSED_SPLIT=8", 1},
    {"fused 4", "KN_CUDA_FUSED_SPLIT=4", 1},      /* fewer splits: for batches that fill the GPU with rows */
    {"fused, waves", "KN_CUDA_FUSED_WAVES=1", 1}, /* the previous split count: 2 CTAs per SM, any waves */
    {"fused 3", "KN_CUDA_FUSED_SPLIT=3", 1},
    {"fused 2", "KN_CUDA_FUSED_SPLIT=2", 1},
    {"fused 1", "KN_CUDA_FUSED_SPLIT=1", 1},
    {"fused, pull merge", "KN_CUDA_MERGE_PUSH=0",
     1}, /* the previous merge: two cluster barriers, peers read */
    {"fused, serial merge", "KN_CUDA_MERGE_PUSH=0 KN_CUDA_MERGE_SERIAL=1", 0},
    {"fused 8, serial merge", "KN_CUDA_FUSED_SPLIT=8 KN_CUDA_MERGE_PUSH=0 KN_CUDA_MERGE_SERIAL=1", 0},
    {"fused, no PDL", "KN_CUDA_PDL=0", 0},
    {"fused, dyn index", "KN_CUDA_STEAL=1", 0},
    {"fused packed", "KN_CUDA_FUSED_PACK=1", 0},
    {"fused, idx even", "KN_CUDA_IDX=1", 1},     /* persistent scan, pages split evenly over 2 x SMs CTAs */
    {"fused, idx pages", "KN_CUDA_IDX=2", 1},    /* one short CTA per page, hardware-scheduled */
    {"fused, late", "KN_CUDA_IDX_TRIGGER=1", 1}, /* dependents launched when the scan's CTAs finish */
    {"fused, topk branchy", "KN_CUDA_TOPK_BF=0", 1}, /* top-k's previous gather, a branch per value */
    {"fused, idx chunk", "KN_CUDA_IDX=0", 1},        /* the persistent scan (bf16: the previous default) */
    {"fused, idx stream", "KN_CUDA_IDX=3", 1},       /* a persistent grid-stride stream over (query, page) */
    /* selection split over the cluster's CTAs (kn_msa_decode.cu), the lists merged by rank (1) or by one warp
     * (2) */
    {"fused, topk split", "KN_CUDA_TOPK_SPLIT=1", 1},
    {"fused, topk split2", "KN_CUDA_TOPK_SPLIT=2", 1},
    /* the ring scan (the default) with per-lane copies, and with 16-token FP8 steps (bf16: as the default) */
    {"fused, idx ring lanes", "KN_CUDA_IDX=4 KN_CUDA_IDX_LINES=0", 1},
    {"fused, idx ring tile16", "KN_CUDA_IDX=4 KN_CUDA_IDX_TILE=1", 1},
    /* the index keys copied under the normal L2 policy (the previous default; now evict-first,
     * kn_msa_index_decode_ring.cu) */
    {"fused, idx normal L2", "KN_CUDA_IDX_EVICT=0", 1},
    /* the previous tail (4 warps per CTA, top-k's store per value), and the default (8 warps where a row has
     * more than 8 splits, top-k's gather by candidate mask) with one of its changes undone */
    {"fused, previous tail", "KN_CUDA_TAIL_WARPS=4 KN_CUDA_TOPK_BF=1", 1},
    {"fused, 4 warps", "KN_CUDA_TAIL_WARPS=4", 1},
    {"fused, topk store", "KN_CUDA_TOPK_BF=1", 1},
    /* the shared-memory limits raised by a driver call at every launch (before kn_smem_attr's table) */
    {"fused, attr each call", "KN_CUDA_ATTR_MEMO=0", 1},
};

/* KN_BENCH_DEC_ROUTES="name|name|...": time and profile only these routes (all when unset), so that a short
 * device run can repeat a few of them in several processes */
static int route_on(const struct layer_route *r)
{
    return name_listed("KN_BENCH_DEC_ROUTES", r->name);
}

static void set_route(const struct layer_route *r)
{
    static const char *knobs[] = {"KN_CUDA_FUSED_DECODE", "KN_CUDA_STEAL",       "KN_CUDA_PDL",
                                  "KN_CUDA_FUSED_SPLIT",  "KN_CUDA_FUSED_PACK",  "KN_CUDA_MERGE_SERIAL",
                                  "KN_CUDA_IDX",          "KN_CUDA_IDX_TRIGGER", "KN_CUDA_TOPK_BF",
                                  "KN_CUDA_TOPK_SPLIT",   "KN_CUDA_MERGE_PUSH",  "KN_CUDA_IDX_TILE",
                                  "KN_CUDA_IDX_LINES",    "KN_CUDA_IDX_EVICT",   "KN_CUDA_TAIL_WARPS",
                                  "KN_CUDA_FUSED_WAVES",  "KN_CUDA_ATTR_MEMO"};
    env_set(knobs, sizeof knobs / sizeof knobs[0], r ? r->env : NULL);
}

/* ---- where the time of one decode layer goes: timestamps inside the kernels (kn_decode_prof.cuh) ---- */

#define PROF_IDX_WARPS_MAX (8192 * 8)
#define PROF_DEC_CTAS_MAX 4096
#define PROF_ITERS 25

static int cmp_d(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median_of(double *v, int n)
{
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return v[n / 2];
}

/* Phase times of one layer call (index scan + fused tail), microseconds from the first index warp's entry,
 * medians over PROF_ITERS synced calls. Fused phases: per CTA, max over CTAs (the critical path); index
 * exit: median and last warp; phase durations from clock64, median over CTAs. */
enum {
    PF_IDX_ENTRY_LAST,
    PF_IDX_FIRST_MED,
    PF_IDX_EXIT_P10,
    PF_IDX_EXIT_MED,
    PF_IDX_EXIT_LAST,
    PF_DEC_ENTRY_FIRST,
    PF_DEC_ENTRY_LAST,
    PF_DEC_WAITED_LAST,
    PF_DEC_SELECTED_LAST,
    PF_DEC_PAGES_LAST,
    PF_DEC_COMBINED_LAST,
    PF_DEC_MERGED_LAST,
    PF_DEC_EXIT_LAST,
    PF_DEC_EARLY,  /* fused CTAs that entered before the last index warp left */
    PF_DEC_SMS,    /* distinct SMs of the fused CTAs */
    PF_CYC_TOPK,   /* clock64 durations, median CTA: waited -> selected */
    PF_CYC_PAGES,  /* selected -> pages */
    PF_CYC_COMB,   /* pages -> combined */
    PF_CYC_MERGE,  /* combined -> merged (cluster barrier + remote loads) */
    PF_CYC_EXIT,   /* merged -> exit (last cluster barrier) */
    PF_TK_LOAD,    /* top-k phases (globaltimer, median CTA): waited -> scores loaded */
    PF_TK_BOUND,   /* -> bound T known (warp sorts + barrier) */
    PF_TK_GATHER,  /* -> candidates gathered (prefix sum + barrier) */
    PF_TK_RANK,    /* -> ranked (barrier) */
    PF_TK_XCHG,    /* split selection: ranked -> every slice's list received */
    PF_TK_MERGE,   /* split selection: lists received -> selected (merged) */
    PF_MG_RECV,    /* pushed merge: combined -> owned partials received */
    PF_TK_CAND,    /* top-k candidates (local slice or whole row) */
    PF_LM_COUNT,   /* split selection, merging the lists: received -> counted */
    PF_LM_COMPACT, /* -> compacted */
    PF_LM_RANK,    /* received -> ranked (the whole merge) */
    PF_LM_SURV,    /* survivors of the lists' bound */
    PF_LM_DONE,    /* ranked -> selected (count, sel_out, barrier) */
    PF_TIMER_STEP, /* smallest nonzero globaltimer difference seen (its resolution) */
    PF_N
};
static const char *const g_pf_names[PF_N] = {"idx last warp entry",     "idx first tile (median warp)",
                                             "idx exit 10th pct",       "idx exit median",
                                             "idx exit last",           "tail first CTA entry",
                                             "tail last CTA entry",     "tail wait released (last)",
                                             "tail selected (last)",    "tail pages done (last)",
                                             "tail combined (last)",    "tail merged (last)",
                                             "tail exit (last)",        "tail CTAs entered early",
                                             "tail distinct SMs",       "tail top-k (cycles->us)",
                                             "tail pages (cycles->us)", "tail combine (cycles->us)",
                                             "tail merge (cycles->us)", "tail exit (cycles->us)",
                                             "tail top-k: loads",       "tail top-k: bound",
                                             "tail top-k: gather",      "tail top-k: rank",
                                             "tail top-k: lists in",    "tail top-k: lists merged",
                                             "tail merge: partials in", "tail top-k: candidates",
                                             "tail lists: counted",     "tail lists: compacted",
                                             "tail lists: ranked",      "tail lists: survivors",
                                             "tail lists: to selected", "globaltimer step"};

static void layer_profile(struct layer_dec_arg *a, const char *label, const char *cfg, double clk_ghz)
{
    unsigned long long *di =
        (unsigned long long *)dmalloc(sizeof(unsigned long long) * PROF_IDX_WARPS_MAX * 4);
    unsigned long long *dd =
        (unsigned long long *)dmalloc(sizeof(unsigned long long) * PROF_DEC_CTAS_MAX * KN_PROF_CTA_SLOTS);
    unsigned long long *hi =
        (unsigned long long *)hmalloc(sizeof(unsigned long long) * PROF_IDX_WARPS_MAX * 4);
    unsigned long long *hd =
        (unsigned long long *)hmalloc(sizeof(unsigned long long) * PROF_DEC_CTAS_MAX * KN_PROF_CTA_SLOTS);
    double *acc = (double *)hmalloc(sizeof(double) * PF_N * PROF_ITERS);
    /* scratch for the index warps' times and for 18 per-CTA series of the tail */
    const size_t ntmp =
        PROF_IDX_WARPS_MAX > 18 * PROF_DEC_CTAS_MAX ? PROF_IDX_WARPS_MAX : 18 * PROF_DEC_CTAS_MAX;
    double *tmp = (double *)hmalloc(sizeof(double) * ntmp);
    KC(kn_cuda_index_prof_set(di));
    KC(kn_cuda_decode_prof_set(dd));
    for (int w = 0; w < 3; w++) run_layer_dec(a, w);
    CK(cudaDeviceSynchronize());
    int good = 0;
    for (int it = 0; it < PROF_ITERS; it++) {
        CK(cudaMemset(di, 0, sizeof(unsigned long long) * PROF_IDX_WARPS_MAX * 4));
        CK(cudaMemset(dd, 0, sizeof(unsigned long long) * PROF_DEC_CTAS_MAX * KN_PROF_CTA_SLOTS));
        CK(cudaDeviceSynchronize());
        run_layer_dec(a, it);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hi, di, sizeof(unsigned long long) * PROF_IDX_WARPS_MAX * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hd, dd, sizeof(unsigned long long) * PROF_DEC_CTAS_MAX * KN_PROF_CTA_SLOTS,
                      cudaMemcpyDeviceToHost));
        double *r = acc + (size_t)good * PF_N;
        unsigned long long t0 = ~0ull, ent_last = 0, ex_last = 0, step = ~0ull;
        int nw = 0, nf = 0;
        for (int w = 0; w < PROF_IDX_WARPS_MAX; w++) {
            const unsigned long long *x = hi + (size_t)w * 4;
            if (!x[0]) continue;
            nw++;
            if (x[0] < t0) t0 = x[0];
            if (x[0] > ent_last) ent_last = x[0];
            if (x[2] > ex_last) ex_last = x[2];
        }
        if (!nw) continue;
        for (int w = 1; w < PROF_IDX_WARPS_MAX && w < 4096; w++) {
            const unsigned long long e0 = hi[(size_t)(w - 1) * 4], e1 = hi[(size_t)w * 4];
            if (e0 && e1 && e0 != e1) {
                unsigned long long d = e0 > e1 ? e0 - e1 : e1 - e0;
                if (d < step) step = d;
            }
        }
        r[PF_IDX_ENTRY_LAST] = (ent_last - t0) * 1e-3;
        r[PF_IDX_EXIT_LAST] = (ex_last - t0) * 1e-3;
        nf = 0;
        for (int w = 0; w < PROF_IDX_WARPS_MAX; w++) {
            const unsigned long long *x = hi + (size_t)w * 4;
            if (x[0] && x[1]) tmp[nf++] = (x[1] - t0) * 1e-3;
        }
        r[PF_IDX_FIRST_MED] = median_of(tmp, nf);
        nf = 0;
        for (int w = 0; w < PROF_IDX_WARPS_MAX; w++) {
            const unsigned long long *x = hi + (size_t)w * 4;
            if (x[0] && x[1]) tmp[nf++] = (x[2] - t0) * 1e-3;
        }
        r[PF_IDX_EXIT_MED] = median_of(tmp, nf);
        r[PF_IDX_EXIT_P10] = nf ? tmp[nf / 10] : NAN;
        /* fused CTAs */
        unsigned long long last[KN_PROF_PHASES] = {0}, first_entry = ~0ull;
        int nc = 0, early = 0;
        static unsigned char sm_seen[1024];
        memset(sm_seen, 0, sizeof sm_seen);
        int sms = 0;
        double *cyc[18];
        for (int k = 0; k < 18; k++) cyc[k] = tmp + (size_t)k * PROF_DEC_CTAS_MAX;
        for (int c = 0; c < PROF_DEC_CTAS_MAX; c++) {
            const unsigned long long *x = hd + (size_t)c * KN_PROF_CTA_SLOTS;
            if (!x[0]) continue;
            if (x[0] < first_entry) first_entry = x[0];
            for (int ph = 0; ph < KN_PROF_PHASES; ph++)
                if (x[ph] > last[ph]) last[ph] = x[ph];
            early += x[0] < ex_last;
            const unsigned sm = (unsigned)(x[KN_PROF_SMID] & 1023);
            if (!sm_seen[sm]) sm_seen[sm] = 1, sms++;
            cyc[0][nc] = (double)(x[8 + 2] - x[8 + 1]);
            cyc[1][nc] = (double)(x[8 + 3] - x[8 + 2]);
            cyc[2][nc] = x[8 + 4] ? (double)(x[8 + 4] - x[8 + 3]) : 0.0;
            cyc[3][nc] = x[8 + 5] ? (double)(x[8 + 5] - x[8 + 4]) : 0.0;
            cyc[4][nc] = x[8 + 5] ? (double)(x[8 + 6] - x[8 + 5]) : 0.0;
            for (int k = 0; k < 4; k++) {
                const unsigned long long prev = k ? x[KN_PROF_TOPK + k - 1] : x[KN_PROF_WAITED];
                cyc[5 + k][nc] =
                    x[KN_PROF_TOPK + k] && prev ? (double)(x[KN_PROF_TOPK + k] - prev) * 1e-3 : NAN;
            }
            const unsigned long long xc = x[KN_PROF_XCHG], rv = x[KN_PROF_RECV];
            cyc[9][nc] = xc && x[KN_PROF_TOPK + 3] ? (double)(xc - x[KN_PROF_TOPK + 3]) * 1e-3 : NAN;
            cyc[10][nc] = xc && x[KN_PROF_SELECTED] ? (double)(x[KN_PROF_SELECTED] - xc) * 1e-3 : NAN;
            cyc[11][nc] = rv && x[KN_PROF_COMBINED] ? (double)(rv - x[KN_PROF_COMBINED]) * 1e-3 : NAN;
            cyc[12][nc] = x[KN_PROF_TOPK] ? (double)x[KN_PROF_TOPK_CAND] : NAN;
            for (int k = 0; k < 3; k++) {
                const unsigned long long t = x[KN_PROF_MERGE + k];
                cyc[13 + k][nc] = t && xc ? (double)(t - (k == 1 ? x[KN_PROF_MERGE] : xc)) * 1e-3 : NAN;
            }
            cyc[16][nc] = x[KN_PROF_MERGE] ? (double)x[KN_PROF_MERGE + 3] : NAN;
            cyc[17][nc] = x[KN_PROF_MERGE + 2] && x[KN_PROF_SELECTED]
                              ? (double)(x[KN_PROF_SELECTED] - x[KN_PROF_MERGE + 2]) * 1e-3
                              : NAN;
            nc++;
        }
        if (!nc) continue;
        r[PF_DEC_ENTRY_FIRST] = ((double)first_entry - (double)t0) * 1e-3;
        const int map[7] = {PF_DEC_ENTRY_LAST,    PF_DEC_WAITED_LAST, PF_DEC_SELECTED_LAST, PF_DEC_PAGES_LAST,
                            PF_DEC_COMBINED_LAST, PF_DEC_MERGED_LAST, PF_DEC_EXIT_LAST};
        for (int ph = 0; ph < KN_PROF_PHASES; ph++)
            r[map[ph]] = last[ph] ? ((double)last[ph] - (double)t0) * 1e-3 : NAN;
        r[PF_DEC_EARLY] = early;
        r[PF_DEC_SMS] = sms;
        for (int k = 0; k < 5; k++) r[PF_CYC_TOPK + k] = median_of(cyc[k], nc) / (clk_ghz * 1e3);
        for (int k = 0; k < 4; k++) r[PF_TK_LOAD + k] = median_of(cyc[5 + k], nc);
        for (int k = 0; k < 3; k++) r[PF_TK_XCHG + k] = median_of(cyc[9 + k], nc);
        for (int k = 0; k < 6; k++) r[PF_TK_CAND + k] = median_of(cyc[12 + k], nc);
        r[PF_TIMER_STEP] = step == ~0ull ? NAN : (double)step;
        good++;
        if (g_prof_raw && it == PROF_ITERS - 1) {
            /* ns from t0: index warps (entry, first tile, exit, SM, pages), fused CTAs (phases, SM) */
            for (int w = 0; w < PROF_IDX_WARPS_MAX; w++) {
                const unsigned long long *x = hi + (size_t)w * 4;
                if (!x[0]) continue;
                fprintf(g_prof_raw, "%s\tidx\t%d\t%lld\t%lld\t%lld\t%u\t%u\n", label, w,
                        (long long)(x[0] - t0), x[1] ? (long long)(x[1] - t0) : -1, (long long)(x[2] - t0),
                        (unsigned)(x[3] & 0xffffffffu), (unsigned)(x[3] >> 32));
            }
            for (int c = 0; c < PROF_DEC_CTAS_MAX; c++) {
                const unsigned long long *x = hd + (size_t)c * KN_PROF_CTA_SLOTS;
                if (!x[0]) continue;
                fprintf(g_prof_raw, "%s\ttail\t%d", label, c);
                for (int ph = 0; ph < KN_PROF_PHASES; ph++)
                    fprintf(g_prof_raw, "\t%lld", x[ph] ? (long long)x[ph] - (long long)t0 : -1);
                for (int k = 0; k < 4; k++)
                    fprintf(g_prof_raw, "\t%lld",
                            x[KN_PROF_TOPK + k] ? (long long)x[KN_PROF_TOPK + k] - (long long)t0 : -1);
                fprintf(g_prof_raw, "\t%u\n", (unsigned)x[KN_PROF_SMID]);
            }
            fflush(g_prof_raw);
        }
    }
    KC(kn_cuda_index_prof_set(NULL));
    KC(kn_cuda_decode_prof_set(NULL));
    char name[128];
    for (int k = 0; k < PF_N; k++) {
        for (int it = 0; it < good; it++) tmp[it] = acc[(size_t)it * PF_N + k];
        snprintf(name, sizeof name, "%s: %s", label, g_pf_names[k]);
        emit("layer prof", cfg, name, median_of(tmp, good),
             k == PF_DEC_EARLY || k == PF_DEC_SMS || k == PF_TK_CAND || k == PF_LM_SURV ? ""
             : k == PF_TIMER_STEP                                                       ? "ns"
                                                                                        : "us");
    }
    cudaFree(di), cudaFree(dd);
    free(hi), free(hd), free(acc), free(tmp);
}

static void bench_layer_decode(int prof_only)
{
    printf("== one MSA decode layer (index + top-k + sparse attention) vs dense attention, by route\n");
    /* KN_BENCH_DEC_CTX=tokens (a multiple of the block, 4K-1M): the context of every sequence, e.g. the
     * whole-model bench's 32K */
    const char *ce = getenv("KN_BENCH_DEC_CTX");
    const int64_t cx = ce ? atoll(ce) : 0;
    const int64_t ctx = cx >= 4096 && cx <= 1048576 && cx % M3.block == 0 ? cx : g_quick ? 65536 : 1048576;
    const int32_t nb = (int32_t)(ctx / M3.block);
    /* KN_BENCH_DEC_BATCH=n (1-64, default 1): n sequences at the same context sharing their K/V and index
     * pages (one block table for all), one decode query each */
    const char *be = getenv("KN_BENCH_DEC_BATCH");
    const int32_t batch = be && atoi(be) >= 1 && atoi(be) <= 64 ? atoi(be) : 1;
    /* KN_BENCH_DEC_OWN=1: every sequence has its own pages (np = batch x nb of them) */
    const int own = getenv("KN_BENCH_DEC_OWN") != NULL && batch > 1;
    const int32_t np = own ? nb * batch : nb;
    struct layer_dec_arg a;
    memset(&a, 0, sizeof(a));
    const size_t kv = (size_t)np * M3.block * M3.n_kv * M3.head_dim * 2;
    a.c.k = dmalloc(kv);
    a.c.v = dmalloc(kv);
    a.c.idx = dmalloc((size_t)np * M3.block * M3.idx_dim * 2);
    a.c.idx_dtype = KN_IDX_BF16;
    a.c.n_pages = np;
    fill_bf16(a.c.k, (int64_t)(kv / 2), 41, 1.0f);
    fill_bf16(a.c.v, (int64_t)(kv / 2), 42, 1.0f);
    fill_bf16(a.c.idx, (int64_t)np * M3.block * M3.idx_dim, 43, 1.0f);
    uint8_t *idx8 = (uint8_t *)dmalloc((size_t)np * M3.block * M3.idx_dim);
    float *sc8 = (float *)dmalloc((size_t)np * M3.block * 4);
    k_quant_fp8<<<(unsigned)((np * (int64_t)M3.block + 7) / 8), 256>>>(
        (const uint16_t *)a.c.idx, (int64_t)np * M3.block, M3.idx_dim, idx8, sc8);
    CK(cudaGetLastError());
    dbatch_pages(&a.b, batch, nb, ctx, own);
    for (int k = 0; k < 4; k++) {
        a.qi[k] = (float *)dmalloc(sizeof(float) * batch * M3.n_idx_heads * M3.idx_dim);
        fill_f32(a.qi[k], (int64_t)batch * M3.n_idx_heads * M3.idx_dim, 44 + k, 1.0f);
    }
    a.q = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
    a.out = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
    fill_bf16(a.q, (int64_t)batch * M3.n_heads * M3.head_dim, 49, 1.0f);
    a.sel = (int32_t *)dmalloc(sizeof(int32_t) * batch * M3.n_kv * M3.topk);
    size_t w1 = kn_cuda_msa_select_attend_ws(&M3, &a.b.qb, M3.topk, KN_PATH_AUTO);
    size_t w3 = kn_cuda_dense_attention_ws(&M3, &a.b.qb, KN_PATH_DECODE);
    a.ws_bytes = w1 > w3 ? w1 : w3;
    a.ws = dmalloc(a.ws_bytes);
    char cfg[96];
    snprintf(cfg, sizeof cfg, "decode ctx %lldK batch %d%s", (long long)(ctx / 1024), (int)batch,
             own ? " own pages" : "");
    const int iters = g_quick ? 5 : 50;
    const struct kn_cuda_cache cb = a.c;
    struct kn_cuda_cache c8 = a.c;
    c8.idx = idx8;
    c8.idx_scale = sc8;
    c8.idx_dtype = KN_IDX_FP8;
    const int n_routes = (int)(sizeof(g_routes) / sizeof(g_routes[0]));
    char name[96];
    int clk_khz = 0;
    CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));

    if (!prof_only) {
        /* synced: each call bracketed by events and waited for */
        /* dense only at batch 1: with n sequences sharing one cache it would read n x 2 GB per call */
        a.dense = 1;
        double dense_ms = batch == 1 ? time_ms(run_layer_dec, &a, 3, iters) : NAN;
        if (batch == 1) {
            emit("layer", cfg, "dense (ours)", dense_ms * 1e3, "us");
            emit("layer", cfg, "dense bandwidth", (double)kv * 2 / (dense_ms * 1e-3) / 1e12, "TB/s");
        }
        a.dense = 0;
        /* two passes over the routes, the second reported: in four of five H200 runs the first routes timed
         * after the dense kernel read 4-5 us slower than the same route later in the process; the first
         * pass is kept as "layer pass 1" rows so that the effect stays visible */
        for (int pass = 0; pass < 2; pass++)
            for (int fp8 = 0; fp8 < 2; fp8++)
                for (int r = 0; r < n_routes; r++) {
                    if (!route_on(&g_routes[r])) continue;
                    set_route(&g_routes[r]);
                    a.c = fp8 ? c8 : cb;
                    double ms = time_ms(run_layer_dec, &a, 3, iters);
                    snprintf(name, sizeof name, "MSA %s %s", fp8 ? "fp8" : "bf16", g_routes[r].name);
                    emit(pass ? "layer" : "layer pass 1", cfg, name, ms * 1e3, "us");
                    if (pass) { /* the call's CPU time: what a synced call adds to the GPU's */
                        snprintf(name, sizeof name, "host time %s %s", fp8 ? "fp8" : "bf16",
                                 g_routes[r].name);
                        emit("layer", cfg, name, g_host_us, "us");
                    }
                    if (!pass || batch > 1) continue;
                    snprintf(name, sizeof name, "speedup %s %s", fp8 ? "fp8" : "bf16", g_routes[r].name);
                    emit("layer", cfg, name, dense_ms / ms, "x vs ours");
                }
        /* back to back (20 layers between two events), as consecutive layers of a decode step run */
        a.dense = 1;
        if (batch == 1) {
            double dense_b = time_b2b_ms(run_layer_dec, &a, 3, g_quick ? 3 : 9, 20);
            emit("layer b2b", cfg, "dense (ours)", dense_b * 1e3, "us");
        }
        a.dense = 0;
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int r = 0; r < n_routes; r++) {
                if (!g_routes[r].b2b || !route_on(&g_routes[r])) continue;
                set_route(&g_routes[r]);
                a.c = fp8 ? c8 : cb;
                double ms = time_b2b_ms(run_layer_dec, &a, 3, g_quick ? 3 : 9, 20);
                snprintf(name, sizeof name, "MSA %s %s", fp8 ? "fp8" : "bf16", g_routes[r].name);
                emit("layer b2b", cfg, name, ms * 1e3, "us");
            }
    }
    /* where the time goes, for the default route (up to 16 splits) and the 8-split one; batch 1 only (the
     * timestamp buffers are sized for it) */
    for (int fp8 = 0; fp8 < 2 && batch == 1; fp8++)
        for (int r = 0; r < n_routes; r++) {
            if (strcmp(g_routes[r].name, "fused") && strcmp(g_routes[r].name, "fused, pull merge") &&
                strcmp(g_routes[r].name, "fused, topk split2") &&
                strcmp(g_routes[r].name, "fused, idx pages") &&
                strcmp(g_routes[r].name, "fused, idx stream") &&
                strcmp(g_routes[r].name, "fused, idx normal L2") &&
                !strstr(g_routes[r].env, "KN_CUDA_TAIL") && !strstr(g_routes[r].env, "KN_CUDA_TOPK_BF=1"))
                continue;
            if (!route_on(&g_routes[r])) continue;
            set_route(&g_routes[r]);
            a.c = fp8 ? c8 : cb;
            snprintf(name, sizeof name, "%s %s", fp8 ? "fp8" : "bf16", g_routes[r].name);
            layer_profile(&a, name, cfg, clk_khz * 1e-6);
        }
    if (!prof_only) {
        /* replayed from CUDA graphs (how a serving loop would issue them); last, as the riskiest to capture
         */
        a.dense = 1;
        if (batch == 1) {
            double dense_g = time_graph_ms(run_layer_dec, &a, 1, 3, iters);
            emit("layer graph", cfg, "dense (ours)", dense_g * 1e3, "us");
        }
        a.dense = 0;
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int r = 0; r < n_routes; r++) {
                if (!g_routes[r].b2b || !route_on(&g_routes[r])) continue;
                set_route(&g_routes[r]);
                a.c = fp8 ? c8 : cb;
                double ms = time_graph_ms(run_layer_dec, &a, 4, 3, iters);
                snprintf(name, sizeof name, "MSA %s %s", fp8 ? "fp8" : "bf16", g_routes[r].name);
                emit("layer graph", cfg, name, ms * 1e3, "us");
            }
    }
    set_route(NULL);
    a.c = cb;
    dbatch_free(&a.b);
    for (int k = 0; k < 4; k++) cudaFree(a.qi[k]);
    cudaFree(a.c.k), cudaFree(a.c.v), cudaFree(a.c.idx), cudaFree(idx8), cudaFree(sc8), cudaFree(a.q);
    cudaFree(a.out), cudaFree(a.sel), cudaFree(a.ws);
}

/* The fused decode tail alone (top-k + one page per split + merge: kn_cuda_decode_fused_scores, the test
 * hook) on given index scores at 1M context, batch 1, 16 and 64 (sequences sharing one cache, scores drawn
 * at random: ~70 top-k candidates per row as with real index scores), synced and back to back, for the
 * routes of g_routes (KN_BENCH_DEC_ROUTES): the tail's routes compared without the index scan's time and
 * noise, at the batches the layer bench measures only through the scan. */
struct tail_arg {
    struct dbatch b;
    struct kn_cuda_cache c;
    float *scores;
    int32_t stride;
    void *q, *out;
    int32_t *sel;
};

static void run_tail(void *p, int it)
{
    struct tail_arg *a = (struct tail_arg *)p;
    (void)it;
    KC(kn_cuda_decode_fused_scores(&M3, &a->b.qb, &a->c, a->q, a->scores, a->stride, a->sel, M3.topk, a->out,
                                   &g_err));
}

static void bench_tail(void)
{
    printf("== the fused decode tail alone on given scores (1M context), by route\n");
    /* KN_BENCH_DEC_CTX=tokens (a multiple of the block, 4K-1M): the context of every sequence, e.g. the
     * whole-model bench's 32K */
    const char *ce = getenv("KN_BENCH_DEC_CTX");
    const int64_t cx = ce ? atoll(ce) : 0;
    const int64_t ctx = cx >= 4096 && cx <= 1048576 && cx % M3.block == 0 ? cx : g_quick ? 65536 : 1048576;
    const int32_t nb = (int32_t)(ctx / M3.block);
    struct tail_arg a;
    memset(&a, 0, sizeof(a));
    const size_t kv = (size_t)nb * M3.block * M3.n_kv * M3.head_dim * 2;
    a.c.k = dmalloc(kv);
    a.c.v = dmalloc(kv);
    a.c.n_pages = nb;
    fill_bf16(a.c.k, (int64_t)(kv / 2), 41, 1.0f);
    fill_bf16(a.c.v, (int64_t)(kv / 2), 42, 1.0f);
    static const int32_t batches[] = {1, 16, 64};
    const int n_routes = (int)(sizeof(g_routes) / sizeof(g_routes[0]));
    for (int bi = 0; bi < 3; bi++) {
        const int32_t batch = batches[bi];
        dbatch_shared_pages(&a.b, batch, nb, ctx);
        a.stride = nb;
        a.scores = (float *)dmalloc(sizeof(float) * (size_t)M3.n_kv * batch * nb);
        fill_f32(a.scores, (int64_t)M3.n_kv * batch * nb, 61, 1.0f);
        a.q = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
        a.out = dmalloc((size_t)batch * M3.n_heads * M3.head_dim * 2);
        fill_bf16(a.q, (int64_t)batch * M3.n_heads * M3.head_dim, 49, 1.0f);
        a.sel = (int32_t *)dmalloc(sizeof(int32_t) * batch * M3.n_kv * M3.topk);
        char cfg[96], name[96];
        snprintf(cfg, sizeof cfg, "decode tail ctx %lldK batch %d", (long long)(ctx / 1024), (int)batch);
        for (int r = 0; r < n_routes; r++) {
            /* the tail's own routes (the index and launch knobs change nothing here) */
            if (!route_on(&g_routes[r]) || strstr(g_routes[r].env, "KN_CUDA_IDX") ||
                strstr(g_routes[r].env, "KN_CUDA_FUSED_DECODE") || strstr(g_routes[r].env, "KN_CUDA_STEAL"))
                continue;
            set_route(&g_routes[r]);
            const double ms = time_ms(run_tail, &a, 3, g_quick ? 5 : 50);
            snprintf(name, sizeof name, "%s", g_routes[r].name);
            emit("tail", cfg, name, ms * 1e3, "us");
            const double mb = time_b2b_ms(run_tail, &a, 3, g_quick ? 3 : 9, 20);
            emit("tail b2b", cfg, name, mb * 1e3, "us");
        }
        set_route(NULL);
        dbatch_free(&a.b);
        cudaFree(a.scores), cudaFree(a.q), cudaFree(a.out), cudaFree(a.sel);
    }
    cudaFree(a.c.k), cudaFree(a.c.v);
}

/* Rows of top-k selections ([n_rows][M3.topk]) whose sets differ: a row differs when an entry of ref is
 * missing from got (its -1 padding included, so a row where got selected more blocks differs too). *shared
 * and *total (unless NULL) add up ref's selected blocks (>= 0) that got holds as well, and all of them. */
static int64_t sel_rows_differ(const int32_t *ref, const int32_t *got, size_t n_rows, int64_t *shared,
                               int64_t *total)
{
    int64_t differ = 0;
    for (size_t r = 0; r < n_rows; r++) {
        const int32_t *x = ref + r * M3.topk, *y = got + r * M3.topk;
        int d = 0;
        for (int32_t j = 0; j < M3.topk; j++) {
            int f = 0;
            for (int32_t m = 0; m < M3.topk; m++) f |= x[j] == y[m];
            d |= !f;
            if (x[j] >= 0 && shared) *shared += f, ++*total;
        }
        differ += d;
    }
    return differ;
}

/* The fused prefill selection (wgmma, 4 slabs) with the FP8 index cache against the bf16 one on the same
 * keys (FP8 = e4m3 of the bf16 keys with a scale per token), structured and random queries, 64K and 256K:
 * time, index-score rate, and the rows whose sets differ from the bf16 kernel's. */
static void bench_select_fp8(void)
{
    printf("== fused prefill selection: FP8 against bf16 index keys\n");
    static const int64_t Ls[] = {65536, 262144};
    for (int li = 0; li < 2; li++) {
        const int64_t L = g_quick ? Ls[li] / 16 : Ls[li];
        struct pf_arg a;
        pf_setup(&a, L, 16384);
        const struct kn_cuda_cache cb = a.c;
        struct kn_cuda_cache c8 = a.c;
        c8.idx = dmalloc((size_t)L * M3.idx_dim);
        c8.idx_scale = (float *)dmalloc(sizeof(float) * (size_t)L);
        c8.idx_dtype = KN_IDX_FP8;
        k_quant_fp8<<<(unsigned)((L + 7) / 8), 256>>>((const uint16_t *)cb.idx, L, M3.idx_dim,
                                                      (uint8_t *)c8.idx, (float *)c8.idx_scale);
        CK(cudaGetLastError());
        double flops = 0;
        for (int64_t i = 0; i < L; i++) flops += (double)(i / M3.block + 1) * M3.block;
        flops *= 2.0 * M3.n_idx_heads * M3.idx_dim;
        const size_t sel_bytes = sizeof(int32_t) * (size_t)a.n_chunks * M3.n_kv * a.chunk * M3.topk;
        const size_t n_rows = sel_bytes / sizeof(int32_t) / M3.topk;
        /* 0: bf16 keys; 1: FP8 keys, bf16 queries (KN_CUDA_SELECT_WGMMA=1); 2: FP8 keys, e4m3 queries (3) */
        static const char *const knob[] = {"1", "1", "3"};
        static const char *const name[] = {"bf16 keys", "fp8 keys", "fp8 keys, e4m3 queries"};
        int32_t *sk[3];
        for (int k = 0; k < 3; k++) sk[k] = (int32_t *)hmalloc(sel_bytes);
        a.what = 2;
        /* case 2: keys of a block share a direction plus noise (as fp8agree's structured keys: block scores
         * spread out as trained index keys' do), with the structured queries */
        for (int cs = 0; cs < 3; cs++) {
            const int structured = cs != 1;
            if (cs == 2) {
                const int64_t nk = (int64_t)a.c.n_pages * M3.block;
                float *tmp = (float *)dmalloc(sizeof(float) * (size_t)nk * M3.idx_dim);
                k_fill_shared_q<<<4096, 256>>>(tmp, nk, M3.idx_dim, M3.block, 61, 0.5f);
                CK(cudaGetLastError());
                KC(kn_cuda_convert(tmp, cb.idx, nk * M3.idx_dim, 1, 0, &g_err));
                cudaFree(tmp);
                k_quant_fp8<<<(unsigned)((L + 7) / 8), 256>>>((const uint16_t *)cb.idx, L, M3.idx_dim,
                                                              (uint8_t *)c8.idx, (float *)c8.idx_scale);
                CK(cudaGetLastError());
            }
            k_fill_shared_q<<<4096, 256>>>(a.qi, L, M3.n_idx_heads * M3.idx_dim, structured ? 128 : 1,
                                           structured ? 51 : 52, structured ? 0.05f : 0.0f);
            CK(cudaGetLastError());
            char cfg[96];
            snprintf(cfg, sizeof cfg, "prefill L %lldK %s", (long long)(L / 1024),
                     cs == 2      ? "structured, block keys"
                     : structured ? "structured"
                                  : "random");
            double ms[3];
            char nm[96];
            for (int k = 0; k < 3; k++) {
                knob_setenv("KN_CUDA_SELECT_WGMMA", knob[k], 1);
                a.c = k ? c8 : cb;
                ms[k] = time_ms(run_pf, &a, 1, g_quick ? 2 : 5);
                CK(cudaMemcpy(sk[k], a.sel, sel_bytes, cudaMemcpyDeviceToHost));
                snprintf(nm, sizeof nm, "wgmma %s", name[k]);
                emit("select", cfg, nm, ms[k], "ms");
                snprintf(nm, sizeof nm, "wgmma %s rate", name[k]);
                emit("select", cfg, nm, flops / (ms[k] * 1e-3) / 1e12, "TFLOP/s");
            }
            knob_unsetenv("KN_CUDA_SELECT_WGMMA");
            /* rows whose sets differ, and the share of selected blocks kept, against the bf16 keys (and for
             * e4m3 queries also against FP8 keys with bf16 queries) */
            static const int cmp[3][2] = {{1, 0}, {2, 0}, {2, 1}};
            for (int c = 0; c < 3; c++) {
                int64_t shared = 0, total = 0;
                const int64_t differ = sel_rows_differ(sk[cmp[c][1]], sk[cmp[c][0]], n_rows, &shared, &total);
                snprintf(nm, sizeof nm, "%s vs %s rows differing", name[cmp[c][0]], name[cmp[c][1]]);
                emit("select", cfg, nm, 100.0 * (double)differ / ((double)M3.n_kv * L), "%");
                snprintf(nm, sizeof nm, "%s vs %s blocks shared", name[cmp[c][0]], name[cmp[c][1]]);
                emit("select", cfg, nm, 100.0 * (double)shared / (double)(total ? total : 1), "%");
            }
        }
        a.c = cb;
        for (int k = 0; k < 3; k++) free(sk[k]);
        cudaFree(c8.idx), cudaFree(c8.idx_scale);
        pf_free(&a);
    }
}

static void bench_layer(void)
{
    printf("== one MSA layer (index + top-k + sparse attention) vs dense attention, same shapes\n");
    /* prefill at 64K and 256K: fused select + KV-block-major attention vs dense flash prefill */
    static const int64_t Ls[] = {65536, 262144};
    for (int li = 0; li < 2; li++) {
        const int64_t L = g_quick ? Ls[li] / 16 : Ls[li];
        struct pf_arg a;
        pf_setup(&a, L, 16384);
        for (int structured = 1; structured >= 0; structured--) {
            /* structured: the 128 queries of a tile share one index query up to small noise */
            k_fill_shared_q<<<4096, 256>>>(a.qi, L, M3.n_idx_heads * M3.idx_dim, structured ? 128 : 1,
                                           structured ? 51 : 52, structured ? 0.05f : 0.0f);
            CK(cudaGetLastError());
            char cfg[96];
            snprintf(cfg, sizeof cfg, "prefill L %lldK %s", (long long)(L / 1024),
                     structured ? "structured" : "random");
            /* every fused selection kernel (KN_CUDA_SELECT_WGMMA=0: mma.sync, 1 and 2: the wgmma variants;
             * 3: variant 1 with its keys by cp.async, KN_CUDA_SELECT_TMA=0), same run; the default below */
            static const char *const sel_knob[] = {"0", "1", "2", "1"};
            a.what = 2;
            double sel_k_ms[4] = {NAN, NAN, NAN, NAN};
            int32_t *sel_k[4] = {NULL, NULL, NULL, NULL};
            const size_t sel_bytes = sizeof(int32_t) * (size_t)a.n_chunks * M3.n_kv * a.chunk * M3.topk;
            /* KN_BENCH_LAYER_LEAN=1: the attention routes only (no selection-kernel comparison, no dense) */
            const int lean = getenv("KN_BENCH_LAYER_LEAN") != NULL;
            for (int k = 0; k < 4 && !lean; k++) {
                knob_setenv("KN_CUDA_SELECT_WGMMA", sel_knob[k], 1);
                if (k == 3) knob_setenv("KN_CUDA_SELECT_TMA", "0", 1);
                sel_k_ms[k] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
                sel_k[k] = (int32_t *)hmalloc(sel_bytes);
                CK(cudaMemcpy(sel_k[k], a.sel, sel_bytes, cudaMemcpyDeviceToHost));
            }
            a.what = 3;
            knob_unsetenv("KN_CUDA_SELECT_TMA");
            double msa_k_ms[4] = {NAN, NAN, NAN, NAN};
            for (int k = 0; k < 4 && !lean; k++) {
                knob_setenv("KN_CUDA_SELECT_WGMMA", sel_knob[k], 1);
                if (k == 3) knob_setenv("KN_CUDA_SELECT_TMA", "0", 1);
                msa_k_ms[k] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
            }
            knob_unsetenv("KN_CUDA_SELECT_WGMMA");
            knob_unsetenv("KN_CUDA_SELECT_TMA");
            /* rows whose sets differ from the mma.sync kernel's (near ties: other summation order); [3]:
             * the cp.async keys' against the TMA keys' (the same products: none) */
            int64_t rows_differ[4] = {0, 0, 0, 0};
            for (int k = 1; k < 4 && !lean; k++)
                rows_differ[k] = sel_rows_differ(sel_k[k == 3 ? 1 : 0], sel_k[k],
                                                 sel_bytes / sizeof(int32_t) / M3.topk, NULL, NULL);
            const double sel_rows = (double)M3.n_kv * L; /* rows of padding chunks never differ */
            free(sel_k[0]), free(sel_k[1]), free(sel_k[2]), free(sel_k[3]);
            /* index-score FLOPs: every (query, head) row against every key of its visible blocks */
            double sel_flops = 0;
            for (int64_t i = 0; i < L; i++) sel_flops += (double)(i / M3.block + 1) * M3.block;
            sel_flops *= 2.0 * M3.n_idx_heads * M3.idx_dim;
            /* the default kernel (knob unset): its select time gives the attention rate below, and its
             * selections stay in a.sel for the overlap measurement */
            /* the union kernel's variants (default threshold) */
            static const int kv_route[] = {
                PF_R_PLAIN,       PF_R_PP,         PF_R_PP_FAST,     PF_R_FAST,         PF_R_PPS_FAST,
                PF_R_SPLIT,       PF_R_SPLIT4,     PF_R_OLD,         PF_R_RARE,         PF_R_ROWM,
                PF_R_RARE_ROWM,   PF_R_PAIRS_ROWM, PF_R_OVL,         PF_R_LA,           PF_R_LA_NORARE,
                PF_R_PLAN0,       PF_R_DYN,        PF_R_LA_DYN,      PF_R_PFX,          PF_R_QPF,
                PF_R_PFX_QPF,     PF_R_PAIRS_PFX,  PF_R_COST2,       PF_R_COST4,        PF_R_CAP40,
                PF_R_CAP100,      PF_R_RPF,        PF_R_DIAG_NOPAIR, PF_R_DIAG_NOUNION, PF_R_PW_PAIRS,
                PF_R_PW,          PF_R_PW_CAP100,  PF_R_PW2,         PF_R_PW2_RPF,      PF_R_CPA,
                PF_R_CPA_PW2_RPF, PF_R_CPA_ALL};
            enum { NKV = sizeof kv_route / sizeof kv_route[0] };
            /* select alone, the default route, the pair path alone (the previous design) and the variants,
             * in KN_BENCH_PF_REPEAT interleaved rounds (medians) */
            const int reps = pf_repeats();
            double sel_r[9], msa_r[9], pairs_r[9], msa_kv_ms[NKV];
            static double kv_r[NKV][9];
            for (int rep = 0; rep < reps; rep++) {
                pf_set_route(NULL);
                a.what = 2;
                sel_r[rep] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
                a.what = 3;
                msa_r[rep] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
                pf_set_route(&g_pf_routes[PF_R_PAIRS]);
                pairs_r[rep] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
                for (int k = 0; k < NKV; k++) {
                    if (!pf_route_on(&g_pf_routes[kv_route[k]])) continue;
                    pf_set_route(&g_pf_routes[kv_route[k]]);
                    kv_r[k][rep] = time_ms(run_pf, &a, 1, g_quick ? 2 : 3);
                }
            }
            pf_set_route(NULL);
            const double sel_ms = pf_median(sel_r, reps), msa_ms = pf_median(msa_r, reps),
                         msa_pairs_ms = pf_median(pairs_r, reps);
            for (int k = 0; k < NKV; k++)
                msa_kv_ms[k] = pf_route_on(&g_pf_routes[kv_route[k]]) ? pf_median(kv_r[k], reps) : NAN;
            /* measured overlap of the selections the index produced, and their useful FLOPs */
            int32_t *sel = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)M3.n_kv * L * M3.topk);
            int32_t *tmp =
                (int32_t *)hmalloc(sizeof(int32_t) * (size_t)a.n_chunks * M3.n_kv * a.chunk * M3.topk);
            CK(cudaMemcpy(tmp, a.sel, sizeof(int32_t) * (size_t)a.n_chunks * M3.n_kv * a.chunk * M3.topk,
                          cudaMemcpyDeviceToHost));
            for (int32_t c = 0; c < a.n_chunks; c++) {
                int64_t i0 = c * a.chunk, n = L - i0 < a.chunk ? L - i0 : a.chunk;
                for (int32_t g = 0; g < M3.n_kv; g++)
                    memcpy(sel + ((int64_t)g * L + i0) * M3.topk,
                           tmp + (int64_t)c * M3.n_kv * a.chunk * M3.topk + (int64_t)g * n * M3.topk,
                           sizeof(int32_t) * (size_t)(n * M3.topk));
            }
            double pair = 0;
            int64_t pairs = 0;
            for (int32_t g = 0; g < M3.n_kv; g++)
                for (int64_t t0 = 16 * M3.block; t0 + M3.block <= L; t0 += 8 * M3.block) {
                    /* consecutive query pairs inside sampled tiles */
                    for (int64_t i = t0; i < t0 + M3.block - 1; i += 4) {
                        const int32_t *r1 = sel + ((int64_t)g * L + i) * M3.topk, *r2 = r1 + M3.topk;
                        int32_t hit = 0;
                        for (int32_t x = 0; x < M3.topk; x++)
                            for (int32_t y = 0; y < M3.topk; y++) hit += r1[x] >= 0 && r1[x] == r2[y];
                        pair += hit / (double)M3.topk;
                        pairs++;
                    }
                }
            double flops = sparse_flops(sel, L), ueff = 0, ucomp = 0, heff = 0;
            union_stats(sel, L, 50, &ueff, &ucomp);
            double hcomp = 0;
            const double rare_frac = rare_stats(sel, L, &heff, &hcomp);
            emit("layer", cfg, "union efficiency", 100.0 * ueff, "%");
            emit("layer", cfg, "hybrid: rare pairs", 100.0 * rare_frac, "%");
            emit("layer", cfg, "hybrid: union efficiency", 100.0 * heff, "%");
            free(sel), free(tmp);
            emit("layer", cfg, "neighbour overlap", pairs ? 100.0 * pair / pairs : 0, "%");
            emit("layer", cfg, "select (fused)", sel_ms, "ms");
            if (!lean) {
                emit("layer", cfg, "select mma.sync", sel_k_ms[0], "ms");
                emit("layer", cfg, "select wgmma 4x1 slab", sel_k_ms[1], "ms");
                emit("layer", cfg, "select wgmma 2x2 slabs", sel_k_ms[2], "ms");
                emit("layer", cfg, "select wgmma 4x1, cp.async keys", sel_k_ms[3], "ms");
                emit("layer", cfg, "select mma.sync rate", sel_flops / (sel_k_ms[0] * 1e-3) / 1e12,
                     "TFLOP/s");
                emit("layer", cfg, "select wgmma 4x1 rate", sel_flops / (sel_k_ms[1] * 1e-3) / 1e12,
                     "TFLOP/s");
                emit("layer", cfg, "select wgmma 2x2 rate", sel_flops / (sel_k_ms[2] * 1e-3) / 1e12,
                     "TFLOP/s");
                emit("layer", cfg, "select wgmma 4x1, cp.async keys rate",
                     sel_flops / (sel_k_ms[3] * 1e-3) / 1e12, "TFLOP/s");
                emit("layer", cfg, "select wgmma 4x1 TMA vs cp.async keys rows differing",
                     100.0 * rows_differ[3] / sel_rows, "%");
                emit("layer", cfg, "select wgmma 4x1 vs mma.sync rows differing",
                     100.0 * rows_differ[1] / sel_rows, "%");
                emit("layer", cfg, "select wgmma 2x2 vs mma.sync rows differing",
                     100.0 * rows_differ[2] / sel_rows, "%");
                emit("layer", cfg, "MSA total, select mma.sync", msa_k_ms[0], "ms");
                emit("layer", cfg, "MSA total, select wgmma 4x1", msa_k_ms[1], "ms");
                emit("layer", cfg, "MSA total, select wgmma 2x2", msa_k_ms[2], "ms");
                emit("layer", cfg, "MSA total, select wgmma 4x1, cp.async keys", msa_k_ms[3], "ms");
            }
            emit("layer", cfg, "MSA total", msa_ms, "ms");
            emit("layer", cfg, "attention eff.", flops / ((msa_ms - sel_ms) * 1e-3) / 1e12, "TFLOP/s");
            emit("layer", cfg, "MSA total, pairs only (previous design)", msa_pairs_ms, "ms");
            for (int k = 0; k < NKV; k++) {
                char name[128];
                snprintf(name, sizeof name, "MSA total, %s", g_pf_routes[kv_route[k]].name);
                emit("layer", cfg, name, msa_kv_ms[k], "ms");
                snprintf(name, sizeof name, "attention eff., %s", g_pf_routes[kv_route[k]].name);
                emit("layer", cfg, name, flops / ((msa_kv_ms[k] - sel_ms) * 1e-3) / 1e12, "TFLOP/s");
            }
        }
        if (getenv("KN_BENCH_LAYER_LEAN")) {
            pf_free(&a);
            continue;
        }
        char cfg[96];
        snprintf(cfg, sizeof cfg, "prefill L %lldK", (long long)(L / 1024));
        a.what = 1;
        double dense_ms = time_ms(run_pf, &a, 1, g_quick ? 1 : 2);
        double dflops = 4.0 * M3.n_heads * M3.head_dim * ((double)L * (L + 1) / 2);
        emit("layer", cfg, "dense (ours)", dense_ms, "ms");
        emit("layer", cfg, "dense rate", dflops / (dense_ms * 1e-3) / 1e12, "TFLOP/s");
        pf_free(&a);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* dense prefill attention (the dense layers): the union kernel's dense mode against the mma.sync flash    */

static void bench_dense(void)
{
    printf("== dense prefill attention: union kernel (dense mode, default) vs mma.sync flash\n");
    static const int64_t Ls[] = {65536, 131072, 262144};
    /* the dense mode's consumers (KN_CUDA_DENSE_KERNEL, KN_PF_UK_*), then the mma.sync kernel; at 256K only
     * the default and the mma.sync kernel (seconds a call) */
    enum { NK = 6 };
    static const char *const kern[NK] = {NULL, "1", "3", "5", "6", NULL};
    static const char *const name[NK] = {"union kernel",
                                         "union kernel, overlap",
                                         "union kernel, pingpong fast",
                                         "union kernel, S pingpong fast",
                                         "union kernel, split",
                                         "mma.sync flash"};
    for (int li = 0; li < 3; li++) {
        const int64_t L = g_quick ? Ls[li] / 16 : Ls[li];
        struct pf_arg a;
        pf_setup(&a, L, 16384);
        a.what = 1;
        char cfg[96];
        snprintf(cfg, sizeof cfg, "dense prefill L %lldK", (long long)(L / 1024));
        const double dflops = 4.0 * M3.n_heads * M3.head_dim * ((double)L * (L + 1) / 2);
        double best[NK];
        for (int k = 0; k < NK; k++) best[k] = INFINITY;
        for (int round = 0; round < 2; round++) /* interleaved, so a drift hits every kernel */
            for (int k = 0; k < NK; k++) {
                if (li == 2 && k > 0 && k < NK - 1) continue;
                if (k == NK - 1) knob_setenv("KN_CUDA_DENSE_WGMMA", "0", 1);
                if (kern[k]) knob_setenv("KN_CUDA_DENSE_KERNEL", kern[k], 1);
                const double ms = time_ms(run_pf, &a, 1, g_quick ? 1 : 2);
                knob_unsetenv("KN_CUDA_DENSE_WGMMA");
                knob_unsetenv("KN_CUDA_DENSE_KERNEL");
                if (ms < best[k]) best[k] = ms;
            }
        for (int k = 0; k < NK; k++) {
            if (!isfinite(best[k])) continue;
            char m[96];
            snprintf(m, sizeof m, "%s: time", name[k]);
            emit("dense prefill", cfg, m, best[k], "ms");
            snprintf(m, sizeof m, "%s: rate", name[k]);
            emit("dense prefill", cfg, m, dflops / (best[k] * 1e-3) / 1e12, "TFLOP/s");
        }
        emit("dense prefill", cfg, "union kernel vs mma.sync", best[NK - 1] / best[0], "x");
        pf_free(&a);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* how often an FP8 index cache changes the selection                                                     */

static void bench_fp8_agree(void)
{
    printf("== FP8 (e4m3, per-token scale) vs bf16 index cache: selection agreement\n");
    const int64_t ctx = g_quick ? 16384 : 131072;
    const int32_t batch = 64, nb = (int32_t)(ctx / M3.block);
    const int64_t tokens = (int64_t)batch * ctx;
    for (int structured = 0; structured < 2; structured++) {
        struct kn_cuda_cache cb;
        memset(&cb, 0, sizeof(cb));
        cb.idx = dmalloc((size_t)tokens * M3.idx_dim * 2);
        cb.k = cb.v = cb.idx;
        cb.idx_dtype = KN_IDX_BF16;
        cb.n_pages = (int64_t)batch * nb;
        if (structured) {
            /* keys of a block share a random direction (scaled per block) plus noise: block scores spread out
             * as trained index keys' do, instead of i.i.d. maxima that all sit near the same value */
            float *tmp = (float *)dmalloc(sizeof(float) * (size_t)tokens * M3.idx_dim);
            k_fill_shared_q<<<4096, 256>>>(tmp, tokens, M3.idx_dim, M3.block, 61, 0.5f);
            CK(cudaGetLastError());
            KC(kn_cuda_convert(tmp, cb.idx, tokens * M3.idx_dim, 1, 0, &g_err));
            cudaFree(tmp);
        } else {
            fill_bf16(cb.idx, tokens * M3.idx_dim, 62, 1.0f);
        }
        struct kn_cuda_cache c8 = cb;
        c8.idx = dmalloc((size_t)tokens * M3.idx_dim);
        c8.idx_scale = (float *)dmalloc((size_t)tokens * 4);
        c8.idx_dtype = KN_IDX_FP8;
        k_quant_fp8<<<(unsigned)((tokens + 7) / 8), 256>>>((const uint16_t *)cb.idx, tokens, M3.idx_dim,
                                                           (uint8_t *)c8.idx, c8.idx_scale);
        CK(cudaGetLastError());
        int32_t *bt = (int32_t *)hmalloc(sizeof(int32_t) * (size_t)batch * nb);
        int32_t *qseq = (int32_t *)hmalloc(sizeof(int32_t) * batch);
        int64_t *pos = (int64_t *)hmalloc(sizeof(int64_t) * batch);
        for (int32_t i = 0; i < batch; i++) {
            qseq[i] = i;
            pos[i] = ctx - 1;
            for (int32_t b = 0; b < nb; b++) bt[(int64_t)i * nb + b] = i * nb + b;
        }
        struct dbatch d;
        dbatch_make(&d, batch, batch, qseq, pos, bt, nb);
        float *q = (float *)dmalloc(sizeof(float) * (size_t)batch * M3.n_idx_heads * M3.idx_dim);
        fill_f32(q, (int64_t)batch * M3.n_idx_heads * M3.idx_dim, 63, 1.0f);
        size_t wsb = kn_cuda_msa_select_ws(&M3, &d.qb, KN_PATH_DECODE);
        void *ws = dmalloc(wsb);
        const int64_t nsel = (int64_t)M3.n_idx_heads * batch * M3.topk;
        int32_t *s1 = (int32_t *)dmalloc(sizeof(int32_t) * nsel),
                *s2 = (int32_t *)dmalloc(sizeof(int32_t) * nsel);
        KC(kn_cuda_msa_select(&M3, &d.qb, &cb, q, s1, M3.topk, ws, wsb, KN_PATH_DECODE, 0, &g_err));
        KC(kn_cuda_msa_select(&M3, &d.qb, &c8, q, s2, M3.topk, ws, wsb, KN_PATH_DECODE, 0, &g_err));
        int32_t *h1 = (int32_t *)hmalloc(sizeof(int32_t) * nsel),
                *h2 = (int32_t *)hmalloc(sizeof(int32_t) * nsel);
        CK(cudaMemcpy(h1, s1, sizeof(int32_t) * nsel, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(h2, s2, sizeof(int32_t) * nsel, cudaMemcpyDeviceToHost));
        int64_t rows = 0, rows_diff = 0, blocks_diff = 0;
        for (int64_t r = 0; r < nsel / M3.topk; r++) {
            int32_t miss = 0;
            for (int32_t x = 0; x < M3.topk; x++) {
                int found = 0;
                for (int32_t y = 0; y < M3.topk; y++) found |= h1[r * M3.topk + x] == h2[r * M3.topk + y];
                miss += !found;
            }
            rows++, rows_diff += miss > 0, blocks_diff += miss;
        }
        char cfg[96];
        snprintf(cfg, sizeof cfg, "ctx %lldK batch %d %s keys", (long long)(ctx / 1024), batch,
                 structured ? "block-structured" : "iid random");
        emit("fp8 agree", cfg, "rows differing", 100.0 * rows_diff / rows, "%");
        emit("fp8 agree", cfg, "blocks differing", 100.0 * blocks_diff / (rows * M3.topk), "%");
        dbatch_free(&d);
        free(bt), free(qseq), free(pos), free(h1), free(h2);
        cudaFree(cb.idx), cudaFree(c8.idx), cudaFree(c8.idx_scale), cudaFree(q), cudaFree(ws), cudaFree(s1);
        cudaFree(s2);
    }
}

/* ---------------------------------------------------------------------------------------------------- */
/* decode-sized products: the model's projections at n = 1..16 activation rows, cuBLAS (f32 -> bf16
 * conversion + GemmEx, the backend's bf16 path) against kn_cuda_gemv_bf16, % of copy over the weight bytes */

struct skinny_arg {
    struct kn_cuda_blas *bl;
    const uint16_t *w; /* n_sets weight matrices, each rows x cols */
    int32_t n_sets;
    int64_t rows, cols, n;
    float *x, *y;
    uint16_t *xb;
    void *ws; /* kn_cuda_gemm_small_bf16's k-split workspace */
    size_t ws_bytes;
    int gemv; /* 0 cuBLAS bf16, 1 kn_cuda_gemv_bf16, 2 cuBLAS f32, 3 kn_cuda_gemv_f32, 4
                 kn_cuda_gemm_small_bf16, 5 kn_cuda_gemv_f32_multi (one weight), 6 the index projections
                 (rows - 128 and 128 rows of one set) by kn_cuda_gemv_f32_multi, 7 the same by two
                 kn_cuda_gemv_f32 calls, 8 two bf16 weights of rows / 2 by kn_cuda_gemm_small_bf16_multi, 9
                 the same by two kn_cuda_gemm_small_bf16 calls */
};

static void run_skinny(void *p, int it)
{
    struct skinny_arg *a = (struct skinny_arg *)p;
    const int f32w = a->gemv == 2 || a->gemv == 3 || (a->gemv >= 5 && a->gemv <= 7); /* twice the bytes */
    const uint16_t *w = a->w + (int64_t)(it % a->n_sets) * a->rows * a->cols * (f32w ? 2 : 1);
    if (a->gemv >= 8) {
        const int64_t half = a->rows / 2;
        const void *ws2[2] = {w, w + half * a->cols};
        float *ys[2] = {a->y, a->y + 16 * half};
        if (a->gemv == 9)
            for (int i = 0; i < 2; i++)
                KC(kn_cuda_gemm_small_bf16(a->n, half, a->cols, a->x, a->cols, ws2[i], ys[i], half, a->ws,
                                           a->ws_bytes, g_stream, &g_err));
        else
            KC(kn_cuda_gemm_small_bf16_multi(2, ws2, a->n, half, a->cols, a->x, a->cols, ys, half, a->ws,
                                             a->ws_bytes, g_stream, &g_err));
    } else if (a->gemv >= 5) {
        const int two = a->gemv >= 6;
        const float *ws[2] = {(const float *)w, (const float *)w + (a->rows - 128) * a->cols};
        const int64_t rs[2] = {two ? a->rows - 128 : a->rows, 128};
        float *ys[2] = {a->y, a->y + 16 * rs[0]};
        if (a->gemv == 7)
            for (int i = 0; i < 2; i++)
                KC(kn_cuda_gemv_f32(a->n, rs[i], a->cols, a->x, a->cols, ws[i], ys[i], rs[i], g_stream,
                                    &g_err));
        else
            KC(kn_cuda_gemv_f32_multi(two ? 2 : 1, ws, rs, ys, a->n, a->cols, a->x, a->cols, g_stream,
                                      &g_err));
    } else if (a->gemv == 2) { /* f32 weights: cuBLAS's f32 product (no TF32) */
        KC(kn_cuda_gemm_f32(a->bl, a->n, a->rows, a->cols, a->x, a->cols, (const float *)w, a->cols, 0.0f,
                            a->y, a->rows, &g_err));
    } else if (a->gemv == 3) {
        KC(kn_cuda_gemv_f32(a->n, a->rows, a->cols, a->x, a->cols, (const float *)w, a->y, a->rows, g_stream,
                            &g_err));
    } else if (a->gemv == 4) {
        KC(kn_cuda_gemm_small_bf16(a->n, a->rows, a->cols, a->x, a->cols, w, a->y, a->rows, a->ws,
                                   a->ws_bytes, g_stream, &g_err));
    } else if (a->gemv) {
        KC(kn_cuda_gemv_bf16(a->n, a->rows, a->cols, a->x, a->cols, w, a->y, a->rows, g_stream, &g_err));
    } else {
        KC(kn_cuda_convert(a->x, a->xb, a->n * a->cols, 1, g_stream, &g_err));
        KC(kn_cuda_gemm_bf16(a->bl, a->n, a->rows, a->cols, a->xb, a->cols, w, a->cols, 0.0f, a->y, a->rows,
                             0, &g_err));
    }
}

/* One cell of the skinny bench: a->rows x a->cols weights of elem bytes, rotated among as many sets as the
 * pool holds (at most 64), timed and reported as route "rows x cols, n" (with "f32 " for 4-byte weights) */
static void skinny_cell(struct skinny_arg *a, size_t pool, int elem, const char *route)
{
    const double wbytes = (double)a->rows * a->cols * elem;
    a->n_sets = (int32_t)(pool / (size_t)wbytes);
    if (a->n_sets > 64) a->n_sets = 64;
    char cfg[96];
    snprintf(cfg, sizeof cfg, "%s%lld x %lld, n %lld", elem == 4 ? "f32 " : "", (long long)a->rows,
             (long long)a->cols, (long long)a->n);
    time_emit_stream(route, cfg, run_skinny, a, wbytes, g_quick ? 5 : 30, 20, 0);
}

static void bench_skinny(void)
{
    printf(
        "== decode-sized products (M3-shaped projections at hidden 6144): cuBLAS vs kn_cuda_gemv_bf16 (gemv) "
        "vs kn_cuda_gemm_small_bf16 (tc)\n");
    static const int64_t shapes[][2] = {{8192, 6144}, {512, 6144},  {6144, 8192},
                                        {2048, 6144}, {6144, 2048}, {8199, 6144}};
    static const int64_t ns[] = {1, 2, 4, 8, 16};
    struct skinny_arg a;
    memset(&a, 0, sizeof a);
    KC(kn_cuda_blas_create(&a.bl, 0, &g_err));
    const size_t pool = (size_t)640 << 20; /* rotated weights: > 10 x L2 */
    uint16_t *w = (uint16_t *)dmalloc(pool);
    fill_bf16(w, (int64_t)(pool / 2), 91, 0.02f);
    a.x = (float *)dmalloc(sizeof(float) * 16 * 8192);
    a.y = (float *)dmalloc(sizeof(float) * 16 * 8199);
    a.xb = (uint16_t *)dmalloc(2 * 16 * 8192);
    fill_f32(a.x, 16 * 8192, 92, 1.0f);
    a.ws_bytes = sizeof(float) * 8 * 16 * 8199; /* >= kn_cuda_gemm_small_ws of every shape below */
    a.ws = dmalloc(a.ws_bytes);
    /* 5 / 6: the tensor-core product's 16-row route with its k split summed by a second kernel / in
     * clusters, forced (KN_CUDA_GS_CLUSTER=0 / 2; "tc" chooses by the waves); 7: the 16-row route where the
     * row route would apply (KN_CUDA_GS_ROWS=0; the default from 128 rows: 128 rows per CTA) */
    static const int routes[] = {0, 1, 4, 7, 5, 6};
    /* KN_BENCH_SKINNY_F32=1: the f32 products only */
    const size_t n_shapes = getenv("KN_BENCH_SKINNY_F32") ? 0 : sizeof shapes / sizeof shapes[0];
    for (size_t si = 0; si < n_shapes; si++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t ri = 0; ri < sizeof routes / sizeof routes[0]; ri++) {
                const int gv = routes[ri] >= 5 ? 4 : routes[ri];
                if (routes[ri] >= 5) knob_setenv("KN_CUDA_GS_ROWS", "0", 1);
                a.rows = shapes[si][0], a.cols = shapes[si][1], a.n = ns[ni], a.gemv = gv, a.w = w;
                if (gv == 1 && !kn_cuda_gemv_ok(a.n, a.cols, a.cols)) continue;
                if (gv == 4 && !kn_cuda_gemm_small_ok(a.n, a.cols, a.cols)) continue;
                if ((routes[ri] == 5 || routes[ri] == 6) && kn_cuda_gemm_small_ws(a.n, a.rows, a.cols) == 0) {
                    knob_unsetenv("KN_CUDA_GS_ROWS");
                    continue; /* no split */
                }
                if (routes[ri] == 5 || routes[ri] == 6)
                    knob_setenv("KN_CUDA_GS_CLUSTER", routes[ri] == 5 ? "0" : "2", 1);
                if (routes[ri] != 7 || a.rows >= 128)
                    skinny_cell(&a, pool, 2,
                                routes[ri] == 7   ? "tc 16-row"
                                : routes[ri] == 6 ? "tc cluster"
                                : routes[ri] == 5 ? "tc sum"
                                : gv == 4         ? "tc"
                                : gv              ? "gemv"
                                                  : "cublas");
                knob_unsetenv("KN_CUDA_GS_CLUSTER");
                knob_unsetenv("KN_CUDA_GS_ROWS");
            }
    /* gate and up of the dense synthetic model (2 x 2048 x 6144): two row-route launches against one */
    for (size_t ni = 0; n_shapes && ni < sizeof ns / sizeof ns[0]; ni++)
        for (int g = 9; g >= 8; g--) {
            a.rows = 4096, a.cols = 6144, a.n = ns[ni], a.gemv = g, a.w = w;
            if (a.n < 3 || !kn_cuda_gemm_small_multi_ok(2, a.n, 2048, a.cols, a.cols)) continue;
            a.n_sets = (int32_t)(pool / ((size_t)a.rows * a.cols * 2));
            if (a.n_sets > 64) a.n_sets = 64;
            char cfg[96];
            snprintf(cfg, sizeof cfg, "gate + up 2 x 2048 x 6144, n %lld", (long long)a.n);
            time_emit_stream(g == 9 ? "two tc" : "tc x2", cfg, run_skinny, &a, (double)a.rows * a.cols * 2,
                             g_quick ? 5 : 30, 20, 0);
        }
    /* f32 weights (the index projections and the router): cuBLAS f32 against kn_cuda_gemv_f32, with its plan
     * and with weight rows per CTA / inner-dimension split forced (KN_CUDA_GEMV_F32_R / _KS; "R8" only from
     * n 5 on, a split only where the chunks divide) */
    static const int64_t f32_shapes[][2] = {{512, 6144}, {128, 6144}, {512, 4096}};
    static const int64_t f32_ns[] = {1, 2, 4, 8, 12, 16};
    static const struct {
        const char *name, *r, *ks;
    } f32_routes[] = {{"cublas", NULL, NULL},    {"gemv", NULL, NULL},      {"gemv R1", "1", "1"},
                      {"gemv R1 ks2", "1", "2"}, {"gemv R1 ks4", "1", "4"}, {"gemv R4", "4", "1"},
                      {"gemv R4 ks2", "4", "2"}, {"gemv R4 ks4", "4", "4"}, {"gemv R4 ks8", "4", "8"},
                      {"gemv R8", "8", "1"},     {"gemv R8 ks2", "8", "2"}, {"gemv R8 ks4", "8", "4"}};
    for (size_t si = 0; si < sizeof f32_shapes / sizeof f32_shapes[0]; si++)
        for (size_t ni = 0; ni < sizeof f32_ns / sizeof f32_ns[0]; ni++)
            for (size_t ri = 0; ri < sizeof f32_routes / sizeof f32_routes[0]; ri++) {
                a.rows = f32_shapes[si][0], a.cols = f32_shapes[si][1], a.n = f32_ns[ni], a.gemv = ri ? 3 : 2,
                a.w = w;
                const char *fr = f32_routes[ri].r, *fk = f32_routes[ri].ks;
                const int last = ri + 1 == sizeof f32_routes / sizeof f32_routes[0];
                if (fr && fr[0] == '8' && a.n <= 4 && !last) continue;
                if (ri && !kn_cuda_gemv_f32_ok(a.n, a.cols, a.cols)) continue;
                if (fr) knob_setenv("KN_CUDA_GEMV_F32_R", fr, 1);
                if (fk) knob_setenv("KN_CUDA_GEMV_F32_KS", fk, 1);
                if (!(fr && fr[0] == '8' && a.n <= 4)) skinny_cell(&a, pool, 4, f32_routes[ri].name);
                knob_unsetenv("KN_CUDA_GEMV_F32_R");
                knob_unsetenv("KN_CUDA_GEMV_F32_KS");
                /* after the last forced route: the staged route (x in shared memory once per 32 rows) */
                if (last && kn_cuda_gemv_f32_multi_ok(a.n, a.cols, a.cols)) {
                    a.gemv = 5;
                    skinny_cell(&a, pool, 4, "staged");
                }
            }
    /* an MSA layer's two index projections (iq 512 rows, ik 128 rows, both over the hidden size): two
     * kn_cuda_gemv_f32 calls (the backend before) against one kn_cuda_gemv_f32_multi launch */
    for (size_t ni = 0; ni < sizeof f32_ns / sizeof f32_ns[0]; ni++)
        for (int g = 7; g >= 4; g--) { /* 5, 4: the staged launch with a 4- / 2-way split forced */
            a.rows = 640, a.cols = 6144, a.n = f32_ns[ni], a.gemv = g >= 6 ? g : 6, a.w = w;
            if (g <= 6 && !kn_cuda_gemv_f32_multi_ok(a.n, a.cols, a.cols)) continue;
            if (g <= 5) knob_setenv("KN_CUDA_GEMV_F32_STAGED_KS", g == 5 ? "4" : "2", 1);
            a.n_sets = (int32_t)(pool / ((size_t)a.rows * a.cols * 4));
            if (a.n_sets > 64) a.n_sets = 64;
            char cfg[96];
            snprintf(cfg, sizeof cfg, "f32 iq 512 + ik 128 x 6144, n %lld", (long long)a.n);
            time_emit_stream(g == 7   ? "two gemv"
                             : g == 6 ? "staged multi"
                             : g == 5 ? "staged multi ks4"
                                      : "staged multi ks2",
                             cfg, run_skinny, &a, (double)a.rows * a.cols * 4, g_quick ? 5 : 30, 20, 0);
            knob_unsetenv("KN_CUDA_GEMV_F32_STAGED_KS");
        }
    cudaFree(w), cudaFree(a.x), cudaFree(a.y), cudaFree(a.xb), cudaFree(a.ws);
    kn_cuda_blas_destroy(a.bl);
}

/* ---------------------------------------------------------------------------------------------------- */
/* FP8 (e4m3, 128 x 128 block scales) weights at decode sizes: kn_cuda_gemv_fp8 (1 byte per weight) against
 * the bf16 routes on a bf16 copy (what loading the weight as bf16 gives) and against the FP8 fallback
 * (dequantized into scratch, then the bf16 route); and the MoE decode pairs over FP8 and bf16 expert tables.
 * "of copy" is over each route's own weight bytes; compare the times. */

struct fp8w_arg {
    struct kn_cuda_blas *bl;
    const uint8_t *pool; /* n_sets weight sets of set_bytes, rotated */
    size_t set_bytes;
    int32_t n_sets;
    const float *scale; /* block scales, shared by every set */
    int64_t rows, cols, n;
    float *x, *y;
    uint16_t *xb, *dq;
    void *ws;
    size_t ws_bytes;
    int route; /* 0 bf16 gemv, 1 bf16 tc, 2 bf16 cuBLAS, 3 fp8 gemv, 4 fp8 dequant + bf16 route,
                  5 experts bf16, 6 experts fp8, 7 fp8 tc (x converted each call), 8 grouped
                  experts bf16, 9 grouped fp8 dequant + bf16, 10 grouped fp8 tc, 11 experts bf16 one
                  table (a decode step's down product) */
    void *xh;  /* fp8 tc: x as scaled f16, and its row scales */
    float *xs;
    const int32_t *off;   /* grouped experts: expert offsets of the sorted rows */
    void **dqtab;         /* grouped fp8 dequant: the bf16 scratch table ([2E]) */
    const int32_t *ids;   /* experts: the pairs' experts */
    void **tab8, **tab16; /* experts: device tables per set ([n_sets][2E] weight pointers) */
    const float **stab;   /* experts: [2E] scale pointers */
    int32_t E;
    int32_t group; /* experts bf16 (5, 11): pairs may share experts (kn_cuda_gemv_experts_bf16's group) */
};

static void fp8w_bf16(struct fp8w_arg *a, const void *w, int tc)
{
    if (a->n <= 2 && !tc) {
        KC(kn_cuda_gemv_bf16(a->n, a->rows, a->cols, a->x, a->cols, w, a->y, a->rows, g_stream, &g_err));
    } else if (tc) {
        KC(kn_cuda_gemm_small_bf16(a->n, a->rows, a->cols, a->x, a->cols, w, a->y, a->rows, a->ws,
                                   a->ws_bytes, g_stream, &g_err));
    } else {
        KC(kn_cuda_convert(a->x, a->xb, a->n * a->cols, 1, g_stream, &g_err));
        KC(kn_cuda_gemm_bf16(a->bl, a->n, a->rows, a->cols, a->xb, a->cols, w, a->cols, 0.0f, a->y, a->rows,
                             0, &g_err));
    }
}

static void run_fp8w(void *p, int it)
{
    struct fp8w_arg *a = (struct fp8w_arg *)p;
    const int set = it % a->n_sets;
    const uint8_t *w = a->pool + (size_t)set * a->set_bytes;
    if (a->route == 11) { /* the down product of a decode step: one table, x the pairs' own rows */
        KC(kn_cuda_gemv_experts_bf16(a->n, 1, a->rows, a->cols, a->x, a->cols, a->ids,
                                     (const void *const *)a->tab16 + (size_t)set * a->E, NULL, a->y, NULL,
                                     a->rows, a->group, g_stream, &g_err));
        return;
    }
    if (a->route >= 8) { /* gate + up of a decode batch's rows sorted by expert */
        const void *const *t16 = (const void *const *)a->tab16 + (size_t)set * 2 * a->E;
        const uint8_t *const *t8 = (const uint8_t *const *)a->tab8 + (size_t)set * 2 * a->E;
        float *yb = a->y + a->n * a->rows;
        if (a->route == 10) {
            KC(kn_cuda_x_f16_scaled(a->n, a->cols, a->x, a->cols, a->xh, a->xs, g_stream, &g_err));
            KC(kn_cuda_gemm_small_experts_fp8(a->E, a->off, a->rows, a->cols, a->xh, a->xs, t8, a->stab,
                                              t8 + a->E, a->stab + a->E, 128, 128, a->y, yb, a->rows,
                                              g_stream, &g_err));
            return;
        }
        if (a->route == 9)
            KC(kn_cuda_dequant_fp8_experts(2, a->E, a->off, t8, a->stab, a->rows, a->cols, 128, 128, a->dqtab,
                                           g_stream, &g_err));
        const void *const *t = a->route == 9 ? (const void *const *)a->dqtab : t16;
        KC(kn_cuda_gemm_small_experts_bf16(a->E, a->off, a->rows, a->cols, a->x, a->cols, t, t + a->E, a->y,
                                           yb, a->rows, g_stream, &g_err));
        return;
    }
    if (a->route == 7) {
        KC(kn_cuda_x_f16_scaled(a->n, a->cols, a->x, a->cols, a->xh, a->xs, g_stream, &g_err));
        KC(kn_cuda_gemm_small_fp8(a->n, a->rows, a->cols, a->xh, a->xs, w, a->scale, 128, 128, a->y, a->rows,
                                  a->ws, a->ws_bytes, g_stream, &g_err));
        return;
    }
    if (a->route == 5 || a->route == 6) {
        const int64_t pairs = a->n;
        if (a->route == 5)
            KC(kn_cuda_gemv_experts_bf16(pairs, 1, a->rows, a->cols, a->x, a->cols, a->ids,
                                         (const void *const *)a->tab16 + (size_t)set * 2 * a->E,
                                         (const void *const *)a->tab16 + (size_t)set * 2 * a->E + a->E, a->y,
                                         a->y + pairs * a->rows, a->rows, a->group, g_stream, &g_err));
        else
            KC(kn_cuda_gemv_experts_fp8(pairs, 1, a->rows, a->cols, a->x, a->cols, a->ids,
                                        (const uint8_t *const *)a->tab8 + (size_t)set * 2 * a->E, a->stab,
                                        (const uint8_t *const *)a->tab8 + (size_t)set * 2 * a->E + a->E,
                                        a->stab + a->E, 128, 128, a->y, a->y + pairs * a->rows, a->rows,
                                        a->group, g_stream, &g_err));
        return;
    }
    if (a->route <= 2) {
        fp8w_bf16(a, w, a->route == 1);
    } else if (a->route == 3) {
        KC(kn_cuda_gemv_fp8(a->n, a->rows, a->cols, a->x, a->cols, w, a->scale, 128, 128, a->y, a->rows,
                            g_stream, &g_err));
    } else {
        KC(kn_cuda_dequant_fp8_block(w, a->scale, a->rows, a->cols, 128, 128, a->dq, g_stream, &g_err));
        fp8w_bf16(a, a->dq, a->n >= 3 && kn_cuda_gemm_small_prefer(a->n, a->rows, a->cols));
    }
}

/* FP8 weights at prefill sizes: the products of m activation rows, m 512-8192, as a prefill runs them. The
 * bf16 product on a bf16 copy (what loading the weight as bf16 gives; x converted to bf16 in the call), the
 * FP8 default (the weight dequantized into scratch, then that product) and MMGW_CUDA_FP8_PREFILL=e4m3 (x
 * quantized to e4m3 groups, cuBLASLt's block-scaled FP8 product). Weights rotated through > 10 x L2;
 * "TFLOP/s" counts 2 m n k per call, the conversions and dequantizations included in the time. */
struct fp8pf_arg {
    struct kn_cuda_blas *bl;
    const uint8_t *pool; /* n_sets weights of set_bytes (bf16 copies or e4m3), rotated */
    size_t set_bytes;
    int32_t n_sets;
    const float *scale;
    int64_t m, rows, cols;
    const float *x;
    float *y;
    uint16_t *xb, *dq;
    void *xq; /* the e4m3 route's workspace */
    size_t ws_bytes;
    int route; /* 0 bf16 copy, 1 fp8 dequantize + bf16, 2 fp8 e4m3 block */
};

static void run_fp8pf(void *p, int it)
{
    struct fp8pf_arg *a = (struct fp8pf_arg *)p;
    const uint8_t *w = a->pool + (size_t)(it % a->n_sets) * a->set_bytes;
    if (a->route == 2) {
        KC(kn_cuda_gemm_fp8_block(a->bl, a->m, a->rows, a->cols, a->x, a->cols, w, a->scale, a->y, a->rows,
                                  a->xq, a->ws_bytes, &g_err));
        return;
    }
    const void *wb = w;
    if (a->route == 1) {
        KC(kn_cuda_dequant_fp8_block(w, a->scale, a->rows, a->cols, 128, 128, a->dq, g_stream, &g_err));
        wb = a->dq;
    }
    KC(kn_cuda_convert(a->x, a->xb, a->m * a->cols, 1, g_stream, &g_err));
    KC(kn_cuda_gemm_bf16(a->bl, a->m, a->rows, a->cols, a->xb, a->cols, wb, a->cols, 0.0f, a->y, a->rows, 0,
                         &g_err));
}

static void bench_fp8pf(void)
{
    printf(
        "== FP8 weights at prefill sizes: bf16 copy vs FP8 dequantize + bf16 vs e4m3 activations on cuBLASLt "
        "block scaling (MMGW_CUDA_FP8_PREFILL=e4m3)\n");
    static const int64_t shapes[][2] = {{8192, 6144}, {6144, 8192}, {3072, 6144}, {6144, 1536}};
    static const int64_t ms[] = {512, 2047, 2048, 8192}; /* 2047: 3 rows in a 4-row tail product */
    struct fp8pf_arg a;
    memset(&a, 0, sizeof a);
    KC(kn_cuda_blas_create(&a.bl, 0, &g_err));
    const size_t pool = (size_t)640 << 20;
    uint8_t *w = (uint8_t *)dmalloc(pool);
    fill_bf16(w, (int64_t)(pool / 2), 96, 0.02f); /* bytes of bf16 values: some e4m3 NaN codes, timing only */
    float *scale = (float *)dmalloc(sizeof(float) * 64 * 64);
    fill_f32(scale, 64 * 64, 97, 0.01f);
    const int64_t mmax = 8192, kmax = 8192;
    float *x = (float *)dmalloc(sizeof(float) * mmax * kmax);
    fill_f32(x, mmax * kmax, 98, 1.0f);
    a.pool = w, a.scale = scale, a.x = x;
    a.y = (float *)dmalloc(sizeof(float) * mmax * 8192);
    a.xb = (uint16_t *)dmalloc(2 * (size_t)(mmax * kmax));
    a.dq = (uint16_t *)dmalloc(2 * (size_t)8192 * 8192);
    a.ws_bytes = kn_cuda_gemm_fp8_block_ws(mmax, 8192, kmax);
    a.xq = dmalloc(a.ws_bytes);
    static const char *const names[] = {"bf16 copy", "fp8 dequant+bf16", "fp8 e4m3 block"};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (int r = 0; r < 3; r++) {
                a.rows = shapes[si][0], a.cols = shapes[si][1], a.m = ms[mi], a.route = r;
                a.set_bytes = (size_t)(a.rows * a.cols) * (r == 0 ? 2u : 1u);
                a.n_sets = (int32_t)(pool / a.set_bytes);
                if (a.n_sets > 64) a.n_sets = 64;
                char cfg[96];
                snprintf(cfg, sizeof cfg, "%lld x %lld, m %lld", (long long)a.rows, (long long)a.cols,
                         (long long)a.m);
                const double ms_ = time_ms(run_fp8pf, &a, 3, g_quick ? 5 : 20);
                emit("fp8 prefill", cfg, names[r], ms_ * 1e3, "us");
                emit("fp8 prefill", cfg, names[r],
                     2.0 * (double)a.m * (double)a.rows * (double)a.cols / (ms_ * 1e-3) / 1e12, "TFLOP/s");
            }
    void *bufs[] = {w, scale, x, a.y, a.xb, a.dq, a.xq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) CK(cudaFree(bufs[i]));
    kn_cuda_blas_destroy(a.bl);
}

static void bench_fp8w(void)
{
    printf("== FP8 weights at decode sizes: kn_cuda_gemv_fp8 vs the bf16 routes on a bf16 copy vs the FP8 "
           "fallback (dequantize + bf16 route); MoE decode pairs over FP8 / bf16 expert tables\n");
    static const int64_t shapes[][2] = {{8192, 6144}, {512, 6144},  {6144, 8192},
                                        {2048, 6144}, {6144, 2048}, {3072, 6144}};
    static const int64_t ns[] = {1, 2, 4, 8, 16};
    /* KN_BENCH_FP8W_NMAX: only the activation row counts up to this (a short run) */
    const char *nmax_s = getenv("KN_BENCH_FP8W_NMAX");
    const int64_t nmax = nmax_s && atoi(nmax_s) > 0 ? atoi(nmax_s) : 16;
    struct fp8w_arg a;
    memset(&a, 0, sizeof a);
    KC(kn_cuda_blas_create(&a.bl, 0, &g_err));
    const size_t pool = (size_t)640 << 20; /* rotated weights: > 10 x L2 */
    uint8_t *w = (uint8_t *)dmalloc(pool);
    fill_bf16(w, (int64_t)(pool / 2), 93, 0.02f); /* bytes of bf16 values: some e4m3 NaN codes, timing only */
    float *scale = (float *)dmalloc(sizeof(float) * 64 * 64);
    fill_f32(scale, 64 * 64, 94, 0.01f);
    a.pool = w, a.scale = scale;
    a.x = (float *)dmalloc(sizeof(float) * 128 * 8192);
    a.y = (float *)dmalloc(sizeof(float) * 2 * 128 * 8199);
    a.xh = dmalloc(2 * 128 * 8192);
    a.xs = (float *)dmalloc(sizeof(float) * 128);
    a.xb = (uint16_t *)dmalloc(2 * 16 * 8192);
    a.dq = (uint16_t *)dmalloc((size_t)8192 * 8192 * 2);
    fill_f32(a.x, 128 * 8192, 95, 1.0f);
    a.ws_bytes = sizeof(float) * 64 * 16 * 8199;
    a.ws = dmalloc(a.ws_bytes);
    static const char *const names[] = {"bf16 gemv", "bf16 tc", "bf16 cublas", "fp8 gemv", "fp8 dequant+bf16",
                                        "",          "",        "fp8 tc"};
    static const int routes[] = {0, 1, 2, 3, 7, 4};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (int ri = 0; ri < 6; ri++) {
                const int r = routes[ri];
                a.rows = shapes[si][0], a.cols = shapes[si][1], a.n = ns[ni], a.route = r;
                if (a.n > nmax) continue;
                if (r == 0 && a.n > 2) continue;
                if (r == 1 && (a.n < 3 || !kn_cuda_gemm_small_ok(a.n, a.cols, a.cols))) continue;
                if (r == 4 && a.n <= 2) continue; /* the fallback serves more rows than the stream takes */
                const int elem = r == 3 || r == 7 ? 1 : 2;
                a.set_bytes = (size_t)(a.rows * a.cols) * (size_t)elem;
                a.n_sets = (int32_t)(pool / a.set_bytes);
                if (a.n_sets > 64) a.n_sets = 64;
                char cfg[96];
                snprintf(cfg, sizeof cfg, "%lld x %lld, n %lld", (long long)a.rows, (long long)a.cols,
                         (long long)a.n);
                time_emit_stream(names[r], cfg, run_fp8w, &a, (double)a.set_bytes, g_quick ? 5 : 30, 20, 0);
                if (r == 7 && (a.n == 1 || a.n == 16) && a.rows >= 2048) { /* forced inner splits */
                    static const char *const fk[][2] = {
                        {"1", "fp8 tc ks1"}, {"2", "fp8 tc ks2"}, {"8", "fp8 tc ks8"}};
                    for (int f = 0; f < 3; f++) {
                        knob_setenv("KN_CUDA_GEMM_FP8_KS", fk[f][0], 1);
                        time_emit_stream(fk[f][1], cfg, run_fp8w, &a, (double)a.set_bytes, g_quick ? 5 : 30,
                                         20, 0);
                        knob_unsetenv("KN_CUDA_GEMM_FP8_KS");
                    }
                }
                if (r == 3 && a.n <= 8) { /* the bulk-copy route (opt-in); "fp8 gemv" is the default route */
                    knob_setenv("KN_CUDA_GEMV_FP8_BULK", "1", 1);
                    time_emit_stream("fp8 gemv bulk", cfg, run_fp8w, &a, (double)a.set_bytes,
                                     g_quick ? 5 : 30, 20, 0);
                    static const char *const fb[][3] = {
                        {"KN_CUDA_GEMV_FP8_BULK_CFG", "1", "fp8 gemv bulk512"},
                        {"KN_CUDA_GEMV_FP8_BULK_CFG", "2", "fp8 gemv bulk2048"},
                        {"KN_CUDA_GEMV_FP8_BULK_KS", "1", "fp8 gemv bulk ks1"},
                        {"KN_CUDA_GEMV_FP8_BULK_KS", "2", "fp8 gemv bulk ks2"},
                        {"KN_CUDA_GEMV_FP8_BULK_KS", "4", "fp8 gemv bulk ks4"}};
                    /* the bulk route's other stage shapes, and its forced splits */
                    for (int f = 0; f < 5 && a.n <= 2; f++) {
                        knob_setenv(fb[f][0], fb[f][1], 1);
                        time_emit_stream(fb[f][2], cfg, run_fp8w, &a, (double)a.set_bytes, g_quick ? 5 : 30,
                                         20, 0);
                        knob_unsetenv(fb[f][0]);
                    }
                    knob_setenv("KN_CUDA_GEMV_FP8_BULK", "0", 1); /* the CUDA-core kernels */
                    time_emit_stream("fp8 gemv cc", cfg, run_fp8w, &a, (double)a.set_bytes, g_quick ? 5 : 30,
                                     20, 0);
                    knob_setenv("KN_CUDA_GEMV_FP8_BULK", "2", 1); /* the ring (x converted once at n <= 2) */
                    time_emit_stream("fp8 gemv ring", cfg, run_fp8w, &a, (double)a.set_bytes,
                                     g_quick ? 5 : 30, 20, 0);
                    if (a.n <= 2) { /* the ring without x converted once per CTA */
                        knob_setenv("KN_CUDA_GEMV_FP8_RING_XS", "0", 1);
                        time_emit_stream("fp8 gemv ring no-xs", cfg, run_fp8w, &a, (double)a.set_bytes,
                                         g_quick ? 5 : 30, 20, 0);
                        knob_unsetenv("KN_CUDA_GEMV_FP8_RING_XS");
                    }
                    knob_unsetenv("KN_CUDA_GEMV_FP8_BULK");
                }
                if (r == 3 && a.n <= 2) { /* the CUDA-core kernel's forced plans (the ring off) */
                    knob_setenv("KN_CUDA_GEMV_FP8_BULK", "0", 1);
                    static const char *const fr[][3] = {
                        {"8", "1", "fp8 gemv R8"}, {"4", "1", "fp8 gemv R4"}, {"8", "2", "fp8 gemv R8 ks2"}};
                    for (int f = 0; f < 3; f++) {
                        knob_setenv("KN_CUDA_GEMV_FP8_R", fr[f][0], 1);
                        knob_setenv("KN_CUDA_GEMV_FP8_KS", fr[f][1], 1);
                        time_emit_stream(fr[f][2], cfg, run_fp8w, &a, (double)a.set_bytes, g_quick ? 5 : 30,
                                         20, 0);
                        knob_unsetenv("KN_CUDA_GEMV_FP8_R");
                        knob_unsetenv("KN_CUDA_GEMV_FP8_KS");
                    }
                    knob_unsetenv("KN_CUDA_GEMV_FP8_BULK");
                }
            }
    /* MoE decode pairs at M3's expert shape (128 experts of 6144 x 3072): gate + up of 8 pairs (2 tokens x
     * top-4), each pair its own expert, over rotated sets of expert tables; FP8 through the CUDA cores and
     * the bulk route; then the down products' shape (3072 wide) */
    for (int sh = 0; sh < 2; sh++) {
        const int32_t E = 128;
        const int64_t rows = sh ? 6144 : 3072, cols = sh ? 3072 : 6144, pairs = 8;
        int32_t ids[8];
        for (int i = 0; i < 8; i++) ids[i] = i * 13 % E;
        a.ids = (const int32_t *)dmalloc(sizeof ids);
        CK(cudaMemcpy((void *)a.ids, ids, sizeof ids, cudaMemcpyHostToDevice));
        a.E = E, a.rows = rows, a.cols = cols, a.n = pairs;
        for (int ri = 0; ri < 5; ri++) {
            const int r = ri == 0 ? 5 : 6;
            if (ri >= 1 && ri <= 3)
                knob_setenv("KN_CUDA_GEMV_FP8_BULK", ri == 1 ? "0" : ri == 2 ? "1" : "2", 1);
            if (ri == 3) knob_setenv("KN_CUDA_GEMV_FP8_RING_XS", "0", 1);      /* ri 4: the default */
            if (ri == 1) knob_setenv("KN_CUDA_GEMV_FP8_EXPERTS_RING", "0", 1); /* the CUDA-core kernel */
            const size_t eb = (size_t)(rows * cols) * (r == 5 ? 2 : 1);        /* one expert weight */
            /* sets of 2E experts laid out over the pool; experts past it wrap (only 16 are read per set) */
            const int32_t n_sets = 8;
            void **h = (void **)hmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            const float **hs = (const float **)hmalloc(sizeof(float *) * (size_t)(2 * E));
            const size_t per_pool = pool / eb;
            for (int64_t i = 0; i < (int64_t)n_sets * 2 * E; i++)
                h[i] = w + (size_t)(i % (int64_t)per_pool) * eb;
            for (int i = 0; i < 2 * E; i++) hs[i] = scale;
            void **tab = (void **)dmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            CK(cudaMemcpy(tab, h, sizeof(void *) * (size_t)(n_sets * 2 * E), cudaMemcpyHostToDevice));
            a.stab = (const float **)dmalloc(sizeof(float *) * (size_t)(2 * E));
            CK(cudaMemcpy((void *)a.stab, hs, sizeof(float *) * (size_t)(2 * E), cudaMemcpyHostToDevice));
            if (r == 5)
                a.tab16 = tab;
            else
                a.tab8 = tab;
            a.route = r, a.n_sets = n_sets;
            static const char *const en[] = {"experts bf16", "experts fp8 cc", "experts fp8 bulk",
                                             "experts fp8 ring no-xs", "experts fp8 ring xs"};
            time_emit_stream(en[ri],
                             sh ? "both tables 8 pairs, 6144 x 3072" : "gate + up 8 pairs, 3072 x 6144",
                             run_fp8w, &a, (double)(2 * pairs) * (double)eb, g_quick ? 5 : 30, 20, 0);
            knob_unsetenv("KN_CUDA_GEMV_FP8_BULK"), knob_unsetenv("KN_CUDA_GEMV_FP8_EXPERTS_RING");
            knob_unsetenv("KN_CUDA_GEMV_FP8_RING_XS");
            cudaFree(tab), cudaFree((void *)a.stab);
            free(h), free(hs);
        }
        cudaFree((void *)a.ids);
    }
    /* The down products of a decode step (one table, each pair its own x row) at M3's width (3072) and the
     * synthetic model's (1536), 4 and 16 pairs (batch 1 and 4 at top-4): the (row, half) units
     * (KN_CUDA_GEMV_HALVES=2: at both widths) against 8 warps over each row, interleaved twice */
    for (int wi = 0; wi < 2; wi++)
        for (int pi = 0; pi < 2; pi++) {
            const int32_t E = 128, pairs = pi ? 16 : 4;
            const int64_t rows = 6144, cols = wi ? 1536 : 3072;
            int32_t ids[16];
            for (int i = 0; i < 16; i++) ids[i] = i * 13 % E;
            a.ids = (const int32_t *)dmalloc(sizeof ids);
            CK(cudaMemcpy((void *)a.ids, ids, sizeof ids, cudaMemcpyHostToDevice));
            const size_t eb = (size_t)(rows * cols) * 2;
            const int32_t n_sets = 8;
            void **h = (void **)hmalloc(sizeof(void *) * (size_t)(n_sets * E));
            for (int64_t i = 0; i < (int64_t)n_sets * E; i++)
                h[i] = w + (size_t)(i % (int64_t)(pool / eb)) * eb;
            void **tab = (void **)dmalloc(sizeof(void *) * (size_t)(n_sets * E));
            CK(cudaMemcpy(tab, h, sizeof(void *) * (size_t)(n_sets * E), cudaMemcpyHostToDevice));
            a.tab16 = tab, a.E = E, a.rows = rows, a.cols = cols, a.n = pairs, a.route = 11,
            a.n_sets = n_sets;
            char cfg[96];
            snprintf(cfg, sizeof cfg, "down %d pairs, %lld x %lld", pairs, (long long)rows, (long long)cols);
            for (int rd = 0; rd < 4; rd++) {
                knob_setenv("KN_CUDA_GEMV_HALVES", rd & 1 ? "0" : "2", 1);
                time_emit_stream(rd & 1 ? "experts bf16 8 warps a row" : "experts bf16 halves", cfg, run_fp8w,
                                 &a, (double)pairs * (double)eb, g_quick ? 5 : 30, 20, 0);
            }
            knob_unsetenv("KN_CUDA_GEMV_HALVES");
            cudaFree(tab), cudaFree((void *)a.ids);
            free(h);
        }
    /* 4 tokens x top-4 of 32 experts (the synthetic model's MoE at batch 4): 16 pairs over 12 experts, 4 of
     * them chosen by two tokens; gate + up (two tables) and down (one) at M3's expert shape, the pairs of an
     * expert grouped (its weights read from HBM once) against one stream per pair (KN_CUDA_GEMV_GROUP=0),
     * interleaved twice; % of copy over the 12 experts' bytes. The down products' (row, half) units keep one
     * stream per pair (grouped they measured slower, v119-v120): their two rows are one route, the noise. */
    for (int sh = 0; sh < 2; sh++) {
        const int32_t E = 32, pairs = 16, nt = sh ? 1 : 2; /* tables */
        static const int32_t ids[16] = {3, 17, 8, 25, 17, 30, 3, 11, 21, 8, 5, 14, 29, 25, 0, 12};
        const int64_t rows = sh ? 6144 : 3072, cols = sh ? 3072 : 6144;
        a.ids = (const int32_t *)dmalloc(sizeof ids);
        CK(cudaMemcpy((void *)a.ids, ids, sizeof ids, cudaMemcpyHostToDevice));
        const size_t eb = (size_t)(rows * cols) * 2;
        const int32_t n_sets = 8;
        void **h = (void **)hmalloc(sizeof(void *) * (size_t)(n_sets * nt * E));
        for (int64_t i = 0; i < (int64_t)n_sets * nt * E; i++)
            h[i] = w + (size_t)(i % (int64_t)(pool / eb)) * eb;
        void **tab = (void **)dmalloc(sizeof(void *) * (size_t)(n_sets * nt * E));
        CK(cudaMemcpy(tab, h, sizeof(void *) * (size_t)(n_sets * nt * E), cudaMemcpyHostToDevice));
        a.tab16 = tab, a.E = E, a.rows = rows, a.cols = cols, a.n = pairs, a.route = sh ? 11 : 5;
        a.n_sets = n_sets, a.group = 1;
        static const char *const names[4] = {"experts bf16 grouped", "experts bf16 per pair",
                                             "experts bf16 per pair, pairs fastest",
                                             "experts bf16 grouped, pairs fastest"};
        for (int rd = 0; rd < 8; rd++) {
            const int v = rd % 4;
            knob_setenv("KN_CUDA_GEMV_GROUP", v == 0 || v == 3 ? "1" : "0", 1);
            knob_setenv("KN_CUDA_GEMV_PAIR_FAST", v >= 2 ? "1" : "0", 1);
            time_emit_stream(names[v],
                             sh ? "down 16 pairs / 12 experts, 6144 x 3072"
                                : "gate + up 16 pairs / 12 experts, 3072 x 6144",
                             run_fp8w, &a, 12.0 * nt * (double)eb, g_quick ? 5 : 30, 20, 0, 1);
        }
        knob_unsetenv("KN_CUDA_GEMV_GROUP");
        /* the FP8 pairs' route (the ring) for gate + up: the pairs fastest against tiles fastest */
        if (!sh) {
            const size_t eb8 = (size_t)(rows * cols);
            void **h8 = (void **)hmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            const float **hs = (const float **)hmalloc(sizeof(float *) * (size_t)(2 * E));
            for (int64_t i = 0; i < (int64_t)n_sets * 2 * E; i++)
                h8[i] = w + (size_t)(i % (int64_t)(pool / eb8)) * eb8;
            for (int i = 0; i < 2 * E; i++) hs[i] = scale;
            void **tab8 = (void **)dmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            CK(cudaMemcpy(tab8, h8, sizeof(void *) * (size_t)(n_sets * 2 * E), cudaMemcpyHostToDevice));
            a.stab = (const float **)dmalloc(sizeof(float *) * (size_t)(2 * E));
            CK(cudaMemcpy((void *)a.stab, hs, sizeof(float *) * (size_t)(2 * E), cudaMemcpyHostToDevice));
            a.tab8 = tab8, a.route = 6;
            for (int rd = 0; rd < 4; rd++) {
                knob_setenv("KN_CUDA_GEMV_PAIR_FAST", rd & 1 ? "0" : "1", 1);
                time_emit_stream(rd & 1 ? "experts fp8 per pair" : "experts fp8 per pair, pairs fastest",
                                 "gate + up 16 pairs / 12 experts, 3072 x 6144", run_fp8w, &a,
                                 24.0 * (double)eb8, g_quick ? 5 : 30, 20, 0, 1);
            }
            cudaFree(tab8), cudaFree((void *)a.stab);
            free(h8), free(hs);
        }
        knob_unsetenv("KN_CUDA_GEMV_PAIR_FAST");
        a.group = 0;
        cudaFree(tab), cudaFree((void *)a.ids);
        free(h);
    }
    /* MoE products of a decode batch grouped by expert: gate + up of 16 tokens x top-8 = 128 rows, 64 of 128
     * experts with 2 rows each, M3's expert shape: bf16 tables, FP8 dequantized into scratch then the bf16
     * products (what the backend did), FP8 on the tensor cores (x converted each call) */
    {
        const int32_t E = 128, act = 64;
        const int64_t rows = 3072, cols = 6144, pairs = 128;
        int32_t off[129];
        for (int e = 0; e <= E; e++) off[e] = e < act ? 2 * e : (int32_t)pairs;
        a.off = (const int32_t *)dmalloc(sizeof off);
        CK(cudaMemcpy((void *)a.off, off, sizeof off, cudaMemcpyHostToDevice));
        const size_t dqb = (size_t)(rows * cols) * 2;
        uint8_t *dq = (uint8_t *)dmalloc(dqb * (size_t)(2 * act));
        void **hd = (void **)hmalloc(sizeof(void *) * (size_t)(2 * E));
        for (int i = 0; i < 2 * E; i++) hd[i] = dq + (size_t)((i % E) % act + (i >= E ? act : 0)) * dqb;
        a.dqtab = (void **)dmalloc(sizeof(void *) * (size_t)(2 * E));
        CK(cudaMemcpy(a.dqtab, hd, sizeof(void *) * (size_t)(2 * E), cudaMemcpyHostToDevice));
        a.E = E, a.rows = rows, a.cols = cols, a.n = pairs;
        const int32_t n_sets = 4;
        void **tb[2];
        const float **hs = (const float **)hmalloc(sizeof(float *) * (size_t)(2 * E));
        for (int i = 0; i < 2 * E; i++) hs[i] = scale;
        a.stab = (const float **)dmalloc(sizeof(float *) * (size_t)(2 * E));
        CK(cudaMemcpy((void *)a.stab, hs, sizeof(float *) * (size_t)(2 * E), cudaMemcpyHostToDevice));
        for (int k = 0; k < 2; k++) {
            const size_t eb = (size_t)(rows * cols) * (k == 0 ? 2 : 1), per_pool = pool / eb;
            void **h = (void **)hmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            for (int64_t i = 0; i < (int64_t)n_sets * 2 * E; i++)
                h[i] = w + (size_t)(i % (int64_t)per_pool) * eb;
            tb[k] = (void **)dmalloc(sizeof(void *) * (size_t)(n_sets * 2 * E));
            CK(cudaMemcpy(tb[k], h, sizeof(void *) * (size_t)(n_sets * 2 * E), cudaMemcpyHostToDevice));
            free(h);
        }
        a.tab16 = tb[0], a.tab8 = tb[1], a.n_sets = n_sets;
        static const char *const gn[] = {"grouped bf16", "grouped fp8 dequant+bf16", "grouped fp8 tc"};
        /* the bf16 and FP8 tensor-core routes' three kernels each (KN_CUDA_GS_EXPERTS_RING), interleaved
         * twice */
        static const char *const rn[2][3] = {
            {"grouped bf16 registers", "grouped bf16 ring", "grouped bf16 ring x ahead"},
            {"grouped fp8 tc registers", "grouped fp8 tc ring", "grouped fp8 tc ring x ahead"}};
        for (int rd = 0; rd < 6; rd++)
            for (int f8 = 0; f8 < 2; f8++) {
                char v[2] = {(char)('0' + rd % 3), 0};
                knob_setenv("KN_CUDA_GS_EXPERTS_RING", v, 1);
                a.route = f8 ? 10 : 8;
                time_emit_stream(rn[f8][rd % 3], "gate + up, 128 rows over 64 experts, 3072 x 6144", run_fp8w,
                                 &a, (double)(2 * act) * (double)(rows * cols) * (f8 ? 1.0 : 2.0),
                                 g_quick ? 5 : 20, 10, 0, 1);
            }
        knob_unsetenv("KN_CUDA_GS_EXPERTS_RING");
        for (int r = 8; r <= 10; r++) {
            a.route = r;
            const double bytes = (double)(2 * act) * (double)(rows * cols) * (r == 8 ? 2.0 : 1.0);
            time_emit_stream(gn[r - 8], "gate + up, 128 rows over 64 experts, 3072 x 6144", run_fp8w, &a,
                             bytes, g_quick ? 5 : 20, 10, 0);
        }
        cudaFree(tb[0]), cudaFree(tb[1]), cudaFree((void *)a.stab), cudaFree((void *)a.off), cudaFree(dq);
        cudaFree(a.dqtab);
        free(hd), free(hs);
    }
    cudaFree(w), cudaFree(scale), cudaFree(a.x), cudaFree(a.y), cudaFree(a.xb), cudaFree(a.dq),
        cudaFree(a.ws), cudaFree(a.xh), cudaFree(a.xs);
    kn_cuda_blas_destroy(a.bl);
}

/* ---------------------------------------------------------------------------------------------------- */
/* MoE expert products of a prefill: the wgmma grouped launch against the host-grouped cuBLAS route        */

#define EX_SETS 8
struct experts_arg {
    struct kn_cuda_blas *bl;
    int32_t E, K, H, I;
    int64_t pairs;
    int32_t *off_d[EX_SETS], *off_h; /* rotated offsets: a prompt's routing differs from the last one's */
    void **tab_d, **tab_h;           /* [3][E] bf16 weights: gate, up, down */
    void *maps_gu, *maps_dn;         /* their tensor maps */
    uint16_t *x, *act;               /* [pairs][H] expert-sorted rows; [pairs][I] activations */
    float *g, *u, *eo;
    int32_t *ctr; /* the products' dynamic tile order */
    /* FP8 experts (routes 5-7): e4m3 weights [3][E] (bf16 weights' bytes: some NaN codes, timing only), one
     * table of 128 x 128 block scales each, their e4m3 tensor maps; the routed rows as f32 (quantized in
     * the route) and the e4m3 rows / scales / f32 activations the route writes */
    uint8_t **tab8_d, **tab8_h;
    float **stab_d;
    void *maps8_gu, *maps8_dn;
    float *xf, *actf, *xsc;
    uint8_t *xq;
    int route; /* 0 wgmma with TMA loads, 1 wgmma with cp.async loads, 2 host-grouped cuBLAS (what the backend
                  did), 3 the same with one routing every call, 4 one cuBLAS product of all rows, 5 FP8
                  experts on the e4m3 tensor cores (rows quantized to e4m3 groups first, then the
                  activations as SwiGLU makes them), 6 FP8 experts dequantized into the bf16 tables (the
                  experts that got rows, before each product: the backend's default), then route 0, 7
                  route 5 with SwiGLU's f32 activations quantized in a pass of their own (as before the
                  twenty-third session) */
};

static void run_experts(void *p, int it)
{
    struct experts_arg *a = (struct experts_arg *)p;
    const int64_t P = a->pairs;
    const int32_t *off_d = a->off_d[a->route == 3 ? 0 : it % EX_SETS];
    if (a->route == 5 || a->route == 7) {
        const int32_t E = a->E;
        KC(kn_cuda_x_e4m3_groups(P, a->H, a->xf, a->H, a->xq, a->xsc, P, 0, &g_err));
        KC(kn_cuda_gemm_experts_e4m3(E, off_d, P, a->I, a->H, a->xq, a->xsc, P,
                                     (const uint8_t *const *)a->tab8_d, (const float *const *)a->stab_d,
                                     (const uint8_t *const *)a->tab8_d + E,
                                     (const float *const *)a->stab_d + E, a->maps8_gu,
                                     (const uint8_t *)a->maps8_gu + (size_t)E * KN_CUDA_TMAP_BYTES, a->g,
                                     a->u, a->I, a->ctr, 0, &g_err));
        if (a->route == 5) { /* the backend's: the activations quantized as SwiGLU makes them */
            KC(kn_cuda_swiglu_e4m3(a->g, a->u, a->I, P, a->I, 1.702f, 7.0f, a->xq, a->xsc, P, 0, &g_err));
        } else {
            KC(kn_cuda_swiglu(a->g, a->u, a->I, P, a->I, 1.702f, 7.0f, a->actf, a->I, 0, 0, &g_err));
            KC(kn_cuda_x_e4m3_groups(P, a->I, a->actf, a->I, a->xq, a->xsc, P, 0, &g_err));
        }
        KC(kn_cuda_gemm_experts_e4m3(E, off_d, P, a->H, a->I, a->xq, a->xsc, P,
                                     (const uint8_t *const *)a->tab8_d + 2 * E,
                                     (const float *const *)a->stab_d + 2 * E, NULL, NULL, a->maps8_dn, NULL,
                                     a->eo, NULL, a->H, a->ctr, 0, &g_err));
        return;
    }
    if (a->route == 6) {
        const int32_t E = a->E;
        KC(kn_cuda_dequant_fp8_experts(2, E, off_d, (const uint8_t *const *)a->tab8_d,
                                       (const float *const *)a->stab_d, a->I, a->H, 128, 128, a->tab_d, 0,
                                       &g_err));
        KC(kn_cuda_gemm_experts_bf16(E, off_d, P, a->I, a->H, a->x, a->H, (const void *const *)a->tab_d,
                                     (const void *const *)a->tab_d + E, a->maps_gu,
                                     (const uint8_t *)a->maps_gu + (size_t)E * KN_CUDA_TMAP_BYTES, a->g, a->u,
                                     a->I, a->ctr, 0, &g_err));
        KC(kn_cuda_swiglu(a->g, a->u, a->I, P, a->I, 1.702f, 7.0f, a->act, a->I, 1, 0, &g_err));
        KC(kn_cuda_dequant_fp8_experts(1, E, off_d, (const uint8_t *const *)a->tab8_d + 2 * E,
                                       (const float *const *)a->stab_d + 2 * E, a->H, a->I, 128, 128,
                                       a->tab_d + 2 * E, 0, &g_err));
        KC(kn_cuda_gemm_experts_bf16(E, off_d, P, a->H, a->I, a->act, a->I,
                                     (const void *const *)a->tab_d + 2 * E, NULL, a->maps_dn, NULL, a->eo,
                                     NULL, a->H, a->ctr, 0, &g_err));
        return;
    }
    if (a->route <= 1) {
        const void *mg = a->route == 0 ? a->maps_gu : NULL, *md = a->route == 0 ? a->maps_dn : NULL;
        KC(kn_cuda_gemm_experts_bf16(a->E, off_d, P, a->I, a->H, a->x, a->H, (const void *const *)a->tab_d,
                                     (const void *const *)a->tab_d + a->E, mg,
                                     mg ? (const uint8_t *)mg + (size_t)a->E * KN_CUDA_TMAP_BYTES : NULL,
                                     a->g, a->u, a->I, a->ctr, 0, &g_err));
        KC(kn_cuda_swiglu(a->g, a->u, a->I, P, a->I, 1.702f, 7.0f, a->act, a->I, 1, 0, &g_err));
        KC(kn_cuda_gemm_experts_bf16(a->E, off_d, P, a->H, a->I, a->act, a->I,
                                     (const void *const *)a->tab_d + 2 * a->E, NULL, md, NULL, a->eo, NULL,
                                     a->H, a->ctr, 0, &g_err));
    } else if (a->route <= 3) {
        int32_t *off = a->off_h + a->E + 1; /* read back as the backend did: one sync */
        CK(cudaMemcpy(off, off_d, sizeof(int32_t) * (size_t)(a->E + 1), cudaMemcpyDeviceToHost));
        for (int32_t e = 0; e < a->E; e++) {
            const int64_t r0 = off[e], cnt = off[e + 1] - r0;
            if (cnt <= 0) continue;
            KC(kn_cuda_gemm_bf16(a->bl, cnt, a->I, a->H, a->x + r0 * a->H, a->H, a->tab_h[e], a->H, 0.0f,
                                 a->g + r0 * a->I, a->I, 0, &g_err));
            KC(kn_cuda_gemm_bf16(a->bl, cnt, a->I, a->H, a->x + r0 * a->H, a->H, a->tab_h[a->E + e], a->H,
                                 0.0f, a->u + r0 * a->I, a->I, 0, &g_err));
            KC(kn_cuda_swiglu(a->g + r0 * a->I, a->u + r0 * a->I, a->I, cnt, a->I, 1.702f, 7.0f,
                              a->act + r0 * a->I, a->I, 1, 0, &g_err));
            KC(kn_cuda_gemm_bf16(a->bl, cnt, a->H, a->I, a->act + r0 * a->I, a->I, a->tab_h[2 * a->E + e],
                                 a->I, 0.0f, a->eo + r0 * a->H, a->H, 0, &g_err));
        }
    } else { /* every row against expert 0: the same FLOPs in three whole products (a ceiling, not a route) */
        KC(kn_cuda_gemm_bf16(a->bl, P, a->I, a->H, a->x, a->H, a->tab_h[0], a->H, 0.0f, a->g, a->I, 0,
                             &g_err));
        KC(kn_cuda_gemm_bf16(a->bl, P, a->I, a->H, a->x, a->H, a->tab_h[a->E], a->H, 0.0f, a->u, a->I, 0,
                             &g_err));
        KC(kn_cuda_swiglu(a->g, a->u, a->I, P, a->I, 1.702f, 7.0f, a->act, a->I, 1, 0, &g_err));
        KC(kn_cuda_gemm_bf16(a->bl, P, a->H, a->I, a->act, a->I, a->tab_h[2 * a->E], a->I, 0.0f, a->eo, a->H,
                             0, &g_err));
    }
}

/* The expert products' routes (run_experts' a->route, with knobs as env_set takes them); rows 5-12: route 0
 * with the plan's knobs set (KN_CUDA_EXPERTS_TILE 1 = 128 x 256, 2 = 256 x 128; KN_CUDA_EXPERTS_SKIP: the
 * quarters without rows always (1) or never (0) skipped; KN_CUDA_EXPERTS_L2: eviction hints on the loads) */
static const struct ex_route {
    const char *name;
    int route;
    const char *env;
} g_ex_routes[] = {
    {"wgmma grouped, TMA", 0, NULL},
    {"wgmma grouped, cp.async", 1, NULL},
    {"host-grouped cuBLAS", 2, NULL},
    {"host-grouped cuBLAS, one routing", 3, NULL},
    {"one cuBLAS product (ceiling)", 4, NULL},
    {"wgmma TMA, tiles 128 x 256", 0, "KN_CUDA_EXPERTS_TILE=1"},
    {"wgmma TMA, tiles 256 x 128", 0, "KN_CUDA_EXPERTS_TILE=2"},
    {"wgmma TMA, 128 x 256, skip", 0, "KN_CUDA_EXPERTS_TILE=1 KN_CUDA_EXPERTS_SKIP=1"},
    {"wgmma TMA, 256 x 128, skip", 0, "KN_CUDA_EXPERTS_TILE=2 KN_CUDA_EXPERTS_SKIP=1"},
    {"wgmma TMA, 128 x 256, no skip", 0, "KN_CUDA_EXPERTS_TILE=1 KN_CUDA_EXPERTS_SKIP=0"},
    {"wgmma TMA, 256 x 128, no skip", 0, "KN_CUDA_EXPERTS_TILE=2 KN_CUDA_EXPERTS_SKIP=0"},
    {"wgmma TMA, rows evict-last, weights first", 0, "KN_CUDA_EXPERTS_L2=1"},
    {"wgmma TMA, rows evict-last", 0, "KN_CUDA_EXPERTS_L2=2"},
    {"wgmma TMA, static tile order", 0, "KN_CUDA_EXPERTS_DYN=0"},
    {"wgmma TMA, static order, 128 x 256, skip", 0,
     "KN_CUDA_EXPERTS_DYN=0 KN_CUDA_EXPERTS_TILE=1 KN_CUDA_EXPERTS_SKIP=1"},
    {"wgmma TMA, 256 x 128, rows evict-last", 0, "KN_CUDA_EXPERTS_TILE=2 KN_CUDA_EXPERTS_L2=2"},
    {"fp8 experts, e4m3, tiles 128 x 256", 5, "KN_CUDA_EXPERTS_TILE=1"},
    {"fp8 experts, e4m3, tiles 256 x 128", 5, "KN_CUDA_EXPERTS_TILE=2"},
    {"fp8 experts, e4m3 wgmma", 5, NULL},
    {"fp8 experts, dequant + bf16 wgmma", 6, NULL},
    {"fp8 experts, e4m3, SwiGLU unfused", 7, NULL}};
#define EX_ROUTES (sizeof g_ex_routes / sizeof g_ex_routes[0])

/* Set (env) or clear (NULL) the knobs an expert-products route may set. */
static void ex_set_env(const char *env)
{
    static const char *const knobs[] = {"KN_CUDA_EXPERTS_TILE", "KN_CUDA_EXPERTS_SKIP", "KN_CUDA_EXPERTS_L2",
                                        "KN_CUDA_EXPERTS_DYN"};
    env_set(knobs, sizeof knobs / sizeof knobs[0], env);
}

static int want(const char *only, const char *name);

static void bench_experts(void)
{
    printf("== MoE expert products of a prefill (gate + up, SwiGLU, down): wgmma grouped vs host-grouped "
           "cuBLAS\n");
    /* E, top-k, hidden, expert MLP: the synthetic MoE models of model_bench (16 and 64 experts); 256 small
     * experts; 32 large ones; M3's own (128 experts of 6144 x 3072, top-4: shared/docs msa-facts) */
    static const int32_t cfgs[][4] = {{16, 4, 4096, 1024},
                                      {64, 8, 4096, 512},
                                      {256, 8, 3072, 1536},
                                      {32, 2, 6144, 9216},
                                      {128, 4, 6144, 3072}};
    static const int64_t toks[] = {256, 2048, 8192};
    struct experts_arg a;
    memset(&a, 0, sizeof a);
    KC(kn_cuda_blas_create(&a.bl, 0, &g_err));
    a.ctr = (int32_t *)dmalloc(sizeof(int32_t));
    /* KN_BENCH_EXPERTS_CFG=i / KN_BENCH_EXPERTS_TOKENS=n: one configuration / one token count (profiling) */
    const char *only_cfg = getenv("KN_BENCH_EXPERTS_CFG"), *only_tok = getenv("KN_BENCH_EXPERTS_TOKENS");
    /* KN_BENCH_EXPERTS_ROUTES=0,7: only those routes (profiling) */
    const char *only_routes = getenv("KN_BENCH_EXPERTS_ROUTES");
    int route_on[EX_ROUTES];
    for (int r = 0; r < (int)EX_ROUTES; r++) {
        char key[8];
        snprintf(key, sizeof key, "%d", r);
        route_on[r] = !only_routes || want(only_routes, key);
    }
    for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
        if (only_cfg && (size_t)atoi(only_cfg) != ci) continue;
        a.E = cfgs[ci][0], a.K = cfgs[ci][1], a.H = cfgs[ci][2], a.I = cfgs[ci][3];
        const int64_t wbytes = (int64_t)a.H * a.I * 2;
        uint16_t *w = (uint16_t *)dmalloc((size_t)(3 * a.E * wbytes));
        fill_bf16(w, 3 * a.E * wbytes / 2, 101 + ci, 0.02f);
        a.tab_h = (void **)hmalloc(sizeof(void *) * 3 * (size_t)a.E);
        for (int32_t e = 0; e < 3 * a.E; e++) a.tab_h[e] = (uint8_t *)w + e * wbytes;
        a.tab_d = (void **)upload(a.tab_h, sizeof(void *) * 3 * (size_t)a.E);
        KC(kn_cuda_experts_maps_create((const void *const *)a.tab_h, 2 * a.E, a.I, a.H, &a.maps_gu, &g_err));
        KC(kn_cuda_experts_maps_create((const void *const *)a.tab_h + 2 * a.E, a.E, a.H, a.I, &a.maps_dn,
                                       &g_err));
        /* FP8 experts: e4m3 weights in their own buffer (the bf16 tables are route 6's dequantization
         * target), one scale table for all (a weight of [a][b] has ceil(a / 128) x b / 128 blocks) */
        const int64_t w8 = (int64_t)a.H * a.I;
        uint8_t *wq = (uint8_t *)dmalloc((size_t)(3 * a.E * w8));
        fill_bf16(wq, 3 * a.E * w8 / 2, 303 + ci, 0.02f);
        float *sc = (float *)dmalloc(sizeof(float) * (size_t)(w8 / (128 * 64) + 64));
        fill_f32(sc, w8 / (128 * 64) + 64, 304 + ci, 0.01f);
        a.tab8_h = (uint8_t **)hmalloc(sizeof(void *) * 3 * (size_t)a.E);
        float **sh = (float **)hmalloc(sizeof(void *) * 3 * (size_t)a.E);
        for (int32_t e = 0; e < 3 * a.E; e++) a.tab8_h[e] = wq + e * w8, sh[e] = sc;
        a.tab8_d = (uint8_t **)upload(a.tab8_h, sizeof(void *) * 3 * (size_t)a.E);
        a.stab_d = (float **)upload(sh, sizeof(void *) * 3 * (size_t)a.E);
        KC(kn_cuda_experts_maps_create_e4m3((const uint8_t *const *)a.tab8_h, 2 * a.E, a.I, a.H, &a.maps8_gu,
                                            &g_err));
        KC(kn_cuda_experts_maps_create_e4m3((const uint8_t *const *)a.tab8_h + 2 * a.E, a.E, a.H, a.I,
                                            &a.maps8_dn, &g_err));
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            if (only_tok && ti > 0) break;
            const int64_t T = only_tok ? atoll(only_tok) : g_quick ? toks[ti] / 8 : toks[ti];
            a.pairs = T * a.K;
            /* each pair's expert uniform at random (trained routers are less even), a new draw per set */
            a.off_h = (int32_t *)hmalloc(sizeof(int32_t) * 2 * (size_t)(a.E + 1));
            for (int set = 0; set < EX_SETS; set++) {
                memset(a.off_h, 0, sizeof(int32_t) * (size_t)(a.E + 1));
                for (int64_t p = 0; p < a.pairs; p++) a.off_h[1 + rnd() % (uint64_t)a.E]++;
                for (int32_t e = 0; e < a.E; e++) a.off_h[e + 1] += a.off_h[e];
                a.off_d[set] = (int32_t *)upload(a.off_h, sizeof(int32_t) * (size_t)(a.E + 1));
            }
            a.x = (uint16_t *)dmalloc((size_t)(a.pairs * a.H * 2));
            a.act = (uint16_t *)dmalloc((size_t)(a.pairs * a.I * 2));
            a.g = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * a.I));
            a.u = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * a.I));
            a.eo = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * a.H));
            fill_bf16(a.x, a.pairs * a.H, 202 + ti, 1.0f);
            const int64_t wide = a.H > a.I ? a.H : a.I;
            a.xf = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * a.H));
            a.actf = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * a.I));
            a.xq = (uint8_t *)dmalloc((size_t)(a.pairs * wide));
            a.xsc = (float *)dmalloc(sizeof(float) * (size_t)(a.pairs * (wide / 128)));
            fill_f32(a.xf, a.pairs * a.H, 205 + ti, 1.0f);
            const double flops = 2.0 * (double)a.pairs * 3.0 * a.H * a.I;
            char cfg[128];
            snprintf(cfg, sizeof cfg, "%d experts top-%d, hidden %d, expert MLP %d, %lld tokens", a.E, a.K,
                     a.H, a.I, (long long)T);
            printf("  %-62s plan gate + up %d, down %d (bit 0: 256 x 128 tiles, bit 1: quarters skipped)\n",
                   cfg, kn_cuda_gemm_experts_plan(a.E, a.pairs, a.I, a.H, 1),
                   kn_cuda_gemm_experts_plan(a.E, a.pairs, a.H, a.I, 1));
            /* 1 warm pass and 3 timed ones, each in another order (a route timed right after cuBLAS's
             * largest products read up to 15 % slower than the same route first: the clocks or the memory
             * system remember); a route's time is the median of its 3 */
            double ms[EX_ROUTES], rs[3][EX_ROUTES];
            for (int pass = 0; pass < 4; pass++)
                for (int j = 0; j < (int)EX_ROUTES; j++) {
                    const int r = (j + 4 * pass) % (int)EX_ROUTES;
                    if (!route_on[r]) continue;
                    a.route = g_ex_routes[r].route;
                    ex_set_env(g_ex_routes[r].env);
                    const double t = time_ms(run_experts, &a, 2, g_quick ? 3 : 12);
                    if (pass) rs[pass - 1][r] = t;
                    ex_set_env(NULL);
                }
            for (int r = 0; r < (int)EX_ROUTES; r++) {
                if (!route_on[r]) continue;
                double v[3] = {rs[0][r], rs[1][r], rs[2][r]};
                qsort(v, 3, sizeof(double), cmp_double);
                ms[r] = v[1];
                printf("  %-62s %-34s %9.3f ms %7.1f TFLOP/s\n", cfg, g_ex_routes[r].name, ms[r],
                       flops / (ms[r] * 1e-3) / 1e12);
                emit("experts", cfg, g_ex_routes[r].name, flops / (ms[r] * 1e-3) / 1e12, "TFLOP/s");
            }
            if (route_on[0] && route_on[2])
                emit("experts", cfg, "wgmma TMA vs host-grouped", ms[2] / ms[0], "x");
            const int r5 = (int)EX_ROUTES - 3, r6 = (int)EX_ROUTES - 2, r7 = (int)EX_ROUTES - 1;
            if (route_on[r5] && route_on[r6])
                emit("experts", cfg, "fp8 e4m3 vs dequant + bf16", ms[r6] / ms[r5], "x");
            if (route_on[r5] && route_on[0])
                emit("experts", cfg, "fp8 e4m3 vs bf16 weights", ms[0] / ms[r5], "x");
            if (route_on[r5] && route_on[r7])
                emit("experts", cfg, "fp8 e4m3, SwiGLU fused vs unfused", ms[r7] / ms[r5], "x");
            for (int set = 0; set < EX_SETS; set++) cudaFree(a.off_d[set]);
            cudaFree(a.x), cudaFree(a.act), cudaFree(a.g), cudaFree(a.u), cudaFree(a.eo);
            cudaFree(a.xf), cudaFree(a.actf), cudaFree(a.xq), cudaFree(a.xsc);
            free(a.off_h);
        }
        cudaFree(w), cudaFree(a.tab_d);
        kn_cuda_experts_maps_free(a.maps_gu), kn_cuda_experts_maps_free(a.maps_dn);
        free(a.tab_h);
        cudaFree(wq), cudaFree(sc), cudaFree(a.tab8_d), cudaFree(a.stab_d);
        kn_cuda_experts_maps_free(a.maps8_gu), kn_cuda_experts_maps_free(a.maps8_dn);
        free(a.tab8_h), free(sh);
    }
    cudaFree(a.ctr);
    kn_cuda_blas_destroy(a.bl);
}

/* ---------------------------------------------------------------------------------------------------- */

static int want(const char *only, const char *name)
{
    if (!only) return 1;
    char buf[256];
    snprintf(buf, sizeof buf, ",%s,", only);
    char key[64];
    snprintf(key, sizeof key, ",%s,", name);
    return strstr(buf, key) != NULL;
}

int main(int argc, char **argv)
{
    const char *only = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            g_quick = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--prof-raw") && i + 1 < argc) {
            g_prof_raw = fopen(argv[++i], "w");
            if (!g_prof_raw) {
                perror(argv[i]);
                return 1;
            }
        } else {
            fprintf(stderr,
                    "usage: kn_bench [--quick] [--out FILE.tsv] [--prof-raw FILE.tsv] [--only "
                    "ceil,index,topk,decode,prefill,layer,layerdec,layerprof,fp8agree,skinny,fp8w,fp8pf,"
                    "select8,experts,dense]\n");
            return 2;
        }
    }
    if (kn_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    if (out) {
        g_tsv = fopen(out, "w");
        if (!g_tsv) {
            perror(out);
            return 1;
        }
        fprintf(g_tsv, "bench\tconfig\tmetric\tvalue\tunit\n");
    }
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    int drv = 0, rt = 0, clk = 0, mclk = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0);
    cudaDeviceGetAttribute(&mclk, cudaDevAttrMemoryClockRate, 0);
    printf(
        "device: %s, %d SMs, %.0f MB L2, %.1f GB, cc %d.%d, driver API %d, runtime %d, max SM clock %d MHz, "
        "memory clock %d MHz\n",
        p.name, p.multiProcessorCount, p.l2CacheSize / 1048576.0, p.totalGlobalMem / 1e9, p.major, p.minor,
        drv, rt, clk / 1000, mclk / 1000);
    if (g_tsv) fprintf(g_tsv, "device\t%s\tSMs\t%d\t\n", p.name, p.multiProcessorCount);
    g_sm_count = p.multiProcessorCount;
    bench_ceilings(); /* always: the other numbers are reported against these */
    if (want(only, "index")) bench_index(want(only, "topk") || !only);
    if (want(only, "decode")) bench_decode();
    if (want(only, "prefill")) bench_prefill();
    if (want(only, "layer") || want(only, "pflayer")) bench_layer(); /* pflayer: without the decode layer */
    if (want(only, "dense")) bench_dense();
    if (want(only, "fp8agree")) bench_fp8_agree();
    if (want(only, "select8")) bench_select_fp8();
    if (want(only, "skinny")) bench_skinny();
    if (want(only, "fp8w")) bench_fp8w();
    if (want(only, "fp8pf")) bench_fp8pf();
    if (want(only, "experts")) bench_experts();
    /* last: it captures graphs of the fused route; "layerdec" alone skips the prefill layer, "layerprof"
     * runs only the timestamp profile */
    if (want(only, "tail")) bench_tail();
    if (want(only, "layer") || want(only, "layerdec"))
        bench_layer_decode(0);
    else if (want(only, "layerprof"))
        bench_layer_decode(1);
    CK(cudaDeviceSynchronize());
    if (g_tsv) fclose(g_tsv);
    if (g_prof_raw) fclose(g_prof_raw);
    printf("done\n");
    return 0;
}
