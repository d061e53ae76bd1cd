/* Qwen2-VL: the vision half of the plugin.
 *
 * Images follow transformers' Qwen2-VL image processor (factor 28, min 56*56 = 3,136 and max 28*28*1280 =
 * 1,003,520 pixels, sides rounded half to even, aspect ratio over 200 refused). Videos follow qwen-vl-utils'
 * fetch_video: 2.0 fps, FRAME_FACTOR 2, 4..768 frames floored to an even count, indices
 * linspace(0, total-1, n) rounded, and a per-frame budget shared out of VIDEO_TOTAL_PIXELS = 90,316,800:
 * max_pixels = max(min(768*28*28, total / n * 2), int(128*28*28 * 1.05)), min_pixels = 128*28*28.
 *
 * Prompt convention: the chat template writes the bare marker (`<|image_pad|>` / `<|video_pad|>`), and
 * expand_media turns it into `<|vision_start|>` + N pads + `<|vision_end|>`. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qwen2vl_internal.h"

#define QWEN_FACTOR 28u
#define QWEN_VIDEO_MIN_PIXELS (128u * 28u * 28u)
#define QWEN_VIDEO_MAX_PIXELS (768u * 28u * 28u)
#define QWEN_VIDEO_TOTAL_PIXELS 90316800u /* int(128000 * 28 * 28 * 0.9) */
#define QWEN_FRAME_FACTOR 2u

static const char QWEN_IMAGE_PAD[] = "<|image_pad|>";
static const char QWEN_VIDEO_PAD[] = "<|video_pad|>";
static const char QWEN_VISION_START[] = "<|vision_start|>";
static const char QWEN_VISION_END[] = "<|vision_end|>";

static const struct mmgw_vision_params qwen2vl_default_params = {
    .struct_size = sizeof(struct mmgw_vision_params),
    .patch_size = 14,
    .temporal_patch_size = 2,
    .merge_size = 2,
    .channels = 3,
    .resample = MMGW_RESAMPLE_BICUBIC,
    .rescale = 1.0f / 255.0f,
    .image_mean = {0.48145466f, 0.4578275f, 0.40821073f},
    .image_std = {0.26862954f, 0.26130258f, 0.27577711f},
    .image_min_pixels = 56u * 56u,
    .image_max_pixels = 28u * 28u * 1280u,
    .image_max_total_pixels = 0,
    .max_aspect_ratio = 200.0,
    .video_fps = 2.0,
    .video_min_frames = 4,
    .video_max_frames = 768,
    .video_min_pixels = QWEN_VIDEO_MIN_PIXELS,
    .video_max_pixels = QWEN_VIDEO_MAX_PIXELS,
    .video_total_pixels = QWEN_VIDEO_TOTAL_PIXELS,
};

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

int32_t qwen2vl_create(const struct mmgw_host_api *host, const struct mmgw_option *options,
                       uint32_t n_options, struct mmgw_plugin_instance **out, struct mmgw_error *err)
{
    *out = NULL;
    struct mmgw_plugin_instance *inst = host->alloc(sizeof(*inst));
    if (!inst) return host->set_error(err, MMGW_E_NOMEM, "qwen2vl: out of memory creating an instance");
    memset(inst, 0, sizeof(*inst));
    inst->host = host;
    inst->vision = qwen2vl_default_params;

    for (uint32_t i = 0; i < n_options; i++) {
        const char *k = options[i].key ? options[i].key : "";
        const char *v = options[i].value;
        uint64_t u = 0;
        int bad = 0;
        if (strcmp(k, "max_pixels") == 0) {
            bad = parse_u64(v, 1ull << 32, &u);
            if (!bad) inst->vision.image_max_pixels = u;
        } else if (strcmp(k, "min_pixels") == 0) {
            bad = parse_u64(v, 1ull << 32, &u);
            if (!bad) inst->vision.image_min_pixels = u;
        } else if (strcmp(k, "video_total_pixels") == 0) {
            bad = parse_u64(v, 1ull << 40, &u);
            if (!bad) inst->vision.video_total_pixels = u;
        } else {
            host->free(inst);
            return host->set_error(err, MMGW_E_INVALID,
                                   "qwen2vl: unknown plugin_option '%s' (known: max_pixels, min_pixels, "
                                   "video_total_pixels)",
                                   k);
        }
        if (bad) {
            host->free(inst);
            return host->set_error(err, MMGW_E_INVALID, "qwen2vl: plugin_option %s: bad value '%s'", k,
                                   v ? v : "");
        }
    }
    if (inst->vision.image_min_pixels > inst->vision.image_max_pixels) {
        host->free(inst);
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: min_pixels is above max_pixels");
    }
    *out = inst;
    return MMGW_OK;
}

