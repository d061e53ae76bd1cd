#!/usr/bin/python3
"""mmgw-mkdemo output loads and runs through mmgw-run, with and without a tokenizer.json: vocabulary and
media token ids come from the tokenizer, outputs are finite and not degenerate, and a seed reproduces the
checkpoint byte for byte."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_ref import load_safetensors, save_safetensors  # noqa: E402

build = os.environ.get("MMGW_BUILD", "build")
mk, run = os.path.join(build, "bin", "mmgw-mkdemo"), os.path.join(build, "bin", "mmgw-run")
fail = 0
with tempfile.TemporaryDirectory() as tmp:
    # a small tokenizer.json of the HF layout with M3's marker tokens at unusual ids
    vocab = {f"t{i}": i for i in range(500)}
    added = [{"id": 500 + i, "content": c, "special": True}
             for i, c in enumerate(["]~!b[", "]~b]", "[e~[", "]<]image[>[", "]<]video[>[", "]<]start of image[>[",
                                    "]<]end of image[>["])]
    tok = os.path.join(tmp, "tokenizer.json")
    json.dump({"model": {"type": "BPE", "vocab": vocab}, "added_tokens": added}, open(tok, "w"))
    variants = {"with_tokenizer": ["--tokenizer", tok], "defaults": []}
    data = os.environ.get("MMGW_TESTDATA", "")
    if os.path.exists(os.path.join(data, "m3-tiny-a", "tokenizer.json")):
        variants["tiny_tokenizer"] = ["--tokenizer", os.path.join(data, "m3-tiny-a", "tokenizer.json")]
    for name, extra in variants.items():
        d = os.path.join(tmp, name)
        r = subprocess.run([mk, "--out", d, "--seed", "3"] + extra, capture_output=True, text=True)
        if r.returncode:
            print(name, "mkdemo failed:", r.stderr)
            fail = 1
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))
        V = cfg["text_config"]["vocab_size"]
        if name == "with_tokenizer" and (V != 507 or cfg["image_token_index"] != 503 or cfg["video_token_index"] != 504
                                         or cfg["text_config"]["eos_token_id"] != 502):
            print(name, "ids not taken from the tokenizer:", V, cfg["image_token_index"], cfg["video_token_index"])
            fail = 1
        img = cfg["image_token_index"]
        rng = np.random.default_rng(1)
        ids = np.concatenate([rng.integers(0, 400, 20), [img] * 4, rng.integers(0, 400, 30)]).astype(np.int32)
        ein, eout = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        save_safetensors(ein, {"c/ids": ("I32", ids), "c/greedy": ("I32", np.zeros(12, np.int32)),
                               "c/pixel_values": ("F32", rng.normal(size=(16, 1176)).astype(np.float32)),
                               "c/image_grid_thw": ("I64", np.array([[1, 4, 4]], np.int64))})
        r = subprocess.run([run, "--model", d, "--eval", ein, "--out", eout], capture_output=True, text=True)
        if r.returncode:
            print(name, "mmgw-run failed:", r.stderr)
            fail = 1
            continue
        o = load_safetensors(eout)
        lg = o["c/logits_last8"].astype(np.float64)
        p = np.exp(lg - lg.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        ent = float((-(p * np.log(p + 1e-30)).sum(1)).mean())
        distinct = len(set(o["c/greedy"].tolist()))
        ok = np.isfinite(lg).all() and lg.std(1).min() > 0.5 and 0.5 < ent < 0.95 * np.log(V) and distinct >= 3
        print(f"{name}: vocab {V}, logit std {lg.std(1).mean():.2f}, entropy {ent:.2f} (uniform {np.log(V):.2f}), "
              f"greedy {o['c/greedy'].tolist()} -> {'ok' if ok else 'DEGENERATE'}")
        fail |= not ok
    # the seed reproduces the weights
    d2 = os.path.join(tmp, "again")
    subprocess.run([mk, "--out", d2, "--seed", "3"], check=True, capture_output=True)
    same = open(os.path.join(d2, "model.safetensors"), "rb").read() == \
        open(os.path.join(tmp, "defaults", "model.safetensors"), "rb").read()
    print("same seed, same bytes:", same)
    fail |= not same
    # refusals: a tokenizer without the media tokens, an unknown size
    json.dump({"model": {"vocab": vocab}, "added_tokens": []}, open(tok, "w"))
    bad = [[mk, "--out", os.path.join(tmp, "x"), "--tokenizer", tok], [mk, "--out", os.path.join(tmp, "y"), "--set", "nope=1"]]
    for cmd in bad:
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode == 0 or not r.stderr.strip():
            print("not refused:", cmd)
            fail = 1
sys.exit(1 if fail else 0)
