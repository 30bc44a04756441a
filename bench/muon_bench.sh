#!/usr/bin/env bash
# train.optimizer = muon: what it buys over AdamW on a small GPT (the validation loss at equal
# steps) and what its step costs beside torch.optim.Muon on the same matrices, each contender
# interleaved in one run.
#   bash bench/muon_bench.sh   knobs: REPS (3), CURVE_STEPS (300), BUILD_DIR (build)
# Part 1, the curve: GPT-2 4 x 128, seq 128, byte tokenizer, 16 sequences a step, one rank:
#   AdamW (lr 2e-3, cosine to 2e-4; and at 6e-3), Muon at AdamW's rate (match_rms_adamw), Muon at Keller
#   Jordan's (original, muon_lr 0.02), and that with train.muon_ns_dtype = bf16; the rest AdamW
#   at 2e-3 in all.
# Part 2, the optimizer step: the blocks' matrices of GPT-2s 2 x 384 and 1 x 768 (one GPT-2
#   124M block), 2 threads: ztrain's Muon phase (ZT_PROFILE_OPS ops_ms.muon: momentum,
#   Newton-Schulz, update), its Newton-Schulz operands fp32 and bf16, against
#   torch.optim.Muon.step() on the same shapes, as shipped
#   (Newton-Schulz in bf16) and with its Newton-Schulz in fp32 (bench/torch_muon_step.py).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
CURVE_STEPS="${CURVE_STEPS:-300}"
B="${BUILD_DIR:-build}/bin"
PY="${ZT_INTEROP_VENV:-$ROOT/.venv}/bin/python"
W="bench/work/muon"
OUT="${OUT:-bench/results/muon_$(date +%F).md}"
mkdir -p "$W" bench/results
D=$W/text
[ -f $D/train_000000.bin ] || $B/zt-prepare --input /usr/share/common-licenses /usr/share/doc/bash --output $D > /dev/null 2>&1
[ -f "$W/gpt2.bin" ] || /usr/bin/python3 bench/make_shard.py "$W/gpt2.bin" 200000 50257
started="$(date -u '+%F %T') UTC"

curve() { # name lr lr_min extra-flags...
  local name=$1 lr=$2 lr_min=$3
  shift 3
  rm -rf "${W:?}/$name"  # a run of an earlier invocation: ztrain refuses to mix with it
  $B/ztrain --config inputs/tiny.ini --data.train="$D/train_*.bin" --data.val="$D/val_*.bin" \
    --model.n_layer=4 --model.n_head=4 --model.n_embd=128 --model.seq_len=128 --train.micro_batch=16 \
    --train.max_steps="$CURVE_STEPS" --train.warmup_steps=20 --train.lr=$lr --train.lr_min=$lr_min \
    --train.eval_every=100 --train.eval_batches=16 --train.sample_tokens=0 --train.threads=2 --train.log_every=1000 \
    --checkpoint.resume=never --run.dir=$W/$name "$@" > $W/$name.log 2>&1
}
curve adamw 2e-3 2e-4
curve adamw_6e-3 6e-3 6e-4
curve muon_rms 2e-3 2e-4 --train.optimizer=muon
curve muon_original 2e-3 2e-4 --train.optimizer=muon --train.muon_adjust_lr=original --train.muon_lr=0.02
curve muon_original_bf16 2e-3 2e-4 --train.optimizer=muon --train.muon_adjust_lr=original --train.muon_lr=0.02 \
  --train.muon_ns_dtype=bf16

