/* The CUDA MSA kernels against their CPU twins (kernels/cpu/kn_msa.h, kn_attn.h) on random data:
 * cache append (bf16 and FP8 index keys), index scores, top-k, selection, sparse and dense attention, with
 * every implementation path, on M3's real shapes (64 heads, 4 KV groups, head dim 128, index dim 128, block
 * 128, top-16) and the tiny checkpoint's; batches of mixed lengths (one token, one block, fewer blocks than
 * k, contexts not a multiple of the block), decode steps and chunked prefill. Unwritten cache rows are left
 * as NaN so that a kernel reading past the visible tokens shows. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kn_attn.h"
#include "kn_cuda_knobs.h"
#include "kn_msa.h"

struct world {
    struct kn_cuda_msa_shape sh;
    int f32; /* f32 K/V and index caches (the exact mode): queries and outputs f32 */
    int32_t n_seqs;
    const int64_t *len;
    int32_t bt_stride;
    int32_t *bt_h; /* [n_seqs][bt_stride] */
    int32_t *bt_d;
    int64_t n_pages;
    struct kn_cuda_cache c, c8; /* bf16 and FP8 index caches (shared K/V) */
    float *k_f, *v_f;           /* host f32 copies of the device caches */
    float *idx_f, *idx8_f;      /* index keys as the GPU holds them (bf16, e4m3 * scale) */
};

struct qset {
    int32_t n;
    int32_t *qseq;
    int64_t *pos;
    struct kn_cuda_qbatch qb;
    void *dev[4]; /* device arrays of qb */
};

static void qset_make(struct qset *s, const struct world *w, int32_t n, const int32_t *qseq,
                      const int64_t *pos)
{
    s->n = n;
    s->qseq = ct_hmalloc(sizeof(int32_t) * (size_t)n);
    s->pos = ct_hmalloc(sizeof(int64_t) * (size_t)n);
    memcpy(s->qseq, qseq, sizeof(int32_t) * (size_t)n);
    memcpy(s->pos, pos, sizeof(int64_t) * (size_t)n);
    int32_t *off = ct_hmalloc(sizeof(int32_t) * (size_t)(w->n_seqs + 1));
    int64_t *last = ct_hmalloc(sizeof(int64_t) * (size_t)w->n_seqs);
    int32_t *tiles = ct_hmalloc(sizeof(int32_t) * 2 * (size_t)(n + 1));
    struct mm_err err = {0};
    memset(&s->qb, 0, sizeof(s->qb));
    int32_t rc = kn_cuda_qbatch_plan(n, w->n_seqs, qseq, pos, w->sh.block, off, last, tiles, &s->qb, &err);
    CHECK_MSG(rc == MM_OK, "qbatch_plan: %s", err.msg);
    s->dev[0] = ct_upload(qseq, sizeof(int32_t) * (size_t)n);
    s->dev[1] = ct_upload(pos, sizeof(int64_t) * (size_t)n);
    s->dev[2] = ct_upload(off, sizeof(int32_t) * (size_t)(w->n_seqs + 1));
    s->dev[3] = ct_upload(last, sizeof(int64_t) * (size_t)w->n_seqs);
    void *tiles_d = ct_upload(tiles, sizeof(int32_t) * 2 * (size_t)s->qb.n_tiles);
    s->qb.qseq = s->dev[0];
    s->qb.pos = s->dev[1];
    s->qb.seq_blk_off = s->dev[2];
    s->qb.seq_last = s->dev[3];
    s->qb.tiles = tiles_d;
    s->qb.block_table = w->bt_d;
    s->qb.bt_stride = w->bt_stride;
    free(off);
    free(last);
    free(tiles);
}

static void qset_free(struct qset *s)
{
    for (int k = 0; k < 4; k++) cudaFree(s->dev[k]);
    cudaFree((void *)s->qb.tiles);
    free(s->qseq);
    free(s->pos);
}

/* Build the caches: random K/V/index keys for every position of every sequence, appended by the GPU. */
static void world_make(struct world *w, const struct kn_cuda_msa_shape *sh, int32_t n_seqs,
                       const int64_t *len, int f32)
{
    memset(w, 0, sizeof(*w));
    w->sh = *sh;
    w->f32 = f32;
    const size_t ekv = f32 ? 4 : 2;
    w->n_seqs = n_seqs;
    w->len = len;
    const int32_t B = sh->block, G = sh->n_kv, D = sh->head_dim, DI = sh->idx_dim;
    int64_t total_blocks = 0, total_tok = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        int64_t nb = (len[s] + B - 1) / B;
        if (nb > w->bt_stride) w->bt_stride = (int32_t)nb;
        total_blocks += nb;
        total_tok += len[s];
    }
    w->n_pages = total_blocks + 5;
    /* scrambled page ids so block b of a sequence is never page b */
    int32_t *perm = ct_hmalloc(sizeof(int32_t) * (size_t)w->n_pages);
    for (int64_t p = 0; p < w->n_pages; p++) perm[p] = (int32_t)p;
    for (int64_t p = w->n_pages - 1; p > 0; p--) {
        int64_t j = (int64_t)(ct_next() % (uint64_t)(p + 1));
        int32_t t = perm[p];
        perm[p] = perm[j];
        perm[j] = t;
    }
    w->bt_h = ct_hmalloc(sizeof(int32_t) * (size_t)n_seqs * w->bt_stride);
    int64_t used = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t b = 0; b < w->bt_stride; b++)
            w->bt_h[(int64_t)s * w->bt_stride + b] = b * B < len[s] ? perm[used++] : -1;
    free(perm);
    w->bt_d = ct_upload(w->bt_h, sizeof(int32_t) * (size_t)n_seqs * w->bt_stride);

    const int64_t kv_elems = w->n_pages * B * G * D, idx_elems = w->n_pages * B * DI;
    w->c.k = ct_dmalloc((size_t)kv_elems * ekv);
    w->c.v = ct_dmalloc((size_t)kv_elems * ekv);
    w->c.idx = ct_dmalloc((size_t)idx_elems * ekv);
    w->c.idx_dtype = f32 ? KN_IDX_F32 : KN_IDX_BF16;
    w->c.kv_dtype = f32 ? KN_KV_F32 : KN_KV_BF16;
    w->c.n_pages = w->n_pages;
    w->c8 = w->c;
    w->c8.idx = ct_dmalloc((size_t)idx_elems);
    w->c8.idx_scale = ct_dmalloc((size_t)w->n_pages * B * 4);
    w->c8.idx_dtype = KN_IDX_FP8;

    /* append every token of every sequence in one step */
    int32_t *qseq = ct_hmalloc(sizeof(int32_t) * (size_t)total_tok);
    int64_t *pos = ct_hmalloc(sizeof(int64_t) * (size_t)total_tok);
    int64_t t = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int64_t p = 0; p < len[s]; p++, t++) qseq[t] = s, pos[t] = p;
    float *k = ct_hmalloc(sizeof(float) * (size_t)total_tok * G * D);
    float *v = ct_hmalloc(sizeof(float) * (size_t)total_tok * G * D);
    float *ki = ct_hmalloc(sizeof(float) * (size_t)total_tok * DI);
    ct_fill_normal(k, total_tok * G * D, 1.0f);
    ct_fill_normal(v, total_tok * G * D, 1.0f);
    ct_fill_normal(ki, total_tok * DI, 1.0f);
    struct qset qs;
    qset_make(&qs, w, (int32_t)total_tok, qseq, pos);
    float *k_d = ct_upload(k, sizeof(float) * (size_t)total_tok * G * D);
    float *v_d = ct_upload(v, sizeof(float) * (size_t)total_tok * G * D);
    float *ki_d = ct_upload(ki, sizeof(float) * (size_t)total_tok * DI);
    struct mm_err err = {0};
    int32_t rc = kn_cuda_cache_append(sh, &qs.qb, &w->c, k_d, v_d, (int64_t)G * D, ki_d, DI, 0, &err);
    CHECK_MSG(rc == MM_OK, "cache_append bf16: %s", err.msg);
    rc = kn_cuda_cache_append(sh, &qs.qb, &w->c8, k_d, v_d, (int64_t)G * D, ki_d, DI, 0, &err);
    CHECK_MSG(rc == MM_OK, "cache_append fp8: %s", err.msg);

    /* read back and check against the host conversions (f32: the values themselves) */
    uint16_t *kb = ct_hmalloc((size_t)kv_elems * ekv), *vb = ct_hmalloc((size_t)kv_elems * ekv);
    uint16_t *ib = ct_hmalloc((size_t)idx_elems * ekv);
    uint8_t *i8 = ct_hmalloc((size_t)idx_elems);
    float *sc = ct_hmalloc((size_t)w->n_pages * B * 4);
    ct_download(kb, w->c.k, (size_t)kv_elems * ekv);
    ct_download(vb, w->c.v, (size_t)kv_elems * ekv);
    ct_download(ib, w->c.idx, (size_t)idx_elems * ekv);
    ct_download(i8, w->c8.idx, (size_t)idx_elems);
    ct_download(sc, w->c8.idx_scale, (size_t)w->n_pages * B * 4);
    const float *kf = (const float *)kb, *vf = (const float *)vb, *if32 = (const float *)ib;
    int64_t bad_kv = 0, bad_idx = 0, bad_fp8 = 0, bad_scale = 0;
    t = 0;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int64_t p = 0; p < len[s]; p++, t++) {
            int64_t row = (int64_t)w->bt_h[(int64_t)s * w->bt_stride + p / B] * B + p % B;
            for (int32_t e = 0; e < G * D; e++) {
                const int64_t x = row * G * D + e, y = t * G * D + e;
                bad_kv += f32 ? kf[x] != k[y] : kb[x] != mm_f32_to_bf16(k[y]);
                bad_kv += f32 ? vf[x] != v[y] : vb[x] != mm_f32_to_bf16(v[y]);
            }
            float amax = 0;
            for (int32_t d = 0; d < DI; d++) {
                bad_idx += f32 ? if32[row * DI + d] != ki[t * DI + d]
                               : ib[row * DI + d] != mm_f32_to_bf16(ki[t * DI + d]);
                if (fabsf(ki[t * DI + d]) > amax) amax = fabsf(ki[t * DI + d]);
            }
            float s8 = amax > 0 ? amax / 448.0f : 1.0f;
            bad_scale += sc[row] != s8;
            for (int32_t d = 0; d < DI; d++)
                bad_fp8 += i8[row * DI + d] != mm_f32_to_f8e4m3(ki[t * DI + d] / s8);
        }
    CHECK_MSG(bad_kv == 0, "%lld K/V elements differ from the stored form of x", (long long)bad_kv);
    CHECK_MSG(bad_idx == 0, "%lld index elements differ from the stored form of x", (long long)bad_idx);
    CHECK_MSG(bad_scale == 0, "%lld fp8 scales differ from amax/448", (long long)bad_scale);
    CHECK_MSG(bad_fp8 == 0, "%lld fp8 index bytes differ from e4m3(x/scale)", (long long)bad_fp8);

    w->k_f = ct_hmalloc(sizeof(float) * (size_t)kv_elems);
    w->v_f = ct_hmalloc(sizeof(float) * (size_t)kv_elems);
    w->idx_f = ct_hmalloc(sizeof(float) * (size_t)idx_elems);
    w->idx8_f = ct_hmalloc(sizeof(float) * (size_t)idx_elems);
    if (f32) {
        memcpy(w->k_f, kf, sizeof(float) * (size_t)kv_elems);
        memcpy(w->v_f, vf, sizeof(float) * (size_t)kv_elems);
        memcpy(w->idx_f, if32, sizeof(float) * (size_t)idx_elems);
    } else {
        ct_from_bf16(kb, w->k_f, kv_elems);
        ct_from_bf16(vb, w->v_f, kv_elems);
        ct_from_bf16(ib, w->idx_f, idx_elems);
    }
    for (int64_t e = 0; e < idx_elems; e++) w->idx8_f[e] = mm_f8e4m3_to_f32(i8[e]) * sc[e / DI];
    free(kb), free(vb), free(ib), free(i8), free(sc), free(k), free(v), free(ki), free(qseq), free(pos);
    cudaFree(k_d), cudaFree(v_d), cudaFree(ki_d);
    qset_free(&qs);
}

static void world_free(struct world *w)
{
    cudaFree(w->bt_d), cudaFree(w->c.k), cudaFree(w->c.v), cudaFree(w->c.idx), cudaFree(w->c8.idx);
    cudaFree(w->c8.idx_scale);
    free(w->bt_h), free(w->k_f), free(w->v_f), free(w->idx_f), free(w->idx8_f);
}

/* CPU references for a query set, sequence by sequence, in the batch layouts. */
static void cpu_scores(const struct world *w, const struct qset *qs, const float *q, const float *idx,
                       float *scores, int32_t stride)
{
    const int32_t NH = w->sh.n_idx_heads, DI = w->sh.idx_dim;
    for (int32_t i = 0; i < qs->n; i++) {
        int32_t s = qs->qseq[i];
        struct kn_paged_seq seq = {w->bt_h + (int64_t)s * w->bt_stride, w->len[s]};
        int32_t nb = (int32_t)(qs->pos[i] / w->sh.block) + 1;
        float *tmp = ct_hmalloc(sizeof(float) * (size_t)NH * nb);
        kn_msa_index_scores(q + (int64_t)i * NH * DI, 1, &qs->pos[i], NH, DI, idx, w->sh.block, &seq, tmp,
                            nb);
        for (int32_t g = 0; g < NH; g++)
            memcpy(scores + ((int64_t)g * qs->n + i) * stride, tmp + (int64_t)g * nb,
                   sizeof(float) * (size_t)nb);
        free(tmp);
    }
}

