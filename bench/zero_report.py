#!/usr/bin/python3
"""Writes the ZeRO benchmark report from bench/zero_bench.sh's run directories.

Usage: zero_report.py WORK REPS STEPS "MEM_CASES" COMMAND "COMM_THREAD"
Reads WORK/time_s{stage}_c{true|false}_r{rep}/metrics.jsonl (step time at N=2) and
WORK/mem_n{N}_s{stage}_{dtype}/metrics.jsonl (the memory record); prints markdown.
"""
import glob
import json
import os
import statistics
import subprocess
import sys
import time


def step_ms(path):
    ms = [r["step_ms"] for r in map(json.loads, open(path)) if "step_ms" in r]
    return statistics.median(ms[2:])  # the first steps warm caches and page in buffers


def overlap(path):
    """Medians over steps 3.. of the started collectives' wait and run time (ms) and counts."""
    rs = [r for r in map(json.loads, open(path)) if "comm_overlap" in r][2:]
    if not rs:
        return None
    med = lambda k: statistics.median(r["comm_overlap"][k] for r in rs)
    return med("wait_ms"), med("run_ms"), med("waited"), med("finished_before_wait")


def peak_rss_mib(run_dir):
    """Largest peak RSS over the ranks of a run (rank r's /usr/bin/time wrote RUN_DIR.rss.r)."""
    kb = [int(open(f).read().split()[-1]) for f in glob.glob(f"{run_dir}.rss.*")]
    return max(kb) / 1024.0 if kb else float("nan")


def memory_record(path):
    with open(path) as f:
        return json.loads(f.readline())


def main():
    work, reps, steps, cases, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5]
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    print("# ZeRO stages: step time and memory per rank\n")
    print(f"- command: `{command}`")
    print(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git}")
    load_end = open("/proc/loadavg").read().split()[:3]
    load_start = os.environ.get("ZT_LOAD_START", "?")
    print(f"- machine: {cpu}, 2 cores, shared with other jobs; load average {load_start} at the start,"
          f" {' '.join(load_end)} at the end")
    print("- model: 4 layers x 256 wide x 4 heads, seq 256, vocab 50257 (padded 50304), 16.1M parameters;")
    print("  micro_batch 2, grad_accum 2, 1 thread per rank, synthetic tokens\n")
    modes = sys.argv[6].split() if len(sys.argv) > 6 else ["true"]
    print(f"## Step time at N = 2 (median step_ms over steps 3..{steps}; median over {reps} interleaved reps)\n")
    print("`comm_thread` is parallel.comm_thread. `wait / run` are the medians per step of rank 0's")
    print("`comm_overlap` (metrics.jsonl): the time the training thread waited for started collectives and")
    print("the time they ran in the communication thread; `hidden` = 1 - wait/run, the share of that")
    print("communication that overlapped compute.\n")
    print("| stage | comm_thread | step ms per rep | median | vs DDP (same comm_thread) | wait / run ms | finished before wait | hidden |")
    print("|---|---|---|---|---|---|---|---|")
    for ct in modes:
        ddp = None
        for stage in range(4):
            runs = [f"{work}/time_s{stage}_c{ct}_r{r}/metrics.jsonl" for r in range(1, reps + 1)]
            per = [step_ms(p) for p in runs]
            med = statistics.median(per)
            ddp = ddp or med
            name = "DDP" if stage == 0 else f"ZeRO-{stage}"
            ov = overlap(runs[-1])
            if ov and ov[2] > 0:
                hidden = f"{1 - ov[0] / ov[1]:.2f}" if ov[1] > 0 else "-"
                ovs = f"{ov[0]:.0f} / {ov[1]:.0f} | {ov[3]:.0f} of {ov[2]:.0f} | {hidden}"
            else:
                ovs = "- | - | -"
            print(f"| {name} | {ct} | {' '.join(f'{x:.0f}' for x in per)} | {med:.0f} | {med / ddp:.3f}x | {ovs} |")
    print("\n## Model-state memory per rank (MiB, from each run's memory record; P = parameters)\n")
    print("Formula with w = bytes of the working dtype and m = 4 for a separate fp32 master (bf16/fp16),")
    print("0 in fp32: stage 0 (2w+m+8)P, stage 1 2wP + (m+8)P/N, stage 2 wP + (w+m+8)P/N, stage 3 (2w+m+8)P/N.\n")
    print("| N | dtype | stage | params | grads | master | optimizer | model state | formula | formula MiB | scratch |"
          " peak RSS per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    names32 = ["16P", "8P + 8P/N", "4P + 12P/N", "16P/N"]
    names16 = ["16P", "4P + 12P/N", "2P + 14P/N", "16P/N"]
    mib = 1048576.0
    for case in cases:
        n, dt = case.split(":")
        n = int(n)
        for s in range(4):
            r = memory_record(f"{work}/mem_n{n}_s{s}_{dt}/metrics.jsonl")
            p = float(r["num_params"])
            w, m = (4, 0) if dt == "fp32" else (2, 4)
            f = [(2 * w + m + 8) * p, 2 * w * p + (m + 8) * p / n, w * p + (w + m + 8) * p / n, (2 * w + m + 8) * p / n][s]
            name = (names32 if dt == "fp32" else names16)[s]
            cells = [r[k] / mib for k in ("params", "grads", "master", "optimizer", "model_state")]
            print(f"| {n} | {dt} | {s} | " + " | ".join(f"{c:.1f}" for c in cells)
                  + f" | {name} | {f / mib:.1f} | {r['scratch'] / mib:.1f}"
                  + f" | {peak_rss_mib(f'{work}/mem_n{n}_s{s}_{dt}'):.0f} |")
    print("\nThe model-state columns are summed from what ModelState allocated. `scratch` is the")
    print("conversion/reduction buffers plus the planned peak of per-unit buffers (gathered units,")
    print("fp32 views, gradient scratch), which tests check a real micro-step stays within. For this")
    print("model the tied embedding is 80% of the parameters and ZeRO-2/3 hold its full-size gradient")
    print("(and at ZeRO-3 its gathered copy) during backward, so at N = 2 the scratch can exceed what")
    print("sharding saves: ZeRO-3's total per rank is below DDP's only when the embedding is a small")
    print("share of the model or N is larger.")
    print("\n`peak RSS per rank` is measured: /usr/bin/time's maximum resident set size of each rank")
    print("over its one-step run, the largest over the ranks. It adds what the record does not count")
    print("(activations, data, libraries, MPI buffers), so compare it across stages, not with the formula.")


if __name__ == "__main__":
    main()
