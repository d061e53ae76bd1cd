/* The CUDA element-wise, normalization, RoPE, MoE-routing, vision-attention and GEMM kernels against the CPU
 * kernels (kernels/cpu) or, where the CPU side has no separate function, a plain loop written here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_util.h"
#include "kn_act.h"
#include "kn_attn.h"
#include "kn_cands.h"
#include "mm_logprobs.h"
#include "kn_draw.h"
#include "kn_gemm.h"
#include "kn_norm.h"
#include "kn_quant.h"
#include "kn_rope.h"
#include "mm_dtype.h"

static struct mm_err err;

#define OK(call)                                                                                             \
    do {                                                                                                     \
        int32_t rc__ = (call);                                                                               \
        CHECK_MSG(rc__ == MM_OK, "%s: %s", #call, err.msg);                                                  \
    } while (0)

static void expect_close(const char *what, const float *got, const float *ref, int64_t n, double tol_rel)
{
    double mx = 0, rel = ct_rel_err(got, ref, n, &mx);
    CHECK_MSG(rel <= tol_rel, "%s: rel err %.3g (max abs %.3g)", what, rel, mx);
    printf("  %-28s rel err %.3g\n", what, rel);
}

static float *dl_f32(const void *d, int64_t n)
{
    float *h = ct_hmalloc(sizeof(float) * (size_t)n);
    ct_download(h, d, sizeof(float) * (size_t)n);
    return h;
}

static float *dl_bf16(const void *d, int64_t n)
{
    uint16_t *b = ct_hmalloc(sizeof(uint16_t) * (size_t)n);
    float *h = ct_hmalloc(sizeof(float) * (size_t)n);
    ct_download(b, d, sizeof(uint16_t) * (size_t)n);
    ct_from_bf16(b, h, n);
    free(b);
    return h;
}

static void test_norms(void)
{
    const int64_t n = 37;
    const int32_t dim = 1000, heads = 6, hd = 128;
    float *x = ct_hmalloc(sizeof(float) * n * dim), *w = ct_hmalloc(sizeof(float) * dim);
    float *b = ct_hmalloc(sizeof(float) * dim), *ref = ct_hmalloc(sizeof(float) * n * dim);
    ct_fill_normal(x, n * dim, 2.0f);
    ct_fill_normal(w, dim, 0.3f);
    ct_fill_normal(b, dim, 0.3f);
    float *x_d = ct_upload(x, sizeof(float) * n * dim), *w_d = ct_upload(w, sizeof(float) * dim);
    float *b_d = ct_upload(b, sizeof(float) * dim);
    void *o_d = ct_dmalloc(sizeof(float) * n * dim);

    kn_rmsnorm_gemma(x, dim, w, n, dim, 1e-6f, ref, dim);
    OK(kn_cuda_rmsnorm(x_d, dim, w_d, n, dim, 1e-6f, o_d, dim, 0, 0, &err));
    float *got = dl_f32(o_d, n * dim);
    expect_close("rmsnorm f32", got, ref, n * dim, 1e-6);
    free(got);
    OK(kn_cuda_rmsnorm(x_d, dim, w_d, n, dim, 1e-6f, o_d, dim, 1, 0, &err));
    got = dl_bf16(o_d, n * dim);
    expect_close("rmsnorm bf16 out", got, ref, n * dim, 4e-3);
    free(got);

    /* the residual add and the norm in one launch: y the same bits as kn_cuda_add, out as kn_cuda_rmsnorm up
     * to the order of the sum of squares (a cluster per row), the same bits on a second run */
    {
        float *r = ct_hmalloc(sizeof(float) * n * dim);
        ct_fill_normal(r, n * dim, 1.0f);
        float *y1 = ct_upload(x, sizeof(float) * n * dim), *y2 = ct_upload(x, sizeof(float) * n * dim);
        float *r_d = ct_upload(r, sizeof(float) * n * dim), *o2_d = ct_dmalloc(sizeof(float) * n * dim);
        OK(kn_cuda_add(y1, r_d, n * dim, 0, &err));
        OK(kn_cuda_rmsnorm(y1, dim, w_d, n, dim, 1e-6f, o_d, dim, 0, 0, &err));
        OK(kn_cuda_add_rmsnorm(y2, r_d, w_d, n, dim, 1e-6f, o2_d, 0, &err));
        float *a1 = dl_f32(y1, n * dim), *a2 = dl_f32(y2, n * dim);
        float *n1 = dl_f32(o_d, n * dim), *n2 = dl_f32(o2_d, n * dim);
        CHECK_MSG(!memcmp(a1, a2, sizeof(float) * n * dim),
                  "add + rmsnorm: the sum differs from kn_cuda_add");
        expect_close("add + rmsnorm", n2, n1, n * dim, 1e-6);
        float *y3 = ct_upload(x, sizeof(float) * n * dim);
        OK(kn_cuda_add_rmsnorm(y3, r_d, w_d, n, dim, 1e-6f, o2_d, 0, &err));
        float *n3 = dl_f32(o2_d, n * dim);
        CHECK_MSG(!memcmp(n2, n3, sizeof(float) * n * dim),
                  "add + rmsnorm: not the same bits on a second run");
        free(n3);
        cudaFree(y3);
        struct mm_err e3 = {0};
        CHECK(kn_cuda_add_rmsnorm(y2, r_d, w_d, n, 0, 1e-6f, o2_d, 0, &e3) == MM_INVALID);
        free(r), free(a1), free(a2), free(n1), free(n2);
        cudaFree(y1), cudaFree(y2), cudaFree(r_d), cudaFree(o2_d);
    }

    kn_layernorm(x, dim, w, b, n, dim, 1e-5f, ref, dim);
    OK(kn_cuda_layernorm(x_d, dim, w_d, b_d, n, dim, 1e-5f, o_d, dim, 0, 0, &err));
    got = dl_f32(o_d, n * dim);
    expect_close("layernorm", got, ref, n * dim, 1e-6);
    free(got);
    /* the row held in registers (dim <= 8 x 256) is bitwise the three-pass kernel, out of place, in place
     * and into bf16; past 2048 the three-pass kernel runs */
    {
        static const int32_t dims[5] = {100, 1280, 2048, 2049, 256};
        const int64_t rows = 9;
        for (int d = 0; d < 5; d++) {
            const int32_t dm = dims[d];
            float *lx = ct_hmalloc(sizeof(float) * rows * dm), *lw = ct_hmalloc(sizeof(float) * dm),
                  *lb = ct_hmalloc(sizeof(float) * dm);
            ct_fill_normal(lx, rows * dm, 3.0f);
            ct_fill_normal(lw, dm, 1.0f);
            ct_fill_normal(lb, dm, 1.0f);
            float *lw_d = ct_upload(lw, sizeof(float) * dm), *lb_d = ct_upload(lb, sizeof(float) * dm);
            float *res[2][3];
            for (int vec = 0; vec < 2; vec++) {
                setenv("KN_CUDA_OPS_VEC", vec ? "1" : "0", 1);
                kn_cuda_knobs_reload();
                float *lx_d = ct_upload(lx, sizeof(float) * rows * dm),
                      *lo_d = ct_dmalloc(sizeof(float) * rows * dm);
                uint16_t *lh_d = ct_dmalloc(sizeof(uint16_t) * rows * dm);
                OK(kn_cuda_layernorm(lx_d, dm, lw_d, lb_d, rows, dm, 1e-5f, lo_d, dm, 0, 0, &err));
                OK(kn_cuda_layernorm(lx_d, dm, lw_d, lb_d, rows, dm, 1e-5f, lh_d, dm, 1, 0, &err));
                OK(kn_cuda_layernorm(lx_d, dm, lw_d, d == 4 ? NULL : lb_d, rows, dm, 1e-5f, lx_d, dm, 0, 0,
                                     &err));
                res[vec][0] = dl_f32(lo_d, rows * dm), res[vec][1] = dl_bf16(lh_d, rows * dm);
                res[vec][2] = dl_f32(lx_d, rows * dm);
                cudaFree(lx_d), cudaFree(lo_d), cudaFree(lh_d);
            }
            for (int k = 0; k < 3; k++) {
                CHECK_MSG(!memcmp(res[0][k], res[1][k], sizeof(float) * rows * dm),
                          "layernorm dim %d (%s): the register kernel differs", dm,
                          k == 0   ? "f32"
                          : k == 1 ? "bf16"
                                   : "in place");
                free(res[0][k]), free(res[1][k]);
            }
            free(lx), free(lw), free(lb);
            cudaFree(lw_d), cudaFree(lb_d);
        }
        unsetenv("KN_CUDA_OPS_VEC");
        kn_cuda_knobs_reload();
        printf("  %-28s row in registers bitwise equal to three passes, 5 dims\n", "layernorm");
    }

    /* per-head norm in place over [n][heads * hd] */
    float *xh = ct_hmalloc(sizeof(float) * n * heads * hd);
    ct_fill_normal(xh, n * heads * hd, 1.5f);
    float *xh_d = ct_upload(xh, sizeof(float) * n * heads * hd);
    OK(kn_cuda_head_rmsnorm(xh_d, n, heads, hd, (int64_t)heads * hd, w_d, 1e-6f, 0, &err));
    kn_head_rmsnorm_gemma(xh, n, heads, hd, (int64_t)heads * hd, w, 1e-6f);
    got = dl_f32(xh_d, n * heads * hd);
    expect_close("head rmsnorm", got, xh, n * heads * hd, 1e-6);
    free(got);

    /* RoPE: tables for large positions, then partial rotation of 64 of 128 dims */
    int64_t pos[37];
    for (int64_t i = 0; i < n; i++) pos[i] = i == 0 ? 0 : (int64_t)(ct_next() % 1048576);
    const int32_t rot = 64;
    float *ct = ct_hmalloc(sizeof(float) * n * rot), *st = ct_hmalloc(sizeof(float) * n * rot);
    kn_rope_text_table(pos, n, rot, 5e6, ct, st);
    int64_t *pos_d = ct_upload(pos, sizeof(pos));
    float *ct_d = ct_dmalloc(sizeof(float) * n * rot), *st_d = ct_dmalloc(sizeof(float) * n * rot);
    OK(kn_cuda_rope_table(pos_d, n, rot, 5e6, ct_d, st_d, 0, &err));
    float *gc = dl_f32(ct_d, n * rot), *gs = dl_f32(st_d, n * rot);
    double worst = 0;
    for (int64_t e = 0; e < n * rot; e++) {
        double d = fmax(fabs(gc[e] - ct[e]), fabs(gs[e] - st[e]));
        if (!(d <= worst)) worst = d;
    }
    CHECK_MSG(worst <= 2e-6, "rope table: max diff %.3g", worst);
    printf("  %-28s max diff %.3g\n", "rope table", worst);
    kn_rope_apply(xh, n, heads, hd, (int64_t)heads * hd, ct, st, rot, rot);
    OK(kn_cuda_rope_apply(xh_d, n, heads, hd, (int64_t)heads * hd, ct_d, st_d, rot, rot, 0, &err));
    got = dl_f32(xh_d, n * heads * hd);
    expect_close("rope apply", got, xh, n * heads * hd, 1e-6);
    free(got);

    /* norm + RoPE of four tensors in one launch (a layer's q, k, index q and key; the last one not rotated):
     * the same bits as the separate calls */
    {
        static const int32_t shp[KN_NORM_ROPE_MAX_PARTS][3] = {
            {5, 128, 64}, {2, 128, 64}, {4, 64, 32}, {1, 96, 0}};
        struct kn_norm_rope_part parts[KN_NORM_ROPE_MAX_PARTS];
        float *sep[KN_NORM_ROPE_MAX_PARTS], *fus[KN_NORM_ROPE_MAX_PARTS];
        float *wn_d = ct_upload(w, sizeof(float) * 128); /* the norm weights: the first head_dim of w */
        for (int k = 0; k < KN_NORM_ROPE_MAX_PARTS; k++) {
            const int64_t e = n * shp[k][0] * shp[k][1];
            float *h = ct_hmalloc(sizeof(float) * e);
            ct_fill_normal(h, e, 1.5f);
            sep[k] = ct_upload(h, sizeof(float) * e), fus[k] = ct_upload(h, sizeof(float) * e);
            free(h);
            const int64_t stride = (int64_t)shp[k][0] * shp[k][1];
            OK(kn_cuda_head_rmsnorm(sep[k], n, shp[k][0], shp[k][1], stride, wn_d, 1e-6f, 0, &err));
            if (shp[k][2])
                OK(kn_cuda_rope_apply(sep[k], n, shp[k][0], shp[k][1], stride, ct_d, st_d, rot, shp[k][2], 0,
                                      &err));
            parts[k] = (struct kn_norm_rope_part){fus[k], wn_d, shp[k][0], shp[k][1], shp[k][2], NULL};
        }
        /* the first part (q) also as bf16, against kn_cuda_convert of the separate result */
        const int64_t e0 = n * shp[0][0] * shp[0][1];
        uint16_t *q16_d = ct_dmalloc(sizeof(uint16_t) * e0), *c16_d = ct_dmalloc(sizeof(uint16_t) * e0);
        parts[0].bf16 = q16_d;
        OK(kn_cuda_head_norm_rope(parts, KN_NORM_ROPE_MAX_PARTS, n, ct_d, st_d, rot, 1e-6f, 0, &err));
        OK(kn_cuda_convert(sep[0], c16_d, e0, 1, 0, &err));
        uint16_t *q16 = ct_hmalloc(sizeof(uint16_t) * e0), *c16 = ct_hmalloc(sizeof(uint16_t) * e0);
        ct_download(q16, q16_d, sizeof(uint16_t) * e0);
        ct_download(c16, c16_d, sizeof(uint16_t) * e0);
        CHECK_MSG(!memcmp(q16, c16, sizeof(uint16_t) * e0),
                  "head norm + rope: the bf16 copy differs from a convert");
        free(q16), free(c16);
        cudaFree(q16_d), cudaFree(c16_d);
        for (int k = 0; k < KN_NORM_ROPE_MAX_PARTS; k++) {
            const int64_t e = n * shp[k][0] * shp[k][1];
            float *a = dl_f32(sep[k], e), *f = dl_f32(fus[k], e);
            CHECK_MSG(!memcmp(a, f, sizeof(float) * e),
                      "head norm + rope, part %d: differs from the separate calls", k);
            free(a), free(f);
            cudaFree(sep[k]), cudaFree(fus[k]);
        }
        printf("  %-28s bitwise equal to the separate calls (and a convert)\n", "head norm + rope (4 parts)");
        /* a rotation wider than the table or odd is refused */
        struct mm_err e3 = {0};
        parts[0].bf16 = NULL;
        parts[0].rot = rot + 2;
        CHECK(kn_cuda_head_norm_rope(parts, 1, n, ct_d, st_d, rot, 1e-6f, 0, &e3) == MM_INVALID);
        parts[0].rot = 3;
        CHECK(kn_cuda_head_norm_rope(parts, 1, n, ct_d, st_d, rot, 1e-6f, 0, &e3) == MM_INVALID);
        cudaFree(wn_d);
    }
    free(gc), free(gs), free(ct), free(st), free(xh), free(x), free(w), free(b), free(ref);
    cudaFree(x_d), cudaFree(w_d), cudaFree(b_d), cudaFree(o_d), cudaFree(xh_d), cudaFree(pos_d),
        cudaFree(ct_d);
    cudaFree(st_d);
}

static void test_activations(void)
{
    const int64_t n = 5000;
    float *g = ct_hmalloc(sizeof(float) * n), *u = ct_hmalloc(sizeof(float) * n),
          *ref = ct_hmalloc(sizeof(float) * n);
    ct_fill_normal(g, n, 5.0f); /* wide enough to hit both clamps */
    ct_fill_normal(u, n, 5.0f);
    float *g_d = ct_upload(g, sizeof(float) * n), *u_d = ct_upload(u, sizeof(float) * n);
    void *o_d = ct_dmalloc(sizeof(float) * n);
    kn_swiglu_clamped(g, u, n, 1.702f, 7.0f, ref);
    OK(kn_cuda_swiglu(g_d, u_d, 100, n / 100, 100, 1.702f, 7.0f, o_d, 100, 0, 0, &err));
    float *got = dl_f32(o_d, n);
    expect_close("swiglu clamped", got, ref, n, 1e-6);
    free(got);
    for (int32_t kind = 0; kind < 3; kind++) {
        memcpy(ref, g, sizeof(float) * n);
        kn_gelu(ref, n, kind);
        CT_CU(cudaMemcpy(o_d, g, sizeof(float) * n, cudaMemcpyHostToDevice));
        OK(kn_cuda_gelu(o_d, n, kind, 0, &err));
        got = dl_f32(o_d, n);
        expect_close(kind == 0 ? "gelu erf" : kind == 1 ? "gelu tanh" : "gelu quick", got, ref, n, 1e-6);
        free(got);
    }
    free(g), free(u), free(ref);
    cudaFree(g_d), cudaFree(u_d), cudaFree(o_d);
}

/* The element-wise kernels' 4-per-thread forms give the bits of the one-per-thread forms
 * (KN_CUDA_OPS_VEC=0), at a count that is a multiple of 4 (vectorized) and one that is not (fallback), and
 * from a pointer one float in (not 16-byte aligned: fallback) */
static void test_elementwise_vec(void)
{
    const int64_t dim = 1280, rows = 7, n = dim * rows; /* n % 4 == 0 */
    float *x = ct_hmalloc(sizeof(float) * (n + 1)), *y = ct_hmalloc(sizeof(float) * (n + 1));
    float *bias = ct_hmalloc(sizeof(float) * dim);
    ct_fill_normal(x, n + 1, 2.0f);
    ct_fill_normal(y, n + 1, 2.0f);
    ct_fill_normal(bias, dim, 1.0f);
    float *bias_d = ct_upload(bias, sizeof(float) * dim);
    const int64_t counts[3] = {n, n - 3, n}, offs[3] = {0, 0, 1};
    for (int c = 0; c < 3; c++) {
        const int64_t m = counts[c], o = offs[c];
        float *res[2][6];
        for (int vec = 0; vec < 2; vec++) {
            setenv("KN_CUDA_OPS_VEC", vec ? "1" : "0", 1);
            kn_cuda_knobs_reload();
            float *x_d = ct_upload(x, sizeof(float) * (n + 1)), *y_d = ct_upload(y, sizeof(float) * (n + 1));
            float *g_d = ct_upload(x, sizeof(float) * (n + 1)), *b_d = ct_dmalloc(sizeof(float) * (n + 1));
            uint16_t *h_d = ct_dmalloc(sizeof(uint16_t) * (n + 1)),
                     *v_d = ct_dmalloc(sizeof(uint16_t) * (n + 1));
            OK(kn_cuda_add(y_d + o, x_d + o, m, 0, &err));
            OK(kn_cuda_gelu(g_d + o, m, 0, 0, &err));
            /* the bias rows need whole rows: the uneven count is cut to rows, the offset shifts the rows */
            const int64_t mb = m / dim * dim;
            OK(kn_cuda_add_bias_convert(x_d + o, bias_d, mb, (int32_t)dim, b_d + o, 0, 0, &err));
            OK(kn_cuda_add_bias_convert(x_d + o, bias_d, mb, (int32_t)dim, h_d + o, 1, 0, &err));
            OK(kn_cuda_convert(x_d + o, v_d + o, m, 1, 0, &err));
            float *f_d = ct_dmalloc(sizeof(float) * (n + 1)); /* and widened back (bf16 -> f32) */
            CT_CU(cudaMemset(f_d, 0, sizeof(float) * (n + 1)));
            OK(kn_cuda_convert(v_d + o, f_d + o, m, 0, 0, &err));
            res[vec][0] = dl_f32(y_d, n + 1), res[vec][1] = dl_f32(g_d, n + 1),
            res[vec][2] = dl_f32(b_d, n + 1);
            res[vec][3] = dl_bf16(h_d, n + 1), res[vec][4] = dl_bf16(v_d, n + 1);
            res[vec][5] = dl_f32(f_d, n + 1);
            cudaFree(x_d), cudaFree(y_d), cudaFree(g_d), cudaFree(b_d), cudaFree(h_d), cudaFree(v_d);
            cudaFree(f_d);
        }
        /* the widened values are the bf16 values exactly */
        int64_t widened_wrong = 0;
        for (int64_t i = 0; i < m; i++) widened_wrong += res[1][5][o + i] != res[1][4][o + i];
        CHECK_MSG(widened_wrong == 0, "convert bf16 -> f32 (count %lld, offset %lld): %lld values differ",
                  (long long)m, (long long)o, (long long)widened_wrong);
        static const char *names[6] = {"add", "gelu", "bias f32", "bias bf16", "convert", "widen"};
        for (int k = 0; k < 6; k++) {
            const int64_t len = k >= 2 && k <= 3 ? m / dim * dim : m;
            CHECK_MSG(!memcmp(res[0][k] + o, res[1][k] + o, sizeof(float) * len),
                      "element-wise %s (count %lld, offset %lld): 4 per thread differs", names[k],
                      (long long)m, (long long)o);
            free(res[0][k]), free(res[1][k]);
        }
    }
    /* and against the host: the bias rows */
    float *ref = ct_hmalloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) ref[i] = x[i] + bias[i % dim];
    float *x_d = ct_upload(x, sizeof(float) * n), *b_d = ct_dmalloc(sizeof(float) * n);
    OK(kn_cuda_add_bias_convert(x_d, bias_d, n, (int32_t)dim, b_d, 0, 0, &err));
    float *got = dl_f32(b_d, n);
    CHECK_MSG(!memcmp(got, ref, sizeof(float) * n), "add bias (4 per thread) differs from the host sum");
    printf("  %-28s 4 per thread bitwise equal to 1 per thread, 3 layouts\n", "element-wise ops");
    unsetenv("KN_CUDA_OPS_VEC");
    kn_cuda_knobs_reload();
    free(got), free(ref), free(x), free(y), free(bias);
    cudaFree(x_d), cudaFree(b_d), cudaFree(bias_d);
}

/* SwiGLU over packed rows (4 per thread, f32 and bf16 out) against the general kernel, bitwise
 * (KN_CUDA_OPS_VEC=0 picks the general one), and against the host; an odd count from an odd element stays
 * general */
static void test_swiglu_vec(void)
{
    const int64_t n = 2304 * 16; /* a multiple of 4 */
    float *g = ct_hmalloc(sizeof(float) * (n + 1)), *u = ct_hmalloc(sizeof(float) * (n + 1)),
          *ref = ct_hmalloc(sizeof(float) * n);
    ct_fill_normal(g, n + 1, 5.0f);
    ct_fill_normal(u, n + 1, 5.0f);
    kn_swiglu_clamped(g, u, n, 1.702f, 7.0f, ref);
    float *g_d = ct_upload(g, sizeof(float) * (n + 1)), *u_d = ct_upload(u, sizeof(float) * (n + 1));
    float *res[2][3];
    for (int vec = 0; vec < 2; vec++) {
        setenv("KN_CUDA_OPS_VEC", vec ? "1" : "0", 1);
        kn_cuda_knobs_reload();
        float *o_d = ct_dmalloc(sizeof(float) * (n + 1)), *s_d = ct_dmalloc(sizeof(float) * (n + 1));
        uint16_t *h_d = ct_dmalloc(sizeof(uint16_t) * n);
        OK(kn_cuda_swiglu(g_d, u_d, 1, n, 1, 1.702f, 7.0f, o_d, 1, 0, 0, &err)); /* dense MLP */
        OK(kn_cuda_swiglu(g_d, u_d, 1536, n / 1536, 1536, 1.702f, 7.0f, h_d, 1536, 1, 0,
                          &err));                                                            /* MoE, bf16 */
        OK(kn_cuda_swiglu(g_d + 1, u_d + 1, 1, n - 1, 1, 1.702f, 7.0f, s_d, 1, 0, 0, &err)); /* unaligned */
        res[vec][0] = dl_f32(o_d, n), res[vec][1] = dl_bf16(h_d, n), res[vec][2] = dl_f32(s_d, n - 1);
        cudaFree(o_d), cudaFree(s_d), cudaFree(h_d);
    }
    unsetenv("KN_CUDA_OPS_VEC");
    kn_cuda_knobs_reload();
    static const char *names[3] = {"packed", "rows, bf16", "unaligned"};
    const int64_t lens[3] = {n, n, n - 1};
    for (int k = 0; k < 3; k++)
        CHECK_MSG(!memcmp(res[0][k], res[1][k], sizeof(float) * lens[k]),
                  "swiglu %s: differs from the general kernel", names[k]);
    expect_close("swiglu packed", res[1][0], ref, n, 1e-6);
    for (int k = 0; k < 3; k++) free(res[0][k]), free(res[1][k]);
    printf("  %-28s 4 per thread bitwise equal to the general kernel\n", "swiglu");
    free(g), free(u), free(ref);
    cudaFree(g_d), cudaFree(u_d);
}

