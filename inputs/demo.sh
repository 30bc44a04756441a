#!/usr/bin/env bash
# The README's first command: install, build, prepare the demo corpus (the fortunes
# package's English text, byte-level tokens) and train inputs/demo.ini on NP ranks
# (default 2) -- the run ends with a sharded checkpoint, which is then consolidated into one
# safetensors file. Extra arguments are passed to ztrain,
# e.g. `bash inputs/demo.sh --train.max_steps=100`.
# One line per phase, so the minutes of installing and building are not silent.
# Settings (environment): NP [2] ranks; ZT_CUDA [OFF] build the CUDA backend too;
# ZT_BIN_DIR [] use the executables there (an installed or earlier build) instead of
# installing and building; ZT_DEMO_DIR [the checkout] where data/ and run/ go;
# ZT_DEMO_CORPUS [/usr/share/games/fortunes] the text to train on.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
NP="${NP:-2}"
corpus="${ZT_DEMO_CORPUS:-/usr/share/games/fortunes}"

if [ -n "${ZT_BIN_DIR:-}" ]; then
  bin=$(cd "$ZT_BIN_DIR" && pwd)
  echo "demo: [1/4] installing: skipped (ZT_BIN_DIR)"
  echo "demo: [2/4] building: skipped, using the executables in $bin"
else
  echo "demo: [1/4] installing packages (bash .ci/setup.sh demo; nothing is fetched when they are there)"
  bash .ci/setup.sh demo
  # Only what the demo runs: the three executables, no tests. The demo trains on the CPU, so
  # the CUDA backend is not built unless asked for (ZT_CUDA=AUTO or ON).
  log="$src/build.log"
  echo "demo: [2/4] building ztrain, zt-prepare, zt-consolidate (a few minutes the first time; log: $log)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DZT_BUILD_TESTS=OFF -DZT_CUDA="${ZT_CUDA:-OFF}" > "$log" 2>&1 ||
    { tail -30 "$log"; echo "demo: configuring failed; the whole log: $log" >&2; exit 1; }
  cmake --build build -j"$(nproc)" --target ztrain zt-prepare zt-consolidate >> "$log" 2>&1 &
  builder=$!
  # The build's own progress every 10 points, while it runs: make's "[ 45%]", or Ninja's
  # "[12/80]" (a build folder configured with -G Ninja earlier).
  shown=-10
  while kill -0 "$builder" 2>/dev/null; do
    pct=$(grep -oE '^\[ *[0-9]+%\]|^\[[0-9]+/[0-9]+\]' "$log" | tail -1 |
          awk -F'[][/%]' '{gsub(/ /,""); print ($3 != "" ? int(100 * $2 / $3) : $2)}' || true)
    if [ -n "$pct" ] && [ "$pct" -ge $((shown + 10)) ]; then
      echo "demo:       built ${pct}%"
      shown=$pct
    fi
    sleep 2
  done
  wait "$builder" || { tail -30 "$log"; echo "demo: the build failed; the whole log: $log" >&2; exit 1; }
  echo "demo:       built 100%"
  bin="$src/build/bin"
fi

mkdir -p "${ZT_DEMO_DIR:-$src}" && cd "${ZT_DEMO_DIR:-$src}"
if [ ! -f data/fortunes/tokenizer.json ]; then
  echo "demo: [3/4] preparing data: $corpus -> data/fortunes (byte-level tokens)"
  "$bin/zt-prepare" --input "$corpus" --output data/fortunes \
    --tokenizer byte --doc-separator % --val-fraction 0.05
else
  echo "demo: [3/4] preparing data: data/fortunes is there already"
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
echo "demo: [4/4] training inputs/demo.ini on $NP rank(s) (ztrun; Ctrl-C checkpoints and stops)"
# Ctrl-C stops cleanly: ztrun asks the ranks to checkpoint, the job exits 0, and the
# checkpoint written at the stop is consolidated below.
"$bin/ztrun" "$NP" "$bin/ztrain" --config "$src/inputs/demo.ini" "$@"
# The run ends with a sharded checkpoint (one shard per rank); merge it into one file with
# Hugging Face GPT-2 tensor names.
"$bin/zt-consolidate" run/demo/checkpoints --output run/demo/model.safetensors
echo "demo: metrics in run/demo/metrics.jsonl, resolved config in run/demo/config.ini,"
echo "      checkpoint in run/demo/checkpoints/, consolidated weights in run/demo/model.safetensors"
echo "      plot: /usr/bin/python3 $src/postproc/plot_metrics.py run/demo/metrics.jsonl"
