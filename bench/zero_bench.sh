#!/usr/bin/env bash
# ZeRO benchmark: step time of ZeRO-1/2/3 relative to DDP at N = 2 on one model, in one
# run (stages interleaved so machine noise hits them alike), and the model-state memory per
# rank for every stage at N = 1, 2, 4 from each run's memory record.
#
#   bash bench/zero_bench.sh
#
# Model and data: bench/zero_common.sh (16.1M parameters, fp32, 1 thread per rank).
# Step times are taken with the communication thread on and off (parallel.comm_thread,
# COMM_THREAD="true false"), interleaved with the stages.
# Knobs: REPS (3), STEPS (10), BUILD_DIR (build-bench), OUT (results file), COMM_THREAD,
# SKIP_MEMORY=1 (step times only).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-10}"
COMM_THREAD="${COMM_THREAD:-true false}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/zero_${DATE}.md}"
WORK="bench/work/zero"
# shellcheck source=bench/zero_common.sh
. bench/zero_common.sh

run() {  # run NP STAGE STEPS RUNDIR [DTYPE [COMM_THREAD]]; rank r's peak RSS (KiB) goes to RUNDIR.rss.r
  rm -f "$4".rss.*
  # shellcheck disable=SC2016  # $OMPI_COMM_WORLD_RANK and $@ expand in each rank's shell
  mpiexec --oversubscribe --bind-to none -np "$1" \
    bash -c 'exec /usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$4" \
    "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$2" --train.max_steps="$3" --run.dir="$4" --precision.dtype="${5:-fp32}" \
    --parallel.comm_thread="${6:-true}" > "$4.log" 2>&1
}

median_step_ms() {  # metrics.jsonl -> median step_ms over steps after the first 2
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r][2:]
print(f"{statistics.median(ms):.1f}")' "$1"
}

export ZT_LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "zero_bench: step time at N=2, $REPS interleaved reps of $STEPS steps" >&2
for rep in $(seq 1 "$REPS"); do
  for stage in 0 1 2 3; do
    for ct in $COMM_THREAD; do
      d="$WORK/time_s${stage}_c${ct}_r${rep}"
      rm -rf "$d"
      run 2 "$stage" "$STEPS" "$d" fp32 "$ct"
      echo "  rep $rep stage $stage comm_thread=$ct: $(median_step_ms "$d/metrics.jsonl") ms" >&2
    done
  done
done

echo "zero_bench: memory records: fp32 at N=1,2,4; bf16 and fp16 at N=2" >&2
MEM_CASES="1:fp32 2:fp32 4:fp32 2:bf16 2:fp16"
[ "${SKIP_MEMORY:-0}" = 1 ] && MEM_CASES=""
for case in $MEM_CASES; do
  np=${case%%:*}; dt=${case##*:}
  for stage in 0 1 2 3; do
    d="$WORK/mem_n${np}_s${stage}_${dt}"
    rm -rf "$d"
    run "$np" "$stage" 1 "$d" "$dt"
  done
done

/usr/bin/python3 bench/zero_report.py "$WORK" "$REPS" "$STEPS" "$MEM_CASES" \
  "REPS=$REPS STEPS=$STEPS COMM_THREAD=\"$COMM_THREAD\" SKIP_MEMORY=${SKIP_MEMORY:-0} bash bench/zero_bench.sh" "$COMM_THREAD" > "$OUT"
cat "$OUT"
