#!/usr/bin/python3
"""Writes a synthetic llm.c token shard: make_shard.py PATH N_TOKENS VOCAB (uniform random, seed 0)."""
import sys

import numpy as np

path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
toks = rng.integers(0, vocab, size=n, dtype=np.uint16 if vocab <= 65536 else np.uint32)
hdr = np.zeros(256, dtype=np.int32)
hdr[0], hdr[1], hdr[2] = 20240520, 1 if vocab <= 65536 else 2, n
with open(path, "wb") as f:
    f.write(hdr.tobytes())
    f.write(toks.tobytes())
