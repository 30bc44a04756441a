#!/usr/bin/env python3
"""torch.optim.Muon as the reference for ztrain's train.optimizer = muon (test_muon.cpp).

    muon_torch.py DIR

Makes a tiny random LlamaForCausalLM with transformers (grouped-query heads, untied head,
weights at scale 0.3), saves it into DIR/model (fp32), draws B rows of T + 1 tokens, and takes
STEPS steps in float64 the way a PyTorch user pairs the two optimizers: torch.optim.Muon
(adjust_lr_fn ADJUST, Nesterov, momentum 0.95, weight decay) on the decoder layers' 2-D
weights, torch.optim.AdamW on the rest (decay on the embedding and the head, none on the
norms), after torch.nn.utils.clip_grad_norm_; once for each of Muon's adjust_lr_fn
"match_rms_adamw" (at AdamW's rate) and "original" (at 0.02). The losses before each step go
into DIR/reference.json, under the adjust_lr_fn's name.

torch.optim.Muon always orthogonalizes in bfloat16; the reference runs the library's own
Newton-Schulz code with the module's `torch.bfloat16` read as float64 (a proxy for the torch
module inside torch.optim._muon), so it holds ztrain's fp32 iteration to 1e-4 rather than to
bf16's rounding. DIR/reference.json also holds the curve with Muon exactly as shipped
(bf16), for the looser check.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.optim._muon as muon_module
import transformers

B, T, VOCAB = 2, 16, 64
LR, BETA1, BETA2, EPS, DECAY, CLIP, STEPS = 2e-3, 0.9, 0.95, 1e-8, 0.1, 1.0, 20
MUON_LR_ORIGINAL = 2e-2  # adjust_lr_fn="original" wants a larger rate


class Float64Torch:
    """torch, but its bfloat16 is float64: torch.optim.Muon's own Newton-Schulz, unrounded."""

    bfloat16 = torch.float64

    def __getattr__(self, name):
        return getattr(torch, name)


def make_model(out_dir):
    torch.manual_seed(7)
    config = transformers.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32, intermediate_size=48,
        vocab_size=VOCAB, max_position_embeddings=T, rms_norm_eps=1e-5, tie_word_embeddings=False,
        initializer_range=0.3, bos_token_id=0, eos_token_id=0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(os.path.join(out_dir, "model"))
    return model


def curve(out_dir, tokens, adjust, unrounded):
    model = transformers.LlamaForCausalLM.from_pretrained(os.path.join(out_dir, "model")).double()
    model.config._attn_implementation = "eager"
    named = dict(model.named_parameters())
    matrices = [p for n, p in named.items() if n.startswith("model.layers.") and p.dim() == 2]
    decayed = [p for n, p in named.items() if not n.startswith("model.layers.") and p.dim() == 2]
    plain = [p for n, p in named.items() if p.dim() < 2]
    lr = MUON_LR_ORIGINAL if adjust == "original" else LR
    muon = torch.optim.Muon(matrices, lr=lr, weight_decay=DECAY, momentum=0.95, nesterov=True,
                            adjust_lr_fn=adjust)
    adamw = torch.optim.AdamW([{"params": decayed, "weight_decay": DECAY}, {"params": plain, "weight_decay": 0.0}],
                              lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses = []
    saved = muon_module.torch
    if unrounded:
        muon_module.torch = Float64Torch()
    try:
        for _ in range(STEPS):
            muon.zero_grad()
            adamw.zero_grad()
            logits = model(input_ids=tokens[:, :T]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
            loss.backward()
            losses.append(loss.item())
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            muon.step()
            adamw.step()
    finally:
        muon_module.torch = saved
    return losses


def main(out_dir):
    torch.set_num_threads(1)  # a tiny model: threads would only contend with the tests beside it
    transformers.utils.logging.disable_progress_bar()
    make_model(out_dir)
    tokens = torch.from_numpy(np.random.default_rng(5).integers(0, VOCAB, size=(B, T + 1)).astype(np.int64))
    result = {"B": B, "T": T, "tokens": tokens.tolist(), "lr": LR, "weight_decay": DECAY, "torch": torch.__version__}
    for adjust in ("match_rms_adamw", "original"):
        result[adjust] = {"muon_lr": MUON_LR_ORIGINAL if adjust == "original" else LR,
                          "curve": curve(out_dir, tokens, adjust, True),
                          "curve_bf16": curve(out_dir, tokens, adjust, False)}
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
