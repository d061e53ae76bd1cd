#!/usr/bin/python3
"""Integration tests of build/bin/mmgw-preprocess.

Everything is generated here (FFmpeg test sources, Pillow, crafted headers) and compared with independent
references: Pillow (decode, convert("RGB"), BICUBIC resize, normalisation in numpy) for images; FFmpeg's
CLI decode + Pillow for videos; the frame rules written out in Python; the golden token ids when
../shared/testdata is present. Bad inputs must exit non-zero within 2 s with one line on stderr.

Network traffic stays on 127.0.0.1 (a local http.server).
"""
import http.server
import json
import math
import os
import random
import re
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from fractions import Fraction

import numpy as np
from PIL import Image

BUILD = os.environ.get("MMGW_BUILD", os.path.join(os.path.dirname(__file__), "../../../build"))
BIN = os.path.join(BUILD, "bin", "mmgw-preprocess")
DATA = os.environ.get("MMGW_TESTDATA")
# a plain clone has no ../shared: the golden comparisons are then skipped, the rest still runs
if DATA and not os.path.isdir(DATA):
    DATA = None
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg)


peak_rss_kb = [0]
HAVE_TIME = os.access("/usr/bin/time", os.X_OK)


def run(args, timeout=60):
    """Run the CLI; returns (exit code, stdout, stderr, seconds) and tracks its peak RSS. The RSS is measured
    by GNU time, a small parent: Linux carries a parent's RSS high-water mark into a forked child, so the
    child's own rusage would report this Python process's size."""
    t0 = time.monotonic()
    with tempfile.NamedTemporaryFile() as rss:
        cmd = (["/usr/bin/time", "-f", "%M", "-o", rss.name] if HAVE_TIME else []) + [BIN] + args
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        dt = time.monotonic() - t0
        try:
            kb = int(open(rss.name).read().split()[-1])
        except (ValueError, IndexError):
            kb = 0
    peak_rss_kb[0] = max(peak_rss_kb[0], kb)
    return p.returncode, p.stdout, p.stderr, dt


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *args], check=True)


