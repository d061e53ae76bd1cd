#!/usr/bin/python3
"""PBM/PGM/PPM (P1-P6) against Pillow, the reference's decoder: Image.open(...).convert("RGB").

Inputs are written byte by byte here (not with Pillow's writer): every kind, maxvals 1..65535 (PIL's scaling
formula and mode I clipping), plain files with comments in odd places, widths not a multiple of 8, and broken
files (truncated, sample over maxval, bad characters, bad maxval, long tokens). For each input our decoder
(media_decode_dump, before any resize) and Pillow must agree: both refuse, or both decode to the same pixels,
bit for bit. A seeded set of random header and body mutations is compared the same way. A few files then go
through mmgw-preprocess (both plugins) against media_ref's reference pipeline, and huge claimed sizes must be
refused fast.

Usage: test_pnm_formats.py MEDIA_DECODE_DUMP
"""
import io
import os
import random
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import media_ref as ref  # noqa: E402

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)
    return cond


def field(w, h, bands, maxval, seed):
    """Samples 0..maxval with the extremes present, smooth areas and noise."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, maxval + 1, (h, w, bands), dtype=np.int64)
    yy, xx = np.mgrid[0:h, 0:w]
    a[(xx + yy) % 5 == 0] = maxval
    a[(xx * 3 + yy) % 7 == 0] = 0
    if maxval > 2:
        a[(yy % 4) == 1] = (xx[(yy % 4) == 1, None] * maxval // max(1, w - 1))
    return a


def header(kind, w, h, maxval, sep=b"\n", comment=False):
    parts = [b"P%d" % kind, b"%d" % w, b"%d" % h] + ([] if kind in (1, 4) else [b"%d" % maxval])
    if comment:
        parts.insert(1, b"# made by test_pnm_formats\n")
    return sep.join(parts) + b"\n"


def binary(kind, a, maxval, **kw):
    h, w = a.shape[:2]
    if kind == 4:
        bits = np.packbits(a[:, :, 0].astype(np.uint8), axis=1)  # rows padded to whole bytes
        return header(4, w, h, 1, **kw) + bits.tobytes()
    dt = ">u2" if maxval > 255 else "u1"
    return header(kind, w, h, maxval, **kw) + a.astype(dt).tobytes()


def plain(kind, a, maxval, per_line=7, joined=False, comments=False):
    h, w = a.shape[:2]
    vals = a.reshape(-1)
    out = [header(kind, w, h, maxval)]
    if kind == 1 and joined:  # P1 needs no blanks between pixels
        out.append(b"".join(b"%d" % v for v in vals))
        return b"".join(out) + b"\n"
    line = []
    for i, v in enumerate(vals):
        line.append(b"%d" % v)
        if len(line) == per_line:
            out.append(b" ".join(line) + (b" # a comment\n" if comments and i % 3 == 0 else b"\n"))
            line = []
    if line:
        out.append(b" ".join(line) + b"\n")
    return b"".join(out)


def make_cases():
    cases = []
    for kind, bands in ((1, 1), (4, 1)):
        for w, h in ((1, 1), (7, 3), (8, 2), (17, 9), (64, 33)):
            a = field(w, h, bands, 1, w * 100 + h)
            if kind == 4:
                cases.append((f"p4_{w}x{h}.pbm", binary(4, a, 1)))
            else:
                cases.append((f"p1_{w}x{h}.pbm", plain(1, a, 1)))
                cases.append((f"p1_{w}x{h}_joined.pbm", plain(1, a, 1, joined=True)))
    for kind, bands in ((2, 1), (3, 3), (5, 1), (6, 3)):
        for maxval in (1, 7, 100, 255, 256, 1000, 4095, 40000, 65535):
            a = field(23, 11, bands, maxval, kind * 7 + maxval)
            name = f"p{kind}_max{maxval}"
            cases.append((name + ".pnm", plain(kind, a, maxval) if kind < 4 else binary(kind, a, maxval)))
    a = field(40, 30, 3, 255, 5)
    cases += [("p6_header_comment.ppm", binary(6, a, 255, comment=True)),
              ("p6_blank_separators.ppm", binary(6, a, 255, sep=b" \t\r\n ")),
              ("p3_comments.ppm", plain(3, a, 255, comments=True)),
              ("p6_crlf.ppm", b"P6\r\n40 30\r\n255\r" + a.astype("u1").tobytes()),
              ("p6_trailing_bytes.ppm", binary(6, a, 255) + b"extra bytes after the image"),
              ("p5_comment_in_token.pgm", b"P5\n2#split\n3 1\n255\n" + bytes(range(23))),
              ("p3_comment_joins.ppm", b"P3\n1 1\n255\n1#c\n2 3 4\n"),
              ("p2_one_line.pgm", b"P2 3 1 9 0 4 9"),
              ("p1_trailing_garbage.pbm", b"P1\n2 1\n01 x\n"),
              ("p1_trailing_comment.pbm", b"P1\n2 1\n01 # x\n"),
              ("p1_bad_char.pbm", b"P1\n2 1\n0 2\n"),
              ("p3_over_maxval.ppm", b"P3\n1 1\n10\n1 2 11\n"),
              ("p3_trailing_garbage.ppm", b"P3\n1 1\n10\n1 2 3 xyz\n"),
              ("p3_long_token.ppm", b"P3\n1 1\n255\n00000000001 2 3\n"),
              ("p3_not_a_number.ppm", b"P3\n1 1\n255\n1 2a 3\n"),
              ("p6_truncated.ppm", binary(6, a, 255)[:-1]),
              ("p5_16_truncated.pgm", binary(5, field(5, 5, 1, 65535, 1), 65535)[:-3]),
              ("p6_16_truncated.ppm", binary(6, field(5, 5, 3, 1000, 1), 1000)[:-1]),
              ("p4_truncated.pbm", binary(4, field(9, 4, 1, 1, 1), 1)[:-1]),
              ("p2_too_few.pgm", b"P2\n2 2\n255\n1 2 3\n"),
              ("maxval_0.pgm", b"P5\n1 1\n0\n\x00"),
              ("maxval_65536.pgm", b"P5\n1 1\n65536\n\x00\x00"),
              ("long_header_token.ppm", b"P6\n00000000001 1\n255\n\x00\x00\x00"),
              ("header_eof.ppm", b"P6\n1 1\n"),
              ("header_not_number.ppm", b"P6\n1 x\n255\n\x00\x00\x00"),
              ("empty_body.pgm", b"P5\n3 3\n255\n")]
    # plain files over PIL's 1 MiB read block: tokens and comments cut by the block end, the carried token
    big = field(600, 400, 1, 65535, 11)
    bits = (field(1000, 1000, 1, 1, 12).reshape(-1) + 48).astype(np.uint8).tobytes()
    cases += [("big_p2.pgm", plain(2, big, 65535, per_line=13)),
              ("big_p3_comments.ppm", plain(3, field(300, 200, 3, 4095, 13), 4095, per_line=5, comments=True)),
              ("big_p1_garbage_next_block.pbm", b"P1\n1000 1000\n" + bits + b" " * 60000 + b"x"),
              ("big_p1_garbage_same_block.pbm", b"P1\n1000 1000\n" + bits + b" " * 10000 + b"x")]
    return cases


def mutate(cases, n, seed, keep, edit):
    """n random edits of the cases keep((name, data)) accepts: edit(rng, b) changes the bytearray b in place.
    Named mut<i>_<case>; the same seed gives the same files."""
    rng = random.Random(seed)
    src = [c for c in cases if keep(c)]
    out = []
    for i in range(n):
        name, data = rng.choice(src)
        b = bytearray(data)
        edit(rng, b)
        out.append((f"mut{i}_{name}", bytes(b)))
    return out


def edit_pnm(rng, b):
    """header bytes, truncation, inserted blanks/comments/digits, a byte, trailing junk"""
    op = rng.randrange(5)
    if op == 0:
        at = rng.randrange(2, min(len(b), 20))
        b[at] = rng.choice(b"0123456789 \n\t#xP")
    elif op == 1:
        del b[rng.randrange(3, len(b)):]
    elif op == 2:
        at = rng.randrange(3, len(b))
        b[at:at] = rng.choice([b" ", b"\n", b"#c\n", b"#", b"9", b"\r"])
    elif op == 3:
        at = rng.randrange(3, len(b))
        b[at] = rng.randrange(256)
    else:
        b += rng.choice([b"0", b" 1", b"#", b"\n7 7 7", b"\xff"])


def mutations(cases, n, seed):
    """Random edits of valid small files."""
    return mutate(cases, n, seed, lambda c: len(c[1]) < 3000, edit_pnm)


def pillow(data):
    try:
        with Image.open(io.BytesIO(data)) as im:
            return np.asarray(im.convert("RGB"))
    except Exception as e:  # noqa: BLE001 - a refusal is a result
        return e


def preprocess_cli():
    """mmgw-preprocess for the pipeline parts, or None (then they are skipped, saying so)."""
    cli = ref.cli_path()
    if os.access(cli, os.X_OK):
        return cli
    print(f"SKIP (pipeline part): {cli} not built")
    return None


def pipeline_check(cli, tmp, name, data, plugin, exact_when_same_size=0.99):
    """One file through mmgw-preprocess against media_ref's reference pipeline on Pillow's decoding. Where
    no resize happens, exact_when_same_size is the share of values that must be exact (0.99 otherwise)."""
    p = os.path.join(tmp, name)
    with open(p, "wb") as f:
        f.write(data)
    out = os.path.join(tmp, "out.st")
    q = subprocess.run([cli, "--plugin", plugin, "--out", out, "--quiet", "--image", p], capture_output=True,
                       text=True, timeout=120)
    if not check(q.returncode == 0, f"{plugin} {name}: {q.stderr.strip()}"):
        return
    o = ref.load_st(out)
    rgb = pillow(data)
    rp, rgrid = ref.image_reference(rgb, plugin)
    grid = tuple(int(v) for v in o["image_grid_thw"][0])
    if not check(grid == rgrid, f"{plugin} {name}: grid {grid} vs {rgrid}"):
        return
    mean, p99, exact = ref.compare(o["pixel_values"], rp)
    same = (grid[1] * 14, grid[2] * 14) == rgb.shape[:2]
    print(f"  {plugin:8s} {name:18s} grid {grid} mean {mean:.5f} p99 {p99:.5f} exact {100 * exact:.2f}%")
    check(mean <= 0.01 and p99 <= 0.05 and exact >= (exact_when_same_size if same else 0.99),
          f"{plugin} {name}: mean {mean} p99 {p99} exact {exact}")


def finish():
    """The exit status of a format test: 1 when any check failed."""
    if failures:
        print(f"FAILED: {len(failures)} checks")
        return 1
    print("ok")
    return 0


def ours(tool, tmp, cases):
    paths = []
    for name, data in cases:
        p = os.path.join(tmp, name)
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
    res = {}
    for i in range(0, len(paths), 200):
        q = subprocess.run([tool] + paths[i:i + 200], capture_output=True, text=True, errors="replace",
                           timeout=120)
        check(q.returncode == 0, f"media_decode_dump exit {q.returncode}: {q.stderr[-300:]}")
        for line in q.stdout.splitlines():
            path, status, rest = line.split(" ", 2)
            name = os.path.basename(path)
            if status == "ok":
                w, h = (int(x) for x in rest.split())
                with open(path + ".rgb", "rb") as f:
                    res[name] = np.frombuffer(f.read(), np.uint8).reshape(h, w, 3)
            else:
                res[name] = rest
    return res


def compare(cases, got, verbose):
    agree = 0
    for name, data in cases:
        want = pillow(data)
        mine = got.get(name, "no result")
        if isinstance(want, Exception):
            ok = check(isinstance(mine, str), f"{name}: Pillow refuses ({want}), we decode {getattr(mine, 'shape', '')}")
            if verbose:
                print(f"  {name:28s} both refuse: {mine}")
        elif isinstance(mine, str):
            ok = check(False, f"{name}: Pillow decodes {want.shape}, we refuse: {mine}")
        else:
            ok = check(mine.shape == want.shape and np.array_equal(mine, want),
                       f"{name}: pixels differ ({mine.shape} vs {want.shape}, "
                       f"{int((mine != want).sum()) if mine.shape == want.shape else '-'} samples)")
            if verbose:
                print(f"  {name:28s} {want.shape[1]}x{want.shape[0]} bit-exact")
        agree += ok
    return agree


def main():
    tool = sys.argv[1]
    cases = make_cases()
    with tempfile.TemporaryDirectory() as tmp:
        got = ours(tool, tmp, cases)
        n = compare(cases, got, True)
        print(f"hand-made cases: {n}/{len(cases)} agree with Pillow")
        muts = mutations(cases, 600, 2026)
        got = ours(tool, tmp, muts)
        n = compare(muts, got, False)
        print(f"mutations: {n}/{len(muts)} agree with Pillow")

        # hostile sizes: refused from the header, fast
        for name, data in (("huge_p6.ppm", b"P6\n100000 100000\n255\n\x00"),
                           ("huge_p1.pbm", b"P1\n12000 12000\n0 1 0"),
                           ("wide_p5.pgm", b"P5\n2000000 1\n255\n\x00"),
                           ("many_comments.pgm", b"P2\n2 1\n255\n" + b"#\n" * 700000 + b"7 8\n")):
            p = os.path.join(tmp, name)
            with open(p, "wb") as f:
                f.write(data)
            t0 = time.monotonic()
            q = subprocess.run([tool, p], capture_output=True, text=True, timeout=60)
            dt = time.monotonic() - t0
            print(f"  {name:28s} {q.stdout.strip()} ({dt:.2f} s)")
            want = " ok 2 1" if name == "many_comments.pgm" else " error "  # comments cost linear time
            check(want in q.stdout and dt < 2.0, f"{name}: {q.stdout.strip()} in {dt:.2f} s")

        # through the whole pipeline (mmgw-preprocess), both plugins, against the reference pipeline
        cli = preprocess_cli()
        if cli:
            pipe = [("pipe_p6.ppm", binary(6, field(336, 252, 3, 255, 9), 255)),
                    ("pipe_p5_16.pgm", binary(5, field(300, 200, 1, 65535, 3), 65535)),
                    ("pipe_p3_1000.ppm", plain(3, field(64, 48, 3, 1000, 4), 1000)),
                    ("pipe_p4.pbm", binary(4, field(333, 250, 1, 1, 5), 1))]
            for i, (name, data) in enumerate(pipe):
                # each plugin on half of the files keeps this fast; unresized files must be exact
                pipeline_check(cli, tmp, name, data, ("m3", "qwen2vl")[i % 2], exact_when_same_size=1.0)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
