#include "kn_pattn.h"

#include <math.h>
#include <string.h>

#include "kn_simd.h"
#include "mm_dtype.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#define KN_PATTN_G 8            /* heads per pass (larger groups are sliced) */
#define SC_SUB 256              /* keys per softmax update (larger blocks are split) */
#define SC_STRIDE (SC_SUB + 32) /* a score row, with room for a vector running past the end */

void kn_pkv_write(float *k, float *v, const struct kn_pkv *c, int64_t page, int32_t slot, const float *k_row,
                  const float *v_row)
{
    int64_t hd = c->head_dim, blk = c->block;
    for (int32_t h = 0; h < c->n_kv; h++) {
        int64_t base = ((int64_t)h * c->n_pages + page) * hd * blk;
        float *kt = k + base + slot;
        const float *kr = k_row + h * hd;
        for (int64_t d = 0; d < hd; d++) kt[d * blk] = kr[d];
        memcpy(v + base + (int64_t)slot * hd, v_row + h * hd, sizeof(float) * (size_t)hd);
    }
}

void kn_pidx_write(float *idx, int32_t idx_dim, int32_t block, int64_t page, int32_t slot, const float *row)
{
    float *t = idx + page * idx_dim * block + slot;
    for (int32_t d = 0; d < idx_dim; d++) t[(int64_t)d * block] = row[d];
}

typedef int32_t kn_v16i __attribute__((vector_size(64)));
typedef int32_t kn_v8i __attribute__((vector_size(32)));
typedef int32_t kn_v4i __attribute__((vector_size(16)));

/* half-precision cache elements as floats: one conversion instruction per vector where the level has it
 * (AVX-512F; F16C, which every AVX2 CPU has), else the portable conversion of mm_dtype.h */
static inline kn_v4f ld4h(const uint16_t *p)
{
    return (kn_v4f){mm_f16_to_f32(p[0]), mm_f16_to_f32(p[1]), mm_f16_to_f32(p[2]), mm_f16_to_f32(p[3])};
}

#if defined(__x86_64__) && defined(__GNUC__)
#define PW 16
#define PVEC kn_v16f
#define PVECI kn_v16i
#define PLANES ((kn_v16i){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
#define PVECU kn_v16f_u
#define PKT float
#define PLD(p) (*(const kn_v16f_u *)(p))
#define PCV1(x) (x)
#define PFN(x) x##_512
#define PTARGET KN_512_TARGET
#define PFMA(a, b, c) __builtin_fmaf(a, b, c)
#include "kn_pattn_body.h" /* undefines the parameters */

#define PW 16
#define PVEC kn_v16f
#define PVECI kn_v16i
#define PLANES ((kn_v16i){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
#define PVECU kn_v16f_u
#define PKT uint16_t
#define PLD(p) ((kn_v16f)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p))))
#define PCV1(x) _cvtsh_ss(x)
#define PFN(x) x##_512h
#define PTARGET KN_512_TARGET
#define PFMA(a, b, c) __builtin_fmaf(a, b, c)
#include "kn_pattn_body.h" /* undefines the parameters */

#define PW 8
#define PVEC kn_v8f
#define PVECI kn_v8i
#define PLANES ((kn_v8i){0, 1, 2, 3, 4, 5, 6, 7})
#define PVECU kn_v8f_u
#define PKT float
#define PLD(p) (*(const kn_v8f_u *)(p))
#define PCV1(x) (x)
#define PFN(x) x##_avx2
#define PTARGET KN_FAST_TARGET
#define PFMA(a, b, c) __builtin_fmaf(a, b, c)
#include "kn_pattn_body.h" /* undefines the parameters */

#define PW 8
#define PVEC kn_v8f
#define PVECI kn_v8i
#define PLANES ((kn_v8i){0, 1, 2, 3, 4, 5, 6, 7})
#define PVECU kn_v8f_u
#define PKT uint16_t
#define PLD(p) ((kn_v8f)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p))))
#define PCV1(x) _cvtsh_ss(x)
#define PFN(x) x##_avx2h
#define PTARGET KN_FAST_TARGET
#define PFMA(a, b, c) __builtin_fmaf(a, b, c)
#include "kn_pattn_body.h" /* undefines the parameters */

#endif

#define PW 4
#define PVEC kn_v4f
#define PVECI kn_v4i
#define PLANES ((kn_v4i){0, 1, 2, 3})
#define PVECU kn_v4f_u
#define PKT float
#define PLD(p) (*(const kn_v4f_u *)(p))
#define PCV1(x) (x)
#define PFN(x) x##_base
#define PTARGET
#define PFMA(a, b, c) ((c) + (a) * (b))
#include "kn_pattn_body.h" /* undefines the parameters */

