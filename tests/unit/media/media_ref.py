"""Reference preprocessing written from the reference processors' documented rules, for the CLI tests.

Images: Pillow decode + convert("RGB") (transformers' processors), M3 / Qwen2-VL smart_resize, Pillow's
BICUBIC resize (the algorithm torchvision's uint8 antialiased bicubic runs; the two differ by a rounding
now and then), rescale + normalize in float32, the (t, h/2, w/2, 2, 2) x (C, T, 14, 14) layout.

Videos: every frame decoded by the FFmpeg CLI to rgb24 (no frame dropped or duplicated, the stream's
rotation applied as FFmpeg, torchcodec and decord do), the frame count and average frame rate as torchcodec's
exact scan reports them (packets of the stream; frames / (end of the last frame - start of the first)), the
M3 / qwen-vl-utils frame rules, each frame resized like an image.

Everything here is independent of the code under test: it only shells out to ffmpeg/ffprobe.
"""
import json
import math
import os
import struct
import subprocess
from fractions import Fraction

import numpy as np
from PIL import Image

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)

# (min_pixels, max_pixels) for images; videos are per plugin below
IMAGE_BUDGET = {"m3": (3136, 451584), "qwen2vl": (56 * 56, 28 * 28 * 1280)}
VIDEO_FPS = {"m3": 1.0, "qwen2vl": 2.0}


def ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", *args], check=True, timeout=120)


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
    """qwen-vl-utils / transformers smart_resize (Python round = half to even). None when refused."""
    if max(h, w) / min(h, w) > 200:
        return None
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > mx:
        b = math.sqrt(h * w / mx)
        hb, wb = max(f, math.floor(h / b / f) * f), max(f, math.floor(w / b / f) * f)
    elif hb * wb < mn:
        b = math.sqrt(mn / (h * w))
        hb, wb = math.ceil(h * b / f) * f, math.ceil(w * b / f) * f
    return hb, wb


def patchify(frames):
    """frames: list of HxWx3 uint8 (count already even) -> [N, 1176] float32 in the reference layout."""
    x = np.stack([((f.astype(np.float32) - MEAN * 255) / (STD * 255)).transpose(2, 0, 1) for f in frames])
    t, c, h, w = x.shape
    x = x.reshape(t // 2, 2, c, h // 28, 2, 14, w // 28, 2, 14).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return x.reshape(-1, c * 2 * 14 * 14)


def pil_rgb(path):
    """What the reference processors start from: Pillow's decode, convert("RGB"), no EXIF rotation."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def image_reference(rgb, plugin):
    """rgb: HxWx3 uint8 -> (patches, grid) or None when the reference refuses the size."""
    h, w = rgb.shape[:2]
    mn, mx = IMAGE_BUDGET[plugin]
    size = smart_resize(h, w, mn, mx)
    if size is None:
        return None
    th, tw = size
    r = np.asarray(Image.fromarray(rgb).resize((tw, th), Image.BICUBIC))
    return patchify([r, r]), (1, th // 14, tw // 14)


def compare(ours, ref):
    """-> (mean |d|, p99 |d|, fraction exactly equal); shapes must match."""
    d = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    return float(d.mean()), float(np.percentile(d, 99)), float((d < 1e-6).mean())


# ---- video ----

def probe_stream(path):
    """Stream facts as torchcodec's exact scan derives them from the packets, plus the header's."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=width,height,avg_frame_rate,r_frame_rate,time_base,nb_frames:"
                          "stream_side_data=rotation:packet=pts,dts,duration,flags", "-of", "json", path],
                         capture_output=True, text=True, check=True).stdout
    j = json.loads(out)
    st = j["streams"][0]
    tb = Fraction(st["time_base"])
    begin, end, n = None, None, 0
    for p in j.get("packets", []):
        if "D" in p.get("flags", ""):  # discarded packets (edit lists) are not frames
            continue
        ts = p.get("pts", p.get("dts"))
        if ts is None:
            continue
        ts = int(ts)
        dur = int(p.get("duration", 0) or 0)
        begin = ts if begin is None else min(begin, ts)
        end = ts + dur if end is None else max(end, ts + dur)
        n += 1
    fps = None
    if n and end is not None and end > begin:
        # torchcodec: seconds = pts * num / den in doubles, for the end and the start separately
        end_s, begin_s = end * tb.numerator / tb.denominator, begin * tb.numerator / tb.denominator
        fps = n / (end_s - begin_s)
    rot = 0
    for sd in st.get("side_data_list", []):
        if "rotation" in sd:
            rot = int(sd["rotation"])
    return {"width": st["width"], "height": st["height"], "packets": n, "fps": fps,
            "avg_frame_rate": float(Fraction(st["avg_frame_rate"])) if st.get("avg_frame_rate", "0/0") != "0/0"
            else None, "rotation": rot}


