/* gw_media_process: drive decode -> sample -> resize -> normalize -> patch for one item with a plugin's
 * rules (see gw_media.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libavutil/log.h>
#include <vips/vips.h>

#include "gw_image_decode.h"
#include "gw_media.h"
#include "gw_media_guard.h"
#include "gw_media_simd.h"
#include "gw_patchify.h"
#include "gw_plugin.h"
#include "gw_resample.h"
#include "gw_video_decode.h"
#include "mm_dtype.h"
#include "mm_log.h"

/* With fast_jpeg, a JPEG may be decoded at 1/2, 1/4 or 1/8 scale (in the DCT domain) as long as the decoded
 * image is still at least the resize target on both sides; the antialiased bicubic does the rest. Measured
 * against the exact path (docs/design/preprocess.md): photos mean 0.003 / p99 0.015, sharp synthetic edges
 * up to p99 0.09 (over the 0.05 bound), so it is opt-in. */
#define GW_JPEG_REDUCE_MARGIN 1u

static uint64_t now_ns(void)
{
    return gw_media_mono_ns();
}

void gw_media_limits_default(struct gw_media_limits *lim)
{
    lim->max_input_bytes = 512ull << 20;
    /* PIL's own ceiling: above 2 x Image.MAX_IMAGE_PIXELS it raises DecompressionBombError, so the reference
     * refuses what we refuse; below it, it decodes what we decode (images stream, no full-size copy). */
    lim->max_source_pixels = 178956970ull;
    lim->max_source_side = 1u << 20;
    lim->max_video_frames = 1000000;
    lim->max_video_seconds = 4 * 3600.0;
    lim->max_output_bytes = 4ull << 30;
    /* A 4 s 1080p clip and a 48 Mpx JPEG each take under a second on one core (even in a Debug build); a
     * minute leaves a wide margin for a loaded machine and long videos, and still stops the small files
     * that would hold a pool thread for many minutes (docs/design/preprocess.md, "Time budget and
     * cancellation"). */
    lim->max_process_ns = 60ull * 1000000000ull;
}

static void limits_resolve(const struct gw_media_limits *in, struct gw_media_limits *out)
{
    gw_media_limits_default(out);
    if (!in) return;
    if (in->max_input_bytes) out->max_input_bytes = in->max_input_bytes;
    if (in->max_source_pixels) out->max_source_pixels = in->max_source_pixels;
    if (in->max_source_side) out->max_source_side = in->max_source_side;
    if (in->max_video_frames) out->max_video_frames = in->max_video_frames;
    if (in->max_video_seconds > 0) out->max_video_seconds = in->max_video_seconds;
    if (in->max_output_bytes) out->max_output_bytes = in->max_output_bytes;
    if (in->max_process_ns) out->max_process_ns = in->max_process_ns;
}

/* ---- the time budget ---- */

int32_t gw_media_guard_fail(const struct gw_media_guard *g, int32_t why, const char *label, const char *stage,
                            struct mm_err *err)
{
    if (why == MM_CANCELLED)
        return mm_err_set(err, MM_CANCELLED, "%s: preprocessing was cancelled (while %s)", label, stage);
    unsigned long long ms = (unsigned long long)((g->budget_ns + 999999) / 1000000);
    return mm_err_set(err, MM_TIMEOUT,
                      "%s: preprocessing took longer than the time limit of %llu ms (stopped while %s)",
                      label, ms, stage);
}

/* ---- one-time set-up ---- */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int32_t init_rc = MM_ERROR;
static char init_msg[256];

/* FFmpeg's log callback hands us its own format strings (the attribute tells the compiler so). */
__attribute__((format(printf, 3, 0))) static void av_log_to_mm(void *avcl, int level, const char *fmt,
                                                               va_list vl)
{
    (void)avcl;
    if (level > AV_LOG_WARNING || mm_log_get_level() < MM_LOG_DEBUG) return;
    char line[512];
    vsnprintf(line, sizeof line, fmt, vl);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n') line[--n] = '\0';
    if (n) mm_log(MM_LOG_DEBUG, "ffmpeg", "%s", line);
}

/* libvips and GLib report through g_log; keep stderr for our one-line errors and send theirs to the debug
 * log. */
static void glib_log_to_mm(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer ud)
{
    (void)level, (void)ud;
    if (mm_log_get_level() >= MM_LOG_DEBUG) mm_log(MM_LOG_DEBUG, domain ? domain : "glib", "%s", message);
}

