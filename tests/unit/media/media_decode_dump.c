/* Test tool: decode images with gw_image_open/gw_image_decode_full (default limits) and write the RGB8
 * pixels, so a script can compare them with Pillow's bit for bit before any resize.
 *
 *   media_decode_dump FILE...   for each FILE: prints "FILE ok W H" and writes FILE.rgb (W*H*3 bytes, rows
 *                               top to bottom), or prints "FILE error MESSAGE" */
#include <stdio.h>
#include <stdlib.h>

#include "gw_image_decode.h"
#include "gw_media.h"

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        uint8_t *nb = realloc(b, cap * 2);
        if (!nb) free(b);
        b = nb;
        cap *= 2;
    }
    fclose(f);
    *len = n;
    return b;
}

static int dump(const char *path, const struct gw_media_limits *lim)
{
    size_t len = 0;
    uint8_t *data = read_all(path, &len);
    if (!data) return printf("%s error cannot read\n", path), 1;
    struct mm_err err = {0};
    struct gw_image_src *src = NULL;
    struct gw_rgb_image img = {0};
    uint32_t w = 0, h = 0;
    int32_t rc = gw_image_open(data, len, lim, path, &src, &w, &h, &err);
    if (!rc) rc = gw_image_decode_full(src, &img, &err);
    gw_image_close(src);
    free(data);
    if (rc) return printf("%s error %s\n", path, err.msg), 0;
    char out[4096];
    snprintf(out, sizeof out, "%s.rgb", path);
    FILE *f = fopen(out, "wb");
    int bad = !f;
    for (uint32_t y = 0; f && y < img.height; y++)
        bad |=
            fwrite(img.data + (size_t)y * img.stride, 1, (size_t)img.width * 3, f) != (size_t)img.width * 3;
    if (f) bad |= fclose(f) != 0;
    printf("%s %s %u %u\n", path, bad ? "error cannot write" : "ok", img.width, img.height);
    gw_rgb_image_free(&img);
    return bad;
}

int main(int argc, char **argv)
{
    struct mm_err err = {0};
    if (gw_media_global_init(&err)) {
        fprintf(stderr, "media_decode_dump: %s\n", err.msg);
        return 1;
    }
    struct gw_media_limits lim = {0};
    gw_media_limits_default(&lim);
    int bad = 0;
    for (int i = 1; i < argc; i++) bad |= dump(argv[i], &lim);
    return bad;
}
