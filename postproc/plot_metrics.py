#!/usr/bin/python3
"""Plots a ztrain run's metrics.jsonl to a PNG: train/val loss (nats per token), learning
rate, gradient norm, tokens/s and (fp16 runs) the loss scale against the optimizer step,
titled with the run's name (its run.dir).

Usage: /usr/bin/python3 postproc/plot_metrics.py run/demo/metrics.jsonl [-o run/demo/metrics.png]
Needs matplotlib (Debian: python3-matplotlib; bash .ci/setup.sh demo installs it). The C++
build never depends on this script.
"""
import argparse
import json
import os
import sys


def read_records(path):
    steps, evals = [], []
    if not os.path.isfile(path):
        print(f"plot_metrics.py: error: {path}: no such file (a run writes run.dir/metrics.jsonl)", file=sys.stderr)
        sys.exit(2)
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


def run_name(metrics):
    """The run's name: its run.dir's last part (run/demo/metrics.jsonl -> demo)."""
    d = os.path.dirname(os.path.abspath(metrics))
    return os.path.basename(d) or d


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", help="run.dir/metrics.jsonl")
    ap.add_argument("-o", "--output", help="PNG to write (default: next to the metrics)")
    args = ap.parse_args()
    steps, evals = read_records(args.metrics)
    if not steps:
        sys.exit(f"{args.metrics}: no step records")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError as e:
        print(f"plot_metrics.py: error: needs matplotlib ({e}): apt-get install python3-matplotlib "
              "(Debian/Ubuntu; bash .ci/setup.sh demo does it), or pip install matplotlib", file=sys.stderr)
        sys.exit(2)

    out = args.output or args.metrics.rsplit(".", 1)[0] + ".png"
    x = [r["step"] for r in steps]
    nan = float("nan")
    # The loss scale only moves in fp16 runs (metrics.jsonl has 1 for fp32 and bf16): its
    # panel is drawn only when some step ran with another scale.
    fp16 = any(r.get("loss_scale", 1.0) != 1.0 for r in steps)
    panels = ["loss", "learning rate", "gradient norm", "tokens/s"] + (["loss scale"] if fp16 else [])
    cols = 3 if fp16 else 2
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 7))
    ax = dict(zip(panels, axes.flat))
    if fp16:
        axes.flat[-1].set_visible(False)
    skipped = [r for r in steps if r.get("skipped")]
    a = ax["loss"]
    a.plot(x, [r["loss"] for r in steps], label="train", lw=1)
    if evals:
        # Evaluations are points in time (every eval_every steps): markers, not a line.
        a.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o", label="val")
    if skipped:
        a.plot([r["step"] for r in skipped], [r["loss"] for r in skipped], "rx", label="skipped step")
    a.legend()
    a.set_ylabel("loss (nats per token)")
    ax["learning rate"].plot(x, [r["lr"] for r in steps])
    a = ax["gradient norm"]
    a.plot(x, [r["grad_norm"] if r.get("grad_norm") is not None else nan for r in steps], lw=1)
    a.set_yscale("log")
    a.set_title("gradient norm (before clipping)")
    ax["tokens/s"].plot(x, [r.get("tokens_per_s", nan) for r in steps], lw=1)
    if fp16:
        a = ax["loss scale"]
        a.plot(x, [r.get("loss_scale", 1.0) for r in steps])
        if skipped:
            a.plot([r["step"] for r in skipped], [r.get("loss_scale", 1.0) for r in skipped], "rx",
                   label="skipped step")
            a.legend()
        a.set_yscale("log")
    for name, a in ax.items():
        if not a.get_title():
            a.set_title(name)
        if a.get_yscale() == "log":
            # Log axes spanning less than a decade get no labelled tick by default: label
            # 1-2-5 steps in plain numbers.
            a.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            a.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            a.yaxis.set_minor_formatter(ticker.NullFormatter())
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    run = run_name(args.metrics)
    fig.suptitle(run)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"wrote {out} (panels: {', '.join(panels)})")
    print(f"title: {run}; loss in nats per token")


if __name__ == "__main__":
    main()
