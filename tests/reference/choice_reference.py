#!/usr/bin/env python3
"""Float64 reference of multiple-choice scoring (docs/evaluation.md) on the Llama reference
model of llama_reference.py (its forward, written from Hugging Face's modeling_llama.py).

    choice_reference.py --hf HF_DIR DIR

HF_DIR is the tiny model as zt-consolidate exports it (config.json, model.safetensors, read by
llama_reference.load_hf). DIR holds what test_choice_reference.cpp wrote: config.json with
"rows": [{"example", "ending", "chars"}] and "labels": [label per example], tokens.npy and
targets.npy (R, T): one row per candidate ending, padded at
the end, targets -1 except where a position predicts an ending token. Each row is run alone
(no padding), so padding in ztrain's batches is checked too. Writes DIR/choice_reference.json:
{"loglik": [per row], "acc", "acc_norm", "acc_token": counts from this script's own argmax}.
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference  # noqa: E402


def main():
    assert sys.argv[1] == "--hf", __doc__
    cfg, weights = llama_reference.load_hf(sys.argv[2])
    d = sys.argv[3]
    model = llama_reference.Llama(cfg, weights)
    tokens = np.load(os.path.join(d, "tokens.npy")).astype(np.int64)
    targets = np.load(os.path.join(d, "targets.npy")).astype(np.int64)
    task = json.load(open(os.path.join(d, "config.json")))
    loglik = []
    for r in range(tokens.shape[0]):
        valid = targets[r] >= 0
        length = int(np.nonzero(valid)[0].max()) + 1  # the row without its padding
        loss, _ = model.forward(tokens[r:r + 1, :length], targets[r:r + 1, :length], False)
        loglik.append(-loss * int(valid.sum()))
    examples = {}
    for r, row in enumerate(task["rows"]):
        tok = int((targets[r] >= 0).sum())
        examples.setdefault(row["example"], []).append((loglik[r], tok, row["chars"]))
    counts = {"acc": 0, "acc_norm": 0, "acc_token": 0}
    for e, ends in examples.items():
        label = task["labels"][e]
        counts["acc"] += int(np.argmax([ll for ll, _, _ in ends]) == label)
        counts["acc_norm"] += int(np.argmax([ll / ch for ll, _, ch in ends]) == label)
        counts["acc_token"] += int(np.argmax([ll / t for ll, t, _ in ends]) == label)
    json.dump(dict(loglik=loglik, **counts), open(os.path.join(d, "choice_reference.json"), "w"))


if __name__ == "__main__":
    main()
