#!/usr/bin/env bash
# CPU benchmark: ztrain (CPU backend, OpenBLAS) next to a nanoGPT-style PyTorch trainer
# (bench/torch_gpt.py) and the OpenBLAS sgemm ceiling (bench/sgemm_ceiling.cpp), in one run.
#
#   bash bench/cpu_bench.sh
#
# Configurations (fp32, 2 threads, grad_accum 1, no evaluation, synthetic random tokens):
#   a) GPT-2 124M: 12 layers x 768 wide x 12 heads, vocab 50257 (padded to 50304), seq 64, batch 4
#   b) small:      4 layers x 256 wide x 4 heads,   vocab 50257 (padded to 50304), seq 256, batch 4
#      (b keeps the real GPT-2 vocabulary, so the LM head/embedding is ~80% of its weights.)
# Each configuration runs REPS times in the order ztrain, torch, sgemm_ceiling, ztrain, torch,
# sgemm_ceiling, ... so machine noise hits all three alike; the table shows medians over reps
# of each run's median tokens/s over the steps after the first 2.
#
# Writes bench/results/cpu_<YYYY-MM-DD>.md and prints the table. Scratch (build of the
# sgemm program, shards, run dirs, logs) goes to bench/work/ (git-ignored).
# Knobs (environment): REPS (3), STEPS_A (12), STEPS_B (12), THREADS (2), BUILD_DIR (build-bench),
# PYTHON (/usr/bin/python3: Debian's PyTorch), OUT (the results file), PROFILE_OPS (1: ztrain
# also records per-op times, ZT_PROFILE_OPS: two clock marks per backend call; 0 turns it off).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS_A="${STEPS_A:-12}"
STEPS_B="${STEPS_B:-12}"
THREADS="${THREADS:-2}"
PROFILE_OPS="${PROFILE_OPS:-1}"
BUILD_DIR="${BUILD_DIR:-build-bench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
DATE="$(date +%F)"
OUT="${OUT:-bench/results/cpu_${DATE}.md}"
WORK="bench/work"
CMDLINE="$(printf '%q ' bash bench/cpu_bench.sh "$@")"
ENVLINE="REPS=$REPS STEPS_A=$STEPS_A STEPS_B=$STEPS_B THREADS=$THREADS"
T_START=$(date +%s)
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

mkdir -p "$WORK" bench/results
rm -rf "$WORK/runs" && mkdir -p "$WORK/runs" "$WORK/logs"
RECORDS="$WORK/records.tsv"
PHASES="$WORK/phases.jsonl"  # one JSON object per ztrain run: median ms per phase and per op
: > "$RECORDS"
: > "$PHASES"

log() { printf '[cpu_bench %s] %s\n' "$(date +%T)" "$*" >&2; }

# --- build --------------------------------------------------------------------------------
log "building ztrain in $BUILD_DIR (Release, ZT_CUDA=OFF)"
build_ztrain() {
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF > "$WORK/logs/build.log" 2>&1 &&
        cmake --build "$BUILD_DIR" -j2 --target ztrain >> "$WORK/logs/build.log" 2>&1
}
if ! build_ztrain; then
    log "build failed (a file being edited elsewhere?); retrying in 60 s"
    sleep 60
    build_ztrain || { tail -30 "$WORK/logs/build.log"; exit 1; }
fi
ZTRAIN="$BUILD_DIR/bin/ztrain"

log "building sgemm_ceiling"
g++ -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/sgemm_ceiling.cpp -lopenblas \
    -o "$WORK/sgemm_ceiling"

"$PYTHON" -c 'import torch, numpy' 2> /dev/null ||
    { echo "cpu_bench: $PYTHON cannot import torch and numpy (Debian: python3-torch)" >&2; exit 1; }

# --- synthetic shards (llm.c format: 256 int32 header, then uint16 tokens) ------------------
if [ ! -f "$WORK/data/train_000.bin" ]; then
    log "writing synthetic shard $WORK/data/train_000.bin"
    mkdir -p "$WORK/data"
    "$PYTHON" - "$WORK/data/train_000.bin" <<'EOF'
