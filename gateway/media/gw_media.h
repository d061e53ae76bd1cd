/* The multimodal preprocessing pipeline: encoded bytes -> the patch tensor a vision encoder eats.
 *
 *   bytes --decode--> RGB8 frame(s) --(video: sample frames)--> smart resize (antialiased bicubic, a = -0.5,
 *   rounded to uint8 like torchvision) --> rescale + normalize --> temporal patching
 *
 * Everything model-specific comes from a loaded plugin instance (struct mmgw_plugin + instance): the target
 * size (smart_resize), the frames to use (sample_frames), patch/merge/temporal sizes and mean/std
 * (vision_params). The pipeline itself knows no model.
 *
 * Output layout (the reference processors' row order): rows (t, h/merge, w/merge, merge, merge), columns
 * (C, T, P, P), i.e. pixels[n_patches][C*T*P*P] with n_patches = grid_t * grid_h * grid_w, grid_h = height /
 * P, grid_w = width / P. A still image fills every temporal slot with itself; a video whose sampled frame
 * count is not a multiple of T repeats its last frame.
 *
 * Input bytes come from anywhere: this module never fetches (see gw_media_source.h for the CLI's
 * file/data:/http loader; the gateway fetches through gateway/fetch with its network policy).
 *
 * Threading: gw_media_process is reentrant and may run on many threads at once (with the same plugin
 * instance: its vision functions are const). It never blocks on anything but CPU and memory; run it on the
 * gw_pool (gw_pool.h) so event loops never block. Call gw_media_global_init once before the first use (it
 * is idempotent and thread-safe; gw_media_process calls it too).
 *
 * Bad input never crashes, hangs or takes unbounded memory: sizes claimed by headers are checked against
 * struct gw_media_limits before anything large is allocated or decoded, and every failure returns a status
 * with a one-line message in err.
 *
 * Nor unbounded time: each item has a wall-clock budget (gw_media_limits.max_process_ns, counted from the
 * call) and may be cancelled from another thread (gw_media_options.cancel). Both are checked inside the long
 * loops (video demuxing, frame decoding, every decoded or resized row) and through FFmpeg's interrupt
 * callback; an item over budget fails with MM_TIMEOUT, a cancelled one with MM_CANCELLED, its memory freed.
 * A single library call that cannot be interrupted (libjpeg's whole-file pass for a progressive JPEG,
 * libwebp's decode, libvips' full decode of an interlaced PNG) runs to its end first: it is bounded by the
 * pixel caps. See docs/design/preprocess.md, "Time budget and cancellation". */
#ifndef GW_MEDIA_H
#define GW_MEDIA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mmgw/plugin.h>

#include "mm_status.h"

/** Caps applied before and during decoding. Zero fields take the defaults shown. */
struct gw_media_limits {
    uint64_t max_input_bytes;   /* encoded input (default 512 MiB) */
    uint64_t max_source_pixels; /* width x height an image or video frame may claim (default 178,956,970:
                                   PIL's DecompressionBombError threshold, where the reference stops too) */
    uint32_t max_source_side;   /* either side (default 1,048,576) */
    uint64_t max_video_frames;  /* frames a video may contain (default 1,000,000) */
    double max_video_seconds;   /* duration a video may claim (default 4 h) */
    uint64_t max_output_bytes;  /* the patch tensor (default 4 GiB) */
    uint64_t max_process_ns;    /* wall-clock budget for one item, from the call to its result: decoding,
                                   frame sampling, resizing, patching (default 60 s; 0 = default;
                                   GW_MEDIA_NO_TIME_LIMIT = none) */
};

/** max_process_ns for no time limit (the CLI's --timeout 0). */
#define GW_MEDIA_NO_TIME_LIMIT UINT64_MAX

/** How to run. Zero-initialised = defaults. */
struct gw_media_options {
    int32_t dtype;                        /* MM_DT_F32 (default, also 0) or MM_DT_BF16 */
    const struct gw_media_limits *limits; /* NULL = defaults */
    int32_t video_threads;                /* FFmpeg decoder threads per video (0 = 1) */
    int32_t fast_jpeg;                    /* 1 = decode big JPEGs at 1/2..1/8 scale in the DCT domain when
                                             that still covers the target (faster, no longer bit-exact
                                             with the reference: see docs/design/preprocess.md) */
    int32_t no_autorotate;                /* 1 = ignore a video's rotation metadata (default: apply it, as
                                             torchcodec, decord and FFmpeg's CLI do) */
    const atomic_bool *cancel;            /* NULL, or a flag another thread may set: the item then stops at
                                             its next check with MM_CANCELLED (the gateway sets it when the
                                             request is over, e.g. the client went away). Must stay valid
                                             until gw_media_process returns. */
};

struct gw_media_input {
    int32_t kind;        /* enum mmgw_media_kind */
    const uint8_t *data; /* encoded bytes, borrowed for the duration of the call */
    size_t len;
    const char *label; /* names the item in error messages (file name, URL, "image 2"); may be NULL */
};

/** Stage timings in nanoseconds (for metrics and the benchmark). */
struct gw_media_timing {
    uint64_t decode_ns; /* container/bitstream decode up to RGB8 frames (incl. colour conversion) */
    uint64_t post_ns;   /* resize + rescale/normalize + patching */
};

/** A processed item. Owns pixels and frame_indices; release with gw_media_result_free. */
struct gw_media_result {
    int32_t kind;  /* enum mmgw_media_kind */
    int32_t dtype; /* MM_DT_F32 or MM_DT_BF16 */
    void *pixels;  /* [n_patches][patch_dim], 64-byte aligned */
    uint64_t n_patches;
    uint32_t patch_dim; /* C * T * P * P (1176 for 3 x 2 x 14 x 14) */
    int64_t grid_thw[3];
    uint32_t src_width, src_height; /* the decoded size */
    uint32_t width, height;         /* the resized size */
    uint32_t n_frames;       /* frames used: sampled video frames before temporal padding; 1 for images */
    uint32_t *frame_indices; /* n_frames source frame numbers (videos); NULL for images */
    uint64_t total_frames;   /* frames in the video (videos) */
    double source_fps;       /* the video's frame rate (videos); 0 for images */
    struct gw_media_timing timing;
};

/** One-time library set-up (libvips, FFmpeg logging). Returns MM_OK or an error; safe to call repeatedly
 * and from several threads. */
int32_t gw_media_global_init(struct mm_err *err);

/** Run the whole pipeline on one item. vt and inst are a loaded plugin's table and an instance of it.
 * On success *out is filled (caller frees with gw_media_result_free); on failure *out is zeroed. */
int32_t gw_media_process(const struct gw_media_input *in, const struct mmgw_plugin *vt,
                         const struct mmgw_plugin_instance *inst, const struct gw_media_options *opt,
                         struct gw_media_result *out, struct mm_err *err);

/** Release what a result owns and zero it. NULL or a zeroed result is fine. */
void gw_media_result_free(struct gw_media_result *r);

/** Fill the view of a result that a plugin's expand_media takes. info borrows r's frame_indices. */
void gw_media_result_info(const struct gw_media_result *r, struct mmgw_media_info *info);

/** The defaults, for callers that want to start from them. */
void gw_media_limits_default(struct gw_media_limits *lim);

#endif
