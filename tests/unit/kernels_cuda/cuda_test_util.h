/* Helpers for the GPU kernel tests: skip without a GPU, checked device allocations and copies, seeded random
 * data, bf16 rounding, and error norms. Header-only, static functions. */
#ifndef CUDA_TEST_UTIL_H
#define CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kn_cuda.h"
#include "mm_dtype.h"
#include "mmgw_test.h"

/** setenv / unsetenv of a kernel knob: the kernels cache knob values until kn_cuda_knobs_reload. */
static inline int knob_setenv(const char *name, const char *val, int overwrite)
{
    int r = setenv(name, val, overwrite);
    kn_cuda_knobs_reload();
    return r;
}

static inline int knob_unsetenv(const char *name)
{
    int r = unsetenv(name);
    kn_cuda_knobs_reload();
    return r;
}

/** Exit 77 (skipped) with the reason when this machine has no usable CUDA device. */
static inline void ct_require_gpu(void)
{
    if (kn_cuda_device_count() <= 0)
        test_skip(
            "no CUDA device (cudaGetDeviceCount failed or returned 0): GPU tests run on the GPU machine");
}

static inline void ct_die(const char *what, cudaError_t e)
{
    fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

#define CT_CU(call)                                                                                          \
    do {                                                                                                     \
        cudaError_t ct_e__ = (call);                                                                         \
        if (ct_e__ != cudaSuccess) ct_die(#call, ct_e__);                                                    \
    } while (0)

/** Device buffer filled with 0xff bytes (NaN for f32/bf16, -1 for i32) so unwritten outputs show. */
static inline void *ct_dmalloc(size_t bytes)
{
    void *p = NULL;
    CT_CU(cudaMalloc(&p, bytes ? bytes : 1));
    CT_CU(cudaMemset(p, 0xff, bytes ? bytes : 1));
    return p;
}

/* zeroed: GCC's -Wmaybe-uninitialized otherwise flags buffers filled through loops it cannot count */
static inline void *ct_hmalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "FATAL: out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static inline void *ct_upload(const void *h, size_t bytes)
{
    void *d = ct_dmalloc(bytes);
    if (bytes) CT_CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static inline void ct_download(void *h, const void *d, size_t bytes)
{
    CT_CU(cudaDeviceSynchronize());
    if (bytes) CT_CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* ---- random data (xorshift64*) ---- */

static uint64_t ct_rng = 0x9E3779B97F4A7C15ull;

static inline void ct_seed(uint64_t s)
{
    ct_rng = s * 0x9E3779B97F4A7C15ull + 1;
}

static inline uint64_t ct_next(void)
{
    ct_rng ^= ct_rng >> 12;
    ct_rng ^= ct_rng << 25;
    ct_rng ^= ct_rng >> 27;
    return ct_rng * 0x2545F4914F6CDD1Dull;
}

static inline float ct_uniform(void) /* [0, 1) */
{
    return (float)(ct_next() >> 40) / (float)(1ull << 24);
}

static inline float ct_normal(void)
{
    float u = ct_uniform(), v = ct_uniform();
    if (u < 1e-7f) u = 1e-7f;
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static inline void ct_fill_normal(float *x, int64_t n, float sd)
{
    for (int64_t i = 0; i < n; i++) x[i] = ct_normal() * sd;
}

static inline float ct_bf16_round(float x)
{
    return mm_bf16_to_f32(mm_f32_to_bf16(x));
}

static inline void ct_to_bf16(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = mm_f32_to_bf16(x[i]);
}

static inline void ct_from_bf16(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] = mm_bf16_to_f32(x[i]);
}

/** ||a - b|| / ||b||, and the largest |a - b| in *max_abs; NaN anywhere in a gives INFINITY. */
static inline double ct_rel_err(const float *a, const float *b, int64_t n, double *max_abs)
{
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != a[i]) {
            if (max_abs) *max_abs = INFINITY;
            return INFINITY;
        }
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    if (max_abs) *max_abs = mx;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
