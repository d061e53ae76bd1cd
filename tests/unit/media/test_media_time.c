/* Media have capped time as well as capped sizes: an item over its budget (gw_media_limits.max_process_ns)
 * stops with MM_TIMEOUT, and an item whose cancel flag is set (before it starts, or by another thread while
 * it runs) stops with MM_CANCELLED, each quickly, with a one-line message naming the item and the stage, and
 * no memory held. The slow input is tiny: a GIF of 1x1-pixel frames on a large canvas at 1 fps, a few KiB
 * that make every frame a full-canvas decode, conversion and resize (seconds of work unbounded). */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "media_fixture.h"

static struct fx_plugin m3;

/* A w x h GIF89a of n frames, each one 1x1 pixel update (so no frame is a keyframe and every sampled frame
 * is the whole canvas), delay_cs hundredths of a second apart. */
static uint8_t *long_gif(uint16_t w, uint16_t h, uint32_t n, uint16_t delay_cs, size_t *len)
{
    size_t cap = 32 + 19 + (size_t)n * 23 + 1;
    uint8_t *b = malloc(cap), *p = b;
    if (!b) return NULL;
    memcpy(p, "GIF89a", 6), p += 6;
    *p++ = (uint8_t)w, *p++ = (uint8_t)(w >> 8), *p++ = (uint8_t)h, *p++ = (uint8_t)(h >> 8);
    *p++ = 0xF0, *p++ = 0, *p++ = 0;                                       /* a 2-colour global palette */
    memcpy(p, "\x00\x00\x00\xff\xff\xff", 6), p += 6;                      /* black, white */
    memcpy(p, "\x21\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00", 19), p += 19; /* loop forever */
    for (uint32_t i = 0; i < n; i++) {
        const uint16_t x = (uint16_t)(i % w), y = (uint16_t)(i / w % h);
        /* graphic control: disposal 1 (keep), the delay */
        memcpy(p, "\x21\xf9\x04\x04", 4), p += 4;
        *p++ = (uint8_t)delay_cs, *p++ = (uint8_t)(delay_cs >> 8), *p++ = 0, *p++ = 0;
        /* a 1x1 image at (x, y): LZW min code size 2, codes clear, 0, end */
        *p++ = 0x2C, *p++ = (uint8_t)x, *p++ = (uint8_t)(x >> 8), *p++ = (uint8_t)y, *p++ = (uint8_t)(y >> 8);
        memcpy(p, "\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00", 10), p += 10;
    }
    *p++ = 0x3B;
    *len = (size_t)(p - b);
    return b;
}

struct outcome {
    int32_t rc;
    double secs;
    struct mm_err err;
};

static struct outcome run(const struct fx_plugin *fp, int32_t kind, const uint8_t *data, size_t len,
                          const char *label, uint64_t budget_ns, const atomic_bool *cancel)
{
    struct gw_media_limits lim = {.max_process_ns = budget_ns};
    struct gw_media_input in = {kind, data, len, label};
    struct gw_media_options opt = {.dtype = MM_DT_BF16, .limits = &lim, .cancel = cancel};
    struct gw_media_result r;
    struct outcome o = {0};
    double t0 = fx_now();
    o.rc = gw_media_process(&in, &fp->p->vt, fp->inst, &opt, &r, &o.err);
    o.secs = fx_now() - t0;
    if (o.rc != MM_OK) {
        CHECK_MSG(r.pixels == NULL && r.frame_indices == NULL, "%s: a failed result holds memory", label);
        CHECK_MSG(strstr(o.err.msg, label) == o.err.msg, "%s: message does not start with the item: %s",
                  label, o.err.msg);
        CHECK_MSG(strchr(o.err.msg, '\n') == NULL, "%s: message is not one line", label);
    }
    printf("%-34s %-12s %.3f s  %s\n", label, mm_status_name(o.rc), o.secs, o.rc ? o.err.msg : "");
    gw_media_result_free(&r);
    return o;
}

struct canceller {
    atomic_bool *flag;
    unsigned delay_us;
};

static void *cancel_later(void *arg)
{
    struct canceller *c = arg;
    usleep(c->delay_us);
    atomic_store(c->flag, true);
    return NULL;
}

