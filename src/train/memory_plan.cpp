// The memory plan (see memory_plan.hpp).
#include "ztrain/train/memory_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/comm/agree.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/threads.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/device_mesh.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"
#include "ztrain/parallel/zero_memory.hpp"
#include "ztrain/train/checkpoint_saver.hpp"
#include "ztrain/train/example_feed.hpp"

namespace zt {
namespace {

/// Initial values are made a 1 Mi-float piece at a time (ModelState, a zeroed vector: all
/// of it touched); a synchronous save stages through the buffers save_staging_bytes counts.
constexpr double kInitPieceBytes = 4.0 * 1048576;
/// Shapes past these are planned from the closed-form parameter count: building their
/// tensor manifest alone (16 named tensors per layer) would cost gigabytes.
constexpr int kManifestMaxLayers = 4096;

/// "1.50 GiB", "12.0 MiB", "512 B".
std::string human(double bytes) {
    char buf[64];
    const double a = std::fabs(bytes);
    if (a >= 1024.0 * 1024 * 1024 * 1024 * 1024) {
        std::snprintf(buf, sizeof buf, "%.3g PiB", bytes / (1024.0 * 1024 * 1024 * 1024 * 1024));
    } else if (a >= 1024.0 * 1024 * 1024 * 1024) {
        std::snprintf(buf, sizeof buf, "%.2f TiB", bytes / (1024.0 * 1024 * 1024 * 1024));
    } else if (a >= 1024.0 * 1024 * 1024) {
        std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    } else if (a >= 1024.0 * 1024) {
        std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024));
    } else if (a >= 1024.0) {
        std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
    } else {
        std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    }
    return buf;
}

/// A "key: value" field of a /proc file, in bytes (the files give kB); 0 when absent.
double proc_kb_field(const char* file, const std::string& key) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key + ":", 0) == 0) {
            std::istringstream fields(line.substr(key.size() + 1));
            double kb = 0;
            fields >> kb;
            return kb * 1024.0;
        }
    }
    return 0;
}

/// What the plan's ZeRO stage splits over its shard group, as the --plan header says it.
std::string sharding_text(const MemoryPlan& plan) {
    if (plan.zero_stage == 0) return "DDP: nothing sharded (every rank holds the whole state)";
    if (plan.shard_group <= 1) {
        return str("ZeRO-", plan.zero_stage, " in groups of 1 rank: nothing sharded (every rank holds the whole state)");
    }
    const char* what = plan.zero_stage == 1   ? "optimizer state"
                       : plan.zero_stage == 2 ? "optimizer state and gradients"
                                              : "parameters, gradients and optimizer state";
    return str("ZeRO-", plan.zero_stage, ": ", what, " sharded over ", plan.shard_group, " rank(s)");
}

/// One change to a deck and the plan it gives.
struct PlanChange {
    std::string what;   ///< "--parallel.zero_stage=2"
    Config cfg;
};

/// The changes `--plan` tries, cheapest first: a higher ZeRO stage (communication only),
/// gradients stored in the 16-bit working dtype instead of fp32 (no compute, a little
/// precision), recompute of the attention probabilities (one attention forward more), of
/// every block (a third more compute), a smaller micro_batch with the grad_accum that keeps
/// the batch (less efficient GEMMs), bf16 (precision). Each applies to `base`.
std::vector<PlanChange> candidate_changes(const Config& base, int world_size) {
    std::vector<PlanChange> out;
    if (world_size > 1) {
        for (int zero_stage = base.parallel.zero_stage + 1; zero_stage <= 3; ++zero_stage) {
            Config c = base;
            c.parallel.zero_stage = zero_stage;
            out.push_back({str("--parallel.zero_stage=", zero_stage), c});
        }
    }
    if (grads_dtype(base) == DType::kF32 && trained_dtype(base) != DType::kF32) {
        Config c = base;
        c.precision.grad_dtype = trained_dtype(base);
        out.push_back({str("--precision.grad_dtype=", dtype_name(trained_dtype(base))), c});
    }
    if (base.train.recompute == ActivationRecompute::kNone) {
        Config c = base;
        c.train.recompute = ActivationRecompute::kAttention;
        out.push_back({"--train.recompute=attention", c});
    }
    if (base.train.recompute != ActivationRecompute::kBlocks) {
        Config c = base;
        c.train.recompute = ActivationRecompute::kBlocks;
        out.push_back({"--train.recompute=true", c});
    }
    for (int mb = base.train.micro_batch / 2; mb >= 1; mb /= 2) {
        Config c = base;
        c.train.micro_batch = mb;
        c.train.grad_accum = base.train.grad_accum * (base.train.micro_batch / mb);
        out.push_back({str("--train.micro_batch=", mb, " --train.grad_accum=", c.train.grad_accum), c});
    }
    if (base.precision.dtype == DType::kF32) {
        Config c = base;
        c.precision.dtype = DType::kBF16;
        out.push_back({"--precision.dtype=bf16", c});
    }
    return out;
}

}  // namespace

