#!/usr/bin/env bash
# Tensor parallelism benchmark: np 2 at parallel.tensor T = 1, 2 and np 4 at T = 1, 2, 4, each T > 1
# also with sequence parallelism (parallel.sequence, "2s"), ZeRO-1 over the world / T
# data-parallel ranks, interleaved so machine noise hits every setting alike:
# step time, tokens/s, and the bytes each rank sends per step by kind (comm_bytes: the tensor
# group's all-reduces, ZeRO's intra-group reduce-scatter / all-gather, inter-group, scalars).
# bench/tensor_report.py checks the tensor bytes against (4 L + 2) B S C + 3 B S elements per
# micro-step (ring all-reduce: 2 n (T-1)/T elements sent per rank), the sequence-parallel runs'
# all-gathers and reduce-scatters against theirs, and models 8 NVLink GPUs
# for GPT-2 124M and a 7B-wide model from that formula.
#
#   env -u OPENBLAS_CORETYPE bash bench/tensor_bench.sh
#
# Model and data: bench/zero_common.sh (16.1M parameters, fp32, micro_batch 2, grad_accum 2,
# 1 thread per rank). micro_batch stays fixed, so the global batch is micro_batch x grad_accum
# x world / T: a larger T means fewer tokens per step (the report gives tokens per step next to
# step ms and tokens/s). Ranks share the 2 cores and talk through shared memory: step times
# measure the work of a setting on one host, not a network.
# Knobs: REPS (2), STEPS (6), STAGE (1), BUILD_DIR (build-bench), OUT (results file).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-2}"
STEPS="${STEPS:-6}"
STAGE="${STAGE:-1}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/tensor_${DATE}.md}"
WORK="bench/work/tensor"
# shellcheck source=bench/zero_common.sh
. bench/zero_common.sh
TRAIN+=(--checkpoint.every=0 --checkpoint.async=false)
SETTINGS=("2 1" "2 2" "2 2s" "4 1" "4 2" "4 2s" "4 4" "4 4s")  # np T (s: parallel.sequence)

run() {  # run NP T[s] RUNDIR: the trainer still writes a final checkpoint; it goes, the metrics stay
  rm -rf "$3" "$3.ckpt" "$3.log"
  local sequence=false
  [[ "$2" == *s ]] && sequence=true
  mpiexec --oversubscribe --bind-to none -np "$1" "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$STAGE" --parallel.tensor="${2%s}" --parallel.sequence="$sequence" \
    --train.max_steps="$STEPS" \
    --checkpoint.dir="$3.ckpt" --run.dir="$3" > "$3.log" 2>&1 || { tail -20 "$3.log" >&2; exit 1; }
  rm -rf "$3.ckpt"
}

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "tensor_bench: ZeRO-$STAGE, np/T ${SETTINGS[*]}, $REPS interleaved reps of $STEPS steps" >&2
runs=()
for rep in $(seq 1 "$REPS"); do
  for s in "${SETTINGS[@]}"; do
    read -r np t <<< "$s"
    d="$WORK/np${np}_t${t}_r${rep}"
    run "$np" "$t" "$d"
    runs+=("$np:$t:$d")
    echo "  rep $rep np $np T=$t: done" >&2
  done
done
load_end="$(cut -d' ' -f1-3 /proc/loadavg)"

{
  echo "# Tensor parallelism: np 2 at T = 1, 2 and np 4 at T = 1, 2, 4, with and without sequence parallelism ($DATE)"
  echo
  echo "Command: \`env -u OPENBLAS_CORETYPE REPS=$REPS STEPS=$STEPS STAGE=$STAGE bash bench/tensor_bench.sh\`" \
       "at $(git rev-parse --short HEAD)"
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores;" \
       "load average $load_start at start, $load_end at the end;" \
       "OPENBLAS_CORETYPE ${OPENBLAS_CORETYPE:-unset}."
  echo
  /usr/bin/python3 bench/tensor_report.py --stage "$STAGE" "${runs[@]}"
} > "$OUT"
cat "$OUT"
