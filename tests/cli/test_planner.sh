#!/usr/bin/env bash
# The planner (issue 53): --plan ends its time table with "predicted step: N ms"; --plan
# --search ranks the meshes of the deck's global batch with the contract's columns (--all:
# every one; --write DECK: the fastest as a deck --plan reads back); --cluster FILE plans for
# nodes x ranks_per_node of the file's machines; bad cluster files and conflicting options
# exit 2 naming the file and key; --calibrate writes a cluster file --plan reads.
# Usage: test_planner.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

# --plan needs no data: a shard name is enough.
plan=("$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/none_*.bin" --train.threads=1 --plan)

out=$("${plan[@]}" 2>&1)
check "--plan exits 0 ($?)" test -n "$out"
check "--plan keeps the memory table and verdict" grep -q "^verdict: " <<<"$out"
check "--plan's time table has the products phase" grep -qE "^  products +[0-9.]+ +[0-9.]+ " <<<"$out"
check "--plan ends with 'predicted step: N ms'" grep -qE "^predicted step: [0-9]+(\.[0-9])? ms$" <<<"$(tail -1 <<<"$out")"
out=$("${plan[@]}" --plan-world-size=2 --parallel.zero_stage=3 2>&1)
check "ZeRO-3 on 2 ranks gathers parameters" grep -qE "^  param all-gather " <<<"$out"

# The search: contract columns, ten rows, every candidate with --all, the fastest written.
start=$SECONDS
out=$("${plan[@]}" --search --plan-world-size=4 2>&1)
check "--search took under 30 s ($((SECONDS - start)) s)" test $((SECONDS - start)) -lt 30
check "--search prints the contract's columns" \
  grep -qE "^rank +predicted_step_ms +tokens_per_s +mfu +peak_gib +bottleneck +mesh" <<<"$out"
check "--search prints the ten fastest" test "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9]+ ' <<<"$out")" -eq 10
all=$("${plan[@]}" --search --all --plan-world-size=4 2>&1)
check "--search --all prints more than ten" test "$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9]+ ' <<<"$all")" -gt 10
"${plan[@]}" --search --plan-world-size=4 --write "$work/best.ini" > "$work/search.out" 2>&1
check "--write wrote the fastest as a deck" grep -q "^\[parallel\]" "$work/best.ini"
expect 0 "^predicted step: " "$BIN/ztrain" --config "$work/best.ini" --plan --plan-world-size=4
check "--plan --search wrote nothing else (no run directory)" test ! -e run

# Clusters: the shipped files; nodes x ranks_per_node is the world.
expect 0 "time plan per step \(16 rank\(s\) = 2 node\(s\) x 8, gpu" "$BIN/ztrain" --config "$SRC/inputs/gpt2_124m.ini" \
  --data.train="$work/none_*.bin" --plan --cluster "$SRC/inputs/clusters/h100_node.ini" --cluster.nodes=2
expect 0 "^predicted step: " "$BIN/ztrain" --config "$SRC/inputs/gpt2_124m.ini" --data.train="$work/none_*.bin" \
  --plan --cluster "$SRC/inputs/clusters/a100_node.ini"
# The verdict's changes are sized on the cluster (a GPU's memory), not this node.
expect 0 "^  --train.micro_batch=32 --train.grad_accum=64 " "$BIN/ztrain" --config "$SRC/inputs/gpt2_124m.ini" \
  --data.train="$work/none_*.bin" --plan --cluster "$SRC/inputs/clusters/h100_node.ini" --train.micro_batch=256
# A 1.3B bf16 model with fp32 gradients on a 24 GiB GPU: 2 bytes a parameter over, and
# storing the gradients in bf16 is the one change that fits.
out=$("$BIN/ztrain" --model.n_layer=24 --model.n_head=16 --model.n_embd=2048 --model.seq_len=1024 \
  --model.vocab_size=50257 --model.vocab_pad_to=128 --data.train="$work/none_*.bin" --train.micro_batch=1 \
  --train.recompute=true --precision.dtype=bf16 --precision.grad_dtype=fp32 --plan \
  --cluster "$SRC/inputs/clusters/h100_node.ini" --cluster.ranks_per_node=1 --cluster.memory_gib=24 2>&1)
check "fp32 gradients over by a little: --precision.grad_dtype=bf16 is the change that fits" \
  grep -qE "^  --precision.grad_dtype=bf16 +[0-9.]+ GiB$" <<<"$out"
printf '[cluster]\nnodes = 2\nintra_gbps = -3\n' > "$work/bad.ini"
expect 2 "bad.ini:3: cluster.intra_gbps = -3: expected a number > 0" "${plan[@]}" --cluster "$work/bad.ini"
printf '[cluster]\nnodes = 2\n[train]\nlr = 1\n' > "$work/bad.ini"
expect 2 "bad.ini:4: key 'train.lr' is not a \[cluster\] key" "${plan[@]}" --cluster "$work/bad.ini"
expect 2 "--plan-world-size and --cluster are both given" "${plan[@]}" --cluster "$SRC/inputs/clusters/h100_node.ini" \
  --plan-world-size=4
expect 2 "--search needs --plan" "$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train=x.bin --search

# Calibration (one rank: products and bandwidth; seconds) writes a file --plan reads.
expect 0 "^\[cluster\]" "$BIN/ztrain" --calibrate --cluster-out "$work/measured.ini"
expect 0 "^predicted step: " "${plan[@]}" --cluster "$work/measured.ini"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all planner checks passed"
