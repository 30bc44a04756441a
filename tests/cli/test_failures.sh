#!/usr/bin/env bash
# Failures across ranks: no rank is left waiting.
#  - A rank that hangs (ZT_DEBUG_STALL test hook) trips the collective watchdog
#    (parallel.timeout_s): the job exits non-zero with a message naming collective, step, rank.
#  - A rank killed with SIGKILL mid-run (N = 2 and 4, and a pipeline stage at N = 2): the whole
#    job exits non-zero within 30 s, and the newest complete checkpoint loads.
#  - A disk that runs out of space for a checkpoint, or for metrics.jsonl: exit 1, and what was
#    saved before (for metrics.jsonl, a checkpoint of the step reached) is there to resume.
# Usage: test_failures.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
if ! command -v mpiexec > /dev/null; then echo "no mpiexec"; exit 1; fi
work=$(mktemp -d)
trap 'pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for i in $(seq 1 400); do echo "a fairly ordinary sentence number $i, with words"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || { echo "FAIL: zt-prepare"; exit 1; }
common=(--config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" --train.threads=1 --train.sample_tokens=0)
MPI=(mpiexec --oversubscribe --bind-to none -x OMP_WAIT_POLICY)
# Open MPI's own start-up failures (no ztrain code has run yet).
MPI_START_FAILED="orte_session_dir failed|before MPI_INIT completed|orte_init failed|ompi_mpi_init: "

# A run in which rank 1 stalls in step 3 (ZT_DEBUG_STALL) must end with the watchdog's
# message. stalled NAME WHAT REGEX ARGS...: REGEX is the message expected in the output.
stalled() {
  local name=$1 what=$2 regex=$3
  shift 3
  local start rc took
  start=$(date +%s)
  ZT_DEBUG_STALL=1:3:120 timeout 60 "${MPI[@]}" -x ZT_DEBUG_STALL -np 2 "$BIN/ztrain" "${common[@]}" \
    --run.dir="$work/$name" --parallel.timeout_s=3 "$@" > "$work/$name.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "$what: exit $rc (expected a non-zero exit from the watchdog)"
  elif ! grep -qE "$regex" "$work/$name.log"; then
    fail "$what: no watchdog message matching '$regex'"; tail -5 "$work/$name.log"
  else
    echo "ok: $what -> watchdog aborted the job in ${took} s: $(grep -oE "$regex" "$work/$name.log" | head -1)"
  fi
}

# 1. A hung rank. Rank 0 waits for the gradient all-reduce it started, which its
# communication thread (parallel.comm_thread) is running: the watchdog must still see it.
stalled stall "hung rank" "rank 0: collective .* has waited [0-9]+ s in step 3 \(parallel.timeout_s = 3\)" \
  --parallel.comm_thread=true

# 1b. A hung stage of a pipeline: its neighbour blocks in a point-to-point receive or send
# outside any collective, which the runner marks as pending for the watchdog.
stalled stall_pipe "hung pipeline stage" "rank 0: collective pipeline (send|receive)[^:]* has waited [0-9]+ s in step 3" \
  --parallel.pipeline=2 --train.grad_accum=2

# 2. A rank killed with SIGKILL mid-run: N = 2 and 4, and a pipeline's stage at N = 2 ("2p").
for mode in 2 4 2p; do
  np=${mode%p}
  extra=()
  label="N=$np"
  if [ "$mode" = 2p ]; then
    extra=(--parallel.pipeline=2 --train.grad_accum=2)
    label="N=$np, pipeline 2"
  fi
  run="$work/kill$mode"
  "${MPI[@]}" -np "$np" "$BIN/ztrain" "${common[@]}" "${extra[@]}" --run.dir="$run" --train.max_steps=1000000 \
    --checkpoint.every=20 --train.log_every=10 > "$work/kill$mode.log" 2>&1 &
  launcher=$!
  for _ in $(seq 1 300); do [ -s "$run/checkpoints/latest" ] && break; sleep 0.1; done
  victim=$(pgrep -P "$launcher" | tail -1)
  if [ -z "$victim" ] || [ ! -s "$run/checkpoints/latest" ]; then
    fail "$label: no rank process or no checkpoint before the kill"; kill -KILL "$launcher" 2>/dev/null; continue
  fi
  kill -KILL "$victim"
  start=$(date +%s)
  for _ in $(seq 1 300); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  took=$(( $(date +%s) - start ))
  if kill -0 "$launcher" 2>/dev/null; then
    fail "$label: job still running 30 s after a rank was killed"; pkill -KILL -f "$run"; continue
  fi
  wait "$launcher"
  rc=$?
  if pgrep -f "$run" > /dev/null; then fail "$label: a rank outlived the job"; pkill -KILL -f "$run"; fi
  [ "$rc" -ne 0 ] || fail "$label: exit 0 after a rank was killed"
  latest=$(cat "$run/checkpoints/latest")
  at=$((10#${latest#step_}))
  resume() {
    "${MPI[@]}" -np "$np" "$BIN/ztrain" "${common[@]}" "${extra[@]}" --run.dir="$run" \
      --train.max_steps=$((at + 2)) > "$work/resume$mode.log" 2>&1
  }
  resume
  resumed=$?
  # The killed job's Open MPI session may still be torn down while this one starts: a start-up
  # failure inside Open MPI, before any of ztrain runs, gets one more try (as test_bad_input).
  if [ "$resumed" -ne 0 ] && grep -qE "$MPI_START_FAILED" "$work/resume$mode.log"; then
    echo "note: $label: the resume run failed inside Open MPI's start-up; once more:"
    grep -E "$MPI_START_FAILED" "$work/resume$mode.log" | head -3 | sed 's/^/  /'
    resume
    resumed=$?
  fi
  if [ "$resumed" -eq 0 ] && grep -q "resumed from .*at step $at" "$work/resume$mode.log"; then
    echo "ok: $label: rank killed -> job exited $rc in ${took} s; $latest loads and training continues"
  else
    fail "$label: the newest checkpoint $latest did not resume"; tail -5 "$work/resume$mode.log"
  fi
done

# 3. resume=auto falls back to the previous complete checkpoint when the newest is damaged.
fb="$work/fallback"
"$BIN/ztrain" "${common[@]}" --run.dir="$fb" --train.max_steps=4 --checkpoint.every=2 > /dev/null 2>&1 ||
  fail "fallback: setup run failed"
shard="$fb/checkpoints/step_00000004/shard_00000_of_00001.h5"
if [ -f "$shard" ]; then
  printf '\xff' | dd of="$shard" bs=1 seek=2000 conv=notrunc status=none
  out=$("$BIN/ztrain" "${common[@]}" --run.dir="$fb" --train.max_steps=6 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "warning: checkpoint .*step_00000004 rejected: .*shard_00000_of_00001.h5" <<<"$out" &&
     grep -q "resumed from .*step_00000002 at step 2" <<<"$out"; then
    echo "ok: damaged newest checkpoint -> warning, resumed from step_00000002"
  else
    fail "fallback: exit $rc"; echo "$out" | grep -v "^step" | tail -5
  fi
  # The damaged step is moved aside, so checkpoint.keep = 2 keeps the step resumed from
  # (it pruned step_00000002 and kept the damaged step_00000004).
  if [ -d "$fb/checkpoints/step_00000004.damaged" ] && [ -d "$fb/checkpoints/step_00000002" ] &&
     [ -d "$fb/checkpoints/step_00000006" ] && [ ! -e "$fb/checkpoints/step_00000004" ]; then
    echo "ok: the damaged step moved aside; the step resumed from and the new one kept"
  else
    fail "fallback: checkpoints after the save: $(ls "$fb/checkpoints" | tr '\n' ' ')"
  fi
else
  fail "fallback: no step_00000004 shard"
fi

# 4. Disk full during a save: a 900 KiB tmpfs holds one tiny checkpoint (~0.5 MB) but not two.
# The save at step 4 is a background (async) write; the last one (step 6) is synchronous.
full="$work/full"
mkdir -p "$full"
if mount -t tmpfs -o size=900k tmpfs "$full" 2>/dev/null; then
  trap 'umount "$full" 2>/dev/null; pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
  out=$("$BIN/ztrain" "${common[@]}" --run.dir="$work/fullrun" --checkpoint.dir="$full/ckpt" --checkpoint.keep=2 \
        --train.max_steps=6 --checkpoint.every=2 --checkpoint.async=true 2>&1)
  rc=$?
  if [ "$rc" -eq 1 ] && grep -q "checkpoint at step 4 failed: .*disk full" <<<"$out" &&
     [ "$(cat "$full/ckpt/latest")" = "step_00000002" ] && [ ! -e "$full/ckpt/step_00000004.partial" ]; then
    echo "ok: disk full (on_error=stop) -> exit 1, clear message, step_00000002 intact, no partial left"
  else
    fail "disk full (stop): exit $rc, latest $(cat "$full/ckpt/latest" 2>/dev/null)"; echo "$out" | grep -v "^step" | tail -4
  fi
  # A fresh run into its own checkpoint directory on the same full disk (a fresh run into
  # $full/ckpt would be refused: the first run's checkpoints are there).
  out=$("$BIN/ztrain" "${common[@]}" --run.dir="$work/fullrun2" --checkpoint.dir="$full/ckpt2" --checkpoint.keep=2 \
        --checkpoint.resume=never --train.max_steps=6 --checkpoint.every=2 --checkpoint.on_error=continue 2>&1)
  rc=$?
  # Training goes on past the failed saves; the last save failing too ends the run with exit 1
  # (exit 0 would report a run whose trained state is nowhere).
  if [ "$rc" -eq 1 ] && grep -q "warning: checkpoint at step .* failed: .*training continues" <<<"$out" &&
     grep -qE "step +6/6" <<<"$out" &&
     grep -q "error: the run's last checkpoint, at step 6, failed: .*none of its steps are saved" <<<"$out"; then
    echo "ok: disk full (on_error=continue) -> warnings, training reached step 6, the failed last save exit 1"
    # That disk was already full: no save completed, and none may look complete.
    if ls -d "$full"/ckpt2/*.partial > /dev/null 2>&1 ||
       { [ -e "$full/ckpt2/latest" ] && [ ! -f "$full/ckpt2/$(cat "$full/ckpt2/latest")/meta.h5" ]; }; then
      fail "disk full (continue): a partial directory is left, or latest names an incomplete one: $(ls "$full/ckpt2")"
    else
      echo "ok: disk full (on_error=continue): no partial directory left, no incomplete checkpoint named by latest"
    fi
  else
    fail "disk full (continue): exit $rc"; echo "$out" | grep -v "^step" | tail -4
  fi
  # (Its own last save finds the disk still full: exit 1, which is not what this checks.)
  latest=$(cat "$full/ckpt/latest")
  "$BIN/ztrain" "${common[@]}" --run.dir="$work/fullrun3" --checkpoint.dir="$full/ckpt" \
    --train.max_steps=$((10#${latest#step_} + 1)) --checkpoint.on_error=continue > "$work/full3.log" 2>&1
  if grep -q "resumed from" "$work/full3.log"; then
    echo "ok: after disk full, the newest complete checkpoint ($latest) still loads"
  else
    fail "disk full: $latest does not load"; tail -3 "$work/full3.log"
  fi
  umount "$full"

  # zt-prepare onto a full disk: exit 1 naming the work folder, kept for the rerun; no output.
  if mount -t tmpfs -o size=200k tmpfs "$full" 2>/dev/null; then
    for i in $(seq 1 4000); do echo "line $i of a corpus too large for the disk it is prepared onto"; done \
      > "$work/big.txt"
    out=$("$BIN/zt-prepare" --input "$work/big.txt" --output "$full/data" 2>&1)
    rc=$?
    if [ "$rc" -eq 1 ] && [ ! -e "$full/data" ] &&
       grep -q "data.zt-prepare-partial: writing part 0 failed.*run the same command again" <<<"$out"; then
      echo "ok: zt-prepare on a full disk -> exit 1 naming the kept work folder, no output"
    else
      fail "zt-prepare on a full disk: exit $rc"; echo "$out" | tail -2
    fi
    umount "$full"
  fi

  # 5. ENOSPC inside a background write, at N = 2 (ZeRO-1: each rank writes half the state):
  # each rank's free-space check passes for its own shard, but both together do not fit, so
  # a data write itself fails with ENOSPC. A 9.5 MiB tmpfs holds one 5.2 MiB checkpoint
  # (step 4); the async save at step 8 then runs out of space.
  if mount -t tmpfs -o size=9728k tmpfs "$full" 2>/dev/null; then
    wide=(--model.n_embd=128 --model.n_head=4 --parallel.zero_stage=1 --checkpoint.keep=1 --checkpoint.every=4
          --checkpoint.async=true --train.max_steps=12)
    for mode in continue stop; do
      out=$("${MPI[@]}" -np 2 "$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$work/enospc_$mode" \
            --checkpoint.dir="$full/$mode" --checkpoint.on_error=$mode 2>&1)
      rc=$?
      # continue: training goes on past step 8, and the last save (step 12) fails too: exit 1.
      want=1
      last_failed=true
      [ "$mode" = continue ] && ! grep -q "the run's last checkpoint, at step 12, failed" <<<"$out" && last_failed=false
      why=$(grep -oE "checkpoint at step 8 failed: .*(No space left on device|not enough space)" <<<"$out" | head -1)
      if [ "$rc" -eq "$want" ] && [ -n "$why" ] && [ "$(cat "$full/$mode/latest")" = step_00000004 ] &&
         $last_failed && ! ls -d "$full/$mode"/*.partial > /dev/null 2>&1; then
        echo "ok: ENOSPC in an async write at N=2 (on_error=$mode) -> exit $rc, latest step_00000004, no partial: ${why##*: }"
      else
        fail "ENOSPC at N=2 (on_error=$mode): exit $rc (expected $want), latest $(cat "$full/$mode/latest" 2>/dev/null)"
        echo "$out" | grep -v "^step" | tail -4
      fi
      rm -rf "${full:?}/$mode"  # room for the next mode
    done
    umount "$full"
  fi
else
  echo "skip: cannot mount a tmpfs here (needs root); disk-full case not run"
fi

# 5. metrics.jsonl runs out of space (the run directory on a 64 KiB tmpfs, mostly filled; the
# checkpoints elsewhere). Rank 0 alone writes it, so the ranks agree on the failure at the step
# boundary: every rank saves a checkpoint of that step and the job exits 1 naming the file,
# instead of rank 0 dying with the steps since the last checkpoint. With the space back, a
# resume goes on from that step, and metrics.jsonl (its cut last line repaired) parses.
records="$work/records"
mkdir -p "$records"
if mount -t tmpfs -o size=64k tmpfs "$records" 2>/dev/null; then
  trap 'umount "$full" "$records" 2>/dev/null; pkill -KILL -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
  head -c 48k /dev/zero > "$records/filler"
  rec=(--run.dir="$records" --checkpoint.dir="$work/records_ckpt" --train.max_steps=60 --checkpoint.every=100
       --checkpoint.async=false --run.tensorboard=false)
  out=$(timeout 120 "${MPI[@]}" -np 2 "$BIN/ztrain" "${common[@]}" "${rec[@]}" 2>&1)
  rc=$?
  why=$(grep -oE "cannot write [^ ]*metrics.jsonl: No space left on device; stopped after step [0-9]+ with a checkpoint" <<<"$out")
  step=$(grep -oE "[0-9]+ with a checkpoint" <<<"$why" | grep -oE "^[0-9]+")
  latest=$(cat "$work/records_ckpt/latest" 2>/dev/null)
  if [ "$rc" -eq 1 ] && [ -n "$step" ] && [ "$step" -lt 60 ] && [ "$latest" = "$(printf 'step_%08d' "$step")" ]; then
    rm "$records/filler"
    out=$(timeout 120 "${MPI[@]}" -np 2 "$BIN/ztrain" "${common[@]}" "${rec[@]}" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "steps ($((step + 1)) to 60)" <<<"$out" &&
       python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$records/metrics.jsonl"; then
      echo "ok: metrics.jsonl out of space at N=2 -> $latest saved, exit 1 ($why); resumed to step 60"
    else
      fail "metrics.jsonl out of space: the resume exited $rc, or its metrics.jsonl does not parse"
      echo "$out" | tail -4
    fi
  else
    fail "metrics.jsonl out of space at N=2: exit $rc (expected 1), latest '$latest', step '$step'"
    echo "$out" | grep -v "^step" | tail -4
  fi
  umount "$records"
else
  echo "skip: cannot mount a tmpfs here (needs root); metrics.jsonl out of space not run"
fi

if [ "$failures" -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all failure checks passed"
