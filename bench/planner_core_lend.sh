#!/usr/bin/env bash
# How much of the node a waiting pipeline rank keeps (the planner's shared-core clock lends it
# all): each rank's user and system CPU seconds (/usr/bin/time) for P = 4 against DDP, 4 ranks
# on the node, planner_bench.sh's gpt2w shape. On a 2-core node the cores are saturated either
# way; a waiting rank's time is its polling (Open MPI's mpi_yield_when_idle), or its sleeps
# between tests where ztrain sees the node oversubscribed (comm/point_to_point.hpp).
#   bash bench/planner_core_lend.sh [BIN_DIR ...]   (repository root; default build/bin; REPS=1)
# Several BIN_DIRs (builds to compare) alternate within each of REPS repetitions; each needs
# ztrain (zt-prepare: build/bin's).
set -euo pipefail
cd "$(dirname "$0")/.."
BINS=("$@"); [ ${#BINS[@]} -gt 0 ] || BINS=(build/bin)
REPS=${REPS:-1}
W=bench/work/core_lend; rm -rf "$W"; mkdir -p "$W"
for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog, and then it rests"; echo "%"; done \
  > "$W/text.txt"
build/bin/zt-prepare --input "$W/text.txt" --output "$W/data" --doc-separator % > /dev/null
for rep in $(seq 1 "$REPS"); do
for mesh in "p4|--parallel.pipeline=4 --parallel.schedule=1f1b" "ddp|--parallel.zero_stage=0"; do
for b in "${!BINS[@]}"; do
  bin=${BINS[$b]}
  name=${mesh%%|*}.b$b.r$rep; flags=${mesh#*|}
  # shellcheck disable=SC2086
  bash .ci/mpirun.sh 4 bash -c '/usr/bin/time -o "$0.$OMPI_COMM_WORLD_RANK" -f "%U %S %e" "$@"' "$W/$name.time" \
    "$bin/ztrain" --config inputs/tiny.ini \
    --model.n_layer=4 --model.n_embd=768 --model.n_head=12 --model.seq_len=128 --train.micro_batch=4 --train.grad_accum=4 \
    $flags --data.train="$W/data/train_*.bin" --train.max_steps=6 --train.sample_tokens=0 --checkpoint.every=0 \
    --run.dir=$W/run_$name > $W/$name.log 2>&1 || { tail -3 $W/$name.log; exit 1; }
  echo "== $name ($bin; user s, sys s, elapsed s per rank)"; for r in 0 1 2 3; do echo "rank $r: $(cat $W/$name.time.$r)"; done
  grep -o '"step_ms":[0-9.]*' $W/run_$name/metrics.jsonl | tail -4 | tr '\n' ' '; echo
done
done
done
