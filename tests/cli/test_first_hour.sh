#!/usr/bin/env bash
# A new user's first hour (issue 35), each edge that was a dead end: the demo talks while it
# works and its set-up installs what the plot needs; plot_metrics.py says what to install,
# has a whole --help, a title and a loss unit; a damaged checkpoint (explicit resume,
# zt-consolidate, inspect_checkpoint.py) names the newest complete step, with no Open MPI
# boilerplate after ztrain's message; a resume at another world size names the global batch
# change and the grad_accum that keeps it; --help's seq_len is true for Llama; zt-prepare
# says when there are no validation tokens; a --plan that does not fit gives a verdict.
# Usage: test_first_hour.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
cd "$work" || exit 1
for i in $(seq 1 300); do echo "fortune $i: the quick brown fox jumps over the lazy dog"; echo "%"; done > corpus.txt

# ---- The demo: one line per phase (prebuilt executables: no install, no build) -------------
out=$(ZT_BIN_DIR="$BIN" ZT_DEMO_DIR="$work/demo" ZT_DEMO_CORPUS="$work/corpus.txt" NP=1 \
  timeout 120 bash "$SRC/inputs/demo.sh" --train.max_steps=3 --train.eval_every=0 --train.sample_tokens=0 \
  --train.threads=1 2>&1)
for phase in "\[1/4\] installing" "\[2/4\] building" "\[3/4\] preparing data" "\[4/4\] training"; do
  check "the demo announces /$phase/" grep -qE "^demo: $phase" <<<"$out"
done
check "the demo ran and consolidated" test -s "$work/demo/run/demo/model.safetensors"
check "the demo's set-up (.ci/setup.sh demo) installs python3-matplotlib" \
  bash -c 'sed -n "/^packages=(/,/^)/p" "$1" | grep -q python3-matplotlib' _ "$SRC/.ci/setup.sh"
check "the demo prints its build log path when the build fails" grep -q 'the build failed; the whole log: \$log' \
  "$SRC/inputs/demo.sh"

# ---- plot_metrics.py -----------------------------------------------------------------------
plot="$SRC/postproc/plot_metrics.py"
if [ -x /usr/bin/python3 ]; then
  out=$(/usr/bin/python3 "$plot" --help 2>&1)
  check "plot_metrics.py --help is whole (its description ends its sentence)" \
    grep -q "titled with the run's name" <<<"$out"
  # Without matplotlib (a stand-in package that fails to import): what to install, exit 2.
  mkdir -p nompl/matplotlib && echo 'raise ImportError("No module named matplotlib")' > nompl/matplotlib/__init__.py
  expect 2 "needs matplotlib .*apt-get install python3-matplotlib" \
    env PYTHONPATH="$work/nompl" /usr/bin/python3 "$plot" "$work/demo/run/demo/metrics.jsonl" -o "$work/x.png"
  if /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
    expect 0 "^title: demo; loss in nats per token" /usr/bin/python3 "$plot" "$work/demo/run/demo/metrics.jsonl" \
      -o "$work/demo.png"
  else
    echo "note: no matplotlib: the figure's title is not checked"
  fi
fi

# ---- Damaged checkpoints point the way -----------------------------------------------------
"$BIN/zt-prepare" --input corpus.txt --output data --doc-separator % > /dev/null || { echo "FAIL: zt-prepare"; exit 1; }
common=(--config "$SRC/inputs/tiny.ini" --data.train="data/train_*.bin" --train.threads=1 --train.eval_every=0
        --train.sample_tokens=0)
ck="$work/run/checkpoints"
expect 0 "^ztrain: 4 steps in" "$BIN/ztrun" 2 ztrain "${common[@]}" --run.dir=run --train.max_steps=4 \
  --checkpoint.every=2 --checkpoint.keep=3
shard=$(ls "$ck/step_00000004/"shard_*.h5 | head -1)
truncate -s 100 "$shard"
out=$(timeout 120 "$BIN/ztrun" 2 ztrain "${common[@]}" --run.dir=run --train.max_steps=6 \
  --checkpoint.resume="$ck/step_00000004" 2>&1)
rc=$?
check "explicit resume of a damaged step exits 2 ($rc)" test "$rc" -eq 2
check "it names the newest complete step" \
  grep -qF "The newest complete checkpoint there is $ck/step_00000002: resume it with --checkpoint.resume=" <<<"$out"
check "no Open MPI boilerplate follows ztrain's message" bash -c '! grep -qE "Primary job|mpiexec detected" <<<"$1"' _ "$out"
expect 2 "newest complete checkpoint there is $ck/step_00000002: zt-consolidate" \
  "$BIN/zt-consolidate" "$ck" --output "$work/m.safetensors"
if /usr/bin/python3 -c "import h5py, numpy" 2> /dev/null; then
  out=$(/usr/bin/python3 "$SRC/postproc/inspect_checkpoint.py" "$ck" 2>&1)
  rc=$?
  check "inspect_checkpoint.py on a truncated shard exits 2 ($rc)" test "$rc" -eq 2
  check "... with a message, not a traceback" bash -c 'grep -q "error: .*damaged checkpoint: .*truncated" <<<"$1" &&
    ! grep -q Traceback <<<"$1"' _ "$out"
  check "... naming the newest complete step" grep -qF "newest complete checkpoint there is $ck/step_00000002" <<<"$out"
else
  echo "note: no h5py: inspect_checkpoint.py is not checked"
fi

# ---- A resume at another world size: the global batch ---------------------------------------
# (first: the plain resume below saves step 3, and checkpoint.keep drops step 2)
out=$(timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir=run_global_batch --train.max_steps=3 \
  --train.global_batch=8 --checkpoint.resume="$ck/step_00000002" 2>&1)
check "with train.global_batch = 8 a resume on 1 rank of a 2-rank run keeps the batch: no note" \
  bash -c '! grep -qF "global batch changes" <<<"$1"' _ "$out"
check "... and trains 8 sequences per step on 1 rank (grad_accum 2)" grep -qF "global batch 8 x 32 tokens" <<<"$out"
out=$(timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir=run --train.max_steps=3 \
  --checkpoint.resume="$ck/step_00000002" 2>&1)
check "a resume on 1 rank of a 2-rank run names the global batch change and the grad_accum keeping it" \
  grep -qF "the global batch changes from 8 to 4 sequences per step" <<<"$out"
check "... and the grad_accum that keeps it" grep -qF -- "--train.grad_accum=2 keeps it at 8" <<<"$out"
check "... and the train.global_batch that keeps it at any world size" \
  grep -qF "train.global_batch = 8 keeps it at any world size" <<<"$out"

# ---- Small items ----------------------------------------------------------------------------
out=$("$BIN/ztrain" --help 2>&1)
check "--help's model.seq_len does not claim learned positions for Llama" \
  grep -qE "model.seq_len.*llama: RoPE, none learned" <<<"$out"
for i in $(seq 1 50); do echo "line $i"; done > one.txt
expect 0 "note: no validation tokens: .*--doc-separator" "$BIN/zt-prepare" --input one.txt --output one
cd / && [ "$failures" -eq 0 ]
