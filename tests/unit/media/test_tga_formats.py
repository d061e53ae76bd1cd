#!/usr/bin/python3
"""Targa (.tga) against Pillow, the reference's decoder: Image.open(...).convert("RGB").

Files written by Pillow (1, L, LA, P, RGB, RGBA; raw and RLE; both orientations) and by hand (colour maps of
16/24/32-bit entries with a first index, 15-bit BGR, mirrored rows, RLE literals crossing rows, runs
crossing rows, truncated data, bad headers), plus seeded random mutations. Our decoder (media_decode_dump,
before any resize) and Pillow must agree: both refuse, or the same pixels bit for bit. One file then goes
through mmgw-preprocess against media_ref's reference pipeline.

Usage: test_tga_formats.py MEDIA_DECODE_DUMP
"""
import io
import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ico_formats import picture  # noqa: E402
from test_pnm_formats import compare, field, finish, mutate, ours, pipeline_check, preprocess_cli  # noqa: E402


def pil_tga(im, **kw):
    buf = io.BytesIO()
    im.save(buf, format="TGA", **kw)
    return buf.getvalue()


def header(w, h, itype, depth, flags=0, cmap=None, id_len=0):
    start, n, mdepth = cmap if cmap else (0, 0, 0)
    return struct.pack("<BBBHHBHHHHBB", id_len, 1 if cmap else 0, itype, start, n, mdepth, 0, 0, w, h, depth, flags)


def rle_rows(px, psize):
    """RLE with packets that ignore row ends: literals of up to 128 pixels over the flattened image."""
    out = b""
    flat = px.reshape(-1, psize)
    i = 0
    while i < len(flat):
        n = min(128, len(flat) - i)
        out += bytes([n - 1]) + flat[i:i + n].tobytes()
        i += n
    return out


