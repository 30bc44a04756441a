#!/usr/bin/env bash
# rss_wrap.sh PREFIX PROGRAM [ARGS...]: runs PROGRAM under /usr/bin/time and writes its peak
# resident set (KiB, GNU time's %M) to PREFIX.RANK, RANK from the MPI launcher's environment
# (0 outside one). Put between the launcher and the program: `ztrun 2 rss_wrap.sh P ztrain ...`.
set -euo pipefail
prefix=$1; shift
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${RANK:-0}}}
exec /usr/bin/time -f %M -o "$prefix.$rank" "$@"
