#!/usr/bin/env bash
# slurm/cpu.sbatch end to end on a private one-node Slurm cluster (start_local_slurm.sh):
#   1. a 2-rank job trains 8 steps with a checkpoint every 4: exit 0, step lines, and
#      RUN_DIR/checkpoints/latest naming step_00000008;
#   2. a second job with max_steps=12 resumes from step 8 and reaches step 12;
#   3. the preemption path: USR1 to the batch shell only (what `--signal=B:USR1@120` does
#      before a time limit) is forwarded to ztrain, which checkpoints and exits 0; the job
#      requeues itself, resumes from that checkpoint (restart count 1), and a second USR1
#      stops it for good (ZT_MAX_RESTARTS=1): exit 0, a newer checkpoint.
# Exit 0: passed; 1: failed; 77: skipped (not root, Slurm not installed and not installable).
# Usage: bash test_slurm_job.sh BIN_DIR SOURCE_DIR
#   ZT_TEST_NO_INSTALL=1: do not try to apt-get install slurm-wlm and munge when missing.
#   ZT_TEST_KEEP=1: keep the scratch folder (job outputs, daemon logs) afterwards.
set -u

BIN_DIR="$(cd "${1:?usage: test_slurm_job.sh BIN_DIR SOURCE_DIR}" && pwd)"
SRC="$(cd "${2:?usage: test_slurm_job.sh BIN_DIR SOURCE_DIR}" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SBATCH_SCRIPT="$SRC/slurm/cpu.sbatch"
failures=0
export PATH="$PATH:/usr/sbin:/sbin"   # munged, slurmd, slurmctld

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# --- Can this machine run it? ----------------------------------------------------------
[ -x "$BIN_DIR/ztrain" ] || { echo "FAIL: $BIN_DIR/ztrain not found or not executable" >&2; exit 1; }
[ -x "$BIN_DIR/zt-prepare" ] || { echo "FAIL: $BIN_DIR/zt-prepare not found or not executable" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ]; then
    echo "SKIP: needs root (a private slurmd launches the jobs); uid is $(id -u)"
    exit 77
fi
need_install=0
for b in munged munge slurmctld slurmd sbatch srun squeue scancel scontrol sinfo; do
    command -v "$b" >/dev/null 2>&1 || need_install=1
done
if [ "$need_install" = 1 ]; then
    if [ "${ZT_TEST_NO_INSTALL:-0}" = 1 ]; then
        echo "SKIP: Slurm/munge are not installed (apt-get install slurm-wlm munge) and ZT_TEST_NO_INSTALL=1"
        exit 77
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "SKIP: Slurm/munge are not installed and there is no apt-get to install them"
        exit 77
    fi
    echo "slurm test: installing slurm-wlm munge with apt-get"
    apt_log="$(mktemp "${TMPDIR:-/tmp}/zt-slurm-apt.XXXXXX")"
    export DEBIAN_FRONTEND=noninteractive
    apt_install() {
        timeout 150 apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=60 \
            slurm-wlm munge >>"$apt_log" 2>&1
    }
    if ! apt_install; then
        timeout 90 apt-get update -qq >>"$apt_log" 2>&1
        if ! apt_install; then
            echo "SKIP: Slurm/munge are not installed and apt-get could not install them:"
            tail -5 "$apt_log"
            rm -f "$apt_log"
            exit 77
        fi
    fi
    rm -f "$apt_log"
fi

# --- Scratch, cleanup ----------------------------------------------------------------------
SCR="$(mktemp -d "${TMPDIR:-/tmp}/zt-slurm-test.XXXXXX")"
chmod 711 "$SCR"   # munged's socket lies below: every folder above it must be searchable
CLUSTER="$SCR/cluster"
bg_pids=()

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local p
    for p in "${bg_pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    bash "$HERE/start_local_slurm.sh" stop "$CLUSTER" >/dev/null 2>&1 ||
        echo "warning: stopping the local cluster failed" >&2
    if [ "${ZT_TEST_KEEP:-0}" = 1 ]; then
        echo "slurm test: kept $SCR"
    else
        rm -rf "$SCR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# show_debug JOBNAME: the job's output and the daemons' last log lines, on stderr.
show_debug() {
    local f
    for f in "$SCR/$1.out" "$CLUSTER"/log/slurmctld.log "$CLUSTER"/log/slurmd.log; do
        [ -f "$f" ] || continue
        echo "----- $f (last 40 lines) -----" >&2
        tail -40 "$f" >&2
    done
    timeout 5 squeue >&2 2>&1
}

# wait_until SECONDS CMD...: runs CMD every 0.2 s until it succeeds; 1 after SECONDS.
wait_until() {
    local limit="$1" deadline
    shift
    deadline=$((SECONDS + limit))
    while [ "$SECONDS" -lt "$deadline" ]; do
        "$@" && return 0
        sleep 0.2
    done
    "$@"
}

