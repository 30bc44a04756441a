#!/usr/bin/env bash
# Run ON the device machine, from the repo root, with .gpu-carry carried (README.md here):
#   run(command="bash bench/gpu/run_device.sh", carry=[".gpu-carry"], timeout_s=600)
# Unpacks the prefix that bench/gpu/prepare.sh packed (Open MPI, parallel HDF5, Boost,
# OpenBLAS, GoogleTest, nlohmann-json), takes NCCL from python3's nvidia-nccl-cu13, builds
# the whole project with ZT_CUDA=ON for sm_90, and runs the stages in order, each with a log
# and a one-line summary, inside a time budget. Everything it writes for the caller is under
# $OUT: summary.txt, env.txt and logs.tar.gz (every log, ctest's JUnit XML, metrics.jsonl).
#
# Environment:
#   ZT_GPU_STAGES    stages to run, in this order (default: all):
#                      build env gpu window unit mpi cli demo lora tensor gpt2 calibrate
#                    'build' is added when a later stage needs a build that is not there.
#   ZT_GPU_BUDGET_S  seconds for the whole script (default 560: the device kills a command
#                    at 600 s); a stage that would not fit is skipped and named at the end
#   ZT_GPU_ARCH      CUDA architectures (default 90 = H100/H200)
#   ZT_GPU_JOBS      build and ctest parallelism (default: nproc)
#   ZT_GPU_BUILD     build folder (default build-gpu/ in the repo: kept while the machine
#                    stays warm, so a second call does not rebuild)
#   ZT_GPU_PREFIX    where the carried prefix is unpacked (default /tmp/zt-gpu-prefix)
#   ZT_GPU_CUDA      ON (default) or OFF: OFF is for dry runs on a machine without nvcc
#   ZT_GPU_SANITIZE=1  also run test_cuda_ops under compute-sanitizer memcheck (gpu stage)
#   ZT_GPU_GPT2_STEPS  optimizer steps of the GPT-2 124M run (default 50)
#   ZT_GPU_CONFIGURE_ONLY=1  stop after configuring (dry runs)
#   ZT_GPU_BACKEND   backend of the demo and gpt2 runs (default cuda; cpu for dry runs)
set -euo pipefail
t0=$(date +%s)
cd "$(dirname "$0")/../.."
repo=$PWD
die() { echo "run_device.sh: ERROR: $*" >&2; [ -n "${summary:-}" ] && echo "ERROR: $*" >>"$summary"; exit 2; }
say() { echo "run_device.sh: $*"; }

stages=${ZT_GPU_STAGES:-build env gpu window unit mpi cli demo lora tensor gpt2 calibrate}
budget=${ZT_GPU_BUDGET_S:-560}
arch=${ZT_GPU_ARCH:-90}
jobs=${ZT_GPU_JOBS:-$(nproc)}
build=${ZT_GPU_BUILD:-$repo/build-gpu}
px=${ZT_GPU_PREFIX:-/tmp/zt-gpu-prefix}
cuda=${ZT_GPU_CUDA:-ON}
backend=${ZT_GPU_BACKEND:-cuda}
for s in $stages; do
  case "$s" in build|env|gpu|window|unit|mpi|cli|demo|lora|tensor|gpt2|calibrate) ;;
    *) die "unknown stage '$s' in ZT_GPU_STAGES (build env gpu window unit mpi cli demo lora tensor gpt2 calibrate)" ;; esac
done

out=${OUT:-/tmp/zt-gpu-out}
mkdir -p "$out"
logs=$(mktemp -d /tmp/zt-gpu-logs.XXXXXX)
summary=$logs/summary.txt
: >"$summary"
elapsed() { echo $(($(date +%s) - t0)); }
remaining() { echo $((budget - $(elapsed))); }
note() { echo "$*" | tee -a "$summary"; }
# The device returns at most 8 files from $OUT: summary, env and one archive of all logs,
# refreshed after every stage so that a run killed at its limit still leaves them.
publish() {
  cp "$summary" "$out/summary.txt"
  [ -f "$logs/env.txt" ] && cp "$logs/env.txt" "$out/env.txt"
  tar -C "$logs" -czf "$out/logs.tar.gz" . 2>/dev/null || true
}
trap publish EXIT

