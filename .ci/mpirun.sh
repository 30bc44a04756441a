#!/usr/bin/env bash
# mpiexec with what Open MPI needs on a workstation or CI box, and a clean stop on Ctrl-C.
# Usage: .ci/mpirun.sh NP PROGRAM [ARGS...]
#
#  * Permission to run as root (containers) and more ranks than cores (--oversubscribe,
#    idle OpenMP workers sleeping instead of spinning), --bind-to none.
#  * Stopping: Open MPI's mpiexec treats SIGINT/SIGTERM as "kill the job": it sends SIGTERM
#    to the ranks and exits 1 whatever they do. It forwards SIGUSR1 untouched, and ztrain
#    takes SIGUSR1 as "checkpoint at the next step boundary and exit 0". So mpiexec runs in
#    its own process group (a Ctrl-C in the terminal reaches only this script), and a first
#    SIGINT or SIGTERM to this script is passed on as SIGUSR1: the ranks checkpoint, exit 0,
#    and so do mpiexec and this script. A second one passes SIGTERM on (mpiexec kills the
#    job, no checkpoint). SIGUSR1 is passed on as is.
set -euo pipefail
np=$1; shift
flags=()
if mpiexec --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  cores=$(nproc)
  if [ "$np" -gt "$cores" ]; then
    flags+=(--oversubscribe)
    # More ranks than cores: idle OpenMP workers must sleep, not spin on a shared core.
    export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
  fi
  # No stdin for the ranks: mpiexec is not in the terminal's foreground process group.
  flags+=(--bind-to none --stdin none)
fi

stops=0
# forward SIGNAL: what a stop signal to this script does to the job (see above).
forward() {
  stops=$((stops + 1))
  if [ "$1" = USR1 ]; then
    echo "mpirun.sh: SIGUSR1: passed on to the ranks (checkpoint and stop)" >&2
    kill -USR1 "$child" 2>/dev/null || true
  elif [ "$stops" -eq 1 ]; then
    echo "mpirun.sh: SIG$1: asking the ranks to checkpoint and stop (sent as SIGUSR1);" \
         "SIG$1 again aborts at once" >&2
    kill -USR1 "$child" 2>/dev/null || true
  else
    echo "mpirun.sh: SIG$1 again: aborting the job without a checkpoint" >&2
    kill -TERM "$child" 2>/dev/null || true
  fi
}

# Job control gives the background mpiexec its own process group.
set -m
mpiexec "${flags[@]}" -np "$np" "$@" &
child=$!
set +m
trap 'forward INT' INT
trap 'forward TERM' TERM
trap 'forward USR1' USR1
# A trapped signal interrupts `wait` (status > 128); wait again until mpiexec has exited,
# then once more for its status (bash keeps it).
rc=0
while kill -0 "$child" 2>/dev/null; do
  wait "$child" && rc=0 || rc=$?
done
wait "$child" && rc=0 || rc=$?
exit "$rc"
