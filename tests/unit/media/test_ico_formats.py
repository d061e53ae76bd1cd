#!/usr/bin/python3
"""Windows icons (.ico) against Pillow, the reference's decoder: Image.open(...).convert("RGB").

Icons are assembled here from their parts (directory, DIB or PNG entries, AND masks): 1/4/8/24/32-bit DIBs,
PNG entries, several entries (PIL opens the largest, then the deepest, then the last), 0 meaning 256, and
broken ones (entry past the end, mask cut short, truncated pixels, empty directory); plus seeded random
mutations. Our decoder (media_decode_dump, before any resize) and Pillow must agree: both refuse, or the same
pixels bit for bit. Two icons then go through mmgw-preprocess against media_ref's reference pipeline.

Usage: test_ico_formats.py MEDIA_DECODE_DUMP
"""
import io
import os
import struct
import sys
import tempfile
import warnings

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_pnm_formats import compare, field, finish, mutate, ours, pipeline_check, preprocess_cli  # noqa: E402


def picture(w, h, mode, seed):
    a = field(w, h, 3, 255, seed).astype(np.uint8)
    im = Image.fromarray(a)
    if mode == "RGBA":
        alpha = field(w, h, 1, 255, seed + 1).astype(np.uint8)[:, :, 0]
        im.putalpha(Image.fromarray(alpha))
        return im
    if mode == "P":
        return im.quantize(200)
    if mode == "P16":
        return im.quantize(16)
    return im.convert(mode)