int main(void)
{
    struct mm_err err = {0};
    CHECK_MSG(gw_media_global_init(&err) == MM_OK, "%s", err.msg);
    /* small frames out (112 x 112): the time goes into decoding and resizing the 2000 x 2000 canvas */
    const struct mmgw_option small[] = {{"video_max_pixels", "12544"}};
    if (fx_plugin_open(&m3, "m3", small, 1)) {
        CHECK(0);
        return test_done();
    }
    size_t gl = 0, dl = 0;
    /* 300 frames at 1 fps: all 300 sampled, each a 4 Mpx canvas (~10 ms of work: ~3 s in all) */
    uint8_t *gif = long_gif(2000, 2000, 300, 100, &gl);
    /* 200,000 frames of a 16 x 16 canvas at 50 fps: most of the time is demuxing (indexing) the packets */
    uint8_t *many = long_gif(16, 16, 200000, 2, &dl);
    CHECK(gif && many);
    if (!gif || !many) goto out;
    printf("slow GIF: %zu bytes; many-frame GIF: %zu bytes\n", gl, dl);

    /* over the budget: stopped within a frame or so of it, not seconds later */
    struct outcome o = run(&m3, MMGW_MEDIA_VIDEO, gif, gl, "video over 150 ms", 150000000ull, NULL);
    CHECK_MSG(o.rc == MM_TIMEOUT, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
    CHECK_MSG(strstr(o.err.msg, "time limit of 150 ms") != NULL, "message: %s", o.err.msg);
    CHECK_MSG(o.secs >= 0.14 && o.secs < 1.0, "took %.3f s for a 150 ms budget", o.secs);

    /* the demuxing loop polls too */
    o = run(&m3, MMGW_MEDIA_VIDEO, many, dl, "many frames over 20 ms", 20000000ull, NULL);
    CHECK_MSG(o.rc == MM_TIMEOUT, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
    CHECK_MSG(strstr(o.err.msg, "demuxing") != NULL, "not stopped while demuxing: %s", o.err.msg);
    CHECK_MSG(o.secs < 0.5, "took %.3f s for a 20 ms budget", o.secs);

    /* cancelled before it starts: nothing is done at all */
    atomic_bool flag;
    atomic_init(&flag, true);
    o = run(&m3, MMGW_MEDIA_VIDEO, gif, gl, "video cancelled before", 0, &flag);
    CHECK_MSG(o.rc == MM_CANCELLED, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
    CHECK_MSG(strstr(o.err.msg, "cancelled") != NULL, "message: %s", o.err.msg);
    CHECK_MSG(o.secs < 0.05, "took %.3f s", o.secs);

    /* cancelled by another thread while it runs (the gateway's loop thread when the client goes away) */
    atomic_store(&flag, false);
    struct canceller cl = {&flag, 100000};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, cancel_later, &cl) == 0);
    o = run(&m3, MMGW_MEDIA_VIDEO, gif, gl, "video cancelled at 100 ms", 0, &flag);
    pthread_join(th, NULL);
    CHECK_MSG(o.rc == MM_CANCELLED, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
    CHECK_MSG(o.secs >= 0.09 && o.secs < 1.0, "took %.3f s to notice a cancel at 0.1 s", o.secs);

    /* an image: polled between decoded rows */
    {
        uint8_t *pat = fx_pattern(4000, 3000, 3, 11);
        size_t jl = 0, pl = 0;
        uint8_t *jpg = pat ? fx_encode(pat, 4000, 3000, 3, ".jpg", &jl) : NULL;
        uint8_t *png = pat ? fx_encode(pat, 4000, 3000, 3, ".png", &pl) : NULL;
        CHECK(jpg && png);
        if (jpg && png) {
            o = run(&m3, MMGW_MEDIA_IMAGE, jpg, jl, "12 Mpx JPEG over 2 ms", 2000000ull, NULL);
            CHECK_MSG(o.rc == MM_TIMEOUT, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
            CHECK_MSG(strstr(o.err.msg, "decoding the image") != NULL, "message: %s", o.err.msg);
            o = run(&m3, MMGW_MEDIA_IMAGE, png, pl, "12 Mpx PNG over 2 ms", 2000000ull, NULL);
            CHECK_MSG(o.rc == MM_TIMEOUT, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
            atomic_store(&flag, true);
            o = run(&m3, MMGW_MEDIA_IMAGE, jpg, jl, "JPEG cancelled before", 0, &flag);
            CHECK_MSG(o.rc == MM_CANCELLED, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
            /* within budget and not cancelled: unchanged */
            atomic_store(&flag, false);
            o = run(&m3, MMGW_MEDIA_IMAGE, jpg, jl, "12 Mpx JPEG within 60 s", 0, &flag);
            CHECK_MSG(o.rc == MM_OK, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
        }
        free(jpg);
        free(png);
        free(pat);
    }
    /* a short video within its budget still works */
    {
        size_t sl = 0;
        uint8_t *shortgif = long_gif(64, 64, 8, 50, &sl);
        o = run(&m3, MMGW_MEDIA_VIDEO, shortgif, sl, "short GIF within 60 s", 0, &flag);
        CHECK_MSG(o.rc == MM_OK, "rc %s: %s", mm_status_name(o.rc), o.err.msg);
        free(shortgif);
    }
out:
    free(gif);
    free(many);
    fx_plugin_close(&m3);
    return test_done();
}
