"""What bench/torch_gpt.py and bench/torch_llama.py share: the training options, and the
timed loop (zero_grad + forward + backward + grad-norm clip + AdamW per step) with the final
JSON line the CPU bench reads. Each script supplies only its model and its record fields."""
import json
import statistics
import time

import torch


def add_training_args(ap):
    ap.add_argument("--vocab-pad-to", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="leading steps excluded from the median")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--quiet", action="store_true", help="only print the final JSON line")
    ap.add_argument("--autocast-bf16", action="store_true",
                    help='forward under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch\'s CPU mixed precision)')


def start(a):
    """Threads and seed (before the model is built); returns the padded vocabulary."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    return (a.vocab + a.vocab_pad_to - 1) // a.vocab_pad_to * a.vocab_pad_to


def peak_rss_mib():
    try:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux
    except Exception:  # pragma: no cover
        return float("nan")


def time_training(model, a, record):
    """Trains `model` (called as model(idx, targets) -> loss) for a.steps steps on uniform
    random tokens and prints `record` plus the measured fields as one JSON line."""
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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast_bf16):
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
    out = {"impl": "torch", "torch": torch.__version__, "threads": torch.get_num_threads(),
           "autocast_bf16": a.autocast_bf16}
    out.update(record)
    out.update({
        "batch": a.batch, "steps": a.steps, "num_params": n_params, "adamw": opt_impl,
        "tokens_per_s": statistics.median(measured),
        "step_ms_median": statistics.median(step_ms[a.warmup:] or step_ms),
        "peak_rss_mib": peak_rss_mib(),
    })
    print(json.dumps(out))
    return 0
