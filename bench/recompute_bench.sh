#!/usr/bin/env bash
# train.recompute: what activation recomputation saves (peak RSS, activation bytes from the
# memory record) and what it costs (tokens/s), each mode (false, attention, true) interleaved
# in one run.
#   bash bench/recompute_bench.sh   knobs: REPS (3), STEPS (8; the first 2 left out), MODES
#                                   ("false attention true"), CONFIGS ("a b c"), BUILD_DIR (build-bench)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-8}"
read -r -a modes <<< "${MODES:-false attention true}"
read -r -a wanted <<< "${CONFIGS:-a b c}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
WORK="bench/work/recompute"
OUT="${OUT:-bench/results/recompute_$(date +%F).md}"
mkdir -p "$WORK" bench/results
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain >> "$WORK/build.log" 2>&1
[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 50257
declare -A tok rss act
# a: GPT-2 124M at seq 1024, one sequence a micro-batch; b: 4 x 256, 4 heads, seq 1024, 4
# sequences; c: b as a Llama (2 KV heads, SwiGLU 688).
all_configs=("a:--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.seq_len=1024 --train.micro_batch=1"
             "b:--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=1024 --train.micro_batch=4"
             "c:--model.arch=llama --model.n_layer=4 --model.n_head=4 --model.n_kv_head=2 --model.n_embd=256 --model.ffn_dim=688 --model.seq_len=1024 --train.micro_batch=4")
configs=()
for cfg in "${all_configs[@]}"; do
  for w in "${wanted[@]}"; do [ "${cfg%%:*}" = "$w" ] && configs+=("$cfg"); done
done
for rep in $(seq 1 "$REPS"); do
  for cfg in "${configs[@]}"; do
    name=${cfg%%:*}
    for rc in "${modes[@]}"; do
      d="$WORK/${name}_${rc}_$rep"
      rm -rf "$d"
      # shellcheck disable=SC2086
      /usr/bin/time -v "$BUILD_DIR/bin/ztrain" ${cfg#*:} --model.vocab_size=50257 --model.vocab_pad_to=128 \
        --data.train="$WORK/train.bin" --train.max_steps="$STEPS" --train.eval_every=0 \
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
  echo "- command: \`REPS=$REPS STEPS=$STEPS MODES=\"${modes[*]}\" CONFIGS=\"${wanted[*]}\" bash bench/recompute_bench.sh\`; $(date -u '+%F %T UTC'), git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared machine)"
  echo "- CPU flags (vector): $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx|amx|fma)' | tr '\n' ' ')"
  echo "- fp32, 2 threads, one process, vocab 50257 (padded 50304), synthetic tokens; the modes of each config alternate within each repetition"
  for cfg in "${configs[@]}"; do echo "- ${cfg%%:*}: \`${cfg#*:}\`"; done
  echo
  echo "| config | recompute | tok/s per rep | median tok/s | peak RSS MiB (median) | activation MiB |"
  echo "|---|---|---|---|---|---|"
  for cfg in "${configs[@]}"; do
    name=${cfg%%:*}
    for rc in "${modes[@]}"; do
      echo "| $name | $rc | ${tok[$name,$rc]} | $(med "${tok[$name,$rc]}") | $(med "${rss[$name,$rc]}") | ${act[$name,$rc]} |"
    done
  done
} > "$OUT"
cat "$OUT"
