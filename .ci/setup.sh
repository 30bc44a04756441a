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
  libutf8proc-dev                # Unicode NFC normalization (Hugging Face tokenizers)
  libpcre2-dev                   # the tokenizers' pre-tokenizer regexes
  zlib1g-dev libzstd-dev         # zt-prepare: gzip and zstd compressed inputs
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
    python3-venv                   # .venv: the interop tests' Python packages (tests/interop)
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" > /tmp/ztrain-apt.log 2>&1 || {
    tail -20 /tmp/ztrain-apt.log; exit 1; }
fi

# The interop tests' Python packages, from PyPI into the project's own virtual environment
# (.venv, or ZT_INTEROP_VENV as tests/interop/run.sh reads it), never the system Python.
# requirements-lock.txt goes in with --no-deps: it pins everything requirements.txt needs
# except the CUDA wheels torch would pull (about 4 GB; the lock's header says why). Where
# torch then fails to import (no CUDA toolkit on the machine to supply its libraries),
# requirements.txt is installed with its dependencies, the CUDA wheels included. Idempotent:
# redone only when either file changed since the last install (their hash is kept in the venv).
if [ "${1:-all}" != demo ]; then
  root=$(cd "$(dirname "$0")/.." && pwd)
  requirements=$root/tests/interop/requirements.txt
  lock=$root/tests/interop/requirements-lock.txt
  venv=${ZT_INTEROP_VENV:-$root/.venv}
  stamp=$venv/.requirements.sha256
  digest=$(cat "$requirements" "$lock" | sha256sum)
  if [ ! -f "$stamp" ] || [ "$digest" != "$(cat "$stamp")" ]; then
    for pin in $(sed -e 's/#.*//' "$requirements"); do
      grep -qx "$pin" <(sed -e 's/ *#.*//' "$lock") || {
        echo "setup: $lock lacks $pin, which $requirements pins: regenerate it (its header says how)" >&2; exit 1; }
    done
    # The venv takes about 3 GB and pip unpacks torch's 0.5 GB wheel beside it: say so plainly
    # rather than let pip fail half-way with ENOSPC (a full disk once failed CI that way).
    need_kb=$((4 * 1024 * 1024))
    parent=$(dirname "$venv"); mkdir -p "$parent"
    for dir in "$parent" "${TMPDIR:-/tmp}"; do
      free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
      if [ "$free_kb" -lt "$need_kb" ]; then
        echo "setup: $dir has $((free_kb / 1024)) MiB free; the interop tests' packages need about 4096 MiB there (free some space, or set ZT_INTEROP_VENV to a folder on a larger disk)" >&2
        exit 1
      fi
    done
    echo "setup: installing the interop tests' Python packages into $venv (tests/interop/requirements-lock.txt)"
    # No pip cache: it would keep a second copy of every wheel (torch's alone is 0.5 GB).
    pip=("$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir)
    /usr/bin/python3 -m venv "$venv"
    "${pip[@]}" --no-deps -r "$lock" > /tmp/ztrain-pip.log 2>&1 || {
      tail -20 /tmp/ztrain-pip.log; exit 1; }
    if ! "$venv/bin/python" -c 'import torch; torch.randn(3) @ torch.randn(3)' >> /tmp/ztrain-pip.log 2>&1; then
      echo "setup: torch does not load with this machine's CUDA libraries; installing its own (requirements.txt)"
      "${pip[@]}" -r "$requirements" >> /tmp/ztrain-pip.log 2>&1 || { tail -20 /tmp/ztrain-pip.log; exit 1; }
    fi
    echo "$digest" > "$stamp"
  fi
fi
