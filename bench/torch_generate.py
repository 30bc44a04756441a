#!/usr/bin/env python3
"""Greedy generation with a key/value cache in PyTorch (CPU, fp32): the reference for
zt-generate's tokens/s (bench/generate_bench.sh).

Builds a GPT-2 or Llama (SmolLM2-shaped) model with random weights (std 0.02; norms 1),
writes it as a Hugging Face model directory (config.json + model.safetensors, the layout
zt-generate and `--model.from_hf` read) so zt-generate runs the very same weights, then
generates --new tokens greedily after a prompt: one forward over the prompt, then one token
per forward, each layer's keys and values kept in preallocated cache tensors (the way
Hugging Face's static cache works), attention over the cache by plain matmul + softmax.

The last line of stdout is JSON: prompt_tokens, new_tokens, prefill_s, decode_s,
tokens_per_s (new tokens / decode seconds, the time from the prompt's logits to the last
token drawn), and the generated token ids.
"""
import argparse
import json
import math
import os
import struct
import time

import torch
import torch.nn.functional as F

SHAPES = {
    "gpt2": dict(n_layer=12, n_head=12, n_kv=12, n_embd=768, ffn=3072, seq_len=1024, vocab=50257),
    "llama": dict(n_layer=30, n_head=9, n_kv=3, n_embd=576, ffn=1536, seq_len=2048, vocab=49152),
}


