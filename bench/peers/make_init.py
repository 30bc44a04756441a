"""Writes the shared initial GPT-2 as a Hugging Face model directory (save_pretrained,
safetensors, fp32): GPT2LMHeadModel's own initialization under torch.manual_seed(SEED),
no dropout, n_positions = seq_len (ztrain's --model.from_hf takes the context from it).
Both ztrain (--model.from_hf=DIR) and the peers start from it. A shape of LLAMA_SHAPES
(pair 7) writes a LlamaForCausalLM the same way (GPT-2's vocabulary, tied embeddings).

Usage: python make_init.py --shape small --out DIR [--seed 1337]
"""
import argparse
import json

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from peers_common import GPT2_VOCAB, LLAMA_SHAPES, QWEN_SHAPES, SHAPES


def llama(shape):
    s = LLAMA_SHAPES[shape]
    cfg = LlamaConfig(vocab_size=GPT2_VOCAB, hidden_size=s["n_embd"], intermediate_size=s["ffn"],
                      num_hidden_layers=s["n_layer"], num_attention_heads=s["n_head"],
                      num_key_value_heads=s["n_kv_head"], max_position_embeddings=s["seq_len"],
                      rms_norm_eps=1e-5, rope_theta=s["rope_theta"], tie_word_embeddings=True,
                      bos_token_id=50256, eos_token_id=50256, attention_dropout=0.0)
    return LlamaForCausalLM(cfg)


def qwen(shape):
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
    s = QWEN_SHAPES[shape]
    common = dict(vocab_size=s["vocab"], hidden_size=s["n_embd"], intermediate_size=s["ffn"],
                  num_hidden_layers=s["n_layer"], num_attention_heads=s["n_head"],
                  num_key_value_heads=s["n_kv_head"], max_position_embeddings=s["seq_len"], rms_norm_eps=1e-6,
                  rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                  bos_token_id=50256, eos_token_id=50256, attention_dropout=0.0)
    if s["arch"] == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    return Qwen3ForCausalLM(Qwen3Config(head_dim=s["head_dim"], **common))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES) + sorted(LLAMA_SHAPES) + sorted(QWEN_SHAPES), required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.shape in LLAMA_SHAPES or a.shape in QWEN_SHAPES:
        torch.manual_seed(a.seed)
        model = llama(a.shape) if a.shape in LLAMA_SHAPES else qwen(a.shape)
        model.save_pretrained(a.out, safe_serialization=True)
        print(json.dumps({"shape": a.shape, "params": sum(p.numel() for p in model.parameters()), "out": a.out}))
        return
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
