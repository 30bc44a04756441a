#!/usr/bin/env bash
# Hybrid sharding benchmark: np 4 on this machine, ZeRO-3 in shard groups of 2 (two
# replicas) against one flat group of 4, interleaved so machine noise hits both alike:
# step time, and the bytes each rank moves per step, split intra-group / inter-group (from
# comm_bytes). bench/hybrid_report.py checks the bytes against the formulas and models the
# inter-node traffic of 8 nodes x 8 GPUs for GPT-2 124M and a 1.5B model from them.
#
#   bash bench/hybrid_bench.sh
#
# Model and data: bench/zero_common.sh (zero_bench.sh's 16.1M parameters, fp32, micro_batch
# 2, grad_accum 2, 1 thread per rank): 4 ranks share the 2 cores, so step times measure the
# strategy's total work on one host (its traffic is shared memory), not a network.
# Knobs: REPS (3), STEPS (8), STAGE (3), BUILD_DIR (build-bench), OUT (results file).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-8}"
STAGE="${STAGE:-3}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/hybrid_${DATE}.md}"
WORK="bench/work/hybrid"
# shellcheck source=bench/zero_common.sh
. bench/zero_common.sh
TRAIN+=(--checkpoint.every=0 --checkpoint.async=false)

run() {  # run GROUP RUNDIR
  mpiexec --oversubscribe --bind-to none -np 4 "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$STAGE" --parallel.shard_group="$1" --train.max_steps="$STEPS" \
    --run.dir="$2" > "$2.log" 2>&1
}

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "hybrid_bench: np 4, ZeRO-$STAGE, groups of 2 vs 4, $REPS interleaved reps of $STEPS steps" >&2
runs=()
for rep in $(seq 1 "$REPS"); do
  for group in 4 2; do
    d="$WORK/g${group}_r${rep}"
    rm -rf "$d" "$d.log"
    run "$group" "$d"
    runs+=("$group:$d/metrics.jsonl")
    echo "  rep $rep groups of $group: done" >&2
  done
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

{
  echo "# Hybrid sharding: np 4, groups of 2 vs one group of 4 ($DATE)"
  echo
  echo "Command: \`REPS=$REPS STEPS=$STEPS STAGE=$STAGE bash bench/hybrid_bench.sh\` at $(git rev-parse --short HEAD)"
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
       "load average $load_start at start, $load_end at the end."
  echo
  /usr/bin/python3 bench/hybrid_report.py --stage "$STAGE" "${runs[@]}"
} > "$OUT"
cat "$OUT"
