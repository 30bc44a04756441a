#!/usr/bin/env bash
# zt-generate end to end: text from a checkpoint of a short GPT-2 run and of a short Llama
# run, the same greedy text from the checkpoint and from its Hugging Face export, the same
# sampled text for the same seed, tokens/s on stderr, and every bad input refused with exit 2
# naming the option (--chat's rendering and stop: tests/interop/test_generate_chat.py).
# Usage: test_generate.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

make_corpus
data=(--data.train="$work/data/train_*.bin" --data.val="$work/data/val_*.bin" --train.threads=1
  --train.max_steps=20 --train.sample_tokens=0)
for arch in tiny llama_tiny; do
  "$BIN/ztrain" --config "$SRC/inputs/$arch.ini" "${data[@]}" --run.dir="$work/$arch" > "$work/$arch.log" 2>&1 ||
    { echo "FAIL: training $arch"; tail -5 "$work/$arch.log"; exit 1; }
done
ckpt="$work/tiny/checkpoints"
gen=("$BIN/zt-generate" --threads 1)

expect 0 "Usage" "${gen[@]}" --help
for arch in tiny llama_tiny; do
  expect 0 "generated [0-9]+ tokens in .* tokens/s" "${gen[@]}" "$work/$arch/checkpoints" --prompt "the quick" \
    --temperature 0 --max-new-tokens 12
done
# Greedy text: the checkpoint and its Hugging Face export give the same tokens.
"${gen[@]}" "$ckpt" --prompt "the quick" --temperature 0 --max-new-tokens 20 > "$work/greedy.txt" 2> /dev/null
"$BIN/zt-consolidate" "$ckpt" --output "$work/hf/" > /dev/null
"${gen[@]}" "$work/hf" --tokenizer "$work/data/tokenizer.json" --prompt "the quick" --temperature 0 \
  --max-new-tokens 20 > "$work/hf.txt" 2> /dev/null
check "greedy text is the same from the checkpoint and its HF export" cmp -s "$work/greedy.txt" "$work/hf.txt"
check "greedy text is not empty" test -s "$work/greedy.txt"
# Sampling: the same seed, the same text; the prompt from a file.
printf 'the lazy' > "$work/prompt.txt"
sample() { "${gen[@]}" "$ckpt" --prompt-file "$work/prompt.txt" --top-k 20 --top-p 0.9 --temperature 1.5 \
  --max-new-tokens 24 --seed "$1" 2> /dev/null; }
check "the same seed gives the same sample" test "$(sample 7)" = "$(sample 7)"

# Bad input: exit 2, naming the option and the value.
# A config.json whose heads do not divide the width: ztrain's check, naming the file.
mkdir -p "$work/hf_bad_heads"
cp "$work/hf/model.safetensors" "$work/hf_bad_heads/"
/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["n_head"]=c["n_embd"]+1; json.dump(c, open(sys.argv[2],"w"))' \
  "$work/hf/config.json" "$work/hf_bad_heads/config.json"
expect 2 "hf_bad_heads/config.json: model.n_embd = [0-9]+ is not divisible by model.n_head" "${gen[@]}" \
  "$work/hf_bad_heads" --tokenizer "$work/data/tokenizer.json" --prompt x
