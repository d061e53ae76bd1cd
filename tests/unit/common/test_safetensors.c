#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"
#include "mmgw_test.h"

/* Build a file image from a header text and n data bytes. */
static size_t make_image(unsigned char *buf, size_t cap, const char *hdr, size_t data_len)
{
    size_t hl = strlen(hdr);
    if (8 + hl + data_len > cap) return 0;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, hdr, hl);
    memset(buf + 8 + hl, 0xab, data_len);
    return 8 + hl + data_len;
}

static int32_t parse(const char *hdr, size_t data_len, struct mm_err *e)
{
    static unsigned char buf[4096];
    size_t n = make_image(buf, sizeof buf, hdr, data_len);
    struct mm_st_file *f = NULL;
    int32_t rc = mm_st_parse(buf, n, "t.safetensors", &f, e);
    mm_st_close(f);
    return rc;
}

int main(void)
{
    struct mm_err e;
    /* round trip through the writer */
    char path[] = "/tmp/mmgw_st_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct mm_st_writer *w = mm_st_writer_create();
    float a[6] = {1, 2, 3, 4, 5, 6};
    int64_t sa[2] = {2, 3};
    int32_t b[1] = {-7};
    int64_t sb[1] = {1};
    CHECK_EQ_INT(mm_st_writer_add(w, "x/a", MM_DT_F32, 2, sa, a, sizeof a, &e), MM_OK);
    CHECK_EQ_INT(mm_st_writer_add(w, "b", MM_DT_I32, 1, sb, b, sizeof b, &e), MM_OK);
    CHECK_EQ_INT(mm_st_writer_add(w, "b", MM_DT_I32, 1, sb, b, sizeof b, &e), MM_INVALID);
    CHECK_EQ_INT(mm_st_writer_add(w, "c", MM_DT_I32, 1, sb, b, 3, &e), MM_INVALID);
    /* 2^62 x 4 elements wrap to 0: refused, not written as an empty tensor the reader would refuse */
    int64_t wrap[2] = {(int64_t)1 << 62, 4};
    CHECK_EQ_INT(mm_st_writer_add(w, "wrap", MM_DT_U8, 2, wrap, NULL, 0, &e), MM_INVALID);
    CHECK(strstr(e.msg, "overflows") != NULL);
    int64_t wrap_bytes[1] = {(int64_t)1 << 62}; /* the count fits, its bytes (x4) wrap to 0 */
    CHECK_EQ_INT(mm_st_writer_add(w, "wrap2", MM_DT_F32, 1, wrap_bytes, NULL, 0, &e), MM_INVALID);
    CHECK_EQ_INT(mm_st_writer_add_metadata(w, "format", "pt", &e), MM_OK);
    CHECK_EQ_INT(mm_st_writer_save(w, path, &e), MM_OK);
    mm_st_writer_destroy(w);
    struct mm_st_file *f = NULL;
    CHECK_EQ_INT(mm_st_open(path, &f, &e), MM_OK);
    if (f) {
        CHECK_EQ_INT(mm_st_count(f), 2);
        const struct mm_st_tensor *t = mm_st_find(f, "x/a");
        CHECK(t && t->dtype == MM_DT_F32 && t->ndim == 2 && t->shape[1] == 3 && t->numel == 6);
        if (t) CHECK(memcmp(t->data, a, sizeof a) == 0);
        t = mm_st_find(f, "b");
        CHECK(t && ((const int32_t *)t->data)[0] == -7);
        CHECK(mm_st_find(f, "nope") == NULL);
        CHECK_STR(mm_st_metadata(f, "format"), "pt");
        mm_st_close(f);
    }
    unlink(path);

    /* validation */
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &e), MM_OK);
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, &e), MM_FORMAT);
    CHECK(strstr(e.msg, "t.safetensors") && strstr(e.msg, "'a'"));
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 16, &e),
                 MM_FORMAT);
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &e),
                 MM_UNSUPPORTED);
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
                       8, &e),
                 MM_FORMAT);
    CHECK(strstr(e.msg, "overlap"));
    CHECK_EQ_INT(parse("[1,2]", 0, &e), MM_FORMAT);
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, &e),
                 MM_FORMAT);
    CHECK_EQ_INT(
        parse("{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999,99999999999,9999999],\"data_offsets\":[0,1]}}",
              1, &e),
        MM_FORMAT);
    CHECK_EQ_INT(parse("{\"a\":", 0, &e), MM_FORMAT);
    /* a NUL inside a dtype or metadata string would read back cut short ("F32", "pt"): refused */
    CHECK_EQ_INT(parse("{\"a\":{\"dtype\":\"F32\\u0000x\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, &e),
                 MM_FORMAT);
    CHECK(strstr(e.msg, "NUL"));
    CHECK_EQ_INT(parse("{\"__metadata__\":{\"format\":\"pt\\u0000x\"}}", 0, &e), MM_FORMAT);
    CHECK(strstr(e.msg, "'format'") && strstr(e.msg, "NUL"));
    /* other escapes stay fine */
    CHECK_EQ_INT(parse("{\"__metadata__\":{\"format\":\"p\\u00e9\"}}", 0, &e), MM_OK);
    unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
    CHECK_EQ_INT(mm_st_parse(huge, sizeof huge, "h", &f, &e), MM_FORMAT);
    CHECK(f == NULL);
    CHECK_EQ_INT(mm_st_open("/nonexistent/x.safetensors", &f, &e), MM_NOT_FOUND);
    CHECK_EQ_INT(mm_st_open("/tmp", &f, &e), MM_IO);
    /* a FIFO is refused at once, not waited on for a writer (SIGALRM ends the test if it blocks) */
    char fifo[] = "/tmp/mmgw_st_fifo_XXXXXX";
    int tfd = mkstemp(fifo);
    CHECK(tfd >= 0);
    close(tfd);
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    alarm(10);
    CHECK_EQ_INT(mm_st_open(fifo, &f, &e), MM_IO);
    alarm(0);
    CHECK(f == NULL && strstr(e.msg, "not a regular file"));
    unlink(fifo);

    /* the golden checkpoint, where present */
    const char *td = test_data_dir();
    if (td) {
        char p[1024];
        snprintf(p, sizeof p, "%s/m3-tiny-a/model.safetensors", td);
        CHECK_EQ_INT(mm_st_open(p, &f, &e), MM_OK);
        if (f) {
            const struct mm_st_tensor *t = mm_st_find(f, "language_model.model.embed_tokens.weight");
            CHECK(t && t->dtype == MM_DT_BF16 && t->ndim == 2 && t->shape[1] == 128);
            mm_st_close(f);
        }
    }
    return test_done();
}
