#!/usr/bin/env bash
# Reliability of a run's directory (issue 34): one job per run.dir / checkpoint.dir (a second
# job at np 1 or np 2 exits 2 naming the holder, and the first trains on intact); a lock
# recorded on another host needs --force-unlock, a requeue of the same Slurm job takes it
# over; a run killed between checkpoints and resumed holds each step once in metrics.jsonl,
# with the uninterrupted run's values, its cut last line dropped; a resume with nothing to
# do changes no file; a resume on other data says what changed (data.on_change).
# Usage: test_reliability.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

make_corpus
base=(--config "$SRC/inputs/tiny.ini" --train.threads=1 --train.eval_every=0 --train.sample_tokens=0)
common=("${base[@]}" --data.train="$work/data/train_*.bin")

# wait_step LOG N: waits (up to 60 s) until a progress line of step N or later is in LOG.
wait_step() {
  for _ in $(seq 1 600); do
    last=$(grep -oE "^step +[0-9]+" "$1" 2>/dev/null | tail -1 | grep -oE "[0-9]+")
    [ -n "$last" ] && [ "$last" -ge "$2" ] && return 0
    sleep 0.1
  done
  echo "FAIL: $1 never reached step $2"; tail -5 "$1"; failures=$((failures + 1)); return 1
}

# steps_once METRICS: every line parses, and each step record appears once (prints "N steps").
steps_once() {
  /usr/bin/python3 - "$1" <<'PY'
import collections, json, sys
steps = collections.Counter()
for n, line in enumerate(open(sys.argv[1]), 1):
    r = json.loads(line)  # raises on a cut or broken line
    if "loss" in r:
        steps[r["step"]] += 1
dup = [s for s, c in steps.items() if c > 1]
if dup or sorted(steps) != list(range(1, max(steps) + 1)):
    sys.exit(f"steps twice: {dup[:10]}; missing: {sorted(set(range(1, max(steps) + 1)) - set(steps))[:10]}")
print(f"{len(steps)} steps")
PY
}

# ---- 1. Two jobs, one directory ---------------------------------------------------------
run="$work/shared"
# The first job runs as Slurm job 4242 would (SLURM_JOB_ID is all ztrain reads of Slurm).
SLURM_JOB_ID=4242 "$BIN/ztrain" "${common[@]}" --run.dir="$run" --train.max_steps=1000000 --checkpoint.every=10 \
  --train.log_every=1 > "$work/first.log" 2>&1 &
first=$!
wait_step "$work/first.log" 15
expect 2 "run.dir = $run is in use by another ztrain job \(host $(hostname), PID $first, Slurm job 4242, started [0-9T:Z-]+; lock file $run/ztrain.lock\)" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$run" --train.max_steps=30
if command -v mpiexec > /dev/null; then
  expect 2 "is in use by another ztrain job \(host $(hostname), PID $first" \
    bash "$SRC/.ci/mpirun.sh" 2 "$BIN/ztrain" "${common[@]}" --run.dir="$run" --train.max_steps=30
fi
# A requeue of the same Slurm job while the old allocation's rank still runs: refused too
# (the same job id takes over only a lock that no live process holds).
expect 2 "is in use by another ztrain job \(host $(hostname), PID $first, Slurm job 4242" \
  env SLURM_JOB_ID=4242 "$BIN/ztrain" "${common[@]}" --run.dir="$run" --train.max_steps=30
# Another run.dir, the same checkpoint directory: refused by that lock.
expect 2 "checkpoint.dir = $run/checkpoints is in use by another ztrain job \(host $(hostname), PID $first" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$work/other" --checkpoint.dir="$run/checkpoints" --train.max_steps=30
check "the refused job left no run.dir behind" test ! -e "$work/other"
# --force-unlock does not break a lock whose holder runs on this host.
expect 2 "is in use by another ztrain job" "$BIN/ztrain" "${common[@]}" --run.dir="$run" --force-unlock
kill -USR1 "$first"
wait "$first"
rc=$?
check "the first job trained on and stopped cleanly after the refusals (exit $rc)" test "$rc" -eq 0
check "its metrics hold each step once: $(steps_once "$run/metrics.jsonl" 2>&1)" steps_once "$run/metrics.jsonl"
check "its latest checkpoint is complete" test -f "$run/checkpoints/$(cat "$run/checkpoints/latest")/meta.h5"
check "no partial checkpoint is left" bash -c "! ls -d '$run'/checkpoints/*.partial 2>/dev/null"
check "its lock files are gone after a clean exit" test ! -e "$run/ztrain.lock" -a ! -e "$run/checkpoints/ztrain.lock"

# Two jobs started 1 s apart on a fresh directory: exactly one trains, the other exits 2.
race="$work/race"
"$BIN/ztrain" "${common[@]}" --run.dir="$race" --train.max_steps=20000 > "$work/race1.log" 2>&1 &
p1=$!
sleep 1
"$BIN/ztrain" "${common[@]}" --run.dir="$race" --train.max_steps=20000 > "$work/race2.log" 2>&1
rc2=$?
kill -USR1 "$p1" 2>/dev/null
wait "$p1"
rc1=$?
check "started 1 s apart: the first trains and stops cleanly (exit $rc1), the second exits 2 ($rc2) naming it" \
  bash -c "[ $rc1 -eq 0 ] && [ $rc2 -eq 2 ] && grep -q 'PID $p1' '$work/race2.log' && ! grep -qE '^step ' '$work/race2.log'"
