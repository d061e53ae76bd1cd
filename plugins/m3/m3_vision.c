/* MiniMax-M3: the vision half of the plugin. Constants, smart_resize, frame sampling, placeholder counts
 * and media expansion, as the checkpoint's own processor (transformers / vLLM `minimax_m3_vl`) does them.
 *
 * Rules (ARCHITECTURE.md "Preprocessing (M3 plugin)"):
 *  - factor 28 = patch 14 x merge 2; images: min 3,136 and max 451,584 pixels; each side rounded to a
 *    multiple of 28 (Python round: half to even), at least 28; over the maximum shrink by sqrt(area/max)
 *    and floor, under the minimum grow and ceil; aspect ratio over 200 refused.
 *  - opt-in long-side mode (`plugin_option max_long_side_pixel N`): shrink so the long side is N, else grow
 *    so the short side reaches 112, then round; an image over 12,845,056 pixels after resizing is refused.
 *  - video: 1.0 fps, 4..768 frames, an even count, evenly spaced indices rounded half to even; every frame
 *    resized with the same rule but max 602,112 pixels; frames x area over 301,056,000 refused.
 *
 * Every function here is const on the instance and thread-safe. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "m3_internal.h"

#define M3_FACTOR 28u
#define M3_MIN_SHORT_SIDE 112u
#define M3_IMAGE_MAX_TOTAL 12845056u /* 3584^2 */
#define M3_VIDEO_MAX_TOTAL 301056000u

static const char M3_IMAGE_TOKEN[] = "]<]image[>[";
static const char M3_VIDEO_TOKEN[] = "]<]video[>[";
static const char M3_START_TOKEN[] = "]<]start of image[>[";
static const char M3_END_TOKEN[] = "]<]end of image[>[";

static const struct mmgw_vision_params m3_default_params = {
    .struct_size = sizeof(struct mmgw_vision_params),
    .patch_size = 14,
    .temporal_patch_size = 2,
    .merge_size = 2,
    .channels = 3,
    .resample = MMGW_RESAMPLE_BICUBIC,
    .rescale = 1.0f / 255.0f,
    .image_mean = {0.48145466f, 0.4578275f, 0.40821073f},
    .image_std = {0.26862954f, 0.26130258f, 0.27577711f},
    .image_min_pixels = 4u * 28u * 28u,
    .image_max_pixels = 451584u,
    .image_max_total_pixels = M3_IMAGE_MAX_TOTAL,
    .max_aspect_ratio = 200.0,
    .video_fps = 1.0,
    .video_min_frames = 4,
    .video_max_frames = 768,
    .video_min_pixels = 4u * 28u * 28u,
    .video_max_pixels = 768u * 28u * 28u,
    .video_total_pixels = M3_VIDEO_MAX_TOTAL,
};

/* Parse a positive decimal integer no larger than max; 0 on success. */
static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    if (!s || !*s) return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    if (v == 0) return -1;
    *out = v;
    return 0;
}

static int parse_positive_double(const char *s, double max, double *out)
{
    if (!s || !*s) return -1;
    char *end = NULL;
    double v = strtod(s, &end);
    if (!end || *end || !(v > 0.0) || !(v <= max)) return -1;
    *out = v;
    return 0;
}

int32_t m3_create(const struct mmgw_host_api *host, const struct mmgw_option *options, uint32_t n_options,
                  struct mmgw_plugin_instance **out, struct mmgw_error *err)
{
    *out = NULL;
    struct mmgw_plugin_instance *inst = host->alloc(sizeof(*inst));
    if (!inst) return host->set_error(err, MMGW_E_NOMEM, "m3: out of memory creating an instance");
    memset(inst, 0, sizeof(*inst));
    inst->host = host;
    inst->vision = m3_default_params;

