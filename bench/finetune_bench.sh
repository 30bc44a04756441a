#!/usr/bin/env bash
# Fine-tuning throughput: the same examples and model trained three ways, interleaved, in
# target tokens per second (metrics.jsonl tokens_per_s counts targets on example shards) and
# the share of computed positions that are padding (wasted FLOPs):
#   pack        data.packing = pack: whole examples first-fit into rows of seq_len
#   pad         data.packing = pad: one example per row, each micro-batch as long as its
#               longest example (dynamic padding)
#   pad-to-max  every row seq_len positions whatever the example (padding="max_length"):
#               ztrain has no such mode, so it is measured as what it computes, a
#               pretraining run of full rows at the same seq_len, and credited with the
#               examples' mean targets per row
# and pretraining itself (full rows, every position a target) for the "within 10% of
# pretraining tokens/s" comparison.
#
#   bash bench/finetune_bench.sh          # writes bench/results/finetune_DATE.md
#
# Examples: N (2000) prompt/completion pairs of random words, lengths log-normal between 16
# and 1024 bytes (byte tokenizer), seq_len 1024. Model: GPT-2, 4 layers x 128 wide x 4
# heads. Knobs: N, STEPS (12), REPS (2), THREADS (2), BUILD_DIR (build-bench), OUT.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
N="${N:-2000}"
STEPS="${STEPS:-12}"
REPS="${REPS:-2}"
THREADS="${THREADS:-2}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
OUT="${OUT:-bench/results/finetune_$(date +%F).md}"
WORK="bench/work/finetune"
mkdir -p "$WORK" bench/results
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/build.log" 2>&1
cmake --build "$BUILD_DIR" -j2 --target ztrain zt-prepare >> "$WORK/build.log" 2>&1
BIN="$BUILD_DIR/bin"

# The examples: lengths log-normal (median ~120 bytes), clipped to [16, 1024] in total.
/usr/bin/python3 - "$WORK/examples.jsonl" "$N" <<'EOF'
import json, math, random, sys
path, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(20261127)
words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "seven", "north", "quiet", "paper", "green"]
def text(k):
    s = ""
    while len(s) < k:
        s += rng.choice(words) + " "
    return s[:k]