double MemoryPlan::per_rank() const {
    double s = 0;
    for (const MemoryItem& i : items) s += i.bytes;
    return s;
}

double MemoryPlan::per_node() const {
    if (device) return per_rank();
    if (stage_per_rank.empty() || ranks_per_node <= 0) return per_rank() * ranks_per_node;
    // Stage s is world / P consecutive ranks; node k holds ranks [k n, (k + 1) n).
    const int per_stage = std::max(1, world_size / static_cast<int>(stage_per_rank.size()));
    double most = 0;
    for (int first = 0; first < std::max(world_size, ranks_per_node); first += ranks_per_node) {
        double node = 0;
        for (int r = first; r < first + ranks_per_node; ++r) {
            node += stage_per_rank[std::min(stage_per_rank.size() - 1, static_cast<size_t>(r / per_stage))];
        }
        most = std::max(most, node);
    }
    return most;
}

const MemoryItem& MemoryPlan::largest() const {
    ZT_REQUIRE(!items.empty(), "empty memory plan");
    return *std::max_element(items.begin(), items.end(),
                             [](const MemoryItem& a, const MemoryItem& b) { return a.bytes < b.bytes; });
}

double measured_baseline_bytes() { return proc_kb_field("/proc/self/status", "VmRSS"); }

double measured_peak_bytes() { return proc_kb_field("/proc/self/status", "VmHWM"); }

double host_available_bytes() { return proc_kb_field("/proc/meminfo", "MemAvailable"); }