static void cpu_topk(const struct world *w, const struct qset *qs, const float *scores, int32_t sstride,
                     int32_t *sel, int32_t sel_stride)
{
    const int32_t NH = w->sh.n_idx_heads;
    for (int32_t i = 0; i < qs->n; i++) {
        int32_t nb = (int32_t)(qs->pos[i] / w->sh.block) + 1;
        float *tmp = ct_hmalloc(sizeof(float) * (size_t)NH * nb);
        int32_t *st = ct_hmalloc(sizeof(int32_t) * (size_t)NH * sel_stride);
        for (int32_t g = 0; g < NH; g++)
            memcpy(tmp + (int64_t)g * nb, scores + ((int64_t)g * qs->n + i) * sstride,
                   sizeof(float) * (size_t)nb);
        kn_msa_topk_local(tmp, NH, 1, &qs->pos[i], nb, w->sh.block, w->sh.topk, w->sh.n_local, st,
                          sel_stride);
        for (int32_t g = 0; g < NH; g++)
            memcpy(sel + ((int64_t)g * qs->n + i) * sel_stride, st + (int64_t)g * sel_stride,
                   sizeof(int32_t) * (size_t)sel_stride);
        free(tmp), free(st);
    }
}

/* sparse (sel != NULL) or dense attention, q already bf16-rounded */
static void cpu_attention(const struct world *w, const struct qset *qs, const float *q, const int32_t *sel,
                          int32_t sel_stride, float *out)
{
    const int32_t H = w->sh.n_heads, G = w->sh.n_kv, D = w->sh.head_dim;
    int32_t *row = ct_hmalloc(sizeof(int32_t) * (size_t)G * sel_stride);
    for (int32_t i = 0; i < qs->n; i++) {
        int32_t s = qs->qseq[i];
        struct kn_paged_seq seq = {w->bt_h + (int64_t)s * w->bt_stride, w->len[s]};
        if (sel) {
            for (int32_t g = 0; g < G; g++)
                memcpy(row + (int64_t)g * sel_stride, sel + ((int64_t)g * qs->n + i) * sel_stride,
                       sizeof(int32_t) * (size_t)sel_stride);
            int32_t k = w->sh.topk < sel_stride ? w->sh.topk : sel_stride;
            kn_msa_sparse_attention(q + (int64_t)i * H * D, 1, &qs->pos[i], H, G, D, w->sh.scale, w->k_f,
                                    w->v_f, w->sh.block, &seq, row, k, sel_stride, out + (int64_t)i * H * D);
        } else {
            kn_attn_paged_causal(q + (int64_t)i * H * D, 1, &qs->pos[i], H, G, D, w->sh.scale, w->k_f, w->v_f,
                                 w->sh.block, &seq, out + (int64_t)i * H * D);
        }
    }
    free(row);
}

static const char *path_name(int32_t p)
{
    return p == KN_PATH_GENERIC   ? "generic"
           : p == KN_PATH_DECODE  ? "decode"
           : p == KN_PATH_PREFILL ? "prefill"
                                  : "auto";
}

/* Selections equal as sets, except swaps between blocks whose reference scores lie within tol of the row's
 * k-th score (near ties that rounding may order either way). Returns rows that differ. */
static int64_t compare_sel(const struct world *w, const struct qset *qs, const int32_t *got,
                           const int32_t *ref, int32_t sel_stride, const float *scores, int32_t sstride,
                           float tol, const char *what)
{
    const int32_t NH = w->sh.n_idx_heads;
    int64_t differ = 0, bad = 0;
    for (int32_t g = 0; g < NH; g++)
        for (int32_t i = 0; i < qs->n; i++) {
            const int32_t *a = got + ((int64_t)g * qs->n + i) * sel_stride;
            const int32_t *b = ref + ((int64_t)g * qs->n + i) * sel_stride;
            const float *sc = scores + ((int64_t)g * qs->n + i) * sstride;
            int64_t own = qs->pos[i] / w->sh.block;
            float kth = INFINITY;
            int any = 0;
            for (int32_t j = 0; j < sel_stride; j++) {
                if (b[j] >= 0 && (b[j] < own - w->sh.n_local + 1 || b[j] > own) && sc[b[j]] < kth)
                    kth = sc[b[j]];
            }
            for (int32_t j = 0; j < sel_stride; j++) {
                int in_b = 0, in_a = 0;
                for (int32_t m = 0; m < sel_stride; m++) in_b |= b[m] == a[j], in_a |= a[m] == b[j];
                if (a[j] < -1 || a[j] > own) {
                    bad++;
                    any = 1;
                    continue;
                }
                if (!in_b) {
                    any = 1;
                    if (a[j] < 0 || !(fabsf(sc[a[j]] - kth) <= tol)) bad++;
                }
                if (!in_a) {
                    any = 1;
                    if (b[j] < 0 || !(fabsf(sc[b[j]] - kth) <= tol)) bad++;
                }
            }
            differ += any;
            if (any && bad && bad < 4) {
                fprintf(stderr, "  %s: row g=%d i=%d pos=%lld differs:", what, g, i, (long long)qs->pos[i]);
                for (int32_t j = 0; j < sel_stride; j++) fprintf(stderr, " %d/%d", a[j], b[j]);
                fprintf(stderr, "\n");
            }
        }
    CHECK_MSG(bad == 0, "%s: %lld selection entries differ beyond near-ties (%lld rows differ)", what,
              (long long)bad, (long long)differ);
    return differ;
}

/* Set / unset the knobs of a "KEY=VAL KEY=VAL" list. */
static void knobs_set(const char *list)
{
    char env[160], *save = NULL;
    snprintf(env, sizeof env, "%s", list);
    for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        knob_setenv(t, eq + 1, 1);
    }
}

static void knobs_unset(const char *list)
{
    char env[160], *save = NULL;
    snprintf(env, sizeof env, "%s", list);
    for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(t, '=');
        if (eq) *eq = 0;
        knob_unsetenv(t);
    }
}

