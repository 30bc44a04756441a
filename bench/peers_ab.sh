#!/usr/bin/env bash
# Interleaved A/B of two ztrain builds on the ztrain side of bench/peers/run.py's pairs, with
# the peers' own inputs: pair 3 (GPT-2 124M, ZeRO-3 at np 2, fp32), pair 2's padded examples
# (pair2_pad: GPT-2 124M, data.packing = pad, micro-batch 4, DDP at np 2, fp32) and pair 7
# (LoRA r16 on SmolLM2-360M's shape at np 2, bf16 and fp32). The builds alternate within each repetition;
# per setting and build: the median step time over the steps after the first two of every
# repetition, the ratio new / old, and each build's last loss (equal up to the change's
# rounding).
#
#   bash bench/peers_ab.sh OLD_BIN_DIR NEW_BIN_DIR [REPS] [STEPS]     (REPS 3, STEPS 6)
#
# Needs the peers' work directories (bench/peers/run.py --shape 124m --work PEERS_124M, and
# bench/lora_bench.sh's bench/work/lora; pair2_pad: run.py --pairs 2 once). OUT=FILE also writes the table as markdown with the
# machine and the command (OLD_LABEL, NEW_LABEL name the builds there); ONLY=pair3,pair2_pad,lora_bf16,lora_fp32 picks settings. OpenBLAS picks its
# own kernels (OPENBLAS_CORETYPE unset), as the peers bench runs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OLD=$1 NEW=$2 REPS=${3:-3} STEPS=${4:-6}
P124=${PEERS_124M:-/work/peers-124m}
LORA=bench/work/lora
for b in "$OLD" "$NEW"; do [ -x "$b/ztrain" ] || { echo "peers_ab: no ztrain in $b" >&2; exit 2; }; done
[ -d "$P124/init_124m" ] || { echo "peers_ab: no $P124/init_124m (run bench/peers/run.py --shape 124m first)" >&2; exit 2; }
SETTINGS=${ONLY:-pair3,lora_bf16,lora_fp32}
case $SETTINGS in *lora*) [ -d "$LORA/init_smollm2_360m" ] ||
    { echo "peers_ab: no $LORA/init_smollm2_360m (run bench/lora_bench.sh first)" >&2; exit 2; } ;; esac
case $SETTINGS in *pair2_pad*) [ -d "$P124/examples" ] ||
    { echo "peers_ab: no $P124/examples (run bench/peers/run.py --shape 124m --pairs 2 first)" >&2; exit 2; } ;; esac
unset OPENBLAS_CORETYPE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=bench/work/peers_ab
mkdir -p "$WORK"
COMMON=(--train.grad_accum=1 --train.max_steps="$STEPS" --train.lr=0.0003 --train.warmup_steps=10 --train.seed=1337
        --train.sample_tokens=0 --train.threads=1 --checkpoint.async=false --checkpoint.resume=never
        --checkpoint.every=0 --run.tensorboard=false)
setting_args() {
    case $1 in
        pair3) echo --model.from_hf="$P124/init_124m" "--data.train=$P124/data/train_*.bin" --train.micro_batch=4 \
                    --parallel.zero_stage=3 ;;
        pair2_pad) echo --model.from_hf="$P124/init_124m" "--data.train=$P124/examples/train_*.bin" \
                        --train.micro_batch=4 --data.packing=pad --data.overlong=truncate ;;
        lora_bf16|lora_fp32)
            echo --model.from_hf="$LORA/init_smollm2_360m" "--data.train=$LORA/long_examples/train_*.bin" \
                 --train.micro_batch=2 --data.packing=pad --data.overlong=truncate --lora.rank=16 --lora.alpha=32 \
                 --lora.targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj \
                 --precision.dtype="${1#lora_}" ;;
    esac
}
declare -A times losses
for rep in $(seq 1 "$REPS"); do
    for s in ${SETTINGS//,/ }; do
        for side in old new; do
            bin=$OLD; [ $side = new ] && bin=$NEW
            dir="$WORK/$s.$side.$rep"
            rm -rf "$dir"
            # shellcheck disable=SC2046
            "$bin/ztrun" 2 "$bin/ztrain" $(setting_args "$s") "${COMMON[@]}" --run.dir="$dir" > "$dir.log" 2>&1 ||
                { echo "peers_ab: $s ($side) failed, see $dir.log" >&2; exit 1; }
            read -r t l < <(python3 - "$dir/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(x) for x in open(sys.argv[1]) if '"step_ms"' in x]
print(",".join(str(r["step_ms"]) for r in steps[2:]), steps[-1]["loss"])
PY
)
            times[$s.$side]="${times[$s.$side]:-}${times[$s.$side]:+,}$t"
            losses[$s.$side]=$l
            echo "rep $rep $s $side: steps 3+ $t ms, last loss $l" >&2
        done
    done
done
table() {
    echo "| setting | old step ms (median) | new step ms (median) | new / old | last loss old | last loss new |"
    echo "|---|---|---|---|---|---|"
    for s in ${SETTINGS//,/ }; do
        python3 - "${times[$s.old]}" "${times[$s.new]}" "$s" "${losses[$s.old]}" "${losses[$s.new]}" <<'PY'
import statistics, sys
old = statistics.median(float(x) for x in sys.argv[1].split(","))
new = statistics.median(float(x) for x in sys.argv[2].split(","))
print(f"| {sys.argv[3]} | {old:.1f} | {new:.1f} | {new / old:.3f} | {sys.argv[4]} | {sys.argv[5]} |")
PY
    done
}
table
if [ -n "${OUT:-}" ]; then
    {
        echo "# ztrain A/B on the peers' ztrain settings ($(date -u +%F))"
        echo
        echo "Command: \`bash bench/peers_ab.sh $OLD $NEW $REPS $STEPS\` (old: ${OLD_LABEL:-$OLD}, new: ${NEW_LABEL:-$NEW}); builds alternate in each of $REPS repetitions; median of steps 3-$STEPS of every repetition, np 2 x 1 thread, OPENBLAS_CORETYPE unset."
        echo
        echo '```'
        lscpu | grep -E "^(Model name|CPU family|CPU\(s\)|Flags)"
        echo '```'
        echo
        table
    } > "$OUT"
fi
