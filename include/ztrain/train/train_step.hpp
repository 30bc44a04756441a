// One optimizer step on each rank: zero gradients; for each of grad_accum micro-steps, read
// this rank's slice of the global batch, forward (which also seeds dlogits), backward; sum
// gradients across ranks; check them (the loss-scale policy decides apply / skip / stop);
// global-norm clip; AdamW. Not here: evaluation, reporting, checkpoints, stop signals (the
// trainer's loop around it).
//
// The loss is normalised by the global token count (dloss = scale / (micro_batch * T *
// grad_accum * world)), so the sum of every rank's gradient is the gradient of the global
// mean loss, for any world size. Global sample j of step s is sample g = s * global_batch + j
// of the run; rank r's micro-step a covers j in [(r * grad_accum + a) * micro_batch, ... +
// micro_batch). One rank with N-way accumulation therefore sees exactly the sequences N
// ranks see. On example shards (use_examples) the same indices are global rows of examples,
// and dloss = scale / (the global batch's target tokens), counted before the micro-steps
// (example_feed.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"
#include "ztrain/train/collective_watchdog.hpp"
#include "ztrain/train/step_reporter.hpp"

namespace zt {

class BatchSampler;
class ExampleFeed;
class Communicator;
class Transformer;
class ModelState;
class ProfilingBackend;
struct TrainOptions;

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

/// Where micro-step `a` of data rank `rank` starts, in global samples (windows, or example
/// rows) from `step_first`, the step's first: each data rank reads train.grad_accum
/// consecutive micro-batches of train.micro_batch, ranks in order (every stage of a pipeline
/// reads its data rank's).
inline uint64_t micro_batch_first(uint64_t step_first, int rank, const TrainConfig& tc, int a) {
    return step_first + static_cast<uint64_t>((static_cast<long>(rank) * tc.grad_accum + a) * tc.micro_batch);
}

/// Where validation micro-batch `e` of data rank `rank` starts: the same leading samples
/// every evaluation, train.eval_batches micro-batches per rank, ranks in order.
inline uint64_t val_batch_first(int rank, const TrainConfig& tc, int e) {
    return static_cast<uint64_t>(static_cast<long>(rank) * tc.eval_batches * tc.micro_batch +
                                 static_cast<long>(e) * tc.micro_batch);
}

/// The start of every training step (TrainStep, the pipeline's stage): the communicators'
/// counters reset, the gradients zeroed (out.phases.zero) and the loss scale the step runs
/// with read into out.loss_scale, which it returns.
double start_step(const std::vector<Communicator*>& counted, ModelState& state, const LossScalePolicy& loss_scale,
                  StepOutcome& out);

/// After step `step` trained `rows` rows and `tokens` tokens (targets on example shards):
/// progress advanced past it.
void advance_progress(TrainProgress& progress, long step, uint64_t rows, uint64_t tokens);

/// The end of a step, once its gradients are synchronized: the norm from `sum_sq` (the
/// global squared norm of the scaled gradients, NaN when any rank overflowed), the loss-scale
/// policy's verdict on out.loss, and AdamW (unscaled and clipped) unless the step is skipped.
/// Fills out.grad_norm, out.verdict and out.lr (out.loss and out.loss_scale are read);
/// advances progress.applied_steps when applied.
void apply_or_skip(double sum_sq, long step, const TrainConfig& tc, ModelState& state, LossScalePolicy& loss_scale,
                   StepReporter& reporter, TrainProgress& progress, StepOutcome& out);

/// The step of one stage (parallel.pipeline = 1): forward + backward per micro-batch, the
/// model state reducing each unit as its gradient is final (stage_training.hpp).
class TrainStep {
  public:
    /// `comm`: the data-parallel ranks' (the loss); `counted`: every communicator whose
    /// per-step bytes the step's record reports (their counts restart with each step).
    TrainStep(const Config& cfg, Transformer& model, ModelState& state, Communicator& comm, std::vector<Communicator*> counted,
              BatchSampler* sampler, LossScalePolicy& loss_scale, const TrainOptions& options,
              ProfilingBackend* op_profile);

    /// Runs 0-based step `step` from `progress` (its data cursor and applied-step count) and
    /// advances `progress` past it; `reporter` hears of a skipped step. Collective.
    StepOutcome run(long step, TrainProgress& progress, StepReporter& reporter);
    /// Train on example shards instead of the sampler's windows (example_feed.hpp): the loss
    /// is normalised by the global target count, progress counts rows and target tokens.
    void use_examples(ExampleFeed* feed) { m_examples = feed; }

  private:
    const TrainConfig& m_tc;
    Transformer& m_model;
    ModelState& m_state;
    std::unique_ptr<SlowUnitStore> m_slow_units;  ///< ZT_DEBUG_SLOW_UNITS test hook
    UnitStore& m_store;                           ///< what the model runs on: m_state, or the hook
    Communicator& m_comm;
    std::vector<Communicator*> m_counted;
    BatchSampler* m_sampler;  ///< null on example shards (use_examples)
    LossScalePolicy& m_loss_scale;
    const TrainOptions& m_options;
    ProfilingBackend* m_op_profile;  ///< null unless ZT_PROFILE_OPS is on
    ExampleFeed* m_examples = nullptr;
    long m_global_batch;  ///< sequences per optimizer step over all ranks
    std::vector<int32_t> m_inputs;
    std::vector<int32_t> m_targets;
};

}  // namespace zt
