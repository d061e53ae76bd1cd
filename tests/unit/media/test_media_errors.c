/* Bad input never crashes, hangs or balloons: every malformed, truncated, oversized or hostile input is
 * refused quickly with a status and a one-line message naming the item, before anything large is allocated.
 * All inputs are built here (no files). */
#include <stdint.h>
#include <sys/resource.h>
#include <zlib.h>

#include "media_fixture.h"

static struct fx_plugin m3;

static long max_rss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Run one input; check the status (any error when want == 1), the message and the time taken. */
static void expect(const char *what, int32_t kind, const uint8_t *data, size_t len, int32_t want,
                   const char *needle, const struct gw_media_limits *lim)
{
    struct gw_media_input in = {kind, data, len, what};
    struct gw_media_options opt = {.limits = lim};
    struct gw_media_result r;
    struct mm_err err = {0};
    double t0 = fx_now();
    int32_t rc = gw_media_process(&in, &m3.p->vt, m3.inst, &opt, &r, &err);
    double dt = fx_now() - t0;
    if (want == 1)
        CHECK_MSG(rc != MM_OK, "%s: accepted", what);
    else
        CHECK_MSG(rc == want, "%s: rc %s, want %s (%s)", what, mm_status_name(rc), mm_status_name(want),
                  err.msg);
    if (rc != MM_OK) {
        CHECK_MSG(strstr(err.msg, what) != NULL, "%s: message does not name the item: %s", what, err.msg);
        CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: message is not one line", what);
        CHECK_MSG(r.pixels == NULL && r.frame_indices == NULL, "%s: a failed result holds memory", what);
    }
    if (needle)
        CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message lacks '%s': %s", what, needle, err.msg);
    CHECK_MSG(dt < 2.0, "%s: took %.2f s", what, dt);
    printf("%-28s %-11s %.3f s  %s\n", what, mm_status_name(rc), dt, rc ? err.msg : "");
    gw_media_result_free(&r);
}

static void png_chunk(uint8_t *buf, size_t *off, const char *type, const uint8_t *data, uint32_t len)
{
    uint8_t *p = buf + *off;
    p[0] = (uint8_t)(len >> 24), p[1] = (uint8_t)(len >> 16), p[2] = (uint8_t)(len >> 8), p[3] = (uint8_t)len;
    memcpy(p + 4, type, 4);
    if (len) memcpy(p + 8, data, len);
    uint32_t crc = (uint32_t)crc32(0, p + 4, len + 4);
    p[8 + len] = (uint8_t)(crc >> 24), p[9 + len] = (uint8_t)(crc >> 16), p[10 + len] = (uint8_t)(crc >> 8),
          p[11 + len] = (uint8_t)crc;
    *off += 12 + len;
}

/* A PNG whose header claims w x h RGB pixels, followed by a tiny compressed image row. */
static uint8_t *png_claiming(uint32_t w, uint32_t h, size_t *len)
{
    uint8_t *buf = calloc(1, 4096);
    size_t off = 8;
    memcpy(buf, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        8,
                        2,
                        0,
                        0,
                        0};
    png_chunk(buf, &off, "IHDR", ihdr, 13);
    uint8_t raw[1000] = {0}, z[2048];
    uLongf zl = sizeof z;
    compress(z, &zl, raw, sizeof raw);
    png_chunk(buf, &off, "IDAT", z, (uint32_t)zl);
    png_chunk(buf, &off, "IEND", NULL, 0);
    *len = off;
    return buf;
}