namespace {

/// An example run's items: what ExampleFeed and the model's copies of packed rows allocate.
void add_example_items(const Config& cfg, const ExampleRunSizes& examples, std::vector<MemoryItem>& items) {
    const ExampleFeedBytes eb = ExampleFeed::planned_bytes(cfg, examples);
    const bool pack = cfg.data.packing == DataPacking::kPack;
    items.push_back({"examples", eb.examples,
                     str("example shards held: ", examples.train.tokens + (examples.has_val ? examples.val.tokens : 0),
                         " tokens x 5 B (token, target flag), ",
                         examples.train.examples + (examples.has_val ? examples.val.examples : 0),
                         " examples x 8 B (start), + 4 B each (training target counts)")});
    items.push_back({"example rows", eb.rows,
                     pack ? "each epoch's example order and first fit's arrays (5 x 4 B per example)"
                          : "each epoch's example order (4 B per example)"});
    items.push_back({"row batch", RowBatch::planned_bytes(cfg.train.micro_batch, cfg.model.seq_len),
                     str("micro_batch ", cfg.train.micro_batch, " x seq_len ", cfg.model.seq_len,
                         " inputs, targets, positions, segment starts (int32)")});
    if (pack) {
        items.push_back({"row segments", Transformer::row_segment_bytes(cfg.model, cfg.train.micro_batch),
                         "the model's copy of packed rows' position runs and attention starts"});
    }
}

/// The corpora of a weighted data.train / data.val held in memory (data/blend.hpp). Only a
/// blend is counted, so the plan of one corpus stays what it was; none when neither is one.
std::optional<MemoryItem> blend_item(const Config& cfg) {
    double bytes = 0;
    size_t corpora = 0;
    const std::pair<const std::string*, const char*> keys[] = {{&cfg.data.train, "data.train"},
                                                               {&cfg.data.val, "data.val"}};
    for (const auto& [text, key] : keys) {
        if (text->empty()) continue;
        const CorpusList list = parse_corpus_list(*text, key);
        if (!list.weighted) continue;
        bytes += planned_corpus_bytes(list, key, cfg.model.seq_len);
        corpora += list.corpora.size();
    }
    if (corpora == 0) return std::nullopt;
    return MemoryItem{"corpora", bytes,
                      str(corpora, " blended corpora held: tokens x 4 B, windows x 12 B (start, shuffled order)")};
}

/// Whether the plan is for a flash-style attention kernel (cluster.attention_kernel), which
/// keeps no probabilities: a system other than ztrain's own kernels (a training run plans
/// with its own: plan_and_check_memory).
bool fused_attention(const Config& cfg) { return cfg.cluster.attention_kernel == "fused"; }

/// The activations as the planned system's attention keeps them.
ActivationCount planned_attention(const Config& cfg, const ActivationCount& count) {
    return fused_attention(cfg) ? count.with_fused_attention(cfg.model.seq_len) : count;
}

/// train.recompute as the plan's kernels see it: a fused kernel keeps no probabilities to
/// rebuild, only each block's log-sum-exp, so `attention` keeps what `false` keeps.
ActivationRecompute planned_recompute(const Config& cfg) {
    const ActivationRecompute r = cfg.train.recompute;
    return fused_attention(cfg) && r == ActivationRecompute::kAttention ? ActivationRecompute::kNone : r;
}

/// Activations and their gradients in the working dtype; statistics, losses and scratch fp32.
MemoryItem activation_item(const Config& cfg, DType work, double attention_scratch_floats, int tensor) {
    const TrainConfig& t = cfg.train;
    const ModelConfig& m = cfg.model;
    const bool sequence = cfg.parallel.sequence && tensor > 1;
    const int head_rows = Transformer::chunked_head_rows(m, t.micro_batch, tensor);
    const ActivationCount count = Transformer::activations(
        m, t.micro_batch, planned_recompute(cfg), static_cast<size_t>(std::max(0.0, attention_scratch_floats)), tensor,
        sequence, StageBlocks{}, head_rows);
    return {"activations", planned_attention(cfg, count).bytes(work),
            str("micro_batch ", t.micro_batch, " x seq_len ", m.seq_len,
                t.recompute == ActivationRecompute::kBlocks      ? ", recompute (block outputs only)"
                : t.recompute == ActivationRecompute::kAttention ? ", recompute (attention probabilities)"
                                                                 : "",
                sequence ? str(", sequence parallel (1/", tensor, " of the rows)") : std::string(), " (",
                dtype_name(work), ")", fused_attention(cfg) ? ", attention probabilities not kept (fused)" : "")};
}

/// Where one rank of a plan sits: its tensor split, and under pipeline parallelism its
/// stage (the plan is made for each stage and the largest kept).
struct PlannedRank {
    int tensor = 1;
    int pipeline_stages = 1;
    int pipeline_stage = 0;
    PipelineStages blocks;  ///< the blocks of each virtual stage (pipeline_stages > 1)
};

/// The model state's items (params, grads, master, optimizer, scratch; DDP's MPI copies) of a
/// rank holding `layout`, and its checkpoint snapshot's bytes and largest written range.
void add_state_items(MemoryPlan& plan, const ModelLayout& layout, const ZeroMemoryFormulas& f, const Config& cfg,
                     DType work, DType reduce, double* snapshot_bytes, size_t* largest_written_range) {
    const DType trained = trained_dtype(cfg);
    const DType grads = grads_dtype(cfg);
    const int group = plan.shard_group;
    const int zero_stage = plan.zero_stage;
    const int depth = plan.overlap_depth;
    // A pipeline stage's ZeRO-2/3 state keeps its units' whole gradients through the step.
    const bool once = plan.pipeline > 1 && zero_stage >= 2;
    StateOptions options =
        StateOptions::zero(zero_stage).in(work, reduce).training_in(trained).accumulating_in(grads).with_overlap_depth(
            depth).reduced_once_per_step(once);
    const bool muon = cfg.train.optimizer == OptimizerKind::kMuon;
    if (muon) options.with_muon(muon_settings(cfg.train));
    // The rank keeping the most: under a frozen base (LoRA) the owners of the units' tails;
    // under Muon, the ranks whose shards hold the most of AdamW's elements (with a v each).
    StateBytes sb = ModelState::plan_bytes(layout, group, options);
    const bool uneven = layout.model.lora.on() || muon;
    for (int r = 1; uneven && r < group; ++r) {
        const StateBytes other = ModelState::plan_bytes(layout, group, options, r);
        if (other.model_state() + other.scratch > sb.model_state() + sb.scratch) sb = other;
    }
    plan.items.push_back({"params", static_cast<double>(sb.params), f.params.formula});
    plan.items.push_back({"grads", static_cast<double>(sb.grads), f.grads.formula});
    plan.items.push_back({"master", static_cast<double>(sb.master), f.master.formula});
    plan.items.push_back({"optimizer", static_cast<double>(sb.optimizer),
                          muon ? f.optimizer.formula + ", less Muon's matrices' v (momentum alone), + its largest matrix and "
                                                       "Newton-Schulz work" +
                                     (plan.tensor > 1 ? " (whole), a split matrix's gathered slices" : "") +
                                     (zero_stage > 0 ? ", and a whole unit's gathered update" : "")
                               : f.optimizer.formula});
    plan.items.push_back({"scratch", static_cast<double>(sb.scratch),
                          str("gathered units, ",
                              once ? "the stage's whole fp32 gradients (reduce-scattered once per step)"
                                   : "gradient scratch",
                              ", reductions in flight (peak; overlap depth ", depth, ")")});
    // A checkpoint saves each rank's ShardPlan::saved_range (LoRA: the adapters).
    const ShardPlan shards(layout.unit_numel, group, ShardingPolicy::zero_stage(zero_stage), trainable_begins(layout));
    *snapshot_bytes = 0;
    *largest_written_range = 0;
    for (int r = 0; r < group; ++r) {
        *snapshot_bytes = std::max(*snapshot_bytes,
                                   static_cast<double>(CheckpointSnapshot::planned_bytes(shards, r, layout.stage)));
        for (int u = 0; u < shards.num_units(); ++u) {
            *largest_written_range = std::max(*largest_written_range, shards.saved_range(u, r).size());
        }
    }
    if (!plan.device && plan.world_size > 1 && zero_stage == 0) {
        // Open MPI's non-blocking all-reduce (libnbc) works on a temporary copy of each
        // bucket; the reducer keeps at most reductions_in_flight(overlap_depth) buckets in
        // flight (measured: bench/memory_plan_bench.sh). With another wire dtype the units
        // are reduced from pooled copies, as many at a time.
        // Each unit's gradient as the reducer holds it (a frozen base's: its trained tail only).
        std::vector<size_t> extents;
        double largest = 0;
        for (int u = 0; u < shards.num_units(); ++u) {
            extents.push_back(shards.grad_extent(u));
            largest = std::max(largest, static_cast<double>(extents.back()));
        }
        const double arena = static_cast<double>(sb.grads) / dtype_size(grads) * dtype_size(reduce);
        const double in_flight = static_cast<double>(reductions_in_flight(depth));
        const size_t bucket_numel =
            std::max<size_t>(1, static_cast<size_t>(plan.bucket_bytes / static_cast<double>(dtype_size(reduce))));
        // The buckets start in backward order and the oldest completes first: the most in
        // flight is the largest sum of K consecutive ones.
        const std::vector<GradBucket> buckets = make_grad_buckets(extents, bucket_numel, reduce == grads);
        const size_t K = static_cast<size_t>(in_flight);
        double window = 0;
        for (size_t i = 0; i < buckets.size(); ++i) {
            double sum = 0;
            for (size_t j = i; j < std::min(buckets.size(), i + K); ++j) sum += static_cast<double>(buckets[j].numel);
            window = std::max(window, sum * dtype_size(reduce));
        }
        const double wire = reduce == grads ? std::min(arena, window) : in_flight * largest * dtype_size(reduce);
        plan.items.push_back({"mpi buffers", wire, "MPI's copies of the gradient buckets in flight (DDP)"});
    }
}

/// The CPU products' fp32 scratch under 16-bit activations. With bf16 products, the LM head's
/// input gradient's partial sums (cpu_reduction_slice_floats). Without them (no bf16
/// instructions, or fp16), every product widens its operands into one fp32 scratch, kept at
/// the largest product's size (cpu_widened_operand_floats). The products' shapes are the
/// rank's 2-D weights (or, without a manifest, the LM head's, the largest) at a micro-batch's
/// rows.
void add_widened_operands_item(const Config& cfg, const std::optional<ModelLayout>& layout, int tensor,
                               std::vector<MemoryItem>& items) {
    const DType act = cfg.precision.dtype;
    const ModelConfig& m = cfg.model;
    const int rows = cfg.train.micro_batch * m.seq_len;
    if (act == DType::kBF16 && cpu_bf16_products().native) {
        // bf16 products: the LM head's input gradient sums its vocabulary slices in fp32.
        const size_t sums = cpu_reduction_slice_floats(rows, m.n_embd, m.padded_vocab() / std::max(1, tensor));
        if (sums > 0) {
            items.push_back({"head slices", static_cast<double>(sums) * sizeof(float),
                             "the LM head's input gradient summed over vocabulary slices in fp32"});
        }
        return;
    }
    if (act == DType::kF32) return;
    size_t most = cpu_widened_operand_floats(rows, m.n_embd, m.padded_vocab() / std::max(1, tensor));
    if (layout) {
        for (const ParamSpec& p : layout->params) {
            if (p.shape.size() != 2) continue;
            most = std::max(most, cpu_widened_operand_floats(rows, static_cast<int>(p.shape[1]),
                                                             static_cast<int>(p.shape[0])));
        }
    }
    items.push_back({"operands", static_cast<double>(most) * sizeof(float),
                     str("16-bit products' operands widened to fp32 (no ", dtype_name(act), " products on this CPU)")});
}

/// The plan of rank `at` with communication running `overlap_depth` units ahead of compute.
MemoryPlan plan_at_depth(const Config& cfg, int world_size, int ranks_per_node, double attention_scratch_floats,
                         double baseline_bytes, bool device, int overlap_depth, const ExampleRunSizes* examples,
                         const PlannedRank& at) {
    MemoryPlan plan;
    plan.overlap_depth = overlap_depth;
    plan.world_size = world_size;
    plan.ranks_per_node = ranks_per_node;
    const int zero_stage = cfg.parallel.zero_stage;
    // Tensor and pipeline parallelism: a rank's split of its pipeline stage, its state sharded over the
    // world / (T P) data-parallel ranks.
    const int tensor = plan.tensor = at.tensor;
    plan.pipeline = at.pipeline_stages;
    plan.pipeline_stage = at.pipeline_stage;
    const int data_ranks = std::max(1, world_size / (tensor * at.pipeline_stages));
    // As DeviceMesh: a node holds ranks_per_node / T of a stage's data ranks (a stage smaller
    // than a node shares it with other stages).
    const int pipeline_stage_per_node = std::min(ranks_per_node, world_size / at.pipeline_stages);
    const int node_data =
        pipeline_stage_per_node > 0 && pipeline_stage_per_node % tensor == 0 ? pipeline_stage_per_node / tensor : 0;
    const int group = plan.shard_group =
        resolve_shard_group(cfg.parallel.shard_group.ranks, data_ranks, node_data, zero_stage);
    plan.zero_stage = zero_stage;
    plan.device = device;
    plan.recompute = cfg.train.recompute;
    const ModelConfig& m = cfg.model;
    const TrainConfig& t = cfg.train;
    const DType work = stored_dtype(cfg);  // the state's; activations are precision.dtype's
    const DType reduce = cfg.precision.reduce();
    const Family& family = model_family(m);
    const double model_params = family.parameter_count(m);
    const bool manifest = m.n_layer <= kManifestMaxLayers;
    std::optional<ModelLayout> layout;
    const PipelineShape shape{at.pipeline_stages, t.grad_accum, cfg.parallel.chunks()};
    if (manifest) layout = make_model_layout(m, TensorSplit{tensor, 0});
    if (manifest && at.pipeline_stages > 1) {
        layout = PipelineRunner::stage_state_layout(*layout, shape, at.pipeline_stage, at.blocks.first_layer);
    }
    // A rank's share (the few whole tensors aside; a stage's share of the closed form is even).
    const double params =
        layout ? static_cast<double>(layout->total_numel) : model_params / tensor / at.pipeline_stages;
    const ZeroMemoryFormulas f =
        zero_memory_formulas(zero_stage, group, static_cast<size_t>(std::min(params, 1e18)), work, grads_dtype(cfg));
    plan.bucket_bytes =
        cfg.parallel.bucket_mb > 0 ? cfg.parallel.bucket_mb * 1048576.0 : ddp_bucket_bytes(params * dtype_size(reduce));
    // checkpoint.async's host snapshot: fp32 master, m and v of the largest rank's primary
    // ranges (CheckpointSnapshot::planned_bytes where the manifest exists).
    double snapshot_bytes = 12.0 * params / (zero_stage > 0 ? group : 1);
    size_t largest_written_range = SIZE_MAX;  // no manifest: assume full pieces
    if (!layout) {
        // No manifest: the ZeRO formulas over the closed-form count (no shard padding, no
        // per-unit scratch; the shape is refused long before those would matter).
        plan.items.push_back({"params", f.params.bytes, f.params.formula});
        plan.items.push_back({"grads", f.grads.bytes, f.grads.formula});
        plan.items.push_back({"master", f.master.bytes, f.master.formula});
        plan.items.push_back({"optimizer", f.optimizer.bytes, f.optimizer.formula});
    } else {
        add_state_items(plan, *layout, f, cfg, work, reduce, &snapshot_bytes, &largest_written_range);
    }
    MemoryItem act = activation_item(cfg, cfg.precision.dtype, attention_scratch_floats, tensor);
    if (at.pipeline_stages > 1) {
        // Every model the stage holds: 1F1B keeps P - s micro-batches in flight on stage s.
        act.bytes = planned_attention(
                        cfg, PipelineRunner::stage_activations(
                                 pipeline_schedule_kind(cfg.parallel), shape, at.pipeline_stage, at.blocks.first_layer,
                                 m, t.micro_batch, planned_recompute(cfg),
                                 static_cast<size_t>(std::max(0.0, attention_scratch_floats)), tensor,
                                 cfg.parallel.sequence && tensor > 1))
                        .bytes(cfg.precision.dtype);
        act.what += str(", the models of stage ", at.pipeline_stage, "'s micro-batches in flight");
    }
    plan.items.push_back(act);
    if (!device) add_widened_operands_item(cfg, layout, tensor, plan.items);
    plan.items.push_back({"tokens", Transformer::token_bytes(m, t.micro_batch, tensor), "inputs and targets (int32)"});
    // An example run's host buffers (on a GPU run too, but the plan there counts device memory).
    if (examples != nullptr && !device) add_example_items(cfg, *examples, plan.items);
    if (!device && async_saves_planned(cfg)) {
        plan.items.push_back({"ckpt snapshot", snapshot_bytes,
                              "owned master, m, v copied for background writes (checkpoint.async)"});
    }
    if (!device) {
        const double staging = kInitPieceBytes + static_cast<double>(save_staging_bytes(largest_written_range));
        plan.items.push_back({"host staging", staging, "initial values, checkpoint I/O (4 MiB each at most)"});
        plan.items.push_back({"baseline", baseline_bytes, "this process before allocating (MPI, OpenMP, BLAS)"});
    }
    plan.tokens_per_step = static_cast<double>(t.micro_batch) * t.grad_accum * data_ranks * m.seq_len;
    plan.flops_per_step = plan.tokens_per_step * family.flops_per_token(m);
    if (!device) {
        plan.available = host_available_bytes();
        plan.available_what = "MemAvailable in /proc/meminfo";
    }
    return plan;
}

/// The plan of the rank that needs the most: under pipeline parallelism every stage is
/// planned, the largest kept, and every stage's peak per rank recorded.
MemoryPlan plan_largest_rank(const Config& cfg, int world_size, int ranks_per_node, double attention_scratch_floats,
                             double baseline_bytes, bool device, int overlap_depth, const ExampleRunSizes* examples) {
    PlannedRank at;
    at.tensor = std::max(1, cfg.parallel.tensor);
    at.pipeline_stages = std::max(1, cfg.parallel.pipeline);
    if (at.pipeline_stages == 1) {
        return plan_at_depth(cfg, world_size, ranks_per_node, attention_scratch_floats, baseline_bytes, device,
                             overlap_depth, examples, at);
    }
    at.blocks = pipeline_blocks(cfg);
    std::vector<MemoryPlan> stages;
    std::vector<double> peaks;
    for (at.pipeline_stage = 0; at.pipeline_stage < at.pipeline_stages; ++at.pipeline_stage) {
        stages.push_back(plan_at_depth(cfg, world_size, ranks_per_node, attention_scratch_floats, baseline_bytes,
                                       device, overlap_depth, examples, at));
        peaks.push_back(stages.back().per_rank());
    }
    MemoryPlan plan = stages[static_cast<size_t>(std::max_element(peaks.begin(), peaks.end()) - peaks.begin())];
    plan.stage_per_rank = peaks;
    return plan;
}

}  // namespace

