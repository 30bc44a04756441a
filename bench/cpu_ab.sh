#!/usr/bin/env bash
# Interleaved A/B of ztrain binaries on the cpu_bench configurations (one process, fp32, batch 4,
# AdamW, the same flags as cpu_bench.sh's run_ztrain). On a shared machine compare binaries only
# within one invocation: they alternate, so load changes hit all of them alike.
#
#   bash bench/cpu_ab.sh CFG STEPS ROUNDS BIN1 [BIN2 ...]
#   CFG: a (GPT-2 124M, seq 64) | a1k (GPT-2 124M, seq 1024) | b (4L x 256, seq 256)
#
# A BIN may be PATH@DTYPE (fp32, bf16, fp16: precision.dtype of its runs; default fp32), so one
# invocation can compare dtypes of one binary as well as binaries.
# Per run it prints the medians over steps 3+ of tokens/s and of the phase times in metrics.jsonl
# (step, zero, fwd, bwd, comm, opt ms), peak RSS and the last loss (equal losses = same numerics);
# with ZT_PROFILE_OPS=1 in the environment also the per-op times. Knobs: THREADS (2), EXTRA (more
# ztrain flags). Needs bench/work/data/train_000.bin (cpu_bench.sh writes it).
set -euo pipefail
cd "$(dirname "$0")/.."
cfg=$1 steps=$2 rounds=$3
shift 3
case "$cfg" in
    a) L=12 H=12 C=768 T=64 ;;
    a1k) L=12 H=12 C=768 T=1024 ;;
    b) L=4 H=4 C=256 T=256 ;;
    *) echo "cpu_ab.sh: CFG must be a, a1k or b, not '$cfg'" >&2; exit 2 ;;
esac
WORK=bench/work/ab
mkdir -p "$WORK"
for r in $(seq 1 "$rounds"); do
    for spec in "$@"; do
        bin="${spec%@*}" dtype=fp32
        [ "$spec" != "$bin" ] && dtype="${spec##*@}"
        tag="$(basename "$bin")_${dtype}_${cfg}_$r"
        dir="$WORK/$tag"
        rm -rf "$dir"
        # shellcheck disable=SC2086
        /usr/bin/time -f "%M" -o "$WORK/$tag.rss" "$bin" --backend=cpu --model.n_layer=$L --model.n_head=$H \
            --model.n_embd=$C --model.seq_len=$T --model.vocab_size=50257 --model.vocab_pad_to=128 \
            --data.train=bench/work/data/train_000.bin --train.micro_batch=4 --train.grad_accum=1 \
            --train.max_steps="$steps" --train.lr=3e-4 --train.warmup_steps=2 --train.eval_every=0 \
            --train.sample_tokens=0 --train.threads="${THREADS:-2}" --precision.dtype="$dtype" \
            --parallel.zero_stage=0 --checkpoint.resume=never --run.dir="$dir" ${EXTRA:-} \
            > "$WORK/$tag.out" 2>&1 || { tail "$WORK/$tag.out"; exit 1; }
        python3 - "$dir/metrics.jsonl" "$(basename "$bin")@$dtype" "$(cat "$WORK/$tag.rss")" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = [r for r in rows if "loss" in r and r["step"] > 2] or [r for r in rows if "loss" in r]
m = lambda k: st.median(r[k] for r in s) if k in s[0] else float("nan")
print(f"{sys.argv[2]:14s} tok/s {m('tokens_per_s'):7.1f} step {m('step_ms'):7.0f} zero {m('zero_ms'):6.1f} "
      f"fwd {m('fwd_ms'):6.0f} bwd {m('bwd_ms'):6.0f} comm {m('comm_ms'):5.1f} opt {m('opt_ms'):6.1f} "
      f"rss {int(sys.argv[3]) // 1024}MiB loss {s[-1]['loss']:.4f}")
if "ops_ms" in s[0]:
    print("   ", " ".join(f"{k}={st.median(r['ops_ms'][k] for r in s):.0f}" for k in s[0]["ops_ms"]))
PY
        rm -rf "$dir/checkpoints"  # GPT-2 124M writes 1.5 GB per run; the figures are read
    done
done
