#!/usr/bin/env bash
# Accuracy of the memory plan (issue 15, item 4): predicted peak per rank against the
# measured peak resident set (VmHWM) of every rank, over a matrix of
#   2 model sizes x ZeRO stages 0-3 x N = 1, 2, 4 x fp32/bf16 x recompute off/on.
# Each run trains 2 steps (evaluation, sampling and a checkpoint included) and ends with the
# {"event":"memory_peak"} record of metrics.jsonl: predicted_peak (per rank) and every rank's
# measured_peak. A row's errors are (measured - predicted) / predicted for its largest and its
# smallest rank.
#
#   bash bench/memory_plan_bench.sh [--quick] [--out FILE]     (from the repository root)
#
# --quick: 1 model size, N = 1 and 2 only. --out: also write the table as markdown.
# Needs build/bin/ztrain and zt-prepare (cmake --build build), python3 and mpiexec.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    *) echo "usage: bash bench/memory_plan_bench.sh [--quick] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
BIN=build/bin
WORK=bench/work/memory_plan
rm -rf "$WORK" && mkdir -p "$WORK"
for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog, and then it rests"; echo "%"; done \
  > "$WORK/text.txt"
"$BIN/zt-prepare" --input "$WORK/text.txt" --output "$WORK/data" --doc-separator % > /dev/null

# name: model overrides (the tiny deck's data and byte vocabulary)
declare -A MODELS=(
  [s4x128]="--model.n_layer=4 --model.n_embd=128 --model.n_head=4 --model.seq_len=64 --train.micro_batch=16"
  [m6x384]="--model.n_layer=6 --model.n_embd=384 --model.n_head=6 --model.seq_len=128 --train.micro_batch=8"
)
sizes=(s4x128 m6x384)
nps=(1 2 4)
if [ "$QUICK" = 1 ]; then sizes=(s4x128); nps=(1 2); fi

rows="$WORK/rows.tsv"
: > "$rows"
for size in "${sizes[@]}"; do
  for np in "${nps[@]}"; do
    for stage in 0 1 2 3; do
      for dtype in fp32 bf16; do
        for rc in false true; do
          dir="$WORK/run_${size}_np${np}_s${stage}_${dtype}_rc${rc}"
          # shellcheck disable=SC2086
          if ! timeout 300 bash .ci/mpirun.sh "$np" "$BIN/ztrain" --config inputs/tiny.ini ${MODELS[$size]} \
              --data.train="$WORK/data/train_*.bin" --data.val="$WORK/data/val_*.bin" --train.threads=1 \
              --train.max_steps=2 --train.eval_every=2 --train.sample_tokens=8 --parallel.zero_stage="$stage" \
              --precision.dtype="$dtype" --train.recompute="$rc" --run.dir="$dir" > "$dir.log" 2>&1; then
            echo "run failed: $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1
          fi
          python3 - "$dir/metrics.jsonl" "$size" "$np" "$stage" "$dtype" "$rc" >> "$rows" <<'PY'
import json, sys
path, size, np, stage, dtype, rc = sys.argv[1:]
rec = [json.loads(l) for l in open(path) if '"memory_peak"' in l][-1]
pred = rec["predicted_peak"]
meas = rec["measured_peak"]
worst = max(meas, key=lambda m: abs(m - pred))
print("\t".join([size, np, stage, dtype, rc, f"{pred / 2**20:.1f}", f"{min(meas) / 2**20:.1f}",
                 f"{max(meas) / 2**20:.1f}", f"{100 * (worst - pred) / pred:+.1f}"]))
PY
          tail -1 "$rows"
        done
      done
    done
  done
done

table=$(python3 - "$rows" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print("| model | N | stage | dtype | recompute | predicted MiB/rank | measured MiB (min..max rank) | largest rank | smallest rank |")
print("|---|---|---|---|---|---|---|---|---|")
hi, lo = [], []
for r in rows:
    pred, mn, mx = float(r[5]), float(r[6]), float(r[7])
    hi.append(100 * (mx - pred) / pred)
    lo.append(100 * (mn - pred) / pred)
    print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} | {r[6]}..{r[7]} | {hi[-1]:+.1f}% | {lo[-1]:+.1f}% |")
n = len(rows)
print(f"\n{n} rows. Largest rank against the plan (what the fit check must cover): {min(hi):+.1f}% to "
      f"{max(hi):+.1f}%, {sum(abs(e) <= 10 for e in hi)}/{n} within +-10%. Every rank: {min(lo + hi):+.1f}% to "
      f"{max(lo + hi):+.1f}%, {sum(abs(a) <= 10 and abs(b) <= 10 for a, b in zip(hi, lo))}/{n} rows with every rank "
      f"within +-10%.")
PY
)
echo "$table"
if [ -n "$OUT" ]; then
  {
    echo "# Memory plan accuracy ($(date -u '+%Y-%m-%d'))"
    echo
    echo "Command: \`bash bench/memory_plan_bench.sh${QUICK:+$([ "$QUICK" = 1 ] && echo " --quick")} --out $OUT\`"
    echo
    echo "- commit: $(git log -1 --format='%h %s' | cut -c1-100)"
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
    echo "- each run: tiny deck's data, 2 steps with an evaluation, a sample and the final checkpoint;"
    echo "  predicted = the plan per rank (predicted_peak); measured = each rank's VmHWM at the end"
    echo "  (measured_peak); error = the rank furthest from the plan"
    echo
    echo "$table"
  } > "$OUT"
  echo "written: $OUT"
fi
