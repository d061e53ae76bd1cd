#!/usr/bin/python3
"""Compare the plugins' smart_resize and sample_frames with reference implementations transcribed from the
public code they follow (cited per function), over edge cases and thousands of random sizes.

usage: check_vision_rules.py PATH/TO/vision_rules_tool
"""
import math, random, subprocess, sys

AR_MAX = 200


def round_by(x, f):
    return round(x / f) * f  # Python round: half to even, as the references use


# transformers minimax_m3_vl image/video processor smart_resize, and vLLM's vendored MiniMax-M3 processor
# (vllm/transformers_utils/processors/minimax_m3.py) for the long-side mode and the hard caps.
def m3_resize(kind, h, w, n, long_side):
    if max(h, w) / min(h, w) > AR_MAX:
        return None
    f = 28
    if long_side is not None:
        ls, ss = max(h, w), min(h, w)
        sh, sw = float(h), float(w)
        if ls > long_side:
            b = long_side / ls
            sh, sw = h * b, w * b
        elif ss < 112:
            b = 112 / ss
            sh, sw = h * b, w * b
        hb, wb = max(f, round_by(sh, f)), max(f, round_by(sw, f))
    else:
        mn, mx = 3136, (451584 if kind == 0 else 602112)
        hb, wb = max(f, round_by(h, f)), max(f, round_by(w, f))
        if hb * wb > mx:
            b = math.sqrt(h * w / mx)
            hb, wb = max(f, math.floor(h / b / f) * f), max(f, math.floor(w / b / f) * f)
        elif hb * wb < mn:
            b = math.sqrt(mn / (h * w))
            hb, wb = math.ceil(h * b / f) * f, math.ceil(w * b / f) * f
    if kind == 0 and hb * wb > 12845056:
        return None
    if kind == 1 and hb * wb * max(n, 1) > 301056000:  # ARCHITECTURE.md: refused, not downscaled
        return None
    return hb, wb


# transformers Qwen2-VL image processor smart_resize (min 56*56, max 28*28*1280) and qwen-vl-utils
# fetch_video's per-frame budget (QwenLM/Qwen2.5-VL qwen-vl-utils/src/qwen_vl_utils/vision_process.py).
def qwen_resize(kind, h, w, n, long_side):
    if max(h, w) / min(h, w) > AR_MAX:
        return None
    f = 28
    if kind == 0:
        mn, mx = 56 * 56, 28 * 28 * 1280
    else:
        mn = 128 * 28 * 28
        mx = max(min(768 * 28 * 28, 90316800 / max(n, 1) * 2), int(mn * 1.05))
    hb, wb = max(f, round_by(h, f)), max(f, round_by(w, f))
    if hb * wb > mx:
        b = math.sqrt(h * w / mx)
        hb, wb = max(f, math.floor(h / b / f) * f), max(f, math.floor(w / b / f) * f)
    elif hb * wb < mn:
        b = math.sqrt(mn / (h * w))
        hb, wb = math.ceil(h * b / f) * f, math.ceil(w * b / f) * f
    return hb, wb


# qwen-vl-utils smart_nframes + torch.linspace(0, total - 1, n).round(); M3 with fps 1.0, Qwen2-VL with 2.0.
# A one-frame clip keeps its frame (qwen-vl-utils would refuse it).
def sample(total, fps, target_fps):
    min_f = math.ceil(4 / 2) * 2
    max_f = math.floor(min(768, total) / 2) * 2
    n = total / fps * target_fps
    n = min(min(max(n, min_f), max_f), total)
    n = math.floor(n / 2) * 2
    if n < 2:
        n = total if total < 2 else 2
    if n == 1:
        return [0]
    # exact rational linspace, rounded half to even (what float64 numpy/torch give in every realistic case)
    from fractions import Fraction
    return [round(Fraction((total - 1) * i, n - 1)) for i in range(n)]


def main():
    tool = subprocess.Popen([sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    rng = random.Random(20261130)
    queries, expected = [], []

    def add_resize(plugin, kind, h, w, n, ls):
        ref = (m3_resize if plugin == "m3" else qwen_resize)(kind, h, w, n, ls)
        queries.append(f"R {plugin} {kind} {h} {w} {n} {'-' if ls is None else ls}")
        expected.append(("OK %d %d" % ref) if ref else "ERR")

    edge = [(1, 1), (1, 200), (1, 201), (200, 1), (201, 1), (11, 18), (28, 28), (14, 14), (27, 29), (42, 42),
            (70, 70), (98, 98), (672, 672), (673, 673), (360, 640), (720, 1280), (1080, 1920), (2000, 3000),
            (3584, 3584), (3585, 3585), (120, 1600), (4, 800), (5, 1000), (65535, 400), (10000, 10000),
            (30000, 150), (150, 30000), (8192, 8192), (1, 1), (2, 3)]
    sizes = edge + [(rng.randint(1, 8000), rng.randint(1, 8000)) for _ in range(3000)]
    sizes += [(rng.randint(1, 300), rng.randint(1, 300)) for _ in range(1000)]
    for h, w in sizes:
        for plugin in ("m3", "qwen2vl"):
            add_resize(plugin, 0, h, w, 1, None)
            n = rng.choice([1, 2, 4, 8, 64, 500, 768])
            add_resize(plugin, 1, h, w, n, None)
        ls = rng.choice([112, 448, 1024, 1344, 2048, 3584, 4000])
        add_resize("m3", 0, h, w, 1, ls)
        add_resize("m3", 1, h, w, rng.choice([4, 100, 768]), ls)

    def add_sample(plugin, total, fps):
        ref = sample(total, fps, 1.0 if plugin == "m3" else 2.0)
        queries.append(f"S {plugin} {total} {fps!r}")
        expected.append("OK %d %s" % (len(ref), " ".join(map(str, ref))))

    vids = [(120, 30.0), (60, 24.0), (80, 25.0), (1, 30.0), (2, 30.0), (3, 30.0), (5, 1.0), (7, 2.0),
            (100000, 29.97), (54000, 30.0), (1000, 0.5), (23, 23.976), (300, 29.97002997)]
    vids += [(rng.randint(1, 200000), rng.choice([23.976, 24.0, 25.0, 29.97, 30.0, 50.0, 59.94, 60.0, 1.0, 7.5]))
             for _ in range(600)]
    for total, fps in vids:
        for plugin in ("m3", "qwen2vl"):
            add_sample(plugin, total, fps)

    out, _ = tool.communicate("\n".join(queries) + "\n")
    got = out.splitlines()
    assert len(got) == len(queries), f"tool answered {len(got)} of {len(queries)} queries"
    bad = 0
    for q, e, g in zip(queries, expected, got):
        ok = g.startswith("ERR") if e == "ERR" else g == e
        if not ok:
            bad += 1
            if bad <= 20:
                print(f"MISMATCH {q}: plugin {g[:80]!r}, reference {e[:80]!r}")
    print(f"{len(queries) - bad} of {len(queries)} queries agree with the reference implementations")
    # the golden video (m3-tiny-a): 120 frames at 30 fps -> [0, 40, 79, 119]
    assert sample(120, 30.0, 1.0) == [0, 40, 79, 119]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
