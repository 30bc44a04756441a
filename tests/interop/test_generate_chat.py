"""zt-generate --chat against transformers' apply_chat_template(..., add_generation_prompt=True).

    python test_generate_chat.py BIN_DIR SOURCE_DIR

For Llama 3's and Qwen2.5's real tokenizer files (../shared/data), a tiny Llama saved by
transformers' save_pretrained beside them is built so that greedy decoding always picks the
template's end-of-turn token (every embedding the same vector, the blocks' output projections
zero, and only the end-of-turn row of the LM head non-zero). For a few conversations (one
user message given as text; system, user, assistant and user turns as {"messages": ...}):
  - the prompt tokens `zt-generate --chat --print-prompt-tokens` reports equal
    `apply_chat_template(messages, add_generation_prompt=True, tokenize=True)`'s (for Qwen,
    with a system message: without one its template adds a default system message, a known
    difference asserted as such: Hugging Face's ids are that message's then ours);
  - generation stops at the end-of-turn token (`stopped: end of turn`, nothing printed),
    where without --chat the same model runs to --max-new-tokens.
Exit 0: as expected; 1: a difference; 77: skipped (a package or the shared data missing,
unless ZT_REQUIRE_INTEROP=1).
"""
import gzip
import json
import os
import re
import shutil
import sys
import tempfile

from interop_common import Failures, require, shared_data, run

torch, transformers = require("torch", "transformers")

QWEN_DEFAULT_SYSTEM = "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
CONVERSATIONS = [
    "Hello there!",
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  What is 12 + 30?\n"}]},
    {"messages": [{"role": "system", "content": ""}, {"role": "user", "content": "e\u0301te\u0301 机器"},
                  {"role": "assistant", "content": " OK 👍🏽\n"}, {"role": "user", "content": "again\t"}]},
]


def tiny_model(model_dir, shared_folder, end_of_turn):
    """A Llama over the tokenizer's vocabulary whose greedy choice is always end_of_turn."""
    with gzip.open(os.path.join(shared_folder, "tokenizer.json.gz"), "rb") as f, \
            open(os.path.join(model_dir, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.copy(os.path.join(shared_folder, "tokenizer_config.json"), model_dir)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    eot = tok.convert_tokens_to_ids(end_of_turn)
    config = transformers.LlamaConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8, intermediate_size=16,
                                      vocab_size=len(tok), max_position_embeddings=256, tie_word_embeddings=False,
                                      bos_token_id=0, eos_token_id=0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight.fill_(1.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.lm_head.weight.zero_()
        model.lm_head.weight[eot].fill_(1.0)
    model.save_pretrained(model_dir)
    return tok, eot


def generate(bin_dir, model_dir, prompt, *flags):
    rc, out = run([os.path.join(bin_dir, "zt-generate"), model_dir, "--prompt", prompt, "--temperature", "0",
                   "--max-new-tokens", "3", "--threads", "1", *flags])
    ids = re.search(r"prompt tokens: \[([0-9, ]*)\]", out)
    return rc, out, [int(x) for x in ids.group(1).split(", ")] if ids and ids.group(1) else None


def check_model(bin_dir, work, name, folder, end_of_turn, shared, fail):
    model_dir = os.path.join(work, name)
    os.makedirs(model_dir)
    tok, eot = tiny_model(model_dir, os.path.join(shared, "tokenizers", folder), end_of_turn)
    for conv in CONVERSATIONS:
        msgs = [{"role": "user", "content": conv}] if isinstance(conv, str) else conv["messages"]
        prompt = conv if isinstance(conv, str) else json.dumps(conv)
        rc, out, ours = generate(bin_dir, model_dir, prompt, "--chat", "--print-prompt-tokens")
        if not fail.check(rc == 0 and ours is not None, f"{name}: zt-generate --chat failed (exit {rc}): {out[-800:]}"):
            continue
        theirs = list(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)["input_ids"])
        if name == "qwen2_5" and msgs[0]["role"] != "system":
            default = tok.encode(QWEN_DEFAULT_SYSTEM, add_special_tokens=False)
            fail.check(theirs[:len(default)] == default, f"{name}: Qwen's default system message is not where expected")
            theirs = theirs[len(default):]
        fail.check(ours == theirs, f"{name}: prompt tokens {ours} differ from apply_chat_template's {theirs}")
        fail.check("stopped: end of turn" in out and "generated 1 tokens" in out,
                   f"{name}: expected generation to stop at the end-of-turn token ({eot}) at once: {out[-400:]}")
    rc, out, _ = generate(bin_dir, model_dir, "Hello there!")
    fail.check(rc == 0 and "generated 3 tokens" in out and "stopped: --max-new-tokens reached" in out,
               f"{name}: without --chat the end-of-turn token should not stop generation: {out[-400:]}")
    print(f"{name}: zt-generate --chat prompt tokens equal transformers {transformers.__version__}'s "
          f"apply_chat_template(add_generation_prompt=True) on {len(CONVERSATIONS)} conversations")


def main(bin_dir, src_dir):
    shared = shared_data(src_dir)
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch.manual_seed(49)
    fail = Failures()
    with tempfile.TemporaryDirectory(prefix="zt-interop-generate-") as work:
        check_model(bin_dir, work, "llama3", "llama3", "<|eot_id|>", shared, fail)
        check_model(bin_dir, work, "qwen2_5", "qwen2_5", "<|im_end|>", shared, fail)
    return fail.report("zt-generate --chat: prompts as apply_chat_template renders them, stopping at end of turn")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