int main(void)
{
    struct mm_err err = {0};
    CHECK_MSG(gw_media_global_init(&err) == MM_OK, "%s", err.msg);
    if (fx_plugin_open(&m3, "m3", NULL, 0)) {
        CHECK(0);
        return test_done();
    }
    long rss0 = max_rss_kb();

    /* nothing */
    expect("empty image", MMGW_MEDIA_IMAGE, (const uint8_t *)"", 0, MM_FORMAT, "empty", NULL);
    expect("null image", MMGW_MEDIA_IMAGE, NULL, 0, MM_FORMAT, NULL, NULL);
    expect("empty video", MMGW_MEDIA_VIDEO, (const uint8_t *)"", 0, MM_FORMAT, "empty", NULL);
    expect("unknown kind", 7, (const uint8_t *)"x", 1, MM_INVALID, "kind", NULL);

    /* random bytes of several sizes, as images and as videos */
    uint64_t seed = 1234;
    const size_t sizes[] = {1, 3, 16, 100, 5000, 100000};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        uint8_t *b = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) b[j] = (uint8_t)fx_rand(&seed);
        char what[64];
        snprintf(what, sizeof what, "random %zu bytes (image)", sizes[i]);
        expect(what, MMGW_MEDIA_IMAGE, b, sizes[i], 1, NULL, NULL);
        snprintf(what, sizeof what, "random %zu bytes (video)", sizes[i]);
        expect(what, MMGW_MEDIA_VIDEO, b, sizes[i], 1, NULL, NULL);
        /* random bytes behind a JPEG or PNG signature reach the decoders proper */
        if (sizes[i] >= 8) {
            memcpy(b, "\xff\xd8\xff\xe0", 4);
            snprintf(what, sizeof what, "JPEG magic + %zu random", sizes[i]);
            expect(what, MMGW_MEDIA_IMAGE, b, sizes[i], 1, NULL, NULL);
            memcpy(b, "\x89PNG\r\n\x1a\n", 8);
            snprintf(what, sizeof what, "PNG magic + %zu random", sizes[i]);
            expect(what, MMGW_MEDIA_IMAGE, b, sizes[i], 1, NULL, NULL);
        }
        free(b);
    }

    /* truncated and corrupted real images */
    uint8_t *pat = fx_pattern(300, 200, 3, 77);
    size_t jl = 0, pl = 0, gl = 0, tl = 0;
    uint8_t *jpg = fx_encode(pat, 300, 200, 3, ".jpg", &jl), *png = fx_encode(pat, 300, 200, 3, ".png", &pl);
    uint8_t *gif = fx_encode(pat, 300, 200, 3, ".gif", &gl), *tif = fx_encode(pat, 300, 200, 3, ".tif", &tl);
    CHECK(jpg && png && gif && tif);
    if (jpg && png && gif && tif) {
        expect("whole JPEG", MMGW_MEDIA_IMAGE, jpg, jl, MM_OK, NULL, NULL);
        expect("whole GIF", MMGW_MEDIA_IMAGE, gif, gl, MM_OK, NULL, NULL);
        expect("whole TIFF", MMGW_MEDIA_IMAGE, tif, tl, MM_OK, NULL, NULL);
        expect("truncated JPEG", MMGW_MEDIA_IMAGE, jpg, jl / 2, MM_FORMAT, "truncated", NULL);
        expect("JPEG header only", MMGW_MEDIA_IMAGE, jpg, 200, MM_FORMAT, NULL, NULL);
        expect("truncated PNG", MMGW_MEDIA_IMAGE, png, pl * 6 / 10, MM_FORMAT, NULL, NULL);
        expect("truncated GIF", MMGW_MEDIA_IMAGE, gif, gl / 2, 1, NULL, NULL);
        expect("truncated TIFF", MMGW_MEDIA_IMAGE, tif, tl / 2, 1, NULL, NULL);
        /* flipped bits inside the compressed PNG data: CRC and zlib errors */
        uint8_t *bad = malloc(pl);
        memcpy(bad, png, pl);
        for (size_t k = 100; k < pl - 20; k += 97) bad[k] ^= 0x5a;
        expect("corrupted PNG", MMGW_MEDIA_IMAGE, bad, pl, MM_FORMAT, NULL, NULL);
        free(bad);
        /* an image is not a video */
        expect("JPEG as video", MMGW_MEDIA_VIDEO, jpg, jl, 1, NULL, NULL);
        expect("PNG as video", MMGW_MEDIA_VIDEO, png, pl, 1, NULL, NULL);
        /* limits */
        struct gw_media_limits small = {.max_input_bytes = 1000};
        expect("over max_input_bytes", MMGW_MEDIA_IMAGE, jpg, jl, MM_TOO_LARGE, NULL, &small);
        struct gw_media_limits fewpx = {.max_source_pixels = 10000};
        expect("over max_source_pixels", MMGW_MEDIA_IMAGE, png, pl, MM_TOO_LARGE, "claims", &fewpx);
        struct gw_media_limits tinyout = {.max_output_bytes = 1000};
        expect("over max_output_bytes", MMGW_MEDIA_IMAGE, png, pl, MM_TOO_LARGE, "output", &tinyout);
    }
    free(jpg);
    free(png);
    free(gif);
    free(tif);
    free(pat);

    /* headers claiming gigapixels: refused from the header, before any decoding or allocation */
    size_t gpl = 0;
    uint8_t *giga = png_claiming(100000, 100000, &gpl);
    expect("PNG claiming 10 Gpx", MMGW_MEDIA_IMAGE, giga, gpl, MM_TOO_LARGE, "claims", NULL);
    free(giga);
    giga = png_claiming(2000000, 10, &gpl);
    expect("PNG side over 2^20", MMGW_MEDIA_IMAGE, giga, gpl, MM_TOO_LARGE, NULL, NULL);
    free(giga);
    /* a plausible header (64 Mpx) over almost no data: fails on the missing data, fast */
    giga = png_claiming(8000, 8000, &gpl);
    expect("PNG 64 Mpx, no data", MMGW_MEDIA_IMAGE, giga, gpl, MM_FORMAT, NULL, NULL);
    free(giga);
    {
        /* a JPEG whose SOF claims 60000 x 60000 */
        uint8_t *p = fx_pattern(64, 64, 3, 5);
        size_t l = 0;
        uint8_t *j = fx_encode(p, 64, 64, 3, ".jpg", &l);
        for (size_t k = 0; j && k + 9 < l; k++)
            if (j[k] == 0xFF && (j[k + 1] == 0xC0 || j[k + 1] == 0xC2)) {
                j[k + 5] = 60000 >> 8, j[k + 6] = 60000 & 255, j[k + 7] = 60000 >> 8, j[k + 8] = 60000 & 255;
                break;
            }
        if (j) expect("JPEG claiming 3.6 Gpx", MMGW_MEDIA_IMAGE, j, l, MM_TOO_LARGE, "claims", NULL);
        free(j);
        free(p);
    }

    /* aspect ratio over 200 (the plugin refuses before decoding) */
    {
        uint8_t *p = fx_pattern(1000, 4, 3, 6);
        size_t l = 0;
        uint8_t *wide = fx_encode(p, 1000, 4, 3, ".png", &l);
        if (wide) expect("aspect 250:1", MMGW_MEDIA_IMAGE, wide, l, MM_INVALID, "aspect ratio", NULL);
        free(wide);
        free(p);
        p = fx_pattern(2, 400, 3, 6);
        uint8_t *tall = fx_encode(p, 2, 400, 3, ".png", &l);
        if (tall) expect("aspect 1:200 (allowed)", MMGW_MEDIA_IMAGE, tall, l, MM_OK, NULL, NULL);
        free(tall);
        free(p);
    }

    long grown = max_rss_kb() - rss0;
    printf("peak RSS grew by %ld KiB\n", grown);
    CHECK_MSG(grown < 200 * 1024, "bad inputs raised the peak RSS by %ld KiB", grown);
    fx_plugin_close(&m3);
    return test_done();
}
