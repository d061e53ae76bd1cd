/* The half-precision paged cache (kn_pattn.h, *_f16): stores round to nearest even and saturate at +-65504;
 * and on a cache whose values are all exactly representable in fp16, the fp16 kernels give the same bits as
 * the fp32 kernels (the conversion is exact, the arithmetic the same), for dense and selected-block attention
 * and the MSA block scores, at every instruction-set level the CPU has, block sizes that are and are not
 * multiples of the vector width included. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_isa.h"
#include "kn_pattn.h"
#include "mm_dtype.h"
#include "mmgw_test.h"

static uint32_t rng = 4242;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* a random value that fp16 holds exactly */
static float hrand(float scale)
{
    return mm_f16_to_f32(mm_f32_to_f16(scale * frand()));
}

static void check_store(void)
{
    static const float xs[] = {0.0f,     -0.0f, 1.0f,  0.1f,    -3.14159f, 65504.0f, 65519.0f,
                               65520.0f, 1e9f,  -1e9f, 6.0e-8f, 3.0e-8f,   1e-5f,    -2.5e-6f};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        float x = xs[i];
        uint16_t h = kn_f16_store(x);
        float back = mm_f16_to_f32(h);
        CHECK_MSG(isfinite(back), "store(%g) is not finite", x);
        if (fabsf(x) <= 65504.0f)
            CHECK_MSG(h == mm_f32_to_f16(x), "store(%g) = %04x, round-to-nearest-even gives %04x", x, h,
                      mm_f32_to_f16(x));
        else
            CHECK_MSG(back == (x > 0 ? 65504.0f : -65504.0f), "store(%g) = %g, want saturation", x, back);
    }
    /* round to nearest even on a tie: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 */
    CHECK_EQ_INT(kn_f16_store(1.0f + 1.0f / 2048.0f), 0x3c00);
    CHECK_EQ_INT(kn_f16_store(1.0f + 3.0f / 2048.0f), 0x3c02);
    CHECK(isnan(mm_f16_to_f32(kn_f16_store(NAN))));
}

