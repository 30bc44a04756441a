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

if [ ! -f "$WORK/train.bin" ]; then
  /usr/bin/python3 - "$WORK/train.bin" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
toks = rng.integers(0, 50257, size=400_000, dtype=np.uint16)
hdr = np.zeros(256, dtype=np.int32); hdr[0] = 20240520; hdr[1] = 1; hdr[2] = toks.size
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(toks.tobytes())
PY
fi

MODEL=(--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=256
       --model.vocab_size=50257 --model.vocab_pad_to=128)
TRAIN=(--data.train="$WORK/train.bin" --train.micro_batch=2 --train.grad_accum=2
       --train.eval_every=0 --train.sample_tokens=0 --train.log_every=1000 --train.threads=1
       --train.warmup_steps=2)

run() {  # run NP STAGE STEPS RUNDIR
  mpiexec --oversubscribe --bind-to none -np "$1" "$BUILD_DIR/bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
    --parallel.zero_stage="$2" --train.max_steps="$3" --run.dir="$4" > "$4.log" 2>&1
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

echo "zero_bench: memory records at N=1,2,4" >&2
declare -A mem
for np in 1 2 4; do
  for stage in 0 1 2 3; do
    d="$WORK/mem_n${np}_s${stage}"
    rm -rf "$d"
    run "$np" "$stage" 1 "$d"
    mem[$np,$stage]=$(head -1 "$d/metrics.jsonl")
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
  echo "## Model-state memory per rank (MiB, from the memory record; P = parameters)"
  echo
  echo "| N | stage | params | grads | optimizer | model state | formula (fp32) | formula MiB | scratch |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for np in 1 2 4; do
    for stage in 0 1 2 3; do
      /usr/bin/python3 -c '
import json, sys
r = json.loads(sys.argv[1]); n = int(sys.argv[2]); s = int(sys.argv[3])
P = r["num_params"] * 4.0; M = 1048576.0
f = {0: ("16P", 4*P), 1: ("8P + 8P/N", 2*P + 2*P/n), 2: ("4P + 12P/N", P + 3*P/n), 3: ("16P/N", 4*P/n)}[s]
print(f"| {n} | {s} | {r[\"params\"]/M:.1f} | {r[\"grads\"]/M:.1f} | {r[\"optimizer\"]/M:.1f} | "
      f"{r[\"model_state\"]/M:.1f} | {f[0]} | {f[1]/M:.1f} | {r[\"scratch\"]/M:.1f} |")' "${mem[$np,$stage]}" "$np" "$stage"
    done
  done
} > "$OUT"
cat "$OUT"
