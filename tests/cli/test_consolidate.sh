#!/usr/bin/env bash
# zt-consolidate end to end: a checkpoint from a short ztrain run becomes .safetensors and
# .h5 files (exit codes, messages, an independent Python check of the safetensors layout when
# numpy is at hand), `--info` describes it, and ztrain starts from the exported weights
# (model.init_from) on 1 rank and, when mpiexec exists, on 2 ranks at ZeRO stage 3.
# Peak RSS of zt-consolidate is checked against its baseline plus a few copies of the largest
# tensor, on a model many times larger (needs /usr/bin/time). No mpirun is needed for the tool.
# Usage: test_consolidate.sh BIN_DIR SOURCE_DIR
set -u
BIN=$1
SRC=$2
# shellcheck source=tests/cli/cli_lib.sh
source "$(dirname "$0")/cli_lib.sh"

# first_loss LOG: the loss of the first progress line.
first_loss() { grep -m1 -oE '^step +1/[0-9]+ \| loss [0-9.]+' "$1" | awk '{print $NF}'; }

# A small corpus, a short run that leaves a checkpoint.
for i in $(seq 1 400); do echo "the quick brown fox $i jumps over the lazy dog"; echo "%"; done > "$work/text.txt"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data" --doc-separator % > /dev/null || {
  echo "FAIL: zt-prepare"; exit 1; }
deck="$SRC/inputs/tiny.ini"
data=(--data.train="$work/data/train_*.bin" --data.val="$work/data/val_*.bin")
"$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$work/run" --train.threads=1 --train.max_steps=30 \
  > "$work/train.log" 2>&1 || { echo "FAIL: training run"; tail -5 "$work/train.log"; exit 1; }
ckpt="$work/run/checkpoints"
[ -s "$ckpt/latest" ] || { echo "FAIL: no checkpoint after the run"; exit 1; }
echo "ok: checkpoint $(cat "$ckpt/latest")"

expect 0 "Usage" "$BIN/zt-consolidate" --help
expect 0 "step 30 .*" "$BIN/zt-consolidate" "$ckpt" --info
expect 0 "h\.1\.mlp\.c_fc\.weight +\[128, 32\]" "$BIN/zt-consolidate" "$ckpt/$(cat "$ckpt/latest")" --info
expect 0 "wrote .*x\.safetensors" "$BIN/zt-consolidate" "$ckpt" --output "$work/x.safetensors"
expect 0 "wrote .*x\.h5 \(bf16" "$BIN/zt-consolidate" "$ckpt" --output "$work/x.h5" --dtype bf16
expect 0 "wrote .*f32\.h5" "$BIN/zt-consolidate" "$ckpt" --output "$work/f32.h5" --with-optimizer

# Peak memory: the tool streams one tensor at a time, so its peak RSS stays within its
# baseline (the same process describing the checkpoint with --info) plus a few copies of the
# largest tensor, far below the model. The checkpoint here holds 24 layers of width 256:
# 19M parameters (75 MiB of fp32 weights, 225 MiB of state), the largest tensor 1 MiB.
# Measured: baseline ~16 MiB, +4 MiB for the weights, +9 MiB with the optimizer state (three
# arrays per tensor); the limits are 6 and 12 largest tensors, a tenth and a sixth of the
# weights. Holding the whole model (or even a block of 12 tensors) at once would exceed them.
if [ -x /usr/bin/time ]; then
  big="$work/big"
  "$BIN/ztrain" --config "$deck" "${data[@]}" --run.dir="$big" --train.threads=1 --train.max_steps=1 \
    --model.n_layer=24 --model.n_embd=256 --model.n_head=4 --model.seq_len=8 --train.micro_batch=1 \
    --train.grad_accum=1 --train.eval_every=0 --train.sample_tokens=0 > "$work/big.log" 2>&1 ||
    { echo "FAIL: training the 24-layer model"; tail -3 "$work/big.log"; failures=$((failures + 1)); }
  peak_kib() { /usr/bin/time -v "$@" > /dev/null 2> "$work/time.txt" || return 1
    grep "Maximum resident set size" "$work/time.txt" | awk '{print $NF}'; }
  base=$(peak_kib "$BIN/zt-consolidate" "$big/checkpoints" --info)
  rss_st=$(peak_kib "$BIN/zt-consolidate" "$big/checkpoints" --output "$work/big.safetensors")
  rss_h5=$(peak_kib "$BIN/zt-consolidate" "$big/checkpoints" --output "$work/big.h5" --with-optimizer)
  model_kib=$(( $(stat -c %s "$work/big.safetensors" 2>/dev/null || echo 0) / 1024 ))
  largest_kib=$((1024 * 256 * 4 / 1024))   # mlp.c_fc.weight: [1024, 256] fp32
  limit=$((base + 6 * largest_kib))
  limit_opt=$((base + 12 * largest_kib))
  if [ -n "$base" ] && [ -n "$rss_st" ] && [ -n "$rss_h5" ] && [ "$model_kib" -gt $((64 * largest_kib)) ] &&
     [ "$rss_st" -le "$limit" ] && [ "$rss_h5" -le "$limit_opt" ] && [ $((limit_opt - base)) -lt $((model_kib / 4)) ]; then
    echo "ok: zt-consolidate peak RSS ${rss_st} KiB (.safetensors) <= baseline ${base} + 6 x ${largest_kib} KiB, ${rss_h5} KiB (.h5 + optimizer) <= baseline + 12 x; weights ${model_kib} KiB"
  else
    echo "FAIL: zt-consolidate peak RSS '${rss_st}' KiB (limit ${limit}), '${rss_h5}' KiB with the optimizer (limit ${limit_opt}), baseline '${base}', weights ${model_kib} KiB"
    failures=$((failures + 1))
  fi