/* kn_cuda_widen16: every one of the 65,536 bf16 and f16 bit patterns (subnormals, infinities, NaN payloads)
 * widened bit for bit as mm_bf16_to_f32 / mm_f16_to_f32, 4 per thread and 1 per thread (an odd count from
 * an odd element) */
static void test_widen16(void)
{
    const int64_t n = 65536;
    uint16_t *h = ct_hmalloc(sizeof(uint16_t) * (n + 4));
    for (int64_t i = 0; i < n + 4; i++) h[i] = (uint16_t)(i * 40503u); /* a permutation of the patterns */
    uint16_t *h_d = ct_upload(h, sizeof(uint16_t) * (n + 4));
    float *o_d = ct_dmalloc(sizeof(float) * (n + 4));
    for (int f16 = 0; f16 < 2; f16++) {
        for (int shape = 0; shape < 2; shape++) { /* 0: n from element 0 (vector), 1: n - 1 from element 1 */
            const int64_t o = shape, m = n - shape;
            CT_CU(cudaMemset(o_d, 0xff, sizeof(float) * (n + 4)));
            OK(kn_cuda_widen16(h_d + o, f16, o_d + o, m, 0, &err));
            float *got = dl_f32(o_d, n + 4);
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i++) {
                const float want = f16 ? mm_f16_to_f32(h[o + i]) : mm_bf16_to_f32(h[o + i]);
                bad += memcmp(&want, &got[o + i], 4) != 0;
            }
            uint32_t past;
            memcpy(&past, &got[o + m], 4);
            CHECK_MSG(bad == 0, "widen16 %s (count %lld, offset %lld): %lld of %lld values differ",
                      f16 ? "f16" : "bf16", (long long)m, (long long)o, (long long)bad, (long long)m);
            CHECK_MSG(past == 0xffffffffu, "widen16 wrote past its count");
            free(got);
        }
    }
    CHECK_EQ_INT(kn_cuda_widen16(NULL, 0, o_d, 4, 0, &err), MM_INVALID);
    printf("  %-28s all 65536 patterns of bf16 and f16 bitwise equal to the host's, 2 layouts\n", "widen16");
    cudaFree(h_d), cudaFree(o_d), free(h);
}

/* wk_argmax's rule on the host: the first largest value, NaN never chosen, 0 when all are NaN */
static int32_t ref_argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b] || (isnan(x[b]) && !isnan(x[i]))) b = i;
    return (int32_t)b;
}

/* Greedy tokens on the device: M3's vocabulary (200,064) at a row stride past it, ties, NaN, -inf, all-NaN
 * rows, and short rows */
static void test_argmax(void)
{
    const int64_t shapes[][2] = {{200064, 200067}, {1, 1}, {7, 9}, {1025, 1025}, {33000, 33000}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t n = shapes[si][0], ld = shapes[si][1];
        const int32_t rows = 7;
        float *x = ct_hmalloc(sizeof(float) * (size_t)(rows * ld));
        ct_fill_normal(x, rows * ld, 1.0f);
        const float nan = nanf(""), inf = INFINITY;
        /* row 1: the largest value twice (the first wins); row 2: NaN at the front and before the largest;
         * row 3: all NaN; row 4: all -inf; row 5: NaN except one -inf at the end; row 6: one large value */
        if (n > 3) x[1 * ld + n / 3] = 50.0f, x[1 * ld + n - 1] = 50.0f;
        x[2 * ld] = nan;
        if (n > 5) x[2 * ld + n / 2] = 60.0f, x[2 * ld + n / 2 - 1] = nan;
        for (int64_t i = 0; i < n; i++) x[3 * ld + i] = nan, x[4 * ld + i] = -inf, x[5 * ld + i] = nan;
        x[5 * ld + n - 1] = -inf;
        x[6 * ld + n - 1] = 1e30f;
        float *x_d = ct_upload(x, sizeof(float) * (size_t)(rows * ld));
        int32_t *ids_d = ct_dmalloc(sizeof(int32_t) * rows), ids[7];
        OK(kn_cuda_argmax_rows(x_d, rows, n, ld, ids_d, 0, &err));
        ct_download(ids, ids_d, sizeof ids);
        for (int32_t r = 0; r < rows; r++)
            CHECK_MSG(ids[r] == ref_argmax(x + r * ld, n), "argmax n %lld row %d: %d, want %d", (long long)n,
                      r, ids[r], ref_argmax(x + r * ld, n));
        CT_CU(cudaFree(x_d));
        CT_CU(cudaFree(ids_d));
        free(x);
    }
    /* bad arguments */
    CHECK_EQ_INT(kn_cuda_argmax_rows(NULL, 1, 10, 10, NULL, 0, &err), MM_INVALID);
    CHECK_EQ_INT(kn_cuda_argmax_rows((const float *)8, 1, 10, 9, (int32_t *)8, 0, &err), MM_INVALID);
    OK(kn_cuda_argmax_rows(NULL, 0, 10, 10, NULL, 0, &err));
}

static int cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Sampling candidates on the device against kernels/cpu/kn_cands.c: the same count and the same ids (the
 * device's order is arbitrary) at M3's vocabulary and a small one, for k 1-1024 and temperatures 0.05-100,
 * with ties, NaN, -inf, a row of NaN (none), a +inf row, k beyond the valid count, and a skipped row; every
 * other row without the floor (MM_CANDS_EXACT) and with its log-sum-exp, which must be mm_logsumexp's within
 * the double sum's order (a float ulp or two) */
static void test_topk_cands(void)
{
    const int64_t shapes[][2] = {{200064, 200067}, {3000, 3000}};
    enum { ROWS = 9, CAP = 1024 };
    const int32_t ks[ROWS] = {1, 2, 40, 1024, 50, 5, 0, 7, 2990};
    const float ts[ROWS] = {1.0f, 0.05f, 0.7f, 100.0f, 1.0f, 2.0f, 1.0f, 1.0f, 0.5f};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t n = shapes[si][0], ld = shapes[si][1];
        float *x = ct_hmalloc(sizeof(float) * (size_t)(ROWS * ld)),
              *scratch = ct_hmalloc(sizeof(float) * (size_t)n);
        ct_fill_normal(x, ROWS * ld, 3.0f);
        for (int64_t i = 0; i < n; i += 5) x[1 * ld + i] = floorf(x[1 * ld + i]); /* ties */
        for (int64_t i = 0; i < n; i += 13) x[2 * ld + i] = i % 2 ? nanf("") : -INFINITY;
        for (int64_t i = 0; i < n; i++) x[4 * ld + i] = nanf(""); /* none */
        x[5 * ld + n / 2] = INFINITY, x[5 * ld + n - 1] = INFINITY;
        for (int64_t i = 10; i < n; i++) x[8 * ld + i] = nanf(""); /* 10 valid, k 2990 */
        float *x_d = ct_upload(x, sizeof(float) * (size_t)(ROWS * ld));
        struct mm_cand_req req[ROWS];
        memset(req, 0, sizeof req);
        for (int r = 0; r < ROWS; r++)
            req[r].k = ks[r], req[r].t = ts[r], req[r].flags = r % 2 ? MM_CANDS_EXACT | MM_CANDS_LSE : 0;
        struct mm_cand_req *req_d = ct_upload(req, sizeof req);
        float lse[ROWS], *lse_d = ct_dmalloc(sizeof lse);
        int32_t cnt[ROWS] = {0}, *cnt_d = ct_upload(cnt, sizeof cnt);
        int32_t *ids_d = ct_dmalloc(sizeof(int32_t) * ROWS * CAP);
        float *vals_d = ct_dmalloc(sizeof(float) * ROWS * CAP);
        OK(kn_cuda_topk_cands(x_d, ROWS, n, ld, req_d, CAP, cnt_d, ids_d, vals_d, lse_d, NULL, 0, &err));
        ct_download(lse, lse_d, sizeof lse);
        int32_t *ids = ct_hmalloc(sizeof(int32_t) * ROWS * CAP), *ref = ct_hmalloc(sizeof(int32_t) * CAP);
        float *vals = ct_hmalloc(sizeof(float) * ROWS * CAP), *rv = ct_hmalloc(sizeof(float) * CAP);
        ct_download(cnt, cnt_d, sizeof cnt);
        ct_download(ids, ids_d, sizeof(int32_t) * ROWS * CAP);
        ct_download(vals, vals_d, sizeof(float) * ROWS * CAP);
        for (int32_t r = 0; r < ROWS; r++) {
            if (!ks[r]) {
                CHECK_EQ_INT(cnt[r], 0); /* untouched */
                continue;
            }
            const int32_t want = kn_cands_req(x + r * ld, (int32_t)n, &req[r], CAP, ref, rv, scratch);
            if (req[r].flags & MM_CANDS_LSE) {
                const float wl = mm_logsumexp(x + r * ld, (int32_t)n);
                CHECK_MSG((isnan(wl) && isnan(lse[r])) || wl == lse[r] ||
                              fabsf(wl - lse[r]) <= 2.5e-7f * fabsf(wl),
                          "cands n %lld row %d: lse %.9g, want %.9g", (long long)n, r, lse[r], wl);
            }
            CHECK_MSG(cnt[r] == want, "cands n %lld row %d: %d, want %d", (long long)n, r, cnt[r], want);
            if (cnt[r] != want || want > CAP) continue;
            int32_t *g = ids + r * CAP;
            int vals_ok = 1;
            for (int32_t j = 0; j < want; j++) vals_ok &= vals[r * CAP + j] == x[r * ld + g[j]];
            qsort(g, (size_t)want, sizeof(int32_t), cmp_i32);
            CHECK_MSG(memcmp(g, ref, sizeof(int32_t) * (size_t)want) == 0 && vals_ok,
                      "cands n %lld row %d: ids differ", (long long)n, r);
        }
        CHECK_EQ_INT(cnt[4], 0);
        CHECK_EQ_INT(cnt[5], 5); /* no floor (MM_CANDS_EXACT): the two +inf and the three largest finite */
        CT_CU(cudaFree(x_d));
        CT_CU(cudaFree(req_d));
        CT_CU(cudaFree(lse_d));
        CT_CU(cudaFree(cnt_d));
        CT_CU(cudaFree(ids_d));
        CT_CU(cudaFree(vals_d));
        free(x), free(scratch), free(ids), free(ref), free(vals), free(rv);
    }
    CHECK_EQ_INT(kn_cuda_topk_cands(NULL, 1, 10, 10, NULL, 4, NULL, NULL, NULL, NULL, NULL, 0, &err),
                 MM_INVALID);
}

/* The draw on the device against kernels/cpu/kn_draw.c: the same token for rows without top-k whose
 * candidates do not fit, at M3's vocabulary and a small one, under temperatures 0.3-5, top-p, min-p (one
 * that keeps nothing but the first), both together, and uniforms 0, 0.5 and just below 1; flat rows,
 * coarse ties (floor), all-equal rows, NaN and -inf sprinkled; and rows that must not be drawn from: draw 0,
 * a top-k that cuts, candidates that fit, a +inf logit. With a keys buffer (every other configuration) a
 * drawn row also returns its token's logit, and rows asking for n_top (5 or 40) the top list after it: the
 * ids of kn_cands_req's exact top n_top (ties included), in any order, with their logits; without one the
 * keys overwrite the row and the logit is NaN. Candidate counts follow kn_cands_req with n_top. */
static void test_topk_draw(void)
{
    const int64_t shapes[][2] = {{200064, 200064}, {3000, 3001}};
    enum { ROWS = 10, CAP = 1024 };
    struct cfg {
        float t, top_p, min_p;
        double u;
    };
    static const struct cfg cfgs[] = {{1.0f, 1.0f, 0.0f, 0.5},   {1.0f, 0.95f, 0.0f, 0.25},
                                      {0.7f, 0.9f, 0.0f, 0.0},   {2.0f, 0.5f, 0.0f, 0.999999999999},
                                      {1.0f, 1.0f, 0.05f, 0.75}, {5.0f, 0.8f, 0.001f, 0.125},
                                      {0.3f, 0.99f, 2.0f, 0.5},  {1.0f, 0.001f, 0.0f, 0.9}};
    int64_t drawn = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t n = shapes[si][0], ld = shapes[si][1];
        float *x = ct_hmalloc(sizeof(float) * (size_t)(ROWS * ld));
        uint32_t *keys = ct_hmalloc(sizeof(uint32_t) * (size_t)n);
        float *scratch = ct_hmalloc(sizeof(float) * (size_t)n), *rv = ct_hmalloc(sizeof(float) * CAP);
        int32_t *ids = ct_hmalloc(sizeof(int32_t) * ROWS * CAP), *ref = ct_hmalloc(sizeof(int32_t) * CAP);
        float *x_d = ct_dmalloc(sizeof(float) * (size_t)(ROWS * ld));
        int32_t *cnt_d = ct_dmalloc(sizeof(int32_t) * ROWS),
                *ids_d = ct_dmalloc(sizeof(int32_t) * ROWS * CAP);
        float *vals_d = ct_dmalloc(sizeof(float) * ROWS * CAP);
        struct mm_cand_req *req_d = ct_dmalloc(sizeof(struct mm_cand_req) * ROWS);
        float *lse_d = ct_dmalloc(sizeof(float) * ROWS);
        uint32_t *keys_d = ct_dmalloc(sizeof(uint32_t) * (size_t)(ROWS * ld));
        float *vals = ct_hmalloc(sizeof(float) * ROWS * CAP);
        int32_t *tl = ct_hmalloc(sizeof(int32_t) * (size_t)n);
        float *tv = ct_hmalloc(sizeof(float) * (size_t)n);
        for (size_t ci = 0; ci < sizeof cfgs / sizeof cfgs[0]; ci++) {
            const int with_keys = ci % 2 == 0;
            ct_fill_normal(x, ROWS * ld, 1.0f + (float)ci);
            for (int64_t i = 0; i < n; i++) x[1 * ld + i] = floorf(x[1 * ld + i] * 2.0f); /* coarse ties */
            for (int64_t i = 0; i < n; i++) x[2 * ld + i] = 0.25f;                        /* all equal */
            for (int64_t i = 0; i < n; i += 7) x[3 * ld + i] = i % 2 ? nanf("") : -INFINITY;
            for (int64_t i = 0; i < n; i++) x[6 * ld + i] = 1.0f; /* all equal */
            x[7 * ld + n / 3] = 1e4f;                             /* peaked: its candidates fit */
            x[8 * ld + n / 2] = INFINITY;                         /* +inf: the whole row */
            struct mm_cand_req req[ROWS];
            for (int r = 0; r < ROWS; r++)
                req[r] = (struct mm_cand_req){.k = INT32_MAX,
                                              .t = cfgs[ci].t,
                                              .top_p = cfgs[ci].top_p,
                                              .min_p = cfgs[ci].min_p,
                                              .draw = 1,
                                              .u = cfgs[ci].u};
            req[5].draw = 0; /* asked for candidates only */
            req[6].k = 50;   /* a top-k that cuts (every token ties: all are candidates) */
            req[9].u = 0.0625 * (double)ci;
            for (int r = 0; r < 6; r++) req[r].n_top = r % 3 == 0 ? 0 : r % 3 == 1 ? 5 : 40;
            req[9].n_top = 3;
            req[7].n_top = 5; /* the peaked row: its 5 largest although 4 of them are below the floor */
            CT_CU(cudaMemcpy(x_d, x, sizeof(float) * (size_t)(ROWS * ld), cudaMemcpyHostToDevice));
            CT_CU(cudaMemcpy(req_d, req, sizeof req, cudaMemcpyHostToDevice));
            OK(kn_cuda_topk_cands(x_d, ROWS, n, ld, req_d, CAP, cnt_d, ids_d, vals_d, lse_d,
                                  with_keys ? keys_d : NULL, 0, &err));
            int32_t cnt[ROWS];
            ct_download(cnt, cnt_d, sizeof cnt);
            ct_download(ids, ids_d, sizeof(int32_t) * ROWS * CAP);
            ct_download(vals, vals_d, sizeof(float) * ROWS * CAP);
            for (int32_t r = 0; r < ROWS; r++) {
                const float *xr = x + r * ld;
                const int32_t want = kn_draw(xr, (int32_t)n, &req[r], keys);
                const int32_t nc = kn_cands_req(xr, (int32_t)n, &req[r], CAP, ref, rv, scratch);
                if (nc > CAP && want >= 0) {
                    drawn++;
                    CHECK_MSG(cnt[r] == MM_CANDS_DRAWN && ids[r * CAP] == want,
                              "draw n %lld cfg %zu row %d: count %d token %d, want %d", (long long)n, ci, r,
                              cnt[r], ids[r * CAP], want);
                    if (cnt[r] != MM_CANDS_DRAWN || ids[r * CAP] != want) continue;
                    const float lv = vals[r * CAP];
                    CHECK_MSG(with_keys ? lv == xr[want] : isnan(lv), "draw n %lld cfg %zu row %d: logit %g",
                              (long long)n, ci, r, lv);
                    if (!req[r].n_top) continue;
                    const struct mm_cand_req tq = {.k = req[r].n_top, .t = req[r].t, .flags = MM_CANDS_EXACT};
                    /* the whole set (ascending ids); a list that fills its cap - 1 slots (ties by the
                     * thousand) holds any cap - 1 of it */
                    const int32_t nt = kn_cands_req(xr, (int32_t)n, &tq, (int32_t)n, tl, tv, scratch);
                    int32_t got = 0, vok = 1;
                    while (got < CAP - 1 && ids[r * CAP + 1 + got] >= 0) {
                        vok &= vals[r * CAP + 1 + got] == xr[ids[r * CAP + 1 + got]];
                        got++;
                    }
                    int32_t *gl = ids + r * CAP + 1;
                    qsort(gl, (size_t)got, sizeof(int32_t), cmp_i32);
                    for (int32_t a = 0; a < got; a++)
                        vok &= (a == 0 || gl[a] > gl[a - 1]) &&
                               bsearch(&gl[a], tl, (size_t)nt, sizeof(int32_t), cmp_i32) != NULL;
                    CHECK_MSG(got == (nt < CAP - 1 ? nt : CAP - 1) && vok,
                              "draw n %lld cfg %zu row %d: top list of %d, want %d", (long long)n, ci, r, got,
                              nt);
                } else {
                    CHECK_MSG(cnt[r] == nc, "draw n %lld cfg %zu row %d: count %d, want candidates %d",
                              (long long)n, ci, r, cnt[r], nc);
                }
            }
            CHECK(cnt[6] == n && cnt[7] == 5 && cnt[8] == 1);
        }
        CT_CU(cudaFree(x_d));
        CT_CU(cudaFree(req_d));
        CT_CU(cudaFree(lse_d));
        CT_CU(cudaFree(cnt_d));
        CT_CU(cudaFree(ids_d));
        CT_CU(cudaFree(vals_d));
        CT_CU(cudaFree(keys_d));
        free(x), free(keys), free(scratch), free(rv), free(ids), free(ref), free(vals), free(tl), free(tv);
    }
    CHECK_MSG(drawn >= 40, "only %lld rows drawn from", (long long)drawn);
}

static void test_embed_dequant(void)
{
    const int32_t vocab = 300, dim = 64;
    float *tab = ct_hmalloc(sizeof(float) * vocab * dim);
    uint16_t *tb = ct_hmalloc(sizeof(uint16_t) * vocab * dim);
    ct_fill_normal(tab, vocab * dim, 1.0f);
    ct_to_bf16(tab, tb, vocab * dim);
    int32_t ids[5] = {0, 299, 17, 300, -1}; /* the last two are out of range */
    void *tb_d = ct_upload(tb, sizeof(uint16_t) * vocab * dim);
    int32_t *ids_d = ct_upload(ids, sizeof(ids));
    int32_t zero = 0;
    int32_t *bad_d = ct_upload(&zero, sizeof(zero));
    float *o_d = ct_dmalloc(sizeof(float) * 5 * dim);
    OK(kn_cuda_embed(tb_d, vocab, dim, ids_d, 5, o_d, bad_d, 0, &err));
    float *got = dl_f32(o_d, 5 * dim);
    int32_t bad = 0;
    ct_download(&bad, bad_d, sizeof(bad));
    int64_t wrong = 0;
    for (int32_t i = 0; i < 5; i++)
        for (int32_t d = 0; d < dim; d++) {
            float want = ids[i] >= 0 && ids[i] < vocab ? mm_bf16_to_f32(tb[ids[i] * dim + d]) : 0.0f;
            wrong += got[i * dim + d] != want;
        }
    CHECK_MSG(wrong == 0, "embed: %lld wrong elements", (long long)wrong);
    CHECK_EQ_INT(bad, 1);
    free(got);

    /* FP8 block-scaled weight 200 x 300 with 128 x 128 blocks (ragged edges) */
    const int64_t R = 200, C = 300, SR = 2, SC = 3;
    uint8_t *w8 = ct_hmalloc((size_t)(R * C));
    float sc[6], *ref = ct_hmalloc(sizeof(float) * R * C);
    for (int k = 0; k < 6; k++) sc[k] = 0.001f * (float)(k + 1);
    for (int64_t e = 0; e < R * C; e++) {
        w8[e] = (uint8_t)(ct_next() & 0xff);
        if ((w8[e] & 0x7f) == 0x7f) w8[e] = 0x10; /* no NaN codes */
        ref[e] = ct_bf16_round(mm_f8e4m3_to_f32(w8[e]) * sc[(e / C / 128) * SC + (e % C) / 128]);
    }
    (void)SR;
    uint8_t *w8_d = ct_upload(w8, (size_t)(R * C));
    float *sc_d = ct_upload(sc, sizeof(sc));
    void *out_d = ct_dmalloc((size_t)(R * C) * 2);
    OK(kn_cuda_dequant_fp8_block(w8_d, sc_d, R, C, 128, 128, out_d, 0, &err));
    got = dl_bf16(out_d, R * C);
    wrong = 0;
    for (int64_t e = 0; e < R * C; e++) wrong += got[e] != ref[e];
    CHECK_MSG(wrong == 0, "fp8 dequant: %lld wrong elements", (long long)wrong);
    free(got), free(w8), free(ref), free(tab), free(tb);

    /* scatter of media rows into the hidden states */
    {
        float *base = ct_hmalloc(sizeof(float) * 10 * 8), *data = ct_hmalloc(sizeof(float) * 3 * 8);
        ct_fill_normal(base, 80, 1.0f);
        ct_fill_normal(data, 24, 1.0f);
        int64_t rows[3] = {7, 0, 4};
        float *b_d = ct_upload(base, sizeof(float) * 80), *d_d = ct_upload(data, sizeof(float) * 24);
        int64_t *r_d = ct_upload(rows, sizeof(rows));
        OK(kn_cuda_scatter_rows(b_d, 8, r_d, d_d, 3, 0, &err));
        for (int j = 0; j < 3; j++) memcpy(base + rows[j] * 8, data + j * 8, sizeof(float) * 8);
        float *g2 = dl_f32(b_d, 80);
        CHECK(memcmp(g2, base, sizeof(float) * 80) == 0);
        free(g2), free(base), free(data);
        cudaFree(b_d), cudaFree(d_d), cudaFree(r_d);
    }
    cudaFree(tb_d), cudaFree(ids_d), cudaFree(bad_d), cudaFree(o_d), cudaFree(w8_d), cudaFree(sc_d),
        cudaFree(out_d);
}

