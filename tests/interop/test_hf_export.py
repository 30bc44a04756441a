"""transformers reads what ztrain writes: zt-consolidate's Hugging Face directories.

    python test_hf_export.py BIN_DIR SOURCE_DIR

Six tiny models, initialised by transformers at scale 0.3 (so that attention depends on
positions) and read by --model.from_hf, train 12 steps each (np 1, fp32, seq_len 96) on an
ASCII corpus:
  - gpt2: GPT-2 (tied head) with GPT-2's tokenizer as zt-prepare --tokenizer gpt2 reads it
    (vocab.json + merges.txt, so the export builds tokenizer.json from them);
  - llama-gqa: Llama, 4 query / 2 key-value heads, untied head, rope_theta 500000 with llama3
    scaling (factor 4 from 32 positions, so it moves the frequencies within 96), with Llama 3's
    tokenizer.json (../shared; GPT-2's tokenizer.json when that folder is not there);
  - llama-mha: Llama, multi-head, tied head, rope_theta 2000, with GPT-2's tokenizer.json
    (zt-prepare --tokenizer FILE);
  - mistral: Mistral, 4 query / 2 key-value heads, untied head, sliding window 24 (shorter
    than the context and than the generated text), GPT-2's tokenizer.json; its export is a
    MistralForCausalLM with config.json's sliding_window 24;
  - qwen2: Qwen2 (q/k/v biases), 4 query / 2 key-value heads, tied head; qwen3: Qwen3 (q and k
    head norms, head_dim 12 where hidden / heads is 8), untied head; both with GPT-2's
    tokenizer.json.
Each is consolidated with zt-consolidate --output DIR/ and then:
  - AutoModelForCausalLM.from_pretrained(DIR) loads with no missing, unexpected or mismatched
    keys and no warning, in fp32; config.json's bos/eos_token_id are the tokenizer's;
  - AutoTokenizer.from_pretrained(DIR) loads (GPT2Tokenizer / PreTrainedTokenizerFast), and it
    and `tokenizers` reading DIR/tokenizer.json encode a text (with "<|endoftext|>") to the ids
    `tokenizers` gives with the run's own tokenizer file; its bos/eos are config.json's;
  - every ending's log-likelihood from zt-eval --per-item (on the checkpoint, the run's
    tokenizer) equals transformers' on the export within 1e-4 relative, with the same token
    and character counts (24 HellaSwag-layout examples, 4 endings);
  - generate() greedy (64 new tokens after [bos] + the prompt, end-of-text not stopping it)
    gives the bytes zt-generate --temperature 0 --ignore-eos prints, token for token.
And: llama-gqa exported --dtype bf16 loads as bfloat16 (config dtype and every parameter),
each parameter the fp32 export's rounded to bfloat16; gpt2 and llama-mha exported with
--max-shard-size load from model-0000k-of-0000n.safetensors + the index, every parameter
equal to the single file's.
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings

from export_common import ZtrainRuns, choice_items, gpt2_files, llama3_tokenizer, write_jsonl
from interop_common import Failures, require

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # local directories only: no hub lookups
torch, transformers, tokenizers = require("torch", "transformers", "tokenizers")

SEQ, STEPS, ITEMS, NEW_TOKENS = 96, 12, 24, 64
PROMPT = "The man throws the red ball"
# Weights at transformers' default scale (0.02) make a tiny model's attention nearly uniform,
# blind to positions (a wrong rope_theta would change its log-likelihoods by 1e-6), and
# 12 steps do not change that; so each run starts from a model transformers initialised at
# this scale (model.from_hf), and ztrain trains it.
INIT = 0.3
FAIL = Failures()
# name -> (tokenizer kind, transformers config of the starting model)
CASES = {
    "gpt2": ("gpt2", lambda t, v: t.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=SEQ, vocab_size=v)),
    "llama-gqa": ("llama3", lambda t, v: t.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=88,
        vocab_size=v, max_position_embeddings=SEQ, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 4.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    "llama-mha": ("gpt2-hf", lambda t, v: t.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, hidden_size=32, intermediate_size=64, vocab_size=v,
        max_position_embeddings=SEQ, rms_norm_eps=1e-5, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 2000.0})),
    # Mistral: a sliding window of 24 inside the 96-token context, so training, the
    # log-likelihoods and the 64 generated tokens (past the window: the key/value cache's
    # window) all mask keys further back than it.
    "mistral": ("gpt2-hf", lambda t, v: t.MistralConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=v, max_position_embeddings=SEQ, rms_norm_eps=1e-5, tie_word_embeddings=False,
        sliding_window=24, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "qwen2": ("gpt2-hf", lambda t, v: t.Qwen2Config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=64,
        vocab_size=v, max_position_embeddings=SEQ, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    "qwen3": ("gpt2-hf", lambda t, v: t.Qwen3Config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, head_dim=12,
        intermediate_size=64, vocab_size=v, max_position_embeddings=SEQ, rms_norm_eps=1e-6,
        tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
}


def preprocess(text):
    """lm-evaluation-harness's hellaswag preprocess (what zt-eval applies to these fields)."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub("\\[.*?\\]", "", text).replace("  ", " ")