# --- The cluster -----------------------------------------------------------------------
bash "$HERE/start_local_slurm.sh" start "$CLUSTER"
rc=$?
if [ "$rc" -eq 77 ]; then exit 77; fi
[ "$rc" -eq 0 ] || { echo "FAIL: the local Slurm cluster did not start (status $rc)" >&2; exit 1; }
# shellcheck source=/dev/null
. "$CLUSTER/env.sh"

# The jobs inherit this environment (sbatch --export=ALL).
export TMPDIR="$SCR/tmp"   # Open MPI session folders
mkdir -p "$TMPDIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1   # 2 busy-polling ranks on few cores
export ZT_HOME="$SRC" ZT_BIN="$BIN_DIR/ztrain" ZT_CONFIG="$SRC/inputs/tiny.ini"
unset ZT_RUN_DIR ZT_SRUN_ARGS ZT_REQUEUE_ON_SIGNAL ZT_MAX_RESTARTS ZT_SRUN_MPI

sbatch_opts=(-n 2 -c 1 --chdir="$SCR")
node_cpus="$(timeout 5 sinfo -h -o %c 2>/dev/null | head -1)"
if [ -n "$node_cpus" ] && [ "$node_cpus" -lt 2 ] 2>/dev/null; then
    sbatch_opts+=(--overcommit)
    export ZT_SRUN_ARGS="--overcommit"
fi

# --- Data --------------------------------------------------------------------------------
mkdir -p "$SCR/corpus"
for i in $(seq 400); do
    printf 'Record %d: the quick brown fox jumps over %d lazy dogs.\n%%\n' "$i" $((i * 7))
done >"$SCR/corpus/text.txt"
if ! "$BIN_DIR/zt-prepare" --input "$SCR/corpus/text.txt" --output "$SCR/data" \
        --doc-separator % >"$SCR/prepare.out" 2>&1; then
    echo "FAIL: zt-prepare failed:" >&2
    cat "$SCR/prepare.out" >&2
    exit 1
fi
DATA="--data.train=$SCR/data/train_*.bin"

# run_job NAME ARGS...: sbatch --wait cpu.sbatch with ARGS (for ztrain); output in
# $SCR/NAME.out; returns sbatch's status (the job's exit code; 124: timed out).
run_job() {
    local name="$1"
    shift
    timeout 90 sbatch --wait --job-name="zt-$name" --output="$SCR/$name.out" \
        "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "$@" >"$SCR/$name.sbatch" 2>&1
}

# check_status NAME RC: the job must have exited 0.
check_status() {
    if [ "$2" -eq 124 ]; then
        fail "$1: sbatch --wait did not return within 90 s"
        show_debug "$1"
        return 1
    elif [ "$2" -ne 0 ]; then
        fail "$1: the job's exit code is $2, expected 0"
        sed 's/^/    sbatch: /' "$SCR/$1.sbatch" >&2
        show_debug "$1"
        return 1
    fi
    return 0
}

# expect_line NAME ERE WHAT: NAME's output has a line matching ERE.
expect_line() {
    if ! grep -qE -- "$2" "$SCR/$1.out" 2>/dev/null; then
        fail "$1: no line matching /$2/ ($3) in the job output:"
        sed 's/^/    /' "$SCR/$1.out" >&2 2>/dev/null
        return 1
    fi
}

# expect_latest NAME RUN_DIR STEP: RUN_DIR/checkpoints/latest names step_STEP, which exists.
expect_latest() {
    local latest="$2/checkpoints/latest" want
    want="$(printf 'step_%08d' "$3")"
    if [ ! -f "$latest" ]; then
        fail "$1: $latest does not exist"
        ls -lR "$2" >&2 2>/dev/null
        return 1
    fi
    local got
    got="$(tr -d '[:space:]' <"$latest")"
    [ "$got" = "$want" ] || fail "$1: $latest names '$got', expected '$want'"
    [ -d "$2/checkpoints/$got" ] || fail "$1: $latest names '$got', which is not a directory"
}

# --- 1. Train 8 steps, checkpoint every 4 ----------------------------------------------
RUN1="$SCR/run1"
run_job job1 "$DATA" --run.dir="$RUN1" --train.max_steps=8 --checkpoint.every=4
rc=$?
if check_status job1 "$rc"; then
    expect_line job1 'restart count 0' "the banner from slurm/common.sh"
    expect_line job1 '2 rank\(s\)' "two ranks"
    expect_line job1 '^step +1/8 ' "the first step"
    expect_line job1 '^step +8/8 ' "the last step"
    expect_latest job1 "$RUN1" 8
    [ -d "$RUN1/checkpoints/step_00000004" ] ||
        fail "job1: no checkpoint step_00000004 (checkpoint.every=4)"
fi

