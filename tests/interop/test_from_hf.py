"""ztrain reads what transformers writes (--model.from_hf).

    python test_from_hf.py BIN_DIR SOURCE_DIR

transformers' save_pretrained writes randomly initialised tiny models:
  - gpt2: GPT2LMHeadModel (tied head), fp32, one model.safetensors;
  - llama-gqa: LlamaForCausalLM, grouped-query (4 heads, 2 key/value), untied head, rope_theta
    500000 with llama3 scaling, fp32, sharded (model.safetensors.index.json and its shards);
  - llama-bf16: LlamaForCausalLM, multi-head, tied head, saved in bf16;
  - mistral: MistralForCausalLM, grouped-query, untied head, a sliding window of 5 tokens
    (shorter than the 16 of a row, so the loss depends on the mask), fp32.
For each, ztrain --model.from_hf=DIR trains one step (np 1, fp32) on a token shard written here
holding exactly one batch (micro_batch windows of seq_len + 1 tokens: the window order the
sampler draws changes no mean), and its step-1 loss (the loss before the update) equals
transformers' cross-entropy on the same windows within 1e-5 relative.
Configs transformers accepts but ztrain cannot train exit 2 naming the field: an unknown
architecture (GPTNeoXForCausalLM: model_type), a rope type ztrain lacks (yarn), a Llama
with a classification head (LlamaForSequenceClassification: architectures), and a Qwen2 with
sliding windows (use_sliding_window).
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import json
import os
import sys
import tempfile

from interop_common import Failures, read_metrics, require, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: no hub lookups
np, torch, transformers = require("numpy", "torch", "transformers")

B, T, VOCAB = 4, 16, 96  # micro_batch, seq_len, vocabulary (not a multiple of ztrain's padding)
# Weights of transformers' default scale (0.02) make attention nearly uniform at this width,
# blind to positions: RoPE's theta or scaling would then not change the loss.
INIT = 0.3
FAIL = Failures()


def tiny_models():
    """name -> (model, save_pretrained's extra arguments)."""
    t = transformers
    torch.manual_seed(7)
    gpt2 = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=T, vocab_size=VOCAB,
                                          initializer_range=INIT, bos_token_id=0, eos_token_id=0))
    gqa = t.LlamaForCausalLM(t.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48,
        vocab_size=VOCAB, max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8},
        initializer_range=INIT, bos_token_id=0, eos_token_id=0))
    mha = t.LlamaForCausalLM(t.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=T, tie_word_embeddings=True, initializer_range=INIT, bos_token_id=0,
        eos_token_id=0))
    mistral = t.MistralForCausalLM(t.MistralConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48,
        vocab_size=VOCAB, max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=5,
        initializer_range=INIT, bos_token_id=0, eos_token_id=0))
    return {"gpt2": (gpt2, {}), "llama-gqa": (gqa, {"max_shard_size": "20KB"}),
            "llama-bf16": (mha.to(torch.bfloat16), {}), "mistral": (mistral, {})}


def write_batch(path):
    """A token shard of exactly B windows of T + 1 tokens (llm.c layout, uint16); the windows."""
    tokens = np.random.default_rng(3).integers(0, VOCAB, size=B * T + 1).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, tokens.size]
    with open(path, "wb") as f:
        f.write(header.tobytes() + tokens.tobytes())
    return np.stack([tokens[k * T:k * T + T + 1] for k in range(B)]).astype(np.int64)


def hf_loss(model_dir, windows):
    """transformers' mean next-token cross-entropy on WINDOWS, the model loaded back in fp32."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    w = torch.from_numpy(windows)
    with torch.no_grad():
        logits = model(w[:, :T]).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item()


def ztrain_loss(bin_dir, model_dir, shard, run_dir):
    """ztrain's step-1 loss after --model.from_hf=MODEL_DIR, or None (the failure recorded)."""
    rc, out = run([os.path.join(bin_dir, "ztrain"), "--model.from_hf=" + model_dir, "--data.train=" + shard,
                   f"--model.seq_len={T}", f"--train.micro_batch={B}", "--train.grad_accum=1",
                   "--train.max_steps=1", "--train.threads=1", "--train.sample_tokens=0",
                   "--run.dir=" + run_dir, "--checkpoint.resume=never"])
    if not FAIL.check(rc == 0, f"ztrain --model.from_hf={model_dir} exited {rc}: {out[-600:]}"):
        return None
    steps = [r for r in read_metrics(run_dir) if r.get("step") == 1 and "loss" in r]
    return steps[0]["loss"] if FAIL.check(steps, f"{run_dir}/metrics.jsonl has no step 1") else None