double ddp_bucket_bytes(double gradient_wire_bytes) {
    constexpr double kMiB = 1048576.0;
    return std::min(25 * kMiB, std::max(1 * kMiB, gradient_wire_bytes / 8));
}

MemoryPlan plan_memory(const Config& cfg, int world_size, int ranks_per_node, double attention_scratch_floats,
                       double baseline_bytes, bool device, double device_available,
                       const ExampleRunSizes* examples) {
    const std::optional<MemoryItem> corpora = device ? std::nullopt : blend_item(cfg);
    auto at = [&](int depth) {
        MemoryPlan p = plan_largest_rank(cfg, world_size, ranks_per_node, attention_scratch_floats, baseline_bytes,
                                         device, depth, examples);
        if (corpora) p.items.push_back(*corpora);
        if (device && device_available > 0) {
            p.available = device_available;
            p.available_what = "free GPU memory (cudaMemGetInfo)";
        }
        return p;
    };
    const int asked = cfg.parallel.overlap_depth;
    if (asked > 0) return at(asked);
    // The plan's choice: the deeper overlap where the node has room for its buffers (one
    // more gathered unit and one more reduction's buffers), else depth 1.
    MemoryPlan deep = at(kAutoOverlapDepth);
    if (plan_fits(deep)) return deep;
    return at(1);
}