# ---------------------------------------------------------------------------
# The carried prefix
# ---------------------------------------------------------------------------
carry=$repo/.gpu-carry
[ -f "$carry/prefix.tar.xz" ] || die "no $carry/prefix.tar.xz: run 'bash bench/gpu/prepare.sh' on the dev machine and call with carry=[\".gpu-carry\"]"
[ -f "$carry/prefix.tar.xz.sha256" ] || die "$carry/prefix.tar.xz.sha256 is missing: run prepare.sh again"
(cd "$carry" && sha256sum -c --quiet prefix.tar.xz.sha256) || die "$carry/prefix.tar.xz is damaged (checksum)"
sum=$(cut -d' ' -f1 "$carry/prefix.tar.xz.sha256")
if [ "$(cat "$px/.sha256" 2>/dev/null)" != "$sum" ]; then
  rm -rf "$px"; mkdir -p "$px"
  if command -v xz >/dev/null; then
    xz -dc "$carry/prefix.tar.xz" | tar -C "$px" -xf -
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2])' \
      "$carry/prefix.tar.xz" "$px"
  fi
  echo "$sum" >"$px/.sha256"
fi
P=$px/usr
[ -x "$P/bin/mpiexec" ] || die "the prefix has no usr/bin/mpiexec: prepare.sh made a bad prefix"

need_glibc=$(awk '{print $2}' "$px/GLIBC.txt")
have_glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
[ "$(printf '%s\n%s\n' "$need_glibc" "$have_glibc" | sort -V | head -1)" = "$need_glibc" ] \
  || die "the carried Debian libraries need glibc >= $need_glibc; this machine has $have_glibc"

# One folder of links, by soname, on LD_LIBRARY_PATH: the carried MPI/HDF5/Boost/OpenBLAS
# stack always; a carried system library (curl, TLS, ...) only where this machine lacks it.
ldd_dir=$px/ld
rm -rf "$ldd_dir"; mkdir -p "$ldd_dir"
sys_used=()
while read -r soname rel cat pkg; do
  case "$soname" in '#'*) continue ;; esac
  if [ "$cat" = sys ] && ldconfig -p | grep -q "^[[:space:]]*$soname (libc6,x86-64"; then
    continue
  fi
  [ "$cat" = sys ] && sys_used+=("$soname")
  ln -sfn "$px/$rel" "$ldd_dir/$soname"
done <"$px/LIBS.txt"

export PATH="$P/bin:$PATH"
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="$ldd_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CMAKE_PREFIX_PATH="$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
# h5pcc's link line names -lcurl, -lsz, -lz... without a -L: the linker finds them here.
export LIBRARY_PATH="$P/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}"
# h5pcc links the static libhdf5.a by default, and the carry has no static libraries.
export HDF5_USE_SHLIB=yes
# Open MPI and PMIx were built for /usr: tell them where they lie now.
export OPAL_PREFIX=$P
export PMIX_INSTALL_PREFIX=$P/lib/x86_64-linux-gnu/pmix2
export PMIX_PKGDATADIR=$PMIX_INSTALL_PREFIX/share/pmix   # its help texts
# The dry run showed PMIx's zlib plugin unused after relocation: a warning, nothing more.
export PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# One node: shared memory and self only; no warnings about absent network hardware.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_MCA_mca_base_component_show_load_errors=0
export TMPDIR=${TMPDIR:-/tmp}

