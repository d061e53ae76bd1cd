/* Image decoding from memory to RGB8, in two steps so that sizes are checked before anything is decoded:
 * gw_image_open reads only the header (refusing what the limits forbid), gw_image_decode then decodes.
 *
 * Colour handling follows the reference (PIL `Image.open(...).convert("RGB")`): grey is replicated to RGB,
 * alpha is dropped (not composited), palettes are expanded (transparent indices keep their palette colour),
 * CMYK goes through PIL's formula (JPEG samples inverted first, Adobe polarity), no EXIF rotation is
 * applied; 16-bit samples keep their high byte (PIL's RGB;16B and LA;16B) except 16-bit grey, which PIL
 * opens as I;16 and clips at 255. Truncated or corrupt data is an error, as it is for PIL.
 *
 * Common PNGs (non-interlaced, 8/16-bit) are decoded directly (gw_png_decode.c: libdeflate + SIMD
 * unfiltering), bit-identical to libpng's pixels, twice as fast.
 * JPEG (baseline/progressive YCbCr, grey, RGB, CMYK/YCCK) is decoded with libjpeg-turbo directly, with the
 * library settings PIL uses (ISLOW IDCT, fancy upsampling), so pixels are bit-identical to PIL's. Only when
 * the caller asks (allow_reduce) is a JPEG decoded with DCT-domain downscaling (1/2, 1/4 or 1/8), never
 * below gw_image_decode's min size; see docs/design/preprocess.md for the accuracy this costs.
 * GIF (first frame, PIL's canvas and palette rules), BMP, PBM/PGM/PPM, ICO, TGA and PCX have decoders of
 * their own; YCbCr TIFFs go through libtiff's RGBA interface (as PIL reads them). Everything else (PNG
 * variants, WebP, other TIFFs) goes through libvips. */
#ifndef GW_IMAGE_DECODE_H
#define GW_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "gw_media.h"
#include "gw_media_simd.h"
#include "mm_status.h"

/** A decoded image: height rows of width RGB8 pixels, stride bytes apart. Free with gw_rgb_image_free. */
struct gw_rgb_image {
    uint8_t *data;
    uint32_t width, height;
    size_t stride;
};

void gw_rgb_image_free(struct gw_rgb_image *img);

struct gw_image_src;

/** Read the header of an encoded image. *out must be closed with gw_image_close. label names the item in
 * messages. The size it reports is the full (undecoded) size. */
int32_t gw_image_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim, const char *label,
                      struct gw_image_src **out, uint32_t *width, uint32_t *height, struct mm_err *err);

/** Where decoded rows go: begin() once with the decoded size, then row() for every row, top to bottom. A
 * row is width RGB8 pixels, readable for GW_ROW_SLACK bytes past its last pixel, valid during the call.
 * Returning non-zero from either stops decoding with that status (err set by the callee). */
struct gw_row_sink {
    void *ctx;
    int32_t (*begin)(void *ctx, uint32_t width, uint32_t height, struct mm_err *err);
    int32_t (*row)(void *ctx, const uint8_t *rgb, struct mm_err *err);
};

/** Decode, streaming rows into sink (no full-size image is kept). With allow_reduce, a JPEG may be decoded at
 * a reduced size no smaller than min_width x min_height (begin() says what is decoded); otherwise full size.
 */
int32_t gw_image_decode(struct gw_image_src *src, int allow_reduce, uint32_t min_width, uint32_t min_height,
                        const struct gw_row_sink *sink, struct mm_err *err);

/** Convenience for tests and tools: decode the whole image into one buffer (full size). */
int32_t gw_image_decode_full(struct gw_image_src *src, struct gw_rgb_image *out, struct mm_err *err);

void gw_image_close(struct gw_image_src *src);

/* The decoders behind gw_image_open (internal). */

/** PIL's CMYK -> RGB conversion of w pixels (4 samples each, `stride` bytes apart), samples inverted first
 * when `invert` (PIL's "CMYK;I" raw mode for JPEGs). */
void gw_cmyk_to_rgb(const uint8_t *cmyk, size_t stride, uint32_t w, int invert, uint8_t *rgb);

