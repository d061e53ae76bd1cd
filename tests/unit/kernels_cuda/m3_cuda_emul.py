#!/usr/bin/python3
"""The CUDA backend's arithmetic, emulated in float64 NumPy on top of the runtime's independent reference model
(tests/unit/runtime/m3_ref.py): the same model, with the roundings the CUDA backend makes on purpose:

  both precisions:  K, V and index keys stored bf16 (the caches), attention queries and outputs bf16,
                    RoPE angles in fp32 (as the host tables are built)
  --precision bf16: in addition every product's input rounded to bf16 except the MoE router and the MSA
                    index projections (kept fp32), and the routed experts' gathered rows and activations

If the CUDA outputs match this emulation far more closely than they match the fp64 goldens, the differences
from the goldens are the intended storage precision, not a bug. Used by test_cuda_goldens.py.

usage: m3_cuda_emul.py MODEL_DIR GOLDENS.safetensors CUDA_OUT.safetensors [--precision fp32|bf16] [--cases a,b]
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
import m3_ref  # noqa: E402
from m3_ref import apply_rope, gemma_rms, swiglu  # noqa: E402


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
        """A product's input as the backend feeds it."""
        return bf16(x) if self.bf else x

    def rope_tables(self, pos):
        # the host builds the tables as kn_rope_text_table: fp32 inverse frequency and fp32 angle
        e = (np.arange(0, self.rot, 2, dtype=np.float32) / np.float32(self.rot)).astype(np.float64)
        inv = (1.0 / np.power(np.float64(np.float32(self.theta)), e)).astype(np.float32)
        f = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float32).astype(np.float64)
        emb = np.concatenate([f, f], -1)
        return np.cos(emb), np.sin(emb)

    def indexer(self, l, h, cos, sin, pos):
        P = f"language_model.model.layers.{l}.self_attn."
        L = h.shape[0]
        iq = (h @ self.W(P + "index_q_proj.weight").T).reshape(L, self.idx_heads, self.idx_dim)
        ik = h @ self.W(P + "index_k_proj.weight").T
        iq = gemma_rms(iq, self.W(P + "index_q_norm.weight"), self.eps)
        ik = gemma_rms(ik, self.W(P + "index_k_norm.weight"), self.eps)
        c, s = cos[:, : self.idx_dim], sin[:, : self.idx_dim]
        iq = apply_rope(iq, c[:, None, :], s[:, None, :])
        ik = bf16(apply_rope(ik, c, s))  # the index-key cache
        scores = np.einsum("qgd,kd->gqk", iq, ik)
        scores = np.where(pos[None, None, :] > pos[None, :, None], -np.inf, scores)
        nb = -(-L // self.block)
        pad = nb * self.block - L
        scores = np.concatenate([scores, np.full(scores.shape[:2] + (pad,), -np.inf)], -1)
        bs = scores.reshape(self.idx_heads, L, nb, self.block).max(-1)
        qb = pos // self.block
        for j in range(self.local):
            bs[:, np.arange(L), np.maximum(qb - j, 0)] = np.inf
        k = min(self.topk, nb)
        order = np.argsort(-bs, axis=-1, kind="stable")[..., :k]
        top = np.take_along_axis(bs, order, -1)
        return np.where(top == -np.inf, -1, order), None

    def attention(self, l, h, cos, sin, pos, want_sel):
        P = f"language_model.model.layers.{l}.self_attn."
        L = h.shape[0]
        ha = self.act(h)
        q = (ha @ self.W(P + "q_proj.weight").T).reshape(L, self.nh, self.hd)
        k = (ha @ self.W(P + "k_proj.weight").T).reshape(L, self.nkv, self.hd)
        v = bf16((ha @ self.W(P + "v_proj.weight").T).reshape(L, self.nkv, self.hd))
        q = bf16(apply_rope(gemma_rms(q, self.W(P + "q_norm.weight"), self.eps), cos[:, None], sin[:, None]))
        k = bf16(apply_rope(gemma_rms(k, self.W(P + "k_norm.weight"), self.eps), cos[:, None], sin[:, None]))
        allow = np.broadcast_to(pos[None, :] <= pos[:, None], (self.nh, L, L)).copy()
        sel = None
        if self.sparse[l]:
            sel, _ = self.indexer(l, h, cos, sin, pos)
            keep = np.zeros((self.idx_heads, L, -(-L // self.block)), bool)
            for g in range(self.idx_heads):
                for i in range(L):
                    for b in sel[g, i]:
                        if b >= 0:
                            keep[g, i, b] = True
            keep_tok = np.repeat(keep, self.block, -1)[..., :L]
            allow &= np.repeat(keep_tok, self.nh // self.idx_heads, 0)
        grp = self.nh // self.nkv
        kk, vv = np.repeat(k, grp, 1), np.repeat(v, grp, 1)
        sc = np.einsum("qhd,khd->hqk", q, kk) / math.sqrt(self.hd)
        sc = np.where(allow, sc, -np.inf)
        sc -= sc.max(-1, keepdims=True)
        p = np.exp(sc)
        p /= p.sum(-1, keepdims=True)
        o = bf16(np.einsum("hqk,khd->qhd", p, vv).reshape(L, self.nh * self.hd))
        return self.act(o) @ self.W(P + "o_proj.weight").T, sel, None

    def mlp(self, l, h):
        P = f"language_model.model.layers.{l}."
        if not self.moe[l]:
            ha = self.act(h)
            g = ha @ self.W(P + "mlp.gate_proj.weight").T
            u = ha @ self.W(P + "mlp.up_proj.weight").T
            return self.act(swiglu(g, u, self.alpha, self.limit)) @ self.W(P + "mlp.down_proj.weight").T
        M = P + "block_sparse_moe."
        logits = h @ self.W(M + "gate.weight").T  # fp32 router
        sig = 1.0 / (1.0 + np.exp(-logits))
        bias = self.w.get(M + "e_score_correction_bias", np.zeros(self.E))
        choice = sig + bias
        out = np.zeros_like(h)
        ha = self.act(h)
        for i in range(h.shape[0]):
            top = np.argsort(-choice[i], kind="stable")[: self.K]
            wts = sig[i, top] / sig[i, top].sum()
            for e, wt in zip(top, wts):
                E = M + f"experts.{e}."
                g = ha[i] @ self.W(E + "w1.weight").T
                u = ha[i] @ self.W(E + "w3.weight").T
                out[i] += wt * (self.act(swiglu(g, u, self.alpha, self.limit)) @ self.W(E + "w2.weight").T)
        out *= self.scale_moe
        S = M + "shared_experts."
        if S + "gate_proj.weight" in self.w:
            g = ha @ self.W(S + "gate_proj.weight").T
            u = ha @ self.W(S + "up_proj.weight").T
            out += self.act(swiglu(g, u, self.alpha, self.limit)) @ self.W(S + "down_proj.weight").T
        return out

    def prompt_logits(self, ids, images=(), videos=()):
        emb = self.W("language_model.model.embed_tokens.weight")
        x = emb[list(ids)].copy()
        for items, tok in ((images, self.img_tok), (videos, self.vid_tok)):
            rows = [i for i, t in enumerate(ids) if t == tok]
            feats = [self.encode(px, thw) for px, thw in items]
            if feats:
                x[rows] = np.concatenate(feats, 0)
        L = x.shape[0]
        pos = np.arange(L)
        cos, sin = self.rope_tables(pos)
        for l in range(self.nl):
            P = f"language_model.model.layers.{l}."
            a, _, _ = self.attention(l, gemma_rms(x, self.W(P + "input_layernorm.weight"), self.eps), cos, sin, pos, False)
            x = x + a
            x = x + self.mlp(l, gemma_rms(x, self.W(P + "post_attention_layernorm.weight"), self.eps))
        x = gemma_rms(x, self.W("language_model.model.norm.weight"), self.eps)
        return self.act(x) @ self.W("language_model.lm_head.weight").T


def media(g, c):
    imgs, vids = [], []
    if c + "/pixel_values" in g:
        pv, thw = g[c + "/pixel_values"], g[c + "/image_grid_thw"].astype(np.int64)
        off = 0
        for t, h, w in thw:
            n = int(t * h * w)
            imgs.append((pv[off : off + n], (int(t), int(h), int(w))))
            off += n
    if c + "/pixel_values_videos" in g:
        pv, thw = g[c + "/pixel_values_videos"], g[c + "/video_grid_thw"].astype(np.int64)
        off = 0
        for t, h, w in thw:
            n = int(t * h * w)
            vids.append((pv[off : off + n], (int(t), int(h), int(w))))
            off += n
    return imgs, vids


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