static void media_init_once(void)
{
    g_log_set_handler("VIPS", G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION, glib_log_to_mm,
                      NULL);
    g_log_set_handler("GLib-GObject", G_LOG_LEVEL_WARNING | G_LOG_LEVEL_MESSAGE, glib_log_to_mm, NULL);
    if (VIPS_INIT("mmgw")) {
        snprintf(init_msg, sizeof init_msg, "libvips init failed: %s", vips_error_buffer());
        vips_error_clear();
        init_rc = MM_ERROR;
        return;
    }
    /* Our parallelism is one item per pool thread: libvips must not start its own workers, keep a cache of
     * operations, or load formats from untrusted-marked loaders. */
    vips_concurrency_set(1);
    vips_cache_set_max(0);
    vips_cache_set_max_mem(0);
    vips_block_untrusted_set(TRUE);
    av_log_set_callback(av_log_to_mm);
    init_rc = MM_OK;
}

int32_t gw_media_global_init(struct mm_err *err)
{
    pthread_once(&init_once, media_init_once);
    if (init_rc != MM_OK) return mm_err_set(err, init_rc, "%s", init_msg);
    return MM_OK;
}

/* ---- results ---- */

void gw_media_result_free(struct gw_media_result *r)
{
    if (!r) return;
    gw_aligned_free(r->pixels);
    free(r->frame_indices);
    memset(r, 0, sizeof *r);
}

void gw_media_result_info(const struct gw_media_result *r, struct mmgw_media_info *info)
{
    memset(info, 0, sizeof *info);
    info->struct_size = sizeof *info;
    info->kind = r->kind;
    info->grid_t = r->grid_thw[0];
    info->grid_h = r->grid_thw[1];
    info->grid_w = r->grid_thw[2];
    info->n_frames = r->n_frames;
    info->frame_indices = r->frame_indices;
    info->source_fps = r->source_fps;
}

/* ---- the pipeline ---- */

struct gw_job_ctx {
    const struct gw_media_input *in;
    const struct mmgw_plugin *vt;
    const struct mmgw_plugin_instance *inst;
    const struct mmgw_vision_params *vp;
    struct gw_media_limits lim;
    int32_t dtype;
    const char *label;
    struct gw_media_guard guard; /* the item's deadline and cancel flag */
    struct gw_patch_lut lut;
};

static int32_t plugin_error(const struct gw_job_ctx *c, int32_t rc, const struct mmgw_error *perr,
                            struct mm_err *err)
{
    return mm_err_set(err, rc, "%s: %s", c->label, perr->e.msg[0] ? perr->e.msg : mm_strerror(rc));
}

/* Allocate the patch tensor of groups x gh x gw rows. */
static int32_t alloc_output(const struct gw_job_ctx *c, const struct gw_patch_geom *g, uint64_t groups,
                            struct gw_media_result *out, struct mm_err *err)
{
    uint64_t rows = groups * g->gh * g->gw;
    uint64_t esize = c->dtype == MM_DT_BF16 ? 2 : 4;
    uint64_t bytes = rows * g->dim * esize;
    if (bytes > c->lim.max_output_bytes)
        return mm_err_set(
            err, MM_TOO_LARGE, "%s: output of %llu patches (%llu bytes) is over the limit of %llu", c->label,
            (unsigned long long)rows, (unsigned long long)bytes, (unsigned long long)c->lim.max_output_bytes);
    out->pixels = gw_aligned_alloc((size_t)bytes);
    if (!out->pixels)
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for %llu bytes of patches", c->label,
                          (unsigned long long)bytes);
    out->n_patches = rows;
    out->patch_dim = g->dim;
    out->dtype = c->dtype;
    return MM_OK;
}

/* Where decoded rows go: resize them as they arrive and write every finished output row straight into
 * its patches, so neither a full-size source image nor a resized image is ever held. */
struct frame_sink {
    const struct gw_job_ctx *c;
    struct gw_resizer rs;
    int have_rs;
    const struct gw_patch_geom *g;
    uint32_t tw, th;
    uint64_t group;
    uint32_t t0, nt;
    uint8_t *band; /* P resized rows, written out as whole patches when complete */
    void *pixels;
    uint32_t in_rows;
    uint64_t post_ns;  /* time spent resizing and patching (the rest of an image's time is decoding) */
    const char *stage; /* what a stop reports doing: "decoding the image", "resizing video frames" */
};

