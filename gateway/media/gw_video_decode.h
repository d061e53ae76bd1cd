/* Video decoding from memory with FFmpeg (libavformat/libavcodec/libswscale), decoding only what frame
 * sampling needs.
 *
 * gw_video_open demuxes the whole container once (packets only, no decoding: cheap) to learn the exact
 * frame count, every frame's presentation order and where the keyframes are. gw_video_frame then decodes
 * forward to each requested frame: it jumps to the keyframe that governs the target when that is ahead of
 * the decoder (skipping whole GOPs), and drops non-reference frames that no request needs without decoding
 * them (AVDISCARD_NONREF). Frames are numbered in presentation order from 0, as the reference readers do;
 * packets marked discard (before an edit list's start) are decoded for reference but are not frames.
 *
 * RGB conversion is FFmpeg's default (swscale, bicubic flags, same size): the frame's own colour matrix
 * and range when it is tagged, BT.601 limited range otherwise. Rotation metadata is applied after it.
 *
 * Input is untrusted: demuxers and decoders are limited to common video formats (format and codec
 * whitelists), sizes and frame counts are checked against gw_media_limits before decoding, and the item's
 * guard (its time budget and cancel flag, gw_media_guard.h) is polled by the packet and decoding loops and
 * by FFmpeg itself through its interrupt callback while probing. Not thread-safe per video; many videos may
 * be decoded on many threads at once. */
#ifndef GW_VIDEO_DECODE_H
#define GW_VIDEO_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "gw_image_decode.h"
#include "gw_media.h"
#include "gw_media_guard.h"
#include "mm_status.h"

struct gw_video;

struct gw_video_info {
    uint32_t width, height; /* of the frames handed out: the stream's size, sides swapped by a quarter turn */
    int rotation;           /* clockwise degrees applied to display the stream upright (0, 90, 180, 270) */
    uint64_t total_frames;  /* frames in the video stream, counted from its packets */
    double fps;             /* average frame rate over the content (see gw_video_open) */
    const char *codec;      /* decoder name, e.g. "h264" (static string) */
};

/** Open and index a video. guard (NULL = none) must outlive the video: it is polled until gw_video_close, and
 * a stop fails the call in progress with MM_TIMEOUT or MM_CANCELLED. threads = decoder threads (0 or 1 =
 * single-threaded). autorotate: apply the stream's display matrix (rotation metadata) to every frame, as
 * FFmpeg's CLI, torchcodec (the reader transformers uses by default) and decord do. The frame rate is
 * torchcodec's: frames / (end of the last frame - start of the first), from the packets' timestamps and
 * durations; the header's average rate only when timestamps are unusable. */
int32_t gw_video_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim,
                      const struct gw_media_guard *guard, const char *label, int threads, int autorotate,
                      struct gw_video **out, struct gw_video_info *info, struct mm_err *err);

/** Announce every frame that will be requested, so that no other non-reference frame is decoded. */
void gw_video_want(struct gw_video *v, const uint32_t *indices, uint32_t n);

/** Decode up to frame `index` (presentation order; indices must not decrease between calls) and return it
 * as RGB8. *out is owned by the video and valid until the next call. */
int32_t gw_video_frame(struct gw_video *v, uint64_t index, const struct gw_rgb_image **out,
                       struct mm_err *err);

void gw_video_close(struct gw_video *v);

#endif
