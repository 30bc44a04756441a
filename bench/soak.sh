#!/usr/bin/env bash
# Soak (issue 34; not in CI): a long run at N ranks with async checkpoints every 10 steps,
# checkpoint.keep = 3 and an evaluation every 50 steps, stopped by SIGUSR1 in the middle and
# resumed. Every 0.5 s it samples each rank's resident memory (VmRSS), open file
# descriptors and threads, and the checkpoint directory's size and step directories. Then:
#   - RSS of every rank flat after warm-up: the median of the last 10% of each run's samples
#     against the median of the 10% after warm-up (the first 20%), growth <= 2%;
#   - descriptors and threads: the range in the second half of each run equals the first
#     half's (a leak grows it);
#   - the checkpoint directory holds at most keep + 1 step directories (the newest is
#     published before the oldest is pruned) and its size is bounded accordingly;
#     no *.partial left at the end;
#   - metrics.jsonl holds every step 1..STEPS exactly once;
#   - the state checks (parallel.check_every = CHECK_EVERY, issue 55) raise no false alarm
#     (no exit 3) and their printed cost is recorded.
# Writes OUT (markdown), the samples (CSV) and a plot of RSS over time (PNG) next to it.
#
#   bash bench/soak.sh
#
# Knobs: STEPS (2400), NP (2), BUILD_DIR (build), WORK (bench/work/soak),
# OUT (bench/results/soak_DATE.md), MODEL (--model.* overrides of inputs/tiny.ini; default a
# 2-layer, 64-wide model, so 2,400 steps take minutes on 2 cores), CHECK_EVERY (100; 0: off),
# EXTRA (more ztrain arguments, e.g. --precision.dtype=bf16 --parallel.zero_stage=1).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
STEPS="${STEPS:-2400}"
NP="${NP:-2}"
BUILD_DIR="${BUILD_DIR:-build}"
WORK="${WORK:-bench/work/soak}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/soak_${DATE}.md}"
MODEL="${MODEL:---model.n_layer=2 --model.n_head=2 --model.n_embd=64 --model.seq_len=32}"
CHECK_EVERY="${CHECK_EVERY:-100}"
EXTRA="${EXTRA:-}"
BIN="$BUILD_DIR/bin"
rm -rf "$WORK"
mkdir -p "$WORK" "$(dirname "$OUT")"
WORK="$(cd "$WORK" && pwd)"
csv="${OUT%.md}.csv"
png="${OUT%.md}_rss.png"

for i in $(seq 1 3000); do echo "soak line $i: the quick brown fox jumps over the lazy dog $((i * 7919 % 1000))"; echo "%"; done \
  > "$WORK/text.txt"
"$BIN/zt-prepare" --input "$WORK/text.txt" --output "$WORK/data" --doc-separator % > /dev/null
run="$WORK/run"
# shellcheck disable=SC2206
args=(--config inputs/tiny.ini $MODEL --data.train="$WORK/data/train_*.bin" --data.val="$WORK/data/val_*.bin"
  --run.dir="$run" --train.max_steps="$STEPS" --train.schedule_steps="$STEPS" --checkpoint.every=10
  --checkpoint.keep=3 --checkpoint.async=true --train.eval_every=50 --train.eval_batches=2
  --train.sample_tokens=16 --train.log_every=50 --parallel.check_every="$CHECK_EVERY" $EXTRA)

