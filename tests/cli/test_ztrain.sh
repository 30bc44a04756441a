#!/usr/bin/env bash
# ztrain end to end: exit codes and messages for good and bad input, on 1 and 2 ranks.
# Usage: test_ztrain.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

# A small English-ish corpus and its shards.
for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
deck="$SRC/inputs/tiny.ini"
data=(--data.train="$work/data/train_*.bin" --data.val="$work/data/val_*.bin")
run=("$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$work/run" --train.threads=1)

expect 0 "Usage" "$BIN/ztrain" --help
expect 0 "model.n_layer" "$BIN/ztrain" --help
expect 0 "^ztrain [0-9]" "$BIN/ztrain" --version
expect 0 "OpenBLAS" "$BIN/ztrain" --env
# --env names the ISA oneDNN dispatches to (or that there is no oneDNN).
expect 0 "oneDNN: +(oneDNN [0-9.]+, dispatches to [a-z0-9_]+|none)" "$BIN/ztrain" --env
# bf16 products: ZT_CPU_BF16=off runs them in fp32 with one note; a bad value is an input error.
bf16_run=("$BIN/ztrain" --config "$deck" "${data[@]}" --train.threads=1 --train.max_steps=2 --precision.dtype=bf16)
expect 0 "note: bf16 products run in fp32 through OpenBLAS: ZT_CPU_BF16=off" env ZT_CPU_BF16=off "${bf16_run[@]}" \
  --run.dir="$work/run_bf16_off"
expect 2 "ZT_CPU_BF16=fast: expected auto, on or off" env ZT_CPU_BF16=fast "${bf16_run[@]}" --run.dir="$work/run_bf16_bad"
# --env shows the groups of the settings given with it.
expect 0 "parallel.shard_group = 1\)" "$BIN/ztrain" --env --parallel.shard_group=1
expect 2 "parallel.shard_group = .x" "$BIN/ztrain" --env --parallel.shard_group=x
expect 0 "val loss" "${run[@]}" --train.max_steps=5
[ -s "$work/run/metrics.jsonl" ] && echo "ok: metrics.jsonl written" || { echo "FAIL: no metrics.jsonl"; failures=$((failures + 1)); }
[ -s "$work/run/config.ini" ] && echo "ok: config.ini written" || { echo "FAIL: no config.ini"; failures=$((failures + 1)); }
# A one-rank start has an Open MPI session directory of its own under TMPDIR, removed at exit
# (isolated singletons otherwise share one, and one ending failed another's MPI_Init).
mkdir -p "$work/tmpdir"
TMPDIR="$work/tmpdir" ZT_DEBUG_STALL=0:2:3 "$BIN/ztrain" --config "$deck" "${data[@]}" --train.threads=1 \
  --train.max_steps=3 --run.dir="$work/run_tmpdir" > "$work/tmpdir.log" 2>&1 &
tmpdir_pid=$!
for _ in $(seq 1 100); do
  compgen -G "$work/tmpdir/ztrain-mpi.*/ompi.*" > /dev/null && break
  sleep 0.1
done
check "the running singleton's session directory is its own: $(ls "$work/tmpdir" | tr '\n' ' ')" \
  test -n "$(compgen -G "$work/tmpdir/ztrain-mpi.*/ompi.*")"
check "no session directory shared under TMPDIR" test -z "$(compgen -G "$work/tmpdir/ompi.*")"
wait "$tmpdir_pid"
tmpdir_rc=$?
check "the stalled singleton run ended with exit 0 (it was $tmpdir_rc: $(tail -1 "$work/tmpdir.log"))" \
  test "$tmpdir_rc" -eq 0
check "nothing left in TMPDIR after the run: $(ls -A "$work/tmpdir" | tr '\n' ' ')" test -z "$(ls -A "$work/tmpdir")"
# The resolved deck loads again and reproduces the run's settings.
expect 0 "step +3/3" "$BIN/ztrain" --config "$work/run/config.ini" --train.max_steps=3 --run.dir="$work/run2"

