# shellcheck shell=bash
# Shared by slurm/cpu.sbatch, slurm/gpu_node.sbatch and slurm/multi_node.sbatch: settings,
# the job banner, the srun launch, signal forwarding and self-requeue. Sourced, not run.
#
# Settings (environment, defaults in brackets). Relative paths are relative to the job's
# working directory (the submit directory unless sbatch --chdir says otherwise).
#   ZT_HOME            [$SLURM_SUBMIT_DIR] the ztrain checkout (where the scripts find this file)
#   ZT_BIN             [$ZT_HOME/build/bin/ztrain]
#   ZT_CONFIG          [$ZT_HOME/inputs/demo.ini] the deck
#   ZT_RUN_DIR         [the deck's run.dir] passed as --run.dir; checkpoints go to
#                      RUN_DIR/checkpoints unless --checkpoint.dir says otherwise
#   ZT_SRUN_MPI        [pmix] srun --mpi=...
#   ZT_SRUN_ARGS       [] extra srun options, split on spaces (e.g. "--overcommit")
#   ZT_REQUEUE_ON_SIGNAL [1] after a USR1 (the time-limit warning) and a clean ztrain exit,
#                      requeue this job so it resumes from the checkpoint (checkpoint.resume=auto)
#   ZT_MAX_RESTARTS    [100] no self-requeue once SLURM_RESTART_COUNT reaches this
#   ZT_BACKEND         (multi_node.sbatch) [cuda when the job was given GPUs, otherwise the
#                      deck's backend] passed as --backend=VALUE when set
# Arguments to the batch script ("$@") are passed to ztrain after the settings above, so
# --section.key=value overrides win.
#
# Why the signal dance:
#  * `#SBATCH --signal=B:USR1@120` makes Slurm send USR1 to the batch shell only, about 120 s
#    (up to 60 s earlier) before the time limit. ztrain runs in a job step launched by srun,
#    so it would never see that signal unless the shell passes it on. (Without `B:` Slurm
#    signals the steps but not the shell, and the shell could not tell that it must requeue.)
#  * bash runs a trap only after the foreground command returns, so `srun ...` in the
#    foreground would hold the USR1 until ztrain had ended on its own (too late: SIGKILL at
#    the time limit). So srun runs in the background and the shell sits in `wait`, which a
#    trapped signal interrupts at once; the trap sends USR1 to srun, which forwards it to
#    every task; `wait` is then repeated until srun really exits.
#  * ztrain takes USR1, TERM or INT as "write a checkpoint at the next step boundary and
#    exit 0". A TERM to the shell (scancel, preemption, the time limit itself) is passed on
#    as USR1 as well, so a signal that reaches only the shell (`scancel --batch`) still
#    checkpoints. Slurm sends SIGKILL KillWait seconds (site setting, often 30) after a
#    TERM; the USR1 warning at 120 s leaves the time a large model's checkpoint needs.
#  * After a USR1 the job is not finished, so the script requeues itself (`scontrol
#    requeue`, allowed by `#SBATCH --requeue`); the next run continues from CKPT_DIR/latest.
#    `#SBATCH --open-mode=append` keeps every run's output in one file. A TERM means
#    cancel or preemption: no self-requeue (Slurm requeues preempted jobs itself when the
#    site's PreemptMode says REQUEUE).

# zt_job_has_gpus: true when Slurm gave this job GPUs on this node (--gpus-per-node, --gpus,
# --gres=gpu:N).
zt_job_has_gpus() {
    [ -n "${SLURM_JOB_GPUS:-}${SLURM_GPUS_ON_NODE:-}${SLURM_GPUS_PER_NODE:-}${SLURM_GPUS:-}" ] &&
        [ "${SLURM_GPUS_ON_NODE:-1}" != 0 ]
}