/* One vision attention case against the CPU twin: the warp-per-row kernel on f32 inputs (tc 0), or the
 * tensor-core one on the same bf16-rounded q, k, v (tc 1: what is left is the probabilities' bf16 rounding
 * and the summation order, METHOD.md: bf16 operands land at 1e-3..1e-2), whose too small workspace is refused
 */
static void attn_full_case(int64_t n, int32_t heads, int32_t hd, int tc)
{
    const int64_t stride = (int64_t)heads * hd, tot = n * stride;
    float *q = ct_hmalloc(sizeof(float) * tot), *k = ct_hmalloc(sizeof(float) * tot);
    float *v = ct_hmalloc(sizeof(float) * tot), *ref = ct_hmalloc(sizeof(float) * tot);
    float *scr = ct_hmalloc(sizeof(float) * n * n);
    ct_fill_normal(q, tot, 1.0f);
    ct_fill_normal(k, tot, 1.0f);
    ct_fill_normal(v, tot, 1.0f);
    for (int64_t e = 0; tc && e < tot; e++)
        q[e] = ct_bf16_round(q[e]), k[e] = ct_bf16_round(k[e]), v[e] = ct_bf16_round(v[e]);
    const float scale = 1.0f / sqrtf((float)hd);
    kn_attn_full(q, k, v, stride, n, heads, hd, scale, ref, stride, scr, n * n);
    float *q_d = ct_upload(q, sizeof(float) * tot), *k_d = ct_upload(k, sizeof(float) * tot);
    float *v_d = ct_upload(v, sizeof(float) * tot), *o_d = ct_dmalloc(sizeof(float) * tot);
    const size_t wsb = tc ? kn_cuda_attn_full_tc_ws(n, heads, hd) : 0;
    void *ws = NULL;
    if (tc) {
        CHECK(wsb > 0);
        ws = ct_dmalloc(wsb);
        OK(kn_cuda_attn_full_tc(q_d, k_d, v_d, stride, n, heads, hd, scale, o_d, stride, ws, wsb, 0, &err));
    } else {
        OK(kn_cuda_attn_full(q_d, k_d, v_d, stride, n, heads, hd, scale, o_d, stride, 0, &err));
    }
    float *got = dl_f32(o_d, tot);
    char what[64];
    snprintf(what, sizeof what, "vision attention %s%lldx%dx%d", tc ? "tc " : "", (long long)n, heads, hd);
    expect_close(what, got, ref, tot, tc ? 1e-2 : 1e-5);
    if (tc) {
        CHECK(kn_cuda_attn_full_tc(q_d, k_d, v_d, stride, n, heads, hd, scale, o_d, stride, ws, wsb - 1, 0,
                                   &err) == MM_INVALID);
        /* only the k-steps that hold head_dim take part: the same bits as all 8 (zeros past head_dim) */
        setenv("KN_CUDA_ATTN_FULL_KS", "8", 1);
        kn_cuda_knobs_reload();
        OK(kn_cuda_attn_full_tc(q_d, k_d, v_d, stride, n, heads, hd, scale, o_d, stride, ws, wsb, 0, &err));
        unsetenv("KN_CUDA_ATTN_FULL_KS");
        kn_cuda_knobs_reload();
        float *all8 = dl_f32(o_d, tot);
        CHECK_MSG(!memcmp(all8, got, sizeof(float) * tot), "%s: head_dim's k-steps differ from all 8", what);
        free(all8);
        /* CTAs of 2, 3, 4, 8 warps instead of 6: every warp folds the keys in the same order, same bits */
        static const char *const ws_w[] = {"2", "3", "4", "8"};
        for (int wi = 0; wi < 4; wi++) {
            setenv("KN_CUDA_ATTN_FULL_W", ws_w[wi], 1);
            kn_cuda_knobs_reload();
            OK(kn_cuda_attn_full_tc(q_d, k_d, v_d, stride, n, heads, hd, scale, o_d, stride, ws, wsb, 0,
                                    &err));
            float *gw = dl_f32(o_d, tot);
            CHECK_MSG(!memcmp(gw, got, sizeof(float) * tot), "%s: CTAs of %s warps differ from 6", what,
                      ws_w[wi]);
            free(gw);
        }
        unsetenv("KN_CUDA_ATTN_FULL_W");
        kn_cuda_knobs_reload();
    }
    free(got), free(q), free(k), free(v), free(ref), free(scr);
    cudaFree(q_d), cudaFree(k_d), cudaFree(v_d), cudaFree(o_d), cudaFree(ws);
}

/* Both kernels; the tensor-core one also on edge shapes: one row, rows not a multiple of the 64-query and
 * 64-key tiles, head_dim 16..128, and a head_dim above 128 it does not take */
static void test_attn_full(void)
{
    attn_full_case(45, 4, 16, 0);
    attn_full_case(300, 16, 80, 0);
    static const struct {
        int64_t n;
        int32_t heads, hd;
    } shapes[] = {{1, 1, 80},   {45, 4, 16},  {64, 2, 72},   {129, 3, 128},
                  {100, 2, 96}, {70, 2, 100}, {300, 16, 80}, {777, 16, 80}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        attn_full_case(shapes[si].n, shapes[si].heads, shapes[si].hd, 1);
    CHECK(kn_cuda_attn_full_tc_ws(100, 2, 144) == 0);
}

/* The MoE gather and combine's row-wise 16-byte forms give the bits of the one-element-per-thread forms
 * (KN_CUDA_OPS_VEC=0): a row of a few 16-byte pieces, one longer than a CTA's stride (1540 = 385 pieces),
 * and a width that is not whole pieces (fallback); f32 and bf16 gathers, combines through a pair map with
 * dropped pairs (-1) and without one */
static void test_moe_vec(void)
{
    static const int32_t dims[] = {24, 1540, 22};
    const int64_t n = 37;
    const int32_t K = 3;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int32_t dim = dims[di];
        const int64_t xs = dim + 4 * (di == 1); /* a padded source row once */
        const int64_t P = n * K;
        int32_t *perm = ct_hmalloc(sizeof(int32_t) * P), *inv = ct_hmalloc(sizeof(int32_t) * P);
        for (int64_t j = 0; j < P; j++) perm[j] = (int32_t)((j * 7 + 3) % P); /* 7 is prime to 111 */
        for (int64_t j = 0; j < P; j++) inv[j] = j % 5 == 2 ? -1 : (int32_t)((j * 11 + 1) % P);
        float *x = ct_hmalloc(sizeof(float) * n * xs), *e = ct_hmalloc(sizeof(float) * P * dim);
        float *y = ct_hmalloc(sizeof(float) * n * dim), *w = ct_hmalloc(sizeof(float) * P);
        ct_fill_normal(x, n * xs, 1.0f);
        ct_fill_normal(e, P * dim, 1.0f);
        ct_fill_normal(y, n * dim, 1.0f);
        ct_fill_normal(w, P, 0.5f);
        float *x_d = ct_upload(x, sizeof(float) * n * xs), *e_d = ct_upload(e, sizeof(float) * P * dim);
        float *w_d = ct_upload(w, sizeof(float) * P);
        int32_t *perm_d = ct_upload(perm, sizeof(int32_t) * P), *inv_d = ct_upload(inv, sizeof(int32_t) * P);
        float *res[2][4];
        for (int vec = 0; vec < 2; vec++) {
            setenv("KN_CUDA_OPS_VEC", vec ? "1" : "0", 1);
            kn_cuda_knobs_reload();
            float *gf_d = ct_dmalloc(sizeof(float) * P * dim);
            uint16_t *gb_d = ct_dmalloc(sizeof(uint16_t) * P * dim);
            float *y1_d = ct_upload(y, sizeof(float) * n * dim),
                  *y2_d = ct_upload(y, sizeof(float) * n * dim);
            OK(kn_cuda_moe_gather(x_d, xs, perm_d, P, K, dim, gf_d, 0, 0, &err));
            OK(kn_cuda_moe_gather(x_d, xs, perm_d, P, K, dim, gb_d, 1, 0, &err));
            OK(kn_cuda_moe_combine(e_d, inv_d, w_d, n, K, dim, y1_d, dim, 0, &err));
            OK(kn_cuda_moe_combine(e_d, NULL, w_d, n, K, dim, y2_d, dim, 0, &err));
            res[vec][0] = dl_f32(gf_d, P * dim), res[vec][1] = dl_bf16(gb_d, P * dim);
            res[vec][2] = dl_f32(y1_d, n * dim), res[vec][3] = dl_f32(y2_d, n * dim);
            cudaFree(gf_d), cudaFree(gb_d), cudaFree(y1_d), cudaFree(y2_d);
        }
        static const char *names[4] = {"gather f32", "gather bf16", "combine (map)", "combine (no map)"};
        for (int k = 0; k < 4; k++) {
            const int64_t len = (k < 2 ? P : n) * dim;
            CHECK_MSG(!memcmp(res[0][k], res[1][k], sizeof(float) * (size_t)len),
                      "moe %s, width %d: 16-byte form differs from one element per thread", names[k], dim);
            free(res[0][k]), free(res[1][k]);
        }
        /* and the f32 gather against the host */
        float *g = ct_hmalloc(sizeof(float) * P * dim);
        setenv("KN_CUDA_OPS_VEC", "1", 1);
        kn_cuda_knobs_reload();
        float *g_d = ct_dmalloc(sizeof(float) * P * dim);
        OK(kn_cuda_moe_gather(x_d, xs, perm_d, P, K, dim, g_d, 0, 0, &err));
        ct_download(g, g_d, sizeof(float) * P * dim);
        int64_t wrong = 0;
        for (int64_t j = 0; j < P; j++)
            for (int32_t d = 0; d < dim; d++) wrong += g[j * dim + d] != x[(perm[j] / K) * xs + d];
        CHECK_MSG(wrong == 0, "moe gather f32, width %d: %lld wrong", dim, (long long)wrong);
        free(g), free(perm), free(inv), free(x), free(e), free(y), free(w);
        cudaFree(g_d), cudaFree(x_d), cudaFree(e_d), cudaFree(w_d), cudaFree(perm_d), cudaFree(inv_d);
    }
    unsetenv("KN_CUDA_OPS_VEC");
    kn_cuda_knobs_reload();
    printf("  %-28s 16-byte forms bitwise equal to one element per thread, 3 widths\n", "moe gather/combine");
}

static void test_moe(void)
{
    const int64_t n = 50;
    const int32_t E = 130, K = 4, dim = 24;
    float *lg = ct_hmalloc(sizeof(float) * n * E), *bias = ct_hmalloc(sizeof(float) * E);
    ct_fill_normal(lg, n * E, 2.0f);
    ct_fill_normal(bias, E, 0.5f);
    for (int32_t e = 0; e < 8; e++) lg[e] = 1.0f, bias[e] = 0.0f; /* ties in row 0: lower ids win */
    float *lg_d = ct_upload(lg, sizeof(float) * n * E), *bias_d = ct_upload(bias, sizeof(float) * E);
    int32_t *ids_d = ct_dmalloc(sizeof(int32_t) * n * K);
    float *w_d = ct_dmalloc(sizeof(float) * n * K);
    OK(kn_cuda_moe_route(lg_d, bias_d, n, E, K, 2.0f, ids_d, w_d, 0, &err));
    int32_t *ids = ct_hmalloc(sizeof(int32_t) * n * K);
    float *w = dl_f32(w_d, n * K);
    ct_download(ids, ids_d, sizeof(int32_t) * n * K);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) {
        /* reference: sigmoid + bias, top-K with ties to the lower id, raw sigmoids renormalized x 2 */
        int32_t pick[4];
        float best[4];
        int32_t cnt = 0;
        for (int32_t e = 0; e < E; e++) {
            float s = 1.0f / (1.0f + expf(-lg[i * E + e])), v = s + bias[e];
            if (cnt == K && !(v > best[K - 1])) continue;
            int32_t at = cnt < K ? cnt : K - 1;
            while (at > 0 && v > best[at - 1]) best[at] = best[at - 1], pick[at] = pick[at - 1], at--;
            best[at] = v, pick[at] = e;
            if (cnt < K) cnt++;
        }
        double sum = 0;
        for (int32_t k = 0; k < K; k++) sum += 1.0 / (1.0 + exp(-(double)lg[i * E + pick[k]]));
        for (int32_t k = 0; k < K; k++) {
            double want = 2.0 / (1.0 + exp(-(double)lg[i * E + pick[k]])) / sum;
            wrong += ids[i * K + k] != pick[k] || fabs(w[i * K + k] - want) > 1e-5;
        }
    }
    CHECK_MSG(wrong == 0, "moe route: %lld wrong (ids or weights)", (long long)wrong);

    /* sort, gather, combine: a permutation grouped by expert, and the weighted sum back */
    int32_t *off_d = ct_dmalloc(sizeof(int32_t) * (E + 1)), *perm_d = ct_dmalloc(sizeof(int32_t) * n * K);
    int32_t *inv_d = ct_dmalloc(sizeof(int32_t) * n * K);
    OK(kn_cuda_moe_sort(ids_d, n, K, E, off_d, perm_d, inv_d, 0, &err));
    int32_t *off = ct_hmalloc(sizeof(int32_t) * (E + 1)), *perm = ct_hmalloc(sizeof(int32_t) * n * K);
    int32_t *inv = ct_hmalloc(sizeof(int32_t) * n * K);
    ct_download(off, off_d, sizeof(int32_t) * (E + 1));
    ct_download(perm, perm_d, sizeof(int32_t) * n * K);
    ct_download(inv, inv_d, sizeof(int32_t) * n * K);
    wrong = off[0] != 0 || off[E] != n * K;
    for (int32_t e = 0; e < E; e++)
        for (int32_t j = off[e]; j < off[e + 1]; j++) wrong += ids[perm[j]] != e || inv[perm[j]] != j;
    CHECK_MSG(wrong == 0, "moe sort: %lld inconsistencies", (long long)wrong);

    float *x = ct_hmalloc(sizeof(float) * n * dim), *y = ct_hmalloc(sizeof(float) * n * dim);
    ct_fill_normal(x, n * dim, 1.0f);
    ct_fill_normal(y, n * dim, 1.0f);
    float *x_d = ct_upload(x, sizeof(float) * n * dim), *y_d = ct_upload(y, sizeof(float) * n * dim);
    void *g_d = ct_dmalloc(sizeof(uint16_t) * n * K * dim);
    OK(kn_cuda_moe_gather(x_d, dim, perm_d, n * K, K, dim, g_d, 1, 0, &err));
    float *gx = dl_bf16(g_d, n * K * dim);
    wrong = 0;
    for (int64_t j = 0; j < n * K; j++)
        for (int32_t d = 0; d < dim; d++)
            wrong += gx[j * dim + d] != ct_bf16_round(x[(perm[j] / K) * dim + d]);
    CHECK_MSG(wrong == 0, "moe gather: %lld wrong", (long long)wrong);
    /* expert outputs: row j's output = its gathered row (as f32) times (expert id + 1) */
    float *eo = ct_hmalloc(sizeof(float) * n * K * dim), *ref = ct_hmalloc(sizeof(float) * n * dim);
    for (int64_t j = 0; j < n * K; j++)
        for (int32_t d = 0; d < dim; d++) eo[j * dim + d] = gx[j * dim + d] * (float)(ids[perm[j]] + 1);
    memcpy(ref, y, sizeof(float) * n * dim);
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = 0; k < K; k++)
            for (int32_t d = 0; d < dim; d++)
                ref[i * dim + d] +=
                    w[i * K + k] * ct_bf16_round(x[i * dim + d]) * (float)(ids[i * K + k] + 1);
    float *eo_d = ct_upload(eo, sizeof(float) * n * K * dim);
    OK(kn_cuda_moe_combine(eo_d, inv_d, w_d, n, K, dim, y_d, dim, 0, &err));
    float *got = dl_f32(y_d, n * dim);
    expect_close("moe combine", got, ref, n * dim, 1e-6);
    free(got), free(eo), free(ref), free(gx), free(x), free(y), free(off), free(perm), free(inv), free(ids),
        free(w);
    free(lg), free(bias);
    cudaFree(lg_d), cudaFree(bias_d), cudaFree(ids_d), cudaFree(w_d), cudaFree(off_d), cudaFree(perm_d);
    cudaFree(inv_d), cudaFree(x_d), cudaFree(y_d), cudaFree(g_d), cudaFree(eo_d);
}

static void test_gemm(void)
{
    struct kn_cuda_blas *bl = NULL;
    OK(kn_cuda_blas_create(&bl, 0, &err));
    if (!bl) return;
    const int64_t m = 77, n = 300, k = 520;
    float *a = ct_hmalloc(sizeof(float) * m * k), *w = ct_hmalloc(sizeof(float) * n * k);
    float *ref = ct_hmalloc(sizeof(float) * m * n);
    uint16_t *ab = ct_hmalloc(sizeof(uint16_t) * m * k), *wb = ct_hmalloc(sizeof(uint16_t) * n * k);
    ct_fill_normal(a, m * k, 1.0f);
    ct_fill_normal(w, n * k, 0.05f);
    ct_to_bf16(a, ab, m * k);
    ct_to_bf16(w, wb, n * k);
    ct_from_bf16(ab, a, m * k);
    ct_from_bf16(wb, w, n * k);
    kn_sgemm_nt(m, n, k, a, k, w, k, 0.0f, ref, n);
    void *a_d = ct_upload(ab, sizeof(uint16_t) * m * k), *w_d = ct_upload(wb, sizeof(uint16_t) * n * k);
    void *c_d = ct_dmalloc(sizeof(float) * m * n);
    OK(kn_cuda_gemm_bf16(bl, m, n, k, a_d, k, w_d, k, 0.0f, c_d, n, 0, &err));
    float *got = dl_f32(c_d, m * n);
    expect_close("gemm bf16 -> f32", got, ref, m * n, 1e-5);
    free(got);
    OK(kn_cuda_gemm_bf16(bl, m, n, k, a_d, k, w_d, k, 0.0f, c_d, n, 1, &err));
    got = dl_bf16(c_d, m * n);
    expect_close("gemm bf16 -> bf16", got, ref, m * n, 4e-3);
    free(got);
    /* the bias in cuBLASLt's epilogue: the product plus bias[n] (the vision tower's biased linears), the
     * same values as the product and a separate bias pass; also into a 4-byte-aligned output (a row offset
     * of one float), which either runs or is refused as MM_UNSUPPORTED, never wrong */
    {
        float *bias = ct_hmalloc(sizeof(float) * n), *rb = ct_hmalloc(sizeof(float) * m * n);
        ct_fill_normal(bias, n, 1.0f);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) rb[i * n + j] = ref[i * n + j] + bias[j];
        float *bias_d = ct_upload(bias, sizeof(float) * n);
        float *cb_d = ct_dmalloc(sizeof(float) * (m * n + 1));
        OK(kn_cuda_gemm_bf16_bias(bl, m, n, k, a_d, k, w_d, k, bias_d, cb_d, n, &err));
        got = dl_f32(cb_d, m * n);
        expect_close("gemm bf16 + bias (cuBLASLt epilogue)", got, rb, m * n, 1e-5);
        free(got);
        for (int rep = 0; rep < 2; rep++) { /* the second call reuses the shape's plan */
            struct mm_err e2 = {0};
            const int32_t rc = kn_cuda_gemm_bf16_bias(bl, m, n, k, a_d, k, w_d, k, bias_d, cb_d + 1, n, &e2);
            CHECK_MSG(rc == MM_OK || rc == MM_UNSUPPORTED, "gemm bias, 4-byte output: rc %d (%s)", (int)rc,
                      e2.msg);
            if (rc == MM_OK) {
                got = dl_f32(cb_d + 1, m * n);
                expect_close("gemm bf16 + bias, 4-byte-aligned output", got, rb, m * n, 1e-5);
                free(got);
            }
        }
        struct mm_err e3 = {0};
        CHECK(kn_cuda_gemm_bf16_bias(bl, m, n, k, a_d, k, w_d, k, NULL, cb_d, n, &e3) == MM_INVALID);
        free(bias), free(rb);
        cudaFree(bias_d), cudaFree(cb_d);
    }
    /* plain fp32 (the router and index projections): exact to fp32 rounding */
    {
        float *af_d = ct_upload(a, sizeof(float) * m * k), *wf_d = ct_upload(w, sizeof(float) * n * k);
        float *cf_d = ct_dmalloc(sizeof(float) * m * n);
        OK(kn_cuda_gemm_f32(bl, m, n, k, af_d, k, wf_d, k, 0.0f, cf_d, n, &err));
        got = dl_f32(cf_d, m * n);
        expect_close("gemm f32", got, ref, m * n, 1e-6);
        free(got);
        cudaFree(af_d), cudaFree(wf_d), cudaFree(cf_d);
    }
    /* batched: 3 products over consecutive slices of A and W (m/3 rows, n/3 columns each) */
    const int64_t mb = 25, nb = 100;
    OK(kn_cuda_gemm_bf16_batched(bl, mb, nb, k, a_d, k, mb * k, w_d, k, nb * k, 0.0f, c_d, nb, mb * nb, 0, 3,
                                 &err));
    got = dl_f32(c_d, 3 * mb * nb);
    float *rb = ct_hmalloc(sizeof(float) * 3 * mb * nb);
    for (int b = 0; b < 3; b++)
        kn_sgemm_nt(mb, nb, k, a + b * mb * k, k, w + b * nb * k, k, 0.0f, rb + b * mb * nb, nb);
    expect_close("gemm bf16 batched", got, rb, 3 * mb * nb, 1e-5);
    free(got), free(rb), free(a), free(w), free(ref), free(ab), free(wb);
    cudaFree(a_d), cudaFree(w_d), cudaFree(c_d);
    kn_cuda_blas_destroy(bl);
}

/* One bf16 product case of the decode products: x [n][ldx] f32 and W [rows][cols] (bf16 on the device), y
 * with row stride ldy; ref = the CPU product of the operands rounded as the kernels round them (x to bf16) */
struct bf16_case {
    int64_t n, rows, cols, ldx, ldy;
    float *x, *xr, *w, *ref;
    uint16_t *wb;
    float *x_d, *y_d;
    void *w_d;
};

