#!/usr/bin/env bash
# Dry run of run_device.sh on the dev machine (root, no GPU), as the device would see it:
# in a private mount namespace, overlays on /usr and /etc hide (whiteout) every file that
# the carried packages (.gpu-carry/MANIFEST.txt), googletest's sources and the fortunes
# corpus installed here, and the loader cache is rebuilt without them. A library or header
# that the carry lacks then fails here instead of on the device. NCCL, which the device
# takes from python3's nvidia-nccl-cu13, is faked as a python package 'nvidia.nccl' whose
# include/ and lib/ point at the CUDA toolkit's copy, so the same detection code runs.
#
#   bash bench/gpu/dryrun.sh [STAGES]     (default stages: "build env gpu unit mpi cli demo")
# Environment: passed through to run_device.sh (ZT_GPU_CUDA defaults to OFF here: building
# the CUDA backend on two shared cores takes long; ZT_GPU_CUDA=ON runs it as on the device).
# Writes the evidence (what was hidden, where each library resolved from) to
# $ZT_DRYRUN_DIR/evidence.txt (default /tmp/zt-dryrun).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
die() { echo "dryrun.sh: ERROR: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "needs root (unshare -m and overlay mounts)"
[ -f .gpu-carry/MANIFEST.txt ] || die "no .gpu-carry/MANIFEST.txt: run bench/gpu/prepare.sh first"
stages=${1:-build env gpu unit mpi cli demo}
w=${ZT_DRYRUN_DIR:-/tmp/zt-dryrun}
rm -rf "$w"; mkdir -p "$w"/{usr-up,usr-wk,etc-up,etc-wk,py/nvidia/nccl/include,py/nvidia/nccl/lib}

# Files to hide: everything the carried packages installed here, as dpkg lists it (with
# usrmerge, /lib/... lies in /usr/lib/...), and the alternatives links that lead to them.
mapfile -t pkgs < <(awk '!/^#/ {print $1}' .gpu-carry/MANIFEST.txt)
# and what the device lacks as well: googletest's sources, HDF5's tools and serial build, the corpus
pkgs+=(googletest hdf5-tools libhdf5-103-1 libhdf5-dev fortunes fortunes-min)
hide=$w/hidden.txt
for p in "${pkgs[@]}"; do dpkg -L "$p" 2>/dev/null || true; done |
  sed -E 's#^/(lib|lib64|bin|sbin)/#/usr/\1/#' | sort -u | while read -r f; do
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    [ -e "$f" ] || [ -L "$f" ] || continue
    echo "$f"
  done >"$hide"
# alternatives (/usr/bin/mpiexec -> /etc/alternatives/mpiexec -> /usr/bin/mpiexec.openmpi),
# then one whiteout per file (python: one process for thousands of mknod).
read -r n_usr n_etc < <(python3 - "$hide" "$w" <<'PY'
import os, stat, sys
hide_path, w = sys.argv[1], sys.argv[2]
hidden = set(open(hide_path).read().split("\n")) - {""}
for top in ("/etc/alternatives", "/usr/bin", "/usr/lib/x86_64-linux-gnu", "/usr/include"):
    for dirpath, dirnames, filenames in os.walk(top):
        if dirpath.count("/") - top.count("/") >= 2:
            dirnames[:] = []
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) and os.path.realpath(p) in hidden:
                hidden.add(p)
with open(hide_path, "w") as f:
    f.write("".join(p + "\n" for p in sorted(hidden)))
n = {"usr": 0, "etc": 0}
for p in hidden:
    top = p.split("/")[1]
    if top not in n:
        continue
    up = os.path.join(w, top + "-up", p[len(top) + 2:])
    os.makedirs(os.path.dirname(up), exist_ok=True)
    os.mknod(up, stat.S_IFCHR | 0o000, os.makedev(0, 0))  # an overlayfs whiteout
    n[top] += 1
print(n["usr"], n["etc"])
PY
)
echo "dryrun.sh: hiding $n_usr files under /usr and $n_etc under /etc from ${#pkgs[@]} packages"

