#!/usr/bin/env python3
"""PyTorch baselines for the MSA benchmarks, run on the GPU machine in the same session as kn_bench:
dense attention through SDPA (flash backend), and a gather-based MSA (what a generic fallback does: index
scores by matmul, block max, topk, gather the selected K/V blocks, SDPA over them). M3 shapes: 64 query
heads, 4 KV heads, head dim 128, index 4 x 128, block 128, top-16, bf16. CUDA events, medians.

usage: torch_baseline.py [--quick] [--decode-only] [--out FILE.tsv]
"""
import sys
import time

import torch
import torch.nn.functional as F

H, G, D, DI, BLK, TOPK = 64, 4, 128, 128, 128, 16
dev = "cuda"
quick = "--quick" in sys.argv
decode_only = "--decode-only" in sys.argv  # skip the prefill baselines (seconds each at 256K)
out = None
if "--out" in sys.argv:
    out = open(sys.argv[sys.argv.index("--out") + 1], "w")


def emit(bench, cfg, metric, value, unit):
    line = f"{bench}\t{cfg}\t{metric}\t{value:.6g}\t{unit}"
    print(f"  {bench:<14} {cfg:<44} {metric:<18} {value:12.4g} {unit}", flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


def time_ms(fn, warm=1, iters=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def sdpa_flash(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)
torch.manual_seed(0)

# ---- dense prefill ----
for L in [] if decode_only else ([4096, 8192] if quick else [65536, 131072, 262144]):
    q = torch.randn(1, H, L, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, G, L, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, G, L, D, device=dev, dtype=torch.bfloat16)
    try:
        ms = time_ms(lambda: sdpa_flash(q, k, v, True), 1, 2 if L >= 262144 else 3)
        flops = 4.0 * H * D * L * (L + 1) / 2
        emit("torch dense", f"prefill L {L // 1024}K", "time", ms, "ms")
        emit("torch dense", f"prefill L {L // 1024}K", "rate", flops / ms / 1e9, "TFLOP/s")
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"  prefill {L}: {type(e).__name__}: {e}", flush=True)
    del q, k, v
    torch.cuda.empty_cache()

# ---- dense decode at 1M and the gather-based MSA decode ----
L = 65536 if quick else 1048576
nb = L // BLK
k = torch.randn(1, G, L, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(1, G, L, D, device=dev, dtype=torch.bfloat16)
q = torch.randn(1, H, 1, D, device=dev, dtype=torch.bfloat16)
ms = time_ms(lambda: sdpa_flash(q, k, v, False), 3, 20)
emit("torch dense", f"decode ctx {L // 1024}K batch 1", "time", ms * 1e3, "us")
emit("torch dense", f"decode ctx {L // 1024}K batch 1", "bandwidth", 2 * k.numel() * 2 / ms / 1e9, "TB/s")
idx = torch.randn(L, DI, device=dev, dtype=torch.bfloat16)
qi = torch.randn(G, DI, device=dev, dtype=torch.bfloat16)


def msa_decode():
    s = (qi @ idx.T).float()  # [G, L]
    bs = s.view(G, nb, BLK).amax(-1)
    bs[:, nb - 1] = float("inf")
    sel = bs.topk(TOPK, dim=-1).indices  # [G, K]
    tok = (sel[:, :, None] * BLK + torch.arange(BLK, device=dev)).reshape(G, -1)  # [G, K*BLK]
    kk = torch.gather(k[0], 1, tok[:, :, None].expand(-1, -1, D))  # [G, K*BLK, D]
    vv = torch.gather(v[0], 1, tok[:, :, None].expand(-1, -1, D))
    qq = q[0].view(G, H // G, 1, D)
    return F.scaled_dot_product_attention(qq, kk[:, None].expand(-1, H // G, -1, -1), vv[:, None].expand(-1, H // G, -1, -1))


ms = time_ms(msa_decode, 3, 20)
emit("torch gather", f"MSA decode ctx {L // 1024}K batch 1", "time", ms * 1e3, "us")
s_ms = time_ms(lambda: (qi @ idx.T).float().view(G, nb, BLK).amax(-1), 3, 20)
emit("torch gather", f"MSA decode ctx {L // 1024}K batch 1", "index scoring", idx.numel() * 2 / s_ms / 1e9, "TB/s")
del k, v, idx
torch.cuda.empty_cache()

# ---- gather-based MSA prefill at 64K (chunks of queries) ----
L = 8192 if quick else 65536
nb = L // BLK
k = torch.randn(G, L, D, device=dev, dtype=torch.bfloat16)
v = torch.randn(G, L, D, device=dev, dtype=torch.bfloat16)
q = torch.randn(L, H, D, device=dev, dtype=torch.bfloat16)
idx = torch.randn(L, DI, device=dev, dtype=torch.bfloat16)
qi = torch.randn(L, G, DI, device=dev, dtype=torch.bfloat16)
C = 512
ar = torch.arange(BLK, device=dev)


def msa_prefill():
    for i0 in range(0, L, C):
        pos = torch.arange(i0, i0 + C, device=dev)
        s = torch.einsum("cgd,ld->gcl", qi[i0 : i0 + C], idx).float()  # [G, C, L]
        s.masked_fill_(torch.arange(L, device=dev)[None, None, :] > pos[None, :, None], float("-inf"))
        bs = s.view(G, C, nb, BLK).amax(-1)
        own = pos // BLK
        bs.scatter_(2, own[None, :, None].expand(G, -1, 1), float("inf"))
        kk_ = min(TOPK, nb)
        sv, sel = bs.topk(kk_, dim=-1)  # [G, C, K]
        tok = sel[..., None] * BLK + ar  # [G, C, K, BLK]
        valid = (sv[..., None] > float("-inf")) & (tok <= pos[None, :, None, None])
        tok = tok.reshape(G, C, -1)
        kk = torch.gather(k[:, None].expand(-1, C, -1, -1), 2, tok[..., None].expand(-1, -1, -1, D))
        vv = torch.gather(v[:, None].expand(-1, C, -1, -1), 2, tok[..., None].expand(-1, -1, -1, D))
        qq = q[i0 : i0 + C].view(C, G, H // G, D).permute(1, 0, 2, 3)[:, :, :, None]  # [G, C, 16, 1, D]
        mask = valid.reshape(G, C, 1, 1, -1)
        F.scaled_dot_product_attention(
            qq, kk[:, :, None].expand(-1, -1, H // G, -1, -1), vv[:, :, None].expand(-1, -1, H // G, -1, -1), attn_mask=mask
        )


try:
    if decode_only:
        raise RuntimeError("skipped (--decode-only)")
    ms = time_ms(msa_prefill, 1, 2)
    emit("torch gather", f"MSA prefill L {L // 1024}K", "time", ms, "ms")
except Exception as e:  # noqa: BLE001
    print(f"  gather prefill: {type(e).__name__}: {e}", flush=True)
print("torch baselines done", flush=True)
