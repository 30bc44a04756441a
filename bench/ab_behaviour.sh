#!/usr/bin/env bash
# Behaviour A/B of two ztrain builds: the same small training runs on an OLD and a NEW binary,
# and every step's loss, grad_norm, lr, loss_scale, skipped, tokens (targets, rows on example
# shards) and every val_loss in rank 0's metrics.jsonl must be identical as printed
# (bench/ab_compare.py; no tolerance).
#
#   bash bench/ab_behaviour.sh [--old-ref REV | --old-bin DIR] [--new-bin DIR] [--quick]
#                              [--out FILE] [--case REGEX] [--keep]
#
#   --old-ref REV  old side: REV (default bc13bce), checked out as a git worktree in
#                  $ZT_AB_CACHE/<commit> (default /tmp/ztrain-ab) and built there once
#                  (build-ab/, -DZT_CUDA=OFF, ccache); later runs reuse it
#   --old-bin DIR  old side: the ztrain and zt-prepare in DIR (or DIR/bin) instead
#   --new-bin DIR  new side: default this tree, built into build-ab/ with the same flags
#   --quick        9 of the cases (marked q in CASES below) for fast iteration
#   --out FILE     also write the results as markdown (e.g. bench/results/ab_behaviour_<date>.md)
#   --case REGEX   only the cases whose name matches REGEX (grep -E)
#   --keep         keep the scratch directory (runs, logs) and print where it is
#
# Environment: ZT_AB_CACHE (old builds), ZT_AB_JOBS (build jobs, 2), ZT_AB_TIMEOUT (seconds per
# run, 300), ZT_AB_CORPUS (text for zt-prepare and the fine-tuning examples,
# /usr/share/games/fortunes), and ZT_AB_PERTURB: extra ztrain overrides for the NEW runs only
# (e.g. --train.lr=0.0100001, or --train.grad_clip=0.99999, which leaves lr alone and changes
# only the losses and gradient norms), to check that the script does catch a difference.
# The full run takes about 4 minutes on 2 busy cores once both sides are built (--quick: 30 s).
# Exit status: 0 when every case passes, 1 otherwise, 2 on bad usage or a failed build.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
COMMAND="bash bench/ab_behaviour.sh${*:+ $*}"
JOBS=${ZT_AB_JOBS:-2}
RUN_TIMEOUT=${ZT_AB_TIMEOUT:-300}
CORPUS=${ZT_AB_CORPUS:-/usr/share/games/fortunes}
CACHE=${ZT_AB_CACHE:-/tmp/ztrain-ab}

die() { echo "ab_behaviour: error: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

old_ref=bc13bce old_ref_given=0 old_bin="" new_bin="" quick=0 out="" only="" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --old-ref) [ $# -ge 2 ] || die "--old-ref needs a revision"; old_ref=$2; old_ref_given=1; shift ;;
        --old-bin) [ $# -ge 2 ] || die "--old-bin needs a directory"; old_bin=$2; shift ;;
        --new-bin) [ $# -ge 2 ] || die "--new-bin needs a directory"; new_bin=$2; shift ;;
        --out) [ $# -ge 2 ] || die "--out needs a file name"; out=$2; shift ;;
        --case) [ $# -ge 2 ] || die "--case needs a regular expression"; only=$2; shift ;;
        --quick) quick=1 ;;
        --keep) keep=1 ;;
        -h | --help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[ -z "$old_bin" ] || [ "$old_ref_given" = 0 ] || die "--old-ref and --old-bin exclude each other"
for tool in git cmake python3 mpiexec timeout; do
    command -v "$tool" > /dev/null || die "$tool not found (bash .ci/setup.sh installs the dependencies)"
done
[ -d "$CORPUS" ] || [ -f "$CORPUS" ] || die "no corpus at $CORPUS (ZT_AB_CORPUS; .ci/setup.sh installs fortunes)"