static void run_queries(const struct world *w, int32_t n, const int32_t *qseq, const int64_t *pos,
                        const char *label, int fast_idx_ok, int fast_attn_ok, int prefill_sel_ok)
{
    const struct kn_cuda_msa_shape *sh = &w->sh;
    const int32_t H = sh->n_heads, D = sh->head_dim, NH = sh->n_idx_heads, DI = sh->idx_dim;
    struct qset qs;
    qset_make(&qs, w, n, qseq, pos);
    const int32_t sstride = qs.qb.max_blocks + 3, sel_stride = sh->topk + 3;
    const int64_t ns = (int64_t)NH * n * sstride, nsel = (int64_t)NH * n * sel_stride,
                  nout = (int64_t)n * H * D;
    struct mm_err err = {0};
    int32_t rc;
    printf("[%s] %d queries, %d sequences, max %d blocks, %d tiles\n", label, n, w->n_seqs, qs.qb.max_blocks,
           qs.qb.n_tiles);

    float *qi = ct_hmalloc(sizeof(float) * (size_t)n * NH * DI);
    ct_fill_normal(qi, (int64_t)n * NH * DI, 1.0f);
    float *qi_d = ct_upload(qi, sizeof(float) * (size_t)n * NH * DI);
    float *ref_s = ct_hmalloc(sizeof(float) * (size_t)ns), *ref_s8 = ct_hmalloc(sizeof(float) * (size_t)ns);
    float *got_s = ct_hmalloc(sizeof(float) * (size_t)ns);
    cpu_scores(w, &qs, qi, w->idx_f, ref_s, sstride);
    cpu_scores(w, &qs, qi, w->idx8_f, ref_s8, sstride);
    float *s_d = ct_dmalloc(sizeof(float) * (size_t)ns);

    /* index scores: every path, bf16 and fp8 keys */
    /* DECODE variants: 1 pages handed out by per-query counters (kn_cuda_msa_index_scores_dyn), the others
     * KN_CUDA_* knobs: the persistent scan with an even split, one CTA per page, the grid-stride stream, the
     * ring with whole-line copies (the default where it applies), with per-lane copies, (FP8) with 16-token
     * steps, with the keys under the normal L2 policy, with 2 / 4 / 8 warps per page (FP8: at most 4, the
     * knob is clamped), with 24 pages per CTA (several pages per warp), both (several split pages per warp
     * group), launched plainly (the default is a programmatic dependent launch) with and without split
     * pages, and explicitly as a programmatic dependent with and without split pages */
    enum { NVAR = 19 };
    static const char *const vknobs[NVAR] = {
        "KN_CUDA_IDX=0",
        "",
        "KN_CUDA_IDX=1",
        "KN_CUDA_IDX=2",
        "KN_CUDA_IDX=3",
        "KN_CUDA_IDX=4",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_LINES=0",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_TILE=1",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_EVICT=0",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_SPLIT=2",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_SPLIT=4",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_SPLIT=8",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_CHUNK=24",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_CHUNK=24 KN_CUDA_IDX_SPLIT=2",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_CHUNK=1 KN_CUDA_IDX_SPLIT=4 KN_CUDA_IDX_TILE=1",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_PDL=0",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_PDL=0 KN_CUDA_IDX_SPLIT=2",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_PDL=1",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_PDL=1 KN_CUDA_IDX_SPLIT=4",
    };
    int32_t *cnt_d = ct_dmalloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    CT_CU(cudaMemset(cnt_d, 0x5a, sizeof(int32_t) * (size_t)(n > 0 ? n : 1))); /* the call must zero them */
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (int32_t pv = NVAR * KN_PATH_GENERIC; pv <= NVAR * KN_PATH_DECODE + NVAR - 1; pv++) {
            const int32_t path = pv / NVAR, var = pv % NVAR, dyn = var == 1;
            if (path == KN_PATH_DECODE && (!fast_idx_ok || (fp8 && DI % 64) || (!fp8 && w->f32))) continue;
            if (var && path != KN_PATH_DECODE) continue;
            if ((var == 7 || var == 14) && !fp8) continue;
            CT_CU(cudaMemset(s_d, 0xff, sizeof(float) * (size_t)ns));
            char vname[96];
            snprintf(vname, sizeof vname, "%s%s", var ? " " : "", dyn ? "dyn" : var ? vknobs[var] : "");
            knobs_set(vknobs[var]);
            rc = dyn ? kn_cuda_msa_index_scores_dyn(sh, &qs.qb, fp8 ? &w->c8 : &w->c, qi_d, s_d, sstride,
                                                    cnt_d, path, 0, &err)
                     : kn_cuda_msa_index_scores(sh, &qs.qb, fp8 ? &w->c8 : &w->c, qi_d, s_d, sstride, path, 0,
                                                &err);
            knobs_unset(vknobs[var]);
            CHECK_MSG(rc == MM_OK, "index_scores %s%s: %s", path_name(path), vname, err.msg);
            ct_download(got_s, s_d, sizeof(float) * (size_t)ns);
            const float *ref = fp8 ? ref_s8 : ref_s;
            int64_t bad = 0;
            double worst = 0;
            for (int32_t g = 0; g < NH; g++)
                for (int32_t i = 0; i < n; i++) {
                    int32_t nb = (int32_t)(qs.pos[i] / sh->block) + 1;
                    for (int32_t b = 0; b < nb; b++) {
                        int64_t e = ((int64_t)g * n + i) * sstride + b;
                        double d = fabs((double)got_s[e] - ref[e]);
                        int ok = (got_s[e] == ref[e]) || d <= 2e-4 * (1.0 + fabs(ref[e]));
                        if (!ok && bad < 3)
                            fprintf(stderr, "  scores %s%s g=%d i=%d b=%d: %g vs %g\n", path_name(path),
                                    fp8 ? " fp8" : "", g, i, b, got_s[e], ref[e]);
                        bad += !ok;
                        if (ok && isfinite(ref[e]) && d > worst) worst = d;
                    }
                }
            CHECK_MSG(bad == 0, "[%s] index scores %s%s%s: %lld wrong", label, path_name(path), vname,
                      fp8 ? " fp8" : "", (long long)bad);
            printf("  index scores %-8s%s %s: max |diff| %.3g\n", path_name(path), vname,
                   fp8 ? "fp8 " : "bf16", worst);
        }
    cudaFree(cnt_d);

    /* top-k on the reference scores: exactly the CPU's rows */
    int32_t *ref_sel = ct_hmalloc(sizeof(int32_t) * (size_t)nsel),
            *got_sel = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    int32_t *ref_sel8 = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    cpu_topk(w, &qs, ref_s, sstride, ref_sel, sel_stride);
    cpu_topk(w, &qs, ref_s8, sstride, ref_sel8, sel_stride);
    {
        float *rs_d = ct_upload(ref_s, sizeof(float) * (size_t)ns);
        int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)nsel);
        rc = kn_cuda_msa_topk(sh, &qs.qb, rs_d, sstride, sel_d, sel_stride, 0, &err);
        CHECK_MSG(rc == MM_OK, "topk: %s", err.msg);
        ct_download(got_sel, sel_d, sizeof(int32_t) * (size_t)nsel);
        int64_t bad = 0;
        for (int64_t e = 0; e < nsel; e++) bad += got_sel[e] != ref_sel[e];
        CHECK_MSG(bad == 0, "[%s] topk: %lld of %lld entries differ from kn_msa_topk_local", label,
                  (long long)bad, (long long)nsel);
        cudaFree(rs_d), cudaFree(sel_d);
    }
    /* FP8 against bf16 selections on this data (informational) */
    {
        int64_t rows = 0, differ = 0;
        for (int64_t r = 0; r < (int64_t)NH * n; r++) {
            int d = 0;
            for (int32_t j = 0; j < sel_stride; j++) {
                int found = 0;
                for (int32_t m = 0; m < sel_stride; m++)
                    found |= ref_sel8[r * sel_stride + m] == ref_sel[r * sel_stride + j];
                d |= !found;
            }
            rows++, differ += d;
        }
        printf("  fp8 vs bf16 index cache: %lld of %lld selection rows differ (random keys)\n",
               (long long)differ, (long long)rows);
    }

    /* selection: every path against the CPU pipeline, near ties excepted */
    {
        size_t wsb = kn_cuda_msa_select_ws(sh, &qs.qb, KN_PATH_GENERIC);
        void *ws = ct_dmalloc(wsb);
        int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)nsel);
        /* pv: the path, and for PREFILL every fused kernel (KN_CUDA_SELECT_WGMMA=0: mma.sync, 1 and 2: the
         * wgmma variants) */
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int32_t pv = 3 * KN_PATH_GENERIC; pv <= 3 * KN_PATH_PREFILL + 2; pv++) {
                const int32_t path = pv / 3, wgmma = pv % 3;
                if (wgmma && path != KN_PATH_PREFILL) continue;
                if (path == KN_PATH_DECODE && (!fast_idx_ok || (fp8 && DI % 64) || (!fp8 && w->f32)))
                    continue;
                if (path == KN_PATH_PREFILL && (!prefill_sel_ok || w->f32)) continue;
                CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)nsel));
                static const char *const knob[] = {"0", "1", "2"};
                if (path == KN_PATH_PREFILL) knob_setenv("KN_CUDA_SELECT_WGMMA", knob[wgmma], 1);
                rc = kn_cuda_msa_select(sh, &qs.qb, fp8 ? &w->c8 : &w->c, qi_d, sel_d, sel_stride, ws, wsb,
                                        path, 0, &err);
                knob_unsetenv("KN_CUDA_SELECT_WGMMA");
                if (rc == MM_UNSUPPORTED && fp8 && path == KN_PATH_PREFILL) { /* FP8: the wgmma kernel only */
                    printf("  select prefill fp8: not on this device (%s)\n", err.msg);
                    continue;
                }
                CHECK_MSG(rc == MM_OK, "select %s: %s", path_name(path), err.msg);
                ct_download(got_sel, sel_d, sizeof(int32_t) * (size_t)nsel);
                char what[96];
                snprintf(what, sizeof(what), "[%s] select %s%s%s", label, path_name(path),
                         wgmma == 1   ? " wgmma1"
                         : wgmma == 2 ? " wgmma2"
                                      : "",
                         fp8 ? " fp8" : "");
                /* the fused prefill kernels round index queries to bf16: a wider near-tie band */
                float tol = path == KN_PATH_PREFILL ? 0.3f : 2e-3f;
                int64_t differ = compare_sel(w, &qs, got_sel, fp8 ? ref_sel8 : ref_sel, sel_stride,
                                             fp8 ? ref_s8 : ref_s, sstride, tol, what);
                printf("  select %-8s%s %s: %lld rows differ by near-ties\n", path_name(path),
                       wgmma == 1   ? " wgmma1"
                       : wgmma == 2 ? " wgmma2"
                                    : "",
                       fp8 ? "fp8 " : "bf16", (long long)differ);
            }
        /* the wgmma kernels' bf16 keys by TMA (the default) or by cp.async: the same selections, bit for bit
         * (where the wgmma kernel runs: bit 1 of the hook) */
        if (prefill_sel_ok && !w->f32 && (kn_cuda_prefill_tma(sh, &w->c) & 2))
            for (int variant = 1; variant <= 2; variant++) {
                int32_t *by[2];
                for (int tma = 0; tma < 2; tma++) {
                    static const char *const knob[] = {"0", "1", "2"};
                    knob_setenv("KN_CUDA_SELECT_WGMMA", knob[variant], 1);
                    if (!tma) knob_setenv("KN_CUDA_SELECT_TMA", "0", 1);
                    CHECK_MSG(((kn_cuda_prefill_tma(sh, &w->c) >> 1) & 1) == tma,
                              "[%s] select prefill: the TMA producer %s", label, tma ? "is off" : "stays on");
                    CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)nsel));
                    rc = kn_cuda_msa_select(sh, &qs.qb, &w->c, qi_d, sel_d, sel_stride, ws, wsb,
                                            KN_PATH_PREFILL, 0, &err);
                    knob_unsetenv("KN_CUDA_SELECT_WGMMA");
                    knob_unsetenv("KN_CUDA_SELECT_TMA");
                    CHECK_MSG(rc == MM_OK, "[%s] select prefill (TMA %d): %s", label, tma, err.msg);
                    by[tma] = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
                    ct_download(by[tma], sel_d, sizeof(int32_t) * (size_t)nsel);
                }
                CHECK_MSG(!memcmp(by[0], by[1], sizeof(int32_t) * (size_t)nsel),
                          "[%s] select prefill wgmma%d: the TMA and cp.async producers select differently",
                          label, variant);
                printf("  select prefill wgmma%d bf16: TMA and cp.async keys give the same selections\n",
                       variant);
                free(by[0]), free(by[1]);
            }
        cudaFree(ws), cudaFree(sel_d);
    }

    /* attention on the reference selections (sparse) and over everything (dense) */
    float *q = ct_hmalloc(sizeof(float) * (size_t)nout);
    uint16_t *qb16 = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
    ct_fill_normal(q, nout, 1.0f);
    ct_to_bf16(q, qb16, nout);
    if (!w->f32) ct_from_bf16(qb16, q, nout);
    void *q_d = w->f32 ? ct_upload(q, sizeof(float) * (size_t)nout)
                       : ct_upload(qb16, sizeof(uint16_t) * (size_t)nout);
    int32_t *rsel_d = ct_upload(ref_sel, sizeof(int32_t) * (size_t)nsel);
    float *ref_o = ct_hmalloc(sizeof(float) * (size_t)nout),
          *got_o = ct_hmalloc(sizeof(float) * (size_t)nout);
    uint16_t *got_b = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
    void *o_d = ct_dmalloc(sizeof(float) * (size_t)nout);
    for (int dense = 0; dense < 2; dense++) {
        cpu_attention(w, &qs, q, dense ? NULL : ref_sel, sel_stride, ref_o);
        for (int32_t path = KN_PATH_GENERIC; path <= KN_PATH_PREFILL; path++) {
            if (path != KN_PATH_GENERIC && (!fast_attn_ok || w->f32)) continue;
            size_t wsb = dense ? kn_cuda_dense_attention_ws(sh, &qs.qb, path)
                               : kn_cuda_msa_attention_ws(sh, &qs.qb, sel_stride, path);
            void *ws = ct_dmalloc(wsb);
            CT_CU(cudaMemset(o_d, 0xff, sizeof(float) * (size_t)nout));
            rc = dense ? kn_cuda_dense_attention(sh, &qs.qb, &w->c, q_d, o_d, ws, wsb, path, 0, &err)
                       : kn_cuda_msa_attention(sh, &qs.qb, &w->c, q_d, rsel_d, sel_stride, o_d, ws, wsb, path,
                                               0, &err);
            CHECK_MSG(rc == MM_OK, "%s attention %s: %s", dense ? "dense" : "sparse", path_name(path),
                      err.msg);
            if (w->f32) {
                ct_download(got_o, o_d, sizeof(float) * (size_t)nout);
            } else {
                ct_download(got_b, o_d, sizeof(uint16_t) * (size_t)nout);
                ct_from_bf16(got_b, got_o, nout);
            }
            double mx = 0, rel = ct_rel_err(got_o, ref_o, nout, &mx);
            /* bf16 probabilities and outputs: ~3e-3 expected; the f32 mode: fp32 rounding only */
            const double tol_rel = w->f32 ? 2e-5 : 1e-2, tol_abs = w->f32 ? 2e-4 : 0.08;
            CHECK_MSG(rel <= tol_rel && mx <= tol_abs, "[%s] %s attention %s: rel err %.3g, max abs %.3g",
                      label, dense ? "dense" : "sparse", path_name(path), rel, mx);
            printf("  %s attention %-8s: rel err %.3g, max abs %.3g\n", dense ? "dense " : "sparse",
                   path_name(path), rel, mx);
            if (rel > tol_rel && nout > 0) {
                for (int64_t e = 0, shown = 0; e < nout && shown < 4; e++)
                    if (!(fabs(got_o[e] - ref_o[e]) <= tol_abs)) {
                        fprintf(stderr, "    i=%lld h=%lld d=%lld: %g vs %g\n", (long long)(e / (H * D)),
                                (long long)(e / D % H), (long long)(e % D), got_o[e], ref_o[e]);
                        shown++;
                    }
            }
            cudaFree(ws);
        }
    }
    /* selection and attention in one call (the fused decode route where it applies; otherwise select then
     * attention): its selections against the CPU's (near ties excepted), its output against the CPU's
     * attention over the selections it made. Also with each of the fused route's options (KN_CUDA_* knobs:
     * the split count of any number of waves, no programmatic launch, dynamic pages, the even-split, per-page
     * and stream index scans, the previous default (persistent) scan, the ring scan with per-lane copies, the
     * late trigger, top-k's previous gather with a branch per value, at most 8 splits (portable clusters,
     * three stages) instead of up to 16, 16 splits packed instead of one CTA per SM, the pulled merge (peers
     * read each other's partials between two cluster barriers: the previous default) and its serial form, the
     * split selection (each CTA of a cluster selects from its slice of the row, lists exchanged, merged by
     * rank or by one warp: KN_CUDA_TOPK_SPLIT=1, 2), the previous tail (4 warps per CTA, top-k's store per
     * value) and the default with its 8 warps (KN_CUDA_TAIL_WARPS=4) or its gather by candidate mask
     * (KN_CUDA_TOPK_BF=1) undone, 3 and 1 splits). */
    static const char *const knob_sets[] = {
        "",
        "KN_CUDA_FUSED_WAVES=1", /* the split count before the one-wave rule: changes bigger batches */
        "KN_CUDA_PDL=0",
        "KN_CUDA_STEAL=1",
        "KN_CUDA_IDX=1",
        "KN_CUDA_IDX=2",
        "KN_CUDA_IDX=3",
        "KN_CUDA_IDX=0",
        "KN_CUDA_IDX=4 KN_CUDA_IDX_LINES=0",
        "KN_CUDA_IDX_TRIGGER=1",
        "KN_CUDA_TOPK_BF=0",
        "KN_CUDA_FUSED_SPLIT=8",
        "KN_CUDA_FUSED_PACK=1",
        "KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_MERGE_PUSH=0 KN_CUDA_MERGE_SERIAL=1",
        "KN_CUDA_FUSED_SPLIT=8 KN_CUDA_MERGE_PUSH=0 KN_CUDA_MERGE_SERIAL=1",
        "KN_CUDA_FUSED_SPLIT=8 KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_TOPK_SPLIT=1",
        "KN_CUDA_TOPK_SPLIT=2",
        "KN_CUDA_TOPK_SPLIT=1 KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_TOPK_SPLIT=2 KN_CUDA_FUSED_SPLIT=8",
        "KN_CUDA_IDX_EVICT=0",
        "KN_CUDA_IDX_SPLIT=2 KN_CUDA_IDX_PDL=0",
        /* the previous tail (4 warps, top-k's store-per-value gather), and each of the default's two changes
         * (8 warps, gather by candidate mask) undone alone */
        "KN_CUDA_TAIL_WARPS=4 KN_CUDA_TOPK_BF=1",
        "KN_CUDA_TAIL_WARPS=4",
        "KN_CUDA_TOPK_BF=1",
        /* 3 splits (a cluster of 3) and 1 (no cluster, no merge) */
        "KN_CUDA_FUSED_SPLIT=3",
        "KN_CUDA_FUSED_SPLIT=1",
    };
    for (int fp8 = 0; fp8 < 2; fp8++)
        for (size_t knob = 0; knob < sizeof knob_sets / sizeof knob_sets[0]; knob++) {
            if (fp8 && (DI % 64 || w->f32)) continue;
            if (knob && (!fast_attn_ok || w->f32)) continue;
            /* the split and merge options change something only for decode batches of a few rows (wide
             * splits); bigger batches and prefill keep the first ten (their CPU references are slow) */
            if (knob >= 11 && (qs.qb.n > 16 || qs.qb.max_q_per_seq > 4)) continue;
            char env[128], *save = NULL;
            snprintf(env, sizeof env, "%s", knob_sets[knob]);
            for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                char *eq = strchr(t, '=');
                *eq = 0;
                knob_setenv(t, eq + 1, 1);
            }
            size_t wsb = kn_cuda_msa_select_attend_ws(sh, &qs.qb, sel_stride, KN_PATH_AUTO);
            void *ws = ct_dmalloc(wsb);
            int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)nsel);
            CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)nsel));
            CT_CU(cudaMemset(ws, 0x6b, wsb)); /* stale counters and scores must not matter */
            CT_CU(cudaMemset(o_d, 0xff, sizeof(float) * (size_t)nout));
            rc = kn_cuda_msa_select_attend(sh, &qs.qb, fp8 ? &w->c8 : &w->c, qi_d, q_d, sel_d, sel_stride,
                                           o_d, ws, wsb, KN_PATH_AUTO, 0, &err);
            snprintf(env, sizeof env, "%s", knob_sets[knob]);
            for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                *strchr(t, '=') = 0;
                knob_unsetenv(t);
            }
            CHECK_MSG(rc == MM_OK, "select_attend %s: %s", knob_sets[knob], err.msg);
            CT_CU(cudaDeviceSynchronize());
            ct_download(got_sel, sel_d, sizeof(int32_t) * (size_t)nsel);
            char what[160];
            snprintf(what, sizeof(what), "[%s] select_attend%s%s%s", label, fp8 ? " fp8" : "",
                     knob ? " " : "", knob_sets[knob]);
            /* more than 4 queries of a sequence: the fused prefill selection, which rounds index queries (and
             * FP8 keys times their scales) to bf16: a wider near-tie band */
            float tol = qs.qb.max_q_per_seq > 4 && !w->f32 ? 0.3f : 2e-3f;
            int64_t differ = compare_sel(w, &qs, got_sel, fp8 ? ref_sel8 : ref_sel, sel_stride,
                                         fp8 ? ref_s8 : ref_s, sstride, tol, what);
            cpu_attention(w, &qs, q, got_sel, sel_stride, ref_o);
            if (w->f32) {
                ct_download(got_o, o_d, sizeof(float) * (size_t)nout);
            } else {
                ct_download(got_b, o_d, sizeof(uint16_t) * (size_t)nout);
                ct_from_bf16(got_b, got_o, nout);
            }
            double mx = 0, rel = ct_rel_err(got_o, ref_o, nout, &mx);
            const double tol_rel = w->f32 ? 2e-5 : 1e-2, tol_abs = w->f32 ? 2e-4 : 0.08;
            CHECK_MSG(rel <= tol_rel && mx <= tol_abs, "%s: rel err %.3g, max abs %.3g", what, rel, mx);
            printf("  select+attend%s %-44s: %lld rows differ by near-ties, rel err %.3g, max abs %.3g\n",
                   fp8 ? " fp8" : "", knob_sets[knob], (long long)differ, rel, mx);
            cudaFree(ws), cudaFree(sel_d);
        }
    free(qi), free(ref_s), free(ref_s8), free(got_s), free(ref_sel), free(got_sel), free(ref_sel8);
    free(q), free(qb16), free(ref_o), free(got_o), free(got_b);
    cudaFree(qi_d), cudaFree(s_d), cudaFree(q_d), cudaFree(rsel_d), cudaFree(o_d);
    qset_free(&qs);
}

