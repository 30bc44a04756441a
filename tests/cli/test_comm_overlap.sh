#!/usr/bin/env bash
# The communication thread makes progress while a rank computes: np 2, ZeRO-3 (a gather and a
# reduce-scatter per unit), rank 0 made slow by the ZT_DEBUG_SLOW_UNITS test hook (it sleeps
# before every unit it acquires, as slower compute would). Rank 1 starts each collective
# early; with parallel.comm_thread = true, rank 0's engine runs it during rank 0's sleep, so
# most collectives had finished when rank 0 waited for them (the engine's own record,
# metrics.jsonl comm_overlap.finished_before_wait). With the thread off nothing moves while
# rank 0 sleeps: none had finished. (Rank 0's wait is short either way, rank 1 being there
# first: the waits per rank are printed, not checked.)
# Usage: test_comm_overlap.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$SRC/tests/cli/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE

/usr/bin/python3 "$SRC/bench/make_shard.py" "$work/train.bin" 20000 257 > /dev/null || { echo "FAIL: shard"; exit 1; }
for thread in true false; do
  ZT_DEBUG_SLOW_UNITS=0:30 timeout 300 mpiexec --oversubscribe --bind-to none -x ZT_DEBUG_SLOW_UNITS -x OMP_WAIT_POLICY \
    -np 2 "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/train.bin" --train.threads=1 \
    --train.sample_tokens=0 --train.max_steps=4 --parallel.zero_stage=3 --parallel.comm_thread=$thread \
    --run.dir="$work/run_$thread" > "$work/run_$thread.log" 2>&1 ||
    { echo "FAIL: comm_thread=$thread run failed"; tail -5 "$work/run_$thread.log"; failures=$((failures + 1)); }
done

# Steps 2.. (the first warms up); sums over them.
summary() {
  /usr/bin/python3 - "$1" <<'EOF'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "comm_overlap" in r][1:]
o = [r["comm_overlap"] for r in recs]
waited = sum(x["waited"] for x in o)
done = sum(x["finished_before_wait"] for x in o)
w0 = sum(x["wait_ms_by_rank"][0] for x in o)
w1 = sum(x["wait_ms_by_rank"][1] for x in o)
print(waited, done, round(w0), round(w1))
EOF
}
if [ -s "$work/run_true/metrics.jsonl" ] && [ -s "$work/run_false/metrics.jsonl" ]; then
  read -r waited done w0 w1 <<<"$(summary "$work/run_true/metrics.jsonl")"
  echo "comm_thread=true:  rank 0 (slow) waited for $waited collectives, $done finished before the wait; waits: rank 0 ${w0} ms, rank 1 ${w1} ms"
  # Not all: the first gather of a micro-step is waited for right after it starts.
  check "with the thread, at least 2/3 of the slow rank's collectives finished before it waited ($done of $waited)" \
    test $((3 * done)) -ge $((2 * waited))
  read -r waited done w0 w1 <<<"$(summary "$work/run_false/metrics.jsonl")"
  echo "comm_thread=false: rank 0 (slow) waited for $waited collectives, $done finished before the wait; waits: rank 0 ${w0} ms, rank 1 ${w1} ms"
  check "without the thread none finished before the wait ($done of $waited)" test "$done" -eq 0
  check "the runs waited for started collectives at all ($waited)" test "$waited" -gt 0
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all comm overlap checks passed"