import sys, numpy as np
n = 1 << 20  # 1M random tokens of the GPT-2 vocabulary
header = np.zeros(256, np.int32)
header[:3] = (20240520, 1, n)
toks = np.random.default_rng(1337).integers(0, 50257, n, dtype=np.uint16)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(toks.tobytes())
EOF
fi

# --- one measurement each ---------------------------------------------------------------
# peak RSS (MiB) from a /usr/bin/time -v log
# a key of the JSON object on the last line of stdin
jget() { "$PYTHON" -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
rss_mib() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$1"; }
# CPU share the run got (user+sys over wall, %; 200 = both cores busy for the whole run)
cpu_pct() { awk -F': ' '/Percent of CPU this job got/ {sub(/%/, "", $2); print $2}' "$1"; }

run_ztrain() {  # cfg rep steps layers heads embd seq batch
    local cfg=$1 rep=$2 steps=$3 L=$4 H=$5 C=$6 T=$7 B=$8
    local dir="$WORK/runs/ztrain_${cfg}_${rep}" tlog="$WORK/logs/ztrain_${cfg}_${rep}.time"
    rm -rf "$dir"
    ZT_PROFILE_OPS="$PROFILE_OPS" /usr/bin/time -v -o "$tlog" "$ZTRAIN" --backend=cpu \
        --model.n_layer="$L" --model.n_head="$H" --model.n_embd="$C" --model.seq_len="$T" \
        --model.vocab_size=50257 --model.vocab_pad_to=128 \
        --data.train="$WORK/data/train_000.bin" \
        --train.micro_batch="$B" --train.grad_accum=1 --train.max_steps="$steps" \
        --train.lr=3e-4 --train.warmup_steps=2 --train.eval_every=0 --train.sample_tokens=0 \
        --train.threads="$THREADS" --precision.dtype=fp32 --parallel.zero_stage=0 \
        --checkpoint.resume=never --run.dir="$dir" > "$WORK/logs/ztrain_${cfg}_${rep}.out" 2>&1 ||
        { tail -20 "$WORK/logs/ztrain_${cfg}_${rep}.out"; exit 1; }
    local tps
    tps=$("$PYTHON" - "$dir/metrics.jsonl" "$cfg" "$rep" "$PHASES" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "tokens_per_s" in r]
timed = [r for r in steps if r["step"] > 2] or steps
print(f"{statistics.median(r['tokens_per_s'] for r in timed):.3f}")
# Per-phase (and, with ZT_PROFILE_OPS, per-op) medians over the timed steps of this run.
ph = {"cfg": sys.argv[2], "rep": int(sys.argv[3])}
for k in ("step_ms", "zero_ms", "fwd_ms", "bwd_ms", "comm_ms", "opt_ms"):
    if k in timed[0]:
        ph[k] = statistics.median(r[k] for r in timed)
if "opt_ms" in timed[0]:  # per step, then the median (medians of parts do not add up)
    ph["other_ms"] = statistics.median(
        r["step_ms"] - sum(r[k] for k in ("zero_ms", "fwd_ms", "bwd_ms", "comm_ms", "opt_ms")) for r in timed)
if "ops_ms" in timed[0]:
    ph["ops_ms"] = {op: statistics.median(r["ops_ms"][op] for r in timed) for op in timed[0]["ops_ms"]}
with open(sys.argv[4], "a") as f:
    f.write(json.dumps(ph) + "\n")
EOF
)
    local rss wall
    rss=$(rss_mib "$tlog")
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tlog")
    printf 'ztrain\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$tps" "$rss" "$(cpu_pct "$tlog")" >> "$RECORDS"
    rm -rf "$dir/checkpoints"
    log "ztrain $cfg rep $rep: $tps tok/s, peak RSS $rss MiB, wall $wall"
}