def dib(im, bits=None):
    """A DIB entry: Pillow's BMP without its file header, height doubled, followed by an AND mask."""
    buf = io.BytesIO()
    im.save(buf, format="BMP")
    b = bytearray(buf.getvalue()[14:])
    w, h = im.size
    struct.pack_into("<i", b, 8, 2 * h)
    if bits == 4:  # Pillow writes no 4-bit BMPs: repack an 8-bit one with at most 16 colours
        hs = struct.unpack_from("<I", b, 0)[0]
        pal = b[hs:hs + 16 * 4]
        idx = np.asarray(im)
        rows = []
        for y in range(h - 1, -1, -1):
            r = idx[y]
            packed = bytes(((r[i] << 4) | (r[i + 1] if i + 1 < w else 0)) for i in range(0, w, 2))
            rows.append(packed + b"\0" * ((-len(packed)) % 4))
        hdr = bytearray(b[:hs])
        struct.pack_into("<H", hdr, 14, 4)
        struct.pack_into("<I", hdr, 32, 16)
        b = hdr + pal + b"".join(rows)
    mask_row = ((w + 31) // 32) * 4
    rng = np.random.default_rng(w * 31 + h)
    return bytes(b) + rng.integers(0, 256, mask_row * h, dtype=np.uint8).tobytes()


def png(im):
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def ico(entries, dims=None, bpps=None, sizes=None):
    """entries: list of bytes; directory width/height/bpp from dims/bpps (defaults: 16x16, 32)."""
    n = len(entries)
    off = 6 + 16 * n
    head = struct.pack("<HHH", 0, 1, n)
    body = b""
    for i, e in enumerate(entries):
        w, h = dims[i] if dims else (16, 16)
        bpp = bpps[i] if bpps else 32
        size = sizes[i] if sizes and sizes[i] is not None else len(e)
        head += struct.pack("<BBBBHHII", w % 256, h % 256, 0, 0, 1, bpp, size, off + len(body))
        body += e
    return head + body


def make_cases():
    c = []
    for mode, bits, bpp in (("1", None, 1), ("L", None, 8), ("P", None, 8), ("P16", 4, 4), ("RGB", None, 24),
                            ("RGBA", None, 32)):
        for w, h in ((16, 16), (13, 7), (48, 48), (33, 64)):
            im = picture(w, h, mode, w + h)
            c.append((f"dib_{mode}_{w}x{h}.ico", ico([dib(im, bits)], [(w, h)], [bpp])))
    big = picture(64, 64, "RGB", 3)
    c += [("png_64.ico", ico([png(big)], [(64, 64)], [32])),
          ("png_rgba_40.ico", ico([png(picture(40, 40, "RGBA", 4))], [(40, 40)], [32])),
          ("png_256_as_0.ico", ico([png(picture(256, 256, "RGB", 5))], [(0, 0)], [32])),
          ("png_size_differs.ico", ico([png(picture(30, 20, "RGB", 6))], [(16, 16)], [32])),
          # several entries: the largest wins, then the deepest, then the last
          ("multi_largest.ico", ico([dib(picture(16, 16, "RGB", 7)), png(big), dib(picture(32, 32, "P", 8))],
                                    [(16, 16), (64, 64), (32, 32)], [24, 32, 8])),
          ("multi_deepest.ico", ico([dib(picture(24, 24, "P", 9)), dib(picture(24, 24, "RGB", 10)),
                                     dib(picture(24, 24, "1", 11))], [(24, 24)] * 3, [8, 24, 1])),
          ("multi_last_of_equal.ico", ico([dib(picture(20, 20, "RGB", 12)), dib(picture(20, 20, "RGB", 13))],
                                          [(20, 20)] * 2, [24, 24])),
          ("multi_dir_lies.ico", ico([dib(picture(8, 8, "RGB", 14)), dib(picture(40, 40, "RGB", 15))],
                                     [(64, 64), (32, 32)], [24, 24])),
          ("bpp0_colors.ico", ico([dib(picture(16, 16, "P", 16))], [(16, 16)], [0]))]
    ok = ico([dib(picture(16, 16, "RGB", 17))], [(16, 16)], [24])
    c += [("mask_short.ico", ico([dib(picture(16, 16, "RGB", 17))[:-10]], [(16, 16)], [24])),
          ("size_too_big.ico", ico([dib(picture(16, 16, "RGB", 17))], [(16, 16)], [24], [10 ** 6])),
          ("size_too_small.ico", ico([dib(picture(16, 16, "RGB", 17))], [(16, 16)], [24], [4])),
          ("alpha_short.ico", ico([dib(picture(16, 16, "RGBA", 18))[:16 * 16 * 4 + 40 - 64 - 8]], [(16, 16)], [32])),
          ("bpp32_but_24.ico", ico([dib(picture(16, 16, "RGB", 19))], [(16, 16)], [32])),
          ("no_entries.ico", struct.pack("<HHH", 0, 1, 0)),
          ("dir_truncated.ico", ok[:20]),
          ("entry_past_end.ico", ok[:6] + ok[6:18] + struct.pack("<I", 10 ** 6) + ok[22:]),
          ("png_truncated.ico", ico([png(big)[:-30]], [(64, 64)], [32])),
          ("dib_truncated.ico", ok[:100])]
    return c


def edit_ico(rng, b):
    op = rng.randrange(4)
    if op == 0:  # the directory
        at = rng.randrange(4, min(len(b), 6 + 16))
        b[at] = rng.randrange(256)
    elif op == 1:  # the DIB header
        at = rng.randrange(22, min(len(b), 22 + 40))
        b[at] = rng.choice([0, 1, 2, 4, 8, 16, 24, 32, 0xFF, rng.randrange(256)])
    elif op == 2:
        del b[rng.randrange(22, len(b)):]
    else:
        at = rng.randrange(22, len(b))
        b[at] ^= 1 << rng.randrange(8)


def mutations(cases, n, seed):
    return mutate(cases, n, seed, lambda c: 200 < len(c[1]) < 12000 and not c[0].startswith("png"), edit_ico)


def main():
    warnings.filterwarnings("ignore")  # PIL warns when an entry's size is not the directory's
    tool = sys.argv[1]
    cases = make_cases()
    with tempfile.TemporaryDirectory() as tmp:
        n = compare(cases, ours(tool, tmp, cases), True)
        print(f"hand-made icons: {n}/{len(cases)} agree with Pillow")
        muts = mutations(cases, 400, 7)
        n = compare(muts, ours(tool, tmp, muts), False)
        print(f"mutations: {n}/{len(muts)} agree with Pillow")
        cli = preprocess_cli()
        if cli:
            for name, data in (("pipe_dib.ico", ico([dib(picture(56, 56, "RGB", 20))], [(56, 56)], [24])),
                               ("pipe_png.ico", ico([png(picture(200, 120, "RGB", 21))], [(200, 120)], [32]))):
                for plugin in ("m3", "qwen2vl"):
                    pipeline_check(cli, tmp, name, data, plugin)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