# ---- binaries -----------------------------------------------------------------------------
# build SRC: configures SRC/build-ab on first use (CPU only, Release, ccache), then builds the
# two executables the cases need. CCACHE_BASEDIR makes the paths in the compile commands
# relative, so the old and the new tree share cache entries for the files they have in common.
build() {
    local src=$1 bld=$1/build-ab
    local log=$bld/ab-build.log
    mkdir -p "$bld"
    local gen=()
    if [ ! -f "$bld/CMakeCache.txt" ] && command -v ninja > /dev/null; then gen=(-G Ninja); fi
    echo "ab_behaviour: building ztrain, zt-prepare in $bld (log: $log)" >&2
    if ! { [ -f "$bld/CMakeCache.txt" ] ||
           CCACHE_BASEDIR=$src cmake -S "$src" -B "$bld" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DZT_CUDA=OFF \
               -DZT_BUILD_TESTS=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache > "$log" 2>&1
         } || ! CCACHE_BASEDIR=$src cmake --build "$bld" -j"$JOBS" --target ztrain zt-prepare >> "$log" 2>&1; then
        tail -30 "$log" >&2
        die "the build of $src failed (log: $log)"
    fi
    BUILT_BIN=$bld/bin
}

# bin_dir DIR: DIR or DIR/bin, whichever holds ztrain and zt-prepare.
bin_dir() {
    local d
    for d in "$1" "$1/bin"; do
        if [ -x "$d/ztrain" ] && [ -x "$d/zt-prepare" ]; then (cd "$d" && pwd); return; fi
    done
    die "no ztrain and zt-prepare executables in $1 or $1/bin"
}

# describe REV: short hash and subject (shortened) of REV.
describe() {
    local subject
    subject=$(git log -1 --format=%s "$1")
    [ "${#subject}" -le 72 ] || subject="${subject:0:70}..."
    echo "$(git rev-parse --short "$1") $subject"
}

if [ -n "$old_bin" ]; then
    OLD=$(bin_dir "$old_bin")
    OLD_DESC="binaries in $OLD ($("$OLD/ztrain" --version 2>&1 | head -1))"
else
    rev=$(git rev-parse --verify --quiet "$old_ref^{commit}") || die "--old-ref $old_ref: not a commit"
    wt=$CACHE/$rev
    mkdir -p "$CACHE"
    # Two invocations at once would check out and build the same directory: one waits.
    if command -v flock > /dev/null; then exec 9> "$CACHE/.lock-$rev"; flock 9; fi
    if [ "$(git -C "$wt" rev-parse HEAD 2>/dev/null)" != "$rev" ] || [ "$(git -C "$wt" rev-parse --show-toplevel 2>/dev/null)" != "$wt" ]; then
        echo "ab_behaviour: checking out $old_ref ($rev) in $wt" >&2
        rm -rf "$wt"
        git worktree prune
        git worktree add --detach "$wt" "$rev" > /dev/null 2>&1 || die "git worktree add $wt $rev failed"
    fi
    build "$wt"
    OLD=$BUILT_BIN
    OLD_DESC="$(describe "$rev") (built in $OLD)"
fi
if [ -n "$new_bin" ]; then
    NEW=$(bin_dir "$new_bin")
    NEW_DESC="binaries in $NEW ($("$NEW/ztrain" --version 2>&1 | head -1))"
else
    build "$ROOT"
    NEW=$BUILT_BIN
    dirty=""
    [ -z "$(git status --porcelain --untracked-files=no)" ] || dirty=" + uncommitted changes"
    NEW_DESC="this tree: $(describe HEAD)$dirty (built in $NEW)"
fi
PERTURB=()
if [ -n "${ZT_AB_PERTURB:-}" ]; then
    read -r -a PERTURB <<< "$ZT_AB_PERTURB"
    echo "ab_behaviour: ZT_AB_PERTURB: the NEW runs get ${PERTURB[*]} (a self-check: expect FAIL)" >&2
fi

