#!/usr/bin/env bash
# lora.base_dtype = bf16 under precision.dtype = fp32 (issue 51): the frozen base's products
# on the CPU's bf16 products (ZT_CPU_BF16=auto) against the base widened to fp32 for sgemm
# (ZT_CPU_BF16=off), one binary, interleaved REPS times; and the fp32-stored base beside them.
# Each run trains STEPS steps from DECK (a LoRA deck, e.g. the config.ini bench/lora_bench.sh's
# ztrain runs leave) at np 2. Prints per run the median step (the first SKIP steps left out),
# tokens/s, the peak RSS of every rank and the losses.
#   bash bench/lora_base_products.sh BIN_DIR DECK [REPS] [STEPS] [WORK]
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN=$1 DECK=$2 REPS=${3:-3} STEPS=${4:-5} WORK=${5:-/tmp/lora_base_products} SKIP=2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rm -rf "$WORK" && mkdir -p "$WORK"
echo "lscpu flags: $(lscpu | grep -oE 'avx512_bf16|avx512f|amx_bf16' | sort -u | tr '\n' ' ')"
for rep in $(seq 1 "$REPS"); do
  for side in bf16_products widened fp32_base; do
    dir="$WORK/${side}_r$rep"
    mode=auto base=bf16
    [ "$side" = widened ] && mode=off
    [ "$side" = fp32_base ] && base=fp32
    load=$(cut -d' ' -f1 /proc/loadavg)
    ZT_CPU_BF16=$mode "$BIN/ztrun" 2 /usr/bin/time -f "rss_kib %M" "$BIN/ztrain" --config "$DECK" \
      --run.dir="$dir" --precision.dtype=fp32 --lora.base_dtype=$base --train.max_steps="$STEPS" \
      --checkpoint.every=0 --checkpoint.resume=never --train.eval_every=0 > "$dir.log" 2>&1
    python3 - "$dir" "$side" "$rep" "$load" "$SKIP" <<'PY'
import json, re, statistics, sys
run, side, rep, load, skip = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
steps = [json.loads(l) for l in open(run + "/metrics.jsonl")]
steps = [s for s in steps if "step_ms" in s]
ms = statistics.median(s["step_ms"] for s in steps[skip:])
tokens = steps[-1]["tokens"] / len(steps)
rss = [int(k) // 1024 for k in re.findall(r"rss_kib (\d+)", open(run + ".log").read())]
losses = " ".join(f"{s['loss']:.5f}" for s in steps)
print(f"| {side} | {rep} | {load} | {ms:.0f} | {tokens / ms * 1e3:.1f} | {', '.join(map(str, rss))} | {losses} |")
PY
    rm -rf "$dir/checkpoints"
  done
done
