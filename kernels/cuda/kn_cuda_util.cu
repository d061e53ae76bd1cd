/* Device facts, error mapping, host-side planning of a step's query batch, and TMA map encoding. */
#include "kn_cuda_internal.cuh"
#include "kn_tma.cuh"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" int32_t kn_cuda_check(cudaError_t e, const char *what, struct mm_err *err)
{
    if (e == cudaSuccess) return MM_OK;
    int32_t code = e == cudaErrorMemoryAllocation ? MM_NOMEM : MM_ERROR;
    return mm_err_set(err, code, "%s: CUDA %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

extern "C" int32_t kn_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no driver" error so later calls see a clean slate */
        return 0;
    }
    return n;
}

int32_t kn_cuda_sm_count(void)
{
    static int sms; /* atomic: a media encoder thread launches kernels beside the steps' thread */
    int n = __atomic_load_n(&sms, __ATOMIC_RELAXED);
    if (!n) {
        int dev = 0;
        if (!(cudaGetDevice(&dev) == cudaSuccess &&
              cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && n > 0))
            n = 132;
        __atomic_store_n(&sms, n, __ATOMIC_RELAXED);
    }
    return n;
}

cudaError_t kn_smem_attr(const void *kern, int smem)
{
    static struct {
        const void *kern;
        int dev, smem;
    } memo[64];
    static int n_memo;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int dev = 0;
    if (!kn_cuda_knob("KN_CUDA_ATTR_MEMO", 1) || cudaGetDevice(&dev) != cudaSuccess)
        return cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    pthread_mutex_lock(&mu);
    int k = 0;
    while (k < n_memo && (memo[k].kern != kern || memo[k].dev != dev)) k++;
    cudaError_t e = cudaSuccess;
    if (k == n_memo || memo[k].smem < smem) {
        e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (e == cudaSuccess && k == n_memo && n_memo < 64)
            memo[n_memo++] = {kern, dev, smem};
        else if (e == cudaSuccess && k < n_memo)
            memo[k].smem = smem;
    }
    pthread_mutex_unlock(&mu);
    return e;
}

extern "C" int32_t kn_cuda_qbatch_plan(int32_t n, int32_t n_seqs, const int32_t *qseq_h, const int64_t *pos_h,
                                       int32_t block, int32_t *seq_blk_off_h, int64_t *seq_last_h,
                                       int32_t *tiles_h, struct kn_cuda_qbatch *qb, struct mm_err *err)
{
    if (n < 0 || n_seqs <= 0 || block <= 0 || !qb || !seq_blk_off_h || !seq_last_h || !tiles_h ||
        (n > 0 && (!qseq_h || !pos_h)))
        return mm_err_set(err, MM_INVALID, "kn_cuda_qbatch_plan: bad arguments (n %d, n_seqs %d, block %d)",
                          n, n_seqs, block);
    /* blocks seen by each sequence = max over its queries of pos / block + 1 */
    for (int32_t s = 0; s <= n_seqs; s++) seq_blk_off_h[s] = 0;
    for (int32_t s = 0; s < n_seqs; s++) seq_last_h[s] = -1;
    int64_t max_blocks = 0;
    for (int32_t i = 0; i < n; i++) {
        if (qseq_h[i] < 0 || qseq_h[i] >= n_seqs || pos_h[i] < 0)
            return mm_err_set(err, MM_INVALID,
                              "kn_cuda_qbatch_plan: query %d has sequence %d / position %lld", i, qseq_h[i],
                              (long long)pos_h[i]);
        int64_t nb = pos_h[i] / block + 1;
        if (nb > INT32_MAX / 2)
            return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_qbatch_plan: position %lld", (long long)pos_h[i]);
        if (nb > seq_blk_off_h[qseq_h[i] + 1]) seq_blk_off_h[qseq_h[i] + 1] = (int32_t)nb;
        if (pos_h[i] > seq_last_h[qseq_h[i]]) seq_last_h[qseq_h[i]] = pos_h[i];
        if (nb > max_blocks) max_blocks = nb;
    }
    for (int32_t s = 0; s < n_seqs; s++) {
        int64_t t = (int64_t)seq_blk_off_h[s] + seq_blk_off_h[s + 1];
        if (t > INT32_MAX) return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_qbatch_plan: too many blocks");
        seq_blk_off_h[s + 1] = (int32_t)t;
    }
    /* tiles: runs of consecutive queries of one sequence with increasing positions */
    int32_t nt = 0, max_q = 0, run_seq = -1, run_len = 0;
    for (int32_t i = 0; i < n; i++) {
        int contiguous = i > 0 && qseq_h[i] == qseq_h[i - 1] && pos_h[i] > pos_h[i - 1];
        if (!contiguous || tiles_h[2 * (nt - 1) + 1] == KN_CUDA_QTILE) {
            tiles_h[2 * nt] = i;
            tiles_h[2 * nt + 1] = 0;
            nt++;
        }
        tiles_h[2 * (nt - 1) + 1]++;
        if (qseq_h[i] == run_seq)
            run_len++;
        else
            run_seq = qseq_h[i], run_len = 1;
        if (run_len > max_q) max_q = run_len;
    }
    qb->n = n;
    qb->n_seqs = n_seqs;
    qb->total_blocks = seq_blk_off_h[n_seqs];
    qb->max_blocks = (int32_t)max_blocks;
    qb->n_tiles = nt;
    qb->max_q_per_seq = max_q;
    return MM_OK;
}