# Muon (its Newton-Schulz on bf16 operands): the run trains, and each step's record carries
# Muon's scheduled rate beside AdamW's (train.muon_lr / train.lr times it: tiny.ini's lr is 1e-2).
expect 0 "step +4/4" "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$work/run_muon" --train.threads=1 \
  --train.max_steps=4 --train.optimizer=muon --train.muon_lr=0.02 --train.muon_ns_dtype=bf16
/usr/bin/python3 - "$work/run_muon/metrics.jsonl" <<'PY' && echo "ok: muon_lr = lr x muon_lr / lr in every step's record" ||
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l and '"step"' in l]
lr = [r for r in rows if "lr" in r]
assert len(lr) == 4 and all(abs(r["muon_lr"] - r["lr"] * 0.02 / 1e-2) <= 1e-9 * r["muon_lr"] for r in lr), rows
PY
  { echo "FAIL: muon_lr in $work/run_muon/metrics.jsonl"; failures=$((failures + 1)); }

# Bad input: exit 2, and the message names what is wrong.
expect 2 "model.n_layers" "${run[@]}" --model.n_layers=3
expect 2 "n_embd.*divisible" "${run[@]}" --model.n_embd=30 --model.n_head=4
expect 2 "train.lr" "${run[@]}" --train.lr=-1
expect 2 "model.n_head" "${run[@]}" --model.n_head=0
expect 2 "train.schedule" "${run[@]}" --train.schedule=exponential
expect 2 "not an integer|integer" "${run[@]}" --model.n_layer=four
expect 2 "missing.ini|cannot read" "$BIN/ztrain" --config "$work/missing.ini"
expect 2 "data.train" "$BIN/ztrain" --config "$deck" --run.dir="$work/run"
expect 2 "data.train.*nope" "$BIN/ztrain" --config "$deck" --data.train="$work/nope_*.bin" --run.dir="$work/run"
printf 'garbage that is not a shard, long enough to hold a header? no.' > "$work/bad.bin"
expect 2 "bad.bin" "$BIN/ztrain" --config "$deck" --data.train="$work/bad.bin" --run.dir="$work/run"
expect 2 "vocab" "${run[@]}" --model.vocab_size=100
printf '[model]\nn_layer = 2\nn_layerz = 3\n' > "$work/typo.ini"
expect 2 "typo.ini.*n_layerz" "$BIN/ztrain" --config "$work/typo.ini"

# Two ranks: a good run, and bad input that stops both ranks with exit 2 (no hang).
if command -v mpiexec > /dev/null; then
  expect 0 "step +4/4" mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/run_np2" --train.threads=1 --train.max_steps=4 --parallel.zero_stage=3
  expect 2 "train.lr" mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/run_np2" --train.lr=-1
  # Only rank 0 prints: at np 2 every progress line, the start-up memory table and the final
  # line appear exactly once.
  timeout 120 mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/run_np2_print" --train.threads=1 --train.max_steps=3 --train.log_every=1 \
    --parallel.zero_stage=1 > "$work/np2_print.log" 2>&1
  for pat in "step +1/3" "step +2/3" "step +3/3" "memory per rank" "val loss" "^ztrain: 3 steps in"; do
    n=$(grep -cE -- "$pat" "$work/np2_print.log")
    if [ "$n" -eq 1 ]; then echo "ok: np 2 prints /$pat/ once"; else
      echo "FAIL: np 2 printed /$pat/ $n times (expected once: rank 0 only)"; failures=$((failures + 1)); fi
  done
  # A run that cannot go on (fp16 at a static scale every gradient overflows) stops on every
  # rank together: exit 1, the reason printed once, no MPI_Abort, the last step recorded.
  timeout 120 mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/run_np2_stuck" --train.threads=1 --train.max_steps=10 --precision.dtype=fp16 \
    --precision.loss_scale=1e30 --train.max_bad_steps=2 > "$work/np2_stuck.log" 2>&1
  rc=$?
  n=$(grep -c "error: step 2: 2 consecutive steps with fp16 gradient overflow" "$work/np2_stuck.log")
  last=$(tail -1 "$work/run_np2_stuck/metrics.jsonl" 2>/dev/null)
  if [ "$rc" -eq 1 ] && [ "$n" -eq 1 ] && ! grep -qiE "MPI_ABORT|fatal" "$work/np2_stuck.log" &&
     grep -q '"step":2,' <<<"$last" && grep -q '"skipped":true' <<<"$last"; then
    echo "ok: np 2 stuck fp16 run exits 1 on both ranks, reason printed once, step 2 recorded"
  else
    echo "FAIL: np 2 stuck fp16 run: exit $rc (expected 1), reason printed $n times (expected 1), last record: $last"
    tail -5 "$work/np2_stuck.log"; failures=$((failures + 1))
  fi
