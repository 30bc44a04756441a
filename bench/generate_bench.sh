#!/usr/bin/env bash
# zt-generate tokens/s against PyTorch generating with its own key/value cache
# (bench/torch_generate.py), greedy, on the same random weights: GPT-2 124M and the
# SmolLM2-135M shape (Llama, grouped-query attention). torch_generate.py writes each model as a
# Hugging Face directory and times itself; zt-generate then runs that directory with a byte
# tokenizer and --ignore-eos, so both decode the same prompt and the same number of tokens.
# Also reports whether the two produced the same tokens.
# Usage: bench/generate_bench.sh [BUILD_DIR] [NEW_TOKENS] [THREADS]   (needs python3-torch)
set -eu
PY=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch lives in the system Python
BUILD=${1:-build}
NEW=${2:-128}
THREADS=${3:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo '{"type": "byte", "vocab_size": 257, "eot": 256}' > "$work/tokenizer.json"
prompt="The quick brown fox jumps over the lazy dog"
# zt-generate's prompt: the separator (byte tokenizer: 256), then the prompt's bytes.
ids="256 $(printf '%s' "$prompt" | od -An -tu1 | tr -s ' \n' ' ')"
for arch in gpt2 llama; do
  "$PY" "$HERE/torch_generate.py" --arch "$arch" --hf-dir "$work/$arch" --prompt $ids --new "$NEW" \
    --threads "$THREADS" > "$work/torch_$arch.json"
  "$BUILD/bin/zt-generate" "$work/$arch" --tokenizer "$work/tokenizer.json" --prompt "$prompt" \
    --temperature 0 --ignore-eos --max-new-tokens "$NEW" --threads "$THREADS" > "$work/zt_$arch.txt" 2> "$work/zt_$arch.err"
  "$PY" - "$work" "$arch" <<'PY'
import json, re, sys
work, arch = sys.argv[1], sys.argv[2]
t = json.loads(open(f"{work}/torch_{arch}.json").read().splitlines()[-1])
err = open(f"{work}/zt_{arch}.err").read()
m = re.search(r"generated (\d+) tokens in ([0-9.]+) s \(([0-9.]+) tokens/s", err)
zt = float(m.group(3))
text = b"".join(bytes([x]) if x < 256 else (b"<|endoftext|>" if x == 256 else f"<{x}>".encode()) for x in t["tokens"])
same = open(f"{work}/zt_{arch}.txt", "rb").read().rstrip(b"\n") == text
name = {"gpt2": "GPT-2 124M", "llama": "SmolLM2-135M shape"}[arch]
print(f"{name}: zt-generate {zt:.1f} tokens/s, PyTorch {t['torch']} {t['tokens_per_s']:.1f} tokens/s "
      f"({zt / t['tokens_per_s']:.2f}x), {t['new_tokens']} tokens after a {t['prompt_tokens']}-token prompt, "
      f"{t['threads']} threads; same tokens: {same}")
PY
done
