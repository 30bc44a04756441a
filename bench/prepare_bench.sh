#!/usr/bin/env bash
# zt-prepare throughput against Hugging Face `tokenizers` (the Rust library from PyPI,
# Tokenizer.encode_batch) on the same documents and the same cores, for GPT-2's and
# Llama 3's tokenizer.json, in one run: tokens/s and tokens/s per core.
#
#   bash bench/prepare_bench.sh        (from the repository root)
#   knobs: CORPUS_MB (200), THREADS (the machine's cores), BUILD_DIR (build),
#          VENV (/work/venv-interop, or .venv: python with tokenizers), OUT,
#          CORPUS_ONLY=1 (make the corpus and stop: bench/prepare_memory.sh uses it)
#
# The corpus (natural English text nobody tuned to): GCIDE, the Collaborative International
# Dictionary of English (Webster's 1913 with its quotations, WordNet's glosses; Debian's
# dict-gcide, fetched with `apt-get download`, not installed), cut into documents of 40
# lines, repeated until it holds CORPUS_MB megabytes (one copy is about 40 MB: a repeat
# sees words the tokenizers' caches already hold, for both sides alike). zt-prepare reads
# it with --doc-separator %; the Python side reads the same documents and times
# encode_batch alone (reading excluded), batches of 1,000 documents. Both count CPU time
# (user + system) too: on a shared machine tokens per CPU-second is the figure that the
# other jobs disturb least. Writes bench/results/prepare_<date>.md.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS_MB="${CORPUS_MB:-200}"
THREADS="${THREADS:-$(nproc)}"
BUILD_DIR="${BUILD_DIR:-build}"
VENV="${VENV:-/work/venv-interop}"
[ -x "$VENV/bin/python" ] || VENV=.venv
OUT="${OUT:-bench/results/prepare_$(date -u +%F).md}"
WORK=bench/work/prepare
BIN="$BUILD_DIR/bin"
mkdir -p "$WORK" bench/results
CORPUS="$WORK/corpus_${CORPUS_MB}MB.txt"

# --- the corpus -----------------------------------------------------------------------
if [ ! -s "$CORPUS" ]; then
  (cd "$WORK" && apt-get download dict-gcide > /dev/null)
  dpkg-deb -x "$WORK"/dict-gcide_*.deb "$WORK/src"
  python3 - "$WORK" "$CORPUS_MB" "$CORPUS" <<'PY'
import glob, gzip, sys
work, mb, corpus = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lines = []
for path in sorted(glob.glob(work + "/src/usr/share/dictd/gcide*.dict.dz")):
    lines += gzip.open(path, "rt", encoding="utf-8", errors="replace").read().splitlines()
# A "%" line would split a document: drop the rare lines that are exactly "%".
docs = ["\n".join(l for l in lines[i:i + 40] if l != "%") + "\n" for i in range(0, len(lines), 40)]
size = 0
with open(corpus, "w", encoding="utf-8") as f:
    while size < mb * 1_000_000:
        for d in docs:
            f.write(d + "%\n")
            size += len(d.encode()) + 2
print(f"corpus: {len(docs)} documents per copy, {size / 1e6:.0f} MB")
PY
fi
CORPUS_BYTES=$(stat -c %s "$CORPUS")
[ "${CORPUS_ONLY:-0}" = 1 ] && exit 0

# --- the tokenizers -------------------------------------------------------------------
gzip -dc tests/data/hf/gpt2_tokenizer.json.gz > "$WORK/gpt2.json"
gzip -dc /work/shared/data/tokenizers/llama3/tokenizer.json.gz > "$WORK/llama3.json" 2>/dev/null ||
  gzip -dc ../shared/data/tokenizers/llama3/tokenizer.json.gz > "$WORK/llama3.json"

# zt NAME: zt-prepare on THREADS threads; prints "seconds cpu_seconds tokens".
zt() {
  rm -rf "$WORK/out_$1"
  /usr/bin/time -f "%e %U %S" -o "$WORK/zt_$1.time" "$BIN/zt-prepare" --input "$CORPUS" \
    --output "$WORK/out_$1" --tokenizer "$WORK/$1.json" --doc-separator % --val-fraction 0 \
    --threads "$THREADS" > "$WORK/zt_$1.log" 2> "$WORK/zt_$1.err"
  local tokens wall user sys
  tokens=$(sed -n 's/^zt-prepare: train: \([0-9]*\) tokens.*/\1/p' "$WORK/zt_$1.log")
  read -r wall user sys < "$WORK/zt_$1.time"
  echo "$wall $(python3 -c "print($user + $sys)") $tokens"
  rm -rf "$WORK/out_$1"
}

# hf NAME: tokenizers' encode_batch on THREADS threads; prints "seconds cpu_seconds tokens".
hf() {
  RAYON_NUM_THREADS="$THREADS" TOKENIZERS_PARALLELISM=true "$VENV/bin/python" - "$CORPUS" "$WORK/$1.json" <<'PY'
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[2])
docs = open(sys.argv[1], encoding="utf-8").read().split("\n%\n")
docs = [d + "\n" for d in docs if d.strip()]
t0, c0 = time.perf_counter(), time.process_time()
n = 0
for i in range(0, len(docs), 1000):
    for enc in tok.encode_batch(docs[i:i + 1000], add_special_tokens=False):
        n += len(enc.ids) + 1  # + the document separator zt-prepare adds
print(f"{time.perf_counter() - t0:.3f} {time.process_time() - c0:.3f} {n}")
PY
}

declare -A result
for name in gpt2 llama3; do
  result[zt_$name]=$(zt "$name")
  result[hf_$name]=$(hf "$name")
done

{
  echo "# zt-prepare throughput against Hugging Face tokenizers, $(date -u +%F)"
  echo
  echo "Command: \`CORPUS_MB=$CORPUS_MB THREADS=$THREADS bash bench/prepare_bench.sh\`; revision $(git rev-parse --short HEAD);"
  echo "$(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), tokenizers $("$VENV/bin/python" -c 'import tokenizers; print(tokenizers.__version__)')."
  echo "Corpus: $((CORPUS_BYTES / 1000000)) MB (GCIDE, repeated; see the script)."
  echo "zt-prepare: the whole run (reading, tokenizing, writing the shards); tokenizers: encode_batch only."
  echo
  echo "| tokenizer | side | seconds | CPU seconds | tokens | tokens/s | tokens/s per core | tokens per CPU-second | zt / tokenizers (per CPU-second) |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  for name in gpt2 llama3; do
    read -r zs zc zn <<<"${result[zt_$name]}"
    read -r hs hc hn <<<"${result[hf_$name]}"
    python3 - "$name" "$THREADS" "$zs" "$zc" "$zn" "$hs" "$hc" "$hn" <<'PY'
import sys
name, cores = sys.argv[1], int(sys.argv[2])
zs, zc, zn, hs, hc, hn = (float(x) for x in sys.argv[3:])
for label, s, c, n in (("zt-prepare", zs, zc, zn), ("tokenizers", hs, hc, hn)):
    ratio = f"{(zn / zc) / (hn / hc):.2f}x" if label == "zt-prepare" else ""
    print(f"| {name} | {label} | {s:.1f} | {c:.1f} | {n:.0f} | {n / s:,.0f} | {n / s / cores:,.0f} | {n / c:,.0f} | {ratio} |")
if zn != hn:
    print(f"| {name} | note | | | | | | | token counts differ: {zn:.0f} vs {hn:.0f} |")
PY
  done
} > "$OUT"
cat "$OUT"
