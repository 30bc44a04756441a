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
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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


def peak_rss_mib():
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    except Exception:  # pragma: no cover
        return float("nan")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-layer", type=int, default=12)
    ap.add_argument("--n-head", type=int, default=12)
    ap.add_argument("--n-embd", type=int, default=768)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--vocab-pad-to", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="leading steps excluded from the median")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--quiet", action="store_true", help="only print the final JSON line")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    vp = (a.vocab + a.vocab_pad_to - 1) // a.vocab_pad_to * a.vocab_pad_to
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.seq_len, vp)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": a.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    opt_kwargs = dict(lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    try:  # fused= is CUDA-only in 2.x; foreach= exists from 1.12
        opt = torch.optim.AdamW(groups, foreach=True, **opt_kwargs)
        opt_impl = "foreach"
    except TypeError:
        opt = torch.optim.AdamW(groups, **opt_kwargs)
        opt_impl = "default"

    gen = torch.Generator().manual_seed(a.seed)
    tokens = a.batch * a.seq_len
    rates, step_ms = [], []
    for step in range(1, a.steps + 1):
        idx = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=gen)
        tgt = torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=gen)
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        rates.append(tokens / dt)
        step_ms.append(dt * 1e3)
        if not a.quiet:
            print(f"step {step:4d}/{a.steps} | loss {loss.item():.4f} | norm {norm.item():.3f} | "
                  f"{tokens / dt:.1f} tok/s | {dt * 1e3:.0f} ms", flush=True)

    measured = rates[a.warmup:] if len(rates) > a.warmup else rates
    print(json.dumps({
        "impl": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd, "seq_len": a.seq_len,
        "vocab": a.vocab, "vocab_padded": vp, "batch": a.batch, "steps": a.steps,
        "num_params": n_params, "adamw": opt_impl,
        "tokens_per_s": statistics.median(measured),
        "step_ms_median": statistics.median(step_ms[a.warmup:] or step_ms),
        "peak_rss_mib": peak_rss_mib(),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
