#!/usr/bin/python3
"""mmgw-run --backend cuda on the tiny checkpoint against the reference goldens.

Exact mode (MMGW_CUDA_PRECISION=fp32: fp32 products, f32 caches): the runtime's own acceptance, unchanged:
every greedy token, every argmax, logits within 2e-3 (|d| / (1 + |ref|)), block selections equal. The goldens'
smallest greedy logit margin is 0.0087; fp32 arithmetic lands ~1e-6 from the fp64 reference, far inside it.

Production mode (bf16 products, bf16 K/V and index caches): this random-weight model is hypersensitive to
storage rounding (a 1e-7 relative change of its weights under the same roundings moves logits by ~5e-3, see
m3_cuda_emul.py), and the bf16 errors (~1e-2..1) exceed the margins, so greedy equality cannot be promised.
What is checked: the run succeeds, and argmax agreement with the goldens stays >= 0.80 on every case (a wrong
kernel or layout gives chance agreement, ~1e-4 for 8199 tokens).

Skips (77) without a GPU. Needs MMGW_TESTDATA and MMGW_BUILD (CTest sets both)."""
import os
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "runtime"))
import numpy as np  # noqa: E402
from compare_eval import load  # noqa: E402

data = os.environ.get("MMGW_TESTDATA", "")
build = os.environ.get("MMGW_BUILD", "")
model = os.path.join(data, "m3-tiny-a")
gold = os.path.join(model, "goldens.safetensors")
if not os.path.isfile(gold):
    print("SKIP: golden data not found (set MMGW_TESTDATA)")
    sys.exit(77)
run = os.path.join(build, "bin", "mmgw-run")
if not os.access(run, os.X_OK):
    print(f"SKIP: {run} not built")
    sys.exit(77)


def mmgw_run(out, env_extra):
    env = dict(os.environ, **env_extra)
    p = subprocess.run([run, "--model", model, "--eval", gold, "--out", out, "--backend", "cuda"], env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0 and "UNAVAILABLE" in p.stderr:
        print("SKIP: no CUDA device:", p.stderr.strip().splitlines()[-1])
        sys.exit(77)
    if p.returncode != 0:
        print(p.stderr)
        print(f"FAIL: mmgw-run exited {p.returncode}")
        sys.exit(1)


failed = False
with tempfile.TemporaryDirectory() as tmp:
    exact = os.path.join(tmp, "exact.safetensors")
    mmgw_run(exact, {"MMGW_CUDA_PRECISION": "fp32"})
    p = subprocess.run([sys.executable, os.path.join(here, "..", "runtime", "compare_eval.py"), gold, exact])
    failed |= p.returncode != 0
    print("exact mode:", "FAIL" if p.returncode else "PASS")

    prod = os.path.join(tmp, "bf16.safetensors")
    mmgw_run(prod, {})
    ref, out = load(gold), load(prod)
    for c in sorted({k[:-4] for k in ref if k.endswith("/ids")}):
        agree = float((ref[c + "/argmax"] == out[c + "/argmax"]).mean())
        lr, lo = ref[c + "/logits_last8"].astype(np.float64), out[c + "/logits_last8"]
        rel = float(np.max(np.abs(lr - lo) / (1 + np.abs(lr))))
        greedy = int(np.argmax(ref[c + "/greedy"] != out[c + "/greedy"])) if (ref[c + "/greedy"] != out[c + "/greedy"]).any() else len(ref[c + "/greedy"])
        ok = agree >= 0.80
        failed |= not ok
        print(f"bf16 mode {c:12s} argmax agreement {agree:.4f}  logits rel {rel:.3g}  greedy equal for {greedy} tokens"
              f"  {'PASS' if ok else 'FAIL'}")
print("FAILED" if failed else "ok")
sys.exit(1 if failed else 0)