    for (uint32_t i = 0; i < n_options; i++) {
        const char *k = options[i].key ? options[i].key : "";
        const char *v = options[i].value;
        uint64_t u = 0;
        double d = 0;
        int bad = 0;
        if (strcmp(k, "max_long_side_pixel") == 0) {
            bad = parse_u64(v, 1u << 20, &u);
            if (!bad) inst->max_long_side = u;
        } else if (strcmp(k, "max_pixels") == 0) {
            bad = parse_u64(v, M3_IMAGE_MAX_TOTAL, &u);
            if (!bad) inst->vision.image_max_pixels = u;
        } else if (strcmp(k, "min_pixels") == 0) {
            bad = parse_u64(v, M3_IMAGE_MAX_TOTAL, &u);
            if (!bad) inst->vision.image_min_pixels = inst->vision.video_min_pixels = u;
        } else if (strcmp(k, "video_max_pixels") == 0) {
            bad = parse_u64(v, M3_IMAGE_MAX_TOTAL, &u);
            if (!bad) inst->vision.video_max_pixels = u;
        } else if (strcmp(k, "video_fps") == 0) {
            bad = parse_positive_double(v, 240.0, &d);
            if (!bad) inst->vision.video_fps = d;
        } else if (strcmp(k, "video_max_frames") == 0) {
            bad = parse_u64(v, 768, &u);
            if (!bad) inst->vision.video_max_frames = (uint32_t)u;
        } else {
            host->free(inst);
            return host->set_error(err, MMGW_E_INVALID,
                                   "m3: unknown plugin_option '%s' (known: max_long_side_pixel, max_pixels, "
                                   "min_pixels, video_max_pixels, video_fps, video_max_frames)",
                                   k);
        }
        if (bad) {
            host->free(inst);
            return host->set_error(err, MMGW_E_INVALID, "m3: plugin_option %s: bad value '%s'", k,
                                   v ? v : "");
        }
    }
    if (inst->vision.image_min_pixels > inst->vision.image_max_pixels ||
        inst->vision.video_min_pixels > inst->vision.video_max_pixels ||
        inst->vision.video_max_frames < inst->vision.video_min_frames) {
        host->free(inst);
        return host->set_error(err, MMGW_E_INVALID, "m3: plugin options give a minimum above a maximum");
    }
    *out = inst;
    return MMGW_OK;
}

void m3_destroy(struct mmgw_plugin_instance *inst)
{
    if (inst) inst->host->free(inst);
}

int32_t m3_match_model_type(const char *model_type)
{
    return model_type && strcmp(model_type, "minimax_m3_vl") == 0;
}

const struct mmgw_vision_params *m3_vision_params(const struct mmgw_plugin_instance *inst)
{
    return &inst->vision;
}

/* Python's round(x / f) * f for a double x: round half to even (rint in the default rounding mode). */
static double round_by(double x, double f)
{
    return rint(x / f) * f;
}

static int32_t area_resize(uint32_t height, uint32_t width, uint64_t min_px, uint64_t max_px, uint64_t *oh,
                           uint64_t *ow)
{
    const double f = M3_FACTOR;
    double h_bar = fmax(f, round_by(height, f));
    double w_bar = fmax(f, round_by(width, f));
    double area = (double)height * (double)width;
    if (h_bar * w_bar > (double)max_px) {
        double beta = sqrt(area / (double)max_px);
        h_bar = fmax(f, floor(height / beta / f) * f);
        w_bar = fmax(f, floor(width / beta / f) * f);
    } else if (h_bar * w_bar < (double)min_px) {
        double beta = sqrt((double)min_px / area);
        h_bar = ceil(height * beta / f) * f;
        w_bar = ceil(width * beta / f) * f;
    }
    *oh = (uint64_t)h_bar;
    *ow = (uint64_t)w_bar;
    return MMGW_OK;
}

static void long_side_resize(uint32_t height, uint32_t width, uint64_t max_long, uint64_t *oh, uint64_t *ow)
{
    const double f = M3_FACTOR;
    uint32_t long_side = height > width ? height : width;
    uint32_t short_side = height > width ? width : height;
    double sh = height, sw = width;
    if (long_side > max_long) {
        double beta = (double)max_long / long_side;
        sh = height * beta;
        sw = width * beta;
    } else if (short_side < M3_MIN_SHORT_SIDE) {
        double beta = (double)M3_MIN_SHORT_SIDE / short_side;
        sh = height * beta;
        sw = width * beta;
    }
    *oh = (uint64_t)fmax(f, round_by(sh, f));
    *ow = (uint64_t)fmax(f, round_by(sw, f));
}

