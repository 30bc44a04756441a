#!/usr/bin/env bash
# checkpoint.async end to end at np 2 (issue 18): a stop signal while a background write is
# in flight waits for it, writes the stop checkpoint and exits 0 with both complete; a rank
# killed (kill -9) while a write is in flight leaves the previous checkpoint loadable. The
# test hook ZT_TEST_CHECKPOINT_DELAY_MS holds every background write back, so the signal
# and the kill surely land while one is in flight.
# Usage: test_async_checkpoint.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
command -v mpiexec > /dev/null || { echo "skip: no mpiexec"; exit 77; }

for i in $(seq 1 300); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
common=(--config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" --train.threads=1
        --train.eval_every=0 --train.sample_tokens=0 --train.log_every=1 --checkpoint.every=2
        --checkpoint.async=true)
export ZT_TEST_CHECKPOINT_DELAY_MS=3000

# wait_for PATTERN FILE [TENTHS]: waits until FILE has a line matching PATTERN (ERE).
wait_for() {
  for _ in $(seq 1 "${3:-600}"); do grep -qE "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
complete() { [ -s "$1/meta.h5" ] && [ -s "$1/CHECKSUM" ] && [ -s "$1/shard_00000_of_00002.h5" ]; }

# ---- 1. SIGTERM while the step-2 write is in flight -------------------------------------
run="$work/term"
set -m
bash "$SRC/.ci/mpirun.sh" 2 "$BIN/ztrain" "${common[@]}" --run.dir="$run" --train.max_steps=100000 > "$run.log" 2>&1 &
pid=$!
set +m
wait_for "step +3/" "$run.log" || echo "FAIL: the run did not reach step 3"
check "the step-2 write is still in flight at step 3" bash -c "! grep -q 'step_00000002 written' '$run.log'"
kill -TERM "$pid"
for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "FAIL: SIGTERM did not end the job in 60 s"; kill -KILL -- "-$pid"; fi
wait "$pid"
rc=$?
latest=$(cat "$run/checkpoints/latest" 2>/dev/null)
check "SIGTERM during a background write: exit 0 (got $rc)" test "$rc" -eq 0
check "the in-flight step-2 checkpoint was published" grep -q "step_00000002 written in .* (in the background" "$run.log"
# The stop checkpoint is the run's last save: nothing to overlap, so it is written synchronously.
check "the stop checkpoint ($latest) was published after it" grep -qE "$latest written in [0-9.]+ s$" "$run.log"
check "the stop checkpoint is complete on disk" bash -c "$(declare -f complete); complete '$run/checkpoints/$latest'"
check "no partial directory is left" bash -c "! ls -d '$run'/checkpoints/*.partial 2>/dev/null"
saves=$(grep -c " written in " "$run.log")
check "one checkpoint record per save ($saves), async but the last, blocked_ms < write_ms, the last at $latest" \
  /usr/bin/python3 - "$run/metrics.jsonl" "$saves" "$((10#${latest#step_}))" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
recs = [r for r in recs if r.get("event") == "checkpoint"]
ok = len(recs) == int(sys.argv[2]) and all(r["async"] and r["bytes"] > 0 and 0 <= r["blocked_ms"] < r["write_ms"]
                                           for r in recs[:-1])
ok = ok and not recs[-1]["async"] and recs[-1]["bytes"] > 0
ok = ok and recs[0]["step"] == 2 and recs[0]["write_ms"] >= 3000 and recs[-1]["step"] == int(sys.argv[3])
if not ok: print(recs)
sys.exit(0 if ok else 1)
PY
step=$((10#${latest#step_}))
unset ZT_TEST_CHECKPOINT_DELAY_MS
expect 0 "resumed from .*$latest" bash "$SRC/.ci/mpirun.sh" 2 "$BIN/ztrain" "${common[@]}" --run.dir="$run" \
  --train.max_steps=$((step + 1))
export ZT_TEST_CHECKPOINT_DELAY_MS=3000

# ---- 2. kill -9 of one rank while the step-4 write is in flight ---------------------------
run="$work/kill"
timeout 120 mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" "${common[@]}" --run.dir="$run" \
  --train.max_steps=100000 > "$run.log" 2>&1 &
pid=$!
wait_for "step_00000002 written" "$run.log" || echo "FAIL: the step-2 checkpoint was not written"
wait_for "step +5/" "$run.log" || echo "FAIL: the run did not reach step 5"
victim=$(pgrep -f -- "--run.dir=$run" | while read -r p; do
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = ztrain ] && echo "$p"; done | tail -1)
check "the step-4 write is in flight when a rank is killed" bash -c "! grep -q 'step_00000004 written' '$run.log'"
kill -KILL "$victim"
wait "$pid"
rc=$?
check "the job ends with a failure after kill -9 (exit $rc)" test "$rc" -ne 0
check "latest still names the previous complete checkpoint" test "$(cat "$run/checkpoints/latest")" = step_00000002
check "no complete step_00000004 exists" bash -c "! ls '$run/checkpoints/step_00000004/meta.h5' 2>/dev/null"
unset ZT_TEST_CHECKPOINT_DELAY_MS
expect 0 "resumed from .*step_00000002" mpiexec --oversubscribe --bind-to none -np 2 "$BIN/ztrain" "${common[@]}" \
  --run.dir="$run" --train.max_steps=3

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all async checkpoint checks passed"
