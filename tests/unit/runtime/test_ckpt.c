/* Checkpoint access: shapes, dtypes, FP8 block scales, shards, and errors that name tensor and file. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mm_dtype.h"
#include "mm_safetensors.h"
#include "mmgw_test.h"
#include "wk_ckpt.h"

static char dir[256];

static void write_file(const char *name, struct mm_st_writer *w)
{
    char p[512];
    struct mm_err err = {0};
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK_EQ_INT(mm_st_writer_save(w, p, &err), MM_OK);
    mm_st_writer_destroy(w);
}

static void test_single_file(void)
{
    struct mm_err err = {0};
    struct mm_st_writer *w = mm_st_writer_create();
    uint16_t bf[6];
    const float v[6] = {1, -2, 0.5f, 3, 0, -0.25f};
    for (int i = 0; i < 6; i++) bf[i] = mm_f32_to_bf16(v[i]);
    mm_st_writer_add(w, "a.weight", MM_DT_BF16, 2, (int64_t[]){2, 3}, bf, sizeof bf, &err);
    int32_t iv[2] = {1, 2};
    mm_st_writer_add(w, "ints", MM_DT_I32, 1, (int64_t[]){2}, iv, sizeof iv, &err);
    /* FP8 [3, 5] with 2 x 2 blocks: scales [2, 3] */
    uint8_t q[15];
    for (int i = 0; i < 15; i++) q[i] = mm_f32_to_f8e4m3((float)(i - 7));
    mm_st_writer_add(w, "f.weight", MM_DT_F8_E4M3, 2, (int64_t[]){3, 5}, q, sizeof q, &err);
    const float sc[6] = {1, 2, 4, 0.5f, 0.25f, 8};
    mm_st_writer_add(w, "f.weight_scale_inv", MM_DT_F32, 2, (int64_t[]){2, 3}, sc, sizeof sc, &err);
    mm_st_writer_add(w, "g.weight", MM_DT_F8_E4M3, 2, (int64_t[]){3, 5}, q, sizeof q, &err);
    write_file("model.safetensors", w);

    struct wk_ckpt *c = NULL;
    CHECK_EQ_INT(wk_ckpt_open(dir, (int32_t[]){2, 2}, &c, &err), MM_OK);
    if (!c) return;
    struct wk_wsrc s;
    CHECK_EQ_INT(wk_ckpt_weight(c, "a.weight", 2, (int64_t[]){2, 3}, &s, &err), MM_OK);
    CHECK_EQ_INT(s.rows, 2);
    CHECK_EQ_INT(s.cols, 3);
    float out[15];
    CHECK_EQ_INT(wk_wsrc_to_f32(&s, out, &err), MM_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(out[i], v[i], 0);
    CHECK_EQ_INT(wk_wsrc_rows_to_f32(&s, 1, 2, out, &err), MM_OK);
    CHECK_NEAR(out[0], 3, 0);

    /* mis-shaped: the message names the tensor, the file and both shapes */
    CHECK_EQ_INT(wk_ckpt_weight(c, "a.weight", 2, (int64_t[]){3, 2}, &s, &err), MM_FORMAT);
    CHECK(strstr(err.msg, "a.weight") && strstr(err.msg, "model.safetensors") && strstr(err.msg, "[2, 3]"));
    CHECK_EQ_INT(wk_ckpt_weight(c, "missing.weight", 1, (int64_t[]){4}, &s, &err), MM_NOT_FOUND);
    CHECK(strstr(err.msg, "missing.weight") && strstr(err.msg, "model.safetensors"));
    CHECK_EQ_INT(wk_ckpt_weight(c, "ints", 1, (int64_t[]){2}, &s, &err), MM_UNSUPPORTED);
    CHECK(strstr(err.msg, "ints") && strstr(err.msg, "I32"));

    /* FP8 dequantization: w[r][c] = fp8 * scale[r / 2][c / 2] */
    CHECK_EQ_INT(wk_ckpt_weight(c, "f.weight", 2, (int64_t[]){3, 5}, &s, &err), MM_OK);
    CHECK_EQ_INT(wk_wsrc_to_f32(&s, out, &err), MM_OK);
    for (int r = 0; r < 3; r++)
        for (int col = 0; col < 5; col++)
            CHECK_NEAR(out[r * 5 + col], (float)(r * 5 + col - 7) * sc[(r / 2) * 3 + col / 2], 0);
    /* FP8 without its scale */
    CHECK_EQ_INT(wk_ckpt_weight(c, "g.weight", 2, (int64_t[]){3, 5}, &s, &err), MM_NOT_FOUND);
    CHECK(strstr(err.msg, "g.weight_scale_inv") != NULL);
    wk_ckpt_close(c);

    /* the default 128 x 128 blocks do not match a [2, 3] scale for [3, 5] */
    CHECK_EQ_INT(wk_ckpt_open(dir, NULL, &c, &err), MM_OK);
    CHECK_EQ_INT(wk_ckpt_weight(c, "f.weight", 2, (int64_t[]){3, 5}, &s, &err), MM_FORMAT);
    CHECK(strstr(err.msg, "f.weight_scale_inv") != NULL);
    wk_ckpt_close(c);
}

