/* The wgmma building blocks of kn_wgmma.cuh against a CPU product, one warpgroup, before any kernel relies on
 * them: S = Q K^T with both operands K-major in 128B-swizzled shared memory (the score product), and
 * O = P V with P from registers and V MN-major in shared memory (the value product), 64 x 128 x 128 each.
 * Inputs are small integers, so every product and sum is exact in f32 and any layout slip (descriptor
 * offsets, swizzle, fragment order) shows as a mismatch, not as rounding. If the value product fails, the
 * same product with the two descriptor offsets exchanged is tried and reported, to name the culprit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_test_util.h"
#include "kn_wgmma.cuh"

#define WT_SMEM (1024 + 64 * 256 + 2 * 128 * 256)

/* a, b: row-major bf16 [64][128] and [128][128]; p, v likewise. d1 = a b^T, d2 = p v, [64][128] f32.
 * swap_v: build V's descriptor with the leading and stride offsets exchanged (diagnosis only). */
__global__ void __launch_bounds__(128) k_wgmma_test(const uint16_t *a, const uint16_t *b, const uint16_t *p,
                                                    const uint16_t *v, float *d1, float *d2, int swap_v)
{
    extern __shared__ __align__(1024) uint8_t smem[];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const uint32_t base = (kn_smem_addr(smem) + 1023u) & ~1023u;
    uint8_t *gen = smem + (base - kn_smem_addr(smem));
    const uint32_t a_s = base, b_s = base + 64 * 256, v_s = b_s + 128 * 256;
    for (int id = tid; id < 64 * 16; id += 128) {
        const int r = id >> 4, c = id & 15;
        *(uint4 *)(gen + wg_sw128_off(r, c, 64)) = *(const uint4 *)(a + r * 128 + c * 8);
    }
    for (int id = tid; id < 128 * 16; id += 128) {
        const int r = id >> 4, c = id & 15;
        *(uint4 *)(gen + (b_s - base) + wg_sw128_off(r, c, 128)) = *(const uint4 *)(b + r * 128 + c * 8);
        *(uint4 *)(gen + (v_s - base) + wg_sw128_off(r, c, 128)) = *(const uint4 *)(v + r * 128 + c * 8);
    }
    wg_fence_proxy_async();
    __syncthreads();

    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    wg_touch(d);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
        wg_mma_ss(d, wg_desc_kmajor(a_s, 64, kk), wg_desc_kmajor(b_s, 128, kk), kk > 0);
    wg_commit();
    wg_wait<0>();
    wg_touch(d);
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int row = 16 * w + gid + 8 * ((i & 3) >> 1), col = 8 * (i >> 2) + 2 * tig + (i & 1);
        d1[row * 128 + col] = d[i];
    }

    /* P fragments straight from global memory in the A layout: rows gid / gid+8 of this warp's 16 */
    uint32_t pa[8][4];
    const int r0 = 16 * w + gid;
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        const int c = 16 * kk + 2 * tig;
        pa[kk][0] = *(const uint32_t *)(p + r0 * 128 + c);
        pa[kk][1] = *(const uint32_t *)(p + (r0 + 8) * 128 + c);
        pa[kk][2] = *(const uint32_t *)(p + r0 * 128 + c + 8);
        pa[kk][3] = *(const uint32_t *)(p + (r0 + 8) * 128 + c + 8);
    }
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    wg_touch(d);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 8; kk++) {
        uint64_t dv = wg_desc_mnmajor(v_s, 128, kk);
        if (swap_v) dv = wg_desc(v_s + kk * 16 * 128, 1024, 128 * 128);
        wg_mma_rs_tb(d, pa[kk], dv, 1);
    }
    wg_commit();
    wg_wait<0>();
    wg_touch(d);
#pragma unroll
    for (int i = 0; i < 64; i++) {
        const int row = 16 * w + gid + 8 * ((i & 3) >> 1), col = 8 * (i >> 2) + 2 * tig + (i & 1);
        d2[row * 128 + col] = d[i];
    }
}

static void fill_small_ints(uint16_t *x, float *xf, int n)
{
    for (int i = 0; i < n; i++) {
        xf[i] = (float)((int)(ct_next() % 7) - 3);
        x[i] = mm_f32_to_bf16(xf[i]);
    }
}