# --- 2. Resume to 12 -------------------------------------------------------------------
if [ "$failures" -eq 0 ]; then
    run_job job2 "$DATA" --run.dir="$RUN1" --train.max_steps=12 --checkpoint.every=4
    rc=$?
    if check_status job2 "$rc"; then
        if ! grep -i 'resum' "$SCR/job2.out" | grep -qE '(step[ _]0*8([^0-9]|$))'; then
            fail "job2: no line saying it resumed from step 8:"
            sed 's/^/    /' "$SCR/job2.out" >&2
        fi
        expect_line job2 '^step +9/12 ' "the first step after the resume"
        expect_line job2 '^step +12/12 ' "the last step"
        if grep -qE '^step +[1-8]/12 ' "$SCR/job2.out"; then
            fail "job2: it ran steps 1-8 again instead of resuming"
        fi
        expect_latest job2 "$RUN1" 12
    fi
fi

# --- 3. USR1 to the batch shell: checkpoint, self-requeue, resume, stop -----------------
# Helpers over the job's output file.
out3="$SCR/job3.out"
has_step_line() { grep -qE '^step +[0-9]+/' "$out3" 2>/dev/null; }
# a step line after the second run's banner
has_step_after_restart() {
    awk '/restart count 1/ { r = 1 } r && /^step +[0-9]+\// { found = 1 } END { exit !found }' \
        "$out3" 2>/dev/null
}
job_field() { timeout 5 scontrol show job "$JOB3" 2>/dev/null | grep -oE "(^| )$1=[^ ]*" | head -1 | sed 's/.*=//'; }
is_requeued() { [ "$(job_field Restarts)" = 1 ]; }
# checkpoint steps the job wrote, in order
ckpt_steps() { sed -nE 's/.*checkpoint .*step_0*([0-9]+) written.*/\1/p' "$out3"; }

if [ "$failures" -eq 0 ]; then
    RUN3="$SCR/run3"
    ZT_MAX_RESTARTS=1 timeout 120 sbatch --wait --parsable --job-name=zt-job3 \
        --output="$out3" "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "$DATA" --run.dir="$RUN3" \
        --train.max_steps=1000000 --train.log_every=20 --checkpoint.every=0 \
        >"$SCR/job3.sbatch" 2>&1 &
    sb3=$!
    bg_pids+=("$sb3")
    JOB3=""
    wait_until 20 grep -qsE '^[0-9]+' "$SCR/job3.sbatch" && JOB3="$(grep -oE '^[0-9]+' "$SCR/job3.sbatch" | head -1)"
    phase=""
    if [ -z "$JOB3" ]; then
        phase="job3: sbatch printed no job id: $(cat "$SCR/job3.sbatch")"
    elif ! wait_until 60 has_step_line; then
        phase="job3: no step line within 60 s of submitting"
    else
        timeout 10 scancel --batch --signal=USR1 "$JOB3" ||
            phase="job3: scancel --batch --signal=USR1 failed"
        # The job checkpoints, exits 0 and requeues itself; Slurm starts it again
        # cred_expire + 1 s later (11 s in the private cluster, 120 s by default). Starting
        # it earlier by hand fails: slurmd still holds the old run's credential as revoked.
        if [ -z "$phase" ] && ! wait_until 60 is_requeued; then
            phase="job3: not requeued (Restarts=1) within 60 s of the first USR1"
        fi
        if [ -z "$phase" ] && ! wait_until 60 has_step_after_restart; then
            phase="job3: the requeued job printed no step line within 60 s"
        fi
        if [ -z "$phase" ]; then
            timeout 10 scancel --batch --signal=USR1 "$JOB3" ||
                phase="job3: the second scancel --batch --signal=USR1 failed"
        fi
    fi
    if [ -n "$phase" ]; then
        fail "$phase"
        show_debug job3
        [ -n "$JOB3" ] && timeout 10 scancel "$JOB3" 2>/dev/null
    fi
    wait "$sb3"
    rc=$?
    bg_pids=()
    if [ -z "$phase" ] && check_status job3 "$rc"; then
        n_sig="$(grep -c 'got SIGUSR1' "$out3")"
        [ "$n_sig" -eq 2 ] || fail "job3: the batch shell reported $n_sig USR1 signal(s), expected 2"
        expect_line job3 'requeueing job' "the self-requeue after the first USR1"
        expect_line job3 'restart count 1' "the second run's banner"
        expect_line job3 'reached ZT_MAX_RESTARTS=1' "no requeue after the second USR1"
        mapfile -t steps < <(ckpt_steps)
        if [ "${#steps[@]}" -ne 2 ]; then
            fail "job3: ${#steps[@]} checkpoint(s) written (steps: ${steps[*]:-none}), expected 2 (one per USR1)"
            sed 's/^/    /' "$out3" >&2
        else
            k1="${steps[0]}" k2="${steps[1]}"
            if ! awk '/restart count 1/ { r = 1 } r' "$out3" | grep -i 'resum' |
                    grep -qE "step[ _]0*$k1([^0-9]|$)"; then
                fail "job3: the requeued run did not say it resumed from step $k1:"
                sed 's/^/    /' "$out3" >&2
            fi
            [ "$k2" -gt "$k1" ] || fail "job3: second checkpoint at step $k2, not after the first ($k1)"
            expect_latest job3 "$RUN3" "$k2"
        fi
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "test_slurm_job: $failures failure(s)" >&2
    exit 1
fi
echo "test_slurm_job: all checks passed"