static int32_t sink_begin(void *ctx, uint32_t w, uint32_t h, struct mm_err *err)
{
    struct frame_sink *fs = ctx;
    /* a decoder may have spent long before its first row (a progressive JPEG's whole-file pass) */
    int32_t why = gw_media_guard_check(&fs->c->guard, fs->c->label, fs->stage, err);
    if (why) return why;
    if (fs->have_rs && (fs->rs.in_w != w || fs->rs.in_h != h)) {
        gw_resizer_free(&fs->rs);
        fs->have_rs = 0;
    }
    if (!fs->have_rs) {
        int32_t rc = gw_resizer_init(&fs->rs, w, h, fs->tw, fs->th, err);
        if (rc) return rc;
        fs->have_rs = 1;
    }
    gw_resizer_reset(&fs->rs);
    fs->in_rows = 0;
    return MM_OK;
}

static int32_t sink_row(void *ctx, const uint8_t *rgb, struct mm_err *err)
{
    struct frame_sink *fs = ctx;
    if (fs->in_rows++ >= fs->rs.in_h)
        return mm_err_set(err, MM_ERROR, "%s: decoder gave too many rows", fs->c->label);
    /* Every row of every image and sampled frame passes here: the budget and the cancel flag are polled
     * per row (a clock read and an atomic load, small beside the row's decoding and resampling), which also
     * stops an image decoder between its rows (returning an error stops gw_image_decode). */
    int32_t why = gw_media_guard_check(&fs->c->guard, fs->c->label, fs->stage, err);
    if (why) return why;
    uint64_t t = now_ns();
    gw_resizer_push(&fs->rs, rgb);
    const uint32_t P = fs->g->P;
    const size_t stride = (size_t)fs->tw * 3;
    while (gw_resizer_can_pull(&fs->rs)) {
        uint32_t y = fs->rs.emitted;
        uint8_t *slot = fs->band + (size_t)(y % P) * stride;
        const uint8_t *r = gw_resizer_pull(&fs->rs, slot);
        if (r != slot) memcpy(slot, r, stride);
        if (y % P == P - 1) {
            const uint8_t *rows[64];
            for (uint32_t i = 0; i < P; i++) rows[i] = fs->band + (size_t)i * stride;
            gw_patch_write_band(fs->pixels, fs->c->dtype, fs->g, fs->group, fs->t0, fs->nt, y / P, rows,
                                &fs->c->lut);
        }
    }
    fs->post_ns += now_ns() - t;
    return MM_OK;
}

static int32_t sink_check_done(const struct frame_sink *fs, struct mm_err *err)
{
    if (!fs->have_rs || fs->rs.emitted != fs->th)
        return mm_err_set(err, MM_FORMAT, "%s: decoder stopped after %u rows", fs->c->label, fs->in_rows);
    return MM_OK;
}

static int32_t frame_sink_init(struct frame_sink *fs, const struct gw_job_ctx *c,
                               const struct gw_patch_geom *g, uint32_t th, uint32_t tw, void *pixels,
                               struct mm_err *err)
{
    memset(fs, 0, sizeof *fs);
    fs->c = c;
    fs->g = g;
    fs->th = th;
    fs->tw = tw;
    fs->pixels = pixels;
    fs->band = gw_aligned_alloc((size_t)g->P * tw * 3 + GW_ROW_SLACK);
    if (!fs->band) return mm_err_set(err, MM_NOMEM, "%s: out of memory", c->label);
    return MM_OK;
}

static void frame_sink_free(struct frame_sink *fs)
{
    if (fs->have_rs) gw_resizer_free(&fs->rs);
    gw_aligned_free(fs->band);
}

static int32_t process_image(struct gw_job_ctx *c, const struct gw_media_options *opt,
                             struct gw_media_result *out, struct mm_err *err)
{
    uint64_t t_start = now_ns();
    struct gw_image_src *src = NULL;
    uint32_t w = 0, h = 0;
    int32_t rc = gw_image_open(c->in->data, c->in->len, &c->lim, c->label, &src, &w, &h, err);
    if (!rc && (rc = gw_media_guard_check(&c->guard, c->label, "reading the image header", err)))
        gw_image_close(src);
    if (rc) return rc;