/* The index append's write delay (kn_msa_api.cu test hook, not in kn_cuda.h). */
void kn_cuda_test_append_delay_us(int32_t us);

/* A decode index scan right after the append of the step's index keys, nothing in between (the order of a
 * decode step), against the CPU twin. Each sequence's new key is made the largest of its page for every head
 * (twice the sum of the query's heads), so a scan that read the own page before the new row was visible gets
 * that page's score wrong. kn_cuda_test_append_delay_us makes the append hold its writes back after it has
 * triggered its dependents: the programmatic launch (the default, with and without split pages), the plain
 * one (KN_CUDA_IDX_PDL=0) and the persistent scan must still see the new rows, and the test-only wrong order
 * (KN_CUDA_IDX_PDL=2: the own page copied before the wait) must be caught, which shows that the check can
 * fail. On the legacy stream and a created one. */
static void test_scan_after_append(void)
{
    struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
    const int32_t NH = sh.n_idx_heads, DI = sh.idx_dim, B = sh.block;
    /* next positions at page offsets 1, 1, 10, 60, 57: inside the first ring steps of the own page */
    static const int64_t len[] = {129, 2049, 1290, 700, 3001};
    enum { NS = 5, NRUN = 7 };
    static const char *const runs[NRUN] = {
        "",
        "KN_CUDA_IDX_PDL=0",
        "",
        "KN_CUDA_IDX_SPLIT=2",
        "KN_CUDA_IDX_PDL=0",
        "KN_CUDA_IDX=0",
        "KN_CUDA_IDX_PDL=2", /* wrong on purpose: must be caught */
    };
    static const int delay_us[NRUN] = {0, 0, 200, 200, 200, 200, 200};
    cudaStream_t made;
    CT_CU(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
    for (int st = 0; st < 2; st++)
        for (int fp8 = 0; fp8 < 2; fp8++)
            for (int r = 0; r < NRUN; r++) {
                cudaStream_t stream = st ? made : 0;
                struct world w;
                world_make(&w, &sh, NS, len, 0);
                int32_t qseq[NS];
                int64_t pos[NS];
                for (int32_t i = 0; i < NS; i++) qseq[i] = i, pos[i] = len[i];
                struct qset qs;
                qset_make(&qs, &w, NS, qseq, pos);
                const int32_t sstride = qs.qb.max_blocks;
                const int64_t ns = (int64_t)NH * NS * sstride;
                float *qi = ct_hmalloc(sizeof(float) * (size_t)NS * NH * DI);
                float *ki = ct_hmalloc(sizeof(float) * (size_t)NS * DI);
                ct_fill_normal(qi, (int64_t)NS * NH * DI, 1.0f);
                for (int32_t i = 0; i < NS; i++)
                    for (int32_t d = 0; d < DI; d++) {
                        float x = 0;
                        for (int32_t h = 0; h < NH; h++) x += 2.0f * qi[((int64_t)i * NH + h) * DI + d];
                        ki[(int64_t)i * DI + d] = x;
                    }
                /* the host copy of the index cache gets the new rows as the GPU stores them */
                for (int32_t i = 0; i < NS; i++) {
                    const int64_t row =
                        (int64_t)w.bt_h[(int64_t)i * w.bt_stride + pos[i] / B] * B + pos[i] % B;
                    float amax = 0;
                    for (int32_t d = 0; d < DI; d++) amax = fmaxf(amax, fabsf(ki[(int64_t)i * DI + d]));
                    const float s8 = amax > 0 ? amax / 448.0f : 1.0f;
                    for (int32_t d = 0; d < DI; d++) {
                        const float x = ki[(int64_t)i * DI + d];
                        w.idx_f[row * DI + d] = mm_bf16_to_f32(mm_f32_to_bf16(x));
                        w.idx8_f[row * DI + d] = mm_f8e4m3_to_f32(mm_f32_to_f8e4m3(x / s8)) * s8;
                    }
                }
                float *ref = ct_hmalloc(sizeof(float) * (size_t)ns),
                      *got = ct_hmalloc(sizeof(float) * (size_t)ns);
                cpu_scores(&w, &qs, qi, fp8 ? w.idx8_f : w.idx_f, ref, sstride);
                float *qi_d = ct_upload(qi, sizeof(float) * (size_t)NS * NH * DI);
                float *ki_d = ct_upload(ki, sizeof(float) * (size_t)NS * DI);
                float *s_d = ct_dmalloc(sizeof(float) * (size_t)ns);
                CT_CU(cudaMemset(s_d, 0xff, sizeof(float) * (size_t)ns));
                CT_CU(cudaDeviceSynchronize());
                struct mm_err err = {0};
                knobs_set(runs[r]);
                kn_cuda_test_append_delay_us(delay_us[r]);
                int32_t rc = kn_cuda_cache_append(&sh, &qs.qb, fp8 ? &w.c8 : &w.c, NULL, NULL, 0, ki_d, DI,
                                                  stream, &err);
                if (rc == MM_OK)
                    rc = kn_cuda_msa_index_scores(&sh, &qs.qb, fp8 ? &w.c8 : &w.c, qi_d, s_d, sstride,
                                                  KN_PATH_DECODE, stream, &err);
                knobs_unset(runs[r]);
                kn_cuda_test_append_delay_us(0);
                CHECK_MSG(rc == MM_OK, "append + scan %s: %s", runs[r], err.msg);
                CT_CU(cudaStreamSynchronize(stream));
                ct_download(got, s_d, sizeof(float) * (size_t)ns);
                int64_t bad = 0, own_bad = 0;
                for (int32_t g = 0; g < NH; g++)
                    for (int32_t i = 0; i < NS; i++)
                        for (int32_t b = 0; b <= pos[i] / B; b++) {
                            const int64_t e = ((int64_t)g * NS + i) * sstride + b;
                            const double d = fabs((double)got[e] - ref[e]);
                            const int ok = got[e] == ref[e] || d <= 2e-4 * (1.0 + fabs(ref[e]));
                            bad += !ok;
                            own_bad += !ok && b == pos[i] / B;
                        }
                char what[160];
                snprintf(what, sizeof what, "append + scan%s%s%s, %s stream, %s", runs[r][0] ? " " : "",
                         runs[r], delay_us[r] ? ", append delayed 200 us" : "", st ? "created" : "legacy",
                         fp8 ? "fp8" : "bf16");
                if (r == NRUN - 1) {
                    CHECK_MSG(own_bad > 0 && own_bad == bad,
                              "%s: the own page read before the wait went unnoticed (%lld wrong, %lld own)",
                              what, (long long)bad, (long long)own_bad);
                } else {
                    CHECK_MSG(bad == 0, "%s: %lld scores wrong (%lld of own pages)", what, (long long)bad,
                              (long long)own_bad);
                }
                printf("  %s: %lld wrong scores (%lld of own pages)%s\n", what, (long long)bad,
                       (long long)own_bad, r == NRUN - 1 ? ", expected > 0" : "");
                free(qi), free(ki), free(ref), free(got);
                cudaFree(qi_d), cudaFree(ki_d), cudaFree(s_d);
                qset_free(&qs);
                world_free(&w);
            }
    CT_CU(cudaStreamDestroy(made));
}

/* decode: one query per sequence at its last position */
static void run_decode(const struct world *w, const char *label, int fast_idx, int fast_attn, int pf_sel)
{
    int32_t *qseq = ct_hmalloc(sizeof(int32_t) * (size_t)w->n_seqs);
    int64_t *pos = ct_hmalloc(sizeof(int64_t) * (size_t)w->n_seqs);
    for (int32_t s = 0; s < w->n_seqs; s++) qseq[s] = s, pos[s] = w->len[s] - 1;
    run_queries(w, w->n_seqs, qseq, pos, label, fast_idx, fast_attn, pf_sel);
    free(qseq), free(pos);
}

/* chunked prefill: for each sequence, its last `chunk[s]` positions */
static void run_prefill(const struct world *w, const int32_t *chunk, const char *label, int fast_idx,
                        int fast_attn, int pf_sel)
{
    int32_t n = 0;
    for (int32_t s = 0; s < w->n_seqs; s++) n += chunk[s];
    int32_t *qseq = ct_hmalloc(sizeof(int32_t) * (size_t)n);
    int64_t *pos = ct_hmalloc(sizeof(int64_t) * (size_t)n);
    int32_t t = 0;
    for (int32_t s = 0; s < w->n_seqs; s++)
        for (int32_t k = 0; k < chunk[s]; k++, t++) qseq[t] = s, pos[t] = w->len[s] - chunk[s] + k;
    run_queries(w, n, qseq, pos, label, fast_idx, fast_attn, pf_sel);
    free(qseq), free(pos);
}

/* Top-k alone on long rows (up to 1M context = 8192 blocks, and one row past it: more scores than a CTA holds
 * in registers, so they are read in two rounds), with ties (scores rounded to a coarse grid), -inf and NaN
 * entries, and rows of all-equal scores (the general path behind the fast one). */
static void test_topk_long(void)
{
    const int32_t NH = 4, B = 128, n = 7, topk = 16, stride = 8256 + 7, sel_stride = 19;
    static const int64_t pos[7] = {1048575, 524287 - 3, 300000, 2047, 100, 1048575, 8256 * 128 - 1};
    float *sc = ct_hmalloc(sizeof(float) * (size_t)NH * n * stride);
    for (int32_t g = 0; g < NH; g++)
        for (int32_t i = 0; i < n; i++)
            for (int32_t b = 0; b < stride; b++) {
                float v = roundf(ct_normal() * 8.0f) / 8.0f; /* many ties */
                uint64_t r = ct_next() % 1000;
                if (r == 0) v = -INFINITY;
                if (r == 1) v = NAN;
                if (i == 5) v = 0.5f; /* all equal */
                sc[((int64_t)g * n + i) * stride + b] = v;
            }
    int32_t *ref = ct_hmalloc(sizeof(int32_t) * (size_t)NH * n * sel_stride);
    int32_t *got = ct_hmalloc(sizeof(int32_t) * (size_t)NH * n * sel_stride);
    for (int32_t i = 0; i < n; i++) {
        int32_t nb = (int32_t)(pos[i] / B) + 1;
        float *row = ct_hmalloc(sizeof(float) * (size_t)NH * nb);
        int32_t *st = ct_hmalloc(sizeof(int32_t) * (size_t)NH * sel_stride);
        for (int32_t g = 0; g < NH; g++)
            memcpy(row + (int64_t)g * nb, sc + ((int64_t)g * n + i) * stride, sizeof(float) * (size_t)nb);
        kn_msa_topk_local(row, NH, 1, &pos[i], nb, B, topk, 1, st, sel_stride);
        for (int32_t g = 0; g < NH; g++)
            memcpy(ref + ((int64_t)g * n + i) * sel_stride, st + (int64_t)g * sel_stride,
                   sizeof(int32_t) * (size_t)sel_stride);
        free(row), free(st);
    }
    struct kn_cuda_msa_shape sh = {64, 4, 128, NH, 128, B, topk, 1, 0.088f};
    struct kn_cuda_qbatch qb;
    memset(&qb, 0, sizeof(qb));
    qb.n = n;
    qb.n_seqs = n;
    qb.max_blocks = 8256;
    int64_t *pos_d = ct_upload(pos, sizeof(pos));
    qb.pos = pos_d;
    float *sc_d = ct_upload(sc, sizeof(float) * (size_t)NH * n * stride);
    int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)NH * n * sel_stride);
    struct mm_err err = {0};
    for (int bf = 0; bf < 2; bf++) { /* KN_CUDA_TOPK_BF: the branch-free candidate gather */
        knob_setenv("KN_CUDA_TOPK_BF", bf ? "1" : "0", 1);
        CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)NH * n * sel_stride));
        int32_t rc = kn_cuda_msa_topk(&sh, &qb, sc_d, stride, sel_d, sel_stride, 0, &err);
        knob_unsetenv("KN_CUDA_TOPK_BF");
        CHECK_MSG(rc == MM_OK, "topk long: %s", err.msg);
        ct_download(got, sel_d, sizeof(int32_t) * (size_t)NH * n * sel_stride);
        int64_t bad = 0;
        for (int64_t e = 0; e < (int64_t)NH * n * sel_stride; e++) {
            if (got[e] != ref[e] && bad < 5)
                fprintf(stderr, "  topk long%s: row %lld slot %lld: %d vs %d\n", bf ? " bf" : "",
                        (long long)(e / sel_stride), (long long)(e % sel_stride), got[e], ref[e]);
            bad += got[e] != ref[e];
        }
        CHECK_MSG(bad == 0, "topk long rows%s: %lld entries differ from kn_msa_topk_local", bf ? " bf" : "",
                  (long long)bad);
        printf("[topk long rows%s] %d rows up to 8256 blocks, ties, -inf/NaN, all-equal: %lld differ\n",
               bf ? " bf" : "", NH * n, (long long)bad);
    }
    free(sc), free(ref), free(got);
    cudaFree(pos_d), cudaFree(sc_d), cudaFree(sel_d);
}

