#!/usr/bin/env bash
# LoRA against full fine-tuning and against PEFT + Accelerate (issue 51): bench/peers/run.py's
# pair 7, a Llama of SmolLM2-360M's shape on padded examples at np 2 (see bench/peers/README.md).
#   bench/lora_bench.sh                       # 3 repetitions, results in bench/results/lora_<date>.md
#   SHAPE=llama_tiny REPS=1 bench/lora_bench.sh   # the machinery in a minute
# Needs build/ (Release) and the peers' Python (PEERS_PYTHON or ZT_INTEROP_VENV, with peft).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/peers/run.py --pairs 7 --lora-shape "${SHAPE:-smollm2_360m}" --reps "${REPS:-3}" \
  --steps "${STEPS:-5}" --skip 2 --work "$PWD/bench/work/lora" --out "bench/results/lora_$(date +%F).md" "$@"