def check_layout(name, model_dir):
    """The files save_pretrained wrote are the kind the case is for (sharded, bf16)."""
    from safetensors import safe_open
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if name == "llama-gqa":
        FAIL.check(os.path.exists(index) and len(files) > 1, f"{name}: expected a sharded save, got {files}")
    if name == "llama-bf16":
        with safe_open(os.path.join(model_dir, files[0]), "np") as s:
            dtypes = {s.get_slice(k).get_dtype() for k in s.keys()}
        FAIL.check(dtypes == {"BF16"}, f"{name}: saved dtypes {dtypes}, expected BF16")


def compare_losses(bin_dir, work, shard, windows):
    results = []
    for name, (model, save_args) in tiny_models().items():
        model_dir = os.path.join(work, name)
        model.save_pretrained(model_dir, **save_args)
        check_layout(name, model_dir)
        want = hf_loss(model_dir, windows)
        got = ztrain_loss(bin_dir, model_dir, shard, os.path.join(work, "run-" + name))
        if got is None:
            continue
        rel = abs(got - want) / abs(want)
        FAIL.check(rel <= 1e-5, f"{name}: ztrain's first loss {got!r}, transformers' {want!r}: relative "
                   f"difference {rel:.3g} > 1e-5")
        results.append(f"{name} {got:.7f} (rel {rel:.1e})")
    return results


def refusals(bin_dir, work, shard):
    """Configs transformers saves and ztrain cannot train: exit 2, the message naming the field."""
    t = transformers
    neox = t.GPTNeoXForCausalLM(t.GPTNeoXConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=32,
                                                 intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=T))
    yarn = t.LlamaForCausalLM(t.LlamaConfig(
        num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=T, rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                                                    "original_max_position_embeddings": 8}))
    classifier = t.LlamaForSequenceClassification(t.LlamaConfig(
        num_hidden_layers=1, num_attention_heads=2, hidden_size=32, intermediate_size=64, vocab_size=VOCAB,
        max_position_embeddings=T, num_labels=3, pad_token_id=0))
    # Qwen2 with sliding windows on its upper layers (ztrain attends over the whole context).
    windowed = t.Qwen2ForCausalLM(t.Qwen2Config(
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=VOCAB, max_position_embeddings=T, use_sliding_window=True, sliding_window=4, max_window_layers=1))
    cases = {"gpt_neox": (neox, "model_type = 'gpt_neox'"), "yarn": (yarn, "rope_parameters.rope_type = 'yarn'"),
             "classifier": (classifier, 'architectures = ["LlamaForSequenceClassification"]'),
             "qwen2_sliding": (windowed, "use_sliding_window = true")}
    for name, (model, field) in cases.items():
        model_dir = os.path.join(work, name)
        model.save_pretrained(model_dir)
        rc, out = run([os.path.join(bin_dir, "ztrain"), "--model.from_hf=" + model_dir, "--data.train=" + shard,
                       "--train.max_steps=1", "--run.dir=" + os.path.join(work, "run-" + name)])
        FAIL.check(rc == 2 and field in out and "config.json" in out,
                   f"{name}: ztrain exited {rc} (expected 2 naming config.json's {field}): {out[-400:]}")


def main(bin_dir, src_dir):
    del src_dir
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        shard = os.path.join(work, "train.bin")
        windows = write_batch(shard)
        results = compare_losses(bin_dir, work, shard, windows)
        refusals(bin_dir, work, shard)
    return FAIL.report(f"ztrain's first loss equals transformers' {transformers.__version__} (torch "
                       f"{torch.__version__}): {', '.join(results)}; gpt_neox, yarn, a classifier and a windowed Qwen2 refused, naming the field")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
