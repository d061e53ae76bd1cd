#!/usr/bin/python3
"""PCX against Pillow, the reference's decoder: Image.open(...).convert("RGB").

Files written by Pillow (1, L, P, RGB) and by hand (1-bit 2 and 4 planes with the header palette, grey
palette block vs colour palette block, odd widths with a header stride that differs, runs crossing rows,
runs overflowing a row, truncated data, bad bounding boxes and modes), plus seeded random mutations. Our
decoder (media_decode_dump, before any resize) and Pillow must agree: both refuse, or the same pixels bit
for bit. One file then goes through mmgw-preprocess against media_ref's reference pipeline.

Usage: test_pcx_formats.py MEDIA_DECODE_DUMP
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


def pil_pcx(im):
    buf = io.BytesIO()
    im.save(buf, format="PCX")
    return buf.getvalue()


def header(w, h, bits, planes, stride, version=5, pal16=b"", x0=0, y0=0):
    hd = struct.pack("<BBBBHHHHHH", 10, version, 1, bits, x0, y0, x0 + w - 1, y0 + h - 1, 72, 72)
    hd += (pal16 + bytes(48))[:48] + b"\0" + bytes([planes]) + struct.pack("<HH", stride, 1)
    return hd + bytes(128 - len(hd))


def rle(data, line):
    """PCX RLE of a byte string, runs of up to 63 that stop at each decoded line's end (line bytes)."""
    out = bytearray()
    for k in range(0, len(data), line):
        row = data[k:k + line]
        i = 0
        while i < len(row):
            j = i
            while j < len(row) and row[j] == row[i] and j - i < 63:
                j += 1
            n = j - i
            if n > 1 or row[i] >= 0xC0:
                out += bytes([0xC0 | n, row[i]])
            else:
                out.append(row[i])
            i = j
    return bytes(out)


def planar_bits(idx, planes, stride):
    h, w = idx.shape
    rows = b""
    for y in range(h):
        for p in range(planes):
            bits = np.packbits(((idx[y] >> p) & 1).astype(np.uint8))
            rows += bits.tobytes() + bytes(stride - len(bits))
    return rows


def make_cases():
    c = []
    for mode in ("1", "L", "P", "RGB"):
        for w, h in ((17, 9), (64, 40), (1, 1)):
            im = picture(w, h, "RGB", w * 3 + h)
            im = im.quantize(60) if mode == "P" else im.convert(mode)
            c.append((f"pil_{mode}_{w}x{h}.pcx", pil_pcx(im)))
    w, h = 21, 7
    idx16 = field(w, h, 1, 15, 3).astype(np.uint8)[:, :, 0]
    idx4 = idx16 & 3
    pal16 = np.random.default_rng(4).integers(0, 256, 48, dtype=np.uint8).tobytes()
    s1 = (w + 7) // 8
    grey = field(w, h, 1, 255, 5).astype(np.uint8)[:, :, 0]
    ramp = bytes([12]) + bytes(v for i in range(256) for v in (i, i, i))
    colour = bytes([12]) + np.random.default_rng(6).integers(0, 256, 768, dtype=np.uint8).tobytes()
    rgbp = field(w, h, 3, 255, 7).astype(np.uint8)
    odd = b"".join(bytes(rgbp[y, :, p]) + b"\0" for y in range(h) for p in range(3))
    flat_rgb = b"".join(bytes(rgbp[y, :, p]) for y in range(h) for p in range(3))
    c += [("planes4.pcx", header(w, h, 1, 4, s1, 2, pal16) + rle(planar_bits(idx16, 4, s1), 4 * s1)),
          ("planes2.pcx", header(w, h, 1, 2, s1, 3, pal16) + rle(planar_bits(idx4, 2, s1), 2 * s1)),
          ("planes4_padded.pcx", header(w, h, 1, 4, s1 + 1, 5, pal16) + rle(planar_bits(idx16, 4, s1 + 1), 4 * (s1 + 1))),
          ("grey_ramp_block.pcx", header(w, h, 8, 1, w + 1) + rle(b"".join(bytes(r) + b"\0" for r in grey), w + 1) + ramp),
          ("grey_colour_block.pcx", header(w, h, 8, 1, w + 1) + rle(b"".join(bytes(r) + b"\0" for r in grey), w + 1) +
           colour),
          ("grey_no_block.pcx", header(w, h, 8, 1, w + 1) + rle(b"".join(bytes(r) + b"\0" for r in grey), w + 1)),
          ("rgb_odd_padded.pcx", header(w, h, 8, 3, w + 1) + rle(odd, 3 * (w + 1))),
          ("rgb_stride_as_given.pcx", header(w, h, 8, 3, w) + rle(flat_rgb, 3 * w)),
          ("rgb_runs_cross_rows.pcx", header(4, 3, 8, 3, 4) + bytes([0xC0 | 36, 9])),
          ("run_overflows.pcx", header(4, 1, 8, 1, 4) + bytes([0xC0 | 6, 9])),
          ("bbox_offset.pcx", header(w, h, 8, 3, w + 1, x0=100, y0=7) + rle(odd, 3 * (w + 1))),
          ("truncated.pcx", (header(w, h, 8, 3, w + 1) + rle(odd, 3 * (w + 1)))[:-4]),
          ("bad_bbox.pcx", header(w, h, 8, 3, w + 1)[:8] + struct.pack("<HH", 0, 0) + header(w, h, 8, 3, w + 1)[12:]),
          ("bad_mode.pcx", header(w, h, 4, 1, w)),
          ("v2_8bit.pcx", header(w, h, 8, 1, w + 1, 2) + rle(bytes(w + 1) * h, w + 1)),
          ("short_header.pcx", header(w, h, 8, 1, w + 1)[:60])]
    return c


def edit_pcx(rng, b):
    op = rng.randrange(4)
    if op == 0:
        at = rng.choice([1, 3, 4, 5, 8, 9, 10, 65, 66, 67])
        b[at] = rng.choice([0, 1, 2, 3, 4, 5, 8, 0xFF, rng.randrange(256)])
    elif op == 1:
        del b[rng.randrange(128, len(b)):]
    elif op == 2:
        at = rng.randrange(128, len(b))
        b[at] = rng.randrange(256)
    else:
        at = rng.randrange(128, len(b))
        b[at] |= 0xC0


def mutations(cases, n, seed):
    return mutate(cases, n, seed, lambda c: 140 < len(c[1]) < 9000, edit_pcx)


def main():
    tool = sys.argv[1]
    cases = make_cases()
    with tempfile.TemporaryDirectory() as tmp:
        n = compare(cases, ours(tool, tmp, cases), True)
        print(f"hand-made PCX: {n}/{len(cases)} agree with Pillow")
        muts = mutations(cases, 500, 13)
        n = compare(muts, ours(tool, tmp, muts), False)
        print(f"mutations: {n}/{len(muts)} agree with Pillow")
        cli = preprocess_cli()
        if cli:
            pipeline_check(cli, tmp, "pipe.pcx", pil_pcx(picture(150, 90, "RGB", 31)), "qwen2vl")
    return finish()


if __name__ == "__main__":
    sys.exit(main())