# A weight that is not finite (a damaged download): refused naming the file, the tensor and
# where, by zt-generate and by ztrain's --model.from_hf (the same reader).
mkdir -p "$work/hf_nan"
cp "$work/hf/config.json" "$work/hf_nan/"
/usr/bin/python3 - "$work/hf/model.safetensors" "$work/hf_nan/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name = sorted(k for k in header if k.endswith("ln_f.weight"))[0]
start = 8 + n + header[name]["data_offsets"][0] + 4 * 5  # its element 5
out = bytearray(raw)
out[start:start + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(out)
PY
expect 2 "hf_nan/model.safetensors: tensor .*ln_f.weight holds a non-finite value \(nan\) at element 5" "${gen[@]}" \
  "$work/hf_nan" --tokenizer "$work/data/tokenizer.json" --prompt x
expect 2 "hf_nan/model.safetensors: tensor .*ln_f.weight holds a non-finite value \(nan\) at element 5" \
  "$BIN/ztrain" --model.from_hf="$work/hf_nan" "${data[@]}" --run.dir="$work/run_nan"
# A directory without weights, and weights of another width than its config.json: named as
# zt-generate's argument, not as ztrain's model.init_from.
mkdir -p "$work/hf_noweights" "$work/hf_wide"
cp "$work/hf/config.json" "$work/hf_noweights/"
cp "$work/hf/model.safetensors" "$work/hf_wide/"
/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["n_embd"]*=2; json.dump(c, open(sys.argv[2],"w"))' \
  "$work/hf/config.json" "$work/hf_wide/config.json"
expect 2 "^zt-generate: error: [^ ]*hf_noweights: holds neither model.safetensors" "${gen[@]}" "$work/hf_noweights" \
  --tokenizer "$work/data/tokenizer.json" --prompt x
expect 2 "hf_wide/model.safetensors: tensor .* has shape .*\(its config.json does not describe these weights\?\)" \
  "${gen[@]}" "$work/hf_wide" --tokenizer "$work/data/tokenizer.json" --prompt x
expect 2 "--chat: no tokenizer_config.json to read.*give --chat-template" "${gen[@]}" "$ckpt" --prompt x --chat
expect 2 "chat template chatml: .* no special token '<\|im_start\|>'" "${gen[@]}" "$ckpt" --prompt x --chat \
  --chat-template chatml
expect 2 "--chat-template applies with --chat only" "${gen[@]}" "$ckpt" --prompt x --chat-template llama3
expect 2 "--chat-template: unknown chat template 'zephyr'" "${gen[@]}" "$ckpt" --prompt x --chat --chat-template zephyr
chat_tok="$SRC/tests/data/chat_tiny/tokenizer.json"
expect 2 "--chat: messages\[0\].role: unknown role \"robot\"" "${gen[@]}" "$ckpt" --tokenizer "$chat_tok" --chat \
  --prompt '{"messages": [{"role": "robot", "content": "x"}]}'
expect 2 "--chat: messages\[0\]: expected \{\"role\"" "${gen[@]}" "$ckpt" --tokenizer "$chat_tok" --chat \
  --prompt '{"messages": [{"role": "user"}]}'
expect 2 "no such directory" "${gen[@]}" "$work/missing" --prompt x
expect 2 "exactly one of --prompt" "${gen[@]}" "$ckpt"
expect 2 "exactly one of --prompt" "${gen[@]}" "$ckpt" --prompt x --prompt-file "$work/prompt.txt"
expect 2 "--prompt-file: cannot read '.*nope'" "${gen[@]}" "$ckpt" --prompt-file "$work/nope"
expect 2 "'abc'.*--max-new-tokens" "${gen[@]}" "$ckpt" --prompt x --max-new-tokens abc
expect 2 "--max-new-tokens = 0" "${gen[@]}" "$ckpt" --prompt x --max-new-tokens 0
expect 2 "--temperature = -1" "${gen[@]}" "$ckpt" --prompt x --temperature -1
expect 2 "--top-k = -3" "${gen[@]}" "$ckpt" --prompt x --top-k -3
expect 2 "--top-p = 1.5" "${gen[@]}" "$ckpt" --prompt x --top-p 1.5
expect 2 "--tokenizer: '.*nope' does not exist" "${gen[@]}" "$ckpt" --prompt x --tokenizer "$work/nope"
expect 2 "--prompt: 41 tokens .* 32-token context" "${gen[@]}" "$ckpt" --prompt "$(printf 'a%.0s' $(seq 40))"
expect 2 "holds no tokenizer.json" "${gen[@]}" "$work/hf" --prompt x
check "nothing was written into the checkpoint" test -z "$(find "$ckpt" -newer "$work/greedy.txt" -type f)"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all zt-generate checks passed"
