#!/usr/bin/env bash
# Silent data corruption (parallel.check_every): ZT_DEBUG_FLIP=1:7 flips one bit of rank 1's
# master copy between steps 6 and 7, after the checksum taken at the check of step 6.
#  - Unreplicated shards (ZeRO-1/2/3, one shard group, check_every = 2): the checksum at rest
#    is verified before step 7 reads the state.
#  - Replicas (DDP, and hybrid ZeRO-3 with two groups of two; check_every = 4, so the
#    checksum of step 4 was verified long before): the replicas' comparison at step 8.
# Each run exits 3 with a message naming the ranks, hosts, units and step; no checkpoint of
# the suspect step is written (checkpoint.every = 4: step 8 is a save step), and a resume
# from the last checkpoint runs to the end. A normal run checked every step raises no false
# alarm (fp32 and bf16) and prints what the checks cost. (The long no-false-alarm run is the
# soak bench, bench/soak.sh with CHECK_EVERY, outside CI.)
# Usage: test_replica_check.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$SRC/tests/cli/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE

/usr/bin/python3 "$SRC/bench/make_shard.py" "$work/train.bin" 20000 257 > /dev/null || { echo "FAIL: shard"; exit 1; }
host=$(hostname)
# run NAME NP FLIP ARGS...: a 12-step run; its exit status in $rc, its output in $work/NAME.log.
run() {
  local name=$1 np=$2 flip=$3
  shift 3
  ZT_DEBUG_FLIP=$flip timeout 120 mpiexec --oversubscribe --bind-to none -x ZT_DEBUG_FLIP -x OMP_WAIT_POLICY \
    -np "$np" "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/train.bin" --train.threads=1 \
    --train.sample_tokens=0 --train.max_steps=12 --run.tensorboard=false --checkpoint.every=4 \
    --checkpoint.async=false --run.dir="$work/$name" "$@" > "$work/$name.log" 2>&1
  rc=$?
}
# caught NAME NP REGEX ARGS...: the flipped run exits 3 with a message matching REGEX, writes no
# checkpoint past step 4, and a resume without the flip finishes.
caught() {
  local name=$1 np=$2 regex=$3
  shift 3
  run "$name" "$np" 1:7 "$@"
  check "$name: exit 3 (got $rc)" test "$rc" -eq 3
  if grep -qE "$regex" "$work/$name.log"; then
    echo "ok: $name: $(grep -oE "silent data corruption suspected.*" "$work/$name.log" | head -1 | cut -c1-240)"
  else
    echo "FAIL: $name: no message matching /$regex/"; tail -5 "$work/$name.log"; failures=$((failures + 1))
  fi
  check "$name: the last checkpoint is step 4's (none from the suspect state)" \
    test "$(cat "$work/$name/checkpoints/latest" 2>/dev/null)" = step_00000004
  run "$name" "$np" -1:0 "$@"
  check "$name: a resume from the last checkpoint finishes (exit $rc)" test "$rc" -eq 0
}

for stage in 1 2 3; do
  caught "zero$stage" 2 "step 7: .*rank 1 \($host\): its master / AdamW state of unit .* changed at rest between the checksum after step 6 and step 7" \
    --parallel.zero_stage=$stage --parallel.check_every=2
done
caught ddp 3 "step 8: .*identical state disagree \(master of unit 0\): rank 1 \($host\) differ" \
  --parallel.zero_stage=0 --parallel.check_every=4
caught hybrid 4 "step 8: .*identical state disagree \(master of unit [0-9]+\): rank 1 \($host\), rank 3 \($host\) \(two copies" \
  --parallel.zero_stage=3 --parallel.shard_group=2 --parallel.check_every=4

for dtype in fp32 bf16; do
  run "clean_$dtype" 2 -1:0 --parallel.zero_stage=1 --parallel.check_every=1 --precision.dtype=$dtype
  check "clean_$dtype: checked every step, no false alarm (exit $rc)" test "$rc" -eq 0
  check "clean_$dtype: the cost is printed: $(grep -o 'state check(s).*' "$work/clean_$dtype.log")" \
    grep -qE "12 state check\(s\) \(parallel.check_every = 1\), [0-9.]+ ms each .*% of the step time" \
    "$work/clean_$dtype.log"
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all replica check tests passed"