# ---- scratch ------------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ztrain-ab-run.XXXXXX")
cleanup() {
    if [ "$keep" = 1 ]; then echo "ab_behaviour: runs and logs kept in $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # through the EXIT trap: the scratch goes on Ctrl-C too

START_S=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- running one side ---------------------------------------------------------------------
# merge_overrides ARG...: the --key=value arguments, a later one replacing an earlier one of
# the same key in place (ztrain refuses a key given twice).
merge_overrides() {
    local -A last=()
    local -a keys=()
    local a k
    for a in "$@"; do
        k=${a%%=*}
        [ -n "${last[$k]+x}" ] || keys+=("$k")
        last[$k]=$a
    done
    for k in "${keys[@]}"; do printf '%s\n' "${last[$k]}"; done
}

# run_side SIDE NP DIR ARG...: ztrain of SIDE (old|new) on NP ranks with the case's deck and
# overrides, run directory DIR, output in DIR.log. Fails (status 1) with the log's tail.
run_side() {
    local side=$1 np=$2 dir=$3
    shift 3
    local bin=$OLD
    local -a extra=()
    if [ "$side" = new ]; then bin=$NEW; extra=("${PERTURB[@]}"); fi
    local -a args
    mapfile -t args < <(merge_overrides "${DECK_ARGS[@]}" "$@" "${extra[@]}" --run.dir="$dir")
    mkdir -p "$(dirname "$dir")"
    if ! timeout "$RUN_TIMEOUT" bash .ci/mpirun.sh "$np" "$bin/ztrain" --config "$DECK" "${args[@]}" > "$dir.log" 2>&1; then
        echo "  $side run failed (np $np, $dir.log):"
        # ztrain's own message, not mpiexec's epilogue, where there is one.
        { grep -m3 -E "error|timeout|Terminated" "$dir.log" || tail -5 "$dir.log"; } | sed 's/^/    /'
        return 1
    fi
}

# checkpoint_at DIR STEP: the checkpoint directory of STEP in run DIR.
checkpoint_at() {
    local d
    for d in "$1"/checkpoints/step_*; do
        if [ -d "$d" ] && [ "$((10#${d##*step_}))" -eq "$2" ]; then echo "$d"; return; fi
    done
    echo "$1/checkpoints/(no step $2)"
}

# compare WHAT A.jsonl B.jsonl [--after-step K]: one comparison of a case; adds to C_STEPS,
# C_MAXREL and sets C_RESULT=FAIL on a difference (printing the first one).
compare() {
    local what=$1 a=$2 b=$3
    shift 3
    local res verdict steps maxrel
    res=$(python3 bench/ab_compare.py "$a" "$b" --labels "${what% vs *},${what#* vs }" "$@") || true
    read -r verdict steps maxrel <<< "$(head -1 <<< "$res")"
    C_STEPS=$((C_STEPS + ${steps:-0}))
    if [ "$maxrel" != "-" ] && [ -n "$maxrel" ]; then
        C_MAXREL=$(python3 -c "import sys; print(f'{max(map(float, sys.argv[1:])):.3g}')" "$C_MAXREL" "$maxrel")
    fi
    if [ "$verdict" != PASS ]; then
        C_RESULT=FAIL
        echo "  $what: $verdict"
        tail -n +2 <<< "$res"
        C_NOTES+="$what: $(tail -n +2 <<< "$res" | head -1 | sed 's/^ *//'); "
    fi
}

# ---- the cases ----------------------------------------------------------------------------
# Every axis is covered by some case, not the cross product: np 1/2/4/8, ZeRO stages 0-3,
# fp32/bf16/fp16 (with fp16 overflow skips), grad_accum, recompute, DDP buckets, 2 threads,
# hybrid shard groups, tensor parallelism T = 2 with and without sequence parallelism,
# pipeline P = 2 under each schedule, the 3D mesh P x T x D = 2 x 2 x 2, GPT-2 and Llama,
# fine-tuning on example shards (packed, padded, truncated), resume (also under shard groups,
# a pipeline, a P x T mesh and example shards), a checkpoint written by OLD resumed by both
# (also at another np and stage), and the demo deck. Kinds:
#   plain    the same run on both sides; their metrics must match.
#   resume   each side runs 2K steps with a checkpoint at K, then resumes from its own step-K
#            checkpoint into a new run directory up to 2K. Old vs new must match for both
#            runs, and the new resumed run must match the new straight run's steps K+1..2K.
#            (The checkpoint comes from the 2K run, not a K-step run, so the learning-rate
#            schedule, which depends on max_steps, is the same after the resume.)
#   xresume  OLD runs 2K steps with a checkpoint at K; OLD and NEW each resume from that
#            checkpoint: NEW must load OLD's checkpoint and continue exactly like OLD does.
#            Overrides after `::` apply to the resumed runs only; `np=N` there resumes on N
#            ranks (a resharded load).
# np2-s2-fp16-overflow starts the dynamic scale at 1e6: steps 1-6 overflow and are skipped
# while it backs off to 1.25e5, then it grows every 4 clean steps and overflows again.
# Columns: name, q (in --quick) or -, ranks, kind, deck (inputs/DECK.ini; DECK+ex: on the
# example shards that both zt-prepares make from the corpus as JSON Lines), overrides.
K=10  # resume cases: checkpoint at K, runs to 2K
CASES=(
    "np1-s0-fp32                 q 1 plain   tiny"
    "np1-s0-fp32-2threads        - 1 plain   tiny --train.threads=2"
    "np2-s0-fp32                 - 2 plain   tiny --parallel.zero_stage=0"
    "np2-s1-fp32                 - 2 plain   tiny --parallel.zero_stage=1"
    "np2-s2-fp32                 - 2 plain   tiny --parallel.zero_stage=2"
    "np2-s3-fp32                 q 2 plain   tiny --parallel.zero_stage=3"
    "np4-s0-fp32-small-buckets   - 4 plain   tiny --parallel.zero_stage=0 --parallel.bucket_mb=0.01"
    "np4-s3-fp32-ga2             q 4 plain   tiny --parallel.zero_stage=3 --train.grad_accum=2"
    "np2-s1-bf16                 q 2 plain   tiny --parallel.zero_stage=1 --precision.dtype=bf16"
    "np2-s3-bf16                 - 2 plain   tiny --parallel.zero_stage=3 --precision.dtype=bf16"
    "np2-s1-fp16                 - 2 plain   tiny --parallel.zero_stage=1 --precision.dtype=fp16"
    "np2-s3-fp16                 q 2 plain   tiny --parallel.zero_stage=3 --precision.dtype=fp16"
    "np2-s2-fp16-overflow        - 2 plain   tiny --parallel.zero_stage=2 --precision.dtype=fp16 --precision.init_scale=1e6 --precision.growth_interval=4"
    "np2-s2-fp32-recompute       - 2 plain   tiny --parallel.zero_stage=2 --train.recompute=true"
    "np1-s0-bf16-recompute-ga3   - 1 plain   tiny --precision.dtype=bf16 --train.recompute=true --train.grad_accum=3"
    "resume-np2-s1-fp32          - 2 resume  tiny --parallel.zero_stage=1"
    "resume-np2-s3-fp16          - 2 resume  tiny --parallel.zero_stage=3 --precision.dtype=fp16"
    "xresume-np2-s3-fp32         q 2 xresume tiny --parallel.zero_stage=3"
    "xresume-np2-s2-bf16-np4-s1  - 2 xresume tiny --parallel.zero_stage=2 --precision.dtype=bf16 :: np=4 --parallel.zero_stage=1"
    "demo-np2-s0-fp32            - 2 plain   demo --train.max_steps=30 --train.eval_every=15"
    # hybrid shard groups: ZeRO within groups of 2 ranks, replicated across the 2 groups
    "np4-s3-fp32-shard2          q 4 plain   tiny --parallel.zero_stage=3 --parallel.shard_group=2"
    "np4-s2-fp32-shard2-ga2      - 4 plain   tiny --parallel.zero_stage=2 --parallel.shard_group=2 --train.grad_accum=2"
    "np4-s1-bf16-shard2          - 4 plain   tiny --parallel.zero_stage=1 --parallel.shard_group=2 --precision.dtype=bf16"
    "resume-np4-s3-bf16-shard2   - 4 resume  tiny --parallel.zero_stage=3 --parallel.shard_group=2 --precision.dtype=bf16"
    # tensor parallelism T = 2, with and without sequence parallelism
    "np2-t2-fp32                 - 2 plain   tiny --parallel.tensor=2"
    "np2-t2-sp-fp32              - 2 plain   tiny --parallel.tensor=2 --parallel.sequence=true"
    "np2-t2-bf16                 - 2 plain   tiny --parallel.tensor=2 --precision.dtype=bf16"
    "np4-t2-sp-s3-bf16           - 4 plain   tiny --parallel.tensor=2 --parallel.sequence=true --parallel.zero_stage=3 --precision.dtype=bf16"
    # pipeline P = 2 with each schedule (grad_accum = micro-batches, at least P; interleaved:
    # 2 chunks per stage, so 4 blocks)
    "np2-p2-1f1b-fp32            - 2 plain   tiny --parallel.pipeline=2 --parallel.schedule=1f1b --train.grad_accum=2"
    "np2-p2-interleaved-fp32     - 2 plain   tiny --parallel.pipeline=2 --parallel.schedule=interleaved --model.n_layer=4 --train.grad_accum=4"
    "np2-p2-zb-fp32              - 2 plain   tiny --parallel.pipeline=2 --parallel.schedule=zb --train.grad_accum=2"
    "np2-p2-1f1b-bf16-recompute  - 2 plain   tiny --parallel.pipeline=2 --parallel.schedule=1f1b --train.grad_accum=3 --precision.dtype=bf16 --train.recompute=true"
    "np4-p2-zb-s2-bf16           - 4 plain   tiny --parallel.pipeline=2 --parallel.schedule=zb --train.grad_accum=4 --parallel.zero_stage=2 --precision.dtype=bf16"
    "resume-np2-p2-zb-fp32       - 2 resume  tiny --parallel.pipeline=2 --parallel.schedule=zb --train.grad_accum=2"
    # 3D: pipeline x tensor x data = 2 x 2 x 2
    "np8-p2-t2-s1-fp32           q 8 plain   tiny --parallel.pipeline=2 --parallel.tensor=2 --parallel.zero_stage=1 --train.grad_accum=2"
    "np8-p2-t2-sp-zb-s3-bf16     - 8 plain   tiny --parallel.pipeline=2 --parallel.schedule=zb --parallel.tensor=2 --parallel.sequence=true --parallel.zero_stage=3 --precision.dtype=bf16 --train.grad_accum=2"
    # Llama (RoPE, grouped-query attention, SwiGLU, tied embeddings) on the same axes
    "llama-np1-s0-fp32           - 1 plain   llama_tiny"
    "llama-np2-s3-bf16           - 2 plain   llama_tiny --parallel.zero_stage=3 --precision.dtype=bf16"
    "llama-np4-s2-fp32-shard2    - 4 plain   llama_tiny --parallel.zero_stage=2 --parallel.shard_group=2"
    "llama-np2-t2-fp32           - 2 plain   llama_tiny --parallel.tensor=2"
    "llama-np2-t2-sp-bf16        - 2 plain   llama_tiny --parallel.tensor=2 --parallel.sequence=true --precision.dtype=bf16 --train.recompute=true"
    "llama-np2-p2-interleaved-bf16 - 2 plain llama_tiny --parallel.pipeline=2 --parallel.schedule=interleaved --model.n_layer=4 --train.grad_accum=4 --precision.dtype=bf16"
    "llama-np8-p2-t2-sp-interleaved-s2-fp32 - 8 plain llama_tiny --parallel.pipeline=2 --parallel.schedule=interleaved --model.n_layer=4 --train.grad_accum=4 --parallel.tensor=2 --parallel.sequence=true --parallel.zero_stage=2"
    "resume-llama-np4-p2-t2-fp32 - 4 resume  llama_tiny --parallel.pipeline=2 --parallel.tensor=2 --train.grad_accum=2"
    # fine-tuning on the example shards (+ex): masked loss; packed, padded and truncated rows
    "ft-llama-np1-pack-fp32      - 1 plain   finetune_tiny+ex"
    "ft-llama-np2-pad-s3-bf16    - 2 plain   finetune_tiny+ex --data.packing=pad --parallel.zero_stage=3 --precision.dtype=bf16"
    "ft-llama-np4-pack-t2-sp-bf16 q 4 plain  finetune_tiny+ex --parallel.tensor=2 --parallel.sequence=true --precision.dtype=bf16"
    "ft-llama-np2-pack-p2-1f1b-fp32 - 2 plain finetune_tiny+ex --parallel.pipeline=2 --parallel.schedule=1f1b"
    "ft-np2-pack-truncate-s1-fp32 - 2 plain  tiny+ex --parallel.zero_stage=1 --data.overlong=truncate"
    "resume-ft-llama-np2-pack-s2-fp32 - 2 resume finetune_tiny+ex --parallel.zero_stage=2"
)

DATA=$WORK/data
EXAMPLES=$WORK/examples  # the fine-tuning example shards (decks marked +ex)
# deck_args DECK[+ex]: the deck file and the overrides every run of that deck gets (DECK,
# DECK_ARGS); +ex trains on the example shards instead of the pretraining ones.
deck_args() {
    local data=$DATA
    DECK=inputs/${1%+ex}.ini
    [ "$1" = "${1%+ex}" ] || data=$EXAMPLES
    # train.threads is fixed (1, or 2 in one case): the CPU backend is bit-identical run to run
    # only for a given thread count (static partitions, see cpu_backend.cpp), and the default
    # 0 picks cores / local ranks, which differs between machines and np. (The backend sets
    # the OpenMP and OpenBLAS thread counts itself; OMP_NUM_THREADS does not matter.) np >
    # cores is oversubscribed by .ci/mpirun.sh with OMP_WAIT_POLICY=PASSIVE: speed, not results.
    DECK_ARGS=(--data.train="$data/train_*.bin" --data.val="$data/val_*.bin" --train.threads=1
               --checkpoint.resume=never)
    # The tiny decks' 60 (finetune_tiny: 100) steps cut to 2K = 20, evaluated every K
    # (val_loss at steps 0, K, 2K).
    case "${1%+ex}" in
        tiny | llama_tiny | finetune_tiny) DECK_ARGS+=(--train.max_steps="$((2 * K))" --train.eval_every="$K") ;;
    esac
}