static void bf16_case_make(struct bf16_case *c, int64_t n, int64_t rows, int64_t cols, int64_t ldx,
                           int64_t ldy)
{
    *c = (struct bf16_case){.n = n, .rows = rows, .cols = cols, .ldx = ldx, .ldy = ldy};
    c->x = ct_hmalloc(sizeof(float) * n * ldx), c->xr = ct_hmalloc(sizeof(float) * n * cols);
    c->w = ct_hmalloc(sizeof(float) * rows * cols), c->ref = ct_hmalloc(sizeof(float) * n * rows);
    c->wb = ct_hmalloc(sizeof(uint16_t) * rows * cols);
    ct_fill_normal(c->x, n * ldx, 1.0f);
    ct_fill_normal(c->w, rows * cols, 0.05f);
    ct_to_bf16(c->w, c->wb, rows * cols);
    ct_from_bf16(c->wb, c->w, rows * cols);
    for (int64_t j = 0; j < n; j++)
        for (int64_t k = 0; k < cols; k++) c->xr[j * cols + k] = ct_bf16_round(c->x[j * ldx + k]);
    kn_sgemm_nt(n, rows, cols, c->xr, cols, c->w, cols, 0.0f, c->ref, rows);
    c->x_d = ct_upload(c->x, sizeof(float) * n * ldx);
    c->w_d = ct_upload(c->wb, sizeof(uint16_t) * rows * cols);
    c->y_d = ct_dmalloc(sizeof(float) * n * ldy);
}

/* The device result against ref (relative 1e-5), the padding between y rows untouched (0xff bytes: NaN);
 * frees the case */
static void bf16_case_check(struct bf16_case *c, const char *what)
{
    const int64_t n = c->n, rows = c->rows, ldy = c->ldy;
    float *got = dl_f32(c->y_d, n * ldy), *g2 = ct_hmalloc(sizeof(float) * n * rows);
    for (int64_t j = 0; j < n; j++) memcpy(g2 + j * rows, got + j * ldy, sizeof(float) * rows);
    expect_close(what, g2, c->ref, n * rows, 1e-5);
    int untouched = 1;
    for (int64_t j = 0; j + 1 < n; j++)
        for (int64_t r = rows; r < ldy; r++) untouched &= isnan(got[j * ldy + r]);
    CHECK_MSG(untouched, "%s: wrote past its rows", what);
    free(got), free(g2), free(c->x), free(c->xr), free(c->w), free(c->ref), free(c->wb);
    cudaFree(c->x_d), cudaFree(c->w_d), cudaFree(c->y_d);
}

/* Decode-sized products (kn_cuda_gemv_bf16): n = 1..4 rows of f32 x (rounded to bf16 inside) against the same
 * product of the rounded operands on the CPU; rows not a multiple of the kernel's 4, x with a row stride
 * wider than cols, y rows strided; shapes it must refuse. */
static void test_gemv(void)
{
    static const int64_t shapes[][2] = {{8199, 6144}, {37, 64}, {300, 2048}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int64_t n = 1; n <= KN_GEMV_MAX_N; n++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            struct bf16_case c;
            bf16_case_make(&c, n, rows, cols, cols + 8, rows + 3);
            CHECK(kn_cuda_gemv_ok(n, cols, c.ldx));
            OK(kn_cuda_gemv_bf16(n, rows, cols, c.x_d, c.ldx, c.w_d, c.y_d, c.ldy, 0, &err));
            char what[96];
            snprintf(what, sizeof what, "gemv %lld x %lld, n %lld", (long long)rows, (long long)cols,
                     (long long)n);
            bf16_case_check(&c, what);
        }
    /* several weights with one x in one launch (q/k/v, gate/up): the same bits as one kn_cuda_gemv_bf16 each;
     * rows of different tile counts (CTAs past a weight's rows exit) */
    for (int64_t n = 1; n <= 2; n++) {
        static const int64_t mrows[3] = {300, 37, 129};
        const int64_t cols = 2048, ldx = cols + 4;
        float *x = ct_hmalloc(sizeof(float) * n * ldx);
        ct_fill_normal(x, n * ldx, 1.0f);
        float *x_d = ct_upload(x, sizeof(float) * n * ldx);
        const void *wd[3];
        float *ys[3], *ym[3];
        for (int k = 0; k < 3; k++) {
            float *wf = ct_hmalloc(sizeof(float) * mrows[k] * cols);
            uint16_t *wb = ct_hmalloc(sizeof(uint16_t) * mrows[k] * cols);
            ct_fill_normal(wf, mrows[k] * cols, 0.05f);
            ct_to_bf16(wf, wb, mrows[k] * cols);
            wd[k] = ct_upload(wb, sizeof(uint16_t) * mrows[k] * cols);
            ys[k] = ct_dmalloc(sizeof(float) * n * mrows[k]),
            ym[k] = ct_dmalloc(sizeof(float) * n * mrows[k]);
            OK(kn_cuda_gemv_bf16(n, mrows[k], cols, x_d, ldx, wd[k], ys[k], mrows[k], 0, &err));
            free(wf), free(wb);
        }
        OK(kn_cuda_gemv_bf16_multi(3, wd, mrows, ym, n, cols, x_d, ldx, 0, &err));
        for (int k = 0; k < 3; k++) {
            float *a = dl_f32(ys[k], n * mrows[k]), *b = dl_f32(ym[k], n * mrows[k]);
            CHECK_MSG(!memcmp(a, b, sizeof(float) * n * mrows[k]), "gemv multi n %lld weight %d: differs",
                      (long long)n, k);
            free(a), free(b);
            cudaFree((void *)wd[k]), cudaFree(ys[k]), cudaFree(ym[k]);
        }
        free(x);
        cudaFree(x_d);
    }
    printf("  %-28s bitwise equal to one call per weight\n", "gemv multi (3 weights)");
    {
        struct mm_err e3 = {0};
        const void *w0[1] = {(const void *)16};
        int64_t r0[1] = {4};
        float *y0[1] = {(float *)16};
        CHECK(kn_cuda_gemv_bf16_multi(KN_GEMV_MULTI_MAX + 1, w0, r0, y0, 1, 64, (const float *)16, 64, 0,
                                      &e3) == MM_INVALID);
        CHECK(kn_cuda_gemv_bf16_multi(1, w0, r0, y0, KN_GEMV_MAX_N + 1, 64, (const float *)16, 64, 0, &e3) ==
              MM_INVALID);
    }
    /* f32 weights (router, index projections): against the f32 CPU product; every n up to 16 (5-8 and 9-16
     * share the kernels for 8 and 16 rows, which must neither read nor store the rows past n), on shapes that
     * take every plan: 100 x 6144 and 21 x 2048 (one weight row per CTA, fewer tiles than SMs: the inner
     * dimension split over a 2-CTA cluster; rows not a multiple of 8), 600 x 1056 (4 or 8 rows per CTA, no
     * split: 1056 / 4 chunks are not a multiple of 16) */
    static const int64_t f32_shapes[][2] = {{100, 6144}, {600, 1056}, {21, 2048}};
    /* the plan, then forced by the benchmark knobs: 8 weight rows per CTA (from 5 activation rows on), and 1
     * row per CTA at every n with a 2-way split */
    static const char *f32_knobs[][2] = {{NULL, NULL}, {"8", NULL}, {"1", "2"}};
    int split_seen = 0;
    for (int pass = 0; pass < 9 * KN_GEMV_F32_MAX_N; pass++) {
        const int cfg = pass / (3 * KN_GEMV_F32_MAX_N), si = pass / KN_GEMV_F32_MAX_N % 3;
        if (f32_knobs[cfg][0]) knob_setenv("KN_CUDA_GEMV_F32_R", f32_knobs[cfg][0], 1);
        if (f32_knobs[cfg][1]) knob_setenv("KN_CUDA_GEMV_F32_KS", f32_knobs[cfg][1], 1);
        const int64_t n = pass % KN_GEMV_F32_MAX_N + 1, rows = f32_shapes[si][0];
        const int64_t cols = f32_shapes[si][1], ldx = cols + 4;
        float *x = ct_hmalloc(sizeof(float) * n * ldx), *xs = ct_hmalloc(sizeof(float) * n * cols);
        float *w = ct_hmalloc(sizeof(float) * rows * cols), *ref = ct_hmalloc(sizeof(float) * n * rows);
        ct_fill_normal(x, n * ldx, 1.0f);
        ct_fill_normal(w, rows * cols, 0.05f);
        for (int64_t j = 0; j < n; j++) memcpy(xs + j * cols, x + j * ldx, sizeof(float) * cols);
        kn_sgemm_nt(n, rows, cols, xs, cols, w, cols, 0.0f, ref, rows);
        float *x_d = ct_upload(x, sizeof(float) * n * ldx), *w_d = ct_upload(w, sizeof(float) * rows * cols);
        float *y_d = ct_dmalloc(sizeof(float) * (n + 1) * rows); /* one row more: must stay untouched */
        split_seen += kn_cuda_gemv_f32_split(n, rows, cols) > 1;
        CHECK(kn_cuda_gemv_f32_ok(n, cols, ldx));
        OK(kn_cuda_gemv_f32(n, rows, cols, x_d, ldx, w_d, y_d, rows, 0, &err));
        float *got = dl_f32(y_d, (n + 1) * rows);
        int untouched = 1;
        for (int64_t r = 0; r < n * rows + rows; r++)
            untouched &= r < n * rows ? !isnan(got[r]) : isnan(got[r]);
        CHECK_MSG(untouched, "gemv f32 %lld x %lld n %lld: a row not stored, or stored past row n",
                  (long long)rows, (long long)cols, (long long)n);
        char what[96];
        snprintf(what, sizeof what, "gemv f32 %lld x %lld, n %lld", (long long)rows, (long long)cols,
                 (long long)n);
        expect_close(what, got, ref, n * rows, 1e-6);
        free(got), free(x), free(xs), free(w), free(ref);
        cudaFree(x_d), cudaFree(w_d), cudaFree(y_d);
    }
    knob_unsetenv("KN_CUDA_GEMV_F32_R");
    knob_unsetenv("KN_CUDA_GEMV_F32_KS");
    /* 100 x 6144 and 21 x 2048 split at every n in every configuration, 600 x 1056 never */
    CHECK_MSG(split_seen == 6 * KN_GEMV_F32_MAX_N, "gemv f32: %d of %d cases split the inner dimension",
              split_seen, 6 * KN_GEMV_F32_MAX_N);
    /* the staged f32 route (kn_cuda_gemv_f32_multi): an MSA layer's index projections (512 and 128 rows) and
     * a weight with a partial 32-row tile (37 rows) in one launch, at every n (the 4-, 8- and 16-row kernels
     * must neither read nor store rows past n), over 6144 and 1024 columns (8-way splits in clusters), and
     * 128 columns (no split); against the f32 CPU product, twice with the same bits */
    static const int64_t mf_cols[3] = {6144, 1024, 128};
    static const int64_t mf_rows[3] = {512, 128, 37};
    for (int ci = 0; ci < 3; ci++)
        for (int64_t n = 1; n <= KN_GEMV_F32_MAX_N; n++) {
            const int64_t cols = mf_cols[ci], ldx = cols + 4;
            float *x = ct_hmalloc(sizeof(float) * n * ldx), *xs = ct_hmalloc(sizeof(float) * n * cols);
            ct_fill_normal(x, n * ldx, 1.0f);
            for (int64_t j = 0; j < n; j++) memcpy(xs + j * cols, x + j * ldx, sizeof(float) * cols);
            float *x_d = ct_upload(x, sizeof(float) * n * ldx);
            const float *wd[3];
            float *yd[3], *yd2[3], *wh[3];
            for (int k = 0; k < 3; k++) {
                wh[k] = ct_hmalloc(sizeof(float) * mf_rows[k] * cols);
                ct_fill_normal(wh[k], mf_rows[k] * cols, 0.05f);
                wd[k] = ct_upload(wh[k], sizeof(float) * mf_rows[k] * cols);
                yd[k] = ct_dmalloc(sizeof(float) * (n + 1) * mf_rows[k]); /* a row more: must stay NaN */
                yd2[k] = ct_dmalloc(sizeof(float) * n * mf_rows[k]);
            }
            CHECK(kn_cuda_gemv_f32_multi_ok(n, cols, ldx));
            OK(kn_cuda_gemv_f32_multi(3, wd, mf_rows, yd, n, cols, x_d, ldx, 0, &err));
            OK(kn_cuda_gemv_f32_multi(3, wd, mf_rows, yd2, n, cols, x_d, ldx, 0, &err));
            for (int k = 0; k < 3; k++) {
                const int64_t rows = mf_rows[k];
                float *ref = ct_hmalloc(sizeof(float) * n * rows);
                kn_sgemm_nt(n, rows, cols, xs, cols, wh[k], cols, 0.0f, ref, rows);
                float *got = dl_f32(yd[k], (n + 1) * rows), *got2 = dl_f32(yd2[k], n * rows);
                int untouched = 1;
                for (int64_t r = 0; r < n * rows + rows; r++)
                    untouched &= r < n * rows ? !isnan(got[r]) : isnan(got[r]);
                CHECK_MSG(untouched,
                          "gemv f32 multi %lld x %lld n %lld: a row not stored, or stored past row n",
                          (long long)rows, (long long)cols, (long long)n);
                CHECK_MSG(!memcmp(got, got2, sizeof(float) * n * rows),
                          "gemv f32 multi %lld x %lld n %lld: two calls differ", (long long)rows,
                          (long long)cols, (long long)n);
                char what[96];
                snprintf(what, sizeof what, "gemv f32 multi %lld x %lld, n %lld", (long long)rows,
                         (long long)cols, (long long)n);
                expect_close(what, got, ref, n * rows, 1e-6);
                free(ref), free(got), free(got2), free(wh[k]);
                cudaFree((void *)wd[k]), cudaFree(yd[k]), cudaFree(yd2[k]);
            }
            free(x), free(xs);
            cudaFree(x_d);
        }
    {
        struct mm_err e3 = {0};
        const float *w0[1] = {(const float *)16};
        int64_t r0[1] = {4};
        float *y0[1] = {(float *)16};
        CHECK(!kn_cuda_gemv_f32_multi_ok(1, 64, 64) && !kn_cuda_gemv_f32_multi_ok(17, 128, 128) &&
              kn_cuda_gemv_f32_multi_ok(16, 128, 128));
        CHECK(kn_cuda_gemv_f32_multi(1, w0, r0, y0, 1, 64, (const float *)16, 64, 0, &e3) == MM_INVALID);
        CHECK(kn_cuda_gemv_f32_multi(KN_GEMV_MULTI_MAX + 1, w0, r0, y0, 1, 128, (const float *)16, 128, 0,
                                     &e3) == MM_INVALID);
    }
    struct mm_err e2 = {0};
    CHECK(!kn_cuda_gemv_f32_ok(1, 48, 48) && kn_cuda_gemv_f32_ok(KN_GEMV_F32_MAX_N, 64, 64) &&
          !kn_cuda_gemv_f32_ok(KN_GEMV_F32_MAX_N + 1, 64, 64));
    CHECK(!kn_cuda_gemv_ok(5, 64, 64) && !kn_cuda_gemv_ok(1, 96, 96) && !kn_cuda_gemv_ok(0, 64, 64));
    CHECK(kn_cuda_gemv_bf16(1, 4, 100, (const float *)16, 100, (const void *)16, (float *)16, 4, 0, &e2) ==
          MM_INVALID);
}

/* Decode products at up to 16 rows on the tensor cores (kn_cuda_gemm_small_bf16): every n from 1 to 16 on a
 * shape that splits the inner dimension over CTAs (512 rows), the LM head's odd row count, a long inner
 * dimension that takes the pipelined loads with a remainder (300 x 6400: 25 blocks per warp), rows not a
 * multiple of 16, x and y with wider row strides; against the CPU product of the rounded operands. Both
 * routes: the row route (k_gemm_rows: 128 rows per CTA, activations staged in shared memory, a k split of up
 * to 64 CTAs summed through the workspace) by default for 2048+ rows and 4096+ columns and forced elsewhere
 * (KN_CUDA_GS_ROWS=2: odd rows, partial 128-row tiles, 50- and 64-way splits), the 16-row route otherwise
 * and forced (KN_CUDA_GS_ROWS=0). */
static void test_gemm_small(void)
{
    /* knob: KN_CUDA_GS_CLUSTER for the pass on the 16-row route (NULL: the default, a cluster where the
     * split runs in one wave; "0": the workspace and a second kernel, 512 x 6144; "2": clusters in several
     * waves, 2048 x 6144, 512 CTAs); rows: KN_CUDA_GS_ROWS (NULL: the default) */
    static const struct {
        int64_t rows, cols, n_step;
        const char *knob, *rows_knob;
    } cases[] = {{512, 6144, 1, NULL, NULL},  {8199, 2048, 5, NULL, NULL}, {300, 6400, 5, NULL, NULL},
                 {2048, 6144, 3, NULL, NULL}, {37, 256, 5, NULL, NULL},    {512, 6144, 3, NULL, "2"},
                 {8199, 2048, 5, NULL, "2"},  {300, 6400, 5, NULL, "2"},   {6144, 2048, 5, NULL, "2"},
                 {2048, 6144, 5, NULL, "0"},  {512, 6144, 1, "0", NULL},   {2048, 6144, 7, "2", "0"}};
    for (size_t si = 0; si < sizeof cases / sizeof cases[0]; si++)
        for (int64_t n = 1; n <= 16; n += cases[si].n_step) {
            if (cases[si].knob) knob_setenv("KN_CUDA_GS_CLUSTER", cases[si].knob, 1);
            if (cases[si].rows_knob) knob_setenv("KN_CUDA_GS_ROWS", cases[si].rows_knob, 1);
            const int64_t rows = cases[si].rows, cols = cases[si].cols;
            struct bf16_case c;
            bf16_case_make(&c, n, rows, cols, cols + 4, rows + 5);
            const size_t wsb = kn_cuda_gemm_small_ws(n, rows, cols);
            void *ws_d = wsb ? ct_dmalloc(wsb) : NULL;
            CHECK(kn_cuda_gemm_small_ok(n, cols, c.ldx));
            OK(kn_cuda_gemm_small_bf16(n, rows, cols, c.x_d, c.ldx, c.w_d, c.y_d, c.ldy, ws_d, wsb, 0, &err));
            char what[128];
            snprintf(what, sizeof what, "gemm small %lld x %lld, n %lld, GS_ROWS=%s%s%s", (long long)rows,
                     (long long)cols, (long long)n, cases[si].rows_knob ? cases[si].rows_knob : "default",
                     wsb ? ", k split, GS_CLUSTER=" : "",
                     wsb ? (cases[si].knob ? cases[si].knob : "default") : "");
            bf16_case_check(&c, what);
            if (ws_d) cudaFree(ws_d);
            knob_unsetenv("KN_CUDA_GS_CLUSTER");
            knob_unsetenv("KN_CUDA_GS_ROWS");
        }
    /* two weights of one shape with one x in one row-route launch (gate and up;
     * kn_cuda_gemm_small_bf16_multi): each against its CPU product, y rows strided (the padding untouched);
     * 2048 x 6144 by the default rule, odd rows / partial 128-row tiles and a short inner dimension with the
     * row route forced (GS_ROWS=2) */
    static const struct {
        int64_t rows, cols;
        const char *rows_knob;
    } mcases[] = {{2048, 6144, NULL}, {300, 6400, "2"}, {6144, 2048, "2"}};
    int multi_runs = 0;
    for (size_t si = 0; si < sizeof mcases / sizeof mcases[0]; si++)
        for (int64_t n = 1; n <= 16; n += n < 13 ? 3 : 1) {
            if (mcases[si].rows_knob) knob_setenv("KN_CUDA_GS_ROWS", mcases[si].rows_knob, 1);
            const int64_t rows = mcases[si].rows, cols = mcases[si].cols;
            struct bf16_case c[2];
            bf16_case_make(&c[0], n, rows, cols, cols + 4, rows + 5);
            bf16_case_make(&c[1], n, rows, cols, cols + 4, rows + 5);
            /* the second weight reads the first case's x */
            kn_sgemm_nt(n, rows, cols, c[0].xr, cols, c[1].w, cols, 0.0f, c[1].ref, rows);
            CHECK(kn_cuda_gemm_small_multi_ok(2, n, rows, cols, c[0].ldx));
            const size_t wsb = kn_cuda_gemm_small_multi_ws(2, n, rows, cols);
            void *ws_d = wsb ? ct_dmalloc(wsb) : NULL;
            const void *pw[2] = {c[0].w_d, c[1].w_d};
            float *py[2] = {c[0].y_d, c[1].y_d};
            OK(kn_cuda_gemm_small_bf16_multi(2, pw, n, rows, cols, c[0].x_d, c[0].ldx, py, c[0].ldy, ws_d,
                                             wsb, 0, &err));
            multi_runs++;
            for (int k = 0; k < 2; k++) {
                char what[128];
                snprintf(what, sizeof what, "gemm small x2 %lld x %lld, n %lld, weight %d%s", (long long)rows,
                         (long long)cols, (long long)n, k, wsb ? ", k split" : "");
                bf16_case_check(&c[k], what);
            }
            if (ws_d) cudaFree(ws_d);
            knob_unsetenv("KN_CUDA_GS_ROWS");
        }
    CHECK_MSG(multi_runs == 24, "gemm small x2: %d of 24 cases ran", multi_runs);
    /* not where a weight alone would not take the row route (512 rows by default), nor 3 weights */
    CHECK(!kn_cuda_gemm_small_multi_ok(2, 16, 512, 6144, 6144) &&
          !kn_cuda_gemm_small_multi_ok(3, 16, 2048, 6144, 6144));
    struct mm_err e2 = {0};
    CHECK(!kn_cuda_gemm_small_ok(17, 256, 256) && !kn_cuda_gemm_small_ok(4, 128, 128));
    /* the route: cuBLAS for large weights in whole 128-row tiles, this kernel for few tiles or odd rows */
    CHECK(!kn_cuda_gemm_small_prefer(4, 8192, 6144) && kn_cuda_gemm_small_prefer(4, 8199, 6144) &&
          kn_cuda_gemm_small_prefer(16, 512, 6144) && !kn_cuda_gemm_small_prefer(17, 512, 6144));
    /* 512 rows split the inner dimension: without the workspace the call is refused before any launch */
    CHECK(kn_cuda_gemm_small_ws(4, 512, 6144) > 0);
    CHECK(kn_cuda_gemm_small_bf16(4, 512, 6144, (const float *)16, 6144, (const void *)16, (float *)16, 512,
                                  NULL, 0, 0, &e2) == MM_INVALID);
}

/* The expert weights of the MoE product tests: two tables (gate, up) of E experts of rows x cols, random,
 * rounded to bf16 (w: the rounded values in f32, for the CPU reference), uploaded (w_d), and the device table
 * of the 2 E per-expert pointers (tab_d: gate experts first). Draws after the caller's activations. */
struct expert_tabs {
    float *w;
    uint16_t *wb;
    void *w_d, *tab_d;
};

static void expert_tabs_make(struct expert_tabs *t, int E, int64_t rows, int64_t cols)
{
    const int64_t elems = 2 * E * rows * cols;
    t->w = ct_hmalloc(sizeof(float) * elems);
    t->wb = ct_hmalloc(sizeof(uint16_t) * elems);
    ct_fill_normal(t->w, elems, 0.05f);
    ct_to_bf16(t->w, t->wb, elems);
    ct_from_bf16(t->wb, t->w, elems);
    t->w_d = ct_upload(t->wb, sizeof(uint16_t) * elems);
    const void **tab = ct_hmalloc(sizeof(void *) * 2 * E);
    for (int e = 0; e < 2 * E; e++) tab[e] = (const uint16_t *)t->w_d + (int64_t)e * rows * cols;
    t->tab_d = ct_upload(tab, sizeof(void *) * 2 * E);
    free(tab);
}

static void expert_tabs_free(struct expert_tabs *t)
{
    free(t->w), free(t->wb);
    cudaFree(t->w_d), cudaFree(t->tab_d);
}

