#!/usr/bin/python3
"""Plot a ztrain run's metrics.jsonl to a PNG: train/val loss, learning rate, gradient norm
and loss scale against the optimizer step.

Usage: /usr/bin/python3 postproc/plot_metrics.py run/demo/metrics.jsonl -o run/demo/metrics.png
Needs python3-matplotlib (Debian). The C++ build never depends on this script.
"""
import argparse
import json
import sys


def read_records(path):
    steps, evals = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e})")
            if "val_loss" in rec:
                evals.append(rec)
            elif "loss" in rec:
                steps.append(rec)
    return steps, evals


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics", help="run.dir/metrics.jsonl")
    ap.add_argument("-o", "--output", help="PNG to write (default: next to the metrics)")
    args = ap.parse_args()
    steps, evals = read_records(args.metrics)
    if not steps:
        sys.exit(f"{args.metrics}: no step records")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = args.output or args.metrics.rsplit(".", 1)[0] + ".png"
    x = [r["step"] for r in steps]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    ax[0][0].plot(x, [r["loss"] for r in steps], label="train", lw=1)
    if evals:
        ax[0][0].plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label="val")
    ax[0][0].set_title("loss")
    ax[0][0].legend()
    ax[0][1].plot(x, [r["lr"] for r in steps])
    ax[0][1].set_title("learning rate")
    ax[1][0].plot(x, [r["grad_norm"] for r in steps], lw=1)
    ax[1][0].set_title("gradient norm (before clipping)")
    ax[1][0].set_yscale("log")
    ax[1][1].plot(x, [r.get("loss_scale", 1.0) for r in steps])
    skipped = [r["step"] for r in steps if r.get("skipped")]
    if skipped:
        ax[1][1].plot(skipped, [1.0] * len(skipped), "rx", label="skipped step")
        ax[1][1].legend()
    ax[1][1].set_title("loss scale")
    ax[1][1].set_yscale("log")
    for a in ax.flat:
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
