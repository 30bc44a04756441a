#!/usr/bin/env bash
# zt-prepare at corpus scale, on a small corpus cut into many parts (ZT_PREPARE_PART_BYTES):
# the same shards byte for byte for 1 and 3 threads, for mpiexec -np 1, 2 and 3, for gzip,
# zstd and standard input, and for a run killed after its first parts then resumed (also at
# another rank count); text and JSON Lines.
# Usage: bash test_prepare_scale.sh BIN_DIR SOURCE_DIR
set -u
BIN="$1"
SRC="$2"
# shellcheck source=cli_lib.sh
source "$SRC/tests/cli/cli_lib.sh"
command -v mpiexec > /dev/null || { echo "skip: no mpiexec"; exit 77; }
MPI=(mpiexec --oversubscribe --bind-to none)
export ZT_PREPARE_PART_BYTES=20000

# same NAME DIR_A DIR_B: the two outputs hold the same files, byte for byte.
same() {
  check "$1" diff -r "$2" "$3"
}

# A text corpus of 3000 documents (about 300 KB) and a JSON Lines one of 2000 examples.
python3 - "$work" <<'PY'
import json, random, sys
r = random.Random(7)
words = "the quick brown fox jumps over lazy dog alpha beta gamma delta ünïcödé 数据 😀".split()
with open(sys.argv[1] + "/text.txt", "w") as f:
    for d in range(3000):
        for _ in range(r.randint(1, 5)):
            f.write(" ".join(r.choice(words) for _ in range(r.randint(1, 12))) + "\n")
        f.write("%\n")
with open(sys.argv[1] + "/ex.jsonl", "w") as f:
    for i in range(2000):
        f.write(json.dumps({"prompt": " ".join(r.choice(words) for _ in range(r.randint(1, 20))),
                            "completion": " " + r.choice(words)}) + "\n")
PY
prep=("$BIN/zt-prepare" --doc-separator % --shard-tokens 40000 --val-fraction 0.1)

expect 0 "train: .* in [0-9]+ shard" "${prep[@]}" --input "$work/text.txt" --output "$work/t1" --threads 1
expect 0 "train: " "${prep[@]}" --input "$work/text.txt" --output "$work/t3" --threads 3
same "text: 3 threads = 1 thread" "$work/t1" "$work/t3"
for np in 1 2 3; do
  expect 0 "train: " "${MPI[@]}" -np $np "${prep[@]}" --input "$work/text.txt" --output "$work/np$np" --threads 1
  same "text: mpiexec -np $np = one process" "$work/t1" "$work/np$np"
done

# Compressed and standard input: whole parts, the same shards.
gzip -c "$work/text.txt" > "$work/text.gz"
expect 0 "train: " "${prep[@]}" --input "$work/text.gz" --output "$work/gz"
same "text: gzip = plain" "$work/t1" "$work/gz"
if command -v zstd > /dev/null; then
  zstd -q -c "$work/text.txt" > "$work/text.zst"
  expect 0 "train: " "${prep[@]}" --input "$work/text.zst" --output "$work/zst"
  same "text: zstd = plain" "$work/t1" "$work/zst"
fi
expect 0 "train: " bash -c "cat '$work/text.txt' | $(printf '%q ' "${prep[@]}") --input - --output '$work/stdin'"
same "text: standard input = plain" "$work/t1" "$work/stdin"

# Killed after its first 3 parts (the test hook dies as a kill would): the output folder is
# not there, the work folder is; a rerun resumes there and writes the same shards.
ZT_DEBUG_PREPARE_STOP_AFTER=3 "${prep[@]}" --input "$work/text.txt" --output "$work/resumed" > /dev/null 2>&1
check "killed: exit 137" test $? -eq 137
check "killed: no output folder" test ! -e "$work/resumed"
check "killed: finished parts kept" test -f "$work/resumed.zt-prepare-partial/part_000002.done.json"
expect 0 "resuming the interrupted run" "${prep[@]}" --input "$work/text.txt" --output "$work/resumed"
same "text: killed and resumed = uninterrupted" "$work/t1" "$work/resumed"
check "resumed: work folder removed" test ! -e "$work/resumed.zt-prepare-partial"
ZT_DEBUG_PREPARE_STOP_AFTER=2 "${prep[@]}" --input "$work/text.txt" --output "$work/resumed2" > /dev/null 2>&1
expect 0 "resuming the interrupted run" "${MPI[@]}" -np 2 "${prep[@]}" --input "$work/text.txt" \
  --output "$work/resumed2"
same "text: killed, resumed at -np 2 = uninterrupted" "$work/t1" "$work/resumed2"

# JSON Lines: examples, whole examples per shard.
jprep=("$BIN/zt-prepare" --shard-tokens 5000 --val-fraction 0.1)
expect 0 "2000 examples" "${jprep[@]}" --input "$work/ex.jsonl" --output "$work/j1" --threads 1
expect 0 "2000 examples" "${MPI[@]}" -np 3 "${jprep[@]}" --input "$work/ex.jsonl" --output "$work/j3" --threads 2
same "jsonl: mpiexec -np 3, 2 threads = one process, 1 thread" "$work/j1" "$work/j3"
gzip -c "$work/ex.jsonl" > "$work/ex.jsonl.gz"
expect 0 "2000 examples" "${jprep[@]}" --input "$work/ex.jsonl.gz" --output "$work/jgz"
same "jsonl: .jsonl.gz = .jsonl" "$work/j1" "$work/jgz"

[ "$failures" -eq 0 ] || { echo "test_prepare_scale: $failures failure(s)"; exit 1; }
echo "test_prepare_scale: all checks passed"
