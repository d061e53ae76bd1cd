/* Patch layout and colour handling, without golden files:
 *  - the fused normalize+patchify writes exactly what the reference's reshape/permute produces
 *    (view(grid_t, T, C, gh/M, M, P, gw/M, M, P).permute(0, 3, 6, 4, 7, 2, 1, 5, 8)), computed here by a
 *    generic N-d transpose, for images (one frame in every temporal slot) and video frame pairs;
 *  - decoding keeps pixels exact for lossless formats and converts colour as PIL's convert("RGB") does:
 *    grey replicated, alpha dropped, 16-bit scaled by its high byte (16-bit grey clipped, as PIL does);
 *  - the whole pipeline on an image already at its target size is just the normalisation table. */
#include "gw_image_decode.h"
#include "gw_patchify.h"
#include "media_fixture.h"

/* out = in.transpose(perm) for a row-major float tensor of nd dims. */
static void transpose_nd(const float *in, const int64_t *shape, const int *perm, int nd, float *out)
{
    int64_t stride[16], oshape[16], idx[16] = {0}, total = 1;
    for (int d = nd - 1, s = 1; d >= 0; d--) {
        stride[d] = s;
        s *= (int)shape[d];
    }
    for (int d = 0; d < nd; d++) {
        oshape[d] = shape[perm[d]];
        total *= oshape[d];
    }
    for (int64_t o = 0; o < total; o++) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += idx[d] * stride[perm[d]];
        out[o] = in[off];
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < oshape[d]) break;
            idx[d] = 0;
        }
    }
}

static uint8_t pix(uint32_t f, uint32_t y, uint32_t x, uint32_t c)
{
    return (uint8_t)((x * 7 + y * 13 + c * 50 + f * 101) & 255);
}

static void check_layout(uint32_t frames, uint32_t H, uint32_t W)
{
    struct mmgw_vision_params vp = {.struct_size = sizeof vp,
                                    .patch_size = 14,
                                    .temporal_patch_size = 2,
                                    .merge_size = 2,
                                    .channels = 3,
                                    .rescale = 1.0f / 255.0f,
                                    .image_mean = {0.48145466f, 0.4578275f, 0.40821073f},
                                    .image_std = {0.26862954f, 0.26130258f, 0.27577711f}};
    struct gw_patch_geom g;
    CHECK(gw_patch_geom_init(&g, &vp, H, W) == 0);
    struct gw_patch_lut lut;
    gw_patch_lut_init(&lut, &vp);
    const uint32_t T = 2, groups = (frames + T - 1) / T, gh = H / 14, gw = W / 14;
    const size_t n = (size_t)groups * gh * gw * g.dim;
    float *ours = calloc(n, sizeof *ours);
    uint8_t *row = malloc((size_t)W * 3);
    /* frames in order; the last fills the slots an odd count leaves (as the pipeline does) */
    for (uint32_t f = 0; f < frames; f++) {
        uint32_t nt = frames == 1 ? T : (f == frames - 1 ? T - f % T : 1);
        for (uint32_t y = 0; y < H; y++) {
            for (uint32_t x = 0; x < W; x++)
                for (uint32_t c = 0; c < 3; c++) row[x * 3 + c] = pix(f, y, x, c);
            gw_patch_write_row(ours, MM_DT_F32, &g, f / T, frames == 1 ? 0 : f % T, nt, y, row, &lut);
        }
    }
    /* the reference: a [groups*T, C, H, W] normalised tensor, padded by repeating the last frame, then
     * view + permute + reshape */
    float *video = malloc(n * sizeof *video), *ref = malloc(n * sizeof *ref);
    for (uint32_t t = 0; t < groups * T; t++) {
        uint32_t f = t < frames ? t : frames - 1;
        for (uint32_t c = 0; c < 3; c++)
            for (uint32_t y = 0; y < H; y++)
                for (uint32_t x = 0; x < W; x++)
                    video[(((size_t)t * 3 + c) * H + y) * W + x] = lut.f32[c][pix(f, y, x, c)];
    }
    const int64_t shape[9] = {groups, T, 3, gh / 2, 2, 14, gw / 2, 2, 14};
    const int perm[9] = {0, 3, 6, 4, 7, 2, 1, 5, 8};
    transpose_nd(video, shape, perm, 9, ref);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += ours[i] != ref[i];
    CHECK_MSG(bad == 0, "%u frames %ux%u: %zu of %zu values out of place", frames, W, H, bad, n);
    /* the band writer (whole patches at a time, what the pipeline uses) lays out the same */
    memset(ours, 0, n * sizeof *ours);
    uint8_t *band = malloc((size_t)14 * W * 3);
    for (uint32_t f = 0; f < frames; f++) {
        uint32_t nt = frames == 1 ? T : (f == frames - 1 ? T - f % T : 1);
        for (uint32_t b = 0; b < H / 14; b++) {
            const uint8_t *rows[14];
            for (uint32_t py = 0; py < 14; py++) {
                uint8_t *r = band + (size_t)py * W * 3;
                for (uint32_t x = 0; x < W; x++)
                    for (uint32_t c = 0; c < 3; c++) r[x * 3 + c] = pix(f, b * 14 + py, x, c);
                rows[py] = r;
            }
            gw_patch_write_band(ours, MM_DT_F32, &g, f / T, frames == 1 ? 0 : f % T, nt, b, rows, &lut);
        }
    }
    free(band);
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += ours[i] != ref[i];
    CHECK_MSG(bad == 0, "band writer, %u frames %ux%u: %zu of %zu values out of place", frames, W, H, bad, n);
    /* bf16: every value is the f32 value rounded */
    uint16_t *h = calloc(n, sizeof *h);
    for (uint32_t f = 0; f < frames; f++) {
        uint32_t nt = frames == 1 ? T : (f == frames - 1 ? T - f % T : 1);
        for (uint32_t y = 0; y < H; y++) {
            for (uint32_t x = 0; x < W; x++)
                for (uint32_t c = 0; c < 3; c++) row[x * 3 + c] = pix(f, y, x, c);
            gw_patch_write_row(h, MM_DT_BF16, &g, f / T, frames == 1 ? 0 : f % T, nt, y, row, &lut);
        }
    }
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != mm_f32_to_bf16(ref[i]);
    CHECK_MSG(bad == 0, "bf16: %zu values differ from the rounded f32 reference", bad);
    free(h);
    free(ours);
    free(video);
    free(ref);
    free(row);
}

