/* The plugins' vision halves through the ABI: prompt expansion (M3_CHAT.md section 2; the golden prompt
 * `]<]0.0 seconds[>[]<]start of image[>[` + 299 x `]<]video[>[` + `]<]end of image[>[` + `]<]2.6 seconds[>[`
 * ...), Qwen2-VL's vision_start/pad/end runs, option parsing, and sample_frames' refusals. */
#include <stdio.h>
#include <string.h>

#include "gw_plugin.h"
#include "mm_safetensors.h"
#include "mmgw_test.h"

struct seg_log {
    char text[8192];
    size_t len;
    int n_segs, n_placeholder_runs;
    uint64_t placeholders;
};

static int32_t log_seg(void *ctx, const struct mmgw_prompt_seg *s)
{
    struct seg_log *l = ctx;
    l->n_segs++;
    if (s->placeholder) {
        l->n_placeholder_runs++;
        l->placeholders += s->count;
    }
    /* a compact rendering: text, or TOKEN*count */
    char one[256];
    int n = s->kind == MMGW_SEG_TOKEN && s->count != 1
                ? snprintf(one, sizeof one, "%.*s*%u", (int)s->text_len, s->text, s->count)
                : snprintf(one, sizeof one, "%.*s", (int)s->text_len, s->text);
    if (n > 0 && l->len + (size_t)n < sizeof l->text) {
        memcpy(l->text + l->len, one, (size_t)n + 1);
        l->len += (size_t)n;
    }
    return MMGW_OK;
}

static int32_t failing_sink(void *ctx, const struct mmgw_prompt_seg *s)
{
    (void)ctx, (void)s;
    return MMGW_E_NOMEM;
}

static struct gw_plugin *load(const char *name, struct mmgw_plugin_instance **inst,
                              const struct mmgw_option *o, uint32_t n)
{
    struct gw_plugin *p = NULL;
    struct mm_err err = {0};
    CHECK_MSG(gw_plugin_load(name, NULL, &p, &err) == MM_OK, "%s", err.msg);
    if (p) CHECK_MSG(gw_plugin_instance_create(p, o, n, inst, &err) == MM_OK, "%s", err.msg);
    return p;
}

static void expand(const struct gw_plugin *p, const struct mmgw_plugin_instance *inst,
                   const struct mmgw_media_info *m, struct seg_log *l)
{
    memset(l, 0, sizeof *l);
    struct mmgw_seg_sink sink = {l, log_seg};
    struct mmgw_error perr = {{0, ""}};
    CHECK_MSG(p->vt.expand_media(inst, m, &sink, &perr) == MMGW_OK, "%s", perr.e.msg);
}

