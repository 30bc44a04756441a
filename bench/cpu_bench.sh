#!/usr/bin/env bash
# CPU benchmark: ztrain (CPU backend, OpenBLAS) next to a PyTorch trainer of the same model
# (bench/torch_gpt.py: nanoGPT-style GPT-2; bench/torch_llama.py: Llama) and the OpenBLAS sgemm
# ceiling (bench/sgemm_ceiling.cpp), in one run.
#
#   bash bench/cpu_bench.sh [CONFIG ...]    # CONFIG: a, b, llama; gpt2 = a b; all = a b llama
#
# Configurations (fp32, 2 threads, grad_accum 1, no evaluation, synthetic random tokens):
#   a) GPT-2 124M: 12 layers x 768 wide x 12 heads, vocab 50257 (padded to 50304), seq 64, batch 4
#   a1k) GPT-2 124M as a, at seq 1024 (the CPU bf16 issue's shape)
#   b) small:      4 layers x 256 wide x 4 heads,   vocab 50257 (padded to 50304), seq 256, batch 4
#      (b keeps the real GPT-2 vocabulary, so the LM head/embedding is ~80% of its weights.)
#   llama) SmolLM2-135M's shape (model.arch = llama, as inputs/smollm2_135m.ini): 30 layers x
#      576 wide, 9 query heads sharing 3 key/value heads (hs 64), SwiGLU 1536, RoPE theta 1e5,
#      vocab 49152 (a multiple of 128: no padding), LM head tied, seq 256, batch 4
# Without arguments: a and b (the GPT-2 rows).
# Each configuration runs REPS times in the order ztrain, torch, sgemm_ceiling, ztrain, torch,
# sgemm_ceiling, ... so machine noise hits all three alike; the table shows medians over reps
# of each run's median tokens/s over the steps after the first 2.
#
# Writes bench/results/cpu_<YYYY-MM-DD>.md (cpu_llama_<YYYY-MM-DD>.md when llama is the only
# configuration) and prints the table. Scratch (build of the
# sgemm program, shards, run dirs, logs) goes to bench/work/ (git-ignored).
# Knobs (environment): BF16 (0; 1: each rep also runs ztrain with precision.dtype=bf16,
# PyTorch under torch.autocast("cpu", dtype=torch.bfloat16) and the oneDNN bf16 products-only
# ceiling (bench/bf16_ceiling.cpp), reported in a bf16 table),
# REPS (3), STEPS_A (12), STEPS_K (5: a1k), STEPS_B (12), STEPS_L (12: llama), THREADS (2),
# BUILD_DIR (build-bench),
# PYTHON (/usr/bin/python3: Debian's PyTorch), OUT (the results file), PROFILE_OPS (1: ztrain
# also records per-op times, ZT_PROFILE_OPS: two clock marks per backend call; 0 turns it off),
# MALLOC_TUNE (1: every run gets glibc settings that keep freed memory in the heap,
# MALLOC_MMAP_THRESHOLD_=4 GiB, MALLOC_TRIM_THRESHOLD_=64 GiB, MALLOC_TOP_PAD_=1 GiB, so PyTorch
# reuses its per-step tensors instead of page-faulting fresh mmaps every step: 2.2x faster
# steps for a 2-layer SmolLM2 on 2026-11-24; ztrain allocates once and is not affected;
# 0: glibc's defaults, as the GPT-2 results up to 2026-11-22 were measured).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
REPS="${REPS:-3}"
STEPS_A="${STEPS_A:-12}"
STEPS_B="${STEPS_B:-12}"
STEPS_K="${STEPS_K:-5}"
STEPS_L="${STEPS_L:-12}"
THREADS="${THREADS:-2}"
BF16="${BF16:-0}"
PROFILE_OPS="${PROFILE_OPS:-1}"
MALLOC_TUNE="${MALLOC_TUNE:-1}"
if [ "$MALLOC_TUNE" = 1 ]; then
    export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=68719476736 MALLOC_TOP_PAD_=1073741824
