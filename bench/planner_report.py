"""The planner bench's report (bench/planner_bench.sh): every run's predicted and measured
step, the median absolute error, Spearman's rank correlation of the step times, and per
shape and world size whether the mesh the plan ranks fastest (tokens/s: meshes differ in
data ranks, so in tokens per step) is within 10% of the measured fastest.

    python3 bench/planner_report.py WORK_DIR [OUT.md]

WORK_DIR holds rows.tsv (shape, np, mesh, predicted ms, measured ms) and each run's plan,
run_<shape>_np<np>_<mesh>.plan, whose "tokens per step" line gives the tokens.
"""
import os
import re
import statistics
import sys


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    for k, i in enumerate(order):
        out[i] = k + 1.0
    return out


def spearman(a, b):
    n = len(a)
    ra, rb = ranks(a), ranks(b)
    return 1 - 6 * sum((x - y) ** 2 for x, y in zip(ra, rb)) / (n * (n * n - 1))


def main():
    work = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else ""
    rows = []
    for line in open(os.path.join(work, "rows.tsv")):
        if not line.strip():
            continue
        shape, np, mesh, pred, meas = line.rstrip("\n").split("\t")
        plan = open(os.path.join(work, f"run_{shape}_np{np}_{mesh}.plan")).read()
        tokens = float(re.search(r"^tokens per step ([0-9.]+)", plan, re.M).group(1))
        rows.append(dict(shape=shape, np=np, mesh=mesh, pred=float(pred), meas=float(meas), tokens=tokens))
    lines = ["| shape | np | mesh | tokens/step | predicted ms | measured ms | error | predicted tok/s | measured tok/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        err = 100 * (r["pred"] - r["meas"]) / r["meas"]
        lines.append(f"| {r['shape']} | {r['np']} | {r['mesh']} | {r['tokens']:.0f} | {r['pred']:.1f} | {r['meas']:.1f} | "
                     f"{err:+.1f}% | {r['tokens'] / r['pred'] * 1e3:.0f} | {r['tokens'] / r['meas'] * 1e3:.0f} |")
    summary = []
    if len(rows) >= 2:
        errors = [abs(r["pred"] - r["meas"]) / r["meas"] for r in rows]
        rho = spearman([r["pred"] for r in rows], [r["meas"] for r in rows])
        summary.append(f"- runs {len(rows)}; median absolute error of the step **{100 * statistics.median(errors):.1f}%** "
                       f"(target <= 15%); Spearman of the step times **{rho:.3f}** (target >= 0.85)")
        for group in sorted({(r["shape"], r["np"]) for r in rows}):
            g = [r for r in rows if (r["shape"], r["np"]) == group]
            best_pred = max(g, key=lambda r: r["tokens"] / r["pred"])
            best_meas = max(g, key=lambda r: r["tokens"] / r["meas"])
            gap = 100 * (best_meas["tokens"] / best_meas["meas"] / (best_pred["tokens"] / best_pred["meas"]) - 1)
            rho_g = spearman([r["tokens"] / r["pred"] for r in g], [r["tokens"] / r["meas"] for r in g]) if len(g) > 1 else 1
            summary.append(f"- {group[0]} np {group[1]} ({len(g)} meshes): the plan's fastest, {best_pred['mesh']}, "
                           f"measures {best_pred['tokens'] / best_pred['meas'] * 1e3:.0f} tok/s; the measured fastest, "
                           f"{best_meas['mesh']}, {best_meas['tokens'] / best_meas['meas'] * 1e3:.0f} tok/s: "
                           f"{gap:.1f}% faster (target <= 10%); Spearman of tokens/s {rho_g:.3f}")
    text = "\n".join(lines + [""] + summary) + "\n"
    print(text)
    if out:
        open(out, "w").write(text)


if __name__ == "__main__":
    main()