int main(void)
{
    struct mmgw_plugin_instance *inst = NULL;
    struct gw_plugin *m3 = load("m3", &inst, NULL, 0);
    if (!m3) return test_done();
    struct seg_log l;

    /* image: start + N placeholders + end, N = t*h*w/4 */
    struct mmgw_media_info img = {sizeof img, MMGW_MEDIA_IMAGE, 1, 22, 32, 1, NULL, 0};
    expand(m3, inst, &img, &l);
    CHECK_STR(l.text, "]<]start of image[>[]<]image[>[*176]<]end of image[>[");
    CHECK(l.n_placeholder_runs == 1 && l.placeholders == 176);
    CHECK_EQ_INT(m3->vt.num_placeholder_tokens(inst, MMGW_MEDIA_IMAGE, 1, 22, 32), 176);

    /* video: the golden clip (frames 0, 40, 79, 119 of a 30 fps video, grid 2x26x46 -> 299 per group) */
    uint32_t frames[] = {0, 40, 79, 119};
    struct mmgw_media_info vid = {sizeof vid, MMGW_MEDIA_VIDEO, 2, 26, 46, 4, frames, 30.0};
    expand(m3, inst, &vid, &l);
    CHECK_STR(l.text, "]<]0.0 seconds[>[]<]start of image[>[]<]video[>[*299]<]end of image[>["
                      "]<]2.6 seconds[>[]<]start of image[>[]<]video[>[*299]<]end of image[>[");
    CHECK(l.placeholders == 598 && l.n_placeholder_runs == 2);
    /* no frame rate known: no timestamps */
    vid.source_fps = 0;
    expand(m3, inst, &vid, &l);
    CHECK_STR(
        l.text,
        "]<]start of image[>[]<]video[>[*299]<]end of image[>[]<]start of image[>[]<]video[>[*299]<]end "
        "of image[>[");
    /* an odd frame count: the last group's timestamp is its first frame's */
    uint32_t odd[] = {0, 25, 50};
    struct mmgw_media_info vodd = {sizeof vodd, MMGW_MEDIA_VIDEO, 2, 2, 2, 3, odd, 25.0};
    expand(m3, inst, &vodd, &l);
    CHECK_STR(
        l.text,
        "]<]0.0 seconds[>[]<]start of image[>[]<]video[>[]<]end of image[>[]<]2.0 seconds[>[]<]start of "
        "image[>[]<]video[>[]<]end of image[>[");
    /* rounding of the timestamp is printf's %.1f, as Python's format: 0.25 -> 0.2, 0.35 -> 0.3 (binary) */
    uint32_t q[] = {1, 2, 7, 8};
    struct mmgw_media_info vq = {sizeof vq, MMGW_MEDIA_VIDEO, 2, 2, 2, 4, q, 4.0};
    expand(m3, inst, &vq, &l);
    CHECK(strstr(l.text, "]<]0.2 seconds[>[") && strstr(l.text, "]<]1.8 seconds[>["));
    /* a failing sink stops the expansion with its status */
    struct mmgw_seg_sink bad = {NULL, failing_sink};
    struct mmgw_error perr = {{0, ""}};
    CHECK(m3->vt.expand_media(inst, &img, &bad, &perr) == MMGW_E_NOMEM);
    struct mmgw_media_info wrong = {sizeof wrong, MMGW_MEDIA_IMAGE, 1, 3, 4, 1, NULL, 0};
    CHECK(m3->vt.expand_media(inst, &wrong, &bad, &perr) == MMGW_E_INVALID);
    CHECK_STR(m3->vt.media_marker(inst, MMGW_MEDIA_VIDEO), "]<]video[>[");
    CHECK(m3->vt.media_marker(inst, 9) == NULL);

    /* sample_frames: refusals and the cap */
    uint32_t idx[1024], n = 0;
    CHECK(m3->vt.sample_frames(inst, 0, 30.0, idx, 1024, &n, &perr) == MMGW_E_INVALID);
    CHECK(m3->vt.sample_frames(inst, 100, 0.0, idx, 1024, &n, &perr) == MMGW_E_INVALID);
    CHECK(m3->vt.sample_frames(inst, 100, -1.0, idx, 1024, &n, &perr) == MMGW_E_INVALID);
    CHECK(m3->vt.sample_frames(inst, 100000, 30.0, idx, 100, &n, &perr) == MMGW_E_TOO_LARGE);
    CHECK(m3->vt.sample_frames(inst, 1, 30.0, idx, 1024, &n, &perr) == MMGW_OK && n == 1 && idx[0] == 0);
    /* the golden clip's indices, from the golden file when it is here */
    CHECK(m3->vt.sample_frames(inst, 120, 30.0, idx, 1024, &n, &perr) == MMGW_OK);
    const char *dir = test_data_dir();
    if (dir) {
        char path[1024];
        snprintf(path, sizeof path, "%s/m3-tiny-a/goldens.safetensors", dir);
        struct mm_st_file *g = NULL;
        struct mm_err err = {0};
        if (mm_st_open(path, &g, &err) == MM_OK) {
            const struct mm_st_tensor *fi = mm_st_find(g, "video/frame_indices");
            CHECK(fi && fi->shape[0] == n);
            for (uint32_t i = 0; fi && i < n && i < fi->shape[0]; i++)
                CHECK_EQ_INT(idx[i], ((const int32_t *)fi->data)[i]);
            mm_st_close(g);
        }
    }
    /* the video cap: 768 frames of 602,112 pixels is over 301,056,000 and refused, not shrunk */
    uint32_t oh, ow;
    CHECK(m3->vt.smart_resize(inst, MMGW_MEDIA_VIDEO, 1080, 1920, 768, &oh, &ow, &perr) == MMGW_E_TOO_LARGE);
    CHECK(strstr(perr.e.msg, "301056000") != NULL);
    CHECK(m3->vt.smart_resize(inst, MMGW_MEDIA_VIDEO, 1080, 1920, 4, &oh, &ow, &perr) == MMGW_OK);
    CHECK(m3->vt.smart_resize(inst, MMGW_MEDIA_IMAGE, 0, 10, 1, &oh, &ow, &perr) == MMGW_E_INVALID);
    gw_plugin_instance_destroy(m3, inst);

    /* options */
    struct mmgw_option ls = {"max_long_side_pixel", "1024"};
    inst = NULL;
    struct mm_err err = {0};
    CHECK(gw_plugin_instance_create(m3, &ls, 1, &inst, &err) == MM_OK);
    if (inst) {
        /* long side 4000 -> 1024: 3000x4000 -> 768x1024, rounded to 28 -> 756x1036 */
        CHECK(m3->vt.smart_resize(inst, MMGW_MEDIA_IMAGE, 3000, 4000, 1, &oh, &ow, &perr) == MMGW_OK);
        CHECK(oh == 756 && ow == 1036);
        /* short side 50 < 112: grown to 112 */
        CHECK(m3->vt.smart_resize(inst, MMGW_MEDIA_IMAGE, 50, 100, 1, &oh, &ow, &perr) == MMGW_OK);
        CHECK(oh == 112 && ow == 224);
        gw_plugin_instance_destroy(m3, inst);
    }
    const struct mmgw_option bad_opts[][1] = {
        {{"max_long_side_pixel", "0"}}, {{"max_long_side_pixel", "-5"}}, {{"max_long_side_pixel", "12ab"}},
        {{"max_long_side_pixel", ""}},  {{"max_long_side_pixel", NULL}}, {{"video_fps", "nan"}},
        {{"min_pixels", "99999999999"}}};
    for (size_t i = 0; i < sizeof bad_opts / sizeof bad_opts[0]; i++) {
        inst = NULL;
        CHECK_MSG(gw_plugin_instance_create(m3, bad_opts[i], 1, &inst, &err) == MM_INVALID && !inst,
                  "option %zu", i);
        CHECK(strstr(err.msg, bad_opts[i][0].key) != NULL);
    }
    gw_plugin_unload(m3);

    /* Qwen2-VL: vision_start + pads + vision_end, no timestamps */
    struct gw_plugin *qw = load("qwen2vl", &inst, NULL, 0);
    if (qw && inst) {
        expand(qw, inst, &img, &l);
        CHECK_STR(l.text, "<|vision_start|><|image_pad|>*176<|vision_end|>");
        vid.source_fps = 30;
        expand(qw, inst, &vid, &l);
        CHECK_STR(l.text, "<|vision_start|><|video_pad|>*598<|vision_end|>");
        CHECK_STR(qw->vt.media_marker(inst, MMGW_MEDIA_IMAGE), "<|image_pad|>");
        CHECK(qw->vt.sample_frames(inst, 120, 30.0, idx, 1024, &n, &perr) == MMGW_OK && n == 8);
        gw_plugin_instance_destroy(qw, inst);
    }
    gw_plugin_unload(qw);
    return test_done();
}