class Warnings(logging.Handler):
    """transformers' log records at WARNING and above, and Python warnings, while in use."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(record.getMessage())

    def __enter__(self):
        transformers.utils.logging.get_logger().addHandler(self)
        self.caught = warnings.catch_warnings(record=True)
        self.py = self.caught.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        transformers.utils.logging.get_logger().removeHandler(self)
        self.seen += [str(w.message) for w in self.py]
        self.caught.__exit__(*exc)


def load(name, model_dir, **kw):
    """The export loaded by from_pretrained; its loading info checked."""
    with Warnings() as seen:
        model, info = transformers.AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, **kw)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        FAIL.check(not info[key], f"{name}: from_pretrained({model_dir}) {key}: {sorted(map(str, info[key]))}")
    FAIL.check(not seen.seen, f"{name}: from_pretrained({model_dir}) warned: {seen.seen}")
    return model.eval()


def tokenizer_setup(runs, kind, src_dir):
    """(zt-prepare's --tokenizer arguments, the tokenizer.json Hugging Face's files judge by,
    the vocabulary size) for a tokenizer kind."""
    g = gpt2_files(src_dir, runs.work)
    if kind == "gpt2":
        return ["--tokenizer", "gpt2", "--vocab", g["vocab"], "--merges", g["merges"]], g["tokenizer.json"], 50257
    llama3 = llama3_tokenizer(src_dir, runs.work) if kind == "llama3" else None
    if kind == "llama3" and llama3 is None:
        print("note: no Llama 3 tokenizer in ../shared/data (ZT_SHARED_DATA): llama-gqa uses GPT-2's tokenizer.json")
    path = llama3 or g["tokenizer.json"]
    return ["--tokenizer", path], path, 128256 if llama3 else 50257


def check_tokenizer(name, model_dir, reference_json, config):
    """AutoTokenizer reads the export and encodes as `tokenizers` does with the run's file."""
    # transformers 5 gives a qwen2 directory Qwen2Tokenizer whatever its tokenizer_config says
    # (MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS): Qwen's own pre-tokenizer, right for Qwen's
    # tokenizer.json, not for the GPT-2 one this case trains with; so its tokenizer.json is
    # read by the class tokenizer_config.json names.
    loader = transformers.PreTrainedTokenizerFast if config["model_type"] == "qwen2" else transformers.AutoTokenizer
    with Warnings() as seen:
        tok = loader.from_pretrained(model_dir)
    FAIL.check(not seen.seen, f"{name}: AutoTokenizer.from_pretrained warned: {seen.seen}")
    # "<|endoftext|>" is GPT-2's special token (an added token of its tokenizer.json), plain text to Llama 3.
    text = "The chef cuts the green brush, quickly!  Then 12345 dogs walk\n\ninto the garden?<|endoftext|> Done."
    want = tokenizers.Tokenizer.from_file(reference_json).encode(text, add_special_tokens=False).ids
    got = tok(text, add_special_tokens=False).input_ids
    FAIL.check(got == want, f"{name}: AutoTokenizer's ids {got} differ from tokenizers' {want} (the run's file)")
    # The file itself, as tokenizers (and transformers 4's fast tokenizers) read it.
    exported = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    got = exported.encode(text, add_special_tokens=False).ids
    FAIL.check(got == want, f"{name}: the exported tokenizer.json's ids {got} differ from the run's file's {want}")
    for which in ("bos", "eos"):
        tid = tok.convert_tokens_to_ids(getattr(tok, which + "_token"))
        FAIL.check(tid == config[which + "_token_id"], f"{name}: tokenizer {which}_token "
                   f"{getattr(tok, which + '_token')!r} is id {tid}, config.json's {which}_token_id "
                   f"{config[which + '_token_id']}")
    return tok


