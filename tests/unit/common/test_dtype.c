#include "mm_dtype.h"
#include "mmgw_test.h"

int main(void)
{
    CHECK_EQ_INT(mm_dtype_parse("BF16"), MM_DT_BF16);
    CHECK_EQ_INT(mm_dtype_parse("F8_E4M3"), MM_DT_F8_E4M3);
    CHECK_EQ_INT(mm_dtype_parse("Q4"), MM_DT_INVALID);
    CHECK_EQ_INT(mm_dtype_size(MM_DT_I64), 8);
    /* bf16: 1.0 = 0x3f80; 1 + 2^-8 rounds to even (down), 1 + 3*2^-8 rounds up */
    CHECK_EQ_INT(mm_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(mm_f32_to_bf16(1.00390625f), 0x3f80);
    CHECK_EQ_INT(mm_f32_to_bf16(1.01171875f), 0x3f82);
    CHECK_NEAR(mm_bf16_to_f32(0xc040), -3.0, 0);
    /* f16 */
    CHECK_EQ_INT(mm_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ_INT(mm_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ_INT(mm_f32_to_f16(1e6f), 0x7c00);
    CHECK_NEAR(mm_f16_to_f32(0x0001), 5.960464477539063e-08, 0);
    CHECK_EQ_INT(mm_f32_to_f16(5.960464477539063e-08f), 0x0001);
    for (uint32_t h = 0; h < 0x7c00; h++) CHECK_EQ_INT(mm_f32_to_f16(mm_f16_to_f32((uint16_t)h)), h);
    /* fp8 e4m3: 448 max, 2^-9 smallest subnormal, round trip of every finite code */
    CHECK_NEAR(mm_f8e4m3_to_f32(0x7e), 448.0, 0);
    CHECK_NEAR(mm_f8e4m3_to_f32(0x01), 0.001953125, 0);
    CHECK(isnan(mm_f8e4m3_to_f32(0x7f)));
    for (int v = 0; v < 0x7f; v++) {
        CHECK_EQ_INT(mm_f32_to_f8e4m3(mm_f8e4m3_to_f32((uint8_t)v)), v);
        CHECK_EQ_INT(mm_f32_to_f8e4m3(-mm_f8e4m3_to_f32((uint8_t)v)), v ? (v | 0x80) : 0x80);
    }
    CHECK_EQ_INT(mm_f32_to_f8e4m3(1000.0f), 0x7e);
    CHECK_EQ_INT(mm_f32_to_f8e4m3(1.0625f), 0x38); /* halfway between 1.0 (0x38) and 1.125: even */
    float src[3] = {1.5f, -2.0f, 0.25f}, dst[3];
    uint16_t bf[3];
    CHECK_EQ_INT(mm_convert_from_f32(bf, MM_DT_BF16, src, 3), 0);
    CHECK_EQ_INT(mm_convert_to_f32(dst, bf, MM_DT_BF16, 3), 0);
    CHECK_NEAR(dst[1], -2.0, 0);
    return test_done();
}
