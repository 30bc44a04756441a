#!/usr/bin/env bash
# The memory plan (issue 15): runs that cannot fit are refused with exit 2 within seconds,
# before anything is allocated or written, with the figures; `--plan` prints the plan and
# exits 0 without creating run.dir; under mpiexec the per-node figure uses the real ranks
# per node (MPI_Comm_split_type); run.memory_check = warn lets a run go on.
# Usage: test_memory_plan.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

for i in $(seq 1 200); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
run=("$BIN/ztrain" --config "$SRC/inputs/tiny.ini" --data.train="$work/data/train_*.bin" --train.threads=1)

# Runs that cannot fit: exit 2 fast (no OOM kill, no internal error), the predicted and
# available figures and the largest item in the message, nothing written.
for shape in "--train.micro_batch=1000000" "--train.micro_batch=1000000000" "--model.n_layer=1000000"; do
  start=$SECONDS
  expect 2 "predicted peak memory [0-9.]+ [KMGTP]iB .* exceeds the [0-9.]+ [KMGTP]iB available .*the largest item is [a-z]+ .*To fit: " \
    "${run[@]}" --run.dir="$work/refused" $shape
  took=$((SECONDS - start))
  check "$shape refused in ${took}s (under 10 s)" test "$took" -lt 10
  check "$shape left no run directory" test ! -e "$work/refused"
done

# --plan: the table, exit 0, nothing created.
out=$("${run[@]}" --run.dir="$work/planned" --plan 2>&1)
rc=$?
check "--plan exits 0 ($rc)" test "$rc" -eq 0
for item in params grads master optimizer scratch activations tokens "host staging" baseline "peak per rank" \
            "peak per node" available "tokens per step 128, training FLOPs per step"; do
  check "--plan shows '$item'" grep -q "$item" <<<"$out"
done
check "--plan created no run directory" test ! -e "$work/planned"
out=$("${run[@]}" --plan --plan-world-size=4 --parallel.zero_stage=3 2>&1)
check "--plan-world-size=4 plans 4 ranks on this node" grep -q "4 rank(s), 4 per node" <<<"$out"
check "--plan-world-size=4 at stage 3 shards the parameters (4P/N)" grep -qE "params .* 4P/N" <<<"$out"
expect 2 "plan-world-size = 0: expected an integer >= 1" "${run[@]}" --plan --plan-world-size=0

# --plan's verdict (issue 35): "fits", or how much is over on each node and the cheapest
# changes that fit, each with its predicted peak; exit 0 either way. The header says what
# the planned stage shards (DDP: nothing).
expect 0 "^verdict: fits \(peak per node" "${run[@]}" --plan
# (The LM head holds a chunk of rows' logits: a million rows of 32 tokens is what no longer fits.)
out=$("${run[@]}" --plan --train.micro_batch=1000000 2>&1)
rc=$?
check "--plan of a run that does not fit exits 0 ($rc)" test "$rc" -eq 0
check "... with 'does not fit: X over on each node'" \
  grep -qE "^verdict: does not fit: [0-9.]+ [KMGT]iB over on each node" <<<"$out"
check "... and the cheapest changes with their predicted peaks" \
  grep -qE "^  --[a-z_.]+=[^ ]+( --[a-z_.]+=[^ ]+)* +[0-9.]+ [KMGT]iB$" <<<"$out"
split=$(grep -oE "^  --train.micro_batch=[0-9]+ --train.grad_accum=[0-9]+ " <<<"$out" | head -1)
mb=$(sed -E 's/.*micro_batch=([0-9]+).*/\1/' <<<"$split")
ga=$(sed -E 's/.*grad_accum=([0-9]+).*/\1/' <<<"$split")
check "... micro_batch with the grad_accum that keeps the batch ($split)" \
  test -n "$split" -a "$((${mb:-0} * ${ga:-0}))" -eq 1000000
out=$("$BIN/ztrain" --config "$SRC/inputs/gpt2_124m.ini" --plan --plan-world-size=64 2>&1)
check "gpt2_124m on 64 ranks of one node: nothing fits, said so" \
  grep -qE "^  none, not even all of them together \(--parallel.zero_stage=3 .*\): more nodes" <<<"$out"
check "a DDP plan's header says nothing is sharded" grep -q "64 per node, DDP: nothing sharded" <<<"$out"
check "... and never 'state sharded over'" bash -c '! grep -q "state sharded over" <<<"$1"' _ "$out"
out=$("${run[@]}" --plan --plan-world-size=4 --parallel.zero_stage=2 2>&1)
check "a ZeRO-2 plan's header names what it shards" \
  grep -q "ZeRO-2: optimizer state and gradients sharded over 4 rank(s)" <<<"$out"
if command -v mpiexec > /dev/null; then
  out=$(timeout 60 mpiexec --oversubscribe --bind-to none -np 2 "${run[@]}" --plan 2>&1)
  check "--plan under mpiexec -np 2: 2 ranks, 2 per node (MPI_Comm_split_type), printed once" \
    test "$(grep -c "2 rank(s), 2 per node" <<<"$out")" -eq 1
fi

# run.memory_check: warn and off are accepted (an oversized run under them would really
# allocate, so only a fitting one runs here), anything else is refused.
out=$("${run[@]}" --run.dir="$work/fits" --train.max_steps=2 --run.memory_check=warn 2>&1)
check "a fitting run under memory_check = warn trains and prints no memory warning" \
  bash -c 'grep -qE "step +2/2" <<<"$1" && ! grep -q "warning" <<<"$1"' _ "$out"
expect 2 "run.memory_check = 'maybe'.*strict \| warn \| off" "${run[@]}" --run.memory_check=maybe

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all memory plan checks passed"
