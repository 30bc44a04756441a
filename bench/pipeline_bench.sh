#!/usr/bin/env bash
# Pipeline parallelism on this machine (bench/pipeline_step.cpp through PipelineRunner): P = 2
# stages at np 2 against the same model and micro-batches on one rank, for m = 4, 8, 16
# micro-batches per step and each schedule the runner has (1f1b; interleaved with v = 2; zb,
# zero-bubble ZB-H1, whose formula is 1F1B's over 3 when F = B = W).
# Per configuration: the median step time, each stage's time blocked on its neighbour (its
# bubble, measured) and busy time, the measured bubble fraction (idle over busy, the worse
# stage, and the busiest one, whose idle time is the schedule's alone) against the schedule's
# formula (P - 1) / (v m), the stages' imbalance (busiest over least busy), and the bytes sent against
# 2 (V - 1) m b s h bytes (V = P v boundaries crossed each way; v = 1: Megatron's
# 2 (P - 1) m b s h). REPS rounds, the configurations interleaved within each round.
#   bash bench/pipeline_bench.sh [REPS]   (default 3; BUILD=build)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS="${1:-3}"
BUILD="${BUILD:-build}"
OUT="${OUT:-bench/results/pipeline_$(date +%F).md}"
BIN="$BUILD/bin/pipeline_step_bench"
cmake --build "$BUILD" --target pipeline_step_bench > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per rank, everywhere: a BLAS or OpenMP pool per rank oversubscribes the cores
# and shows up as waits that are not the schedule's.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
unset OPENBLAS_CORETYPE
# A small vocabulary keeps the head light, so the FLOP balance can split the blocks evenly and
# the bubble measured is the schedule's, not the stages' imbalance (both are reported).
MODEL="layers=8 embd=256 heads=4 seq=128 batch=4 vocab=512 steps=5"
raw=$(mktemp)
MPI=(mpiexec --oversubscribe --bind-to none -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS)
for rep in $(seq "$REPS"); do
  for m in 4 8 16; do
    "${MPI[@]}" -np 1 "$BIN" 1f1b "$m" $MODEL >> "$raw"
    "${MPI[@]}" -np 2 "$BIN" 1f1b "$m" $MODEL >> "$raw"
    "${MPI[@]}" -np 2 "$BIN" interleaved "$m" $MODEL >> "$raw"
    "${MPI[@]}" -np 2 "$BIN" zb "$m" $MODEL >> "$raw"
  done
  echo "round $rep of $REPS done" >&2
done
{
  echo "# Pipeline parallelism on the CPU ($(date +%F))"
  echo
  echo "Command: \`bash bench/pipeline_bench.sh $REPS\` at $(git rev-parse --short HEAD)"
  echo "Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores;" \
       "$(mpirun --version 2>/dev/null | head -1); one thread per rank."
  echo "Model: GPT-2 shape, 8 blocks, C = 256, 4 heads, s = 128, b = 4 rows per micro-batch, vocabulary"
  echo "512, fp32; blocks split by balance_pipeline_layers (FLOPs; the head on the last stage)."
  echo
  /usr/bin/python3 bench/pipeline_report.py "$raw"
} > "$OUT"
rm -f "$raw"
cat "$OUT"
