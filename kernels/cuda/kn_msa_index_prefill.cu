/* Index scores and top-k fused, for prefill (many queries per sequence): a GEMM of the tile's index queries
 * against every visible key block, reduced to one max per (query, head, block) in the epilogue and folded
 * straight into a running top-k per row, so the [heads][n][blocks] score matrix never reaches memory (at 256K
 * context it would be 8 GB per 8K-query chunk).
 *
 * CTA = one tile of up to 64 queries of one sequence x 4 index heads = 256 rows; 8 warps of 32 rows (two
 * m16 tiles). All 4 heads share the key, so each 128-key block staged in shared memory (cp.async, two stages,
 * XOR-swizzled rows for conflict-free ldmatrix) feeds 256 rows. Keys are processed in quarters of 32 to bound
 * the score registers. Each lane owns the top-k list of one of its group's 4 rows, kept sorted in registers
 * with compile-time indices; blocks arrive in increasing id order, so ties never displace an entry.
 * Shapes: idx_dim 128, block 128, n_idx_heads <= 4, bf16 index cache; queries rounded to bf16.
 * Since the wgmma version (kn_msa_index_prefill_wgmma.cu, ~1.9x faster) this one runs only where that one
 * cannot (not sm_90, too little shared memory) or with KN_CUDA_SELECT_WGMMA=0. */
#include "kn_msa_kernels.cuh"

#include <limits.h>

#define PI_WARPS 8
#define PI_DI 128
#define PI_BLK 128
#define PI_KMAX 16
#define PI_STAGE_BYTES (PI_BLK * PI_DI * 2)

