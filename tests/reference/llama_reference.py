#!/usr/bin/env python3
"""An independent float64 reference of Hugging Face's LlamaForCausalLM, forward and backward.

Written from transformers' modeling_llama.py (LlamaRMSNorm, LlamaRotaryEmbedding with
rotate_half, repeat_kv, eager attention, LlamaMLP) and modeling_rope_utils.py
(_compute_default_rope_parameters, _compute_llama3_parameters), not from ztrain's code.
Backward is written out by hand; --selfcheck compares it with central differences.

    llama_reference.py DIR [--selfcheck]
    llama_reference.py --hf HF_DIR DIR


DIR holds what test_llama_reference.cpp wrote: config.json, tokens.npy, targets.npy (-1 =
ignored), for packed examples positions.npy and segment_start.npy (each token's position
and the first token of its row it may attend to), and one TENSOR.npy per ztrain manifest tensor (Hugging Face names, HF's (out, in)
orientation; embeddings padded to padded_vocab rows, only the first vocab_size are HF's).
Writes into DIR: reference.json {"loss", "curve"} and grad_TENSOR.bin (float64, the
gradient of the mean loss, padded rows zero), and with config "steps" > 0 the loss curve of
that many AdamW steps taken exactly as ztrain takes them (src/optim, adamw_kernel):
global-norm clip, bias corrections 1 - beta^t, decoupled decay on matrices only.

With --hf the model is HF_DIR, a Hugging Face model directory as zt-consolidate writes it
(config.json in LlamaConfig's fields, model.safetensors parsed here by hand from the format:
u64 header length, JSON header, raw little-endian data), and only the loss of DIR's
tokens.npy / targets.npy is computed, into DIR/hf_reference.json {"loss"}: that shows the
export is a LlamaForCausalLM checkpoint (names, orientation, config), not just a file
ztrain reads back.
"""
import json
import math
import os
import sys

import numpy as np


def rope_inv_freq(cfg, hs):
    inv = 1.0 / (cfg["rope_theta"] ** (np.arange(0, hs, 2, dtype=np.float64) / hs))
    if cfg["rope_scaling"] != "llama3":
        return inv
    factor = cfg["rope_factor"]
    low, high = cfg["rope_low_freq_factor"], cfg["rope_high_freq_factor"]
    old = cfg["rope_original_context"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    inv_l = np.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv_l)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rotate_half_t(y):
    """The transpose of rotate_half (its inverse): [y2, -y1]."""
    h = y.shape[-1] // 2
    return np.concatenate([y[..., h:], -y[..., :h]], axis=-1)


def rms_forward(x, w, eps):
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return x * r * w, r


def rms_backward(dy, x, w, r):
    g = dy * w
    C = x.shape[-1]
    dx = r * g - x * r ** 3 * np.sum(g * x, axis=-1, keepdims=True) / C
    dw = np.sum(dy * x * r, axis=tuple(range(dy.ndim - 1)))
    return dx, dw


def silu(a):
    return a / (1 + np.exp(-a))


