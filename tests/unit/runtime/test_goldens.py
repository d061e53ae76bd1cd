#!/usr/bin/python3
"""mmgw-run on the golden cases of m3-tiny-a (../shared/testdata): all cases in one batch, and one case at a
time with a small prefill chunk; both must match the goldens (greedy and every argmax equal, logits within
2e-3 relative, block selections equal) and give each other the same tokens."""
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_eval import load  # noqa: E402

data = os.environ.get("MMGW_TESTDATA", "")
model = os.path.join(data, "m3-tiny-a")
if not os.path.isdir(model):
    print("SKIP: golden data not found (../shared/testdata from the repo root; set MMGW_TESTDATA): a plain clone has none")
    sys.exit(77)
build = os.environ.get("MMGW_BUILD", "build")
run = os.path.join(build, "bin", "mmgw-run")
gold = os.path.join(model, "goldens.safetensors")
cmp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compare_eval.py")
fail = 0
with tempfile.TemporaryDirectory() as tmp:
    outs = {}
    for label, extra in (("batched", []), ("sequential-chunk7", ["--sequential", "--chunk", "7"])):
        out = os.path.join(tmp, label + ".safetensors")
        r = subprocess.run([run, "--model", model, "--eval", gold, "--out", out, "--threads", "2"] + extra,
                           capture_output=True, text=True)
        print(f"== {label}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ''}")
        if r.returncode:
            fail = 1
            continue
        fail |= subprocess.run(["/usr/bin/python3", cmp, gold, out]).returncode != 0
        outs[label] = load(out)
    if len(outs) == 2:
        a, b = outs["batched"], outs["sequential-chunk7"]
        for k in sorted(a):
            if a[k].dtype.kind == "i" and not k.endswith("logits_last8"):
                if not np.array_equal(np.sort(a[k], -1), np.sort(b[k], -1)):
                    print(f"batched and sequential differ in {k}")
                    fail = 1
            elif float(np.max(np.abs(a[k] - b[k]))) > 1e-4:
                print(f"batched and sequential logits differ in {k}: {np.max(np.abs(a[k] - b[k]))}")
                fail = 1
sys.exit(fail)
