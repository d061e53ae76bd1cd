/* A checkpoint's tensors: model.safetensors, or the shards named by model.safetensors.index.json, all
 * mmap'ed.
 *
 * wk_ckpt_weight() finds a tensor, checks its shape and dtype and describes it as a struct wk_wsrc (raw
 * pointer into the mapping plus, for FP8-E4M3, its DeepSeek-style block scales `<name>_scale_inv`). A backend
 * turns a wk_wsrc into whatever it computes with; wk_wsrc_to_f32() is the reference dequantization. Errors
 * name the tensor and the file. */
#ifndef WK_CKPT_H
#define WK_CKPT_H

#include <stdint.h>

#include "mm_safetensors.h"
#include "mm_status.h"

/** A weight as stored: logical shape, raw data and (FP8 only) block scales. */
struct wk_wsrc {
    const char *name; /* tensor name (valid while the checkpoint is open) */
    const char *file; /* path of the file holding it */
    int32_t dtype;    /* enum mm_dtype: F32, F16, BF16 or F8_E4M3 */
    int32_t ndim;
    int64_t shape[MM_ST_MAX_DIMS];
    int64_t rows, cols; /* 2-D view: rows = shape[0], cols = the rest (a 1-D tensor is 1 x n) */
    const void *data;
    /* FP8: w[r][c] = fp8[r][c] * scale[r / block_rows][c / block_cols] */
    const void *scale;
    int32_t scale_dtype;
    int64_t scale_rows, scale_cols;
    int32_t block_rows, block_cols;
};

struct wk_ckpt;

/** Open dir/model.safetensors.index.json (sharded) or dir/model.safetensors. fp8_block is the config's
 * quantization_config.weight_block_size ({0,0}: 128 x 128). */
int32_t wk_ckpt_open(const char *dir, const int32_t fp8_block[2], struct wk_ckpt **out, struct mm_err *err);
void wk_ckpt_close(struct wk_ckpt *c);

/** Whether a tensor exists (any dtype). */
int32_t wk_ckpt_has(const struct wk_ckpt *c, const char *name);

/** Describe tensor `name`, which must have exactly the given shape (ndim dims). MM_NOT_FOUND when missing,
 * MM_FORMAT when mis-shaped, MM_UNSUPPORTED for another dtype; the message names tensor and file. */
int32_t wk_ckpt_weight(const struct wk_ckpt *c, const char *name, int32_t ndim, const int64_t *shape,
                       struct wk_wsrc *out, struct mm_err *err);

/** Dequantize/convert the whole tensor to f32 (rows * cols floats). */
int32_t wk_wsrc_to_f32(const struct wk_wsrc *s, float *dst, struct mm_err *err);

/** Convert rows [r0, r1) to f32 into dst ((r1 - r0) * cols floats). */
int32_t wk_wsrc_rows_to_f32(const struct wk_wsrc *s, int64_t r0, int64_t r1, float *dst, struct mm_err *err);

#endif