/* The fused decode tail on given scores (kn_msa_decode.cu test hook, not in kn_cuda.h). */
int32_t kn_cuda_decode_fused_scores(const struct kn_cuda_msa_shape *sh, const struct kn_cuda_qbatch *qb,
                                    const struct kn_cuda_cache *c, const void *q, const float *scores,
                                    int32_t score_stride, int32_t *sel, int32_t sel_stride, void *out,
                                    struct mm_err *err);

/* The fused decode tail (top-k + pages + merge in one cluster launch) on hand-made index scores, with each of
 * its selection and merge variants: rows up to 1M context and past it (8256 blocks: longer than 16 slices of
 * 512, not a multiple), one token, fewer blocks than k, ties (scores on a coarse grid), -inf and NaN, a row
 * of all-equal scores, a row with fewer finite scores than k, entries past the row that must never be read
 * (huge values), n_local 1 and 2; batches of 1, 2, 7 and 12 queries, so 16, 10 and 6 splits per row. The
 * selections must equal kn_msa_topk_local's exactly; the output the CPU attention over them. K/V pages are
 * shared by many blocks (the block table wraps around a few pages) to keep the cache small. */
static void test_fused_decode_scores(void)
{
    const int32_t NP = 48, B = 128, G = 4, D = 128, max_nb = 8256, stride = max_nb + 3;
    const int64_t kv_elems = (int64_t)NP * B * G * D;
    float *kf = ct_hmalloc(sizeof(float) * (size_t)kv_elems),
          *vf = ct_hmalloc(sizeof(float) * (size_t)kv_elems);
    uint16_t *kb = ct_hmalloc(sizeof(uint16_t) * (size_t)kv_elems),
             *vb = ct_hmalloc(sizeof(uint16_t) * (size_t)kv_elems);
    ct_fill_normal(kf, kv_elems, 1.0f);
    ct_fill_normal(vf, kv_elems, 1.0f);
    ct_to_bf16(kf, kb, kv_elems), ct_to_bf16(vf, vb, kv_elems);
    ct_from_bf16(kb, kf, kv_elems), ct_from_bf16(vb, vf, kv_elems);
    struct kn_cuda_cache c;
    memset(&c, 0, sizeof c);
    c.k = ct_upload(kb, sizeof(uint16_t) * (size_t)kv_elems);
    c.v = ct_upload(vb, sizeof(uint16_t) * (size_t)kv_elems);
    c.n_pages = NP;
    static const int64_t pos1[] = {1048575}, pos2[] = {8256 * 128 - 1, 5000},
                         pos7[] = {0, 127, 1000, 40 * 128 + 5, 300000, 1048575, 2047},
                         pos12[] = {1048575, 3,   900,     4095,   4096,     77777,
                                    20000,   128, 1048000, 600000, 16 * 128, 9999};
    static const int64_t *const sets[] = {pos1, pos2, pos7, pos12};
    static const int32_t set_n[] = {1, 2, 7, 12};
    static const char *const knob_sets[] = {
        "",
        "KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_TOPK_SPLIT=1",
        "KN_CUDA_TOPK_SPLIT=2",
        "KN_CUDA_TOPK_SPLIT=1 KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_TOPK_SPLIT=2 KN_CUDA_MERGE_PUSH=0",
        "KN_CUDA_TOPK_SPLIT=1 KN_CUDA_TOPK_BF=0",
        "KN_CUDA_TOPK_SPLIT=1 KN_CUDA_FUSED_SPLIT=8",
        "KN_CUDA_TOPK_SPLIT=2 KN_CUDA_FUSED_SPLIT=8",
        "KN_CUDA_FUSED_PACK=1",
        "KN_CUDA_TOPK_SPLIT=1 KN_CUDA_MERGE_PUSH=0 KN_CUDA_MERGE_SERIAL=1",
        /* the default is 8 warps per CTA in the one-stage config of > 8 splits (here the 1- and 2-query
         * batches: 16 splits where the device holds one cluster per row; the larger batches take the 8-split
         * 4-warp kernel) and top-k's gather by candidate mask; the previous tail (4 warps, store per value),
         * each change undone alone, the branchy gather; the pulled merge and the split selection above take
         * 4 warps */
        "KN_CUDA_TAIL_WARPS=4 KN_CUDA_TOPK_BF=1",
        "KN_CUDA_TAIL_WARPS=4",
        "KN_CUDA_TOPK_BF=1",
        "KN_CUDA_TOPK_BF=0",
        "KN_CUDA_TAIL_WARPS=4 KN_CUDA_TOPK_BF=0",
        "KN_CUDA_FUSED_SPLIT=8",
        "KN_CUDA_FUSED_SPLIT=8 KN_CUDA_TOPK_BF=1",
        /* 12 splits: 8 warps where CTAs own 2 heads (the two 128-thread halves of the owner's merge) */
        "KN_CUDA_FUSED_SPLIT=12",
    };
    /* shapes: M3 (top-16, n_local 1), top-12 with n_local 2, and 8 heads per group (fewer heads than the 16
     * splits of a row: some CTAs merge no head) */
    for (int shape = 0; shape < 3; shape++)
        for (int set = 0; set < 4; set++) {
            const int32_t H = shape == 2 ? 32 : 64;
            struct kn_cuda_msa_shape sh = {
                H, G, D, G, 128, B, shape == 1 ? 12 : 16, shape == 1 ? 2 : 1, 0.08838834764831845f};
            const int32_t n = set_n[set], sel_stride = sh.topk + 3;
            const int64_t *pos = sets[set];
            /* one sequence per query; block b of sequence s on page (7 b + s) mod NP */
            int32_t *bt = ct_hmalloc(sizeof(int32_t) * (size_t)n * max_nb);
            int32_t *qseq = ct_hmalloc(sizeof(int32_t) * (size_t)n);
            int32_t max_blocks = 0;
            for (int32_t s = 0; s < n; s++) {
                qseq[s] = s;
                for (int32_t b = 0; b < max_nb; b++) bt[(int64_t)s * max_nb + b] = (7 * b + s) % NP;
                if ((int32_t)(pos[s] / B) + 1 > max_blocks) max_blocks = (int32_t)(pos[s] / B) + 1;
            }
            /* scores: ties on a 1/8 grid, some -inf and NaN; (g 2, query 0) all equal; (g 3, last query) only
             * 5 finite scores; past each row's end huge values that a read out of the row would select */
            float *sc = ct_hmalloc(sizeof(float) * (size_t)G * n * stride);
            for (int32_t g = 0; g < G; g++)
                for (int32_t i = 0; i < n; i++) {
                    const int32_t nb = (int32_t)(pos[i] / B) + 1;
                    float *row = sc + ((int64_t)g * n + i) * stride;
                    for (int32_t b = 0; b < stride; b++) {
                        float v = roundf(ct_normal() * 8.0f) / 8.0f;
                        const uint64_t rr = ct_next() % 1000;
                        if (rr == 0) v = -INFINITY;
                        if (rr == 1) v = NAN;
                        if (g == 2 && i == 0) v = 0.5f;
                        if (g == 3 && i == n - 1) v = b % 97 == 3 && b < 5 * 97 ? v : -INFINITY;
                        row[b] = b < nb ? v : 1e30f;
                    }
                }
            int32_t *ref = ct_hmalloc(sizeof(int32_t) * (size_t)G * n * sel_stride);
            for (int32_t i = 0; i < n; i++) {
                const int32_t nb = (int32_t)(pos[i] / B) + 1;
                float *tmp = ct_hmalloc(sizeof(float) * (size_t)G * nb);
                int32_t *st = ct_hmalloc(sizeof(int32_t) * (size_t)G * sel_stride);
                for (int32_t g = 0; g < G; g++)
                    memcpy(tmp + (int64_t)g * nb, sc + ((int64_t)g * n + i) * stride,
                           sizeof(float) * (size_t)nb);
                kn_msa_topk_local(tmp, G, 1, &pos[i], nb, B, sh.topk, sh.n_local, st, sel_stride);
                for (int32_t g = 0; g < G; g++)
                    memcpy(ref + ((int64_t)g * n + i) * sel_stride, st + (int64_t)g * sel_stride,
                           sizeof(int32_t) * (size_t)sel_stride);
                free(tmp), free(st);
            }
            /* queries (bf16) and the CPU attention over the reference selections */
            const int64_t nout = (int64_t)n * H * D;
            float *q = ct_hmalloc(sizeof(float) * (size_t)nout),
                  *ref_o = ct_hmalloc(sizeof(float) * (size_t)nout),
                  *got_o = ct_hmalloc(sizeof(float) * (size_t)nout);
            uint16_t *qb16 = ct_hmalloc(sizeof(uint16_t) * (size_t)nout),
                     *got_b = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
            ct_fill_normal(q, nout, 1.0f);
            ct_to_bf16(q, qb16, nout);
            ct_from_bf16(qb16, q, nout);
            int32_t *row = ct_hmalloc(sizeof(int32_t) * (size_t)G * sel_stride);
            for (int32_t i = 0; i < n; i++) {
                struct kn_paged_seq seq = {bt + (int64_t)i * max_nb, pos[i] + 1};
                for (int32_t g = 0; g < G; g++)
                    memcpy(row + (int64_t)g * sel_stride, ref + ((int64_t)g * n + i) * sel_stride,
                           sizeof(int32_t) * (size_t)sel_stride);
                kn_msa_sparse_attention(q + (int64_t)i * H * D, 1, &pos[i], H, G, D, sh.scale, kf, vf, B,
                                        &seq, row, sh.topk, sel_stride, ref_o + (int64_t)i * H * D);
            }
            struct kn_cuda_qbatch qb;
            memset(&qb, 0, sizeof qb);
            qb.n = n;
            qb.n_seqs = n;
            qb.qseq = ct_upload(qseq, sizeof(int32_t) * (size_t)n);
            qb.pos = ct_upload(pos, sizeof(int64_t) * (size_t)n);
            qb.block_table = ct_upload(bt, sizeof(int32_t) * (size_t)n * max_nb);
            qb.bt_stride = max_nb;
            qb.max_blocks = max_blocks;
            qb.max_q_per_seq = 1;
            float *sc_d = ct_upload(sc, sizeof(float) * (size_t)G * n * stride);
            void *q_d = ct_upload(qb16, sizeof(uint16_t) * (size_t)nout);
            void *o_d = ct_dmalloc(sizeof(uint16_t) * (size_t)nout);
            int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)G * n * sel_stride);
            int32_t *got = ct_hmalloc(sizeof(int32_t) * (size_t)G * n * sel_stride);
            for (size_t ks = 0; ks < sizeof knob_sets / sizeof knob_sets[0]; ks++) {
                char env[160], *save = NULL;
                snprintf(env, sizeof env, "%s", knob_sets[ks]);
                for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                    *strchr(t, '=') = 0;
                    knob_setenv(t, t + strlen(t) + 1, 1);
                }
                CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)G * n * sel_stride));
                CT_CU(cudaMemset(o_d, 0xff, sizeof(uint16_t) * (size_t)nout));
                struct mm_err err = {0};
                int32_t rc = kn_cuda_decode_fused_scores(&sh, &qb, &c, q_d, sc_d, stride, sel_d, sel_stride,
                                                         o_d, &err);
                snprintf(env, sizeof env, "%s", knob_sets[ks]);
                for (char *t = strtok_r(env, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
                    *strchr(t, '=') = 0;
                    knob_unsetenv(t);
                }
                CHECK_MSG(rc == MM_OK, "fused decode on given scores [%s]: %s", knob_sets[ks], err.msg);
                CT_CU(cudaDeviceSynchronize());
                ct_download(got, sel_d, sizeof(int32_t) * (size_t)G * n * sel_stride);
                int64_t bad = 0;
                for (int64_t e = 0; e < (int64_t)G * n * sel_stride; e++) {
                    if (got[e] != ref[e] && bad < 4)
                        fprintf(stderr,
                                "  fused scores n=%d local%d H%d [%s]: row %lld slot %lld: %d vs %d\n", n,
                                sh.n_local, H, knob_sets[ks], (long long)(e / sel_stride),
                                (long long)(e % sel_stride), got[e], ref[e]);
                    bad += got[e] != ref[e];
                }
                ct_download(got_b, o_d, sizeof(uint16_t) * (size_t)nout);
                ct_from_bf16(got_b, got_o, nout);
                double mx = 0, rel = ct_rel_err(got_o, ref_o, nout, &mx);
                CHECK_MSG(
                    bad == 0,
                    "fused decode on given scores, %d queries, %d heads, n_local %d [%s]: %lld selection "
                    "entries differ from kn_msa_topk_local",
                    n, H, sh.n_local, knob_sets[ks], (long long)bad);
                CHECK_MSG(
                    rel <= 1e-2 && mx <= 0.08,
                    "fused decode on given scores, %d queries, %d heads, n_local %d [%s]: rel err %.3g, "
                    "max abs %.3g",
                    n, H, sh.n_local, knob_sets[ks], rel, mx);
                printf(
                    "[fused decode, given scores] %2d queries, %d heads, n_local %d %-56s: selections equal, "
                    "rel err %.3g\n",
                    n, H, sh.n_local, knob_sets[ks], rel);
            }
            cudaFree((void *)qb.qseq), cudaFree((void *)qb.pos), cudaFree((void *)qb.block_table);
            cudaFree(sc_d), cudaFree(q_d), cudaFree(o_d), cudaFree(sel_d);
            free(bt), free(qseq), free(sc), free(ref), free(q), free(ref_o), free(got_o), free(qb16),
                free(got_b);
            free(row), free(got);
        }
    cudaFree(c.k), cudaFree(c.v);
    free(kf), free(vf), free(kb), free(vb);
}

/* ---- sparse prefill: the tile-union route (kn_msa_prefill_union.cu) and the pair path it falls back to ----
 */

/* Random distinct blocks < own into row[from..to), avoiding those already in row[0..to). */
static void pick_blocks(int32_t *row, int32_t from, int32_t to, int64_t own)
{
    for (int32_t j = from; j < to; j++) {
        int32_t b, dup;
        do {
            b = (int32_t)(ct_next() % (uint64_t)own);
            dup = 0;
            for (int32_t m = 0; m < j; m++) dup |= row[m] == b;
        } while (dup);
        row[j] = b;
    }
}

