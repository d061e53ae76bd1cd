#!/usr/bin/python3
"""An independent float64 NumPy model of MiniMax-M3 (text + vision), written from the reference implementation's
semantics (transformers minimax_m3_vl), to check the C runtime on checkpoints of any shape.

Library use: M3Ref(model_dir).run_case(ids, images=[(pixels, (t,h,w))], videos=[...], n_gen=8) returns
{"logits": [L, V], "greedy": [...], "margins": [...], "sel": [G, L, k], "sel_gap": [G, L]} (float64).

A backend that rounds on purpose is emulated by overriding the two precision hooks (act, stored) and, where it
builds them differently, rope_tables: see tests/unit/kernels_cuda/m3_cuda_emul.py."""
import json
import math
import os
import struct

import numpy as np

_DT = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def load_safetensors(path):
    """{name: numpy array}; BF16 and F8_E4M3 are widened to float32."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        raw = data[b:e]
        if v["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "F8_E4M3":
            a = _fp8_e4m3(np.frombuffer(raw, dtype=np.uint8))
        else:
            a = np.frombuffer(raw, dtype=_DT[v["dtype"]])
        out[k] = a.reshape(v["shape"])
    return out


def _fp8_e4m3(u):
    s = np.where(u & 0x80, -1.0, 1.0)
    e = (u >> 3) & 0xF
    m = (u & 7).astype(np.float64)
    v = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
    v = np.where((e == 15) & ((u & 7) == 7), np.nan, v)
    return (s * v).astype(np.float32)


def save_safetensors(path, tensors):
    """tensors: name -> (dtype string, numpy array)."""
    hdr, off, blobs = {}, 0, []
    for k, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def gemma_rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 + w)


def layer_norm(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w + b


def gelu(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def apply_rope(x, cos, sin):
    """x [..., D]; cos/sin broadcastable [..., r]: rotate the first r dims (rotate-half), pass the rest."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    return np.concatenate([xr * cos + rotate_half(xr) * sin, xp], axis=-1)


def swiglu(g, u, alpha, limit):
    g = np.minimum(g, limit)
    u = np.clip(u, -limit, limit)
    return (u + 1.0) * g / (1.0 + np.exp(-alpha * g))


