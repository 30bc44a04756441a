#!/usr/bin/env bash
# Behaviour A/B of two zt-prepare binaries: the same cases (every input mode, tokenizer and
# option group, and a set of error cases) on OLD and NEW, and every output file (shards,
# tokenizer.json and its companions), stdout, stderr and exit status must be byte-identical.
#
#   bash bench/ab_prepare.sh OLD_ZT_PREPARE NEW_ZT_PREPARE [--case REGEX] [--keep]
#
#   --case REGEX  only the cases whose name matches REGEX (grep -E)
#   --keep        keep the scratch directory and print where it is
#
# Both sides run in folders of the same depth with relative paths, so the paths in their
# messages are the same text. Inputs: small generated text and JSON Lines files, a folder
# with a binary file, a symlink and a subfolder, tests/data (bpe_tiny, chat_tiny, the GPT-2
# tokenizer.json) and, when present, /work/shared/data/tokenizers (Llama 3 and Qwen2.5
# tokenizer.json with their tokenizer_config.json: chat template detection, 32-bit shards);
# ZT_AB_TOKENIZERS overrides that folder. Exit status: 0 when every case is identical, 1
# otherwise, 2 on bad usage.
set -uo pipefail

die() { echo "ab_prepare: error: $*" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED_TOK=${ZT_AB_TOKENIZERS:-/work/shared/data/tokenizers}
[ $# -ge 2 ] || die "usage: bash bench/ab_prepare.sh OLD_ZT_PREPARE NEW_ZT_PREPARE [--case REGEX] [--keep]"
OLD=$(realpath "$1") NEW=$(realpath "$2")
shift 2
only="" keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --case) [ $# -ge 2 ] || die "--case needs a regex"; only=$2; shift ;;
        --keep) keep=1 ;;
        *) die "unknown argument '$1'" ;;
    esac
    shift
done
[ -x "$OLD" ] || die "$OLD is not executable"
[ -x "$NEW" ] || die "$NEW is not executable"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ab-prepare.XXXXXX")
if [ "$keep" -eq 1 ]; then echo "ab_prepare: scratch: $TMP"; else trap 'rm -rf "$TMP"' EXIT; fi

# ---- inputs (in $TMP/in, seen as ../../in from a case folder) -----------------------------
make_inputs() {
    local in=$TMP/in
    mkdir -p "$in/docs/sub" "$in/empty_docs" "$in/tok"
    printf 'The first document.\nIt has two lines, and caf\xc3\xa9 in it.\n' >"$in/docs/a.txt"
    printf 'Second document: numbers 12345 and   spaces.\n' >"$in/docs/b.txt"
    printf '   \n\t\n' >"$in/docs/c_blank.txt"
    printf 'binary\0data' >"$in/docs/d.dat"
    ln -s a.txt "$in/docs/e_link.txt"
    printf 'inside a subfolder\n' >"$in/docs/sub/f.txt"
    printf 'bin\0ary' >"$in/empty_docs/only_binary.bin"
    local i
    for i in $(seq 1 40); do
        printf 'Fortune number %d: a stitch in time saves %d.\r\n%%\r\n' "$i" "$((i * 9))"
        [ $((i % 7)) -eq 0 ] && printf '   \n%%\n'
    done >"$in/fortunes"
    printf 'hello world, hello there\n' >"$in/bpe.txt"
    printf 'bin\0ary' >"$in/binary.txt"
    for i in $(seq 1 12); do printf '{"text": "document %d of the text layout"}\n' "$i"; done >"$in/text.jsonl"
    for i in $(seq 1 10); do
        printf '{"prompt": "question %d?", "completion": " answer %d", "id": %d}\n' "$i" "$i" "$i"
    done >"$in/qa.jsonl"
    for i in $(seq 1 6); do
        printf '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi %d"}, ' "$i"
        printf '{"role": "assistant", "content": "Hello %d"}, {"role": "user", "content": "More"}, ' "$i"
        printf '{"role": "assistant", "content": "Done."}]}\n'
    done >"$in/chat.jsonl"
    { echo '{"text": "one"}'; echo '{"text": 2}'; echo ''; echo 'not json'
      echo '{"prompt": "p", "completion": "c"}'; echo '{"text": "a much longer example than the others"}'
      echo '{"text": "four"}'; } >"$in/mixed.jsonl"
    for i in $(seq 1 25); do echo "bad $i"; done >"$in/many_bad.jsonl"
    cp "$ROOT/tests/data/bpe_tiny/vocab.json" "$ROOT/tests/data/bpe_tiny/merges.txt" "$in/tok/"
    mkdir -p "$in/tok/chat_tiny" "$in/tok/gpt2" "$in/tok/llama3" "$in/tok/qwen2_5"
    cp "$ROOT/tests/data/chat_tiny/tokenizer.json" "$ROOT/tests/data/chat_tiny/tokenizer_config.json" \
        "$in/tok/chat_tiny/"
    gzip -dc "$ROOT/tests/data/hf/gpt2_tokenizer.json.gz" >"$in/tok/gpt2/tokenizer.json"
    local t
    for t in llama3 qwen2_5; do
        if [ -f "$SHARED_TOK/$t/tokenizer.json.gz" ]; then
            gzip -dc "$SHARED_TOK/$t/tokenizer.json.gz" >"$in/tok/$t/tokenizer.json"
            cp "$SHARED_TOK/$t/tokenizer_config.json" "$in/tok/$t/"
        fi
    done
}

