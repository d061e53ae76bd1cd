/* Bidirectional attention of one vision item on the tensor cores (the bf16 mode's vision tower; the fp32
 * mode keeps kn_cuda_attn_full, one warp per query row and head on the CUDA cores). The warp-per-row kernel
 * read every key and value row from global memory once per (query, head) and took ~30 ms per layer at a
 * 2304-patch image (16 heads of 80), so an image held the GPU for half a second.
 *
 * Two kernels: a pack of q, k, v into bf16 rows of the 16 * KS dims the attention multiplies (head-major
 * [3][heads][n][16 KS], dims past head_dim zero, so the scores and outputs are the unpadded ones; KS =
 * ceil(head_dim / 16): 5 of 8 k-steps at the towers' head_dim 80), then flash attention with
 * kn_attn_warp.cuh's warp core: CTA = 16 W queries x one head, each warp 16 query rows; 64-key K and V tiles
 * through a 2-stage cp.async ring, only the rows' first 2 KS chunks copied (the rest of the 256-byte shared
 * rows is never read); keys past n are masked (their rows are zero-filled). */
#include "kn_attn_warp.cuh"
#include "kn_cuda.h"

#define AF_K 64                                       /* keys per stage */
#define AF_TILE_BYTES (AF_K * AW_ROW_BYTES)           /* 16 KB */
#define AF_STAGE_BYTES (2 * AF_TILE_BYTES)            /* K + V */
#define AF_Q_OFF (2 * AF_STAGE_BYTES)                 /* after the 2 stages */
#define AF_SMEM(w) (AF_Q_OFF + 16 * (w)*AW_ROW_BYTES) /* 88 KB at 6 warps: 2 CTAs per SM */

/* q, k, v as bf16 rows of 16 * ks dims (the k-steps the attention multiplies; dims past hd zero), rows of
 * 32 * ks bytes: the attention copies only what it reads (5 of 8 k-steps at head_dim 80) */
__global__ void k_full_pack(const float *__restrict__ q, const float *__restrict__ k,
                            const float *__restrict__ v, int64_t stride, int64_t n, int32_t heads, int32_t hd,
                            int32_t ks, uint32_t *__restrict__ ws)
{
    kn_chain_entry();
    const float *src = blockIdx.y == 0 ? q : blockIdx.y == 1 ? k : v;
    const int32_t rw = 8 * ks; /* words of a row: two bf16 each */
    const int64_t words = (int64_t)heads * n * rw;
    uint32_t *dst = ws + (int64_t)blockIdx.y * words;
    for (int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; id < words;
         id += (int64_t)gridDim.x * blockDim.x) {
        const int32_t d = 2 * (int32_t)(id % rw);
        const int64_t r = id / rw, i = r % n;
        const float *row = src + i * stride + (r / n) * hd;
        dst[id] = kn_pack_bf16(d < hd ? row[d] : 0.0f, d + 1 < hd ? row[d + 1] : 0.0f);
    }
}

/* CTA = 16 * W queries of one head, warp w rows [16 w, 16 w + 16). Each warp folds every key in the same
 * order whatever W is, so W (the CTA's size, chosen for how the CTAs fill the GPU) never changes the bits. */