# Every carried program and library must load before any device time goes to building.
unresolved=$(find "$P" -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do
    [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    ldd "$f" 2>&1 | sed -n "s|^\s*\(.*not found.*\)|$f: \1|p"
  done | sort -u)
if [ -n "$unresolved" ]; then
  echo "$unresolved" | head -30 >&2
  die "carried files need libraries found neither in the prefix nor on this machine (above)"
fi
mpiexec --version >/dev/null 2>&1 || die "mpiexec from the prefix does not run: $(mpiexec --version 2>&1 | head -5)"
note "prefix: $px ($(wc -l <"$px/MANIFEST.txt") lines of manifest); system libraries taken from the carry: ${sys_used[*]:-none}"

# NCCL from python3's nvidia-nccl-cu13 (the pip package has no libnccl.so link: name the file).
nccl_args=()
nccl_dir=$(python3 -c 'import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, "__file__", None) else list(m.__path__)[0])' 2>/dev/null || true)
if [ "$cuda" = ON ]; then
  [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ] \
    || die "python3 has no nvidia.nccl with include/nccl.h (pip package nvidia-nccl-cu13): found '${nccl_dir:-nothing}'"
  nccl_lib=$(ls "$nccl_dir"/lib/libnccl.so* 2>/dev/null | head -1)
  [ -n "$nccl_lib" ] || die "no libnccl.so* under $nccl_dir/lib"
  nccl_args=(-DZT_NCCL_INCLUDE_DIR="$nccl_dir/include" -DZT_NCCL_LIBRARY="$nccl_lib")
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccl_dir/lib"
  export NCCL_HOME=$nccl_dir
fi
echo 'int main(){return 0;}' | g++ -fopenmp -x c++ - -o /tmp/zt-omp-check 2>"$logs/openmp-check.log" \
  || die "g++ -fopenmp does not link here (no libgomp?): $(head -3 "$logs/openmp-check.log")"

# ---------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------
declare -A min_s=([build]=200 [env]=5 [gpu]=40 [window]=15 [unit]=60 [mpi]=60 [cli]=40 [demo]=40 [lora]=30 [tensor]=40 [gpt2]=60 [calibrate]=30)
not_run=()
failed=()
want() { [[ " $stages " == *" $1 "* ]]; }
# A stage runs only when its minimum fits in what is left; its commands are cut at the end
# of the budget.
begin() {
  local s=$1 left
  left=$(remaining)
  if [ "$left" -lt "${min_s[$s]}" ]; then
    not_run+=("$s"); note "$(printf '%-6s SKIPPED: %ss left of the budget, needs %ss' "$s" "$left" "${min_s[$s]}")"
    return 1
  fi
  stage_t0=$(date +%s)
  echo "=== stage $s ($(elapsed)s in, ${left}s left)"
}
finish() {  # stage rc message
  local s=$1 rc=$2 msg=$3 dt=$(($(date +%s) - stage_t0))
  if [ "$rc" = 0 ]; then note "$(printf '%-6s ok    %4ss  %s' "$s" "$dt" "$msg")"
  else failed+=("$s"); note "$(printf '%-6s FAIL  %4ss  %s (rc %s, log %s.log)' "$s" "$dt" "$msg" "$rc" "$s")"; fi
  publish
}
cut_at_budget() { timeout -k 10 "$(($(remaining) > 5 ? $(remaining) - 5 : 1))" "$@"; }
ctest_summary() {  # log -> "N/M passed, K failed, S skipped" from ctest's output
  local log=$1 line skipped
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true)
  skipped=$(grep -c '\*\*\*Skipped\|Not Run (Disabled)\| Skipped ' "$log" || true)
  if [ -n "$line" ]; then echo "$line; $skipped skipped"; else echo "no ctest summary (cut off?)"; fi
}
run_ctest() {  # stage label [extra ctest args]
  local s=$1 label=$2 rc; shift 2
  set +e
  cut_at_budget ctest --test-dir "$build" -L "^$label\$" -j"$jobs" --output-on-failure \
    --output-junit "$logs/$s.xml" "$@" >"$logs/$s.log" 2>&1
  rc=$?
  set -e
  tail -5 "$logs/$s.log"
  [ "$rc" = 124 ] && echo "(cut at the end of the budget)" >>"$logs/$s.log"
  finish "$s" "$rc" "ctest -L $label: $(ctest_summary "$logs/$s.log")"
}

