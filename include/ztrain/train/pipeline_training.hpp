// One rank's part of a pipeline-parallel run (parallel.pipeline > 1): its stage's models (one
// per chunk and micro-batch in flight, parallel/pipeline_runner.hpp), its stage's model state
// (the stage's units only, sharded over the stage's data-parallel ranks), and the step and the
// validation loss agreed across the stages:
//   - unit 0's gradient lives on the first and the last stage; after the gradient sync the two
//     add each other's, so both take the same AdamW step;
//   - the gradient norm and the overflow verdict sum every stage's (unit 0 counted once);
//   - the loss is the last stage's, summed over the pipeline so rank 0 reports the true loss
//     of the global batch.
// The trainer's loop (trainer.cpp) drives it like TrainStep and saves and loads its state
// (a stage's units, in the whole model's layout), and samples through the stages. Not here
// yet: the GPU (the trainer refuses backend = cuda).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"
#include "ztrain/train/train_step.hpp"

namespace zt {

struct TrainSetup;

class PipelineTraining {
  public:
    /// Builds this rank's models and state from `setup` (its mesh has the pipeline), the
    /// state's communication `overlap_depth` units ahead (the memory plan's).
    PipelineTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale, int overlap_depth);
    ~PipelineTraining();

    /// The stage's first model (the reporter's view of the model: layout, one slot's
    /// activations) and its state.
    Transformer& model() { return *m_owned[0][0]; }
    ModelState& state() { return *m_state; }
    const PipelineStages& split() const { return m_split; }
    /// The activation bytes of every model this rank holds.
    size_t activation_bytes() const;

    /// Runs 0-based step `step`, as TrainStep::run (`reporter` hears of a skipped step).
    /// Collective over the world.
    StepOutcome step(long step, TrainProgress& progress, StepReporter& reporter);
    /// Every unit's full parameters in unit order (TrainSummary::final_params): each gathered
    /// by the stage that holds it and broadcast over the pipeline. Collective over the world.
    std::vector<float> gather_params();
    /// Whether the run has validation data (data.val: windows or example rows).
    bool has_validation() const;
    /// The mean validation loss over train.eval_batches micro-batches per data rank (the
    /// same leading windows, or example rows, every time). Collective over the world.
    double val_loss();
    /// `n` tokens sampled after `prompt` as `generate` (evaluator.hpp) draws them on one rank:
    /// each token's forward runs through the stages, and the last stage's logits row is
    /// broadcast over the pipeline, so every rank draws the same token. Collective over the world.
    std::vector<uint32_t> generate(const std::vector<uint32_t>& prompt, int n, uint64_t seed, long step,
                                   std::optional<uint32_t> stop = std::nullopt);
    /// A forward over B (at most train.micro_batch) rows of T tokens through the stages, and
    /// the last stage's per-position losses (B*T, broadcast over the pipeline): the
    /// multiple-choice tasks' forward (choice_eval.hpp's PositionLosses). Collective over the world.
    const float* position_losses(const int32_t* inputs, const int32_t* targets, int B, int T);

  private:
    /// Micro-batch a of the buffers the step or the evaluation filled.
    PipelineMicroBatch micro_batch(int a);
    /// The global squared gradient norm, or NaN on every rank when any stage overflowed.
    double agreed_sum_squares();

    const Config& m_cfg;
    TrainSetup& m_setup;
    LossScalePolicy& m_loss_scale;
    PipelineStages m_split;
    std::unique_ptr<PipelineRunner> m_runner;
    std::vector<std::vector<std::unique_ptr<Transformer>>> m_owned;
    std::vector<std::vector<Transformer*>> m_models;
    ModelLayout m_layout;  ///< the stage's units (stage_layout); m_state keeps a reference
    std::unique_ptr<ModelState> m_state;
    /// The first and the last stage (unit 0's holders); null on the others.
    MPI_Comm m_ends_mpi = MPI_COMM_NULL;
    std::unique_ptr<Communicator> m_ends;
    long m_global_batch = 0;
    /// The micro-batches of a step or an evaluation (tokens and targets; on example shards
    /// also the packed rows' positions and segments).
    std::vector<RowBatch> m_batches;
    std::vector<int32_t> m_window;  ///< a sample's context, one forward at a time
    std::vector<float> m_losses;    ///< position_losses' result
};

}  // namespace zt
