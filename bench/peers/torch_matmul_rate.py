"""PyTorch's own matrix-product rate on this machine, per dtype, at the peers' shapes.

The peers' speed is mostly their products; this says what those products reach on one thread,
so a ratio against ztrain can be read against both sides' product rates (ztrain's own:
bench/sgemm_ceiling.cpp and bench/bf16_ceiling.cpp).

  .venv/bin/python bench/peers/torch_matmul_rate.py [--threads 1] [--reps 5]

Prints one line per (dtype, shape): GFLOP/s, the best of --reps timed calls after a warm-up.
"""
import argparse
import time

import torch

# (M, K, N) of C = A @ B: GPT-2 124M's block products and head at micro-batch 4 x seq 256, and
# SmolLM2-360M's at 2 x 256 (the LoRA bench).
SHAPES = [
    (1024, 768, 2304), (1024, 768, 768), (1024, 768, 3072), (1024, 3072, 768), (1024, 768, 50304),
    (512, 960, 960), (512, 960, 2560), (512, 2560, 960), (512, 960, 50304),
]


def rate(m, k, n, dtype, reps):
    a = torch.randn(m, k, dtype=torch.float32).to(dtype)
    b = torch.randn(k, n, dtype=torch.float32).to(dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * k * n / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.reps}")
    print(f"MKL: {torch.backends.mkl.is_available()}, oneDNN: {torch.backends.mkldnn.is_available()}, "
          f"CPU capability: {torch.backends.cpu.get_cpu_capability()}")
    for dtype in (torch.float32, torch.bfloat16):
        for m, k, n in SHAPES:
            print(f"{str(dtype).removeprefix('torch.'):8} {m}x{k}x{n}: {rate(m, k, n, dtype, args.reps):7.1f} GFLOP/s")


if __name__ == "__main__":
    main()
