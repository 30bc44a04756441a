#!/usr/bin/env bash
# CI smoke run of the libFuzzer targets (tests/fuzz/README.md): builds them in build-fuzz
# with clang and runs each for ZT_FUZZ_SECONDS (default 20) over its committed corpus.
# Exits non-zero on a finding (crash, sanitizer report, unexpected exception type, a
# timeout or the memory limit); the reproducer is left in build-fuzz/fuzz-artifacts/.
# Skips (exit 0) when clang++ is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v clang++ >/dev/null 2>&1 || ! command -v clang >/dev/null 2>&1; then
  echo "fuzz smoke: SKIPPED (clang/clang++ not found; libFuzzer needs clang)"
  exit 0
fi
# clang without its runtime libraries (Debian: libclang-rt-dev) cannot link a fuzzer.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
  >"$probe_dir/probe.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe_dir/probe.cpp" -o "$probe_dir/probe" >/dev/null 2>&1; then
  echo "fuzz smoke: SKIPPED (clang++ cannot link -fsanitize=fuzzer,address,undefined; install libclang-rt-dev)"
  exit 0
fi

seconds="${ZT_FUZZ_SECONDS:-20}"
build="${ZT_FUZZ_BUILD_DIR:-build-fuzz}"
jobs=$(nproc)

CC=clang CXX=clang++ cmake -S . -B "$build" -DZT_FUZZ=ON -DZT_CUDA=OFF -DZT_BUILD_TESTS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" --target ztrain_fuzz

# Leak detection is off: HDF5, Open MPI and OpenMP keep process-lifetime allocations that
# LeakSanitizer reports at exit. A malloc over 4 GB returns NULL instead of aborting, as it
# fails on a real machine: libhdf5 sizes some metadata reads from lengths in the file and
# handles the NULL with an error. C++ `new` still aborts at that size (ASan reports it), so
# an oversized allocation in ztrain's own code stays a finding. Everything else ASan/UBSan
# finds is fatal.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:max_allocation_size_mb=4096:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"
status=0
for target in fuzz_token_shard fuzz_tokenizer fuzz_checkpoint_meta fuzz_safetensors fuzz_hf_dir fuzz_jsonl; do
  max_len=4096
  dict=()
  case "$target" in
    fuzz_checkpoint_meta|fuzz_safetensors|fuzz_hf_dir) max_len=16384 ;;
  esac
  case "$target" in
    fuzz_tokenizer|fuzz_checkpoint_meta|fuzz_safetensors|fuzz_hf_dir|fuzz_jsonl) dict=(-dict=tests/fuzz/json.dict) ;;
  esac
  # New inputs go to a scratch corpus; the committed seeds stay untouched.
  work="$build/fuzz-work/$target"
  rm -rf "$work"
  mkdir -p "$work"
  log="$build/fuzz-work/$target.log"
  echo "fuzz smoke: $target for ${seconds}s"
  if "$build/bin/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=25 -rss_limit_mb=4096 \
       -print_final_stats=1 -artifact_prefix="$artifacts/$target-" "${dict[@]}" \
       "$work" "tests/fuzz/corpus/$target" >"$log" 2>&1; then
    grep -E "^(#[0-9]+[[:space:]]+DONE|stat::number_of_executed_units)" "$log" | sed "s/^/  /" || true
  else
    echo "fuzz smoke: FINDING in $target (log: $log; reproducer in $artifacts/):"
    tail -n 60 "$log"
    status=1
  fi
done
exit "$status"
