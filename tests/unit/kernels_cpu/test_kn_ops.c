/* Norms, activations, RoPE, GEMM and attention kernels against hand-computed values and naive loops. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kn_act.h"
#include "kn_attn.h"
#include "kn_gemm.h"
#include "kn_norm.h"
#include "kn_quant.h"
#include "kn_rope.h"
#include "mm_dtype.h"
#include "mmgw_test.h"

static void test_norms(void)
{
    float x[4] = {3, 4, 1, -1}, w[2] = {0, 1}, o[4];
    kn_rmsnorm_gemma(x, 2, w, 2, 2, 0.0f, o, 2);
    double r = sqrt(12.5);
    CHECK_NEAR(o[0], 3 / r, 1e-6);
    CHECK_NEAR(o[1], 4 / r * 2, 1e-6);
    CHECK_NEAR(o[2], 1.0, 1e-6);
    CHECK_NEAR(o[3], -2.0, 1e-6);
    /* eps counts */
    kn_rmsnorm_gemma(x, 2, w, 1, 2, 1.0f, o, 2);
    CHECK_NEAR(o[0], 3 / sqrt(13.5), 1e-6);
    /* per-head: two heads share the weight */
    float hx[4] = {3, 4, 6, 8};
    kn_head_rmsnorm_gemma(hx, 1, 2, 2, 4, w, 0.0f);
    CHECK_NEAR(hx[0], 3 / r, 1e-6);
    CHECK_NEAR(hx[3], 8 / (2 * r) * 2, 1e-6);
    /* LayerNorm: mean 2, var 2/3 for (1,2,3) */
    float lx[3] = {1, 2, 3}, lw[3] = {1, 2, 1}, lb[3] = {0, 0, 0.5f}, lo[3];
    kn_layernorm(lx, 3, lw, lb, 1, 3, 0.0f, lo, 3);
    double sd = sqrt(2.0 / 3.0);
    CHECK_NEAR(lo[0], -1 / sd, 1e-6);
    CHECK_NEAR(lo[1], 0, 1e-6);
    CHECK_NEAR(lo[2], 1 / sd + 0.5, 1e-6);
}

static double sigm(double v)
{
    return 1 / (1 + exp(-v));
}

static void test_act(void)
{
    float g[3] = {1, 10, -2}, u[3] = {0.5f, -10, 9}, o[3];
    kn_swiglu_clamped(g, u, 3, 1.702f, 7.0f, o);
    CHECK_NEAR(o[0], 1.5 * 1 * sigm(1.702), 1e-6);
    CHECK_NEAR(o[1], -6 * 7 * sigm(7 * 1.702), 1e-5);  /* gate capped at 7, up at -7 */
    CHECK_NEAR(o[2], 8 * -2 * sigm(-2 * 1.702), 1e-6); /* up capped at 7; a negative gate is not clamped */
    /* a sweep through the vectorized exp: very negative gates (exp(-alpha g) large, then clamped) to the cap
     */
    enum { SW = 1201 };
    static float sg[SW], su[SW], so[SW];
    for (int i = 0; i < SW; i++) {
        sg[i] = -100.0f + 0.1f * (float)i;
        su[i] = -10.0f + (float)(i % 21);
    }
    kn_swiglu_clamped(sg, su, SW, 1.702f, 7.0f, so);
    int bad = 0;
    for (int i = 0; i < SW; i++) {
        double gd = sg[i] < 7 ? sg[i] : 7, ud = su[i] < -7 ? -7 : (su[i] > 7 ? 7 : su[i]);
        double r = (ud + 1) * gd * sigm(1.702 * gd);
        bad += !(fabs(so[i] - r) <= 1e-6 * (1 + fabs(r)));
    }
    CHECK_MSG(!bad, "swiglu sweep: %d of %d off by more than 1e-6 relative", bad, SW);
    float x[3] = {1, -1, 0};
    kn_gelu(x, 3, KN_GELU_ERF);
    CHECK_NEAR(x[0], 0.8413447460685429, 1e-6);
    CHECK_NEAR(x[1], -0.15865525393145707, 1e-6);
    CHECK_NEAR(x[2], 0, 0);
    float y[1] = {1};
    kn_gelu(y, 1, KN_GELU_TANH);
    CHECK_NEAR(y[0], 0.8411919906082768, 1e-6);
    float s[3] = {1, 2, -INFINITY};
    kn_softmax_row(s, 3);
    CHECK_NEAR(s[0], 1 / (1 + exp(1.0)), 1e-6);
    CHECK_NEAR(s[2], 0, 0);
}

