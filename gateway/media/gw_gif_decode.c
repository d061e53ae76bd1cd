/* GIF decoding: the first frame, as PIL (GifImagePlugin + convert("RGB")) gives it.
 *
 * PIL's first-frame rules, which libvips' loader does not follow:
 *  - the image is the logical screen, grown to the frame's extent when the frame reaches past it;
 *  - outside the frame the canvas holds the frame's transparent index when it has one, else index 0;
 *  - every index, transparent ones included, becomes its palette colour (convert("RGB") ignores
 *    transparency; libnsgif paints transparent pixels black);
 *  - a palette that is the identity grey ramp (or no palette at all) makes the image greyscale: the index
 *    is the grey level; indices past the palette's end read as the grey ramp too.
 * The LZW data is decoded in one pass into an index canvas (interlaced frames arrive out of row order),
 * then handed out row by row through the palette. Data (or an end code) that ends before the frame is
 * complete is an error, as it is for PIL (a truncated file). */
#include <stdlib.h>
#include <string.h>

#include "gw_image_decode.h"
#include "gw_media_simd.h"

#define GIF_MAX_CODES 4096

struct gw_gif_src {
    const uint8_t *data;
    size_t len;
    const char *label;
    uint32_t width, height;  /* the canvas */
    uint32_t fx, fy, fw, fh; /* the first frame's extent */
    int interlace;
    int transparency;    /* the first frame's transparent index, or -1 */
    size_t lzw;          /* offset of the LZW minimum code size byte */
    uint8_t pal[256][3]; /* index -> RGB (the grey ramp where the palette does not reach) */
};

int gw_gif_sniff(const uint8_t *data, size_t len)
{
    return len >= 6 && (memcmp(data, "GIF87a", 6) == 0 || memcmp(data, "GIF89a", 6) == 0);
}

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* PIL's _is_palette_needed: a palette whose entry i is (i, i, i) everywhere is dropped (greyscale). */
static int palette_needed(const uint8_t *p, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (p[i * 3] != i || p[i * 3 + 1] != i || p[i * 3 + 2] != i) return 1;
    return 0;
}

static void set_palette(struct gw_gif_src *s, const uint8_t *p, uint32_t n)
{
    for (uint32_t i = 0; i < 256; i++) s->pal[i][0] = s->pal[i][1] = s->pal[i][2] = (uint8_t)i;
    if (p) memcpy(s->pal, p, (size_t)n * 3);
}

/* Skip data sub-blocks starting at *pos (each a length byte and that many bytes, up to a 0 length). */
static int skip_subblocks(const struct gw_gif_src *s, size_t *pos)
{
    for (;;) {
        if (*pos >= s->len) return -1;
        uint8_t n = s->data[(*pos)++];
        if (n == 0) return 0;
        if (s->len - *pos < n) return -1;
        *pos += n;
    }
}

