// One rank's stage of a pipeline-parallel run (parallel.pipeline > 1), as StageTraining
// (stage_training.hpp): its stage's models (one per chunk and micro-batch in flight,
// parallel/pipeline_runner.hpp), its stage's model state (the stage's units only, sharded
// over the stage's data-parallel ranks), and the step and the evaluations agreed across the
// stages:
//   - unit 0's gradient lives on the first and the last stage; after the gradient sync the two
//     add each other's, so both take the same AdamW step;
//   - the gradient norm and the overflow verdict sum every stage's (unit 0 counted once);
//   - the loss is the last stage's, summed over the pipeline so rank 0 reports the true loss
//     of the global batch;
//   - the logits of a sample and the per-position losses are the last stage's, broadcast
//     over the pipeline.
// Not here yet: the GPU (check_stages refuses backend = cuda).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"
#include "ztrain/train/stage_training.hpp"
#include "ztrain/train/train_step.hpp"

namespace zt {

struct TrainSetup;

class PipelineTraining final : public StageTraining {
  public:
    /// Builds this rank's models and state from `setup` (its mesh has the pipeline), the
    /// state's communication `overlap_depth` units ahead (the memory plan's).
    PipelineTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale, int overlap_depth);
    ~PipelineTraining() override;
    PipelineTraining(const PipelineTraining&) = delete;
    PipelineTraining& operator=(const PipelineTraining&) = delete;

    Transformer& model() override { return *m_owned[0][0]; }
    ModelState& state() override { return *m_state; }
    size_t activation_bytes() const override;
    /// The stages, the schedule and the blocks of each virtual stage.
    std::string describe() const override;

    StepOutcome step(long step, TrainProgress& progress, StepReporter& reporter) override;
    double val_loss() override;
    /// Each token's forward runs through the stages, and the last stage's logits row is
    /// broadcast over the pipeline, so every rank draws the same token.
    void next_logits(const int32_t* window, int T, float* row) override;
    const float* position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) override;
    /// Each unit gathered by the stage that holds it and broadcast over the pipeline.
    std::vector<float> gather_params() override;

  private:
    /// Micro-batch a of the buffers the step or the evaluation filled.
    PipelineMicroBatch micro_batch(int a);
    /// The global squared gradient norm, or NaN on every rank when any stage overflowed.
    double agreed_sum_squares();

    const Config& m_cfg;
    TrainSetup& m_setup;
    LossScalePolicy& m_loss_scale;
    PipelineStages m_stages;
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
