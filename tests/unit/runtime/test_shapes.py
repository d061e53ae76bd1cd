#!/usr/bin/python3
"""mmgw-run on random checkpoints of unusual shapes (written by mmgw-mkdemo) against the float64 NumPy model
m3_ref.py: GQA 4:1 with index heads != KV heads, index dim below the rotated width, two local blocks, odd
block sizes, MoE with 3-of-5 experts and no shared expert, dense/MSA layer mixes, small vision towers with
temporal patch 1 and 2. Needs only the build (MMGW_BUILD)."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_ref import M3Ref, load_safetensors, save_safetensors  # noqa: E402

BUILD = os.environ.get("MMGW_BUILD", "build")
SHAPES = {
    "gqa4_idx_lt_rot_local2": ["hidden=64", "layers=3", "heads=4", "kv_heads=1", "head_dim=48", "rot_dim=24",
                               "idx_heads=1", "idx_dim=16", "block=8", "topk_blocks=3", "local_blocks=2",
                               "experts=5", "topk_experts=3", "inter=40", "dense_inter=96", "shared_inter=0",
                               "attn_pattern=sds", "mlp_pattern=mdm", "vis_hidden=48", "vis_heads=2",
                               "vis_inter=64", "vis_layers=1", "patch=6", "temporal=2", "proj_hidden=64",
                               "vocab=700", "image_token=600", "video_token=601", "eos_token=2"],
    "idx_heads_ne_kv_block5": ["hidden=48", "layers=2", "heads=6", "kv_heads=3", "head_dim=20", "rot_dim=12",
                               "idx_heads=2", "idx_dim=20", "block=5", "topk_blocks=2", "local_blocks=1",
                               "experts=4", "topk_experts=2", "inter=24", "shared_inter=32", "routed_scale=1.5",
                               "attn_pattern=ss", "mlp_pattern=mm", "vis_hidden=40", "vis_heads=4", "vis_inter=48",
                               "vis_layers=2", "patch=4", "temporal=1", "proj_hidden=56", "vocab=500",
                               "image_token=400", "video_token=401", "dtype=F32"],
    "m3_attention_dims": ["hidden=96", "layers=2", "heads=4", "kv_heads=2", "head_dim=128", "rot_dim=64",
                          "idx_heads=2", "idx_dim=128", "block=32", "topk_blocks=3", "attn_pattern=ds",
                          "mlp_pattern=dm", "experts=4", "topk_experts=2", "inter=32", "dense_inter=64",
                          "shared_inter=32", "no_vision=1", "vocab=400", "image_token=300", "video_token=301"],
    "full_rope_dense_first": ["hidden=32", "layers=3", "heads=2", "kv_heads=2", "head_dim=16", "rot_dim=16",
                              "idx_heads=2", "idx_dim=8", "block=4", "topk_blocks=5", "attn_pattern=dds",
                              "mlp_pattern=ddm", "experts=3", "topk_experts=1", "inter=16", "dense_inter=40",
                              "shared_inter=8", "no_vision=1", "vocab=300", "image_token=200", "video_token=201",
                              "dtype=F16"],
}


def cases_for(ref, rng):
    """A text case spanning several blocks and, with vision, one with an image and a video."""
    V = ref.V
    text = rng.integers(3, min(V, 200), 70 if ref.block < 32 else 150).astype(np.int32)
    cases = {"text": {"ids": text, "greedy": np.zeros(6, np.int32)}}
    if ref.vis is not None:
        v = ref.vis
        row = 3 * v["temporal_patch_size"] * v["patch_size"] ** 2
        img_thw, vid_thw = (1, 4, 6), (2, 2, 4)
        n_img, n_vid = 24 // 4, 16 // 4
        ids = list(rng.integers(3, 200, 9)) + [ref.img_tok] * n_img + list(rng.integers(3, 200, 7)) + \
            [ref.vid_tok] * n_vid + list(rng.integers(3, 200, 5))
        cases["media"] = {"ids": np.array(ids, np.int32), "greedy": np.zeros(4, np.int32),
                          "pixel_values": rng.normal(size=(24, row)).astype(np.float32),
                          "image_grid_thw": np.array([img_thw], np.int64),
                          "pixel_values_videos": rng.normal(size=(16, row)).astype(np.float32),
                          "video_grid_thw": np.array([vid_thw], np.int64)}
    return cases


def main():
    mkdemo, run = os.path.join(BUILD, "bin", "mmgw-mkdemo"), os.path.join(BUILD, "bin", "mmgw-run")
    for b in (mkdemo, run):
        if not os.path.exists(b):
            print(f"{b} is not built")
            return 1
    failures = 0
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as tmp:
        for name, sets in SHAPES.items():
            d = os.path.join(tmp, name)
            cmd = [mkdemo, "--out", d, "--seed", "11"]
            for s in sets:
                cmd += ["--set", s]
            subprocess.run(cmd, check=True, capture_output=True)
            ref = M3Ref(d)
            cases = cases_for(ref, rng)
            tens = {}
            for c, fields in cases.items():
                for k, a in fields.items():
                    tens[f"{c}/{k}"] = ({np.int32: "I32", np.int64: "I64", np.float32: "F32"}[a.dtype.type], a)
            ein, eout = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
            save_safetensors(ein, tens)
            r = subprocess.run([run, "--model", d, "--eval", ein, "--out", eout, "--threads", "2", "--chunk", "13"],
                               capture_output=True, text=True)
            if r.returncode:
                print(f"{name}: mmgw-run failed: {r.stderr.strip()}")
                failures += 1
                continue
            out = load_safetensors(eout)
            for c, fields in cases.items():
                imgs = [(fields["pixel_values"], tuple(fields["image_grid_thw"][0]))] if "pixel_values" in fields else []
                vids = [(fields["pixel_values_videos"], tuple(fields["video_grid_thw"][0]))] if "pixel_values_videos" in fields else []
                o = ref.run_case(fields["ids"], imgs, vids, n_gen=len(fields["greedy"]))
                L = len(fields["ids"])
                lr = o["logits"][-8:]
                rel = float(np.max(np.abs(lr - out[f"{c}/logits_last8"]) / (1 + np.abs(lr))))
                clear = o["argmax_margin"] > 1e-3
                am_ok = bool((out[f"{c}/argmax"][clear] == o["argmax"][clear]).all())
                g_ok = True
                for i, (t, m) in enumerate(zip(o["greedy"], o["margins"])):
                    if out[f"{c}/greedy"][i] != t:
                        g_ok = False
                        break
                    if m < 1e-3:
                        break  # a near tie: later tokens may legitimately differ
                sel_ok, nrows = True, 0
                if o["sel"] is not None:
                    key = [k for k in out if k.startswith(f"{c}/sel_layer")]
                    so = out[key[0]] if key else None
                    if so is None or so.shape != o["sel"].shape:
                        sel_ok = False
                    else:
                        rows = o["sel_gap"] > 1e-6
                        nrows = int(rows.sum())
                        same = (np.sort(so, -1) == np.sort(o["sel"], -1)).all(-1)
                        sel_ok = bool(same[rows].all())
                ok = rel < 1e-4 and am_ok and g_ok and sel_ok
                failures += not ok
                print(f"{name:26s} {c:6s} L={L:3d} logits rel {rel:.2e} argmax {'ok' if am_ok else 'DIFF'} "
                      f"greedy {'ok' if g_ok else 'DIFF'} sel {'ok' if sel_ok else 'DIFF'} ({nrows} rows) "
                      f"{'PASS' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