run_case() {
    local name=$1 np=$2 kind=$3 deck=$4
    shift 4
    local -a base=() after=()
    local rnp=$np seen_sep=0 a
    for a in "$@"; do
        if [ "$a" = "::" ]; then seen_sep=1
        elif [ "$seen_sep" = 1 ] && [[ $a == np=* ]]; then rnp=${a#np=}
        elif [ "$seen_sep" = 1 ]; then after+=("$a")
        else base+=("$a"); fi
    done
    deck_args "$deck"
    local d=$WORK/$name side
    # The resume kinds: 2K steps, a checkpoint at K.
    local -a full=("${base[@]}" --train.max_steps="$((2 * K))" --checkpoint.every="$K" --checkpoint.keep=2)
    case "$kind" in
        plain)
            run_side old "$np" "$d/old" "${base[@]}" && run_side new "$np" "$d/new" "${base[@]}" || return 1
            compare "old vs new" "$d/old/metrics.jsonl" "$d/new/metrics.jsonl"
            ;;
        resume)
            for side in old new; do
                run_side "$side" "$np" "$d/$side-full" "${full[@]}" &&
                run_side "$side" "$np" "$d/$side-resumed" "${full[@]}" \
                    --checkpoint.resume="$(checkpoint_at "$d/$side-full" $K)" || return 1
            done
            compare "old vs new" "$d/old-full/metrics.jsonl" "$d/new-full/metrics.jsonl"
            compare "old resumed vs new resumed" "$d/old-resumed/metrics.jsonl" "$d/new-resumed/metrics.jsonl"
            compare "new straight vs new resumed" "$d/new-full/metrics.jsonl" "$d/new-resumed/metrics.jsonl" \
                --after-step $K
            ;;
        xresume)
            run_side old "$np" "$d/old-full" "${full[@]}" || return 1
            local ck
            ck=$(checkpoint_at "$d/old-full" $K)
            for side in old new; do
                run_side "$side" "$rnp" "$d/$side-resumed" "${full[@]}" "${after[@]}" --checkpoint.resume="$ck" || return 1
            done
            compare "old resumed vs new resumed" "$d/old-resumed/metrics.jsonl" "$d/new-resumed/metrics.jsonl"
            ;;
        *) die "case $name: unknown kind $kind" ;;
    esac
}

