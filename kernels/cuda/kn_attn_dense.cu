/* Dense causal attention for many queries per sequence (the dense layers' prefill, and the dense baseline the
 * MSA benchmarks compare against): query-major flash attention over the paged cache. CTA = 8 consecutive
 * queries of one sequence x one KV group; each warp holds one query's 16 heads, and every 128-token page
 * (K and V through a 2-stage cp.async ring) serves all 8. Shapes: head_dim 128, block 128, n_heads/n_kv
 * <= 16. Where the union kernel runs (sm_90a, 16 heads per group), kn_attn_dense_prefill hands the batch to
 * its dense mode instead (kn_msa_prefill_union.cu; KN_CUDA_DENSE_WGMMA=0 keeps this kernel): wgmma with a
 * TMA ring, 1.8-1.9x this kernel on an H200 (bench/cuda/README.md, "Twenty-fourth session"). */
#include "kn_attn_warp.cuh"
#include "kn_msa_kernels.cuh"
#include "kn_msa_prefill_union.cuh"

#define DN_WARPS 8
#define DN_THREADS (DN_WARPS * 32)
#define DN_BLK 128
#define DN_TILE_BYTES (DN_BLK * AW_ROW_BYTES)
#define DN_STAGE_BYTES (2 * DN_TILE_BYTES)
#define DN_Q_OFF (2 * DN_STAGE_BYTES)
#define DN_SMEM (DN_Q_OFF + DN_WARPS * 16 * AW_ROW_BYTES)

struct dn_args {
    const uint16_t *q;
    const int32_t *tiles, *qseq;
    const int64_t *pos;
    const int32_t *bt;
    int32_t bt_stride;
    const uint16_t *kc, *vc;
    int32_t n_heads, n_kv, hpg;
    float scale_log2;
    uint16_t *out;
};

__global__ void __launch_bounds__(DN_THREADS, 1) k_attn_dense(const dn_args a)
{
    extern __shared__ __align__(128) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int32_t tile = blockIdx.x / (KN_CUDA_QTILE / DN_WARPS),
                  sub = blockIdx.x % (KN_CUDA_QTILE / DN_WARPS);
    const int32_t g = blockIdx.y;
    const int32_t tq0 = a.tiles[2 * tile], tcnt = a.tiles[2 * tile + 1];
    const int32_t q0 = tq0 + sub * DN_WARPS, cnt = min(DN_WARPS, tcnt - sub * DN_WARPS);
    if (cnt <= 0) return;
    const int32_t *btr = a.bt + (int64_t)a.qseq[q0] * a.bt_stride;
    const int64_t last_pos = a.pos[q0 + cnt - 1];
    const int32_t last_b = (int32_t)(last_pos / DN_BLK);
    const bool active = w < cnt;
    const int32_t i = q0 + (active ? w : 0);
    const int64_t qpos = active ? a.pos[i] : -1;

    const uint32_t s_base = kn_smem_addr(smem);
    const uint32_t q_s = s_base + DN_Q_OFF + w * 16 * AW_ROW_BYTES;
    const int64_t tok_bytes = (int64_t)a.n_kv * AW_D * 2;
    const uint8_t *kbase = (const uint8_t *)a.kc + (int64_t)g * AW_D * 2;
    const uint8_t *vbase = (const uint8_t *)a.vc + (int64_t)g * AW_D * 2;
    aw_tile_load(q_s, (const uint8_t *)(a.q + ((int64_t)i * a.n_heads + (int64_t)g * a.hpg) * AW_D), AW_D * 2,
                 16, active ? a.hpg : 0, lane, 32);

    const int valid0 = (int)min((int64_t)DN_BLK, last_pos + 1);
    aw_tile_load(s_base, kbase + (int64_t)btr[0] * DN_BLK * tok_bytes, tok_bytes, DN_BLK, valid0, tid,
                 DN_THREADS);
    aw_tile_load(s_base + DN_TILE_BYTES, vbase + (int64_t)btr[0] * DN_BLK * tok_bytes, tok_bytes, DN_BLK,
                 valid0, tid, DN_THREADS);
    kn_cp_async_commit();

    aw_state st;
    aw_init(st);
    uint32_t qa[8][4];
    for (int32_t b = 0; b <= last_b; b++) {
        if (b + 1 <= last_b) {
            const int64_t page = btr[b + 1];
            const int valid = (int)min((int64_t)DN_BLK, last_pos - (int64_t)(b + 1) * DN_BLK + 1);
            const uint32_t sn = s_base + ((b + 1) & 1) * DN_STAGE_BYTES;
            aw_tile_load(sn, kbase + page * DN_BLK * tok_bytes, tok_bytes, DN_BLK, valid, tid, DN_THREADS);
            aw_tile_load(sn + DN_TILE_BYTES, vbase + page * DN_BLK * tok_bytes, tok_bytes, DN_BLK, valid, tid,
                         DN_THREADS);
        }
        kn_cp_async_commit();
        kn_cp_async_wait<1>();
        __syncthreads();
        if (b == 0) aw_load_q(qa, q_s, lane);
        if (active && (int64_t)b * DN_BLK <= qpos) {
            const uint32_t sc = s_base + (b & 1) * DN_STAGE_BYTES;
            aw_step<128>(st, qa, sc, sc + DN_TILE_BYTES, 0, (int64_t)b * DN_BLK, qpos, a.scale_log2, lane);
        }
        __syncthreads(); /* the stage is refilled next iteration */
    }
    kn_cp_async_wait<0>();
    if (!active) return;
    aw_finish_l(st);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = gid + 8 * h;
        if (row >= a.hpg) continue;
        const float inv = st.l[h] > 0.0f ? 1.0f / st.l[h] : 0.0f;
        uint16_t *dst = a.out + ((int64_t)i * a.n_heads + (int64_t)g * a.hpg + row) * AW_D + 2 * tig;
#pragma unroll
        for (int dn = 0; dn < 16; dn++)
            *(uint32_t *)(dst + dn * 8) = kn_pack_bf16(st.o[dn][2 * h] * inv, st.o[dn][2 * h + 1] * inv);
    }
}

