#!/usr/bin/env bash
# Runs one interop test (a Python script) with the project's virtual environment:
#   bash tests/interop/run.sh SCRIPT BIN_DIR SOURCE_DIR
# The environment is ZT_INTEROP_VENV, or .venv at the repository root (.ci/setup.sh makes
# it). Without it the test is skipped (exit 77), or fails under ZT_REQUIRE_INTEROP=1 (CI),
# naming what is missing; the script itself does the same for a missing package.
set -euo pipefail
script=$1 bin=$2 src=$3
venv=${ZT_INTEROP_VENV:-$src/.venv}
if [ ! -x "$venv/bin/python" ]; then
    msg="no Python virtual environment at $venv (bash .ci/setup.sh makes it, with tests/interop/requirements.txt)"
    if [ "${ZT_REQUIRE_INTEROP:-0}" = 1 ]; then echo "interop: FAILED: $msg" >&2; exit 1; fi
    echo "interop: SKIPPED: $msg"
    exit 77
fi
exec "$venv/bin/python" "$script" "$bin" "$src"
