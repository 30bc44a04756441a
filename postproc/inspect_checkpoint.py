#!/usr/bin/python3
"""Describe a ztrain checkpoint from Python (h5py): step, world size, stage, dtype, the tensor
manifest and, per shard file, the unit ranges it holds with min/max/mean of the master weights.

Usage: /usr/bin/python3 postproc/inspect_checkpoint.py run/demo/checkpoints [--tensors]
The directory may be a checkpoint directory (its `latest` is used) or a step_N directory.
For a one-file export use zt-consolidate (C++, build/bin/zt-consolidate; source
src/app/consolidate_main.cpp), which verifies every shard's hash and streams the tensors.
Needs python3-h5py and python3-numpy (Debian).
Exit status: 0 described, 2 not a checkpoint or a damaged one (a missing, truncated or
unreadable file: the message names it and the newest complete step beside it).
"""
import argparse
import json
import os
import sys


class Damaged(Exception):
    """A checkpoint file that is missing, truncated or unreadable."""


def fail(message):
    print(f"inspect_checkpoint.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def step_dir(path):
    if os.path.exists(os.path.join(path, "meta.h5")):
        return path
    latest = os.path.join(path, "latest")
    if not os.path.exists(latest):
        fail(f"{path}: neither a step directory (no meta.h5) nor a checkpoint directory (no latest)")
    name = open(latest).read().strip()
    if not name or "/" in name or name in (".", ".."):
        fail(f"{latest}: names '{name}', not a step directory inside {path}")
    return os.path.join(path, name)


def shards_complete(d):
    """Whether every shard meta.h5 names in step directory d has its recorded size."""
    import h5py
    try:
        with h5py.File(os.path.join(d, "meta.h5"), "r") as f:
            meta = json.loads(bytes(f["meta_json"][()]).decode("utf-8"))
        return all(os.path.exists(os.path.join(d, s["file"])) and
                   os.path.getsize(os.path.join(d, s["file"])) == s["bytes"] for s in meta["shards"])
    except (OSError, KeyError, ValueError):
        return False


def newest_complete(d):
    """The newest step directory beside d whose shards all have their recorded sizes."""
    parent = os.path.dirname(os.path.normpath(d)) or "."
    steps = sorted((n for n in os.listdir(parent) if n.startswith("step_") and "." not in n), reverse=True)
    for n in steps:
        if shards_complete(os.path.join(parent, n)):
            return os.path.join(parent, n)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint")
    ap.add_argument("--tensors", action="store_true", help="list every tensor of the manifest")
    args = ap.parse_args()
    try:
        import h5py  # noqa: F401 (checked here, used below)
        import numpy  # noqa: F401
    except ImportError as e:
        fail(f"needs h5py and numpy ({e}): apt-get install python3-h5py python3-numpy (Debian/Ubuntu), "
             "or pip install h5py numpy")

    d = step_dir(args.checkpoint)
    try:
        describe(d, args.tensors)
    except (Damaged, OSError, KeyError, ValueError) as e:
        good = newest_complete(d)
        other = good and os.path.normpath(good) != os.path.normpath(d)
        hint = f"; the newest complete checkpoint there is {good}" if other else ""
        fail(f"{d}: damaged checkpoint: {e}{hint}")


def describe(d, tensors):
    import h5py
    import numpy as np

    with h5py.File(os.path.join(d, "meta.h5"), "r") as f:
        meta = json.loads(bytes(f["meta_json"][()]).decode("utf-8"))
    m = meta.get("model", {})
    print(f"{d}: step {meta['step']} ({meta['applied_steps']} applied), {meta.get('tokens_seen', 0)} tokens seen")
    print(f"  written by {meta['world_size']} rank(s), ZeRO stage {meta['zero_stage']}, dtype {meta['dtype']}, "
          f"loss scale {meta['scaler']['scale']}")
    if m:
        print(f"  model: {m['n_layer']} layers, {m['n_head']} heads, {m['n_embd']} wide, seq {m['seq_len']}, "
              f"vocab {m['vocab_size']} (padded {m['padded_vocab']})")
    print(f"  {len(meta['tensors'])} tensors in {len(meta['units'])} units, {sum(meta['units'])} elements")
    inputs = meta.get("inputs")  # the data fingerprint (absent in older checkpoints)
    if inputs:
        for key in ("train", "val"):
            files = inputs.get(key, [])
            if files:
                print(f"  data.{key}: {len(files)} file(s), {sum(f['bytes'] for f in files)} bytes "
                      f"({', '.join(f['file'] for f in files[:3])}{', ...' if len(files) > 3 else ''})")
        if inputs.get("tokenizer"):
            print(f"  tokenizer: {inputs['tokenizer']['file']}, {inputs['tokenizer']['bytes']} bytes")
    if tensors:
        for t in meta["tensors"]:
            print(f"    {t['name']:32s} unit {t['unit']:3d} offset {t['offset']:10d} shape {t['shape']}")
    for shard in meta["shards"]:
        path = os.path.join(d, shard["file"])
        size = os.path.getsize(path) if os.path.exists(path) else None
        state = "missing" if size is None else ("ok size" if size == shard["bytes"] else f"SIZE {size} != {shard['bytes']}")
        print(f"  {shard['file']}: rank {shard['rank']}, {shard['bytes']} bytes ({state})")
        if size != shard["bytes"]:
            raise Damaged(f"{path}: " + ("missing shard file" if size is None else
                                         f"{size} bytes, the checkpoint recorded {shard['bytes']} (truncated?)"))
        with h5py.File(path, "r") as f:
            for r in shard["units"]:
                g = f[f"unit_{r['unit']:05d}"]
                w = np.asarray(g["master"])
                print(f"    unit {r['unit']:3d} [{r['begin']}, {r['end']}): master min {w.min():+.4f} "
                      f"max {w.max():+.4f} mean {w.mean():+.5f}")


if __name__ == "__main__":
    main()