def random_weights(arch, s, seed):
    g = torch.Generator().manual_seed(seed)
    C, F_, V, L = s["n_embd"], s["ffn"], s["vocab"], s["n_layer"]
    hs = C // s["n_head"]

    def normal(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    w = {}
    if arch == "gpt2":
        w["wte"] = normal(V, C)
        w["wpe"] = normal(s["seq_len"], C)
        for l in range(L):
            w[f"{l}.ln1"] = (torch.ones(C), torch.zeros(C))
            w[f"{l}.qkv"] = (normal(3 * C, C), torch.zeros(3 * C))
            w[f"{l}.proj"] = (normal(C, C), torch.zeros(C))
            w[f"{l}.ln2"] = (torch.ones(C), torch.zeros(C))
            w[f"{l}.fc"] = (normal(4 * C, C), torch.zeros(4 * C))
            w[f"{l}.fcproj"] = (normal(C, 4 * C), torch.zeros(C))
        w["lnf"] = (torch.ones(C), torch.zeros(C))
    else:
        qkv = (s["n_head"] + 2 * s["n_kv"]) * hs
        w["wte"] = normal(V, C)
        for l in range(L):
            w[f"{l}.norm1"] = torch.ones(C)
            w[f"{l}.qkv"] = normal(qkv, C)
            w[f"{l}.o"] = normal(C, s["n_head"] * hs)
            w[f"{l}.norm2"] = torch.ones(C)
            w[f"{l}.gate_up"] = normal(2 * F_, C)
            w[f"{l}.down"] = normal(C, F_)
        w["norm"] = torch.ones(C)
    return w


def hf_tensors(arch, s, w):
    """The weights under Hugging Face names and layouts (GPT-2's Conv1D matrices [in, out])."""
    t = {}
    if arch == "gpt2":
        t["transformer.wte.weight"] = w["wte"]
        t["transformer.wpe.weight"] = w["wpe"]
        for l in range(s["n_layer"]):
            p = f"transformer.h.{l}."
            for ours, hf in (("ln1", "ln_1"), ("ln2", "ln_2")):
                t[p + hf + ".weight"], t[p + hf + ".bias"] = w[f"{l}.{ours}"]
            for ours, hf in (("qkv", "attn.c_attn"), ("proj", "attn.c_proj"), ("fc", "mlp.c_fc"),
                             ("fcproj", "mlp.c_proj")):
                t[p + hf + ".weight"] = w[f"{l}.{ours}"][0].t().contiguous()
                t[p + hf + ".bias"] = w[f"{l}.{ours}"][1]
        t["transformer.ln_f.weight"], t["transformer.ln_f.bias"] = w["lnf"]
    else:
        hs = s["n_embd"] // s["n_head"]
        q, kv, F_ = s["n_head"] * hs, s["n_kv"] * hs, s["ffn"]
        t["model.embed_tokens.weight"] = w["wte"]
        for l in range(s["n_layer"]):
            p = f"model.layers.{l}."
            t[p + "input_layernorm.weight"] = w[f"{l}.norm1"]
            qkv = w[f"{l}.qkv"]
            t[p + "self_attn.q_proj.weight"] = qkv[:q].contiguous()
            t[p + "self_attn.k_proj.weight"] = qkv[q:q + kv].contiguous()
            t[p + "self_attn.v_proj.weight"] = qkv[q + kv:].contiguous()
            t[p + "self_attn.o_proj.weight"] = w[f"{l}.o"]
            t[p + "post_attention_layernorm.weight"] = w[f"{l}.norm2"]
            t[p + "mlp.gate_proj.weight"] = w[f"{l}.gate_up"][:F_].contiguous()
            t[p + "mlp.up_proj.weight"] = w[f"{l}.gate_up"][F_:].contiguous()
            t[p + "mlp.down_proj.weight"] = w[f"{l}.down"]
        t["model.norm.weight"] = w["norm"]
    return t


def write_hf_dir(arch, s, w, out):
    os.makedirs(out, exist_ok=True)
    if arch == "gpt2":
        cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": s["vocab"],
               "n_positions": s["seq_len"], "n_ctx": s["seq_len"], "n_embd": s["n_embd"],
               "n_layer": s["n_layer"], "n_head": s["n_head"], "activation_function": "gelu_new",
               "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "torch_dtype": "float32"}
    else:
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": s["vocab"],
               "hidden_size": s["n_embd"], "intermediate_size": s["ffn"], "num_hidden_layers": s["n_layer"],
               "num_attention_heads": s["n_head"], "num_key_value_heads": s["n_kv"], "hidden_act": "silu",
               "max_position_embeddings": s["seq_len"], "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
               "rope_scaling": None, "tie_word_embeddings": True, "attention_bias": False,
               "mlp_bias": False, "torch_dtype": "float32"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    header, offset, blobs = {}, 0, []
    for name, x in hf_tensors(arch, s, w).items():
        data = x.to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(x.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


class Cache:
    def __init__(self, s):
        hs = s["n_embd"] // s["n_head"]
        self.k = torch.zeros(s["n_layer"], s["n_kv"], s["seq_len"], hs)
        self.v = torch.zeros_like(self.k)


def attend(q, k, v, pos, n, n_head, n_kv):
    """q (n, NH, hs) at positions pos..pos+n-1 over the cache rows [0, pos + n). The query
    heads sharing a key/value head are stacked as rows of one product (no copies of the
    cache, as repeat_kv would make)."""
    group, hs, P = n_head // n_kv, q.shape[-1], pos + n
    qg = q.transpose(0, 1).reshape(n_kv, group * n, hs)                 # (NKV, group n, hs)
    att = torch.matmul(qg, k[:, :P].transpose(1, 2)) / math.sqrt(hs)    # (NKV, group n, P)
    if n > 1:
        mask = torch.ones(n, P, dtype=torch.bool).tril(pos).repeat(group, 1)
        att = att.masked_fill(~mask, float("-inf"))
    y = torch.matmul(att.softmax(-1), v[:, :P])                         # (NKV, group n, hs)
    return y.view(n_head, n, hs).transpose(0, 1).reshape(n, n_head * hs)


def gpt2_forward(w, s, cache, tokens, pos):
    n, NH, C = len(tokens), s["n_head"], s["n_embd"]
    hs = C // NH
    x = w["wte"][tokens] + w["wpe"][pos:pos + n]
    for l in range(s["n_layer"]):
        h = F.layer_norm(x, (C,), *w[f"{l}.ln1"], 1e-5)
        q, k, v = F.linear(h, *w[f"{l}.qkv"]).split(C, dim=1)
        cache.k[l, :, pos:pos + n] = k.view(n, NH, hs).transpose(0, 1)
        cache.v[l, :, pos:pos + n] = v.view(n, NH, hs).transpose(0, 1)
        y = attend(q.view(n, NH, hs), cache.k[l], cache.v[l], pos, n, NH, NH)
        x = x + F.linear(y, *w[f"{l}.proj"])
        h = F.layer_norm(x, (C,), *w[f"{l}.ln2"], 1e-5)
        x = x + F.linear(F.gelu(F.linear(h, *w[f"{l}.fc"]), approximate="tanh"), *w[f"{l}.fcproj"])
    x = F.layer_norm(x[-1:], (C,), *w["lnf"], 1e-5)
    return F.linear(x, w["wte"])[0]


def rms(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


def llama_forward(w, s, cache, tokens, pos, rope):
    n, NH, NKV, C, F_ = len(tokens), s["n_head"], s["n_kv"], s["n_embd"], s["ffn"]
    hs = C // NH
    cos, sin = (r[pos:pos + n].unsqueeze(1) for r in rope)
    x = w["wte"][tokens]
    for l in range(s["n_layer"]):
        h = rms(x, w[f"{l}.norm1"])
        q, k, v = F.linear(h, w[f"{l}.qkv"]).split((NH * hs, NKV * hs, NKV * hs), dim=1)
        q = rotate(q.view(n, NH, hs), cos, sin)
        k = rotate(k.view(n, NKV, hs), cos, sin)
        cache.k[l, :, pos:pos + n] = k.transpose(0, 1)
        cache.v[l, :, pos:pos + n] = v.view(n, NKV, hs).transpose(0, 1)
        x = x + F.linear(attend(q, cache.k[l], cache.v[l], pos, n, NH, NKV), w[f"{l}.o"])
        gate, up = F.linear(rms(x, w[f"{l}.norm2"]), w[f"{l}.gate_up"]).split(F_, dim=1)
        x = x + F.linear(F.silu(gate) * up, w[f"{l}.down"])
    return F.linear(rms(x[-1:], w["norm"]), w["wte"])[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", choices=sorted(SHAPES), required=True)
    ap.add_argument("--hf-dir", required=True, help="where to write the model (config.json, model.safetensors)")
    ap.add_argument("--prompt", type=int, nargs="+", required=True, help="prompt token ids")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    s = SHAPES[a.arch]
    w = random_weights(a.arch, s, a.seed)
    write_hf_dir(a.arch, s, w, a.hf_dir)
    cache = Cache(s)
    if a.arch == "gpt2":
        step = lambda toks, pos: gpt2_forward(w, s, cache, toks, pos)  # noqa: E731
    else:
        hs = s["n_embd"] // s["n_head"]
        inv = 1.0 / (100000.0 ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        ang = torch.outer(torch.arange(s["seq_len"], dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), -1)
        rope = (ang.cos().float(), ang.sin().float())
        step = lambda toks, pos: llama_forward(w, s, cache, toks, pos, rope)  # noqa: E731
    with torch.inference_mode():
        t0 = time.perf_counter()
        logits = step(torch.tensor(a.prompt), 0)
        t1 = time.perf_counter()
        out, pos = [], len(a.prompt)
        for i in range(a.new):
            tok = int(torch.argmax(logits[:s["vocab"]]))
            out.append(tok)
            if i + 1 < a.new:
                logits = step(torch.tensor([tok]), pos)
                pos += 1
        t2 = time.perf_counter()
    print(json.dumps({"arch": a.arch, "threads": a.threads, "prompt_tokens": len(a.prompt), "new_tokens": a.new,
                      "prefill_s": t1 - t0, "decode_s": t2 - t1, "tokens_per_s": a.new / (t2 - t1),
                      "torch": torch.__version__, "tokens": out}))


if __name__ == "__main__":
    main()