    struct mmgw_error perr = {{MM_OK, ""}};
    uint32_t th = 0, tw = 0;
    rc = c->vt->smart_resize(c->inst, MMGW_MEDIA_IMAGE, h, w, 1, &th, &tw, &perr);
    if (rc) {
        gw_image_close(src);
        return plugin_error(c, rc, &perr, err);
    }
    struct gw_patch_geom g;
    if (gw_patch_geom_init(&g, c->vp, th, tw)) {
        gw_image_close(src);
        return mm_err_set(err, MM_ERROR, "%s: plugin resized to %ux%u, not a multiple of its patch grid",
                          c->label, tw, th);
    }
    if ((rc = alloc_output(c, &g, 1, out, err))) {
        gw_image_close(src);
        return rc;
    }
    struct frame_sink fs;
    rc = frame_sink_init(&fs, c, &g, th, tw, out->pixels, err);
    if (!rc) {
        fs.nt = c->vp->temporal_patch_size; /* a still image fills every temporal slot */
        fs.stage = "decoding the image";
        struct gw_row_sink sink = {&fs, sink_begin, sink_row};
        rc = gw_image_decode(src, opt->fast_jpeg, tw * GW_JPEG_REDUCE_MARGIN, th * GW_JPEG_REDUCE_MARGIN,
                             &sink, err);
        if (!rc) rc = sink_check_done(&fs, err);
    }
    uint64_t post_ns = fs.post_ns;
    frame_sink_free(&fs);
    gw_image_close(src);
    if (rc) return rc;

    out->kind = MMGW_MEDIA_IMAGE;
    out->grid_thw[0] = 1;
    out->grid_thw[1] = g.gh;
    out->grid_thw[2] = g.gw;
    out->src_width = w;
    out->src_height = h;
    out->width = tw;
    out->height = th;
    out->n_frames = 1;
    /* Decoding and resizing interleave row by row: the resizing share is timed inside the row sink. */
    uint64_t total = now_ns() - t_start;
    out->timing.post_ns = post_ns < total ? post_ns : total;
    out->timing.decode_ns = total - out->timing.post_ns;
    return MM_OK;
}

static int32_t process_video(struct gw_job_ctx *c, const struct gw_media_options *opt,
                             struct gw_media_result *out, struct mm_err *err)
{
    uint64_t t0 = now_ns(), decode_ns = 0;
    struct gw_video *v = NULL;
    struct gw_video_info vi;
    int32_t rc = gw_video_open(c->in->data, c->in->len, &c->lim, &c->guard, c->label, opt->video_threads,
                               !opt->no_autorotate, &v, &vi, err);
    if (rc) return rc;
    decode_ns += now_ns() - t0;

    struct frame_sink fs;
    int have_fs = 0;
    struct mmgw_error perr = {{MM_OK, ""}};
    uint32_t cap = c->vp->video_max_frames > 768 ? c->vp->video_max_frames : 768;
    uint32_t *idx = calloc(cap, sizeof *idx);
    uint32_t n = 0;
    if (!idx) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", c->label);
        goto done;
    }
    if ((rc = c->vt->sample_frames(c->inst, vi.total_frames, vi.fps, idx, cap, &n, &perr))) {
        rc = plugin_error(c, rc, &perr, err);
        goto done;
    }
    if (n == 0 || n > cap) {
        rc = mm_err_set(err, MM_ERROR, "%s: plugin sampled %u frames", c->label, n);
        goto done;
    }
    for (uint32_t i = 0; i < n; i++)
        if (idx[i] >= vi.total_frames || (i && idx[i] < idx[i - 1])) {
            rc = mm_err_set(err, MM_ERROR, "%s: plugin sampled frame %u of %llu out of order or range",
                            c->label, idx[i], (unsigned long long)vi.total_frames);
            goto done;
        }
    uint32_t th = 0, tw = 0;
    if ((rc = c->vt->smart_resize(c->inst, MMGW_MEDIA_VIDEO, vi.height, vi.width, n, &th, &tw, &perr))) {
        rc = plugin_error(c, rc, &perr, err);
        goto done;
    }
    struct gw_patch_geom g;
    if (gw_patch_geom_init(&g, c->vp, th, tw)) {
        rc = mm_err_set(err, MM_ERROR, "%s: plugin resized to %ux%u, not a multiple of its patch grid",
                        c->label, tw, th);
        goto done;
    }
    const uint32_t T = g.T;
    const uint64_t groups = (n + T - 1) / T;
    if ((rc = alloc_output(c, &g, groups, out, err))) goto done;
    if ((rc = frame_sink_init(&fs, c, &g, th, tw, out->pixels, err))) goto done;
    have_fs = 1;
    fs.stage = "resizing video frames";
    gw_video_want(v, idx, n);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t a = now_ns();
        const struct gw_rgb_image *frame = NULL;
        if ((rc = gw_video_frame(v, idx[i], &frame, err))) goto done;
        decode_ns += now_ns() - a;
        /* The last frame also fills the temporal slots an odd count leaves empty. */
        fs.group = i / T;
        fs.t0 = i % T;
        fs.nt = (i == n - 1) ? T - fs.t0 : 1;
        uint64_t keep = fs.post_ns; /* sink_begin does not reset the running total */
        if ((rc = sink_begin(&fs, frame->width, frame->height, err))) goto done;
        fs.post_ns = keep;
        for (uint32_t y = 0; y < frame->height && !rc; y++)
            rc = sink_row(&fs, frame->data + (size_t)y * frame->stride, err);
        if (!rc) rc = sink_check_done(&fs, err);
        if (rc) goto done;
    }
    out->frame_indices = idx;
    idx = NULL;
    out->kind = MMGW_MEDIA_VIDEO;
    out->grid_thw[0] = (int64_t)groups;
    out->grid_thw[1] = g.gh;
    out->grid_thw[2] = g.gw;
    out->src_width = vi.width;
    out->src_height = vi.height;
    out->width = tw;
    out->height = th;
    out->n_frames = n;
    out->total_frames = vi.total_frames;
    out->source_fps = vi.fps;
    out->timing.decode_ns = decode_ns;
    out->timing.post_ns = fs.post_ns;
