#!/usr/bin/env python3
"""Llama training-step benchmark in PyTorch (CPU, fp32): SmolLM2-135M's shape by default.

The reference point for ztrain's Llama model (model.arch = llama) on the CPU backend: a
hand-written Hugging Face-style Llama with the same architecture and products as ztrain's
(src/model/llama.cpp): token embedding (no learned positions), pre-norm blocks with RMSNorm
(weight only, eps 1e-5), one fused q|k|v projection of width (n_head + 2 n_kv_head) * hs with
no bias, rotary embeddings in the rotate-half convention (HF's LlamaRotaryEmbedding) on q and
k, grouped-query causal attention (each of the n_kv_head key/value heads serves
n_head / n_kv_head query heads), o_proj, a fused gate|up projection to 2 * ffn_dim, SwiGLU
(silu(gate) * up), down_proj, final RMSNorm, LM head tied to the embedding. Init: normal with
std 0.02 for every matrix (HF's initializer_range), RMSNorm weights 1. AdamW (betas 0.9/0.95,
weight decay on 2-D parameters only), global grad-norm clipping at 1.0, uniform-random tokens.

The fused q|k|v and gate|up products are what ztrain runs (one GEMM each instead of HF's
three and two Linear modules; the same FLOPs, fewer and larger calls).

Written for Debian's PyTorch 1.13 (run with /usr/bin/python3): 1.13 has neither
F.scaled_dot_product_attention nor its enable_gqa, so the key/value heads are expanded to
the query heads (HF's repeat_kv: expand + reshape) and attention is the plain masked softmax,
as in bench/torch_gpt.py.

Each step is timed (forward, loss, backward, clip, optimizer step, zero_grad) exactly as in
bench/torch_gpt.py; the final line of stdout is a JSON object whose "tokens_per_s" is the
median over the steps after the first --warmup (default 2) steps.
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import add_training_args, start, time_training


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq_len, hs, theta):
    """cos and sin, (T, hs) each, in HF's layout: the hs/2 frequencies repeated twice."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().float(), emb.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head, seq_len):
        super().__init__()
        assert n_embd % n_head == 0 and n_head % n_kv_head == 0
        self.n_head, self.n_kv_head, self.hs = n_head, n_kv_head, n_embd // n_head
        self.qkv_proj = nn.Linear(n_embd, (n_head + 2 * n_kv_head) * self.hs, bias=False)
        self.o_proj = nn.Linear(n_head * self.hs, n_embd, bias=False)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, seq_len, seq_len), persistent=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        NH, NKV, hs = self.n_head, self.n_kv_head, self.hs
        q, k, v = self.qkv_proj(x).split([NH * hs, NKV * hs, NKV * hs], dim=2)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NKV, hs).transpose(1, 2)
        v = v.view(B, T, NKV, hs).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if NKV != NH:  # repeat_kv: each key/value head serves NH / NKV query heads
            rep = NH // NKV
            k = k[:, :, None].expand(B, NKV, rep, T, hs).reshape(B, NH, T, hs)
            v = v[:, :, None].expand(B, NKV, rep, T, hs).reshape(B, NH, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, NH * hs)
        return self.o_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd, ffn_dim):
        super().__init__()
        self.ffn_dim = ffn_dim
        self.gate_up_proj = nn.Linear(n_embd, 2 * ffn_dim, bias=False)
        self.down_proj = nn.Linear(ffn_dim, n_embd, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).split(self.ffn_dim, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_kv_head, ffn_dim, seq_len, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(n_embd, eps)
        self.self_attn = Attention(n_embd, n_head, n_kv_head, seq_len)
        self.post_attention_layernorm = RMSNorm(n_embd, eps)
        self.mlp = MLP(n_embd, ffn_dim)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class Llama(nn.Module):
    def __init__(self, n_layer, n_head, n_kv_head, n_embd, ffn_dim, seq_len, vocab_padded, rope_theta, eps):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_padded, n_embd)
        self.layers = nn.ModuleList(
            [Block(n_embd, n_head, n_kv_head, ffn_dim, seq_len, eps) for _ in range(n_layer)])
        self.norm = RMSNorm(n_embd, eps)
        self.lm_head = nn.Linear(n_embd, vocab_padded, bias=False)
        self.lm_head.weight = self.embed_tokens.weight  # tied
        cos, sin = rope_tables(seq_len, n_embd // n_head, rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        cos, sin = self.cos[:T], self.sin[:T]
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-layer", type=int, default=30)
    ap.add_argument("--n-head", type=int, default=9)
    ap.add_argument("--n-kv-head", type=int, default=3)
    ap.add_argument("--n-embd", type=int, default=576)
    ap.add_argument("--ffn-dim", type=int, default=1536)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--rope-theta", type=float, default=100000.0)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    add_training_args(ap)
    a = ap.parse_args(argv)

    vp = start(a)
    model = Llama(a.n_layer, a.n_head, a.n_kv_head, a.n_embd, a.ffn_dim, a.seq_len, vp, a.rope_theta,
                  a.norm_eps)
    return time_training(model, a, {
        "arch": "llama", "n_layer": a.n_layer, "n_head": a.n_head, "n_kv_head": a.n_kv_head, "n_embd": a.n_embd,
        "ffn_dim": a.ffn_dim, "seq_len": a.seq_len, "vocab": a.vocab, "vocab_padded": vp})


if __name__ == "__main__":
    sys.exit(main())