int32_t kn_check_msa_args(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, const char *what, struct mm_err *err)
{
    if (!sh || !qb || !c) return mm_err_set(err, MM_INVALID, "%s: NULL shape, batch or cache", what);
    if (sh->n_heads <= 0 || sh->n_kv <= 0 || sh->n_heads % sh->n_kv || sh->head_dim <= 0 ||
        sh->head_dim % 8 || sh->block <= 0 || sh->topk <= 0 || sh->topk > KN_CUDA_MAX_TOPK || sh->n_local < 0)
        return mm_err_set(err, MM_INVALID,
                          "%s: unsupported shape (heads %d, kv %d, head_dim %d, block %d, topk %d (max %d))",
                          what, sh->n_heads, sh->n_kv, sh->head_dim, sh->block, sh->topk, KN_CUDA_MAX_TOPK);
    if (qb->n < 0 || qb->n_seqs <= 0 || (qb->n > 0 && (!qb->qseq || !qb->pos || !qb->block_table)) ||
        qb->bt_stride < qb->max_blocks)
        return mm_err_set(err, MM_INVALID,
                          "%s: bad query batch (n %d, seqs %d, bt_stride %d < max_blocks %d)", what, qb->n,
                          qb->n_seqs, qb->bt_stride, qb->max_blocks);
    return MM_OK;
}

__global__ void k_ksplit_sum(const float *__restrict__ part, int32_t n, int64_t rows, int32_t ks,
                             float *__restrict__ y, int64_t ldy)
{
    kn_chain_entry();
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * rows) return;
    const int64_t t = i / rows, r = i % rows;
    float s = 0.0f;
    for (int32_t k = 0; k < ks; k++) s += part[((int64_t)k * n + t) * rows + r];
    y[t * ldy + r] = s;
}

cudaError_t kn_ksplit_sum(const float *part, int32_t n, int64_t rows, int32_t ks, float *y, int64_t ldy,
                          cudaStream_t stream)
{
    return kn_launch(k_ksplit_sum, dim3((unsigned)kn_cdiv((int64_t)n * rows, 256)), 256, 0, stream, part, n,
                     rows, ks, y, ldy);
}

/* Knob values cached per thread, keyed by the name's address (the call sites pass literals): a synced MSA
 * decode layer reads ~17 knobs before its first launch, and getenv walks the whole environment each time
 * (~90 ns with 37 variables: ~1.5 us of host time in front of the kernels). kn_cuda_knobs_reload starts a
 * new generation, after which each thread reads the environment again; KN_CUDA_KNOB_CACHE=0 (seen at the
 * first knob read or a reload) reads it at every call, as before. */
struct knob_slot {
    const char *name;
    int gen, set, on, ival;
};
#define KNOB_SLOTS 128
static int g_knob_gen = 1, g_knob_cache = -1;
static __thread struct knob_slot t_knobs[KNOB_SLOTS];

extern "C" void kn_cuda_knobs_reload(void)
{
    const char *e = getenv("KN_CUDA_KNOB_CACHE");
    __atomic_store_n(&g_knob_cache, !(e && e[0] == '0'), __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_knob_gen, 1, __ATOMIC_ACQ_REL);
}

static struct knob_slot knob_read(const char *name, int gen)
{
    const char *e = getenv(name);
    struct knob_slot k = {name, gen, e && e[0], 0, 0};
    if (k.set) k.on = e[0] != '0', k.ival = atoi(e);
    return k;
}

static struct knob_slot knob_get(const char *name)
{
    int cache = __atomic_load_n(&g_knob_cache, __ATOMIC_RELAXED);
    if (cache < 0) {
        const char *e = getenv("KN_CUDA_KNOB_CACHE");
        cache = !(e && e[0] == '0');
        __atomic_store_n(&g_knob_cache, cache, __ATOMIC_RELAXED);
    }
    const int gen = __atomic_load_n(&g_knob_gen, __ATOMIC_ACQUIRE);
    if (!cache) return knob_read(name, gen);
    struct knob_slot *s = &t_knobs[((uintptr_t)name * 0x9E3779B97F4A7C15ull) >> 57]; /* top 7 bits: 128 */
    if (s->name != name || s->gen != gen) *s = knob_read(name, gen);
    return *s;
}

int kn_cuda_knob(const char *name, int dflt)
{
    const struct knob_slot k = knob_get(name);
    return k.set ? k.on : dflt;
}

int kn_cuda_knob_int(const char *name, int dflt)
{
    const struct knob_slot k = knob_get(name);
    return k.set ? k.ival : dflt;
}

extern "C" int32_t kn_cuda_knob_value(const char *name, int32_t dflt)
{
    return kn_cuda_knob_int(name, dflt);
}

/* cuTensorMapEncodeTiled from the driver the runtime loaded (no link against libcuda) */
typedef CUresult (*kn_tma_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                     const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                     const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static kn_tma_encode_fn kn_tma_fn;
static pthread_once_t kn_tma_once = PTHREAD_ONCE_INIT;

static void kn_tma_find(void)
{
    void *p = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        kn_tma_fn = (kn_tma_encode_fn)p;
    (void)cudaGetLastError();
}

int kn_tma_encode_2d(CUtensorMap *m, const void *p, int64_t rows, int64_t cols, int64_t ld, uint32_t box_cols,
                     uint32_t box_rows, int f8)
{
    pthread_once(&kn_tma_once, kn_tma_find); /* a media encoder thread may be first */
    const kn_tma_encode_fn enc = kn_tma_fn;
    if (!enc || (uintptr_t)p % 16 || rows <= 0 || cols <= 0) return 0;
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows},
                     strides[1] = {(cuuint64_t)ld * (f8 ? 1u : 2u)};
    const cuuint32_t box[2] = {box_cols, box_rows}, es[2] = {1, 1};
    return enc(m, f8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)p, dims,
               strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
