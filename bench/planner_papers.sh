#!/usr/bin/env bash
# The time plan at the papers' scale (issue 53): each configuration of Megatron-LM's 2021
# weak-scaling table (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
# Clusters Using Megatron-LM", SC21, Table 1: GPT, vocabulary 51200, sequence 2048, A100
# 80GB DGX nodes with 8 x 200 Gb/s HDR, fp16 mixed precision, activation recomputation) as a
# deck on inputs/clusters/a100_node.ini, its predicted step turned into teraFLOP/s per GPU
# with the paper's own count (its Eq. 3, recompute included: 96 B s l h^2 (1 + s/6h + V/16lh)),
# against the published figure. Runs ztrain --plan only (seconds; nothing is trained).
#
#   bash bench/planner_papers.sh [--out FILE]     (repository root; needs build/bin/ztrain)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=""
if [ "${1:-}" = "--out" ]; then OUT=$2; fi
BIN=build/bin
# params(B) heads hidden layers t p gpus batch published-TFLOP/s-per-GPU
rows=(
  "1.7 24 2304 24 1 1 32 512 137"
  "3.6 32 3072 30 2 1 64 512 138"
  "7.5 32 4096 36 4 1 128 512 142"
  "18.4 48 6144 40 8 1 256 1024 135"
  "39.1 64 8192 48 8 2 512 1536 138"
  "76.1 80 10240 60 8 4 1024 1792 140"
  "145.6 96 12288 80 8 8 1536 2304 148"
  "310.1 128 16384 96 8 16 1920 2160 155"
  "529.6 128 20480 105 8 35 2520 2520 163"
  "1008.0 160 25600 128 8 64 3072 3072 163"
)
table="| model | T | P | GPUs | batch | published TFLOP/s/GPU | predicted | error | bottleneck |
|---|---|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  read -r params heads hidden layers t p gpus batch published <<<"$row"
  data=$((gpus / (t * p)))
  accum=$((batch / data))
  schedule=1f1b
  # Megatron's interleaved schedule where the layers allow two chunks per stage.
  if [ "$p" -gt 1 ] && [ $((layers % (2 * p))) -eq 0 ] && [ $((accum % p)) -eq 0 ]; then schedule=interleaved; fi
  out=$("$BIN/ztrain" --data.train=none.bin --model.arch=gpt2 --model.n_layer="$layers" --model.n_head="$heads" \
    --model.n_embd="$hidden" --model.seq_len=2048 --model.vocab_size=51200 --model.vocab_pad_to=128 \
    --precision.dtype=bf16 --train.recompute=true --train.micro_batch=1 --train.grad_accum="$accum" \
    --parallel.tensor="$t" --parallel.pipeline="$p" --parallel.schedule="$schedule" \
    --cluster inputs/clusters/a100_node.ini --cluster.nodes=$((gpus / 8)) --plan 2>&1) || {
      echo "plan failed for ${params}B: $(tail -2 <<<"$out")" >&2; continue; }
  step_ms=$(grep -oE "^predicted step: [0-9.]+" <<<"$out" | grep -oE "[0-9.]+$")
  bottleneck=$(grep -oE "bottleneck: [a-z -]+" <<<"$out" | cut -d' ' -f2-)
  line=$(python3 -c "
B, s, l, h, V, n = $batch, 2048, $layers, $hidden, 51200, $gpus
flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
tf = flops / ($step_ms / 1e3) / n / 1e12
print(f'| GPT {$params}B | $t | $p ($schedule) | $gpus | $batch | $published | {tf:.0f} | {100 * (tf - $published) / $published:+.0f}% |')")
  table+=$'\n'"$line $bottleneck |"
done
echo "$table"
if [ -n "$OUT" ]; then echo "$table" > "$OUT"; fi