def make_cases():
    c = []
    for mode in ("1", "L", "LA", "P", "RGB", "RGBA"):
        for w, h in ((17, 9), (64, 40)):
            im = picture(w, h, "RGBA" if mode in ("LA", "RGBA") else "RGB", w + h)
            im = im.convert(mode) if mode != "P" else im.convert("RGB").quantize(100)
            c.append((f"pil_{mode}_{w}x{h}.tga", pil_tga(im)))
            if mode != "1":
                c.append((f"pil_{mode}_{w}x{h}_rle.tga", pil_tga(im, compression="tga_rle")))
                c.append((f"pil_{mode}_{w}x{h}_bl.tga", pil_tga(im, orientation=1)))
    w, h = 23, 13
    idx = field(w, h, 1, 255, 3).astype(np.uint8)[:, :, 0]
    rgb = field(w, h, 3, 255, 4).astype(np.uint8)
    bgr = rgb[:, :, ::-1].copy()
    pal24 = np.random.default_rng(5).integers(0, 256, (256, 3), dtype=np.uint8)
    pal16 = np.random.default_rng(6).integers(0, 65536, 256, dtype=np.uint16)
    pal32 = np.random.default_rng(7).integers(0, 256, (256, 4), dtype=np.uint8)
    v15 = np.random.default_rng(8).integers(0, 65536, (h, w), dtype=np.uint16)
    c += [("cmap24.tga", header(w, h, 1, 8, 0x20, (0, 256, 24)) + pal24.tobytes() + idx.tobytes()),
          ("cmap24_start.tga", header(w, h, 1, 8, 0x20, (10, 200, 24)) + pal24[:200].tobytes() + idx.tobytes()),
          ("cmap16.tga", header(w, h, 1, 8, 0, (0, 256, 16)) + pal16.tobytes() + idx.tobytes()),
          ("cmap32.tga", header(w, h, 1, 8, 0, (0, 256, 32)) + pal32.tobytes() + idx.tobytes()),
          ("cmap_short.tga", header(w, h, 1, 8, 0, (0, 40, 24)) + pal24[:40].tobytes() + idx.tobytes()),
          ("cmap_too_big.tga", header(w, h, 1, 8, 0, (100, 200, 24)) + pal24[:200].tobytes() + idx.tobytes()),
          ("cmap_depth8.tga", header(w, h, 1, 8, 0, (0, 16, 8)) + idx.tobytes()),
          ("no_cmap_p.tga", header(w, h, 1, 8) + idx.tobytes()),
          ("grey_with_cmap.tga", header(w, h, 3, 8, 0, (0, 256, 24)) + pal24.tobytes() + idx.tobytes()),
          ("grey_alpha_with_cmap.tga", header(w, h, 3, 16, 0, (5, 100, 16)) + pal16[:100].tobytes() +
           np.dstack([idx, idx]).tobytes()),
          ("rgb_with_cmap.tga", header(w, h, 2, 24, 0, (0, 16, 24)) + pal24[:16].tobytes() + bgr.tobytes()),
          ("bits_with_cmap.tga", header(13, 3, 3, 1, 0, (0, 2, 24)) + pal24[:2].tobytes() + bytes([0xA5, 0x3C] * 3)),
          ("rgb_with_cmap8.tga", header(w, h, 2, 24, 0, (0, 16, 8)) + bgr.tobytes()),
          ("bgr15.tga", header(w, h, 2, 16) + v15.tobytes()),
          ("id_field.tga", header(w, h, 2, 24, 0x20, id_len=9) + b"an id str" + bgr.tobytes()),
          ("mirrored.tga", header(w, h, 2, 24, 0x10) + bgr.tobytes()),
          ("mirrored_top.tga", header(w, h, 2, 24, 0x30) + bgr.tobytes()),
          ("rle_literal_cross.tga", header(w, h, 10, 24, 0x20) + rle_rows(bgr, 3)),
          ("rle_run_cross.tga", header(4, 2, 10, 24) + bytes([0x85]) + b"\x01\x02\x03" + bytes([0x81]) + b"\x04\x05\x06"),
          ("rle_runs.tga", header(4, 2, 10, 24) + (bytes([0x83]) + b"\x01\x02\x03") * 2),
          ("rle_truncated.tga", header(w, h, 10, 24, 0x20) + rle_rows(bgr, 3)[:-5]),
          ("rle_1bit.tga", header(8, 1, 11, 1) + b"\x80\xff"),
          ("raw_truncated.tga", header(w, h, 2, 24) + bgr.tobytes()[:-1]),
          ("raw_1bit.tga", header(13, 3, 3, 1) + bytes([0xA5, 0x3C] * 3)),
          ("bad_cmaptype.tga", struct.pack("<BBB", 0, 2, 2) + header(w, h, 2, 24)[3:] + bgr.tobytes()),
          ("bad_depth.tga", header(w, h, 2, 12) + bgr.tobytes()),
          ("bad_type.tga", header(w, h, 4, 24) + bgr.tobytes()),
          ("grey_24bit.tga", header(w, h, 3, 24) + bgr.tobytes()),
          ("zero_width.tga", header(0, h, 2, 24) + bgr.tobytes()),
          ("extra_after.tga", header(w, h, 2, 32, 0x28) + np.dstack([bgr, idx]).tobytes() + b"TRUEVISION-XFILE.\0")]
    return c


def edit_tga(rng, b):
    op = rng.randrange(4)
    if op == 0:
        at = rng.randrange(0, 18)
        b[at] = rng.choice([0, 1, 2, 3, 8, 9, 10, 11, 16, 24, 32, 0x20, 0x30, rng.randrange(256)])
    elif op == 1:
        del b[rng.randrange(18, len(b)):]
    elif op == 2:
        at = rng.randrange(18, len(b))
        b[at] = rng.randrange(256)
    else:
        at = rng.randrange(18, len(b))
        b[at] |= 0x80


def mutations(cases, n, seed):
    return mutate(cases, n, seed, lambda c: 40 < len(c[1]) < 8000, edit_tga)


def main():
    tool = sys.argv[1]
    cases = make_cases()
    with tempfile.TemporaryDirectory() as tmp:
        n = compare(cases, ours(tool, tmp, cases), True)
        print(f"hand-made TGAs: {n}/{len(cases)} agree with Pillow")
        muts = mutations(cases, 500, 11)
        n = compare(muts, ours(tool, tmp, muts), False)
        print(f"mutations: {n}/{len(muts)} agree with Pillow")
        cli = preprocess_cli()
        if cli:
            pipeline_check(cli, tmp, "pipe.tga", pil_tga(picture(150, 90, "RGB", 30), compression="tga_rle"), "m3")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
