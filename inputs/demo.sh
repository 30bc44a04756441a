#!/usr/bin/env bash
# The README's first command: install, build, prepare the demo corpus (the fortunes
# package's English text, byte-level tokens) and train inputs/demo.ini on NP ranks
# (default 2) -- the run ends with a sharded checkpoint, which is then consolidated into one
# safetensors file. Extra arguments are passed to ztrain,
# e.g. `bash inputs/demo.sh --train.max_steps=100`.
set -euo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-2}"

bash .ci/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { tail -30 build.log; exit 1; }
cmake --build build -j"$(nproc)" >> build.log 2>&1 || { tail -30 build.log; exit 1; }

if [ ! -f data/fortunes/tokenizer.json ]; then
  build/bin/zt-prepare --input /usr/share/games/fortunes --output data/fortunes \
    --tokenizer byte --doc-separator % --val-fraction 0.05
fi

# A fresh run each time, unless the caller says otherwise (--checkpoint.resume=auto continues
# the last run from its newest checkpoint).
resume=(--checkpoint.resume=never)
for arg in "$@"; do
  case "$arg" in --checkpoint.resume*) resume=() ;; esac
done
bash .ci/mpirun.sh "$NP" build/bin/ztrain --config inputs/demo.ini "${resume[@]}" "$@"
# The run ends with a sharded checkpoint (one shard per rank); merge it into one file with
# Hugging Face GPT-2 tensor names.
build/bin/zt-consolidate run/demo/checkpoints --output run/demo/model.safetensors
echo "demo: metrics in run/demo/metrics.jsonl, resolved config in run/demo/config.ini,"
echo "      checkpoint in run/demo/checkpoints/, consolidated weights in run/demo/model.safetensors"
echo "      plot: /usr/bin/python3 postproc/plot_metrics.py run/demo/metrics.jsonl"
