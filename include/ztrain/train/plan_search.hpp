// `ztrain --plan --search`: every mesh of a deck's global batch on a cluster (data, tensor
// with and without sequence parallelism, pipeline with each schedule and virtual stages,
// ZeRO stage, hybrid shard group, recompute, micro-batch and accumulation), those that the
// deck's own checks refuse (validate: heads divisible by T, layers by the virtual stages,
// ...) or whose memory plan does not fit dropped, the rest ranked by the time plan
// (time_plan.hpp). Deliberately not searched: precision (a choice about the model, not the
// mesh), bucket size and overlap depth (the memory plan's choices are kept).
#pragma once

#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/train/time_plan.hpp"

namespace zt {

struct PlanSearchOptions {
    bool all = false;             ///< print every candidate, not the ten fastest
    std::string write_deck;       ///< non-empty: the fastest candidate written there as a deck
    bool cluster_memory = true;   ///< fit in cluster.memory_gib (false: this node's MemAvailable)
};

struct PlanCandidate {
    Config cfg;            ///< the deck with the candidate's mesh
    std::string mesh;      ///< "data 2, tensor 2+sp, ..."
    TimePlan time;
    double peak_gib = 0;   ///< the memory plan's peak per rank
};

struct PlanSearch {
    std::vector<PlanCandidate> fitting;  ///< fastest first
    int refused = 0;                     ///< by the deck's checks (validate, the shard group)
    int too_big = 0;                     ///< by the memory plan
    long long global_batch = 0;          ///< sequences per step, as the deck has it
};

/// The candidates of cfg's global batch (train.micro_batch x train.grad_accum x its data
/// ranks on `world_size` ranks) on the cluster, `ranks_per_node` per node.
PlanSearch search_meshes(const Config& cfg, const ClusterConfig& cluster, int world_size, int ranks_per_node,
                         const PlanSearchOptions& options);

/// The search's table (contract columns predicted_step_ms, tokens_per_s, mfu, peak_gib,
/// bottleneck, then the mesh), the ten fastest or with options.all every candidate; with
/// options.write_deck the fastest is written there (InputError when it cannot be).
std::string search_plans(const Config& cfg, const ClusterConfig& cluster, int world_size, int ranks_per_node,
                         const PlanSearchOptions& options);

}  // namespace zt
