#!/usr/bin/env bash
# What a user sees when starting, stopping and resuming (issue 19): Ctrl-C and kill through
# ztrun (the launcher) checkpoint and exit 0, and the stop message names the signal sent; a resumed run reports its own steps; a schedule change
# on resume is named, and train.schedule_steps keeps the old one; a fresh run refuses a
# directory an earlier run left checkpoints or metrics in; samples never fail a run and are
# printed escaped; deck errors name their line; whole numbers print as integers.
# Usage: test_lifecycle.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

make_corpus
deck="$SRC/inputs/tiny.ini"
data=(--data.train="$work/data/train_*.bin" --data.val="$work/data/val_*.bin")
common=(--config "$deck" "${data[@]}" --train.threads=1)

# ---- 1. Stopping a job run through ztrun ----------------------------------------------------
# stop_job SIGNAL DIR [TARGET]: starts a long np-2 job in its own process group (as a terminal
# runs it), sends SIGNAL once it trains -- to the whole group (TARGET=group, what Ctrl-C does)
# or to the launcher script alone (TARGET=script, what `kill` does) -- and sets rc.
stop_job() {
  local sig=$1 dir=$2 target=${3:-group}
  set -m
  "$BIN/ztrun" 2 ztrain "${common[@]}" --run.dir="$dir" --train.max_steps=100000 \
    --train.log_every=1 --train.eval_every=0 > "$dir.log" 2>&1 &
  local pid=$!
  set +m
  for _ in $(seq 1 300); do grep -qE "step +3/" "$dir.log" 2>/dev/null && break; sleep 0.1; done
  if [ "$target" = group ]; then kill "-$sig" -- "-$pid"; else kill "-$sig" "$pid"; fi
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: SIG$sig to the $target did not end the job within 60 s"; kill -KILL -- "-$pid" 2>/dev/null
  fi
  wait "$pid"
  rc=$?
}
if command -v mpiexec > /dev/null; then
  for case in "INT group" "TERM script" "INT script"; do
    read -r sig target <<<"$case"
    dir="$work/stop_${sig}_$target"
    stop_job "$sig" "$dir" "$target"
    said="SIG$sig"; stopped="SIGTERM (passed to the ranks as SIGUSR1)"
    [ "$sig" = INT ] && said="Ctrl-C (SIGINT)" && stopped="Ctrl-C (SIGINT, passed to the ranks as SIGUSR1)"
    if [ "$rc" -eq 0 ] && grep -qF "ztrun: $said: asking the ranks to checkpoint" "$dir.log" &&
       grep -qF "stopped after $stopped at step" "$dir.log" &&
       [ -s "$dir/checkpoints/latest" ] &&
       ! grep -qiE "MPI_ABORT|mpiexec noticed|mpirun noticed" "$dir.log"; then
      echo "ok: SIG$sig to the $target: the job checkpointed ($(cat "$dir/checkpoints/latest")) and exited 0"
    else
      echo "FAIL: SIG$sig to the $target: exit $rc (expected 0)"; tail -8 "$dir.log"; failures=$((failures + 1))
    fi
  done
fi

# ---- 2 and 3. Resuming: counts, ETA, schedule notes -----------------------------------------
res="$work/resume"
expect 0 "^ztrain: 20 steps in" "$BIN/ztrain" "${common[@]}" --run.dir="$res" --train.max_steps=20 \
  --train.eval_every=0
# Raising max_steps: the closing line counts this process's 10 steps, the schedule change is
# named with the lr under both schedules, and the way to keep the old one is given.
out=$(timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir="$res" --train.max_steps=30 --train.eval_every=0 \
  --train.log_every=1 2>&1)
check "a resumed run's closing line counts its own steps" grep -q "^ztrain: 10 steps (21 to 30) in" <<<"$out"
check "the resumed run names the schedule change" \
  grep -qE "note: the learning-rate schedule differs from the checkpoint's run \(train.max_steps 20 -> 30\): the lr at step 20 is [0-9.e+-]+, where the old schedule gives [0-9.e+-]+" <<<"$out"
check "the note says how to keep the old schedule" grep -q -- "--train.schedule_steps=20" <<<"$out"
# The ETA of a resumed run averages its own steps: resumed at step 10 of a model whose steps
# take tens of ms, the ETA at step 15 must be about the 95 steps left times the measured
# step time (a division by all 15 steps, as before, made it 3.5 times too small).
eta_dir="$work/eta"
wide=(--model.n_layer=4 --model.n_embd=256 --model.n_head=4 --train.eval_every=0 --train.sample_tokens=0)
timeout 120 "$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$eta_dir" --train.max_steps=10 > /dev/null 2>&1
out=$(timeout 300 "$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$eta_dir" --train.max_steps=110 \
  --train.log_every=5 2>&1)
eta_line=$(grep -E "^step +15/110" <<<"$out")
check "the resumed run's ETA at step 15 is the remaining steps times its own step time: '$eta_line'" \
  /usr/bin/python3 - "$eta_line" "$eta_dir/metrics.jsonl" <<'PY'
import json, re, statistics, sys
line, metrics = sys.argv[1], sys.argv[2]
m = re.search(r"ETA (?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$", line)
eta = sum(int(g or 0) * k for g, k in zip(m.groups(), (3600, 60, 1))) if m else -1
ms = statistics.median(r["step_ms"] for r in map(json.loads, open(metrics))
                       if "step_ms" in r and 12 <= r["step"] <= 15)
