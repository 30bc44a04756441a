#!/usr/bin/env python3
"""torch.optim.Muon's step over a GPT-2's block matrices on the CPU: the peer of ztrain's Muon
phase (bench/muon_bench.sh).

    torch_muon_step.py THREADS STEPS N_LAYER N_EMBD bf16|fp32

Builds the 4 matrices of each of N_LAYER GPT-2 blocks of width C = N_EMBD in nn.Linear's
(out, in) orientation (q|k|v 3C x C, attention output C x C, MLP 4C x C and C x 4C), fp32, each
with a random gradient, and times STEPS calls of torch.optim.Muon(...).step(). bf16: its
Newton-Schulz as torch ships it (in bfloat16); fp32: the same code with the module's
torch.bfloat16 read as float32 (ztrain's precision). Prints the median milliseconds of the
steps after the first.
"""
import statistics
import sys
import time

import torch
import torch.optim._muon as muon_module


class Float32Torch:
    """torch, but its bfloat16 is float32: torch.optim.Muon's own Newton-Schulz, in fp32."""

    bfloat16 = torch.float32

    def __getattr__(self, name):
        return getattr(torch, name)


def main(threads, steps, n_layer, c, dtype):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    shapes = [(3 * c, c), (c, c), (4 * c, c), (c, 4 * c)] * n_layer
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.Muon(params, lr=3e-4, adjust_lr_fn="match_rms_adamw")
    if dtype == "fp32":
        muon_module.torch = Float32Torch()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    print(f"{statistics.median(times[1:]):.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
