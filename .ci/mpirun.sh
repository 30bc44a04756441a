#!/usr/bin/env bash
# mpiexec with what Open MPI needs on a workstation or CI box: permission to run as root
# (containers) and more ranks than cores. Usage: .ci/mpirun.sh NP PROGRAM [ARGS...]
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
  flags+=(--bind-to none)
fi
exec mpiexec "${flags[@]}" -np "$np" "$@"