run_torch() {  # cfg rep steps layers heads embd seq batch
    local cfg=$1 rep=$2 steps=$3 L=$4 H=$5 C=$6 T=$7 B=$8
    local tlog="$WORK/logs/torch_${cfg}_${rep}.time" olog="$WORK/logs/torch_${cfg}_${rep}.out"
    /usr/bin/time -v -o "$tlog" "$PYTHON" bench/torch_gpt.py --n-layer "$L" --n-head "$H" \
        --n-embd "$C" --seq-len "$T" --vocab 50257 --vocab-pad-to 128 --batch "$B" \
        --steps "$steps" --threads "$THREADS" > "$olog" 2>&1 || { tail -20 "$olog"; exit 1; }
    local tps rss wall
    tps=$(printf '%.3f' "$(jget tokens_per_s < "$olog")")
    rss=$(rss_mib "$tlog")
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tlog")
    printf 'torch\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$tps" "$rss" "$(cpu_pct "$tlog")" >> "$RECORDS"
    log "torch  $cfg rep $rep: $tps tok/s, peak RSS $rss MiB, wall $wall"
}

run_sgemm() {  # cfg rep layers embd seq batch
    local cfg=$1 rep=$2 L=$3 C=$4 T=$5 B=$6
    local olog="$WORK/logs/sgemm_${cfg}_${rep}.out" tlog="$WORK/logs/sgemm_${cfg}_${rep}.time"
    /usr/bin/time -v -o "$tlog" "$WORK/sgemm_ceiling" --layers "$L" --embd "$C" --bt $((B * T)) --seq "$T" \
        --vocab-padded 50304 --threads "$THREADS" --reps 3 > "$olog"
    local gf ceil
    gf=$(printf '%.2f' "$(jget gflops < "$olog")")
    ceil=$(printf '%.3f' "$(jget tokens_per_s_ceiling < "$olog")")
    printf 'sgemm\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$ceil" "$gf" "$(cpu_pct "$tlog")" >> "$RECORDS"
    log "sgemm  $cfg rep $rep: $gf GFLOP/s -> ceiling $ceil tok/s"
}

bench_cfg() {  # cfg steps layers heads embd seq batch
    local cfg=$1 steps=$2 L=$3 H=$4 C=$5 T=$6 B=$7 rep
    for rep in $(seq 1 "$REPS"); do
        run_ztrain "$cfg" "$rep" "$steps" "$L" "$H" "$C" "$T" "$B"
        run_torch "$cfg" "$rep" "$steps" "$L" "$H" "$C" "$T" "$B"
        run_sgemm "$cfg" "$rep" "$L" "$C" "$T" "$B"
    done
}

bench_cfg a "$STEPS_A" 12 12 768 64 4
bench_cfg b "$STEPS_B" 4 4 256 256 4
T_END=$(date +%s)
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"

# --- report -------------------------------------------------------------------------------
CPU_MODEL="$(lscpu | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}')"
CORES="$(lscpu | awk -F: '/^Core\(s\) per socket/ {gsub(/ /, "", $2); c=$2} /^Socket\(s\)/ {gsub(/ /, "", $2); s=$2} END {print c * s}')"
MEM="$(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
REV="$(git -C "$ROOT" rev-parse --short HEAD)"
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- src include CMakeLists.txt cmake 2> /dev/null)" ]; then
    REV="$REV (+ uncommitted changes in src/include/cmake)"
fi
TORCH_VER="$("$PYTHON" -c 'import torch; print(torch.__version__)')"
BLAS="$(readlink -f "$(ldconfig -p | awk '/libopenblas.so.0 / {print $NF; exit}')" 2> /dev/null || echo libopenblas)"

export PHASES DATE ENVLINE CMDLINE CPU_MODEL CORES MEM REV TORCH_VER BLAS BUILD_DIR THREADS PYTHON \
    STEPS_A STEPS_B REPS LOAD_START LOAD_END
export NPROC="$(nproc)" ELAPSED="$((T_END - T_START))" UTC_NOW="$(date -u '+%Y-%m-%d %H:%M UTC')"
"$PYTHON" - "$RECORDS" "$OUT" <<'EOF'
import os, statistics, sys
from collections import defaultdict
E = os.environ
rec = defaultdict(lambda: defaultdict(list))  # rec[cfg][kind] = [(v1, v2, cpu%), ...] in rep order
for line in open(sys.argv[1]):
    kind, cfg, rep, v1, v2, cpu = line.split("\t")
    rec[cfg][kind].append((float(v1), float(v2), float(cpu)))