/* Selections [G][n][sel_stride] for prefill queries: per (sequence, group, 128-position tile) either a shared
 * set (own block + earlier ones, each query swapping each with probability 0.08: the structured regime) or
 * independent random blocks; ~5% of the non-own slots empty (-1); fewer blocks than k at the start of a
 * sequence; the slots past topk hold valid-looking block ids that every kernel must ignore. */
static void make_union_selection(const struct world *w, const struct qset *qs, int32_t *sel,
                                 int32_t sel_stride)
{
    const int32_t G = w->sh.n_kv, K = w->sh.topk;
    int32_t set[32];
    for (int32_t g = 0; g < G; g++) {
        int64_t set_key = -1;
        for (int32_t i = 0; i < qs->n; i++) {
            int32_t *row = sel + ((int64_t)g * qs->n + i) * sel_stride;
            const int64_t own = qs->pos[i] / w->sh.block, tile = qs->pos[i] / 128;
            const int32_t avail = own + 1 < K ? (int32_t)own + 1 : K;
            const int structured = (qs->qseq[i] + g + tile) % 3 != 0;
            const int64_t key = ((int64_t)qs->qseq[i] << 32) | tile;
            if (key != set_key) { /* a new shared set for this tile */
                set_key = key;
                set[0] = (int32_t)own;
                if (own + 1 <= K)
                    for (int32_t j = 1; j < avail; j++) set[j] = (int32_t)own - j;
                else
                    pick_blocks(set, 1, avail, own);
            }
            row[0] = (int32_t)own;
            if (structured) {
                memcpy(row, set, sizeof(int32_t) * (size_t)avail);
                row[0] = (int32_t)own; /* the tile's queries may sit in two blocks */
                for (int32_t j = 1; j < avail; j++) {
                    int dup = 0;
                    for (int32_t m = 0; m < j; m++) dup |= row[m] == row[j];
                    if (dup || row[j] >= own || (own + 1 > K && ct_uniform() < 0.08f))
                        pick_blocks(row, j, j + 1, own);
                }
            } else if (own + 1 <= K) {
                for (int32_t j = 1; j < avail; j++) row[j] = (int32_t)own - j;
            } else {
                pick_blocks(row, 1, avail, own);
            }
            for (int32_t j = 1; j < avail; j++)
                if (ct_uniform() < 0.05f) row[j] = -1;
            for (int32_t j = avail; j < K; j++) row[j] = -1;
            for (int32_t j = K; j < sel_stride; j++) row[j] = (int32_t)(ct_next() % (uint64_t)(own + 1));
        }
    }
}

/* The route the union kernel must give each (group, query): 1 when its 8-query tile's union efficiency is at
 * least min_eff percent (and the union has <= 128 blocks), as kn_msa_prefill_union.cu decides. Tiles are the
 * qbatch plan's, cut into 8s from each tile's first query. */
static int64_t expected_union_rows(const struct world *w, const struct qset *qs, const int32_t *sel,
                                   int32_t sel_stride, int32_t min_eff, uint8_t *route)
{
    const int32_t G = w->sh.n_kv, K = w->sh.topk;
    int32_t *off = ct_hmalloc(sizeof(int32_t) * (size_t)(w->n_seqs + 1));
    int64_t *last = ct_hmalloc(sizeof(int64_t) * (size_t)w->n_seqs);
    int32_t *tiles = ct_hmalloc(sizeof(int32_t) * 2 * (size_t)(qs->n + 1));
    struct kn_cuda_qbatch qb;
    struct mm_err err = {0};
    CHECK(kn_cuda_qbatch_plan(qs->n, w->n_seqs, qs->qseq, qs->pos, w->sh.block, off, last, tiles, &qb,
                              &err) == MM_OK);
    int64_t taken = 0;
    for (int32_t g = 0; g < G; g++)
        for (int32_t t = 0; t < qb.n_tiles; t++)
            for (int32_t o = 0; o * 8 < tiles[2 * t + 1]; o++) {
                const int32_t i0 = tiles[2 * t] + 8 * o,
                              cnt = tiles[2 * t + 1] - 8 * o < 8 ? tiles[2 * t + 1] - 8 * o : 8;
                int32_t uni[2][8 * 32], nuni[2] = {0, 0}, all[8 * 32], nall = 0, pairs = 0;
                for (int32_t q = 0; q < cnt; q++)
                    for (int32_t j = 0; j < K; j++) {
                        const int32_t b = sel[((int64_t)g * qs->n + i0 + q) * sel_stride + j];
                        if (b < 0 || b > qs->pos[i0 + q] / w->sh.block) continue;
                        pairs++;
                        int in = 0;
                        for (int32_t m = 0; m < nuni[q / 4]; m++) in |= uni[q / 4][m] == b;
                        if (!in) uni[q / 4][nuni[q / 4]++] = b;
                        in = 0;
                        for (int32_t m = 0; m < nall; m++) in |= all[m] == b;
                        if (!in) all[nall++] = b;
                    }
                const int32_t wsum = nuni[0] + nuni[1];
                const int take = nall <= 128 && (wsum == 0 || pairs * 100 >= min_eff * 4 * wsum);
                for (int32_t q = 0; q < cnt; q++) route[(int64_t)g * qs->n + i0 + q] = (uint8_t)take;
                taken += take * cnt;
            }
    free(off), free(last), free(tiles);
    return taken;
}

