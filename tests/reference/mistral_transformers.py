#!/usr/bin/env python3
"""transformers' MistralForCausalLM as the reference for ztrain's mistral family (float64).

    mistral_transformers.py DIR

Makes a tiny random MistralForCausalLM with transformers (grouped-query heads, untied head, a
sliding window shorter than the rows, weights at scale 0.3 so attention depends on
positions), saves it with save_pretrained into DIR/model (fp32), draws B rows of T + 1
tokens, and computes in float64 with eager attention (its sliding mask) the mean next-token
cross-entropy and the gradient of every parameter, then 20 AdamW steps as ztrain takes them
(global-norm clip 1, bias corrections, decoupled decay on matrices only, constant lr).
Writes DIR/reference.json {"B", "T", "window", "tokens", "loss", "curve"} and
DIR/grad_NAME.bin (float64, the parameter's shape, Hugging Face names).
Run by tests/unit/test_mistral_reference.cpp with the interop environment's python.
"""
import json
import os
import sys

import numpy as np
import torch
import transformers

B, T, WINDOW, VOCAB = 2, 24, 7, 96
LR, BETA1, BETA2, EPS, DECAY, CLIP, STEPS = 2e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 20


def make_model(out_dir):
    torch.manual_seed(13)
    config = transformers.MistralConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48,
        vocab_size=VOCAB, max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=False,
        sliding_window=WINDOW, initializer_range=0.3, bos_token_id=0, eos_token_id=0)
    model = transformers.MistralForCausalLM(config)
    model.save_pretrained(os.path.join(out_dir, "model"))
    model = model.double()
    model.config._attn_implementation = "eager"
    return model


def loss_of(model, tokens):
    logits = model(input_ids=tokens[:, :T]).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))


def adamw_curve(model, tokens):
    """The losses of STEPS AdamW steps (each loss before its step), ztrain's update."""
    params = dict(model.named_parameters())
    m = {k: torch.zeros_like(p) for k, p in params.items()}
    v = {k: torch.zeros_like(p) for k, p in params.items()}
    curve = []
    for step in range(1, STEPS + 1):
        model.zero_grad()
        loss = loss_of(model, tokens)
        loss.backward()
        curve.append(loss.item())
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params.values())).item()
        clip = CLIP / norm if norm > CLIP else 1.0
        with torch.no_grad():
            for k, p in params.items():
                g = p.grad * clip
                m[k].mul_(BETA1).add_((1 - BETA1) * g)
                v[k].mul_(BETA2).add_((1 - BETA2) * g * g)
                mhat = m[k] / (1 - BETA1 ** step)
                vhat = v[k] / (1 - BETA2 ** step)
                decay = DECAY if p.dim() >= 2 else 0.0
                p.sub_(LR * (mhat / (torch.sqrt(vhat) + EPS) + decay * p))
    return curve


def main(out_dir):
    torch.set_num_threads(1)  # a tiny model: threads would only contend with the tests beside it
    transformers.utils.logging.disable_progress_bar()
    model = make_model(out_dir)
    tokens = torch.from_numpy(np.random.default_rng(3).integers(0, VOCAB, size=(B, T + 1)).astype(np.int64))
    loss = loss_of(model, tokens)
    loss.backward()
    for name, p in model.named_parameters():
        p.grad.detach().numpy().astype(np.float64).tofile(os.path.join(out_dir, "grad_" + name + ".bin"))
    curve = adamw_curve(model, tokens)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump({"B": B, "T": T, "window": WINDOW, "tokens": tokens.tolist(), "loss": loss.item(),
                   "curve": curve, "transformers": transformers.__version__}, f)


if __name__ == "__main__":
    main(sys.argv[1])
