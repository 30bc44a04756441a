#!/usr/bin/env bash
# LoRA from the command line: a tiny GPT-2 pretrained by ztrain and consolidated to a Hugging
# Face directory is the base of `--model.from_hf=DIR --lora.rank=4`; the run resumes with the
# same base (also at 2 ranks, ZeRO-3, and at tensor 2), follows it to another path holding the
# same files, and refuses (exit 2, naming both) other content at the same or another path; a bad target exits 2
# listing the family's names; lora.base_dtype = bf16 under fp32 halves the plan's stored weights
# and trains; zt-consolidate writes the adapter and the merged model (reading the base, which
# the checkpoints do not hold, from the recorded path or --base), and zt-generate samples from
# the checkpoint.
# Usage: test_lora.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"
make_corpus
cd "$work" || exit 1
tiny=(--data.train="data/train_*.bin" --model.n_layer=2 --model.n_embd=32 --model.n_head=2 --model.seq_len=32
  --train.micro_batch=2 --train.threads=1 --train.sample_tokens=0 --train.eval_every=0)
expect 0 "ztrain: 4 steps in" "$BIN/ztrain" "${tiny[@]}" --train.max_steps=4 --run.dir=pre
expect 0 "wrote base/model.safetensors" "$BIN/zt-consolidate" pre/checkpoints --output base/
cp -r base other
lora=(--data.train="data/train_*.bin" --model.seq_len=32 --train.micro_batch=2 --train.threads=1
  --train.sample_tokens=0 --train.eval_every=0 --lora.rank=4 --train.lr=1e-2 --run.dir=lora)
expect 2 "lora.targets = 'q_proj'.*c_attn,c_proj,c_fc" "$BIN/ztrain" --model.from_hf=base "${lora[@]}" \
  --lora.targets=q_proj --train.max_steps=2
expect 0 "ztrain: 2 steps in" "$BIN/ztrain" --model.from_hf=base "${lora[@]}" --train.max_steps=2
# The same files at another path (a moved base): the resume reads the base there, saying so.
expect 0 "the LoRA run's base was .*/base, this run names other: its files are checked" "$BIN/ztrain" \
  --model.from_hf=other "${lora[@]}" --train.max_steps=3
# The same path with other content (one weight's last byte changed) is another base: exit 2;
# so is that content at another path, naming both.
cp other/model.safetensors other_weights.keep
python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))" \
  other/model.safetensors
expect 2 "model.init_from = other: the LoRA run's base changed since the checkpoint was written .*model.safetensors: same size, other content" \
  "$BIN/ztrain" --model.from_hf=other "${lora[@]}" --train.max_steps=4
cp -r other third
cp other_weights.keep other/model.safetensors
expect 2 "model.init_from = third: the LoRA run's base was .*/other when the checkpoint was written, and these files differ from its .*model.safetensors: same size, other content" \
  "$BIN/ztrain" --model.from_hf=third "${lora[@]}" --train.max_steps=4
# At another world size and ZeRO stage the state is resharded from the layout the checkpoint
# records (with its adapters).
expect 0 "resumed from .* at step 3" "$BIN/ztrun" 2 ztrain --model.from_hf=base "${lora[@]}" --train.max_steps=4 \
  --parallel.zero_stage=3 --train.grad_accum=1
# The base stored in bf16 under fp32 activations: the plan halves the stored weights, the run
# trains (the adapters' masters in fp32).
# Its targets written with a blank after the comma: PEFT's target_modules hold the names trimmed.
lora_bf16=("${lora[@]/#--run.dir=lora/--run.dir=lora_bf16}" --lora.base_dtype=bf16 "--lora.targets=c_attn, c_fc")
expect 0 "params .* 2P" "$BIN/ztrain" --model.from_hf=base "${lora_bf16[@]}" --plan
expect 0 "ztrain: 2 steps in" "$BIN/ztrain" --model.from_hf=base "${lora_bf16[@]}" --train.max_steps=2
expect 0 "wrote adapter_bf16/adapter_model.safetensors and adapter_config.json" "$BIN/zt-consolidate" \
  lora_bf16/checkpoints --output adapter_bf16/ --lora adapter
check "adapter_config.json's target_modules are the trimmed names" /usr/bin/python3 -c \
  'import json, sys; sys.exit(json.load(open("adapter_bf16/adapter_config.json"))["target_modules"] != ["c_attn", "c_fc"])'
