#!/usr/bin/python3
"""Compare an mmgw-run output file with a reference (goldens) file.

usage: compare_eval.py REF.safetensors OUT.safetensors [--logit-tol 2e-3] [--argmax-min 1.0]
                       [--greedy-prefix N] [--no-sel] [--cases a,b]

Checks per case: logits_last8 within tol as |d| / (1 + |ref|), argmax agreement, greedy tokens, and the
block selections of sel_layer<K> as sets per row. Exit 0 when all hold, 1 otherwise."""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from m3_ref import load_safetensors as load  # noqa: E402  (test_goldens.py and the CUDA test import it here)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ref")
    ap.add_argument("out")
    ap.add_argument("--logit-tol", type=float, default=2e-3)
    ap.add_argument("--argmax-min", type=float, default=1.0, help="fraction of argmax positions that must agree")
    ap.add_argument("--greedy-prefix", type=int, default=-1, help="greedy tokens that must agree (-1 = all)")
    ap.add_argument("--no-sel", action="store_true")
    ap.add_argument("--cases", default="")
    a = ap.parse_args()
    ref, out = load(a.ref), load(a.out)
    cases = sorted({k[:-4] for k in ref if k.endswith("/ids")})
    if a.cases:
        cases = [c for c in cases if c in a.cases.split(",")]
    ok = True
    for c in cases:
        msgs = []
        lr, lo = ref[c + "/logits_last8"].astype(np.float64), out.get(c + "/logits_last8")
        if lo is None or lo.shape != lr.shape:
            msgs.append("logits_last8 missing or mis-shaped")
            rel = float("inf")
        else:
            rel = float(np.max(np.abs(lr - lo) / (1 + np.abs(lr))))
            if rel > a.logit_tol:
                msgs.append(f"logits rel {rel:.3g} > {a.logit_tol}")
        am_r, am_o = ref[c + "/argmax"], out.get(c + "/argmax")
        agree = float((am_r == am_o).mean()) if am_o is not None and am_o.shape == am_r.shape else 0.0
        if agree < a.argmax_min:
            msgs.append(f"argmax agree {agree:.4f} < {a.argmax_min}")
        gr, go = ref[c + "/greedy"], out.get(c + "/greedy")
        n = len(gr) if a.greedy_prefix < 0 else min(a.greedy_prefix, len(gr))
        gsame = go is not None and len(go) == len(gr) and bool((gr[:n] == go[:n]).all())
        if not gsame:
            msgs.append(f"greedy {list(go) if go is not None else None} != {list(gr)}")
        sel_rows = None
        if not a.no_sel:
            for k in ref:
                if k.startswith(c + "/sel_layer"):
                    so = out.get(k)
                    if so is None or so.shape != ref[k].shape:
                        msgs.append(f"{k} missing or mis-shaped")
                        continue
                    same = (np.sort(ref[k], axis=-1) == np.sort(so, axis=-1)).all(axis=-1)
                    sel_rows = float(same.mean())
                    if sel_rows < 1.0:
                        msgs.append(f"{k}: {int((~same).sum())} rows differ")
        print(f"{c:14s} logits rel {rel:.2e}  argmax {agree:.4f}  greedy {'ok' if gsame else 'DIFF'}  "
              f"sel {sel_rows if sel_rows is not None else '-'}  {'; '.join(msgs) if msgs else 'PASS'}")
        ok &= not msgs
    if not cases:
        print("no cases")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
