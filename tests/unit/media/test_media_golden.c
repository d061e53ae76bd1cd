/* The pipeline against the reference processors' outputs (../shared/testdata):
 *  - preprocess/images_{m3,qwen2vl}.safetensors: every image in media/ through both plugins (f16 goldens);
 *  - m3-tiny-a/goldens.safetensors: the exact f32 pixel_values the model was fed for `image`, `multi` (two
 *    images) and `video`, plus the video's frame indices.
 * Acceptance (issue 2): grid exact; mean |d| <= 0.01 and 99th percentile <= 0.05. The pipeline is designed to
 * be bit-exact with the reference, so the test also requires (almost) every value to be equal, which catches
 * any drift long before the loose bounds would. */
#include "media_fixture.h"
#include "mm_safetensors.h"

static const char *const images[] = {"astronaut.png", "chelsea.webp", "coffee.jpg", "pano_1600x120.png",
                                     "tiny_18x11.png"};

static void check_tensor(const char *what, const struct gw_media_result *r, uint64_t row0, uint64_t rows,
                         const struct mm_st_tensor *gold_pv, uint64_t gold_row0, double min_exact)
{
    CHECK_MSG(gold_pv->ndim == 2 && gold_pv->shape[1] == r->patch_dim, "%s: golden shape", what);
    if (gold_pv->ndim != 2 || gold_pv->shape[1] != r->patch_dim ||
        gold_row0 + rows > (uint64_t)gold_pv->shape[0])
        return;
    size_t es = mm_dtype_size(r->dtype), ges = mm_dtype_size(gold_pv->dtype);
    const uint8_t *ours = (const uint8_t *)r->pixels + row0 * r->patch_dim * es;
    const uint8_t *gold = (const uint8_t *)gold_pv->data + gold_row0 * r->patch_dim * ges;
    struct fx_diff d = fx_compare(ours, r->dtype, gold, gold_pv->dtype, rows * r->patch_dim);
    double exact = d.n ? (double)d.exact / d.n : 0;
    printf("%-34s mean %.6f p99 %.6f max %.6f exact %.4f%%\n", what, d.mean, d.p99, d.max, 100 * exact);
    CHECK_MSG(d.mean <= 0.01, "%s: mean |d| %.6f", what, d.mean);
    CHECK_MSG(d.p99 <= 0.05, "%s: p99 |d| %.6f", what, d.p99);
    CHECK_MSG(exact >= min_exact, "%s: only %.4f%% of values equal the reference", what, 100 * exact);
}

static void check_preprocess_goldens(const char *dir, const char *plugin)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/preprocess/images_%s.safetensors", dir, plugin);
    struct mm_st_file *g = NULL;
    struct mm_err err = {0};
    CHECK_MSG(mm_st_open(path, &g, &err) == MM_OK, "%s", err.msg);
    if (!g) return;
    struct fx_plugin fp;
    CHECK(fx_plugin_open(&fp, plugin, NULL, 0) == 0);
    for (size_t i = 0; fp.p && i < sizeof images / sizeof images[0]; i++) {
        snprintf(path, sizeof path, "%s/media/%s", dir, images[i]);
        size_t len = 0;
        uint8_t *bytes = fx_read_file(path, &len);
        CHECK_MSG(bytes != NULL, "cannot read %s", path);
        if (!bytes) continue;
        struct gw_media_result r;
        int32_t rc = fx_process(&fp, MMGW_MEDIA_IMAGE, bytes, len, images[i], MM_DT_F32, &r, &err);
        CHECK_MSG(rc == MM_OK, "%s: %s", images[i], err.msg);
        char name[256];
        snprintf(name, sizeof name, "%s/thw", images[i]);
        const struct mm_st_tensor *thw = mm_st_find(g, name);
        snprintf(name, sizeof name, "%s/pv", images[i]);
        const struct mm_st_tensor *pv = mm_st_find(g, name);
        CHECK(thw && pv);
        if (rc == MM_OK && thw && pv) {
            const int64_t *gt = thw->data;
            CHECK_MSG(r.grid_thw[0] == gt[0] && r.grid_thw[1] == gt[1] && r.grid_thw[2] == gt[2],
                      "%s %s: grid %lldx%lldx%lld, golden %lldx%lldx%lld", plugin, images[i],
                      (long long)r.grid_thw[0], (long long)r.grid_thw[1], (long long)r.grid_thw[2],
                      (long long)gt[0], (long long)gt[1], (long long)gt[2]);
            CHECK_EQ_INT(r.n_patches, pv->shape[0]);
            snprintf(name, sizeof name, "%s %s", plugin, images[i]);
            if (r.n_patches == (uint64_t)pv->shape[0]) check_tensor(name, &r, 0, r.n_patches, pv, 0, 0.999);
        }
        gw_media_result_free(&r);
        free(bytes);
    }
    fx_plugin_close(&fp);
    mm_st_close(g);
}

static struct gw_media_result process_file(const struct fx_plugin *fp, const char *dir, const char *file,
                                           int32_t kind, int32_t dtype)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/media/%s", dir, file);
    size_t len = 0;
    uint8_t *bytes = fx_read_file(path, &len);
    struct gw_media_result r;
    memset(&r, 0, sizeof r);
    struct mm_err err = {0};
    CHECK_MSG(bytes != NULL, "cannot read %s", path);
    if (bytes)
        CHECK_MSG(fx_process(fp, kind, bytes, len, file, dtype, &r, &err) == MM_OK, "%s: %s", file, err.msg);
    free(bytes);
    return r;
}