MemoryPlan plan_for_deck(const Config& cfg, int world_size, int ranks_per_node) {
    const ModelConfig& m = cfg.model;
    const int threads = threads_per_rank(cfg.train.threads, ranks_per_node);
    const PlannedBackend backend =
        planned_backend(setting_text(cfg.backend), cfg.train.micro_batch, m.seq_len,
                        m.n_head / std::max(1, cfg.parallel.tensor), threads);
    std::optional<ExampleRunSizes> examples;
    if (is_example_shard(cfg.data.train, "data.train")) examples = read_example_run_sizes(cfg);
    return plan_memory(cfg, world_size, ranks_per_node, backend.attention_scratch_floats, measured_baseline_bytes(),
                       backend.capabilities.device_memory, 0, examples ? &*examples : nullptr);
}

std::string format_memory_plan(const MemoryPlan& plan) {
    std::ostringstream os;
    os << "memory plan per rank (" << (plan.device ? "GPU" : "host") << " memory), " << plan.world_size
       << " rank(s), " << plan.ranks_per_node << " per node, "
       << (plan.tensor > 1 ? str("tensor ", plan.tensor, " (each rank's slices), ") : std::string())
       << (plan.pipeline > 1 ? str("pipeline ", plan.pipeline, " (stage ", plan.pipeline_stage, "'s ranks, which need "
                                   "the most), ")
                             : std::string())
       << sharding_text(plan) << ":\n";
    char line[256];
    for (const MemoryItem& i : plan.items) {
        std::snprintf(line, sizeof line, "  %-14s %12s   %s\n", i.name.c_str(), human(i.bytes).c_str(), i.what.c_str());
        os << line;
    }
    std::snprintf(line, sizeof line, "  %-14s %12s   (largest: %s)\n", "peak per rank", human(plan.per_rank()).c_str(),
                  plan.largest().name.c_str());
    os << line;
    for (size_t k = 0; k < plan.stage_per_rank.size(); ++k) {
        std::snprintf(line, sizeof line, "  %-14s %12s\n", str("  stage ", k).c_str(),
                      human(plan.stage_per_rank[k]).c_str());
        os << line;
    }
    if (!plan.device) {
        std::snprintf(line, sizeof line, "  %-14s %12s   %d rank(s) on this node\n", "peak per node",
                      human(plan.per_node()).c_str(), plan.ranks_per_node);
        os << line;
    }
    if (plan.available > 0) {
        std::snprintf(line, sizeof line, "  %-14s %12s   %s\n", "available", human(plan.available).c_str(),
                      plan.available_what.c_str());
        os << line;
    }
    std::snprintf(line, sizeof line, "tokens per step %.0f, training FLOPs per step %.3g\n", plan.tokens_per_step,
                  plan.flops_per_step);
    os << line;
    if (plan.zero_stage == 0) os << "DDP gradient buckets of " << human(plan.bucket_bytes) << "\n";
    os << "overlap depth " << plan.overlap_depth << ": " << (plan.zero_stage == 3 ? "units gathered ahead of compute, " : "")
       << "reductions in flight " << reductions_in_flight(plan.overlap_depth) << "\n";
    return os.str();
}

