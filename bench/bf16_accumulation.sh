#!/usr/bin/env bash
# bf16 gradient accumulation: does accumulating 16 micro-steps in bf16 storage move the curve
# further from fp32 than one micro-step of the same global batch?
set -e
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
B="${BIN_DIR:-$ROOT/build/bin}"
W="${WORK:-$ROOT/bench/work/bf16_accumulation}"
mkdir -p "$W"
D=$W/data
[ -f $D/train_000000.bin ] || $B/zt-prepare --input /usr/share/common-licenses /usr/share/doc/bash --output $D > /dev/null 2>&1
run() { # name dtype micro accum stage
  $B/ztrain --config "$ROOT/inputs/tiny.ini" --data.train="$D/train_*.bin" --data.val="$D/val_*.bin" \
    --model.n_layer=4 --model.n_head=4 --model.n_embd=128 --model.seq_len=128 \
    --train.max_steps=150 --train.warmup_steps=10 --train.lr=3e-3 --train.lr_min=3e-4 --train.eval_every=50 \
    --train.eval_batches=8 --train.sample_tokens=0 --train.threads=2 --train.log_every=1000 \
    --precision.dtype=$2 --train.micro_batch=$3 --train.grad_accum=$4 --parallel.zero_stage=$5 \
    --checkpoint.resume=never --run.dir=$W/$1 > $W/$1.log 2>&1
}
run fp32_a16 fp32 4 16 0
run bf16_a16 bf16 4 16 0
run bf16_a1 bf16 64 1 0
run fp32_a1 fp32 64 1 0
W="$W" python3 - <<'PY'
import json, os
W = os.environ["W"]
def losses(n):
    L=[json.loads(l) for l in open(f"{W}/{n}/metrics.jsonl")]
    return [r["loss"] for r in L if "loss" in r and "step" in r], [r["val_loss"] for r in L if "val_loss" in r]
f16,fv16=losses("fp32_a16"); b16,bv16=losses("bf16_a16"); b1,bv1=losses("bf16_a1"); f1,fv1=losses("fp32_a1")
import statistics as st
def d(a,b): return st.mean(abs(x-y)/y for x,y in zip(a,b))
print("mean rel |loss diff| bf16 accum16 vs fp32 accum16:", d(b16,f16))
print("mean rel |loss diff| bf16 accum1  vs fp32 accum1 :", d(b1,f1))
print("mean rel |loss diff| fp32 accum1  vs fp32 accum16:", d(f1,f16))
print("val fp32 a16", fv16, "\nval bf16 a16", bv16, "\nval bf16 a1 ", bv1, "\nval fp32 a1 ", fv1)
PY