check "the first's metrics hold each step once: $(steps_once "$race/metrics.jsonl" 2>&1)" steps_once "$race/metrics.jsonl"

# ---- 2. Records left by a dead holder ------------------------------------------------------
stale="$work/stale"
mkdir -p "$stale"
echo '{"host":"node-gone","pid":4242,"slurm_job_id":"77","started":"2026-01-01T00:00:00Z"}' > "$stale/ztrain.lock"
expect 2 "run.dir = $stale may be in use by a job on another host \(host node-gone, PID 4242, Slurm job 77, started 2026-01-01T00:00:00Z.*--force-unlock" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$stale" --train.max_steps=5
check "the refusal left the record as it was" grep -q node-gone "$stale/ztrain.lock"
expect 0 "names host node-gone, PID 4242, Slurm job 77.*: taken over" env SLURM_JOB_ID=77 \
  "$BIN/ztrain" "${common[@]}" --run.dir="$stale" --train.max_steps=5
echo '{"host":"node-gone","pid":4242,"slurm_job_id":"77","started":"2026-01-01T00:00:00Z"}' > "$stale/ztrain.lock"
expect 0 "names host node-gone, PID 4242.*broken by --force-unlock" \
  "$BIN/ztrain" "${common[@]}" --run.dir="$stale" --train.max_steps=10 --force-unlock
echo "{\"host\":\"$(hostname)\",\"pid\":999999,\"started\":\"2026-01-01T00:00:00Z\"}" > "$stale/ztrain.lock"
expect 0 "PID 999999.*no longer running: taken over" "$BIN/ztrain" "${common[@]}" --run.dir="$stale" \
  --train.max_steps=15

# ---- 3. Killed between checkpoints, resumed: each step once, the uninterrupted values ------
# A wider model, so the kill lands between checkpoints; the schedule spans 200 steps in both.
wide=(--model.n_embd=128 --model.n_head=4 --train.schedule_steps=200 --checkpoint.every=10)
"$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$work/whole" --train.max_steps=200 > /dev/null 2>&1 ||
  { echo "FAIL: the uninterrupted run"; failures=$((failures + 1)); }
killed="$work/killed"
"$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=200 > "$work/killed.log" 2>&1 &
pid=$!
wait_step "$work/killed.log" 35
kill -KILL "$pid"
wait "$pid" 2>/dev/null
last=$(/usr/bin/python3 - "$killed/metrics.jsonl" <<'PY'
import json, sys
steps = []
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if "loss" in r:
        steps.append(r["step"])
print(max(steps))
PY
)
at=$(cat "$killed/checkpoints/latest")
echo "killed at step $last, latest checkpoint $at"
check "the killed run wrote steps past its latest checkpoint ($last > ${at#step_})" test "$last" -gt "$((10#${at#step_}))"
printf '{"step":%d,"loss":1.2' "$((last + 1))" >> "$killed/metrics.jsonl"  # a write the crash cut short
expect 0 "metrics.jsonl: [0-9]+ record\(s\) past step $((10#${at#step_})), from the interrupted run, superseded; its cut last line dropped" \
  "$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=200
check "each step once after the resume: $(steps_once "$killed/metrics.jsonl" 2>&1)" steps_once "$killed/metrics.jsonl"
check "every step's loss, lr, grad_norm and tokens equal the uninterrupted run's" /usr/bin/python3 - \
  "$work/whole/metrics.jsonl" "$killed/metrics.jsonl" <<'PY'
import json, sys
def steps(p):
    return {r["step"]: (r["loss"], r["lr"], r["grad_norm"], r["tokens"])
            for r in map(json.loads, open(p)) if "loss" in r}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
bad = [s for s in a if a[s] != b.get(s)]
if bad or len(a) != len(b):
    sys.exit(f"{len(bad)} steps differ, first {bad[:1]}: {a[bad[0]] if bad else ''} vs {b.get(bad[0]) if bad else ''}")
PY

# ---- 4. A resume with nothing to do changes no file ----------------------------------------
before=$(cd "$killed" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
expect 0 "is at step 200, which already reaches train.max_steps = 200: nothing to train, no file changed" \
  "$BIN/ztrain" "${common[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=200
check "no file in the run directory changed" test "$before" = "$(cd "$killed" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"

# ---- 5. Other data under the same names ----------------------------------------------------
for i in $(seq 1 200); do echo "a different corpus, line $i"; echo "%"; done > "$work/text2.txt"
"$BIN/zt-prepare" --input "$work/text2.txt" --output "$work/data2" --doc-separator % > /dev/null
other=("${base[@]}" --data.train="$work/data2/train_*.bin")
expect 2 "data.on_change = error: the inputs differ from those the checkpoint was trained on: data.train: train_000000.bin: [0-9]+ -> [0-9]+ bytes" \
  "$BIN/ztrain" "${other[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=205 --data.on_change=error
check "the refusal changed no file" test "$before" = "$(cd "$killed" && find . -type f -print0 | sort -z | xargs -0 sha256sum)"
expect 0 "note: the inputs differ from those the checkpoint was trained on: data.train: train_000000.bin: [0-9]+ -> [0-9]+ bytes.*going on" \
  "$BIN/ztrain" "${other[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=205
# The checkpoint at 205 records the new data: going on with it is no change.
expect 0 "resumed from" "$BIN/ztrain" "${other[@]}" "${wide[@]}" --run.dir="$killed" --train.max_steps=210 \
  --data.on_change=error

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all reliability checks passed"