else
  echo "FAIL: /usr/bin/time is missing (Debian package time, installed by .ci/setup.sh)"; failures=$((failures + 1))
fi

# Independent check of the safetensors layout (numpy only; no safetensors package).
if /usr/bin/python3 -c "import numpy" 2> /dev/null; then
  if /usr/bin/python3 - "$work/x.safetensors" <<'EOF'
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
assert n % 8 == 0 and 8 + n <= len(raw), "header length"
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__")
assert meta["format"] == "pt" and all(isinstance(v, str) for v in meta.values())
assert "lm_head.weight" not in header
spans = sorted(tuple(v["data_offsets"]) for v in header.values())
assert spans[0][0] == 0 and spans[-1][1] == len(data), "offsets must cover the data"
assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), "offsets must be contiguous"
C = 32
want = {"transformer.wte.weight": [257, C], "transformer.wpe.weight": [32, C],
        "transformer.h.0.attn.c_attn.weight": [C, 3 * C], "transformer.h.1.attn.c_proj.weight": [C, C],
        "transformer.h.0.mlp.c_fc.weight": [C, 4 * C], "transformer.h.1.mlp.c_proj.weight": [4 * C, C],
        "transformer.h.1.attn.c_attn.bias": [3 * C], "transformer.ln_f.weight": [C]}
for k, s in want.items():
    assert header[k]["shape"] == s and header[k]["dtype"] == "F32", (k, header[k])
assert len(header) == 2 + 2 * 12 + 2, len(header)
def tensor(k):
    b, e = header[k]["data_offsets"]
    return np.frombuffer(data[b:e], dtype="<f4").reshape(header[k]["shape"])
# ln weights start at 1 and move a little in 30 steps; embeddings are small.
assert abs(tensor("transformer.ln_f.weight").mean() - 1) < 0.5
assert np.isfinite(tensor("transformer.wte.weight")).all()
try:
    import h5py
except ImportError:
    sys.exit(0)
h = h5py.File(sys.argv[1].replace("x.safetensors", "f32.h5"), "r")
assert h.attrs["vocab_size"] == 257 and h["wte.weight"].shape == (257, C)
for i in range(2):
    for name in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"):
        ours = h[f"h.{i}.{name}"][...]
        assert (tensor(f"transformer.h.{i}.{name}") == ours.T).all(), name
assert (tensor("transformer.wte.weight") == h["wte.weight"][...]).all()
assert h[f"optimizer/wte.weight/adam_v"].shape == (257, C)
EOF
  then echo "ok: safetensors layout checked with numpy"; else echo "FAIL: Python check"; failures=$((failures + 1)); fi
fi

# ztrain starts from the exported weights: the first loss is the trained model's, far below
# a fresh start's.
run=("$BIN/ztrain" --config "$deck" "${data[@]}" --train.threads=1 --train.max_steps=3 --checkpoint.resume=never)
expect 0 "initialized weights from .*x\.safetensors" "${run[@]}" --run.dir="$work/init_st" \
  --model.init_from="$work/x.safetensors"
"${run[@]}" --run.dir="$work/fresh" > "$work/fresh.log" 2>&1
"${run[@]}" --run.dir="$work/init_st2" --model.init_from="$work/x.safetensors" > "$work/init.log" 2>&1
fresh=$(first_loss "$work/fresh.log")
init=$(first_loss "$work/init.log")
if [ -n "$fresh" ] && [ -n "$init" ] && awk -v a="$init" -v b="$fresh" 'BEGIN { exit !(a < b - 0.5) }'; then
  echo "ok: first loss from the exported weights $init < fresh start $fresh"