def load_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    dt = {"F32": np.float32, "BF16": np.uint16, "I64": np.int64, "I32": np.int32}
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        arr = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt[v["dtype"]]).reshape(v["shape"])
        if v["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[k] = arr
    return out


def smart_resize(h, w, mn, mx, f=28):
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > mx:
        b = math.sqrt(h * w / mx)
        hb, wb = max(f, math.floor(h / b / f) * f), max(f, math.floor(w / b / f) * f)
    elif hb * wb < mn:
        b = math.sqrt(mn / (h * w))
        hb, wb = math.ceil(h * b / f) * f, math.ceil(w * b / f) * f
    return hb, wb


def patchify(frames):
    """frames: list of HxWx3 uint8 (T already padded to even) -> [N, 1176] float32, the reference layout."""
    x = np.stack([((f.astype(np.float32) - MEAN * 255) / (STD * 255)).transpose(2, 0, 1) for f in frames])
    t, c, h, w = x.shape
    x = x.reshape(t // 2, 2, c, h // 28, 2, 14, w // 28, 2, 14).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(-1, c * 2 * 14 * 14)


def compare(name, ours, ref, min_exact=0.99):
    check(ours.shape == ref.shape, f"{name}: shape {ours.shape} vs reference {ref.shape}")
    if ours.shape != ref.shape:
        return
    d = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    mean, p99 = d.mean(), np.percentile(d, 99)
    exact = (d < 1e-6).mean()
    print(f"  {name:36s} mean {mean:.5f} p99 {p99:.5f} exact {100 * exact:.2f}%")
    check(mean <= 0.01, f"{name}: mean |d| {mean}")
    check(p99 <= 0.05, f"{name}: p99 |d| {p99}")
    check(exact >= min_exact, f"{name}: only {100 * exact:.2f}% exact")


def image_reference(path, plugin, rgb=None):
    im = Image.open(path)
    if rgb is None:
        im = im.convert("RGB")
    else:
        im = Image.fromarray(rgb)
    mx = 451584 if plugin == "m3" else 28 * 28 * 1280
    h, w = smart_resize(im.height, im.width, 3136 if plugin == "m3" else 56 * 56, mx)
    r = np.asarray(im.resize((w, h), Image.BICUBIC))
    return patchify([r, r]), (1, h // 14, w // 14)


def test_images(tmp):
    print("images vs Pillow")
    rng = np.random.default_rng(7)
    base = Image.open(os.path.join(DATA, "media", "astronaut.png")) if DATA else None
    cases = []
    # sources: FFmpeg test patterns (sharp edges, text) and, when present, a photo
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=640x427", "-frames:v", "1", "-q:v", "2", f"{tmp}/a.jpg")
    ffmpeg("-f", "lavfi", "-i", "mandelbrot=size=1000x750", "-frames:v", "1", f"{tmp}/b.png")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=300x500", "-frames:v", "1", "-pix_fmt", "gray", f"{tmp}/grey.jpg")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=333x222", "-frames:v", "1", "-pix_fmt", "pal8", f"{tmp}/pal.png")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=256x200", "-frames:v", "1", "-pix_fmt", "rgba", f"{tmp}/rgba.png")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=420x240", "-frames:v", "1", f"{tmp}/first.gif")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=500x300", "-frames:v", "1", "-pix_fmt", "rgb24", f"{tmp}/t.tiff")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=700x460", "-frames:v", "1", "-quality", "80", f"{tmp}/w.webp")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=20x30", "-frames:v", "1", f"{tmp}/tiny.png")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=3000x2000", "-frames:v", "1", "-q:v", "3", f"{tmp}/big.jpg")
    cases += ["a.jpg", "b.png", "grey.jpg", "pal.png", "rgba.png", "first.gif", "t.tiff", "w.webp", "tiny.png", "big.jpg"]
    # Pillow-made: a palette image with transparency, a grey+alpha PNG, a progressive JPEG, an EXIF-rotated JPEG
    img = Image.fromarray(rng.integers(0, 255, (90, 130, 3), dtype=np.uint8)).resize((390, 270), Image.BILINEAR)
    img.convert("P").save(f"{tmp}/ptrns.png", transparency=3)
    Image.fromarray(np.dstack([np.asarray(img.convert("L")), np.full((270, 390), 128, np.uint8)])).save(f"{tmp}/la.png")
    img.save(f"{tmp}/prog.jpg", progressive=True, quality=85)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: the reference ignores it, so must we
    img.save(f"{tmp}/exif.jpg", exif=exif.tobytes())
    cases += ["ptrns.png", "la.png", "prog.jpg", "exif.jpg"]
    if base is not None:
        base.resize((1500, 1000), Image.LANCZOS).save(f"{tmp}/photo.jpg", quality=90)
        cases.append("photo.jpg")
    for plugin in ("m3", "qwen2vl"):
        for c in cases:
            rc, out, err, _ = run(["--plugin", plugin, "--image", f"{tmp}/{c}", "--out", f"{tmp}/o.st", "--quiet"])
            check(rc == 0, f"{plugin} {c}: exit {rc}: {err.strip()}")
            if rc:
                continue
            o = load_st(f"{tmp}/o.st")
            ref, grid = image_reference(f"{tmp}/{c}", plugin)
            check(tuple(o["image_grid_thw"][0]) == grid, f"{plugin} {c}: grid {o['image_grid_thw'][0]} vs {grid}")
            compare(f"{plugin} {c}", o["pixel_values"], ref)

    # 16-bit PNGs as Pillow converts them: 16-bit RGB by the high byte, 16-bit grey (I;16) clipped at 255
    for pf, name in (("rgb48be", "rgb16.png"), ("gray16be", "grey16.png")):
        ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240", "-frames:v", "1", "-pix_fmt", pf, f"{tmp}/{name}")
        rgb = np.asarray(Image.open(f"{tmp}/{name}").convert("RGB"))
        rc, out, err, _ = run(["--plugin", "m3", "--image", f"{tmp}/{name}", "--out", f"{tmp}/o.st", "--quiet"])
        check(rc == 0, f"{name}: exit {rc}: {err.strip()}")
        if rc == 0:
            ref, grid = image_reference(f"{tmp}/{name}", "m3", rgb=rgb)
            compare(f"m3 {name}", load_st(f"{tmp}/o.st")["pixel_values"], ref)

    # bf16 output is the f32 output rounded; several items concatenate in order
    run(["--plugin", "m3", "--image", f"{tmp}/a.jpg", "--image", f"{tmp}/tiny.png", "--out", f"{tmp}/f.st", "--quiet"])
    run(["--plugin", "m3", "--image", f"{tmp}/a.jpg", "--image", f"{tmp}/tiny.png", "--out", f"{tmp}/h.st", "--quiet",
         "--dtype", "bf16"])
    f, h = load_st(f"{tmp}/f.st"), load_st(f"{tmp}/h.st")
    bf = ((f["pixel_values"].view(np.uint32) + 0x7FFF + ((f["pixel_values"].view(np.uint32) >> 16) & 1)) >> 16) << 16
    check(np.array_equal(bf.view(np.float32), h["pixel_values"]), "bf16 output is not the rounded f32 output")
    check(f["image_grid_thw"].shape == (2, 3), "two images give two grid rows")
    a_ref, _ = image_reference(f"{tmp}/a.jpg", "m3")
    check(np.array_equal(f["pixel_values"][:len(a_ref)], load_st_first(tmp, "a.jpg")), "concatenation order")

    # threads and repetitions give the same bytes, and the last stderr line is the throughput
    rc, out, err, _ = run(["--plugin", "m3", "--image", f"{tmp}/a.jpg", "--image", f"{tmp}/b.png", "--out",
                           f"{tmp}/t.st", "--quiet", "--repeat", "6", "--threads", "2"])
    check(rc == 0, f"--repeat/--threads: exit {rc}")
    last = err.strip().splitlines()[-1] if err.strip() else ""
    check(re.fullmatch(r"throughput: [0-9.]+ items/s", last) is not None, f"last stderr line: {last!r}")
    run(["--plugin", "m3", "--image", f"{tmp}/a.jpg", "--image", f"{tmp}/b.png", "--out", f"{tmp}/s.st", "--quiet"])
    check(open(f"{tmp}/t.st", "rb").read() == open(f"{tmp}/s.st", "rb").read(), "threaded output differs")

    # a data: URL gives the same as the file
    import base64
    url = "data:image/png;base64," + base64.b64encode(open(f"{tmp}/tiny.png", "rb").read()).decode()
    rc, _, err, _ = run(["--plugin", "m3", "--image", url, "--out", f"{tmp}/d.st", "--quiet"])
    run(["--plugin", "m3", "--image", f"{tmp}/tiny.png", "--out", f"{tmp}/e.st", "--quiet"])
    check(rc == 0 and np.array_equal(load_st(f"{tmp}/d.st")["pixel_values"], load_st(f"{tmp}/e.st")["pixel_values"]),
          f"data: URL differs from the file ({err.strip()})")


