// validate_deck(): every value and the relations between keys; an InputError names the key,
// the value, what was expected, and whether to edit the deck or the command line. Does not
// touch the file system. The model family's own keys are checked by its FamilyKeyRules
// (model/), at the place in the order where they always were.
#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "parsing.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace config_detail {
namespace {

class Validator : public SettingCheck {
  public:
    Validator(const Config& cfg, const RejectedSettings& rejected) : m_cfg(cfg), m_rejected(rejected) {}

    /// Prefix naming where the values of `keys` came from, so the user knows what to edit:
    /// "command line: " when any of them was overridden there, else the deck, else nothing.
    std::string origin(std::initializer_list<const char*> keys) const override {
        for (const char* key : keys) {
            if (set_on_command_line(m_cfg, key)) {
                return "command line: ";
            }
        }
        // The cluster file, then the deck, at the line of the first of these keys it gives.
        for (const char* key : keys) {
            if (m_cfg.cluster_file_lines.count(key)) return file_origin(m_cfg, key) + ": ";
        }
        for (const char* key : keys) {
            if (m_cfg.config_file_lines.count(key)) return file_origin(m_cfg, key) + ": ";
        }
        return m_cfg.config_file.empty() ? std::string() : m_cfg.config_file + ": ";
    }
    std::string origin(const std::string& key) const { return origin({key.c_str()}); }

    /// The value as text; for a typed setting that refused its text, that text.
    std::string value(const std::string& key) const override {
        const auto it = m_rejected.find(key);
        return it != m_rejected.end() ? it->second.text : format_value(*find_key(key), m_cfg);
    }

    /// Throws "<origin>key = 'text': expected ..." when `key`'s text was refused as it was read.
    void check_read(const std::string& key) const override {
        const auto it = m_rejected.find(key);
        if (it != m_rejected.end()) {
            check(false, key, it->second.expected);
        }
    }

    /// Throws "<origin>key = value: expected <what>" unless `ok`.
    void check(bool ok, const std::string& key, const std::string& expected) const override {
        if (!ok) {
            throw InputError(str(origin(key), key, " = ", quoted(key), ": expected ", expected));
        }
    }

    void check_finite(const std::string& key, double v) const {
        check(std::isfinite(v), key, "a finite number");
    }

    const char* first_not_default(std::initializer_list<const char*> keys) const override {
        const Config defaults;
        for (const char* key : keys) {
            if (value(key) != format_value(*find_key(key), defaults)) return key;
        }
        return nullptr;
    }

  private:
    std::string quoted(const std::string& key) const {
        const std::string v = value(key);
        // Numbers read better bare; strings are quoted so an empty value is visible.
        const FieldRef ref = find_key(key)->field(const_cast<Config&>(m_cfg));
        return is_text(ref) ? "'" + v + "'" : v;
    }