ztrain_muon_ms() { # layers width ns_dtype
  local d="$W/step_$1_$2_$3"
  rm -rf "$d"
  ZT_PROFILE_OPS=1 $B/ztrain --model.n_layer=$1 --model.n_head=$(($2 / 64)) --model.n_embd=$2 --model.seq_len=64 \
    --model.vocab_size=50257 --model.vocab_pad_to=128 --data.train="$W/gpt2.bin" --train.micro_batch=1 \
    --train.max_steps=4 --train.eval_every=0 --train.sample_tokens=0 --train.threads=2 --train.optimizer=muon \
    --train.muon_ns_dtype=$3 --checkpoint.resume=never --run.dir="$d" > "$d.log" 2>&1
  /usr/bin/python3 -c '
import json, statistics, sys
v = [json.loads(l)["ops_ms"]["muon"] for l in open(sys.argv[1]) if "ops_ms" in l][1:]
print(f"{statistics.median(v):.1f}")' "$d/metrics.jsonl"
}
declare -A ms
for rep in $(seq 1 "$REPS"); do
  for shape in "2 384" "1 768"; do
    ms[z $shape]+="$(ztrain_muon_ms $shape fp32) "
    ms[zb $shape]+="$(ztrain_muon_ms $shape bf16) "
    ms[f $shape]+="$("$PY" bench/torch_muon_step.py 2 3 $shape fp32) "
    ms[b $shape]+="$("$PY" bench/torch_muon_step.py 2 3 $shape bf16) "
  done
done

med() { /usr/bin/python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' $1; }
{
  echo "# train.optimizer = muon: the curve against AdamW, and the step against torch.optim.Muon"
  echo
  echo "- command: \`REPS=$REPS CURVE_STEPS=$CURVE_STEPS bash bench/muon_bench.sh\`; $started, git $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end (shared machine)"
  echo "- CPU flags (vector): $(grep -o -w -E 'avx512[a-z_0-9]*|avx2|avx|fma|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "- torch $("$PY" -c 'import torch; print(torch.__version__)')"
  echo
  echo "## 1. The curve (GPT-2 4 x 128, seq 128, 16 sequences a step, $CURVE_STEPS steps, one rank, fp32)"
  echo
  W="$W" /usr/bin/python3 - <<'PY'
import json, os, statistics as st
W = os.environ["W"]
runs = {"adamw": "AdamW, lr 2e-3", "adamw_6e-3": "AdamW, lr 6e-3 (to 6e-4)", "muon_rms": "Muon (match_rms_adamw) at lr 2e-3, AdamW on the rest",
        "muon_original": "Muon (original) at 0.02, AdamW at 2e-3 on the rest",
        "muon_original_bf16": "the same, train.muon_ns_dtype = bf16"}
print("| run | validation loss at steps | training loss, mean of the last 20 steps | tok/s (median) |")
print("|---|---|---|---|")
for n, what in runs.items():
    L = [json.loads(l) for l in open(f"{W}/{n}/metrics.jsonl")]
    v = [(r["step"], r["val_loss"]) for r in L if "val_loss" in r]
    loss = [r["loss"] for r in L if "loss" in r and "step" in r]
    tok = [r["tokens_per_s"] for r in L if "tokens_per_s" in r][5:]
    print(f"| {what} | " + " ".join(f"{s}: {x:.4f}" for s, x in v) +
          f" | {st.mean(loss[-20:]):.4f} | {st.median(tok):.0f} |")
PY
  echo
  echo "## 2. The optimizer step over the blocks' matrices (ms, 2 threads; per rep, then the median)"
  echo
  echo "| matrices | ztrain Muon fp32 (syrk/symm) | ztrain Muon bf16 operands | torch.optim.Muon, Newton-Schulz fp32 | torch.optim.Muon as shipped (bf16) | torch fp32 / ztrain fp32 | torch bf16 / ztrain bf16 |"
  echo "|---|---|---|---|---|---|---|"
  for shape in "2 384" "1 768"; do
    z=$(med "${ms[z $shape]}"); zb=$(med "${ms[zb $shape]}"); f=$(med "${ms[f $shape]}"); b=$(med "${ms[b $shape]}")
    ratio() { /usr/bin/python3 -c "print(f'{$1 / $2:.2f}x')"; }
    echo "| ${shape% *} x 4 at width ${shape#* } | ${ms[z $shape]}→ $z | ${ms[zb $shape]}→ $zb | ${ms[f $shape]}→ $f | ${ms[b $shape]}→ $b | $(ratio $f $z) | $(ratio $b $zb) |"
  done
} > "$OUT"
cat "$OUT"
