/* Hot loops of the resampler (see gw_media_simd.h). The AVX2 kernels follow the layout Pillow-SIMD made
 * popular: the horizontal pass turns pairs of taps into int16 pairs with one byte shuffle and multiplies
 * them by packed weight pairs (pmaddwd), two output pixels per 256-bit register; the vertical pass
 * interleaves two source rows and does the same across 16 columns. */
#include <stdlib.h>
#include <string.h>

#include "gw_media_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GW_X86 1
#include <immintrin.h>
#endif

static inline uint8_t clip8(int32_t v, uint32_t prec)
{
    v >>= prec; /* arithmetic shift, as the reference does */
    return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

/* ---- portable versions ---- */

#define VPASS_BLOCK 1024

static void vpass_c(const uint8_t *const *rows, const int16_t *w, uint32_t k, uint32_t prec, size_t n,
                    uint8_t *out)
{
    int32_t acc[VPASS_BLOCK];
    const int32_t half = prec ? 1 << (prec - 1) : 0;
    for (size_t i0 = 0; i0 < n; i0 += VPASS_BLOCK) {
        size_t m = n - i0 < VPASS_BLOCK ? n - i0 : VPASS_BLOCK;
        for (size_t i = 0; i < m; i++) acc[i] = half;
        for (uint32_t j = 0; j < k; j++) {
            const int32_t wj = w[j];
            if (wj == 0) continue;
            const uint8_t *r = rows[j] + i0;
            for (size_t i = 0; i < m; i++) acc[i] += wj * (int32_t)r[i];
        }
        for (size_t i = 0; i < m; i++) out[i0 + i] = clip8(acc[i], prec);
    }
}

static void hpass_pixel_c(const uint8_t *in, uint32_t start, const uint32_t *wpair, uint32_t kpad,
                          uint32_t prec, uint8_t *out)
{
    const int32_t half = prec ? 1 << (prec - 1) : 0;
    int32_t a0 = half, a1 = half, a2 = half;
    const uint8_t *p = in + (size_t)start * 3;
    for (uint32_t j = 0; j < kpad; j++) {
        uint32_t pr = wpair[j / 2];
        int32_t wj = (int16_t)(j & 1 ? pr >> 16 : pr & 0xFFFF);
        a0 += wj * p[j * 3 + 0];
        a1 += wj * p[j * 3 + 1];
        a2 += wj * p[j * 3 + 2];
    }
    out[0] = clip8(a0, prec);
    out[1] = clip8(a1, prec);
    out[2] = clip8(a2, prec);
}

static void hpass_c(const uint8_t *in, const uint32_t *start, const uint32_t *wpair, uint32_t kpad,
                    uint32_t prec, uint32_t out_w, uint8_t *out)
{
    for (uint32_t x = 0; x < out_w; x++)
        hpass_pixel_c(in, start[x], wpair + (size_t)x * (kpad / 2), kpad, prec, out + (size_t)x * 3);
}

/* ---- AVX2 versions ---- */

#ifdef GW_X86
__attribute__((target("avx2"))) static void vpass_avx2(const uint8_t *const *rows, const int16_t *w,
                                                       uint32_t k, uint32_t prec, size_t n, uint8_t *out)
{
    const __m256i half = _mm256_set1_epi32(prec ? 1 << (prec - 1) : 0);
    const __m128i shift = _mm_cvtsi32_si128((int)prec);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i acc0 = half, acc1 = half;
        uint32_t j = 0;
        for (; j + 2 <= k; j += 2) {
            const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(rows[j] + i)));
            const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(rows[j + 1] + i)));
            const __m256i wp =
                _mm256_set1_epi32((int32_t)(((uint32_t)(uint16_t)w[j + 1] << 16) | (uint16_t)w[j]));
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, b), wp));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, b), wp));
        }
        if (j < k) {
            const __m256i a = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(rows[j] + i)));
            const __m256i wp = _mm256_set1_epi32((uint16_t)w[j]);
            const __m256i z = _mm256_setzero_si256();
            acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi16(a, z), wp));
            acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi16(a, z), wp));
        }
        acc0 = _mm256_sra_epi32(acc0, shift);
        acc1 = _mm256_sra_epi32(acc1, shift);
        /* per 128-bit lane: acc0 holds columns 0-3 (8-11), acc1 columns 4-7 (12-15) */
        __m256i s16 = _mm256_packs_epi32(acc0, acc1);
        __m256i u8 = _mm256_packus_epi16(s16, s16);
        u8 = _mm256_permute4x64_epi64(u8, 0x08); /* qwords 0 and 2 -> the low 128 bits */
        _mm_storeu_si128((__m128i *)(out + i), _mm256_castsi256_si128(u8));
    }
    for (; i < n; i++) { /* the tail columns */
        int32_t acc = prec ? 1 << (prec - 1) : 0;
        for (uint32_t j = 0; j < k; j++) acc += w[j] * (int32_t)rows[j][i];
        out[i] = clip8(acc, prec);
    }
}

/* Weights laid out for hpass_avx2: per pair of output pixels (x, x+1) and group of 4 taps, two 256-bit
 * vectors: taps (j, j+1) of x broadcast in the low lane and of x+1 in the high lane, then taps (j+2, j+3). */