def hf_logliks(model, tok, item):
    """Each ending's summed log-likelihood and token count, as the harness pairs context and
    continuation (_encode_pair: whole = encode(ctx + " " + ending), ending = whole[len(encode(ctx)):])."""
    ctx = preprocess(item["activity_label"] + ": " + item["ctx_a"] + " " + item["ctx_b"].capitalize())
    ctx_ids = tok(ctx, add_special_tokens=False).input_ids
    out = []
    for ending in item["endings"]:
        whole = tok(ctx + " " + preprocess(ending), add_special_tokens=False).input_ids
        n = len(whole) - len(ctx_ids)
        with torch.no_grad():
            logits = model(torch.tensor([whole[:-1]])).logits[0].double()
        logp = torch.log_softmax(logits, dim=-1)
        out.append((sum(logp[len(ctx_ids) - 1 + i, whole[len(ctx_ids) + i]].item() for i in range(n)), n,
                    len(preprocess(ending))))
    return out


def compare_logliks(name, runs, ckpt, model, tok, items, task):
    """zt-eval --per-item on the checkpoint against transformers on the export; the largest
    relative difference."""
    _, per_item = runs.zt_eval_per_item(ckpt, task, name)
    worst = 0.0
    for item, zt in zip(items, per_item):
        for k, (ll, n, chars) in enumerate(hf_logliks(model, tok, item)):
            rel = abs(zt["loglik"][k] - ll) / abs(ll)
            worst = max(worst, rel)
            FAIL.check(rel <= 1e-4, f"{name}: item {zt['index']} ending {k}: zt-eval's log-likelihood "
                       f"{zt['loglik'][k]!r}, transformers' {ll!r} (relative {rel:.2e} > 1e-4)")
            FAIL.check((zt["tokens"][k], zt["chars"][k]) == (n, chars), f"{name}: item {zt['index']} ending {k}: "
                       f"zt-eval scored {zt['tokens'][k]} tokens / {zt['chars'][k]} chars, transformers {n} / {chars}")
    FAIL.check(len(per_item) == len(items), f"{name}: zt-eval --per-item wrote {len(per_item)} lines, expected {len(items)}")
    return worst


def token_bytes(tok):
    """id -> the bytes a byte-level BPE token stands for (what zt-generate prints for it):
    GPT-2's byte-to-unicode alphabet read backwards."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    others = [b for b in range(256) if b not in printable]
    byte_of = {chr(b): b for b in printable} | {chr(256 + k): b for k, b in enumerate(others)}
    return lambda i: bytes(byte_of[c] for c in tok.convert_ids_to_tokens(i))


def compare_generate(name, runs, ckpt, model, tok, bos):
    """generate() greedy against zt-generate --temperature 0 on the checkpoint, token by token."""
    p = subprocess.run([os.path.join(runs.bin, "zt-generate"), ckpt, "--prompt", PROMPT, "--temperature", "0",
                        "--max-new-tokens", str(NEW_TOKENS), "--ignore-eos", "--threads", "1"], cwd=runs.work,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if not FAIL.check(p.returncode == 0, f"{name}: zt-generate exited {p.returncode}: {p.stderr[-600:]!r}"):
        return
    got = p.stdout[:-1] if p.stdout.endswith(b"\n") else p.stdout
    ids = torch.tensor([[bos] + tok(PROMPT, add_special_tokens=False).input_ids])
    model.generation_config.eos_token_id = None  # as --ignore-eos: 64 tokens whatever they are
    with torch.no_grad():
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS, do_sample=False,
                             pad_token_id=bos)[0, ids.shape[1]:].tolist()
    FAIL.check(len(new) == NEW_TOKENS, f"{name}: generate() gave {len(new)} tokens, expected {NEW_TOKENS}")
    as_bytes = token_bytes(tok)
    want = b"".join(as_bytes(i) for i in new)
    if not FAIL.check(got == want, f"{name}: zt-generate printed {got[:120]!r}, generate() {want[:120]!r}"):
        done = b""
        for k, i in enumerate(new):  # name the first token whose bytes zt-generate did not print
            if not got.startswith(done + as_bytes(i)):
                FAIL.check(False, f"{name}: the first difference is new token {k} (transformers: id {i}, "
                           f"{as_bytes(i)!r}) after {done[-40:]!r}")
                break
            done += as_bytes(i)


def check_bf16(name, runs, ckpt, fp32_model):
    """--dtype bf16: loads as bfloat16 (config and parameters), each the fp32 value rounded."""
    out_dir = runs.path(f"exp-{name}-bf16")
    runs.consolidate(ckpt, out_dir, "--dtype", "bf16")
    model = load(name + " bf16", out_dir)
    FAIL.check(model.config.dtype == torch.bfloat16 and model.dtype == torch.bfloat16,
               f"{name}: the bf16 export loads as {model.dtype} (config dtype {model.config.dtype})")
    want = dict(fp32_model.named_parameters())
    for pname, p in model.named_parameters():
        FAIL.check(p.dtype == torch.bfloat16 and torch.equal(p, want[pname].to(torch.bfloat16)),
                   f"{name}: bf16 export's {pname} ({p.dtype}) is not the fp32 export's rounded to bfloat16")


def check_sharded(name, runs, ckpt, fp32_model):
    """--max-shard-size: the shards and index load, every parameter the single file's."""
    out_dir = runs.path(f"exp-{name}-sharded")
    runs.consolidate(ckpt, out_dir, "--max-shard-size", "2MB")
    shards = [f for f in os.listdir(out_dir) if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)]
    FAIL.check(len(shards) > 1 and os.path.exists(os.path.join(out_dir, "model.safetensors.index.json")),
               f"{name}: --max-shard-size 2MB wrote {sorted(os.listdir(out_dir))}, expected shards and an index")
    model = load(name + " sharded", out_dir)
    want = dict(fp32_model.named_parameters())
    for pname, p in model.named_parameters():
        FAIL.check(torch.equal(p, want[pname]), f"{name}: the sharded export's {pname} differs from the single file's")


