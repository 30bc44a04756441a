"""ztrain's checkpoint and export files, read by h5py and Hugging Face's safetensors.

    python test_checkpoint_files.py BIN_DIR SOURCE_DIR

A tiny GPT-2 trains 4 steps at np 2 under ZeRO-2 (two shard files), then:
  - h5py reads meta.h5's manifest and every shard it lists: each file has the listed size,
    and holds exactly the listed units' master / adam_m / adam_v ranges, which tile each
    unit from element 0;
  - zt-consolidate's .h5 holds every tensor of the manifest, equal element for element to the
    shards' master weights at the tensor's unit and offset (the vocabulary's padding rows
    dropped);
  - safetensors.safe_open reads zt-consolidate's .safetensors: metadata "format" = "pt" (what
    transformers requires), every tensor equal to the .h5's (or its transpose, for the
    matrices Hugging Face's GPT-2 stores in Conv1D layout); the --dtype bf16 file has the
    same names and shapes, each BF16;
  - zt-consolidate --output DIR/ --max-shard-size 10KB: the shard files and
    model.safetensors.index.json are those huggingface_hub's split_state_dict_into_shards_factory
    (what save_pretrained calls) makes of the same tensors in the same order, the index laid out as
    save_pretrained writes it, and safe_open reads every shard: metadata "format" = "pt", each
    tensor equal to the single file's.
Exit 0: all equal; 1: a difference, named; 77: skipped (a package missing, unless
ZT_REQUIRE_INTEROP=1).
"""
import json
import os
import random
import subprocess
import sys
import tempfile

from interop_common import require

h5py, np, safetensors = require("h5py", "numpy", "safetensors")
safe_open = safetensors.safe_open

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
    return ok


def train(bin_dir, src_dir, work):
    """A 4-step run at np 2 (ZeRO-2), its checkpoint's step folder."""
    rng = random.Random(5)
    words = ["the", "model", "trains", "on", "text", "and", "writes", "shards", "of", "state", "."]
    with open(os.path.join(work, "corpus.txt"), "w") as f:
        f.write(" ".join(rng.choice(words) for _ in range(20000)))
    run = lambda cmd: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    run([os.path.join(bin_dir, "zt-prepare"), "--input", os.path.join(work, "corpus.txt"), "--output",
         os.path.join(work, "data"), "--val-fraction", "0"])
    env_mpi = ["mpiexec", "--oversubscribe", "--bind-to", "none", "-np", "2"]
    run(env_mpi + [os.path.join(bin_dir, "ztrain"), "--config", os.path.join(src_dir, "inputs", "tiny.ini"),
                   "--data.train=" + os.path.join(work, "data", "train_*.bin"), "--run.dir=" + os.path.join(work, "run"),
                   "--model.n_layer=2", "--train.max_steps=4", "--train.threads=1", "--train.sample_tokens=0",
                   "--parallel.zero_stage=2", "--checkpoint.resume=never"])
    return os.path.join(work, "run", "checkpoints", "step_00000004")


def read_manifest(step_dir):
    with h5py.File(os.path.join(step_dir, "meta.h5"), "r") as h:
        return json.loads(bytes(h["meta_json"][:]).decode())


def masters_from_shards(step_dir, meta):
    """Every unit's master weights, assembled from the shard files the manifest lists."""
    pieces = {u: [] for u in range(len(meta["units"]))}
    for shard in meta["shards"]:
        path = os.path.join(step_dir, shard["file"])
        check(os.path.getsize(path) == shard["bytes"], f"{shard['file']}: {os.path.getsize(path)} bytes, "
              f"the manifest says {shard['bytes']}")
        listed = set()
        with h5py.File(path, "r") as h:
            for r in shard["units"]:
                n = r["end"] - r["begin"]
                for kind in ("master", "adam_m", "adam_v"):
                    name = "unit_%05d/%s" % (r["unit"], kind)
                    listed.add(name)
                    check(name in h and h[name].shape == (n,), f"{shard['file']}: {name} missing or not {n} long")
                pieces[r["unit"]].append((r["begin"], h["unit_%05d/master" % r["unit"]][:]))
            held = []
            h.visititems(lambda name, obj: held.append(name) if isinstance(obj, h5py.Dataset) else None)
            check(set(held) == listed, f"{shard['file']}: datasets {sorted(set(held) ^ listed)} not as listed")
    masters = []
    for u, numel in enumerate(meta["units"]):
        parts = sorted(pieces[u], key=lambda p: p[0])
        at = 0
        for begin, data in parts:
            check(begin == at, f"unit {u}: a shard range starts at {begin}, expected {at}")
            at = begin + len(data)
        check(at >= numel, f"unit {u}: the shards hold {at} of its {numel} elements")
        masters.append(np.concatenate([d for _, d in parts]) if parts else np.zeros(0, np.float32))
    return masters


def check_h5(path, meta, masters):
    tensors = {}
    with h5py.File(path, "r") as h:
        for t in meta["tensors"]:
            shape = tuple(t["shape"])
            n = int(np.prod(shape))
            want = masters[t["unit"]][t["offset"]:t["offset"] + n].reshape(shape)
            got = h[t["name"]][:] if t["name"] in h else None
            # The export drops the vocabulary's padding rows (padded_vocab -> vocab_size).
            if got is not None and shape[0] == meta["model"]["padded_vocab"] and got.shape[1:] == shape[1:]:
                vocab = meta["model"]["vocab_size"]
                check(got.shape[0] == vocab, f"{path}: {t['name']} has {got.shape[0]} rows, not vocab_size {vocab}")
                want, shape = want[:vocab], (vocab,) + shape[1:]
            if check(got is not None and got.shape == shape, f"{path}: {t['name']} missing or not {shape}"):
                check(np.array_equal(got, want), f"{path}: {t['name']} differs from the shards' master weights "
                      f"(max |diff| {np.max(np.abs(got - want))})")
                tensors[t["name"]] = got
    return tensors


