#!/usr/bin/env bash
# Sliding-window against causal attention on the CPU backend (bench/sliding_window.cpp):
# forward + backward at T = 4096 with a window of 1024, interleaved repetitions, and the
# machine it ran on (lscpu's model name and flags, the load before and after).
#   bash bench/sliding_window_bench.sh [BUILD_DIR] [OUT.md]   (extra options: SW_ARGS)
set -euo pipefail
build=${1:-build}
out=${2:-bench/results/sliding_window_$(date -u +%Y-%m-%d).md}
cmake --build "$build" --target sliding_window_bench > /dev/null
{
    echo "# Sliding-window attention against causal attention (CPU backend)"
    echo
    echo "\`bash bench/sliding_window_bench.sh\` at $(git rev-parse --short HEAD), $(date -u '+%Y-%m-%d %H:%M UTC')."
    echo
    echo '```'
    lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L2|L3)'
    lscpu | grep '^Flags' | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512f|avx512bw|avx512_bf16|amx_bf16|amx_tile)$' \
        | tr '\n' ' ' | sed 's/^/Flags (vector): /'
    echo
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    # shellcheck disable=SC2086
    OMP_WAIT_POLICY=PASSIVE "$build/bin/sliding_window_bench" ${SW_ARGS:-}
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo '```'
} | tee "$out"
