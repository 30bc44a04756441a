#!/usr/bin/env bash
# Multiple-choice evaluation throughput: zt-eval on the shipped task file
# (inputs/tasks/tiny_choice.jsonl, 32 examples x 4 endings) at np 2, examples/s, for the
# tiny deck's model and a 4-layer 256-wide one (byte vocabulary), each from a 1-step
# checkpoint (throughput does not depend on the weights' values).
#
#   bash bench/eval_bench.sh        (from the repository root)
#   knobs: REPS (5), BUILD_DIR (build), THREADS (1 per rank), BATCH (32, zt-eval's default), OUT
# Needs $BUILD_DIR/bin/{ztrain,zt-eval,zt-prepare} and mpiexec. Writes the table to OUT
# (bench/results/eval_<date>.md) with the command, machine and git revision.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${REPS:-5}"
BUILD_DIR="${BUILD_DIR:-build}"
THREADS="${THREADS:-1}"
BATCH="${BATCH:-32}"
OUT="${OUT:-bench/results/eval_$(date +%F).md}"
WORK=bench/work/eval
BIN="$BUILD_DIR/bin"
TASK=inputs/tasks/tiny_choice.jsonl
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
rm -rf "$WORK" && mkdir -p "$WORK" bench/results
for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$WORK/text.txt"
"$BIN/zt-prepare" --input "$WORK/text.txt" --output "$WORK/data" --doc-separator % > /dev/null
configs=("tiny:" "small:--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=128")
declare -A rates
for cfg in "${configs[@]}"; do
  name=${cfg%%:*}
  # shellcheck disable=SC2086
  "$BIN/ztrain" --config inputs/tiny.ini ${cfg#*:} --data.train="$WORK/data/train_*.bin" --train.max_steps=1 \
    --train.sample_tokens=0 --train.threads=2 --run.dir="$WORK/run_$name" > "$WORK/train_$name.log" 2>&1
  for rep in $(seq 1 "$REPS"); do
    mpiexec --oversubscribe --bind-to none -x OMP_WAIT_POLICY -np 2 "$BIN/zt-eval" "$WORK/run_$name/checkpoints" \
      --tasks "$TASK" --threads "$THREADS" --batch "$BATCH" --output "$WORK/${name}_$rep.json" > "$WORK/eval_${name}_$rep.log"
    rates[$name]+="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tasks"]["tiny_choice"]["examples_per_s"])' "$WORK/${name}_$rep.json") "
  done
done
{
  echo "# zt-eval throughput, $(date -u +%F)"
  echo
  echo "Command: \`REPS=$REPS THREADS=$THREADS BATCH=$BATCH bash bench/eval_bench.sh\`; git $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)');"
  echo "$(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), load average at start $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Task: \`$TASK\` (32 examples, 128 candidate rows), np 2, $THREADS thread(s) per rank, $BATCH rows per forward."
  echo
  echo "| model | examples/s (median of $REPS) | min | max |"
  echo "|---|---|---|---|"
  for cfg in "${configs[@]}"; do
    name=${cfg%%:*}
    python3 - "$name" ${rates[$name]} <<'PY'
import statistics, sys
name, xs = sys.argv[1], sorted(float(x) for x in sys.argv[2:])
desc = {"tiny": "inputs/tiny.ini: 2 layers, 32 wide, seq 32", "small": "4 layers, 256 wide, seq 128"}[name]
print(f"| {desc} | {statistics.median(xs):.1f} | {xs[0]:.1f} | {xs[-1]:.1f} |")
PY
  done
} > "$OUT"
cat "$OUT"