def check_safetensors(path, bf16_path, tensors):
    prefix = "transformer."
    with safe_open(path, framework="numpy") as s:
        check(s.metadata().get("format") == "pt", f"{path}: metadata format {s.metadata().get('format')!r}, not 'pt'")
        for key in s.keys():
            name = key[len(prefix):] if key.startswith(prefix) else key
            if not check(name in tensors, f"{path}: {key} is no tensor of the checkpoint"):
                continue
            got, want = s.get_tensor(key), tensors[name]
            check(np.array_equal(got, want) or (got.ndim == 2 and np.array_equal(got, want.T)),
                  f"{path}: {key} differs from the .h5's {name}")
        shapes = {key: s.get_slice(key).get_shape() for key in s.keys()}
    with safe_open(bf16_path, framework="numpy") as s:
        check(s.metadata().get("format") == "pt", f"{bf16_path}: metadata format is not 'pt'")
        check(set(s.keys()) == set(shapes), f"{bf16_path}: names differ from the fp32 file's")
        for key in s.keys():
            sl = s.get_slice(key)
            check(sl.get_dtype() == "BF16" and sl.get_shape() == shapes.get(key),
                  f"{bf16_path}: {key} is {sl.get_dtype()} {sl.get_shape()}, expected BF16 {shapes.get(key)}")
    return len(shapes)


def check_sharded(consolidate, step_dir, work, single_path):
    """zt-consolidate --max-shard-size against huggingface_hub's split and safe_open; the shard count."""
    out = os.path.join(work, "sharded")
    limit = "10KB"
    subprocess.run([consolidate, step_dir, "--output", out + "/", "--max-shard-size", limit], check=True,
                   stdout=subprocess.DEVNULL)
    with open(single_path, "rb") as f:  # the single file's header, in its tensors' order
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    sizes = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}
    index_path = os.path.join(out, "model.safetensors.index.json")
    with open(index_path) as f:
        text = f.read()
    index = json.loads(text)
    check(text == json.dumps(index, indent=2, sort_keys=True) + "\n",
          f"{index_path}: not laid out as save_pretrained writes it (json.dumps(indent=2, sort_keys=True))")
    check(index["metadata"].get("total_size") == sum(sizes.values()),
          f"{index_path}: metadata.total_size {index['metadata'].get('total_size')}, the tensors hold {sum(sizes.values())}")
    try:
        from huggingface_hub.serialization import split_state_dict_into_shards_factory
        split = split_state_dict_into_shards_factory(sizes, get_storage_size=lambda n: n, max_shard_size=limit,
                                                     filename_pattern="model{suffix}.safetensors")
        check(index["weight_map"] == split.tensor_to_filename,
              f"{index_path}: weight_map differs from huggingface_hub's split at {limit}: "
              f"{sorted(set(index['weight_map'].items()) ^ set(split.tensor_to_filename.items()))}")
    except ImportError:
        check(os.environ.get("ZT_REQUIRE_INTEROP") != "1", "the Python package 'huggingface_hub' is missing")
        print("interop: note: huggingface_hub missing, the split is not judged against it")
    files = sorted(set(index["weight_map"].values()))
    check(sorted(f for f in os.listdir(out) if f.endswith(".safetensors")) == files,
          f"{out}: the weight files are not those the index names")
    with safe_open(single_path, framework="numpy") as single:
        for name in files:
            with safe_open(os.path.join(out, name), framework="numpy") as s:
                check(s.metadata().get("format") == "pt", f"{name}: metadata format is not 'pt'")
                check(sorted(s.keys()) == sorted(k for k, v in index["weight_map"].items() if v == name),
                      f"{name}: holds {sorted(s.keys())}, not what the index maps to it")
                for key in s.keys():
                    check(np.array_equal(s.get_tensor(key), single.get_tensor(key)),
                          f"{name}: {key} differs from the single file's")
    return len(files)


def main(bin_dir, src_dir):
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    with tempfile.TemporaryDirectory(prefix="zt-interop-") as work:
        step_dir = train(bin_dir, src_dir, work)
        meta = read_manifest(step_dir)
        masters = masters_from_shards(step_dir, meta)
        consolidate = os.path.join(bin_dir, "zt-consolidate")
        out = {ext: os.path.join(work, "model" + ext) for ext in (".h5", ".safetensors", "-bf16.safetensors")}
        for ext, path in out.items():
            extra = ["--dtype", "bf16"] if ext.startswith("-bf16") else []
            subprocess.run([consolidate, step_dir, "--output", path] + extra, check=True, stdout=subprocess.DEVNULL)
        tensors = check_h5(out[".h5"], meta, masters)
        n = check_safetensors(out[".safetensors"], out["-bf16.safetensors"], tensors)
        n_sharded = check_sharded(consolidate, step_dir, work, out[".safetensors"])
    for what in FAILURES:
        print("FAILED: " + what)
    if not FAILURES:
        print(f"{len(meta['shards'])} shards and {len(tensors)} tensors (h5py {h5py.__version__}), {n} safetensors "
              f"entries in fp32 and bf16 (safetensors {__import__('safetensors').__version__}), {n_sharded} "
              f"safetensors shards and their index: as ztrain wrote them")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