want = 95 * ms / 1000
print(f"ETA {eta} s, 95 steps x {ms:.1f} ms = {want:.1f} s")
sys.exit(0 if want >= 2 and 0.5 * want <= eta <= 2 * want + 1 else 1)
PY
# With train.schedule_steps the old schedule continues: no note, and past step 20 the lr
# holds at lr_min (read from the run's resolved config).
res2="$work/resume2"
timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir="$res2" --train.max_steps=20 --train.eval_every=0 > /dev/null 2>&1
out=$(timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir="$res2" --train.max_steps=30 --train.schedule_steps=20 \
  --train.eval_every=0 2>&1)
check "train.schedule_steps=20 keeps the old schedule (no note)" bash -c '! grep -q "schedule differs" <<<"$1"' _ "$out"
lr_min=$(sed -nE 's/^lr_min *= *(.*)$/\1/p' "$res2/config.ini")
lr30=$(/usr/bin/python3 -c 'import json, sys
print([r["lr"] for r in map(json.loads, open(sys.argv[1])) if r.get("step") == 30 and "lr" in r][0])' \
  "$res2/metrics.jsonl")
check "past schedule_steps the lr holds at lr_min ($lr30 vs $lr_min)" \
  /usr/bin/python3 -c "import sys; sys.exit(abs(float('$lr30') - float('$lr_min')) > 1e-12 * float('$lr_min'))"
# Another ZeRO stage and world size on resume: one note line.
if command -v mpiexec > /dev/null; then
  out=$(timeout 120 bash "$SRC/.ci/mpirun.sh" 2 "$BIN/ztrain" "${common[@]}" --run.dir="$res2" \
    --train.max_steps=32 --train.schedule_steps=20 --train.eval_every=0 --parallel.zero_stage=2 2>&1)
  check "resuming at np 2, stage 2 says what changed" \
    grep -q "note: the checkpoint was written at world size 1, ZeRO stage 0, fp32; this run is world size 2, ZeRO stage 2, fp32" <<<"$out"
fi

# ---- 4. A fresh run never mixes with or overwrites an earlier one ---------------------------
before=$(ls -R "$res"; md5sum "$res/metrics.jsonl")
expect 2 "checkpoint.resume = never starts a fresh run, but there is [0-9]+ checkpoint\(s\) of an earlier run in .*resume/checkpoints \(newest step_00000030\) and .*metrics.jsonl" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$res" --train.max_steps=5 --checkpoint.resume=never
check "the refused fresh run left the earlier run as it was" test "$before" = "$(ls -R "$res"; md5sum "$res/metrics.jsonl")"
# A run that crashed before its first checkpoint left only metrics.jsonl: resume=auto finds
# nothing to resume, and the fresh run refuses to overwrite those metrics.
mkdir -p "$work/crashed" && echo '{"step":1,"loss":5.0}' > "$work/crashed/metrics.jsonl"
expect 2 "found no checkpoint to resume, so this is a fresh run, but there is .*crashed/metrics.jsonl of an earlier run: the new run would mix with it or overwrite it. Give this run another --run.dir" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$work/crashed" --train.max_steps=5
check "the crashed run's metrics are kept" grep -q '"loss":5.0' "$work/crashed/metrics.jsonl"
# An empty metrics.jsonl (a start refused after opening it) holds no run: the fresh run starts.
mkdir -p "$work/refused" && : > "$work/refused/metrics.jsonl"
expect 0 "step +5/5" "$BIN/ztrain" "${common[@]}" --run.dir="$work/refused" --train.max_steps=5

# ---- 5. Output ----------------------------------------------------------------------------
# A model vocabulary larger than the byte tokenizer's: sampled ids it cannot decode show as
# <id>, the run succeeds; invalid UTF-8 and control bytes are escaped.
out=$(timeout 120 "$BIN/ztrain" "${common[@]}" --run.dir="$work/bigvocab" --train.max_steps=1 --model.vocab_size=5000 \
  --train.sample_tokens=64 --train.eval_every=1 2>&1)
rc=$?
check "a sample with ids outside the tokenizer does not fail the run (exit $rc)" test "$rc" -eq 0
check "such ids print as <id>" grep -qE "<[0-9]{3,4}>" <<<"$out"
check "the sample prints as valid UTF-8 (invalid bytes escaped)" \
  /usr/bin/python3 -c 'import sys; sys.argv[1].encode("utf-8", "surrogateescape").decode("utf-8")' "$out"
check "no raw control byte reaches the terminal" bash -c '! LC_ALL=C grep -q "[[:cntrl:]]" <<<"$(tr -d "\n\t" <<<"$1")"' _ "$out"
# A deck line that is not 'key = value' is named by its line number.
printf '[model]\nn_layer = 2\nthis is not a setting\n' > "$work/broken.ini"
expect 2 "broken.ini:3: cannot parse line 'this is not a setting'" "$BIN/ztrain" --config "$work/broken.ini"
printf '[model]\nn_layer = 2\n\nn_layerz = 3\n' > "$work/typo.ini"
expect 2 "typo.ini:4: unknown key 'model.n_layerz'" "$BIN/ztrain" --config "$work/typo.ini"
# Whole numbers print as integers in --help and in the resolved deck.
expect 0 "timeout_s.*\(default 600\)|default: 600" "$BIN/ztrain" --help
check "config.ini writes timeout_s = 600" grep -qE "^timeout_s = 600$" "$res/config.ini"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all lifecycle checks passed"
