#!/usr/bin/env bash
# postproc/plot_metrics.py end to end: a tiny run's metrics.jsonl (train and val loss) becomes
# a PNG. Exit 77 (skipped) when python3 or matplotlib (Debian python3-matplotlib, installed
# by .ci/setup.sh) is missing.
# Usage: test_plot_metrics.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

if ! /usr/bin/python3 -c "import matplotlib" 2> /dev/null; then
  echo "skip: /usr/bin/python3 with matplotlib is missing (python3-matplotlib)"
  exit 77
fi

for i in $(seq 1 200); do echo "a line of text number $i for the plot"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
"$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" \
  --data.val="$work/data/val_*.bin" --run.dir="$work/run" --train.threads=1 --train.max_steps=6 \
  --train.eval_every=3 --train.sample_tokens=0 > "$work/train.log" 2>&1 || {
  echo "FAIL: training run"; tail -5 "$work/train.log"; exit 1; }
grep -q '"val_loss"' "$work/run/metrics.jsonl" || { echo "FAIL: no val_loss record to plot"; exit 1; }

# An fp32 run: tokens/s is drawn, the loss scale (always 1 outside fp16) is not.
expect 0 "wrote .*metrics\.png \(panels: loss, learning rate, gradient norm, tokens/s\)$" \
  /usr/bin/python3 "$SRC/postproc/plot_metrics.py" "$work/run/metrics.jsonl" -o "$work/metrics.png"
# A PNG: the 8-byte signature, an IHDR chunk of the figure's size (11 x 7 in at 100 dpi).
if [ "$(head -c 8 "$work/metrics.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] &&
   [ "$(head -c 24 "$work/metrics.png" | tail -c 8 | od -An -tu1 -j0 | awk '{print $3*256+$4, $7*256+$8}')" = "1100 700" ]; then
  echo "ok: metrics.png is a 1100x700 PNG ($(stat -c %s "$work/metrics.png") bytes)"
else
  echo "FAIL: $work/metrics.png is not the expected PNG"; failures=$((failures + 1))
fi
# An fp16 run adds the loss-scale panel (a third column: 1650 x 700).
"$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" --run.dir="$work/run16" \
  --train.threads=1 --train.max_steps=4 --train.eval_every=0 --train.sample_tokens=0 --precision.dtype=fp16 \
  > "$work/train16.log" 2>&1 || { echo "FAIL: fp16 training run"; tail -5 "$work/train16.log"; exit 1; }
expect 0 "panels: loss, learning rate, gradient norm, tokens/s, loss scale\)$" \
  /usr/bin/python3 "$SRC/postproc/plot_metrics.py" "$work/run16/metrics.jsonl" -o "$work/metrics16.png"
if [ "$(head -c 24 "$work/metrics16.png" | tail -c 8 | od -An -tu1 -j0 | awk '{print $3*256+$4, $7*256+$8}')" = "1650 700" ]; then
  echo "ok: the fp16 plot is 1650x700 (three columns)"
else
  echo "FAIL: $work/metrics16.png is not 1650x700"; failures=$((failures + 1))
fi
# Without -o the PNG goes next to the metrics.
expect 0 "wrote .*run/metrics\.png" /usr/bin/python3 "$SRC/postproc/plot_metrics.py" "$work/run/metrics.jsonl"
[ -s "$work/run/metrics.png" ] || { echo "FAIL: no run/metrics.png"; failures=$((failures + 1)); }
expect 1 "no step records|not JSON" /usr/bin/python3 "$SRC/postproc/plot_metrics.py" "$work/text.txt"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all plot_metrics checks passed"