/* MoE products grouped by expert on the device (kn_cuda_gemm_small_experts_bf16): experts with 0, 1, 5, 16,
 * 17 and 40 rows (one 16-row chunk, a partial chunk, several chunks), rows not a multiple of 16, inner
 * dimensions of 512 and 96 (a multiple of 32, not of 256: warps with no k blocks), gate and up
 * from two tables in one launch, then one table; against the CPU products of the rounded operands, by the
 * register-fed kernel and the cp.async ring (with and without the activations a block ahead), whose outputs
 * must be bitwise the register-fed kernel's. Rows of y outside every expert's range stay untouched. */
static void test_gemm_small_experts(int64_t cols)
{
    enum { E = 6 };
    const int32_t cnt[E] = {5, 0, 17, 1, 40, 16};
    int32_t off[E + 1] = {0};
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + cnt[e];
    const int64_t P = off[E], rows = 40, ldx = cols + 4, ldy = rows + 3;
    float *x = ct_hmalloc(sizeof(float) * P * ldx), *xr = ct_hmalloc(sizeof(float) * P * cols);
    ct_fill_normal(x, P * ldx, 1.0f);
    struct expert_tabs et;
    expert_tabs_make(&et, E, rows, cols);
    const float *w = et.w;
    void *tab_d = et.tab_d;
    for (int64_t p = 0; p < P; p++)
        for (int64_t k = 0; k < cols; k++) xr[p * cols + k] = ct_bf16_round(x[p * ldx + k]);
    int32_t *off_d = ct_upload(off, sizeof off);
    float *x_d = ct_upload(x, sizeof(float) * P * ldx);
    float *ya_d = ct_dmalloc(sizeof(float) * P * ldy), *yb_d = ct_dmalloc(sizeof(float) * P * ldy);
    float *ref = ct_hmalloc(sizeof(float) * P * rows), *g2 = ct_hmalloc(sizeof(float) * P * rows);
    float *first[3] = {NULL, NULL, NULL}; /* [tables == 1 ? 2 : half] of the register-fed kernel */
    for (int rg = 0; rg < 3; rg++) /* KN_CUDA_GS_EXPERTS_RING: the register-fed kernel, the ring, + x ahead */
        for (int tables = 2; tables >= 1; tables--) {
            char rv[2] = {(char)('0' + rg), 0};
            knob_setenv("KN_CUDA_GS_EXPERTS_RING", rv, 1);
            OK(kn_cuda_gemm_small_experts_bf16(E, off_d, rows, cols, x_d, ldx, (const void *const *)tab_d,
                                               tables == 2 ? (const void *const *)tab_d + E : NULL, ya_d,
                                               tables == 2 ? yb_d : NULL, ldy, 0, &err));
            for (int half = 0; half < tables; half++) {
                for (int e = 0; e < E; e++)
                    if (cnt[e])
                        kn_sgemm_nt(cnt[e], rows, cols, xr + (int64_t)off[e] * cols, cols,
                                    w + ((int64_t)half * E + e) * rows * cols, cols, 0.0f,
                                    ref + off[e] * rows, rows);
                float *got = dl_f32(half ? yb_d : ya_d, P * ldy);
                int untouched = 1;
                for (int64_t p = 0; p < P; p++) {
                    memcpy(g2 + p * rows, got + p * ldy, sizeof(float) * rows);
                    for (int64_t r = rows; r + 1 < ldy && p + 1 < P; r++)
                        untouched &= isnan(got[p * ldy + r]);
                }
                char what[80];
                snprintf(what, sizeof what, "gemm small experts, %lld cols, %s, ring %d", (long long)cols,
                         tables == 1 ? "one table"
                         : half      ? "second table"
                                     : "first table",
                         rg);
                expect_close(what, g2, ref, P * rows, 1e-5);
                CHECK_MSG(untouched, "%s: wrote past its rows", what);
                const int slot = tables == 1 ? 2 : half;
                if (rg == 0) {
                    first[slot] = got;
                } else {
                    CHECK_MSG(!memcmp(first[slot], got, sizeof(float) * P * ldy),
                              "%s: differs from the register-fed kernel's bits", what);
                    free(got);
                }
            }
        }
    knob_unsetenv("KN_CUDA_GS_EXPERTS_RING");
    for (int k = 0; k < 3; k++) free(first[k]);
    struct mm_err e2 = {0};
    CHECK(kn_cuda_gemm_small_experts_bf16(E, off_d, rows, 100, x_d, 100, (const void *const *)tab_d, NULL,
                                          ya_d, NULL, ldy, 0, &e2) == MM_INVALID);
    OK(kn_cuda_gemm_small_experts_bf16(0, NULL, rows, cols, NULL, ldx, NULL, NULL, NULL, NULL, ldy, 0, &err));
    free(x), free(xr), free(ref), free(g2);
    expert_tabs_free(&et);
    cudaFree(off_d), cudaFree(x_d), cudaFree(ya_d), cudaFree(yb_d);
}

/* MoE prefill products grouped by expert on the device with wgmma (kn_cuda_gemm_experts_bf16): experts with
 * 0, 1, 7, 64 (the second warpgroup has no rows), 65, 130, 200 and 300 rows (row tiles cut anywhere: 1-4 of a
 * tile's 64-row quarters used),
 * weights of 384 rows (the second 256-row tile half empty) and 264 (not a multiple of 128), inner dimensions
 * of 192 and 128 (3 and 2 k-slices), gate and up from two tables in one launch, then one table; 300 experts
 * of 0-9 rows (the tile prefix over every lane of the scan). Against the CPU products of the bf16 operands;
 * rows of y past the experts' rows and columns past the weight's rows stay untouched. */
static void gemm_experts_case(int E, const int32_t *cnt, int64_t rows, int64_t cols, int tables, int tile)
{
    int32_t *off = ct_hmalloc(sizeof(int32_t) * (size_t)(E + 1));
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + cnt[e];
    const int64_t P = off[E], n = P + 5, ldx = cols + 8, ldy = rows + 2;
    float *x = ct_hmalloc(sizeof(float) * n * ldx), *xr = ct_hmalloc(sizeof(float) * n * cols);
    uint16_t *xb = ct_hmalloc(sizeof(uint16_t) * n * ldx);
    ct_fill_normal(x, n * ldx, 1.0f);
    ct_to_bf16(x, xb, n * ldx);
    for (int64_t p = 0; p < n; p++)
        for (int64_t k = 0; k < cols; k++) xr[p * cols + k] = ct_bf16_round(x[p * ldx + k]);
    struct expert_tabs et;
    expert_tabs_make(&et, E, rows, cols);
    int32_t *off_d = ct_upload(off, sizeof(int32_t) * (size_t)(E + 1));
    uint16_t *x_d = ct_upload(xb, sizeof(uint16_t) * n * ldx);
    float *y_d[2] = {ct_dmalloc(sizeof(float) * n * ldy), ct_dmalloc(sizeof(float) * n * ldy)};
    /* the CPU products of each table, once for every pass */
    float *ref[2] = {ct_hmalloc(sizeof(float) * P * rows), ct_hmalloc(sizeof(float) * P * rows)};
    float *g2 = ct_hmalloc(sizeof(float) * P * rows);
    for (int half = 0; half < tables; half++)
        for (int e = 0; e < E; e++)
            if (cnt[e])
                kn_sgemm_nt(cnt[e], rows, cols, xr + (int64_t)off[e] * cols, cols,
                            et.w + ((int64_t)half * E + e) * rows * cols, cols, 0.0f,
                            ref[half] + off[e] * rows, rows);
    /* the weights' tensor maps: the TMA loads with the quarters without rows skipped (the first call,
     * KN_CUDA_EXPERTS_SKIP=1), then without maps the cp.async loads, then TMA with every quarter of a tile
     * loaded and multiplied (KN_CUDA_EXPERTS_SKIP=0), L2 eviction hints on the loads (KN_CUDA_EXPERTS_L2=1)
     * in the static tile order (no tile counter): the same bits. The counter starts as garbage: the call
     * zeroes it. */
    const void **wh = ct_hmalloc(sizeof(void *) * 2 * (size_t)E);
    for (int e = 0; e < 2 * E; e++) wh[e] = (const uint16_t *)et.w_d + (int64_t)e * rows * cols;
    void *maps = NULL;
    OK(kn_cuda_experts_maps_create(wh, 2 * E, rows, cols, &maps, &err));
    float *tma[2] = {NULL, NULL};
    const int32_t junk = 12345;
    int32_t *ctr = ct_upload(&junk, sizeof junk);
    for (int pass = 0; pass < 3; pass++) {
        for (int h = 0; h < 2; h++) /* NaN again: each pass must write every row itself */
            CHECK(cudaMemset(y_d[h], 0xff, sizeof(float) * n * ldy) == cudaSuccess);
        if (pass == 2) knob_setenv("KN_CUDA_EXPERTS_L2", "1", 1); /* L2 hints: the same bits */
        if (pass != 1) {
            knob_setenv("KN_CUDA_EXPERTS_SKIP", pass ? "0" : "1", 1);
            const int plan = kn_cuda_gemm_experts_plan(E, n, rows, cols, pass == 0);
            CHECK_MSG((plan & 1) == (tile == 2) && (plan >> 1 & 1) == !pass,
                      "experts plan %d for tile knob %d, skip knob %d", plan, tile, !pass);
        }
        const int cp = pass == 1;
        OK(kn_cuda_gemm_experts_bf16(
            E, off_d, n, rows, cols, x_d, ldx, (const void *const *)et.tab_d,
            tables == 2 ? (const void *const *)et.tab_d + E : NULL, cp ? NULL : maps,
            cp || tables == 1 ? NULL : (const uint8_t *)maps + (size_t)E * KN_CUDA_TMAP_BYTES, y_d[0],
            tables == 2 ? y_d[1] : NULL, ldy, pass == 2 ? NULL : ctr, 0, &err));
        if (pass != 1) knob_unsetenv("KN_CUDA_EXPERTS_SKIP");
        if (pass == 2) knob_unsetenv("KN_CUDA_EXPERTS_L2");
        for (int half = 0; half < tables; half++) {
            float *got = dl_f32(y_d[half], n * ldy);
            int untouched = 1;
            for (int64_t p = 0; p < n; p++) {
                if (p < P) memcpy(g2 + p * rows, got + p * ldy, sizeof(float) * rows);
                for (int64_t r = p < P ? rows : 0; r < ldy; r++) untouched &= isnan(got[p * ldy + r]);
            }
            char what[160];
            snprintf(what, sizeof what, "gemm experts, %s, %d experts %lldx%lld, %s, %s",
                     tile == 2 ? "256x128" : "128x256", E, (long long)rows, (long long)cols,
                     tables == 1 ? "one table"
                     : half      ? "second table"
                                 : "first table",
                     pass == 1 ? "cp.async"
                     : pass    ? "TMA, no quarter skipped, L2 hints, static order"
                               : "TMA");
            expect_close(what, g2, ref[half], P * rows, 1e-5);
            CHECK_MSG(untouched, "%s: wrote outside its rows", what);
            if (!pass)
                tma[half] = got;
            else {
                CHECK_MSG(!memcmp(got, tma[half], sizeof(float) * n * ldy), "%s: not the TMA loads' bits",
                          what);
                free(got);
                if (pass == 2) free(tma[half]);
            }
        }
    }
    kn_cuda_experts_maps_free(maps);
    cudaFree(ctr);
    free(wh);
    free(off), free(x), free(xr), free(xb), free(ref[0]), free(ref[1]), free(g2);
    expert_tabs_free(&et);
    cudaFree(off_d), cudaFree(x_d), cudaFree(y_d[0]), cudaFree(y_d[1]);
}

/* Rows per expert for the grouped expert products' tests: empty experts (first and inside), one row, the
 * 64-row quarter and 128-row tile edges, more rows than a 256-row tile */
static const int32_t g_expert_rows[9] = {0, 1, 130, 64, 65, 300, 0, 7, 200};

static void test_gemm_experts(void)
{
    const int32_t *cnt = g_expert_rows;
    int32_t many[300];
    for (int e = 0; e < 300; e++) many[e] = (int32_t)(ct_next() % 10);
    /* both tile shapes (KN_CUDA_EXPERTS_TILE; by default chosen from the rows per expert) */
    for (int tile = 1; tile <= 2; tile++) {
        knob_setenv("KN_CUDA_EXPERTS_TILE", tile == 2 ? "2" : "1", 1);
        gemm_experts_case(9, cnt, 384, 192, 2, tile);
        gemm_experts_case(9, cnt, 264, 128, 1, tile);
        gemm_experts_case(300, many, 256, 64, 2, tile);
    }
    knob_unsetenv("KN_CUDA_EXPERTS_TILE");
    /* without knobs, the static order: M3's experts (128 of 3072 x 6144, top-4) at 8192 tokens (256 rows
     * each) 128 x 256 tiles that multiply every quarter, at 256 tokens ones that skip the empty quarters; 32
     * experts of 9216 x 6144 at 2048 tokens top-2 (128 rows each) 256 x 128 tiles, skipping; small experts
     * with many rows (64 of 512 x 4096, top-8, 8192 tokens) 128 x 256, every quarter. The dynamic order
     * skips always, with the same tile shapes */
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(128, 8192 * 4, 3072, 6144, 0), 0);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(128, 256 * 4, 3072, 6144, 0), 2);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(32, 2048 * 2, 9216, 6144, 0), 3);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(64, 8192 * 8, 512, 4096, 0), 0);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(128, 8192 * 4, 3072, 6144, 1), 2);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(128, 256 * 4, 3072, 6144, 1), 2);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(32, 2048 * 2, 9216, 6144, 1), 3);
    CHECK_EQ_INT(kn_cuda_gemm_experts_plan(64, 8192 * 8, 512, 4096, 1), 2);
    CHECK(kn_cuda_gemm_experts_ok(512, 264, 128, 128) && !kn_cuda_gemm_experts_ok(513, 264, 128, 128) &&
          !kn_cuda_gemm_experts_ok(8, 260, 128, 128) && !kn_cuda_gemm_experts_ok(8, 264, 96, 96) &&
          !kn_cuda_gemm_experts_ok(8, 264, 128, 132));
    struct mm_err e2 = {0};
    CHECK(kn_cuda_gemm_experts_bf16(8, (const int32_t *)16, 10, 264, 96, (const uint16_t *)16, 96,
                                    (const void *const *)16, NULL, NULL, NULL, (float *)16, NULL, 264, NULL,
                                    0, &e2) == MM_INVALID);
    /* a tile counter the atomics cannot use (not 4-byte aligned): refused before any launch */
    CHECK(kn_cuda_gemm_experts_bf16(8, (const int32_t *)16, 10, 264, 128, (const uint16_t *)16, 128,
                                    (const void *const *)16, NULL, NULL, NULL, (float *)16, NULL, 264,
                                    (int32_t *)18, 0, &e2) == MM_INVALID);
    OK(kn_cuda_gemm_experts_bf16(0, NULL, 0, 264, 128, NULL, 128, NULL, NULL, NULL, NULL, NULL, NULL, 264,
                                 NULL, 0, &err));
}

/* One-row products over (row, half) units (gv_tile_halves: widths whose 8-warp slices leave lanes idle,
 * 3072 by default, 1536 forced; a row count not a multiple of the CTA's 4): single weights and expert pairs
 * against the host product, with the route on and off (KN_CUDA_GEMV_HALVES=0) */
static void test_gemv_halves(void)
{
    static const int64_t shapes[][2] = {{1001, 3072}, {37, 1536}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int on = 0; on < 2; on++) {
            const int64_t rows = shapes[si][0], cols = shapes[si][1];
            setenv("KN_CUDA_GEMV_HALVES", on ? (cols < 2048 ? "2" : "1") : "0", 1);
            kn_cuda_knobs_reload();
            struct bf16_case c;
            bf16_case_make(&c, 1, rows, cols, cols, rows);
            enum { E = 3, P = 4 };
            const int32_t ids[P] = {2, 0, 2, 1};
            struct expert_tabs et;
            expert_tabs_make(&et, E, rows, cols);
            int32_t *ids_d = ct_upload(ids, sizeof ids);
            float *yp_d = ct_dmalloc(sizeof(float) * P * rows), *ref = ct_hmalloc(sizeof(float) * P * rows);
            OK(kn_cuda_gemv_bf16(1, rows, cols, c.x_d, cols, c.w_d, c.y_d, rows, 0, &err));
            OK(kn_cuda_gemv_experts_bf16(P, P, rows, cols, c.x_d, cols, ids_d, (const void *const *)et.tab_d,
                                         NULL, yp_d, NULL, rows, 0, 0, &err));
            for (int p = 0; p < P; p++)
                kn_sgemm_nt(1, rows, cols, c.xr, cols, et.w + (int64_t)ids[p] * rows * cols, cols, 0.0f,
                            ref + p * rows, rows);
            float *got = dl_f32(yp_d, P * rows);
            char what[96];
            snprintf(what, sizeof what, "gemv %lld x %lld halves %s", (long long)rows, (long long)cols,
                     on ? "on" : "off");
            bf16_case_check(&c, what);
            snprintf(what, sizeof what, "experts gemv %lld x %lld halves %s", (long long)rows,
                     (long long)cols, on ? "on" : "off");
            expect_close(what, got, ref, P * rows, 1e-5);
            free(got), free(ref);
            expert_tabs_free(&et);
            cudaFree(ids_d), cudaFree(yp_d);
        }
    unsetenv("KN_CUDA_GEMV_HALVES");
    kn_cuda_knobs_reload();
}

/* MoE decode products (kn_cuda_gemv_experts_bf16): n tokens x K experts each, every pair's expert weight
 * looked up in device tables; gate and up in one launch (x row = pair / K), then down on the pairs' own rows
 * (xdiv 1); and the combine in pair order (inv NULL). Against the CPU products of the rounded operands. */
static void test_gemv_experts(void)
{
    enum { E = 5, K = 2, NT = 3, P = NT * K };
    const int64_t rows = 37, cols = 128;
    const int32_t ids[P] = {4, 0, 2, 2, 1, 3};
    float *x = ct_hmalloc(sizeof(float) * NT * cols), *xr = ct_hmalloc(sizeof(float) * NT * cols);
    ct_fill_normal(x, NT * cols, 1.0f);
    struct expert_tabs et;
    expert_tabs_make(&et, E, rows, cols);
    const float *w = et.w;
    void *tab_d = et.tab_d;
    for (int64_t i = 0; i < NT * cols; i++) xr[i] = ct_bf16_round(x[i]);
    int32_t *ids_d = ct_upload(ids, sizeof ids);
    float *x_d = ct_upload(x, sizeof(float) * NT * cols);
    float *ya_d = ct_dmalloc(sizeof(float) * P * rows), *yb_d = ct_dmalloc(sizeof(float) * P * rows);
    OK(kn_cuda_gemv_experts_bf16(P, K, rows, cols, x_d, cols, ids_d, (const void *const *)tab_d,
                                 (const void *const *)tab_d + E, ya_d, yb_d, rows, 0, 0, &err));
    float *ref = ct_hmalloc(sizeof(float) * P * rows);
    for (int half = 0; half < 2; half++) {
        for (int p = 0; p < P; p++)
            kn_sgemm_nt(1, rows, cols, xr + (p / K) * cols, cols,
                        w + ((int64_t)half * E + ids[p]) * rows * cols, cols, 0.0f, ref + p * rows, rows);
        float *got = dl_f32(half ? yb_d : ya_d, P * rows);
        expect_close(half ? "experts gemv, second table" : "experts gemv, first table", got, ref, P * rows,
                     1e-5);
        free(got);
    }
    /* down: x = the pairs' own rows (xdiv 1), one table */
    float *xp = ct_hmalloc(sizeof(float) * P * cols), *xpr = ct_hmalloc(sizeof(float) * P * cols);
    ct_fill_normal(xp, P * cols, 1.0f);
    for (int64_t i = 0; i < P * cols; i++) xpr[i] = ct_bf16_round(xp[i]);
    float *xp_d = ct_upload(xp, sizeof(float) * P * cols);
    OK(kn_cuda_gemv_experts_bf16(P, 1, rows, cols, xp_d, cols, ids_d, (const void *const *)tab_d, NULL, ya_d,
                                 NULL, rows, 0, 0, &err));
    for (int p = 0; p < P; p++)
        kn_sgemm_nt(1, rows, cols, xpr + p * cols, cols, w + (int64_t)ids[p] * rows * cols, cols, 0.0f,
                    ref + p * rows, rows);
    float *got = dl_f32(ya_d, P * rows);
    expect_close("experts gemv, own rows", got, ref, P * rows, 1e-5);
    /* combine in pair order: y[t] += sum_k wts[t][k] * e[t*K + k] */
    const float wts[P] = {0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 0.0f};
    float *wts_d = ct_upload(wts, sizeof wts);
    float *yc = ct_hmalloc(sizeof(float) * NT * rows), *rc = ct_hmalloc(sizeof(float) * NT * rows);
    for (int64_t i = 0; i < NT * rows; i++) yc[i] = 1.0f;
    float *yc_d = ct_upload(yc, sizeof(float) * NT * rows);
    OK(kn_cuda_moe_combine(ya_d, NULL, wts_d, NT, K, (int32_t)rows, yc_d, rows, 0, &err));
    for (int t = 0; t < NT; t++)
        for (int64_t r = 0; r < rows; r++) {
            float a = 0.0f;
            for (int k = 0; k < K; k++) a += wts[t * K + k] * got[(t * K + k) * rows + r];
            rc[t * rows + r] = 1.0f + a;
        }
    float *gc = dl_f32(yc_d, NT * rows);
    expect_close("moe combine, pair order", gc, rc, NT * rows, 1e-6);
    struct mm_err e2 = {0};
    CHECK(kn_cuda_gemv_experts_bf16(P, 0, rows, cols, x_d, cols, ids_d, (const void *const *)tab_d, NULL,
                                    ya_d, NULL, rows, 0, 0, &e2) == MM_INVALID);
    free(gc), free(got), free(ref), free(x), free(xr), free(xp), free(xpr), free(yc), free(rc);
    expert_tabs_free(&et);
    cudaFree(ids_d), cudaFree(x_d), cudaFree(ya_d), cudaFree(yb_d);
    cudaFree(xp_d), cudaFree(wts_d), cudaFree(yc_d);
}

/* MoE decode pairs of several tokens that share experts, grouped (an expert's pairs as passes in its first
 * pair's CTAs) and with the pairs fastest in the grid, against one stream per pair (KN_CUDA_GEMV_GROUP=0,
 * KN_CUDA_GEMV_PAIR_FAST=0): the same bits for every pair. Three batches over 6 experts: 8 tokens x top-2
 * (expert 1 in 6 pairs, expert 4 in 3, experts 0, 2 and 5 in 2, expert 3 in 1); 12 tokens x top-4 (48 pairs:
 * the upper half of the kernel's 64-bit mask, experts in up to 8 pairs); 18 x top-4 (72 pairs: more than the
 * grouped kernel takes, one stream per pair in either order). Gate and up (x row = pair / K) and the down
 * product (own rows), at 3072 wide ((row, half) units: never grouped) and 1024 wide (8 warps a row), 37 rows
 * (a partial tile); a row past the outputs untouched. */
