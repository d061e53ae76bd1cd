#include "kn_attn.h"

#include <math.h>
#include <string.h>

#include "kn_act.h"
#include "kn_gemm.h"
#include "kn_simd.h"

enum { KEY_CHUNK = 64 }; /* scores kept on the stack per step, per head */

/* G query heads of one token that share KV head kv_head, against the keys of a list of blocks (or, when
 * blocks is NULL, every block up to the token's own), causal at token level, with an online softmax per head.
 * Each key and value row is loaded once for all G heads. */
KN_INLINE void group_body(const float *q, int32_t G, int64_t pos, int32_t hd, float scale,
                          const float *k_cache, const float *v_cache, int32_t n_kv, int32_t kv_head,
                          int32_t block, const int32_t *block_table, const int32_t *blocks, int32_t nb,
                          float *out)
{
    float m[KN_ATTN_MAX_GROUP], l[KN_ATTN_MAX_GROUP];
    float sc[KN_ATTN_MAX_GROUP * KEY_CHUNK];
    int64_t tok_stride = (int64_t)n_kv * hd;
    for (int32_t g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(out, 0, sizeof(float) * (size_t)G * (size_t)hd);
    int64_t n_iter = blocks ? nb : pos / block + 1;
    for (int64_t bi = 0; bi < n_iter; bi++) {
        int64_t b = blocks ? blocks[bi] : bi;
        int64_t t0 = b * block;
        if (b < 0 || t0 > pos) continue;
        int64_t jn = pos - t0 + 1 < block ? pos - t0 + 1 : block;
        int64_t base = ((int64_t)block_table[b] * block) * tok_stride + (int64_t)kv_head * hd;
        const float *kb = k_cache + base, *vb = v_cache + base;
        for (int64_t j0 = 0; j0 < jn; j0 += KEY_CHUNK) {
            int64_t c = jn - j0 < KEY_CHUNK ? jn - j0 : KEY_CHUNK;
            for (int64_t j = 0; j < c; j++) {
                const float *kr = kb + (j0 + j) * tok_stride;
                for (int32_t g = 0; g < G; g++) {
                    float d;
                    dot_body(q + (int64_t)g * hd, kr, hd, &d);
                    sc[g * KEY_CHUNK + j] = d * scale;
                }
            }
            for (int32_t g = 0; g < G; g++) {
                float *s = sc + g * KEY_CHUNK;
                float bm = -INFINITY;
                for (int64_t j = 0; j < c; j++) bm = s[j] > bm ? s[j] : bm;
                if (bm > m[g]) {
                    /* rescale what was accumulated under the old maximum */
                    float corr = m[g] == -INFINITY ? 0.0f : expneg_body(m[g] - bm);
                    l[g] *= corr;
                    float *o = out + (int64_t)g * hd;
                    for (int32_t d = 0; d < hd; d++) o[d] *= corr;
                    m[g] = bm;
                }
                float mg = m[g];
                for (int64_t j = 0; j < c; j++) s[j] = expneg_body(s[j] - mg); /* vectorizes: no reduction */
                float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                int64_t j = 0;
                for (; j + 8 <= c; j += 8)
                    for (int x = 0; x < 8; x++) part[x] += s[j + x];
                float sum =
                    ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
                for (; j < c; j++) sum += s[j];
                l[g] += sum;
            }
            for (int64_t j = 0; j < c; j++) {
                const float *vr = vb + (j0 + j) * tok_stride;
                for (int32_t g = 0; g < G; g++)
                    axpy_body(out + (int64_t)g * hd, vr, sc[g * KEY_CHUNK + j], hd);
            }
        }
    }
    for (int32_t g = 0; g < G; g++)
        if (l[g] > 0.0f) {
            float inv = 1.0f / l[g];
            float *o = out + (int64_t)g * hd;
            for (int32_t d = 0; d < hd; d++) o[d] *= inv;
        }
}

KN_DISPATCH(group,
            (const float *q, int32_t G, int64_t pos, int32_t hd, float scale, const float *k_cache,
             const float *v_cache, int32_t n_kv, int32_t kv_head, int32_t block, const int32_t *block_table,
             const int32_t *blocks, int32_t nb, float *out),
            (q, G, pos, hd, scale, k_cache, v_cache, n_kv, kv_head, block, block_table, blocks, nb, out))

void kn_attn_group_blocks(const float *q, int32_t G, int64_t pos, int32_t head_dim, float scale,
                          const float *k_cache, const float *v_cache, int32_t n_kv, int32_t kv_head,
                          int32_t block, const int32_t *block_table, const int32_t *blocks, int32_t nb,
                          float *out)
{
    /* groups larger than the stack state are done in slices */
    for (int32_t g0 = 0; g0 < G; g0 += KN_ATTN_MAX_GROUP) {
        int32_t gn = G - g0 < KN_ATTN_MAX_GROUP ? G - g0 : KN_ATTN_MAX_GROUP;
        KN_CALL(group, (q + (int64_t)g0 * head_dim, gn, pos, head_dim, scale, k_cache, v_cache, n_kv, kv_head,
                        block, block_table, blocks, nb, out + (int64_t)g0 * head_dim));
    }
}

void kn_attn_paged_causal(const float *q, int32_t n, const int64_t *pos, int32_t n_heads, int32_t n_kv,
                          int32_t head_dim, float scale, const float *k_cache, const float *v_cache,
                          int32_t block, const struct kn_paged_seq *seq, float *out)
{
    int32_t group = n_heads / n_kv;
    for (int32_t i = 0; i < n; i++)
        for (int32_t g = 0; g < n_kv; g++) {
            int64_t off = ((int64_t)i * n_heads + (int64_t)g * group) * head_dim;
            kn_attn_group_blocks(q + off, group, pos[i], head_dim, scale, k_cache, v_cache, n_kv, g, block,
                                 seq->block_table, NULL, 0, out + off);
        }
}

void kn_attn_full(const float *q, const float *k, const float *v, int64_t stride, int64_t n, int32_t n_heads,
                  int32_t head_dim, float scale, float *out, int64_t out_stride, float *scratch,
                  int64_t scratch_floats)
{
    int64_t rows = scratch_floats / (n > 0 ? n : 1);
    if (rows < 1) rows = 1;
    for (int32_t h = 0; h < n_heads; h++) {
        const float *qh = q + (int64_t)h * head_dim, *kh = k + (int64_t)h * head_dim;
        const float *vh = v + (int64_t)h * head_dim;
        for (int64_t i0 = 0; i0 < n; i0 += rows) {
            int64_t m = n - i0 < rows ? n - i0 : rows;
            kn_sgemm_nt(m, n, head_dim, qh + i0 * stride, stride, kh, stride, 0.0f, scratch, n);
            for (int64_t r = 0; r < m; r++) {
                float *s = scratch + r * n;
                for (int64_t j = 0; j < n; j++) s[j] *= scale;
                kn_softmax_row(s, n);
            }
            kn_sgemm_nn(m, head_dim, n, scratch, n, vh, stride, 0.0f,
                        out + i0 * out_stride + (int64_t)h * head_dim, out_stride);
        }
    }
}
