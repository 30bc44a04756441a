// The key table: every key of a deck, where its value lives in Config and its one line of
// help; looking keys up, and suggesting the nearest one for a key that does not exist.
#include "key_table.hpp"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "ztrain/core/error.hpp"

namespace zt {
namespace config_detail {
namespace {

// A capture-less lambda converts to the plain function pointer KeyDef wants.
#define ZT_KEY(name, member, doc) \
    KeyDef { name, [](Config& c) -> FieldRef { return &c.member; }, doc }

const KeyDef kKeys[] = {
    ZT_KEY("backend", backend, "compute backend: cpu | cuda | auto"),

    ZT_KEY("model.arch", model.arch, "model family, by name: gpt2, llama, ... (README: model families)"),
    ZT_KEY("model.n_layer", model.n_layer, "number of transformer blocks"),
    ZT_KEY("model.n_head", model.n_head, "attention heads per block (must divide n_embd)"),
    ZT_KEY("model.n_embd", model.n_embd, "embedding / residual width"),
    ZT_KEY("model.seq_len", model.seq_len,
           "maximum sequence length (gpt2: one learned position embedding each; llama: RoPE, none learned)"),
    ZT_KEY("model.vocab_size", model.vocab_size, "vocabulary size (tokens the data may contain)"),
    ZT_KEY("model.vocab_pad_to", model.vocab_pad_to, "embedding rows are padded to a multiple of this"),
    ZT_KEY("model.init_from", model.init_from,
           "optional weights to start from: .h5, .safetensors or a Hugging Face model directory"),
    ZT_KEY("model.from_hf", model.from_hf,
           "Hugging Face model directory: its config.json sets the model keys and init_from (explicit keys "
           "must agree; model.seq_len may be shorter)"),
    ZT_KEY("model.n_kv_head", model.n_kv_head,
           "llama: key/value heads of grouped-query attention, dividing n_head (0: n_head)"),
    ZT_KEY("model.ffn_dim", model.ffn_dim, "llama: SwiGLU hidden width (HF intermediate_size; required)"),
    ZT_KEY("model.rope_theta", model.rope_theta, "llama: rotary embedding base (HF rope_theta)"),
    ZT_KEY("model.rope_scaling", model.rope_scaling, "llama: rotary frequency scaling: none | llama3"),
    ZT_KEY("model.rope_factor", model.rope_factor, "llama, rope_scaling = llama3: factor"),
    ZT_KEY("model.rope_low_freq_factor", model.rope_low_freq_factor, "llama, rope_scaling = llama3: low_freq_factor"),
    ZT_KEY("model.rope_high_freq_factor", model.rope_high_freq_factor,
           "llama, rope_scaling = llama3: high_freq_factor"),
    ZT_KEY("model.rope_original_context", model.rope_original_context,
           "llama, rope_scaling = llama3: original_max_position_embeddings"),
    ZT_KEY("model.norm_eps", model.norm_eps, "llama: RMSNorm epsilon (HF rms_norm_eps)"),
    ZT_KEY("model.tie_embeddings", model.tie_embeddings,
           "llama: LM head shares the token embedding (false: a separate lm_head.weight)"),
    ZT_KEY("model.sliding_window", model.sliding_window,
           "mistral: sliding-window attention, each token attending to the last this many positions, itself "
           "included (HF sliding_window; 0 = the whole causal context)"),
    ZT_KEY("model.head_dim", model.head_dim,
           "qwen2, qwen3: per-head width of q, k and v (HF head_dim; 0: n_embd / n_head)"),
    ZT_KEY("model.qkv_bias", model.qkv_bias, "qwen2: biases on the q, k and v projections (true for qwen2)"),
    ZT_KEY("model.qk_norm", model.qk_norm,
           "qwen3: RMSNorm over each head's q and k before rotary (HF q_norm, k_norm; true for qwen3)"),

    ZT_KEY("lora.rank", model.lora.rank,
           "LoRA rank r: low-rank adapters on lora.targets, the base weights frozen (0: off, full fine-tuning)"),
    ZT_KEY("lora.alpha", model.lora.alpha,
           "LoRA scale numerator: adapters add (alpha / rank) x B A x (PEFT's lora_alpha)"),
    ZT_KEY("lora.dropout", model.lora.dropout, "dropout on the adapters' input, in [0, 1)"),
    ZT_KEY("lora.targets", model.lora.targets,
           "products that get adapters, by the family's Hugging Face module names, comma-separated, matched as "
           "PEFT's target_modules (a name matches every module whose path ends in it: gpt2's c_proj is attention's "
           "and the MLP's, attn.c_proj one) | default: PEFT's default (llama: q_proj,v_proj; gpt2: c_attn) | empty: "
           "none"),
    ZT_KEY("lora.base_dtype", model.lora.base_dtype,
           "storage of the frozen base weights: fp32 | bf16 (empty: precision.dtype)"),

    ZT_KEY("data.train", data.train, "training token shards: file or glob, or a blend GLOB:W, GLOB:W, ... (required; see zt-prepare)"),
    ZT_KEY("data.val", data.val, "validation token shards: file or glob, or a blend GLOB:W, ... (empty: no evaluation)"),
    ZT_KEY("data.tokenizer", data.tokenizer, "tokenizer file (empty: tokenizer.json next to the train shards)"),
    ZT_KEY("data.on_change", data.on_change,
           "a resume whose training/validation data or tokenizer differ from the checkpoint's (names, sizes, "
           "headers, first and last MiB): note (print what changed, go on) | error (exit 2)"),

    ZT_KEY("data.packing", data.packing,
           "example shards: pack (whole examples into rows of seq_len, attention never crossing one) | pad (one "
           "example per row, each micro-batch as long as its longest); pretraining shards ignore it"),
    ZT_KEY("data.overlong", data.overlong,
           "example shards: an example longer than seq_len + 1 tokens: error (exit 2) | truncate | drop; "
           "pretraining shards ignore it"),

    ZT_KEY("train.micro_batch", train.micro_batch, "sequences per rank per micro-step"),
    ZT_KEY("train.grad_accum", train.grad_accum, "micro-steps accumulated per optimizer step"),
    ZT_KEY("train.global_batch", train.global_batch,
           "sequences per optimizer step over all data ranks; set, it derives train.grad_accum = global_batch / "
           "(micro_batch x data ranks) at any world size, so a resume on more or fewer ranks keeps the batch "
           "(0: micro_batch x grad_accum x data ranks)"),
    ZT_KEY("train.max_steps", train.max_steps, "optimizer steps to run"),
    ZT_KEY("train.epochs", train.epochs,
           "example shards: passes over the training examples instead of train.max_steps (0: use max_steps; "
           "giving both exits 2)"),
    ZT_KEY("train.lr", train.lr, "peak learning rate"),
    ZT_KEY("train.lr_min", train.lr_min, "final learning rate of the decay schedule"),
    ZT_KEY("train.warmup_steps", train.warmup_steps, "linear warmup steps"),
    ZT_KEY("train.schedule", train.schedule,
           "learning-rate decay: cosine | linear | constant | wsd (warmup-stable-decay: lr held, then decayed over "
           "the last train.decay_fraction of the steps)"),
    ZT_KEY("train.schedule_steps", train.schedule_steps,
           "steps the decay spans, then lr_min holds (0: train.max_steps)"),
    ZT_KEY("train.decay_fraction", train.decay_fraction,
           "schedule = wsd: the share of the steps after warmup that decay to lr_min, in (0, 1]"),
    ZT_KEY("train.decay_steps", train.decay_steps,
           "schedule = wsd: the steps that decay, the last ones before the schedule's end (0: train.decay_fraction); "
           "a cooldown of N steps from a stable-phase checkpoint: --train.max_steps=STEP+N --train.decay_steps=N"),
    ZT_KEY("train.decay_shape", train.decay_shape, "schedule = wsd: the decay's shape: linear | cosine | 1-sqrt"),
    ZT_KEY("train.weight_decay", train.weight_decay, "decoupled weight decay (AdamW's and Muon's)"),
    ZT_KEY("train.optimizer", train.optimizer,
           "adamw | muon (torch.optim.Muon on the blocks' matrices, AdamW on embeddings, head, norms, biases)"),
    ZT_KEY("train.muon_lr", train.muon_lr, "optimizer = muon: Muon's peak rate (0: train.lr), scheduled as lr"),
    ZT_KEY("train.muon_momentum", train.muon_momentum, "optimizer = muon: momentum, in [0, 1)"),
    ZT_KEY("train.muon_nesterov", train.muon_nesterov, "optimizer = muon: Nesterov momentum"),
    ZT_KEY("train.muon_ns_steps", train.muon_ns_steps, "optimizer = muon: Newton-Schulz iterations, 1 to 99"),
    ZT_KEY("train.muon_ns_dtype", train.muon_ns_dtype,
           "optimizer = muon: the Newton-Schulz products' operands, fp32 | bf16 (torch.optim.Muon's; accumulated "
           "in fp32)"),
    ZT_KEY("train.muon_adjust_lr", train.muon_adjust_lr,
           "optimizer = muon: the rate per matrix (out, in): match_rms_adamw (0.2 sqrt(max(out, in)): AdamW's lr "
           "carries over) | original (sqrt(max(1, out / in)): wants ~0.02)"),
    ZT_KEY("train.beta1", train.beta1, "AdamW first-moment decay, in [0, 1)"),
    ZT_KEY("train.beta2", train.beta2, "AdamW second-moment decay, in [0, 1)"),
    ZT_KEY("train.eps", train.eps, "AdamW epsilon"),
    ZT_KEY("train.grad_clip", train.grad_clip, "global gradient-norm clip (0 disables)"),
    ZT_KEY("train.seed", train.seed, "random seed (initialisation, data order, sampling)"),
    ZT_KEY("train.eval_every", train.eval_every, "steps between evaluations (0: only at the end)"),
    ZT_KEY("train.eval_batches", train.eval_batches, "micro-batches per evaluation"),
    ZT_KEY("train.sample_tokens", train.sample_tokens, "tokens sampled at each evaluation (0 disables)"),
    ZT_KEY("train.log_every", train.log_every, "steps between log lines"),
    ZT_KEY("train.threads", train.threads, "CPU threads per rank (0: cores / local ranks)"),
    ZT_KEY("train.recompute", train.recompute,
           "recompute activations in backward to save memory: false | attention (each block's (T x T) attention "
           "probabilities rebuilt from its q, k, v before its attention backward: about one attention forward more) "
           "| true (only each block's output kept; its whole forward runs again: about a third more compute)"),
    ZT_KEY("train.max_bad_steps", train.max_bad_steps,
           "consecutive steps with non-finite gradients (skipped) before a bf16, fp32 or static-scale fp16 "
           "run stops"),
    ZT_KEY("train.spike", train.spike,
           "a loss spike: off | rollback (restore the last in-memory snapshot in the process, skip the global "
           "batches since it and go on; exit 4 after train.spike_max_rollbacks)"),
    ZT_KEY("train.spike_factor", train.spike_factor,
           "train.spike = rollback: a loss above this factor x the median of the recent losses is a spike step "
           "(a non-finite loss always is)"),
    ZT_KEY("train.spike_patience", train.spike_patience,
           "train.spike = rollback: consecutive spike steps before the run rolls back"),
    ZT_KEY("train.spike_snapshot_every", train.spike_snapshot_every,
           "train.spike = rollback: steps between in-memory snapshots of the state (host copies of the owned "
           "master, m, v; independent of checkpoint.keep)"),
    ZT_KEY("train.spike_max_rollbacks", train.spike_max_rollbacks,
           "train.spike = rollback: rollbacks before the run ends with exit status 4"),

    ZT_KEY("parallel.zero_stage", parallel.zero_stage, "0 = DDP, 1/2/3 = ZeRO stage"),
    ZT_KEY("parallel.bucket_mb", parallel.bucket_mb,
           "DDP gradient all-reduce bucket size (MiB; fractions allowed) | 0: the memory plan's choice, an eighth "
           "of the gradients' wire bytes between 1 and 25 MiB"),
    ZT_KEY("parallel.shard_group", parallel.shard_group,
           "ranks that shard the model state together (ZeRO 1-3; groups replicate each other): node | 0 (all "
           "ranks) | N dividing the world"),
    ZT_KEY("parallel.tensor", parallel.tensor,
           "tensor parallelism: T consecutive ranks split every block's products, the embedding and the LM "
           "head (Megatron-style); T divides the world, the heads, the MLP width and the padded vocabulary (KV "
           "heads: a multiple or a divisor of T); ZeRO and parallel.shard_group then count the world / T "
           "data-parallel ranks"),
    ZT_KEY("parallel.sequence", parallel.sequence,
           "true: sequence parallelism (Megatron-style) over the tensor group: the norms and the residual "
           "stream hold seq_len / T rows per rank, the group's all-reduces become all-gathers and "
           "reduce-scatters of the same volume | false: every rank holds every row (needs parallel.tensor > 1 "
           "and seq_len a multiple of it)"),
    ZT_KEY("parallel.pipeline", parallel.pipeline,
           "pipeline parallelism: P stages of world / P consecutive ranks each run a run of the blocks (the "
           "embedding on the first, the head on the last) and pass activations point to point; P <= "
           "train.grad_accum (the micro-batches in flight) and divides the world with parallel.tensor"),
    ZT_KEY("parallel.schedule", parallel.schedule,
           "the pipeline's order of passes: 1f1b (at most P micro-batches' activations on the first stage) | "
           "interleaved (parallel.virtual_stages chunks per stage, bubble (P-1)/(v m); grad_accum a multiple "
           "of P) | zb (zero-bubble ZB-H1: backward split into input- and weight-gradient passes, the latter in "
           "the bubble; no recompute)"),
    ZT_KEY("parallel.virtual_stages", parallel.virtual_stages,
           "chunks per stage under parallel.schedule = interleaved (>= 2) | 0: 2 there, 1 elsewhere"),
    ZT_KEY("parallel.pipeline_layers", parallel.pipeline_layers,
           "blocks per virtual stage in pipeline order, e.g. 3,4,4,3 (they sum to model.n_layer) | empty: "
           "balanced by the forward FLOPs of each block, the LM head counted on the last stage"),
    ZT_KEY("parallel.check_every", parallel.check_every,
           "steps between state checks for silent data corruption: replicas compare hashes of their master, "
           "AdamW state and parameters, unreplicated shards verify checksums taken after the optimizer; a "
           "mismatch ends the job with exit status 3 (0: off)"),
    ZT_KEY("parallel.timeout_s", parallel.timeout_s,
           "seconds one collective may wait before the job is aborted with a message (0: never)"),
    ZT_KEY("parallel.comm_thread", parallel.comm_thread,
           "true: on the CPU a communication thread per rank runs the started collectives (ZeRO gathers and "
           "reduce-scatters, DDP buckets) while the training thread computes | false: they run when waited for"),
    ZT_KEY("parallel.overlap_depth", parallel.overlap_depth,
           "how far communication runs ahead of compute: units gathered ahead of the one in use (ZeRO-3) and "
           "reductions in flight (depth + 1); each step deeper holds one more unit-sized buffer of each | 0: the "
           "memory plan's choice (2 when it fits, else 1)"),

    ZT_KEY("precision.dtype", precision.dtype,
           "working dtype of parameters, activations and gradients: fp32 | bf16 | fp16 (master weights "
           "and AdamW state stay fp32)"),
    ZT_KEY("precision.reduce_dtype", precision.reduce_dtype,
           "dtype gradients are reduced in across ranks: fp32 | bf16 | fp16 (empty: precision.grad_dtype, else "
           "the working dtype)"),
    ZT_KEY("precision.grad_dtype", precision.grad_dtype,
           "dtype gradients are accumulated over micro-steps and stored in until the optimizer reads them: fp32, "
           "or the working dtype (empty: the working dtype; fp32 beside bf16/fp16: 2 more bytes per stored gradient, "
           "and no rounding of the running sum at each micro-step)"),
    ZT_KEY("precision.loss_scale", precision.loss_scale,
           "fp16 loss scaling: dynamic, or a fixed number > 0 (1 = no scaling)"),
    ZT_KEY("precision.init_scale", precision.init_scale, "fp16 dynamic loss scale: initial value"),
    ZT_KEY("precision.growth_interval", precision.growth_interval,
           "fp16 dynamic loss scale: clean steps before it doubles"),
    ZT_KEY("precision.hysteresis", precision.hysteresis,
           "fp16 dynamic loss scale: it halves at the hysteresis-th overflow since its last change (2: the first "
           "overflow is absorbed, the second halves it; 1: every overflow halves it)"),
    ZT_KEY("precision.min_scale", precision.min_scale,
           "fp16 dynamic loss scale: floor; there the overflow that would halve it stops the run (with "
           "hysteresis 2: the first is absorbed, the second stops)"),

    ZT_KEY("checkpoint.dir", checkpoint.dir, "checkpoint directory (empty: <run.dir>/checkpoints)"),
    ZT_KEY("checkpoint.every", checkpoint.every, "steps between checkpoints (0: only at the end)"),
    ZT_KEY("checkpoint.keep", checkpoint.keep, "checkpoints kept on disk"),
    ZT_KEY("checkpoint.resume", checkpoint.resume, "auto | never | PATH of a checkpoint"),
    ZT_KEY("checkpoint.on_error", checkpoint.on_error,
           "when a save fails (disk full, ...): stop (exit 1) | continue (warn and train on); the previous "
           "checkpoint stays intact either way, and the run's last save failing exits 1"),
    ZT_KEY("checkpoint.async", checkpoint.async,
           "true: training blocks only while the state is copied to a host snapshot, and a background thread "
           "writes the checkpoint beside the next steps | false: training waits for the whole write"),
    ZT_KEY("checkpoint.async_spread", checkpoint.async_spread,
           "async saves: spread the background write over this fraction of the expected time until the next "
           "save (checkpoint.every x the recent median step time, or the steps left), so it slows the steps less; "
           "a stop signal, the next save or the end of training makes it hurry. In [0, 1); 0: at full speed"),

    ZT_KEY("eval.tasks", eval.tasks,
           "multiple-choice task files, comma-separated: HellaSwag JSON Lines or llm.c's .bin (empty: none)"),
    ZT_KEY("eval.every", eval.every, "steps between task evaluations (0: only at the end)"),
    ZT_KEY("eval.limit", eval.limit, "examples of each task evaluated, from the first (0: all)"),

    ZT_KEY("run.dir", run.dir, "run directory (logs, resolved config, checkpoints)"),
    ZT_KEY("run.memory_check", run.memory_check,
           "a run whose predicted memory does not fit: strict (refused, exit 2) | warn | off"),
    ZT_KEY("run.tensorboard", run.tensorboard,
           "true: rank 0 also writes every metrics.jsonl scalar as a TensorBoard event file in <run.dir>/tb "
           "(tensorboard --logdir <run.dir>/tb) | false"),
    ZT_KEY("run.report_every", run.report_every,
           "steps between straggler reports: ranks whose compute time is more than 20% above the median are "
           "named with their hosts and slowest phase (0: never)"),

    ZT_KEY("cluster.nodes", cluster.nodes, "ztrain --plan: nodes of the cluster planned for (training ignores [cluster])"),
    ZT_KEY("cluster.ranks_per_node", cluster.ranks_per_node, "ztrain --plan: ranks on each node (a GPU: one per GPU)"),
    ZT_KEY("cluster.cores_per_node", cluster.cores_per_node,
           "cpu: the node's cores, shared by its ranks' threads (train.threads each; 0: a core for every thread)"),
    ZT_KEY("cluster.device", cluster.device,
           "cpu (peaks, memory and bandwidths are the node's, shared by its ranks) | gpu (per GPU)"),
    ZT_KEY("cluster.peak_tflops_fp32", cluster.peak_tflops_fp32, "dense fp32 peak, TFLOP/s (a node's or a GPU's)"),
    ZT_KEY("cluster.peak_tflops_bf16", cluster.peak_tflops_bf16, "dense bf16 (and fp16) peak, TFLOP/s"),
    ZT_KEY("cluster.memory_gib", cluster.memory_gib, "memory a plan may fill, GiB (a node's or a GPU's)"),
    ZT_KEY("cluster.intra_gbps", cluster.intra_gbps,
           "bandwidth between the ranks of a node, GB/s (10^9 bytes/s) one way (a GPU's link; cpu: the node's)"),
    ZT_KEY("cluster.intra_latency_us", cluster.intra_latency_us, "latency of a message inside a node, microseconds"),
    ZT_KEY("cluster.inter_gbps", cluster.inter_gbps,
           "bandwidth out of a node, GB/s one way, all its network ports together (400 Gb/s = 50 GB/s)"),
    ZT_KEY("cluster.inter_latency_us", cluster.inter_latency_us, "latency of a message between nodes, microseconds"),
    ZT_KEY("cluster.memory_gbps", cluster.memory_gbps,
           "element-wise ops' memory bandwidth, GB/s (a GPU's; cpu: the node's)"),
    ZT_KEY("cluster.product_efficiency", cluster.product_efficiency,
           "fraction of the peak a large matrix product reaches, in (0, 1]"),
    ZT_KEY("cluster.product_half_gflop", cluster.product_half_gflop,
           "size of the product (GFLOP) that reaches half that rate: smaller products run slower"),
    ZT_KEY("cluster.attention_kernel", cluster.attention_kernel,
           "materialized (ztrain's kernels: the (T x T) probabilities written and read back) | fused "
           "(flash-style: scores stay on chip; to model other systems)"),
    ZT_KEY("cluster.attention_efficiency", cluster.attention_efficiency,
           "fraction of the peak a fused attention kernel reaches, in [0, 1] (0: product_efficiency; "
           "materialized attention's products run at the products' rate)"),
    ZT_KEY("cluster.elementwise", cluster.elementwise,
           "fused (ztrain's kernels: one pass per norm, residual add and activation) | eager (one kernel per op, "
           "as eager PyTorch runs a block; to model other systems)"),
    ZT_KEY("cluster.activation_checkpointing", cluster.activation_checkpointing,
           "deck (train.recompute) | selective_op (torchtitan's op-level policy: every second product of a block "
           "and its element-wise ops recomputed; to model other systems)"),
};

#undef ZT_KEY

}  // namespace

KeyRange keys() { return KeyRange{std::begin(kKeys), std::end(kKeys)}; }

const KeyDef* find_key(const std::string& key) {
    for (const KeyDef& k : kKeys) {
        if (key == k.key) {
            return &k;
        }
    }
    return nullptr;
}

std::string section_of(const std::string& key) {
    const auto dot = key.find('.');
    return dot == std::string::npos ? std::string() : key.substr(0, dot);
}

std::string leaf_of(const std::string& key) {
    const auto dot = key.find('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
}

bool set_on_command_line(const Config& cfg, const std::string& key) {
    return std::find(cfg.cli_keys.begin(), cfg.cli_keys.end(), key) != cfg.cli_keys.end();
}

std::string file_at_line(const std::string& path, int line) { return line > 0 ? str(path, ":", line) : path; }

std::string file_origin(const Config& cfg, const std::string& key) {
    const auto from_cluster = cfg.cluster_file_lines.find(key);
    if (from_cluster != cfg.cluster_file_lines.end()) return file_at_line(cfg.cluster_file, from_cluster->second);
    const auto it = cfg.config_file_lines.find(key);
    return file_at_line(cfg.config_file, it == cfg.config_file_lines.end() ? 0 : it->second);
}

// ---------------------------------------------------------------------------
// Suggestions for unknown keys
// ---------------------------------------------------------------------------

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
    std::vector<size_t> prev(b.size() + 1);
    std::vector<size_t> cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) {
        prev[j] = j;
    }
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

/// The registered key the user most likely meant, or "" when nothing is close.
std::string nearest_key(const std::string& unknown) {
    // A right key in the wrong section ("train.n_layer", or a bare "n_layer") is the
    // commonest slip; edit distance would rank it poorly, so check it first.
    const std::string leaf = leaf_of(unknown);
    for (const KeyDef& k : kKeys) {
        if (leaf == leaf_of(k.key)) {
            return k.key;
        }
    }
    std::string best;
    size_t best_d = std::max<size_t>(2, unknown.size() / 4) + 1;
    for (const KeyDef& k : kKeys) {
        const size_t d = edit_distance(unknown, k.key);
        if (d < best_d) {
            best_d = d;
            best = k.key;
        }
    }
    return best;
}

}  // namespace

std::string suggestion(const std::string& unknown, const char* prefix) {
    const std::string near = nearest_key(unknown);
    return near.empty() ? std::string() : str(" (did you mean '", prefix, near, "'?)");
}

}  // namespace config_detail

using namespace config_detail;

void set_config_value(Config& cfg, const std::string& key, const std::string& text) {
    const KeyDef* k = find_key(key);
    ZT_INPUT_CHECK(k != nullptr, "unknown key '", key, "'", suggestion(key, ""));
    assign(cfg, *k, text, "");
}

std::string config_value_text(const Config& cfg, const std::string& key) {
    const KeyDef* k = find_key(key);
    ZT_INPUT_CHECK(k != nullptr, "unknown key '", key, "'", suggestion(key, ""));
    return format_value(*k, cfg);
}

}  // namespace zt