static void test_truncated(void)
{
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK_EQ_INT(truncate(p, 100), 0);
    struct wk_ckpt *c = NULL;
    struct mm_err err = {0};
    CHECK(wk_ckpt_open(dir, NULL, &c, &err) != MM_OK);
    CHECK(c == NULL);
    CHECK_MSG(strstr(err.msg, "model.safetensors") != NULL, "%s", err.msg);
    unlink(p);
    CHECK_EQ_INT(wk_ckpt_open(dir, NULL, &c, &err), MM_NOT_FOUND);
}

static void test_sharded(void)
{
    struct mm_err err = {0};
    float a[2] = {1, 2}, b[3] = {3, 4, 5};
    struct mm_st_writer *w = mm_st_writer_create();
    mm_st_writer_add(w, "x", MM_DT_F32, 1, (int64_t[]){2}, a, sizeof a, &err);
    write_file("model-00001-of-00002.safetensors", w);
    w = mm_st_writer_create();
    mm_st_writer_add(w, "y", MM_DT_F32, 1, (int64_t[]){3}, b, sizeof b, &err);
    write_file("model-00002-of-00002.safetensors", w);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\","
               " \"y\": \"model-00002-of-00002.safetensors\", \"z\": \"model-00001-of-00002.safetensors\"}}");
    fclose(f);
    struct wk_ckpt *c = NULL;
    CHECK_EQ_INT(wk_ckpt_open(dir, NULL, &c, &err), MM_OK);
    if (!c) return;
    struct wk_wsrc s;
    float out[3];
    CHECK_EQ_INT(wk_ckpt_weight(c, "y", 1, (int64_t[]){3}, &s, &err), MM_OK);
    CHECK(strstr(s.file, "00002") != NULL);
    CHECK_EQ_INT(wk_wsrc_to_f32(&s, out, &err), MM_OK);
    CHECK_NEAR(out[2], 5, 0);
    /* listed in the index but absent from its shard */
    CHECK_EQ_INT(wk_ckpt_weight(c, "z", 1, (int64_t[]){1}, &s, &err), MM_NOT_FOUND);
    CHECK(strstr(err.msg, "00001") != NULL);
    wk_ckpt_close(c);
    /* an index naming a shard that is not there */
    f = fopen(p, "w");
    fprintf(f, "{\"weight_map\": {\"x\": \"model-00009-of-00009.safetensors\"}}");
    fclose(f);
    CHECK_EQ_INT(wk_ckpt_open(dir, NULL, &c, &err), MM_NOT_FOUND);
    CHECK(strstr(err.msg, "00009") != NULL);
    f = fopen(p, "w");
    fprintf(f, "{\"weight_map\": {\"x\": \"../etc/passwd\"}}");
    fclose(f);
    CHECK_EQ_INT(wk_ckpt_open(dir, NULL, &c, &err), MM_FORMAT);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/mmgw_ckpt_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_single_file();
    test_truncated();
    test_sharded();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", dir);
    return test_done();
}
