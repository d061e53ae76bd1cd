#include "mm_dtype.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[MM_DT_COUNT] = {
    [MM_DT_INVALID] = {"INVALID", 0}, [MM_DT_F32] = {"F32", 4},   [MM_DT_F16] = {"F16", 2},
    [MM_DT_BF16] = {"BF16", 2},       [MM_DT_F64] = {"F64", 8},   [MM_DT_I8] = {"I8", 1},
    [MM_DT_I16] = {"I16", 2},         [MM_DT_I32] = {"I32", 4},   [MM_DT_I64] = {"I64", 8},
    [MM_DT_U8] = {"U8", 1},           [MM_DT_BOOL] = {"BOOL", 1}, [MM_DT_F8_E4M3] = {"F8_E4M3", 1},
    [MM_DT_F8_E5M2] = {"F8_E5M2", 1},
};

size_t mm_dtype_size(int32_t dt)
{
    return (dt > 0 && dt < MM_DT_COUNT) ? dtype_table[dt].size : 0;
}

const char *mm_dtype_name(int32_t dt)
{
    return (dt > 0 && dt < MM_DT_COUNT) ? dtype_table[dt].name : "INVALID";
}

int32_t mm_dtype_parse(const char *name)
{
    for (int32_t i = 1; i < MM_DT_COUNT; i++)
        if (strcmp(name, dtype_table[i].name) == 0) return i;
    return MM_DT_INVALID;
}

float mm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mm_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00);  /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow to inf (RNE boundary) */
    if (absu < 0x38800000u) {                                  /* subnormal or zero in f16 */
        float af;
        memcpy(&af, &absu, 4);
        /* scale so that the f16 subnormal unit becomes 1, then round to nearest even */
        float scaled = af * 16777216.0f; /* 2^24 */
        uint32_t m = (uint32_t)nearbyintf(scaled);
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((absu >> 23) - 112) << 10;
    uint32_t man = (absu >> 13) & 0x3ff;
    uint32_t rest = absu & 0x1fff;
    uint32_t h = exp | man;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float mm_f8e4m3_to_f32(uint8_t v)
{
    uint32_t sign = v >> 7;
    uint32_t exp = (v >> 3) & 0xf;
    uint32_t man = v & 0x7;
    float r;
    if (exp == 0xf && man == 0x7) return NAN;
    if (exp == 0)
        r = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
    else
        r = ldexpf(1.0f + (float)man / 8.0f, (int)exp - 7);
    return sign ? -r : r;
}

uint8_t mm_f32_to_f8e4m3(float f)
{
    if (isnan(f)) return 0x7f;
    uint8_t sign = signbit(f) ? 0x80 : 0;
    float a = fabsf(f);
    if (a >= 448.0f) return sign | 0x7e; /* saturate */
    /* try every code: 127 finite magnitudes; pick nearest, ties to even mantissa */
    int lo = 0, hi = 0x7e;
    while (lo < hi) { /* first code with value >= a */
        int mid = (lo + hi) / 2;
        if (mm_f8e4m3_to_f32((uint8_t)mid) < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    int best = lo;
    if (lo > 0) {
        float up = mm_f8e4m3_to_f32((uint8_t)lo), dn = mm_f8e4m3_to_f32((uint8_t)(lo - 1));
        if (a - dn < up - a || (a - dn == up - a && ((lo - 1) & 1) == 0)) best = lo - 1;
    }
    return sign | (uint8_t)best;
}

float mm_f8e5m2_to_f32(uint8_t v)
{
    return mm_f16_to_f32((uint16_t)((uint16_t)v << 8));
}

int mm_convert_to_f32(float *dst, const void *src, int32_t st, size_t n)
{
    switch (st) {
    case MM_DT_F32:
        memcpy(dst, src, n * 4);
        return 0;
    case MM_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = mm_f16_to_f32(h);
        }
        return 0;
    case MM_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, (const char *)src + 2 * i, 2);
            dst[i] = mm_bf16_to_f32(h);
        }
        return 0;
    case MM_DT_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, (const char *)src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    case MM_DT_F8_E4M3:
        for (size_t i = 0; i < n; i++) dst[i] = mm_f8e4m3_to_f32(((const uint8_t *)src)[i]);
        return 0;
    case MM_DT_F8_E5M2:
        for (size_t i = 0; i < n; i++) dst[i] = mm_f8e5m2_to_f32(((const uint8_t *)src)[i]);
        return 0;
    case MM_DT_I32:
        for (size_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, (const char *)src + 4 * i, 4);
            dst[i] = (float)v;
        }
        return 0;
    case MM_DT_I64:
        for (size_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, (const char *)src + 8 * i, 8);
            dst[i] = (float)v;
        }
        return 0;
    case MM_DT_U8:
    case MM_DT_BOOL:
        for (size_t i = 0; i < n; i++) dst[i] = (float)((const uint8_t *)src)[i];
        return 0;
    default:
        return -1;
    }
}

int mm_convert_from_f32(void *dst, int32_t dt, const float *src, size_t n)
{
    switch (dt) {
    case MM_DT_F32:
        memcpy(dst, src, n * 4);
        return 0;
    case MM_DT_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = mm_f32_to_f16(src[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        return 0;
    case MM_DT_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = mm_f32_to_bf16(src[i]);
            memcpy((char *)dst + 2 * i, &h, 2);
        }
        return 0;
    case MM_DT_F8_E4M3:
        for (size_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = mm_f32_to_f8e4m3(src[i]);
        return 0;
    default:
        return -1;
    }
}