else
  echo "FAIL: first loss from the exported weights '$init' vs fresh '$fresh'"; failures=$((failures + 1))
fi
expect 0 "initialized weights from .*x\.h5" "${run[@]}" --run.dir="$work/init_h5" --model.init_from="$work/x.h5"
if command -v mpiexec > /dev/null; then
  expect 0 "initialized weights from" mpiexec --oversubscribe --bind-to none -np 2 "${run[@]}" \
    --run.dir="$work/init_np2" --model.init_from="$work/x.safetensors" --parallel.zero_stage=3
  # The imported weights are the same when sharded: 2 ranks at ZeRO-3 see the batch of one
  # rank with 2-way accumulation, so the first loss (4 decimals as printed) must agree.
  mpiexec --oversubscribe --bind-to none -np 2 "${run[@]}" --run.dir="$work/init_np2b" \
    --model.init_from="$work/x.safetensors" --parallel.zero_stage=3 > "$work/init_np2.log" 2>&1
  "${run[@]}" --run.dir="$work/init_acc2" --model.init_from="$work/x.safetensors" --train.grad_accum=2 \
    > "$work/init_acc2.log" 2>&1
  np2=$(first_loss "$work/init_np2.log")
  acc2=$(first_loss "$work/init_acc2.log")
  if [ -n "$np2" ] && [ "$np2" = "$acc2" ]; then
    echo "ok: imported weights at np 2 ZeRO-3 give the one-rank first loss $acc2"
  else
    echo "FAIL: first loss after import at np 2 ZeRO-3 '$np2' vs one rank with 2-way accumulation '$acc2'"
    failures=$((failures + 1))
  fi
fi

# Bad input: exit 2 with a message naming what is wrong.
expect 2 "zt-consolidate: error: .*nope.*no such checkpoint" "$BIN/zt-consolidate" "$work/nope" --output "$work/y.h5"
expect 2 "zt-consolidate: error: .*y\.pt.*unknown extension" "$BIN/zt-consolidate" "$ckpt" --output "$work/y.pt"
expect 2 "zt-consolidate: error: .*--dtype" "$BIN/zt-consolidate" "$ckpt" --output "$work/y.h5" --dtype fp8
expect 2 "zt-consolidate: error: .*--output" "$BIN/zt-consolidate" "$ckpt"
expect 2 "zt-consolidate: error: .*checkpoint directory" "$BIN/zt-consolidate" --output "$work/y.h5"
expect 2 "zt-consolidate: error: .*--bogus" "$BIN/zt-consolidate" "$ckpt" --bogus
expect 2 "zt-consolidate: error: .*latest" "$BIN/zt-consolidate" "$work/data" --output "$work/y.h5"
[ ! -e "$work/y.h5" ] && [ ! -e "$work/y.h5.partial" ] && echo "ok: no output file after a refusal" || {
  echo "FAIL: an output file was left behind"; failures=$((failures + 1)); }
expect 2 "missing\.safetensors" "${run[@]}" --run.dir="$work/bad1" --model.init_from="$work/missing.safetensors"
expect 2 "x\.safetensors.*wte\.weight has shape \[257, 32\], expected \[257, 64\]" "${run[@]}" \
  --run.dir="$work/bad2" --model.init_from="$work/x.safetensors" --model.n_embd=64
printf 'not a safetensors file at all' > "$work/junk.safetensors"
expect 2 "junk\.safetensors" "${run[@]}" --run.dir="$work/bad3" --model.init_from="$work/junk.safetensors"

# Llama: a Hugging Face directory (LlamaForCausalLM) and a .safetensors file; ztrain starts
# from the directory with --model.from_hf (no model keys needed) or with the deck's model keys
# and model.init_from, checked against config.json.
ldeck="$SRC/inputs/llama_tiny.ini"
"$BIN/ztrain" --config "$ldeck" "${data[@]}" --run.dir="$work/llama" --train.threads=1 --train.max_steps=20 \
  > "$work/llama.log" 2>&1 || { echo "FAIL: llama training run"; tail -5 "$work/llama.log"; exit 1; }
