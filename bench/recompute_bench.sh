#!/usr/bin/env bash
# train.recompute: what activation recomputation saves (peak RSS, activation bytes from the
# memory record) and what it costs (tokens/s), interleaved in one run.
#   bash bench/recompute_bench.sh        knobs: REPS (3), STEPS (8), BUILD_DIR (build-bench)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-8}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
WORK="bench/work/recompute"
OUT="${OUT:-bench/results/recompute_$(date +%F).md}"
mkdir -p "$WORK" bench/results
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain >> "$WORK/build.log" 2>&1
[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 50257
declare -A tok rss act
configs=("a:--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.seq_len=64"
         "b:--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=256")
for rep in $(seq 1 "$REPS"); do
  for cfg in "${configs[@]}"; do
    name=${cfg%%:*}
    for rc in false true; do
      d="$WORK/${name}_${rc}_$rep"
      rm -rf "$d"
      # shellcheck disable=SC2086
      /usr/bin/time -v "$BUILD_DIR/bin/ztrain" ${cfg#*:} --model.vocab_size=50257 --model.vocab_pad_to=128 \
        --data.train="$WORK/train.bin" --train.micro_batch=4 --train.max_steps="$STEPS" --train.eval_every=0 \
        --train.sample_tokens=0 --train.threads=2 --train.recompute="$rc" --checkpoint.resume=never \
        --checkpoint.dir="$d/ckpt" --run.dir="$d" > "$d.log" 2>&1
      tok[$name,$rc]+="$(/usr/bin/python3 -c '
import json, statistics, sys
v = [r["tokens_per_s"] for r in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in r][2:]
print(f"{statistics.median(v):.1f}")' "$d/metrics.jsonl") "
      rss[$name,$rc]+="$(( $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$d.log") / 1024 )) "
      act[$name,$rc]=$(/usr/bin/python3 -c 'import json,sys; print(round(json.loads(open(sys.argv[1]).readline())["activations"]/1048576,1))' "$d/metrics.jsonl")
    done
  done
done
med() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
{
  echo "# train.recompute: memory saved, speed paid"
  echo
  echo "- command: \`REPS=$REPS STEPS=$STEPS bash bench/recompute_bench.sh\`; $(date -u '+%F %T UTC'), git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared machine)"
  echo "- fp32, batch 4, 2 threads, one process, vocab 50257 (padded 50304), synthetic tokens; a = GPT-2 124M seq 64, b = 4 x 256 x 4 heads seq 256"
  echo
  echo "| config | recompute | tok/s per rep | median tok/s | peak RSS MiB (median) | activation MiB |"
  echo "|---|---|---|---|---|---|"
  for cfg in "${configs[@]}"; do
    name=${cfg%%:*}
    for rc in false true; do
      echo "| $name | $rc | ${tok[$name,$rc]} | $(med "${tok[$name,$rc]}") | $(med "${rss[$name,$rc]}") | ${act[$name,$rc]} |"
    done
  done
} > "$OUT"
cat "$OUT"