int32_t gw_gif_open(const uint8_t *data, size_t len, const char *label, struct gw_gif_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err)
{
    *out = NULL;
    if (len < 13 || !gw_gif_sniff(data, len)) return mm_err_set(err, MM_FORMAT, "%s: not a GIF", label);
    struct gw_gif_src *s = calloc(1, sizeof *s);
    if (!s) return mm_err_set(err, MM_NOMEM, "%s: out of memory", label);
    s->data = data;
    s->len = len;
    s->label = label;
    s->width = le16(data + 6);
    s->height = le16(data + 8);
    s->transparency = -1;
    size_t pos = 13;
    const uint8_t *global = NULL;
    uint32_t n_global = 0;
    if (data[10] & 0x80) {
        n_global = 2u << (data[10] & 7);
        if (len - pos < (size_t)n_global * 3) goto truncated;
        if (palette_needed(data + pos, n_global)) global = data + pos;
        pos += (size_t)n_global * 3;
    }
    for (;;) {
        if (pos >= len || data[pos] == ';') {
            free(s);
            return mm_err_set(err, MM_FORMAT, "%s: GIF has no image", label);
        }
        uint8_t tag = data[pos++];
        if (tag == '!') {
            if (pos >= len) goto truncated;
            uint8_t ext = data[pos++];
            /* the graphic control extension's first sub-block carries the transparent index */
            if (ext == 0xF9 && pos < len && data[pos] >= 4 && len - pos > 4 && (data[pos + 1] & 1))
                s->transparency = data[pos + 4];
            if (skip_subblocks(s, &pos)) goto truncated;
        } else if (tag == ',') {
            if (len - pos < 10) goto truncated;
            s->fx = le16(data + pos);
            s->fy = le16(data + pos + 2);
            s->fw = le16(data + pos + 4);
            s->fh = le16(data + pos + 6);
            uint8_t flags = data[pos + 8];
            s->interlace = (flags & 0x40) != 0;
            pos += 9;
            const uint8_t *pal = global;
            uint32_t n_pal = global ? n_global : 0;
            if (flags & 0x80) {
                uint32_t n_local = 2u << (flags & 7);
                if (len - pos < (size_t)n_local * 3) goto truncated;
                pal = palette_needed(data + pos, n_local) ? data + pos : NULL;
                n_pal = pal ? n_local : 0;
                pos += (size_t)n_local * 3;
            }
            set_palette(s, pal, n_pal);
            if (pos >= len) goto truncated;
            s->lzw = pos;
            break;
        }
        /* anything else is skipped byte by byte, as PIL does */
    }
    /* PIL grows the image to hold a frame that reaches past the logical screen */
    if (s->fx + s->fw > s->width) s->width = s->fx + s->fw;
    if (s->fy + s->fh > s->height) s->height = s->fy + s->fh;
    *width = s->width;
    *height = s->height;
    *out = s;
    return MM_OK;
truncated:
    free(s);
    return mm_err_set(err, MM_FORMAT, "%s: truncated GIF", label);
}

/* The row of the frame that the i-th decoded row fills (interlaced frames come in four passes). */
static uint32_t frame_row(uint32_t i, uint32_t h, int interlace)
{
    if (!interlace) return i;
    static const uint32_t start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    for (int p = 0; p < 4; p++) {
        uint32_t n = h > start[p] ? (h - start[p] + step[p] - 1) / step[p] : 0;
        if (i < n) return start[p] + i * step[p];
        i -= n;
    }
    return h; /* past the frame */
}

struct lzw_in {
    const uint8_t *data;
    size_t len, pos;
    uint32_t block_left; /* bytes left in the current sub-block */
    int ended;           /* the 0-length sub-block was seen */
    uint32_t bitbuf, nbits;
};

/* Next `size`-bit code, or -1 when the data ends. */
static int lzw_code(struct lzw_in *in, uint32_t size)
{
    while (in->nbits < size) {
        if (in->block_left == 0) {
            if (in->ended || in->pos >= in->len) return -1;
            in->block_left = in->data[in->pos++];
            if (in->block_left == 0) {
                in->ended = 1;
                return -1;
            }
        }
        if (in->pos >= in->len) return -1;
        in->bitbuf |= (uint32_t)in->data[in->pos++] << in->nbits;
        in->nbits += 8;
        in->block_left--;
    }
    int code = (int)(in->bitbuf & ((1u << size) - 1));
    in->bitbuf >>= size;
    in->nbits -= size;
    return code;
}

