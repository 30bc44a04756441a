#include "ztrain/train/train_step.hpp"

#include <chrono>
#include <cmath>
#include <utility>

#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/collective_watchdog.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

double start_step(const std::vector<Communicator*>& counted, ModelState& state, const LossScalePolicy& loss_scale,
                  StepOutcome& out) {
    const auto t0 = Clock::now();
    for (Communicator* c : counted) c->reset_stats();
    state.zero_grads();
    out.phases.zero = seconds_since(t0);
    out.loss_scale = loss_scale.scale();
    return out.loss_scale;
}

void advance_progress(TrainProgress& progress, long step, uint64_t rows, uint64_t tokens) {
    progress.step = step + 1;
    progress.samples_seen += rows;
    progress.tokens_seen += tokens;
}

void apply_or_skip(double sum_sq, long step, const TrainConfig& tc, ModelState& state, LossScalePolicy& loss_scale,
                   StepReporter& reporter, TrainProgress& progress, StepOutcome& out) {
    const double scale = out.loss_scale;
    out.grad_norm = std::sqrt(sum_sq) / scale;
    // A run that cannot go on stops after this step's record is written (the trainer throws).
    out.verdict = loss_scale.judge(std::isnan(sum_sq), step + 1, out.loss);
    out.lr = learning_rate(tc, progress.applied_steps);
    if (out.verdict.skipped()) {
        reporter.skipped(step + 1, loss_scale.fp16(), scale, loss_scale.scale());
        return;
    }
    // Unscaling and clipping share one multiplier, applied as AdamW reads the gradient.
    AdamWStep sp = adamw_step_params(tc, out.lr, progress.applied_steps + 1);
    sp.grad_scale = static_cast<float>(clip_multiplier(out.grad_norm, tc.grad_clip) / scale);
    state.optimizer_step(sp);
    ++progress.applied_steps;
}

TrainStep::TrainStep(const Config& cfg, Transformer& model, ModelState& state, Communicator& comm,
                     std::vector<Communicator*> counted, BatchSampler* sampler, LossScalePolicy& loss_scale,
                     const TrainOptions& options, ProfilingBackend* op_profile)
    : m_tc(cfg.train),
      m_model(model),
      m_state(state),
      m_store(maybe_slow_units(comm.rank(), state, m_slow_units)),
      m_comm(comm),
      m_counted(std::move(counted)),
      m_sampler(sampler),
      m_loss_scale(loss_scale),
      m_options(options),
      m_op_profile(op_profile),
      m_global_batch(static_cast<long>(cfg.train.micro_batch) * cfg.train.grad_accum * comm.size()),
      m_inputs(static_cast<size_t>(cfg.train.micro_batch) * static_cast<size_t>(cfg.model.seq_len)),
      m_targets(m_inputs.size()) {}

StepOutcome TrainStep::run(long step, TrainProgress& progress, StepReporter& reporter) {
    const int B = m_tc.micro_batch;
    const int T = m_model.config().seq_len;
    const int rank = m_comm.rank();
    StepOutcome out;
    PhaseTimes& ph = out.phases;  // where a step's time goes (metrics fields *_ms)
    const auto t0 = Clock::now();
    if (m_op_profile != nullptr) m_op_profile->reset();
    const double scale = start_step(m_counted, m_state, m_loss_scale, out);
    // The loss is scaled through dloss: every gradient comes out multiplied by `scale`.
    const float dloss_step = static_cast<float>(scale / (static_cast<double>(m_global_batch) * T));
    double loss_sum = 0.0;
    ExampleStepTotals examples;
    if (m_examples != nullptr) {
        examples = m_examples->micro_steps(m_model, m_state, m_tc, rank, m_comm.size(), progress.samples_seen, scale, ph);
        loss_sum = examples.loss_sum;
        out.targets = examples.targets;
        out.rows = examples.rows;
    }
    for (int a = 0; m_examples == nullptr && a < m_tc.grad_accum; ++a) {
        m_sampler->fill(micro_batch_first(progress.samples_seen, rank, m_tc, a), B, m_inputs.data(), m_targets.data());
        if (m_options.on_inputs) m_options.on_inputs(step + 1, a, m_inputs);
        m_state.begin_micro_step(a == 0, a == m_tc.grad_accum - 1);
        auto tp = Clock::now();
        loss_sum += m_model.forward(m_store, m_inputs.data(), m_targets.data(), B, T, dloss_step);
        ph.fwd += seconds_since(tp);
        tp = Clock::now();
        m_model.backward(m_store);
        ph.bwd += seconds_since(tp);
    }
    maybe_stall(rank, step + 1);
    auto tc0 = Clock::now();
    m_state.finish_grad_sync();
    ph.comm = seconds_since(tc0);
    if (m_options.after_grad_sync) m_options.after_grad_sync(step + 1, m_state);
    // Pretraining: the mean of per-micro-batch means (every micro-batch has B * T targets);
    // examples: the sum over every target of the global batch by their count.
    double loss = m_examples != nullptr ? loss_sum : loss_sum / m_tc.grad_accum;
    tc0 = Clock::now();
    m_comm.all_reduce_scalars(&loss, 1);
    ph.comm += seconds_since(tc0);
    loss /= m_examples != nullptr ? static_cast<double>(examples.targets) : m_comm.size();
    out.loss = loss;

    const auto t_opt = Clock::now();
    // Every rank checks its own gradients; the flag is agreed (MAX) so all skip together.
    apply_or_skip(m_state.grad_sum_squares_if_finite(), step, m_tc, m_state, m_loss_scale, reporter, progress, out);
    ph.opt = seconds_since(t_opt);
    if (m_options.after_step) m_options.after_step(step + 1, m_state, out.verdict.skipped());
    out.step_s = seconds_since(t0);

    // On examples, tokens are the target tokens trained on.
    advance_progress(progress, step, static_cast<uint64_t>(m_global_batch),
                     m_examples != nullptr ? examples.targets
                                           : static_cast<uint64_t>(m_global_batch) * static_cast<uint64_t>(T));
    return out;
}

}  // namespace zt