void qwen2vl_destroy(struct mmgw_plugin_instance *inst)
{
    if (inst) inst->host->free(inst);
}

int32_t qwen2vl_match_model_type(const char *model_type)
{
    return model_type && strcmp(model_type, "qwen2_vl") == 0;
}

const struct mmgw_vision_params *qwen2vl_vision_params(const struct mmgw_plugin_instance *inst)
{
    return &inst->vision;
}

/* Python's round(x / f) * f: half to even. */
static double round_by(double x, double f)
{
    return rint(x / f) * f;
}

static void area_resize(uint32_t height, uint32_t width, double min_px, double max_px, uint64_t *oh,
                        uint64_t *ow)
{
    const double f = QWEN_FACTOR;
    double h_bar = fmax(f, round_by(height, f));
    double w_bar = fmax(f, round_by(width, f));
    double area = (double)height * (double)width;
    if (h_bar * w_bar > max_px) {
        double beta = sqrt(area / max_px);
        h_bar = fmax(f, floor(height / beta / f) * f);
        w_bar = fmax(f, floor(width / beta / f) * f);
    } else if (h_bar * w_bar < min_px) {
        double beta = sqrt(min_px / area);
        h_bar = ceil(height * beta / f) * f;
        w_bar = ceil(width * beta / f) * f;
    }
    *oh = (uint64_t)h_bar;
    *ow = (uint64_t)w_bar;
}

int32_t qwen2vl_smart_resize(const struct mmgw_plugin_instance *inst, int32_t kind, uint32_t height,
                             uint32_t width, uint32_t n_frames, uint32_t *out_height, uint32_t *out_width,
                             struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    const struct mmgw_vision_params *vp = &inst->vision;
    if (kind != MMGW_MEDIA_IMAGE && kind != MMGW_MEDIA_VIDEO)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: unknown media kind %d", (int)kind);
    if (height == 0 || width == 0)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: empty %ux%u image", (unsigned)width,
                               (unsigned)height);
    uint32_t lo = height < width ? height : width, hi = height < width ? width : height;
    if ((uint64_t)hi > (uint64_t)lo * 200u)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: aspect ratio %.1f of a %ux%u %s is over 200",
                               (double)hi / lo, (unsigned)width, (unsigned)height,
                               kind == MMGW_MEDIA_VIDEO ? "video" : "image");
    uint64_t oh = 0, ow = 0;
    if (kind == MMGW_MEDIA_IMAGE) {
        area_resize(height, width, (double)vp->image_min_pixels, (double)vp->image_max_pixels, &oh, &ow);
    } else {
        /* qwen-vl-utils: the per-frame budget is the total shared by the sampled frames (two per temporal
         * patch), between VIDEO_MIN_PIXELS*1.05 and VIDEO_MAX_PIXELS. */
        double n = n_frames ? (double)n_frames : 1.0;
        double min_px = (double)vp->video_min_pixels;
        double max_px =
            fmin((double)vp->video_max_pixels, (double)vp->video_total_pixels / n * QWEN_FRAME_FACTOR);
        max_px = fmax(max_px, floor(min_px * 1.05));
        area_resize(height, width, min_px, max_px, &oh, &ow);
    }
    if (oh > UINT32_MAX || ow > UINT32_MAX)
        return host->set_error(err, MMGW_E_TOO_LARGE, "qwen2vl: resized size out of range");
    *out_height = (uint32_t)oh;
    *out_width = (uint32_t)ow;
    return MMGW_OK;
}

static uint64_t div_round_half_even(uint64_t num, uint64_t den)
{
    uint64_t q = num / den, r = num % den;
    if (2 * r > den || (2 * r == den && (q & 1))) q++;
    return q;
}

