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

run() {  # run NP STAGE STEPS RUNDIR [DTYPE]
  mpiexec --oversubscribe --bind-to none -np "$1" "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$2" --train.max_steps="$3" --run.dir="$4" --precision.dtype="${5:-fp32}" > "$4.log" 2>&1
}

median_step_ms() {  # metrics.jsonl -> median step_ms over steps after the first 2
  /usr/bin/python3 -c '
import json, statistics, sys
ms = [r["step_ms"] for r in map(json.loads, open(sys.argv[1])) if "step_ms" in r][2:]
print(f"{statistics.median(ms):.1f}")' "$1"
}

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

{
  echo "# ZeRO stages: step time and memory per rank"
  echo
  echo "- command: \`bash bench/zero_bench.sh\` (REPS=$REPS STEPS=$STEPS)"
  echo "- date: $(date -u '+%F %T UTC'), git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- model: 4 layers x 256 wide x 4 heads, seq 256, vocab 50257 (padded 50304), fp32;"
  echo "  micro_batch 2, grad_accum 2, 1 thread per rank, synthetic tokens"
  echo
  echo "## Step time at N = 2 (median step_ms over steps 3..$STEPS, median over $REPS interleaved reps)"
  echo
  echo "| stage | step ms (per rep) | median | vs DDP |"
  echo "|---|---|---|---|"
  ddp=""
  for stage in 0 1 2 3; do
    med=$(echo ${times[$stage]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
    [ "$stage" = 0 ] && ddp=$med
    ratio=$(awk -v a="$med" -v b="$ddp" 'BEGIN{printf "%.3f", a/b}')
    name=$([ "$stage" = 0 ] && echo "DDP" || echo "ZeRO-$stage")
    echo "| $name | ${times[$stage]} | $med | ${ratio}x |"
  done
  echo
  echo "## Model-state memory per rank (MiB, from each run's memory record; P = parameters)"
  echo
  echo "Formula with w = bytes of the working dtype and m = 4 for a separate fp32 master (bf16/fp16), 0 in fp32:"
  echo "stage 0 (2w+m+8)P, stage 1 2wP + (m+8)P/N, stage 2 wP + (w+m+8)P/N, stage 3 (2w+m+8)P/N."
  echo
  echo "| N | dtype | stage | params | grads | master | optimizer | model state | formula | formula MiB | scratch |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  for case in $MEM_CASES; do
    np=${case%%:*}; dt=${case##*:}
    for stage in 0 1 2 3; do
      /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1]); n = int(sys.argv[2]); s = int(sys.argv[3]); dt = sys.argv[4]
P = float(r["num_params"]); M = 1048576.0
w = 4 if dt == "fp32" else 2; m = 0 if dt == "fp32" else 4
names = {("fp32", 0): "16P", ("fp32", 1): "8P + 8P/N", ("fp32", 2): "4P + 12P/N", ("fp32", 3): "16P/N"}
names16 = {0: "16P", 1: "4P + 12P/N", 2: "2P + 14P/N", 3: "16P/N"}
f = [(2*w + m + 8)*P, 2*w*P + (m + 8)*P/n, w*P + (w + m + 8)*P/n, (2*w + m + 8)*P/n][s]
name = names[(dt, s)] if dt == "fp32" else names16[s]
print(f"| {n} | {dt} | {s} | {r[\"params\"]/M:.1f} | {r[\"grads\"]/M:.1f} | {r[\"master\"]/M:.1f} | "
      f"{r[\"optimizer\"]/M:.1f} | {r[\"model_state\"]/M:.1f} | {name} | {f/M:.1f} | {r[\"scratch\"]/M:.1f} |")' \
        "${mem[$np,$stage,$dt]}" "$np" "$stage" "$dt"
    done
  done
} > "$OUT"
cat "$OUT"
