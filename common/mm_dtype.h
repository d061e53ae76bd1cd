/* Element types of tensors (safetensors names) and conversions between them.
 * bf16/f16/fp8 values travel as raw little-endian bits in uint16_t / uint8_t. */
#ifndef MM_DTYPE_H
#define MM_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum mm_dtype {
    MM_DT_INVALID = 0,
    MM_DT_F32,
    MM_DT_F16,
    MM_DT_BF16,
    MM_DT_F64,
    MM_DT_I8,
    MM_DT_I16,
    MM_DT_I32,
    MM_DT_I64,
    MM_DT_U8,
    MM_DT_BOOL,
    MM_DT_F8_E4M3,
    MM_DT_F8_E5M2,
    MM_DT_COUNT
};

/** Bytes per element; 0 for MM_DT_INVALID. */
size_t mm_dtype_size(int32_t dt);
/** Safetensors spelling ("F32", "BF16", "F8_E4M3"). */
const char *mm_dtype_name(int32_t dt);
/** Parse a safetensors dtype name; MM_DT_INVALID when unknown. */
int32_t mm_dtype_parse(const char *name);

static inline float mm_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/** Round to nearest even, NaN kept quiet (as torch does). */
static inline uint16_t mm_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mm_f16_to_f32(uint16_t h);
uint16_t mm_f32_to_f16(float f);
/** FP8 E4M3 (OCP "fn": no infinities, 0x7f/0xff are NaN, max 448). */
float mm_f8e4m3_to_f32(uint8_t v);
/** Round to nearest even with saturation to ±448. */
uint8_t mm_f32_to_f8e4m3(float f);
float mm_f8e5m2_to_f32(uint8_t v);

/** Convert n elements of src (type st) to float. Integer types convert by value. Returns 0, or -1 for an
 * unsupported type. */
int mm_convert_to_f32(float *dst, const void *src, int32_t st, size_t n);
/** Convert n floats to dst type dt (F32, F16, BF16, F8_E4M3). Returns 0 or -1. */
int mm_convert_from_f32(void *dst, int32_t dt, const float *src, size_t n);

#endif
