# shellcheck shell=bash
# Shared by the Slurm tests (test_slurm_job.sh, test_slurm_2node.sh). Sourced, not run.
#   checks     zt_require_root, zt_require_bins, zt_ensure_commands, zt_ensure_slurm
#   harness    fail/failures, wait_until, zt_scratch (SCR, CLUSTER, cleanup on exit),
#              zt_start_cluster, zt_overcommit_for, zt_make_corpus
#   jobs       show_debug, check_status, submit_bg, is_requeued, preempt_once
#   sandbox    zt_enter_sandbox, zt_sandbox_init (the two-node test's namespaces)
# ZT_TEST_NO_INSTALL=1: do not apt-get install missing packages (skip instead).
# The tests set BIN_DIR and SRC before zt_start_cluster.

ZT_SLURM_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
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

# zt_require_root: exit 77 unless root (a private slurmd launches jobs as their user).
zt_require_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: needs root (a private slurmd launches the jobs); uid is $(id -u)"
        exit 77
    fi
}

# zt_require_bins BIN_DIR NAME...: each BIN_DIR/NAME must be an executable (exit 1 if not).
zt_require_bins() {
    local dir="$1" b
    shift
    for b in "$@"; do
        [ -x "$dir/$b" ] || { echo "FAIL: $dir/$b not found or not executable" >&2; exit 1; }
    done
}

# zt_ensure_commands PACKAGES -- COMMAND...: when a COMMAND is missing, apt-get install the
# Debian PACKAGES (bounded in time); exit 77 when that is not possible.
zt_ensure_commands() {
    local pkgs=() cmds=() c missing=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do pkgs+=("$1"); shift; done
    shift
    cmds=("$@")
    for c in "${cmds[@]}"; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "${ZT_TEST_NO_INSTALL:-0}" = 1 ]; then
        echo "SKIP: ${missing[*]} not installed (apt-get install ${pkgs[*]}) and ZT_TEST_NO_INSTALL=1"
        exit 77
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "SKIP: ${missing[*]} not installed and there is no apt-get to install ${pkgs[*]}"
        exit 77
    fi
    echo "slurm test: installing ${pkgs[*]} with apt-get (missing: ${missing[*]})"
    local apt_log
    apt_log="$(mktemp "${TMPDIR:-/tmp}/zt-slurm-apt.XXXXXX")"
    export DEBIAN_FRONTEND=noninteractive
    if ! timeout 150 apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=60 \
            "${pkgs[@]}" >>"$apt_log" 2>&1; then
        timeout 90 apt-get update -qq >>"$apt_log" 2>&1
        if ! timeout 150 apt-get install -y -qq --no-install-recommends \
                -o DPkg::Lock::Timeout=60 "${pkgs[@]}" >>"$apt_log" 2>&1; then
            echo "SKIP: ${missing[*]} not installed and apt-get could not install ${pkgs[*]}:"
            tail -5 "$apt_log"
            rm -f "$apt_log"
            exit 77
        fi
    fi
    rm -f "$apt_log"
}

# zt_ensure_slurm: Slurm and munge (Debian slurm-wlm munge), installed when missing.
zt_ensure_slurm() {
    export PATH="$PATH:/usr/sbin:/sbin"   # munged, slurmd, slurmctld
    zt_ensure_commands slurm-wlm munge -- \
        munged munge slurmctld slurmd sbatch srun squeue scancel scontrol sinfo
}

# zt_make_corpus BIN_DIR DIR: a small synthetic text corpus prepared by zt-prepare into
# DIR/data (train_*.bin); output in DIR/prepare.out. Exit 1 when zt-prepare fails.
zt_make_corpus() {
    local bin="$1" dir="$2" i
    mkdir -p "$dir/corpus"
    for i in $(seq 400); do
        printf 'Record %d: the quick brown fox jumps over %d lazy dogs.\n%%\n' "$i" $((i * 7))
    done >"$dir/corpus/text.txt"
    if ! "$bin/zt-prepare" --input "$dir/corpus/text.txt" --output "$dir/data" \
            --doc-separator % >"$dir/prepare.out" 2>&1; then
        echo "FAIL: zt-prepare failed:" >&2
        cat "$dir/prepare.out" >&2
        exit 1
    fi
}