# zt_init KIND: defaults, OpenMP threads, and the banner. KIND names the backend (cpu, cuda).
zt_init() {
    ZT_KIND="$1"
    ZT_HOME="${ZT_HOME:-${SLURM_SUBMIT_DIR:-$PWD}}"
    ZT_BIN="${ZT_BIN:-$ZT_HOME/build/bin/ztrain}"
    ZT_CONFIG="${ZT_CONFIG:-$ZT_HOME/inputs/demo.ini}"
    ZT_RUN_DIR="${ZT_RUN_DIR:-}"
    ZT_SRUN_MPI="${ZT_SRUN_MPI:-pmix}"
    ZT_SRUN_ARGS="${ZT_SRUN_ARGS:-}"
    ZT_REQUEUE_ON_SIGNAL="${ZT_REQUEUE_ON_SIGNAL:-1}"
    ZT_MAX_RESTARTS="${ZT_MAX_RESTARTS:-100}"
    ZT_THREADS="${SLURM_CPUS_PER_TASK:-1}"
    export OMP_NUM_THREADS="$ZT_THREADS"

    echo "ztrain-slurm: job ${SLURM_JOB_ID:-?} (${SLURM_JOB_NAME:-?}) $ZT_KIND," \
         "restart count ${SLURM_RESTART_COUNT:-0}, started $(date '+%F %T')"
    local gpus=""
    if [ -n "${SLURM_GPUS_PER_NODE:-}" ]; then gpus="; GPUs per node $SLURM_GPUS_PER_NODE"; fi
    echo "ztrain-slurm: nodes ${SLURM_JOB_NODELIST:-?} (${SLURM_JOB_NUM_NODES:-1});" \
         "${SLURM_NTASKS:-1} rank(s) x $ZT_THREADS thread(s)$gpus"
    if [ ! -x "$ZT_BIN" ]; then
        echo "ztrain-slurm: error: ZT_BIN=$ZT_BIN is not an executable" >&2
        exit 2
    fi
    if [ ! -f "$ZT_CONFIG" ]; then
        echo "ztrain-slurm: error: ZT_CONFIG=$ZT_CONFIG is not a file" >&2
        exit 2
    fi
}

# Trap handler: remember the signal and pass USR1 on to the srun step.
_zt_forward() {
    ZT_GOT_SIGNAL="$1"
    echo "ztrain-slurm: got SIG$1 at $(date '+%T'); sending USR1 to the job step" \
         "(srun pid ${ZT_STEP_PID:-none}) to checkpoint and stop"
    if [ -n "${ZT_STEP_PID:-}" ]; then
        kill -USR1 "$ZT_STEP_PID" 2>/dev/null || true
    fi
}

# zt_launch [ztrain args...]: srun ztrain in the background, forward USR1/TERM, wait for it,
# requeue after a USR1 if asked to. Returns ztrain's (srun's) exit status.
zt_launch() {
    ZT_GOT_SIGNAL=""
    ZT_STEP_PID=""
    local srun_args=(--mpi="$ZT_SRUN_MPI" --kill-on-bad-exit=1)
    # Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation.
    if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
        srun_args+=(--cpus-per-task="$SLURM_CPUS_PER_TASK")
    fi
    local extra=()
    read -r -a extra <<<"$ZT_SRUN_ARGS"
    srun_args+=("${extra[@]}")
    local zt_args=(--config "$ZT_CONFIG")
    if [ -n "$ZT_RUN_DIR" ]; then
        zt_args+=(--run.dir="$ZT_RUN_DIR")
    fi
    zt_args+=("$@")

    trap '_zt_forward USR1' USR1
    trap '_zt_forward TERM' TERM
    echo "ztrain-slurm: srun ${srun_args[*]} $ZT_BIN ${zt_args[*]}"
    srun "${srun_args[@]}" "$ZT_BIN" "${zt_args[@]}" &
    ZT_STEP_PID=$!
    local rc=0
    while :; do
        rc=0
        wait "$ZT_STEP_PID" || rc=$?
        # A status above 128 with srun still alive: a trapped signal interrupted `wait`.
        if [ "$rc" -gt 128 ] && kill -0 "$ZT_STEP_PID" 2>/dev/null; then
            continue
        fi
        break
    done
    # The loop may have ended on an interrupted wait just as srun exited; bash keeps the
    # status of a finished background job, so ask once more (127: already reported).
    local again=0
    wait "$ZT_STEP_PID" 2>/dev/null || again=$?
    if [ "$again" -ne 127 ]; then rc=$again; fi
    ZT_STEP_PID=""
    # A late USR1 (the warning after ztrain already finished) must not kill this shell.
    trap '' USR1
    trap - TERM
    echo "ztrain-slurm: ztrain exited with status $rc at $(date '+%T')"

    if [ "$rc" -eq 0 ] && [ "$ZT_GOT_SIGNAL" = USR1 ] && [ "$ZT_REQUEUE_ON_SIGNAL" = 1 ] &&
       [ -n "${SLURM_JOB_ID:-}" ]; then
        if [ "${SLURM_RESTART_COUNT:-0}" -ge "$ZT_MAX_RESTARTS" ]; then
            echo "ztrain-slurm: restart count ${SLURM_RESTART_COUNT:-0} reached" \
                 "ZT_MAX_RESTARTS=$ZT_MAX_RESTARTS: not requeueing"
        else
            echo "ztrain-slurm: stopped early on USR1; requeueing job $SLURM_JOB_ID to resume"
            scontrol requeue "$SLURM_JOB_ID" ||
                echo "ztrain-slurm: warning: scontrol requeue failed; resubmit to resume" >&2
        fi
    fi
    return "$rc"
}