fi
BUILD_DIR="${BUILD_DIR:-build-bench}"
PYTHON="${PYTHON:-/usr/bin/python3}"
DATE="$(date +%F)"
CONFIGS=()
for arg in "${@:-gpt2}"; do
    case "$arg" in
        a | a1k | b | llama) CONFIGS+=("$arg") ;;
        gpt2) CONFIGS+=(a b) ;;
        all) CONFIGS+=(a b llama) ;;
        *) echo "cpu_bench: unknown configuration '$arg' (a, a1k, b, llama, gpt2, all)" >&2; exit 2 ;;
    esac
done
if [ "${CONFIGS[*]}" = llama ]; then
    OUT="${OUT:-bench/results/cpu_llama_${DATE}.md}"
else
    OUT="${OUT:-bench/results/cpu_${DATE}.md}"
fi
WORK="bench/work"
CMDLINE="$(printf '%q ' bash bench/cpu_bench.sh "$@")"
ENVLINE="REPS=$REPS"
for cfg in "${CONFIGS[@]}"; do
    case "$cfg" in
        a) ENVLINE="$ENVLINE STEPS_A=$STEPS_A" ;;
        a1k) ENVLINE="$ENVLINE STEPS_K=$STEPS_K" ;;
        b) ENVLINE="$ENVLINE STEPS_B=$STEPS_B" ;;
        llama) ENVLINE="$ENVLINE STEPS_L=$STEPS_L" ;;
    esac
done
ENVLINE="$ENVLINE THREADS=$THREADS MALLOC_TUNE=$MALLOC_TUNE"
[ "$BF16" = 1 ] && ENVLINE="$ENVLINE BF16=1"
T_START=$(date +%s)
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

mkdir -p "$WORK" bench/results
rm -rf "$WORK/runs" && mkdir -p "$WORK/runs" "$WORK/logs"
RECORDS="$WORK/records.tsv"
CFGS="$WORK/configs.tsv"     # one line per configuration measured: its shape, for the report
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

rm -f "$WORK/openblas_core"
log "building sgemm_ceiling"
g++ -O2 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/sgemm_ceiling.cpp -lopenblas \
    -o "$WORK/sgemm_ceiling"

if [ "$BF16" = 1 ]; then
    log "building bf16_ceiling"
    g++ -O2 -fopenmp bench/bf16_ceiling.cpp -ldnnl -o "$WORK/bf16_ceiling"
fi

"$PYTHON" -c 'import torch, numpy' 2> /dev/null ||
    { echo "cpu_bench: $PYTHON cannot import torch and numpy (Debian: python3-torch)" >&2; exit 1; }

# --- synthetic shards (llm.c format: 256 int32 header, then uint16 tokens) ------------------
write_shard() {  # file vocab: 1M uniform-random token ids in [0, vocab)
    [ -f "$1" ] && return 0
    log "writing synthetic shard $1"
    mkdir -p "$(dirname "$1")"
    "$PYTHON" - "$1" "$2" <<'EOF'
import sys, numpy as np
n = 1 << 20
header = np.zeros(256, np.int32)
header[:3] = (20240520, 1, n)
toks = np.random.default_rng(1337).integers(0, int(sys.argv[2]), n, dtype=np.uint16)
with open(sys.argv[1], "wb") as f:
    f.write(header.tobytes())
    f.write(toks.tobytes())
EOF
}

