#!/usr/bin/env bash
# Communication overlap on an emulated network: np 4 = 2 nodes x 2 ranks on the private
# two-node Slurm cluster of tests/slurm (each node a network namespace with a veth pair to a
# bridge; ranks on one node talk through shared memory, across nodes only TCP over the
# bridge), with every veth end shaped by `tc tbf` to RATE. ZeRO-3 in one flat shard group of
# 4 (every gather and reduce-scatter crosses the link) and in hybrid groups of 2 (inside a
# node; only the replica all-reduce crosses it), each with parallel.comm_thread true and
# false, interleaved. Reports the step time, every rank's wait in started collectives and
# the share of their time hidden behind compute (metrics.jsonl comm_overlap).
#
#   bash bench/overlap_bench.sh        # as root; writes bench/results/overlap_DATE.md
#
# The link: RATE (default 1gbit) both ways. Delay is not emulated: this kernel has no netem
# qdisc (tc: "Specified qdisc kind is unknown"), so latency is the veth's own (tens of us),
# which is what the issue's 20-50 us would add up to anyway next to multi-MB messages.
# Model: 6 layers x 384 wide x 6 heads, seq 256, vocab 8192: 13.9M parameters, 23% of them
# in the tied embedding, about GPT-2 small's share (31%). (zero_bench's model keeps 80% there:
# the embedding's gradient is the last one backward produces, so nothing is left to hide its
# all-reduce behind.) Synthetic tokens, fp32, micro_batch 2, grad_accum 2, 1 compute thread
# per rank (bench/zero_common.sh's training arguments).
# Knobs: RATE, REPS (2), STEPS (6), BUILD_DIR (build-bench), OUT, CASES (NAME:GROUP:THREAD[:DEPTH]
# ...; NAME flat or hybrid, DEPTH parallel.overlap_depth, 0 or absent: the memory plan's choice),
# e.g. CASES="hybrid:2:true:1 hybrid:2:true:2" compares overlap depths.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=tests/slurm/lib.sh
. "$ROOT/tests/slurm/lib.sh"

if [ "${1:-}" != --in-sandbox ]; then
    cd "$ROOT"
    BUILD_DIR="${BUILD_DIR:-build-bench}"
    WORK="bench/work/overlap"
    # shellcheck source=bench/zero_common.sh
    . bench/zero_common.sh
    [ -f "$WORK/train_8k.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train_8k.bin" 400000 8192
    zt_require_root
    zt_ensure_slurm
    export RATE="${RATE:-1gbit}" REPS="${REPS:-2}" STEPS="${STEPS:-6}"
    export OUT="${OUT:-bench/results/overlap_$(date +%F).md}"
    export ZT_LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
    zt_enter_sandbox "$0" "$ROOT/$BUILD_DIR/bin" "$ROOT"   # does not return
fi
shift
BIN_DIR="$1"
SRC="$2"
export PATH="$PATH:/usr/sbin:/sbin"
WORK="$SRC/bench/work/overlap"
zt_sandbox_init
zt_scratch zt-overlap
zt_start_cluster --nodes 2
export OMPI_MCA_btl_tcp_if_include="$ZT_SLURM_SUBNET" OMPI_MCA_oob_tcp_if_include="$ZT_SLURM_SUBNET"

# The link: tbf on both ends of each node's veth pair (host side ztvI, node side eth0), so
# traffic each way between the nodes is held to RATE.
for i in 1 2; do
    pid="$(cat "$CLUSTER/run/netns-node$i.pid")"
    tc qdisc add dev "ztv$i" root tbf rate "$RATE" burst 256kb latency 50ms
    nsenter -t "$pid" --net -- tc qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 50ms
done
tc qdisc show dev ztv1 >"$WORK/qdisc.txt"

cd "$SRC"
BUILD_DIR="$(dirname "$BIN_DIR")"
# shellcheck source=bench/zero_common.sh
. bench/zero_common.sh   # MODEL and TRAIN (the build is done already: nothing to do)
MODEL=(--model.n_layer=6 --model.n_head=6 --model.n_embd=384 --model.seq_len=256 --model.vocab_size=8192)
TRAIN=("${TRAIN[@]/#--data.train=*/--data.train=$WORK/train_8k.bin}" --parallel.zero_stage=3 --checkpoint.every=0)
CASES="${CASES:-flat:4:true flat:4:false hybrid:2:true hybrid:2:false}"
echo "overlap_bench: RATE=$RATE, $REPS interleaved reps of $STEPS steps" >&2
for rep in $(seq 1 "$REPS"); do
    for c in $CASES; do
        IFS=: read -r name group thread depth <<<"$c"
        depth="${depth:-0}"
        d="$WORK/${name}_c${thread}_d${depth}_r$rep"
        rm -rf "$d"
        if ! timeout 600 srun -N 2 --ntasks-per-node=2 --overcommit --mpi=pmix "$ZT_BIN" "${MODEL[@]}" "${TRAIN[@]}" \
               --parallel.shard_group="$group" --parallel.comm_thread="$thread" --train.max_steps="$STEPS" \
               --parallel.overlap_depth="$depth" --run.dir="$d" >"$d.log" 2>&1; then
            echo "overlap_bench: $name comm_thread=$thread overlap_depth=$depth failed:" >&2
            tail -20 "$d.log" >&2
            exit 1
        fi
        echo "  rep $rep $name comm_thread=$thread overlap_depth=$depth: $(grep -m1 '^ztrain: ranks' "$d.log")" >&2
    done
done

/usr/bin/python3 "$SRC/bench/overlap_report.py" "$WORK" "$REPS" "$CASES" "$RATE" \
    "RATE=$RATE REPS=$REPS STEPS=$STEPS CASES=\"$CASES\" bash bench/overlap_bench.sh" >"$OUT"
cat "$OUT"
