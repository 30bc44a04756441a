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
# Tokens of a version-1 / version-2 shard, space separated.
tokens_u16() { od -An -t u2 -j 1024 -v "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
tokens_u32() { od -An -t u4 -j 1024 -v "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# expect_tokens NAME SHARD u16|u32 "IDS": the shard exists and holds exactly IDS.
expect_tokens() {
    local name="$1" shard="$2" width="$3" want="$4" got
    if [ ! -f "$shard" ]; then
        fail "$name: missing $shard"
        return
    fi
    got="$("tokens_$width" "$shard")"
    [ "$got" = "$want" ] || fail "$name: tokens are '$got', expected '$want'"
}

[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# --- A small corpus: 4 documents of known sizes (byte tokens = bytes + 1 EOT each) ------
mkdir -p "$TMP/corpus"
printf 'one\n%%\ntwo\n%%\nthree\n%%\n' >"$TMP/corpus/a.txt"   # "one\n" "two\n" "three\n"
printf 'four\n' >"$TMP/corpus/b.txt"                          # one document, no separator
printf 'bin\0ary' >"$TMP/corpus/c.dat"                        # binary: skipped in a folder
ln -s a.txt "$TMP/corpus/d.txt"                               # symlink: skipped in a folder

# Files named explicitly; the hash split picks none of these 4 documents at 0.25, so the
# last one (b.txt) is val.
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
expect_tokens gpt2 "$TMP/out4/train_000000.bin" u16 "39 26 31"

# --- Hugging Face tokenizer.json ---------------------------------------------------------
# GPT-2's real file: "hello world" -> 31373 995 after <|endoftext|> 50256 (no BOS); the file
# is copied as hf_tokenizer.json and the description (tokenizer.json) points at it.
gzip -dc "$SRC/tests/data/hf/gpt2_tokenizer.json.gz" >"$TMP/gpt2_tokenizer.json" ||
    fail "cannot decompress tests/data/hf/gpt2_tokenizer.json.gz"
run hf_gpt2 0 --input "$TMP/hello.txt" --output "$TMP/out5" --tokenizer "$TMP/gpt2_tokenizer.json"
expect_in hf_gpt2 "$TMP/hf_gpt2.out" "tokenizer hf (vocab_size 50257, document separator 50256 '<|endoftext|>', shard version 1)"
expect_file "$TMP/out5/hf_tokenizer.json"
cmp -s "$TMP/gpt2_tokenizer.json" "$TMP/out5/hf_tokenizer.json" || fail "hf_tokenizer.json is not a copy"
expect_in hf_gpt2 "$TMP/out5/tokenizer.json" '"type": "hf"'
expect_in hf_gpt2 "$TMP/out5/tokenizer.json" '"file": "hf_tokenizer.json"'
expect_tokens hf_gpt2 "$TMP/out5/train_000000.bin" u16 "50256 31373 995"

# A vocabulary above 65536 ids writes version-2 (uint32) shards. The file: the 256 byte
# tokens (GPT-2's byte-to-unicode symbols as \u escapes, id = byte), fillers, "hi" = 70000
# (made by the merge "h i"), <|endoftext|> = 70256 as an added token.
awk 'BEGIN {
    printf "{\"added_tokens\": [{\"id\": 70256, \"content\": \"<|endoftext|>\", \"special\": true}],\n"
    printf "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},\n"
    printf "\"decoder\": {\"type\": \"ByteLevel\"},\n"
    printf "\"model\": {\"type\": \"BPE\", \"merges\": [\"h i\"], \"vocab\": {"
    next_cp = 256
    for (b = 0; b < 256; b++) {
        keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174
        printf "\"\\u%04x\": %d, ", keep ? b : next_cp++, b
    }
    for (i = 256; i < 70256; i++) printf (i == 70000 ? "\"hi\": %d, " : "\"f%d\": %d, "), i, i
    printf "\"last\": 70255}}}\n"
}' | sed 's/"f70255": 70255, //' >"$TMP/big_tokenizer.json"
printf 'hi hi' >"$TMP/hihi.txt"
run hf_big 0 --input "$TMP/hihi.txt" --output "$TMP/out6" --tokenizer "$TMP/big_tokenizer.json"
expect_in hf_big "$TMP/hf_big.out" "vocab_size 70257, document separator 70256 '<|endoftext|>', shard version 2"
expect_tokens hf_big "$TMP/out6/train_000000.bin" u32 "70256 70000 32 70000"
[ "$(header "$TMP/out6/train_000000.bin" 2>/dev/null)" = "20240520 2 4" ] ||
    fail "big-vocabulary header is '$(header "$TMP/out6/train_000000.bin")', expected '20240520 2 4'"

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

printf 'hello world, compressed' | gzip -c | head -c 20 >"$TMP/broken.gz"
run binary 2 --input "$TMP/corpus/c.dat" --output "$TMP/bad"
expect_in binary "$TMP/binary.err" "c.dat"

run threads 2 --input "$TMP/hello.txt" --output "$TMP/bad" --threads -1
expect_in threads "$TMP/threads.err" "--threads: -1 is negative"

run badgzip 2 --input "$TMP/broken.gz" --output "$TMP/bad"
expect_in badgzip "$TMP/badgzip.err" "broken.gz': gzip: the file ends inside a compressed stream"

run noinput 2 --output "$TMP/bad"
expect_in noinput "$TMP/noinput.err" "--input"

run unknownopt 2 --input "$TMP/hello.txt" --output "$TMP/bad" --bogus
expect_in unknownopt "$TMP/unknownopt.err" "--bogus"

[ -e "$TMP/bad" ] && [ -n "$(ls -A "$TMP/bad")" ] && fail "a rejected run wrote files into $TMP/bad"
[ -e "$TMP/bad.zt-prepare-partial" ] && fail "a rejected run left its work folder $TMP/bad.zt-prepare-partial"

# Bad tokenizer.json files: exit 2 naming the file, the key and what is unsupported.
# bad_hf NAME JSON TEXT: writes $TMP/NAME.json, expects exit 2 and TEXT in the message.
bad_hf() {
    printf '%s' "$2" >"$TMP/$1.json"
    run "$1" 2 --input "$TMP/hello.txt" --output "$TMP/bad" --tokenizer "$TMP/$1.json"
    expect_in "$1" "$TMP/$1.err" "$3"
}
bad_hf unigram '{"model": {"type": "Unigram", "vocab": []}}' \
    'unigram.json: model.type: "Unigram" is not supported'
bad_hf wordpiece '{"model": {"type": "WordPiece", "vocab": {}}}' \
    'wordpiece.json: model.type: "WordPiece" is not supported'
bad_hf nomerges '{"model": {"type": "BPE", "vocab": {"a": 0}}}' 'nomerges.json: model.merges: missing'
bad_hf metaspace '{"model": {"type": "BPE", "vocab": {"a": 0, "</s>": 1}, "merges": []},
 "pre_tokenizer": {"type": "Metaspace"}}' 'metaspace.json: pre_tokenizer.type: "Metaspace" is not supported'
bad_hf truncated '{"model": ' 'truncated.json: not valid JSON'
bad_hf badregex '{"model": {"type": "BPE", "vocab": {"a": 0, "</s>": 1}, "merges": []},
 "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a[z-a]"}, "behavior": "Isolated"}}' \
    'badregex.json: pre_tokenizer.pattern.Regex: PCRE2 cannot compile the regex "a[z-a]": range out of order in character class'
run hf_nofile 2 --input "$TMP/hello.txt" --output "$TMP/bad" --tokenizer "$TMP/none/tokenizer.json"
expect_in hf_nofile "$TMP/hf_nofile.err" "--tokenizer: '$TMP/none/tokenizer.json' is not byte, gpt2 or an existing"

run help 0 --help
expect_in help "$TMP/help.out" "--doc-separator"

if [ "$failures" -ne 0 ]; then
    echo "test_prepare: $failures failure(s)" >&2
    exit 1
fi
echo "test_prepare: all checks passed"