static void test_prefill_union(void)
{
    struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
    static const int64_t len[] = {1, 100, 128, 129, 2049, 3001, 4100, 6000};
    static const int32_t chunk[] = {1,   37, 128, 9,
                                    100, 73, 90,  64}; /* 502 queries, tiles not multiples of 8 */
    struct world w;
    world_make(&w, &sh, 8, len, 0);
    int32_t n = 0;
    for (int32_t s = 0; s < 8; s++) n += chunk[s];
    int32_t *qseq = ct_hmalloc(sizeof(int32_t) * (size_t)n);
    int64_t *pos = ct_hmalloc(sizeof(int64_t) * (size_t)n);
    for (int32_t s = 0, t = 0; s < 8; s++)
        for (int32_t k = 0; k < chunk[s]; k++, t++) qseq[t] = s, pos[t] = len[s] - chunk[s] + k;
    struct qset qs;
    qset_make(&qs, &w, n, qseq, pos);
    const int32_t H = sh.n_heads, D = sh.head_dim, G = sh.n_kv, sel_stride = sh.topk + 3;
    const int64_t nout = (int64_t)n * H * D, nsel = (int64_t)G * n * sel_stride;
    int32_t *sel = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    make_union_selection(&w, &qs, sel, sel_stride);
    float *q = ct_hmalloc(sizeof(float) * (size_t)nout), *ref = ct_hmalloc(sizeof(float) * (size_t)nout);
    uint16_t *qb16 = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
    ct_fill_normal(q, nout, 1.0f);
    ct_to_bf16(q, qb16, nout);
    ct_from_bf16(qb16, q, nout);
    cpu_attention(&w, &qs, q, sel, sel_stride, ref);
    void *q_d = ct_upload(qb16, sizeof(uint16_t) * (size_t)nout);
    int32_t *sel_d = ct_upload(sel, sizeof(int32_t) * (size_t)nsel);
    void *o_d = ct_dmalloc(sizeof(uint16_t) * (size_t)nout);
    size_t wsb = kn_cuda_msa_attention_ws(&sh, &qs.qb, sel_stride, KN_PATH_PREFILL);
    void *ws = ct_dmalloc(wsb);
    printf("[prefill union] %d queries in %d sequences, %d tiles\n", n, w.n_seqs, qs.qb.n_tiles);

    /* routes: pair path only; union for every tile; union at 50 %; union kernel handing everything back;
     * the default; then each variant of the union kernel (KN_CUDA_UNION_KERNEL = KN_PF_UK_*: plain, overlap,
     * pingpong, pingpong + fast softmax, fast softmax, score-only pingpong + fast softmax, fast softmax +
     * value product in halves, in quarters) everywhere and at 50 %; and the old overlap knob */
    enum { NV = 8, NR = 6 + 2 * NV + 26 };
    static const char *names[NR] = {"pairs only",
                                    "union everywhere",
                                    "union >= 50%",
                                    "union declines all",
                                    "default",
                                    "union everywhere, plain",
                                    "union >= 50%, plain",
                                    "union everywhere, overlap",
                                    "union >= 50%, overlap",
                                    "union everywhere, pingpong",
                                    "union >= 50%, pingpong",
                                    "union everywhere, pingpong fast",
                                    "union >= 50%, pingpong fast",
                                    "union everywhere, fast",
                                    "union >= 50%, fast",
                                    "union everywhere, pingpong S fast",
                                    "union >= 50%, pingpong S fast",
                                    "union everywhere, split",
                                    "union >= 50%, split",
                                    "union everywhere, split4",
                                    "union >= 50%, split4",
                                    "everywhere, OVERLAP=1 knob",
                                    "union everywhere, rare",
                                    "union >= 50%, rare",
                                    "union >= 50%, rare, row merge",
                                    "pairs only, row merge",
                                    "union everywhere, lookahead",
                                    "union >= 50%, lookahead",
                                    "union >= 50%, rare, lookahead",
                                    "union >= 50%, plan v0",
                                    "union >= 50%, rare, plan v0",
                                    "union >= 50%, rare, dynamic order",
                                    "union everywhere, lookahead, dynamic order",
                                    "union >= 50%, rare, pair-path prefetch",
                                    "union >= 50%, rare, Q prefetch",
                                    "union >= 50%, rare, cost 2",
                                    "union >= 50%, rare, cost 4",
                                    "union >= 50%, rare, cap 0%",
                                    "union >= 50%, rare, cap 100%",
                                    "union >= 50%, rare, rare prefetch",
                                    "union >= 50%, rare, lookahead, rare prefetch",
                                    "pairs only, wgmma pairs",
                                    "union >= 50%, rare, wgmma pairs",
                                    "union everywhere, rare, wgmma pairs",
                                    "union >= 50%, rare, wgmma rare pairs only",
                                    "union everywhere, fast, cp.async ring",
                                    "union >= 50%, rare, cp.async ring",
                                    "union >= 50%, rare, wgmma pairs, cp.async ring"};
    /* the rows before the hybrid ones pin KN_CUDA_UNION_RARE=0 (their route checks assume whole rows), except
     * "default"; KN_CUDA_PF_MERGE=1: the merge with one warp per (query, group) row, 0 (pairs only, the
     * hybrid one) the per-head merge; the lookahead consumer (8) must equal the fast one (4) bit for bit */
    enum {
        R_KNOB = 5 + 2 * NV,
        R_RARE_ALL,
        R_RARE,
        R_RARE_ROWM,
        R_PAIRS_ROWM,
        R_LA_ALL,
        R_LA,
        R_LA_RARE,
        R_PLAN0,
        R_PLAN0_RARE,
        R_DYN_RARE,
        R_DYN_LA,
        R_PFX_RARE,
        R_QPF_RARE,
        R_COST2,
        R_COST4,
        R_CAP0,
        R_CAP100,
        R_RPF,
        R_RPF_LA,
        R_PW_PAIRS,
        R_PW_RARE,
        R_PW_RARE_ALL,
        R_PW2,
        R_CPA_ALL,
        R_CPA_RARE,
        R_CPA_PW
    };
    static const char *k_union[NR] = {"0", [R_PAIRS_ROWM] = "0", [R_PW_PAIRS] = "0"};
    static const char *k_min[NR] = {NULL, "0",  "50", "101", NULL, "0",  "50", "0",  "50", "0",  "50", "0",
                                    "50", "0",  "50", "0",   "50", "0",  "50", "0",  "50", "0",  "0",  "50",
                                    "50", NULL, "0",  "50",  "50", "50", "50", "50", "0",  "50", "50", "50",
                                    "50", "50", "50", "50",  "50", NULL, "50", "0",  "50", "0",  "50", "50"};
    static const char *k_kern[NR] = {NULL, NULL, NULL, NULL, NULL, "0",  "0", "1", "1", "2",  "2",  "3",
                                     "3",  "4",  "4",  "5",  "5",  "6",  "6", "7", "7", NULL, NULL, "4",
                                     "4",  NULL, "8",  "8",  "8",  NULL, "4", "4", "8", "4",  "4",  "4",
                                     "4",  "4",  "4",  "4",  "8",  NULL, "4", "4", "4", "4",  "4",  "4"};
    static const char *k_ovl[NR] = {[R_KNOB] = "1"};
    static const char *k_rare[NR] = {"0", "0",  "0", "0", NULL, "0",  "0", "0", "0", "0", "0", "0",
                                     "0", "0",  "0", "0", "0",  "0",  "0", "0", "0", "0", "1", "1",
                                     "1", NULL, "0", "0", "1",  "0",  "1", "1", "0", "1", "1", "1",
                                     "1", "1",  "1", "1", "1",  NULL, "1", "1", "1", "0", "1", "1"};
    static const char *k_merge[NR] = {[0] = "0", [R_RARE] = "0", [R_RARE_ROWM] = "1", [R_PAIRS_ROWM] = "1"};
    /* KN_CUDA_UNION_PLAN=0: the plan kernel's first version, same routes and union lists */
    static const char *k_plan[NR] = {[R_PLAN0] = "0", [R_PLAN0_RARE] = "0"};
    /* KN_CUDA_UNION_DYN=1: items from a global counter; the same outputs as the static order */
    static const char *k_dyn[NR] = {[R_DYN_RARE] = "1", [R_DYN_LA] = "1"};
    /* KN_CUDA_PF_PREFETCH=1, KN_CUDA_UNION_QPF=1: L2 prefetches only, the same outputs */
    static const char *k_pfx[NR] = {[R_PFX_RARE] = "1"};
    static const char *k_qpf[NR] = {[R_QPF_RARE] = "1"};
    /* the hybrid decision's knobs: a rare pair priced at 2 union products decides as 3 does (every item
     * with rare pairs under the cap; exactly so when no row repeats a block, as here), at 4 like the route
     * without the hybrid, as does a cap of 0 %; a cap of
     * 100 % takes more items (checked against the CPU); KN_CUDA_UNION_RPF=1 adds L2 prefetches only */
    static const char *k_cost[NR] = {[R_COST2] = "2", [R_COST4] = "4"};
    static const char *k_cap[NR] = {[R_CAP0] = "0", [R_CAP100] = "100"};
    static const char *k_rpf[NR] = {[R_RPF] = "1", [R_RPF_LA] = "1"};
    /* KN_CUDA_PF_WGMMA=1: the pair path's tiles on the union kernel in pair mode (other arithmetic: checked
     * against the CPU, and that it ran: its pairs-only output differs from the mma.sync kernel's) */
    /* =2: only the hybrid route's rare pairs in pair mode, the declined rows' pairs on k_pf_attn: each row
     * the union route took is then bitwise the =1 route's, each row it declined the mma.sync route's */
    static const char *k_pw[NR] = {
        [R_PW_PAIRS] = "1", [R_PW_RARE] = "1", [R_PW_RARE_ALL] = "1", [R_PW2] = "2", [R_CPA_PW] = "1"};
    /* KN_CUDA_UNION_TMA=0: every block reaches the ring by cp.async; by default whole blocks come by TMA (the
     * partial ones by cp.async, which zero-fills their rows past the last token): the same bits in every row
     */
    static const char *k_tma[NR] = {[R_CPA_ALL] = "0", [R_CPA_RARE] = "0", [R_CPA_PW] = "0"};
    CHECK_MSG((kn_cuda_prefill_tma(&sh, &w.c) & 1),
              "[prefill union] the default route has no TMA maps for the cache");
    /* every prefill knob, unset after each route */
    static const char *const pf_knobs[] = {KN_CUDA_PF_KNOBS(KN_CUDA_KNOB_NAME) NULL};
    uint16_t *got[NR];
    float *gotf = ct_hmalloc(sizeof(float) * (size_t)nout);
    for (int r = 0; r < NR; r++) {
        if (k_union[r]) knob_setenv("KN_CUDA_PREFILL_UNION", k_union[r], 1);
        if (k_min[r]) knob_setenv("KN_CUDA_UNION_MIN", k_min[r], 1);
        if (k_ovl[r]) knob_setenv("KN_CUDA_UNION_OVERLAP", k_ovl[r], 1);
        if (k_kern[r]) knob_setenv("KN_CUDA_UNION_KERNEL", k_kern[r], 1);
        if (k_rare[r]) knob_setenv("KN_CUDA_UNION_RARE", k_rare[r], 1);
        if (k_merge[r]) knob_setenv("KN_CUDA_PF_MERGE", k_merge[r], 1);
        if (k_plan[r]) knob_setenv("KN_CUDA_UNION_PLAN", k_plan[r], 1);
        if (k_dyn[r]) knob_setenv("KN_CUDA_UNION_DYN", k_dyn[r], 1);
        if (k_pfx[r]) knob_setenv("KN_CUDA_PF_PREFETCH", k_pfx[r], 1);
        if (k_qpf[r]) knob_setenv("KN_CUDA_UNION_QPF", k_qpf[r], 1);
        if (k_cost[r]) knob_setenv("KN_CUDA_UNION_RARE_COST", k_cost[r], 1);
        if (k_cap[r]) knob_setenv("KN_CUDA_UNION_RARE_CAP", k_cap[r], 1);
        if (k_rpf[r]) knob_setenv("KN_CUDA_UNION_RPF", k_rpf[r], 1);
        if (k_pw[r]) knob_setenv("KN_CUDA_PF_WGMMA", k_pw[r], 1);
        if (k_tma[r]) knob_setenv("KN_CUDA_UNION_TMA", k_tma[r], 1);
        CT_CU(cudaMemset(o_d, 0xff, sizeof(uint16_t) * (size_t)nout));
        CT_CU(cudaMemset(ws, 0x5a, wsb)); /* stale flags must not matter */
        struct mm_err err = {0};
        int32_t rc = kn_cuda_msa_attention(&sh, &qs.qb, &w.c, q_d, sel_d, sel_stride, o_d, ws, wsb,
                                           KN_PATH_PREFILL, 0, &err);
        for (const char *const *k = pf_knobs; *k; k++) knob_unsetenv(*k);
        CHECK_MSG(rc == MM_OK, "prefill attention (%s): %s", names[r], err.msg);
        got[r] = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
        ct_download(got[r], o_d, sizeof(uint16_t) * (size_t)nout);
        ct_from_bf16(got[r], gotf, nout);
        double mx = 0, rel = ct_rel_err(gotf, ref, nout, &mx);
        CHECK_MSG(rel <= 1e-2 && mx <= 0.08, "[prefill union] %s: rel err %.3g, max abs %.3g", names[r], rel,
                  mx);
        printf("  sparse attention prefill, %-26s: rel err %.3g, max abs %.3g\n", names[r], rel, mx);
    }
    /* each (query, group) row took the route its tile's efficiency says: bitwise the union-everywhere output
     * or the pairs-only one (both deterministic), and the two differ somewhere (else this proves nothing) */
    uint8_t *route = ct_hmalloc((size_t)G * n);
    const int64_t taken = expected_union_rows(&w, &qs, sel, sel_stride, 50, route);
    int64_t wrong = 0, wrong_declined = 0, rows_differ = 0, wrong_v[NV] = {0}, wrong_knob = 0;
    int64_t hybrid_rows = 0, rare_all_rows = 0, wrong_rowm = 0, wrong_pairs_rowm = 0, wrong_la = 0,
            wrong_plan = 0, wrong_dyn = 0, wrong_knobs = 0, cap100_rows = 0, pw_rows = 0, wrong_pw2 = 0,
            pw2_w = 0, pw2_m = 0, wrong_tma = 0;
    for (int32_t i = 0; i < n; i++)
        for (int32_t g = 0; g < G; g++) {
            const size_t at = ((size_t)i * H + (size_t)g * (H / G)) * D,
                         len_b = sizeof(uint16_t) * (size_t)(H / G) * D;
            const int by_union = route[(int64_t)g * n + i];
            const uint16_t *want = by_union ? got[1] + at : got[0] + at;
            wrong += memcmp(got[2] + at, want, len_b) != 0;
            wrong_declined += memcmp(got[3] + at, got[0] + at, len_b) != 0;
            rows_differ += memcmp(got[1] + at, got[0] + at, len_b) != 0;
            /* the same route check for each variant (its own union output, deterministic too) */
            for (int v = 0; v < NV; v++)
                wrong_v[v] +=
                    memcmp(got[6 + 2 * v] + at, by_union ? got[5 + 2 * v] + at : got[0] + at, len_b) != 0;
            wrong_knob += memcmp(got[R_KNOB] + at, got[7] + at, len_b) != 0;
            /* hybrid rows: neither the whole-row union output nor the pairs' (rare pairs merged in) */
            hybrid_rows += memcmp(got[R_RARE] + at, got[1] + at, len_b) != 0 &&
                           memcmp(got[R_RARE] + at, got[0] + at, len_b) != 0;
            rare_all_rows += memcmp(got[R_RARE_ALL] + at, got[1] + at, len_b) != 0 &&
                             memcmp(got[R_RARE_ALL] + at, got[0] + at, len_b) != 0;
            /* the row merge computes each head as the per-head merge does: bitwise the same */
            wrong_rowm += memcmp(got[R_RARE_ROWM] + at, got[R_RARE] + at, len_b) != 0;
            wrong_pairs_rowm += memcmp(got[R_PAIRS_ROWM] + at, got[0] + at, len_b) != 0;
            /* the lookahead consumer does the fast one's arithmetic in the same order */
            wrong_la += (memcmp(got[R_LA_ALL] + at, got[13] + at, len_b) != 0) +
                        (memcmp(got[R_LA] + at, got[14] + at, len_b) != 0) +
                        (memcmp(got[R_LA_RARE] + at, got[R_RARE] + at, len_b) != 0);
            wrong_plan += (memcmp(got[R_PLAN0] + at, got[2] + at, len_b) != 0) +
                          (memcmp(got[R_PLAN0_RARE] + at, got[R_RARE] + at, len_b) != 0);
            wrong_dyn += (memcmp(got[R_DYN_RARE] + at, got[R_RARE] + at, len_b) != 0) +
                         (memcmp(got[R_DYN_LA] + at, got[R_LA_ALL] + at, len_b) != 0) +
                         (memcmp(got[R_PFX_RARE] + at, got[R_RARE] + at, len_b) != 0) +
                         (memcmp(got[R_QPF_RARE] + at, got[R_RARE] + at, len_b) != 0);
            wrong_knobs += (memcmp(got[R_COST2] + at, got[R_RARE] + at, len_b) != 0) +
                           (memcmp(got[R_COST4] + at, got[2] + at, len_b) != 0) +
                           (memcmp(got[R_CAP0] + at, got[2] + at, len_b) != 0) +
                           (memcmp(got[R_RPF] + at, got[R_RARE] + at, len_b) != 0) +
                           (memcmp(got[R_RPF_LA] + at, got[R_LA_RARE] + at, len_b) != 0);
            cap100_rows += memcmp(got[R_CAP100] + at, got[R_RARE] + at, len_b) != 0;
            wrong_tma += (memcmp(got[R_CPA_ALL] + at, got[13] + at, len_b) != 0) +
                         (memcmp(got[R_CPA_RARE] + at, got[R_RARE] + at, len_b) != 0) +
                         (memcmp(got[R_CPA_PW] + at, got[R_PW_RARE] + at, len_b) != 0);
            pw_rows += memcmp(got[R_PW_PAIRS] + at, got[0] + at, len_b) != 0;
            {
                /* a hybrid row (rare pairs by wgmma) is the all-wgmma route's, a declined row the mma.sync
                 * route's, a whole-union row both */
                const int as_w = !memcmp(got[R_PW2] + at, got[R_PW_RARE] + at, len_b),
                          as_m = !memcmp(got[R_PW2] + at, got[R_RARE] + at, len_b);
                wrong_pw2 += !as_w && !as_m;
                pw2_w += as_w && !as_m;
                pw2_m += as_m && !as_w;
            }
        }
    CHECK_MSG(wrong_pw2 == 0 && pw2_w > 0 && pw2_m > 0,
              "[prefill union] wgmma for the rare pairs only: %lld (query, group) rows are neither the "
              "all-wgmma route's nor the mma.sync route's; %lld only the first's (rare pairs), %lld only the "
              "second's (declined rows): both must be > 0",
              (long long)wrong_pw2, (long long)pw2_w, (long long)pw2_m);
    printf("  wgmma rare pairs only: %lld rows as the all-wgmma route, %lld as the mma.sync route\n",
           (long long)pw2_w, (long long)pw2_m);
    CHECK_MSG(wrong_tma == 0,
              "[prefill union] the TMA and cp.async producers give other outputs in %lld rows",
              (long long)wrong_tma);
    CHECK_MSG(wrong_knobs == 0,
              "[prefill union] a hybrid decision knob (cost 2 / 4, cap 0) or the rare prefetch gives other "
              "outputs in %lld rows",
              (long long)wrong_knobs);
    printf("  hybrid cap 100%%: %lld (query, group) rows differ from the 25%% cap\n", (long long)cap100_rows);
    CHECK_MSG(pw_rows > 0,
              "[prefill union] the wgmma pair mode gives the mma.sync kernel's output in every row: "
              "did it run?");
    printf(
        "  wgmma pair mode: %lld of %lld (query, group) rows differ from the mma.sync pair kernel's bits\n",
        (long long)pw_rows, (long long)G * n);
    CHECK_MSG(wrong_dyn == 0,
              "[prefill union] the dynamic item order or a prefetch gives other outputs in %lld rows",
              (long long)wrong_dyn);
    CHECK_MSG(wrong_plan == 0, "[prefill union] the first plan kernel gives other outputs in %lld rows",
              (long long)wrong_plan);
    CHECK_MSG(wrong_la == 0, "[prefill union] the lookahead consumer differs from the fast one in %lld rows",
              (long long)wrong_la);
    CHECK_MSG(
        hybrid_rows > 0 && rare_all_rows > 0,
        "[prefill union] the hybrid route merged rare pairs into no row (%lld at 50%%, %lld everywhere): "
        "the check is void",
        (long long)hybrid_rows, (long long)rare_all_rows);
    CHECK_MSG(
        wrong_rowm == 0 && wrong_pairs_rowm == 0,
        "[prefill union] the row merge differs from the per-head merge in %lld (hybrid) / %lld (pairs) rows",
        (long long)wrong_rowm, (long long)wrong_pairs_rowm);
    printf("  hybrid route: %lld (query, group) rows with rare pairs merged at 50%%, %lld everywhere\n",
           (long long)hybrid_rows, (long long)rare_all_rows);
    for (int v = 0; v < NV; v++)
        CHECK_MSG(wrong_v[v] == 0,
                  "[prefill union] %s: %lld (query, group) rows did not take their tile's route",
                  names[6 + 2 * v], (long long)wrong_v[v]);
    CHECK_MSG(wrong_knob == 0,
              "[prefill union] KN_CUDA_UNION_OVERLAP=1 differs from the overlap variant in %lld rows",
              (long long)wrong_knob);
    CHECK_MSG(taken > 0 && taken < (int64_t)G * n,
              "[prefill union] the batch should mix routes: %lld of %lld rows union", (long long)taken,
              (long long)G * n);
    CHECK_MSG(rows_differ > 0,
              "[prefill union] union and pair outputs never differ: the route check is void");
    CHECK_MSG(wrong == 0, "[prefill union] %lld (query, group) rows did not take their tile's route",
              (long long)wrong);
    CHECK_MSG(wrong_declined == 0,
              "[prefill union] %lld rows differ from the pair path when the union declines all",
              (long long)wrong_declined);
    printf("  routes: %lld of %lld (query, group) rows by union at 50%%, %lld rows wrong; union vs pairs "
           "differ in %lld rows\n",
           (long long)taken, (long long)G * n, (long long)wrong, (long long)rows_differ);

    /* dense prefill on the same chunked batch: the union kernel's dense mode (the default, whole blocks by
     * TMA and partial ones by cp.async; then its other consumers, KN_CUDA_DENSE_KERNEL) and the mma.sync
     * flash kernel (KN_CUDA_DENSE_WGMMA=0), each against the generic kernel (exact f32 softmax; itself
     * checked against the CPU above), and the first not bitwise the last (else it did not run) */
    {
        enum { ND = 7 };
        uint16_t *dn[ND];
        float *dnf[ND];
        static const char *const dn_name[ND] = {"generic",
                                                "union kernel, dense mode",
                                                "dense mode, overlap",
                                                "dense mode, pingpong fast",
                                                "dense mode, S pingpong fast",
                                                "dense mode, split",
                                                "mma.sync flash"};
        static const char *const dn_kern[ND] = {NULL, NULL, "1", "3", "5", "6", NULL};
        for (int k = 0; k < ND; k++) {
            if (k == ND - 1) knob_setenv("KN_CUDA_DENSE_WGMMA", "0", 1);
            if (dn_kern[k]) knob_setenv("KN_CUDA_DENSE_KERNEL", dn_kern[k], 1);
            CT_CU(cudaMemset(o_d, 0xff, sizeof(uint16_t) * (size_t)nout));
            struct mm_err err = {0};
            const int32_t rc = kn_cuda_dense_attention(&sh, &qs.qb, &w.c, q_d, o_d, NULL, 0,
                                                       k ? KN_PATH_PREFILL : KN_PATH_GENERIC, 0, &err);
            knob_unsetenv("KN_CUDA_DENSE_WGMMA");
            knob_unsetenv("KN_CUDA_DENSE_KERNEL");
            CHECK_MSG(rc == MM_OK, "[prefill union] dense %s: %s", dn_name[k], err.msg);
            dn[k] = ct_hmalloc(sizeof(uint16_t) * (size_t)nout);
            dnf[k] = ct_hmalloc(sizeof(float) * (size_t)nout);
            ct_download(dn[k], o_d, sizeof(uint16_t) * (size_t)nout);
            ct_from_bf16(dn[k], dnf[k], nout);
        }
        for (int k = 1; k < ND; k++) {
            double mx = 0, rel = ct_rel_err(dnf[k], dnf[0], nout, &mx);
            CHECK_MSG(rel <= 1e-2 && mx <= 0.08, "[prefill union] dense %s: rel err %.3g, max abs %.3g",
                      dn_name[k], rel, mx);
            printf("  dense attention prefill, %-26s: rel err %.3g, max abs %.3g (against generic)\n",
                   dn_name[k], rel, mx);
        }
        CHECK_MSG(
            memcmp(dn[1], dn[ND - 1], sizeof(uint16_t) * (size_t)nout) != 0,
            "[prefill union] dense: the union kernel's output is the mma.sync kernel's bit for bit: did it "
            "run?");
        for (int k = 0; k < ND; k++) free(dn[k]), free(dnf[k]);
    }
    for (int r = 0; r < NR; r++) free(got[r]);
    free(gotf), free(route), free(sel), free(q), free(ref), free(qb16), free(qseq), free(pos);
    cudaFree(q_d), cudaFree(sel_d), cudaFree(o_d), cudaFree(ws);
    qset_free(&qs);
    world_free(&w);
}