int kn_attn_dense_prefill_supported(const struct kn_cuda_msa_shape *sh)
{
    return sh->head_dim == AW_D && sh->block == DN_BLK && sh->n_heads / sh->n_kv <= 16;
}

int32_t kn_attn_dense_prefill(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                              const struct kn_cuda_cache *c, const void *q, void *out, cudaStream_t stream,
                              struct mm_err *err)
{
    if (qb->n_tiles == 0) return MM_OK;
    if (!qb->tiles)
        return mm_err_set(err, MM_INVALID, "kn_cuda attention (dense prefill): the batch has no tiles");
    if (kn_cuda_knob("KN_CUDA_DENSE_WGMMA", KN_DENSE_WGMMA) && kn_pf_union_dense_supported(sh, qb))
        return kn_pf_union_dense_launch(sh, qb, c, q, out, stream, err);
    dn_args a;
    a.q = (const uint16_t *)q;
    a.tiles = qb->tiles;
    a.qseq = qb->qseq;
    a.pos = qb->pos;
    a.bt = qb->block_table;
    a.bt_stride = qb->bt_stride;
    a.kc = (const uint16_t *)c->k;
    a.vc = (const uint16_t *)c->v;
    a.n_heads = sh->n_heads;
    a.n_kv = sh->n_kv;
    a.hpg = sh->n_heads / sh->n_kv;
    a.scale_log2 = sh->scale * 1.4426950408889634f;
    a.out = (uint16_t *)out;
    KN_CU(kn_smem_attr((const void *)k_attn_dense, DN_SMEM),
          "kn_cuda attention (dense prefill): shared memory");
    const int64_t gx = (int64_t)qb->n_tiles * (KN_CUDA_QTILE / DN_WARPS);
    if (gx > INT32_MAX || sh->n_kv > 65535)
        return mm_err_set(err, MM_TOO_LARGE, "kn_cuda attention (dense prefill): %d tiles", qb->n_tiles);
    k_attn_dense<<<dim3((unsigned)gx, (unsigned)sh->n_kv), DN_THREADS, DN_SMEM, stream>>>(a);
    KN_LAUNCHED("kn_cuda attention (dense prefill)");
    return MM_OK;
}
