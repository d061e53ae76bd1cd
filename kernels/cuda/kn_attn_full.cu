/* Bidirectional attention of one vision item on the tensor cores (the bf16 mode's vision tower; the fp32
 * mode keeps kn_cuda_attn_full, one warp per query row and head on the CUDA cores). The warp-per-row kernel
 * read every key and value row from global memory once per (query, head) and took ~30 ms per layer at a
 * 2304-patch image (16 heads of 80), so an image held the GPU for half a second.
 *
 * Two kernels: a pack of q, k, v into bf16 rows of 128 (head-major [3][heads][n][128], dims past head_dim
 * zero, so the scores and outputs are the unpadded ones), then flash attention with kn_attn_warp.cuh's warp
 * core: CTA = 64 queries x one head, each warp 16 query rows; 64-key K and V tiles through a 2-stage
 * cp.async ring; keys past n are masked (their rows are zero-filled). The products cover only the first
 * 16 * KS dims (KS = ceil(head_dim / 16): 5 of 8 k-steps at the towers' head_dim 80), the rest being zero. */
#include "kn_attn_warp.cuh"
#include "kn_cuda.h"

#define AF_THREADS 128                           /* 4 warps x 16 query rows */
#define AF_Q 64                                  /* queries per CTA */
#define AF_K 64                                  /* keys per stage */
#define AF_TILE_BYTES (AF_K * AW_ROW_BYTES)      /* 16 KB */
#define AF_STAGE_BYTES (2 * AF_TILE_BYTES)       /* K + V */
#define AF_Q_OFF (2 * AF_STAGE_BYTES)            /* after the 2 stages */
#define AF_SMEM (AF_Q_OFF + AF_Q * AW_ROW_BYTES) /* 80 KB: 2 CTAs per SM */

__global__ void k_full_pack(const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, int64_t stride, int64_t n, int32_t heads, int32_t hd,
                            uint32_t *__restrict__ ws)
{
    kn_chain_entry();
    const float *src = blockIdx.y == 0 ? q : blockIdx.y == 1 ? k : v;
    const int64_t words = (int64_t)heads * n * (AW_D / 2); /* two bf16 per word */
    uint32_t *dst = ws + (int64_t)blockIdx.y * words;
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < words;
         id += (int64_t)gridDim.x * blockDim.x) {
        const int32_t d = 2 * (int32_t)(id % (AW_D / 2));
        const int64_t r = id / (AW_D / 2), i = r % n;
        const float *row = src + i * stride + (r / n) * hd;
        dst[id] = kn_pack_bf16(d < hd ? row[d] : 0.0f, d + 1 < hd ? row[d + 1] : 0.0f);
    }
}

template <int KS>
__global__ void __launch_bounds__(AF_THREADS)
    k_attn_full_tc(const uint16_t *__restrict__ ws, int64_t n, int32_t heads, int32_t hd, float scale_log2,
                   float *__restrict__ out, int64_t os)
{
    extern __shared__ __align__(128) uint8_t smem[];
    kn_chain_entry();
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t h = blockIdx.y;
    const int64_t q0 = (int64_t)blockIdx.x * AF_Q, plane = (int64_t)heads * n * AW_D;
    const uint8_t *qg = (const uint8_t *)(ws + (int64_t)h * n * AW_D);
    const uint8_t *kg = qg + plane * 2, *vg = qg + plane * 4;
    const uint32_t s_base = kn_smem_addr(smem), q_s = s_base + AF_Q_OFF;
    aw_tile_load(q_s, qg + q0 * AW_ROW_BYTES, AW_ROW_BYTES, AF_Q, (int)min((int64_t)AF_Q, n - q0), tid,
                 AF_THREADS);
    const int64_t tiles = (n + AF_K - 1) / AF_K;
    const int valid0 = (int)min((int64_t)AF_K, n);
    aw_tile_load(s_base, kg, AW_ROW_BYTES, AF_K, valid0, tid, AF_THREADS);
    aw_tile_load(s_base + AF_TILE_BYTES, vg, AW_ROW_BYTES, AF_K, valid0, tid, AF_THREADS);
    kn_cp_async_commit();

    aw_state st;
    aw_init(st);
    uint32_t qa[8][4];
    for (int64_t t = 0; t < tiles; t++) {
        if (t + 1 < tiles) {
            const int64_t j = (t + 1) * AF_K;
            const int valid = (int)min((int64_t)AF_K, n - j);
            const uint32_t sn = s_base + ((t + 1) & 1) * AF_STAGE_BYTES;
            aw_tile_load(sn, kg + j * AW_ROW_BYTES, AW_ROW_BYTES, AF_K, valid, tid, AF_THREADS);
            aw_tile_load(sn + AF_TILE_BYTES, vg + j * AW_ROW_BYTES, AW_ROW_BYTES, AF_K, valid, tid,
                         AF_THREADS);
        }
        kn_cp_async_commit();
        kn_cp_async_wait<1>();
        __syncthreads();
        if (t == 0) aw_load_q<KS>(qa, q_s + w * 16 * AW_ROW_BYTES, lane);
        const uint32_t sc = s_base + (t & 1) * AF_STAGE_BYTES;
        /* every query sees every key; "position" n - 1 masks the zero-filled rows past the item */
        aw_step<AF_K, KS>(st, qa, sc, sc + AF_TILE_BYTES, 0, t * AF_K, n - 1, scale_log2, lane);
        __syncthreads(); /* the stage is refilled next iteration */
    }
    kn_cp_async_wait<0>();
    aw_finish_l(st);
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int64_t i = q0 + w * 16 + gid + 8 * hh;
        if (i >= n) continue;
        const float inv = st.l[hh] > 0.0f ? 1.0f / st.l[hh] : 0.0f;
        float *dst = out + i * os + (int64_t)h * hd;
#pragma unroll
        for (int dn = 0; dn < 2 * KS; dn++) {
            const int d = dn * 8 + 2 * tig;
            if (d < hd) dst[d] = st.o[dn][2 * hh] * inv;
            if (d + 1 < hd) dst[d + 1] = st.o[dn][2 * hh + 1] * inv;
        }
    }
}