fi

# A signal mid-run: checkpoint at the next step boundary, exit 0; a second run resumes.
# signal_run SIGNAL DIR: starts a long run in DIR, sends SIGNAL once it is training, and
# sets rc to its exit status (its output is in DIR.log).
signal_run() {
  "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$2" --train.threads=1 --train.max_steps=100000 \
    --train.log_every=1 > "$2.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do grep -qE "step +3/" "$2.log" 2>/dev/null && break; sleep 0.1; done
  kill "-$1" "$pid"
  # A signal ztrain does not handle may be ignored (bash ignores SIGINT in background jobs):
  # give up after 30 s rather than wait for 100000 steps.
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null && echo "FAIL: SIG$1 did not stop the run within 30 s"
  wait "$pid"
  rc=$?
}
sigdir="$work/sig"
signal_run TERM "$sigdir"
if [ "$rc" -eq 0 ] && grep -q "stopped by SIGTERM (signal 15) after step" "$sigdir.log" && [ -s "$sigdir/checkpoints/latest" ]; then
  echo "ok: SIGTERM -> checkpoint $(cat "$sigdir/checkpoints/latest") and exit 0"
  stopped_at=$(sed 's/step_0*//' "$sigdir/checkpoints/latest")
  expect 0 "resumed from .*at step $stopped_at" "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$sigdir" \
    --train.threads=1 --train.max_steps=$((stopped_at + 2))
else
  echo "FAIL: SIGTERM run: exit $rc"; tail -5 "$sigdir.log"; failures=$((failures + 1))
fi

# SIGINT (Ctrl-C) does the same. ztrain installs its own handler, so the SIGINT that bash
# ignores in background jobs still reaches it.
intdir="$work/int"
signal_run INT "$intdir"
if [ "$rc" -eq 0 ] && grep -q "stopped by SIGINT (signal 2) after step" "$intdir.log" && [ -s "$intdir/checkpoints/latest" ] &&
   [ -s "$intdir/checkpoints/$(cat "$intdir/checkpoints/latest")/meta.h5" ]; then
  echo "ok: SIGINT -> checkpoint $(cat "$intdir/checkpoints/latest") and exit 0"
else
  echo "FAIL: SIGINT run: exit $rc"; tail -5 "$intdir.log"; failures=$((failures + 1))
fi

