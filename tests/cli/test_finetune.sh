#!/usr/bin/env bash
# Fine-tuning on example shards end to end (inputs/finetune_tiny.ini): prompts of random
# letters and a fixed completion, so only the completion can be learned; the masked
# validation loss (targets only) falls near 0, which a loss counting prompt tokens could
# not. metrics.jsonl has targets and rows per step; the start-up line counts examples and
# rows, and what data.overlong did; --plan has the example items; train.epochs sets the number of steps;
# a resume at the same world size continues the uninterrupted run's metrics exactly;
# pack and pad both train; and the bad inputs exit 2 with a message naming the key.
# Usage: test_finetune.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

make_prompt_examples 400 7 --val-fraction 0.1
# schedule_steps: the 50 + 50 resume below keeps the 100-step schedule.
deck=(--config "$SRC/inputs/finetune_tiny.ini" --data.train="$work/ex/train_*.bin" --data.val="$work/ex/val_*.bin"
  --train.threads=1 --train.schedule_steps=100)

# The mask: the validation loss over the completion's targets falls from ~5.6 to near 0.
expect 0 "examples: train: 352 examples \(1760 targets" "$BIN/ztrain" "${deck[@]}" --run.dir="$work/mask"
last_val=$(grep '"val_loss"' "$work/mask/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.e-]*\).*/\1/')
first_val=$(grep '"val_loss"' "$work/mask/metrics.jsonl" | head -1 | sed 's/.*"val_loss":\([0-9.e-]*\).*/\1/')
check "masked validation loss falls near 0 ($first_val -> $last_val)" \
  python3 -c "import sys; sys.exit(not (float('$first_val') > 4 and float('$last_val') < 0.2))"
check "metrics.jsonl has targets and rows per step" \
  grep -q '"targets":[0-9]*,"rows":8,' "$work/mask/metrics.jsonl"
# The start-up line counts examples and the rows they make, not windows; what data.overlong
# cut or left out is in it (seq_len 24: the longer prompts do not fit).
expect 0 "tokens, 352 train examples in [0-9]+ rows per epoch \(pack\), 48 val examples in [0-9]+ rows$" \
  "$BIN/ztrain" "${deck[@]}" --train.max_steps=1 --run.dir="$work/line"
expect 0 "train examples in [0-9]+ rows per epoch \(pad; [0-9]+ dropped by data.overlong\), [0-9]+ val examples in [0-9]+ rows \([0-9]+ dropped by data.overlong\)$" \
  "$BIN/ztrain" "${deck[@]}" --train.max_steps=1 --model.seq_len=24 --data.overlong=drop --data.packing=pad \
  --run.dir="$work/line_drop"
expect 0 "train examples in [0-9]+ rows per epoch \(pack; [0-9]+ truncated by data.overlong(; [0-9]+ left out without a target)?\)" \
  "$BIN/ztrain" "${deck[@]}" --train.max_steps=1 --model.seq_len=24 --run.dir="$work/line_cut"

# The memory plan counts the example feed's buffers (sized from the shards' headers).
"$BIN/ztrain" "${deck[@]}" --plan > "$work/plan.out" 2>&1 ||
  { echo "FAIL: --plan on example shards"; failures=$((failures + 1)); }
for item in examples "example rows" "row batch" "row segments"; do
  check "--plan on example shards has the '$item' item" grep -qE "^  $item +[0-9.]+ (B|KiB|MiB)" "$work/plan.out"
done

# A resume at the same world size: 100 steps = 50 + 50, every step record the same.
expect 0 "ztrain: 50 steps" "$BIN/ztrain" "${deck[@]}" --train.max_steps=50 --run.dir="$work/split"
expect 0 "resum" "$BIN/ztrain" "${deck[@]}" --run.dir="$work/split"
strip() { grep '"loss"' "$1" | sed 's/"tokens_per_s":[^,]*,//; s/"step_ms".*//'; }
check "the resumed run's step records equal the uninterrupted run's" \
  diff <(strip "$work/mask/metrics.jsonl") <(strip "$work/split/metrics.jsonl")

# train.epochs: 2 passes over 352 examples packed into rows, 8 rows per step: the start line
# says how many steps that is, and the run takes exactly them.
grep -v "^max_steps" "$SRC/inputs/finetune_tiny.ini" > "$work/epochs.ini"
"$BIN/ztrain" --config "$work/epochs.ini" --data.train="$work/ex/train_*.bin" --train.threads=1 --train.epochs=2 \
  --run.dir="$work/epochs" > "$work/epochs.out" 2>&1 || { echo "FAIL: train.epochs = 2"; failures=$((failures + 1)); }
ran=$(grep -o '"step":[0-9]*,"loss"' "$work/epochs/metrics.jsonl" | tail -1 | grep -o '[0-9]*')
check "train.epochs = 2 ran the ${ran:-0} steps its start line planned" \
  grep -q "train.epochs = 2: ${ran:-0} steps" "$work/epochs.out"
# The resolved deck of an epochs run reloads: its computed max_steps is a comment.
expect 0 "ztrain: rank|peak" "$BIN/ztrain" --config "$work/epochs/config.ini" --plan
# pad: one example per row, each micro-batch as long as its longest example.
expect 0 "rows of padded examples" "$BIN/ztrain" "${deck[@]}" --data.packing=pad --train.max_steps=5 \
  --run.dir="$work/pad"
# Every example has 5 targets (" OK!" and the end of text): 8 rows of one example, 40 targets.
check "pad: every step has 8 rows of one example each" \
  bash -c '! grep "\"loss\"" "$1" | grep -vq "\"targets\":40,\"rows\":8,"' _ "$work/pad/metrics.jsonl"

# 16-bit, recompute and ZeRO-3 on two ranks train packed examples too.
expect 0 "ztrain: 3 steps in" "$BIN/ztrun" 2 ztrain "${deck[@]}" --precision.dtype=bf16 --train.recompute=true \
  --parallel.zero_stage=3 --train.max_steps=3 --run.dir="$work/bf16"

# train.recompute = attention on packed rows (each block's probabilities rebuilt over the
# same segments): the losses of keeping every activation, bit for bit; the resolved deck says it.
for rc in attention false; do
  expect 0 "ztrain: 3 steps in" "$BIN/ztrun" 2 ztrain "${deck[@]}" --train.recompute=$rc --parallel.zero_stage=3 \
    --train.max_steps=3 --run.dir="$work/recompute_$rc"
done
check "recompute = attention: the losses of a run that keeps every activation" \
  bash -c '[ "$(grep -c "\"loss\"" "$1")" -ge 3 ] && diff <(grep -o "\"loss\":[^,]*" "$1") <(grep -o "\"loss\":[^,]*" "$2")' _ \
  "$work/recompute_attention/metrics.jsonl" "$work/recompute_false/metrics.jsonl"
check "recompute = attention in the resolved deck" grep -q "^recompute = attention$" \
  "$work/recompute_attention/config.ini"

# Bad inputs: exit 2, naming the key.
expect 2 "train.epochs = 2 and train.max_steps = 5 are both given" "$BIN/ztrain" "${deck[@]}" --train.epochs=2 \
  --train.max_steps=5 --run.dir="$work/bad1"
expect 2 "data.packing = .*squash.*expected one of pack \| pad" "$BIN/ztrain" "${deck[@]}" --data.packing=squash \
  --run.dir="$work/bad2"
expect 2 "data.train: example [0-9]+ has [0-9]+ tokens, more than seq_len \+ 1 = 9" "$BIN/ztrain" "${deck[@]}" \
  --data.overlong=error --model.seq_len=8 --run.dir="$work/bad3"
for i in $(seq 1 50); do echo "a pretraining document $i"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/pre" --doc-separator % > /dev/null
expect 2 "train.epochs = 1: only example shards" "$BIN/ztrain" --config "$work/epochs.ini" \
  --data.train="$work/pre/train_*.bin" --train.epochs=1 --train.threads=1 --run.dir="$work/bad4"
expect 2 "data.val = .*a pretraining shard, while data.train is an example shard" "$BIN/ztrain" \
  --config "$SRC/inputs/finetune_tiny.ini" --data.train="$work/ex/train_*.bin" --data.val="$work/pre/val_*.bin" \
  --train.threads=1 --run.dir="$work/bad5"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all fine-tuning checks passed"