# ---- cases: each runs `prep ARGS...` one or more times in an empty folder -----------------
I=../../in
T=$I/tok
CASES=(
    "text_folder_byte|prep --input $I/docs --output out"
    "text_fortunes_sep|prep --input $I/fortunes --output out --doc-separator % --val-fraction 0.2 --shard-tokens 700"
    "text_two_inputs_val0|prep --input $I/fortunes $I/docs/a.txt --output out --val-fraction 0"
    "text_one_doc_note|prep --input $I/docs/a.txt --output out --val-fraction 0.5"
    "text_gpt2_bpe_tiny|prep --input $I/bpe.txt --output out --tokenizer gpt2 --vocab $T/vocab.json --merges $T/merges.txt"
    "text_hf_gpt2|prep --input $I/fortunes --output out --tokenizer $T/gpt2/tokenizer.json --doc-separator % --val-fraction 0.1"
    "text_hf_llama3|prep --input $I/fortunes $I/docs --output out --tokenizer $T/llama3/tokenizer.json --doc-separator % --shard-tokens 300"
    "text_nested_output|prep --input $I/docs --output out/a/b --val-fraction 0.4"
    "text_stale|prep --input $I/fortunes --output out --doc-separator % --shard-tokens 200; prep --input $I/fortunes --output out --doc-separator %"
    "text_format_text_on_jsonl|prep --input $I/qa.jsonl --output out --format text"
    "jsonl_text_auto|prep --input $I/text.jsonl --output out --val-fraction 0.25"
    "jsonl_prompt_shards|prep --input $I/qa.jsonl --output out --format jsonl:prompt --val-fraction 0.3 --shard-tokens 50"
    "jsonl_two_files|prep --input $I/qa.jsonl $I/text.jsonl --output out --val-fraction 0.5"
    "jsonl_chat_llama3_detected|prep --input $I/chat.jsonl --output out --tokenizer $T/llama3/tokenizer.json"
    "jsonl_chat_chatml_detected|prep --input $I/chat.jsonl --output out --tokenizer $T/chat_tiny/tokenizer.json --val-fraction 0.5"
    "jsonl_chat_tiny_llama3|prep --input $I/chat.jsonl --output out --tokenizer $T/chat_tiny/tokenizer.json --chat-template llama3 --format jsonl:chat"
    "jsonl_chat_tiny_chatml|prep --input $I/chat.jsonl $I/qa.jsonl --output out --tokenizer $T/chat_tiny/tokenizer.json --chat-template chatml --shard-tokens 120"
    "jsonl_hf_gpt2_prompt|prep --input $I/qa.jsonl --output out --tokenizer $T/gpt2/tokenizer.json"
    "jsonl_skip_bad_max_tokens|prep --input $I/mixed.jsonl --output out --skip-bad --max-tokens 20 --val-fraction 0"
    "jsonl_stale|prep --input $I/qa.jsonl --output out --val-fraction 0 --shard-tokens 40; prep --input $I/qa.jsonl --output out --val-fraction 0"
    "err_bad_lines|prep --input $I/mixed.jsonl --output out"
    "err_many_bad_lines|prep --input $I/many_bad.jsonl --output out"
    "err_layout_forced|prep --input $I/qa.jsonl --output out --format jsonl:text"
    "err_chat_no_template|prep --input $I/chat.jsonl --output out"
    "err_chat_gpt2_no_config|prep --input $I/chat.jsonl --output out --tokenizer $T/gpt2/tokenizer.json"
    "err_chat_template_missing_tokens|prep --input $I/chat.jsonl --output out --tokenizer $T/gpt2/tokenizer.json --chat-template chatml"
    "err_options|prep; prep --input $I/docs; prep --input $I/docs --output out --val-fraction 1; prep --input $I/docs --output out --shard-tokens 0; prep --input $I/docs --output out --shard-tokens 3000000000; prep --input $I/docs --output out --format csv; prep --input $I/docs --output out --chat-template alpaca; prep --input $I/docs --output out --max-tokens -1; prep --input $I/docs --output out --tokenizer nope.json; prep --input $I/docs --output out --tokenizer gpt2; prep --input $I/docs --output out --vocab $T/vocab.json; prep --input $I/docs --output out --bogus; prep stray --input $I/docs --output out; prep --input $I/docs --output out --val-fraction abc"
    "err_inputs|prep --input $I/missing.txt --output out; prep --input $I/binary.txt --output out; prep --input $I/empty_docs --output out; prep --input $I/docs/c_blank.txt --output out; prep --input $I/qa.jsonl $I/docs/a.txt --output out; prep --input $I/docs --output $I/docs/a.txt; prep --input $I/docs --output out --skip-bad; prep --input $I/docs --output out --chat-template llama3"
    "err_output_not_creatable|prep --input $I/docs --output $I/docs/a.txt/out; prep --input $I/qa.jsonl --output $I/docs/a.txt/out"
    "err_hf_qwen2_5_normalizer|prep --input $I/chat.jsonl --output out --tokenizer $T/qwen2_5/tokenizer.json"
    "err_gpt2_unknown_byte|prep --input $I/fortunes --output out --tokenizer gpt2 --vocab $T/vocab.json --merges $T/merges.txt"
    "help|prep --help; prep -h --bogus"
)

