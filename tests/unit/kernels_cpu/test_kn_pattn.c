/* The transposed-key paged attention (kn_pattn.h) against the reference kernels (kn_attn.h, kn_msa.h) on the
 * same random cache stored in both layouts: dense causal GQA, attention over a block selection, and MSA block
 * scores, for block sizes that are and are not multiples of the vector width, heads and head sizes above one
 * pass, at every instruction-set level the CPU has. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_attn.h"
#include "kn_isa.h"
#include "kn_msa.h"
#include "kn_pattn.h"
#include "mmgw_test.h"

static uint32_t rng = 777;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static double max_rel(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (1.0 + fabs((double)b[i]));
        if (!(d <= m)) m = d; /* NaN counts as a failure */
    }
    return m;
}

static void check_case(int32_t block, int32_t n_kv, int32_t hd, int32_t G, int32_t idx_heads, int32_t idx_dim,
                       int64_t len)
{
    int32_t nb = (int32_t)((len + block - 1) / block), n_pages = nb + 3;
    int64_t row = (int64_t)n_kv * hd, slots = (int64_t)n_pages * block;
    float *kr = calloc((size_t)(slots * row), sizeof(float)),
          *vr = calloc((size_t)(slots * row), sizeof(float));
    float *kt = calloc((size_t)(slots * row), sizeof(float)),
          *vt = calloc((size_t)(slots * row), sizeof(float));
    float *ir = calloc((size_t)(slots * idx_dim), sizeof(float)), *it = calloc((size_t)(slots * idx_dim), 4);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)nb);
    float *krow = malloc(sizeof(float) * (size_t)row), *vrow = malloc(sizeof(float) * (size_t)row);
    float *irow = malloc(sizeof(float) * (size_t)idx_dim);
    for (int32_t b = 0; b < nb; b++) bt[b] = (b * 7 + 2) % n_pages; /* pages out of order */
    /* stale values in the unused slots of the transposed pages must not matter */
    for (int64_t i = 0; i < slots * row; i++) kt[i] = vt[i] = 1e3f;
    for (int64_t p = 0; p < len; p++) {
        int64_t slot = (int64_t)bt[p / block] * block + p % block;
        for (int64_t x = 0; x < row; x++) {
            krow[x] = frand();
            vrow[x] = frand();
        }
        for (int32_t x = 0; x < idx_dim; x++) irow[x] = frand();
        memcpy(kr + slot * row, krow, sizeof(float) * (size_t)row);
        memcpy(vr + slot * row, vrow, sizeof(float) * (size_t)row);
        memcpy(ir + slot * idx_dim, irow, sizeof(float) * (size_t)idx_dim);
        struct kn_pkv geo = {NULL, NULL, n_kv, hd, block, n_pages};
        kn_pkv_write(kt, vt, &geo, bt[p / block], (int32_t)(p % block), krow, vrow);
        kn_pidx_write(it, idx_dim, block, bt[p / block], (int32_t)(p % block), irow);
    }
    float *q = malloc(sizeof(float) * (size_t)G * (size_t)hd),
          *o1 = malloc(sizeof(float) * (size_t)G * (size_t)hd);
    float *o2 = malloc(sizeof(float) * (size_t)G * (size_t)hd);
    float *iq = malloc(sizeof(float) * (size_t)idx_heads * (size_t)idx_dim);
    float *s1 = malloc(sizeof(float) * (size_t)idx_heads * (size_t)nb),
          *s2 = malloc(sizeof(float) * (size_t)idx_heads * (size_t)nb);
    struct kn_pkv c = {kt, vt, n_kv, hd, block, n_pages};
    int64_t probes[4] = {0, len - 1, len / 2, block < len ? block : len - 1};
    for (int pi = 0; pi < 4; pi++) {
        int64_t pos = probes[pi];
        for (int64_t x = 0; x < (int64_t)G * hd; x++) q[x] = 2.0f * frand();
        for (int64_t x = 0; x < (int64_t)idx_heads * idx_dim; x++) iq[x] = frand();
        int32_t kvh = (int32_t)(pos % n_kv);
        /* dense causal */
        kn_pattn_gqa(q, G, pos, 0.3f, &c, kvh, bt, NULL, 0, o1);
        kn_attn_group_blocks(q, G, pos, hd, 0.3f, kr, vr, n_kv, kvh, block, bt, NULL, 0, o2);
        double e = max_rel(o1, o2, (int64_t)G * hd);
        CHECK_MSG(e < 1e-5, "%s: dense block %d hd %d G %d pos %lld: rel err %g", kn_isa_name(kn_isa_get()),
                  block, hd, G, (long long)pos, e);
        /* a selection: every other block plus the own one, ascending, with a -1 slot */
        int32_t sel[64], ns = 0;
        for (int32_t b = 0; b <= pos / block && ns < 62; b += 2) sel[ns++] = b;
        if (sel[ns - 1] != pos / block) sel[ns++] = (int32_t)(pos / block);
        sel[ns++] = -1;
        kn_pattn_gqa(q, G, pos, 0.3f, &c, kvh, bt, sel, ns, o1);
        kn_attn_group_blocks(q, G, pos, hd, 0.3f, kr, vr, n_kv, kvh, block, bt, sel, ns, o2);
        e = max_rel(o1, o2, (int64_t)G * hd);
        CHECK_MSG(e < 1e-5, "%s: selected block %d hd %d G %d pos %lld: rel err %g",
                  kn_isa_name(kn_isa_get()), block, hd, G, (long long)pos, e);
        /* MSA block scores over every block of the sequence (future ones -inf) */
        struct kn_paged_seq seq = {bt, len};
        int64_t ppos = pos;
        kn_pidx_scores(iq, idx_heads, idx_dim, pos, it, block, bt, s1, nb, nb);
        kn_msa_index_scores(iq, 1, &ppos, idx_heads, idx_dim, ir, block, &seq, s2, nb);
        int bad = 0;
        for (int32_t x = 0; x < idx_heads * nb; x++)
            bad += isinf(s2[x]) ? !(isinf(s1[x]) && s1[x] < 0)
                                : !(fabs(s1[x] - s2[x]) <= 1e-5 * (1 + fabs(s2[x])));
        CHECK_MSG(!bad, "%s: scores block %d dim %d heads %d pos %lld: %d wrong", kn_isa_name(kn_isa_get()),
                  block, idx_dim, idx_heads, (long long)pos, bad);
    }
    free(kr), free(vr), free(kt), free(vt), free(ir), free(it), free(bt), free(krow), free(vrow), free(irow);
    free(q), free(o1), free(o2), free(iq), free(s1), free(s2);
}

int main(void)
{
    int32_t top = kn_isa_get();
    for (int32_t lv = top; lv >= 0; lv--) {
        kn_isa_limit(lv);
        check_case(16, 2, 32, 4, 2, 32, 200);   /* the tiny checkpoint */
        check_case(16, 2, 32, 4, 2, 32, 16);    /* one full block */
        check_case(5, 3, 6, 3, 1, 10, 23);      /* block not a multiple of any width, odd heads */
        check_case(8, 1, 24, 1, 3, 24, 41);     /* half-width blocks */
        check_case(128, 2, 128, 8, 4, 64, 300); /* the real model's block and head sizes */
        check_case(300, 1, 20, 10, 9, 12, 700); /* blocks over one softmax pass, groups over one head pass */
    }
    kn_isa_limit(top);
    return test_done();
}