lckpt="$work/llama/checkpoints"
expect 0 "wrote .*hf_llama/model\.safetensors and config\.json" "$BIN/zt-consolidate" "$lckpt" --output "$work/hf_llama/"
expect 0 "wrote .*l\.safetensors \(bf16" "$BIN/zt-consolidate" "$lckpt" --output "$work/l.safetensors" --dtype bf16
grep -q '"LlamaForCausalLM"' "$work/hf_llama/config.json" && grep -q '"num_key_value_heads": 2' "$work/hf_llama/config.json" &&
  echo "ok: config.json is a LlamaConfig" || { echo "FAIL: config.json"; failures=$((failures + 1)); }
lrun=("$BIN/ztrain" "${data[@]}" --train.threads=1 --train.max_steps=3 --checkpoint.resume=never)
"${lrun[@]}" --config "$ldeck" --run.dir="$work/lfresh" > "$work/lfresh.log" 2>&1
"${lrun[@]}" --model.from_hf="$work/hf_llama" --run.dir="$work/lhf" > "$work/lhf.log" 2>&1
lfresh=$(first_loss "$work/lfresh.log")
lhf=$(first_loss "$work/lhf.log")
if grep -q "initialized weights from .*hf_llama" "$work/lhf.log" && [ -n "$lfresh" ] && [ -n "$lhf" ] &&
   awk -v a="$lhf" -v b="$lfresh" 'BEGIN { exit !(a < b - 0.5) }'; then
  echo "ok: --model.from_hf alone: first loss $lhf < fresh start $lfresh"
else
  echo "FAIL: --model.from_hf: first loss '$lhf' vs fresh '$lfresh'"; tail -3 "$work/lhf.log"; failures=$((failures + 1))
fi
expect 0 "initialized weights from .*hf_llama" "${lrun[@]}" --config "$ldeck" --run.dir="$work/lhf2" \
  --model.from_hf="$work/hf_llama"
expect 0 "initialized weights from .*hf_llama" "${lrun[@]}" --config "$ldeck" --run.dir="$work/lhf3" \
  --model.init_from="$work/hf_llama"
# --max-shard-size: shards and their index, as save_pretrained writes them; the same first loss.
expect 0 "wrote .*hf_sharded/model-00001-of-([0-9]{5})\.safetensors \.\.\. model-\1-of-\1\.safetensors \([0-9]+ shards\), model\.safetensors\.index\.json and config\.json" \
  "$BIN/zt-consolidate" "$lckpt" --output "$work/hf_sharded/" --max-shard-size 20KB
"${lrun[@]}" --model.from_hf="$work/hf_sharded" --run.dir="$work/lsharded" > "$work/lsharded.log" 2>&1
[ -n "$lhf" ] && [ "$(first_loss "$work/lsharded.log")" = "$lhf" ] && echo "ok: sharded export: first loss $lhf" ||
  { echo "FAIL: sharded export: first loss '$(first_loss "$work/lsharded.log")' vs '$lhf'"; failures=$((failures + 1)); }
expect 2 "--max-shard-size '5XB': expected a size such as 5GB" "$BIN/zt-consolidate" "$lckpt" --output "$work/hf_x/" \
  --max-shard-size 5XB
expect 2 "--max-shard-size: splits a Hugging Face directory's weights; '.*l2\.safetensors' is a file" \
  "$BIN/zt-consolidate" "$lckpt" --output "$work/l2.safetensors" --max-shard-size 1GB
expect 0 "initialized weights from .*l\.safetensors" "${lrun[@]}" --config "$ldeck" --run.dir="$work/lst" \
  --model.init_from="$work/l.safetensors"
expect 2 "command line: model\.n_layer = 3, but model\.from_hf = .*says 2 \(.*config\.json: num_hidden_layers\)" \
  "${lrun[@]}" --config "$ldeck" --run.dir="$work/lbad1" --model.from_hf="$work/hf_llama" --model.n_layer=3
expect 2 "config\.json: rms_norm_eps = 1e-05, but model\.norm_eps = 1e-06" "${lrun[@]}" --config "$ldeck" \
  --run.dir="$work/lbad2" --model.init_from="$work/hf_llama" --model.norm_eps=1e-6
mkdir -p "$work/hf_bad"
sed 's/"attention_bias": false/"attention_bias": true/' "$work/hf_llama/config.json" > "$work/hf_bad/config.json"
expect 2 "hf_bad/config\.json: attention_bias = true" "${lrun[@]}" --run.dir="$work/lbad3" --model.from_hf="$work/hf_bad"
printf '{"model_type": ' > "$work/hf_bad/config.json"
expect 2 "hf_bad/config\.json: not valid JSON" "${lrun[@]}" --run.dir="$work/lbad4" --model.from_hf="$work/hf_bad"
[ ! -e "$work/lbad1" ] && [ ! -e "$work/lbad2" ] && [ ! -e "$work/lbad4" ] && echo "ok: refused runs wrote nothing" ||
  { echo "FAIL: a refused run left its run directory"; failures=$((failures + 1)); }