/* The fused prefill selection alone (every kernel: mma.sync and the wgmma variants) on longer contexts than
 * run_queries affords (its CPU attention would dominate): M3 shapes, 125 and 71 blocks (so top-16 has real
 * competition and the wgmma kernel's insertion path runs often), contexts not a multiple of 128, tiles of 64
 * and partial ones, one query in its sequence's first block, two sequences in one batch, selections against
 * the CPU. */
static void test_select_prefill_long(void)
{
    struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
    static const int64_t len[] = {15999, 9001};
    struct world w;
    world_make(&w, &sh, 2, len, 0);
    const int32_t n0 = 100, n1 = 71, n = n0 + n1;
    int32_t qseq[100 + 71];
    int64_t pos[100 + 71];
    for (int32_t i = 0; i < n0; i++) qseq[i] = 0, pos[i] = len[0] - n0 + i;
    for (int32_t i = 0; i < n1; i++) qseq[n0 + i] = 1, pos[n0 + i] = i == 0 ? 5 : len[1] - n1 + i;
    struct qset qs;
    qset_make(&qs, &w, n, qseq, pos);
    const int32_t NH = sh.n_idx_heads, DI = sh.idx_dim, sstride = qs.qb.max_blocks, sel_stride = sh.topk + 2;
    const int64_t nsel = (int64_t)NH * n * sel_stride;
    float *qi = ct_hmalloc(sizeof(float) * (size_t)n * NH * DI);
    ct_fill_normal(qi, (int64_t)n * NH * DI, 1.0f);
    float *qi_d = ct_upload(qi, sizeof(float) * (size_t)n * NH * DI);
    float *ref_s = ct_hmalloc(sizeof(float) * (size_t)NH * n * sstride);
    cpu_scores(&w, &qs, qi, w.idx_f, ref_s, sstride);
    int32_t *ref_sel = ct_hmalloc(sizeof(int32_t) * (size_t)nsel),
            *got = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    cpu_topk(&w, &qs, ref_s, sstride, ref_sel, sel_stride);
    /* FP8 keys: the same against the CPU on the dequantized keys (the wgmma kernels only) */
    float *ref_s8 = ct_hmalloc(sizeof(float) * (size_t)NH * n * sstride);
    cpu_scores(&w, &qs, qi, w.idx8_f, ref_s8, sstride);
    int32_t *ref_sel8 = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    cpu_topk(&w, &qs, ref_s8, sstride, ref_sel8, sel_stride);
    /* FP8 keys with e4m3 queries (KN_CUDA_SELECT_WGMMA=3): against the CPU on the quantized queries */
    float *qi8 = ct_hmalloc(sizeof(float) * (size_t)n * NH * DI);
    kn_msa_quant_q8(qi, (int64_t)n * NH, DI, qi8);
    float *ref_sq8 = ct_hmalloc(sizeof(float) * (size_t)NH * n * sstride);
    cpu_scores(&w, &qs, qi8, w.idx8_f, ref_sq8, sstride);
    int32_t *ref_selq8 = ct_hmalloc(sizeof(int32_t) * (size_t)nsel);
    cpu_topk(&w, &qs, ref_sq8, sstride, ref_selq8, sel_stride);
    int32_t *sel_d = ct_dmalloc(sizeof(int32_t) * (size_t)nsel);
    printf("[m3 long select] %d queries, max %d blocks, %d tiles\n", n, qs.qb.max_blocks, qs.qb.n_tiles);
    for (int v = 0; v < 6;
         v++) { /* KN_CUDA_SELECT_WGMMA: 0 mma.sync, 1 and 2 the wgmma variants; FP8 1, 2, 3 */
        static const char *const knob[] = {"0", "1", "2", "1", "2", "3"};
        const int fp8 = v >= 3, q8 = v == 5;
        struct mm_err err = {0};
        CT_CU(cudaMemset(sel_d, 0x7f, sizeof(int32_t) * (size_t)nsel));
        knob_setenv("KN_CUDA_SELECT_WGMMA", knob[v], 1);
        int32_t rc = kn_cuda_msa_select(&sh, &qs.qb, fp8 ? &w.c8 : &w.c, qi_d, sel_d, sel_stride, NULL, 0,
                                        KN_PATH_PREFILL, 0, &err);
        knob_unsetenv("KN_CUDA_SELECT_WGMMA");
        if (rc == MM_UNSUPPORTED && fp8) {
            printf("  select prefill fp8: not on this device (%s)\n", err.msg);
            continue;
        }
        CHECK_MSG(rc == MM_OK, "select prefill %s%s: %s", knob[v], fp8 ? " fp8" : "", err.msg);
        ct_download(got, sel_d, sizeof(int32_t) * (size_t)nsel);
        char what[80];
        snprintf(what, sizeof what, "[m3 long select] prefill%s, KN_CUDA_SELECT_WGMMA=%s", fp8 ? " fp8" : "",
                 knob[v]);
        int64_t differ = compare_sel(&w, &qs, got,
                                     q8    ? ref_selq8
                                     : fp8 ? ref_sel8
                                           : ref_sel,
                                     sel_stride,
                                     q8    ? ref_sq8
                                     : fp8 ? ref_s8
                                           : ref_s,
                                     sstride, 0.3f, what);
        if (q8) { /* informational: how far e4m3 queries move the selection from the bf16-query one */
            int64_t rows = 0, kept = 0, total = 0;
            for (int64_t r = 0; r < (int64_t)NH * n; r++) {
                const int32_t *x = got + r * sel_stride, *y = ref_sel8 + r * sel_stride;
                int64_t same = 0, cnt = 0;
                for (int32_t j = 0; j < sh.topk; j++) {
                    if (y[j] < 0) continue;
                    cnt++;
                    for (int32_t m = 0; m < sh.topk; m++) same += x[m] == y[j];
                }
                rows += same != cnt, kept += same, total += cnt;
            }
            printf("  select prefill fp8, e4m3 queries vs bf16 queries: %lld of %lld rows differ, %.2f %% of "
                   "selected blocks shared\n",
                   (long long)rows, (long long)NH * n, 100.0 * (double)kept / (double)(total ? total : 1));
        }
        /* the local block is always selected, and slots past top-k are -1 */
        int64_t bad = 0;
        for (int32_t g = 0; g < NH; g++)
            for (int32_t i = 0; i < n; i++) {
                const int32_t *r = got + ((int64_t)g * n + i) * sel_stride;
                int own = 0;
                for (int32_t j = 0; j < sh.topk; j++) own |= r[j] == (int32_t)(pos[i] / sh.block);
                bad += !own || r[sh.topk] != -1 || r[sh.topk + 1] != -1;
            }
        CHECK_MSG(bad == 0, "%s: %lld rows without their own block or with slots past top-k", what,
                  (long long)bad);
        printf("  select prefill%s KN_CUDA_SELECT_WGMMA=%s: %lld of %lld rows differ by near-ties\n",
               fp8 ? " fp8" : "", knob[v], (long long)differ, (long long)NH * n);
    }
    free(qi), free(ref_s), free(ref_sel), free(ref_s8), free(ref_sel8), free(got);
    free(qi8), free(ref_sq8), free(ref_selq8);
    cudaFree(qi_d), cudaFree(sel_d);
    qset_free(&qs);
    world_free(&w);
}

int main(void)
{
    ct_require_gpu();
    ct_seed(20261130);
    test_topk_long();
    test_fused_decode_scores();
    test_select_prefill_long();
    test_prefill_union();
    test_scan_after_append();
    {
        /* M3: 64 heads, 4 KV groups, head_dim 128, index 4 x 128, block 128, top-16 */
        struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
        static const int64_t len[] = {1, 127, 128, 129, 700, 2049, 3000};
        struct world w;
        world_make(&w, &sh, 7, len, 0);
        run_decode(&w, "m3 decode", 1, 1, 1);
        static const int32_t chunk[] = {1, 0, 128, 129, 100, 99, 0};
        run_prefill(&w, chunk, "m3 prefill", 1, 1, 1);
        world_free(&w);
    }
    {
        /* M3, a decode batch of 70 sequences (280 rows: the fused route without splits, counters shared by
         * many CTAs) with lengths 1..2000 */
        struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
        static int64_t len[70];
        for (int s = 0; s < 70; s++) len[s] = 1 + (int64_t)(ct_next() % 2000);
        struct world w;
        world_make(&w, &sh, 70, len, 0);
        run_decode(&w, "m3 decode batch 70", 1, 1, 1);
        world_free(&w);
    }
    {
        /* M3, decode batches of 1 and 2: the fused route's widest splits (8, or 16 in non-portable
         * clusters: one page per CTA), a context that is not a multiple of the block, and one with fewer
         * blocks than k (splits without pages) */
        struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 16, 1, 0.08838834764831845f};
        static const int64_t len1[] = {5000}, len2[] = {1000}, len3[] = {4097, 2000};
        struct world w;
        world_make(&w, &sh, 1, len1, 0);
        run_decode(&w, "m3 decode batch 1, 40 blocks", 1, 1, 1);
        world_free(&w);
        world_make(&w, &sh, 1, len2, 0);
        run_decode(&w, "m3 decode batch 1, 8 blocks", 1, 1, 1);
        world_free(&w);
        world_make(&w, &sh, 2, len3, 0);
        run_decode(&w, "m3 decode batch 2", 1, 1, 1);
        world_free(&w);
    }
    {
        /* the tiny checkpoint: 8 heads, 2 groups, head_dim 32, index 2 x 32, block 16, top-4 */
        struct kn_cuda_msa_shape sh = {8, 2, 32, 2, 32, 16, 4, 1, 0.17677669529663687f};
        static const int64_t len[] = {1, 15, 16, 17, 40, 130, 333};
        static const int32_t chunk[] = {1, 15, 0, 17, 40, 30, 70};
        for (int f32 = 0; f32 < 2; f32++) {
            struct world w;
            world_make(&w, &sh, 7, len, f32);
            run_decode(&w, f32 ? "tiny f32 decode" : "tiny decode", 1, 0, 0);
            run_prefill(&w, chunk, f32 ? "tiny f32 prefill" : "tiny prefill", 1, 0, 0);
            world_free(&w);
        }
    }
    {
        /* M3 with two local blocks forced (index_local_blocks 2) and top-k 12 */
        struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 12, 2, 0.08838834764831845f};
        static const int64_t len[] = {300, 1800};
        struct world w;
        world_make(&w, &sh, 2, len, 0);
        run_decode(&w, "m3 local2 decode", 1, 1, 1);
        static const int32_t chunk[] = {40, 70};
        run_prefill(&w, chunk, "m3 local2 prefill", 1, 1, 1);
        world_free(&w);
    }
    return test_done();
}