def load_st_first(tmp, name):
    run(["--plugin", "m3", "--image", f"{tmp}/{name}", "--out", f"{tmp}/one.st", "--quiet"])
    return load_st(f"{tmp}/one.st")["pixel_values"]


def frames_rule(total, fps, target):
    n = total / fps * target
    n = min(min(max(n, 4), math.floor(min(768, total) / 2) * 2), total)
    n = math.floor(n / 2) * 2
    if n < 2:
        n = total if total < 2 else 2
    return [0] if n == 1 else [round(Fraction((total - 1) * i, n - 1)) for i in range(n)]


def video_reference(path, idx, w, h, plugin, n_frames):
    """FFmpeg's CLI decodes the chosen frames to RGB; Pillow resizes; numpy normalises and patches."""
    sel = "+".join(f"eq(n\\,{i})" for i in idx)
    raw = subprocess.run(["ffmpeg", "-loglevel", "error", "-i", path, "-vf", f"select={sel}", "-vsync", "0",
                          "-pix_fmt", "rgb24", "-f", "rawvideo", "-"], capture_output=True, check=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)
    if plugin == "m3":
        th, tw = smart_resize(h, w, 3136, 602112)
    else:
        mx = max(min(768 * 28 * 28, 90316800 / n_frames * 2), int(128 * 28 * 28 * 1.05))
        th, tw = smart_resize(h, w, 128 * 28 * 28, mx)
    rs = [np.asarray(Image.fromarray(f).resize((tw, th), Image.BICUBIC)) for f in frames]
    if len(rs) % 2:
        rs.append(rs[-1])
    return patchify(rs), (len(rs) // 2, th // 14, tw // 14)


def test_videos(tmp):
    print("videos vs FFmpeg CLI + Pillow")
    # the clips of testdata/media/videos.json, made again here
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "80", "-c:v", "libvpx-vp9",
           "-b:v", "300k", f"{tmp}/testsrc_320x240_25fps.webm")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=24", "-frames:v", "60", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", f"{tmp}/rot_1280x720_24fps.mp4")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-frames:v", "390", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", "-g", "60", f"{tmp}/long_13s.mp4")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=200x150:rate=10", "-frames:v", "1", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", f"{tmp}/one_frame.mp4")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=352x288:rate=30", "-frames:v", "45", "-c:v", "libx264",
           "-pix_fmt", "yuv420p", "-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709",
           f"{tmp}/bt709.mp4")
    known = json.load(open(os.path.join(DATA, "media", "videos.json"))) if DATA else {}
    clips = [("testsrc_320x240_25fps.webm", 320, 240, 80, 25.0), ("rot_1280x720_24fps.mp4", 1280, 720, 60, 24.0),
             ("long_13s.mp4", 640, 360, 390, 30.0), ("one_frame.mp4", 200, 150, 1, 10.0),
             ("bt709.mp4", 352, 288, 45, 30.0)]
    if DATA:
        clips.append((os.path.join(DATA, "media", "pan_640x360_30fps.mp4"), 640, 360, 120, 30.0))
    for plugin, target in (("m3", 1.0), ("qwen2vl", 2.0)):
        for name, w, h, total, fps in clips:
            path = name if os.path.isabs(name) else f"{tmp}/{name}"
            rc, out, err, _ = run(["--plugin", plugin, "--video", path, "--out", f"{tmp}/v.st", "--quiet"])
            check(rc == 0, f"{plugin} {name}: exit {rc}: {err.strip()}")
            if rc:
                continue
            o = load_st(f"{tmp}/v.st")
            idx = list(o["video_frame_indices"])
            want = frames_rule(total, fps, target)
            check(idx == want, f"{plugin} {name}: frames {idx} vs rule {want}")
            base = os.path.basename(name)
            if plugin == "qwen2vl" and base in known:
                check(idx == known[base]["idx"], f"{name}: frames {idx} vs videos.json {known[base]['idx']}")
            ref, grid = video_reference(path, idx, w, h, plugin, len(idx))
            check(tuple(o["video_grid_thw"][0]) == grid, f"{plugin} {name}: grid {o['video_grid_thw'][0]} vs {grid}")
            compare(f"{plugin} {base}", o["pixel_values_videos"], ref, min_exact=0.5)
    # a one-frame clip fills both temporal slots with its frame
    run(["--plugin", "m3", "--video", f"{tmp}/one_frame.mp4", "--out", f"{tmp}/v.st", "--quiet"])
    pv = load_st(f"{tmp}/v.st")["pixel_values_videos"].reshape(-1, 3, 2, 196)
    check(np.array_equal(pv[:, :, 0], pv[:, :, 1]), "one-frame video: temporal slots differ")


