#!/usr/bin/env python3
"""nanoGPT-style GPT-2 training-step benchmark in PyTorch (CPU, fp32).

The reference point for ztrain's CPU backend: the same architecture (token + learned
position embeddings, pre-LN blocks, causal self-attention, 4x GELU(tanh) MLP, final LN,
LM head tied to wte, vocabulary padded like ztrain's model.vocab_pad_to, GPT-2 init with
std 0.02 and the 1/sqrt(2*n_layer) scaling of residual projections), AdamW with weight
decay on 2-D parameters only, global grad-norm clipping at 1.0, random token batches.

Each step is timed (forward, loss, backward, clip, optimizer step, zero_grad); the final
line of stdout is a JSON object whose "tokens_per_s" is the median over the steps after
the first --warmup (default 2) steps.

Written for Debian's PyTorch 1.13 (run with /usr/bin/python3): 1.13 has no
F.scaled_dot_product_attention, so attention is the plain masked softmax; newer PyTorch
versions use the same code path, so figures stay comparable across versions.
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_timing import add_training_args, start, time_training


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, seq_len, seq_len), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, seq_len):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, seq_len)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, seq_len, vocab_padded):
        super().__init__()
        self.wte = nn.Embedding(vocab_padded, n_embd)
        self.wpe = nn.Embedding(seq_len, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, seq_len) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_padded, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        # Padded vocabulary rows are never targets; the loss runs over the padded width,
        # as nanoGPT does with its padded 50304-row embedding.
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=50257)
    add_training_args(ap)
    a = ap.parse_args(argv)

    vp = start(a)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, vp)
    return time_training(model, a, {
        "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "seq_len": a.seq_len,
        "vocab": a.vocab, "vocab_padded": vp})


if __name__ == "__main__":
    sys.exit(main())
