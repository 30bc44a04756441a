#!/usr/bin/env bash
# Accuracy of the time plan (issue 53): `ztrain --plan`'s predicted step against the measured
# step (median step_ms of metrics.jsonl after the first steps) over a matrix of meshes at
# np 2 and 4, two shapes (a GPT-2 124M-like width and a Llama one, shrunk in depth and
# length to run in seconds here):
#   DDP, ZeRO-1/2/3, hybrid groups, T = 2/4 with and without SP, P = 2/4 with each schedule.
# Reports every run's prediction and measurement, the median absolute error, Spearman's rank
# correlation and whether the predicted best mesh (by tokens/s) is within 10% of the measured
# best (bench/planner_report.py).
#
#   bash bench/planner_bench.sh [--quick] [--only REGEX] [--cluster FILE] [--measured RESULTS.md]
#                               [--out FILE]   (repository root)
#
# --quick: np 2 only, one shape (a try on a loaded machine). --cluster: the calibrated file
# (default: calibrate now, mpirun -np 2 ztrain --calibrate). --only: the runs whose name
# (SHAPE_npN_MESH, e.g. gpt2w_np4_p4_1f1b) matches the extended regex. --measured: run nothing, take each
# mesh's measured step from an earlier results file's table (the plans are this build's: a
# change to the time model against the same measurements). --out: the table as markdown.
# Needs build/bin/ztrain and zt-prepare, python3 and mpiexec.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
OUT=""
CLUSTER=""
MEASURED=""
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --cluster) CLUSTER=$2; shift ;;
    --measured) MEASURED=$2; shift ;;
    --only) ONLY=$2; shift ;;
    *) echo "usage: bash bench/planner_bench.sh [--quick] [--only REGEX] [--cluster FILE] [--measured RESULTS.md]" \
         "[--out FILE]" >&2
       exit 2 ;;
  esac
  shift
done
BIN=build/bin
WORK=bench/work/planner
rm -rf "$WORK" && mkdir -p "$WORK"
for i in $(seq 1 3000); do echo "the quick brown fox $i jumps over the lazy dog, and then it rests"; echo "%"; done \
  > "$WORK/text.txt"
"$BIN/zt-prepare" --input "$WORK/text.txt" --output "$WORK/data" --doc-separator % > /dev/null
if [ -n "$MEASURED" ] && [ -z "$CLUSTER" ]; then
  echo "planner_bench.sh: --measured needs --cluster (the file the measured runs were planned with)" >&2; exit 2
fi
if [ -z "$CLUSTER" ]; then
  CLUSTER="$WORK/calibrated.ini"
  bash .ci/mpirun.sh 2 "$BIN/ztrain" --calibrate --cluster-out "$CLUSTER" > "$WORK/calibrate.log"
fi

# name: model overrides (the tiny deck's data and byte vocabulary)
declare -A SHAPES=(
  [gpt2w]="--model.n_layer=4 --model.n_embd=768 --model.n_head=12 --model.seq_len=128 --train.micro_batch=4 --train.grad_accum=4"
  [llamaw]="--model.arch=llama --model.n_layer=4 --model.n_embd=512 --model.n_head=8 --model.n_kv_head=4 --model.ffn_dim=1536 --model.seq_len=128 --train.micro_batch=4 --train.grad_accum=4"
)
shapes=(gpt2w llamaw)
nps=(2 4)
if [ "$QUICK" = 1 ]; then shapes=(gpt2w); nps=(2); fi

# mesh: overrides (world-size dependent ones are skipped where the checks refuse them)
meshes=(
  "ddp|--parallel.zero_stage=0"
  "z1|--parallel.zero_stage=1"
  "z2|--parallel.zero_stage=2"
  "z3|--parallel.zero_stage=3"
  "z3_rc|--parallel.zero_stage=3 --train.recompute=true"
  "z2_hybrid2|--parallel.zero_stage=2 --parallel.shard_group=2"
  "t2|--parallel.tensor=2"
  "t2_sp|--parallel.tensor=2 --parallel.sequence=true"
  "t4|--parallel.tensor=4"
  "t4_sp|--parallel.tensor=4 --parallel.sequence=true"
  "p2_1f1b|--parallel.pipeline=2 --parallel.schedule=1f1b"
  "p2_int|--parallel.pipeline=2 --parallel.schedule=interleaved"
  "p2_zb|--parallel.pipeline=2 --parallel.schedule=zb"
  "p4_1f1b|--parallel.pipeline=4 --parallel.schedule=1f1b"
  "t2_p2|--parallel.tensor=2 --parallel.pipeline=2"
)

