// The model in training on one rank: the stages of it this rank holds (the whole model when
// parallel.pipeline = 1), their models and model state, and every pass over them that the
// run makes: the training step, the validation loss, the next-token logits of a sample, the
// per-position losses of the multiple-choice tasks, and the final parameters. The trainer,
// the Evaluator and the ChoiceEvaluator go through this interface alone, whatever the mesh
// (zt-eval holds the model whole and runs the inference path instead: choice_eval.hpp).
//
// A step is a schedule of forward and backward passes over the stages held
// (parallel/pipeline_runner.hpp): a run without a pipeline is the one-stage schedule, each
// micro-batch's forward then its backward, the model state reducing each unit's gradient as
// it is final; a pipeline's stage runs parallel.schedule's passes, its ZeRO-2/3 state
// reducing once per step, and the stages agree on the loss, the norm and the overflow
// verdict (unit 0, which the first and the last stage both hold, summed between them).
//
// The loss is normalised by the global token count (dloss = scale / (micro_batch * T *
// grad_accum * data ranks)), so the sum of every rank's gradient is the gradient of the
// global mean loss, for any world size. Global sample j of step s is sample g = s *
// global_batch + j of the run; data rank r's micro-batch a covers j in [(r * grad_accum + a)
// * micro_batch, ... + micro_batch), on every stage of its pipeline. One rank with N-way
// accumulation therefore sees exactly the sequences N ranks see. On example shards the same
// indices are global rows of examples, and dloss = scale / (the global batch's target
// tokens), counted before the passes (example_feed.hpp).
// Not here: when to evaluate, the reports, the checkpoints (the trainer's loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"
#include "ztrain/train/step_reporter.hpp"

namespace zt {

class ModelState;
class StepReporter;
class Transformer;
struct MemoryPlan;
struct TrainOptions;
struct TrainSetup;

/// What one step produced.
struct StepOutcome {
    double loss = 0.0;       ///< global mean train loss
    double lr = 0.0;
    double grad_norm = 0.0;  ///< unscaled global norm (not finite when the step was skipped)
    double loss_scale = 1.0; ///< the scale the step ran with
    LossScalePolicy::Verdict verdict;
    PhaseTimes phases;
    double step_s = 0.0;     ///< wall time of the whole step
    /// Example shards: the step's target tokens and rows over all ranks (0 otherwise).
    uint64_t targets = 0;
    uint64_t rows = 0;
};

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
    /// same leading windows, or example rows, every time): windows, the mean of their
    /// micro-batch means; example shards, the loss over every target. Needs validation data
    /// (TrainSetup::has_validation). `corpus`: which corpus of a data.val blend (0 otherwise).
    /// Collective.
    virtual double val_loss(size_t corpus) = 0;
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

/// This rank's stages of `cfg`'s model over `setup`'s mesh (and its op profile, when on),
/// with the model state's communication overlap and bucket from `plan`, the loss scale
/// `loss_scale` and the test hooks of `options` (all of which outlive it).
std::unique_ptr<StageTraining> make_stage_training(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale,
                                                   const MemoryPlan& plan, const TrainOptions& options);

}  // namespace zt
