#!/usr/bin/env bash
# Memory of each pipeline schedule: P = 2 at np 2, the memory plan's predicted peak per rank
# (its largest stage) against every rank's measured peak resident set (VmHWM), from the
# {"event":"memory_peak"} record of metrics.jsonl, with `ztrain --plan`'s per-stage peaks.
# A model whose activations dominate (12 blocks of 384, s = 256, b = 8, m = 4), fp32, DDP,
# 2 steps each (no evaluation, sample or checkpoint).
#   bash bench/pipeline_memory.sh [OUT]   (default: print; needs build/bin/ztrain)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-}"
BIN=build/bin
WORK=bench/work/pipeline_memory
rm -rf "$WORK" && mkdir -p "$WORK"
/usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 257  # random tokens of the byte vocabulary
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ARGS=(--config inputs/tiny.ini --data.train="$WORK/train.bin" --data.val "" --model.n_layer=12
      --model.n_embd=384 --model.n_head=6 --model.seq_len=256 --train.micro_batch=8 --train.grad_accum=4
      --train.max_steps=2 --train.eval_every=0 --train.sample_tokens=0 --checkpoint.every=0 --run.tensorboard=false
      --parallel.zero_stage=0 --parallel.pipeline=2 --train.threads=1)
table="| schedule | planned peak per rank (largest stage) | planned stage 0 / stage 1 | measured rank 0 / rank 1 | measured / planned (largest rank) |
|---|---|---|---|---|"
for s in 1f1b interleaved zb; do
  run="$WORK/run_$s"
  plan=$(mpiexec --oversubscribe -np 2 "$BIN/ztrain" "${ARGS[@]}" --parallel.schedule="$s" --run.dir="$run" --plan)
  stages=$(echo "$plan" | awk '/^    stage [0-9]/ {printf "%s%s %s", sep, $3, $4; sep=" / "}')
  mpiexec --oversubscribe -np 2 "$BIN/ztrain" "${ARGS[@]}" --parallel.schedule="$s" --run.dir="$run" > "$run.log" 2>&1
  row=$(python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
rec = [json.loads(l) for l in open(sys.argv[1]) if '"memory_peak"' in l][-1]
mib = lambda b: f"{b / 2**20:.1f} MiB"
m = rec["measured_peak"]
print(f"{mib(rec['predicted_peak'])} | | {' / '.join(mib(x) for x in m)} | {max(m) / rec['predicted_peak']:.3f} |")
PY
)
  table+=$'\n'"| $s | ${row/| |/| $stages |}"
done
report="# Pipeline memory per schedule ($(date +%F))

Command: \`bash bench/pipeline_memory.sh\` at $(git rev-parse --short HEAD)
Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc --all) cores, both ranks on it.
Model: GPT-2 shape, 12 blocks, C = 384, 6 heads, s = 256, b = 8, m = 4 micro-batches, byte
vocabulary, fp32, DDP, P = 2 at np 2; 2 steps.

$table"
echo "$report"
if [ -n "$OUT" ]; then echo "$report" > "$OUT"; fi