/* Decode an encoded buffer fully (through the header check and the streaming decoder). */
static int decode(const uint8_t *data, size_t len, struct gw_rgb_image *img)
{
    struct gw_media_limits lim;
    gw_media_limits_default(&lim);
    struct gw_image_src *src = NULL;
    struct mm_err err = {0};
    uint32_t w = 0, h = 0;
    int32_t rc = gw_image_open(data, len, &lim, "test", &src, &w, &h, &err);
    if (!rc) rc = gw_image_decode_full(src, img, &err);
    if (rc) fprintf(stderr, "decode: %s\n", err.msg);
    gw_image_close(src);
    return rc;
}

static void check_colour(const char *format, int bands, int sixteen)
{
    const int w = 37, h = 23;
    uint8_t *p8 = fx_pattern(w, h, bands, 3 + bands);
    /* alpha never 0: lossless WebP may rewrite the colour of fully transparent pixels */
    if (bands == 2 || bands == 4)
        for (int i = 0; i < w * h; i++) p8[i * bands + bands - 1] |= 1;
    uint8_t *enc = NULL;
    size_t len = 0;
    if (sixteen) {
        /* a 16-bit image whose high bytes are the pattern and low bytes something else */
        uint16_t *p16 = malloc((size_t)w * h * bands * 2);
        for (int i = 0; i < w * h * bands; i++) p16[i] = (uint16_t)(p8[i] << 8 | (uint8_t)(i * 31));
        VipsImage *raw =
            vips_image_new_from_memory_copy(p16, (size_t)w * h * bands * 2, w, h, bands, VIPS_FORMAT_USHORT);
        VipsImage *img = NULL;
        /* tagged as 16-bit colour so that the PNG encoder keeps 16 bits */
        if (raw)
            vips_copy(raw, &img, "interpretation",
                      bands >= 3 ? VIPS_INTERPRETATION_RGB16 : VIPS_INTERPRETATION_GREY16, NULL);
        if (raw) g_object_unref(raw);
        void *buf = NULL;
        if (img && !vips_image_write_to_buffer(img, format, &buf, &len, NULL)) {
            enc = malloc(len);
            memcpy(enc, buf, len);
            g_free(buf);
        }
        if (img) g_object_unref(img);
        free(p16);
    } else {
        enc = fx_encode(p8, w, h, bands, format, &len);
    }
    CHECK_MSG(enc != NULL, "cannot encode %s with %d bands", format, bands);
    struct gw_rgb_image img = {0};
    if (enc && decode(enc, len, &img) == 0) {
        CHECK(img.width == (uint32_t)w && img.height == (uint32_t)h);
        int bad = 0;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++) {
                    /* grey (1-2 bands) replicated; alpha (2nd or 4th band) dropped; 16-bit: the high byte,
                     * but 16-bit grey is clipped at 255 (PIL opens it as I;16) */
                    int src_c = bands <= 2 ? 0 : c;
                    size_t i = ((size_t)y * w + x) * bands + src_c;
                    uint8_t want = p8[i];
                    if (sixteen && bands == 1) want = p8[i] ? 255 : (uint8_t)(i * 31);
                    bad += img.data[(size_t)y * img.stride + x * 3 + c] != want;
                }
        CHECK_MSG(bad == 0, "%s, %d bands%s: %d values differ", format, bands, sixteen ? ", 16-bit" : "",
                  bad);
    } else {
        CHECK_MSG(0, "%s, %d bands: decode failed", format, bands);
    }
    gw_rgb_image_free(&img);
    free(enc);
    free(p8);
}