# The fake pip NCCL (nvidia/nccl/{include,lib}) from the CUDA toolkit's copy.
cuda=/usr/local/cuda
for f in "$cuda"/include/nccl*.h; do ln -s "$f" "$w/py/nvidia/nccl/include/"; done
ln -s "$(readlink -f "$cuda/lib64/libnccl.so.2")" "$w/py/nvidia/nccl/lib/libnccl.so.2"

ev=$w/evidence.txt
export ZT_GPU_STAGES="$stages" ZT_GPU_CUDA=${ZT_GPU_CUDA:-OFF} ZT_GPU_JOBS=${ZT_GPU_JOBS:-2}
export ZT_GPU_BUDGET_S=${ZT_GPU_BUDGET_S:-7200} ZT_GPU_BUILD=${ZT_GPU_BUILD:-$repo/build-gpu-dry}
export OUT=${OUT:-$w/out} PYTHONPATH=$w/py${PYTHONPATH:+:$PYTHONPATH} W=$w EV=$ev HIDE=$hide
unshare -m --propagation private bash -c '
  set -euo pipefail
  mount -t overlay overlay -o lowerdir=/usr,upperdir=$W/usr-up,workdir=$W/usr-wk /usr
  mount -t overlay overlay -o lowerdir=/etc,upperdir=$W/etc-up,workdir=$W/etc-wk /etc
  ldconfig   # the cache in the /etc overlay, without the hidden libraries
  {
    echo "## hidden: $(wc -l <"$HIDE") files, e.g."
    grep -E "libmpi.so.40|libhdf5_openmpi.so.103$|libboost_program_options.so.1|openblas-pthread/libopenblas.so.0|libgtest.a|nlohmann/json.hpp|bin/mpiexec|libcurl.so.4$|hdf5/openmpi/hdf5.h" "$HIDE" | head -20
    echo "## inside the namespace, before run_device.sh"
    for f in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/include/hdf5/openmpi/hdf5.h /usr/bin/mpiexec /usr/include/nlohmann/json.hpp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/share/games/fortunes/fortunes; do
      if [ -e "$f" ]; then echo "VISIBLE (bad): $f"; else echo "hidden: $f"; fi
    done
    echo "ldconfig -p | grep -c mpi/hdf5/boost_program/openblas/curl: $(ldconfig -p | grep -cE "libmpi|libhdf5|boost_program|openblas|libcurl" || true)"
    command -v mpiexec h5pcc || echo "no mpiexec or h5pcc on PATH"
  } >"$EV" 2>&1
  cat "$EV"
  set +e
  bash bench/gpu/run_device.sh
  rc=$?
  {
    echo "## run_device.sh exit status: $rc"
    # Where each library resolves from, with the environment run_device.sh sets (read back
    # from its own code path: source the prefix setup by running ldd through it).
    px=${ZT_GPU_PREFIX:-/tmp/zt-gpu-prefix}
    export LD_LIBRARY_PATH=$px/ld OPAL_PREFIX=$px/usr PATH=$px/usr/bin:$PATH
    for f in "$ZT_GPU_BUILD/bin/ztrain" "$ZT_GPU_BUILD/bin/zt-prepare" $(ls "$ZT_GPU_BUILD"/tests/test_* 2>/dev/null | head -3) "$px/usr/bin/orterun" "$px/usr/bin/orted"; do
      [ -x "$f" ] || continue
      echo "## ldd $f"
      ldd "$f" | grep -vE "linux-vdso|ld-linux" | sed "s|$px|<prefix>|"
    done
    echo "## LD_DEBUG=libs ztrain --version (search path of libmpi)"
    LD_DEBUG=libs "$ZT_GPU_BUILD/bin/ztrain" --version 2>&1 | grep -E "find library=libmpi.so|trying file=.*libmpi.so|calling init: .*libmpi" | head -6 | sed "s|$px|<prefix>|"
    echo "## mpiexec -np 2 hostname"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMIX_INSTALL_PREFIX=$px/usr/lib/x86_64-linux-gnu/pmix2 PMIX_PKGDATADIR=$px/usr/lib/x86_64-linux-gnu/pmix2/share/pmix PMIX_MCA_pcompress_base_silence_warning=1 mpiexec --oversubscribe -np 2 hostname 2>&1
  } >>"$EV" 2>&1
  exit $rc
'