def set_mp4_rotation(path, deg):
    """Write a display matrix turning the (only) track of an MP4/MOV by deg clockwise when shown, as phones
    tag portrait clips (FFmpeg 5.1's CLI cannot write one: it dropped the "rotate" tag)."""
    cos, sin = {0: (1, 0), 90: (0, 1), 180: (-1, 0), 270: (0, -1)}[deg]
    fx = lambda v: struct.pack(">i", v * 0x10000)  # noqa: E731 - 16.16 fixed point
    matrix = fx(cos) + fx(sin) + b"\0" * 4 + fx(-sin) + fx(cos) + b"\0" * 4 + b"\0" * 8 + struct.pack(">I", 0x40000000)
    b = bytearray(open(path, "rb").read())
    i = b.index(b"tkhd")
    off = i + (56 if b[i + 4] == 1 else 44)
    b[off:off + 36] = matrix
    open(path, "wb").write(bytes(b))


def decode_all(path, w, h):
    """Every frame in presentation order as the FFmpeg CLI decodes it to rgb24 (passthrough: no frame dropped
    or repeated; rotation applied, FFmpeg's default). w, h: the displayed size."""
    raw = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-i", path, "-map", "0:v:0", "-fps_mode",
                          "passthrough", "-pix_fmt", "rgb24", "-f", "rawvideo", "-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)


def frames_rule(total, fps, target, max_frames=768):
    """qwen-vl-utils' smart_nframes (M3: fps 1; Qwen2-VL: fps 2), linspace indices rounded half to even.
    A 1-frame clip keeps its frame (the reference would refuse it; we pad it instead)."""
    n = total / fps * target
    n = min(min(max(n, 4), math.floor(min(max_frames, total) / 2) * 2), total)
    n = math.floor(n / 2) * 2
    if n < 2:
        n = total if total < 2 else 2
    return [0] if n == 1 else [round(Fraction((total - 1) * i, n - 1)) for i in range(n)]


def video_budget(plugin, n_frames):
    if plugin == "m3":
        return 3136, 602112
    return 128 * 28 * 28, max(min(768 * 28 * 28, 90316800 / n_frames * 2), int(128 * 28 * 28 * 1.05))


def video_reference(frames, idx, plugin, n_budget=None):
    """frames: all decoded frames; idx: the sampled indices -> (patches, grid) or None when refused.
    n_budget: the sampled frame count the pixel budgets use when idx is only part of them."""
    h, w = frames.shape[1:3]
    n = n_budget or len(idx)
    mn, mx = video_budget(plugin, n)
    size = smart_resize(h, w, mn, mx)
    if size is None:
        return None
    th, tw = size
    if plugin == "m3" and n * th * tw > 301056000:
        return None
    rs = [np.asarray(Image.fromarray(frames[i]).resize((tw, th), Image.BICUBIC)) for i in idx]
    if len(rs) % 2:
        rs.append(rs[-1])
    return patchify(rs), (len(rs) // 2, th // 14, tw // 14)


def have_tools():
    return all(subprocess.run(["which", t], capture_output=True).returncode == 0 for t in ("ffmpeg", "ffprobe"))


def cli_path():
    build = os.environ.get("MMGW_BUILD", os.path.join(os.path.dirname(__file__), "../../../build"))
    return os.path.join(build, "bin", "mmgw-preprocess")