static void test_rope(void)
{
    /* rot_dim 4, theta 100: frequencies 1 and 0.1; position 2 */
    int64_t pos[1] = {2};
    float c[4], s[4];
    kn_rope_text_table(pos, 1, 4, 100.0, c, s);
    CHECK_NEAR(c[0], cos(2.0), 1e-6);
    CHECK_NEAR(c[1], cos(0.2), 1e-6);
    CHECK_NEAR(c[2], cos(2.0), 1e-6);
    CHECK_NEAR(s[3], sin(0.2), 1e-6);
    /* head_dim 6, rot 4: dims 4, 5 pass through; x0 pairs with x2, x1 with x3 */
    float x[6] = {1, 2, 3, 4, 5, 6};
    kn_rope_apply(x, 1, 1, 6, 6, c, s, 4, 4);
    CHECK_NEAR(x[0], 1 * cos(2.0) - 3 * sin(2.0), 1e-6);
    CHECK_NEAR(x[2], 3 * cos(2.0) + 1 * sin(2.0), 1e-6);
    CHECK_NEAR(x[1], 2 * cos(0.2) - 4 * sin(0.2), 1e-6);
    CHECK_NEAR(x[3], 4 * cos(0.2) + 2 * sin(0.2), 1e-6);
    CHECK_NEAR(x[4], 5, 0);
    CHECK_NEAR(x[5], 6, 0);
    /* vision: head_dim 80 -> 26 dims per axis; head_dim 16 -> 4 */
    CHECK_EQ_INT(kn_rope_vision_axis_dim(80), 26);
    CHECK_EQ_INT(kn_rope_vision_axis_dim(16), 4);
    /* grid t=2, h=2, w=4, merge 2: rows ordered (t, h/2, w/2, 2, 2); head_dim 16 -> table of 12 */
    float vc[16 * 12], vs[16 * 12];
    kn_rope_vision_table(2, 2, 4, 2, 16, 10000.0, vc, vs);
    /* row 5 = t0, wb1, (mh 0, mw 1) -> h 0, w 3; freqs per axis: 1, 0.01 */
    CHECK_NEAR(vs[5 * 12 + 0], sin(0.0), 1e-7);  /* t */
    CHECK_NEAR(vs[5 * 12 + 2], sin(0.0), 1e-7);  /* h */
    CHECK_NEAR(vs[5 * 12 + 4], sin(3.0), 1e-6);  /* w */
    CHECK_NEAR(vs[5 * 12 + 5], sin(0.03), 1e-6); /* w, second freq */
    CHECK_NEAR(vs[5 * 12 + 10], sin(3.0), 1e-6); /* duplicated half */
    /* row 14 = t1, wb1, mh 1, mw 0 -> t 1, h 1, w 2 */
    CHECK_NEAR(vc[14 * 12 + 0], cos(1.0), 1e-6);
    CHECK_NEAR(vc[14 * 12 + 2], cos(1.0), 1e-6);
    CHECK_NEAR(vc[14 * 12 + 4], cos(2.0), 1e-6);
}

static void test_gemm(void)
{
    enum { M = 5, N = 7, K = 33 };
    float a[M * K], b[N * K], bt[K * N], c[M * N], c2[M * N];
    for (int i = 0; i < M * K; i++) a[i] = (float)((i * 37 % 11) - 5) / 7.0f;
    for (int i = 0; i < N * K; i++) b[i] = (float)((i * 13 % 17) - 8) / 9.0f;
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) bt[k * N + n] = b[n * K + k];
    kn_sgemm_nt(M, N, K, a, K, b, K, 0.0f, c, N);
    kn_sgemm_nn(M, N, K, a, K, bt, N, 0.0f, c2, N);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double r = 0;
            for (int k = 0; k < K; k++) r += (double)a[i * K + k] * b[j * K + k];
            CHECK_NEAR(c[i * N + j], r, 1e-4);
            CHECK_NEAR(c2[i * N + j], r, 1e-4);
        }
    /* beta = 1 accumulates */
    kn_sgemm_nt(M, N, K, a, K, b, K, 1.0f, c, N);
    CHECK_NEAR(c[3], 2 * c2[3], 1e-4);
    double r19 = 0;
    for (int k = 0; k < 19; k++) r19 += (double)a[k] * b[k];
    CHECK_NEAR(kn_dot(a, b, 19), r19, 1e-5);
}

