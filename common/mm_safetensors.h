/* safetensors reader (mmap) and writer.
 *
 * The format: 8-byte little-endian header length N, N bytes of JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then raw
 * little-endian data. The reader validates everything before handing out a pointer: a header size cap,
 * known dtypes, shapes whose byte size matches the offsets, offsets inside the file, no overlaps.
 * Tensor data points into the read-only mapping and lives until mm_st_close. */
#ifndef MM_SAFETENSORS_H
#define MM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mm_status.h"

#define MM_ST_MAX_DIMS 8
#define MM_ST_MAX_HEADER (100u << 20) /* 100 MiB of JSON is far beyond any real checkpoint shard */

struct mm_st_tensor {
    const char *name;
    int32_t dtype; /* enum mm_dtype */
    int32_t ndim;
    int64_t shape[MM_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t nbytes;
    const void *data; /* inside the mapping; alignment is only what the file gives */
};

struct mm_st_file;

/** Map and validate path. On error *out is NULL and err names the file and the problem. */
int32_t mm_st_open(const char *path, struct mm_st_file **out, struct mm_err *err);
/** Validate an in-memory image (the caller keeps buf alive and unchanged until mm_st_close). */
int32_t mm_st_parse(const void *buf, size_t len, const char *label, struct mm_st_file **out,
                    struct mm_err *err);
void mm_st_close(struct mm_st_file *f);

const char *mm_st_path(const struct mm_st_file *f);
size_t mm_st_count(const struct mm_st_file *f);
/** Tensors sorted by name. */
const struct mm_st_tensor *mm_st_at(const struct mm_st_file *f, size_t i);
/** NULL when absent. */
const struct mm_st_tensor *mm_st_find(const struct mm_st_file *f, const char *name);
/** A string value from __metadata__, or NULL. */
const char *mm_st_metadata(const struct mm_st_file *f, const char *key);

/* ---- writer ---- */
struct mm_st_writer;

struct mm_st_writer *mm_st_writer_create(void);
void mm_st_writer_destroy(struct mm_st_writer *w);
/** Add a tensor; data (nbytes, which must equal numel * dtype size) is copied. Names must be unique. */
int32_t mm_st_writer_add(struct mm_st_writer *w, const char *name, int32_t dtype, int32_t ndim,
                         const int64_t *shape, const void *data, size_t nbytes, struct mm_err *err);
int32_t mm_st_writer_add_metadata(struct mm_st_writer *w, const char *key, const char *value,
                                  struct mm_err *err);
/** Write path as mm_outfile.h does: atomically (a temporary file renamed over it) when it is new or a regular
 * file, at their target for symbolic links, directly into a device or FIFO. */
int32_t mm_st_writer_save(struct mm_st_writer *w, const char *path, struct mm_err *err);

#endif