# The run's tokenizer goes into a directory export: a Hugging Face tokenizer.json as it is,
# tokenizer_config.json, and its special ids in config.json; a note instead when the run's
# tokenizer is the byte one, has changed since the run, or is not where the deck says.
expect 0 "note: no tokenizer files: the run's tokenizer [(].*data/tokenizer\.json[)] is the byte tokenizer" \
  "$BIN/zt-consolidate" "$ckpt" --output "$work/hf_byte/"
[ ! -e "$work/hf_byte/tokenizer.json" ] && echo "ok: no tokenizer.json for the byte tokenizer" ||
  { echo "FAIL: a byte-tokenizer export has a tokenizer.json"; failures=$((failures + 1)); }
gzip -dc "$SRC/tests/data/hf/gpt2_tokenizer.json.gz" > "$work/gpt2_tokenizer.json"
"$BIN/zt-prepare" --input "$work/text.txt" --output "$work/data_hf" --doc-separator % \
  --tokenizer "$work/gpt2_tokenizer.json" > /dev/null || { echo "FAIL: zt-prepare (GPT-2 tokenizer.json)"; exit 1; }
"$BIN/ztrain" --config "$deck" --data.train="$work/data_hf/train_*.bin" --run.dir="$work/run_hf" --train.threads=1 \
  --train.max_steps=2 --model.vocab_size=50257 > "$work/run_hf.log" 2>&1 ||
  { echo "FAIL: training with the GPT-2 tokenizer"; tail -5 "$work/run_hf.log"; exit 1; }
expect 0 "wrote .*hf_tok/model\.safetensors and config\.json, tokenizer\.json, tokenizer_config\.json" \
  "$BIN/zt-consolidate" "$work/run_hf/checkpoints" --output "$work/hf_tok/"
cmp -s "$work/hf_tok/tokenizer.json" "$work/gpt2_tokenizer.json" &&
  grep -q '"tokenizer_class": "PreTrainedTokenizerFast"' "$work/hf_tok/tokenizer_config.json" &&
  grep -q '"eos_token": "<|endoftext|>"' "$work/hf_tok/tokenizer_config.json" &&
  grep -q '"model_max_length": 32' "$work/hf_tok/tokenizer_config.json" &&
  grep -q '"bos_token_id": 50256' "$work/hf_tok/config.json" && grep -q '"eos_token_id": 50256' "$work/hf_tok/config.json" &&
  echo "ok: the export carries the run's tokenizer.json, a tokenizer_config.json and the special ids" ||
  { echo "FAIL: the export's tokenizer files or special ids"; failures=$((failures + 1)); }
cp "$work/data_hf/tokenizer.json" "$work/tokenizer.json.saved"
sed -i 's/"eot": 50256/"eot":  50256/' "$work/data_hf/tokenizer.json"
expect 0 "note: no tokenizer files: .*data_hf/tokenizer\.json is not the run's tokenizer \(tokenizer: .*120 -> 121 bytes\)" \
  "$BIN/zt-consolidate" "$work/run_hf/checkpoints" --output "$work/hf_tok2/"
mv "$work/data_hf" "$work/data_hf_moved"
expect 0 "note: no tokenizer files: the run's tokenizer .*data_hf/tokenizer\.json is not there" \
  "$BIN/zt-consolidate" "$work/run_hf/checkpoints" --output "$work/hf_tok3/"
mv "$work/data_hf_moved" "$work/data_hf"
cp "$work/tokenizer.json.saved" "$work/data_hf/tokenizer.json"
echo '{}' > "$work/data_hf/hf_tokenizer.json"
expect 0 "note: no tokenizer files: .*data_hf/hf_tokenizer\.json: model: missing" \
  "$BIN/zt-consolidate" "$work/run_hf/checkpoints" --output "$work/hf_tok4/"
[ ! -e "$work/hf_tok2/tokenizer.json" ] && [ ! -e "$work/hf_tok3/tokenizer.json" ] && [ ! -e "$work/hf_tok4/tokenizer.json" ] &&
  [ ! -e "$work/hf_tok2/tokenizer_config.json" ] && echo "ok: no tokenizer files after a note" ||
  { echo "FAIL: tokenizer files written after a note"; failures=$((failures + 1)); }

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all zt-consolidate CLI checks passed"
