#!/usr/bin/python3
"""Running streams while images arrive: media encoding inside the decode steps (before, --encode-threads 0)
against the media encoder thread (after, --encode-threads N), in the same run.

    cmake --build build --target mmgw-worker bench-worker-client
    /usr/bin/python3 bench/worker/bench_media.py --build build [--model DIR] [--threads 2] [--grid 64]
        [--images 3] [--streams 4] [--reps 2] [--modes inline,enc1]

Per mode and repetition, on a fresh mmgw-worker (loopback only):
- alone: time to first token of a prompt with one grid x grid image (random BF16 pixels, fresh each time so
  nothing is reused) minus that of a text prompt of the same length: the encode time on an idle worker;
- under load: `streams` greedy text streams from bench-worker-client (C, gRPC core; it records when every
  chunk arrives), then `images` image requests one after another (0.5 s apart, 8 new tokens each);
- the longest time any stream went without a chunk while an image request was being encoded and prefilled
  (from its submit to its first token), against the longest gap in a steady window of the same length before
  the first image (at most 1 s); the streams' decode rate in both; the image's time to first token under
  load.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import numpy as np

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "worker"))
import wk_client as wc  # noqa: E402

MODES = {"inline": 0, "enc1": 1, "enc2": 2}


def image_request(pb2, info, grid, seed, head_len=24, max_new=8):
    rng = np.random.default_rng(seed)
    ntok = grid * grid // 4
    head = [int(x) for x in rng.integers(10, 8000, size=head_len)]
    ids = head + [info.image_token_id] * ntok + [int(x) for x in rng.integers(10, 8000, size=8)]
    px = rng.standard_normal((grid * grid, 1176)).astype(np.float32)
    item = pb2.MultimodalItem(modality=pb2.IMAGE, pixel_values=wc.tensor(pb2, px, "BF16"), grid_thw=[1, grid, grid],
                              placeholders=[pb2.PlaceholderRange(offset=head_len, length=ntok)])
    return wc.make_request(pb2, "img-" + uuid.uuid4().hex[:8], ids, max_new=max_new, media=[item]), len(ids)


def text_request(pb2, n, seed, max_new=1):
    ids = [int(x) for x in np.random.default_rng(seed).integers(10, 8000, size=n)]
    return wc.make_request(pb2, "txt-" + uuid.uuid4().hex[:8], ids, max_new=max_new)


def max_gap(stamps, t0, t1):
    worst = 0.0
    for s in stamps.values():
        inside = [t0] + [t for t in s if t0 < t < t1] + [t1]
        worst = max(worst, max(b - a for a, b in zip(inside, inside[1:])))
    return worst


def tokens_in(rows, t0, t1):
    return sum(n for _, t, n in rows if t0 < t < t1)


def run_mode(args, pb2, mode, rep, tmp):
    argv = [os.path.join(args.build, "bin", "mmgw-worker"), "--model", args.model, "--threads", str(args.threads),
            "--encode-threads", str(MODES[mode]), "--step-tokens", "256", "--cache-pages", "8192"]
    w = wc.WorkerProc(argv).wait_ready()
    try:
        info = w.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        seed = 1000 * rep + 1
        # warm-up: cache pages touched, the vision scratch grown to this image size
        wc.generate(w.stub, text_request(pb2, 64, seed))
        req, n = image_request(pb2, info, args.grid, seed)
        wc.generate(w.stub, req)
        t_txt, t_img = [], []
        for k in range(3):
            t_txt.append(wc.generate(w.stub, text_request(pb2, n, seed + 10 + k)).first_token_s)
            req, _ = image_request(pb2, info, args.grid, seed + 20 + k)
            t_img.append(wc.generate(w.stub, req).first_token_s)
        encode_alone = statistics.median(t_img) - statistics.median(t_txt)

        stamps_path = os.path.join(tmp, "stamps-%s-%d.txt" % (mode, rep))
        client = subprocess.Popen([os.path.join(args.build, "bin", "bench-worker-client"), "--port", str(w.port),
                                   "--streams", str(args.streams), "--prompt", "64", "--gen", "20000", "--seed",
                                   str(seed), "--stamps", stamps_path], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        end = time.time() + 60
        while time.time() < end and w.stub.Load(pb2.LoadRequest()).running_requests < args.streams:
            time.sleep(0.01)
        time.sleep(1.5)  # past the streams' prefill: the steady window below is plain decoding
        windows, ttft = [], []
        for k in range(args.images):
            req, _ = image_request(pb2, info, args.grid, seed + 100 + k)
            t0 = time.monotonic()
            r = wc.generate(w.stub, req)
            if r.first_token_s is None:
                raise RuntimeError("image request failed under load: %s %s" % (r.code, r.details))
            windows.append((t0, t0 + r.first_token_s))
            ttft.append(r.first_token_s)
            time.sleep(0.5)
        for i in range(args.streams):
            w.stub.Abort(pb2.AbortRequest(request_id="bc-%d-%d" % (seed, i)), timeout=30)
        client.wait(120)
        rows = []
        with open(stamps_path) as f:
            for line in f:
                a, b, c = line.split()
                rows.append((int(a), float(b), int(c)))
        stamps = {}
        for i, t, _ in rows:
            stamps.setdefault(i, []).append(t)
        win = min(1.0, statistics.median(b - a for a, b in windows))
        s1 = windows[0][0] - 0.1
        steady = (s1 - win, s1)
        gaps = [max_gap(stamps, a, b) for a, b in windows]
        rate_img = sum(tokens_in(rows, a, b) for a, b in windows) / sum(b - a for a, b in windows)
        return {
            "encode_alone": encode_alone,
            "ttft_load": statistics.median(ttft),
            "gap_img_med": statistics.median(gaps),
            "gap_img_max": max(gaps),
            "gap_steady": max_gap(stamps, *steady),
            "rate_steady": tokens_in(rows, *steady) / (steady[1] - steady[0]),
            "rate_img": rate_img,
        }
    finally:
        w.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--grid", type=int, default=64)
    ap.add_argument("--images", type=int, default=3)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--modes", default="inline,enc1")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="mmgw-bmedia-")
    if not args.model:
        gm = os.path.join(SRC, "..", "shared", "testdata", "m3-tiny-a")
        if os.path.exists(os.path.join(gm, "config.json")):
            args.model = gm
        else:
            args.model = os.path.join(tmp, "demo")
            subprocess.run([os.path.join(args.build, "bin", "mmgw-mkdemo"), "--out", args.model], check=True)
    pb2, _ = wc.gen_stubs()
    modes = args.modes.split(",")
    res = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in modes:  # alternated, so that the machine's load drifts over both alike
            r = run_mode(args, pb2, mode, rep, tmp)
            res[mode].append(r)
            print("rep %d %-6s encode alone %5.0f ms | under load: image TTFT %5.0f ms, longest stream gap during "
                  "images %5.1f ms (max %5.1f), steady %5.1f ms; decode %5.0f tok/s steady, %5.0f during images" %
                  (rep, mode, 1e3 * r["encode_alone"], 1e3 * r["ttft_load"], 1e3 * r["gap_img_med"],
                   1e3 * r["gap_img_max"], 1e3 * r["gap_steady"], r["rate_steady"], r["rate_img"]), flush=True)
    print("\n| mode | encode alone ms | image TTFT under load ms | longest stream gap while an image is encoded ms "
          "(median / max) | longest gap, steady decode ms | decode tok/s steady / during images |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        rs = res[mode]

        def med(k):
            return statistics.median(r[k] for r in rs)

        print("| %s (--encode-threads %d) | %.0f | %.0f | %.1f / %.1f | %.1f | %.0f / %.0f |" %
              (mode, MODES[mode], 1e3 * med("encode_alone"), 1e3 * med("ttft_load"), 1e3 * med("gap_img_med"),
               1e3 * max(r["gap_img_max"] for r in rs), 1e3 * med("gap_steady"), med("rate_steady"), med("rate_img")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