# --- A test's scratch folder and cluster ------------------------------------------------
# zt_scratch NAME: SCR (a new folder under TMPDIR), CLUSTER=$SCR/cluster, bg_pids=(), and
# traps: on exit zt_cleanup kills bg_pids, stops the cluster, calls zt_after_stop when the
# test defines it (it may set rc to fail the test), and removes SCR (ZT_TEST_KEEP=1 keeps it).
zt_scratch() {
    SCR="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
    chmod 711 "$SCR"   # munged's socket lies below: every folder above it must be searchable
    CLUSTER="$SCR/cluster"
    bg_pids=()
    trap zt_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

zt_cleanup() {
    rc=$?
    trap - EXIT INT TERM
    local p
    for p in "${bg_pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    bash "$ZT_SLURM_LIB_DIR/start_local_slurm.sh" stop "$CLUSTER" >"$SCR/stop.out" 2>&1 ||
        echo "warning: stopping the local cluster failed" >&2
    if declare -F zt_after_stop >/dev/null; then zt_after_stop; fi
    if [ "${ZT_TEST_KEEP:-0}" = 1 ]; then
        echo "slurm test: kept $SCR"
    else
        rm -rf "$SCR"
    fi
    exit "$rc"
}

# zt_start_cluster [--nodes N]: start_local_slurm.sh start $CLUSTER, then source its env.sh
# and export what every job inherits (sbatch --export=ALL): TMPDIR (the cluster's TmpFS, Open
# MPI's session folders), Open MPI as root and yielding, and ZT_HOME/ZT_BIN/ZT_CONFIG
# (inputs/tiny.ini) from BIN_DIR and SRC; other ZT_* settings unset. Exit 77/1 when it fails.
zt_start_cluster() {
    local rc
    bash "$ZT_SLURM_LIB_DIR/start_local_slurm.sh" start "$CLUSTER" "$@"
    rc=$?
    if [ "$rc" -eq 77 ]; then exit 77; fi
    [ "$rc" -eq 0 ] || { echo "FAIL: the local Slurm cluster did not start (status $rc)" >&2; exit 1; }
    # shellcheck source=/dev/null
    . "$CLUSTER/env.sh"
    export TMPDIR="$CLUSTER/tmp"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_mpi_yield_when_idle=1   # busy-polling ranks on few cores
    export ZT_HOME="$SRC" ZT_BIN="$BIN_DIR/ztrain" ZT_CONFIG="$SRC/inputs/tiny.ini"
    unset ZT_RUN_DIR ZT_SRUN_ARGS ZT_REQUEUE_ON_SIGNAL ZT_MAX_RESTARTS ZT_SRUN_MPI ZT_BACKEND
}

# zt_overcommit_for TASKS_PER_NODE: when a node has fewer CPUs, add --overcommit to
# sbatch_opts and to the scripts' srun (ZT_SRUN_ARGS).
zt_overcommit_for() {
    local cpus
    cpus="$(timeout 5 sinfo -h -o %c 2>/dev/null | head -1)"
    if [ -n "$cpus" ] && [ "$cpus" -lt "$1" ] 2>/dev/null; then
        sbatch_opts+=(--overcommit)
        export ZT_SRUN_ARGS="--overcommit"
    fi
}

# show_debug JOBNAME: the job's output and the daemons' last log lines, on stderr.
show_debug() {
    local f
    for f in "$SCR/$1.out" "$CLUSTER"/log/slurmctld.log "$CLUSTER"/log/slurmd*.log; do
        [ -f "$f" ] || continue
        echo "----- $f (last 40 lines) -----" >&2
        tail -40 "$f" >&2
    done
    timeout 5 squeue >&2 2>&1
}

# check_status NAME RC: the job (sbatch --wait under timeout, output in $SCR/NAME.sbatch)
# must have exited 0.
check_status() {
    if [ "$2" -eq 124 ]; then
        fail "$1: sbatch --wait did not return in time"
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

# submit_bg NAME SECONDS SBATCH_ARGS...: `sbatch --wait --parsable` in the background, at most
# SECONDS, the job's output in $SCR/NAME.out and sbatch's in $SCR/NAME.sbatch. Sets
# SUBMIT_PID (also added to bg_pids) and JOB, the job id (empty when sbatch printed none
# within 20 s).
submit_bg() {
    local name="$1" secs="$2"
    shift 2
    timeout "$secs" sbatch --wait --parsable --job-name="zt-$name" --output="$SCR/$name.out" \
        "$@" >"$SCR/$name.sbatch" 2>&1 &
    SUBMIT_PID=$!
    bg_pids+=("$SUBMIT_PID")
    JOB=""
    if wait_until 20 grep -qsE '^[0-9]+' "$SCR/$name.sbatch"; then
        JOB="$(grep -oE '^[0-9]+' "$SCR/$name.sbatch" | head -1)"
    fi
}

# usr1_count NAME: how many USR1s the batch shell of NAME's job reported ("got SIGUSR1").
usr1_count() { grep -c 'got SIGUSR1' "$SCR/$1.out" 2>/dev/null || true; }
# usr1_more NAME N: more than N.
usr1_more() { [ "$(usr1_count "$1")" -gt "$2" ]; }

# signal_batch NAME JOBID: USR1 to the job's batch shell only (scancel --batch), as
# `--signal=B:USR1@120` sends it. On a loaded machine slurmctld may answer scancel too late
# although the signal went out, and a second USR1 to a job already stopping would requeue it
# twice; so a failed scancel is repeated (3 tries in all) only while the job's output does
# not show the shell got it. Fails when no try delivered it.
signal_batch() {
    local name="$1" job="$2" before try
    before="$(usr1_count "$name")"
    for try in 1 2 3; do
        timeout 20 scancel --batch --signal=USR1 "$job" && return 0
        echo "signal_batch: $name: scancel --batch --signal=USR1 $job failed (try $try)" >&2
        wait_until 10 usr1_more "$name" "$before" && return 0
    done
    return 1
}

# is_requeued: Slurm counts one restart of job JOB (Restarts=1).
is_requeued() {
    timeout 5 scontrol show job "$JOB" 2>/dev/null | grep -qE '(^| )Restarts=1( |$)'
}

# preempt_once NAME CMD...: the preemption of job JOB (from submit_bg NAME): once CMD
# succeeds (within 60 s), USR1 to the batch shell only, as `--signal=B:USR1@120` sends it; the
# job checkpoints, exits 0 and requeues itself (is_requeued within 60 s). Slurm starts it
# again cred_expire + 1 s later (11 s in the private cluster, 120 s by default); starting it
# earlier by hand fails: slurmd still holds the old run's credential as revoked. Sets phase
# to what went wrong, "" when nothing did.
# shellcheck disable=SC2034  # phase: the result, read by the caller
preempt_once() {
    local name="$1"
    shift
    phase=""
    if [ -z "$JOB" ]; then
        phase="$name: sbatch printed no job id: $(cat "$SCR/$name.sbatch")"
    elif ! wait_until 60 "$@"; then
        phase="$name: no step line ($*) within 60 s of submitting"
    elif ! signal_batch "$name" "$JOB"; then
        phase="$name: scancel --batch --signal=USR1 failed"
    elif ! wait_until 60 is_requeued; then
        phase="$name: not requeued (Restarts=1) within 60 s of the USR1"
    fi
}

# --- The namespace sandbox (two-node test) --------------------------------------------------
# zt_enter_sandbox SCRIPT ARGS...: runs `bash SCRIPT --in-sandbox ARGS...` in new network,
# UTS, mount and PID namespaces and exits with its status. Nothing the script does to the
# network (a bridge, veth pairs, addresses), the host name or mounts reaches the host, and
# when it ends every process it started ends with it (the PID namespace's init is the script;
# --kill-child kills it if unshare itself is killed). Exit 77 when the kernel or the
# container refuses the namespaces.
zt_enter_sandbox() {
    local script="$1" err
    shift
    zt_ensure_commands util-linux -- unshare nsenter
    zt_ensure_commands iproute2 -- ip
    if ! err="$(unshare --net --uts --mount --pid --fork --mount-proc true 2>&1)"; then
        echo "SKIP: cannot create network/UTS/mount/PID namespaces here: $err"
        exit 77
    fi
    # a bridge and a veth pair, in a throwaway network namespace
    if ! err="$(unshare --net sh -c 'ip link add ztbr0 type bridge &&
                                      ip link add ztv0 type veth peer name ztv1' 2>&1)"; then
        echo "SKIP: this kernel cannot make a bridge and a veth pair in a network namespace: $err"
        exit 77
    fi
    unshare --net --uts --mount --pid --fork --kill-child --mount-proc \
        -- bash "$script" --in-sandbox "$@"
    exit $?
}

# zt_sandbox_init: first thing inside the sandbox: loopback up, and ZT_SANDBOX_NETNS names
# this network namespace (start_local_slurm.sh --nodes N refuses to run anywhere else).
zt_sandbox_init() {
    ip link set lo up || { echo "FAIL: cannot bring lo up in the sandbox" >&2; exit 1; }
    ZT_SANDBOX_NETNS="$(readlink /proc/self/ns/net)"
    export ZT_SANDBOX_NETNS
}