# sample RUN_LABEL: one CSV row per rank every 0.5 s while the job's ranks live.
echo "t_s,run,rank_pid,step,rss_kb,fds,threads,ckpt_bytes,ckpt_steps,partials" > "$csv"
t0=$(date +%s.%N)
sample() {
  local label=$1 pids pid step now bytes steps partials
  set +e +o pipefail  # a rank or a file may vanish between two reads: skip, never stop
  while :; do
    pids=$(for p in $(pgrep -x ztrain); do grep -qa -- "--run.dir=$run" "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done)
    [ -z "$pids" ] && { kill -0 "$job" 2>/dev/null || break; sleep 0.2; continue; }
    now=$(echo "$(date +%s.%N) - $t0" | bc)
    step=$(tail -c 4096 "$run/metrics.jsonl" 2>/dev/null | grep -oE '^\{"step":[0-9]+' | tail -1 | grep -oE '[0-9]+$' || true)
    bytes=$(du -sb "$run/checkpoints" 2>/dev/null | cut -f1 || echo 0)
    steps=$(find "$run/checkpoints" -maxdepth 1 -name 'step_*' ! -name '*.partial' 2>/dev/null | wc -l)
    partials=$(find "$run/checkpoints" -maxdepth 1 -name '*.partial' 2>/dev/null | wc -l)
    for pid in $pids; do
      [ -r "/proc/$pid/status" ] || continue
      rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
      thr=$(awk '/^Threads/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
      fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
      [ -n "$rss" ] && echo "$now,$label,$pid,${step:-0},$rss,$fds,$thr,${bytes:-0},$steps,$partials" >> "$csv"
    done
    sleep 0.5
  done
}

# First part: stopped by SIGUSR1 (through .ci/mpirun.sh, as a terminal's Ctrl-C would) at STEPS/2.
start=$(date +%s)
bash .ci/mpirun.sh "$NP" "$BIN/ztrain" "${args[@]}" > "$WORK/part1.log" 2>&1 &
job=$!
sample part1 &
sampler=$!
half=$((STEPS / 2))
until grep -qE "^step +[0-9]+/" "$WORK/part1.log" &&
      [ "$(grep -oE '^step +[0-9]+' "$WORK/part1.log" | tail -1 | grep -oE '[0-9]+')" -ge "$half" ]; do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.5
done
kill -USR1 "$job"
rc1=0; wait "$job" || rc1=$?
wait "$sampler" || true
stopped_at=$(grep -oE "stopped by SIGUSR1 \(signal 10\) after step [0-9]+" "$WORK/part1.log" | grep -oE '[0-9]+$' || echo "?")
# Second part: resumed to STEPS.
bash .ci/mpirun.sh "$NP" "$BIN/ztrain" "${args[@]}" > "$WORK/part2.log" 2>&1 &
job=$!
sample part2 &
sampler=$!
rc2=0; wait "$job" || rc2=$?
wait "$sampler" || true
wall=$(( $(date +%s) - start ))

/usr/bin/python3 - "$csv" "$run/metrics.jsonl" "$OUT" "$png" "$STEPS" "$NP" "$rc1" "$rc2" "$stopped_at" "$wall" \
  "$MODEL $EXTRA" "$run/checkpoints" "$CHECK_EVERY" "$WORK/part1.log" "$WORK/part2.log" <<'PY'
import collections, csv, json, os, re, statistics, sys
(csv_path, metrics, out, png, steps, np_, rc1, rc2, stopped, wall, model, ckdir, check_every, log1, log2) = sys.argv[1:16]
steps = int(steps)
rows = list(csv.DictReader(open(csv_path)))
verdicts = []
def verdict(ok, what):
    verdicts.append(("PASS" if ok else "FAIL") + ": " + what)
lines = [f"# Soak: {steps} steps at N = {np_}, async checkpoints every 10, keep 3, eval every 50, "
         f"SIGUSR1 at step {stopped} and resume", "",
         f"`bash bench/soak.sh` (model: `{model}`), wall {wall} s; exit codes {rc1} (SIGUSR1 stop) and {rc2} (resume).",
         f"Samples every 0.5 s: `{os.path.basename(csv_path)}`; RSS plot: `{os.path.basename(png)}`.", ""]
verdict(rc1 == "0" and rc2 == "0", f"both parts exit 0 ({rc1}, {rc2}; 3 would be a state check's alarm)")
if check_every != "0":
    costs = [m.group(0) for log in (log1, log2) for m in re.finditer(r"\d+ state check\(s\).*", open(log).read())]
    lines += [f"State checks (`parallel.check_every = {check_every}`): " + ("; ".join(costs) or "none printed"), ""]
    verdict(len(costs) == 2, f"both parts printed the state checks' cost ({len(costs)})")
lines += ["| run | rank pid | samples | RSS after warm-up (MiB) | RSS at end (MiB) | growth | fds (1st half / 2nd half) | threads (1st / 2nd) |",
          "|---|---|---|---|---|---|---|---|"]
by = collections.defaultdict(list)
for r in rows:
    by[(r["run"], r["rank_pid"])].append(r)
for (run, pid), rs in sorted(by.items()):
    n = len(rs)
    if n < 20:
        lines.append(f"| {run} | {pid} | {n} | (too few samples) | | | | |")
        continue
    post = rs[n // 5:]
    k = max(1, len(post) // 10)
    first = statistics.median(int(r["rss_kb"]) for r in post[:k])
    last = statistics.median(int(r["rss_kb"]) for r in post[-k:])
    growth = (last - first) / first
    h = len(post) // 2
    rng = lambda rs, key: (min(int(r[key]) for r in rs), max(int(r[key]) for r in rs))
    f1, f2 = rng(post[:h], "fds"), rng(post[h:], "fds")
    t1, t2 = rng(post[:h], "threads"), rng(post[h:], "threads")
    lines.append(f"| {run} | {pid} | {n} | {first/1024:.1f} | {last/1024:.1f} | {growth*100:+.2f}% | "
                 f"{f1[0]}-{f1[1]} / {f2[0]}-{f2[1]} | {t1[0]}-{t1[1]} / {t2[0]}-{t2[1]} |")
    verdict(growth <= 0.02, f"{run} rank pid {pid}: RSS growth after warm-up {growth*100:+.2f}% (<= 2%)")
    verdict(f2[1] <= f1[1] and t2[1] <= t1[1],
            f"{run} rank pid {pid}: fds {f1}->{f2}, threads {t1}->{t2} do not grow")
ck_steps = max(int(r["ckpt_steps"]) for r in rows)
ck_bytes = max(int(r["ckpt_bytes"]) for r in rows)
one = statistics.median(int(r["ckpt_bytes"]) / max(1, int(r["ckpt_steps"])) for r in rows if int(r["ckpt_steps"]) > 0)
lines += ["", f"Checkpoint directory: at most {ck_steps} step directories seen, at most {ck_bytes/1048576:.2f} MiB "
          f"(one checkpoint about {one/1048576:.2f} MiB)."]
verdict(ck_steps <= 4, f"at most keep + 1 = 4 step directories at any sample ({ck_steps})")
verdict(ck_bytes <= 5 * one, f"checkpoint directory size bounded ({ck_bytes/1048576:.2f} MiB <= 5 checkpoints)")
left = [d for d in os.listdir(ckdir) if d.endswith(".partial")]
verdict(not left, f"no partial directory left at the end ({left})")
counts = collections.Counter()
for line in open(metrics):
    r = json.loads(line)
    if "loss" in r:
        counts[r["step"]] += 1
dup = sorted(s for s, c in counts.items() if c > 1)
missing = sorted(set(range(1, steps + 1)) - set(counts))
verdict(not dup and not missing, f"metrics.jsonl: every step 1..{steps} once (twice: {dup[:5]}, missing: {missing[:5]})")
lines += ["", "## Verdicts", ""] + [f"- {v}" for v in verdicts]
open(out, "w").write("\n".join(lines) + "\n")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 4))
    for (run, pid), rs in sorted(by.items()):
        ax.plot([float(r["t_s"]) for r in rs], [int(r["rss_kb"]) / 1024 for r in rs], label=f"{run} pid {pid}")
    ax.set_xlabel("time (s)"); ax.set_ylabel("VmRSS (MiB)"); ax.set_title(f"soak: RSS per rank, {steps} steps, N = {np_}")
    ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(png, dpi=90)
except ImportError:
    pass
print("\n".join(lines))
sys.exit(0 if all(v.startswith("PASS") for v in verdicts) else 1)
PY