/* Collect rows from a decoder into one buffer. */
struct collect {
    uint8_t *buf;
    uint32_t w, h, y;
};

static int32_t col_begin(void *ctx, uint32_t w, uint32_t h, struct mm_err *err)
{
    struct collect *c = ctx;
    c->buf = malloc((size_t)w * h * 3);
    c->w = w;
    c->h = h;
    return c->buf ? MM_OK : mm_err_set(err, MM_NOMEM, "oom");
}

static int32_t col_row(void *ctx, const uint8_t *rgb, struct mm_err *err)
{
    struct collect *c = ctx;
    if (c->y >= c->h) return mm_err_set(err, MM_ERROR, "too many rows");
    memcpy(c->buf + (size_t)c->y++ * c->w * 3, rgb, (size_t)c->w * 3);
    return MM_OK;
}

/* The direct PNG decoder gives exactly libvips' (libpng's) pixels, for every filter choice, bit depth,
 * colour type and IDAT chunking the encoder produces. */
static void check_png_fast_path(void)
{
    const int sizes[][2] = {{1, 1}, {3, 2}, {17, 9}, {200, 130}, {1021, 5}};
    const char *opts[] = {".png[filter=0]",      ".png[filter=8]",     ".png[filter=16]",
                          ".png[filter=32]",     ".png[filter=64]",    ".png[filter=248]",
                          ".png[compression=0]", ".png[palette,Q=90]", ".png[interlace]"};
    int compared = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int bands = 1; bands <= 4; bands++)
            for (size_t oi = 0; oi < sizeof opts / sizeof opts[0]; oi++) {
                int w = sizes[si][0], h = sizes[si][1];
                uint8_t *p = fx_pattern(w, h, bands, (uint64_t)(si * 31 + bands * 7 + oi));
                size_t len = 0;
                uint8_t *png = fx_encode(p, w, h, bands, opts[oi], &len);
                free(p);
                if (!png) continue; /* e.g. palette output needs libimagequant */
                struct collect a = {0}, b = {0};
                struct gw_row_sink sa = {&a, col_begin, col_row}, sb = {&b, col_begin, col_row};
                struct mm_err err = {0};
                struct gw_png_src *ps = NULL;
                struct gw_vips_src *vs = NULL;
                uint32_t pw, ph;
                int32_t rc = gw_png_open(png, len, "fast", &ps, &pw, &ph, &err);
                if (rc == MM_OK) {
                    CHECK_MSG(gw_png_decode(ps, &sa, &err) == MM_OK, "%s: %s", opts[oi], err.msg);
                    CHECK(gw_vips_open(png, len, "vips", &vs, &pw, &ph, &err) == MM_OK);
                    if (vs) CHECK(gw_vips_decode(vs, &sb, &err) == MM_OK);
                    CHECK_MSG(a.buf && b.buf && a.y == b.y && memcmp(a.buf, b.buf, (size_t)pw * ph * 3) == 0,
                              "%dx%d, %d bands, %s: direct PNG decode differs from libvips", w, h, bands,
                              opts[oi]);
                    compared++;
                } else {
                    CHECK_MSG(rc == MM_UNSUPPORTED && strstr(opts[oi], "interlace"), "%s: rc %d", opts[oi],
                              rc);
                }
                gw_png_close(ps);
                gw_vips_close(vs);
                free(a.buf);
                free(b.buf);
                free(png);
            }
    printf("direct PNG decoder equal to libvips on %d encodings\n", compared);
    CHECK(compared >= 100);
}