with open(path, "w") as f:
    for _ in range(n):
        total = int(min(1020, max(16, math.exp(rng.gauss(math.log(120), 1.0)))))
        p = max(4, total // 3)
        f.write(json.dumps({"prompt": text(p), "completion": text(max(4, total - p))}) + "\n")
EOF
rm -rf "$WORK/ex"
"$BIN/zt-prepare" --input "$WORK/examples.jsonl" --output "$WORK/ex" --tokenizer byte --val-fraction 0 \
    > "$WORK/prepare.log" 2>&1
# Pretraining data for pad-to-max and the pretraining reference: the same bytes as a stream.
[ -f "$WORK/train.bin" ] || /usr/bin/python3 bench/make_shard.py "$WORK/train.bin" 2000000 257

MODEL=(--model.n_layer=4 --model.n_head=4 --model.n_embd=128 --model.seq_len=1024 --model.vocab_size=257
       --model.vocab_pad_to=64)
TRAIN=(--train.micro_batch=2 --train.grad_accum=1 --train.max_steps="$STEPS" --train.eval_every=0
       --train.sample_tokens=0 --train.threads="$THREADS" --train.warmup_steps=2 --checkpoint.every=0)
run() {  # run NAME ARGS...
    local name=$1 d
    shift
    d="$WORK/${name}_r$rep"
    rm -rf "$d"
    "$BIN/ztrain" "${MODEL[@]}" "${TRAIN[@]}" --run.dir="$d" "$@" > "$d.log" 2>&1 ||
        { echo "finetune_bench: $name failed:"; tail -5 "$d.log"; exit 1; }
}
for rep in $(seq 1 "$REPS"); do
    run pack --data.train="$WORK/ex/train_*.bin" --data.packing=pack --data.overlong=truncate
    run pad --data.train="$WORK/ex/train_*.bin" --data.packing=pad --data.overlong=truncate
    run full --data.train="$WORK/train.bin"
    echo "finetune_bench: rep $rep done" >&2
done

/usr/bin/python3 - "$WORK" "$REPS" "$N" "$LOAD_START" \
    "N=$N STEPS=$STEPS REPS=$REPS THREADS=$THREADS bash bench/finetune_bench.sh" > "$OUT" <<'EOF'
import glob, json, os, random, statistics, struct, subprocess, sys, time
work, reps, n, load_start, command = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
T = 1024

def recs(name, rep):
    with open(os.path.join(work, f"{name}_r{rep}", "metrics.jsonl")) as f:
        return [r for r in map(json.loads, f) if "step_ms" in r][2:]

# The examples as stored (version 3 shard): lengths and targets per example.
lengths, targets = [], []
for path in sorted(glob.glob(os.path.join(work, "ex", "train_*.bin"))):
    data = open(path, "rb").read()
    h = struct.unpack("<256i", data[:1024])
    ntok, nex, width = h[2], h[3], h[4]
    off = 1024 + ntok * width
    tgt = data[off:off + ntok]
    starts = struct.unpack(f"<{nex + 1}I", data[off + ntok:off + ntok + 4 * (nex + 1)])
    for e in range(nex):
        a, b = starts[e], min(starts[e + 1], starts[e] + T + 1)  # overlong: truncated to T + 1 tokens
        lengths.append(b - a - 1)  # input positions
        targets.append(sum(tgt[a + 1:b]))
mean_targets = statistics.mean(targets)

def median_of(name, key):
    return statistics.median(statistics.median(r[key] for r in recs(name, rep)) for rep in range(1, reps + 1))
rows = []
for name in ("pack", "pad"):
    per_rep = [round(statistics.median(r["tokens_per_s"] for r in recs(name, rep))) for rep in range(1, reps + 1)]
    rows.append((name, per_rep, median_of(name, "tokens_per_s")))

# Padding share of the positions each mode computes, over a shuffled epoch (the bench's own
# shuffle, not ztrain's: the shares are expectations). pad: micro-batches of 2 as long as
# their longest; pack: first-fit into rows of T.
rng = random.Random(1)
order = lengths[:]
rng.shuffle(order)
pad_computed = sum(2 * max(order[i:i + 2]) for i in range(0, len(order), 2))
free = []
for n_pos in order:
    for i, f in enumerate(free):
        if f >= n_pos:
            free[i] -= n_pos
            break
    else:
        free.append(T - n_pos)
waste = {"pack": 1 - sum(order) / (len(free) * T), "pad": 1 - sum(order) / pad_computed}
full_tps = median_of("full", "tokens_per_s")
full_rows_per_s = full_tps / T  # a pretraining row: T targets, T positions
pad_to_max_tps = full_rows_per_s * mean_targets

out = []
git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out.append("# Fine-tuning throughput: packing vs dynamic padding vs pad-to-max\n")
out.append(f"- command: `{command}`")
out.append(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, git {git}")
out.append(f"- machine: {os.cpu_count()} cores, shared; load average {load_start} at the start, "
           f"{' '.join(open('/proc/loadavg').read().split()[:3])} at the end")
out.append(f"- examples: {len(lengths)} prompt/completion pairs, byte tokenizer, input positions per example "
           f"median {statistics.median(lengths):.0f}, mean {statistics.mean(lengths):.0f}, max {max(lengths)}; "
           f"targets per example mean {mean_targets:.1f}")
out.append("- model: GPT-2, 4 layers x 128 wide x 4 heads, seq_len 1024, micro_batch 2, 1 rank, fp32\n")
out.append("| mode | target tok/s per rep | median | vs pad-to-max | padding share of computed positions |")
out.append("|---|---|---|---|---|")
mean_len = statistics.mean(lengths)
for name, per_rep, tps in rows:
    out.append(f"| {name} | {' '.join(map(str, per_rep))} | {round(tps)} | {tps / pad_to_max_tps:.2f}x | {waste[name]:.2f} |")
out.append(f"| pad-to-max (emulated) | - | {round(pad_to_max_tps)} | 1.00x | {1 - mean_len / T:.2f} |")
out.append(f"| pretraining, full rows (every position a target) | - | {round(full_tps)} | - | 0 |")
out.append("")
pack_tps = dict((r[0], r[2]) for r in rows)["pack"]
# Input tokens (real positions, prompts included) per second: targets/s x positions per target.
pack_inputs = pack_tps * sum(lengths) / sum(targets)
out.append(f"Packing is {pack_tps / pad_to_max_tps:.2f}x pad-to-max in target tokens/s (goal ≥ 2x). It processes "
           f"{round(pack_inputs)} input tokens/s (prompts included: a third of each example is prompt, not "
           f"target), {pack_inputs / full_tps:.2f}x pretraining's {round(full_tps)} at the same seq_len "
           f"(goal: within 10%). Pad-to-max is emulated: a full "
           f"pretraining row costs what a row padded to {T} costs, and it carries the examples' mean "
           f"{mean_targets:.1f} targets instead of {T}. The padding shares count positions; packed rows "
           f"also compute attention across example boundaries that the mask then discards (the CPU "
           f"segmented attention computes the whole causal triangle).")
print("\n".join(out))
EOF
cat "$OUT"
