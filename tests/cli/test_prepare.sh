#!/usr/bin/env bash
# zt-prepare end to end: outputs, token counts, shard headers, exit codes and messages.
# Usage: bash test_prepare.sh BIN_DIR SOURCE_DIR
set -u

BIN="$1/zt-prepare"
SRC="$2"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/zt-prepare-test.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
failures=0

fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

# run NAME EXPECTED_RC ARGS...: runs zt-prepare, keeps stdout/stderr in $TMP/NAME.{out,err}.
run() {
    local name="$1" want="$2"
    shift 2
    "$BIN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
    local rc=$?
    if [ "$rc" -ne "$want" ]; then
        fail "$name: exit status $rc, expected $want (args: $*)"
        sed 's/^/    stderr: /' "$TMP/$name.err" >&2
    fi
}

# expect_in NAME FILE TEXT: FILE ($TMP/NAME.out or .err) must contain TEXT.
expect_in() {
    local name="$1" file="$2" text="$3"
    if ! grep -qF -- "$text" "$file"; then
        fail "$name: '$text' not found in $(basename "$file"):"
        sed 's/^/    /' "$file" >&2
    fi
}

expect_file() {
    [ -f "$1" ] || fail "missing output file $1"
}

# Header words 0..2 (magic, version, count) of a shard.
header() { od -An -t d4 -N 12 "$1" | tr -s ' ' | sed 's/^ //'; }
# Tokens of a version-1 shard, space separated.
tokens_u16() { od -An -t u2 -j 1024 -v "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# --- A small corpus: 4 documents of known sizes (byte tokens = bytes + 1 EOT each) ------
mkdir -p "$TMP/corpus"
printf 'one\n%%\ntwo\n%%\nthree\n%%\n' >"$TMP/corpus/a.txt"   # "one\n" "two\n" "three\n"
printf 'four\n' >"$TMP/corpus/b.txt"                          # one document, no separator
printf 'bin\0ary' >"$TMP/corpus/c.dat"                        # binary: skipped in a folder
ln -s a.txt "$TMP/corpus/d.txt"                               # symlink: skipped in a folder

# Files named explicitly; the last 25% of 4 documents (b.txt) is val.
run files 0 --input "$TMP/corpus/a.txt" "$TMP/corpus/b.txt" --output "$TMP/out1" \
    --doc-separator % --val-fraction 0.25
expect_file "$TMP/out1/train_000000.bin"
expect_file "$TMP/out1/val_000000.bin"
expect_file "$TMP/out1/tokenizer.json"
expect_in files "$TMP/files.out" "4 documents (3 train, 1 val)"
expect_in files "$TMP/files.out" "train: 17 tokens"   # (4+1) + (4+1) + (6+1)
expect_in files "$TMP/files.out" "val: 6 tokens"      # 5+1
expect_in files "$TMP/out1/tokenizer.json" '"byte"'
if [ -f "$TMP/out1/train_000000.bin" ]; then
    [ "$(header "$TMP/out1/train_000000.bin")" = "20240520 1 17" ] ||
        fail "train header is '$(header "$TMP/out1/train_000000.bin")', expected '20240520 1 17'"
    [ "$(stat -c %s "$TMP/out1/train_000000.bin")" -eq $((1024 + 2 * 17)) ] ||
        fail "train shard size is not 1024 + 2*17 bytes"
    # EOT (256) before each document: 256 o n e \n 256 t w o \n 256 t h r e e \n
    [ "$(tokens_u16 "$TMP/out1/train_000000.bin")" = "256 111 110 101 10 256 116 119 111 10 256 116 104 114 101 101 10" ] ||
        fail "train tokens are '$(tokens_u16 "$TMP/out1/train_000000.bin")'"
fi

# The same corpus as a folder: the binary file and the symlink are skipped, same result.
run folder 0 --input "$TMP/corpus" --output "$TMP/out2" --doc-separator % --val-fraction 0.25
expect_in folder "$TMP/folder.out" "2 input file(s)"
expect_in folder "$TMP/folder.out" "1 binary, 1 symlink(s)"
expect_in folder "$TMP/folder.out" "train: 17 tokens"
cmp -s "$TMP/out1/train_000000.bin" "$TMP/out2/train_000000.bin" ||
    fail "folder input gave different train tokens than the same files named explicitly"

# Small shards, then a rerun with one shard: stale shards from the first run are removed.
run shards 0 --input "$TMP/corpus" --output "$TMP/out3" --doc-separator % --shard-tokens 5 \
    --val-fraction 0
expect_in shards "$TMP/shards.out" "in 5 shard(s)"    # 23 tokens, 5 per shard
expect_file "$TMP/out3/train_000004.bin"
[ -e "$TMP/out3/val_000000.bin" ] && fail "val-fraction 0 wrote a val shard"
printf 'keep' >"$TMP/out3/train_notes.bin"   # not a shard name: must survive
run rerun 0 --input "$TMP/corpus" --output "$TMP/out3" --doc-separator %
[ -e "$TMP/out3/train_000001.bin" ] && fail "a stale shard survived the rerun"
[ -e "$TMP/out3/train_notes.bin" ] || fail "the rerun removed a file that is not a shard"
expect_in rerun "$TMP/rerun.out" "removed 4 stale shard(s)"

# GPT-2 BPE with the hand-made test vocabulary: "hello world" -> 26 31, EOT 39 first.
printf 'hello world' >"$TMP/hello.txt"
run gpt2 0 --input "$TMP/hello.txt" --output "$TMP/out4" --tokenizer gpt2 \
    --vocab "$SRC/tests/data/bpe_tiny/vocab.json" --merges "$SRC/tests/data/bpe_tiny/merges.txt"
expect_file "$TMP/out4/vocab.json"
expect_file "$TMP/out4/merges.txt"
expect_in gpt2 "$TMP/out4/tokenizer.json" '"gpt2"'
if [ -f "$TMP/out4/train_000000.bin" ]; then
    [ "$(tokens_u16 "$TMP/out4/train_000000.bin")" = "39 26 31" ] ||
        fail "gpt2 tokens are '$(tokens_u16 "$TMP/out4/train_000000.bin")', expected '39 26 31'"
else
    fail "missing $TMP/out4/train_000000.bin"
fi

# --- Bad input: exit status 2 and a message naming the option or file --------------------
run missing 2 --input "$TMP/no-such-file.txt" --output "$TMP/bad"
expect_in missing "$TMP/missing.err" "no-such-file.txt"
expect_in missing "$TMP/missing.err" "zt-prepare: error:"

run badtok 2 --input "$TMP/hello.txt" --output "$TMP/bad" --tokenizer wordpiece
expect_in badtok "$TMP/badtok.err" "--tokenizer"
expect_in badtok "$TMP/badtok.err" "wordpiece"

run fraction 2 --input "$TMP/hello.txt" --output "$TMP/bad" --val-fraction 1.5
expect_in fraction "$TMP/fraction.err" "--val-fraction"
expect_in fraction "$TMP/fraction.err" "1.5"

run novocab 2 --input "$TMP/hello.txt" --output "$TMP/bad" --tokenizer gpt2
expect_in novocab "$TMP/novocab.err" "--vocab"

printf '#version: 0.2\nh e x\n' >"$TMP/bad_merges.txt"
run badmerges 2 --input "$TMP/hello.txt" --output "$TMP/bad" --tokenizer gpt2 \
    --vocab "$SRC/tests/data/bpe_tiny/vocab.json" --merges "$TMP/bad_merges.txt"
expect_in badmerges "$TMP/badmerges.err" "bad_merges.txt:2"

run binary 2 --input "$TMP/corpus/c.dat" --output "$TMP/bad"
expect_in binary "$TMP/binary.err" "c.dat"

run noinput 2 --output "$TMP/bad"
expect_in noinput "$TMP/noinput.err" "--input"

run unknownopt 2 --input "$TMP/hello.txt" --output "$TMP/bad" --bogus
expect_in unknownopt "$TMP/unknownopt.err" "--bogus"

[ -e "$TMP/bad" ] && [ -n "$(ls -A "$TMP/bad")" ] && fail "a rejected run wrote files into $TMP/bad"

run help 0 --help
expect_in help "$TMP/help.out" "--doc-separator"

if [ "$failures" -ne 0 ]; then
    echo "test_prepare: $failures failure(s)" >&2
    exit 1
fi
echo "test_prepare: all checks passed"
