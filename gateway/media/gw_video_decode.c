/* FFmpeg video decoding from memory (see gw_video_decode.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avstring.h>
#include <libavutil/display.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

#include "gw_media_guard.h"
#include "gw_media_simd.h"
#include "gw_video_decode.h"

#define GW_AVIO_BUF 65536

/* Containers and codecs we open. Everything else is refused before FFmpeg parses it further. */
static const char GW_FORMATS[] =
    "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,mpeg,flv,ogg,gif,h264,hevc,m4v,"
    "asf,mjpeg,ivf,obu";
static const char GW_CODECS[] =
    "h264,hevc,vp8,vp9,av1,libdav1d,mpeg4,mpeg1video,mpeg2video,mjpeg,theora,gif,"
    "msmpeg4v3,h263,wmv2,wmv3,vc1,png,rawvideo,mp3,mp3float,aac,opus,vorbis,flac,pcm_s16le";

struct gw_mem_io {
    const uint8_t *data;
    size_t len, pos;
};

struct gw_pkt_info {
    int64_t pts;     /* presentation timestamp (or dts when the container has none) */
    int64_t dur;     /* packet duration (0 when the container gives none) */
    uint32_t disp;   /* presentation order index (not for discarded packets) */
    uint8_t key;     /* keyframe */
    uint8_t discard; /* decoded for reference only, never shown (before an edit list's start) */
};

struct gw_video {
    const char *label;
    struct gw_mem_io io;
    AVIOContext *avio;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    struct SwsContext *sws;
    AVFrame *frame, *pending;
    int pending_valid;
    uint32_t pending_disp;
    int stream;
    uint32_t width, height;
    /* the index: packets in decode order */
    AVPacket **pkts;
    struct gw_pkt_info *info;
    uint64_t n_pkts;
    uint64_t n_frames;     /* packets that are frames (not discarded) */
    double content_fps;    /* frames / (end of the last frame - start of the first), 0 when unknown */
    uint32_t *pkt_of_disp; /* presentation index -> decode-order packet */
    int64_t *sorted_pts;   /* presentation order pts, for mapping decoded frames back */
    int pts_ok;            /* every packet has a distinct timestamp */
    uint8_t *needed;       /* per presentation index: a request may still want it */
    uint64_t feed;         /* next packet to send */
    uint64_t out_count;    /* frames received since the last jump (fallback numbering) */
    uint64_t out_base;
    int draining;
    uint64_t last_index;
    int have_last;
    struct gw_rgb_image rgb;  /* the frame handed out (displayed orientation) */
    struct gw_rgb_image conv; /* the coded-orientation conversion when the stream is rotated */
    int rotation;             /* clockwise degrees to display the coded frames upright: 0, 90, 180, 270 */
    const struct gw_media_guard *guard; /* the item's time budget and cancel flag (the caller's) */
};

/* How often the packet loop polls the guard: reading a packet from memory takes ~1 us. */
#define GW_INDEX_POLL_PACKETS 64

static int mem_read(void *opaque, uint8_t *buf, int size)
{
    struct gw_mem_io *io = opaque;
    if (io->pos >= io->len) return AVERROR_EOF;
    size_t n = io->len - io->pos;
    if (n > (size_t)size) n = (size_t)size;
    memcpy(buf, io->data + io->pos, n);
    io->pos += n;
    return (int)n;
}

static int64_t mem_seek(void *opaque, int64_t offset, int whence)
{
    struct gw_mem_io *io = opaque;
    int64_t base;
    switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
        return (int64_t)io->len;
    case SEEK_SET:
        base = 0;
        break;
    case SEEK_CUR:
        base = (int64_t)io->pos;
        break;
    case SEEK_END:
        base = (int64_t)io->len;
        break;
    default:
        return -1;
    }
    int64_t np = base + offset;
    if (np < 0 || (uint64_t)np > io->len) return -1;
    io->pos = (size_t)np;
    return np;
}

/* FFmpeg's AVIOInterruptCB: polled inside avformat_open_input and avformat_find_stream_info (their probing
 * loops); a non-zero answer makes them return AVERROR_EXIT. Our own loops poll the guard themselves. */
