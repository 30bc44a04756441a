"""transformers' own Qwen2 / Qwen3 modules as the reference for ztrain's (test_qwen_reference.cpp).

    python qwen_transformers.py DIR FAMILY TIED|UNTIED VOCAB SEQ

One process (importing torch and transformers costs more than the model): make, then reference.

make: transformers builds a tiny Qwen2ForCausalLM or Qwen3ForCausalLM (grouped-query heads, a
large RoPE angle step; Qwen3 with head_dim 6 where hidden / heads is 4), initialised at std 0.3
so every nonlinearity does real work, with random q/k/v biases (Qwen2) and q/k norm weights
(Qwen3) instead of their zero / one init, and saves it in fp32.
reference: the saved model in float64 on DIR/tokens.npy, DIR/targets.npy (-1: ignored); the
mean cross-entropy over counted targets, every parameter's gradient (DIR/grad_NAME.bin,
float64, HF's shapes), and DIR/config_train.json's AdamW steps taken as ztrain takes them
(global-norm clip, decay on matrices only): the loss before each, into DIR/reference.json.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import transformers


def make(out_dir, family, tied, vocab, seq):
    torch.manual_seed(3)
    common = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=16,
                  intermediate_size=24, vocab_size=vocab, max_position_embeddings=seq, rms_norm_eps=1e-6,
                  tie_word_embeddings=tied, initializer_range=0.3,
                  rope_parameters={"rope_type": "default", "rope_theta": 10.0})
    if family == "qwen2":
        config = transformers.Qwen2Config(**common)
    else:
        config = transformers.Qwen3Config(head_dim=6, **common)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("_proj.bias"):
                p.normal_(0.0, 0.3)
            elif name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
                p.normal_(1.0, 0.3)
    model.save_pretrained(out_dir)


def loss_of(model, tokens, targets):
    logits = model(tokens).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                             ignore_index=-1)


def reference(d):
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64,
                                                              attn_implementation="eager")
    tokens = torch.from_numpy(np.load(os.path.join(d, "tokens.npy")).astype(np.int64))
    targets = torch.from_numpy(np.load(os.path.join(d, "targets.npy")).astype(np.int64))
    train = json.load(open(os.path.join(d, "config_train.json")))
    params = dict(model.named_parameters())  # a tied lm_head is embed_tokens itself
    loss = loss_of(model, tokens, targets)
    loss.backward()
    for name, p in params.items():
        p.grad.detach().numpy().astype("<f8").tofile(os.path.join(d, "grad_" + name + ".bin"))
    curve = adamw_curve(model, params, tokens, targets, train)
    json.dump({"loss": loss.item(), "curve": curve}, open(os.path.join(d, "reference.json"), "w"))


def adamw_curve(model, params, tokens, targets, cfg):
    """cfg["steps"] AdamW steps as ztrain takes them; the loss before each step."""
    b1, b2, eps, lr, wd, clip = (cfg[k] for k in ("beta1", "beta2", "eps", "lr", "weight_decay", "grad_clip"))
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    curve = []
    for t in range(1, cfg["steps"] + 1):
        model.zero_grad()
        loss = loss_of(model, tokens, targets)
        loss.backward()
        curve.append(loss.item())
        norm = math.sqrt(sum(float((p.grad * p.grad).sum()) for p in params.values()))
        scale = clip / norm if clip > 0 and norm > clip else 1.0
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        with torch.no_grad():
            for n, p in params.items():
                g = p.grad * scale
                m[n] = b1 * m[n] + (1 - b1) * g
                v[n] = b2 * v[n] + (1 - b2) * g * g
                decay = wd if p.ndim == 2 else 0.0  # ztrain decays matrices and embeddings only
                p -= lr * ((m[n] / bc1) / (torch.sqrt(v[n] / bc2) + eps) + decay * p)
    return curve


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2], sys.argv[3] == "tied", int(sys.argv[4]), int(sys.argv[5]))
    reference(sys.argv[1])