static void test_gemv_experts_group(void)
{
    enum { E = 6, PMAX = 72 };
    static const int32_t ids8[16] = {1, 4, 1, 2, 0, 1, 4, 1, 2, 1, 3, 5, 1, 4, 5, 0};
    static const int cases[3][2] = {{8, 2}, {12, 4}, {18, 4}}; /* tokens, top-k */
    static const int64_t widths[2] = {3072, 1024};
    const int64_t rows = 37;
    for (int ci = 0; ci < 6; ci++) {
        const int NT = cases[ci / 2][0], K = cases[ci / 2][1], P = NT * K;
        int32_t ids[PMAX];
        for (int p = 0; p < P; p++) ids[p] = ci < 2 ? ids8[p] : (p / K + p % K) % E; /* distinct per token */
        int32_t *ids_d = ct_upload(ids, sizeof(int32_t) * (size_t)P);
        const int64_t cols = widths[ci % 2];
        struct expert_tabs et;
        expert_tabs_make(&et, E, rows, cols);
        float *x = ct_hmalloc(sizeof(float) * P * cols);
        ct_fill_normal(x, P * cols, 1.0f);
        float *x_d = ct_upload(x, sizeof(float) * P * cols);
        /* [config][gate, up, down], one row more each; configs: one stream per pair, grouped, and both with
         * the pairs fastest in the grid */
        float *y[4][3];
        for (int g = 0; g < 4; g++)
            for (int k = 0; k < 3; k++) y[g][k] = ct_dmalloc(sizeof(float) * (P + 1) * rows);
        for (int g = 0; g < 4; g++) {
            knob_setenv("KN_CUDA_GEMV_GROUP", g & 1 ? "1" : "0", 1);
            knob_setenv("KN_CUDA_GEMV_PAIR_FAST", g & 2 ? "1" : "0", 1);
            OK(kn_cuda_gemv_experts_bf16(P, K, rows, cols, x_d, cols, ids_d, (const void *const *)et.tab_d,
                                         (const void *const *)et.tab_d + E, y[g][0], y[g][1], rows, 1, 0,
                                         &err));
            OK(kn_cuda_gemv_experts_bf16(P, 1, rows, cols, x_d, cols, ids_d, (const void *const *)et.tab_d,
                                         NULL, y[g][2], NULL, rows, 1, 0, &err));
        }
        knob_unsetenv("KN_CUDA_GEMV_GROUP");
        knob_unsetenv("KN_CUDA_GEMV_PAIR_FAST");
        for (int g = 1; g < 4; g++)
            for (int k = 0; k < 3; k++) {
                float *a = dl_f32(y[0][k], (P + 1) * rows), *b = dl_f32(y[g][k], (P + 1) * rows);
                int untouched = 1, stored = 1;
                for (int64_t r = 0; r < rows; r++) untouched &= isnan(b[P * rows + r]);
                for (int64_t r = 0; r < P * rows; r++) stored &= !isnan(b[r]);
                CHECK_MSG(!memcmp(a, b, sizeof(float) * P * rows),
                          "experts gemv, %d pairs, %lld wide, %s, %s%s: differs from one stream per pair", P,
                          (long long)cols,
                          k == 0   ? "gate"
                          : k == 1 ? "up"
                                   : "down",
                          g & 1 ? "grouped" : "per pair", g & 2 ? ", pairs fastest" : "");
                CHECK_MSG(
                    untouched && stored,
                    "experts gemv, %d pairs, %lld wide, config %d: a pair's row not stored, or past them", P,
                    (long long)cols, g);
                free(a), free(b);
            }
        /* and the per-pair result against the host for one shared expert's pairs (pair 12: token 6) */
        float *ref = ct_hmalloc(sizeof(float) * rows), *xr = ct_hmalloc(sizeof(float) * cols);
        for (int64_t i = 0; i < cols; i++) xr[i] = ct_bf16_round(x[(12 / K) * cols + i]);
        kn_sgemm_nt(1, rows, cols, xr, cols, et.w + (int64_t)ids[12] * rows * cols, cols, 0.0f, ref, rows);
        float *got = dl_f32(y[1][0] + 12 * rows, rows);
        expect_close("experts gemv grouped, pair 12", got, ref, rows, 1e-5);
        free(ref), free(xr), free(got), free(x);
        for (int g = 0; g < 4; g++)
            for (int k = 0; k < 3; k++) cudaFree(y[g][k]);
        cudaFree(x_d), cudaFree(ids_d);
        expert_tabs_free(&et);
    }
    printf("  %-28s bitwise equal to one stream per pair (also pairs fastest)\n", "experts gemv grouped");
}

/* An FP8-E4M3 weight [rows][cols] with f32 block scales [ceil(rows/bsr)][ceil(cols/bsc)] (random codes, no
 * NaN), on the host and the device; wf = its exact dequantization (the CPU backend's f32 weight) */
struct fp8_weight {
    int64_t rows, cols;
    int32_t bsr, bsc;
    uint8_t *q;
    float *sc, *wf;
    uint8_t *q_d;
    float *sc_d;
};

static void fp8_weight_make(struct fp8_weight *f, int64_t rows, int64_t cols, int32_t bsr, int32_t bsc)
{
    *f = (struct fp8_weight){.rows = rows, .cols = cols, .bsr = bsr, .bsc = bsc};
    const int64_t sr = (rows + bsr - 1) / bsr, sc = (cols + bsc - 1) / bsc;
    f->q = ct_hmalloc((size_t)(rows * cols));
    f->sc = ct_hmalloc(sizeof(float) * (size_t)(sr * sc));
    f->wf = ct_hmalloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t i = 0; i < sr * sc; i++) f->sc[i] = 0.0005f * (float)(1 + ct_next() % 64);
    for (int64_t e = 0; e < rows * cols; e++) {
        uint8_t v = (uint8_t)(ct_next() & 0xff);
        if ((v & 0x7f) == 0x7f) v = 0x38; /* no NaN codes */
        f->q[e] = v;
        const int64_t r = e / cols, c = e % cols;
        f->wf[e] = mm_f8e4m3_to_f32(v) * f->sc[(r / bsr) * sc + c / bsc];
    }
    f->q_d = ct_upload(f->q, (size_t)(rows * cols));
    f->sc_d = ct_upload(f->sc, sizeof(float) * (size_t)(sr * sc));
}

static void fp8_weight_free(struct fp8_weight *f)
{
    free(f->q), free(f->sc), free(f->wf);
    cudaFree(f->q_d), cudaFree(f->sc_d);
}

/* n FP8 weights of one shape (fp8_weight_make, in order) and device tables of their weight and scale
 * pointers: the expert tables of the FP8 MoE products */
struct fp8_tables {
    struct fp8_weight *f;
    int n;
    void *tq_d, *ts_d;
};

static void fp8_tables_make(struct fp8_tables *t, int n, int64_t rows, int64_t cols, int32_t bsr, int32_t bsc)
{
    t->n = n;
    t->f = ct_hmalloc(sizeof(struct fp8_weight) * (size_t)n);
    const void **hq = ct_hmalloc(sizeof(void *) * (size_t)n), **hs = ct_hmalloc(sizeof(void *) * (size_t)n);
    for (int e = 0; e < n; e++) {
        fp8_weight_make(&t->f[e], rows, cols, bsr, bsc);
        hq[e] = t->f[e].q_d, hs[e] = t->f[e].sc_d;
    }
    t->tq_d = ct_upload(hq, sizeof(void *) * (size_t)n), t->ts_d = ct_upload(hs, sizeof(void *) * (size_t)n);
    free(hq), free(hs);
}

static void fp8_tables_free(struct fp8_tables *t)
{
    for (int e = 0; e < t->n; e++) fp8_weight_free(&t->f[e]);
    free(t->f);
    cudaFree(t->tq_d), cudaFree(t->ts_d);
}

/* kn_cuda_gemv_experts_fp8 on P = NT * K pairs (pair p: expert ids[p], x row p / K) against the f32 CPU
 * products of xr (x rounded to bf16): both tables of t (experts 0 .. E - 1 and E .. 2E - 1) in one launch,
 * then the first on the pairs' own rows (xdiv 1: x rows 0 .. NT - 1 for pairs 0 .. NT - 1 only); route
 * names the route in the messages */
static void check_experts_fp8(const struct fp8_tables *t, int E, int K, int NT, const int32_t *ids,
                              const int32_t *ids_d, int64_t rows, int64_t cols, int32_t bsr, int32_t bsc,
                              const float *xr, const float *x_d, float *ya_d, float *yb_d, const char *route)
{
    const int P = NT * K;
    const uint8_t *const *tq = t->tq_d;
    const float *const *ts = t->ts_d;
    float *ref = ct_hmalloc(sizeof(float) * P * rows);
    char what[96];
    /* the pairs fastest in the grid (several tokens: group 1) first, into NaN-filled outputs, then the
     * default order: the same bits */
    CT_CU(cudaMemset(ya_d, 0xff, sizeof(float) * P * rows));
    CT_CU(cudaMemset(yb_d, 0xff, sizeof(float) * P * rows));
    OK(kn_cuda_gemv_experts_fp8(P, K, rows, cols, x_d, cols, ids_d, tq, ts, tq + E, ts + E, bsr, bsc, ya_d,
                                yb_d, rows, 1, 0, &err));
    float *pa = dl_f32(ya_d, P * rows), *pb = dl_f32(yb_d, P * rows);
    OK(kn_cuda_gemv_experts_fp8(P, K, rows, cols, x_d, cols, ids_d, tq, ts, tq + E, ts + E, bsr, bsc, ya_d,
                                yb_d, rows, 0, 0, &err));
    {
        float *a2 = dl_f32(ya_d, P * rows), *b2 = dl_f32(yb_d, P * rows);
        CHECK_MSG(!memcmp(pa, a2, sizeof(float) * P * rows) && !memcmp(pb, b2, sizeof(float) * P * rows),
                  "experts gemv fp8 %s: pairs fastest differs from tiles fastest", route);
        free(a2), free(b2), free(pa), free(pb);
    }
    for (int half = 0; half < 2; half++) {
        for (int p = 0; p < P; p++)
            kn_sgemm_nt(1, rows, cols, xr + (p / K) * cols, cols, t->f[half * E + ids[p]].wf, cols, 0.0f,
                        ref + p * rows, rows);
        float *got = dl_f32(half ? yb_d : ya_d, P * rows);
        snprintf(what, sizeof what, "experts gemv fp8 %s, %s table", route, half ? "second" : "first");
        expect_close(what, got, ref, P * rows, 1e-5);
        free(got);
    }
    CT_CU(cudaMemset(ya_d, 0xff, sizeof(float) * P * rows));
    OK(kn_cuda_gemv_experts_fp8(P, 1, rows, cols, x_d, cols, ids_d, tq, ts, NULL, NULL, bsr, bsc, ya_d, NULL,
                                rows, 1, 0, &err));
    float *pd = dl_f32(ya_d, NT * rows);
    OK(kn_cuda_gemv_experts_fp8(P, 1, rows, cols, x_d, cols, ids_d, tq, ts, NULL, NULL, bsr, bsc, ya_d, NULL,
                                rows, 0, 0, &err));
    for (int p = 0; p < NT; p++)
        kn_sgemm_nt(1, rows, cols, xr + p * cols, cols, t->f[ids[p]].wf, cols, 0.0f, ref + p * rows, rows);
    float *got = dl_f32(ya_d, NT * rows);
    snprintf(what, sizeof what, "experts gemv fp8 %s, own rows", route);
    expect_close(what, got, ref, NT * rows, 1e-5);
    CHECK_MSG(!memcmp(pd, got, sizeof(float) * NT * rows),
              "experts gemv fp8 %s, own rows: pairs fastest differs", route);
    free(got), free(ref), free(pd);
}

/* Decode-sized products with FP8 weights (kn_cuda_gemv_fp8): every n up to 16 (5-8 and 9-16 share a kernel)
 * against the f32 CPU product of x rounded to bf16 and the exactly dequantized weight; rows not a multiple of
 * the CTA's, inner dimensions a multiple of 16 but not of 128 (48, 80), ragged and non-square scale blocks;
 * 8 rows per CTA and the 2- and 4-way inner split forced; y rows strided (the padding untouched); shapes it
 * must refuse. */
static void test_gemv_fp8(void)
{
    static const int64_t shapes[][4] = {{8199, 6144, 128, 128}, {37, 64, 128, 128}, {300, 2048, 128, 128},
                                        {129, 48, 16, 16},      {70, 80, 32, 48},   {45, 320, 8, 192},
                                        {100, 1536, 8, 128}};
    static const int64_t ns[] = {1, 2, 3, 4, 5, 8, 9, 16};
    /* the default (the cp.async ring at 3-8 rows where it takes the shape, the CUDA-core kernels otherwise),
     * the bulk-copy route with its stage shapes and forced splits, the CUDA-core kernels (the ring off), the
     * ring with a forced split, the CUDA-core kernels' forced plans, the ring at every n */
    static const char *const force[][5] = {
        {NULL, NULL, NULL, NULL, NULL}, {NULL, NULL, "1", NULL, NULL}, {NULL, NULL, "1", "1", NULL},
        {NULL, NULL, "1", "2", "8"},    {NULL, NULL, "1", NULL, "2"},  {NULL, NULL, "0", NULL, NULL},
        {NULL, NULL, "2", NULL, "8"},   {"8", NULL, "0", NULL, NULL},  {NULL, "2", "0", NULL, NULL},
        {"8", "4", "0", NULL, NULL},    {NULL, NULL, "2", NULL, NULL}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        struct fp8_weight f;
        fp8_weight_make(&f, rows, cols, (int32_t)shapes[si][2], (int32_t)shapes[si][3]);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t fi = 0; fi < sizeof force / sizeof force[0]; fi++) {
                const int64_t n = ns[ni], ldx = cols + 8, ldy = rows + 3;
                if ((fi == 1 || fi == 5 || fi == 10) && n > 8) continue;
                if (fi >= 2 && fi <= 6 && fi != 5 && n > 2) continue;     /* other stage shapes, splits */
                if (fi > 6 && fi < 10 && (rows < 300 || n > 4)) continue; /* forced plans, wide shapes */
                float *x = ct_hmalloc(sizeof(float) * n * ldx), *xr = ct_hmalloc(sizeof(float) * n * cols);
                float *ref = ct_hmalloc(sizeof(float) * n * rows), *g2 = ct_hmalloc(sizeof(float) * n * rows);
                ct_fill_normal(x, n * ldx, 1.0f);
                for (int64_t j = 0; j < n; j++)
                    for (int64_t k = 0; k < cols; k++) xr[j * cols + k] = ct_bf16_round(x[j * ldx + k]);
                kn_sgemm_nt(n, rows, cols, xr, cols, f.wf, cols, 0.0f, ref, rows);
                float *x_d = ct_upload(x, sizeof(float) * n * ldx),
                      *y_d = ct_dmalloc(sizeof(float) * n * ldy);
                if (force[fi][0]) setenv("KN_CUDA_GEMV_FP8_R", force[fi][0], 1);
                if (force[fi][1]) setenv("KN_CUDA_GEMV_FP8_KS", force[fi][1], 1);
                if (force[fi][2]) setenv("KN_CUDA_GEMV_FP8_BULK", force[fi][2], 1);
                if (force[fi][3]) setenv("KN_CUDA_GEMV_FP8_BULK_CFG", force[fi][3], 1);
                if (force[fi][4]) setenv("KN_CUDA_GEMV_FP8_BULK_KS", force[fi][4], 1);
                kn_cuda_knobs_reload();
                CHECK(kn_cuda_gemv_fp8_ok(n, cols, ldx, f.bsr, f.bsc));
                OK(kn_cuda_gemv_fp8(n, rows, cols, x_d, ldx, f.q_d, f.sc_d, f.bsr, f.bsc, y_d, ldy, 0, &err));
                unsetenv("KN_CUDA_GEMV_FP8_R"), unsetenv("KN_CUDA_GEMV_FP8_KS"),
                    unsetenv("KN_CUDA_GEMV_FP8_BULK");
                unsetenv("KN_CUDA_GEMV_FP8_BULK_CFG"), unsetenv("KN_CUDA_GEMV_FP8_BULK_KS");
                kn_cuda_knobs_reload();
                float *got = dl_f32(y_d, n * ldy);
                for (int64_t j = 0; j < n; j++) memcpy(g2 + j * rows, got + j * ldy, sizeof(float) * rows);
                char what[128];
                snprintf(what, sizeof what, "gemv fp8 %lld x %lld (blocks %lld x %lld), n %lld, plan %zu",
                         (long long)rows, (long long)cols, (long long)f.bsr, (long long)f.bsc, (long long)n,
                         fi);
                expect_close(what, g2, ref, n * rows, 1e-5);
                int untouched = 1;
                for (int64_t j = 0; j + 1 < n; j++)
                    for (int64_t r = rows; r < ldy; r++) untouched &= isnan(got[j * ldy + r]);
                CHECK_MSG(untouched, "%s: wrote past its rows", what);
                free(x), free(xr), free(ref), free(g2), free(got);
                cudaFree(x_d), cudaFree(y_d);
            }
        fp8_weight_free(&f);
    }
    /* the ring by default from 3 rows, for the shapes it takes; =0 turns it off, =1 takes the bulk copies
     * instead, =2 the ring from one row */
    CHECK(!kn_cuda_gemv_fp8_bulk_ok(1, 6144, 6144, 128, 128) &&
          !kn_cuda_gemv_fp8_bulk_ok(2, 6144, 6144, 128, 128));
    CHECK(kn_cuda_gemv_fp8_bulk_ok(3, 6144, 6144, 128, 128) && kn_cuda_gemv_fp8_bulk_ok(8, 320, 320, 8, 192));
    CHECK(!kn_cuda_gemv_fp8_bulk_ok(9, 6144, 6144, 128, 128) && !kn_cuda_gemv_fp8_bulk_ok(3, 80, 80, 32, 48));
    setenv("KN_CUDA_GEMV_FP8_BULK", "0", 1);
    kn_cuda_knobs_reload();
    CHECK(!kn_cuda_gemv_fp8_bulk_ok(4, 6144, 6144, 128, 128));
    setenv("KN_CUDA_GEMV_FP8_BULK", "1", 1);
    kn_cuda_knobs_reload();
    CHECK(kn_cuda_gemv_fp8_bulk_ok(1, 6144, 6144, 128, 128) && !kn_cuda_gemv_fp8_bulk_ok(1, 80, 80, 32, 48));
    setenv("KN_CUDA_GEMV_FP8_BULK", "2", 1);
    kn_cuda_knobs_reload();
    CHECK(kn_cuda_gemv_fp8_bulk_ok(1, 6144, 6144, 128, 128));
    unsetenv("KN_CUDA_GEMV_FP8_BULK");
    kn_cuda_knobs_reload();
    printf("  %-28s n 1-16, 7 shapes, ring, bulk route and CUDA cores, forced plans: within 1e-5 of the f32 "
           "CPU product\n",
           "gemv fp8");
    /* several FP8 weights with one x in one launch (q/k/v): each against its CPU product, through the
     * default (the CUDA cores at 1-2 rows, the ring at 3-4), the bulk route, the CUDA cores and the ring */
    static const char *const mroute[4][2] = {
        {NULL, ""}, {"1", ", bulk route"}, {"0", ", CUDA cores"}, {"2", ", ring"}};
    for (int64_t it = 0; it < 16; it++) {
        const int64_t n = 1 + it / 4;
        if (mroute[it % 4][0]) setenv("KN_CUDA_GEMV_FP8_BULK", mroute[it % 4][0], 1);
        kn_cuda_knobs_reload();
        static const int64_t mrows[3] = {300, 37, 129};
        const int64_t cols = 2048, ldx = cols + 4;
        struct fp8_weight mf[3];
        const uint8_t *wq[3];
        const float *ws[3];
        float *ym[3];
        float *x = ct_hmalloc(sizeof(float) * n * ldx), *xr = ct_hmalloc(sizeof(float) * n * cols);
        ct_fill_normal(x, n * ldx, 1.0f);
        for (int64_t j = 0; j < n; j++)
            for (int64_t k = 0; k < cols; k++) xr[j * cols + k] = ct_bf16_round(x[j * ldx + k]);
        float *x_d = ct_upload(x, sizeof(float) * n * ldx);
        for (int k = 0; k < 3; k++) {
            fp8_weight_make(&mf[k], mrows[k], cols, 128, 128);
            wq[k] = mf[k].q_d, ws[k] = mf[k].sc_d, ym[k] = ct_dmalloc(sizeof(float) * n * mrows[k]);
        }
        OK(kn_cuda_gemv_fp8_multi(3, wq, ws, mrows, ym, n, cols, x_d, ldx, 128, 128, 0, &err));
        unsetenv("KN_CUDA_GEMV_FP8_BULK");
        kn_cuda_knobs_reload();
        for (int k = 0; k < 3; k++) {
            float *ref = ct_hmalloc(sizeof(float) * n * mrows[k]), *got = dl_f32(ym[k], n * mrows[k]);
            kn_sgemm_nt(n, mrows[k], cols, xr, cols, mf[k].wf, cols, 0.0f, ref, mrows[k]);
            char what[64];
            snprintf(what, sizeof what, "gemv fp8 multi n %lld weight %d%s", (long long)n, k,
                     mroute[it % 4][1]);
            expect_close(what, got, ref, n * mrows[k], 1e-5);
            free(ref), free(got);
            fp8_weight_free(&mf[k]);
            cudaFree(ym[k]);
        }
        free(x), free(xr);
        cudaFree(x_d);
    }
    printf("  %-28s n 1-4, 3 weights, four routes: each within 1e-5 of its CPU product\n", "gemv fp8 multi");
    struct mm_err e2 = {0};
    CHECK(!kn_cuda_gemv_fp8_ok(1, 40, 40, 128, 128)); /* cols not a multiple of 16 */
    CHECK(!kn_cuda_gemv_fp8_ok(1, 64, 64, 128, 24));  /* scale block not whole chunks */
    CHECK(!kn_cuda_gemv_fp8_ok(KN_GEMV_FP8_MAX_N + 1, 64, 64, 128, 128));
    CHECK(kn_cuda_gemv_fp8(1, 4, 40, (const float *)16, 40, (const uint8_t *)16, (const float *)16, 128, 128,
                           (float *)16, 4, 0, &e2) == MM_INVALID);
}

/* FP8 expert products on a shape the bulk-copy route takes (inner dimension 320: a stage and a quarter;
 * scale blocks 8 x 64, so rows gid and gid + 8 of a tile have different scales), through that route and
 * through the CUDA cores, gate and up in one launch and then on the pairs' own rows, against the CPU
 * products. */