#define PW 4
#define PVEC kn_v4f
#define PVECI kn_v4i
#define PLANES ((kn_v4i){0, 1, 2, 3})
#define PVECU kn_v4f_u
#define PKT uint16_t
#define PLD(p) ld4h(p)
#define PCV1(x) mm_f16_to_f32(x)
#define PFN(x) x##_baseh
#define PTARGET
#define PFMA(a, b, c) ((c) + (a) * (b))
#include "kn_pattn_body.h" /* undefines the parameters */

#if defined(__x86_64__) && defined(__GNUC__)
/* the kernel x of the level in use, for fp32 (h empty) or half-precision (h = h) cache elements */
#define PICK(x, h) (kn_isa_level() >= 2 ? x##_512##h : kn_isa_level() == 1 ? x##_avx2##h : x##_base##h)
#else
#define PICK(x, h) x##_base##h
#endif

void kn_pattn_gqa(const float *q, int32_t G, int64_t pos, float scale, const struct kn_pkv *c,
                  int32_t kv_head, const int32_t *block_table, const int32_t *blocks, int32_t nb, float *out)
{
    for (int32_t g0 = 0; g0 < G; g0 += KN_PATTN_G) {
        int32_t gn = G - g0 < KN_PATTN_G ? G - g0 : KN_PATTN_G;
        int64_t head = (int64_t)kv_head * c->n_pages * c->head_dim * c->block;
        PICK(gqa, )
        (q + (int64_t)g0 * c->head_dim, gn, pos, scale, c->k + head, c->v + head, c->head_dim, c->block,
         block_table, blocks, nb, out + (int64_t)g0 * c->head_dim);
    }
}

void kn_pidx_scores(const float *q, int32_t n_idx_heads, int32_t idx_dim, int64_t pos, const float *idx,
                    int32_t block, const int32_t *block_table, float *scores, int64_t head_stride,
                    int32_t n_blocks)
{
    if (block % 16 == 0) /* whole vectors at every level: the scores never leave the registers */
        PICK(iscores_v, )
    (q, n_idx_heads, idx_dim, pos, idx, block, block_table, scores, head_stride, n_blocks);
    else PICK(iscores, )(q, n_idx_heads, idx_dim, pos, idx, block, block_table, scores, head_stride,
                         n_blocks);
}

uint16_t kn_f16_store(float x)
{
    if (x > 65504.0f) x = 65504.0f; /* saturate: an inf key or value would turn a softmax into NaN */
    if (x < -65504.0f) x = -65504.0f;
    return mm_f32_to_f16(x);
}

void kn_pkv_write_f16(uint16_t *k, uint16_t *v, const struct kn_pkv16 *c, int64_t page, int32_t slot,
                      const float *k_row, const float *v_row)
{
    int64_t hd = c->head_dim, blk = c->block;
    for (int32_t h = 0; h < c->n_kv; h++) {
        int64_t base = ((int64_t)h * c->n_pages + page) * hd * blk;
        uint16_t *kt = k + base + slot, *vr = v + base + (int64_t)slot * hd;
        const float *kr = k_row + h * hd, *vs = v_row + h * hd;
        for (int64_t d = 0; d < hd; d++) {
            kt[d * blk] = kn_f16_store(kr[d]);
            vr[d] = kn_f16_store(vs[d]);
        }
    }
}

void kn_pidx_write_f16(uint16_t *idx, int32_t idx_dim, int32_t block, int64_t page, int32_t slot,
                       const float *row)
{
    uint16_t *t = idx + page * idx_dim * block + slot;
    for (int32_t d = 0; d < idx_dim; d++) t[(int64_t)d * block] = kn_f16_store(row[d]);
}

void kn_pattn_gqa_f16(const float *q, int32_t G, int64_t pos, float scale, const struct kn_pkv16 *c,
                      int32_t kv_head, const int32_t *block_table, const int32_t *blocks, int32_t nb,
                      float *out)
{
    for (int32_t g0 = 0; g0 < G; g0 += KN_PATTN_G) {
        int32_t gn = G - g0 < KN_PATTN_G ? G - g0 : KN_PATTN_G;
        int64_t head = (int64_t)kv_head * c->n_pages * c->head_dim * c->block;
        PICK(gqa, h)
        (q + (int64_t)g0 * c->head_dim, gn, pos, scale, c->k + head, c->v + head, c->head_dim, c->block,
         block_table, blocks, nb, out + (int64_t)g0 * c->head_dim);
    }
}

void kn_pidx_scores_f16(const float *q, int32_t n_idx_heads, int32_t idx_dim, int64_t pos,
                        const uint16_t *idx, int32_t block, const int32_t *block_table, float *scores,
                        int64_t head_stride, int32_t n_blocks)
{
    if (block % 16 == 0) PICK(iscores_v, h)
    (q, n_idx_heads, idx_dim, pos, idx, block, block_table, scores, head_stride, n_blocks);
    else PICK(iscores, h)(q, n_idx_heads, idx_dim, pos, idx, block, block_table, scores, head_stride,
                          n_blocks);
}
