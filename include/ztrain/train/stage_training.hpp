// The model in training on one rank: the stages of it this rank holds (the whole model when
// parallel.pipeline = 1), their models and model state, and every pass over them that the
// run makes: the training step, the validation loss, the next-token logits of a sample, the
// per-position losses of the multiple-choice tasks, and the final parameters. The trainer,
// the Evaluator and the ChoiceEvaluator go through this interface alone, whatever the mesh.
//
// A step is a schedule of forward and backward passes over the stages held:
//   - one stage (parallel.pipeline = 1): forward + backward per micro-batch, grad_accum of
//     them (TrainStep, train_step.hpp), the model state reducing as each unit finishes;
//   - a pipeline (parallel.pipeline > 1): the stage's models and PipelineRunner's schedule
//     (src/train/pipeline_training.hpp), the stages agreeing on the loss, the norm and the
//     overflow verdict.
// Not here: when to evaluate, the reports, the checkpoints (the trainer's loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/train/train_step.hpp"

namespace zt {

class LossScalePolicy;
class ModelState;
class StepReporter;
class Transformer;
struct MemoryPlan;
struct TrainOptions;
struct TrainSetup;

class StageTraining {
  public:
    virtual ~StageTraining() = default;

    /// The first model this rank holds (the reporter's view: layout, one slot's activations)
    /// and the state of every unit it holds.
    virtual Transformer& model() = 0;
    virtual ModelState& state() = 0;
    /// The activation bytes of every model this rank holds.
    virtual size_t activation_bytes() const = 0;
    /// A line for the log on what the stages are ("" for one stage).
    virtual std::string describe() const = 0;

    /// Runs 0-based step `step` from `progress` (its data cursor and applied-step count) and
    /// advances `progress` past it; `reporter` hears of a skipped step. Collective.
    virtual StepOutcome step(long step, TrainProgress& progress, StepReporter& reporter) = 0;
    /// The mean validation loss over train.eval_batches micro-batches per data rank (the
    /// same leading windows, or example rows, every time; example shards: the loss over
    /// every target). Needs validation data (TrainSetup::has_validation). Collective.
    virtual double val_loss() = 0;
    /// Writes the logits (host memory, model.padded_vocab() floats, the same on every rank)
    /// of the last of the T tokens at `window`, after a forward over them: a sample's draw
    /// (evaluator.hpp's NextLogits). Collective.
    virtual void next_logits(const int32_t* window, int T, float* row) = 0;
    /// A forward over B (at most train.micro_batch) rows of T tokens and their per-position
    /// losses (B*T, host memory, the same on every rank): the multiple-choice tasks' forward
    /// (choice_eval.hpp's PositionLosses). Collective.
    virtual const float* position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) = 0;
    /// Every unit's full parameters in unit order (TrainSummary::final_params), on every
    /// rank. Collective.
    virtual std::vector<float> gather_params() = 0;
};

/// Refuses, before anything is written, what the stages of `cfg` cannot run yet (every rank
/// reads the same deck, so every rank refuses alike): backend = cuda with a pipeline.
void check_stages(const Config& cfg, const TrainSetup& setup);

/// This rank's stages of `cfg`'s model over `setup`'s mesh, with the model state's
/// communication overlap and bucket from `plan`, the loss scale `loss_scale` and the test
/// hooks of `options` (which outlive it).
std::unique_ptr<StageTraining> make_stage_training(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale,
                                                   const MemoryPlan& plan, const TrainOptions& options);

}  // namespace zt