# Resume from an explicit PATH (a step directory, or a checkpoint directory's `latest`) into
# another run directory: it loads, continues from that step and trains on.
if [ -s "$sigdir/checkpoints/latest" ]; then
  step_name=$(cat "$sigdir/checkpoints/latest")
  at=$((10#${step_name#step_}))
  expect 0 "resumed from .*$sigdir/checkpoints/$step_name at step $at" "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/explicit" --train.threads=1 --train.max_steps=$((at + 3)) \
    --checkpoint.resume="$sigdir/checkpoints/$step_name"
  grep -qE '"step": ?'$((at + 3)) "$work/explicit/metrics.jsonl" 2>/dev/null &&
    echo "ok: the run resumed from an explicit step directory trained to step $((at + 3))" ||
    { echo "FAIL: no step $((at + 3)) in $work/explicit/metrics.jsonl"; failures=$((failures + 1)); }
  expect 0 "resumed from .*$step_name at step $at" "$BIN/ztrain" --config "$deck" "${data[@]}" \
    --run.dir="$work/explicit2" --train.threads=1 --train.max_steps=$((at + 1)) \
    --checkpoint.resume="$sigdir/checkpoints"

  # Another train.seed would continue a different data order: refused, naming both values,
  # and the run directory is left as it was.
  before=$(cat "$sigdir/metrics.jsonl")
  expect 2 "train.seed = 7 differs from the checkpoint's train.seed = 1337" "$BIN/ztrain" --config "$deck" \
    "${data[@]}" --run.dir="$sigdir" --train.threads=1 --train.max_steps=$((at + 5)) --train.seed=7
  [ "$before" = "$(cat "$sigdir/metrics.jsonl")" ] && echo "ok: the refused resume left metrics.jsonl alone" ||
    { echo "FAIL: the refused resume changed metrics.jsonl"; failures=$((failures + 1)); }

  # A checkpoint of AdamW resumed under Muon: its moments mean other things; refused, naming
  # both, and the run directory is left as it was.
  expect 2 "train.optimizer = muon differs from the checkpoint's adamw" "$BIN/ztrain" --config "$deck" \
    "${data[@]}" --run.dir="$sigdir" --train.threads=1 --train.max_steps=$((at + 5)) --train.optimizer=muon
  [ "$before" = "$(cat "$sigdir/metrics.jsonl")" ] && echo "ok: the resume under another optimizer left metrics.jsonl alone" ||
    { echo "FAIL: the refused optimizer change altered metrics.jsonl"; failures=$((failures + 1)); }

  # Another split of the same width into heads: the same shapes, another model; refused.
  expect 2 "model.n_head = 4 differs from the checkpoint's model.n_head = 2" "$BIN/ztrain" --config "$deck" \
    "${data[@]}" --run.dir="$sigdir" --train.threads=1 --train.max_steps=$((at + 5)) --model.n_head=4
  [ "$before" = "$(cat "$sigdir/metrics.jsonl")" ] && echo "ok: the resume with other heads left metrics.jsonl alone" ||
    { echo "FAIL: the refused head change altered metrics.jsonl"; failures=$((failures + 1)); }

  # Another width: named by its key before any state is built (was a count of elements),
  # with no advice to start from weights of another shape.
  expect 2 "model.n_embd = 64 differs from the checkpoint's model.n_embd = [0-9]+ .*resume with --model.n_embd=[0-9]+, or train this model in another run.dir" \
    "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$sigdir" --train.threads=1 --train.max_steps=$((at + 5)) \
    --model.n_embd=64
  [ "$before" = "$(cat "$sigdir/metrics.jsonl")" ] && echo "ok: the resume at another width left metrics.jsonl alone" ||
    { echo "FAIL: the refused width change altered metrics.jsonl"; failures=$((failures + 1)); }
  # GPT-2's positions are a table with a row per position: another seq_len is another shape.
  expect 2 "model.seq_len = 64 differs from the checkpoint's model.seq_len = 32 \(gpt2's learned position table" \
    "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$sigdir" --train.threads=1 --train.max_steps=$((at + 5)) \
    --model.seq_len=64

  # resume=auto with a `latest` that names a missing directory (a crash mid-save, a removed
  # directory): a note, and the newest complete checkpoint continues.
  cp -r "$sigdir" "$work/dangling"
  echo "step_99999999" > "$work/dangling/checkpoints/latest"
  newest=$(ls -d "$work/dangling/checkpoints"/step_* | sort | tail -1)
  newest_at=$((10#${newest##*step_}))
  expect 0 "note: .*names 'step_99999999', which does not exist; resuming from the newest complete checkpoint" \
    "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$work/dangling" --train.threads=1 \
    --train.max_steps=$((newest_at + 1))
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all ztrain CLI checks passed"