static void test_attn(void)
{
    /* full attention vs naive: 5 rows, 2 heads of 3 */
    enum { N = 5, H = 2, D = 3, S = H * D };
    float q[N * S], k[N * S], v[N * S], o[N * S], scr[2 * N];
    for (int i = 0; i < N * S; i++) {
        q[i] = sinf((float)i);
        k[i] = cosf((float)i * 1.3f);
        v[i] = (float)(i % 7) - 3;
    }
    kn_attn_full(q, k, v, S, N, H, D, 0.5f, o, S, scr, 2 * N); /* two query rows per product */
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            double w[N], m = -1e30, z = 0;
            for (int j = 0; j < N; j++) {
                double d = 0;
                for (int x = 0; x < D; x++) d += (double)q[i * S + h * D + x] * k[j * S + h * D + x];
                w[j] = d * 0.5;
                m = w[j] > m ? w[j] : m;
            }
            for (int j = 0; j < N; j++) z += exp(w[j] - m);
            for (int x = 0; x < D; x++) {
                double r = 0;
                for (int j = 0; j < N; j++) r += exp(w[j] - m) / z * v[j * S + h * D + x];
                CHECK_NEAR(o[i * S + h * D + x], r, 1e-5);
            }
        }
    /* paged causal: 7 tokens, block 3, 1 KV head of 2, 2 query heads; compare to a naive causal pass */
    const int32_t bt[3] = {2, 0, 1};
    float kc[9 * 2], vc[9 * 2], K2[7 * 2], V2[7 * 2];
    for (int t = 0; t < 7; t++)
        for (int x = 0; x < 2; x++) {
            int slot = bt[t / 3] * 3 + t % 3;
            K2[t * 2 + x] = kc[slot * 2 + x] = sinf((float)(t * 2 + x));
            V2[t * 2 + x] = vc[slot * 2 + x] = (float)(t - x);
        }
    struct kn_paged_seq seq = {bt, 7};
    int64_t pos[2] = {6, 2};
    float qq[2 * 2 * 2] = {1, 0.5f, -1, 2, 0.3f, 0.2f, 1, 1}, oo[8];
    kn_attn_paged_causal(qq, 2, pos, 2, 1, 2, 0.7f, kc, vc, 3, &seq, oo);
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < 2; h++) {
            double w[7], m = -1e30, z = 0;
            for (int t = 0; t <= pos[i]; t++) {
                w[t] = 0.7 * ((double)qq[(i * 2 + h) * 2] * K2[t * 2] +
                              (double)qq[(i * 2 + h) * 2 + 1] * K2[t * 2 + 1]);
                m = w[t] > m ? w[t] : m;
            }
            for (int t = 0; t <= pos[i]; t++) z += exp(w[t] - m);
            for (int x = 0; x < 2; x++) {
                double r = 0;
                for (int t = 0; t <= pos[i]; t++) r += exp(w[t] - m) / z * V2[t * 2 + x];
                CHECK_NEAR(oo[(i * 2 + h) * 2 + x], r, 1e-5);
            }
        }
}

/* kn_quant_e4m3_groups: each group's largest magnitude maps to e4m3's 448 (code 0x7e, sign kept), every
 * value comes back within e4m3's half step of its group's scale, an all-zero group gets scale 1 and zero
 * codes, a short last group has its own scale, the scales are stored group-major, the row stride is honoured
 */
static void test_quant_e4m3(void)
{
    enum { N = 2, COLS = 10, LDX = 12, G = 4, NG = 3 };
    float x[N][LDX] = {{1.0f, -2.0f, 0.3f, 1e-6f, 0, 0, 0, 0, 7.0f, -0.5f, 99.0f, 99.0f},
                       {-5.0f, 4.9f, 2.5f, 0.0f, 0.1f, 0.2f, -0.4f, 0.3f, 0.0f, 0.0f, 99.0f, 99.0f}};
    uint8_t q[N * COLS];
    float qs[NG * N];
    kn_quant_e4m3_groups(&x[0][0], N, COLS, LDX, G, q, qs);
    CHECK(qs[0 * N + 0] == 2.0f / 448.0f && qs[0 * N + 1] == 5.0f / 448.0f);
    CHECK(qs[1 * N + 0] == 1.0f && qs[1 * N + 1] == 0.4f / 448.0f); /* zero group; group-major */
    CHECK(qs[2 * N + 0] == 7.0f / 448.0f && qs[2 * N + 1] == 1.0f); /* the short last group */
    CHECK(q[1] == 0xfe && q[0 * COLS + 8] == 0x7e && q[1 * COLS + 0] == 0xfe && q[1 * COLS + 6] == 0xfe);
    for (int c = 4; c < 8; c++) CHECK(q[c] == 0);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < COLS; c++) {
            const float s = qs[(c / G) * N + r], back = mm_f8e4m3_to_f32(q[r * COLS + c]) * s;
            const float err = fabsf(back - x[r][c]);
            CHECK_MSG(err <= fabsf(x[r][c]) / 16.0f + s * 0x1p-10f, "row %d col %d: %g -> %g", r, c,
                      (double)x[r][c], (double)back);
        }
}

int main(void)
{
    test_norms();
    test_quant_e4m3();
    test_act();
    test_rope();
    test_gemm();
    test_attn();
    return test_done();
}
