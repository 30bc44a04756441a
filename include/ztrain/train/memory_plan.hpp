// Each rank's peak memory predicted from the deck alone, before anything is allocated: the
// model state (ModelState::plan_bytes: the same size functions its parts allocate with),
// activations (Transformer::activation_floats: the figure the model's constructor checks it
// allocated), the staging buffers, and this process's measured baseline (MPI, OpenMP and
// OpenBLAS runtimes, CUDA context: its resident set when the plan is made). `ztrain --plan`
// prints it; every run checks it against what the node has (run.memory_check).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"

namespace zt {

class Communicator;
struct ExampleRunSizes;

struct MemoryItem {
    std::string name;
    double bytes = 0;   ///< per rank
    std::string what;   ///< what it holds, or the formula it follows
};

struct MemoryPlan {
    int world_size = 1;
    int ranks_per_node = 1;
    int shard_group = 1;             ///< the ranks the state is split over (the ZeRO formulas' N)
    int tensor = 1;                  ///< parallel.tensor: each rank's items are its split's
    int pipeline = 1;                ///< parallel.pipeline: the items are those of stage pipeline_stage,
    int pipeline_stage = 0;          ///< the stage whose ranks need the most
    std::vector<double> stage_per_rank;  ///< pipeline > 1: each stage's peak per rank
    int zero_stage = 0;              ///< what is split: nothing (0), optimizer state (1), + grads (2), + params (3)
    bool device = false;             ///< the items live in GPU memory (backend = cuda)
    /// train.recompute (kBlocks: the activations are already minimal)
    ActivationRecompute recompute = ActivationRecompute::kNone;
    std::vector<MemoryItem> items;   ///< per rank
    double available = 0;            ///< bytes this node (host) or device has free; 0: unknown
    std::string available_what;      ///< where `available` comes from
    double tokens_per_step = 0;
    double flops_per_step = 0;       ///< 6 N_params tokens + attention (training, per step)
    /// How far communication runs ahead of compute (ModelState's overlap_depth): the deck's
    /// parallel.overlap_depth, or where that is 0 the plan's choice, kAutoOverlapDepth when
    /// the plan at that depth fits the node, else 1.
    int overlap_depth = 1;
    /// DDP's gradient bucket (bytes of the wire dtype): parallel.bucket_mb, or where that is 0
    /// the plan's choice (ddp_bucket_bytes).
    double bucket_bytes = 0;
    double per_rank() const;
    /// A host plan's node: ranks_per_node ranks (of a pipeline: consecutive ranks, whose
    /// stages the node holding the most determines).
    double per_node() const;
    const MemoryItem& largest() const;
};

/// DDP's gradient bucket when parallel.bucket_mb is 0: an eighth of the gradients' wire
/// bytes, so the first all-reduce starts early in backward and the rest overlap it, kept
/// between 1 MiB (below, per-message latency dominates) and 25 MiB (PyTorch DDP's bucket).
double ddp_bucket_bytes(double gradient_wire_bytes);

/// The plan for cfg on `world_size` ranks, `ranks_per_node` of them per node; the state is
/// split over parallel.shard_group's groups (resolve_shard_group: InputError when it does
/// not divide the world). `attention_scratch_floats` is the backend's (Backend::attention_scratch_floats) and
/// `baseline_bytes` what a rank holds before allocating (measured_baseline_bytes()).
/// Never allocates a model-sized buffer; an absurd shape (n_layer = 10^6) is planned from
/// the closed-form parameter count without building the tensor manifest.
/// `device_available`: a GPU plan's free device memory (0: unknown; host plans read
/// MemAvailable themselves). `examples`: the example shards' header counts of a run on
/// example shards (null for pretraining shards), which add the example feed's host
/// buffers (ExampleFeed::planned_bytes) and, for packed rows, the model's row segments.
MemoryPlan plan_memory(const Config& cfg, int world_size, int ranks_per_node, double attention_scratch_floats,
                       double baseline_bytes, bool device, double device_available = 0,
                       const ExampleRunSizes* examples = nullptr);

/// The plan `ztrain --plan` prints: cfg on `world_size` ranks, `ranks_per_node` per node,
/// with the attention scratch of the backend cfg names (a CPU backend is made to ask it;
/// cuda's: cuda_attention_scratch_floats) and this process's baseline. On example shards
/// (data.train is one) their headers are read for their counts, nothing more.
MemoryPlan plan_for_deck(const Config& cfg, int world_size, int ranks_per_node);

/// This process's resident set now (VmRSS), in bytes; 0 when unknown.
double measured_baseline_bytes();
/// This process's peak resident set so far (VmHWM), in bytes; 0 when unknown.
double measured_peak_bytes();
/// The node's MemAvailable (bytes, /proc/meminfo); 0 when unknown.
double host_available_bytes();

/// The table `ztrain --plan` prints and the start-up line summarizes.
std::string format_memory_plan(const MemoryPlan& plan);

/// Whether the plan fits what its node has (less the 5% margin run.memory_check keeps).
bool plan_fits(const MemoryPlan& plan);

/// `ztrain --plan`'s verdict on cfg at `world_size` ranks, `ranks_per_node` per node: "fits",
/// or "does not fit: X over on each node" followed by the cheapest changes that would fit
/// (a higher ZeRO stage, recompute, a smaller micro_batch with the grad_accum that keeps
/// the batch, bf16), each with its predicted peak, and their combination when none fits
/// alone. GPU plans name the peak to compare with the GPU's memory (not known here).
/// `replan`: how a changed deck is planned (null: plan_for_deck on this node; a cluster's
/// plan passes its own, plan_memory_on_cluster).
std::string plan_verdict(const Config& cfg, const MemoryPlan& plan, int world_size, int ranks_per_node,
                         const std::function<MemoryPlan(const Config&)>& replan = nullptr);

/// Whether the plan fits in `available` less a 5% margin. For a plan that does not: with
/// run.memory_check = strict throws InputError carrying the predicted and available bytes,
/// the largest item and the settings that would shrink it; with warn returns that text as
/// a warning; off returns "". Every rank must call it (the verdict is agreed on `comm`, so
/// no rank allocates while another refuses).
std::string check_memory_plan(const MemoryPlan& plan, MemoryCheck mode, Communicator& comm);

}  // namespace zt
