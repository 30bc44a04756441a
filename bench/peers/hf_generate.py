"""Pair 5's peer: transformers' generate() with its KV cache (the default DynamicCache, or
--cache static), greedy, exactly --max-new-tokens new tokens, on the shared init. The
prompt is tokenized with the model directory's tokenizer.json and, as zt-generate does,
starts with the end-of-text token. One untimed warm-up call of 8 tokens first. Prints one JSON line: the prompt and new token counts,
the seconds of the whole generate() call and new tokens per second over it, peak RSS.
"""
import argparse
import json
import time

import torch
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

from peers_common import peak_rss_kib


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = PreTrainedTokenizerFast(tokenizer_file=f"{a.model}/tokenizer.json")
    model = GPT2LMHeadModel.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    ids = torch.tensor([[50256] + tok.encode(a.prompt)])
    kw = dict(max_new_tokens=a.max_new_tokens, min_new_tokens=a.max_new_tokens, do_sample=False,
              pad_token_id=50256, use_cache=True)
    if a.cache == "static":
        kw["cache_implementation"] = "static"
    with torch.inference_mode():
        model.generate(ids, **dict(kw, max_new_tokens=8, min_new_tokens=8))  # warm-up, untimed
        t0 = time.perf_counter()
        out = model.generate(ids, **kw)
        total_s = time.perf_counter() - t0
    new = out.shape[1] - ids.shape[1]
    print(json.dumps({"prompt_tokens": ids.shape[1], "new_tokens": new, "total_s": total_s,
                      "tokens_per_s": new / total_s, "rss_kib": [peak_rss_kib()], "cache": a.cache,
                      "text": tok.decode(out[0, ids.shape[1]:].tolist())[:200]}))


if __name__ == "__main__":
    main()
