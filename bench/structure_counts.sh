#!/usr/bin/env bash
# Structure counts of a source tree (issue 48's before/after figures): the sites that test
# the pipeline's size or stage position, the sites that test tensor or sequence parallelism,
# model.arch tests outside src/model, ModelState's public methods, the longest function and
# the largest file under src/.
#
#   bash bench/structure_counts.sh [TREE]     (TREE: a checkout, default this one)
#
# Counts are grep patterns, printed with the figures so that two trees are compared with the
# same patterns.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TREE=$(cd "${1:-$ROOT}" && pwd)
cd "$TREE"
PIPE='pipeline > 1|pipeline == 1|pipeline_rank == 0|first_stage|last_stage|is_first|is_last'
TENSOR='tensor > 1|tensor == 1|tensor_size > 1|parts > 1|m_sequence|\.sequence\b|sequence_parallel'
ARCH='is_llama\(\)|ModelArch::k'
count_all() { grep -rnE "$1" src -c | awk -F: '{s += $2} END {print s + 0}'; }
echo "tree: $TREE ($(git -C "$TREE" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "pipeline size/stage tests in src/:       $(count_all "$PIPE")   /$PIPE/"
echo "tensor/sequence tests in src/:           $(count_all "$TENSOR")   /$TENSOR/"
echo "model.arch tests outside src/model:      $(grep -rnE "$ARCH" src include | grep -vE '^src/model/' -c || true)   /$ARCH/"
hdr=include/ztrain/parallel/model_state.hpp
methods=$(awk '/^class ModelState /{on=1} on && /^  public:/{pub=1; next} on && /^  (private|protected):/{pub=0}
               on && /^};/{exit} pub && /^    [A-Za-z~].*\(/ && !/^    \/\// {n++} END {print n + 0}' "$hdr")
echo "ModelState public methods (declarations): $methods"
# The house checker (cmake/check_function_length.py) with a limit of one line lists every
# function with its length; the longest is the last after sorting.
longest=$(python3 "$ROOT/cmake/check_function_length.py" --max 1 src 2> /dev/null |
          awk -F': ' '/ lines \(limit/ {split($3, n, " "); print n[1], $1 ": " $2}' | sort -n | tail -1 || true)
echo "longest function (lines):               $longest"
largest=$(find src -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' | xargs wc -l |
          grep -v ' total$' | sort -n | tail -1)
echo "largest file in src/ (lines):    $largest"
