#include "kn_pattn.h"

#include <math.h>
#include <string.h>

#include "kn_simd.h"

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

#if defined(__x86_64__) && defined(__GNUC__)
#define PW 16
#define PVEC kn_v16f
#define PVECU kn_v16f_u
#define PFN(x) x##_512
#define PTARGET KN_512_TARGET
#include "kn_pattn_body.h"
#undef PW
#undef PVEC
#undef PVECU
#undef PFN
#undef PTARGET

#define PW 8
#define PVEC kn_v8f
#define PVECU kn_v8f_u
#define PFN(x) x##_avx2
#define PTARGET KN_FAST_TARGET
#include "kn_pattn_body.h"
#undef PW
#undef PVEC
#undef PVECU
#undef PFN
#undef PTARGET
#endif

#define PW 4
#define PVEC kn_v4f
#define PVECU kn_v4f_u
#define PFN(x) x##_base
#define PTARGET
#include "kn_pattn_body.h"
#undef PW
#undef PVEC
#undef PVECU
#undef PFN
#undef PTARGET

#if defined(__x86_64__) && defined(__GNUC__)
#define PICK(x) (kn_isa_level() >= 2 ? x##_512 : kn_isa_level() == 1 ? x##_avx2 : x##_base)
#else
#define PICK(x) x##_base
#endif

void kn_pattn_gqa(const float *q, int32_t G, int64_t pos, float scale, const struct kn_pkv *c,
                  int32_t kv_head, const int32_t *block_table, const int32_t *blocks, int32_t nb, float *out)
{
    for (int32_t g0 = 0; g0 < G; g0 += KN_PATTN_G) {
        int32_t gn = G - g0 < KN_PATTN_G ? G - g0 : KN_PATTN_G;
        int64_t head = (int64_t)kv_head * c->n_pages * c->head_dim * c->block;
        PICK(gqa)
        (q + (int64_t)g0 * c->head_dim, gn, pos, scale, c->k + head, c->v + head, c->head_dim, c->block,
         block_table, blocks, nb, out + (int64_t)g0 * c->head_dim);
    }
}

void kn_pidx_scores(const float *q, int32_t n_idx_heads, int32_t idx_dim, int64_t pos, const float *idx,
                    int32_t block, const int32_t *block_table, float *scores, int64_t head_stride,
                    int32_t n_blocks)
{
    PICK(iscores)(q, n_idx_heads, idx_dim, pos, idx, block, block_table, scores, head_stride, n_blocks);
}