/* Run the kernel; returns mismatches of d1 (score product) and d2 (value product) against the CPU. */
static void run(int swap_v, int64_t *bad1, int64_t *bad2)
{
    uint16_t *a = (uint16_t *)ct_hmalloc(64 * 128 * 2), *b = (uint16_t *)ct_hmalloc(128 * 128 * 2);
    uint16_t *p = (uint16_t *)ct_hmalloc(64 * 128 * 2), *v = (uint16_t *)ct_hmalloc(128 * 128 * 2);
    float *af = (float *)ct_hmalloc(64 * 128 * 4), *bf = (float *)ct_hmalloc(128 * 128 * 4);
    float *pf = (float *)ct_hmalloc(64 * 128 * 4), *vf = (float *)ct_hmalloc(128 * 128 * 4);
    ct_seed(90);
    fill_small_ints(a, af, 64 * 128);
    fill_small_ints(b, bf, 128 * 128);
    fill_small_ints(p, pf, 64 * 128);
    fill_small_ints(v, vf, 128 * 128);
    uint16_t *a_d = (uint16_t *)ct_upload(a, 64 * 128 * 2), *b_d = (uint16_t *)ct_upload(b, 128 * 128 * 2);
    uint16_t *p_d = (uint16_t *)ct_upload(p, 64 * 128 * 2), *v_d = (uint16_t *)ct_upload(v, 128 * 128 * 2);
    float *d1_d = (float *)ct_dmalloc(64 * 128 * 4), *d2_d = (float *)ct_dmalloc(64 * 128 * 4);
    CT_CU(cudaFuncSetAttribute(k_wgmma_test, cudaFuncAttributeMaxDynamicSharedMemorySize, WT_SMEM));
    k_wgmma_test<<<1, 128, WT_SMEM>>>(a_d, b_d, p_d, v_d, d1_d, d2_d, swap_v);
    CT_CU(cudaGetLastError());
    float *d1 = (float *)ct_hmalloc(64 * 128 * 4), *d2 = (float *)ct_hmalloc(64 * 128 * 4);
    ct_download(d1, d1_d, 64 * 128 * 4);
    ct_download(d2, d2_d, 64 * 128 * 4);
    *bad1 = *bad2 = 0;
    for (int m = 0; m < 64; m++)
        for (int n = 0; n < 128; n++) {
            float s1 = 0, s2 = 0;
            for (int k = 0; k < 128; k++) {
                s1 += af[m * 128 + k] * bf[n * 128 + k];
                s2 += pf[m * 128 + k] * vf[k * 128 + n];
            }
            if (d1[m * 128 + n] != s1 && (*bad1)++ < 3)
                fprintf(stderr, "  score product [%d][%d]: %g, expected %g\n", m, n, d1[m * 128 + n], s1);
            if (d2[m * 128 + n] != s2 && (*bad2)++ < 3 && !swap_v)
                fprintf(stderr, "  value product [%d][%d]: %g, expected %g\n", m, n, d2[m * 128 + n], s2);
        }
    free(a), free(b), free(p), free(v), free(af), free(bf), free(pf), free(vf), free(d1), free(d2);
    cudaFree(a_d), cudaFree(b_d), cudaFree(p_d), cudaFree(v_d), cudaFree(d1_d), cudaFree(d2_d);
}

int main(void)
{
    ct_require_gpu();
    int64_t bad1, bad2;
    run(0, &bad1, &bad2);
    CHECK_MSG(bad1 == 0, "wgmma Q K^T (both K-major, smem): %lld of 8192 entries wrong", (long long)bad1);
    CHECK_MSG(bad2 == 0, "wgmma P V (P registers, V MN-major smem): %lld of 8192 entries wrong",
              (long long)bad2);
    printf("wgmma m64n128k16: score product %lld wrong, value product %lld wrong\n", (long long)bad1,
           (long long)bad2);
    if (bad2) {
        int64_t s1, s2;
        run(1, &s1, &s2);
        printf("diagnosis: value product with LBO/SBO exchanged: %lld wrong\n", (long long)s2);
    }
    return test_done();
}