static uint32_t *expand_weights(const uint32_t *wpair, uint32_t kpad, uint32_t out_w)
{
    const uint32_t np = kpad / 2, groups = kpad / 4, pairs = (out_w + 1) / 2;
    uint32_t *e = gw_aligned_alloc((size_t)pairs * groups * 16 * sizeof *e);
    if (!e) return NULL;
    for (uint32_t p = 0; p < pairs; p++)
        for (uint32_t g = 0; g < groups; g++) {
            uint32_t *v = e + ((size_t)p * groups + g) * 16;
            for (uint32_t half = 0; half < 2; half++) {
                uint32_t x = 2 * p + half;
                for (uint32_t ab = 0; ab < 2; ab++) {
                    uint32_t val = x < out_w ? wpair[(size_t)x * np + 2 * g + ab] : 0;
                    for (uint32_t l = 0; l < 4; l++) v[ab * 8 + half * 4 + l] = val;
                }
            }
        }
    return e;
}

__attribute__((target("avx2"))) static void hpass_avx2(const uint8_t *in, const uint32_t *start,
                                                       const uint32_t *wexp, uint32_t kpad, uint32_t prec,
                                                       uint32_t out_w, uint8_t *out)
{
    /* int16 lanes R_j, R_j+1, G_j, G_j+1, B_j, B_j+1, 0, 0 from a 16-byte load at pixel j: taps (j, j+1) with
     * ma and (j+2, j+3) with mb */
    const __m256i ma = _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 0, -1, 3,
                                        -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m256i mb = _mm256_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1, 6, -1, 9,
                                        -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    const __m256i half = _mm256_set1_epi32(prec ? 1 << (prec - 1) : 0);
    const __m128i shift = _mm_cvtsi32_si128((int)prec);
    const uint32_t groups = kpad / 4;
    for (uint32_t x = 0; x < out_w; x += 2) {
        const uint32_t x1 = x + 1 < out_w ? x + 1 : x; /* an odd last pixel pairs with itself (weights 0) */
        const uint8_t *p0 = in + (size_t)start[x] * 3, *p1 = in + (size_t)start[x1] * 3;
        const __m256i *w = (const __m256i *)(wexp + (size_t)(x / 2) * groups * 16);
        __m256i acc0 = half, acc1 = _mm256_setzero_si256();
        for (uint32_t g = 0; g < groups; g++) {
            /* two 16-byte broadcasts and a blend: loads and a cheap blend instead of an insert on the
             * shuffle port, which the two byte shuffles below already keep busy */
            const __m256i v = _mm256_blend_epi32(
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + 12 * g))),
                _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p1 + 12 * g))), 0xF0);
            acc0 = _mm256_add_epi32(
                acc0, _mm256_madd_epi16(_mm256_shuffle_epi8(v, ma), _mm256_load_si256(w + 2 * g)));
            acc1 = _mm256_add_epi32(
                acc1, _mm256_madd_epi16(_mm256_shuffle_epi8(v, mb), _mm256_load_si256(w + 2 * g + 1)));
        }
        __m256i acc = _mm256_sra_epi32(_mm256_add_epi32(acc0, acc1), shift);
        __m256i s16 = _mm256_packs_epi32(acc, acc);
        __m256i u8 = _mm256_packus_epi16(s16, s16);
        uint32_t lo = (uint32_t)_mm_cvtsi128_si32(_mm256_castsi256_si128(u8));
        uint32_t hi = (uint32_t)_mm_cvtsi128_si32(_mm256_extracti128_si256(u8, 1));
        memcpy(out + (size_t)x * 3, &lo, 3);
        if (x + 1 < out_w) memcpy(out + (size_t)x * 3 + 3, &hi, 3);
    }
}
#endif

/* ---- dispatch ---- */

#ifdef GW_X86
static int cached = -1;
#endif

static int have_avx2(void)
{
#ifdef GW_X86
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("avx2") && !getenv("MMGW_NO_AVX2");
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
#else
    return 0;
#endif
}

int gw_simd_have_avx2(void)
{
    return have_avx2();
}

void gw_simd_use_avx2(int enable)
{
#ifdef GW_X86
    __atomic_store_n(&cached, enable && __builtin_cpu_supports("avx2"), __ATOMIC_RELAXED);
#else
    (void)enable;
#endif
}

void gw_simd_vpass_u8(const uint8_t *const *rows, const int16_t *w, uint32_t k, uint32_t prec, size_t n,
                      uint8_t *out)
{
#ifdef GW_X86
    if (have_avx2()) {
        vpass_avx2(rows, w, k, prec, n, out);
        return;
    }
#endif
    vpass_c(rows, w, k, prec, n, out);
}

void *gw_simd_hpass_prepare(const uint32_t *wpair, uint32_t kpad, uint32_t out_w)
{
#ifdef GW_X86
    if (have_avx2()) return expand_weights(wpair, kpad, out_w);
#endif
    (void)wpair, (void)kpad, (void)out_w;
    return NULL;
}

void gw_simd_hpass_u8(const uint8_t *in, const uint32_t *start, const uint32_t *wpair, const void *prepared,
                      uint32_t kpad, uint32_t prec, uint32_t out_w, uint8_t *out)
{
#ifdef GW_X86
    if (prepared) {
        hpass_avx2(in, start, prepared, kpad, prec, out_w, out);
        return;
    }
#endif
    hpass_c(in, start, wpair, kpad, prec, out_w, out);
}

void *gw_aligned_alloc(size_t size)
{
    void *p = NULL;
    if (size == 0) size = 1;
    if (posix_memalign(&p, 64, size) != 0) return NULL;
    return p;
}

void gw_aligned_free(void *p)
{
    free(p);
}
