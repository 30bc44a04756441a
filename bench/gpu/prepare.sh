#!/usr/bin/env bash
# Run on the dev machine (Debian 12, .ci/setup.sh done) before the device call: fills
# .gpu-carry/ in the repo root with what the device machine lacks for the GPU op test:
# GoogleTest's sources and OpenBLAS (headers, the library and its Fortran runtime,
# gzipped to keep the carried tree small). .gpu-carry/ is kept out of git.
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=.gpu-carry
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.gpu-carry/' "$exclude" 2>/dev/null || echo '/.gpu-carry/' >>"$exclude"
rm -rf "$carry"
mkdir -p "$carry/openblas/include" "$carry/openblas/lib"
cp -r /usr/src/googletest "$carry/googletest"
blas_inc=/usr/include/x86_64-linux-gnu/openblas-pthread
blas_lib=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0
cp "$blas_inc/cblas.h" "$blas_inc/openblas_config.h" "$carry/openblas/include/"
for lib in "$blas_lib" "$(ldconfig -p | awk '/libgfortran.so.5 .*x86-64/ {print $NF; exit}')" \
           "$(ldconfig -p | awk '/libquadmath.so.0 .*x86-64/ {print $NF; exit}')"; do
  gzip -c "$(readlink -f "$lib")" >"$carry/openblas/lib/$(basename "$lib").gz"
done
du -sh "$carry"
