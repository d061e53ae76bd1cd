#!/usr/bin/python3
"""Image matrix: many encodings, colour types and sizes through mmgw-preprocess, both plugins, each compared
with the reference (media_ref.py: Pillow decode + convert("RGB"), smart_resize, bicubic, normalize).

Checks per image and plugin: the grid exactly; normalized values mean |d| <= 0.01, p99 <= 0.05 and >= 99 % of
values exactly equal (we resize like torchvision, which Pillow's resize matches in all but a few roundings),
100 % when the plugin keeps the size (most format cases are 336 x 252 for that): the decoded pixels are then
compared bit for bit. Sizes the reference refuses (aspect ratio over 200) and broken files of the formats
with decoders of our own must fail fast with one line on stderr. All inputs are made here (Pillow, FFmpeg,
a few written byte by byte).

Run by hand: MMGW_BUILD=build /usr/bin/python3 tests/unit/media/test_matrix_images.py [FILE NAME...]
"""
import io
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_ref as ref  # noqa: E402

BIN = ref.cli_path()
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


def base_rgb(w, h, seed=1):
    """A photo-like image: smooth random colour field plus sharp edges and a fine pattern."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (max(2, h // 16), max(2, w // 16), 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(small).resize((w, h), Image.BILINEAR)).astype(np.int32)
    yy, xx = np.mgrid[0:h, 0:w]
    img[(xx // 7 + yy // 5) % 9 == 0] = [250, 20, 30]
    img[(xx * 3 + yy * 2) % 41 < 2] = [10, 10, 10]
    img += rng.integers(-6, 7, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# ---- encoders for what Pillow/FFmpeg cannot write ----

def png_chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def png_interlaced_rgb(a):
    """An Adam7-interlaced 8-bit RGB PNG (filter 0 on every row)."""
    h, w = a.shape[:2]
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    raw = b""
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        for row in sub:
            raw += b"\0" + row.tobytes()
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)) +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def bmp_rle8(idx, pal):
    """An 8-bit RLE-compressed BMP (bottom-up) of palette indices idx [h, w] and pal [n, 3]."""
    h, w = idx.shape
    data = bytearray()
    for y in range(h - 1, -1, -1):
        row = idx[y]
        x = 0
        while x < w:
            run = 1
            while x + run < w and run < 255 and row[x + run] == row[x]:
                run += 1
            if run >= 3 or w - x < 3:
                data += bytes([run, row[x]])
                x += run
            else:  # an absolute run of literal pixels (at least 3), padded to a 16-bit boundary
                n = min(255, w - x)
                j = x + 3
                while j < x + n and not (j + 2 < w and row[j] == row[j + 1] == row[j + 2]):
                    j += 1
                n = j - x
                data += bytes([0, n]) + bytes(row[x:x + n]) + (b"\0" if n % 2 else b"")
                x += n
        data += b"\0\0"
    data += b"\0\1"
    npal = len(pal)
    palb = b"".join(bytes([int(b), int(g), int(r), 0]) for r, g, b in pal)
    off = 14 + 40 + len(palb)
    hdr = b"BM" + struct.pack("<IHHI", off + len(data), 0, 0, off)
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 8, 1, len(data), 2835, 2835, npal, 0)
    return hdr + info + palb + bytes(data)


def bmp_bitfields(a, bpp, masks, top_down=False):
    """A BI_BITFIELDS BMP (16 or 32 bits) from RGB(A) pixels with the given (r, g, b, a) masks."""
    h, w = a.shape[:2]
    out = bytearray()
    rows = range(h) if top_down else range(h - 1, -1, -1)
    for y in rows:
        line = bytearray()
        for x in range(w):
            px = 0
            for c, m in enumerate(masks):
                if not m:
                    continue
                shift = (m & -m).bit_length() - 1
                bits = bin(m).count("1")
                v = int(a[y, x, c]) if c < a.shape[2] else 255
                px |= ((v * ((1 << bits) - 1) + 127) // 255) << shift
            line += px.to_bytes(bpp // 8, "little")
        line += b"\0" * ((4 - len(line) % 4) % 4)
        out += line
    # a 40-byte header with three masks after it, or a V4 (108-byte) header holding four
    hsize = 108 if len(masks) == 4 else 40
    info = struct.pack("<IiiHHIIiiII", hsize, w, -h if top_down else h, 1, bpp, 3, len(out), 2835, 2835, 0, 0)
    info += b"".join(struct.pack("<I", m) for m in masks)
    if hsize == 108:
        info += b"BGRs" + b"\0" * 48
    off = 14 + len(info)
    hdr = b"BM" + struct.pack("<IHHI", off + len(out), 0, 0, off)
    return hdr + info + bytes(out)


def gif_literal(w, h, idx, palette, transparent=None):
    """A GIF written byte by byte: idx [h, w] indices coded as LZW literals (a clear code every 250 so the
    code size stays 9 bits), the given global palette (any length up to 256 entries)."""
    bits = max(1, (len(palette) - 1).bit_length())
    pal = bytes(np.array(palette, np.uint8).ravel()) + b"\0" * (3 * (1 << bits) - 3 * len(palette))
    out = b"GIF89a" + struct.pack("<HHBBB", w, h, 0x80 | (bits - 1), 0, 0) + pal
    if transparent is not None:
        out += b"\x21\xf9\x04\x01\0\0" + bytes([transparent]) + b"\0"
    out += b"\x2c" + struct.pack("<HHHHB", 0, 0, w, h, 0)
    codes, flat = [256], idx.ravel().tolist()
    for i, v in enumerate(flat):
        if i and i % 250 == 0:
            codes.append(256)
        codes.append(int(v))
    codes.append(257)
    acc = nbits = 0
    data = bytearray()
    for c in codes:
        acc |= c << nbits
        nbits += 9
        while nbits >= 8:
            data.append(acc & 255)
            acc >>= 8
            nbits -= 8
    if nbits:
        data.append(acc & 255)
    out += b"\x08"
    for i in range(0, len(data), 255):
        out += bytes([len(data[i:i + 255])]) + bytes(data[i:i + 255])
    return out + b"\0;"


def png_short_palette(w, h, idx, palette):
    """An 8-bit palette PNG whose PLTE has fewer entries than the indices used (PIL: the grey ramp past it)."""
    raw = b"".join(b"\0" + bytes(r.astype(np.uint8)) for r in idx)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0)) +
            png_chunk(b"PLTE", bytes(np.array(palette, np.uint8).ravel())) + png_chunk(b"IDAT", zlib.compress(raw)) +
            png_chunk(b"IEND", b""))


def gif_with_offset(tmp):
    """A GIF whose only frame is smaller than the screen, placed at an offset, with a transparent index."""
    a = base_rgb(90, 60, 5)
    im = Image.fromarray(a).quantize(64)
    buf = io.BytesIO()
    im.save(buf, "GIF", transparency=7)
    g = bytearray(buf.getvalue())
    # logical screen 130 x 100; the image descriptor (after header, screen, palette, extensions) moves to 20,15
    lsd_w, lsd_h = 130, 100
    g[6:10] = struct.pack("<HH", lsd_w, lsd_h)
    pos = g.index(b"\x2c", 13 + 3 * (2 << (g[10] & 7)))
    g[pos + 1:pos + 5] = struct.pack("<HH", 20, 15)
    return bytes(g)


def make_images(tmp):
    """-> list of (file name, note). Every file is written into tmp."""
    cases = []

    def add(name, note=""):
        cases.append((name, note))

    # 336 x 252 = 12 x 9 patches of 28: no resize for either plugin, so decoding is compared bit for bit
    a = base_rgb(336, 252)
    im = Image.fromarray(a)
    # PNG colour types and depths
    im.save(f"{tmp}/rgb.png")
    im.convert("L").save(f"{tmp}/grey.png")
    alpha = (np.indices(a.shape[:2]).sum(0) % 256).astype(np.uint8)
    Image.merge("LA", (im.convert("L"), Image.fromarray(alpha))).save(f"{tmp}/la.png")
    rgba = np.dstack([a, alpha])
    rgba[:40, :40, 3] = 0
    Image.fromarray(rgba, "RGBA").save(f"{tmp}/rgba.png")
    im.quantize(200).save(f"{tmp}/pal.png")
    im.quantize(200).save(f"{tmp}/pal_trns.png", transparency=3)
    q = im.quantize(100)
    q.save(f"{tmp}/pal_alpha.png", transparency=bytes(range(0, 200, 2)))
    im.quantize(16).save(f"{tmp}/pal4.png", bits=4)
    im.quantize(4).save(f"{tmp}/pal2.png", bits=2)
    im.convert("1").save(f"{tmp}/bilevel.png")
    im.save(f"{tmp}/rgb_trns.png", transparency=(a[0, 0, 0].item(), a[0, 0, 1].item(), a[0, 0, 2].item()))
    im.convert("L").save(f"{tmp}/grey_trns.png", transparency=int(a[0, 0, 0]))
    open(f"{tmp}/interlaced.png", "wb").write(png_interlaced_rgb(a))
    for n in ("rgb.png", "grey.png", "la.png", "rgba.png", "pal.png", "pal_trns.png", "pal_alpha.png", "pal4.png",
              "pal2.png", "bilevel.png", "rgb_trns.png", "grey_trns.png", "interlaced.png"):
        add(n)
    for pf, name in (("rgb48be", "rgb16.png"), ("gray16be", "grey16.png"), ("rgba64be", "rgba16.png"),
                     ("ya16be", "la16.png")):
        ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", pf, f"{tmp}/{name}")
        add(name)
    # 16-bit grey with values below 256 too (Pillow clips 16-bit grey at 255 when converting to RGB)
    g16 = (np.indices((196, 308)).sum(0) * 3 % 700).astype(np.uint16)
    Image.fromarray(g16).save(f"{tmp}/grey16_low.png")
    add("grey16_low.png")

    # JPEG
    im.save(f"{tmp}/q90.jpg", quality=90)
    im.save(f"{tmp}/s444.jpg", quality=90, subsampling=0)
    im.save(f"{tmp}/s422.jpg", quality=90, subsampling=1)
    im.save(f"{tmp}/prog.jpg", quality=85, progressive=True)
    im.convert("L").save(f"{tmp}/grey.jpg", quality=90)
    im.convert("CMYK").save(f"{tmp}/cmyk.jpg", quality=90)
    Image.fromarray(255 - np.asarray(im.convert("CMYK")), "CMYK").save(f"{tmp}/cmyk2.jpg", quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: the reference applies none
    im.save(f"{tmp}/exif6.jpg", quality=90, exif=exif.tobytes())
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=641x479", "-frames:v", "1", "-pix_fmt", "yuvj420p", "-q:v", "3",
               f"{tmp}/ffmpeg_odd.jpg")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=392x280", "-frames:v", "1", "-pix_fmt", "yuvj444p", "-q:v", "2",
               f"{tmp}/ffmpeg444.jpg")
    for n in ("q90.jpg", "s444.jpg", "s422.jpg", "prog.jpg", "grey.jpg", "cmyk.jpg", "cmyk2.jpg", "exif6.jpg",
              "ffmpeg_odd.jpg", "ffmpeg444.jpg"):
        add(n)

    # WebP
    im.save(f"{tmp}/lossy.webp", quality=80)
    im.save(f"{tmp}/lossless.webp", lossless=True)
    Image.fromarray(rgba, "RGBA").save(f"{tmp}/lossy_alpha.webp", quality=80)
    Image.fromarray(rgba, "RGBA").save(f"{tmp}/lossless_alpha.webp", lossless=True)
    wframes = [Image.fromarray(rgba, "RGBA"), Image.fromarray(255 - a).convert("RGBA")]
    wframes[0].save(f"{tmp}/anim.webp", save_all=True, append_images=wframes[1:], duration=100, quality=80)
    for n in ("lossy.webp", "lossless.webp", "lossy_alpha.webp", "lossless_alpha.webp", "anim.webp"):
        add(n)

    # GIF: palette, transparency (PIL gives the palette colour of the transparent index), animation (first
    # frame), greyscale palette, interlacing, a frame smaller than the screen
    im.quantize(128).save(f"{tmp}/plain.gif")
    im.quantize(128).save(f"{tmp}/trns.gif", transparency=5)
    frames = [im.quantize(64), Image.fromarray(255 - a).quantize(64)]
    frames[0].save(f"{tmp}/anim.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    im.convert("L").save(f"{tmp}/greypal.gif")
    im.quantize(32).save(f"{tmp}/interlace.gif", interlace=True)
    im.quantize(32).save(f"{tmp}/nointerlace.gif", interlace=False)
    open(f"{tmp}/offset.gif", "wb").write(gif_with_offset(tmp))
    idx = (np.indices((84, 112)).sum(0) * 7 % 256).astype(np.uint8)
    short_pal = [(200, 10, 10), (10, 200, 10), (10, 10, 200), (90, 90, 0), (1, 2, 3)]
    open(f"{tmp}/shortpal.gif", "wb").write(gif_literal(112, 84, idx, short_pal, transparent=2))
    open(f"{tmp}/shortpal.png", "wb").write(png_short_palette(112, 84, idx, short_pal))
    add("shortpal.png")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=420x252", "-frames:v", "1", f"{tmp}/ffmpeg.gif")
    for n in ("plain.gif", "trns.gif", "anim.gif", "greypal.gif", "interlace.gif", "nointerlace.gif",
              "offset.gif", "shortpal.gif", "ffmpeg.gif"):
        add(n)

    # TIFF
    im.save(f"{tmp}/raw.tiff")
    im.save(f"{tmp}/lzw.tiff", compression="tiff_lzw")
    im.save(f"{tmp}/deflate.tiff", compression="tiff_adobe_deflate")
    im.save(f"{tmp}/jpeg.tiff", compression="jpeg")
    im.convert("L").save(f"{tmp}/grey.tiff")
    im.convert("CMYK").save(f"{tmp}/cmyk.tiff")
    Image.fromarray(rgba, "RGBA").save(f"{tmp}/rgba.tiff")
    im.quantize(50).save(f"{tmp}/pal.tiff")
    Image.fromarray(g16).save(f"{tmp}/grey16.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "rgb48le", f"{tmp}/rgb16.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=322x242", "-frames:v", "1", "-pix_fmt", "yuv420p", f"{tmp}/ycbcr420.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "yuv420p", f"{tmp}/ycbcr420e.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=322x242", "-frames:v", "1", "-pix_fmt", "yuv422p", f"{tmp}/ycbcr422.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "yuv420p", "-compression_algo",
               "deflate", f"{tmp}/ycbcr420z.tiff")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "yuv444p", f"{tmp}/ycbcr444.tiff")
    for n in ("raw.tiff", "lzw.tiff", "deflate.tiff", "jpeg.tiff", "grey.tiff", "cmyk.tiff", "rgba.tiff",
              "pal.tiff", "grey16.tiff", "rgb16.tiff", "ycbcr420.tiff", "ycbcr420e.tiff", "ycbcr420z.tiff",
              "ycbcr422.tiff", "ycbcr444.tiff"):
        add(n)

    # BMP
    im.save(f"{tmp}/rgb.bmp")
    im.quantize(200).save(f"{tmp}/pal8.bmp")
    im.convert("1").save(f"{tmp}/bilevel.bmp")
    im.convert("L").save(f"{tmp}/grey.bmp")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "bgra", f"{tmp}/bgra.bmp")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "rgb555le", f"{tmp}/rgb555.bmp")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "rgb565le", f"{tmp}/rgb565.bmp")
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=308x224", "-frames:v", "1", "-pix_fmt", "rgb4_byte", f"{tmp}/rgb4.bmp")
    q = im.quantize(60)
    open(f"{tmp}/rle8.bmp", "wb").write(bmp_rle8(np.asarray(q), np.array(q.getpalette()[:180]).reshape(60, 3)))
    small = base_rgb(112, 84, 9)
    open(f"{tmp}/bf32.bmp", "wb").write(bmp_bitfields(small, 32, (0xFF0000, 0xFF00, 0xFF)))
    open(f"{tmp}/bf32a.bmp", "wb").write(bmp_bitfields(np.dstack([small, small[..., :1]]), 32,
                                                       (0xFF0000, 0xFF00, 0xFF, 0xFF000000), top_down=True))
    open(f"{tmp}/bf565.bmp", "wb").write(bmp_bitfields(small, 16, (0xF800, 0x7E0, 0x1F)))
    for n in ("rgb.bmp", "pal8.bmp", "bilevel.bmp", "grey.bmp", "bgra.bmp", "rgb555.bmp", "rgb565.bmp", "rgb4.bmp",
              "rle8.bmp", "bf32.bmp", "bf32a.bmp", "bf565.bmp"):
        add(n)

    # sizes: tiny (grown to the minimum), odd, thin strips near the aspect-ratio limit, up- and downscaling
    for w, h in ((10, 10), (1, 1), (27, 29), (57, 31), (199, 1), (2, 399), (1, 200), (3000, 15), (1900, 1300),
                 (4000, 3000), (1000, 997), (17, 2300)):
        Image.fromarray(base_rgb(w, h, w * 7 + h)).save(f"{tmp}/size_{w}x{h}.png")
        add(f"size_{w}x{h}.png")
    Image.fromarray(base_rgb(2600, 1700, 3)).save(f"{tmp}/big.jpg", quality=92)
    add("big.jpg")
    # refused by the reference (aspect ratio over 200)
    for w, h in ((402, 2), (1, 201), (3000, 14)):
        Image.fromarray(base_rgb(w, h, 3)).save(f"{tmp}/size_{w}x{h}.png")
        add(f"size_{w}x{h}.png", "refused")
    return cases


def make_bad(tmp):
    """Broken files of the formats with decoders of our own: each must fail fast with one line."""
    a = base_rgb(112, 84, 4)
    im = Image.fromarray(a)
    bad = []

    def cut(src, frac, name):
        b = open(f"{tmp}/{src}", "rb").read()
        open(f"{tmp}/{name}", "wb").write(b[:int(len(b) * frac)])
        bad.append(name)

    im.quantize(64).save(f"{tmp}/b_ok.gif")
    im.save(f"{tmp}/b_ok.bmp")
    q = im.quantize(30)
    open(f"{tmp}/b_rle.bmp", "wb").write(bmp_rle8(np.asarray(q), np.array(q.getpalette()[:90]).reshape(30, 3)))
    ref.ffmpeg("-f", "lavfi", "-i", "testsrc2=size=112x84", "-frames:v", "1", "-pix_fmt", "yuv420p", f"{tmp}/b_ok.tiff")
    im.convert("CMYK").save(f"{tmp}/b_cmyk.jpg")
    for src in ("b_ok.gif", "b_ok.bmp", "b_rle.bmp", "b_ok.tiff", "b_cmyk.jpg"):
        cut(src, 0.6, "trunc_" + src)
    # a GIF whose LZW data ends (end code) after a third of the pixels
    idx = (np.indices((30, 40)).sum(0) % 5).astype(np.uint8)
    g = bytearray(gif_literal(40, 30, idx[:10], [(1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12), (13, 14, 15)]))
    p = g.index(b"\x2c")
    g[p + 7:p + 9] = struct.pack("<H", 30)
    open(f"{tmp}/early_eoi.gif", "wb").write(bytes(g))
    bad.append("early_eoi.gif")
    # an RLE8 BMP whose bitmap ends (end of bitmap) after a third of the rows
    r = bytearray(bmp_rle8(idx[:10], np.array([(i, i, i) for i in range(5)])))
    r[22:26] = struct.pack("<i", 30)
    open(f"{tmp}/early_eob.bmp", "wb").write(bytes(r))
    bad.append("early_eob.bmp")
    # headers claiming far more than the data holds
    h = bytearray(open(f"{tmp}/b_ok.bmp", "rb").read())
    h[18:26] = struct.pack("<ii", 60000, 60000)
    open(f"{tmp}/huge.bmp", "wb").write(bytes(h))
    g = bytearray(open(f"{tmp}/b_ok.gif", "rb").read())
    g[6:10] = struct.pack("<HH", 65535, 65535)
    open(f"{tmp}/huge.gif", "wb").write(bytes(g))
    bad += ["huge.bmp", "huge.gif"]
    return bad


def run_cli(plugin, files, out):
    args = [BIN, "--plugin", plugin, "--out", out, "--quiet"]
    for f in files:
        args += ["--image", f]
    return subprocess.run(args, capture_output=True, text=True, timeout=120)


def main():
    if not os.access(BIN, os.X_OK):
        print(f"SKIP: {BIN} not built")
        return 77
    if not ref.have_tools():
        print("SKIP: the ffmpeg/ffprobe CLIs are needed to make test media")
        return 77
    only = sys.argv[1:]  # optional: names to run
    with tempfile.TemporaryDirectory() as tmp:
        cases = make_images(tmp)
        if only:
            cases = [c for c in cases if c[0] in only]
        refs = {}
        for name, note in cases:
            try:
                refs[name] = ref.pil_rgb(f"{tmp}/{name}")
            except Exception as e:  # noqa: BLE001 - Pillow refusing a file is a result to report
                refs[name] = e
        for plugin in ("m3", "qwen2vl"):
            print(f"{plugin}:")
            ok = [c for c in cases if c[1] != "refused" and not isinstance(refs[c[0]], Exception)]
            # one run for all accepted images (fast); one run per image when that fails, to name the culprit
            p = run_cli(plugin, [f"{tmp}/{n}" for n, _ in ok], f"{tmp}/all.st")
            results = {}
            if p.returncode == 0:
                o = ref.load_st(f"{tmp}/all.st")
                row = 0
                for i, (n, _) in enumerate(ok):
                    g = tuple(int(v) for v in o["image_grid_thw"][i])
                    rows = g[0] * g[1] * g[2]
                    results[n] = (g, o["pixel_values"][row:row + rows])
                    row += rows
            else:
                for n, _ in ok:
                    q = run_cli(plugin, [f"{tmp}/{n}"], f"{tmp}/one.st")
                    if q.returncode:
                        results[n] = q.stderr.strip()
                    else:
                        o = ref.load_st(f"{tmp}/one.st")
                        results[n] = (tuple(int(v) for v in o["image_grid_thw"][0]), o["pixel_values"])
            for name, note in cases:
                r = refs[name]
                if isinstance(r, Exception):
                    print(f"  {name:24s} Pillow refuses it ({r}); not compared")
                    continue
                want = ref.image_reference(r, plugin)
                if note == "refused" or want is None:
                    q = run_cli(plugin, [f"{tmp}/{name}"], f"{tmp}/bad.st")
                    lines = q.stderr.strip().splitlines()
                    print(f"  {name:24s} refused: {q.stderr.strip()}")
                    check(q.returncode == 1 and len(lines) == 1, f"{plugin} {name}: expected a refusal, got "
                          f"exit {q.returncode} {q.stderr!r}")
                    continue
                got = results.get(name)
                if isinstance(got, str):
                    check(False, f"{plugin} {name}: failed: {got}")
                    continue
                grid, pv = got
                rp, rgrid = want
                check(grid == rgrid, f"{plugin} {name}: grid {grid} vs reference {rgrid}")
                if grid != rgrid:
                    continue
                mean, p99, exact = ref.compare(pv, rp)
                print(f"  {name:24s} {str(r.shape[1::-1]):12s} grid {str(grid):14s} mean {mean:.5f} p99 {p99:.5f} "
                      f"exact {100 * exact:6.2f}%")
                check(mean <= 0.01 and p99 <= 0.05, f"{plugin} {name}: mean {mean:.4f} p99 {p99:.4f}")
                # no resize (a size the plugin keeps): the decoded pixels themselves are compared, so all of them
                same = (grid[1] * 14, grid[2] * 14) == r.shape[:2]
                need = 1.0 if same else 0.99
                check(exact >= need, f"{plugin} {name}: only {100 * exact:.2f}% exact")
        print("bad inputs:")
        for name in make_bad(tmp):
            t0 = time.monotonic()
            q = run_cli("m3", [f"{tmp}/{name}"], f"{tmp}/bad.st")
            dt = time.monotonic() - t0
            lines = q.stderr.strip().splitlines()
            print(f"  {name:22s} exit {q.returncode} {dt:.2f}s {q.stderr.strip()}")
            check(q.returncode == 1 and len(lines) == 1, f"{name}: exit {q.returncode}, stderr {q.stderr!r}")
            check(dt < 2.0, f"{name}: took {dt:.2f} s")
    if failures:
        print(f"FAILED: {len(failures)} checks")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
