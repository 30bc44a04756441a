#!/usr/bin/env bash
# ZeRO benchmark: step time of ZeRO-1/2/3 relative to DDP at N = 2 on one model, in one
# run (stages interleaved so machine noise hits them alike), and the model-state memory per
# rank for every stage at N = 1, 2, 4 from each run's memory record.
#
#   bash bench/zero_bench.sh
#
# Model: 4 layers x 256 wide x 4 heads, seq 256, vocab 50257 (padded 50304): 16.1M
# parameters, 80% of them in the tied embedding, so the all-gathers are not toy-sized.
# Data: synthetic random tokens. fp32, micro_batch 2, grad_accum 2, 1 thread per rank.
# Knobs: REPS (3), STEPS (10), BUILD_DIR (build-bench), OUT (results file).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-10}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/zero_${DATE}.md}"
WORK="bench/work/zero"
mkdir -p "$WORK" bench/results
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain >> "$WORK/build.log" 2>&1

[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 50257

MODEL=(--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=256
       --model.vocab_size=50257 --model.vocab_pad_to=128)
TRAIN=(--data.train="$WORK/train.bin" --train.micro_batch=2 --train.grad_accum=2
       --train.eval_every=0 --train.sample_tokens=0 --train.log_every=1000 --train.threads=1
       --train.warmup_steps=2)

run() {  # run NP STAGE STEPS RUNDIR [DTYPE]; rank r's peak RSS (KiB) goes to RUNDIR.rss.r
  rm -f "$4".rss.*
  # shellcheck disable=SC2016  # $OMPI_COMM_WORLD_RANK and $@ expand in each rank's shell
  mpiexec --oversubscribe --bind-to none -np "$1" \
    bash -c 'exec /usr/bin/time -f %M -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$4" \
    "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$2" --train.max_steps="$3" --run.dir="$4" --precision.dtype="${5:-fp32}" > "$4.log" 2>&1
}

median_step_ms() {  # metrics.jsonl -> median step_ms over steps after the first 2
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r][2:]
print(f"{statistics.median(ms):.1f}")' "$1"
}

export ZT_LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "zero_bench: step time at N=2, $REPS interleaved reps of $STEPS steps" >&2
declare -A times
for rep in $(seq 1 "$REPS"); do
  for stage in 0 1 2 3; do
    d="$WORK/time_s${stage}_r${rep}"
    rm -rf "$d"
    run 2 "$stage" "$STEPS" "$d"
    times[$stage]+="$(median_step_ms "$d/metrics.jsonl") "
    echo "  rep $rep stage $stage: ${times[$stage]}" >&2
  done
done

echo "zero_bench: memory records: fp32 at N=1,2,4; bf16 and fp16 at N=2" >&2
declare -A mem
MEM_CASES="1:fp32 2:fp32 4:fp32 2:bf16 2:fp16"
for case in $MEM_CASES; do
  np=${case%%:*}; dt=${case##*:}
  for stage in 0 1 2 3; do
    d="$WORK/mem_n${np}_s${stage}_${dt}"
    rm -rf "$d"
    run "$np" "$stage" 1 "$d" "$dt"
    mem[$np,$stage,$dt]=$(head -1 "$d/metrics.jsonl")
  done
done

/usr/bin/python3 bench/zero_report.py "$WORK" "$REPS" "$STEPS" "$MEM_CASES" \
  "REPS=$REPS STEPS=$STEPS bash bench/zero_bench.sh" > "$OUT"
cat "$OUT"