# prep ARGS...: one run of $BIN, its stdout, stderr and exit status appended to log.txt.
prep() {
    local n=$((++RUN))
    "$BIN" "$@" >"stdout.$n" 2>"stderr.$n"
    echo "run $n: exit $?" >>log.txt
}

# run_side SIDE BIN NAME COMMANDS: the case in $TMP/SIDE/NAME.
run_side() {
    local dir=$TMP/$1/$3
    mkdir -p "$dir"
    (cd "$dir" && BIN=$2 RUN=0 && eval "$4")
}

make_inputs
pass=0 failed=0 skipped=0
for c in "${CASES[@]}"; do
    name=${c%%|*} commands=${c#*|}
    [ -z "$only" ] || echo "$name" | grep -qE "$only" || continue
    if [[ "$commands" == *"$T/llama3/"* && ! -f "$TMP/in/tok/llama3/tokenizer.json" ]] ||
        [[ "$commands" == *"$T/qwen2_5/"* && ! -f "$TMP/in/tok/qwen2_5/tokenizer.json" ]]; then
        echo "SKIP $name (no $SHARED_TOK)"
        skipped=$((skipped + 1))
        continue
    fi
    run_side old "$OLD" "$name" "$commands"
    run_side new "$NEW" "$name" "$commands"
    files=$(cd "$TMP/old/$name" && find . -type f | wc -l)
    if diff -r "$TMP/old/$name" "$TMP/new/$name" >"$TMP/$name.diff" 2>&1; then
        echo "SAME $name ($files files; $(tr '\n' ' ' <"$TMP/old/$name/log.txt"))"
        pass=$((pass + 1))
    else
        echo "DIFF $name:"
        head -20 "$TMP/$name.diff" | sed 's/^/    /'
        failed=$((failed + 1))
    fi
done
echo "ab_prepare: $pass identical, $failed different, $skipped skipped (old $OLD, new $NEW)"
[ "$failed" -eq 0 ]