med = statistics.median
names = {"a": "a) GPT-2 124M: 12L x 768 x 12H, seq 64, batch 4",
         "b": "b) 4L x 256 x 4H, seq 256, batch 4, vocab 50257"}
dims = {"a": (12, 768, 64), "b": (4, 256, 256)}  # L, C, T; Vp = 50304, LM head tied to wte
params = {k: (50304 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C) / 1e6 for k, (L, C, T) in dims.items()}
table = ["| model | params | ztrain tok/s | PyTorch tok/s | ratio ztrain/PyTorch | ztrain peak RSS MiB | PyTorch peak RSS MiB |",
         "|---|---:|---:|---:|---:|---:|---:|"]
ceil = ["| model | sgemm GFLOP/s | tok/s ceiling | ztrain % of ceiling | PyTorch % of ceiling |",
        "|---|---:|---:|---:|---:|"]
raw = ["| config | rep | ztrain tok/s (CPU %) | PyTorch tok/s (CPU %) | ratio | sgemm GFLOP/s (CPU %) | ceiling tok/s |",
       "|---|---:|---:|---:|---:|---:|---:|"]
best = ["| model | ztrain tok/s | PyTorch tok/s | ratio | sgemm GFLOP/s | tok/s ceiling | ztrain % of ceiling | PyTorch % of ceiling |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
for cfg in ("a", "b"):
    z, t, s = rec[cfg]["ztrain"], rec[cfg]["torch"], rec[cfg]["sgemm"]
    if not (z and t and s):
        continue
    zt, tt = med([x[0] for x in z]), med([x[0] for x in t])
    zr, tr = med([x[1] for x in z]), med([x[1] for x in t])
    ct, gf = med([x[0] for x in s]), med([x[1] for x in s])
    table.append(f"| {names[cfg]} | {params[cfg]:.1f}M | {zt:.1f} | {tt:.1f} | {zt / tt:.2f} | {zr:.0f} | {tr:.0f} |")
    ceil.append(f"| {names[cfg]} | {gf:.1f} | {ct:.1f} | {100 * zt / ct:.0f}% | {100 * tt / ct:.0f}% |")
    for i, (zz, tq, ss) in enumerate(zip(z, t, s), 1):
        raw.append(f"| {cfg} | {i} | {zz[0]:.1f} ({zz[2]:.0f}%) | {tq[0]:.1f} ({tq[2]:.0f}%) | {zz[0] / tq[0]:.2f} | "
                   f"{ss[1]:.1f} ({ss[2]:.0f}%) | {ss[0]:.1f} |")
    zb, tb, sb = max(x[0] for x in z), max(x[0] for x in t), max(s)
    best.append(f"| {names[cfg]} | {zb:.1f} | {tb:.1f} | {zb / tb:.2f} | {sb[1]:.1f} | {sb[0]:.1f} | "
                f"{100 * zb / sb[0]:.0f}% | {100 * tb / sb[0]:.0f}% |")
table, ceil, raw, best = "\n".join(table), "\n".join(ceil), "\n".join(raw), "\n".join(best)
# ztrain's own per-phase times (metrics.jsonl fields), median over reps of each run's median.
import json
runs = defaultdict(list)
for line in open(E["PHASES"]):
    if line.strip():
        r = json.loads(line)
        runs[r["cfg"]].append(r)
phase_keys = [("step_ms", "step"), ("zero_ms", "zero grads"), ("fwd_ms", "forward"), ("bwd_ms", "backward"),
              ("comm_ms", "comm wait"), ("opt_ms", "optimizer")]
phases = ["| model | " + " | ".join(n for _, n in phase_keys) + " | other |",
          "|---|" + "---:|" * (len(phase_keys) + 1)]
op_names = []
for cfg in ("a", "b"):
    if not runs[cfg]:
        continue
    m = {k: med([r.get(k, float("nan")) for r in runs[cfg]]) for k, _ in phase_keys}
    other = med([r.get("other_ms", float("nan")) for r in runs[cfg]])
    phases.append(f"| {names[cfg]} | " + " | ".join(f"{m[k]:.1f}" for k, _ in phase_keys) + f" | {other:.1f} |")
    for r in runs[cfg]:
        for op in r.get("ops_ms", {}):
            if op not in op_names:
                op_names.append(op)
ops = ["| model | " + " | ".join(op_names) + " |", "|---|" + "---:|" * len(op_names)]
for cfg in ("a", "b"):
    with_ops = [r["ops_ms"] for r in runs[cfg] if "ops_ms" in r]
    if with_ops:
        ops.append(f"| {names[cfg]} | " + " | ".join(f"{med([o.get(op, float('nan')) for o in with_ops]):.1f}"
                                                   for op in op_names) + " |")
phases = "\n".join(phases)
ops = "\n".join(ops) if op_names else "(per-op times off: PROFILE_OPS=0)"
md = f"""# ztrain CPU benchmark, {E['DATE']}

Command (from the repository root): `{E['ENVLINE']} {E['CMDLINE'].strip()}`; measurement took {E['ELAPSED']} s.

- Machine: {E['CPU_MODEL']}, {E['CORES']} cores, nproc {E['NPROC']}, {E['MEM']} RAM; load average {E['LOAD_START']} at start, {E['LOAD_END']} at end (a shared, noisy machine)
- Date: {E['UTC_NOW']}
- ztrain revision: {E['REV']}; `{E['BUILD_DIR']}` Release, ZT_CUDA=OFF; one process (no mpirun), `--train.threads={E['THREADS']}`
- PyTorch {E['TORCH_VER']} (`{E['PYTHON']} bench/torch_gpt.py`, `torch.set_num_threads({E['THREADS']})`, AdamW foreach, plain masked-softmax attention)
- BLAS: {E['BLAS']} (ztrain: 1 OpenBLAS thread per OpenMP thread; PyTorch and sgemm_ceiling: OpenBLAS's own pool)
- Settings: fp32, grad_accum 1, eval off, AdamW (weight decay 0.1 on 2-D weights), grad clip 1.0; synthetic uniform-random tokens over the GPT-2 vocabulary (50257, padded to 50304, LM head tied); steps per run: a {E['STEPS_A']}, b {E['STEPS_B']}; {E['REPS']} alternating reps per config (ztrain, PyTorch, sgemm, ztrain, PyTorch, sgemm, ...)
- tok/s: median over reps of each run's median per-step tokens/s, steps 1-2 excluded; a timed step is zero_grad + forward + backward + grad-norm clip + AdamW. Peak RSS: `/usr/bin/time -v` "Maximum resident set size", median over reps.

## ztrain vs PyTorch

{table}

## ztrain per-phase breakdown (ms per step)

From `metrics.jsonl` (fields `step_ms zero_ms fwd_ms bwd_ms comm_ms opt_ms`), median over the timed steps of
each run, then median over reps. forward includes the LM head and softmax cross-entropy; optimizer covers the
overflow check, grad norm, clipping, AdamW and parameter re-assembly; comm wait is the time spent waiting for
gradient reductions after backward (zero in one process); other = step minus the phases (data, bookkeeping).

{phases}

Per op (ms per step, `ZT_PROFILE_OPS=1`; forward and backward summed per kind unless the name says which):

{ops}

## sgemm ceiling (bench/sgemm_ceiling.cpp)

OpenBLAS cblas_sgemm with {E['THREADS']} threads at each configuration's forward, dgrad and wgrad shapes (M = B*T rows; qkv, attn proj, fc, mlp proj x n_layer, LM head x 1), median of 3 calls per shape; FLOP-weighted rate = sum(FLOPs) / sum(time). Ceiling tok/s = rate / (6 * N_mm + 12 * L * T * C), N_mm = 12 * L * C^2 + C * Vp: a trainer that spends time only in GEMMs at this rate (attention products assumed at the same rate; LN, GELU, softmax, cross-entropy, AdamW free).

{ceil}

## Best rep of each (the least disturbed by other jobs on the machine)

{best}

## Per-rep figures (in run order)

CPU % is `/usr/bin/time`'s "Percent of CPU this job got" over the whole run (start-up included): at
2 threads, well under 200% means other jobs took cores during that run.

{raw}
"""
with open(sys.argv[2], "w") as f:
    f.write(md)
print(table)
print()
print(phases)
print()
print(ops)
print()
print(ceil)
EOF
log "wrote $OUT"