def test_prompt_against_golden_ids(tmp):
    if not DATA:
        print("skipping the golden-ids check: no testdata")
        return
    print("prompt expansion vs golden token ids")
    tok = json.load(open(os.path.join(DATA, "m3-tiny-a", "tokenizer.json")))
    vocab = {v: k for k, v in tok["model"]["vocab"].items()}
    for a in tok["added_tokens"]:
        vocab[a["id"]] = a["content"]
    # GPT-2 byte-level alphabet
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    unbyte = {chr(c): b for b, c in zip(bs, cs)}
    added = {a["id"] for a in tok["added_tokens"]}

    def decode(ids):
        out = bytearray()
        for i in ids:
            t = vocab[int(i)]
            out += t.encode() if int(i) in added else bytes(unbyte[ch] for ch in t)
        return out.decode("utf-8", "replace")

    sys.path.insert(0, os.path.dirname(__file__))
    g = load_goldens(os.path.join(DATA, "m3-tiny-a", "goldens.safetensors"))
    for case, flag, media in (("video", "--video", "pan_640x360_30fps.mp4"), ("image", "--image", "chelsea.webp")):
        rc, out, err, _ = run(["--plugin", "m3", flag, os.path.join(DATA, "media", media), "--out", f"{tmp}/p.st",
                               "--quiet", "--print-prompt"])
        check(rc == 0, f"--print-prompt {case}: {err.strip()}")
        ours = out.split("prompt 0: ", 1)[1].rstrip("\n") if "prompt 0: " in out else ""
        text = decode(g[f"{case}/ids"])
        check(len(ours) > 100 and ours in text, f"{case}: expansion not found in the golden prompt")
        print(f"  {case}: {len(ours)} characters of expansion found in the golden prompt")


