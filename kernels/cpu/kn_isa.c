#include "kn_isa.h"

#include <stdlib.h>
#include <string.h>

#include "kn_simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* F16C by CPUID leaf 1: clang 14 (Debian 12) does not know "f16c" as a __builtin_cpu_supports name */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

int kn_isa_level__ = -1;

static int32_t detect(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("fma") && has_f16c())
        return KN_ISA_AVX512;
    /* F16C (half-precision conversion, for a half-precision KV cache) comes with every AVX2 CPU */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) return KN_ISA_AVX2;
#endif
    return KN_ISA_BASE;
}

int kn_isa_init__(void)
{
    int32_t lv = detect();
    const char *env = getenv("MMGW_CPU_ISA");
    if (env && !strcmp(env, "base")) lv = KN_ISA_BASE;
    if (env && !strcmp(env, "avx2") && lv > KN_ISA_AVX2) lv = KN_ISA_AVX2;
    /* benign race: every thread computes the same value */
    kn_isa_level__ = lv;
    return lv;
}

int32_t kn_isa_get(void)
{
    return kn_isa_level();
}

int32_t kn_isa_limit(int32_t max)
{
    int32_t hw = detect();
    kn_isa_level__ = max < hw ? (max < 0 ? 0 : max) : hw;
    return kn_isa_level__;
}

const char *kn_isa_name(int32_t isa)
{
    return isa == KN_ISA_AVX512 ? "avx512" : isa == KN_ISA_AVX2 ? "avx2" : "base";
}
