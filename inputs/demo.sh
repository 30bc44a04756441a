#!/usr/bin/env bash
# The README's first command: install, build, prepare the demo corpus (the fortunes
# package's English text, byte-level tokens) and train inputs/demo.ini on NP ranks
# (default 2) -- the run ends with a sharded checkpoint, which is then consolidated into one
# safetensors file. Extra arguments are passed to ztrain,
# e.g. `bash inputs/demo.sh --train.max_steps=100`.
set -euo pipefail
cd "$(dirname "$0")/.."
NP="${NP:-2}"

# Only what the demo runs: its packages, the three executables, no tests. The demo trains on
# the CPU, so the CUDA backend is not built unless asked for (ZT_CUDA=AUTO or ON).
bash .ci/setup.sh demo
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DZT_BUILD_TESTS=OFF -DZT_CUDA="${ZT_CUDA:-OFF}" > build.log 2>&1 ||
  { tail -30 build.log; exit 1; }
cmake --build build -j"$(nproc)" --target ztrain zt-prepare zt-consolidate >> build.log 2>&1 ||
  { tail -30 build.log; exit 1; }

if [ ! -f data/fortunes/tokenizer.json ]; then
  build/bin/zt-prepare --input /usr/share/games/fortunes --output data/fortunes \
    --tokenizer byte --doc-separator % --val-fraction 0.05
fi

# The demo starts over each time: it removes its own run directory (run/demo) from an earlier
# demo first, because ztrain refuses to start a fresh run where an earlier one left its
# checkpoints and metrics. --checkpoint.resume=auto continues the earlier demo run instead.
continue_run=0
for arg in "$@"; do
  case "$arg" in --checkpoint.resume=never) ;; --checkpoint.resume=*) continue_run=1 ;; esac
done
if [ "$continue_run" -eq 0 ] && [ -d run/demo ]; then
  echo "demo: starting over: removing run/demo from an earlier demo run (--checkpoint.resume=auto continues it)"
  rm -rf run/demo
fi
# Ctrl-C stops cleanly: .ci/mpirun.sh asks the ranks to checkpoint, the job exits 0, and
# the checkpoint written at the stop is consolidated below.
bash .ci/mpirun.sh "$NP" build/bin/ztrain --config inputs/demo.ini "$@"
# The run ends with a sharded checkpoint (one shard per rank); merge it into one file with
# Hugging Face GPT-2 tensor names.
build/bin/zt-consolidate run/demo/checkpoints --output run/demo/model.safetensors
echo "demo: metrics in run/demo/metrics.jsonl, resolved config in run/demo/config.ini,"
echo "      checkpoint in run/demo/checkpoints/, consolidated weights in run/demo/model.safetensors"
echo "      plot: /usr/bin/python3 postproc/plot_metrics.py run/demo/metrics.jsonl"
