// Which layers each pipeline stage holds (parallel.pipeline = P, v chunks per stage): the
// model's blocks cut into V = P v contiguous runs, virtual stage k on stage k mod P
// (Megatron's interleaved assignment; v = 1 is the plain pipeline). The embedding goes with
// the first run, the final norm, LM head and loss with the last. Balanced by the model's own
// cost per layer, or as given. Pure functions of the model's shape, tested without MPI.
#pragma once

#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/parallel/pipeline_schedule.hpp"

namespace zt {

struct PipelineStages {
    int stages = 1;                ///< P
    int virtual_stages = 1;        ///< v chunks per stage
    std::vector<int> first_layer;  ///< V + 1 entries: virtual stage k holds blocks [first_layer[k], first_layer[k+1])
    std::vector<double> cost;      ///< V entries: each virtual stage's forward FLOPs per token

    int count() const { return stages * virtual_stages; }
    int layers(int k) const { return first_layer[static_cast<size_t>(k) + 1] - first_layer[static_cast<size_t>(k)]; }
    /// The stage (rank of the pipeline) that runs virtual stage k, and its chunk there.
    int stage_of(int k) const { return k % stages; }
    int chunk_of(int k) const { return k / stages; }
    /// The largest virtual stage's cost over the mean: 1 is a perfect balance.
    double imbalance() const;
};

/// Forward FLOPs per token of one block (2 per weight of its products, plus attention's
/// scores and weighted sum over seq_len keys: 4 seq_len n_embd) and of the LM head with its
/// loss (2 padded_vocab n_embd); the embedding's lookup and the norms count as nothing.
double pipeline_block_cost(const ModelConfig& m);
double pipeline_head_cost(const ModelConfig& m);

/// The split with the smallest largest cost, each virtual stage at least one block. Throws
/// InputError naming parallel.pipeline when the model has fewer blocks than P v.
PipelineStages balance_pipeline_layers(const ModelConfig& m, int stages, int virtual_stages);

/// The split given as blocks per virtual stage (parallel.pipeline_layers = 3,4,4,3). Throws
/// InputError naming the key when there are not P v counts, one is below 1, or they do not
/// add up to model.n_layer.
PipelineStages pipeline_layers_as_given(const ModelConfig& m, int stages, int virtual_stages,
                                        const std::vector<int>& blocks);
/// cfg's blocks per virtual stage: parallel.pipeline_layers as given, or balanced
/// (parallel.pipeline stages of ParallelConfig::chunks() chunks).
PipelineStages pipeline_blocks(const Config& cfg);
/// parallel.schedule as the schedules' kind.
PipelineScheduleKind pipeline_schedule_kind(PipelineSchedule s);
/// The kind of schedule the stages of `p` run: parallel.schedule's with a pipeline; one
/// stage's (parallel.pipeline = 1) is 1F1B's, each micro-batch's forward then its backward,
/// whatever parallel.schedule says.
PipelineScheduleKind pipeline_schedule_kind(const ParallelConfig& p);

}  // namespace zt