__device__ __forceinline__ bool pi_better(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

/* One 128-key block (32 KB) into a stage, 16-byte chunks swizzled by key row; one commit group. */
__device__ __forceinline__ void pi_load_block(uint8_t *dst, const uint16_t *keys, int64_t page, int tid)
{
    const uint8_t *src = (const uint8_t *)(keys + page * PI_BLK * PI_DI);
#pragma unroll
    for (int k = 0; k < (PI_BLK * 16) / (PI_WARPS * 32); k++) {
        const int id = tid + k * PI_WARPS * 32, key = id >> 4, c = id & 15;
        kn_cp_async16(kn_smem_addr(dst + key * 256 + kn_swz(key, c) * 16), src + key * 256 + c * 16, 16);
    }
    kn_cp_async_commit();
}

__global__ void __launch_bounds__(PI_WARPS * 32, 1)
    k_select_prefill(const float *__restrict__ q, const int32_t *__restrict__ tiles,
                     const int32_t *__restrict__ qseq, const int64_t *__restrict__ pos,
                     const int32_t *__restrict__ bt, int32_t bt_stride, const uint16_t *__restrict__ keys,
                     int32_t n, int32_t nh, int32_t topk, int32_t n_local, int32_t *__restrict__ sel,
                     int32_t sel_stride)
{
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t i0 = tiles[2 * blockIdx.x], cnt = tiles[2 * blockIdx.x + 1];
    const int32_t *btr = bt + (int64_t)qseq[i0] * bt_stride;
    const int32_t last_b = (int32_t)(pos[i0 + cnt - 1] / PI_BLK);

    /* rows: warp w, m-tile mt, half h -> query w*8 + mt*4 + gid/4 + 2h, head gid%4 */
    const int head = gid & 3;
    int64_t qp[2][2];
    uint32_t qa[2][8][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int ql = w * 8 + mt * 4 + (gid >> 2) + 2 * h;
            qp[mt][h] = (ql < cnt && head < nh) ? pos[i0 + ql] : -1;
        }
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int ks = 0; ks < 8; ks++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e & 1, kh = e >> 1; /* a[e]: row half h, k half kh */
                const int ql = w * 8 + mt * 4 + (gid >> 2) + 2 * h;
                float x0 = 0.0f, x1 = 0.0f;
                if (ql < cnt && head < nh) {
                    const float *qr =
                        q + ((int64_t)(i0 + ql) * nh + head) * PI_DI + 16 * ks + 8 * kh + 2 * tig;
                    x0 = qr[0];
                    x1 = qr[1];
                }
                qa[mt][ks][e] = kn_pack_bf16(x0, x1);
            }

    /* this lane's list: row (mt = tig >> 1, h = tig & 1) */
    const int my_mt = tig >> 1, my_h = tig & 1;
    const int64_t my_pos = my_mt ? (my_h ? qp[1][1] : qp[1][0]) : (my_h ? qp[0][1] : qp[0][0]);
    const int64_t my_own = my_pos >= 0 ? my_pos / PI_BLK : -1;
    int64_t my_lo = my_own - (n_local > 0 ? n_local : 1) + 1;
    if (my_lo < 0) my_lo = 0;
    float ls[PI_KMAX];
    int32_t li[PI_KMAX];
#pragma unroll
    for (int k = 0; k < PI_KMAX; k++) ls[k] = -INFINITY, li[k] = INT_MAX;

    pi_load_block(smem, keys, btr[0], tid);
    for (int32_t b = 0; b <= last_b; b++) {
        if (b + 1 <= last_b) {
            pi_load_block(smem + ((b + 1) & 1) * PI_STAGE_BYTES, keys, btr[b + 1], tid);
            kn_cp_async_wait<1>();
        } else {
            kn_cp_async_wait<0>();
        }
        __syncthreads();
        const uint8_t *ks_base = smem + (b & 1) * PI_STAGE_BYTES;
        float rmax[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};
#pragma unroll
        for (int kq = 0; kq < 4; kq++) { /* quarters of 32 keys bound the score registers */
            float s[2][4][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < 8; ks++) {
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    /* matrices: (n-tile 2np, k lo), (2np, k hi), (2np+1, k lo), (2np+1, k hi) */
                    const int m = lane >> 3;
                    const int key = kq * 32 + (2 * np + (m >> 1)) * 8 + (lane & 7);
                    const int chunk = 2 * ks + (m & 1);
                    uint32_t bf[4];
                    kn_ldsm_x4(bf, kn_smem_addr(ks_base + key * 256 + kn_swz(key, chunk) * 16));
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        kn_mma_bf16(s[mt][2 * np], qa[mt][ks], bf);
                        kn_mma_bf16(s[mt][2 * np + 1], qa[mt][ks], bf + 2);
                    }
                }
            }
            /* masked row max of this quarter */
            const int64_t kpos0 = (int64_t)b * PI_BLK + kq * 32 + 2 * tig;
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int h = e >> 1;
                        const int64_t kp = kpos0 + nt * 8 + (e & 1);
                        const float v = kp <= qp[mt][h] ? s[mt][nt][e] : -INFINITY;
                        rmax[mt][h] = fmaxf(rmax[mt][h], v);
                    }
        }
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                rmax[mt][h] = fmaxf(rmax[mt][h], __shfl_xor_sync(0xffffffffu, rmax[mt][h], 1));
                rmax[mt][h] = fmaxf(rmax[mt][h], __shfl_xor_sync(0xffffffffu, rmax[mt][h], 2));
            }
        /* fold this block into the lane's list */
        if (b <= my_own) {
            float v = my_mt ? (my_h ? rmax[1][1] : rmax[1][0]) : (my_h ? rmax[0][1] : rmax[0][0]);
            if (b >= my_lo) v = INFINITY;
            if (v > -INFINITY && pi_better(v, b, ls[PI_KMAX - 1], li[PI_KMAX - 1])) {
                ls[PI_KMAX - 1] = v;
                li[PI_KMAX - 1] = b;
#pragma unroll
                for (int k = PI_KMAX - 1; k > 0; k--) {
                    if (pi_better(ls[k], li[k], ls[k - 1], li[k - 1])) {
                        float ts = ls[k];
                        ls[k] = ls[k - 1];
                        ls[k - 1] = ts;
                        int32_t ti = li[k];
                        li[k] = li[k - 1];
                        li[k - 1] = ti;
                    }
                }
            }
        }
        __syncthreads(); /* the stage is refilled by the next iteration's prefetch */
    }

    if (my_pos >= 0) {
        const int ql = w * 8 + my_mt * 4 + (gid >> 2) + 2 * my_h;
        int32_t *out = sel + ((int64_t)head * n + i0 + ql) * sel_stride;
#pragma unroll
        for (int k = 0; k < PI_KMAX; k++)
            if (k < sel_stride) out[k] = (k < topk && li[k] != INT_MAX) ? li[k] : -1;
        for (int k = PI_KMAX; k < sel_stride; k++) out[k] = -1;
    }
}

int kn_index_prefill_supported(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_cache *c)
{
    return sh->idx_dim == PI_DI && sh->block == PI_BLK && sh->n_idx_heads >= 1 && sh->n_idx_heads <= 4 &&
           sh->topk <= PI_KMAX &&
           (c->idx_dtype == KN_IDX_BF16 || (c->idx_dtype == KN_IDX_FP8 && (uintptr_t)c->idx_scale % 16 == 0 &&
                                            kn_select_prefill_wgmma_ok(1)));
}

int32_t kn_select_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                          const struct kn_cuda_cache *c, const float *q, int32_t *sel, int32_t sel_stride,
                          cudaStream_t stream, struct mm_err *err)
{
    if (qb->n_tiles == 0) return MM_OK;
    if (!qb->tiles) return mm_err_set(err, MM_INVALID, "kn_cuda_msa_select: the batch has no tiles");
    const int smem = 2 * PI_STAGE_BYTES;
    KN_CU(kn_smem_attr((const void *)k_select_prefill, smem), "kn_cuda_msa_select: shared memory");
    k_select_prefill<<<qb->n_tiles, PI_WARPS * 32, smem, stream>>>(
        q, qb->tiles, qb->qseq, qb->pos, qb->block_table, qb->bt_stride, (const uint16_t *)c->idx, qb->n,
        sh->n_idx_heads, sh->topk, sh->n_local, sel, sel_stride);
    KN_LAUNCHED("kn_cuda_msa_select (fused prefill)");
    return MM_OK;
}