def load_goldens(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k in ("video/ids", "image/ids"):
        a, b = hdr[k]["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + a:8 + n + b], np.int32)
    return out


def png_claiming(w, h):
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))


def test_bad_inputs(tmp):
    print("bad inputs")
    rnd = random.Random(3)
    open(f"{tmp}/empty.bin", "wb").close()
    open(f"{tmp}/random.bin", "wb").write(bytes(rnd.getrandbits(8) for _ in range(20000)))
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=640x480", "-frames:v", "1", f"{tmp}/ok.jpg")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=640x480", "-frames:v", "1", f"{tmp}/ok.png")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-frames:v", "50", "-c:v", "libx264", f"{tmp}/ok.mp4")
    for src, cut in (("ok.jpg", 0.5), ("ok.png", 0.6), ("ok.mp4", 0.5)):
        b = open(f"{tmp}/{src}", "rb").read()
        open(f"{tmp}/trunc_{src}", "wb").write(b[:int(len(b) * cut)])
    open(f"{tmp}/giga.png", "wb").write(png_claiming(100000, 100000))
    ffmpeg("-f", "lavfi", "-i", "color=c=red:size=1000x4", "-frames:v", "1", f"{tmp}/wide.png")
    ffmpeg("-f", "lavfi", "-i", "sine=d=1", "-c:a", "aac", f"{tmp}/audio.m4a")
    ffmpeg("-f", "lavfi", "-i", "sine=d=1", f"{tmp}/audio.wav")
    bad = [("--image", "empty.bin"), ("--image", "random.bin"), ("--image", "trunc_ok.jpg"),
           ("--image", "trunc_ok.png"), ("--image", "giga.png"), ("--image", "wide.png"), ("--image", "missing.png"),
           ("--image", "audio.m4a"), ("--video", "empty.bin"), ("--video", "random.bin"),
           ("--video", "trunc_ok.mp4"), ("--video", "audio.m4a"), ("--video", "audio.wav"), ("--video", "ok.jpg"),
           ("--video", "missing.mp4"), ("--image", "/"), ("--image", "ftp://127.0.0.1/x.png")]
    for flag, name in bad:
        path = name if "/" in name else f"{tmp}/{name}"
        rc, out, err, dt = run(["--plugin", "m3", flag, path, "--out", f"{tmp}/bad.st"], timeout=10)
        lines = err.strip().splitlines()
        print(f"  {flag} {name:14s} rc={rc} {dt:.2f}s  {err.strip()}")
        check(rc != 0, f"{name}: accepted")
        check(dt < 2.0, f"{name}: took {dt:.2f} s")
        check(len(lines) == 1 and lines[0].startswith("mmgw-preprocess: "), f"{name}: stderr {err!r}")
    check(not os.path.exists(f"{tmp}/bad.st"), "a failed run left an output file")
    peak_mb = peak_rss_kb[0] / 1024
    print(f"  peak RSS of any run so far: {peak_mb:.0f} MB")
    check(peak_mb < 300, f"a run peaked at {peak_mb:.0f} MB")
    # usage errors exit 2
    for args in ([], ["--plugin", "m3"], ["--plugin", "m3", "--image", "x", "--out", "o", "--repeat", "0"],
                 ["--plugin", "m3", "--image", "x", "--out", "o", "--dtype", "f64"], ["--bogus"]):
        rc, _, err, _ = run(args)
        check(rc == 2, f"usage {args}: exit {rc}")
    rc, _, err, _ = run(["--plugin", "nosuch", "--image", f"{tmp}/ok.png", "--out", f"{tmp}/x.st"])
    check(rc == 1 and "nosuch" in err, f"unknown plugin: {err!r}")
    rc, _, err, _ = run(["--plugin", "m3", "--option", "bogus=1", "--image", f"{tmp}/ok.png", "--out", f"{tmp}/x.st"])
    check(rc == 1 and "bogus" in err, f"unknown plugin option: {err!r}")


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/img.png")
            self.end_headers()
        elif self.path.startswith("/loop"):
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        elif self.path.startswith("/slow"):
            time.sleep(3)
            self.send_response(200)
            self.end_headers()
        else:
            super().do_GET()