template <int KS, int W>
__global__ void __launch_bounds__(32 * W)
    k_attn_full_tc(const uint16_t *__restrict__ ws, int64_t n, int32_t heads, int32_t hd, float scale_log2,
                   float *__restrict__ out, int64_t os)
{
    constexpr int CH = 2 * KS, RB = 16 * CH, NT = 32 * W, QN = 16 * W; /* chunks, bytes of a row */
    extern __shared__ __align__(128) uint8_t smem[];
    kn_chain_entry();
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t h = blockIdx.y;
    const int64_t q0 = (int64_t)blockIdx.x * QN, plane = (int64_t)heads * n * RB;
    const uint8_t *qg = (const uint8_t *)ws + (int64_t)h * n * RB;
    const uint8_t *kg = qg + plane, *vg = qg + 2 * plane;
    const uint32_t s_base = kn_smem_addr(smem), q_s = s_base + AF_Q_OFF;
    aw_tile_load<CH>(q_s, qg + q0 * RB, RB, QN, (int)min((int64_t)QN, n - q0), tid, NT);
    const int64_t tiles = (n + AF_K - 1) / AF_K;
    const int valid0 = (int)min((int64_t)AF_K, n);
    aw_tile_load<CH>(s_base, kg, RB, AF_K, valid0, tid, NT);
    aw_tile_load<CH>(s_base + AF_TILE_BYTES, vg, RB, AF_K, valid0, tid, NT);
    kn_cp_async_commit();

    aw_state st;
    aw_init(st);
    uint32_t qa[8][4];
    for (int64_t t = 0; t < tiles; t++) {
        if (t + 1 < tiles) {
            const int64_t j = (t + 1) * AF_K;
            const int valid = (int)min((int64_t)AF_K, n - j);
            const uint32_t sn = s_base + ((t + 1) & 1) * AF_STAGE_BYTES;
            aw_tile_load<CH>(sn, kg + j * RB, RB, AF_K, valid, tid, NT);
            aw_tile_load<CH>(sn + AF_TILE_BYTES, vg + j * RB, RB, AF_K, valid, tid, NT);
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

typedef void (*af_kernel)(const uint16_t *, int64_t, int32_t, int32_t, float, float *, int64_t);

/* The instance for k-steps ks (4, 5, 6 or 8) and W warps (2, 3, 4, 6 or 8). */
template <int KS> static af_kernel af_pick_w(int w)
{
    return w == 2   ? k_attn_full_tc<KS, 2>
           : w == 3 ? k_attn_full_tc<KS, 3>
           : w == 4 ? k_attn_full_tc<KS, 4>
           : w == 8 ? k_attn_full_tc<KS, 8>
                    : k_attn_full_tc<KS, 6>;
}

static af_kernel af_pick(int ks, int w)
{
    return ks <= 4   ? af_pick_w<4>(w)
           : ks == 5 ? af_pick_w<5>(w)
           : ks == 6 ? af_pick_w<6>(w)
                     : af_pick_w<8>(w);
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
    if (kn_cdiv(n, 16) > INT32_MAX)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda_attn_full_tc: %lld rows", (long long)n);
    /* the k-steps of 16 dims that hold head_dim (KN_CUDA_ATTN_FULL_KS=8: all 8, as before) */
    const int ks = kn_cuda_knob_int("KN_CUDA_ATTN_FULL_KS", 0) == 8 ? 8 : (head_dim + 15) / 16;
    const int ksi = ks <= 4 ? 4 : ks <= 6 ? ks : 8; /* the instances: 4, 5, 6, 8 */
    const int64_t words = (int64_t)n_heads * n * 8 * ksi;
    int64_t blocks = kn_cdiv(words, 256); /* grid-stride: at most 4 CTAs per SM */
    if (blocks > 4 * (int64_t)kn_cuda_sm_count()) blocks = 4 * (int64_t)kn_cuda_sm_count();
    KN_CU(kn_launch(k_full_pack, dim3((unsigned)blocks, 3), 256, 0, stream, q, k, v, stride, n, n_heads,
                    head_dim, (int32_t)ksi, (uint32_t *)ws),
          "kn_cuda_attn_full_tc: pack");
    /* warps per CTA (KN_CUDA_ATTN_FULL_W: 2, 3, 4, 6, 8). Default 6: at a 2304-patch image (16 heads of 80)
     * the vision attention took 2.91 ms an encode with 6 against 3.42 (3), 3.59 (4), 3.81 (2) and 3.03 (8) on
     * an H200 (v34): two CTAs of 6 warps per SM (167 registers) keep 12 warps resident where two of 4 (the
     * shared-memory limit at 80 KB each) kept 8, and read K and V once per 96 queries instead of 64 */
    int w = kn_cuda_knob_int("KN_CUDA_ATTN_FULL_W", 6);
    if (w != 2 && w != 3 && w != 4 && w != 8) w = 6;
    const af_kernel kern = af_pick(ksi, w);
    KN_CU(kn_smem_attr((const void *)kern, AF_SMEM(w)), "kn_cuda_attn_full_tc: shared memory");
    KN_CU(kn_launch(kern, dim3((unsigned)kn_cdiv(n, 16 * w), (unsigned)n_heads), 32 * w, AF_SMEM(w), stream,
                    (const uint16_t *)ws, n, n_heads, head_dim, scale * 1.4426950408889634f, out, out_stride),
          "kn_cuda_attn_full_tc");
    return MM_OK;
}