    const Config& m_cfg;
    const RejectedSettings& m_rejected;
};

/// Every double is finite, and no text value holds '#' or a line break.
void check_every_value(const Validator& v, const Config& cfg) {
    // Every double must be finite before any range check: NaN compares false with
    // everything and would slip through "x < 0" style tests.
    for (const KeyDef& k : keys()) {
        const FieldRef ref = k.field(const_cast<Config&>(cfg));
        if (const auto* p = std::get_if<double*>(&ref)) {
            v.check_finite(k.key, **p);
        }
        if (is_text(ref)) {
            // '#' starts a comment and a newline ends the line in an INI deck: such a value
            // could not be written back by to_ini() faithfully.
            v.check(v.value(k.key).find_first_of("#\n\r") == std::string::npos, k.key,
                    "a value without '#' or line breaks");
        }
    }
}

/// The model keys (the family's own with its rules).
void check_model_keys(const Validator& v, const ModelConfig& m, FamilyRulesOf family_rules) {
    v.check_int_min("model.n_layer", m.n_layer, 1);
    v.check_int_min("model.n_head", m.n_head, 1);
    v.check_int_min("model.n_embd", m.n_embd, 1);
    if (m.n_embd % m.n_head != 0) {
        throw InputError(str(v.origin({"model.n_embd", "model.n_head"}), "model.n_embd = ", m.n_embd,
                             " is not divisible by model.n_head = ", m.n_head,
                             " (each head gets n_embd / n_head channels)"));
    }
    v.check_read("model.arch");
    family_rules(m.arch, v).check_keys(m, v);
    v.check_int_min("model.seq_len", m.seq_len, 1);
    v.check_int_min("model.vocab_size", m.vocab_size, 2);
    v.check_int_min("model.vocab_pad_to", m.vocab_pad_to, 1);
    // padded_vocab() adds the two; keep that sum (and the round-up) inside int.
    v.check(m.vocab_pad_to <= INT_MAX - m.vocab_size, "model.vocab_pad_to",
            "vocab_size + vocab_pad_to to fit in a 32-bit integer");
}

/// data.train and the train keys but train.max_bad_steps (checked with the precision keys).
void check_train_keys(const Validator& v, const Config& cfg) {
    if (cfg.data.train.empty()) {
        throw InputError(str(v.origin("data.train"),
                             "data.train is required: a token shard file or glob (make one with zt-prepare)"));
    }
    const TrainConfig& t = cfg.train;
    v.check_int_min("train.micro_batch", t.micro_batch, 1);
    v.check_int_min("train.grad_accum", t.grad_accum, 1);
    v.check(t.global_batch >= 0, "train.global_batch", "an integer >= 0 (0: micro_batch x grad_accum x data ranks)");
    v.check_int_min("train.max_steps", t.max_steps, 1);
    v.check_int_min("train.epochs", t.epochs, 0);
    v.check(t.lr > 0, "train.lr", "a number > 0");
    v.check(t.lr_min >= 0, "train.lr_min", "a number >= 0");
    if (t.lr_min > t.lr) {
        throw InputError(str(v.origin({"train.lr_min", "train.lr"}), "train.lr_min = ", format_double(t.lr_min),
                             " is greater than train.lr = ", format_double(t.lr),
                             ": expected 0 <= train.lr_min <= train.lr"));
    }
    v.check_int_min("train.warmup_steps", t.warmup_steps, 0);
    v.check_int_min("train.schedule_steps", t.schedule_steps, 0);
    v.check_read("train.schedule");
    v.check(t.decay_fraction > 0 && t.decay_fraction <= 1, "train.decay_fraction", "a number in (0, 1]");
    v.check_read("train.decay_shape");
    v.check_int_min("train.decay_steps", t.decay_steps, 0);
    v.check(t.weight_decay >= 0, "train.weight_decay", "a number >= 0");
    v.check_read("train.optimizer");
    v.check(t.muon_lr >= 0, "train.muon_lr", "a number >= 0 (0: train.lr)");
    v.check(t.muon_momentum >= 0 && t.muon_momentum < 1, "train.muon_momentum", "a number in [0, 1)");
    v.check(t.muon_ns_steps >= 1 && t.muon_ns_steps <= 99, "train.muon_ns_steps", "an integer from 1 to 99");
    v.check_read("train.muon_ns_dtype");
    v.check(t.muon_ns_dtype != DType::kF16, "train.muon_ns_dtype", "fp32 | bf16");
    v.check_read("train.muon_adjust_lr");
    v.check(t.beta1 >= 0 && t.beta1 < 1, "train.beta1", "a number in [0, 1)");
    v.check(t.beta2 >= 0 && t.beta2 < 1, "train.beta2", "a number in [0, 1)");
    v.check(t.eps > 0, "train.eps", "a number > 0");
    v.check(t.grad_clip >= 0, "train.grad_clip", "a number >= 0 (0 disables clipping)");
    v.check_int_min("train.eval_every", t.eval_every, 0);
    v.check_int_min("train.eval_batches", t.eval_batches, 1);
    v.check_int_min("train.sample_tokens", t.sample_tokens, 0);
    v.check_int_min("train.log_every", t.log_every, 1);
    v.check_int_min("train.threads", t.threads, 0);
    v.check_read("train.spike");
    v.check_read("train.recompute");
    v.check(t.spike_factor > 1, "train.spike_factor", "a factor > 1 over the median loss");
    v.check_int_min("train.spike_patience", t.spike_patience, 1);
    v.check_int_min("train.spike_snapshot_every", t.spike_snapshot_every, 1);
    v.check_int_min("train.spike_max_rollbacks", t.spike_max_rollbacks, 1);
}

void check_parallel_keys(const Validator& v, const ParallelConfig& p) {
    v.check(p.zero_stage >= 0 && p.zero_stage <= 3, "parallel.zero_stage", "0 (DDP), 1, 2 or 3");
    v.check_read("parallel.shard_group");  // divides the world: checked where the world is known
    v.check(p.bucket_mb >= 0 && p.bucket_mb <= 1048576, "parallel.bucket_mb",
            "0 (the memory plan's choice) or a size in MiB > 0 and <= 1048576 (fractions allowed)");
    v.check(p.tensor >= 1, "parallel.tensor", "a number of ranks >= 1 (1: no tensor parallelism)");
    v.check(p.timeout_s >= 0, "parallel.timeout_s", "a number of seconds >= 0 (0 disables the watchdog)");
    v.check_int_min("parallel.check_every", p.check_every, 0);
    v.check(p.overlap_depth >= 0 && p.overlap_depth <= kMaxOverlapDepth, "parallel.overlap_depth",
            str("0 (the memory plan's choice) or a depth from 1 to ", kMaxOverlapDepth));
}

/// What parallel.tensor splits must divide by its size: the heads (whole heads per rank), the
/// KV heads, the MLP width and the padded vocabulary. (The world size is checked where it is
/// known, by the device mesh.)
void check_tensor_split(const Validator& v, const Config& cfg, FamilyRulesOf family_rules) {
    const int tensor_size = cfg.parallel.tensor;
    const ModelConfig& m = cfg.model;
    v.check(!cfg.parallel.sequence || tensor_size > 1, "parallel.sequence",
            "false, or parallel.tensor > 1 (sequence parallelism splits the rows over the tensor group)");
    if (tensor_size <= 1) return;
    v.check(!cfg.parallel.sequence || m.seq_len % tensor_size == 0, "model.seq_len",
            str("a multiple of parallel.tensor = ", tensor_size, " under parallel.sequence (whole rows per rank)"));
    v.check(m.n_head % tensor_size == 0, "model.n_head",
            str("a multiple of parallel.tensor = ", tensor_size, " (whole heads per rank)"));
    // Fewer KV heads than ranks: each is held by tensor_size / n_kv_head ranks (Megatron's replication).
    const int kv = m.kv_heads();
    // (The family's key checks kept n_kv_head at 0 where the family has no such key.)
    v.check(kv % tensor_size == 0 || tensor_size % kv == 0, m.n_kv_head > 0 ? "model.n_kv_head" : "model.n_head",
            str("a multiple or a divisor of parallel.tensor = ", tensor_size));
    family_rules(m.arch, v).check_tensor_split(m, tensor_size, v);
    v.check(m.padded_vocab() % tensor_size == 0, "model.vocab_pad_to",
            str("a multiple of parallel.tensor = ", tensor_size, ": the padded vocabulary (", m.padded_vocab(),
                " rows) is split over the tensor group"));
}

/// parallel.pipeline and its schedule: enough micro-batches and blocks for the stages, and a
/// layer split that covers the blocks exactly. (The world size is checked by the device mesh.)
void check_pipeline(const Validator& v, const Config& cfg) {
    const ParallelConfig& p = cfg.parallel;
    v.check(p.pipeline >= 1, "parallel.pipeline", "a number of stages >= 1 (1: no pipeline parallelism)");
    v.check_read("parallel.schedule");
    v.check(p.virtual_stages >= 0, "parallel.virtual_stages", "0 (the schedule's default) or a number of chunks");
    v.check(p.virtual_stages <= 1 || p.schedule == PipelineSchedule::kInterleaved, "parallel.virtual_stages",
            "0 or 1 unless parallel.schedule = interleaved (the only schedule with several chunks per stage)");
    if (p.pipeline <= 1) {
        v.check(p.pipeline_layers.empty(), "parallel.pipeline_layers", "empty without parallel.pipeline > 1");
        return;
    }
    if (p.schedule == PipelineSchedule::kZeroBubble) {
        v.check(cfg.train.recompute != ActivationRecompute::kBlocks, "train.recompute",
                "false or attention under parallel.schedule = zb (its weight passes read each block's inputs and keep "
                "its output gradients in the block's activations, which recomputing whole blocks does not keep)");
    }
    const int m = cfg.train.grad_accum;
    // With a global batch, grad_accum is derived at the world size and checked there.
    const bool derived = cfg.train.global_batch > 0;
    v.check(derived || m >= p.pipeline, "train.grad_accum",
            str("at least parallel.pipeline = ", p.pipeline, " micro-batches per step (one in flight per stage)"));
    // In 64 bits: a huge parallel.virtual_stages must be refused here, not wrap around.
    const long long V = static_cast<long long>(p.pipeline) * p.chunks();
    if (p.schedule == PipelineSchedule::kInterleaved) {
        v.check(p.chunks() >= 2, "parallel.virtual_stages",
                "0 (2) or at least 2 under parallel.schedule = interleaved");
        v.check(derived || m % p.pipeline == 0, "train.grad_accum",
                str("a multiple of parallel.pipeline = ", p.pipeline, " under parallel.schedule = interleaved"));
    }
    v.check(cfg.model.n_layer >= V, "model.n_layer",
            str("at least one block per virtual stage: parallel.pipeline x virtual stages = ", V));
    if (p.pipeline_layers.empty()) return;
    std::vector<int> counts;
    v.check(parse_pipeline_layers(p.pipeline_layers, counts), "parallel.pipeline_layers",
            "block counts >= 1 separated by commas, e.g. 3,4,4,3");
    long long sum = 0;  // a few huge counts must not wrap to n_layer
    for (int c : counts) sum += c;
    v.check(static_cast<int>(counts.size()) == V && sum == cfg.model.n_layer, "parallel.pipeline_layers",
            str(V, " counts (one per virtual stage) summing to model.n_layer = ", cfg.model.n_layer));
}

/// The precision keys, then train.max_bad_steps.
void check_precision_keys(const Validator& v, const Config& cfg) {
    const PrecisionConfig& pr = cfg.precision;
    v.check_read("precision.dtype");
    v.check_read("precision.reduce_dtype");
    v.check_read("precision.grad_dtype");
    // Gradients are kept in the trained elements' dtype or widened to fp32, never narrowed.
    const DType trained = trained_dtype(cfg);
    v.check(!pr.grad_dtype || *pr.grad_dtype == DType::kF32 || *pr.grad_dtype == trained, "precision.grad_dtype",
            trained == DType::kF32
                ? std::string("fp32 or empty: ") + (cfg.model.lora.on() ? "the adapters train" : "the model trains") +
                      " in fp32, and gradients are never narrower than what they update"
                : str("fp32, ", dtype_name(trained), " (precision.dtype) or empty"));
    v.check_read("precision.loss_scale");
    // The typed settings were checked as they were read; a hand-built Config can still
    // hold a fixed scale that is not a positive number, or a resume PATH that is empty.
    v.check(pr.loss_scale.dynamic || fixed_loss_scale_ok(pr.loss_scale.fixed), "precision.loss_scale",
            "dynamic, or a number > 0");
    v.check(pr.init_scale > 0, "precision.init_scale", "a number > 0");
    v.check_int_min("precision.growth_interval", pr.growth_interval, 1);
    v.check_int_min("precision.hysteresis", pr.hysteresis, 1);
    v.check(pr.min_scale > 0, "precision.min_scale", "a number > 0");
    if (pr.min_scale > pr.init_scale) {
        throw InputError(str(v.origin({"precision.min_scale", "precision.init_scale"}),
                             "precision.min_scale = ", format_double(pr.min_scale), " is above precision.init_scale = ",
                             format_double(pr.init_scale), ": expected min_scale <= init_scale"));
    }
    v.check_int_min("train.max_bad_steps", cfg.train.max_bad_steps, 1);
}

/// The [lora] keys (the targets' names are the family's: checked with its keys) and what
/// adapters do not compose with yet.
void check_lora_keys(const Validator& v, const Config& cfg) {
    const LoraConfig& l = cfg.model.lora;
    v.check_int_min("lora.rank", l.rank, 0);
    v.check(l.alpha > 0, "lora.alpha", "a number > 0");
    v.check(l.dropout >= 0 && l.dropout < 1, "lora.dropout", "a probability in [0, 1)");
    v.check_read("lora.base_dtype");
    v.check(!l.base_dtype || *l.base_dtype != DType::kF16, "lora.base_dtype", "fp32 | bf16 (empty: precision.dtype)");
    const std::string& t = l.targets;
    v.check(t.empty() || (t.front() != ',' && t.back() != ',' && t.find(",,") == std::string::npos), "lora.targets",
            "module names separated by commas, none empty (or default, or empty for none)");
    if (!l.on()) return;
    v.check(!l.base_dtype || *l.base_dtype == cfg.precision.dtype || cfg.precision.dtype != DType::kF16,
            "lora.base_dtype", "empty or fp16 with precision.dtype = fp16 (a base stored in another dtype than "
                               "fp16 activations is not implemented)");
}

/// What Muon does not compose with: LoRA's adapters (PEFT trains them with AdamW).
void check_optimizer_composition(const Validator& v, const Config& cfg) {
    if (cfg.train.optimizer != OptimizerKind::kMuon) return;
    if (cfg.model.lora.on()) {
        throw InputError(str(v.origin({"train.optimizer", "lora.rank"}), "train.optimizer = muon with lora.rank = ",
                             cfg.model.lora.rank, ": LoRA's adapters train with AdamW (as PEFT's do): use "
                             "train.optimizer = adamw"));
    }
}

void check_checkpoint_and_run_keys(const Validator& v, const Config& cfg) {
    v.check_int_min("checkpoint.every", cfg.checkpoint.every, 0);
    v.check_int_min("checkpoint.keep", cfg.checkpoint.keep, 1);
    v.check_read("checkpoint.resume");
    v.check(cfg.checkpoint.resume.mode != ResumeSetting::Mode::kPath || !cfg.checkpoint.resume.path.empty(),
            "checkpoint.resume", "auto | never | PATH of a checkpoint");
    v.check_read("checkpoint.on_error");
    v.check(cfg.checkpoint.async_spread >= 0 && cfg.checkpoint.async_spread < 1, "checkpoint.async_spread",
            "a fraction in [0, 1) of the time between saves (0: write at full speed)");
    v.check(!cfg.run.dir.empty(), "run.dir", "a directory name");
    v.check_int_min("run.report_every", cfg.run.report_every, 0);
    v.check_int_min("eval.every", cfg.eval.every, 0);
    v.check_int_min("eval.limit", cfg.eval.limit, 0);
    const std::string& t = cfg.eval.tasks;
    v.check(t.empty() || (t.front() != ',' && t.back() != ',' && t.find(",,") == std::string::npos), "eval.tasks",
            "task files separated by commas, none empty");
    v.check_read("run.memory_check");
    v.check_read("data.on_change");
    v.check_read("data.packing");
    v.check_read("data.overlong");
}

/// [cluster]: every count and rate positive (a rate of 0 would make the time model divide
/// by it), the device one the model knows.
void check_cluster_keys(const Validator& v, const ClusterConfig& c) {
    v.check_int_min("cluster.nodes", c.nodes, 1);
    v.check_int_min("cluster.ranks_per_node", c.ranks_per_node, 1);
    v.check_int_min("cluster.cores_per_node", c.cores_per_node, 0);
    v.check(c.device == "cpu" || c.device == "gpu", "cluster.device",
            "cpu (the node's figures, shared by its ranks) or gpu (per GPU)");
    v.check(c.attention_kernel == "materialized" || c.attention_kernel == "fused", "cluster.attention_kernel",
            "materialized (ztrain's kernels) or fused (a flash-style kernel)");
    v.check(c.elementwise == "fused" || c.elementwise == "eager", "cluster.elementwise",
            "fused (ztrain's kernels) or eager (one kernel per op)");
    v.check(c.activation_checkpointing == "deck" || c.activation_checkpointing == "selective_op",
            "cluster.activation_checkpointing", "deck (train.recompute) or selective_op (torchtitan's policy)");
    for (const auto& [key, value] :
         {std::pair<const char*, double>{"cluster.peak_tflops_fp32", c.peak_tflops_fp32},
          {"cluster.peak_tflops_bf16", c.peak_tflops_bf16}, {"cluster.memory_gib", c.memory_gib},
          {"cluster.intra_gbps", c.intra_gbps}, {"cluster.inter_gbps", c.inter_gbps},
          {"cluster.memory_gbps", c.memory_gbps}, {"cluster.product_half_gflop", c.product_half_gflop}}) {
        v.check(value > 0, key, "a number > 0");
    }
    v.check(c.intra_latency_us >= 0, "cluster.intra_latency_us", "a number of microseconds >= 0");
    v.check(c.inter_latency_us >= 0, "cluster.inter_latency_us", "a number of microseconds >= 0");
    v.check(c.product_efficiency > 0 && c.product_efficiency <= 1, "cluster.product_efficiency",
            "a fraction in (0, 1]");
    v.check(c.attention_efficiency >= 0 && c.attention_efficiency <= 1, "cluster.attention_efficiency",
            "a fraction in [0, 1] (0: product_efficiency)");
}

}  // namespace