def test_http(tmp):
    print("http(s) on 127.0.0.1")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=200x100", "-frames:v", "1", f"{tmp}/img.png")
    os.chdir(tmp)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port = srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    try:
        rc, _, err, _ = run(["--plugin", "m3", "--image", f"{base}/img.png", "--out", f"{tmp}/h1.st", "--quiet"])
        run(["--plugin", "m3", "--image", f"{tmp}/img.png", "--out", f"{tmp}/h2.st", "--quiet"])
        check(rc == 0 and open(f"{tmp}/h1.st", "rb").read() == open(f"{tmp}/h2.st", "rb").read(),
              f"http fetch differs from the file ({err.strip()})")
        rc, _, err, _ = run(["--plugin", "m3", "--image", f"{base}/redirect", "--out", f"{tmp}/h3.st", "--quiet"])
        check(rc == 0, f"one redirect: {err.strip()}")
        for path, extra, what in (("/nothing.png", [], "404"), ("/loop", [], "redirect loop"),
                                  ("/img.png", ["--max-bytes", "100"], "size cap"),
                                  ("/slow", ["--fetch-timeout", "500"], "timeout")):
            rc, _, err, dt = run(["--plugin", "m3", "--image", base + path, "--out", f"{tmp}/h4.st"] + extra)
            print(f"  {what:14s} rc={rc} {dt:.2f}s  {err.strip()}")
            check(rc == 1 and len(err.strip().splitlines()) == 1, f"http {what}: exit {rc}: {err!r}")
            check(dt < 2.5, f"http {what}: took {dt:.2f} s")
    finally:
        srv.shutdown()


def test_timeout(tmp):
    """--timeout MS: the per-item preprocessing budget (the gateway's preprocess_timeout); 0 = none."""
    print("--timeout")
    # a 2000 x 2000 GIF of 1x1-pixel frames at 1 fps, each sampled frame a whole canvas (seconds of work)
    gif = bytearray(b"GIF89a" + struct.pack("<HH", 2000, 2000) + bytes([0xF0, 0, 0, 0, 0, 0, 255, 255, 255]))
    for i in range(300):
        gif += b"\x21\xf9\x04\x04" + struct.pack("<H", 100) + b"\x00\x00"
        gif += b"\x2c" + struct.pack("<HHHH", i % 2000, 0, 1, 1) + b"\x00\x02\x02\x44\x01\x00"
    open(f"{tmp}/slow.gif", "wb").write(bytes(gif + b"\x3b"))
    args = ["--plugin", "m3", "--option", "video_max_pixels=12544", "--video", f"{tmp}/slow.gif", "--out",
            f"{tmp}/slow.st", "--quiet"]
    rc, _, err, dt = run(args + ["--timeout", "150"])
    print(f"  150 ms: rc={rc} {dt:.2f}s  {err.strip()}")
    check(rc == 1 and "time limit of 150 ms" in err and len(err.strip().splitlines()) == 1,
          f"--timeout 150: exit {rc}: {err!r}")
    check(dt < 1.5, f"--timeout 150 took {dt:.2f} s")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=160x120:rate=10", "-frames:v", "20", "-c:v", "libx264",
           f"{tmp}/short.mp4")
    for t in ("0", "60000"):
        rc, _, err, _ = run(["--plugin", "m3", "--video", f"{tmp}/short.mp4", "--out", f"{tmp}/short.st",
                             "--quiet", "--timeout", t])
        check(rc == 0, f"--timeout {t}: a short video: exit {rc}: {err.strip()}")
    rc, _, err, _ = run(args + ["--timeout", "-5"])
    check(rc == 2 and "--timeout" in err, f"--timeout -5: exit {rc}: {err!r}")


