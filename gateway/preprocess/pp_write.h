/* Writing mmgw-preprocess's output: a safetensors file whose tensors are concatenations of many results,
 * streamed from the results' own buffers (no concatenated copy is ever built: the output can be as large
 * as all the inputs' patches together). */
#ifndef PP_WRITE_H
#define PP_WRITE_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

/** One piece of a tensor's data. */
struct pp_chunk {
    const void *data;
    size_t len;
};

struct pp_tensor {
    const char *name;
    int32_t dtype; /* enum mm_dtype */
    int32_t ndim;
    int64_t shape[2];
    const struct pp_chunk *chunks;
    size_t n_chunks;
};

/** Write the tensors (in the given order) and one metadata pair (key may be NULL) to path as mm_outfile.h
 * does: atomically (a temporary file renamed over it) when it is new or a regular file, at their target for
 * symbolic links, directly into a device or FIFO. The chunks' total length must match each tensor's shape. */
int32_t pp_write_safetensors(const char *path, const struct pp_tensor *t, size_t n, const char *meta_key,
                             const char *meta_value, struct mm_err *err);

#endif