class M3Ref:
    def __init__(self, model_dir):
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        self.cfg = cfg
        t = cfg["text_config"]
        sp = t.get("sparse_attention_config", {})
        self.V, self.H = t["vocab_size"], t["hidden_size"]
        self.nl, self.nh, self.nkv = t["num_hidden_layers"], t["num_attention_heads"], t["num_key_value_heads"]
        self.hd = t.get("head_dim", self.H // self.nh)
        rp = t.get("rope_parameters", {})
        self.rot = int(self.hd * rp["partial_rotary_factor"]) if "partial_rotary_factor" in rp else t.get("rotary_dim", self.hd)
        self.theta = rp.get("rope_theta", 5e6)
        self.eps = t.get("rms_norm_eps", 1e-6)
        self.idx_heads = sp.get("sparse_num_index_heads", t.get("index_n_heads", 4))
        self.idx_dim = sp.get("sparse_index_dim", t.get("index_head_dim", 128))
        self.block = sp.get("sparse_block_size", t.get("index_block_size", 128))
        self.topk = sp.get("sparse_topk_blocks", t.get("index_topk_blocks", 16))
        self.local = sp.get("sparse_local_block", t.get("index_local_blocks", 1))
        self.sparse = [bool(f) for f in sp.get("sparse_attention_freq", [0] * self.nl)]
        self.moe = [bool(f) for f in t.get("moe_layer_freq", [1] * self.nl)]
        self.E, self.K = t["num_local_experts"], t["num_experts_per_tok"]
        self.scale_moe = t.get("routed_scaling_factor", 2.0)
        self.alpha, self.limit = t.get("swiglu_alpha", 1.702), t.get("swiglu_limit", 7.0)
        self.img_tok, self.vid_tok = cfg.get("image_token_index"), cfg.get("video_token_index")
        v = cfg.get("vision_config")
        self.vis = v
        w = load_safetensors(os.path.join(model_dir, "model.safetensors"))
        # FP8 block-scaled weights: dequantize with weight_scale_inv (128 x 128 blocks)
        for k in list(w):
            if k.endswith("_scale_inv"):
                base = k[: -len("_scale_inv")]
                q = w[base].astype(np.float64)
                s = np.repeat(np.repeat(w[k].astype(np.float64), 128, 0), 128, 1)[: q.shape[0], : q.shape[1]]
                w[base] = q * s
        self.w = {k: a.astype(np.float64) for k, a in w.items() if not k.endswith("_scale_inv")}

    def W(self, name):
        return self.w[name]

    # ---- precision hooks: exact here ----
    def act(self, x):
        """A projection's input, as the backend feeds it to the product."""
        return x

    def stored(self, x):
        """A value the backend keeps in storage precision: K, V and index-key caches, attention queries and
        outputs."""
        return x

    # ---- text ----
    def rope_tables(self, pos):
        inv = 1.0 / self.theta ** (np.arange(0, self.rot, 2) / self.rot)
        f = pos[:, None] * inv[None, :]
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
        ik = self.stored(apply_rope(ik, c, s))
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
        sel = np.where(top == -np.inf, -1, order)
        # the gap between the k-th selected and the best unselected score (small = a near tie)
        srt = -np.sort(-bs, axis=-1)
        gap = np.full(bs.shape[:2], np.inf)
        if nb > k:
            a, b = srt[..., k - 1], srt[..., k]
            fin = np.isfinite(a) & np.isfinite(b)
            with np.errstate(invalid="ignore"):
                gap = np.where(fin, a - b, np.inf)
        return sel, gap

    def attention(self, l, h, cos, sin, pos):
        P = f"language_model.model.layers.{l}.self_attn."
        L = h.shape[0]
        ha = self.act(h)
        q = (ha @ self.W(P + "q_proj.weight").T).reshape(L, self.nh, self.hd)
        k = (ha @ self.W(P + "k_proj.weight").T).reshape(L, self.nkv, self.hd)
        v = self.stored((ha @ self.W(P + "v_proj.weight").T).reshape(L, self.nkv, self.hd))
        q = self.stored(apply_rope(gemma_rms(q, self.W(P + "q_norm.weight"), self.eps), cos[:, None], sin[:, None]))
        k = self.stored(apply_rope(gemma_rms(k, self.W(P + "k_norm.weight"), self.eps), cos[:, None], sin[:, None]))
        allow = pos[None, :] <= pos[:, None]  # [q, k]
        allow = np.broadcast_to(allow, (self.nh, L, L)).copy()
        sel = gap = None
        if self.sparse[l]:
            sel, gap = self.indexer(l, h, cos, sin, pos)
            keep = np.zeros((self.idx_heads, L, -(-L // self.block)), bool)
            for g in range(self.idx_heads):
                for i in range(L):
                    for b in sel[g, i]:
                        if b >= 0:
                            keep[g, i, b] = True
            keep_tok = np.repeat(keep, self.block, -1)[..., :L]
            allow &= np.repeat(keep_tok, self.nh // self.idx_heads, 0)
        grp = self.nh // self.nkv
        kk = np.repeat(k, grp, 1)
        vv = np.repeat(v, grp, 1)
        sc = np.einsum("qhd,khd->hqk", q, kk) / math.sqrt(self.hd)
        sc = np.where(allow, sc, -np.inf)
        sc -= sc.max(-1, keepdims=True)
        p = np.exp(sc)
        p /= p.sum(-1, keepdims=True)
        o = self.stored(np.einsum("hqk,khd->qhd", p, vv).reshape(L, self.nh * self.hd))
        return self.act(o) @ self.W(P + "o_proj.weight").T, sel, gap

    def mlp(self, l, h):
        P = f"language_model.model.layers.{l}."
        ha = self.act(h)
        if not self.moe[l]:
            g = ha @ self.W(P + "mlp.gate_proj.weight").T
            u = ha @ self.W(P + "mlp.up_proj.weight").T
            return self.act(swiglu(g, u, self.alpha, self.limit)) @ self.W(P + "mlp.down_proj.weight").T
        M = P + "block_sparse_moe."
        logits = h @ self.W(M + "gate.weight").T  # the router is fp32 on every backend
        sig = 1.0 / (1.0 + np.exp(-logits))
        bias = self.w.get(M + "e_score_correction_bias", np.zeros(self.E))
        choice = sig + bias
        out = np.zeros_like(h)
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

    def forward(self, embeds):
        L = embeds.shape[0]
        pos = np.arange(L)
        cos, sin = self.rope_tables(pos.astype(np.float64))
        x = embeds.copy()
        first_sel = None
        for l in range(self.nl):
            P = f"language_model.model.layers.{l}."
            a, sel, gap = self.attention(l, gemma_rms(x, self.W(P + "input_layernorm.weight"), self.eps), cos, sin, pos)
            if sel is not None and first_sel is None:
                first_sel = (sel, gap)
            x = x + a
            x = x + self.mlp(l, gemma_rms(x, self.W(P + "post_attention_layernorm.weight"), self.eps))
        x = gemma_rms(x, self.W("language_model.model.norm.weight"), self.eps)
        return self.act(x) @ self.W("language_model.lm_head.weight").T, first_sel

    # ---- vision ----
    def encode(self, pixels, thw):
        v = self.vis
        P = "vision_tower.vision_model."
        D, nh = v["hidden_size"], v["num_attention_heads"]
        hd = D // nh
        m = v.get("spatial_merge_size", 2)
        eps = v.get("layer_norm_eps", 1e-5)
        t, hh, ww = thw
        x = pixels.astype(np.float64) @ self.W(P + "embeddings.patch_embedding.weight").reshape(D, -1).T
        axis = 2 * ((2 * (hd // 2) // 3) // 2)
        inv = 1.0 / 10000.0 ** (np.arange(0, axis, 2) / axis)
        hi = np.arange(hh)[:, None].repeat(ww, 1).reshape(hh // m, m, ww // m, m).transpose(0, 2, 1, 3).ravel()
        wi = np.arange(ww)[None, :].repeat(hh, 0).reshape(hh // m, m, ww // m, m).transpose(0, 2, 1, 3).ravel()
        ti = np.repeat(np.arange(t), hh * ww)
        coords = np.stack([ti, np.tile(hi, t), np.tile(wi, t)], -1).astype(np.float64)
        f = np.concatenate([coords[:, i : i + 1] * inv for i in range(3)], -1)
        emb = np.concatenate([f, f], -1)
        cos, sin = np.cos(emb)[:, None], np.sin(emb)[:, None]
        x = layer_norm(x, self.W(P + "pre_layrnorm.weight"), self.W(P + "pre_layrnorm.bias"), eps)
        n = x.shape[0]
        for l in range(v["num_hidden_layers"]):
            Q = P + f"encoder.layers.{l}."
            h = layer_norm(x, self.W(Q + "layer_norm1.weight"), self.W(Q + "layer_norm1.bias"), eps)
            q = (h @ self.W(Q + "self_attn.q_proj.weight").T + self.W(Q + "self_attn.q_proj.bias")).reshape(n, nh, hd)
            k = (h @ self.W(Q + "self_attn.k_proj.weight").T + self.W(Q + "self_attn.k_proj.bias")).reshape(n, nh, hd)
            vv = (h @ self.W(Q + "self_attn.v_proj.weight").T + self.W(Q + "self_attn.v_proj.bias")).reshape(n, nh, hd)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            sc = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
            sc -= sc.max(-1, keepdims=True)
            p = np.exp(sc)
            p /= p.sum(-1, keepdims=True)
            o = np.einsum("hqk,khd->qhd", p, vv).reshape(n, D)
            x = x + o @ self.W(Q + "self_attn.out_proj.weight").T + self.W(Q + "self_attn.out_proj.bias")
            h = layer_norm(x, self.W(Q + "layer_norm2.weight"), self.W(Q + "layer_norm2.bias"), eps)
            f1 = gelu(h @ self.W(Q + "mlp.fc1.weight").T + self.W(Q + "mlp.fc1.bias"))
            x = x + f1 @ self.W(Q + "mlp.fc2.weight").T + self.W(Q + "mlp.fc2.bias")
        p1 = gelu(x @ self.W("multi_modal_projector.linear_1.weight").T + self.W("multi_modal_projector.linear_1.bias"))
        p2 = p1 @ self.W("multi_modal_projector.linear_2.weight").T + self.W("multi_modal_projector.linear_2.bias")
        p2 = p2.reshape(n // (m * m), -1)
        m1 = gelu(p2 @ self.W("patch_merge_mlp.linear_1.weight").T + self.W("patch_merge_mlp.linear_1.bias"))
        return m1 @ self.W("patch_merge_mlp.linear_2.weight").T + self.W("patch_merge_mlp.linear_2.bias")

    def embed(self, ids, images=(), videos=()):
        """The prompt's input embeddings: token rows, media placeholders replaced by the encoded media."""
        x = self.W("language_model.model.embed_tokens.weight")[list(ids)].copy()
        for items, tok in ((images, self.img_tok), (videos, self.vid_tok)):
            rows = [i for i, t in enumerate(ids) if t == tok]
            feats = [self.encode(px, thw) for px, thw in items]
            if feats:
                f = np.concatenate(feats, 0)
                assert len(rows) == f.shape[0], (len(rows), f.shape)
                x[rows] = f
        return x

    def run_case(self, ids, images=(), videos=(), n_gen=8):
        ids = list(int(i) for i in ids)
        emb = self.W("language_model.model.embed_tokens.weight")
        x = self.embed(ids, images, videos)
        logits, sel = self.forward(x)
        greedy, margins = [], []
        cur = ids[:]
        last = logits[-1]
        for step in range(n_gen):
            o = np.argsort(-last)
            greedy.append(int(o[0]))
            margins.append(float(last[o[0]] - last[o[1]]))
            if step + 1 == n_gen:
                break
            cur.append(int(o[0]))
            x = np.concatenate([x, emb[[cur[-1]]]], 0)
            last = self.forward(x)[0][-1]
        am = logits.argmax(-1)
        srt = -np.sort(-logits, -1)
        return {"logits": logits, "argmax": am, "argmax_margin": srt[:, 0] - srt[:, 1], "greedy": greedy,
                "margins": margins, "sel": None if sel is None else sel[0], "sel_gap": None if sel is None else sel[1]}