static void check_grid(const char *what, const struct gw_media_result *r, const struct mm_st_tensor *t,
                       int64_t row)
{
    CHECK_MSG(t && t->dtype == MM_DT_I64 && t->shape[0] > row, "%s: golden grid missing", what);
    if (!t || t->shape[0] <= row) return;
    const int64_t *g = (const int64_t *)t->data + row * 3;
    CHECK_MSG(r->grid_thw[0] == g[0] && r->grid_thw[1] == g[1] && r->grid_thw[2] == g[2],
              "%s: grid %lldx%lldx%lld, golden %lldx%lldx%lld", what, (long long)r->grid_thw[0],
              (long long)r->grid_thw[1], (long long)r->grid_thw[2], (long long)g[0], (long long)g[1],
              (long long)g[2]);
}

static void check_model_goldens(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/m3-tiny-a/goldens.safetensors", dir);
    struct mm_st_file *g = NULL;
    struct mm_err err = {0};
    CHECK_MSG(mm_st_open(path, &g, &err) == MM_OK, "%s", err.msg);
    if (!g) return;
    struct fx_plugin fp;
    CHECK(fx_plugin_open(&fp, "m3", NULL, 0) == 0);
    if (!fp.p) {
        mm_st_close(g);
        return;
    }
    /* image: chelsea.webp (info.json "image") */
    struct gw_media_result r = process_file(&fp, dir, "chelsea.webp", MMGW_MEDIA_IMAGE, MM_DT_F32);
    check_grid("image", &r, mm_st_find(g, "image/image_grid_thw"), 0);
    const struct mm_st_tensor *pv = mm_st_find(g, "image/pixel_values");
    if (r.pixels && pv) check_tensor("m3-tiny-a image (f32)", &r, 0, r.n_patches, pv, 0, 0.9999);

    /* the same image in bf16: every value is the f32 value rounded to bf16 */
    struct gw_media_result rb = process_file(&fp, dir, "chelsea.webp", MMGW_MEDIA_IMAGE, MM_DT_BF16);
    if (r.pixels && rb.pixels) {
        CHECK(rb.dtype == MM_DT_BF16 && rb.n_patches == r.n_patches);
        struct fx_diff d = fx_compare(r.pixels, MM_DT_F32, rb.pixels, MM_DT_BF16, r.n_patches * r.patch_dim);
        CHECK_MSG(d.exact == d.n, "bf16 output differs from rounding the f32 output (%llu of %llu)",
                  (unsigned long long)d.exact, (unsigned long long)d.n);
    }
    gw_media_result_free(&rb);

    /* multi: chelsea.webp then tiny_18x11.png, concatenated */
    struct gw_media_result r2 = process_file(&fp, dir, "tiny_18x11.png", MMGW_MEDIA_IMAGE, MM_DT_F32);
    const struct mm_st_tensor *mpv = mm_st_find(g, "multi/pixel_values");
    check_grid("multi[0]", &r, mm_st_find(g, "multi/image_grid_thw"), 0);
    check_grid("multi[1]", &r2, mm_st_find(g, "multi/image_grid_thw"), 1);
    if (r.pixels && r2.pixels && mpv) {
        CHECK_EQ_INT(mpv->shape[0], r.n_patches + r2.n_patches);
        check_tensor("m3-tiny-a multi[0] (f32)", &r, 0, r.n_patches, mpv, 0, 0.9999);
        check_tensor("m3-tiny-a multi[1] (f32)", &r2, 0, r2.n_patches, mpv, r.n_patches, 0.9999);
    }
    gw_media_result_free(&r);
    gw_media_result_free(&r2);

    /* video: pan_640x360_30fps.mp4 under the M3 rule */
    struct gw_media_result v = process_file(&fp, dir, "pan_640x360_30fps.mp4", MMGW_MEDIA_VIDEO, MM_DT_F32);
    check_grid("video", &v, mm_st_find(g, "video/video_grid_thw"), 0);
    const struct mm_st_tensor *fi = mm_st_find(g, "video/frame_indices");
    CHECK(fi && v.frame_indices);
    if (fi && v.frame_indices) {
        CHECK_EQ_INT(fi->shape[0], v.n_frames);
        for (int64_t i = 0; i < fi->shape[0] && i < v.n_frames; i++)
            CHECK_EQ_INT(v.frame_indices[i], ((const int32_t *)fi->data)[i]);
    }
    CHECK_EQ_INT(v.total_frames, 120);
    CHECK_NEAR(v.source_fps, 30.0, 1e-9);
    pv = mm_st_find(g, "video/pixel_values_videos");
    if (v.pixels && pv) check_tensor("m3-tiny-a video (f32)", &v, 0, v.n_patches, pv, 0, 0.9999);
    gw_media_result_free(&v);
    fx_plugin_close(&fp);
    mm_st_close(g);
}

int main(void)
{
    const char *dir = test_require_data();
    struct mm_err err = {0};
    CHECK_MSG(gw_media_global_init(&err) == MM_OK, "%s", err.msg);
    check_preprocess_goldens(dir, "m3");
    check_preprocess_goldens(dir, "qwen2vl");
    check_model_goldens(dir);
    return test_done();
}
