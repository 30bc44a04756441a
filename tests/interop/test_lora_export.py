"""PEFT loads ztrain's LoRA adapters (zt-consolidate --lora adapter) and transformers its merged
model (--lora merge); both compute ztrain's validation loss.

    python test_lora_export.py BIN_DIR SOURCE_DIR

For a tiny GPT-2 (every module adapted: c_attn, c_proj, c_fc) and a tiny grouped-query Llama
(q_proj, v_proj, down_proj), saved by transformers: ztrain --model.from_hf=BASE --lora.rank=4
trains 3 steps (lr 1e-2, so B moves away from zero) and evaluates on a shard holding exactly
one batch; then zt-consolidate writes the adapter and the merged model. Checked:
peft.PeftModel.from_pretrained(BASE, ADAPTER)'s logits equal the merged model's within 1e-4,
the adapters' B are not zero, and the PEFT model's mean cross-entropy on the batch equals
ztrain's final validation loss within 1e-4 relative; an export without --lora exits 2.
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import os
import sys
import tempfile

from interop_common import Failures, read_metrics, require, run

os.environ.setdefault("HF_HUB_OFFLINE", "1")
np, torch, transformers, peft, safetensors = require("numpy", "torch", "transformers", "peft", "safetensors")

B, T, VOCAB = 4, 16, 96
INIT = 0.3
FAIL = Failures()


def tiny_models():
    t = transformers
    torch.manual_seed(11)
    gpt2 = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=T, vocab_size=VOCAB,
                                          initializer_range=INIT, bos_token_id=0, eos_token_id=0))
    llama = t.LlamaForCausalLM(t.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48,
        vocab_size=VOCAB, max_position_embeddings=T, tie_word_embeddings=False, initializer_range=INIT,
        bos_token_id=0, eos_token_id=0))
    return {"gpt2": (gpt2, "c_attn,c_proj,c_fc"), "llama": (llama, "q_proj,v_proj,down_proj")}


def write_batch(path):
    """A token shard of exactly B windows of T + 1 tokens (llm.c layout, uint16); the windows."""
    tokens = np.random.default_rng(5).integers(0, VOCAB, size=B * T + 1).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, tokens.size]
    with open(path, "wb") as f:
        f.write(header.tobytes() + tokens.tobytes())
    return np.stack([tokens[k * T:k * T + T + 1] for k in range(B)]).astype(np.int64)


def train_and_export(bin_dir, work, name, base, targets, shard):
    """ztrain's final validation loss and the adapter and merged directories, or None."""
    run_dir = os.path.join(work, "run-" + name)
    rc, out = run([os.path.join(bin_dir, "ztrain"), "--model.from_hf=" + base, "--data.train=" + shard,
                   "--data.val=" + shard, f"--model.seq_len={T}", f"--train.micro_batch={B}",
                   "--train.max_steps=3", "--train.lr=1e-2", "--train.warmup_steps=0", "--train.eval_batches=1",
                   "--train.threads=1", "--train.sample_tokens=0", "--lora.rank=4", "--lora.alpha=8",
                   "--lora.targets=" + targets, "--run.dir=" + run_dir, "--checkpoint.resume=never"])
    if not FAIL.check(rc == 0, f"{name}: ztrain --lora.rank=4 exited {rc}: {out[-600:]}"):
        return None
    val = [r["val_loss"] for r in read_metrics(run_dir) if "val_loss" in r]
    # A plain export would drop the adapters: refused, naming both choices.
    rc, out = run([os.path.join(bin_dir, "zt-consolidate"), os.path.join(run_dir, "checkpoints"), "--output",
                   os.path.join(work, name + "-plain") + "/"])
    FAIL.check(rc == 2 and "--lora adapter" in out and "--lora merge" in out,
               f"{name}: zt-consolidate without --lora exited {rc} (expected 2 naming --lora): {out[-400:]}")
    dirs = {}
    for kind in ("adapter", "merge"):
        dirs[kind] = os.path.join(work, f"{name}-{kind}") + "/"
        rc, out = run([os.path.join(bin_dir, "zt-consolidate"), os.path.join(run_dir, "checkpoints"), "--output",
                       dirs[kind], "--lora", kind])
        if not FAIL.check(rc == 0, f"{name}: zt-consolidate --lora {kind} exited {rc}: {out[-600:]}"):
            return None
    return (val[-1] if FAIL.check(val, f"{name}: no val_loss in metrics.jsonl") else None), dirs


def check(name, base, dirs, windows, ztrain_val):
    auto = transformers.AutoModelForCausalLM
    model = peft.PeftModel.from_pretrained(auto.from_pretrained(base, dtype=torch.float32), dirs["adapter"]).eval()
    merged = auto.from_pretrained(dirs["merge"], dtype=torch.float32).eval()
    with safetensors.safe_open(os.path.join(dirs["adapter"], "adapter_model.safetensors"), "pt") as f:
        b_norm = sum(float(f.get_tensor(k).abs().sum()) for k in f.keys() if "lora_B" in k)
    FAIL.check(b_norm > 0, f"{name}: every adapter's B is zero after training")
    w = torch.from_numpy(windows)
    with torch.no_grad():
        a = model(w[:, :T]).logits.double()
        m = merged(w[:, :T]).logits.double()
    diff = float((a - m).abs().max())
    FAIL.check(diff <= 1e-4, f"{name}: PEFT's logits and the merged model's differ by {diff:.3g} > 1e-4")
    loss = torch.nn.functional.cross_entropy(a.reshape(-1, a.shape[-1]), w[:, 1:].reshape(-1)).item()
    rel = abs(loss - ztrain_val) / abs(ztrain_val)
    FAIL.check(rel <= 1e-4, f"{name}: PEFT's loss {loss!r}, ztrain's validation loss {ztrain_val!r}: relative "
               f"difference {rel:.3g} > 1e-4")
    return f"{name} (logits within {diff:.1e}, loss within {rel:.1e})"


def main(bin_dir, src_dir):
    del src_dir
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    results = []
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        shard = os.path.join(work, "train.bin")
        windows = write_batch(shard)
        for name, (model, targets) in tiny_models().items():
            base = os.path.join(work, name)
            model.save_pretrained(base)
            got = train_and_export(bin_dir, work, name, base, targets, shard)
            if got is None or got[0] is None:
                continue
            results.append(check(name, base, got[1], windows, got[0]))
    return FAIL.report(f"PEFT {peft.__version__} loads ztrain's adapters and transformers its merged models: "
                       f"{', '.join(results)}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
