/* Streaming safetensors writer for mmgw-preprocess (see pp_write.h). The format: an 8-byte little-endian
 * header length, the JSON header (padded with spaces to a multiple of 8), then the raw tensor data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "mm_dtype.h"
#include "mm_json.h"
#include "mm_outfile.h"
#include "pp_write.h"

int32_t pp_write_safetensors(const char *path, const struct pp_tensor *t, size_t n, const char *meta_key,
                             const char *meta_value, struct mm_err *err)
{
    json_t *hdr = json_object();
    if (!hdr) return mm_err_set(err, MM_NOMEM, "out of memory");
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bytes = 0, numel = 1;
        for (size_t c = 0; c < t[i].n_chunks; c++) bytes += t[i].chunks[c].len;
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) {
            json_array_append_new(shape, json_integer(t[i].shape[d]));
            numel *= (uint64_t)t[i].shape[d];
        }
        if (numel * mm_dtype_size(t[i].dtype) != bytes) {
            json_decref(shape);
            json_decref(hdr);
            return mm_err_set(err, MM_ERROR, "tensor %s: %llu bytes for its shape", t[i].name,
                              (unsigned long long)bytes);
        }
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", mm_dtype_name(t[i].dtype), "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + bytes));
        if (!e || json_object_set_new(hdr, t[i].name, e)) {
            json_decref(hdr);
            return mm_err_set(err, MM_NOMEM, "out of memory");
        }
        off += bytes;
    }
    if (meta_key) json_object_set_new(hdr, "__metadata__", json_pack("{s:s}", meta_key, meta_value));
    char *text = mm_json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!text) return mm_err_set(err, MM_NOMEM, "out of memory");
    size_t hl = strlen(text), padded = (hl + 7) & ~(size_t)7;

    struct mm_outfile out; /* a temporary file renamed into place; links and devices written through */
    int32_t rc = mm_outfile_open(&out, path, err);
    if (rc != MM_OK) {
        free(text);
        return rc;
    }
    FILE *f = out.f;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(text, 1, hl, f) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    free(text);
    for (size_t i = 0; ok && i < n; i++)
        for (size_t c = 0; ok && c < t[i].n_chunks; c++)
            ok = t[i].chunks[c].len == 0 ||
                 fwrite(t[i].chunks[c].data, 1, t[i].chunks[c].len, f) == t[i].chunks[c].len;
    return mm_outfile_close(&out, ok, err);
}
