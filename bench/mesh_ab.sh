#!/usr/bin/env bash
# Interleaved A/B of two ztrain builds on the parallel meshes: data parallelism (np 2 under
# DDP, ZeRO-2 and ZeRO-3: the gradient reduction), tensor parallelism (T = 2, with and without
# sequence parallelism), pipeline parallelism (P = 2 under each schedule) and 3D
# (P 2 x T 2 x data 2 at np 8), on bench/zero_common.sh's 16.1M model. The two binaries
# alternate within each repetition, so load changes on this shared machine hit both alike.
# Per setting and binary it prints the median step time over the steps after the first two of
# every repetition, and the ratio new / old; the last losses must be equal (same numerics).
#
#   bash bench/mesh_ab.sh OLD_BIN_DIR NEW_BIN_DIR [REPS] [STEPS]     (REPS 3, STEPS 6)
#
# Writes its table to stdout; with OUT=FILE also as markdown with the machine and the command.
# ONLY=name,name (e.g. ONLY=t2,t2-sp) runs just those settings.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$1 NEW=$2 REPS=${3:-3} STEPS=${4:-6}
for b in "$OLD" "$NEW"; do [ -x "$b/ztrain" ] || { echo "mesh_ab: no ztrain in $b" >&2; exit 2; }; done
WORK=bench/work/mesh_ab
mkdir -p "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_WAIT_POLICY=PASSIVE
[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 400000 50257
MODEL=(--model.n_layer=4 --model.n_head=4 --model.n_embd=256 --model.seq_len=256 --model.vocab_size=50257
       --model.vocab_pad_to=128)
TRAIN=(--data.train="$WORK/train.bin" --train.micro_batch=2 --train.eval_every=0 --train.sample_tokens=0
       --train.log_every=1000 --train.threads=1 --train.warmup_steps=2 --train.max_steps="$STEPS"
       --checkpoint.every=0 --checkpoint.resume=never)
# name | np | overrides
SETTINGS=(
    "d2-z0|2|--parallel.zero_stage=0 --train.grad_accum=2"
    "d2-z2|2|--parallel.zero_stage=2 --train.grad_accum=2"
    "d2-z3|2|--parallel.zero_stage=3 --train.grad_accum=2"
    "d2-z0-bf16|2|--parallel.zero_stage=0 --train.grad_accum=2 --precision.dtype=bf16"
    "d2-z2-bf16|2|--parallel.zero_stage=2 --train.grad_accum=2 --precision.dtype=bf16"
    "t2|2|--parallel.zero_stage=1 --parallel.tensor=2 --train.grad_accum=2"
    "t2-sp|2|--parallel.zero_stage=1 --parallel.tensor=2 --parallel.sequence=true --train.grad_accum=2"
    "p2-1f1b|2|--parallel.zero_stage=1 --parallel.pipeline=2 --parallel.schedule=1f1b --train.grad_accum=4"
    "p2-interleaved|2|--parallel.zero_stage=1 --parallel.pipeline=2 --parallel.schedule=interleaved --train.grad_accum=4"
    "p2-zb|2|--parallel.zero_stage=1 --parallel.pipeline=2 --parallel.schedule=zb --train.grad_accum=4"
    "p2-t2-d2|8|--parallel.zero_stage=1 --parallel.pipeline=2 --parallel.tensor=2 --parallel.sequence=true --train.grad_accum=4"
)
if [ -n "${ONLY:-}" ]; then
    kept=()
    for s in "${SETTINGS[@]}"; do [[ ",$ONLY," == *",${s%%|*},"* ]] && kept+=("$s"); done
    [ ${#kept[@]} -gt 0 ] || { echo "mesh_ab: ONLY=$ONLY names no setting" >&2; exit 2; }
    SETTINGS=("${kept[@]}")
fi

# run BIN_DIR NP DIR ARGS...: one training run; prints its step times after the first two and
# its last loss.
run() {
    local bin=$1 np=$2 dir=$3
    shift 3
    rm -rf "$dir"
    mpiexec --oversubscribe --bind-to none -np "$np" "$bin/ztrain" "${MODEL[@]}" "${TRAIN[@]}" \
        --run.dir="$dir" "$@" > "$dir.log" 2>&1 || { echo "mesh_ab: run failed: $dir.log" >&2; tail -5 "$dir.log" >&2; exit 1; }
    python3 - "$dir/metrics.jsonl" <<'EOF'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
print(" ".join(str(r["step_ms"]) for r in steps[2:]), steps[-1]["loss"])
EOF
}

declare -A times losses
for _ in $(seq 1 "$REPS"); do
    for s in "${SETTINGS[@]}"; do
        IFS='|' read -r name np args <<< "$s"
        for side in old new; do
            bin=$OLD; [ $side = new ] && bin=$NEW
            # shellcheck disable=SC2086  # the overrides are words
            read -r -a out <<< "$(run "$bin" "$np" "$WORK/$name-$side" $args)"
            times[$name-$side]="${times[$name-$side]:-} ${out[*]:0:${#out[@]}-1}"
            losses[$name-$side]=${out[-1]}
        done
    done
done

table() {
    echo "| setting | np | old step ms (median) | new step ms (median) | new / old | last loss old = new |"
    echo "|---|---|---|---|---|---|"
    for s in "${SETTINGS[@]}"; do
        IFS='|' read -r name np _ <<< "$s"
        python3 - "$name" "$np" "${times[$name-old]}" "${times[$name-new]}" "${losses[$name-old]}" \
            "${losses[$name-new]}" <<'EOF'
import statistics, sys
name, np, old, new, lo, ln = sys.argv[1:7]
mo = statistics.median(float(x) for x in old.split())
mn = statistics.median(float(x) for x in new.split())
print(f"| {name} | {np} | {mo:.0f} | {mn:.0f} | {mn / mo:.3f} | {'yes' if lo == ln else 'NO: ' + lo + ' vs ' + ln} |")
EOF
    done
}
if [ -n "${OUT:-}" ]; then
    {
        echo "# Mesh A/B: step time of two ztrain builds, interleaved ($(date -u +%Y-%m-%d))"
        echo
        echo "Command: \`${ONLY:+ONLY=$ONLY }OUT=$OUT bash bench/mesh_ab.sh $*\`"
        echo
        echo "- old: $OLD; new: $NEW"
        echo "- machine: $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
        echo "- CPU flags: $(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_bf16)$' | tr '\n' ' ')"
        echo "- $REPS repetitions of $STEPS steps per setting and binary; medians over steps 3+ of every repetition"
        echo
        table
    } > "$OUT"
    cat "$OUT"
else
    table
fi
