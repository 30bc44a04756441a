#!/usr/bin/env bash
# Run ON the device machine, from the repo root, with .gpu-carry carried (see README.md):
# builds the GPU-only op test and runs it; logs and the gtest XML go to $OUT.
#   ZT_GPU_ARCH=90     CUDA architecture to build (90 = H100/H200)
#   ZT_GPU_SANITIZE=1  also run the test under compute-sanitizer memcheck
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/zt-gpu-out}
mkdir -p "$out"
carry=$PWD/.gpu-carry
build=/tmp/zt-gpu-build
[ -d "$carry/googletest" ] || { echo "no .gpu-carry: run bench/gpu/prepare.sh here and carry .gpu-carry"; exit 2; }
# nvcc may not be on PATH in a non-login shell.
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
for gz in "$carry"/openblas/lib/*.gz; do gunzip -fk "$gz"; done

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2;
  g++ --version | head -1; cmake --version | head -1; } 2>&1 | tee "$out/env.txt"

gen=""
command -v ninja >/dev/null && gen="-G Ninja"
set -e
cmake -S bench/gpu -B "$build" $gen -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="${ZT_GPU_ARCH:-90}" -DZT_CARRY="$carry" 2>&1 | tee "$out/configure.log"
cmake --build "$build" -j"$(nproc)" 2>&1 | tee "$out/build.log" | tail -20
set +e

export LD_LIBRARY_PATH="$carry/openblas/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_NUM_THREADS=4
"$build/test_cuda_ops" --gtest_output=xml:"$out/test_cuda_ops.xml" 2>&1 | tee "$out/test_cuda_ops.log"
rc=${PIPESTATUS[0]}
if [ "${ZT_GPU_SANITIZE:-0}" = 1 ]; then
  compute-sanitizer --tool memcheck --error-exitcode 3 "$build/test_cuda_ops" 2>&1 | tail -40 | tee "$out/memcheck.log"
  src=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && rc=$src
fi
echo "test_cuda_ops exit status: $rc"
exit "$rc"
