#!/usr/bin/env bash
# Stragglers (run.report_every): a rank slowed by the ZT_DEBUG_SLOW_UNITS test hook (it sleeps
# before every unit it acquires, as a rank with slower compute would) is named, with its host
# and phase, by a {"event":"stragglers"} record within 10 steps (np 2 DDP, np 4 ZeRO-3); every
# step record carries the slowest and fastest rank's compute time; a balanced run (np 2 and
# np 4, 20 steps) reports nothing (one retry: see below).
# Usage: test_stragglers.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$SRC/tests/cli/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE

/usr/bin/python3 "$SRC/bench/make_shard.py" "$work/train.bin" 20000 257 > /dev/null || { echo "FAIL: shard"; exit 1; }
# run NAME NP SLOW_SPEC STEPS REPORT_EVERY ARGS...
run() {
  local name=$1 np=$2 slow=$3 steps=$4 every=$5
  shift 5
  ZT_DEBUG_SLOW_UNITS=$slow timeout 300 mpiexec --oversubscribe --bind-to none -x ZT_DEBUG_SLOW_UNITS \
    -x OMP_WAIT_POLICY -np "$np" "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/train.bin" \
    --train.threads=1 --train.sample_tokens=0 --train.max_steps="$steps" --run.report_every="$every" --run.tensorboard=false \
    --run.dir="$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { echo "FAIL: run $name failed"; tail -5 "$work/$name.log"; failures=$((failures + 1)); }
}
# stragglers NAME: the straggler records as "step ranks hosts phase" lines.
stragglers() {
  /usr/bin/python3 - "$work/$1/metrics.jsonl" <<'PY'
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r.get("event") == "stragglers":
        print(r["step"], ",".join(map(str, r["ranks"])), ",".join(r["hosts"]), r["phase"])
PY
}

host=$(hostname)
run slow2 2 1:40 10 5
run slow4 4 2:40 10 5 --parallel.zero_stage=3
# Balanced: 20 steps, windows of 10 (on 2 shared cores a rank is often descheduled for tens
# of ms; the report asks for a rank slow in 3/4 of a window's steps).
run even2 2 -1:0 20 10
run even4 4 -1:0 20 10 --parallel.zero_stage=1
for name in slow2 slow4; do
  want=1
  [ "$name" = slow4 ] && want=2
  first=$(stragglers "$name" | head -1)
  echo "$name: first report: ${first:-none}"
  read -r step ranks hosts phase <<<"$first"
  check "$name: rank $want named first (ranks ${ranks:-none}) by step 10 (${step:-none}) on $host (${hosts:-none})" \
    test "${ranks%%,*}" = "$want" -a "${step:-99}" -le 10 -a "${hosts%%,*}" = "$host"
  check "$name: the phase is forward or backward (${phase:-none})" \
    test "${phase:-}" = forward -o "${phase:-}" = backward
  check "$name: the console names it" grep -q "stragglers over steps .*rank $want ($host)" "$work/$name.log"
done
# A shared VM's steal time can hold one rank back through most of a window (seen once in CI,
# at np 2): a balanced run that reports a straggler runs once more, and the second must be
# clean. A report that comes from ztrain rather than the machine shows up both times.
for name in even2 even4; do
  if [ -n "$(stragglers "$name")" ]; then
    echo "note: $name reported a straggler ($(stragglers "$name" | head -1)) on a balanced run; running it once more"
    rm -rf "${work:?}/$name"
    if [ "$name" = even2 ]; then run even2 2 -1:0 20 10; else run even4 4 -1:0 20 10 --parallel.zero_stage=1; fi
  fi
  check "$name: a balanced run reports no straggler ($(stragglers "$name" | head -1))" test -z "$(stragglers "$name")"
done
check "every step record has compute_ms {slowest, slowest_rank, fastest, fastest_rank}; the slow rank is the slowest" \
  /usr/bin/python3 - "$work/slow2/metrics.jsonl" <<'PY'
import json, sys
recs = [r for r in map(json.loads, open(sys.argv[1])) if "loss" in r]
assert len(recs) == 10, len(recs)
for r in recs:
    c = r["compute_ms"]
    assert c["slowest"] >= c["fastest"] >= 0, c
assert all(r["compute_ms"]["slowest_rank"] == 1 for r in recs[1:]), [r["compute_ms"] for r in recs]
PY

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all straggler checks passed"