std::string check_memory_plan(const MemoryPlan& plan, MemoryCheck mode, Communicator& comm) {
    std::string problem;
    if (mode != MemoryCheck::kOff && plan.available > 0 && plan.per_node() > 0.95 * plan.available) {
        const MemoryItem& big = plan.largest();
        std::string hint;
        if (big.name == "activations" || big.name == "tokens") {
            hint = "a smaller train.micro_batch (with train.grad_accum for the same batch)";
            if (plan.recompute == ActivationRecompute::kNone) hint += ", train.recompute = attention or true";
            if (plan.recompute == ActivationRecompute::kAttention) hint += ", train.recompute = true";
        } else if (big.name == "ckpt snapshot") {
            hint = "checkpoint.async = false (synchronous saves need no snapshot), a higher parallel.zero_stage, or "
                   "more ranks";
        } else {
            hint = "a higher parallel.zero_stage, or more ranks";
        }
        problem = str("predicted peak memory ", human(plan.per_node()), " (", human(plan.per_rank()), " per rank x ",
                      plan.ranks_per_node, " rank(s) on this node) exceeds the ", human(plan.available),
                      " available (", plan.available_what, ", less a 5% margin); the largest item is ", big.name, " (",
                      human(big.bytes), ": ", big.what, "). To fit: ", hint,
                      ", or a smaller model; ztrain --plan shows the whole table. run.memory_check = warn or off "
                      "runs it anyway");
    }
    // Agreed: a rank on a fuller node refuses only together with every other rank.
    agree_across_ranks(comm, [&] {
        if (!problem.empty() && mode == MemoryCheck::kStrict) throw InputError(problem);
    });
    return problem;
}

