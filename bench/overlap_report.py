#!/usr/bin/env python3
"""Markdown report of bench/overlap_bench.sh from its runs' metrics.jsonl.

usage: overlap_report.py WORK REPS CASES RATE COMMAND
CASES: "name:group:comm_thread[:overlap_depth] ..." as the bench ran them; run folders
WORK/NAME_cTHREAD_dDEPTH_rREP (depth 0: the memory plan's choice, read from the memory record).
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import time


def steps(path):
    """Step records after the first two (warm-up: caches, the lr warmup, TCP slow start)."""
    with open(path) as f:
        recs = [r for r in map(json.loads, f) if "step_ms" in r]
    return recs[2:]


def overlap_depth(path):
    """The depth the run used (its memory record's overlap_depth)."""
    with open(path) as f:
        for r in map(json.loads, f):
            if r.get("event") == "memory":
                return r.get("overlap_depth", "?")
    return "?"


def main():
    work, reps, cases, rate, command = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], sys.argv[5]
    rows = []
    for case in cases:
        name, group, thread, asked = (case.split(":") + ["0"])[:4]
        step_meds, waits, runs, inter, intra = [], [], [], [], []
        for rep in range(1, reps + 1):
            metrics = os.path.join(work, f"{name}_c{thread}_d{asked}_r{rep}", "metrics.jsonl")
            depth = overlap_depth(metrics)
            recs = steps(metrics)
            step_meds.append(statistics.median(r["step_ms"] for r in recs))
            world = len(recs[0]["comm_overlap"]["wait_ms_by_rank"])
            waits.append([statistics.median(r["comm_overlap"]["wait_ms_by_rank"][k] for r in recs) for k in range(world)])
            runs.append([statistics.median(r["comm_overlap"]["run_ms_by_rank"][k] for r in recs) for k in range(world)])
            cb = recs[0]["comm_bytes"]
            intra.append(sum(v for k, v in cb["intra"].items() if k != "scalar"))
            inter.append(sum(v for k, v in cb["inter"].items() if k != "scalar"))
        world = len(waits[0])
        wait = [statistics.median(w[k] for w in waits) for k in range(world)]
        run = [statistics.median(x[k] for x in runs) for k in range(world)]
        rows.append(dict(name=name, group=group, thread=thread, depth=depth, steps=step_meds, step=statistics.median(step_meds),
                         wait=wait, run=run, intra=intra[0], inter=inter[0]))

    by = {}
    for r in rows:  # the first case of each layout and thread setting
        by.setdefault((r["name"], r["thread"]), r)
    out = []
    out.append("# Communication overlap on an emulated two-node network\n")
    load_end = open("/proc/loadavg").read().split()[:3]
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    out.append(f"- command: `{command}`")
    out.append(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git}")
    out.append(f"- machine: {cpu}, {os.cpu_count()} cores ({platform.node()}), shared; load average "
               f"{os.environ.get('ZT_LOAD_START', '?')} at the start, {' '.join(load_end)} at the end")
    out.append(f"- network: 2 nodes (network namespaces, tests/slurm/start_local_slurm.sh --nodes 2), "
               f"2 ranks each; every veth end shaped with `tc qdisc ... tbf rate {rate} burst 256kb "
               f"latency 50ms`; no added delay (no netem in this kernel)")
    out.append("- model: 6 layers x 384 wide x 6 heads, seq 256, vocab 8192, 13.9M parameters (23% in the tied "
               "embedding), fp32, ZeRO-3, micro_batch 2, grad_accum 2, 1 compute thread per rank, synthetic "
               "tokens\n")
    out.append("## Step time and collective waits (np 4 = 2 nodes x 2)\n")
    out.append("`wait` / `run`: per rank, the median per step of the time the training thread waited for "
               "started collectives and the time they ran in the communication thread "
               "(metrics.jsonl `comm_overlap.wait_ms_by_rank` / `run_ms_by_rank`); `hidden` = 1 - "
               "sum(wait) / sum(run) over the ranks. Without the thread every collective runs while "
               "waited for (`run` 0), so its `wait` is all of its communication time.\n")
    out.append("| layout | comm_thread | overlap depth | step ms per rep | median | wait ms per rank | run ms per rank "
               "| hidden | MB/step in group / across groups |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        layout = "flat (1 group of 4)" if r["name"] == "flat" else "hybrid (2 groups of 2)"
        hidden = "-" if sum(r["run"]) == 0 else f"{1 - sum(r['wait']) / sum(r['run']):.2f}"
        out.append(f"| {layout} | {r['thread']} | {r['depth']} | {' '.join(str(round(s)) for s in r['steps'])} | "
                   f"{round(r['step'])} | {' '.join(str(round(w)) for w in r['wait'])} | "
                   f"{' '.join(str(round(x)) for x in r['run'])} | {hidden} | "
                   f"{r['intra'] / 1e6:.0f} / {r['inter'] / 1e6:.0f} |")
    out.append("")
    lines = []
    for name in ("flat", "hybrid"):
        on, off = by.get((name, "true")), by.get((name, "false"))
        if on and off:
            lines.append(f"- {name}: the communication thread takes the step from {round(off['step'])} to "
                         f"{round(on['step'])} ms ({on['step'] / off['step']:.2f}x); waits from "
                         f"{round(statistics.mean(off['wait']))} to {round(statistics.mean(on['wait']))} ms "
                         f"per rank on average")
    if by.get(("hybrid", "true")) and by.get(("flat", "true")):
        lines.append(f"- hybrid vs flat (thread on): {by[('hybrid', 'true')]['step'] / by[('flat', 'true')]['step']:.2f}x "
                     f"the step time")
    for name in ("flat", "hybrid"):
        same = [r for r in rows if r["name"] == name and r["thread"] == "true"]
        for a, b in zip(same, same[1:]):
            if a["depth"] != b["depth"]:
                lines.append(f"- {name}: overlap depth {a['depth']} -> {b['depth']}: step {round(a['step'])} -> "
                             f"{round(b['step'])} ms ({b['step'] / a['step']:.2f}x), waits "
                             f"{round(statistics.mean(a['wait']))} -> {round(statistics.mean(b['wait']))} ms per rank")
    out.extend(lines)
    print("\n".join(out))


if __name__ == "__main__":
    main()