# --- configurations -----------------------------------------------------------------------
# cfg_set CFG sets the shape of configuration CFG: ARCH L H KV C F T B V VP STEPS SHARD NAME
# (KV and F: Llama's key/value heads and SwiGLU width; 0 for GPT-2).
cfg_set() {
    case "$1" in
        a) ARCH=gpt2 L=12 H=12 KV=0 C=768 F=0 T=64 B=4 V=50257 STEPS=$STEPS_A
           NAME="a) GPT-2 124M: 12L x 768 x 12H, seq 64, batch 4" ;;
        a1k) ARCH=gpt2 L=12 H=12 KV=0 C=768 F=0 T=1024 B=4 V=50257 STEPS=$STEPS_K
           NAME="a1k) GPT-2 124M: 12L x 768 x 12H, seq 1024, batch 4" ;;
        b) ARCH=gpt2 L=4 H=4 KV=0 C=256 F=0 T=256 B=4 V=50257 STEPS=$STEPS_B
           NAME="b) 4L x 256 x 4H, seq 256, batch 4, vocab 50257" ;;
        llama) ARCH=llama L=30 H=9 KV=3 C=576 F=1536 T=256 B=4 V=49152 STEPS=$STEPS_L
           NAME="llama) SmolLM2-135M: 30L x 576 x 9H/3KV, ffn 1536, seq 256, batch 4" ;;
    esac
    VP=$(((V + 127) / 128 * 128))  # model.vocab_pad_to=128
    SHARD="$WORK/data/train_000.bin"  # token ids of the GPT-2 vocabulary
    [ "$V" = 50257 ] || SHARD="$WORK/data/train_v${V}_000.bin"
}
: > "$CFGS"
for cfg in "${CONFIGS[@]}"; do
    cfg_set "$cfg"
    write_shard "$SHARD" "$V"
    printf '%s\t' "$cfg" "$ARCH" "$L" "$H" "$KV" "$C" "$F" "$T" "$B" "$V" "$VP" "$STEPS" >> "$CFGS"
    printf '%s\n' "$NAME" >> "$CFGS"
done

# --- one measurement each ---------------------------------------------------------------
# peak RSS (MiB) from a /usr/bin/time -v log
# a key of the JSON object on the last line of stdin
jget() { "$PYTHON" -c 'import json, sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])[sys.argv[1]])' "$1"; }
rss_mib() { awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2 / 1024}' "$1"; }
# CPU share the run got (user+sys over wall, %; 200 = both cores busy for the whole run)
cpu_pct() { awk -F': ' '/Percent of CPU this job got/ {sub(/%/, "", $2); print $2}' "$1"; }

