// A step's predicted time on a cluster ([cluster] keys, ClusterConfig) for a deck and its
// mesh, from its parts: each matrix product and attention's (FLOPs at the rate of its size
// class and dtype), the element-wise and norm ops (bytes at the memory bandwidth), the
// optimizer, every collective of every group (alpha-beta, ring or tree, intra- or
// inter-node by where the group's ranks sit), what the schedule overlaps (overlap depth,
// DDP buckets, the communication thread), the pipeline's bubble (its schedule run on a
// clock, pipeline_schedule.hpp) and recompute. `ztrain --plan` prints it after the memory
// plan; the search (plan_search.hpp) ranks meshes by it.
//
// Deliberately not modelled: stragglers, the data loader, checkpoint saves, evaluation, the
// first step's warm-up, contention between different groups' collectives on one link.
#pragma once

#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"
#include "ztrain/train/memory_plan.hpp"

namespace zt {

/// Where a group's ranks sit: world ranks `stride` apart, nodes filled by consecutive ranks.
struct GroupPlacement {
    int ranks = 1;          ///< the group's size
    int nodes = 1;          ///< nodes it spans
    int ranks_on_node = 1;  ///< its ranks on each of them
};

/// A group of `ranks` ranks `stride` world ranks apart, from rank 0, on nodes of
/// `ranks_per_node` consecutive ranks.
GroupPlacement place_group(int ranks, int stride, int ranks_per_node);

/// What a group's collective travels over.
struct Link {
    double latency_s = 0;     ///< alpha: per message step
    double bytes_per_s = 1;   ///< beta's inverse: per rank, one way
    bool inter_node = false;
};

/// The link of a group placed as `g`, every one of the `active_ranks_on_node` ranks of its
/// node communicating at once (each group of the same kind runs its collective together):
/// inside a node, the intra link (cpu: the node's bandwidth shared by the active ranks);
/// across nodes, the node's network shared by the groups crossing it (inter x the group's
/// ranks on the node / the active ranks), at most the intra link.
Link group_link(const ClusterConfig& cluster, const GroupPlacement& g, int active_ranks_on_node);

enum class PlannedCollective { kAllReduce, kReduceScatter, kAllGather, kSendRecv };

/// What a backward recomputes: nothing, each block's attention forward or every block's
/// forward (train.recompute = attention, true), or, for a described system, torchtitan's
/// selective op policy (cluster.activation_checkpointing): every second product of a block
/// and its element-wise ops.
enum class Recompute { kNone, kAttention, kFull, kSelectiveOp };

/// The bytes one token moves through one block's element-wise ops in a forward when each op
/// is a kernel of its own, as eager PyTorch runs a transformers or torchtitan block
/// (cluster.elementwise = eager): per norm row (the residual stream: norms and residual adds;
/// split under sequence parallelism) and per row (the heads, rotary, the MLP's activation).
/// `a`: the activations' bytes per element.
struct EagerBlockBytes {
    double per_norm_row = 0;
    double per_row = 0;
};
EagerBlockBytes eager_block_bytes(const ModelConfig& m, int tensor, double a);

struct CollectiveTime {
    double seconds = 0;
    std::string algorithm;  ///< "ring", "tree", "p2p" or "none" (one rank)
};

/// Alpha-beta time of one collective over `ranks` ranks; `bytes`: the whole buffer (an
/// all-reduce's, a reduce-scatter's input, an all-gather's output; a send's message).
///   all-reduce:  ring 2(n-1) a + 2(n-1)/n B/b, tree 2 ceil(log2 n) a + 2 B/b: the faster
///   reduce-scatter, all-gather: ring (n-1) a + (n-1)/n B/b
///   send-receive: a + B/b
CollectiveTime collective_time(PlannedCollective kind, double bytes, int ranks, const Link& link);

/// Seconds of one product of `flops` FLOPs on a rank whose peak is `peak_flops` FLOP/s: the
/// rate peak x product_efficiency x F / (F + product_half_gflop 10^9), so small products run
/// at a fraction of the large ones' rate (their size class).
double product_seconds(double flops, double peak_flops, const ClusterConfig& cluster);

/// One rank's peak FLOP/s and memory bandwidth (bytes/s) in `work`: a GPU's, or a cpu node's
/// shared by the `ranks_on_node` ranks it runs.
double rank_peak_flops(const ClusterConfig& cluster, DType work, int ranks_on_node);
double rank_memory_bytes_per_s(const ClusterConfig& cluster, int ranks_on_node);

/// Seconds a collective of `total_s` takes beyond the compute it overlaps: the part of it
/// after `window_s` of compute, and at least `tail_s` (what can only start once that compute
/// is done: the last bucket or unit). Without overlap, all of it.
double exposed_seconds(double total_s, double window_s, double tail_s, bool overlap);

/// A pipeline's step for uniform passes (seconds per chunk): its schedule run on a clock.
/// `capacity` > 0: the stages share processors, at most that many at full speed at once
/// (run_pipeline_schedule_shared); 0: each has its own.
double pipeline_makespan(PipelineScheduleKind kind, int stages, int micro_batches, int chunks, double forward_s,
                         double backward_input_s, double weight_s, double capacity = 0);

struct TimePhase {
    std::string name;
    double total_ms = 0;    ///< the phase's time per step on the rank that needs the most
    double exposed_ms = 0;  ///< of it, what the step waits for (not overlapped)
    std::string what;
};

struct TimePlan {
    std::vector<TimePhase> phases;
    double step_ms = 0;          ///< the exposed times added up
    double tokens_per_step = 0;
    double tokens_per_s = 0;
    double mfu = 0;              ///< the memory plan's FLOPs per step / (step x world x each rank's peak)
    std::string bottleneck;      ///< the phase with the most exposed time
    std::string cluster_what;    ///< the cluster and mesh, as the table's header says them
};

/// The time of a step of `cfg` on `world_size` ranks, `ranks_per_node` per node, of
/// `cluster`'s machines; `memory`: the memory plan of the same mesh (its overlap depth,
/// bucket size, shard group, tokens and FLOPs per step).
TimePlan plan_time(const Config& cfg, const ClusterConfig& cluster, int world_size, int ranks_per_node,
                   const MemoryPlan& memory);

/// The table `ztrain --plan` prints after the memory plan; its last line is
/// "predicted step: N ms".
std::string format_time_plan(const TimePlan& plan);

/// The memory plan of cfg on the cluster: a GPU cluster's device memory (the cuda backend's
/// attention scratch), a cpu node's host memory; `available` is cluster.memory_gib.
MemoryPlan plan_memory_on_cluster(const Config& cfg, const ClusterConfig& cluster, int world_size,
                                  int ranks_per_node);

}  // namespace zt