static void check_case(int32_t block, int32_t n_kv, int32_t hd, int32_t G, int32_t idx_heads, int32_t idx_dim,
                       int64_t len)
{
    int32_t nb = (int32_t)((len + block - 1) / block), n_pages = nb + 3;
    int64_t row = (int64_t)n_kv * hd, slots = (int64_t)n_pages * block;
    float *kt = malloc(sizeof(float) * (size_t)(slots * row)),
          *vt = malloc(sizeof(float) * (size_t)(slots * row));
    float *it = malloc(sizeof(float) * (size_t)(slots * idx_dim));
    uint16_t *kh = malloc(2 * (size_t)(slots * row)), *vh = malloc(2 * (size_t)(slots * row));
    uint16_t *ih = malloc(2 * (size_t)(slots * idx_dim));
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
    float *krow = malloc(sizeof(float) * (size_t)row), *vrow = malloc(sizeof(float) * (size_t)row);
    float *irow = malloc(sizeof(float) * (size_t)idx_dim);
    for (int32_t b = 0; b < nb; b++) bt[b] = (b * 5 + 1) % n_pages; /* pages out of order */
    /* stale values in unused slots must not matter */
    for (int64_t i = 0; i < slots * row; i++) {
        kt[i] = vt[i] = 1e3f;
        kh[i] = vh[i] = mm_f32_to_f16(-1e3f);
    }
    for (int64_t i = 0; i < slots * idx_dim; i++) {
        it[i] = 1e3f;
        ih[i] = mm_f32_to_f16(1e3f);
    }
    struct kn_pkv g32 = {NULL, NULL, n_kv, hd, block, n_pages};
    struct kn_pkv16 g16 = {NULL, NULL, n_kv, hd, block, n_pages};
    for (int64_t p = 0; p < len; p++) {
        for (int64_t x = 0; x < row; x++) {
            krow[x] = hrand(3.0f);
            vrow[x] = hrand(2.0f);
        }
        for (int32_t x = 0; x < idx_dim; x++) irow[x] = hrand(1.5f);
        int64_t page = bt[p / block];
        int32_t slot = (int32_t)(p % block);
        kn_pkv_write(kt, vt, &g32, page, slot, krow, vrow);
        kn_pidx_write(it, idx_dim, block, page, slot, irow);
        kn_pkv_write_f16(kh, vh, &g16, page, slot, krow, vrow);
        kn_pidx_write_f16(ih, idx_dim, block, page, slot, irow);
    }
    float *q = malloc(sizeof(float) * (size_t)G * (size_t)hd),
          *o1 = malloc(sizeof(float) * (size_t)G * (size_t)hd);
    float *o2 = malloc(sizeof(float) * (size_t)G * (size_t)hd);
    float *iq = malloc(sizeof(float) * (size_t)idx_heads * (size_t)idx_dim);
    float *s1 = malloc(sizeof(float) * (size_t)idx_heads * (size_t)nb),
          *s2 = malloc(sizeof(float) * (size_t)idx_heads * (size_t)nb);
    struct kn_pkv c32 = {kt, vt, n_kv, hd, block, n_pages};
    struct kn_pkv16 c16 = {kh, vh, n_kv, hd, block, n_pages};
    int64_t probes[4] = {0, len - 1, len / 2, block < len ? block : len - 1};
    const char *isa = kn_isa_name(kn_isa_get());
    for (int pi = 0; pi < 4; pi++) {
        int64_t pos = probes[pi];
        for (int64_t x = 0; x < (int64_t)G * hd; x++) q[x] = 2.0f * frand();
        for (int64_t x = 0; x < (int64_t)idx_heads * idx_dim; x++) iq[x] = frand();
        int32_t kvh = (int32_t)(pos % n_kv);
        kn_pattn_gqa(q, G, pos, 0.3f, &c32, kvh, bt, NULL, 0, o1);
        kn_pattn_gqa_f16(q, G, pos, 0.3f, &c16, kvh, bt, NULL, 0, o2);
        CHECK_MSG(!memcmp(o1, o2, sizeof(float) * (size_t)G * (size_t)hd),
                  "%s: dense block %d hd %d G %d pos %lld: fp16 cache differs from fp32", isa, block, hd, G,
                  (long long)pos);
        int32_t sel[64], ns = 0;
        for (int32_t b = 0; b <= pos / block && ns < 62; b += 2) sel[ns++] = b;
        if (sel[ns - 1] != pos / block) sel[ns++] = (int32_t)(pos / block);
        sel[ns++] = -1;
        kn_pattn_gqa(q, G, pos, 0.3f, &c32, kvh, bt, sel, ns, o1);
        kn_pattn_gqa_f16(q, G, pos, 0.3f, &c16, kvh, bt, sel, ns, o2);
        CHECK_MSG(!memcmp(o1, o2, sizeof(float) * (size_t)G * (size_t)hd),
                  "%s: selected blocks, block %d hd %d G %d pos %lld: fp16 cache differs from fp32", isa,
                  block, hd, G, (long long)pos);
        kn_pidx_scores(iq, idx_heads, idx_dim, pos, it, block, bt, s1, nb, nb);
        kn_pidx_scores_f16(iq, idx_heads, idx_dim, pos, ih, block, bt, s2, nb, nb);
        CHECK_MSG(!memcmp(s1, s2, sizeof(float) * (size_t)idx_heads * (size_t)nb),
                  "%s: scores block %d dim %d heads %d pos %lld: fp16 cache differs from fp32", isa, block,
                  idx_dim, idx_heads, (long long)pos);
    }
    free(kt), free(vt), free(it), free(kh), free(vh), free(ih), free(bt), free(krow), free(vrow), free(irow);
    free(q), free(o1), free(o2), free(iq), free(s1), free(s2);
}

int main(void)
{
    check_store();
    int32_t top = kn_isa_get();
    for (int32_t lv = top; lv >= 0; lv--) {
        kn_isa_limit(lv);
        check_case(16, 2, 32, 4, 2, 32, 200);   /* the tiny checkpoint */
        check_case(5, 3, 6, 3, 1, 10, 23);      /* block not a multiple of any width: scalar tails */
        check_case(8, 1, 24, 1, 3, 24, 41);     /* half-width blocks */
        check_case(128, 2, 128, 8, 4, 64, 300); /* the real model's block and head sizes */
        check_case(300, 1, 20, 10, 9, 12, 700); /* blocks over one softmax pass */
    }
    kn_isa_limit(top);
    return test_done();
}