expect 2 "give --lora adapter .* or --lora merge" "$BIN/zt-consolidate" lora/checkpoints --output plain/
# Merged into the base's own directory, it would replace the weights it merges with.
base_sum=$(sha256sum base/model.safetensors)
expect 2 "--output base/ is the LoRA run's base .*it would be overwritten" "$BIN/zt-consolidate" lora/checkpoints \
  --output base/ --lora merge
check "the refused merge left the base as it was" test "$base_sum" = "$(sha256sum base/model.safetensors)"
expect 0 "wrote adapter/adapter_model.safetensors and adapter_config.json" "$BIN/zt-consolidate" lora/checkpoints \
  --output adapter/ --lora adapter
expect 0 "wrote merged/model.safetensors and config.json" "$BIN/zt-consolidate" lora/checkpoints --output merged/ \
  --lora merge
# Greedy samples from the checkpoint (adapters merged per block) and from the merged model agree.
from_ckpt=$("$BIN/zt-generate" lora/checkpoints --prompt "the quick" --max-new-tokens 8 --temperature 0 2>/dev/null)
from_merged=$("$BIN/zt-generate" merged --tokenizer data/tokenizer.json --prompt "the quick" --max-new-tokens 8 \
  --temperature 0 2>/dev/null)
check "zt-generate: the checkpoint's greedy text ('$from_ckpt') is the merged model's ('$from_merged')" \
  test -n "$from_ckpt" -a "$from_ckpt" = "$from_merged"
check "adapter_config.json names the targets" grep -q '"c_attn"' adapter/adapter_config.json
# A merge written into a copy of the base changes the copy: the tools refuse it as the base
# (a second merge would add the adapters twice), as ztrain refuses it at a resume.
cp -r base base_copy
expect 0 "wrote base_copy/model.safetensors" "$BIN/zt-consolidate" lora/checkpoints --output base_copy/ --lora merge
expect 2 "the LoRA run's base at base_copy is not the one its adapters were trained on" "$BIN/zt-consolidate" \
  lora/checkpoints --output twice/ --lora merge --base base_copy
expect 2 "the LoRA run's base at base_copy is not the one its adapters were trained on" "$BIN/zt-generate" \
  lora/checkpoints --prompt x --max-new-tokens 2 --base base_copy
# The checkpoints hold the adapters and their state, not the base: they name where it is.
expect 0 "the frozen base is read from .*/base" "$BIN/zt-consolidate" lora/checkpoints --info
expect 2 "a LoRA base was given .* holds every weight itself" "$BIN/zt-consolidate" pre/checkpoints --output x/ \
  --base base
# Resumed at tensor 2 (the base's slices from the file, the adapters' from a T = 1 checkpoint),
# then merged from the T = 2 checkpoint with the base moved: refused naming the recorded path,
# then read from --base; the same greedy text as the checkpoint's.
expect 0 "resumed from .* at step 4" "$BIN/ztrun" 2 ztrain --model.from_hf=base "${lora[@]}" --train.max_steps=5 \
  --parallel.tensor=2 --train.grad_accum=1
mv base moved_base
expect 2 "does not hold its frozen base; reading it from .*/base failed.*--base DIR" "$BIN/zt-consolidate" \
  lora/checkpoints --output merged_t2/ --lora merge
expect 0 "wrote merged_t2/model.safetensors" "$BIN/zt-consolidate" lora/checkpoints --output merged_t2/ --lora merge \
  --base moved_base
# zt-generate (as zt-eval) reads the moved base from --base too; a Hugging Face directory refuses it.
gen=("$BIN/zt-generate" lora/checkpoints --prompt "the quick" --max-new-tokens 8 --temperature 0)
expect 2 "does not hold its frozen base; reading it from .*/base failed.*--base DIR" "${gen[@]}"
from_t2=$("${gen[@]}" --base moved_base 2>/dev/null)
expect 2 "merged_t2: --base moved_base names a LoRA checkpoint's frozen base, but this is a Hugging Face" \
  "$BIN/zt-generate" merged_t2 --prompt "the quick" --base moved_base
mv moved_base base
from_merged_t2=$("$BIN/zt-generate" merged_t2 --tokenizer data/tokenizer.json --prompt "the quick" --max-new-tokens 8 \
  --temperature 0 2>/dev/null)
check "zt-generate: the T = 2 checkpoint's greedy text ('$from_t2') is its merged model's ('$from_merged_t2')" \
  test -n "$from_t2" -a "$from_t2" = "$from_merged_t2"
[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all LoRA command-line checks passed"
