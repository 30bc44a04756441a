#!/usr/bin/env bash
# The README's test command: installs dependencies, builds with warnings as errors, runs
# the whole ctest suite, then builds the unit tests with ASan+UBSan and runs them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/setup.sh

jobs=$(nproc)
# The interop tests fail, rather than skip, when a Python package they judge with is missing.
export ZT_REQUIRE_INTEROP=1
# Killed MPI runs leave session folders behind; keep them out of /tmp proper.
export TMPDIR="${TMPDIR:-/tmp}/ztrain-ci-$$"
mkdir -p "$TMPDIR"
trap 'rm -rf "$TMPDIR"' EXIT

cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=Release -DZT_WERROR=ON
cmake --build build-ci -j"$jobs"
ctest --test-dir build-ci --output-on-failure -j"$jobs"

# Sanitizers: the unit tests (no GPU code; leaks inside MPI/OpenMP runtimes are not ours).
# Only their targets, the libraries at -O1 with line tables (the usual ASan setting), the
# tests' own sources at -O0: instrumented test files compile much faster unoptimised, and
# the tests barely slow down (bench/results/ci_time_2026-11-30.md).
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DZT_WERROR=ON -DZT_SANITIZE=ON -DZT_CUDA=OFF -DZT_TEST_OPTIMIZATION=-O0
cmake --build build-asan -j"$jobs" --target unit_tests
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan -L unit --output-on-failure -j"$jobs"

# Fuzz smoke: each libFuzzer target for 20 s over its committed corpus (tests/fuzz/README.md).
bash tests/fuzz/smoke.sh
