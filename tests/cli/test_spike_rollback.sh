#!/usr/bin/env bash
# Loss spikes (train.spike = rollback). ZT_DEBUG_SPIKE=20:2 makes the loss of global batches
# 20 and 21 explode (x1000), as a poisoned span of data would. With snapshots every 5 steps
# and patience 2 the run confirms the spike at step 21, rolls back in the process to the
# snapshot of step 15, skips batches 20 and 21, and goes on:
#  - metrics.jsonl records {"event":"rollback","step":21,"to_step":15,"skipped_batches":[20,21]}
#    and holds each step once (the rolled-back steps' records superseded);
#  - its final validation loss is within 2% of a run on the same data without the span;
#  - the checkpoint of step 17, written again after the rollback, records the skip: a resume
#    from it skips the same batches and reproduces the run's last losses exactly.
# ZT_DEBUG_SPIKE=10 (every batch from 10 explodes) ends the run after
# train.spike_max_rollbacks = 2 rollbacks with exit status 4.
# Usage: test_spike_rollback.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
. "$SRC/tests/cli/cli_lib.sh"
export OMP_WAIT_POLICY=PASSIVE
make_corpus

# run NAME SPIKE ARGS...: a 30-step np 2 run; exit status in $rc.
run() {
  local name=$1 spike=$2
  shift 2
  ZT_DEBUG_SPIKE=$spike timeout 300 mpiexec --oversubscribe --bind-to none -x ZT_DEBUG_SPIKE -x OMP_WAIT_POLICY \
    -np 2 "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" \
    --data.val="$work/data/val_*.bin" --train.threads=1 --train.sample_tokens=0 --train.max_steps=30 \
    --run.tensorboard=false --train.spike=rollback --train.spike_snapshot_every=5 --train.spike_patience=2 \
    --run.dir="$work/$name" "$@" > "$work/$name.log" 2>&1
  rc=$?
}

run clean 0
check "clean run (exit $rc)" test "$rc" -eq 0
run spiked 20:2 --checkpoint.every=17 --checkpoint.async=false
check "spiked run (exit $rc)" test "$rc" -eq 0
grep "loss spike" "$work/spiked.log"
check "the rollback record, each step once, the final val loss within 2% of the clean run's" \
  /usr/bin/python3 - "$work/spiked/metrics.jsonl" "$work/clean/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
rb = [r for r in recs if r.get("event") == "rollback"]
assert len(rb) == 1, rb
assert (rb[0]["step"], rb[0]["to_step"], rb[0]["skipped_batches"]) == (21, 15, [20, 21]), rb[0]
steps = [r["step"] for r in recs if "loss" in r]
assert steps == list(range(1, 31)), steps
assert max(r["loss"] for r in recs if "loss" in r) < 20, "a spiked loss survived in the records"
val = [r["val_loss"] for r in recs if "val_loss" in r][-1]
clean = [json.loads(l)["val_loss"] for l in open(sys.argv[2]) if "val_loss" in l][-1]
print(f"val loss {val:.4f} after the rollback, {clean:.4f} clean: {100 * abs(val - clean) / clean:.2f}% apart")
assert abs(val - clean) <= 0.02 * clean
PY
ckpt="$work/spiked/checkpoints/step_00000017"
check "the checkpoint of step 17 records the skipped samples" grep -q skipped_samples "$ckpt/meta.h5"
run resumed 0 --checkpoint.resume="$ckpt"
check "resumed from step 17 (exit $rc)" test "$rc" -eq 0
check "the resume skips the same batches: steps 18-30 equal the spiked run's" \
  /usr/bin/python3 - "$work/spiked/metrics.jsonl" "$work/resumed/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r["step"] > 17}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert a == b and len(a) == 13, (a, b)
PY

run diverging 10 --train.spike_max_rollbacks=2
check "a run that keeps spiking exits 4 (got $rc)" test "$rc" -eq 4
check "its message names the limit" grep -q "after train.spike_max_rollbacks = 2 rollback(s)" "$work/diverging.log"
check "it rolled back twice first" test "$(grep -c '"event":"rollback"' "$work/diverging/metrics.jsonl")" -eq 2

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all spike rollback tests passed"