def starting_model(name, runs, vocab):
    """CASES[name]'s model, initialised by transformers at scale INIT, saved in WORK/init-NAME."""
    torch.manual_seed(7)
    config = CASES[name][1](transformers, vocab)
    config.initializer_range = INIT
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(runs.path("init-" + name))
    return "init-" + name


def run_case(name, runs, src_dir, task, items):
    prepare_args, reference_json, vocab = tokenizer_setup(runs, CASES[name][0], src_dir)
    data = runs.prepare(name, prepare_args)
    ckpt = runs.train(name, data, [f"--model.from_hf={starting_model(name, runs, vocab)}",
                                   f"--train.max_steps={STEPS}", "--train.micro_batch=4", "--train.lr=1e-2",
                                   "--train.warmup_steps=2", "--train.grad_clip=1.0"])
    out_dir = runs.path("exp-" + name)
    said = runs.consolidate(ckpt, out_dir)
    FAIL.check("tokenizer.json, tokenizer_config.json" in said, f"{name}: zt-consolidate wrote no tokenizer: {said}")
    model = load(name, out_dir, dtype=torch.float32)
    config = model.config.to_dict()
    tok = check_tokenizer(name, out_dir, reference_json, config)
    worst = compare_logliks(name, runs, ckpt, model, tok, items, task)
    compare_generate(name, runs, ckpt, model, tok, config["bos_token_id"])
    if name == "mistral":
        FAIL.check(config["architectures"] == ["MistralForCausalLM"] and config["sliding_window"] == 24,
                   f"{name}: the export's config is {config['architectures']}, sliding_window "
                   f"{config.get('sliding_window')} (expected MistralForCausalLM, 24)")
    if name == "llama-gqa":
        check_bf16(name, runs, ckpt, model)
    else:
        check_sharded(name, runs, ckpt, model)
    return f"{name} (log-likelihoods within {worst:.1e})"


def main(bin_dir, src_dir):
    transformers.logging.set_verbosity_warning()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    done = []
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        runs = ZtrainRuns(bin_dir, src_dir, work)
        items = choice_items(ITEMS)
        write_jsonl(runs.path("choice.jsonl"), items)
        for name in CASES:
            try:
                done.append(run_case(name, runs, src_dir, "choice.jsonl", items))
            except RuntimeError as e:
                FAIL.check(False, f"{name}: {e}")
    return FAIL.report(f"transformers {transformers.__version__} reads zt-consolidate's exports: " + ", ".join(done))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
