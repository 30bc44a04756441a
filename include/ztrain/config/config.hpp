// The run configuration: every key of an INI deck / --section.key=value override.
//
// Keys, defaults and one-line meanings live in one table (src/config/key_table.cpp) that
// drives the Boost.Program_options parser, `ztrain --help`, the resolved-config dump and
// validation, so a key cannot exist in one place and be missing in another.
//
// Keys with a fixed set of values (dtypes, backend, schedule, resume, on_error, loss scale)
// are parsed into typed values once, as the deck or command line is read; code below
// compares enums, never strings. Each typed value writes back as the text it was read from
// (setting_text), so to_ini and --help show what the user wrote.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ztrain/core/dtype.hpp"

namespace zt {

/// backend = cpu | cuda | auto (which one runs is resolve_backend's answer).
enum class BackendChoice { kCpu, kCuda, kAuto };

/// train.schedule: the learning-rate decay after warmup. kWsd: warmup-stable-decay, the peak
/// held until the last train.decay_fraction of the schedule, then decayed (train.decay_shape).
enum class LrSchedule { kCosine, kLinear, kConstant, kWsd };
/// train.decay_shape: how wsd's decay falls from lr to lr_min over its progress p in [0, 1]:
/// 1 - p, (1 + cos(pi p)) / 2, or 1 - sqrt(p) (transformers' get_wsd_schedule decay types).
enum class DecayShape { kLinear, kCosine, kOneMinusSqrt };
/// train.optimizer: AdamW for every trained tensor, or Muon (torch.optim.Muon) for the
/// blocks' matrices and AdamW for the rest (embeddings, LM head, norms, biases).
enum class OptimizerKind { kAdamW, kMuon };
/// train.muon_adjust_lr: how Muon scales its rate per matrix of shape (out, in), as
/// torch.optim.Muon's adjust_lr_fn: 0.2 sqrt(max(out, in)) (Moonlight's, which matches
/// AdamW's update RMS, so AdamW's lr and weight decay carry over) or sqrt(max(1, out / in))
/// (Keller Jordan's original, which wants a larger lr, ~0.02).
enum class MuonLrAdjust { kMatchRmsAdamW, kOriginal };

/// checkpoint.on_error: what a failed save does.
enum class OnCheckpointError { kStop, kContinue };
/// data.on_change: what a resume does when the data or tokenizer differ from the checkpoint's.
enum class OnInputChange { kNote, kError };
/// data.packing (example shards): whole examples packed into rows of seq_len, or one
/// example per row with each micro-batch padded to its longest (data/examples.hpp).
enum class DataPacking { kPack, kPad };
/// data.overlong (example shards): an example longer than seq_len + 1 tokens.
enum class DataOverlong { kError, kTruncate, kDrop };
/// parallel.schedule: how a pipeline orders its stages' passes (parallel/pipeline_schedule.hpp).
enum class PipelineSchedule { k1F1B, kInterleaved, kZeroBubble };
/// train.recompute: what a backward recomputes instead of keeping it from the forward.
/// kAttention: each block's attention probabilities (its (T x T) scores and softmax, the
/// largest activation at long sequences) are rebuilt from the kept q, k, v just before the
/// block's attention backward; kBlocks: only each block's output is kept and the block's
/// whole forward runs again before its backward.
enum class ActivationRecompute { kNone, kAttention, kBlocks };
/// run.memory_check: what a run whose predicted memory does not fit does.
enum class MemoryCheck { kStrict, kWarn, kOff };
/// train.spike: what a loss spike does (train/spike_guard.hpp): nothing, or a rollback to
/// an in-memory snapshot with the batches that led to it skipped.
enum class SpikePolicy { kOff, kRollback };

/// model.arch: the name of a model family (docs/architecture.md, "Model families"). config/
/// knows no family: model/'s registry (ztrain/model/family.hpp) holds them, and validation
/// refuses a name none of them has (FamilyRulesOf). Adding a family changes nothing here.
class ModelArch {
  public:
    ModelArch() = default;
    explicit ModelArch(std::string name) : m_name(std::move(name)) {}
    const std::string& name() const { return m_name; }
    bool operator==(const ModelArch& other) const { return m_name == other.m_name; }
    bool operator!=(const ModelArch& other) const { return m_name != other.m_name; }

