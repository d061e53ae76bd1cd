/* The warp-level core of the tensor-core attention kernels (sparse decode, KV-block-major sparse prefill,
 * dense prefill): one warp holds 16 query rows of head_dim 128 (the 16 heads of one KV group for one query in
 * M3, so one K/V tile serves all of them) and folds 16..128 keys at a time into an online softmax.
 *
 * Shared-memory tiles (K, V, Q) are rows of 128 bf16 = 256 bytes, 16-byte chunk c of row r stored at chunk
 * c ^ (r & 7): the 8 rows one ldmatrix reads at a logical chunk land in 8 different bank groups, for K and Q
 * (row-major fragments) and for V (transposed fragments) alike.
 * Scores are kept in the log2 domain (scale * log2 e folded in), as exp2 is one instruction. */
#ifndef KN_ATTN_WARP_CUH
#define KN_ATTN_WARP_CUH

#include "kn_cuda_internal.cuh"

#define AW_D 128
#define AW_ROW_BYTES 256

struct aw_state {
    float m[2];     /* running max of rows gid and gid+8 (log2 domain) */
    float l[2];     /* this lane's part of the running sums */
    float o[16][4]; /* unnormalized output: d-tile dn, C-fragment layout */
};

__device__ __forceinline__ void aw_init(aw_state &st)
{
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.0f;
#pragma unroll
    for (int dn = 0; dn < 16; dn++)
#pragma unroll
        for (int e = 0; e < 4; e++) st.o[dn][e] = 0.0f;
}

__device__ __forceinline__ uint32_t aw_row_addr(uint32_t base, int row, int chunk)
{
    return base + row * AW_ROW_BYTES + (kn_swz(row, chunk) << 4);
}

/* Copy `rows` rows of 256 bytes (row stride src_stride bytes) into a swizzled tile, by `nthreads` threads
 * numbered t; rows >= valid are zero-filled (stale cache rows beyond the written tokens must not reach P.V).
 * CH < 16: only the first CH 16-byte chunks of each row (the dims a KS < 8 step reads: 2 * KS chunks). */
template <int CH = 16>
__device__ __forceinline__ void aw_tile_load(uint32_t dst, const uint8_t *src, int64_t src_stride, int rows,
                                             int valid, int t, int nthreads)
{
    /* not (row, chunk) advanced by a carry: that measured 12 % slower than the division at 6 warps (v36) */
    for (int id = t; id < rows * CH; id += nthreads) {
        const int r = id / CH, c = id % CH;
        const bool ok = r < valid;
        kn_cp_async16(aw_row_addr(dst, r, c), src + (ok ? r * src_stride + c * 16 : 0), ok ? 16 : 0);
    }
}

/* A fragments of a 16-row Q tile in shared memory (the first KS k-steps of 16 dims). */
template <int KS = 8> __device__ __forceinline__ void aw_load_q(uint32_t qa[8][4], uint32_t q_s, int lane)
{
    const int m = lane >> 3;
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        kn_ldsm_x4(qa[ks], aw_row_addr(q_s, (m & 1) * 8 + (lane & 7), 2 * ks + (m >> 1)));
}

/* Fold NK keys (tile rows key0 .. key0+NK-1; the first at absolute position kpos) into st for query
 * position qpos (keys after it are masked), Q's A fragment of k-step ks given by qfrag(ks, qa): the score
 * product, online softmax and P x V. The callers differ only in where Q's fragments live (aw_step: registers;
 * the 8-warp decode tail: shared memory, read per k-step). KS < 8: only the first 16 * KS dims take part
 * (a head_dim below 128 whose rows are zero past it, as the vision tower's 80: the skipped products would
 * add exact zeros, and the output dims past 16 * KS stay 0). */
template <int NK, typename QF, int KS = 8>
__device__ __forceinline__ void aw_step_q(aw_state &st, QF qfrag, uint32_t k_s, uint32_t v_s, int key0,
                                          int64_t kpos, int64_t qpos, float scale_log2, int lane)
{
    const int tig = lane & 3, m = lane >> 3;
    float s[NK / 8][4];
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) s[nt][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        uint32_t qa[4];
        qfrag(ks, qa);
#pragma unroll
        for (int np = 0; np < NK / 16; np++) {
            uint32_t bf[4];
            kn_ldsm_x4(bf, aw_row_addr(k_s, key0 + (2 * np + (m >> 1)) * 8 + (lane & 7), 2 * ks + (m & 1)));
            kn_mma_bf16(s[2 * np], qa, bf);
            kn_mma_bf16(s[2 * np + 1], qa, bf + 2);
        }
    }
    float mx[2] = {-INFINITY, -INFINITY};
    const bool all_visible = kpos + NK - 1 <= qpos;
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int64_t kp = kpos + nt * 8 + 2 * tig + (e & 1);
            const float x = (all_visible || kp <= qpos) ? s[nt][e] * scale_log2 : -INFINITY;
            s[nt][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    float msafe[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mnew = fmaxf(st.m[h], mx[h]);
        msafe[h] = mnew == -INFINITY ? 0.0f : mnew;
        const float corr = exp2f(st.m[h] - msafe[h]);
        st.m[h] = mnew;
        st.l[h] *= corr;
#pragma unroll
        for (int dn = 0; dn < 2 * KS; dn++) st.o[dn][2 * h] *= corr, st.o[dn][2 * h + 1] *= corr;
    }
#pragma unroll
    for (int nt = 0; nt < NK / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float p = exp2f(s[nt][e] - msafe[e >> 1]);
            s[nt][e] = p;
            st.l[e >> 1] += p;
        }
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++) {
        uint32_t pa[4];
        pa[0] = kn_pack_bf16(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = kn_pack_bf16(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = kn_pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = kn_pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < KS; dp++) {
            uint32_t vb[4];
            kn_ldsm_x4_trans(vb,
                             aw_row_addr(v_s, key0 + 16 * kk + (m & 1) * 8 + (lane & 7), 2 * dp + (m >> 1)));
            kn_mma_bf16(st.o[2 * dp], pa, vb);
            kn_mma_bf16(st.o[2 * dp + 1], pa, vb + 2);
        }
    }
}

/* aw_step_q with Q's fragments held in registers (aw_load_q) */
template <int NK, int KS = 8>
__device__ __forceinline__ void aw_step(aw_state &st, const uint32_t qa[8][4], uint32_t k_s, uint32_t v_s,
                                        int key0, int64_t kpos, int64_t qpos, float scale_log2, int lane)
{
    auto qf = [&](int ks, uint32_t f[4]) {
#pragma unroll
        for (int j = 0; j < 4; j++) f[j] = qa[ks][j];
    };
    aw_step_q<NK, decltype(qf), KS>(st, qf, k_s, v_s, key0, kpos, qpos, scale_log2, lane);
}

/* Row totals of the lane-partial sums (all 4 lanes of a row group get them). */
__device__ __forceinline__ void aw_finish_l(aw_state &st)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 1);
        st.l[h] += __shfl_xor_sync(0xffffffffu, st.l[h], 2);
    }
}

#endif
