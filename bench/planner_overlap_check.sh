#!/usr/bin/env bash
# The planner on a cpu node (issue 53): predictions before (BEFORE=path of a ztrain built at the
# commit before the change) and after (build/bin/ztrain) against measured steps, on a shape
# bench/planner_bench.sh did not use. Needs bench/work/planner/calibrated.ini (planner_bench).
set -u
cd /work/main
source /work/mpi.env
W=${WORK:-bench/work/planner_overlap}; mkdir -p "$W"
BEFORE=${BEFORE:?the ztrain built before the change}
BIN=build/bin
[ -d $W/data ] || cp -r bench/work/planner/data $W/data 2>/dev/null || {
  for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog, and then it rests"; echo "%"; done > $W/text.txt
  $BIN/zt-prepare --input $W/text.txt --output $W/data --doc-separator % > /dev/null; }
CL=bench/work/planner/calibrated.ini
shape="--model.n_layer=6 --model.n_embd=512 --model.n_head=8 --model.seq_len=256 --train.micro_batch=2 --train.grad_accum=4"
: > $W/rows.tsv
for np in 2 4; do
for entry in "ddp|--parallel.zero_stage=0" "z1|--parallel.zero_stage=1" "z2|--parallel.zero_stage=2" "z3|--parallel.zero_stage=3" "z2_hybrid2|--parallel.zero_stage=2 --parallel.shard_group=2" "t2|--parallel.tensor=2" "p2|--parallel.pipeline=2"; do
  name=${entry%%|*}; flags=${entry#*|}
  dir=$W/run_np${np}_$name; rm -rf $dir
  common=(--config inputs/tiny.ini $shape $flags --data.train="$W/data/train_*.bin" --train.max_steps=5 --train.sample_tokens=0 --checkpoint.every=0 --run.dir=$dir)
  before=$("$BEFORE" "${common[@]}" --plan --cluster $CL --cluster.ranks_per_node=$np 2>&1 | grep -oE "^predicted step: [0-9.]+" | grep -oE "[0-9.]+$")
  after=$($BIN/ztrain "${common[@]}" --plan --cluster $CL --cluster.ranks_per_node=$np 2>&1 | grep -oE "^predicted step: [0-9.]+" | grep -oE "[0-9.]+$")
  timeout 300 bash .ci/mpirun.sh $np $BIN/ztrain "${common[@]}" > $dir.log 2>&1 || { echo "fail $name $np"; continue; }
  meas=$(python3 -c "
import json,statistics
s=[json.loads(l) for l in open('$dir/metrics.jsonl') if '\"step_ms\"' in l and '\"event\"' not in l]
print(statistics.median(x['step_ms'] for x in s[2:]))")
  rm -rf $dir/checkpoints
  echo -e "$np\t$name\t$before\t$after\t$meas" | tee -a $W/rows.tsv
done; done
