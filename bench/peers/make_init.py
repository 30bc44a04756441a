"""Writes the shared initial GPT-2 as a Hugging Face model directory (save_pretrained,
safetensors, fp32): GPT2LMHeadModel's own initialization under torch.manual_seed(SEED),
no dropout, n_positions = seq_len (ztrain's --model.from_hf takes the context from it).
Both ztrain (--model.from_hf=DIR) and the peers start from it.

Usage: python make_init.py --shape small --out DIR [--seed 1337]
"""
import argparse
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from peers_common import GPT2_VOCAB, SHAPES


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    n_layer, n_head, n_embd, seq_len, _ = SHAPES[a.shape]
    cfg = GPT2Config(vocab_size=GPT2_VOCAB, n_positions=seq_len, n_embd=n_embd, n_layer=n_layer,
                     n_head=n_head, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True,
                     bos_token_id=50256, eos_token_id=50256)
    torch.manual_seed(a.seed)
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(a.out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"shape": a.shape, "params": n, "out": a.out}))


if __name__ == "__main__":
    main()
