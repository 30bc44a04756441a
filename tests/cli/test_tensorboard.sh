#!/usr/bin/env bash
# TensorBoard event files (run.tensorboard): a run and its resumption each write a file in
# run.dir/tb, read back by an independent reader (read_tfevents.py: both CRC-32C of every
# record, the Event protobuf) whose every scalar equals metrics.jsonl's; a cut last record is
# dropped as TensorBoard does; run.tensorboard=false writes none.
# Usage: test_tensorboard.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
reader="$(dirname "$0")/read_tfevents.py"

for i in $(seq 1 200); do echo "a line of text number $i for the event files"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
run() {  # run NP STEPS [overrides...]
  local np=$1 steps=$2
  shift 2
  mpiexec --oversubscribe -np "$np" "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" \
    --data.train="$work/data/train_*.bin" --data.val="$work/data/val_*.bin" --run.dir="$work/run" \
    --train.threads=1 --train.max_steps="$steps" --train.eval_every=3 --train.sample_tokens=0 \
    --checkpoint.every=3 "$@" >> "$work/train.log" 2>&1
}
run 2 6 || { echo "FAIL: first run"; tail -5 "$work/train.log"; exit 1; }
[ "$(ls "$work/run/tb" | wc -l)" -eq 1 ] || { echo "FAIL: expected one event file"; ls "$work/run/tb"; exit 1; }
sleep 1  # a second file name of its own (the resumed run's time)
run 2 10 || { echo "FAIL: resumed run"; tail -5 "$work/train.log"; exit 1; }
check "two event files after the resume" [ "$(ls "$work/run/tb" | grep -c '^events\.out\.tfevents\.[0-9]*\.')" -eq 2 ]
expect 0 "[0-9]{3,} scalars .* equal metrics.jsonl.s" /usr/bin/python3 "$reader" check "$work/run"
expect 0 "session start at step 7" /usr/bin/python3 "$reader" check "$work/run"
expect 0 "train/loss=.*train/lr=" /usr/bin/python3 "$reader" dump "$(ls "$work"/run/tb/events.* | head -1)"
expect 0 "^6 scalars val/loss=" /usr/bin/python3 "$reader" dump "$(ls "$work"/run/tb/events.* | head -1)"

# A killed writer's cut last record: dropped with a note, the rest still read.
last=$(ls "$work"/run/tb/events.* | tail -1)
cp "$last" "$work/cut"
truncate -s -7 "$work/cut"
expect 0 "a cut last record" /usr/bin/python3 "$reader" dump "$work/cut"
# Damage inside a file is an error.
cp "$last" "$work/bad"
printf '\xff' | dd of="$work/bad" bs=1 seek=40 conv=notrunc status=none
expect 1 "CRC differs" /usr/bin/python3 "$reader" dump "$work/bad"

rm -rf "$work/run"
run 1 2 --run.tensorboard=false || { echo "FAIL: run with run.tensorboard=false"; exit 1; }
check "run.tensorboard=false writes no tb directory" [ ! -e "$work/run/tb" ]

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all TensorBoard checks passed"