bool plan_fits(const MemoryPlan& plan) { return plan.available <= 0 || plan.per_node() <= 0.95 * plan.available; }

std::string plan_verdict(const Config& cfg, const MemoryPlan& plan, int world_size, int ranks_per_node,
                         const std::function<MemoryPlan(const Config&)>& replan) {
    const auto plan_of = [&](const Config& changed) {
        return replan ? replan(changed) : plan_for_deck(changed, world_size, ranks_per_node);
    };
    if (plan.available <= 0) {
        return str("verdict: not checked here: compare the peak per rank, ", human(plan.per_rank()),
                   plan.device ? ", with each GPU's memory (less what the CUDA context takes)\n"
                               : ", with what each node has\n");
    }
    if (plan_fits(plan)) {
        return str("verdict: fits (peak per node ", human(plan.per_node()), " of ", human(0.95 * plan.available),
                   " usable: the available less a 5% margin)\n");
    }
    std::ostringstream os;
    os << "verdict: does not fit: " << human(plan.per_node() - 0.95 * plan.available)
       << " over on each node (peak per node " << human(plan.per_node()) << ", usable " << human(0.95 * plan.available)
       << ": the available less a 5% margin)\n";
    // The changes one at a time; where none fits alone, the cheapest first, added up until
    // the plan fits (a later micro_batch replaces an earlier one).
    bool any_alone = false;
    std::vector<std::string> keys_shown;  // one change per key: the smallest that fits
    os << "changes that would fit, cheapest first (predicted peak per node):\n";
    for (const PlanChange& change : candidate_changes(cfg, world_size)) {
        const std::string key = change.what.substr(0, change.what.find('='));
        if (std::find(keys_shown.begin(), keys_shown.end(), key) != keys_shown.end()) continue;
        const MemoryPlan alone = plan_of(change.cfg);
        if (plan_fits(alone)) {
            os << "  " << change.what << "   " << human(alone.per_node()) << "\n";
            keys_shown.push_back(key);
            any_alone = true;
        }
    }
    if (any_alone) return os.str();
    Config together = cfg;
    std::string line;
    double together_peak = plan.per_node();
    std::vector<std::pair<std::string, std::string>> flags;  // (key, flag), in the order first set
    for (std::vector<PlanChange> next = candidate_changes(together, world_size); !next.empty();
         next = candidate_changes(together, world_size)) {
        together = next.front().cfg;
        const std::string& flag = next.front().what;
        const std::string key = flag.substr(0, flag.find('='));
        auto same = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == key; });
        if (same == flags.end()) flags.emplace_back(key, flag);
        else same->second = flag;
        line.clear();
        for (const auto& f : flags) line += (line.empty() ? "" : " ") + f.second;
        const MemoryPlan plan_now = plan_of(together);
        together_peak = plan_now.per_node();
        if (plan_fits(plan_now)) {
            os << "  none alone; together: " << line << "   " << human(together_peak) << "\n";
            return os.str();
        }
    }
    os << "  none, not even all of them together (" << (line.empty() ? "no change applies" : line) << ": "
       << human(together_peak) << "): more nodes (with parallel.zero_stage >= 1) or a smaller model\n";
    return os.str();
}

}  // namespace zt