def test_out_paths(tmp):
    """--out through a symbolic link writes its target (the link stays); a FIFO and /dev/fd/1 (a pipe, or a
    redirected file) are written through, not replaced by a regular file."""
    print("--out through links, FIFOs and /dev/fd/1")
    ffmpeg("-f", "lavfi", "-i", "testsrc2=size=120x90", "-frames:v", "1", f"{tmp}/out_src.png")
    args = ["--plugin", "m3", "--image", f"{tmp}/out_src.png", "--dtype", "bf16", "--quiet", "--out"]
    rc, _, err, _ = run(args + [f"{tmp}/out_ref.st"])
    ref = open(f"{tmp}/out_ref.st", "rb").read() if rc == 0 else b""
    check(rc == 0 and len(ref) > 8, f"--out a new file: {err.strip()}")
    os.makedirs(f"{tmp}/out_sub", exist_ok=True)
    for name, target, existing in (("link.st", "out_sub/target.st", True), ("dangling.st", "out_sub/later.st", False)):
        if existing:
            open(f"{tmp}/{target}", "wb").write(b"old")
        os.symlink(target, f"{tmp}/{name}")
        rc, _, err, _ = run(args + [f"{tmp}/{name}"])
        got = open(f"{tmp}/{target}", "rb").read() if os.path.exists(f"{tmp}/{target}") else b""
        check(rc == 0 and os.path.islink(f"{tmp}/{name}") and got == ref,
              f"--out a {'' if existing else 'dangling '}symbolic link: the link stays, its target written "
              f"(rc {rc}, link {os.path.islink(f'{tmp}/{name}')}, target {len(got)} bytes): {err.strip()}")
    # a FIFO: read while the CLI writes (the reader opens first, non-blocking, so nothing waits forever)
    fifo = f"{tmp}/out.fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    p = subprocess.Popen([BIN] + args + [fifo], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    data, end = bytearray(), time.monotonic() + 60
    while time.monotonic() < end:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            chunk = None
        if chunk:
            data += chunk
        elif p.poll() is not None:
            break
        else:
            time.sleep(0.005)
    os.close(fd)
    if p.poll() is None:
        p.kill()
    p.wait()
    err = p.stderr.read().decode(errors="replace")
    check(p.returncode == 0 and bytes(data) == ref and is_fifo(fifo),
          f"--out a FIFO: written through (rc {p.returncode}, {len(data)} of {len(ref)} bytes, still a FIFO "
          f"{is_fifo(fifo)}): {err.strip()}")
    # /dev/fd/1 to a pipe, and to a file (the file keeps its inode: written through its descriptor)
    p = subprocess.run([BIN] + args + ["/dev/fd/1"], capture_output=True, timeout=60)
    check(p.returncode == 0 and p.stdout == ref, f"--out /dev/fd/1 to a pipe: rc {p.returncode}, {len(p.stdout)} "
          f"bytes: {p.stderr.decode(errors='replace').strip()}")
    with open(f"{tmp}/out_redirect.st", "wb") as f:
        ino = os.fstat(f.fileno()).st_ino
        p = subprocess.run([BIN] + args + ["/dev/fd/1"], stdout=f, stderr=subprocess.PIPE, timeout=60)
    got = open(f"{tmp}/out_redirect.st", "rb").read()
    check(p.returncode == 0 and got == ref and os.stat(f"{tmp}/out_redirect.st").st_ino == ino,
          f"--out /dev/fd/1 to a file: rc {p.returncode}, {len(got)} bytes: "
          f"{p.stderr.decode(errors='replace').strip()}")


def is_fifo(path):
    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except OSError:
        return False


def main():
    if not os.access(BIN, os.X_OK):
        print(f"SKIP: {BIN} not built")
        return 77
    if subprocess.run(["which", "ffmpeg"], capture_output=True).returncode:
        print("SKIP: the ffmpeg CLI is needed to make test media")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        test_images(tmp)
        test_videos(tmp)
        test_prompt_against_golden_ids(tmp)
        test_bad_inputs(tmp)
        test_timeout(tmp)
        test_out_paths(tmp)
        test_http(tmp)
    if failures:
        print(f"FAILED: {len(failures)} checks")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
