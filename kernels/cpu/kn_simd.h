/* Internal to kernels/cpu: inner loops compiled twice, for AVX2+FMA (picked at run time when the CPU has
 * both) and for the baseline ISA, from one always-inline body. A kernel file writes `KN_INLINE void
 * x_body(...)`, then `KN_DISPATCH(x, (params), (args))`, and calls `KN_CALL(x, (args))`. Bodies may call
 * other bodies: they inline into each variant, so a whole loop nest runs in one ISA without per-call
 * dispatch. */
#ifndef KN_SIMD_H
#define KN_SIMD_H

#include <stdint.h>

/* The level in use (kn_isa.h): detected once, cached in a global the dispatchers read. */
extern int kn_isa_level__;
int kn_isa_init__(void);
static inline int kn_isa_level(void)
{
    int v = kn_isa_level__;
    return v >= 0 ? v : kn_isa_init__();
}

#if defined(__x86_64__) && defined(__GNUC__)
#define KN_FAST_TARGET __attribute__((target("avx2,fma,f16c")))
/* prefer-vector-width=512: GCC otherwise vectorizes plain loops (norms, exp, scaling) in AVX-512 code with
 * 256-bit vectors. Clang does not take it in a target attribute. */
#if defined(__clang__)
#define KN_512_TARGET __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,f16c")))
#else
#define KN_512_TARGET                                                                                        \
    __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,f16c,prefer-vector-width=512")))
#endif
static inline int have_fast(void)
{
    return kn_isa_level() >= 1;
}
#define KN_DISPATCH(name, params, args)                                                                      \
    KN_FAST_TARGET static void name##_fast params                                                            \
    {                                                                                                        \
        name##_body args;                                                                                    \
    }                                                                                                        \
    static void name##_base params                                                                           \
    {                                                                                                        \
        name##_body args;                                                                                    \
    }
#define KN_CALL(name, args) (have_fast() ? name##_fast args : name##_base args)
/* Three variants: the body gets the level as a constant first argument, so it can pick register tilings per
 * instruction set (32 zmm, 16 ymm or 16 xmm registers). */
#define KN_DISPATCH3(name, params, args)                                                                     \
    KN_512_TARGET static void name##_512 params                                                              \
    {                                                                                                        \
        name##_body(2, KN_UNPAREN_ args);                                                                    \
    }                                                                                                        \
    KN_FAST_TARGET static void name##_fast params                                                            \
    {                                                                                                        \
        name##_body(1, KN_UNPAREN_ args);                                                                    \
    }                                                                                                        \
    static void name##_base params                                                                           \
    {                                                                                                        \
        name##_body(0, KN_UNPAREN_ args);                                                                    \
    }
#define KN_CALL3(name, args)                                                                                 \
    (kn_isa_level() >= 2 ? name##_512 args : kn_isa_level() == 1 ? name##_fast args : name##_base args)
#else
#define KN_DISPATCH(name, params, args)                                                                      \
    static void name##_base params                                                                           \
    {                                                                                                        \
        name##_body args;                                                                                    \
    }
#define KN_CALL(name, args) name##_base args
#define KN_DISPATCH3(name, params, args)                                                                     \
    static void name##_base params                                                                           \
    {                                                                                                        \
        name##_body(0, KN_UNPAREN_ args);                                                                    \
    }
#define KN_CALL3(name, args) name##_base args
#endif
#define KN_UNPAREN_(...) __VA_ARGS__
#define KN_INLINE static inline __attribute__((always_inline))

/* 8 float lanes (ymm registers in the AVX2 variants; pairs of xmm in the baseline) */
typedef float kn_v8f __attribute__((vector_size(32)));
/* 4 float lanes (xmm) */
typedef float kn_v4f __attribute__((vector_size(16)));
/* 16 float lanes (one zmm; two ymm or four xmm in the narrower variants) */
typedef float kn_v16f __attribute__((vector_size(64)));
/* unaligned views of float memory, for loads and stores the compiler keeps in registers (a memcpy into an
 * array of vectors can keep the whole array in memory) */
typedef float kn_v4f_u __attribute__((vector_size(16), aligned(4), may_alias));
typedef float kn_v8f_u __attribute__((vector_size(32), aligned(4), may_alias));
typedef float kn_v16f_u __attribute__((vector_size(64), aligned(4), may_alias));

KN_INLINE void dot_body(const float *restrict a, const float *restrict b, int64_t n, float *out)
{
    /* eight independent partial sums let the compiler use vector lanes without -ffast-math */
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) s[j] += a[i + j] * b[i + j];
    float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    for (; i < n; i++) t += a[i] * b[i];
    *out = t;
}

KN_INLINE void axpy_body(float *restrict y, const float *restrict x, float alpha, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

/* exp(x) for x <= 0 (softmax weights), branch-free so loops over it vectorize: 2^n * p(r) with
 * r = x - n ln2 in [-ln2/2, ln2/2] and a degree-6 polynomial (relative error < 2e-7). Below -87 it is 0. */
KN_INLINE float expneg_body(float x)
{
    float xc = x < -87.0f ? -87.0f : x;
    float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to the nearest integer */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float s;
    __builtin_memcpy(&s, &bits, 4);
    return x < -87.0f ? 0.0f : p * s;
}

/* exp(x) for any x, the same polynomial: arguments are clamped to [-87, 88] (exp(88) = 1.65e38 stays finite,
 * which is what a sigmoid needs), and below -87 it is 0. */
KN_INLINE float exp_body(float x)
{
    float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    float t = xc * 1.44269504088896341f + 12582912.0f;
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t e = (int32_t)n + 127;
    uint32_t bits = (uint32_t)e << 23;
    float s;
    __builtin_memcpy(&s, &bits, 4);
    return x < -87.0f ? 0.0f : p * s;
}

#endif