if ! want build && [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  for s in env gpu window unit mpi cli demo lora tensor gpt2; do want "$s" && { stages="build $stages"; say "no build in $build: adding the build stage"; break; }; done
fi

if want build && begin build; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cuda_args=(-DZT_CUDA=OFF)
  if [ "$cuda" = ON ]; then
    [ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || die "ZT_GPU_CUDA=ON but no nvcc"
    cuda_args=(-DZT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" "${nccl_args[@]}")
    [ -x /usr/local/cuda/bin/nvcc ] && cuda_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
  fi
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  # A cache left by a failed configure keeps wrong answers (HDF5_IS_PARALLEL...): start over.
  [ "$(cat "$build/.zt-configured" 2>/dev/null)" = "$sum" ] || rm -f "$build/CMakeCache.txt"
  set +e
  cut_at_budget cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "${launcher[@]}" \
    -DMPI_C_COMPILER="$P/bin/mpicc" -DMPI_CXX_COMPILER="$P/bin/mpicxx" -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec" \
    -DHDF5_C_COMPILER_EXECUTABLE="$P/bin/h5pcc" \
    -DOpenBLAS_INCLUDE_DIR="$P/include/x86_64-linux-gnu/openblas-pthread" \
    -DOpenBLAS_LIBRARY="$P/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so" \
    ${ZT_GPU_CMAKE_ARGS:-} >"$logs/configure.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" != 0 ]; then tail -30 "$logs/configure.log"; finish build "$rc" "cmake configure failed"; die "configure failed: see configure.log"; fi
  echo "$sum" >"$build/.zt-configured"
  grep -E '^-- +(MPI|HDF5|BLAS|CUDA backend|NCCL) ' "$logs/configure.log" || true
  # Nothing the build links may come from outside the prefix, the toolchain and CUDA.
  leaks=$(grep -E '^(MPI_|HDF5_|Boost_|OpenBLAS_|GTest_|nlohmann_json_)[A-Za-z_]*(LIBRARY|LIBRARIES|INCLUDE_DIR|INCLUDE_DIRS|DIR|EXECUTABLE|COMPILER)[A-Z_]*:[A-Z]*=' "$build/CMakeCache.txt" \
          | grep -E '=/(usr|opt)/' | grep -v "=$P" | grep -v '=/usr/local/cuda' \
          | grep -vE '=/usr/lib/x86_64-linux-gnu/lib(dl|m|pthread|rt|c|util)\.(a|so)$' || true)
  [ -z "$leaks" ] || { echo "$leaks" >&2; echo "$leaks" >>"$logs/configure.log"; die "CMake found some dependencies outside the carried prefix (above)"; }
  if [ "${ZT_GPU_CONFIGURE_ONLY:-0}" = 1 ]; then
    finish build 0 "configured only (ZT_GPU_CONFIGURE_ONLY=1): $(grep -E '^-- +NCCL ' "$logs/configure.log" || true)"
    exit 0
  fi
  set +e
  cut_at_budget cmake --build "$build" -j"$jobs" >"$logs/build.log" 2>&1
  rc=$?
  set -e
  tail -3 "$logs/build.log"
  [ "$rc" = 0 ] || { grep -E 'error|Error' "$logs/build.log" | head -20; finish build "$rc" "build failed"; die "build failed: see build.log"; }
  nexe=$(find "$build/bin" "$build/tests" -maxdepth 1 -type f -perm -u+x 2>/dev/null | wc -l)
  # Every program built must resolve every library, and MPI/HDF5/Boost/OpenBLAS from the prefix.
  bad=$(find "$build/bin" "$build/tests" -maxdepth 1 -type f -perm -u+x | while read -r f; do
          ldd "$f" | awk -v f="$f" -v p="$px" '/not found/ {print f": "$0} /libmpi|libhdf5|libboost|libopenblas|libopen-pal|libpmix/ && index($3, p) != 1 {print f": "$0" (not from the prefix)"}'
        done)
  [ -z "$bad" ] || { echo "$bad" | head -20 >&2; finish build 1 "built programs resolve libraries wrongly"; die "see above"; }
  finish build 0 "$nexe programs built, all libraries resolve (MPI, HDF5, Boost, OpenBLAS from the prefix)"
fi
ztrain=$build/bin/ztrain

if want env && begin env; then
  {
    echo "## date";          date -u
    echo "## ztrain --env";  "$ztrain" --env 2>&1 || echo "(ztrain --env failed: rc $?)"
    echo "## nvidia-smi";    nvidia-smi 2>&1 || echo "(nvidia-smi failed)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || true
    echo "## nvcc";          nvcc --version 2>&1 | tail -2
    echo "## g++";           g++ --version | head -1
    echo "## cmake";         cmake --version | head -1
    echo "## mpiexec";       mpiexec --version 2>&1 | head -1
    echo "## NCCL / cuDNN pip packages"
    env -u LD_LIBRARY_PATH python3 - <<'EOF' 2>&1 || true
import importlib.metadata as md
for name in ("nvidia-nccl-cu13", "nvidia-cudnn-cu13", "torch", "transformers"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} not installed")
EOF
    echo "## nccl.h";  grep -E '#define NCCL_(MAJOR|MINOR|PATCH) ' "${nccl_dir:-/nonexistent}/include/nccl.h" 2>&1 || true
    echo "## carried packages"; grep -v '^#' "$px/MANIFEST.txt"
    echo "## ldd ztrain"; ldd "$ztrain"
  } >"$logs/env.txt" 2>&1
  rc=0; "$ztrain" --env >/dev/null 2>&1 || rc=$?
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  finish env "$rc" "GPU: ${gpu_name:-none visible}; env.txt"
fi

want gpu && begin gpu && {
  run_ctest gpu gpu
  if [ "${ZT_GPU_SANITIZE:-0}" = 1 ] && [ "$(remaining)" -gt 60 ]; then
    set +e
    cut_at_budget compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/test_cuda_ops" \
      >"$logs/memcheck.log" 2>&1
    note "gpu    memcheck rc $? (memcheck.log)"
    set -e
  fi
}
# Issue 52's windowed attention on the GPU: a window of 1024 against causal attention at
# T = 4096 (forward + backward on the segmented kernel's score bands), timed on CUDA events.
if want window && begin window; then
  set +e
  cut_at_budget "$build/bin/sliding_window_bench" --backend "$backend" --T 4096 --window 1024 --reps 5 \
    >"$logs/window.log" 2>&1
  rc=$?
  set -e
  tail -3 "$logs/window.log"
  finish window "$rc" "$(grep -E '^score ratio' "$logs/window.log" | cut -c1-120)"
fi

want unit && begin unit && run_ctest unit unit
want mpi && begin mpi && run_ctest mpi mpi
want cli && begin cli && run_ctest cli cli

# Training runs: one rank, under the carried mpiexec, each run's metrics.jsonl kept.
run_train() {  # stage log-name ztrain-args...
  local s=$1 rc; shift
  # A fresh run each call: ztrain refuses to start one where an earlier call (a warm
  # machine) left its checkpoints and metrics.
  rm -rf "/tmp/zt-gpu-run/$s"
  set +e
  OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} cut_at_budget mpiexec --bind-to none -np 1 "$ztrain" "$@" >"$logs/$s.log" 2>&1
  rc=$?
  set -e
  return "$rc"
}
last_step() { grep -E '^step ' "$1" | tail -1; }
if want demo && begin demo; then
  data=/tmp/zt-gpu-data/fortunes
  rc=0
  if [ ! -f "$data/tokenizer.json" ]; then
    "$build/bin/zt-prepare" --input "$px/corpus/fortunes" --output "$data" --tokenizer byte \
      --doc-separator % --val-fraction 0.05 >"$logs/demo-prepare.log" 2>&1 || rc=$?
  fi
  if [ "$rc" = 0 ]; then
    run_train demo --config inputs/demo.ini --backend="$backend" --checkpoint.resume=never \
      --run.dir=/tmp/zt-gpu-run/demo --data.train="$data/train_*.bin" --data.val="$data/val_*.bin" || rc=$?
    cp /tmp/zt-gpu-run/demo/metrics.jsonl "$logs/demo-metrics.jsonl" 2>/dev/null || true
  fi
  tail -3 "$logs/demo.log" 2>/dev/null || true
  finish demo "$rc" "demo deck, backend=$backend, 1 rank: $(last_step "$logs/demo.log")"
fi

# Imported weights and LoRA on the device (issue 51): the demo's checkpoint consolidated into
# a Hugging Face directory, then 20 steps of LoRA r 4 from it (model.from_hf) on the device and
# on this machine's CPU. Step 1's loss is the base's (B starts at zero): the two should agree
# to about 1e-4, and both should fall.
if want lora && begin lora; then
  data=/tmp/zt-gpu-data/fortunes
  hf=/tmp/zt-gpu-run/demo-hf
  rc=0
  summary_line=""
  rm -rf "$hf"
  "$build/bin/zt-consolidate" /tmp/zt-gpu-run/demo/checkpoints --output "$hf/" >"$logs/lora-consolidate.log" 2>&1 ||
    rc=$?
  for b in "$backend" cpu; do
    [ "$rc" = 0 ] || break
    run_train "lora-$b" --config inputs/demo.ini --backend="$b" --checkpoint.resume=never --model.from_hf="$hf" \
      --lora.rank=4 --lora.targets=c_attn,c_fc --train.max_steps=20 --train.log_every=1 --train.eval_every=0 \
      --train.sample_tokens=0 --run.dir="/tmp/zt-gpu-run/lora-$b" --data.train="$data/train_*.bin" \
      --data.val="$data/val_*.bin" || rc=$?
    cp "/tmp/zt-gpu-run/lora-$b/metrics.jsonl" "$logs/lora-$b-metrics.jsonl" 2>/dev/null || true
    summary_line="$summary_line $b: $(grep -E '^step ' "$logs/lora-$b.log" | head -1 | cut -c1-32) ..."
    summary_line="$summary_line $(last_step "$logs/lora-$b.log" | cut -c1-32);"
  done
  tail -3 "$logs/lora-consolidate.log" 2>/dev/null || true
  finish lora "$rc" "model.from_hf + LoRA r 4, 20 steps:$summary_line"
fi

# Tensor parallelism on the device: the demo deck at np 2, parallel.tensor = 2 (both ranks on
# the one GPU, so the tensor group's sums go through the host-staged communicator), the same
# global batch as the demo's one rank, without and with sequence parallelism: each last loss
# should be the demo's within noise.
if want tensor && begin tensor; then
  data=/tmp/zt-gpu-data/fortunes
  rc=0
  summary=""
  for sequence in false true; do
    run=/tmp/zt-gpu-run/tensor-sequence-$sequence
    rm -rf "$run"
    set +e
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} cut_at_budget mpiexec --oversubscribe --bind-to none -np 2 "$ztrain" \
      --config inputs/demo.ini --backend="$backend" --checkpoint.resume=never --parallel.tensor=2 \
      --parallel.sequence="$sequence" --run.dir="$run" --data.train="$data/train_*.bin" \
      --data.val="$data/val_*.bin" >"$logs/tensor-sequence-$sequence.log" 2>&1
    r=$?
    set -e
    [ "$r" -ne 0 ] && rc=$r
    cp "$run/metrics.jsonl" "$logs/tensor-sequence-$sequence-metrics.jsonl" 2>/dev/null || true
    tail -3 "$logs/tensor-sequence-$sequence.log" 2>/dev/null || true
    summary="$summary sequence=$sequence: $(last_step "$logs/tensor-sequence-$sequence.log");"
  done
  finish tensor "$rc" "demo deck, backend=$backend, np 2, tensor 2:$summary (demo: $(last_step "$logs/demo.log" 2>/dev/null))"
fi

if want gpt2 && begin gpt2; then
  steps=${ZT_GPU_GPT2_STEPS:-50}
  data=/tmp/zt-gpu-data/gpt2
  mkdir -p "$data"
  # Synthetic GPT-2 tokens in llm.c's shard format (magic 20240520, version 1 = uint16).
  env -u LD_LIBRARY_PATH python3 - "$data" <<'EOF'
import array, os, random, sys
d = sys.argv[1]
rng = random.Random(1337)
for name, n in (("train_000.bin", 4_000_000), ("val_000.bin", 200_000)):
    path = os.path.join(d, name)
    if os.path.exists(path):
        continue
    header = array.array("i", [20240520, 1, n] + [0] * 253)
    toks = array.array("H", (rng.randrange(50257) for _ in range(n)))
    with open(path + ".tmp", "wb") as f:
        header.tofile(f)
        toks.tofile(f)
    os.replace(path + ".tmp", path)
EOF
  rc=0
  run_train gpt2 --config inputs/gpt2_124m.ini --backend="$backend" --checkpoint.resume=never \
    --run.dir=/tmp/zt-gpu-run/gpt2 --data.train="$data/train_*.bin" --data.val="$data/val_*.bin" \
    --data.tokenizer= --train.max_steps="$steps" --train.warmup_steps=10 --train.eval_every=0 \
    --train.eval_batches=2 --train.sample_tokens=0 --train.log_every=5 --precision.dtype=fp32 || rc=$?
  cp /tmp/zt-gpu-run/gpt2/metrics.jsonl "$logs/gpt2-metrics.jsonl" 2>/dev/null || true
  tail -3 "$logs/gpt2.log"
  # Median tokens/s over the logged steps after the first (warm-up) one.
  tps=$(grep -oE '[0-9]+ tok/s' "$logs/gpt2.log" | awk 'NR > 1 {print $1}' | sort -n |
        awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]; else print "?"}')
  finish gpt2 "$rc" "GPT-2 124M fp32, backend=$backend, $steps steps, synthetic tokens: median ${tps} tok/s; $(last_step "$logs/gpt2.log")"