int32_t qwen2vl_sample_frames(const struct mmgw_plugin_instance *inst, uint64_t total_frames, double fps,
                              uint32_t *indices, uint32_t cap, uint32_t *n_out, struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    const struct mmgw_vision_params *vp = &inst->vision;
    *n_out = 0;
    if (total_frames == 0) return host->set_error(err, MMGW_E_INVALID, "qwen2vl: video has no frames");
    if (total_frames > (1ull << 40))
        return host->set_error(err, MMGW_E_TOO_LARGE, "qwen2vl: video frame count too large");
    if (!(fps > 0.0) || !isfinite(fps))
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: video frame rate %g is not usable", fps);
    /* qwen-vl-utils smart_nframes. */
    double min_f = ceil(vp->video_min_frames / 2.0) * 2.0;
    uint64_t max_cap = total_frames < vp->video_max_frames ? total_frames : vp->video_max_frames;
    double max_f = floor(max_cap / 2.0) * 2.0;
    double n = (double)total_frames / fps * vp->video_fps;
    n = fmin(fmin(fmax(n, min_f), max_f), (double)total_frames);
    uint64_t count = (uint64_t)(floor(n / 2.0) * 2.0);
    /* qwen-vl-utils refuses fewer than 2 frames; a 1-frame clip is kept and padded (repeated) instead. */
    if (count < 2) count = total_frames < 2 ? total_frames : 2;
    if (count > cap)
        return host->set_error(err, MMGW_E_TOO_LARGE, "qwen2vl: %llu frames exceed the cap %u",
                               (unsigned long long)count, (unsigned)cap);
    for (uint64_t i = 0; i < count; i++)
        indices[i] = count == 1 ? 0 : (uint32_t)div_round_half_even((total_frames - 1) * i, count - 1);
    *n_out = (uint32_t)count;
    return MMGW_OK;
}

uint64_t qwen2vl_num_placeholder_tokens(const struct mmgw_plugin_instance *inst, int32_t kind, int64_t grid_t,
                                        int64_t grid_h, int64_t grid_w)
{
    uint64_t m = (uint64_t)inst->vision.merge_size * inst->vision.merge_size;
    if (grid_t <= 0 || grid_h <= 0 || grid_w <= 0) return 0;
    return (uint64_t)grid_t * (uint64_t)grid_h * (uint64_t)grid_w / m;
}

const char *qwen2vl_media_marker(const struct mmgw_plugin_instance *inst, int32_t kind)
{
    (void)inst;
    if (kind == MMGW_MEDIA_IMAGE) return QWEN_IMAGE_PAD;
    if (kind == MMGW_MEDIA_VIDEO) return QWEN_VIDEO_PAD;
    return NULL;
}

static int32_t emit_token(struct mmgw_seg_sink *sink, const char *tok, size_t len, uint32_t count, int32_t ph)
{
    struct mmgw_prompt_seg seg = {
        .kind = MMGW_SEG_TOKEN, .placeholder = ph, .text = tok, .text_len = (uint32_t)len, .count = count};
    return sink->emit(sink->ctx, &seg);
}

int32_t qwen2vl_expand_media(const struct mmgw_plugin_instance *inst, const struct mmgw_media_info *media,
                             struct mmgw_seg_sink *sink, struct mmgw_error *err)
{
    const struct mmgw_host_api *host = inst->host;
    if (!media || !sink || !sink->emit)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: expand_media: NULL argument");
    if (media->kind != MMGW_MEDIA_IMAGE && media->kind != MMGW_MEDIA_VIDEO)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: unknown media kind %d", (int)media->kind);
    if (media->grid_t <= 0 || media->grid_h <= 0 || media->grid_w <= 0 || media->grid_h % 2 ||
        media->grid_w % 2)
        return host->set_error(err, MMGW_E_INVALID, "qwen2vl: bad grid %lldx%lldx%lld",
                               (long long)media->grid_t, (long long)media->grid_h, (long long)media->grid_w);
    uint64_t n =
        qwen2vl_num_placeholder_tokens(inst, media->kind, media->grid_t, media->grid_h, media->grid_w);
    if (n > UINT32_MAX) return host->set_error(err, MMGW_E_TOO_LARGE, "qwen2vl: too many placeholder tokens");
    const char *pad = media->kind == MMGW_MEDIA_IMAGE ? QWEN_IMAGE_PAD : QWEN_VIDEO_PAD;
    int32_t rc;
    if ((rc = emit_token(sink, QWEN_VISION_START, sizeof(QWEN_VISION_START) - 1, 1, 0))) return rc;
    if ((rc = emit_token(sink, pad, strlen(pad), (uint32_t)n, 1))) return rc;
    return emit_token(sink, QWEN_VISION_END, sizeof(QWEN_VISION_END) - 1, 1, 0);
}