/* Decode the first frame's LZW data into canvas (already filled with the background index). */
static int32_t lzw_decode(const struct gw_gif_src *s, uint8_t *canvas, struct mm_err *err)
{
    const uint32_t min_size = s->data[s->lzw];
    if (min_size < 1 || min_size > 11)
        return mm_err_set(err, MM_FORMAT, "%s: bad GIF: LZW code size %u", s->label, min_size);
    uint16_t *prefix = malloc(GIF_MAX_CODES * sizeof *prefix);
    uint8_t *suffix = malloc(GIF_MAX_CODES), *stack = malloc(GIF_MAX_CODES + 1);
    if (!prefix || !suffix || !stack) {
        free(prefix), free(suffix), free(stack);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory", s->label);
    }
    struct lzw_in in = {s->data, s->len, s->lzw + 1, 0, 0, 0, 0};
    const uint32_t clear = 1u << min_size, end = clear + 1;
    for (uint32_t i = 0; i < clear; i++) prefix[i] = 0, suffix[i] = (uint8_t)i;
    uint32_t size = min_size + 1, next = clear + 2;
    int prev = -1;
    uint8_t first = 0;
    const uint64_t total = (uint64_t)s->fw * s->fh;
    uint64_t done = 0;
    int32_t rc = MM_OK;
    while (done < total) {
        int code = lzw_code(&in, size);
        if (code < 0) {
            rc = mm_err_set(err, MM_FORMAT, "%s: truncated GIF (image data ends early)", s->label);
            break;
        }
        if ((uint32_t)code == clear) {
            size = min_size + 1;
            next = clear + 2;
            prev = -1;
            continue;
        }
        if ((uint32_t)code == end) { /* before the frame is complete: PIL calls the file truncated */
            rc = mm_err_set(err, MM_FORMAT, "%s: truncated GIF (image data ends early)", s->label);
            break;
        }
        uint32_t sp = 0, c = (uint32_t)code;
        if (prev < 0) {
            if (c >= clear) {
                rc = mm_err_set(err, MM_FORMAT, "%s: bad GIF: LZW code %u without a dictionary", s->label, c);
                break;
            }
            stack[sp++] = (uint8_t)c;
        } else {
            if (c > next || (c == next && next >= GIF_MAX_CODES)) {
                rc = mm_err_set(err, MM_FORMAT, "%s: bad GIF: LZW code %u out of range", s->label, c);
                break;
            }
            if (c == next) { /* the KwKwK case: the code being defined right now */
                stack[sp++] = first;
                c = (uint32_t)prev;
            }
            while (c >= clear) {
                stack[sp++] = suffix[c];
                c = prefix[c];
            }
            stack[sp++] = (uint8_t)c;
        }
        first = stack[sp - 1];
        if (prev >= 0 && next < GIF_MAX_CODES) {
            prefix[next] = (uint16_t)prev;
            suffix[next] = first;
            next++;
            if (next == (1u << size) && size < 12) size++;
        }
        prev = code;
        /* the string comes out reversed from the stack */
        while (sp > 0 && done < total) {
            uint32_t i = (uint32_t)(done / s->fw), x = (uint32_t)(done % s->fw);
            uint32_t y = frame_row(i, s->fh, s->interlace);
            if (y < s->fh)
                canvas[(size_t)(s->fy + y) * s->width + s->fx + x] = stack[--sp];
            else
                sp--;
            done++;
        }
    }
    free(prefix);
    free(suffix);
    free(stack);
    return rc;
}

int32_t gw_gif_decode(struct gw_gif_src *s, const struct gw_row_sink *sink, struct mm_err *err)
{
    const size_t npx = (size_t)s->width * s->height, stride = (size_t)s->width * 3;
    uint8_t *canvas = malloc(npx ? npx : 1);
    uint8_t *row = gw_aligned_alloc(stride + GW_ROW_SLACK);
    if (!canvas || !row) {
        free(canvas);
        gw_aligned_free(row);
        return mm_err_set(err, MM_NOMEM, "%s: out of memory for a %ux%u GIF", s->label, s->width, s->height);
    }
    memset(canvas, s->transparency >= 0 ? s->transparency : 0, npx);
    memset(row + stride, 0, GW_ROW_SLACK);
    int32_t rc = s->fw && s->fh ? lzw_decode(s, canvas, err) : MM_OK;
    if (!rc) rc = sink->begin(sink->ctx, s->width, s->height, err);
    for (uint32_t y = 0; y < s->height && !rc; y++) {
        const uint8_t *idx = canvas + (size_t)y * s->width;
        for (uint32_t x = 0; x < s->width; x++) memcpy(row + (size_t)x * 3, s->pal[idx[x]], 3);
        rc = sink->row(sink->ctx, row, err);
    }
    free(canvas);
    gw_aligned_free(row);
    return rc;
}

void gw_gif_close(struct gw_gif_src *s)
{
    free(s);
}