fi

# The planner's calibration on the device (issue 53): cuBLASLt products, the element-wise
# bandwidth and (np 2 on the one GPU: the staged communicator) all-reduces, against the
# H100 node file's data-sheet peaks. The file it writes is in the logs.
if want calibrate && begin calibrate; then
  rc=0
  set +e
  cut_at_budget mpiexec --oversubscribe --bind-to none -np 2 "$ztrain" --calibrate --backend="$backend" \
    --cluster inputs/clusters/h100_node.ini --cluster-out "$logs/calibrated_gpu.ini" >"$logs/calibrate.log" 2>&1
  rc=$?
  set -e
  grep -E "^(product_efficiency|product_half_gflop|memory_gbps|intra_gbps)" "$logs/calibrated_gpu.ini" 2>/dev/null || true
  finish calibrate "$rc" "ztrain --calibrate --backend=$backend, np 2: $(grep -E '^(product_efficiency|memory_gbps)' \
    "$logs/calibrated_gpu.ini" 2>/dev/null | tr '\n' ' ')"
fi

# ---------------------------------------------------------------------------
note "total $(elapsed)s of a ${budget}s budget; failed: ${failed[*]:-none}; not run: ${not_run[*]:-none}"
if [ ${#not_run[@]} -gt 0 ]; then
  note "next call: run(command=\"ZT_GPU_STAGES='${not_run[*]}' bash bench/gpu/run_device.sh\", carry=[\".gpu-carry\"], timeout_s=600)"
fi
echo "=== summary ($out/summary.txt)"
cat "$summary"
[ ${#failed[@]} -eq 0 ]
