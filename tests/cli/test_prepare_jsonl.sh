#!/usr/bin/env bash
# zt-prepare --format jsonl end to end: example shards (version 3) byte for byte for a chat
# record, template detection from tokenizer_config.json, the split by example and its
# determinism, --skip-bad, --shard-tokens never splitting an example, *.jsonl detection and
# --format text overriding it. (Bad lines and bad options: tests/cli/test_bad_input.sh.)
# Usage: bash test_prepare_jsonl.sh BIN_DIR SOURCE_DIR
set -u

BIN="$1/zt-prepare"
SRC="$2"
TMP="$(mktemp -d "${TMPDIR:-/tmp}/zt-prepare-jsonl.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
failures=0
CHAT_TOK="$SRC/tests/data/chat_tiny/tokenizer.json"

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

# expect_in NAME FILE TEXT: FILE must contain TEXT.
expect_in() {
    if ! grep -qF -- "$3" "$2"; then
        fail "$1: '$3' not found in $(basename "$2"):"
        sed 's/^/    /' "$2" >&2
    fi
}

# expect_eq NAME GOT WANT
expect_eq() {
    [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"
}

# Header words 0..4 of a shard: magic, version, tokens, examples, bytes per token.
header() { od -An -t d4 -N 20 "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# od -An -t TYPE -j OFFSET -N BYTES FILE, as one space-separated line.
words() { od -An -t "$1" -j "$2" -N "$3" -v "$4" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
# The ids of the bytes of a string, space separated.
ids() { printf '%s' "$1" | od -An -t u1 -v | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }

[ -x "$BIN" ] || { echo "FAIL: $BIN not found or not executable" >&2; exit 1; }

# --- One chat record, chatml detected from tokenizer_config.json, exact bytes -----------
printf '%s\n' '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}' \
    >"$TMP/chat.jsonl"
run chat 0 --input "$TMP/chat.jsonl" --output "$TMP/chat" --tokenizer "$CHAT_TOK" --val-fraction 0
expect_in chat "$TMP/chat.out" "example shards (version 3), chat template chatml"
expect_in chat "$TMP/chat.out" "1 examples (1 train, 0 val): 0 text, 0 prompt/completion, 1 chat"
expect_in chat "$TMP/chat.out" "train: 25 tokens (3 targets) in 1 shard(s)"
shard="$TMP/chat/train_000000.bin"
# <|im_start|>=261 user\n Hi <|im_end|>=262 \n <|im_start|> assistant\n Yo <|im_end|> \n:
# 25 tokens; the targets are Yo and the <|im_end|> after it.
want_tokens="261 $(ids $'user\n') $(ids Hi) 262 10 261 $(ids $'assistant\n') $(ids Yo) 262 10"
want_mask="$(printf '0 %.0s' $(seq 1 21))1 1 1 0"
expect_eq chat.header "$(header "$shard")" "20240520 3 25 1 2"
expect_eq chat.tokens "$(words u2 1024 50 "$shard")" "$want_tokens"
expect_eq chat.mask "$(words u1 1074 25 "$shard")" "$want_mask"
expect_eq chat.starts "$(words u4 1099 8 "$shard")" "0 25"
expect_eq chat.size "$(stat -c %s "$shard")" "1107"
[ -f "$TMP/chat/hf_tokenizer.json" ] || fail "chat: no hf_tokenizer.json next to the shards"

run llama3 0 --input "$TMP/chat.jsonl" --output "$TMP/llama3" --tokenizer "$CHAT_TOK" --chat-template llama3
expect_in llama3 "$TMP/llama3.out" "chat template llama3"
# <|begin_of_text|> <|start_header_id|> user <|end_header_id|> \n\n Hi <|eot_id|> ... Yo <|eot_id|>
expect_in llama3 "$TMP/llama3.out" "train: 28 tokens (3 targets)"

# --- prompt/completion: split by example, deterministic, shards never split an example ---
for i in $(seq 1 10); do
    printf '{"prompt": "question %d?", "completion": " answer %d", "id": %d}\n' "$i" "$i" "$i"
done >"$TMP/qa.jsonl"
run qa 0 --input "$TMP/qa.jsonl" --output "$TMP/qa" --val-fraction 0.3
expect_in qa "$TMP/qa.out" "10 examples (7 train, 3 val): 0 text, 10 prompt/completion, 0 chat"
run qa_again 0 --input "$TMP/qa.jsonl" --output "$TMP/qa_again" --val-fraction 0.3
for f in train_000000.bin val_000000.bin; do
    cmp -s "$TMP/qa/$f" "$TMP/qa_again/$f" || fail "qa: $f differs between two identical runs"
done
# The split is by example: 7 examples in train, 3 in val (header word 3).
expect_eq qa.train_examples "$(words d4 12 4 "$TMP/qa/train_000000.bin")" 7
expect_eq qa.val_examples "$(words d4 12 4 "$TMP/qa/val_000000.bin")" 3
run qa_small 0 --input "$TMP/qa.jsonl" --output "$TMP/qa_small" --val-fraction 0 --shard-tokens 50
n_shards=$(ls "$TMP/qa_small"/train_*.bin | wc -l)
[ "$n_shards" -ge 4 ] || fail "qa_small: $n_shards shard(s) for 10 examples of ~25 tokens at --shard-tokens 50"
examples=0
for f in "$TMP/qa_small"/train_*.bin; do
    read -r _ version count n _ <<<"$(header "$f")"
    expect_eq "qa_small.version $(basename "$f")" "$version" 3
    [ "$count" -le 50 ] || fail "qa_small: $(basename "$f") holds $count tokens (> --shard-tokens 50)"
    examples=$((examples + n))
done
expect_eq qa_small.examples "$examples" 10
# A second run into the same folder with fewer shards removes the stale ones.
run qa_restale 0 --input "$TMP/qa.jsonl" --output "$TMP/qa_small" --val-fraction 0
expect_in qa_restale "$TMP/qa_restale.out" "stale shard(s)"
expect_eq qa_restale.files "$(ls "$TMP/qa_small"/train_*.bin | wc -l)" 1

# --- --skip-bad: bad lines reported with FILE:LINE and counted; good ones kept ------------
{
    echo '{"text": "one"}'
    echo '{"text": 2}'
    echo ''
    echo 'not json'
    echo '{"text": "four"}'
} >"$TMP/mixed.jsonl"
run skip 0 --input "$TMP/mixed.jsonl" --output "$TMP/skip" --skip-bad --val-fraction 0
expect_in skip "$TMP/skip.out" "2 examples (2 train, 0 val): 2 text"
expect_in skip "$TMP/skip.out" "2 bad line(s) skipped; 1 blank line(s)"
expect_in skip "$TMP/skip.err" "skipped: $TMP/mixed.jsonl:2: text: expected a string, found number"
expect_in skip "$TMP/skip.err" "skipped: $TMP/mixed.jsonl:4: not valid JSON"
run noskip 2 --input "$TMP/mixed.jsonl" --output "$TMP/noskip"
expect_in noskip "$TMP/noskip.err" "bad line: $TMP/mixed.jsonl:2:"
expect_in noskip "$TMP/noskip.err" "2 bad line(s) (listed above); nothing was written"
[ -e "$TMP/noskip" ] && fail "noskip: the output folder was created although the run stopped"

# --- *.jsonl detection, and --format text reading a .jsonl file as a document ------------
run astext 0 --input "$TMP/qa.jsonl" --output "$TMP/astext" --format text --val-fraction 0
expect_eq astext.header "$(header "$TMP/astext/train_000000.bin" | cut -d' ' -f1-2)" "20240520 1"
cp "$TMP/qa.jsonl" "$TMP/qa.txt"
run forced 0 --input "$TMP/qa.txt" --output "$TMP/forced" --format jsonl:prompt --val-fraction 0
expect_in forced "$TMP/forced.out" "10 examples (10 train, 0 val)"

if [ "$failures" -ne 0 ]; then
    echo "test_prepare_jsonl: $failures failure(s)" >&2
    exit 1
fi
echo "test_prepare_jsonl: all checks passed"
