/* bench-attn [--context N] [--reps R] [--f16] [--hot]
 *
 * The attention part of one batched decode step of the tiny checkpoint, kernels alone (kn_pattn.h): 16
 * sequences of N tokens (default 544), one dense layer (8 query heads over 2 KV heads of 32) and three MSA
 * layers (2 index heads of 32, blocks of 16, top-4 with the local block), each layer with its own paged
 * cache. Per decoded token: the dense layer's attention, and the MSA layers' block scores, top-k and
 * attention over the selected blocks. Prints microseconds per token, mean and best of R steps, at every
 * instruction-set level the CPU has. --f16: the half-precision cache; --hot: every sequence reads the same
 * pages (the cache stays in L2: the arithmetic alone). One thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kn_isa.h"
#include "kn_msa.h"
#include "kn_pattn.h"

enum { NS = 16, NKV = 2, HD = 32, NH = 8, NIH = 2, ID = 32, BLK = 16, TOPK = 4, NL = 4, MAXB = 1024 };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static uint32_t rng = 1;

static float frand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

struct layer {
    float *k, *v, *idx;
    uint16_t *kh, *vh, *idxh;
};

static float q[NS][NH * HD], iq[NS][NIH * ID], out[NH * HD], scores[NIH * MAXB];
static int32_t bt[NS][MAXB];

/* one step: every sequence's token through the dense layer and the MSA layers */
static void step(struct layer *L, int64_t n_pages, int64_t pos, int f16, double *t_dense, double *t_msa)
{
    int32_t nb = (int32_t)(pos / BLK) + 1, sel[NIH * TOPK], ids[TOPK];
    double t0 = now_s();
    for (int s = 0; s < NS; s++)
        for (int kv = 0; kv < NKV; kv++) {
            const float *qs = q[s] + kv * (NH / NKV) * HD;
            if (f16) {
                struct kn_pkv16 c = {L[0].kh, L[0].vh, NKV, HD, BLK, n_pages};
                kn_pattn_gqa_f16(qs, NH / NKV, pos, 0.17f, &c, kv, bt[s], NULL, 0, out);
            } else {
                struct kn_pkv c = {L[0].k, L[0].v, NKV, HD, BLK, n_pages};
                kn_pattn_gqa(qs, NH / NKV, pos, 0.17f, &c, kv, bt[s], NULL, 0, out);
            }
        }
    double t1 = now_s();
    for (int l = 1; l < NL; l++)
        for (int s = 0; s < NS; s++) {
            if (f16)
                kn_pidx_scores_f16(iq[s], NIH, ID, pos, L[l].idxh, BLK, bt[s], scores, nb, nb);
            else
                kn_pidx_scores(iq[s], NIH, ID, pos, L[l].idx, BLK, bt[s], scores, nb, nb);
            int32_t k = kn_msa_topk_local(scores, NIH, 1, &pos, nb, BLK, TOPK, 1, sel, TOPK);
            for (int g = 0; g < NIH; g++) { /* index head g selects for KV head g (4 query heads each) */
                int32_t n = 0;
                for (int32_t x = 0; x < k; x++) {
                    int32_t b = sel[g * TOPK + x], at = n;
                    if (b < 0) continue;
                    n++;
                    while (at > 0 && ids[at - 1] > b) {
                        ids[at] = ids[at - 1];
                        at--;
                    }
                    ids[at] = b;
                }
                const float *qs = q[s] + g * (NH / NKV) * HD;
                if (f16) {
                    struct kn_pkv16 c = {L[l].kh, L[l].vh, NKV, HD, BLK, n_pages};
                    kn_pattn_gqa_f16(qs, NH / NKV, pos, 0.17f, &c, g, bt[s], ids, n, out);
                } else {
                    struct kn_pkv c = {L[l].k, L[l].v, NKV, HD, BLK, n_pages};
                    kn_pattn_gqa(qs, NH / NKV, pos, 0.17f, &c, g, bt[s], ids, n, out);
                }
            }
        }
    *t_dense = t1 - t0;
    *t_msa = now_s() - t1;
}

int main(int argc, char **argv)
{
    int ctx = 544, reps = 200, f16 = 0, hot = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--f16"))
            f16 = 1;
        else if (!strcmp(argv[i], "--hot"))
            hot = 1;
        else if (!strcmp(argv[i], "--context") && i + 1 < argc)
            ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench-attn [--context N] [--reps R] [--f16] [--hot]\n");
            return 2;
        }
    }
    if (ctx < 1 || ctx > MAXB * BLK || reps < 1) {
        fprintf(stderr, "bench-attn: --context 1..%d, --reps >= 1\n", MAXB * BLK);
        return 2;
    }
    int32_t nb = (ctx + BLK - 1) / BLK;
    int64_t n_pages = (int64_t)NS * nb, kvn = n_pages * NKV * HD * BLK, ixn = n_pages * ID * BLK;
    struct layer L[NL];
    for (int l = 0; l < NL; l++) {
        L[l].k = malloc(sizeof(float) * (size_t)kvn);
        L[l].v = malloc(sizeof(float) * (size_t)kvn);
        L[l].idx = malloc(sizeof(float) * (size_t)ixn);
        L[l].kh = malloc(2 * (size_t)kvn);
        L[l].vh = malloc(2 * (size_t)kvn);
        L[l].idxh = malloc(2 * (size_t)ixn);
        if (!L[l].k || !L[l].v || !L[l].idx || !L[l].kh || !L[l].vh || !L[l].idxh) return 1;
        for (int64_t i = 0; i < kvn; i++) {
            L[l].k[i] = frand();
            L[l].v[i] = frand();
            L[l].kh[i] = kn_f16_store(L[l].k[i]);
            L[l].vh[i] = kn_f16_store(L[l].v[i]);
        }
        for (int64_t i = 0; i < ixn; i++) L[l].idxh[i] = kn_f16_store(L[l].idx[i] = frand());
    }
    for (int s = 0; s < NS; s++) {
        for (int32_t b = 0; b < nb; b++) bt[s][b] = (hot ? 0 : s) * nb + b; /* a sequence's pages in order */
        for (int i = 0; i < NH * HD; i++) q[s][i] = frand();
        for (int i = 0; i < NIH * ID; i++) iq[s][i] = 3.0f * frand();
    }
    printf("attention of a decode step: 16 sequences at %d tokens, %s cache%s, us per decoded token (mean, "
           "best of %d)\n",
           ctx, f16 ? "fp16" : "fp32", hot ? ", all reading the same pages" : "", reps);
    int32_t top = kn_isa_get();
    for (int32_t lv = top; lv >= 0; lv--) {
        kn_isa_limit(lv);
        double sd = 0, sm = 0, bd = 1e30, bm = 1e30;
        for (int r = 0; r < reps; r++) {
            double td, tm;
            step(L, n_pages, ctx - 1, f16, &td, &tm);
            sd += td;
            sm += tm;
            bd = td < bd ? td : bd;
            bm = tm < bm ? tm : bm;
        }
        printf("%-7s dense layer %7.2f (%.2f)   3 MSA layers %7.2f (%.2f)\n", kn_isa_name(lv),
               sd / reps / NS * 1e6, bd / NS * 1e6, sm / reps / NS * 1e6, bm / NS * 1e6);
    }
    kn_isa_limit(top);
    for (int l = 0; l < NL; l++) {
        free(L[l].k), free(L[l].v), free(L[l].idx), free(L[l].kh), free(L[l].vh), free(L[l].idxh);
    }
    return 0;
}
