#!/usr/bin/env bash
# The README's fine-tuning worked example, end to end and without network: a tiny Llama
# pretrained by ztrain on text tokenized with a Hugging Face tokenizer.json (the chat fixture
# tests/data/chat_tiny, whose tokenizer_config.json makes zt-prepare pick chatml), consolidated
# to a Hugging Face directory, fine-tuned with --model.from_hf on a chat JSONL generated here
# (only the assistant turns are targets), and consolidated again. The masked validation loss
# on the held-out answers falls well below the pretrained model's, and the fine-tuned
# directory loads again with --model.from_hf.
# Usage: test_finetune_hf.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
TOK="$SRC/tests/data/chat_tiny/tokenizer.json"

for i in $(seq 1 300); do echo "the user asks a question number $i and the assistant answers it kindly"; echo "%"; done \
  > "$work/text.txt"
python3 - "$work/chat.jsonl" <<'PY'
import json, random, sys
r = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(300):
        a, b = r.randint(1, 9), r.randint(1, 9)
        f.write(json.dumps({"messages": [
            {"role": "user", "content": "what is %d plus %d?" % (a, b)},
            {"role": "assistant", "content": "%d plus %d is %d." % (a, b, a + b)}]}) + "\n")
PY
cd "$work" || exit 1
expect 0 "wrote pre/tokenizer.json" "$BIN/zt-prepare" --input text.txt --output pre --doc-separator % --tokenizer "$TOK"
expect 0 "chat template chatml" "$BIN/zt-prepare" --input chat.jsonl --output ft --tokenizer "$TOK" --val-fraction 0.1
expect 0 "ztrain: 60 steps in" "$BIN/ztrain" --config "$SRC/inputs/llama_tiny.ini" --data.train="pre/train_*.bin" \
  --model.vocab_size=263 --train.threads=1 --train.sample_tokens=0 --run.dir=pretrain
expect 0 "wrote hf_pretrained/model.safetensors" "$BIN/zt-consolidate" pretrain/checkpoints --output hf_pretrained/
finetune=(--data.train="ft/train_*.bin" --data.val="ft/val_*.bin" --model.seq_len=64
  --train.lr=1e-2 --train.lr_min=1e-3 --train.warmup_steps=5 --train.eval_every=20
  --train.threads=1)
# The samples answer the first validation chat's user turn and stop at the end of the turn.
"$BIN/ztrain" --model.from_hf=hf_pretrained "${finetune[@]}" --train.max_steps=60 --train.sample_tokens=40 \
  --run.dir=finetune > finetune.out 2>&1 || { echo "FAIL: fine-tuning"; tail -5 finetune.out; exit 1; }
check "the run says what it trains on" grep -q "examples: train: 277 examples" finetune.out
sed -n '/^sample at step 60:/,$p' finetune.out | head -6 > sample.txt
check "the last sample is an answer to a rendered user turn, ended by <|im_end|>" \
  bash -c 'grep -q "<|im_start|>user" sample.txt && grep -qE "<\|im_start\|>assistant" sample.txt &&
    grep -qE "^ *[0-9] plus [0-9] is [0-9]+\.<\|im_end\|>$" sample.txt'
vals=$(grep -o '"val_loss":[0-9.e-]*' finetune/metrics.jsonl | cut -d: -f2 | tr '\n' ' ')
check "the masked validation loss on held-out answers falls below half the pretrained model's ($vals)" \
  python3 -c "import sys; v = [float(x) for x in sys.argv[1:]]; sys.exit(not (len(v) == 4 and v[-1] < 0.5 * v[0]))" $vals
expect 0 "wrote hf_finetuned/model.safetensors" "$BIN/zt-consolidate" finetune/checkpoints --output hf_finetuned/
# The fine-tuned directory starts a run again: its first validation loss is the last above.
expect 0 "step 0 \| val loss" "$BIN/ztrain" --model.from_hf=hf_finetuned "${finetune[@]}" --train.max_steps=1 --train.sample_tokens=0 \
  --run.dir=again
again=$(grep -o '"val_loss":[0-9.e-]*' again/metrics.jsonl | head -1 | cut -d: -f2)
check "hf_finetuned gives the fine-tuned validation loss ($again)" \
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(not abs(a - b) <= 1e-4 * b)" \
  "${again:-nan}" "$(echo "$vals" | awk '{print $NF}')"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all Hugging Face fine-tuning checks passed"
