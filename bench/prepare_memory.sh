#!/usr/bin/env bash
# zt-prepare's peak memory does not grow with the input: peak RSS (/usr/bin/time -v) for a
# generated input of SIZE_MB megabytes with Llama 3's tokenizer, next to a run on one copy
# of the corpus. Goal: at most 512 MiB for 5 GB (SIZE_MB=5000).
#
#   bash bench/prepare_memory.sh       (from the repository root; after bench/prepare_bench.sh
#                                       or on its own: it makes the same GCIDE corpus)
#   knobs: SIZE_MB (5000), THREADS (the machine's cores), MODE (file: a plain file cut into
#          parts; stdin: the same bytes streamed through standard input), BUILD_DIR, OUT
# Disk: the input (MODE=file), the segments and the shards, about 3 x SIZE_MB for Llama 3
# (4-byte tokens, about 4 bytes of text each). Writes bench/results/prepare_memory_<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB="${SIZE_MB:-5000}"
THREADS="${THREADS:-$(nproc)}"
MODE="${MODE:-file}"
BUILD_DIR="${BUILD_DIR:-build}"
OUT="${OUT:-bench/results/prepare_memory_$(date -u +%F).md}"
WORK=bench/work/prepare
BIN="$BUILD_DIR/bin"
mkdir -p "$WORK" bench/results
# One copy of bench/prepare_bench.sh's corpus (one copy of GCIDE is about 40 MB).
CORPUS_MB=1 CORPUS_ONLY=1 bash bench/prepare_bench.sh
ONE="$WORK/corpus_1MB.txt"
gzip -dc /work/shared/data/tokenizers/llama3/tokenizer.json.gz > "$WORK/llama3.json" 2>/dev/null ||
  gzip -dc ../shared/data/tokenizers/llama3/tokenizer.json.gz > "$WORK/llama3.json"
copies=$(( (SIZE_MB * 1000000 + $(stat -c %s "$ONE") - 1) / $(stat -c %s "$ONE") ))

# run NAME INPUT: zt-prepare under /usr/bin/time -v; prints "max_rss_kib seconds".
run() {
  rm -rf "$WORK/mem_$1"
  /usr/bin/time -v -o "$WORK/mem_$1.time" "$BIN/zt-prepare" --input "$2" --output "$WORK/mem_$1" \
    --tokenizer "$WORK/llama3.json" --doc-separator % --threads "$THREADS" > "$WORK/mem_$1.log" 2>&1
  echo "$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$WORK/mem_$1.time") \
$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$WORK/mem_$1.time")"
  rm -rf "$WORK/mem_$1"
}

small=$(run one "$ONE")
if [ "$MODE" = stdin ]; then
  big=$(for _ in $(seq 1 "$copies"); do cat "$ONE"; done | run big -)
else
  for _ in $(seq 1 "$copies"); do cat "$ONE"; done > "$WORK/big.txt"
  big=$(run big "$WORK/big.txt")
  rm -f "$WORK/big.txt"
fi
{
  echo "# zt-prepare peak memory, $(date -u +%F)"
  echo
  echo "Command: \`SIZE_MB=$SIZE_MB THREADS=$THREADS MODE=$MODE bash bench/prepare_memory.sh\`; revision $(git rev-parse --short HEAD)."
  echo "Llama 3 tokenizer, --doc-separator %, $THREADS thread(s)."
  echo
  echo "| input | MB | peak RSS (MiB) | wall time |"
  echo "| --- | ---: | ---: | --- |"
  read -r rss wall <<<"$small"
  echo "| one corpus copy | $(( $(stat -c %s "$ONE") / 1000000 )) | $((rss / 1024)) | $wall |"
  read -r rss wall <<<"$big"
  echo "| $copies copies ($MODE) | $((copies * $(stat -c %s "$ONE") / 1000000)) | $((rss / 1024)) | $wall |"
} > "$OUT"
cat "$OUT"
