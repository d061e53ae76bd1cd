/* Writes the seed corpus of fuzz_safetensors into the folder given: valid files made with mm_st_writer and
 * broken ones with hand-written headers, one per way a file can lie. Run once; the output is committed:
 *   cmake --build build --target fuzz_st_make_seeds && build/tests/fuzz_st_make_seeds
 * tests/fuzz/safetensors/corpus */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"

static const char *g_dir;

static void die(const char *what, const struct mm_err *e)
{
    fprintf(stderr, "%s: %s\n", what, e ? e->msg : "failed");
    exit(1);
}

static void save_writer(struct mm_st_writer *w, const char *name)
{
    char path[4096];
    struct mm_err e;
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (mm_st_writer_save(w, path, &e) != MM_OK) die(name, &e);
    mm_st_writer_destroy(w);
}

/* A raw file: an 8-byte length (hlen, which may lie), the header text, then n_data bytes 0x5a. */
static void save_raw(const char *name, uint64_t hlen, const char *hdr, size_t hdr_bytes, size_t n_data)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) die(path, NULL);
    for (int i = 0; i < 8; i++) fputc((int)((hlen >> (8 * i)) & 0xff), fp);
    fwrite(hdr, 1, hdr_bytes, fp);
    for (size_t i = 0; i < n_data; i++) fputc(0x5a, fp);
    if (fclose(fp) != 0) die(path, NULL);
}

static void save_hdr(const char *name, const char *hdr, size_t n_data)
{
    save_raw(name, strlen(hdr), hdr, strlen(hdr), n_data);
}

static void valid_seeds(void)
{
    struct mm_err e;
    struct mm_st_writer *w = mm_st_writer_create();
    float a[6] = {1, 2, 3, 4, 5, 6};
    int32_t b[1] = {-7};
    if (mm_st_writer_add(w, "model.layers.0.w", MM_DT_F32, 2, (int64_t[]){2, 3}, a, sizeof a, &e) ||
        mm_st_writer_add(w, "b", MM_DT_I32, 1, (int64_t[]){1}, b, sizeof b, &e) ||
        mm_st_writer_add_metadata(w, "format", "pt", &e))
        die("basic", &e);
    save_writer(w, "valid_basic.safetensors");

    /* every dtype, a scalar, an empty tensor, the most dimensions */
    w = mm_st_writer_create();
    uint8_t bytes[64];
    for (size_t i = 0; i < sizeof bytes; i++) bytes[i] = (uint8_t)(i * 37);
    char name[32];
    for (int32_t dt = 1; dt < MM_DT_COUNT; dt++) {
        snprintf(name, sizeof name, "t_%s", mm_dtype_name(dt));
        int64_t n = (int64_t)(8 / mm_dtype_size(dt));
        if (mm_st_writer_add(w, name, dt, 1, &n, bytes, 8, &e)) die(name, &e);
    }
    int64_t dims8[8] = {1, 2, 1, 2, 1, 2, 1, 1};
    if (mm_st_writer_add(w, "scalar", MM_DT_F32, 0, NULL, a, 4, &e) ||
        mm_st_writer_add(w, "empty", MM_DT_BF16, 2, (int64_t[]){0, 5}, NULL, 0, &e) ||
        mm_st_writer_add(w, "rank8", MM_DT_U8, 8, dims8, bytes, 8, &e) ||
        mm_st_writer_add_metadata(w, "format", "pt", &e) || mm_st_writer_add_metadata(w, "mmgw", "seed", &e))
        die("dtypes", &e);
    save_writer(w, "valid_dtypes.safetensors");

    w = mm_st_writer_create();
    if (mm_st_writer_add_metadata(w, "only", "metadata", &e)) die("meta", &e);
    save_writer(w, "valid_meta_only.safetensors");
    save_hdr("valid_empty.safetensors", "{}", 0);
    /* hand-written but valid: unordered offsets, a gap, data after the last tensor */
    save_hdr("valid_gaps.safetensors",
             "{\"z\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[6,8]},"
             "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
             "\"e\":{\"dtype\":\"F64\",\"shape\":[0],\"data_offsets\":[4,4]}}",
             12);
}

static void broken_seeds(void)
{
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    save_raw("bad_short.safetensors", 3, "{}", 0, 0);                       /* 8 bytes, no header */
    save_raw("bad_truncated_header.safetensors", strlen(ok), ok, 20, 0);    /* the header is cut */
    save_raw("bad_hlen_past_end.safetensors", 1u << 20, ok, strlen(ok), 8); /* length beyond the file */
    save_raw("bad_hlen_over_cap.safetensors", (100u << 20) + 1, ok, strlen(ok), 8);
    save_raw("bad_hlen_huge.safetensors", UINT64_MAX, ok, strlen(ok), 8);
    save_hdr("bad_data_past_end.safetensors", ok, 4);
    save_hdr("bad_overlap.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
             "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
             8);
    save_hdr("bad_offsets_reversed.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}", 8);
    save_hdr(
        "bad_offsets_huge.safetensors",
        "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[9223372036854775806,9223372036854775807]}}",
        8);
    save_hdr("bad_offsets_three.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2,4]}}", 8);
    save_hdr("bad_size_mismatch.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16);
    save_hdr("bad_dtype.safetensors", "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    save_hdr("bad_dtype_nul.safetensors",
             "{\"a\":{\"dtype\":\"F32\\u0000junk\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    save_hdr("bad_dtype_number.safetensors", "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}", 8);
    save_hdr("bad_shape_overflow.safetensors",
             "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,0]}}", 8);
    save_hdr("bad_shape_wrap.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],\"data_offsets\":[0,0]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[2305843009213693952],\"data_offsets\":[0,0]}}",
             8);
    save_hdr("bad_shape_negative.safetensors",
             "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0);
    save_hdr("bad_shape_rank9.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1);
    save_hdr("bad_not_object.safetensors", "[1,2]", 0);
    save_hdr("bad_string.safetensors", "\"header\"", 0);
    save_hdr("bad_entry_not_object.safetensors", "{\"a\":[0,8]}", 8);
    save_hdr("bad_json.safetensors", "{\"a\":{\"dtype\":\"F32\",", 8);
    save_hdr("bad_utf8.safetensors", "{\"\xc3\x28\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             1);
    save_hdr("bad_duplicate.safetensors",
             "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
             2);
    save_hdr("bad_meta_number.safetensors", "{\"__metadata__\":{\"format\":\"pt\",\"n\":1}}", 0);
    save_hdr("bad_meta_not_object.safetensors", "{\"__metadata__\":[\"pt\"]}", 0);
    save_hdr("bad_meta_nul.safetensors", "{\"__metadata__\":{\"format\":\"pt\\u0000junk\"}}", 0);
    save_hdr("bad_meta_twice.safetensors", "{\"__metadata__\":{},\"__metadata__\":{}}", 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    valid_seeds();
    broken_seeds();
    return 0;
}
