"""Hugging Face PEFT's LoRA in float64: the loss and adapter gradients of one batch.

    python lora_peft_reference.py DIR

DIR/case.json (written by tests/unit/test_lora.cpp) gives the family and its dimensions, the
LoRA settings and, per tensor, an .npy file of its values under ztrain's name and orientation
(matrices (out, in); the token embedding cut to vocab_size rows). This builds the family's
transformers model (GPT2LMHeadModel or LlamaForCausalLM) with those base weights, wraps it
with peft.get_peft_model(LoraConfig(r, lora_alpha, target_modules, lora_dropout = 0)), sets
the adapters' A and B, and in float64 computes the summed cross-entropy of DIR/inputs.npy
against DIR/targets.npy (-1: ignored) and its gradient. Writes DIR/reference.json: the mean
loss and, per adapter tensor under ztrain's name, its gradient (of the summed loss) as a
flat list.
Exit 77 when torch, transformers or peft is missing.
"""
import json
import os
import sys

try:
    import numpy as np
    import peft
    import torch
    import transformers
except ImportError as e:
    print(f"lora_peft_reference: SKIPPED: {e}")
    sys.exit(77)


def hf_model(case):
    t = transformers
    m = case["model"]
    if case["arch"] == "gpt2":
        config = t.GPT2Config(n_layer=m["n_layer"], n_head=m["n_head"], n_embd=m["n_embd"],
                              n_positions=m["seq_len"], vocab_size=m["vocab_size"], activation_function="gelu_new",
                              layer_norm_epsilon=1e-5, attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0,
                              bos_token_id=0, eos_token_id=0)
        return t.GPT2LMHeadModel(config), "transformer."
    config = t.LlamaConfig(num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
                           num_key_value_heads=m["n_kv_head"], hidden_size=m["n_embd"],
                           intermediate_size=m["ffn_dim"], vocab_size=m["vocab_size"],
                           max_position_embeddings=m["seq_len"], rms_norm_eps=m["norm_eps"],
                           rope_parameters={"rope_type": "default", "rope_theta": m["rope_theta"]},
                           tie_word_embeddings=m["tie_embeddings"],
                           attention_bias=False, mlp_bias=False)
    return t.LlamaForCausalLM(config), ""


def main(directory):
    with open(os.path.join(directory, "case.json")) as f:
        case = json.load(f)
    model, prefix = hf_model(case)
    model = model.double().eval()
    tensors = {name: torch.from_numpy(np.load(os.path.join(directory, file)).astype(np.float64))
               for name, file in case["tensors"].items()}
    # The base, before peft wraps it: GPT-2's Conv1D matrices are stored [in, out].
    base = {}
    for name, value in tensors.items():
        if ".lora_" in name:
            continue
        conv1d = case["arch"] == "gpt2" and value.dim() == 2 and name.startswith("h.")
        base[prefix + name] = value.t().contiguous() if conv1d else value
    missing, unexpected = model.load_state_dict(base, strict=False)
    missing = [k for k in missing if k != "lm_head.weight"]  # tied to the token embedding
    assert not missing and not unexpected, (missing, unexpected)
    lora = case["lora"]
    config = peft.LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"], target_modules=lora["targets"],
                             lora_dropout=0.0, fan_in_fan_out=case["arch"] == "gpt2")
    wrapped = peft.get_peft_model(model, config).double()
    params = dict(wrapped.named_parameters())
    adapters = {}
    for name, value in tensors.items():
        if ".lora_" not in name:
            continue
        # ztrain's h.0.attn.c_attn.lora_A.weight is peft's ...c_attn.lora_A.default.weight.
        peft_name = "base_model.model." + prefix + name.replace(".weight", ".default.weight")
        with torch.no_grad():
            params[peft_name].copy_(value)
        adapters[name] = params[peft_name]
    assert len(adapters) == sum(1 for p in params if ".lora_" in p), "adapters ztrain and peft disagree on"
    inputs = torch.from_numpy(np.load(os.path.join(directory, "inputs.npy")).astype(np.int64))
    targets = torch.from_numpy(np.load(os.path.join(directory, "targets.npy")).astype(np.int64))
    logits = wrapped(input_ids=inputs).logits
    summed = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                               ignore_index=-1, reduction="sum")
    summed.backward()
    counted = int((targets >= 0).sum())
    out = {"loss": summed.item() / counted,
           "grads": {name: p.grad.reshape(-1).tolist() for name, p in adapters.items()}}
    with open(os.path.join(directory, "reference.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1])
