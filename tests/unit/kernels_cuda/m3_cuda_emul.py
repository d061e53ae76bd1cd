#!/usr/bin/python3
"""The CUDA backend's arithmetic, emulated in float64 NumPy on top of the runtime's independent reference model
(tests/unit/runtime/m3_ref.py, through its precision hooks act/stored and its rope_tables): the same model,
with the roundings the CUDA backend makes on purpose:

  both precisions:  K, V and index keys stored bf16 (the caches), attention queries and outputs bf16,
                    RoPE angles in fp32 (as the host tables are built)
  --precision bf16: in addition every product's input rounded to bf16 except the MoE router and the MSA
                    index projections (kept fp32), and the routed experts' gathered rows and activations

If the CUDA outputs match this emulation far more closely than they match the fp64 goldens, the differences
from the goldens are the intended storage precision, not a bug. Used by test_cuda_goldens.py.

usage: m3_cuda_emul.py MODEL_DIR GOLDENS.safetensors CUDA_OUT.safetensors [--precision fp32|bf16] [--cases a,b]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
import m3_ref  # noqa: E402


def bf16(x):
    """Round to the nearest bf16 (ties to even), returned as float64."""
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


class CudaEmul(m3_ref.M3Ref):
    def __init__(self, model_dir, precision):
        super().__init__(model_dir)
        self.bf = precision == "bf16"

    def act(self, x):
        return bf16(x) if self.bf else x

    def stored(self, x):
        return bf16(x)

    def rope_tables(self, pos):
        # the host builds the tables as kn_rope_text_table: fp32 inverse frequency and fp32 angle
        e = (np.arange(0, self.rot, 2, dtype=np.float32) / np.float32(self.rot)).astype(np.float64)
        inv = (1.0 / np.power(np.float64(np.float32(self.theta)), e)).astype(np.float32)
        f = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float32).astype(np.float64)
        emb = np.concatenate([f, f], -1)
        return np.cos(emb), np.sin(emb)

    def prompt_logits(self, ids, images=(), videos=()):
        return self.forward(self.embed(ids, images, videos))[0]


def media(g, c):
    """(images, videos) of golden case c: lists of (patch rows, (t, h, w))."""
    out = []
    for rows, grids in (("pixel_values", "image_grid_thw"), ("pixel_values_videos", "video_grid_thw")):
        items, off = [], 0
        if f"{c}/{rows}" in g:
            for t, h, w in g[f"{c}/{grids}"].astype(np.int64):
                n = int(t * h * w)
                items.append((g[f"{c}/{rows}"][off : off + n], (int(t), int(h), int(w))))
                off += n
        out.append(items)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("goldens")
    ap.add_argument("out")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--cases", default="")
    a = ap.parse_args()
    g = m3_ref.load_safetensors(a.goldens)
    o = m3_ref.load_safetensors(a.out)
    em = CudaEmul(a.model, a.precision)
    cases = sorted({k[:-4] for k in g if k.endswith("/ids")})
    if a.cases:
        cases = [c for c in cases if c in a.cases.split(",")]
    for c in cases:
        ids = [int(i) for i in g[c + "/ids"]]
        imgs, vids = media(g, c)
        lg = em.prompt_logits(ids, imgs, vids)
        lo = o[c + "/logits_last8"].astype(np.float64)
        lr = g[c + "/logits_last8"].astype(np.float64)
        e_emul = np.max(np.abs(lo - lg[-8:]) / (1 + np.abs(lg[-8:])))
        e_gold = np.max(np.abs(lo - lr) / (1 + np.abs(lr)))
        e_model = np.max(np.abs(lg[-8:] - lr) / (1 + np.abs(lr)))
        am = lg.argmax(-1)
        agree = float((am == o[c + "/argmax"]).mean())
        print(f"{c:12s} cuda vs emulation {e_emul:.2e}  cuda vs goldens {e_gold:.2e}  emulation vs goldens "
              f"{e_model:.2e}  argmax vs emulation {agree:.4f}", flush=True)


if __name__ == "__main__":
    main()
