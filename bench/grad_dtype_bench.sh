#!/usr/bin/env bash
# precision.grad_dtype = fp32 beside bf16: what accumulating the gradients in fp32 buys (a loss
# curve nearer fp32's when a step sums many micro-steps) and what it costs (2 more bytes per
# stored gradient; the time of the micro-steps), each mode interleaved in one run.
#   bash bench/grad_dtype_bench.sh   knobs: REPS (3), STEPS (6; the first 2 left out of the
#                                    speed), CURVE_STEPS (150), BUILD_DIR (build)
# Part 1, the curve: GPT-2 4 x 128, seq 128, byte tokenizer, global batch 64 sequences as 4 x 16
#   micro-steps: fp32, bf16, bf16 with fp32 gradients; and bf16 as one micro-step of 64.
# Part 2, the cost: GPT-2 124M, seq 128, micro_batch 2 x grad_accum 4, DDP on one rank: bf16
#   and bf16 with fp32 gradients: tokens/s, peak RSS, the memory record's grads and the plan.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS="${STEPS:-6}"
CURVE_STEPS="${CURVE_STEPS:-150}"
B="${BUILD_DIR:-build}/bin"
W="bench/work/grad_dtype"
OUT="${OUT:-bench/results/grad_dtype_$(date +%F).md}"
mkdir -p "$W" bench/results
D=$W/text
[ -f $D/train_000000.bin ] || $B/zt-prepare --input /usr/share/common-licenses /usr/share/doc/bash --output $D > /dev/null 2>&1
[ -f "$W/gpt2.bin" ] || /usr/bin/python3 bench/make_shard.py "$W/gpt2.bin" 400000 50257
started="$(date -u '+%F %T') UTC"

curve() { # name dtype grad_dtype micro accum
  $B/ztrain --config inputs/tiny.ini --data.train="$D/train_*.bin" --data.val="$D/val_*.bin" \
    --model.n_layer=4 --model.n_head=4 --model.n_embd=128 --model.seq_len=128 \
    --train.max_steps="$CURVE_STEPS" --train.warmup_steps=10 --train.lr=3e-3 --train.lr_min=3e-4 --train.eval_every=50 \
    --train.eval_batches=8 --train.sample_tokens=0 --train.threads=2 --train.log_every=1000 \
    --precision.dtype=$2 --precision.grad_dtype="$3" --train.micro_batch=$4 --train.grad_accum=$5 \
    --checkpoint.resume=never --run.dir=$W/$1 > $W/$1.log 2>&1
}
curve fp32_a16 fp32 fp32 4 16
curve bf16_a16 bf16 bf16 4 16
curve bf16g32_a16 bf16 fp32 4 16
curve bf16_a1 bf16 bf16 64 1

declare -A tok rss grads plan
for rep in $(seq 1 "$REPS"); do
  for g in bf16 fp32; do
    d="$W/cost_${g}_$rep"
    rm -rf "$d"
    /usr/bin/time -v "$B/ztrain" --model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.seq_len=128 \
      --model.vocab_size=50257 --model.vocab_pad_to=128 --data.train="$W/gpt2.bin" --train.micro_batch=2 \
      --train.grad_accum=4 --train.max_steps="$STEPS" --train.eval_every=0 --train.sample_tokens=0 \
      --train.threads=2 --precision.dtype=bf16 --precision.grad_dtype=$g --checkpoint.resume=never \
      --checkpoint.dir="$d/ckpt" --run.dir="$d" > "$d.log" 2>&1
    tok[$g]+="$(/usr/bin/python3 -c '
import json, statistics, sys
v = [r["tokens_per_s"] for r in map(json.loads, open(sys.argv[1])) if "tokens_per_s" in r][2:]
print(f"{statistics.median(v):.1f}")' "$d/metrics.jsonl") "
    rss[$g]+="$(( $(sed -n 's/.*Maximum resident set size (kbytes): //p' "$d.log") / 1024 )) "
    grads[$g]=$(/usr/bin/python3 -c 'import json,sys; print(round(json.loads(open(sys.argv[1]).readline())["grads"]/1048576,1))' "$d/metrics.jsonl")
    plan[$g]=$(/usr/bin/python3 -c 'import json,sys; print(round(json.loads(open(sys.argv[1]).readline())["predicted_peak"]/1048576))' "$d/metrics.jsonl")
  done
done

med() { /usr/bin/python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' $1; }
{
  echo "# precision.grad_dtype = fp32 beside bf16: the curve it buys, the memory and time it costs"
  echo
  echo "- command: \`REPS=$REPS STEPS=$STEPS CURVE_STEPS=$CURVE_STEPS bash bench/grad_dtype_bench.sh\`; $started, git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared machine)"
  echo "- CPU flags (vector): $(grep -o -w -E 'avx512[a-z_0-9]*|avx2|avx|fma|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo
  echo "## 1. The curve (GPT-2 4 x 128, seq 128, $CURVE_STEPS steps, global batch 64 sequences, one rank)"
  echo
  W="$W" /usr/bin/python3 - <<'PY'
import json, os, statistics as st
W = os.environ["W"]
def losses(n):
    L = [json.loads(l) for l in open(f"{W}/{n}/metrics.jsonl")]
    return ([r["loss"] for r in L if "loss" in r and "step" in r],
            [(r["step"], r["val_loss"]) for r in L if "val_loss" in r])
runs = {"fp32_a16": "fp32, 4 x 16 micro-steps", "bf16_a16": "bf16 (bf16 gradients), 4 x 16",
        "bf16g32_a16": "bf16, fp32 gradients, 4 x 16", "bf16_a1": "bf16 (bf16 gradients), 64 x 1"}
ref, _ = losses("fp32_a16")
print("| run | mean relative loss difference from fp32 over the steps | validation loss at steps |")
print("|---|---|---|")
for n, what in runs.items():
    l, v = losses(n)
    d = st.mean(abs(x - y) / y for x, y in zip(l, ref))
    print(f"| {what} | {d:.2e} | " + " ".join(f"{s}: {x:.4f}" for s, x in v) + " |")
PY
  echo
  echo "## 2. The cost (GPT-2 124M, seq 128, micro_batch 2 x grad_accum 4, bf16, DDP on one rank, 2 threads)"
  echo
  echo "| grad_dtype | tok/s per rep | median tok/s | peak RSS MiB per rep | median | grads MiB (memory record) | predicted peak MiB |"
  echo "|---|---|---|---|---|---|---|"
  for g in bf16 fp32; do
    echo "| $g | ${tok[$g]} | $(med "${tok[$g]}") | ${rss[$g]} | $(med "${rss[$g]}") | ${grads[$g]} | ${plan[$g]} |"
  done
} > "$OUT"
cat "$OUT"