/* The whole pipeline on images that need no resizing: the output is the normalised pixels in place. */
static void check_pipeline_identity(const char *plugin)
{
    struct fx_plugin fp;
    if (fx_plugin_open(&fp, plugin, NULL, 0)) {
        CHECK(0);
        return;
    }
    const int w = 56, h = 84;
    uint8_t *p = fx_pattern(w, h, 3, 9);
    size_t len = 0;
    uint8_t *png = fx_encode(p, w, h, 3, ".png", &len);
    struct gw_media_result r;
    struct mm_err err = {0};
    CHECK_MSG(png &&
                  fx_process(&fp, MMGW_MEDIA_IMAGE, png, len, "synthetic.png", MM_DT_F32, &r, &err) == MM_OK,
              "%s", err.msg);
    if (r.pixels) {
        CHECK(r.grid_thw[0] == 1 && r.grid_thw[1] == h / 14 && r.grid_thw[2] == w / 14);
        CHECK(r.width == (uint32_t)w && r.height == (uint32_t)h && r.n_frames == 1 && !r.frame_indices);
        const struct mmgw_vision_params *vp = fp.p->vt.vision_params(fp.inst);
        /* patch row 0 is the top-left 14x14 block; column (c, t, py, px) */
        const float *row0 = r.pixels;
        int bad = 0;
        for (int c = 0; c < 3; c++)
            for (int t = 0; t < 2; t++)
                for (int py = 0; py < 14; py++)
                    for (int px = 0; px < 14; px++) {
                        float want = ((float)p[(py * w + px) * 3 + c] - vp->image_mean[c] * 255.0f) /
                                     (vp->image_std[c] * 255.0f);
                        bad += row0[((c * 2 + t) * 14 + py) * 14 + px] != want;
                    }
        CHECK_MSG(bad == 0, "%s: %d values of the first patch differ", plugin, bad);
        struct mmgw_media_info info;
        gw_media_result_info(&r, &info);
        CHECK(info.kind == MMGW_MEDIA_IMAGE && info.grid_h == h / 14 && info.frame_indices == NULL);
    }
    gw_media_result_free(&r);
    free(png);
    free(p);
    fx_plugin_close(&fp);
}

int main(void)
{
    struct mm_err err = {0};
    CHECK_MSG(gw_media_global_init(&err) == MM_OK, "%s", err.msg);
    check_layout(1, 28, 28);
    check_layout(1, 56, 84);
    check_layout(2, 84, 56);
    check_layout(4, 28, 112);
    check_layout(3, 56, 56); /* odd: the last frame fills both slots of the last group */
    check_layout(5, 28, 56);

    check_colour(".png", 3, 0);
    check_colour(".png", 4, 0);
    check_colour(".png", 1, 0);
    check_colour(".png", 2, 0);
    check_colour(".png", 3, 1);
    check_colour(".png", 1, 1);
    check_colour(".tif", 3, 0);
    check_colour(".tif", 4, 0);
    check_colour(".webp[lossless]", 3, 0);
    check_colour(".webp[lossless]", 4, 0);

    check_png_fast_path();
    check_pipeline_identity("m3");
    check_pipeline_identity("qwen2vl");
    return test_done();
}