extern "C" size_t kn_cuda_attn_full_tc_ws(int64_t n, int32_t n_heads, int32_t head_dim)
{
    if (n <= 0 || n_heads <= 0 || head_dim <= 0 || head_dim > AW_D) return 0;
    return (size_t)3 * (size_t)n_heads * (size_t)n * AW_ROW_BYTES;
}

extern "C" int32_t kn_cuda_attn_full_tc(const float *q, const float *k, const float *v, int64_t stride,
                                        int64_t n, int32_t n_heads, int32_t head_dim, float scale, float *out,
                                        int64_t out_stride, void *ws, size_t ws_bytes, cudaStream_t stream,
                                        struct mm_err *err)
{
    if (n < 0 || n_heads <= 0 || n_heads > 65535 || head_dim <= 0 || head_dim > AW_D ||
        (n > 0 &&
         (!q || !k || !v || !out || !ws || ws_bytes < kn_cuda_attn_full_tc_ws(n, n_heads, head_dim))))
        return mm_err_set(err, MM_INVALID,
                          "kn_cuda_attn_full_tc: bad arguments (n %lld, %d heads of %d, workspace %zu bytes)",
                          (long long)n, n_heads, head_dim, ws_bytes);
    if (n == 0) return MM_OK;
    if (kn_cdiv(n, AF_Q) > INT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_attn_full_tc: %lld rows", (long long)n);
    const int64_t words = (int64_t)n_heads * n * (AW_D / 2);
    int64_t blocks = kn_cdiv(words, 256); /* grid-stride: at most 4 CTAs per SM */
    if (blocks > 4 * (int64_t)kn_cuda_sm_count()) blocks = 4 * (int64_t)kn_cuda_sm_count();
    KN_CU(kn_launch(k_full_pack, dim3((unsigned)blocks, 3), 256, 0, stream, q, k, v, stride, n, n_heads,
                    head_dim, (uint32_t *)ws),
          "kn_cuda_attn_full_tc: pack");
    /* the k-steps of 16 dims that hold head_dim (KN_CUDA_ATTN_FULL_KS=8: all 8, as before) */
    const int ks = kn_cuda_knob_int("KN_CUDA_ATTN_FULL_KS", 0) == 8 ? 8 : (head_dim + 15) / 16;
    void (*kern)(const uint16_t *, int64_t, int32_t, int32_t, float, float *, int64_t) =
        ks <= 4   ? k_attn_full_tc<4>
        : ks == 5 ? k_attn_full_tc<5>
        : ks == 6 ? k_attn_full_tc<6>
                  : k_attn_full_tc<8>;
    KN_CU(kn_smem_attr((const void *)kern, AF_SMEM), "kn_cuda_attn_full_tc: shared memory");
    KN_CU(kn_launch(kern, dim3((unsigned)kn_cdiv(n, AF_Q), (unsigned)n_heads), AF_THREADS, AF_SMEM, stream,
                    (const uint16_t *)ws, n, n_heads, head_dim, scale * 1.4426950408889634f, out, out_stride),
          "kn_cuda_attn_full_tc");
    return MM_OK;
}
