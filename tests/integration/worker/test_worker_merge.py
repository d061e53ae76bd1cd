#!/usr/bin/python3
"""The worker checks placeholder runs against its checkpoint's spatial merge (python3-grpcio, stubs generated
from proto/worker.proto).

M3 and Qwen2-VL merge 2 x 2 patches into one token, so every golden checkpoint has a merge of 4 patches per
placeholder token. For each of `mmgw-mkdemo --set merge=1` and `--set merge=3` (vision_config
spatial_merge_size 1 and 3) mmgw-worker must:

- take an image and a video whose runs hold t*h*w/merge^2 tokens, and answer the same greedy tokens as
  mmgw-run on the same input;
- refuse runs sized for M3's merge of 4 (h*w/4 tokens) with INVALID_ARGUMENT naming the merge it wants.

A text-only checkpoint (`--set no_vision=1`) refuses any media item with INVALID_ARGUMENT at decode.
Only 127.0.0.1 is contacted. Exit 0 pass, 1 fail, 77 skipped.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import uuid

import grpc
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk_client as wc  # noqa: E402

FAILS = []
ROW_LEN = 3 * 2 * 14 * 14  # mmgw-mkdemo's patch rows: channels x temporal patch x patch x patch


def check(cond, what):
    print(("  ok   " if cond else "  FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)
    return cond


def text(n, seed):
    return [int(x) for x in np.random.default_rng(seed).integers(10, 8000, size=n)]


def mm_case(info, merge, seed):
    """ids and media of one prompt: text, an image of grid (1, 2m, 3m), text, a video of grid (2, 2m, 2m), text.
    Returns ids, image pixels, video pixels (F32 rounded to BF16, what the worker computes on) and grids."""
    rng = np.random.default_rng(seed)
    gi, gv = (1, 2 * merge, 3 * merge), (2, 2 * merge, 2 * merge)
    mm = merge * merge
    ids = text(12, seed) + [info.image_token_id] * (gi[0] * gi[1] * gi[2] // mm) + text(5, seed + 1)
    for _ in range(gv[0]):  # one run per temporal group
        ids += text(2, seed + 2) + [info.video_token_id] * (gv[1] * gv[2] // mm)
    ids += text(4, seed + 3)
    pi = wc.bf16_round(rng.standard_normal((gi[0] * gi[1] * gi[2], ROW_LEN)).astype(np.float32))
    pv = wc.bf16_round(rng.standard_normal((gv[0] * gv[1] * gv[2], ROW_LEN)).astype(np.float32))
    return ids, pi, pv, gi, gv


def request(pb2, info, ids, pi, pv, gi, gv, max_new):
    media = wc.media_items(pb2, ids, pi, np.array([gi]), pb2.IMAGE, info.image_token_id, "BF16")
    media += wc.media_items(pb2, ids, pv, np.array([gv]), pb2.VIDEO, info.video_token_id, "BF16")
    return wc.make_request(pb2, "m-%s" % uuid.uuid4().hex[:8], ids, max_new=max_new, media=media)


def run_mmgw_run(build, model, ids, pi, pv, gi, gv, n, tmp):
    exe = os.path.join(build, "bin", "mmgw-run")
    ev, out = os.path.join(tmp, "merge_eval.safetensors"), os.path.join(tmp, "merge_out.safetensors")
    wc.write_safetensors(ev, {"c/ids": np.array(ids, dtype=np.int32), "c/greedy": np.zeros(n, dtype=np.int32),
                              "c/pixel_values": pi, "c/image_grid_thw": np.array([gi], dtype=np.int64),
                              "c/pixel_values_videos": pv, "c/video_grid_thw": np.array([gv], dtype=np.int64)})
    p = subprocess.run([exe, "--model", model, "--eval", ev, "--out", out, "--threads", "2"], capture_output=True,
                       text=True)
    if p.returncode != 0:
        return None, "mmgw-run failed (%d): %s" % (p.returncode, p.stderr[-2000:])
    return [int(x) for x in wc.SafeTensors(out).get("c/greedy")], None


def suite_merge(args, pb2, merge, tmp):
    print("a checkpoint with spatial_merge_size %d (%d patches per token)" % (merge, merge * merge), flush=True)
    model = os.path.join(tmp, "merge%d" % merge)
    subprocess.run([args.mkdemo, "--out", model, "--set", "merge=%d" % merge], check=True, capture_output=True)
    w = wc.WorkerProc([args.binary, "--model", model, "--threads", "2", "--cache-pages", "256"]).wait_ready()
    try:
        info = w.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        check(info.merge_factor == merge * merge, "ModelInfo merge_factor %d" % info.merge_factor)
        case = mm_case(info, merge, 40 + merge)
        r = wc.generate(w.stub, request(pb2, info, *case, max_new=6), timeout=300)
        check(r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == 6,
              "image and video with runs of t*h*w/%d tokens: OK, 6 tokens (%s %s)" % (merge * merge, r.code,
                                                                                      r.details))
        want, why = run_mmgw_run(args.build, model, *case, 6, tmp)
        if check(want is not None, "mmgw-run on the same input%s" % (" (%s)" % why if why else "")):
            check(r.tokens.get(0) == want, "worker %s == mmgw-run %s" % (r.tokens.get(0), want))
        if merge != 2:
            # runs sized for a merge of 4 patches per token (what M3's plugin sends): refused, naming the merge
            ids = text(12, 7)
            grid = (1, 4 * merge, 4 * merge) if merge > 1 else (1, 4, 4)
            ids += [info.image_token_id] * (grid[0] * grid[1] * grid[2] // 4) + text(3, 8)
            px = np.zeros((grid[0] * grid[1] * grid[2], ROW_LEN), dtype=np.float32)
            media = wc.media_items(pb2, ids, px, np.array([grid]), pb2.IMAGE, info.image_token_id)
            r = wc.generate(w.stub, wc.make_request(pb2, "w-%s" % uuid.uuid4().hex[:8], ids, max_new=2, media=media),
                            timeout=120)
            check(r.code == grpc.StatusCode.INVALID_ARGUMENT and "one token per %d patches" % (merge * merge)
                  in r.details, "runs of h*w/4 tokens -> INVALID_ARGUMENT naming the merge (%s %s)" %
                  (r.code, r.details))
    except Exception:
        print(w.log_text())
        raise
    finally:
        w.stop()


def suite_no_vision(args, pb2, tmp):
    print("a text-only checkpoint refuses media at decode", flush=True)
    model = os.path.join(tmp, "novision")
    subprocess.run([args.mkdemo, "--out", model, "--set", "no_vision=1"], check=True, capture_output=True)
    w = wc.WorkerProc([args.binary, "--model", model, "--threads", "2", "--cache-pages", "256"]).wait_ready()
    try:
        info = w.stub.ModelInfo(pb2.ModelInfoRequest(), timeout=30)
        check(info.merge_factor == 0, "ModelInfo merge_factor %d (no vision tower)" % info.merge_factor)
        ids, pi, pv, gi, gv = mm_case(info, 2, 60)
        r = wc.generate(w.stub, request(pb2, info, ids, pi, pv, gi, gv, max_new=2), timeout=120)
        check(r.code == grpc.StatusCode.INVALID_ARGUMENT and "no vision tower" in r.details,
              "media -> INVALID_ARGUMENT (%s %s)" % (r.code, r.details))
        r = wc.generate(w.stub, wc.make_request(pb2, "t-%s" % uuid.uuid4().hex[:8], text(20, 61), max_new=3))
        check(r.code == grpc.StatusCode.OK and len(r.tokens.get(0, [])) == 3, "text still served (%s)" % r.code)
    finally:
        w.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary")
    args = ap.parse_args()
    args.build = os.environ.get("MMGW_BUILD", os.path.join(wc.SRC, "build"))
    args.binary = args.binary or os.path.join(args.build, "bin", "mmgw-worker")
    args.mkdemo = os.path.join(args.build, "bin", "mmgw-mkdemo")
    for exe in (args.binary, args.mkdemo, os.path.join(args.build, "bin", "mmgw-run")):
        if not os.path.exists(exe):
            print("SKIP: %s is not built" % exe)
            return 77
    tmp = tempfile.mkdtemp(prefix="mmgw-merge-")
    pb2, _ = wc.gen_stubs()
    for merge in (1, 3, 2):
        suite_merge(args, pb2, merge, tmp)
    suite_no_vision(args, pb2, tmp)
    if FAILS:
        print("FAILED %d checks:\n  %s" % (len(FAILS), "\n  ".join(FAILS)))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