# run_ztrain / run_torch / run_sgemm CFG REP: one measurement of configuration CFG, whose
# shape cfg_set has set.
run_ztrain() {  # cfg rep [dtype: fp32 (default) or bf16]
    local cfg=$1 rep=$2 dtype=${3:-fp32}
    local kind=ztrain
    [ "$dtype" = fp32 ] || kind="ztrain_$dtype"
    local dir="$WORK/runs/${kind}_${cfg}_${rep}" tlog="$WORK/logs/${kind}_${cfg}_${rep}.time"
    local olog="$WORK/logs/${kind}_${cfg}_${rep}.out"
    local arch_args=()
    [ "$ARCH" = llama ] && arch_args=(--model.arch=llama --model.n_kv_head="$KV" --model.ffn_dim="$F"
        --model.rope_theta=100000 --model.tie_embeddings=true)
    rm -rf "$dir"
    ZT_PROFILE_OPS="$PROFILE_OPS" /usr/bin/time -v -o "$tlog" "$ZTRAIN" --backend=cpu "${arch_args[@]}" \
        --model.n_layer="$L" --model.n_head="$H" --model.n_embd="$C" --model.seq_len="$T" \
        --model.vocab_size="$V" --model.vocab_pad_to=128 \
        --data.train="$SHARD" \
        --train.micro_batch="$B" --train.grad_accum=1 --train.max_steps="$STEPS" \
        --train.lr=3e-4 --train.warmup_steps=2 --train.eval_every=0 --train.sample_tokens=0 \
        --train.threads="$THREADS" --precision.dtype="$dtype" --parallel.zero_stage=0 \
        --checkpoint.resume=never --run.dir="$dir" > "$olog" 2>&1 || { tail -20 "$olog"; exit 1; }
    local tps
    tps=$("$PYTHON" - "$dir/metrics.jsonl" "$cfg" "$rep" "$PHASES" "$dtype" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steps = [r for r in rows if "tokens_per_s" in r]
timed = [r for r in steps if r["step"] > 2] or steps
print(f"{statistics.median(r['tokens_per_s'] for r in timed):.3f}")
# Per-phase (and, with ZT_PROFILE_OPS, per-op) medians over the timed steps of this run.
ph = {"cfg": sys.argv[2], "rep": int(sys.argv[3]), "dtype": sys.argv[5]}
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
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$cfg" "$rep" "$tps" "$rss" "$(cpu_pct "$tlog")" >> "$RECORDS"
    rm -rf "$dir/checkpoints"
    log "$kind $cfg rep $rep: $tps tok/s, peak RSS $rss MiB, wall $wall"
}

run_torch() {  # cfg rep [bf16: under torch.autocast]
    local cfg=$1 rep=$2 kind=torch autocast=()
    [ "${3:-fp32}" = bf16 ] && kind=torch_bf16 autocast=(--autocast-bf16)
    local tlog="$WORK/logs/${kind}_${cfg}_${rep}.time" olog="$WORK/logs/${kind}_${cfg}_${rep}.out"
    local script=bench/torch_gpt.py arch_args=()
    [ "$ARCH" = llama ] && script=bench/torch_llama.py arch_args=(--n-kv-head "$KV" --ffn-dim "$F"
        --rope-theta 100000)
    /usr/bin/time -v -o "$tlog" "$PYTHON" "$script" "${arch_args[@]}" "${autocast[@]}" --n-layer "$L" --n-head "$H" \
        --n-embd "$C" --seq-len "$T" --vocab "$V" --vocab-pad-to 128 --batch "$B" \
        --steps "$STEPS" --threads "$THREADS" > "$olog" 2>&1 || { tail -20 "$olog"; exit 1; }
    local tps rss wall
    tps=$(printf '%.3f' "$(jget tokens_per_s < "$olog")")
    rss=$(rss_mib "$tlog")
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tlog")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$cfg" "$rep" "$tps" "$rss" "$(cpu_pct "$tlog")" >> "$RECORDS"
    log "$kind $cfg rep $rep: $tps tok/s, peak RSS $rss MiB, wall $wall"
}

run_sgemm() {
    local cfg=$1 rep=$2
    local olog="$WORK/logs/sgemm_${cfg}_${rep}.out" tlog="$WORK/logs/sgemm_${cfg}_${rep}.time"
    local arch_args=()
    [ "$ARCH" = llama ] && arch_args=(--heads "$H" --kv-heads "$KV" --ffn "$F")
    /usr/bin/time -v -o "$tlog" "$WORK/sgemm_ceiling" --arch "$ARCH" "${arch_args[@]}" --layers "$L" \
        --embd "$C" --bt $((B * T)) --seq "$T" --vocab-padded "$VP" --threads "$THREADS" --reps 3 > "$olog"
    local gf ceil
    gf=$(printf '%.2f' "$(jget gflops < "$olog")")
    ceil=$(printf '%.3f' "$(jget tokens_per_s_ceiling < "$olog")")
    printf 'sgemm\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$ceil" "$gf" "$(cpu_pct "$tlog")" >> "$RECORDS"
    jget openblas_core < "$olog" > "$WORK/openblas_core"
    log "sgemm  $cfg rep $rep: $gf GFLOP/s -> ceiling $ceil tok/s"
}

run_bf16_ceiling() {  # cfg rep: sgemm_ceiling's figure for oneDNN's bf16 products
    local cfg=$1 rep=$2
    local olog="$WORK/logs/bf16_ceiling_${cfg}_${rep}.out" tlog="$WORK/logs/bf16_ceiling_${cfg}_${rep}.time"
    local arch_args=()
    [ "$ARCH" = llama ] && arch_args=(--heads "$H" --kv-heads "$KV" --ffn "$F")
    /usr/bin/time -v -o "$tlog" "$WORK/bf16_ceiling" --arch "$ARCH" "${arch_args[@]}" --layers "$L" \
        --embd "$C" --bt $((B * T)) --seq "$T" --vocab-padded "$VP" --threads "$THREADS" --reps 3 > "$olog"
    local gf ceil
    gf=$(printf '%.2f' "$(jget gflops < "$olog")")
    ceil=$(printf '%.3f' "$(jget tokens_per_s_ceiling < "$olog")")
    printf 'bf16_ceiling\t%s\t%s\t%s\t%s\t%s\n' "$cfg" "$rep" "$ceil" "$gf" "$(cpu_pct "$tlog")" >> "$RECORDS"
    log "bf16 ceiling $cfg rep $rep: $gf GFLOP/s -> ceiling $ceil tok/s ($(jget isa < "$olog"))"
}

bench_cfg() {  # cfg
    local cfg=$1 rep
    cfg_set "$cfg"
    for rep in $(seq 1 "$REPS"); do
        run_ztrain "$cfg" "$rep"
        run_torch "$cfg" "$rep"
        run_sgemm "$cfg" "$rep"
        if [ "$BF16" = 1 ]; then
            run_ztrain "$cfg" "$rep" bf16
            run_torch "$cfg" "$rep" bf16
            run_bf16_ceiling "$cfg" "$rep"
        fi
    done
}

for cfg in "${CONFIGS[@]}"; do
    bench_cfg "$cfg"
done
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
# OpenBLAS/OpenMP/malloc settings in the environment of every run (OPENBLAS_CORETYPE picks the
# kernels: an AVX2 kernel on an AVX-512 CPU runs sgemm at about half the rate).
RUN_ENV="$(env | grep -E '^(OPENBLAS_|OMP_|GOMP_|MALLOC_)' | sort | tr '\n' ' ')"
CPU_ISA="$(grep -qw avx512f /proc/cpuinfo && echo 'AVX-512' || echo 'AVX2')"
# The kernels OpenBLAS ran (its own choice for the CPU, or OPENBLAS_CORETYPE's), as sgemm_ceiling
# reported them: ztrain and PyTorch load the same library in the same environment.
BLAS_CORE="$(cat "$WORK/openblas_core" 2> /dev/null || echo unknown)"

export PHASES CFGS DATE ENVLINE CMDLINE CPU_MODEL CORES MEM REV TORCH_VER BLAS BUILD_DIR THREADS PYTHON \
    REPS LOAD_START LOAD_END RUN_ENV CPU_ISA BLAS_CORE
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
# The configurations measured, in run order (configs.tsv: written by cpu_bench.sh's cfg_set).
cfgs, shape, names = [], {}, {}
for line in open(E["CFGS"]):
    f = line.rstrip("\n").split("\t")
    cfg, arch = f[0], f[1]
    L, H, KV, C, F, T, B, V, Vp, steps = map(int, f[2:12])
    cfgs.append(cfg)
    shape[cfg] = dict(arch=arch, L=L, H=H, KV=KV, C=C, F=F, T=T, B=B, V=V, Vp=Vp, steps=steps)
    names[cfg] = f[12]


def n_params(s):
    L, C, F, T, Vp = s["L"], s["C"], s["F"], s["T"], s["Vp"]
    if s["arch"] == "llama":  # tied embedding, q|k|v, o_proj, gate|up|down, 2 RMSNorms per block, final norm
        qkv = (s["H"] + 2 * s["KV"]) * (C // s["H"])
        return Vp * C + L * (C * qkv + C * C + 3 * C * F + 2 * C) + C
    return Vp * C + T * C + L * (12 * C * C + 13 * C) + 2 * C  # GPT-2, LM head tied to wte


archs = sorted({shape[c]["arch"] for c in cfgs})
table = ["| model | params | ztrain tok/s | PyTorch tok/s | ratio ztrain/PyTorch | ztrain peak RSS MiB | PyTorch peak RSS MiB |",
         "|---|---:|---:|---:|---:|---:|---:|"]
ceil = ["| model | sgemm GFLOP/s | tok/s ceiling | ztrain % of ceiling | PyTorch % of ceiling |",
        "|---|---:|---:|---:|---:|"]
raw = ["| config | rep | ztrain tok/s (CPU %) | PyTorch tok/s (CPU %) | ratio | sgemm GFLOP/s (CPU %) | ceiling tok/s |",
       "|---|---:|---:|---:|---:|---:|---:|"]
best = ["| model | ztrain tok/s | PyTorch tok/s | ratio | sgemm GFLOP/s | tok/s ceiling | ztrain % of ceiling | PyTorch % of ceiling |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
for cfg in cfgs:
    z, t, s = rec[cfg]["ztrain"], rec[cfg]["torch"], rec[cfg]["sgemm"]
    if not (z and t and s):
        continue
    zt, tt = med([x[0] for x in z]), med([x[0] for x in t])
    zr, tr = med([x[1] for x in z]), med([x[1] for x in t])
    ct, gf = med([x[0] for x in s]), med([x[1] for x in s])
    table.append(f"| {names[cfg]} | {n_params(shape[cfg]) / 1e6:.1f}M | {zt:.1f} | {tt:.1f} | {zt / tt:.2f} | "
                 f"{zr:.0f} | {tr:.0f} |")
    ceil.append(f"| {names[cfg]} | {gf:.1f} | {ct:.1f} | {100 * zt / ct:.0f}% | {100 * tt / ct:.0f}% |")
    for i, (zz, tq, ss) in enumerate(zip(z, t, s), 1):
        raw.append(f"| {cfg} | {i} | {zz[0]:.1f} ({zz[2]:.0f}%) | {tq[0]:.1f} ({tq[2]:.0f}%) | {zz[0] / tq[0]:.2f} | "
                   f"{ss[1]:.1f} ({ss[2]:.0f}%) | {ss[0]:.1f} |")
    zb, tb, sb = max(x[0] for x in z), max(x[0] for x in t), max(s)
    best.append(f"| {names[cfg]} | {zb:.1f} | {tb:.1f} | {zb / tb:.2f} | {sb[1]:.1f} | {sb[0]:.1f} | "
                f"{100 * zb / sb[0]:.0f}% | {100 * tb / sb[0]:.0f}% |")
table, ceil, raw, best = "\n".join(table), "\n".join(ceil), "\n".join(raw), "\n".join(best)
# bf16 (BF16=1): ztrain bf16 vs its own fp32 runs and PyTorch's bf16 autocast, same reps.
bf16 = ["| model | ztrain fp32 tok/s | ztrain bf16 tok/s | bf16 / fp32 | PyTorch bf16 autocast tok/s | "
        "ztrain bf16 / PyTorch bf16 | peak RSS MiB fp32 / bf16 (ratio) | PyTorch bf16 peak RSS MiB | "
        "bf16 GEMM GFLOP/s | bf16 tok/s ceiling | ztrain bf16 % of it |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
bf16_raw = ["| config | rep | ztrain fp32 tok/s (CPU %) | ztrain bf16 tok/s (CPU %) | bf16 / fp32 | PyTorch bf16 tok/s (CPU %) |",
            "|---|---:|---:|---:|---:|---:|"]
for cfg in cfgs:
    z, zb, tb = rec[cfg]["ztrain"], rec[cfg]["ztrain_bf16"], rec[cfg]["torch_bf16"]
    if not (z and zb and tb):
        continue
    zt, zbt, tbt = med([x[0] for x in z]), med([x[0] for x in zb]), med([x[0] for x in tb])
    zr, zbr, tbr = med([x[1] for x in z]), med([x[1] for x in zb]), med([x[1] for x in tb])
    bc = rec[cfg]["bf16_ceiling"]
    bct, bgf = (med([x[0] for x in bc]), med([x[1] for x in bc])) if bc else (float("nan"), float("nan"))
    bf16.append(f"| {names[cfg]} | {zt:.1f} | {zbt:.1f} | {zbt / zt:.2f} | {tbt:.1f} | {zbt / tbt:.2f} | "
                f"{zr:.0f} / {zbr:.0f} ({zbr / zr:.2f}) | {tbr:.0f} | {bgf:.1f} | {bct:.1f} | {100 * zbt / bct:.0f}% |")
    for i, (a, b, c) in enumerate(zip(z, zb, tb), 1):
        bf16_raw.append(f"| {cfg} | {i} | {a[0]:.1f} ({a[2]:.0f}%) | {b[0]:.1f} ({b[2]:.0f}%) | {b[0] / a[0]:.2f} | "
                        f"{c[0]:.1f} ({c[2]:.0f}%) |")
bf16_section = ""
if len(bf16) > 2:
    bf16_section = ("\n## bf16: ztrain bf16 vs ztrain fp32 vs PyTorch bf16 autocast\n\n"
                    "ztrain `--precision.dtype=bf16` (oneDNN bf16 products where the CPU has bf16 instructions: "
                    "see its log's notes and `ztrain --env`) and PyTorch's forward under "
                    "`torch.autocast(\"cpu\", dtype=torch.bfloat16)`, run in the same reps as the fp32 rows "
                    "(order per rep: ztrain fp32, PyTorch fp32, sgemm, ztrain bf16, PyTorch bf16, bf16 ceiling). The bf16 "
                    "ceiling is sgemm_ceiling's formula with oneDNN bf16 products on bf16 inputs "
                    "(bench/bf16_ceiling.cpp; ztrain's own fp32 -> bf16 operand conversion not counted).\n\n"
                    + "\n".join(bf16) + "\n\nPer rep:\n\n" + "\n".join(bf16_raw) + "\n")
# ztrain's own per-phase times (metrics.jsonl fields), median over reps of each run's median.
import json
runs = defaultdict(list)
for line in open(E["PHASES"]):
    if line.strip():
        r = json.loads(line)
        if r.get("dtype", "fp32") == "fp32":  # the bf16 runs have their own table
            runs[r["cfg"]].append(r)
phase_keys = [("step_ms", "step"), ("zero_ms", "zero grads"), ("fwd_ms", "forward"), ("bwd_ms", "backward"),
              ("comm_ms", "comm wait"), ("opt_ms", "optimizer")]
phases = ["| model | " + " | ".join(n for _, n in phase_keys) + " | other |",
          "|---|" + "---:|" * (len(phase_keys) + 1)]
op_names = []
for cfg in cfgs:
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
for cfg in cfgs:
    with_ops = [r["ops_ms"] for r in runs[cfg] if "ops_ms" in r]
    if with_ops:
        ops.append(f"| {names[cfg]} | " + " | ".join(f"{med([o.get(op, float('nan')) for o in with_ops]):.1f}"
                                                   for op in op_names) + " |")
phases = "\n".join(phases)
ops = "\n".join(ops) if op_names else "(per-op times off: PROFILE_OPS=0)"
# Where ztrain's step goes, per op, largest first, as a share of the step (one list per config).
shares = []
for cfg in cfgs:
    with_ops = [r for r in runs[cfg] if "ops_ms" in r]
    if not with_ops:
        continue
    step = med([r["step_ms"] for r in with_ops])
    per_op = {op: med([r["ops_ms"].get(op, 0.0) for r in with_ops]) for op in op_names}
    top = sorted(per_op.items(), key=lambda kv: -kv[1])
    covered = sum(v for _, v in top)
    shares.append(f"- {names[cfg]}: step {step:.0f} ms = " +
                  ", ".join(f"{op} {v:.0f} ms ({100 * v / step:.1f}%)" for op, v in top if v >= 0.05) +
                  f"; outside any op {step - covered:.0f} ms ({100 * (step - covered) / step:.1f}%)")
shares = "\n".join(shares) if shares else ""

scripts = {"gpt2": "bench/torch_gpt.py", "llama": "bench/torch_llama.py"}
torch_scripts = " and ".join(f"`{E['PYTHON']} {scripts[a]}`" for a in archs)
shapes_desc = []
for cfg in cfgs:
    s = shape[cfg]
    vocab = f"vocabulary {s['V']}" + (f" padded to {s['Vp']}" if s["Vp"] != s["V"] else " (no padding)")
    if s["arch"] == "llama":
        shapes_desc.append(f"  - {cfg}: Llama (`--model.arch=llama`): {s['L']} layers x {s['C']} wide, {s['H']} query heads "
                           f"sharing {s['KV']} key/value heads (hs {s['C'] // s['H']}), RMSNorm, RoPE theta 1e5, "
                           f"SwiGLU {s['F']}, no biases, {vocab}, LM head tied; seq {s['T']}, batch {s['B']}; "
                           f"{s['steps']} steps per run")
    else:
        shapes_desc.append(f"  - {cfg}: GPT-2: {s['L']} layers x {s['C']} wide x {s['H']} heads, {vocab}, LM head tied; "
                           f"seq {s['T']}, batch {s['B']}; {s['steps']} steps per run")
shapes_desc = "\n".join(shapes_desc)
products, nmm = [], []
if "gpt2" in archs:
    products.append("GPT-2: qkv C->3C, attn proj C->C, fc C->4C, mlp proj 4C->C")
    nmm.append("GPT-2: 12 * L * C^2 + C * Vp")
if "llama" in archs:
    products.append("Llama: q|k|v C->(NH+2*NKV)*hs, o_proj C->C, gate|up C->2F, down F->C")
    nmm.append("Llama: L * (C * (NH+2*NKV)*hs + C^2 + 3 * C * F) + C * Vp")
title = "ztrain CPU benchmark" + (" (Llama: SmolLM2-135M's shape)" if archs == ["llama"] else "")
md = f"""# {title}, {E['DATE']}

Command (from the repository root): `{E['ENVLINE']} {E['CMDLINE'].strip()}`; measurement took {E['ELAPSED']} s.

- Machine: {E['CPU_MODEL']}, {E['CORES']} cores, nproc {E['NPROC']}, {E['MEM']} RAM; load average {E['LOAD_START']} at start, {E['LOAD_END']} at end (a shared, noisy machine)
- Date: {E['UTC_NOW']}
- ztrain revision: {E['REV']}; `{E['BUILD_DIR']}` Release, ZT_CUDA=OFF; one process (no mpirun), `--train.threads={E['THREADS']}`
- PyTorch {E['TORCH_VER']} ({torch_scripts}, `torch.set_num_threads({E['THREADS']})`, AdamW foreach, plain masked-softmax attention)
- BLAS: {E['BLAS']} (ztrain: 1 OpenBLAS thread per OpenMP thread; PyTorch: OpenBLAS's own pool; sgemm_ceiling: both, the faster per shape); the CPU has {E['CPU_ISA']}; OpenBLAS kernels: {E['BLAS_CORE']}
- Environment of every run: `{E['RUN_ENV'].strip() or '(no OPENBLAS_/OMP_/MALLOC_ variables)'}`
- Configurations:
{shapes_desc}
- Settings: fp32, grad_accum 1, eval off, AdamW (weight decay 0.1 on 2-D weights), grad clip 1.0; synthetic uniform-random tokens over each configuration's vocabulary; {E['REPS']} alternating reps per config (ztrain, PyTorch, sgemm, ztrain, PyTorch, sgemm, ...)
- tok/s: median over reps of each run's median per-step tokens/s, steps 1-2 excluded; a timed step is zero_grad + forward + backward + grad-norm clip + AdamW. Peak RSS: `/usr/bin/time -v` "Maximum resident set size", median over reps.

## ztrain vs PyTorch

{table}

## ztrain per-phase breakdown (ms per step)

From `metrics.jsonl` (fields `step_ms zero_ms fwd_ms bwd_ms comm_ms opt_ms`), median over the timed steps of
each run, then median over reps. forward includes the LM head and softmax cross-entropy; optimizer covers the
overflow check, grad norm, clipping, AdamW and parameter re-assembly; comm wait is the time spent waiting for
gradient reductions after backward (zero in one process); other = step minus the phases (data, bookkeeping).

{phases}

Per op (ms per step, `ZT_PROFILE_OPS=1`; forward and backward summed per kind unless the name says which;
matmul_fwd and matmul_bwd cover the blocks' products and the LM head alike):

{ops}

Largest first, as a share of the step (median step of the runs):

{shares}

## sgemm ceiling (bench/sgemm_ceiling.cpp)

OpenBLAS cblas_sgemm with {E['THREADS']} threads at each configuration's forward, dgrad and wgrad shapes (M = B*T rows; per block, x n_layer: {'; '.join(products)}; LM head C->Vp x 1), median of 3 calls per shape, each shape timed both on OpenBLAS's own pool and split into one slab per OpenMP thread calling 1-thread sgemm (ztrain's way), the faster of the two counted; FLOP-weighted rate = sum(FLOPs) / sum(time). Ceiling tok/s = rate / (6 * N_mm + 12 * L * T * C), N_mm = the weights of all products ({'; '.join(nmm)}): a trainer that spends time only in GEMMs at this rate (attention products assumed at the same rate; norms, activations, RoPE, softmax, cross-entropy, AdamW free).

{ceil}

## Best rep of each (the least disturbed by other jobs on the machine)

{best}

{bf16_section}
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
print(shares)
print()
print(ceil)
if bf16_section:
    print(bf16_section)
EOF
log "wrote $OUT"
