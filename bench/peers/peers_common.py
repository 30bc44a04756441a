"""What the peer scripts share: the model shapes, ztrain's token windows read from its
shards in ztrain's order, the learning-rate schedule written as ztrain computes it, and the
peak resident memory of this process.

The window order is ztrain's BatchSampler (src/data/token_data.cpp) and micro_batch_first
(src/train/stage_training.cpp) transcribed: the shards of the glob in sorted order, windows
of seq_len + 1 tokens at stride seq_len that never cross a shard, and global sample g is
window perm(g // n)[g % n] of the (seed, epoch) Fisher-Yates permutation drawn from
SplitMix64 counters (include/ztrain/core/random.hpp). Step s (from 0) starts at sample
s * global_batch; data rank r's micro-batch a starts (r * grad_accum + a) * micro_batch
further on. So a peer fed from here sees exactly the windows ztrain trains on.
"""
import glob
import math
import struct

# numpy is imported where used: the driver (run.py, standard library only) reads SHAPES.

# name: (n_layer, n_head, n_embd, seq_len, micro_batch)
SHAPES = {
    "124m": (12, 12, 768, 256, 4),   # GPT-2 124M, the shape for pairs 1-4
    "small": (6, 6, 384, 256, 4),    # the "same curve" shape
    "tiny": (2, 4, 256, 256, 4),     # the machinery on a loaded 2-core machine
}
GPT2_VOCAB = 50257
# Pair 7 (LoRA): Llama shapes with GPT-2's tokenizer (the corpus's shards), tied embeddings.
# name: dict of LlamaConfig-like fields; smollm2_360m is SmolLM2-360M's shape (vocab 49152
# there, 50257 here).
LLAMA_SHAPES = {
    "smollm2_360m": dict(n_layer=32, n_head=15, n_kv_head=5, n_embd=960, ffn=2560, seq_len=256, micro_batch=2,
                         rope_theta=100000.0),
    # pair 5's second shape (issue 50: "GPT-2 124M and SmolLM2-135M shape")
    "smollm2_135m": dict(n_layer=30, n_head=9, n_kv_head=3, n_embd=576, ffn=1536, seq_len=256, micro_batch=2,
                         rope_theta=100000.0),
    "llama_tiny": dict(n_layer=2, n_head=4, n_kv_head=2, n_embd=128, ffn=352, seq_len=64, micro_batch=2,
                       rope_theta=10000.0),
}
LLAMA_LORA_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
# Pair 8 (issue 52): the Qwen decks' shapes (inputs/qwen2_5_0_5b.ini, qwen3_0_6b.ini) at a
# bench's seq_len; their own 151936-token vocabulary (GPT-2's ids are a subset).
QWEN_SHAPES = {
    "qwen2_5_0_5b": dict(arch="qwen2", n_layer=24, n_head=14, n_kv_head=2, n_embd=896, ffn=4864, seq_len=256,
                         micro_batch=2, vocab=151936),
    "qwen3_0_6b": dict(arch="qwen3", n_layer=28, n_head=16, n_kv_head=8, n_embd=1024, ffn=3072, head_dim=128,
                       seq_len=256, micro_batch=2, vocab=151936),
    "qwen2_tiny": dict(arch="qwen2", n_layer=2, n_head=4, n_kv_head=2, n_embd=128, ffn=352, seq_len=64,
                       micro_batch=2, vocab=151936),
    "qwen3_tiny": dict(arch="qwen3", n_layer=2, n_head=4, n_kv_head=2, n_embd=128, ffn=352, head_dim=64,
                       seq_len=64, micro_batch=2, vocab=151936),
}

_M64 = (1 << 64) - 1
_STREAM_DATA = 2


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def random_bits(seed, stream, index):
    return mix64(mix64(mix64(seed) ^ stream) ^ index)


def epoch_permutation(seed, epoch, n):
    perm = list(range(n))
    epoch_seed = seed ^ mix64(epoch ^ 0x5EED0FE90C4)
    for i in range(n - 1, 0, -1):
        r = random_bits(epoch_seed, _STREAM_DATA, i)
        j = (r * (i + 1)) >> 64
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def read_shard(path):
    import numpy as np
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        magic, version, count = header[0], header[1], header[2]
        if magic != 20240520 or version not in (1, 2):
            raise SystemExit(f"{path}: not a ztrain token shard (magic {magic}, version {version})")
        dtype = np.uint16 if version == 1 else np.uint32
        tokens = np.frombuffer(f.read(), dtype=dtype)
    if tokens.size != count:
        raise SystemExit(f"{path}: header says {count} tokens, file holds {tokens.size}")
    return tokens.astype(np.int64)


class ZtrainWindows:
    """The windows of the shards `pattern` in ztrain's order: shuffled by `seed` (training),
    or in file order (validation: ztrain's val sampler does not shuffle)."""

    def __init__(self, pattern, seq_len, seed, shuffle=True):
        files = sorted(glob.glob(pattern))
        if not files:
            raise SystemExit(f"{pattern}: no shard matches")
        self.T = seq_len
        self.seed = seed
        self.shuffle = shuffle
        parts, self.starts, base = [], [], 0
        for path in files:
            tokens = read_shard(path)
            self.starts.extend(base + s for s in range(0, tokens.size - seq_len, seq_len))
            parts.append(tokens)
            base += tokens.size
        import numpy as np
        self.tokens = np.concatenate(parts)
        self.n = len(self.starts)
        self._perm_epoch, self._perm = None, None

    def window_of(self, g):
        epoch, i = divmod(g, self.n)
        if not self.shuffle:
            return i
        if epoch != self._perm_epoch:
            self._perm, self._perm_epoch = epoch_permutation(self.seed, epoch, self.n), epoch
        return self._perm[i]

    def batch(self, first, count):
        """Inputs and targets [count, T] of global samples first .. first + count - 1."""
        import numpy as np
        rows = [self.tokens[self.starts[self.window_of(first + j)]:][: self.T + 1] for j in range(count)]
        w = np.stack(rows)
        return np.ascontiguousarray(w[:, :-1]), np.ascontiguousarray(w[:, 1:])

    def micro_batch(self, step, rank, a, micro_batch, grad_accum, world):
        first = step * micro_batch * grad_accum * world + (rank * grad_accum + a) * micro_batch
        return self.batch(first, micro_batch)


def val_batch(data, rank, e, micro_batch, eval_batches):
    """Validation micro-batch e of data rank `rank`, as ztrain's val_batch_first."""
    return data.batch(rank * eval_batches * micro_batch + e * micro_batch, micro_batch)


def ztrain_lr_factor(step, warmup, max_steps, schedule, lr, lr_min):
    """ztrain's learning_rate(cfg, step) / lr (src/optim/optimizer.cpp). Unlike
    transformers' get_linear_schedule_with_warmup (lr * s / warmup, so 0 at step 0), the
    warmup gives step s the rate lr * (s + 1) / warmup."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, max_steps - warmup)
    progress = min(max((step - warmup) / span, 0.0), 1.0)
    if schedule == "linear":
        return (lr - (lr - lr_min) * progress) / lr
    return (lr_min + 0.5 * (lr - lr_min) * (1.0 + math.cos(math.pi * progress))) / lr


def peak_rss_kib():
    """VmHWM of this process (KiB): its peak resident set."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1