rows="$WORK/rows.tsv"
: > "$rows"
for shape in "${shapes[@]}"; do
  for np in "${nps[@]}"; do
    for entry in "${meshes[@]}"; do
      name=${entry%%|*}
      flags=${entry#*|}
      dir="$WORK/run_${shape}_np${np}_${name}"
      if [ -n "$ONLY" ] && ! [[ "${shape}_np${np}_${name}" =~ $ONLY ]]; then continue; fi
      # shellcheck disable=SC2086
      common=(--config inputs/tiny.ini ${SHAPES[$shape]} $flags --data.train="$WORK/data/train_*.bin"
              --train.max_steps=6 --train.sample_tokens=0
              --checkpoint.every=0 --run.dir="$dir")
      # T x P must divide np: the other meshes are skipped at this np.
      tensor=$(grep -oE "parallel.tensor=[0-9]+" <<<"$flags" | cut -d= -f2 || true)
      pipeline=$(grep -oE "parallel.pipeline=[0-9]+" <<<"$flags" | cut -d= -f2 || true)
      if [ $((np % (${tensor:-1} * ${pipeline:-1}))) -ne 0 ]; then continue; fi
      # The world is the cluster's: one node of np ranks. The deck's checks may refuse a mesh.
      if ! "$BIN/ztrain" "${common[@]}" --plan --cluster "$CLUSTER" --cluster.ranks_per_node="$np" \
          > "$dir.plan" 2>&1; then
        echo "refused (skipped): $name at np $np: $(tail -1 "$dir.plan")" >&2; continue
      fi
      if [ -n "$MEASURED" ]; then
        # The row "| shape | np | mesh | tokens | predicted | measured | ..." of the earlier table.
        measured=$(awk -F'|' -v s="$shape" -v n="$np" -v m="$name" \
          '{gsub(/ /, "", $2); gsub(/ /, "", $3); gsub(/ /, "", $4)} $2 == s && $3 == n && $4 == m {print $7 + 0}' \
          "$MEASURED" | head -1)
        if [ -z "$measured" ]; then echo "not in $MEASURED (skipped): $shape np $np $name" >&2; continue; fi
        predicted=$(sed -n 's/^predicted step: \([0-9.]*\) ms$/\1/p' "$dir.plan")
        printf '%s\t%s\t%s\t%s\t%s\n' "$shape" "$np" "$name" "$predicted" "$measured" >> "$rows"
        continue
      fi
      if ! timeout 600 bash .ci/mpirun.sh "$np" "$BIN/ztrain" "${common[@]}" > "$dir.log" 2>&1; then
        echo "run failed (skipped): $dir.log" >&2; tail -3 "$dir.log" >&2; continue
      fi
      python3 - "$dir/metrics.jsonl" "$dir.plan" "$shape" "$np" "$name" >> "$rows" <<'PY'
import json, re, statistics, sys
metrics, plan, shape, np, name = sys.argv[1:]
steps = [json.loads(l) for l in open(metrics) if '"step_ms"' in l and '"event"' not in l]
measured = statistics.median(s["step_ms"] for s in steps[2:] or steps)
predicted = float(re.search(r"^predicted step: ([0-9.]+) ms", open(plan).read(), re.M).group(1))
print(f"{shape}\t{np}\t{name}\t{predicted:.1f}\t{measured:.1f}")
PY
      rm -rf "$dir/checkpoints"  # the final save: 250 MB a run, 13 GB for the whole matrix
    done
  done
done

python3 bench/planner_report.py "$WORK" "$OUT"