SELECTED=()
for line in "${CASES[@]}"; do
    read -r -a f <<< "$line"
    [ "$quick" = 0 ] || [ "${f[1]}" = q ] || continue
    [ -z "$only" ] || grep -qE -- "$only" <<< "${f[0]}" || continue
    SELECTED+=("$line")
done
[ "${#SELECTED[@]}" -gt 0 ] || die "no case matches --case '$only'$([ "$quick" = 0 ] || echo " among the --quick cases")"

# ---- data: both zt-prepare on the same corpus, byte-identical output ----------------------
echo "ab_behaviour: old: $OLD_DESC"
echo "ab_behaviour: new: $NEW_DESC"
ROWS=()   # name|np|steps|result|maxrel|notes
FAILED=0
prep() {  # prep SIDE OUTDIR ZT_PREPARE_ARG...
    local bin=$OLD out=$2
    [ "$1" = new ] && bin=$NEW
    "$bin/zt-prepare" --output "$out" "${@:3}" > "$out.log" 2>&1 ||
        { echo "  $1 zt-prepare failed:"; tail -5 "$out.log" | sed 's/^/    /'; return 1; }
}
# prepare_both ROW DIR ZT_PREPARE_ARG...: the old zt-prepare writes DIR (every run's data), the
# new one DIR-new, which must be byte-identical; adds the result as row ROW.
prepare_both() {
    local row=$1 dir=$2
    shift 2
    prep old "$dir" "$@" || die "the old zt-prepare failed; no data for the runs ($row)"
    if prep new "$dir-new" "$@" && diff -r -q "$dir" "$dir-new" > "$dir.diff" 2>&1; then
        ROWS+=("$row|1|-|PASS|0|")
        echo "$row: PASS (shards and tokenizer byte-identical)"
    else
        ROWS+=("$row|1|-|FAIL|-|output differs: $(head -1 "$dir.diff")")
        echo "$row: FAIL"; sed 's/^/  /' "$dir.diff" | head -5
        FAILED=$((FAILED + 1))
    fi
}
# make_examples FILE: fine-tuning examples from the corpus as JSON Lines, the same every time:
# 400 fortunes of at most 40 bytes (finetune_tiny's rows of 64 tokens mostly hold two), each
# cut at a space near its middle into a prompt and a completion.
make_examples() {
    python3 - "$CORPUS" "$1" <<'PY'
import json, os, sys
src, out = sys.argv[1], sys.argv[2]
files = [src] if os.path.isfile(src) else sorted(
    os.path.join(src, n) for n in os.listdir(src) if "." not in n and os.path.isfile(os.path.join(src, n)))
docs = []
for path in files:
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    docs += [d.strip("\n") for d in text.split("\n%\n")]
picked = [d for d in docs if " " in d.strip() and len(d) <= 40]
picked = picked[:: max(1, len(picked) // 400)][:400]
with open(out, "w", encoding="utf-8") as f:
    for d in picked:
        cut = d.find(" ", len(d) // 2)
        cut = cut if cut > 0 else d.rfind(" ")
        f.write(json.dumps({"prompt": d[: cut + 1], "completion": d[cut + 1 :]}) + "\n")
PY
}
prepare_both zt-prepare "$DATA" --input "$CORPUS" --tokenizer byte --doc-separator % --val-fraction 0.05
if [[ " ${SELECTED[*]} " == *+ex\ * ]]; then
    make_examples "$WORK/examples.jsonl" || die "could not write fine-tuning examples from $CORPUS"
    prepare_both zt-prepare-jsonl "$EXAMPLES" --input "$WORK/examples.jsonl" --format jsonl --tokenizer byte \
        --val-fraction 0.1
fi

for line in "${SELECTED[@]}"; do
    read -r -a f <<< "$line"
    name=${f[0]} np=${f[2]}
    C_STEPS=0 C_MAXREL=0 C_RESULT=PASS C_NOTES=""
    t0=$(date +%s)
    data=""
    [ "${f[4]}" = "${f[4]%+ex}" ] || data=" on the example shards"
    echo "== $name (np $np, ${f[3]}, ${f[4]%+ex}.ini$data${f[5]:+ }${f[*]:5})"
    if ! run_case "$name" "$np" "${f[3]}" "${f[4]}" "${f[@]:5}"; then
        C_RESULT=FAIL C_MAXREL=- C_NOTES="a run failed (exit status or timeout)"
    fi
    echo "   $C_RESULT: $C_STEPS step records compared, max relative difference $C_MAXREL ($(($(date +%s) - t0)) s)"
    [ "$C_RESULT" = PASS ] || FAILED=$((FAILED + 1))
    ROWS+=("$name|$np|$C_STEPS|$C_RESULT|$C_MAXREL|${C_NOTES%; }")
done

# ---- summary ------------------------------------------------------------------------------
ELAPSED=$(($(date +%s) - START_S))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
table() {
    echo "| case | np | steps compared | result | max rel diff |"
    echo "|---|---|---|---|---|"
    local r
    for r in "${ROWS[@]}"; do
        IFS='|' read -r n p s res m _ <<< "$r"
        echo "| $n | $p | $s | $res | $m |"
    done
}
echo
table
n_cases=${#ROWS[@]}
if [ "$FAILED" -eq 0 ]; then VERDICT="all $n_cases cases PASS"; else VERDICT="$FAILED of $n_cases cases FAIL"; fi
echo "ab_behaviour: $VERDICT in ${ELAPSED} s"

if [ -n "$out" ]; then
    mkdir -p "$(dirname "$out")"
    {
        echo "# Behaviour A/B: old vs new ztrain ($(date -u +%Y-%m-%d))"
        echo
        perturb=""
        [ -z "${ZT_AB_PERTURB:-}" ] || perturb=" with ZT_AB_PERTURB=\"$ZT_AB_PERTURB\""
        echo "Command: \`$COMMAND\`$perturb"
        echo
        echo "- old: $OLD_DESC"
        echo "- new: $NEW_DESC"
        echo "- machine: $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average $LOAD_START at the start, $LOAD_END at the end"
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), runtime ${ELAPSED} s"
        echo "- compared, as printed (no tolerance): per step loss, grad_norm, lr, loss_scale, skipped, tokens (targets, rows on example shards); every val_loss"
        echo
        table
        echo
        echo "Result: $VERDICT."
        has_notes=0
        for r in "${ROWS[@]}"; do
            IFS='|' read -r n _ _ res _ note <<< "$r"
            if [ "$res" != PASS ]; then
                [ "$has_notes" = 1 ] || { echo; echo "Failures:"; echo; has_notes=1; }
                echo "- $n: $note"
            fi
        done
    } > "$out"
    echo "ab_behaviour: results written to $out"
fi
[ "$FAILED" -eq 0 ]
