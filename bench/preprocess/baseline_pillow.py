#!/usr/bin/python3
"""The classic Python preprocessing pipeline, as the baseline of bench/preprocess:

  images: Pillow decode -> convert("RGB") -> smart_resize -> Image.resize(BICUBIC) -> NumPy rescale,
          normalise, repeat to 2 frames, reshape/transpose into [N, 1176] float32
  videos: decode ALL frames (FFmpeg CLI to raw RGB, what torchvision.io.read_video-style loaders do) ->
          pick the M3 frames -> Pillow resize -> the same NumPy patching

usage: baseline_pillow.py image|video FILE REPEAT
Prints "items/s X", and for images the decode / resize / numpy split in ms.
"""
import io
import math
import subprocess
import sys
import time

import numpy as np
from PIL import Image

MEAN = np.array([0.48145466, 0.4578275, 0.40821073], dtype=np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], dtype=np.float32)


def smart_resize(h, w, mn=3136, mx=451584, f=28):
    hb, wb = max(f, round(h / f) * f), max(f, round(w / f) * f)
    if hb * wb > mx:
        b = math.sqrt(h * w / mx)
        hb, wb = max(f, math.floor(h / b / f) * f), max(f, math.floor(w / b / f) * f)
    elif hb * wb < mn:
        b = math.sqrt(mn / (h * w))
        hb, wb = math.ceil(h * b / f) * f, math.ceil(w * b / f) * f
    return hb, wb


def patchify(frames):
    x = np.stack([np.asarray(f, dtype=np.float32) for f in frames]) / 255.0
    x = (x - MEAN) / STD
    x = x.transpose(0, 3, 1, 2)  # T, C, H, W
    t, c, h, w = x.shape
    x = x.reshape(t // 2, 2, c, h // 28, 2, 14, w // 28, 2, 14).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(-1, c * 2 * 14 * 14))


def image(data):
    t0 = time.perf_counter()
    im = Image.open(io.BytesIO(data)).convert("RGB")
    im.load()
    t1 = time.perf_counter()
    h, w = smart_resize(im.height, im.width)
    r = im.resize((w, h), Image.BICUBIC)
    t2 = time.perf_counter()
    patchify([r, r])
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def video(path):
    probe = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-count_packets", "-show_entries",
                            "stream=width,height,avg_frame_rate,nb_read_packets", "-of", "csv=p=0", path],
                           capture_output=True, text=True, check=True).stdout.strip().split(",")
    w, h, rate, total = int(probe[0]), int(probe[1]), probe[2], int(probe[3])
    num, den = rate.split("/")
    fps = int(num) / int(den)
    raw = subprocess.run(["ffmpeg", "-loglevel", "error", "-threads", "1", "-i", path, "-f", "rawvideo", "-pix_fmt",
                          "rgb24", "-"], capture_output=True, check=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, h, w, 3)  # every frame decoded
    n = min(min(max(total / fps, 4), math.floor(min(768, total) / 2) * 2), total)
    n = max(2, math.floor(n / 2) * 2)
    idx = np.round(np.linspace(0, total - 1, n)).astype(int)
    th, tw = smart_resize(h, w, 3136, 602112)
    picked = [Image.fromarray(frames[i]).resize((tw, th), Image.BICUBIC) for i in idx]
    patchify(picked)


def main():
    kind, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    data = open(path, "rb").read()
    t = [0.0, 0.0, 0.0]
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        if kind == "image":
            for i, v in enumerate(image(data)):
                t[i] += v
        else:
            video(path)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    if kind == "image":
        print(f"decode_ms {1e3 * t[0] / n:.2f} resize_ms {1e3 * t[1] / n:.2f} numpy_ms {1e3 * t[2] / n:.2f}")
    print(f"items/s {n / dt:.2f}")
    # CPU time of this process (for videos the FFmpeg child decoding every frame is not included)
    print(f"cpu_ms {1e3 * cpu / n:.2f}")


if __name__ == "__main__":
    main()