static void test_experts_fp8_bulk(void)
{
    enum { E = 3, K = 2, NT = 2, P = NT * K };
    const int64_t rows = 45, cols = 384;
    const int32_t bsr = 8, bsc = 64;
    const int32_t ids[P] = {2, 0, 1, 2};
    struct fp8_tables tb;
    fp8_tables_make(&tb, 2 * E, rows, cols, bsr, bsc);
    float *x = ct_hmalloc(sizeof(float) * NT * cols), *xr = ct_hmalloc(sizeof(float) * NT * cols);
    ct_fill_normal(x, NT * cols, 3.0f);
    for (int64_t i = 0; i < NT * cols; i++) xr[i] = ct_bf16_round(x[i]);
    int32_t *ids_d = ct_upload(ids, sizeof ids);
    float *x_d = ct_upload(x, sizeof(float) * NT * cols);
    float *ya_d = ct_dmalloc(sizeof(float) * P * rows), *yb_d = ct_dmalloc(sizeof(float) * P * rows);
    /* bulk copies; the cp.async ring for every product; the ring for the expert pairs alone (the default);
     * the CUDA cores (the ring turned off); the ring with its k split forced to 2 (clusters of 2 CTAs along
     * x, also with the pairs fastest) */
    static const char *const rname[5] = {"bulk", "ring", "experts ring", "CUDA cores", "ring, k split 2"};
    for (int route = 0; route < 5; route++) {
        if (route < 2) setenv("KN_CUDA_GEMV_FP8_BULK", route ? "2" : "1", 1);
        if (route == 3) setenv("KN_CUDA_GEMV_FP8_EXPERTS_RING", "0", 1);
        if (route == 4) setenv("KN_CUDA_GEMV_FP8_BULK_KS", "2", 1);
        kn_cuda_knobs_reload();
        CHECK(kn_cuda_gemv_fp8_bulk_ok(1, cols, cols, bsr, bsc) == (route < 2));
        CHECK(kn_cuda_gemv_fp8_ring_experts_ok(cols, cols, bsr, bsc) == (route != 3));
        CHECK(!kn_cuda_gemv_fp8_ring_experts_ok(cols + 16, cols + 16, bsr, bsc)); /* cols not in 64s */
        check_experts_fp8(&tb, E, K, NT, ids, ids_d, rows, cols, bsr, bsc, xr, x_d, ya_d, yb_d, rname[route]);
        unsetenv("KN_CUDA_GEMV_FP8_BULK"), unsetenv("KN_CUDA_GEMV_FP8_EXPERTS_RING");
        unsetenv("KN_CUDA_GEMV_FP8_BULK_KS");
        kn_cuda_knobs_reload();
    }
    printf("  %-28s 45 x 384, scale blocks 8 x 64: all five routes within 1e-5\n", "experts fp8 bulk");
    free(x), free(xr);
    fp8_tables_free(&tb);
    cudaFree(ids_d), cudaFree(x_d), cudaFree(ya_d), cudaFree(yb_d);
}

/* FP8 expert products: the MoE decode products over e4m3 tables (kn_cuda_gemv_experts_fp8; gate and up in one
 * launch, then down on the pairs' own rows) against the CPU products with the dequantized weights; and the
 * dequantization of the experts that got rows (kn_cuda_dequant_fp8_experts): bitwise the values of
 * kn_cuda_dequant_fp8_block, experts without rows left as they were. */
static void test_experts_fp8(void)
{
    enum { E = 5, K = 2, NT = 3, P = NT * K };
    const int64_t rows = 37, cols = 80;
    const int32_t bsr = 16, bsc = 32;
    const int32_t ids[P] = {4, 0, 2, 2, 1, 3};
    struct fp8_tables tb;
    fp8_tables_make(&tb, 2 * E, rows, cols, bsr, bsc);
    const struct fp8_weight *f = tb.f;
    const uint8_t *const *tq = tb.tq_d;
    const float *const *ts = tb.ts_d;
    float *x = ct_hmalloc(sizeof(float) * NT * cols), *xr = ct_hmalloc(sizeof(float) * NT * cols);
    ct_fill_normal(x, NT * cols, 1.0f);
    for (int64_t i = 0; i < NT * cols; i++) xr[i] = ct_bf16_round(x[i]);
    int32_t *ids_d = ct_upload(ids, sizeof ids);
    float *x_d = ct_upload(x, sizeof(float) * NT * cols);
    float *ya_d = ct_dmalloc(sizeof(float) * P * rows), *yb_d = ct_dmalloc(sizeof(float) * P * rows);
    check_experts_fp8(&tb, E, K, NT, ids, ids_d, rows, cols, bsr, bsc, xr, x_d, ya_d, yb_d,
                      "(default route)");
    /* dequantization of the experts with rows: off gives experts 1 and 3 none */
    const int32_t off[E + 1] = {0, 2, 2, 5, 5, 6};
    int32_t *off_d = ct_upload(off, sizeof off);
    const size_t wb = (size_t)(rows * cols) * 2;
    uint8_t *out_d = ct_dmalloc(2 * E * wb);
    CHECK(cudaMemset(out_d, 0x7f, 2 * E * wb) == cudaSuccess);
    void *ho[2 * E];
    for (int e = 0; e < 2 * E; e++) ho[e] = out_d + (size_t)e * wb;
    void *to_d = ct_upload(ho, sizeof ho);
    OK(kn_cuda_dequant_fp8_experts(2, E, off_d, tq, ts, rows, cols, bsr, bsc, to_d, 0, &err));
    uint16_t *one_d = ct_dmalloc(wb);
    uint16_t *all = ct_hmalloc(2 * E * wb), *one = ct_hmalloc(wb);
    ct_download(all, out_d, 2 * E * wb);
    int64_t wrong = 0;
    for (int t = 0; t < 2 * E; t++) {
        const int e = t % E, has = off[e + 1] > off[e];
        OK(kn_cuda_dequant_fp8_block(f[t].q_d, f[t].sc_d, rows, cols, bsr, bsc, one_d, 0, &err));
        ct_download(one, one_d, wb);
        for (int64_t i = 0; i < rows * cols; i++)
            wrong += all[(size_t)t * (size_t)(rows * cols) + (size_t)i] != (has ? one[i] : 0x7f7f);
    }
    CHECK_MSG(wrong == 0, "dequant fp8 experts: %lld wrong values", (long long)wrong);
    printf("  %-28s decode products within 1e-5; dequantization bitwise, experts without rows untouched\n",
           "experts fp8");
    struct mm_err e2 = {0};
    CHECK(kn_cuda_dequant_fp8_experts(1, E, off_d, tq, ts, rows, 40, bsr, bsc, to_d, 0, &e2) == MM_INVALID);
    free(x), free(xr), free(all), free(one);
    fp8_tables_free(&tb);
    cudaFree(ids_d), cudaFree(x_d), cudaFree(ya_d), cudaFree(yb_d);
    cudaFree(off_d), cudaFree(out_d), cudaFree(to_d), cudaFree(one_d);
}

/* x rounded to bf16 on the host, row j (of ldx) scaled by 10^(j % 7 - 3) and row 5 by 3e5 (past f16's
 * range: the per-row scale of kn_cuda_x_f16_scaled must bring it back); xr: the bf16 values, contiguous */
static void fp8_x_make(float *x, float *xr, int64_t n, int64_t cols, int64_t ldx)
{
    ct_fill_normal(x, n * ldx, 1.0f);
    for (int64_t j = 0; j < n; j++) {
        const float f = j == 5 ? 3e5f : powf(10.0f, (float)(j % 7 - 3));
        for (int64_t k = 0; k < ldx; k++) x[j * ldx + k] *= f;
        for (int64_t k = 0; k < cols; k++) xr[j * cols + k] = ct_bf16_round(x[j * ldx + k]);
    }
}

/* The rows in f16 times their 2^-k: exactly the bf16 values (none here is under 2^-28 of its row's largest,
 * a zero row keeps scale 1) */
static void check_x_f16(const void *xh_d, const float *xs_d, const float *xr, int64_t n, int64_t cols)
{
    uint16_t *h = ct_hmalloc(sizeof(uint16_t) * (size_t)(n * cols));
    float *s = dl_f32(xs_d, n);
    ct_download(h, xh_d, sizeof(uint16_t) * (size_t)(n * cols));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n * cols; i++) wrong += mm_f16_to_f32(h[i]) * s[i / cols] != xr[i];
    CHECK_MSG(wrong == 0, "x f16 scaled: %lld of %lld values differ from bf16(x)", (long long)wrong,
              (long long)(n * cols));
    free(h), free(s);
}

/* n output rows of `rows` values, ldy apart on the device, into out [n][rows]; 1 when the padding between
 * the rows is still the allocation's NaN fill (the last row's padding lies past the buffer) */
static int dl_rows_strided(const float *y_d, int64_t n, int64_t rows, int64_t ldy, float *out)
{
    float *got = dl_f32(y_d, n * ldy);
    int untouched = 1;
    for (int64_t j = 0; j < n; j++) {
        memcpy(out + j * rows, got + j * ldy, sizeof(float) * rows);
        for (int64_t r = rows; j + 1 < n && r < ldy; r++) untouched &= isnan(got[j * ldy + r]);
    }
    free(got);
    return untouched;
}

/* FP8 weights on the tensor cores (kn_cuda_gemm_small_fp8): n 1-16 against the f32 CPU product of x rounded
 * to bf16 and the exactly dequantized weight; rows not a multiple of 16 or 128, scale blocks smaller than a
 * warp's 16 rows (8) and wider than 64 columns, inner splits (8199 x 6144) and none (37 x 128); activation
 * rows 10^-3 .. 10^3 and one of 3e5 (beyond f16); y rows strided, the padding untouched; shapes it refuses.
 */
static void test_gemm_small_fp8(void)
{
    static const int64_t shapes[][4] = {{8199, 6144, 128, 128},
                                        {300, 2048, 128, 128},
                                        {37, 128, 16, 64},
                                        {70, 320, 8, 128},
                                        {1536, 6144, 128, 128}};
    static const int64_t ns[] = {1, 2, 3, 6, 8, 9, 16};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1];
        struct fp8_weight f;
        fp8_weight_make(&f, rows, cols, (int32_t)shapes[si][2], (int32_t)shapes[si][3]);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t n = ns[ni], ldx = cols + 8, ldy = rows + 3;
            float *x = ct_hmalloc(sizeof(float) * n * ldx), *xr = ct_hmalloc(sizeof(float) * n * cols);
            float *ref = ct_hmalloc(sizeof(float) * n * rows), *g2 = ct_hmalloc(sizeof(float) * n * rows);
            fp8_x_make(x, xr, n, cols, ldx);
            kn_sgemm_nt(n, rows, cols, xr, cols, f.wf, cols, 0.0f, ref, rows);
            float *x_d = ct_upload(x, sizeof(float) * n * ldx), *y_d = ct_dmalloc(sizeof(float) * n * ldy);
            void *xh_d = ct_dmalloc(sizeof(uint16_t) * (size_t)(n * cols));
            float *xs_d = ct_dmalloc(sizeof(float) * (size_t)n);
            CHECK(kn_cuda_x_f16_scaled_ok(cols, ldx));
            OK(kn_cuda_x_f16_scaled(n, cols, x_d, ldx, xh_d, xs_d, 0, &err));
            if (ni == 0 || n == 16) check_x_f16(xh_d, xs_d, xr, n, cols);
            CHECK(kn_cuda_gemm_small_fp8_ok(n, rows, cols, f.bsr, f.bsc));
            const size_t wsb = kn_cuda_gemm_small_fp8_ws(n, rows, cols);
            void *ws_d = wsb ? ct_dmalloc(wsb) : NULL;
            OK(kn_cuda_gemm_small_fp8(n, rows, cols, xh_d, xs_d, f.q_d, f.sc_d, f.bsr, f.bsc, y_d, ldy, ws_d,
                                      wsb, 0, &err));
            const int untouched = dl_rows_strided(y_d, n, rows, ldy, g2);
            /* each activation row against its own reference: their magnitudes differ by 10^8 */
            for (int64_t j = 0; j < n; j++) {
                char what[128];
                snprintf(what, sizeof what, "small fp8 %lld x %lld (blocks %lld x %lld), n %lld, row %lld",
                         (long long)rows, (long long)cols, (long long)f.bsr, (long long)f.bsc, (long long)n,
                         (long long)j);
                double mx = 0, rel = ct_rel_err(g2 + j * rows, ref + j * rows, rows, &mx);
                CHECK_MSG(rel <= 1e-5, "%s: rel err %.3g (max abs %.3g)", what, rel, mx);
            }
            CHECK_MSG(untouched, "small fp8 %lld x %lld n %lld: wrote past its rows", (long long)rows,
                      (long long)cols, (long long)n);
            free(x), free(xr), free(ref), free(g2);
            cudaFree(x_d), cudaFree(y_d), cudaFree(xh_d), cudaFree(xs_d), cudaFree(ws_d);
        }
        fp8_weight_free(&f);
    }
    printf("  %-28s n 1-16, 5 shapes, rows 1e-3..3e5: each row within 1e-5 of the f32 CPU product\n",
           "small fp8");
    /* rows wider than the register path (8192 columns): the two-pass loop */
    {
        const int64_t n = 2, cols = 8256;
        float *x = ct_hmalloc(sizeof(float) * n * cols), *xr = ct_hmalloc(sizeof(float) * n * cols);
        fp8_x_make(x, xr, n, cols, cols);
        float *x_d = ct_upload(x, sizeof(float) * n * cols), *xs_d = ct_dmalloc(sizeof(float) * n);
        void *xh_d = ct_dmalloc(sizeof(uint16_t) * (size_t)(n * cols));
        OK(kn_cuda_x_f16_scaled(n, cols, x_d, cols, xh_d, xs_d, 0, &err));
        check_x_f16(xh_d, xs_d, xr, n, cols);
        free(x), free(xr);
        cudaFree(x_d), cudaFree(xs_d), cudaFree(xh_d);
    }
    /* a row of zeros keeps scale 1 and gives zeros */
    {
        float *z_d = ct_upload((float[8]){0}, sizeof(float) * 8), *xs_d = ct_dmalloc(sizeof(float));
        void *xh_d = ct_dmalloc(16);
        OK(kn_cuda_x_f16_scaled(1, 8, z_d, 8, xh_d, xs_d, 0, &err));
        float s = 0;
        ct_download(&s, xs_d, sizeof s);
        CHECK_MSG(s == 1.0f, "x f16 scaled: a zero row's scale %g", (double)s);
        cudaFree(z_d), cudaFree(xs_d), cudaFree(xh_d);
    }
    struct mm_err e2 = {0};
    CHECK(!kn_cuda_gemm_small_fp8_ok(1, 64, 96, 128, 128)); /* cols not a multiple of 64 */
    CHECK(!kn_cuda_gemm_small_fp8_ok(1, 64, 128, 128, 32)); /* scale block narrower than a load */
    CHECK(!kn_cuda_gemm_small_fp8_ok(17, 64, 128, 128, 128));
    CHECK(!kn_cuda_x_f16_scaled_ok(6, 8));
    CHECK(kn_cuda_gemm_small_fp8(1, 4, 96, (const void *)16, (const float *)16, (const uint8_t *)16,
                                 (const float *)16, 128, 128, (float *)16, 4, NULL, 0, 0, &e2) == MM_INVALID);
    CHECK(kn_cuda_x_f16_scaled(1, 6, (const float *)16, 8, (void *)16, (float *)16, 0, &e2) == MM_INVALID);
}

/* The FP8 block-scaled prefill product (kn_cuda_gemm_fp8_block, MMGW_CUDA_FP8_PREFILL=e4m3). The quantizer
 * first: codes and scales equal to the CPU twin's, rows 1e-3 .. 3e5 and an all-zero group (scale 1). Then
 * the product of 1-300 rows against the f32 CPU product of the dequantized operands (the arithmetic the
 * tensor cores approximate: e4m3 products exact, sums fp32 per 128-wide block times both scales); y rows
 * strided (by a multiple of 4: FP8 products need 16-byte rows), the padding untouched; row counts not a
 * multiple of 4 (1, 37: cuBLASLt refuses them) take a 4-row product for their last rows. How far the
 * quantized activations move the product from the unquantized one is printed (and bounded loosely). */
static void test_gemm_fp8_block(void)
{
    struct kn_cuda_blas *bl = NULL;
    OK(kn_cuda_blas_create(&bl, 0, &err));
    if (!bl) return;
    {
        const int64_t n = 37, cols = 6144, ldx = cols + 8, groups = cols / 128;
        float *x = ct_hmalloc(sizeof(float) * n * ldx), *xr = ct_hmalloc(sizeof(float) * n * cols);
        fp8_x_make(x, xr, n, cols, ldx);
        for (int64_t k = 0; k < 128; k++) x[3 * ldx + 256 + k] = 0.0f; /* row 3, group 2: zeros */
        uint8_t *q = ct_hmalloc((size_t)(n * cols)), *gq = ct_hmalloc((size_t)(n * cols));
        float *qs = ct_hmalloc(sizeof(float) * n * groups);
        kn_quant_e4m3_groups(x, n, cols, ldx, 128, q, qs);
        float *x_d = ct_upload(x, sizeof(float) * n * ldx), *qs_d = ct_dmalloc(sizeof(float) * n * groups);
        uint8_t *q_d = ct_dmalloc((size_t)(n * cols));
        CHECK(kn_cuda_x_e4m3_groups_ok(cols, ldx));
        OK(kn_cuda_x_e4m3_groups(n, cols, x_d, ldx, q_d, qs_d, n, 0, &err));
        float *gs = dl_f32(qs_d, n * groups);
        ct_download(gq, q_d, (size_t)(n * cols));
        int64_t wrong_q = 0, wrong_s = 0;
        for (int64_t i = 0; i < n * cols; i++) wrong_q += gq[i] != q[i];
        for (int64_t i = 0; i < n * groups; i++) wrong_s += gs[i] != qs[i];
        CHECK_MSG(wrong_q == 0 && wrong_s == 0,
                  "x e4m3 groups: %lld codes and %lld scales differ from the CPU's", (long long)wrong_q,
                  (long long)wrong_s);
        CHECK_MSG(qs[2 * n + 3] == 1.0f, "x e4m3 groups: a zero group's scale %g", (double)qs[2 * n + 3]);
        printf("  %-28s 37 x 6144, rows 1e-3..3e5: codes and scales equal the CPU's\n", "x e4m3 groups");
        free(x), free(xr), free(q), free(gq), free(qs), free(gs);
        cudaFree(x_d), cudaFree(qs_d), cudaFree(q_d);
    }
    static const int64_t shapes[][2] = {{1536, 6144}, {6144, 1536}, {272, 512}};
    static const int64_t ms[] = {1, 37, 64, 300};
    double worst = 0, worst_q = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t rows = shapes[si][0], cols = shapes[si][1], groups = cols / 128;
        struct fp8_weight f;
        fp8_weight_make(&f, rows, cols, 128, 128);
        CHECK(kn_cuda_gemm_fp8_block_ok(rows, cols, 128, 128));
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
            const int64_t m = ms[mi], ldx = cols + 4, ldy = rows + 4;
            float *x = ct_hmalloc(sizeof(float) * m * ldx), *xd = ct_hmalloc(sizeof(float) * m * cols);
            float *ref = ct_hmalloc(sizeof(float) * m * rows), *exact = ct_hmalloc(sizeof(float) * m * rows);
            float *g2 = ct_hmalloc(sizeof(float) * m * rows), *qs = ct_hmalloc(sizeof(float) * m * groups);
            uint8_t *q = ct_hmalloc((size_t)(m * cols));
            ct_fill_normal(x, m * ldx, 1.0f);
            for (int64_t j = 0; j < m; j++) /* rows 10^-3 .. 10^3 */
                for (int64_t k = 0; k < ldx; k++) x[j * ldx + k] *= powf(10.0f, (float)(j % 7 - 3));
            kn_quant_e4m3_groups(x, m, cols, ldx, 128, q, qs);
            for (int64_t j = 0; j < m; j++)
                for (int64_t k = 0; k < cols; k++)
                    xd[j * cols + k] = mm_f8e4m3_to_f32(q[j * cols + k]) * qs[(k / 128) * m + j];
            kn_sgemm_nt(m, rows, cols, xd, cols, f.wf, cols, 0.0f, ref, rows);
            kn_sgemm_nt(m, rows, cols, x, ldx, f.wf, cols, 0.0f, exact, rows);
            float *x_d = ct_upload(x, sizeof(float) * m * ldx), *y_d = ct_dmalloc(sizeof(float) * m * ldy);
            const size_t wsb = kn_cuda_gemm_fp8_block_ws(m, rows, cols);
            void *ws_d = ct_dmalloc(wsb);
            OK(kn_cuda_gemm_fp8_block(bl, m, rows, cols, x_d, ldx, f.q_d, f.sc_d, y_d, ldy, ws_d, wsb, &err));
            const int untouched = dl_rows_strided(y_d, m, rows, ldy, g2);
            for (int64_t j = 0; j < m; j++) {
                double mx = 0, rel = ct_rel_err(g2 + j * rows, ref + j * rows, rows, &mx);
                double rq = ct_rel_err(ref + j * rows, exact + j * rows, rows, &mx);
                CHECK_MSG(rel <= 1e-3, "fp8 block %lld x %lld, %lld rows, row %lld: rel err %.3g",
                          (long long)rows, (long long)cols, (long long)m, (long long)j, rel);
                CHECK_MSG(rq <= 0.1, "fp8 block: quantized activations moved row %lld by %.3g", (long long)j,
                          rq);
                worst = rel > worst ? rel : worst, worst_q = rq > worst_q ? rq : worst_q;
            }
            CHECK_MSG(untouched, "fp8 block %lld x %lld, %lld rows: wrote past its rows", (long long)rows,
                      (long long)cols, (long long)m);
            cudaFree(ws_d);
            free(x), free(xd), free(ref), free(exact), free(g2), free(qs), free(q);
            cudaFree(x_d), cudaFree(y_d);
        }
        fp8_weight_free(&f);
    }
    printf(
        "  %-28s 3 shapes x 1-300 rows: worst row %.3g of the dequantized f32 product; the e4m3 activations "
        "%.3g from the unquantized one\n",
        "fp8 block (cuBLASLt)", worst, worst_q);
    CHECK(!kn_cuda_gemm_fp8_block_ok(1536, 640, 128, 128)); /* k / 128 not a multiple of 4 */
    CHECK(!kn_cuda_gemm_fp8_block_ok(1530, 6144, 128, 128));
    CHECK(!kn_cuda_gemm_fp8_block_ok(1536, 6144, 64, 128));
    CHECK(!kn_cuda_x_e4m3_groups_ok(100, 100));
    struct mm_err e2 = {0};
    CHECK(kn_cuda_gemm_fp8_block(bl, 4, 1536, 640, (const float *)16, 640, (const uint8_t *)16,
                                 (const float *)16, (float *)16, 1536, (void *)256, 1 << 20,
                                 &e2) == MM_INVALID);
    CHECK(kn_cuda_gemm_fp8_block(bl, 4, 1536, 512, (const float *)16, 512, (const uint8_t *)16,
                                 (const float *)16, (float *)16, 1536, (void *)256, 16,
                                 &e2) == MM_INVALID); /* workspace too small */
    kn_cuda_blas_destroy(bl);
}

/* The e4m3 expert products' inputs quantized where they are made: kn_cuda_moe_gather_e4m3 against the CPU's
 * gather and quantizer (codes and scales equal; a repeated expert order, an all-zero group, rows 1e-3..1e3,
 * strided source rows, scale rows padded past m), kn_cuda_swiglu_e4m3 bit for bit against kn_cuda_swiglu's
 * f32 values quantized by kn_cuda_x_e4m3_groups (gates and ups past the clamp), and their bad arguments. */