done:
    if (have_fs) frame_sink_free(&fs);
    free(idx);
    gw_video_close(v);
    return rc;
}

int32_t gw_media_process(const struct gw_media_input *in, const struct mmgw_plugin *vt,
                         const struct mmgw_plugin_instance *inst, const struct gw_media_options *opt,
                         struct gw_media_result *out, struct mm_err *err)
{
    memset(out, 0, sizeof *out);
    int32_t rc = gw_media_global_init(err);
    if (rc) return rc;
    static const struct gw_media_options defaults = {0};
    if (!opt) opt = &defaults;
    if (!in || !vt || !inst) return mm_err_set(err, MM_INVALID, "media: NULL argument");
    struct gw_job_ctx *c = malloc(sizeof *c); /* the LUT is 4.5 KiB: keep it off small thread stacks */
    if (!c) return mm_err_set(err, MM_NOMEM, "media: out of memory");
    c->in = in;
    c->vt = vt;
    c->inst = inst;
    c->label = in->label ? in->label : (in->kind == MMGW_MEDIA_VIDEO ? "video" : "image");
    c->dtype = opt->dtype == MM_DT_BF16 ? MM_DT_BF16 : MM_DT_F32;
    limits_resolve(opt->limits, &c->lim);
    if (opt->dtype != 0 && opt->dtype != MM_DT_F32 && opt->dtype != MM_DT_BF16) {
        rc = mm_err_set(err, MM_INVALID, "%s: output dtype must be F32 or BF16", c->label);
        free(c);
        return rc;
    }
    c->vp = vt->vision_params(inst);
    if (!c->vp || c->vp->struct_size < sizeof *c->vp || c->vp->channels != 3) {
        free(c);
        return mm_err_set(err, MM_ERROR, "media: plugin %s gave unusable vision parameters", vt->name);
    }
    gw_patch_lut_init(&c->lut, c->vp);
    /* the budget counts from here: the item's whole time on this thread */
    gw_media_guard_init(&c->guard, c->lim.max_process_ns, opt->cancel);
    /* an item whose request ended while it was queued stops before any work */
    rc = gw_media_guard_check(&c->guard, c->label, "waiting to start", err);
    if (rc == MM_OK) {
        if (in->kind == MMGW_MEDIA_IMAGE)
            rc = process_image(c, opt, out, err);
        else if (in->kind == MMGW_MEDIA_VIDEO)
            rc = process_video(c, opt, out, err);
        else
            rc = mm_err_set(err, MM_INVALID, "%s: unknown media kind %d", c->label, (int)in->kind);
    }
    free(c);
    gw_patch_fence();
    if (rc) gw_media_result_free(out);
    return rc;
}
