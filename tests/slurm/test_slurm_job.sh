#!/usr/bin/env bash
# slurm/cpu.sbatch end to end on a private one-node Slurm cluster (start_local_slurm.sh):
#   1. a 2-rank job trains 8 steps with a checkpoint every 4: exit 0, step lines, and
#      RUN_DIR/checkpoints/latest naming step_00000008;
#   2. a second job with max_steps=12 resumes from step 8 and reaches step 12;
#   3. the preemption path: USR1 to the batch shell only (what `--signal=B:USR1@120` does
#      before a time limit) is forwarded to ztrain, which checkpoints and exits 0; the job
#      requeues itself, resumes from that checkpoint (restart count 1), and a second USR1
#      stops it for good (ZT_MAX_RESTARTS=1): exit 0, a newer checkpoint;
#   4. the same job submitted twice: while the first (1 rank) trains, a second sbatch on the
#      same run.dir exits 2 naming the holder (host, PID, the first's Slurm job id); the
#      first, stopped by USR1, exits 0 with every step once in metrics.jsonl.
# Exit 0: passed; 1: failed; 77: skipped (not root, Slurm not installed and not installable).
# Usage: bash test_slurm_job.sh BIN_DIR SOURCE_DIR
#   ZT_TEST_NO_INSTALL=1: do not try to apt-get install slurm-wlm and munge when missing.
#   ZT_TEST_KEEP=1: keep the scratch folder (job outputs, daemon logs) afterwards.
set -u

BIN_DIR="$(cd "${1:?usage: test_slurm_job.sh BIN_DIR SOURCE_DIR}" && pwd)"
SRC="$(cd "${2:?usage: test_slurm_job.sh BIN_DIR SOURCE_DIR}" && pwd)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SBATCH_SCRIPT="$SRC/slurm/cpu.sbatch"
# shellcheck source=tests/slurm/lib.sh
. "$HERE/lib.sh"   # the harness: checks, scratch and cluster, job helpers

# --- Can this machine run it? ----------------------------------------------------------
zt_require_bins "$BIN_DIR" ztrain zt-prepare
zt_require_root
zt_ensure_slurm

zt_scratch zt-slurm-test

# --- The cluster -----------------------------------------------------------------------
zt_start_cluster   # one node
sbatch_opts=(-n 2 -c 1 --chdir="$SCR")
zt_overcommit_for 2

# --- Data --------------------------------------------------------------------------------
zt_make_corpus "$BIN_DIR" "$SCR"
DATA="--data.train=$SCR/data/train_*.bin"

# run_job NAME ARGS...: sbatch --wait cpu.sbatch with ARGS (for ztrain); output in
# $SCR/NAME.out; returns sbatch's status (the job's exit code; 124: timed out).
run_job() {
    local name="$1"
    shift
    timeout 90 sbatch --wait --job-name="zt-$name" --output="$SCR/$name.out" \
        "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "$@" >"$SCR/$name.sbatch" 2>&1
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
# checkpoint steps the job wrote, in order
ckpt_steps() { sed -nE 's/.*checkpoint .*step_0*([0-9]+) written.*/\1/p' "$out3"; }

if [ "$failures" -eq 0 ]; then
    RUN3="$SCR/run3"
    ZT_MAX_RESTARTS=1 submit_bg job3 120 "${sbatch_opts[@]}" "$SBATCH_SCRIPT" "$DATA" \
        --run.dir="$RUN3" --train.max_steps=1000000 --train.log_every=20 --checkpoint.every=0
    sb3="$SUBMIT_PID"
    JOB3="$JOB"
    preempt_once job3 has_step_line
    if [ -z "$phase" ] && ! wait_until 60 has_step_after_restart; then
        phase="job3: the requeued job printed no step line within 60 s"
    fi
    if [ -z "$phase" ]; then
        signal_batch job3 "$JOB3" ||
            phase="job3: the second scancel --batch --signal=USR1 failed"
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

# --- 4. Submitted twice: one trains, the other exits 2 naming it ------------------------
if [ "$failures" -eq 0 ]; then
    RUN4="$SCR/run4"
    one=(-n 1 -c 1 --chdir="$SCR")
    ZT_REQUEUE_ON_SIGNAL=0 submit_bg job4 120 "${one[@]}" "$SBATCH_SCRIPT" "$DATA" \
        --run.dir="$RUN4" --train.max_steps=1000000 --train.log_every=20 --checkpoint.every=50
    sb4="$SUBMIT_PID"
    JOB4="$JOB"
    if [ -z "$JOB4" ] || ! wait_until 60 grep -qsE '^step +[0-9]+/' "$SCR/job4.out"; then
        fail "job4: no job id or no step line within 60 s"
        show_debug job4
    else
        timeout 90 sbatch --wait --job-name=zt-job5 --output="$SCR/job5.out" "${one[@]}" "$SBATCH_SCRIPT" \
            "$DATA" --run.dir="$RUN4" --train.max_steps=100 >"$SCR/job5.sbatch" 2>&1
        rc=$?
        [ "$rc" -eq 2 ] || fail "job5 (the same job submitted twice): exit $rc, expected 2"
        expect_line job5 "run.dir = $RUN4 is in use by another ztrain job \(host [^,]+, PID [0-9]+, Slurm job $JOB4, started" \
            "the refusal naming the first job"
        signal_batch job4 "$JOB4" || fail "job4: scancel --batch --signal=USR1 failed"
    fi
    wait "$sb4"
    rc=$?
    bg_pids=()
    if check_status job4 "$rc"; then
        expect_line job4 'stopped by SIGUSR1' "the stop after the refusal"
        if ! /usr/bin/python3 - "$RUN4/metrics.jsonl" <<'PY'
import collections, json, sys
c = collections.Counter(r["step"] for r in map(json.loads, open(sys.argv[1])) if "loss" in r)
sys.exit(0 if c and max(c.values()) == 1 and sorted(c) == list(range(1, max(c) + 1)) else 1)
PY
        then
            fail "job4: metrics.jsonl does not hold each step once"
        fi
    fi
fi

if [ "$failures" -ne 0 ]; then
    echo "test_slurm_job: $failures failure(s)" >&2
    exit 1
fi
echo "test_slurm_job: all checks passed"