/// validate(), plus the typed settings refused as the deck and command line were read,
/// each reported where its check stood when these settings were strings.
void validate_read(const Config& cfg, const RejectedSettings& rejected, FamilyRulesOf family_rules) {
    const Validator v(cfg, rejected);

    check_every_value(v, cfg);
    v.check_read("backend");
    check_model_keys(v, cfg.model, family_rules);
    check_train_keys(v, cfg);
    check_parallel_keys(v, cfg.parallel);
    check_tensor_split(v, cfg, family_rules);
    check_pipeline(v, cfg);
    check_precision_keys(v, cfg);
    check_lora_keys(v, cfg);
    check_optimizer_composition(v, cfg);
    check_checkpoint_and_run_keys(v, cfg);
    check_cluster_keys(v, cfg.cluster);
    // A typed key without its check_read above must still not pass with its default.
    for (const auto& refused : rejected) v.check_read(refused.first);
}

void validate_model_read(const Config& cfg, FamilyRulesOf family_rules) {
    const config_detail::RejectedSettings none;
    const Validator v(cfg, none);
    check_every_value(v, cfg);
    check_model_keys(v, cfg.model, family_rules);
}

}  // namespace config_detail

void SettingCheck::check_int_min(const std::string& key, int v, int min) const {
    check(v >= min, key, str("an integer >= ", min));
}

void validate_deck(const Config& cfg, FamilyRulesOf family_rules) {
    config_detail::validate_read(cfg, config_detail::RejectedSettings{}, family_rules);
}

void validate_model_keys(const Config& cfg, FamilyRulesOf family_rules) {
    config_detail::validate_model_read(cfg, family_rules);
}

}  // namespace zt