class Llama:
    def __init__(self, cfg, weights):
        self.positions = None  # packed examples: (B, T) positions and segment starts
        self.segments = None
        self.cfg = cfg
        self.w = weights
        self.L = cfg["n_layer"]
        self.NH = cfg["n_head"]
        self.NKV = cfg["n_kv_head"]
        self.C = cfg["n_embd"]
        self.hs = self.C // self.NH
        self.V = cfg["vocab_size"]
        self.eps = cfg["norm_eps"]
        self.tied = cfg["tie_embeddings"]

    def head_name(self):
        return "model.embed_tokens.weight" if self.tied else "lm_head.weight"

    def forward(self, tokens, targets, want_grads):
        w, B, T = self.w, tokens.shape[0], tokens.shape[1]
        NH, NKV, hs, C, V = self.NH, self.NKV, self.hs, self.C, self.V
        rep = NH // NKV
        inv = rope_inv_freq(self.cfg, hs)
        if self.positions is None:
            freqs = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
            mask = np.triu(np.full((T, T), -np.inf), 1)
        else:
            # Packed examples: each token rotates by its own position, and query t sees the
            # keys [segment_start[t], t] of its row only (HF's position_ids and a 4-D mask).
            freqs = (self.positions.astype(np.float64)[..., None] * inv)[:, None]  # (B, 1, T, hs/2)
            t = np.arange(T)
            seen = (t[None, None, :] <= t[None, :, None]) & (t[None, None, :] >= self.segments[:, :, None])
            mask = np.where(seen, 0.0, -np.inf)[:, None]  # (B, 1, T, T)
        emb = np.concatenate([freqs, freqs], axis=-1)
        cos, sin = np.cos(emb), np.sin(emb)  # (T, hs), or (B, 1, T, hs) packed
        E = w["model.embed_tokens.weight"][:V]
        x = E[tokens]
        caches = []
        for l in range(self.L):
            p = "model.layers.%d." % l
            h1, r1 = rms_forward(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h1 @ w[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
            k = (h1 @ w[p + "self_attn.k_proj.weight"].T).reshape(B, T, NKV, hs).transpose(0, 2, 1, 3)
            v = (h1 @ w[p + "self_attn.v_proj.weight"].T).reshape(B, T, NKV, hs).transpose(0, 2, 1, 3)
            qr = q * cos + rotate_half(q) * sin
            kr = k * cos + rotate_half(k) * sin
            kx = np.repeat(kr, rep, axis=1)  # repeat_kv: query head h reads kv head h // rep
            vx = np.repeat(v, rep, axis=1)
            s = qr @ kx.transpose(0, 1, 3, 2) / math.sqrt(hs) + mask
            s = s - s.max(axis=-1, keepdims=True)
            P = np.exp(s)
            P /= P.sum(axis=-1, keepdims=True)
            o = (P @ vx).transpose(0, 2, 1, 3).reshape(B, T, C)
            x2 = x + o @ w[p + "self_attn.o_proj.weight"].T
            h2, r2 = rms_forward(x2, w[p + "post_attention_layernorm.weight"], self.eps)
            a = h2 @ w[p + "mlp.gate_proj.weight"].T
            u = h2 @ w[p + "mlp.up_proj.weight"].T
            sm = silu(a) * u
            xo = x2 + sm @ w[p + "mlp.down_proj.weight"].T
            caches.append((x, h1, r1, qr, kx, vx, P, o, x2, h2, r2, a, u, sm))
            x = xo
        hf, rf = rms_forward(x, w["model.norm.weight"], self.eps)
        Wh = w[self.head_name()][:V]
        logits = hf @ Wh.T
        valid = targets >= 0
        count = int(valid.sum())
        z = logits - logits.max(axis=-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        tgt = np.where(valid, targets, 0)
        nll = -np.take_along_axis(logp, tgt[..., None], axis=-1)[..., 0]
        loss = float((nll * valid).sum() / count)
        if not want_grads:
            return loss, None

        g = {name: np.zeros_like(t) for name, t in w.items()}
        dlogits = np.exp(logp)
        np.put_along_axis(dlogits, tgt[..., None], np.take_along_axis(dlogits, tgt[..., None], axis=-1) - 1, axis=-1)
        dlogits *= valid[..., None] / count
        g[self.head_name()][:V] += dlogits.reshape(-1, V).T @ hf.reshape(-1, C)
        dhf = dlogits @ Wh
        dx, g["model.norm.weight"] = rms_backward(dhf, x, w["model.norm.weight"], rf)
        for l in reversed(range(self.L)):
            p = "model.layers.%d." % l
            (xin, h1, r1, qr, kx, vx, P, o, x2, h2, r2, a, u, sm) = caches[l]
            Wd = w[p + "mlp.down_proj.weight"]
            g[p + "mlp.down_proj.weight"] = dx.reshape(-1, C).T @ sm.reshape(-1, sm.shape[-1])
            dsm = dx @ Wd
            sig = 1 / (1 + np.exp(-a))
            da = dsm * u * sig * (1 + a * (1 - sig))
            du = dsm * silu(a)
            F = a.shape[-1]
            g[p + "mlp.gate_proj.weight"] = da.reshape(-1, F).T @ h2.reshape(-1, C)
            g[p + "mlp.up_proj.weight"] = du.reshape(-1, F).T @ h2.reshape(-1, C)
            dh2 = da @ w[p + "mlp.gate_proj.weight"] + du @ w[p + "mlp.up_proj.weight"]
            dx2_norm, g[p + "post_attention_layernorm.weight"] = rms_backward(
                dh2, x2, w[p + "post_attention_layernorm.weight"], r2)
            dx2 = dx + dx2_norm
            g[p + "self_attn.o_proj.weight"] = dx2.reshape(-1, C).T @ o.reshape(-1, C)
            do = (dx2 @ w[p + "self_attn.o_proj.weight"]).reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
            dP = do @ vx.transpose(0, 1, 3, 2)
            dvx = P.transpose(0, 1, 3, 2) @ do
            ds = P * (dP - np.sum(dP * P, axis=-1, keepdims=True)) / math.sqrt(hs)
            dqr = ds @ kx
            dkx = ds.transpose(0, 1, 3, 2) @ qr
            rep = NH // NKV
            dkr = dkx.reshape(B, NKV, rep, T, hs).sum(axis=2)  # repeat_kv's backward
            dv = dvx.reshape(B, NKV, rep, T, hs).sum(axis=2)
            dq = dqr * cos + rotate_half_t(dqr * sin)
            dk = dkr * cos + rotate_half_t(dkr * sin)
            dq = dq.transpose(0, 2, 1, 3).reshape(B, T, NH * hs)
            dk = dk.transpose(0, 2, 1, 3).reshape(B, T, NKV * hs)
            dv = dv.transpose(0, 2, 1, 3).reshape(B, T, NKV * hs)
            dh1 = np.zeros_like(h1)
            for name, d in (("q_proj", dq), ("k_proj", dk), ("v_proj", dv)):
                W = w[p + "self_attn.%s.weight" % name]
                g[p + "self_attn.%s.weight" % name] = d.reshape(-1, d.shape[-1]).T @ h1.reshape(-1, C)
                dh1 += d @ W
            dxn, g[p + "input_layernorm.weight"] = rms_backward(dh1, xin, w[p + "input_layernorm.weight"], r1)
            dx = dx2 + dxn
        np.add.at(g["model.embed_tokens.weight"], tokens.reshape(-1), dx.reshape(-1, C))
        return loss, g


def load(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    weights = {name: np.load(os.path.join(d, name + ".npy")).astype(np.float64) for name in cfg["tensors"]}
    tokens = np.load(os.path.join(d, "tokens.npy")).astype(np.int64)
    targets = np.load(os.path.join(d, "targets.npy")).astype(np.int64)
    return cfg, weights, tokens, targets


def adamw_curve(cfg, model, tokens, targets):
    """cfg["steps"] AdamW steps as ztrain takes them; the loss before each step."""
    w = model.w
    m = {n: np.zeros_like(t) for n, t in w.items()}
    v = {n: np.zeros_like(t) for n, t in w.items()}
    b1, b2, eps, lr, wd, clip = (cfg[k] for k in ("beta1", "beta2", "eps", "lr", "weight_decay", "grad_clip"))
    curve = []
    for t in range(1, cfg["steps"] + 1):
        loss, g = model.forward(tokens, targets, True)
        curve.append(loss)
        norm = math.sqrt(sum(float(np.sum(x * x)) for x in g.values()))
        scale = clip / norm if clip > 0 and norm > clip else 1.0
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        for n in w:
            gs = g[n] * scale
            m[n] = b1 * m[n] + (1 - b1) * gs
            v[n] = b2 * v[n] + (1 - b2) * gs * gs
            decay = wd if w[n].ndim == 2 else 0.0  # ztrain decays matrices and embeddings only
            w[n] = w[n] - lr * ((m[n] / bc1) / (np.sqrt(v[n] / bc2) + eps) + decay * w[n])
    return curve


def selfcheck(model, tokens, targets, grads):
    """Central differences of the float64 loss at a few elements of every tensor."""
    rng = np.random.default_rng(0)
    worst = 0.0
    for name, t in model.w.items():
        rows = t.shape[0] if name not in ("model.embed_tokens.weight", "lm_head.weight") else model.V
        for _ in range(3):
            idx = (int(rng.integers(rows)),) + tuple(int(rng.integers(s)) for s in t.shape[1:])
            saved = t[idx]
            h = 1e-6
            t[idx] = saved + h
            up = model.forward(tokens, targets, False)[0]
            t[idx] = saved - h
            down = model.forward(tokens, targets, False)[0]
            t[idx] = saved
            num = (up - down) / (2 * h)
            err = abs(num - grads[name][idx]) / max(1e-6, abs(num))
            worst = max(worst, err)
            if err > 1e-5:
                raise SystemExit("selfcheck: %s%s analytic %g vs numeric %g" % (name, idx, grads[name][idx], num))
    print("selfcheck: worst relative difference %.3g" % worst)


def read_safetensors(path):
    """{name: float64 array} of a safetensors file (F32, BF16, F16)."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        chunk = data[b:end]
        if e["dtype"] == "F32":
            a = np.frombuffer(chunk, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(chunk, dtype="<f2")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit("%s: tensor %s has dtype %s" % (path, name, e["dtype"]))
        out[name] = a.reshape(e["shape"]).astype(np.float64)
    return out


def load_hf(hf_dir):
    """The script's config and weights from a Hugging Face Llama directory."""
    hf = json.load(open(os.path.join(hf_dir, "config.json")))
    assert hf["architectures"] == ["LlamaForCausalLM"] and hf["model_type"] == "llama", hf
    assert hf["hidden_act"] == "silu" and not hf.get("attention_bias") and not hf.get("mlp_bias"), hf
    rs = hf.get("rope_scaling")
    cfg = {
        "n_layer": hf["num_hidden_layers"],
        "n_head": hf["num_attention_heads"],
        "n_kv_head": hf.get("num_key_value_heads", hf["num_attention_heads"]),
        "n_embd": hf["hidden_size"],
        "vocab_size": hf["vocab_size"],
        "rope_theta": hf.get("rope_theta", 10000.0),
        "rope_scaling": "llama3" if rs else "none",
        "norm_eps": hf["rms_norm_eps"],
        "tie_embeddings": hf.get("tie_word_embeddings", False),
    }
    if rs:
        assert rs["rope_type"] == "llama3", rs
        cfg.update(rope_factor=rs["factor"], rope_low_freq_factor=rs["low_freq_factor"],
                   rope_high_freq_factor=rs["high_freq_factor"],
                   rope_original_context=rs["original_max_position_embeddings"])
    weights = read_safetensors(os.path.join(hf_dir, "model.safetensors"))
    assert ("lm_head.weight" in weights) != cfg["tie_embeddings"], "lm_head.weight iff untied"
    V, C = cfg["vocab_size"], cfg["n_embd"]
    assert weights["model.embed_tokens.weight"].shape == (V, C)
    return cfg, weights


def main():
    if sys.argv[1] == "--hf":
        cfg, weights = load_hf(sys.argv[2])
        d = sys.argv[3]
        tokens = np.load(os.path.join(d, "tokens.npy")).astype(np.int64)
        targets = np.load(os.path.join(d, "targets.npy")).astype(np.int64)
        loss, _ = Llama(cfg, weights).forward(tokens, targets, False)
        json.dump({"loss": loss}, open(os.path.join(d, "hf_reference.json"), "w"))
        return
    d = sys.argv[1]
    cfg, weights, tokens, targets = load(d)
    model = Llama(cfg, weights)
    if os.path.exists(os.path.join(d, "positions.npy")):
        model.positions = np.load(os.path.join(d, "positions.npy")).astype(np.int64)
        model.segments = np.load(os.path.join(d, "segment_start.npy")).astype(np.int64)
    loss, grads = model.forward(tokens, targets, True)
    if "--selfcheck" in sys.argv[2:]:
        selfcheck(model, tokens, targets, grads)
    for name, g in grads.items():
        g.astype("<f8").tofile(os.path.join(d, "grad_" + name + ".bin"))
    curve = adamw_curve(cfg, model, tokens, targets) if cfg.get("steps", 0) > 0 else []
    json.dump({"loss": loss, "curve": curve}, open(os.path.join(d, "reference.json"), "w"))


if __name__ == "__main__":
    main()