int32_t m3_smart_resize(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height,
                        uint32_t width, uint32_t n_frames, uint32_t *out_height, uint32_t *out_width,
                        struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    const struct mmgw_vision_params *vp = &inst->vision;
    if (kind != MMGW_MEDIA_IMAGE && kind != MMGW_MEDIA_VIDEO)
        return host->set_error(err, MMGW_E_INVALID, "m3: unknown media kind %d", (int)kind);
    if (height == 0 || width == 0)
        return host->set_error(err, MMGW_E_INVALID, "m3: empty %ux%u image", (unsigned)width,
                               (unsigned)height);
    uint32_t lo = height < width ? height : width, hi = height < width ? width : height;
    /* max/min > 200, decided exactly in integers. */
    if ((uint64_t)hi > (uint64_t)lo * 200u)
        return host->set_error(err, MMGW_E_INVALID, "m3: aspect ratio %.1f of a %ux%u %s is over 200",
                               (double)hi / lo, (unsigned)width, (unsigned)height,
                               kind == MMGW_MEDIA_VIDEO ? "video" : "image");

    uint64_t oh = 0, ow = 0;
    if (inst->max_long_side) {
        long_side_resize(height, width, inst->max_long_side, &oh, &ow);
    } else if (kind == MMGW_MEDIA_IMAGE) {
        area_resize(height, width, vp->image_min_pixels, vp->image_max_pixels, &oh, &ow);
    } else {
        area_resize(height, width, vp->video_min_pixels, vp->video_max_pixels, &oh, &ow);
    }
    if (kind == MMGW_MEDIA_IMAGE) {
        if (oh * ow > vp->image_max_total_pixels)
            return host->set_error(err, MMGW_E_TOO_LARGE,
                                   "m3: image %ux%u resizes to %llux%llu = %llu pixels, over the cap of %llu",
                                   (unsigned)width, (unsigned)height, (unsigned long long)ow,
                                   (unsigned long long)oh, (unsigned long long)(oh * ow),
                                   (unsigned long long)vp->image_max_total_pixels);
    } else {
        uint64_t frames = n_frames ? n_frames : 1;
        if (oh * ow * frames > vp->video_total_pixels)
            return host->set_error(err, MMGW_E_TOO_LARGE,
                                   "m3: video of %u frames at %llux%llu = %llu pixels, over the cap of %llu",
                                   (unsigned)frames, (unsigned long long)ow, (unsigned long long)oh,
                                   (unsigned long long)(oh * ow * frames),
                                   (unsigned long long)vp->video_total_pixels);
    }
    if (oh > UINT32_MAX || ow > UINT32_MAX)
        return host->set_error(err, MMGW_E_TOO_LARGE, "m3: resized size out of range");
    *out_height = (uint32_t)oh;
    *out_width = (uint32_t)ow;
    return MMGW_OK;
}

/* round(num / den) with ties to even, exactly, in integers. */
static uint64_t div_round_half_even(uint64_t num, uint64_t den)
{
    uint64_t q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && (q & 1))) q++;
    return q;
}

int32_t m3_sample_frames(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps,
                         uint32_t *indices, uint32_t cap, uint32_t *n_out, struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    const struct mmgw_vision_params *vp = &inst->vision;
    *n_out = 0;
    if (total_frames == 0) return host->set_error(err, MMGW_E_INVALID, "m3: video has no frames");
    if (total_frames > (1ull << 40))
        return host->set_error(err, MMGW_E_TOO_LARGE, "m3: video frame count too large");
    if (!(fps > 0.0) || !isfinite(fps))
        return host->set_error(err, MMGW_E_INVALID, "m3: video frame rate %g is not usable", fps);

    /* qwen-vl-utils' smart_nframes with M3's numbers: clamp duration x fps into [min, max] even counts,
     * never above the frames there are, then floor to an even count. */
    double min_f = ceil(vp->video_min_frames / 2.0) * 2.0;
    uint64_t max_cap = total_frames < vp->video_max_frames ? total_frames : vp->video_max_frames;
    double max_f = floor(max_cap / 2.0) * 2.0;
    double n = (double)total_frames / fps * vp->video_fps;
    n = fmin(fmax(n, min_f), max_f);
    n = fmin(n, (double)total_frames);
    uint64_t count = (uint64_t)(floor(n / 2.0) * 2.0);
    if (count < 2) count = total_frames < 2 ? total_frames : 2; /* a 1-frame clip is padded later */
    if (count > cap)
        return host->set_error(err, MMGW_E_TOO_LARGE, "m3: %llu frames exceed the cap %u",
                               (unsigned long long)count, (unsigned)cap);
    /* linspace(0, total-1, count) rounded half to even, computed exactly. */
    for (uint64_t i = 0; i < count; i++)
        indices[i] = count == 1 ? 0 : (uint32_t)div_round_half_even((total_frames - 1) * i, count - 1);
    *n_out = (uint32_t)count;
    return MMGW_OK;
}

