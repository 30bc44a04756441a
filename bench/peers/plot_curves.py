#!/usr/bin/python3
"""Two or more loss curves in one PNG: ztrain's metrics.jsonl and the peers' step files
(bench/peers/peer_train.py), loss against the optimizer step, and below, each curve's
relative difference from the first.

Usage: /usr/bin/python3 plot_curves.py -o OUT.png --label A A.jsonl --label B B.jsonl
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "step" in r:
                out[r["step"]] = r["loss"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--label", action="append", required=True)
    ap.add_argument("files", nargs="+")
    a = ap.parse_intermixed_args()
    if len(a.label) != len(a.files):
        raise SystemExit("plot_curves.py: one --label per file")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = [losses(f) for f in a.files]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    styles = ["-", "--", ":", "-."]
    for i, (label, c) in enumerate(zip(a.label, curves)):
        steps = sorted(c)
        top.plot(steps, [c[s] for s in steps], styles[i % 4], label=label, linewidth=1.5)
    top.set_ylabel("training loss (nats/token)")
    top.legend()
    top.grid(alpha=0.3)
    ref = curves[0]
    for i, (label, c) in enumerate(zip(a.label[1:], curves[1:]), 1):
        steps = sorted(set(c) & set(ref))
        bottom.semilogy(steps, [max(abs(c[s] - ref[s]) / abs(ref[s]), 1e-10) for s in steps], styles[i % 4],
                        label=f"|{label} - {a.label[0]}| / {a.label[0]}")
    bottom.axhline(1e-4, color="red", linewidth=0.8, label="1e-4")
    bottom.set_xlabel("optimizer step")
    bottom.set_ylabel("relative difference")
    bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)


if __name__ == "__main__":
    main()