static void test_e4m3_fused(void)
{
    {
        const int64_t T = 53, K = 4, cols = 640, ldx = cols + 8, groups = cols / 128, m = T * K - 12,
                      ldqs = m + 5;
        float *x = ct_hmalloc(sizeof(float) * T * ldx), *xg = ct_hmalloc(sizeof(float) * m * cols);
        ct_fill_normal(x, T * ldx, 1.0f);
        for (int64_t t = 0; t < T; t++)
            for (int64_t k = 0; k < ldx; k++) x[t * ldx + k] *= powf(10.0f, (float)(t % 7 - 3));
        for (int64_t k = 0; k < 128; k++) x[5 * ldx + 384 + k] = 0.0f; /* token 5, group 3: zeros */
        int32_t *perm = ct_hmalloc(sizeof(int32_t) * T * K);
        for (int64_t j = 0; j < T * K; j++) perm[j] = (int32_t)((j * 97) % (T * K)); /* 97 prime to 212 */
        for (int64_t j = 0; j < m; j++) memcpy(xg + j * cols, x + (perm[j] / K) * ldx, sizeof(float) * cols);
        uint8_t *q = ct_hmalloc((size_t)(m * cols)), *gq = ct_hmalloc((size_t)(m * cols));
        float *qs = ct_hmalloc(sizeof(float) * m * groups);
        kn_quant_e4m3_groups(xg, m, cols, cols, 128, q, qs);
        float *x_d = ct_upload(x, sizeof(float) * T * ldx), *qs_d = ct_dmalloc(sizeof(float) * ldqs * groups);
        int32_t *perm_d = ct_upload(perm, sizeof(int32_t) * T * K);
        uint8_t *q_d = ct_dmalloc((size_t)(m * cols));
        OK(kn_cuda_moe_gather_e4m3(x_d, ldx, perm_d, m, (int32_t)K, cols, q_d, qs_d, ldqs, 0, &err));
        float *gs = dl_f32(qs_d, ldqs * groups);
        ct_download(gq, q_d, (size_t)(m * cols));
        int64_t wrong_q = 0, wrong_s = 0;
        for (int64_t i = 0; i < m * cols; i++) wrong_q += gq[i] != q[i];
        for (int64_t g = 0; g < groups; g++)
            for (int64_t j = 0; j < m; j++) wrong_s += gs[g * ldqs + j] != qs[g * m + j];
        CHECK_MSG(wrong_q == 0 && wrong_s == 0,
                  "moe gather e4m3: %lld codes and %lld scales differ from the CPU's gather + quantizer",
                  (long long)wrong_q, (long long)wrong_s);
        int64_t zeros = 0; /* the zero group's scale is 1 wherever token 5 was gathered */
        for (int64_t j = 0; j < m; j++)
            if (perm[j] / K == 5) zeros += gs[3 * ldqs + j] == 1.0f ? 1 : -1000;
        CHECK_MSG(zeros > 0, "moe gather e4m3: the zero group's scales (%lld)", (long long)zeros);
        printf("  %-28s %lld of %lld pairs x 640: codes and scales equal the CPU's gather + quantizer\n",
               "moe gather e4m3", (long long)m, (long long)(T * K));
        free(x), free(xg), free(perm), free(q), free(gq), free(qs), free(gs);
        cudaFree(x_d), cudaFree(qs_d), cudaFree(perm_d), cudaFree(q_d);
    }
    {
        const int64_t n = 37, cols = 384, is = cols + 4, groups = cols / 128, ldqs = n + 3;
        float *g = ct_hmalloc(sizeof(float) * n * is), *u = ct_hmalloc(sizeof(float) * n * is);
        ct_fill_normal(g, n * is, 5.0f); /* past the clamp (7) at 1.4 sigma */
        ct_fill_normal(u, n * is, 5.0f);
        float *g_d = ct_upload(g, sizeof(float) * n * is), *u_d = ct_upload(u, sizeof(float) * n * is);
        float *act_d = ct_dmalloc(sizeof(float) * n * cols),
              *qs_d = ct_dmalloc(sizeof(float) * ldqs * groups),
              *rs_d = ct_dmalloc(sizeof(float) * ldqs * groups);
        uint8_t *q_d = ct_dmalloc((size_t)(n * cols)), *rq_d = ct_dmalloc((size_t)(n * cols));
        OK(kn_cuda_swiglu(g_d, u_d, is, n, (int32_t)cols, 1.702f, 7.0f, act_d, cols, 0, 0, &err));
        OK(kn_cuda_x_e4m3_groups(n, cols, act_d, cols, rq_d, rs_d, ldqs, 0, &err));
        OK(kn_cuda_swiglu_e4m3(g_d, u_d, is, n, cols, 1.702f, 7.0f, q_d, qs_d, ldqs, 0, &err));
        uint8_t *a = ct_hmalloc((size_t)(n * cols)), *b = ct_hmalloc((size_t)(n * cols));
        ct_download(a, q_d, (size_t)(n * cols));
        ct_download(b, rq_d, (size_t)(n * cols));
        float *sa = dl_f32(qs_d, ldqs * groups), *sb = dl_f32(rs_d, ldqs * groups);
        int64_t wrong_q = 0, wrong_s = 0, nonzero = 0;
        for (int64_t i = 0; i < n * cols; i++) wrong_q += a[i] != b[i], nonzero += a[i] != 0;
        for (int64_t gi = 0; gi < groups; gi++)
            for (int64_t j = 0; j < n; j++) wrong_s += memcmp(sa + gi * ldqs + j, sb + gi * ldqs + j, 4) != 0;
        CHECK_MSG(wrong_q == 0 && wrong_s == 0,
                  "swiglu e4m3: %lld codes and %lld scales differ from swiglu then the quantizer",
                  (long long)wrong_q, (long long)wrong_s);
        CHECK(nonzero > n * cols / 2);
        printf("  %-28s 37 x 384 (strided, past the clamp): bit for bit swiglu then the quantizer\n",
               "swiglu e4m3");
        free(g), free(u), free(a), free(b), free(sa), free(sb);
        cudaFree(g_d), cudaFree(u_d), cudaFree(act_d), cudaFree(qs_d), cudaFree(rs_d), cudaFree(q_d),
            cudaFree(rq_d);
    }
    struct mm_err e2 = {0};
    const float *f16 = (const float *)16;
    CHECK(kn_cuda_moe_gather_e4m3(f16, 100, (const int32_t *)16, 4, 2, 100, (uint8_t *)16, (float *)16, 4, 0,
                                  &e2) == MM_INVALID); /* cols not a multiple of 128 */
    CHECK(kn_cuda_moe_gather_e4m3(f16, 128, (const int32_t *)16, 4, 0, 128, (uint8_t *)16, (float *)16, 4, 0,
                                  &e2) == MM_INVALID); /* top-k 0 */
    CHECK(kn_cuda_moe_gather_e4m3(f16, 128, NULL, 4, 2, 128, (uint8_t *)16, (float *)16, 4, 0, &e2) ==
          MM_INVALID);
    CHECK(kn_cuda_swiglu_e4m3(f16, (const float *)20, 128, 4, 128, 1.702f, 7.0f, (uint8_t *)16, (float *)16,
                              4, 0, &e2) == MM_INVALID); /* up not 16-byte aligned */
    CHECK(kn_cuda_swiglu_e4m3(f16, f16, 128, 4, 128, 1.702f, 7.0f, (uint8_t *)16, (float *)16, 3, 0, &e2) ==
          MM_INVALID); /* scale rows shorter than n */
    CHECK(kn_cuda_swiglu_e4m3(f16, f16, 128, 0, 128, 1.702f, 7.0f, NULL, NULL, 0, 0, &e2) == MM_OK);
}

/* MoE prefill products of FP8 experts on the e4m3 tensor cores (kn_cuda_gemm_experts_e4m3): the routed rows
 * quantized on the device (kn_cuda_x_e4m3_groups, scale rows padded past n), experts of 0-300 rows, weights
 * of 384 rows (the second 256-row tile half empty) and 264 (a partial scale block), inner dimensions of 512
 * and 384 (4 and 3 k-slices: one scale block each), gate and up from two tables in one launch, then one
 * table, both tile shapes. Against the f32 CPU products of the dequantized operands (kn_quant_e4m3_groups,
 * the exact weights): each row within 1e-3 (relative L2; the tensor cores' FP8 sums keep fewer bits than
 * f32, so each 128-deep slice carries ~2^-14 of its size); rows of y past the experts' rows untouched; the
 * static tile order gives the dynamic order's bits. */
static void experts_e4m3_case(int E, const int32_t *cnt, int64_t rows, int64_t cols, int tables, int tile)
{
    int32_t *off = ct_hmalloc(sizeof(int32_t) * (size_t)(E + 1));
    off[0] = 0;
    for (int e = 0; e < E; e++) off[e + 1] = off[e] + cnt[e];
    const int64_t n = off[E], ldy = rows + 2, ldxs = n + 3, kb = cols / 128;
    float *x = ct_hmalloc(sizeof(float) * n * cols), *xd = ct_hmalloc(sizeof(float) * n * cols);
    ct_fill_normal(x, n * cols, 1.0f);
    for (int64_t p = 0; p < n; p++) /* rows of different sizes: their scales differ */
        for (int64_t k = 0; k < cols; k++) x[p * cols + k] *= (float)(1 + p % 7) * 0.3f;
    uint8_t *q = ct_hmalloc((size_t)(n * cols));
    float *qs = ct_hmalloc(sizeof(float) * (size_t)(kb * n));
    kn_quant_e4m3_groups(x, n, cols, cols, 128, q, qs);
    for (int64_t p = 0; p < n; p++)
        for (int64_t k = 0; k < cols; k++)
            xd[p * cols + k] = mm_f8e4m3_to_f32(q[p * cols + k]) * qs[(k / 128) * n + p];
    struct fp8_tables tb;
    fp8_tables_make(&tb, tables * E, rows, cols, 128, 128);
    float *ref[2] = {ct_hmalloc(sizeof(float) * n * rows), ct_hmalloc(sizeof(float) * n * rows)};
    for (int half = 0; half < tables; half++)
        for (int e = 0; e < E; e++)
            if (cnt[e])
                kn_sgemm_nt(cnt[e], rows, cols, xd + (int64_t)off[e] * cols, cols, tb.f[half * E + e].wf,
                            cols, 0.0f, ref[half] + (int64_t)off[e] * rows, rows);
    int32_t *off_d = ct_upload(off, sizeof(int32_t) * (size_t)(E + 1));
    float *x_d = ct_upload(x, sizeof(float) * n * cols),
          *xs_d = ct_dmalloc(sizeof(float) * (size_t)(kb * ldxs));
    uint8_t *xq_d = ct_dmalloc((size_t)(n * cols));
    OK(kn_cuda_x_e4m3_groups(n, cols, x_d, cols, xq_d, xs_d, ldxs, 0, &err));
    const uint8_t **wh = ct_hmalloc(sizeof(void *) * (size_t)(tables * E));
    for (int e = 0; e < tables * E; e++) wh[e] = tb.f[e].q_d;
    void *maps = NULL;
    OK(kn_cuda_experts_maps_create_e4m3(wh, tables * E, rows, cols, &maps, &err));
    const uint8_t *const *tq = tb.tq_d;
    const float *const *ts = tb.ts_d;
    float *y_d[2] = {ct_dmalloc(sizeof(float) * n * ldy), ct_dmalloc(sizeof(float) * n * ldy)};
    const int32_t junk = 777;
    int32_t *ctr = ct_upload(&junk, sizeof junk);
    float *first[2] = {NULL, NULL};
    double worst = 0;
    for (int pass = 0; pass < 2; pass++) { /* the dynamic tile order, then the static one */
        for (int h = 0; h < 2; h++) CHECK(cudaMemset(y_d[h], 0xff, sizeof(float) * n * ldy) == cudaSuccess);
        OK(kn_cuda_gemm_experts_e4m3(E, off_d, n, rows, cols, xq_d, xs_d, ldxs, tq, ts,
                                     tables == 2 ? tq + E : NULL, tables == 2 ? ts + E : NULL, maps,
                                     tables == 2 ? (const uint8_t *)maps + (size_t)E * KN_CUDA_TMAP_BYTES
                                                 : NULL,
                                     y_d[0], tables == 2 ? y_d[1] : NULL, ldy, pass ? NULL : ctr, 0, &err));
        for (int half = 0; half < tables; half++) {
            float *got = dl_f32(y_d[half], n * ldy);
            int untouched = 1, bad = 0;
            for (int64_t p = 0; p < n; p++) {
                for (int64_t r = rows; r < ldy; r++) untouched &= isnan(got[p * ldy + r]);
                double mx = 0, rel = ct_rel_err(got + p * ldy, ref[half] + p * rows, rows, &mx);
                if (!(rel <= 1e-3)) bad++;
                if (rel > worst) worst = rel;
            }
            char what[128];
            snprintf(what, sizeof what, "gemm experts e4m3, %s, %d experts %lldx%lld, %s, %s",
                     tile == 2 ? "256x128" : "128x256", E, (long long)rows, (long long)cols,
                     tables == 1 ? "one table"
                     : half      ? "second table"
                                 : "first table",
                     pass ? "static order" : "dynamic order");
            CHECK_MSG(!bad, "%s: %d of %lld rows off by more than 1e-3 (worst %.3g)", what, bad, (long long)n,
                      worst);
            CHECK_MSG(untouched, "%s: wrote outside its rows", what);
            if (!pass)
                first[half] = got;
            else {
                CHECK_MSG(!memcmp(got, first[half], sizeof(float) * n * ldy),
                          "%s: not the dynamic order's bits", what);
                free(got), free(first[half]);
            }
        }
    }
    printf("  %-28s %s, %d experts %lld x %lld, %d table%s: worst row %.2g\n", "gemm experts e4m3",
           tile == 2 ? "256x128" : "128x256", E, (long long)rows, (long long)cols, tables,
           tables > 1 ? "s" : "", worst);
    kn_cuda_experts_maps_free(maps);
    fp8_tables_free(&tb);
    free(off), free(x), free(xd), free(q), free(qs), free(ref[0]), free(ref[1]), free(wh);
    cudaFree(off_d), cudaFree(x_d), cudaFree(xs_d), cudaFree(xq_d), cudaFree(y_d[0]), cudaFree(y_d[1]);
    cudaFree(ctr);
}

static void test_gemm_experts_e4m3(void)
{
    const int32_t *cnt = g_expert_rows;
    int32_t many[40];
    for (int e = 0; e < 40; e++) many[e] = (int32_t)(ct_next() % 10);
    for (int tile = 1; tile <= 2; tile++) {
        knob_setenv("KN_CUDA_EXPERTS_TILE", tile == 2 ? "2" : "1", 1);
        experts_e4m3_case(9, cnt, 384, 512, 2, tile);
        experts_e4m3_case(9, cnt, 264, 384, 1, tile);
        experts_e4m3_case(40, many, 256, 128, 2, tile);
    }
    knob_unsetenv("KN_CUDA_EXPERTS_TILE");
    CHECK(kn_cuda_gemm_experts_e4m3_ok(512, 264, 384, 128, 128) &&
          !kn_cuda_gemm_experts_e4m3_ok(513, 264, 384, 128, 128));
    CHECK(!kn_cuda_gemm_experts_e4m3_ok(8, 260, 384, 128, 128) &&
          !kn_cuda_gemm_experts_e4m3_ok(8, 264, 320, 128, 128));
    CHECK(!kn_cuda_gemm_experts_e4m3_ok(8, 264, 384, 64, 128) &&
          !kn_cuda_gemm_experts_e4m3_ok(8, 264, 384, 128, 64));
    struct mm_err e2 = {0};
    /* no tensor maps: refused before any launch */
    CHECK(kn_cuda_gemm_experts_e4m3(8, (const int32_t *)16, 10, 264, 384, (const uint8_t *)16,
                                    (const float *)16, 10, (const uint8_t *const *)16,
                                    (const float *const *)16, NULL, NULL, NULL, NULL, (float *)16, NULL, 264,
                                    NULL, 0, &e2) == MM_INVALID);
    /* scale rows shorter than the routed rows */
    CHECK(kn_cuda_gemm_experts_e4m3(8, (const int32_t *)16, 10, 264, 384, (const uint8_t *)16,
                                    (const float *)16, 9, (const uint8_t *const *)16,
                                    (const float *const *)16, NULL, NULL, (const void *)16, NULL, (float *)16,
                                    NULL, 264, NULL, 0, &e2) == MM_INVALID);
    OK(kn_cuda_gemm_experts_e4m3(0, NULL, 0, 264, 384, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL,
                                 NULL, NULL, 264, NULL, 0, &err));
}

/* FP8 expert products of decode batches on the tensor cores (kn_cuda_gemm_small_experts_fp8): the rows sorted
 * by expert, gate and up tables in one launch, an expert with 17 rows (two chunks of 16), experts without
 * rows; each row against the CPU product with its expert's dequantized weight. Two shapes: 192 wide with
 * 64-wide scale blocks (most warps without a block) and 4608 wide with 128-wide ones (9 blocks a warp: the
 * ring wraps; a warp's sum flushed inside a scale block); by the register-fed kernel and the cp.async ring
 * with and without the activations a block ahead (KN_CUDA_GS_EXPERTS_RING 0 / 1 / 2), the rings bitwise the
 * register-fed kernel's. */
static void test_gemm_small_experts_fp8(void)
{
    enum { E = 5 };
    static const int64_t widths[2] = {192, 4608};
    static const int32_t bscs[2] = {64, 128};
    const int64_t rows = 40;
    const int32_t bsr = 16;
    const int32_t off[E + 1] = {0, 3, 3, 20, 20, 22};
    const int64_t P = off[E];
    double worst = 0;
    for (int si = 0; si < 2; si++) {
        const int64_t cols = widths[si];
        const int32_t bsc = bscs[si];
        struct fp8_tables tb;
        fp8_tables_make(&tb, 2 * E, rows, cols, bsr, bsc);
        const struct fp8_weight *f = tb.f;
        const uint8_t *const *tq = tb.tq_d;
        const float *const *ts = tb.ts_d;
        float *x = ct_hmalloc(sizeof(float) * P * cols), *xr = ct_hmalloc(sizeof(float) * P * cols);
        fp8_x_make(x, xr, P, cols, cols);
        float *x_d = ct_upload(x, sizeof(float) * P * cols), *xs_d = ct_dmalloc(sizeof(float) * P);
        void *xh_d = ct_dmalloc(sizeof(uint16_t) * (size_t)(P * cols));
        int32_t *off_d = ct_upload(off, sizeof off);
        float *ya_d = ct_dmalloc(sizeof(float) * P * rows), *yb_d = ct_dmalloc(sizeof(float) * P * rows);
        OK(kn_cuda_x_f16_scaled(P, cols, x_d, cols, xh_d, xs_d, 0, &err));
        CHECK(kn_cuda_gemm_small_experts_fp8_ok(cols, bsr, bsc));
        float *ref = ct_hmalloc(sizeof(float) * rows), *first[2] = {NULL, NULL};
        for (int rg = 0; rg < 3; rg++) {
            char rv[2] = {(char)('0' + rg), 0};
            knob_setenv("KN_CUDA_GS_EXPERTS_RING", rv, 1);
            OK(kn_cuda_gemm_small_experts_fp8(E, off_d, rows, cols, xh_d, xs_d, tq, ts, tq + E, ts + E, bsr,
                                              bsc, ya_d, yb_d, rows, 0, &err));
            for (int half = 0; half < 2; half++) {
                float *got = dl_f32(half ? yb_d : ya_d, P * rows);
                for (int e = 0; e < E; e++)
                    for (int32_t p = off[e]; p < off[e + 1]; p++) {
                        kn_sgemm_nt(1, rows, cols, xr + p * cols, cols, f[half * E + e].wf, cols, 0.0f, ref,
                                    rows);
                        double mx = 0, rel = ct_rel_err(got + p * rows, ref, rows, &mx);
                        worst = rel > worst ? rel : worst;
                        CHECK_MSG(
                            rel <= 1e-5,
                            "experts small fp8 %lld wide, ring %d, table %d expert %d row %d: rel err %.3g",
                            (long long)cols, rg, half, e, (int)p, rel);
                    }
                if (rg == 0) {
                    first[half] = got;
                } else {
                    CHECK_MSG(!memcmp(first[half], got, sizeof(float) * P * rows),
                              "experts small fp8 %lld wide, ring %d, table %d: differs from the register-fed "
                              "kernel's bits",
                              (long long)cols, rg, half);
                    free(got);
                }
            }
        }
        knob_unsetenv("KN_CUDA_GS_EXPERTS_RING");
        free(first[0]), free(first[1]);
        free(x), free(xr), free(ref);
        fp8_tables_free(&tb);
        cudaFree(x_d), cudaFree(xs_d), cudaFree(xh_d), cudaFree(off_d);
        cudaFree(ya_d), cudaFree(yb_d);
    }
    printf("  %-28s 2 tables, 5 experts (17 rows, none), 2 widths, 3 kernels: worst row rel err %.3g\n",
           "experts small fp8", worst);
    CHECK(!kn_cuda_gemm_small_experts_fp8_ok(96, 16, 64));
    CHECK(!kn_cuda_gemm_small_experts_fp8_ok(192, 16, 32));
}

static void test_bad_args(void)
{
    /* refused on the host, nothing launched */
    struct mm_err e2 = {0};
    CHECK(kn_cuda_rmsnorm(NULL, 4, NULL, 3, 4, 1e-6f, NULL, 4, 0, 0, &e2) == MM_INVALID);
    CHECK(kn_cuda_moe_route(NULL, NULL, 1, 2, 3, 1.0f, NULL, NULL, 0, &e2) == MM_INVALID);
    struct kn_cuda_msa_shape sh = {64, 4, 128, 4, 128, 128, 64, 1, 0.088f}; /* topk over the maximum */
    struct kn_cuda_qbatch qb = {0};
    struct kn_cuda_cache c = {0};
    CHECK(kn_cuda_msa_attention(&sh, &qb, &c, NULL, NULL, 16, NULL, NULL, 0, KN_PATH_AUTO, 0, &e2) ==
          MM_INVALID);
    CHECK(strstr(e2.msg, "topk") != NULL);
}

/* The knob cache: a value stays as read until kn_cuda_knobs_reload; empty or unset gives the default;
 * KN_CUDA_KNOB_CACHE=0 reads the environment at every call. */
static void test_knob_cache(void)
{
    static const char *const name = "KN_CUDA_TEST_KNOB";
    knob_unsetenv(name);
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 7);
    setenv(name, "3", 1); /* no reload: the cached "unset" stands */
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 7);
    kn_cuda_knobs_reload();
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 3);
    knob_setenv(name, "", 1);
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 7);
    knob_setenv(name, "-2", 1);
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), -2);
    knob_setenv("KN_CUDA_KNOB_CACHE", "0", 1);
    setenv(name, "5", 1);
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 5);
    knob_unsetenv("KN_CUDA_KNOB_CACHE");
    knob_unsetenv(name);
    CHECK_EQ_INT(kn_cuda_knob_value(name, 7), 7);
}

int main(void)
{
    ct_require_gpu();
    test_knob_cache();
    ct_seed(7);
    test_norms();
    test_activations();
    test_embed_dequant();
    test_argmax();
    test_topk_cands();
    test_topk_draw();
    test_attn_full();
    test_moe();
    test_moe_vec();
    test_gemv_halves();
    test_gemm();
    test_elementwise_vec();
    test_widen16();
    test_swiglu_vec();
    test_gemv();
    test_gemv_experts();
    test_gemv_experts_group();
    test_gemv_fp8();
    test_experts_fp8_bulk();
    /* the ring without x converted once per CTA (the default converts it at 1-2 rows): every ring entry of
     * both tests again */
    setenv("KN_CUDA_GEMV_FP8_RING_XS", "0", 1);
    kn_cuda_knobs_reload();
    printf("  (KN_CUDA_GEMV_FP8_RING_XS=0)\n");
    test_gemv_fp8();
    test_experts_fp8_bulk();
    unsetenv("KN_CUDA_GEMV_FP8_RING_XS");
    kn_cuda_knobs_reload();
    test_experts_fp8();
    test_gemm_small_fp8();
    test_gemm_small_experts_fp8();
    test_gemm_fp8_block();
    test_e4m3_fused();
    test_gemm_experts_e4m3();
    test_gemm_small();
    test_gemm_small_experts(512);
    test_gemm_small_experts(96);   /* 3 k blocks: most warps get none */
    test_gemm_small_experts(3072); /* 12 k blocks a warp: the rings wrap */
    test_gemm_experts();
    test_bad_args();
    CT_CU(cudaDeviceSynchronize());
    return test_done();
}