  private:
    std::string m_name = "gpt2";
};
/// model.rope_scaling (llama): none, or Llama 3.1's frequency rescaling (rope.hpp).
enum class RopeScaling { kNone, kLlama3 };

/// checkpoint.resume = auto | never | PATH.
struct ResumeSetting {
    enum class Mode { kAuto, kNever, kPath };
    Mode mode = Mode::kAuto;
    std::string path;  ///< kPath only: a step directory or a checkpoint directory
};

/// precision.loss_scale = dynamic | a fixed number > 0 (fp16 only).
struct LossScaleSetting {
    bool dynamic = true;
    double fixed = 0.0;            ///< the static scale when !dynamic
    std::string text = "dynamic";  ///< as written: messages and to_ini show it unchanged
};

/// parallel.shard_group = node | 0 | N: the ranks that shard the model state together
/// (parallel/device_mesh.hpp; -1 is "node", the default).
struct ShardGroupSetting {
    int ranks = -1;
};

/// The text a typed value is written as in a deck ("fp32", "cosine", "auto", a path, ...);
/// an unset reduce dtype is "".
/// (ModelArch: its name's characters, valid while `v` lives.)
const char* setting_text(const ModelArch& v);
const char* setting_text(RopeScaling v);
const char* setting_text(BackendChoice v);
const char* setting_text(LrSchedule v);
const char* setting_text(DecayShape v);
const char* setting_text(OptimizerKind v);
const char* setting_text(MuonLrAdjust v);
const char* setting_text(OnCheckpointError v);
const char* setting_text(MemoryCheck v);
const char* setting_text(OnInputChange v);
const char* setting_text(DataPacking v);
const char* setting_text(DataOverlong v);
const char* setting_text(PipelineSchedule v);
const char* setting_text(SpikePolicy v);
/// train.recompute: "false", "attention" or "true" (every block).
const char* setting_text(ActivationRecompute v);
/// parallel.pipeline_layers' block counts ("3,4,4,3"): false unless every item is an integer
/// >= 1.
bool parse_pipeline_layers(const std::string& text, std::vector<int>& out);
std::string setting_text(const ResumeSetting& v);
std::string setting_text(const LossScaleSetting& v);
std::string setting_text(const ShardGroupSetting& v);

/// [lora]: low-rank adapters on the blocks' products, the base frozen (docs/lora.md). Part of
/// the model's configuration because the adapters are tensors of its layout.
struct LoraConfig {
    int rank = 0;                      ///< r; 0: no adapters (full fine-tuning)
    double alpha = 8.0;                ///< the adapter's output is scaled by alpha / rank (PEFT's lora_alpha)
    double dropout = 0.0;              ///< on the adapter's input
    /// Hugging Face module names, comma-separated, matched as PEFT's target_modules (a name
    /// matches every module whose path ends in it); "default": PEFT's default for the family.
    std::string targets = "default";
    std::optional<DType> base_dtype;   ///< the frozen base's storage; unset: precision.dtype
    /// Whether any product gets an adapter (rank > 0 and some target named).
    bool on() const { return rank > 0 && !targets.empty(); }
    /// The adapter's output scale, alpha / rank.
    double scale() const { return alpha / rank; }
};

struct ModelConfig {
    ModelArch arch;  ///< gpt2 unless set
    int n_layer = 4;
    int n_head = 4;
    int n_embd = 128;
    int seq_len = 128;         ///< maximum sequence length = number of learned positions
    int vocab_size = 257;      ///< real vocabulary (tokens the data may contain)
    int vocab_pad_to = 64;     ///< embedding rows are padded to a multiple of this
    /// optional weights to start from: .h5, .safetensors or a Hugging Face model directory;
    /// ignored on resume
    std::string init_from;
    /// a Hugging Face model directory whose config.json fills the model keys (and init_from)
    std::string from_hf;
    // Llama only (its family's key checks refuse a value other than the default with arch = gpt2).
    int n_kv_head = 0;         ///< key/value heads (grouped-query attention); 0 = n_head
    int ffn_dim = 0;           ///< SwiGLU hidden width (HF intermediate_size); required (> 0)
    double rope_theta = 10000.0;
    RopeScaling rope_scaling = RopeScaling::kNone;
    double rope_factor = 8.0;              ///< llama3 scaling: factor
    double rope_low_freq_factor = 1.0;     ///< llama3 scaling: low_freq_factor
    double rope_high_freq_factor = 4.0;    ///< llama3 scaling: high_freq_factor
    int rope_original_context = 8192;      ///< llama3 scaling: original_max_position_embeddings
    double norm_eps = 1e-5;                ///< RMSNorm epsilon (HF rms_norm_eps)
    bool tie_embeddings = true;            ///< LM head = token embedding (else lm_head.weight)
    /// Mistral only: a query attends to the last sliding_window positions at most, itself
    /// included (HF sliding_window); 0 = the whole causal context.
    int sliding_window = 0;
    // Qwen2 / Qwen3 only (their families' key checks refuse them elsewhere).
    int head_dim = 0;                      ///< per-head width of q, k, v (HF head_dim); 0 = n_embd / n_head
    bool qkv_bias = false;                 ///< biases on the q, k and v projections (Qwen2)
    bool qk_norm = false;                  ///< RMSNorm over each head's q and k before rotary (Qwen3)
    LoraConfig lora;                       ///< the [lora] section's keys
    /// Key/value heads: n_kv_head, or n_head when 0 (always n_head for gpt2, whose family
    /// refuses any other n_kv_head than 0).
    int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
    int head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
    /// Width of the fused q|k|v projection: (n_head + 2 n_kv_head) * head_size (3 n_embd for gpt2).
    int qkv_dim() const { return (n_head + 2 * kv_heads()) * head_size(); }
    /// vocab_size rounded up to vocab_pad_to; padded rows are never predicted.
    int padded_vocab() const { return (vocab_size + vocab_pad_to - 1) / vocab_pad_to * vocab_pad_to; }
};

struct DataConfig {
    std::string train;         ///< shard file or glob
    std::string val;           ///< shard file or glob (may be empty: no evaluation)
    std::string tokenizer;     ///< tokenizer description; default: tokenizer.json next to train shards
    /// A resume whose data or tokenizer differ from the checkpoint's: note | error (exit 2).
    OnInputChange on_change = OnInputChange::kNote;
    /// Example shards (zt-prepare --format jsonl) only; pretraining shards ignore both.
    DataPacking packing = DataPacking::kPack;
    DataOverlong overlong = DataOverlong::kError;
};

struct TrainConfig {
    int micro_batch = 4;
    int grad_accum = 1;
    /// Sequences per optimizer step over every data rank; > 0: grad_accum follows the world
    /// size (with_global_batch). 0: micro_batch x grad_accum x data ranks.
    int global_batch = 0;
    int max_steps = 100;
    /// Example shards only: passes over the training examples, instead of max_steps (0: use
    /// max_steps; giving both is an error).
    int epochs = 0;
    double lr = 3e-4;
    double lr_min = 3e-5;
    int warmup_steps = 10;
    LrSchedule schedule = LrSchedule::kCosine;
    /// Steps the decay spans (0: max_steps). After them the lr holds at lr_min, so a resumed
    /// run that raises max_steps can keep the schedule it started with.
    int schedule_steps = 0;
    /// schedule = wsd: the share of the steps after warmup (to schedule_steps) that decay.
    double decay_fraction = 0.2;
    /// schedule = wsd: the steps that decay, counted back from the schedule's end (0:
    /// decay_fraction), e.g. a cooldown of N steps from a checkpoint of the stable part.
    int decay_steps = 0;
    DecayShape decay_shape = DecayShape::kLinear;  ///< schedule = wsd: the decay's shape
    double weight_decay = 0.1;
    OptimizerKind optimizer = OptimizerKind::kAdamW;
    double muon_lr = 0;                ///< Muon's peak rate (0: train.lr); the schedule scales it as lr
    double muon_momentum = 0.95;
    bool muon_nesterov = true;
    int muon_ns_steps = 5;             ///< Newton-Schulz iterations
    /// The Newton-Schulz products' operands: fp32, or bf16 (torch.optim.Muon's; accumulated in
    /// fp32, the iterate kept in fp32).
    DType muon_ns_dtype = DType::kF32;
    MuonLrAdjust muon_adjust_lr = MuonLrAdjust::kMatchRmsAdamW;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double grad_clip = 1.0;            ///< global-norm clip; 0 disables
    uint64_t seed = 1337;
    int eval_every = 50;               ///< 0: evaluate only at the end
    int eval_batches = 4;
    int sample_tokens = 64;            ///< tokens generated at each evaluation; 0 disables
    int log_every = 1;
    int threads = 0;                   ///< CPU threads per rank; 0 = cores / local ranks
    /// false | attention | true (ActivationRecompute): what backward recomputes to save memory
    ActivationRecompute recompute = ActivationRecompute::kNone;
    int max_bad_steps = 5;             ///< consecutive non-finite steps before the run stops
    SpikePolicy spike = SpikePolicy::kOff;  ///< off | rollback (train/spike_guard.hpp)
    double spike_factor = 3.0;         ///< a loss above factor x the running median is a spike step
    int spike_patience = 2;            ///< consecutive spike steps before a rollback
    int spike_snapshot_every = 50;     ///< steps between in-memory snapshots (rollback)
    int spike_max_rollbacks = 3;       ///< rollbacks before the run ends with exit status 4
};

/// The deepest parallel.overlap_depth accepted: past a few units ahead the gathers and
/// reductions are bound by the link, not by when they start, and each step costs memory.
constexpr int kMaxOverlapDepth = 4;
/// What parallel.overlap_depth = 0 becomes when the memory plan has room for it.
constexpr int kAutoOverlapDepth = 2;

struct ParallelConfig {
    int zero_stage = 0;                ///< 0 DDP, 1, 2, 3
    double bucket_mb = 0;              ///< DDP all-reduce bucket size (MiB; fractions allowed); 0 = the memory plan's choice
    double timeout_s = 600;            ///< a collective taking longer aborts the job; 0 = never
    bool comm_thread = true;           ///< host MPI: started collectives run in a communication thread
    int overlap_depth = 0;             ///< units of communication ahead of compute; 0 = the memory plan's choice
    ShardGroupSetting shard_group;     ///< ranks sharding together (node | 0 = all | N)
    int tensor = 1;                    ///< T: consecutive ranks splitting each layer (tensor parallelism)
    bool sequence = false;             ///< sequence parallelism over the tensor group (norms on 1/T of the rows)
    int pipeline = 1;                  ///< P: pipeline stages (outermost mesh dimension)
    PipelineSchedule schedule = PipelineSchedule::k1F1B;
    int virtual_stages = 0;            ///< chunks per stage under interleaved; 0 = 2 there, 1 elsewhere
    std::string pipeline_layers;       ///< "3,4,4,3": blocks per virtual stage; empty = balanced by FLOPs
    int check_every = 0;               ///< steps between replica / checksum state checks; 0 = off
    /// v: the chunks per stage the schedule runs (one stage has one: parallel.schedule is a
    /// pipeline's).
    int chunks() const {
        if (pipeline <= 1 || schedule != PipelineSchedule::kInterleaved) return 1;
        return virtual_stages > 0 ? virtual_stages : 2;
    }
};

struct PrecisionConfig {
    DType dtype = DType::kF32;         ///< working params, activations, grads
    std::optional<DType> reduce_dtype; ///< gradient reduction dtype; unset = grad_dtype, else the working dtype
    /// The dtype micro-steps accumulate gradients in and the optimizer reads them from; unset =
    /// the trained dtype (grads_dtype). fp32 beside 16-bit training: Megatron's
    /// accumulate_allreduce_grads_in_fp32, DeepSpeed's grad_accum_dtype.
    std::optional<DType> grad_dtype;
    LossScaleSetting loss_scale;       ///< fp16: dynamic, or a fixed positive number
    /// The dtype gradients are reduced in: reduce_dtype, else grad_dtype, else the working dtype.
    DType reduce() const { return reduce_dtype.value_or(grad_dtype.value_or(dtype)); }
    double init_scale = 65536.0;       ///< fp16 dynamic: starting scale
    int growth_interval = 2000;        ///< fp16 dynamic: clean steps before the scale doubles
    int hysteresis = 2;                ///< fp16 dynamic: overflows tolerated before a backoff
    double min_scale = 1.0;            ///< fp16 dynamic: the scale never goes below this
};

struct CheckpointConfig {
    std::string dir;                   ///< default: run.dir/checkpoints
    int every = 0;                     ///< 0: only at the end
    int keep = 2;
    ResumeSetting resume;              ///< auto | never | PATH
    OnCheckpointError on_error = OnCheckpointError::kStop;  ///< stop (exit 1) | continue (warn, train on)
    /// true: a save copies the state into a host snapshot and a background thread writes
    /// it while training goes on; false: training waits for the whole write.
    bool async = true;
    /// Async saves: the background write's data pass is spread over this fraction of the
    /// expected time until the saver next waits for it (the next save or the end of
    /// training), so it disturbs the steps less; 0: as fast as it can. In [0, 1).
    double async_spread = 0.5;
};

struct RunConfig {
    std::string dir = "run";
    /// strict: a run whose predicted peak memory does not fit is refused (exit 2) before
    /// anything is allocated; warn: a warning; off: no check.
    MemoryCheck memory_check = MemoryCheck::kStrict;
    /// Rank 0 also writes the metrics as TensorBoard scalars in <dir>/tb.
    bool tensorboard = true;
    /// Steps between straggler reports (a rank > 20% slower than the median); 0 = never.
    int report_every = 100;
};

/// Multiple-choice evaluation in the training loop (docs/evaluation.md).
struct EvalConfig {
    std::string tasks;                 ///< comma-separated task files (empty: none)
    int every = 0;                     ///< steps between task evaluations; 0: only at the end
    int limit = 0;                     ///< the first `limit` examples of each task; 0: all
};

/// The machines a plan is for ([cluster] keys, or ztrain --plan --cluster FILE): the time
/// model's rates and the memory each rank has. The defaults describe this project's machine
/// kind, a 2-core AVX-512 EPYC VM (inputs/clusters/epyc_2core_vm.ini, which a test keeps
/// equal to them). Training ignores these keys.
struct ClusterConfig {
    int nodes = 1;
    int ranks_per_node = 2;
    /// cpu: the node's cores, which its ranks' threads share (a pipeline's waiting stages lend
    /// theirs); 0: a core for every thread. A GPU ignores it.
    int cores_per_node = 2;
    std::string device = "cpu";        ///< cpu: peaks, memory and bandwidths are the node's, shared by its ranks; gpu: per GPU
    double peak_tflops_fp32 = 0.237;   ///< dense peak (TFLOP/s)
    double peak_tflops_bf16 = 0.527;
    double memory_gib = 23.5;          ///< memory a plan may fill (GiB)
    double intra_gbps = 4.0;            ///< GB/s (10^9 bytes/s) one way between ranks of a node
    double intra_latency_us = 0.14;
    double inter_gbps = 1.25;          ///< GB/s one way out of a node (all its network ports)
    double inter_latency_us = 30;
    double memory_gbps = 46.8;         ///< element-wise ops' bandwidth (GB/s)
    double product_efficiency = 0.874;   ///< fraction of the peak a large product reaches
    double product_half_gflop = 0.000151;  ///< a product of this many GFLOP reaches half of that
    /// materialized: ztrain's kernels, which write the (T x T) probabilities and read them
    /// back; fused: a flash-style kernel (scores stay on chip, backward recomputes them), to
    /// model systems that have one
    std::string attention_kernel = "materialized";
    /// fused: the fraction of the peak that kernel reaches (0: product_efficiency); its size
    /// class follows the products' (product_half_gflop)
    double attention_efficiency = 0;
    /// fused: ztrain's element-wise kernels (a pass per norm, residual add and activation);
    /// eager: one kernel per op, as eager PyTorch runs a block, to model systems that do
    std::string elementwise = "fused";
    /// deck: train.recompute (every block, or none); selective_op: torchtitan's op-level
    /// policy (every second product and the element-wise ops recomputed), to model systems
    /// that run it
    std::string activation_checkpointing = "deck";
    bool is_cpu() const { return device == "cpu"; }
};

struct Config {
    ModelConfig model;
    DataConfig data;
    TrainConfig train;
    EvalConfig eval;
    ParallelConfig parallel;
    PrecisionConfig precision;
    CheckpointConfig checkpoint;
    RunConfig run;
    ClusterConfig cluster;
    BackendChoice backend = BackendChoice::kCpu;
    std::string config_file;           ///< the deck it came from (empty: defaults + overrides)
    std::map<std::string, int> config_file_lines;  ///< the line of each key the deck gives
    /// Keys set on the command line (not written by to_ini): lets messages say whether to
    /// edit the deck or the command line.
    std::vector<std::string> cli_keys;
    std::string cluster_file;                ///< --cluster FILE (empty: none)
    std::map<std::string, int> cluster_file_lines;  ///< the line of each key it set that the command line did not
};

/// The dtype the model state stores parameters in: lora.base_dtype under LoRA when set (the
/// frozen base's storage), else precision.dtype. Activations are always precision.dtype.
inline DType stored_dtype(const Config& c) {
    return c.model.lora.on() && c.model.lora.base_dtype ? *c.model.lora.base_dtype : c.precision.dtype;
}

/// The dtype of the trained tensors' working copy and of the gradients: the stored dtype,
/// except a 16-bit LoRA base under fp32 activations, whose adapters stay fp32 (as PEFT keeps
/// them beside a bf16 base).
inline DType trained_dtype(const Config& c) {
    return stored_dtype(c) == DType::kF32 ? DType::kF32 : c.precision.dtype;
}

/// The dtype gradients are accumulated and stored in: precision.grad_dtype when set (fp32, or
/// the trained dtype; validate refuses others), else the trained dtype.
inline DType grads_dtype(const Config& c) { return c.precision.grad_dtype.value_or(trained_dtype(c)); }

/// `deck` with train.grad_accum = train.global_batch / (micro_batch x data ranks) at `world`
/// ranks (data ranks: world / (tensor x pipeline)); unchanged when global_batch is 0 or the
/// world does not split into the mesh (refused there). Throws InputError when the global
/// batch does not split evenly or leaves a pipeline fewer micro-batches than its rules need.
/// A given grad_accum other than 1 that differs is replaced, and *note says so.
Config with_global_batch(const Config& deck, int world, std::string* note = nullptr);

/// What the command line asked for besides a configuration.
enum class CliAction { kTrain, kHelp, kVersion, kEnv, kPlan, kCalibrate };

struct CliResult {
    CliAction action = CliAction::kTrain;
    Config config;
    std::string help_text;  ///< filled for kHelp
    /// kPlan: --plan-world-size (0: the job's own world size).
    int plan_world_size = 0;
    /// kPlan: the world is cluster.nodes x cluster.ranks_per_node (--cluster FILE, or the deck
    /// or command line sets either key), not --plan-world-size or the job's.
    bool plan_cluster = false;
    bool plan_search = false;   ///< --search: rank the meshes
    bool plan_all = false;      ///< --all: every candidate, not the ten fastest
    std::string plan_write;     ///< --write DECK: the fastest candidate as a deck
    std::string cluster_out;    ///< kCalibrate: --cluster-out FILE
    /// kTrain: --force-unlock (break a directory lock recorded by a job on another host).
    bool force_unlock = false;
};

/// One model key as a Hugging Face config.json determines it (ckpt's hf_model_settings).
struct HfSetting {
    std::string key;       ///< "model.n_layer"
    std::string text;      ///< its value as a deck would write it
    std::string hf_field;  ///< where it came from: "num_hidden_layers"
    /// false: only a default; an explicit deck or command-line value wins without a
    /// conflict (model.seq_len of a rotary model: the training context, not a weight shape)
    bool binding = true;
};
/// Reads DIR/config.json into model keys; throws InputError naming the file and field.
/// config/ cannot read Hugging Face files itself (that is ckpt/'s knowledge), so ztrain
/// passes the reader in.
using HfConfigReader = std::function<std::vector<HfSetting>(const std::string& dir)>;

/// How the checks word a refused setting, for the checks config/ is given (FamilyKeyRules):
/// every message names where the value came from (deck or command line), the key, the value
/// and what was expected.
class SettingCheck {
  public:
    virtual ~SettingCheck() = default;
    /// "command line: " when any of `keys` was set there, else "<deck>: ", else "".
    virtual std::string origin(std::initializer_list<const char*> keys) const = 0;
    /// `key`'s value as text; for a typed setting that refused its text, that text.
    virtual std::string value(const std::string& key) const = 0;
    /// Throws "<origin>key = value: expected <expected>" unless `ok`.
    virtual void check(bool ok, const std::string& key, const std::string& expected) const = 0;
    /// Throws "<origin>key = 'text': expected ..." when `key`'s text was refused as it was read.
    virtual void check_read(const std::string& key) const = 0;
    /// The first of `keys` whose value (as text) is not its default, or nullptr.
    virtual const char* first_not_default(std::initializer_list<const char*> keys) const = 0;
    /// check(v >= min, key, "an integer >= min").
    void check_int_min(const std::string& key, int v, int min) const;
};

/// A model family's rules for the keys only it reads, and what parallel.tensor must divide
/// of them. config/ knows no family (model/ implements one per model.arch, ztrain/model/
/// family.hpp), so the checks are given these. Each throws InputError worded by `check`.
class FamilyKeyRules {
  public:
    virtual ~FamilyKeyRules() = default;
    /// The family's keys, checked once model.arch is read and the heads divide n_embd; a
    /// key another family reads must keep its default here.
    virtual void check_keys(const ModelConfig& m, const SettingCheck& check) const = 0;
    /// What parallel.tensor = `tensor` (> 1, dividing n_head) must also divide.
    virtual void check_tensor_split(const ModelConfig& m, int tensor, const SettingCheck& check) const = 0;
};
/// The rules of model.arch's family (ztrain/model/family.hpp: family_key_rules).
/// A name no family has is refused through `check` (model.arch = 'x': expected one of ...).
using FamilyRulesOf = const FamilyKeyRules& (*)(const ModelArch& arch, const SettingCheck& check);

/// Parses `ztrain` arguments: --config FILE, --section.key=value overrides, --help,
/// --version, --env. Throws InputError (naming the file, key and value) on an unknown key,
/// a value of the wrong type, or a value validate_deck() rejects (with `family_rules`).
///
/// model.from_hf = DIR (deck or command line) fills every model key `read_hf` returns for
/// DIR and sets model.init_from = DIR. A key also given explicitly must agree with
/// config.json (an InputError names both values) unless the setting is not binding, in
/// which case the explicit value wins. Without `read_hf`, model.from_hf is refused.
CliResult parse_command_line(int argc, const char* const* argv, FamilyRulesOf family_rules,
                             const HfConfigReader& read_hf = nullptr);

/// `key`'s value in `cfg` as to_ini writes it ("12", "llama", "1e-05"): values compare equal
/// exactly when their texts do. Throws InputError for an unknown key.
std::string config_value_text(const Config& cfg, const std::string& key);

/// Parses a deck given as text (e.g. the resolved deck a checkpoint stores) the way --config
/// reads a file: defaults, then the deck's keys. `origin` names the text in messages. Not
/// validated. Throws InputError on an unknown key or a value of the wrong type.
Config parse_deck_text(const std::string& text, const std::string& origin);

/// Sets `key` ("section.key") from its text exactly as a deck line would, with the same
/// checks and messages (for code and tests that build a Config by hand). Throws InputError
/// for an unknown key or a value its type rejects.
void set_config_value(Config& cfg, const std::string& key, const std::string& text);

/// Checks every value and the relations between them, the model family's keys with
/// `family_rules`; throws InputError naming the key, the value and what was expected. Does
/// not touch the file system. Callers use validate() (ztrain/model/family.hpp), which passes
/// the registered families.
void validate_deck(const Config& cfg, FamilyRulesOf family_rules);
/// validate_deck's checks of the model keys (and that every value is finite) alone.
void validate_model_keys(const Config& cfg, FamilyRulesOf family_rules);

/// The resolved configuration as an INI deck (every key, its value; loadable with --config).
std::string to_ini(const Config& cfg);

}  // namespace zt