uint64_t m3_num_placeholder_tokens(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t grid_t,
                                   int64_t grid_h, int64_t grid_w)
{
    uint64_t m = (uint64_t)inst->vision.merge_size * inst->vision.merge_size;
    if (grid_t <= 0 || grid_h <= 0 || grid_w <= 0) return 0;
    return (uint64_t)grid_t * (uint64_t)grid_h * (uint64_t)grid_w / m;
}

const char *m3_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    if (kind == MMGW_MEDIA_IMAGE) return M3_IMAGE_TOKEN;
    if (kind == MMGW_MEDIA_VIDEO) return M3_VIDEO_TOKEN;
    return NULL;
}

static int32_t emit_token(struct mmgw_seg_sink *sink, const char *tok, uint32_t len, uint32_t count,
                          int32_t ph)
{
    struct mmgw_prompt_seg seg = {
        .kind = MMGW_SEG_TOKEN, .placeholder = ph, .text = tok, .text_len = len, .count = count};
    return sink->emit(sink->ctx, &seg);
}

#define EMIT_STATIC(sink, s, n, ph) emit_token(sink, s, (uint32_t)(sizeof(s) - 1), n, ph)

int32_t m3_expand_media(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                        struct mmgw_seg_sink *sink, struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    if (!media || !sink || !sink->emit)
        return host->set_error(err, MMGW_E_INVALID, "m3: expand_media: NULL argument");
    if (media->grid_t <= 0 || media->grid_h <= 0 || media->grid_w <= 0 || media->grid_h % 2 ||
        media->grid_w % 2)
        return host->set_error(err, MMGW_E_INVALID, "m3: bad grid %lldx%lldx%lld", (long long)media->grid_t,
                               (long long)media->grid_h, (long long)media->grid_w);
    uint64_t per_group = m3_num_placeholder_tokens(inst, media->kind, 1, media->grid_h, media->grid_w);
    if (per_group * (uint64_t)media->grid_t > UINT32_MAX)
        return host->set_error(err, MMGW_E_TOO_LARGE, "m3: too many placeholder tokens");
    int32_t rc;
    if (media->kind == MMGW_MEDIA_IMAGE) {
        uint64_t n = per_group * (uint64_t)media->grid_t;
        if ((rc = EMIT_STATIC(sink, M3_START_TOKEN, 1, 0))) return rc;
        if ((rc = EMIT_STATIC(sink, M3_IMAGE_TOKEN, (uint32_t)n, 1))) return rc;
        return EMIT_STATIC(sink, M3_END_TOKEN, 1, 0);
    }
    if (media->kind != MMGW_MEDIA_VIDEO)
        return host->set_error(err, MMGW_E_INVALID, "m3: unknown media kind %d", (int)media->kind);

    int have_ts = media->frame_indices && media->n_frames > 0 && media->source_fps > 0.0;
    uint32_t tps = inst->vision.temporal_patch_size;
    for (int64_t g = 0; g < media->grid_t; g++) {
        if (have_ts) {
            /* The timestamp of a temporal group is its first frame's, as the reference processor does. */
            uint64_t k = (uint64_t)g * tps;
            if (k > media->n_frames - 1) k = media->n_frames - 1;
            double ts = media->frame_indices[k] / media->source_fps;
            char buf[64];
            int len = snprintf(buf, sizeof(buf), "]<]%.1f seconds[>[", ts);
            if (len <= 0 || (size_t)len >= sizeof(buf))
                return host->set_error(err, MMGW_E_INVALID, "m3: timestamp out of range");
            struct mmgw_prompt_seg seg = {
                .kind = MMGW_SEG_TEXT, .placeholder = 0, .text = buf, .text_len = (uint32_t)len, .count = 1};
            if ((rc = sink->emit(sink->ctx, &seg))) return rc;
        }
        if ((rc = EMIT_STATIC(sink, M3_START_TOKEN, 1, 0))) return rc;
        if ((rc = EMIT_STATIC(sink, M3_VIDEO_TOKEN, (uint32_t)per_group, 1))) return rc;
        if ((rc = EMIT_STATIC(sink, M3_END_TOKEN, 1, 0))) return rc;
    }
    return MMGW_OK;
}