struct gw_jpeg_src;
int gw_jpeg_sniff(const uint8_t *data, size_t len);
/** Returns MM_OK, MM_UNSUPPORTED when the JPEG should go through libvips instead (CMYK, ...), or an error. */
int32_t gw_jpeg_open(const uint8_t *data, size_t len, const char *label, struct gw_jpeg_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_jpeg_decode(struct gw_jpeg_src *src, uint32_t scale_denom, const struct gw_row_sink *sink,
                       struct mm_err *err);
void gw_jpeg_close(struct gw_jpeg_src *src);

struct gw_png_src;
int gw_png_sniff(const uint8_t *data, size_t len);
/** MM_OK, MM_UNSUPPORTED when libvips should decode it (interlaced, < 8 bits, huge), or an error. */
int32_t gw_png_open(const uint8_t *data, size_t len, const char *label, struct gw_png_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_png_decode(struct gw_png_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_png_close(struct gw_png_src *src);

struct gw_gif_src;
int gw_gif_sniff(const uint8_t *data, size_t len);
int32_t gw_gif_open(const uint8_t *data, size_t len, const char *label, struct gw_gif_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_gif_decode(struct gw_gif_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_gif_close(struct gw_gif_src *src);

struct gw_bmp_src;
int gw_bmp_sniff(const uint8_t *data, size_t len);
int32_t gw_bmp_open(const uint8_t *data, size_t len, const char *label, struct gw_bmp_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_bmp_decode(struct gw_bmp_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_bmp_close(struct gw_bmp_src *src);
/** Where the pixel data starts in the buffer given to gw_bmp_open (after headers and palette). */
size_t gw_bmp_pixel_offset(const struct gw_bmp_src *src);

struct gw_ico_src;
int gw_ico_sniff(const uint8_t *data, size_t len);
/** Windows icons: the entry PIL picks (largest, then deepest, then last), a PNG or a DIB (decoded as BMP).
 * The PNG of an entry is opened through gw_image_open's PNG path only: never another container. */
int32_t gw_ico_open(const uint8_t *data, size_t len, const struct gw_media_limits *lim, const char *label,
                    struct gw_ico_src **out, uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_ico_decode(struct gw_ico_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_ico_close(struct gw_ico_src *src);

struct gw_pnm_src;
int gw_pnm_sniff(const uint8_t *data, size_t len);
/** PBM/PGM/PPM, binary and plain (P1-P6), with PIL's header, scaling and truncation rules. */
int32_t gw_pnm_open(const uint8_t *data, size_t len, const char *label, struct gw_pnm_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_pnm_decode(struct gw_pnm_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_pnm_close(struct gw_pnm_src *src);

struct gw_tga_src;
/** A header PIL's TGA plugin would accept (TGA has no signature: try it last). */
int gw_tga_sniff(const uint8_t *data, size_t len);
int32_t gw_tga_open(const uint8_t *data, size_t len, const char *label, struct gw_tga_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_tga_decode(struct gw_tga_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_tga_close(struct gw_tga_src *src);

struct gw_pcx_src;
int gw_pcx_sniff(const uint8_t *data, size_t len);
/** MM_NOT_FOUND when PIL would try its other formats (a bad bounding box), else MM_OK or an error. */
int32_t gw_pcx_open(const uint8_t *data, size_t len, const char *label, struct gw_pcx_src **out,
                    uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_pcx_decode(struct gw_pcx_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_pcx_close(struct gw_pcx_src *src);

struct gw_tiff_src;
int gw_tiff_sniff(const uint8_t *data, size_t len);
/** MM_OK for the TIFFs read through libtiff's RGBA interface (YCbCr, not JPEG-compressed), MM_UNSUPPORTED
 * for the rest (libvips), or an error. */
int32_t gw_tiff_open(const uint8_t *data, size_t len, const char *label, struct gw_tiff_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_tiff_decode(struct gw_tiff_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_tiff_close(struct gw_tiff_src *src);

struct gw_vips_src;
int32_t gw_vips_open(const uint8_t *data, size_t len, const char *label, struct gw_vips_src **out,
                     uint32_t *width, uint32_t *height, struct mm_err *err);
int32_t gw_vips_decode(struct gw_vips_src *src, const struct gw_row_sink *sink, struct mm_err *err);
void gw_vips_close(struct gw_vips_src *src);

#endif
