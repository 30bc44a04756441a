#!/usr/bin/env bash
# LoRA at ZeRO-3, two builds interleaved: where the adapters' state lives (peak RSS per rank,
# the memory event's model-state kinds on rank 0, checkpoint shard sizes), the step time, the
# bytes moved and the losses' bits.
# Usage: [NP=2] [STEPS=8] bench/lora_zero3_balance.sh OLD_ZTRAIN NEW_ZTRAIN REPS [extra ztrain args...]
# Needs /work/peers-124m (the peers bench's GPT-2 124M init and token shards).
set -euo pipefail
old=$1 new=$2 reps=$3
shift 3
extra=("$@")
data=${ZT_PEERS_DIR:-/work/peers-124m}
np=${NP:-2}
steps=${STEPS:-8}
out=$(mktemp -d /tmp/lora_zero3.XXXXXX)
echo "lscpu flags (bf16/avx512):$(grep -o -w 'avx2\|avx512f\|avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # NAME BIN
  local dir=$out/$1
  mpiexec --allow-run-as-root --oversubscribe --bind-to none -np "$np" "$2" --model.from_hf="$data/init_124m" \
    --data.train="$data/data/train_000000.bin" --data.val "" \
    --lora.rank=16 --lora.targets=c_attn,c_proj,c_fc --parallel.zero_stage=3 \
    --model.seq_len=256 --train.micro_batch=4 --train.max_steps="$steps" --train.lr=1e-3 \
    --train.sample_tokens=0 --train.eval_every=0 --checkpoint.every="$steps" --run.dir="$dir" "${extra[@]}" > "$dir.log" 2>&1
  python3 - "$1" "$dir" <<'PY'
import glob, json, os, statistics, sys
name, d = sys.argv[1], sys.argv[2]
recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
steps = [r for r in recs if "loss" in r]
mem = next(r for r in recs if r.get("event") == "memory")
peak = next(r for r in recs if r.get("event") == "memory_peak")
med = statistics.median(r["step_ms"] for r in steps[2:])
cb = steps[min(3, len(steps) - 1)]["comm_bytes"]
moved = {k: v for k, v in cb.items() if isinstance(v, (int, float)) and k != "scalar"}
shards = sorted(glob.glob(os.path.join(d, "checkpoints", "step_*", "shard_*.h5")))
mib = lambda b: "%.1f" % (b / 1048576)
print("| %s | %.0f ms | %s | %s | master %s, optimizer %s, params %s | %s | %s |" % (
    name, med, ", ".join("%s %.2f MB" % (k, v / 1e6) for k, v in sorted(moved.items())),
    ", ".join(mib(b) for b in peak["measured_peak"]),
    mib(mem["master"]), mib(mem["optimizer"]), mib(mem["params"]),
    ", ".join(str(os.path.getsize(s)) for s in shards),
    " ".join("%.6f" % r["loss"] for r in steps)))
PY
}
echo "NP=$np STEPS=$steps, extra arguments: ${extra[*]:-none}"
echo "| run | median step (from 3) | bytes moved at step 4 | peak RSS per rank (MiB) | rank 0's plan (MiB) | checkpoint shards (B) | losses |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq 1 "$reps"); do
  run "old_$r" "$old"
  run "new_$r" "$new"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$out"