static int interrupt_cb(void *opaque)
{
    const struct gw_video *v = opaque;
    return gw_media_guard_poll(v->guard) != MM_OK;
}

/* The error for a stop the guard reported while `stage`. */
static int32_t guard_stop(const struct gw_video *v, const char *stage, struct mm_err *err)
{
    return gw_media_guard_check(v->guard, v->label, stage, err);
}

/* Containers may name other files (mov external references, playlists): the bytes we were given are all we
 * read, so every nested open is refused. */
static int refuse_io_open(struct AVFormatContext *s, AVIOContext **pb, const char *url, int flags,
                          AVDictionary **options)
{
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

static const char *av_errstr(int e, char *buf, size_t cap)
{
    if (av_strerror(e, buf, cap) < 0) snprintf(buf, cap, "error %d", e);
    return buf;
}

void gw_video_close(struct gw_video *v)
{
    if (!v) return;
    for (uint64_t i = 0; i < v->n_pkts; i++) av_packet_free(&v->pkts[i]);
    free(v->pkts);
    free(v->info);
    free(v->pkt_of_disp);
    free(v->sorted_pts);
    free(v->needed);
    av_frame_free(&v->frame);
    av_frame_free(&v->pending);
    sws_freeContext(v->sws);
    avcodec_free_context(&v->dec);
    if (v->fmt) avformat_close_input(&v->fmt);
    if (v->avio) {
        av_freep(&v->avio->buffer);
        avio_context_free(&v->avio);
    }
    gw_rgb_image_free(&v->rgb);
    gw_rgb_image_free(&v->conv);
    free(v);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The clockwise quarter turns that display the stream upright, from its display matrix, as FFmpeg's CLI
 * (autorotate), torchcodec (>= 0.11) and decord apply them; angles are rounded to a multiple of 90 degrees
 * (torchcodec's rule), flips are ignored. */
static int stream_rotation(const AVStream *st)
{
#if LIBAVFORMAT_VERSION_MAJOR >= 61
    const AVPacketSideData *sd = av_packet_side_data_get(
        st->codecpar->coded_side_data, st->codecpar->nb_coded_side_data, AV_PKT_DATA_DISPLAYMATRIX);
    const int32_t *m = sd && sd->size >= 9 * sizeof(int32_t) ? (const int32_t *)sd->data : NULL;
#else
    size_t size = 0;
    const int32_t *m = (const int32_t *)av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (size < 9 * sizeof(int32_t)) m = NULL;
#endif
    if (!m) return 0;
    double ccw = av_display_rotation_get(m); /* counter-clockwise degrees */
    if (!isfinite(ccw)) return 0;
    long quarter = lround(-ccw / 90.0); /* clockwise quarter turns */
    return (int)(((quarter % 4) + 4) % 4) * 90;
}

/* dst = src turned clockwise by deg (90, 180 or 270); dst has the turned size. */
static void rotate_rgb(const struct gw_rgb_image *src, struct gw_rgb_image *dst, int deg)
{
    const uint32_t W = src->width, H = src->height;
    for (uint32_t y = 0; y < dst->height; y++) {
        uint8_t *o = dst->data + (size_t)y * dst->stride;
        for (uint32_t x = 0; x < dst->width; x++) {
            uint32_t sx, sy;
            if (deg == 90) /* transpose=clock */
                sx = y, sy = H - 1 - x;
            else if (deg == 270) /* transpose=cclock */
                sx = W - 1 - y, sy = x;
            else /* hflip + vflip */
                sx = W - 1 - x, sy = H - 1 - y;
            memcpy(o + (size_t)x * 3, src->data + (size_t)sy * src->stride + (size_t)sx * 3, 3);
        }
    }
}

/* Read every packet of the chosen stream (decode order) and derive presentation order. */
static int32_t build_index(struct gw_video *v, const struct gw_media_limits *lim, struct mm_err *err)
{
    uint64_t cap = 0;
    AVPacket *pkt = av_packet_alloc();
    if (!pkt) return mm_err_set(err, MM_NOMEM, "%s: out of memory", v->label);
    int rc;
    char eb[128];
    uint64_t polled = 0;
    while ((rc = av_read_frame(v->fmt, pkt)) >= 0) {
        /* a long video is many packets: the budget and the cancel flag are polled as they are read */
        if (++polled % GW_INDEX_POLL_PACKETS == 0) {
            int32_t why = guard_stop(v, "demuxing the video", err);
            if (why) {
                av_packet_free(&pkt);
                return why;
            }
        }
        if (pkt->stream_index != v->stream || pkt->size <= 0) {
            av_packet_unref(pkt);
            continue;
        }
        if (v->n_pkts >= lim->max_video_frames) {
            av_packet_free(&pkt);
            return mm_err_set(err, MM_TOO_LARGE, "%s: video has more than %llu frames", v->label,
                              (unsigned long long)lim->max_video_frames);
        }
        if (v->n_pkts == cap) {
            uint64_t nc = cap ? cap * 2 : 256;
            AVPacket **np = realloc(v->pkts, nc * sizeof *np);
            if (np) v->pkts = np;
            struct gw_pkt_info *ni = np ? realloc(v->info, nc * sizeof *ni) : NULL;
            if (ni) v->info = ni;
            if (!np || !ni) {
                av_packet_free(&pkt);
                return mm_err_set(err, MM_NOMEM, "%s: out of memory indexing the video", v->label);
            }
            cap = nc;
        }
        struct gw_pkt_info *pi = &v->info[v->n_pkts];
        pi->pts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
        pi->dur = pkt->duration > 0 ? pkt->duration : 0;
        pi->key = (pkt->flags & AV_PKT_FLAG_KEY) != 0;
        pi->discard = (pkt->flags & AV_PKT_FLAG_DISCARD) != 0;
        pi->disp = 0;
        v->pkts[v->n_pkts++] = pkt;
        pkt = av_packet_alloc();
        if (!pkt) return mm_err_set(err, MM_NOMEM, "%s: out of memory", v->label);
    }
    av_packet_free(&pkt);
    if (rc != AVERROR_EOF) {
        int32_t why = guard_stop(v, "demuxing the video", err);
        if (why) return why;
        /* A damaged tail: keep what was read, like players do, unless nothing was. */
        if (v->n_pkts == 0)
            return mm_err_set(err, MM_FORMAT, "%s: bad video: %s", v->label, av_errstr(rc, eb, sizeof eb));
    }
    /* Frames are the packets not marked discard (those precede an edit list's start: decoded for reference,
     * never shown), as torchcodec's exact scan counts them. */
    uint64_t n = 0;
    for (uint64_t i = 0; i < v->n_pkts; i++) n += !v->info[i].discard;
    if (n == 0) return mm_err_set(err, MM_FORMAT, "%s: video stream has no frames", v->label);
    v->n_frames = n;
    v->pkt_of_disp = malloc(n * sizeof *v->pkt_of_disp);
    v->sorted_pts = malloc(n * sizeof *v->sorted_pts);
    v->needed = calloc(n, 1);
    if (!v->pkt_of_disp || !v->sorted_pts || !v->needed)
        return mm_err_set(err, MM_NOMEM, "%s: out of memory indexing the video", v->label);
    v->pts_ok = 1;
    int64_t begin = INT64_MAX, end = INT64_MIN;
    for (uint64_t i = 0, j = 0; i < v->n_pkts; i++) {
        const struct gw_pkt_info *pi = &v->info[i];
        if (pi->discard) continue;
        if (pi->pts == AV_NOPTS_VALUE) {
            v->pts_ok = 0;
        } else {
            if (pi->pts < begin) begin = pi->pts;
            if (pi->pts <= INT64_MAX - pi->dur && pi->pts + pi->dur > end) end = pi->pts + pi->dur;
        }
        v->sorted_pts[j++] = pi->pts;
    }
    /* The average frame rate over the content, as torchcodec's exact scan reports it (transformers' default
     * video reader): frames / (end of the last frame - start of the first). A header's rate can be an
     * estimate from the first seconds (Matroska), wrong for a variable frame rate. */
    if (v->pts_ok && end > begin) {
        /* in torchcodec's double arithmetic (pts * num / den per end, then the difference): the frame count
         * the plugins derive, total / fps * target floored to even, can sit exactly on a boundary */
        AVRational tb = v->fmt->streams[v->stream]->time_base;
        double end_s = (double)end * tb.num / tb.den, begin_s = (double)begin * tb.num / tb.den;
        if (end_s > begin_s) v->content_fps = (double)n / (end_s - begin_s);
    }
    if (v->pts_ok) {
        qsort(v->sorted_pts, n, sizeof *v->sorted_pts, cmp_i64);
        for (uint64_t i = 1; i < n; i++)
            if (v->sorted_pts[i] == v->sorted_pts[i - 1]) v->pts_ok = 0;
    }
    for (uint64_t i = 0, j = 0; i < v->n_pkts; i++) {
        struct gw_pkt_info *pi = &v->info[i];
        if (pi->discard) continue;
        uint32_t d = (uint32_t)j++; /* no usable timestamps: decode order, decoded straight through */
        if (v->pts_ok) {
            int64_t *f = bsearch(&pi->pts, v->sorted_pts, n, sizeof *v->sorted_pts, cmp_i64);
            d = (uint32_t)(f - v->sorted_pts);
        }
        pi->disp = d;
        v->pkt_of_disp[d] = (uint32_t)i;
    }
    return MM_OK;
}

int32_t gw_video_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim,
                      const struct gw_media_guard *guard, const char *label, int threads, int autorotate,
                      struct gw_video **out, struct gw_video_info *info, struct mm_err *err)
{
    *out = NULL;
    memset(info, 0, sizeof *info);
    if (!label) label = "video";
    if (!data || len == 0) return mm_err_set(err, MM_FORMAT, "%s: empty input", label);
    if (len > lim->max_input_bytes)
        return mm_err_set(err, MM_TOO_LARGE, "%s: %zu bytes, over the limit of %llu", label, len,
                          (unsigned long long)lim->max_input_bytes);
    struct gw_video *v = calloc(1, sizeof *v);
    if (!v) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    v->label = label;
    v->io = (struct gw_mem_io){data, len, 0};
    v->guard = guard;
    char eb[128];
    int32_t rc = MM_OK;
    int e;

    uint8_t *iobuf = av_malloc(GW_AVIO_BUF);
    if (!iobuf || !(v->avio = avio_alloc_context(iobuf, GW_AVIO_BUF, 0, &v->io, mem_read, NULL, mem_seek))) {
        av_free(iobuf);
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    if (!(v->fmt = avformat_alloc_context())) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    v->fmt->pb = v->avio;
    v->fmt->flags |= AVFMT_FLAG_CUSTOM_IO;
    v->fmt->interrupt_callback.callback = interrupt_cb;
    v->fmt->interrupt_callback.opaque = v;
    v->fmt->io_open = refuse_io_open;
    v->fmt->format_whitelist = av_strdup(GW_FORMATS);
    v->fmt->codec_whitelist = av_strdup(GW_CODECS);
    if (!v->fmt->format_whitelist || !v->fmt->codec_whitelist) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    if ((e = avformat_open_input(&v->fmt, NULL, NULL, NULL)) < 0) {
        /* avformat_open_input frees the context on failure */
        v->fmt = NULL;
        if (!(rc = guard_stop(v, "probing the video", err)))
            rc = mm_err_set(err, MM_FORMAT, "%s: not a video in a supported container: %s", label,
                            av_errstr(e, eb, sizeof eb));
        goto fail;
    }
    if ((e = avformat_find_stream_info(v->fmt, NULL)) < 0) {
        if (!(rc = guard_stop(v, "probing the video", err)))
            rc = mm_err_set(err, MM_FORMAT, "%s: bad video: %s", label, av_errstr(e, eb, sizeof eb));
        goto fail;
    }
    const AVCodec *codec = NULL;
    v->stream = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
    if (v->stream < 0 || (v->fmt->streams[v->stream]->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
        rc = v->stream == AVERROR_DECODER_NOT_FOUND
                 ? mm_err_set(err, MM_UNSUPPORTED, "%s: no decoder for its video stream", label)
                 : mm_err_set(err, MM_FORMAT, "%s: no video stream", label);
        goto fail;
    }
    AVStream *st = v->fmt->streams[v->stream];
    const AVCodecParameters *par = st->codecpar;
    if (par->width <= 0 || par->height <= 0) {
        rc = mm_err_set(err, MM_FORMAT, "%s: video stream has no frame size", label);
        goto fail;
    }
    v->width = (uint32_t)par->width;
    v->height = (uint32_t)par->height;
    if (v->width > lim->max_source_side || v->height > lim->max_source_side ||
        (uint64_t)v->width * v->height > lim->max_source_pixels) {
        rc = mm_err_set(err, MM_TOO_LARGE,
                        "%s: video frames of %ux%u pixels, over the limit of %llu (side %u)", label, v->width,
                        v->height, (unsigned long long)lim->max_source_pixels, lim->max_source_side);
        goto fail;
    }
    if (!av_match_list(codec->name, GW_CODECS, ',')) {
        rc = mm_err_set(err, MM_UNSUPPORTED, "%s: video codec '%s' is not accepted", label, codec->name);
        goto fail;
    }
    double duration = v->fmt->duration > 0 ? v->fmt->duration / (double)AV_TIME_BASE : 0;
    if (duration > lim->max_video_seconds) {
        rc = mm_err_set(err, MM_TOO_LARGE, "%s: video lasts %.0f s, over the limit of %.0f s", label,
                        duration, lim->max_video_seconds);
        goto fail;
    }
    /* Only the chosen stream's packets are wanted: the demuxer drops the others early. */
    for (unsigned i = 0; i < v->fmt->nb_streams; i++)
        if ((int)i != v->stream) v->fmt->streams[i]->discard = AVDISCARD_ALL;
    if ((rc = build_index(v, lim, err))) goto fail;

    double fps = v->content_fps;
    if (!(fps > 0) || fps > 1000) fps = av_q2d(st->avg_frame_rate);
    if (!(fps > 0) || fps > 1000) fps = av_q2d(st->r_frame_rate);
    if ((!(fps > 0) || fps > 1000) && duration > 0) fps = (double)v->n_frames / duration;
    if (!(fps > 0) || fps > 1000) {
        rc = mm_err_set(err, MM_FORMAT, "%s: video has no usable frame rate", label);
        goto fail;
    }

    if (!(v->dec = avcodec_alloc_context3(codec)) || avcodec_parameters_to_context(v->dec, par) < 0) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
        goto fail;
    }
    v->dec->thread_count = threads > 1 ? threads : 1;
    v->dec->pkt_timebase = st->time_base;
    if ((e = avcodec_open2(v->dec, codec, NULL)) < 0) {
        rc = mm_err_set(err, MM_FORMAT, "%s: cannot open the %s decoder: %s", label, codec->name,
                        av_errstr(e, eb, sizeof eb));
        goto fail;
    }
    v->frame = av_frame_alloc();
    v->pending = av_frame_alloc();
    const size_t frame_bytes = (size_t)v->width * v->height * 3;
    v->rotation = autorotate ? stream_rotation(st) : 0;
    v->rgb.data = gw_aligned_alloc(frame_bytes + GW_ROW_SLACK);
    v->conv.data = v->rotation ? gw_aligned_alloc(frame_bytes + GW_ROW_SLACK) : NULL;
    if (!v->frame || !v->pending || !v->rgb.data || (v->rotation && !v->conv.data)) {
        rc = mm_err_set(err, MM_NOMEM, "%s: out of memory for %ux%u frames", label, v->width, v->height);
        goto fail;
    }
    memset(v->rgb.data + frame_bytes, 0, GW_ROW_SLACK);
    v->conv.width = v->width;
    v->conv.height = v->height;
    v->conv.stride = (size_t)v->width * 3;
    /* a quarter turn swaps the displayed sides */
    const int swap = v->rotation == 90 || v->rotation == 270;
    v->rgb.width = swap ? v->height : v->width;
    v->rgb.height = swap ? v->width : v->height;
    v->rgb.stride = (size_t)v->rgb.width * 3;

    info->width = v->rgb.width;
    info->height = v->rgb.height;
    info->rotation = v->rotation;
    info->total_frames = v->n_frames;
    info->fps = fps;
    info->codec = codec->name;
    *out = v;
    return MM_OK;
fail:
    gw_video_close(v);
    return rc;
}

void gw_video_want(struct gw_video *v, const uint32_t *indices, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (indices[i] < v->n_frames) v->needed[indices[i]] = 1;
}

/* Presentation index of a decoded frame (by its timestamp; by output count when timestamps are unusable).
 * GW_NOT_A_FRAME for a timestamp that is no frame's: a discarded packet's picture that came out anyway. */
#define GW_NOT_A_FRAME UINT64_MAX
static uint64_t frame_disp(struct gw_video *v, const AVFrame *f)
{
    int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    if (v->pts_ok && ts != AV_NOPTS_VALUE) {
        int64_t *hit = bsearch(&ts, v->sorted_pts, v->n_frames, sizeof *v->sorted_pts, cmp_i64);
        if (hit) return (uint64_t)(hit - v->sorted_pts);
        if (v->n_frames < v->n_pkts) return GW_NOT_A_FRAME;
    }
    return v->out_base + v->out_count - 1;
}

static int32_t to_rgb(struct gw_video *v, const AVFrame *f, struct mm_err *err)
{
    v->sws = sws_getCachedContext(v->sws, f->width, f->height, (enum AVPixelFormat)f->format, (int)v->width,
                                  (int)v->height, AV_PIX_FMT_RGB24, SWS_BICUBIC, NULL, NULL, NULL);
    if (!v->sws)
        return mm_err_set(err, MM_UNSUPPORTED, "%s: cannot convert %s frames to RGB", v->label,
                          av_get_pix_fmt_name((enum AVPixelFormat)f->format)
                              ? av_get_pix_fmt_name((enum AVPixelFormat)f->format)
                              : "?");
    /* FFmpeg's default conversion: the frame's tagged matrix and range, else BT.601 limited. */
    int cs = f->colorspace != AVCOL_SPC_UNSPECIFIED && f->colorspace != AVCOL_SPC_RGB ? (int)f->colorspace
                                                                                      : SWS_CS_DEFAULT;
    int full = f->color_range == AVCOL_RANGE_JPEG;
    const enum AVPixelFormat pf = (enum AVPixelFormat)f->format;
    if (pf == AV_PIX_FMT_YUVJ420P || pf == AV_PIX_FMT_YUVJ422P || pf == AV_PIX_FMT_YUVJ444P) full = 1;
    int *inv = NULL, *tab = NULL, srcr = 0, dstr = 0, bri = 0, con = 0, sat = 0;
    if (sws_getColorspaceDetails(v->sws, &inv, &srcr, &tab, &dstr, &bri, &con, &sat) >= 0)
        sws_setColorspaceDetails(v->sws, sws_getCoefficients(cs), full, tab, 1, bri, con, sat);
    struct gw_rgb_image *to = v->rotation ? &v->conv : &v->rgb;
    uint8_t *dst[4] = {to->data, NULL, NULL, NULL};
    int dst_stride[4] = {(int)to->stride, 0, 0, 0};
    int h = sws_scale(v->sws, (const uint8_t *const *)f->data, f->linesize, 0, f->height, dst, dst_stride);
    if (h != (int)v->height) return mm_err_set(err, MM_FORMAT, "%s: RGB conversion failed", v->label);
    if (v->rotation) rotate_rgb(&v->conv, &v->rgb, v->rotation);
    return MM_OK;
}

/* Jump the decoder to packet k (a keyframe): drop its state and restart there. */
static void jump_to(struct gw_video *v, uint64_t k)
{
    avcodec_flush_buffers(v->dec);
    v->feed = k;
    v->draining = 0;
    v->out_base = v->info[k].disp;
    v->out_count = 0;
    v->pending_valid = 0;
}

int32_t gw_video_frame(struct gw_video *v, uint64_t index, const struct gw_rgb_image **out,
                       struct mm_err *err)
{
    char eb[128];
    *out = NULL;
    if (index >= v->n_frames)
        return mm_err_set(err, MM_INVALID, "%s: frame %llu requested of %llu", v->label,
                          (unsigned long long)index, (unsigned long long)v->n_frames);
    if (v->have_last && index < v->last_index)
        return mm_err_set(err, MM_INVALID, "%s: frames must be requested in order", v->label);
    v->have_last = 1;
    v->last_index = index;
    v->needed[index] = 1; /* in case the caller did not announce it */

    /* A frame decoded earlier may already be the one (or the nearest after a lost one). */
    if (v->pending_valid && v->pending_disp >= index) {
        int32_t rc = to_rgb(v, v->pending, err);
        if (!rc) *out = &v->rgb;
        return rc;
    }
    if (v->pts_ok) {
        /* The keyframe governing the target: the last one at or before it in decode order whose own
         * presentation comes no later than the target (so leading frames of an open GOP are not cut
         * from their references). Jump there when it lies ahead of the decoder. */
        uint64_t tp = v->pkt_of_disp[index];
        uint64_t k = tp + 1;
        while (k-- > 0)
            if (v->info[k].key && (v->info[k].discard || v->info[k].disp <= index)) break;
        if (k != UINT64_MAX && k > v->feed) jump_to(v, k);
    }

    for (;;) {
        /* every packet sent and frame received: a frame far from a keyframe may need thousands of both */
        int32_t why = guard_stop(v, "decoding video frames", err);
        if (why) return why;
        int e = avcodec_receive_frame(v->dec, v->frame);
        if (e == 0) {
            v->out_count++;
            uint64_t d = frame_disp(v, v->frame);
            if (d < index || d == GW_NOT_A_FRAME) {
                av_frame_unref(v->frame);
                continue;
            }
            /* d == index, or the target never came out (undecodable): use the next frame instead. */
            av_frame_unref(v->pending);
            av_frame_move_ref(v->pending, v->frame);
            v->pending_valid = 1;
            v->pending_disp = (uint32_t)d;
            int32_t rc = to_rgb(v, v->pending, err);
            if (!rc) *out = &v->rgb;
            return rc;
        }
        if (e == AVERROR_EOF) {
            if (v->pending_valid) { /* the target is past the last decodable frame: repeat the last one */
                int32_t rc = to_rgb(v, v->pending, err);
                if (!rc) *out = &v->rgb;
                return rc;
            }
            return mm_err_set(err, MM_FORMAT, "%s: frame %llu could not be decoded", v->label,
                              (unsigned long long)index);
        }
        if (e != AVERROR(EAGAIN))
            return mm_err_set(err, MM_FORMAT, "%s: video decoding failed: %s", v->label,
                              av_errstr(e, eb, sizeof eb));
        if (v->feed < v->n_pkts) {
            const struct gw_pkt_info *pi = &v->info[v->feed];
            /* Frames nobody asked for are only decoded when other frames reference them. */
            v->dec->skip_frame =
                !v->pts_ok || pi->discard || v->needed[pi->disp] ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
            e = avcodec_send_packet(v->dec, v->pkts[v->feed]);
            if (e == AVERROR(EAGAIN)) continue;
            v->feed++;
            if (e < 0 && e != AVERROR_INVALIDDATA)
                return mm_err_set(err, MM_FORMAT, "%s: video decoding failed: %s", v->label,
                                  av_errstr(e, eb, sizeof eb));
        } else if (!v->draining) {
            v->draining = 1;
            avcodec_send_packet(v->dec, NULL);
        } else {
            return mm_err_set(err, MM_FORMAT, "%s: frame %llu could not be decoded", v->label,
                              (unsigned long long)index);
        }
    }
}
