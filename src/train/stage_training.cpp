// The model in training on one rank (see include/ztrain/train/stage_training.hpp): the one
// stage of a run without a pipeline, and the choice between it and a pipeline's stage.
#include "ztrain/train/stage_training.hpp"

#include <algorithm>

#include "pipeline_training.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/memory_plan.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {
namespace {

/// Elements per DDP gradient bucket: the plan's bucket bytes of the wire format, at least one.
size_t bucket_numel(const MemoryPlan& plan, DType reduce) {
    return std::max<size_t>(1, static_cast<size_t>(plan.bucket_bytes / static_cast<double>(dtype_size(reduce))));
}

/// The whole model on this rank's tensor slice: one Transformer, its model state (each
/// unit's gradient reduced as it is final, not once per step), and TrainStep.
class OneStageTraining final : public StageTraining {
  public:
    OneStageTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale, const MemoryPlan& plan,
                     const TrainOptions& options)
        : m_tc(cfg.train),
          m_setup(setup),
          m_model(cfg.model, *setup.backend, cfg.train.micro_batch,
                  TransformerOptions()
                      .with_recompute(cfg.train.recompute)
                      .with_activation(cfg.precision.dtype)
                      .with_tensor(setup.tensor_group_or_null(), cfg.parallel.sequence)),
          m_state(m_model.layout(), *setup.backend, setup.state_comms(),
                  StateOptions::zero(cfg.parallel.zero_stage)
                      .with_buckets(bucket_numel(plan, cfg.precision.reduce()))
                      .with_seed(cfg.train.seed)
                      .in(cfg.precision.dtype, cfg.precision.reduce())
                      .with_overlap_depth(plan.overlap_depth)),
          m_step(cfg, m_model, m_state, setup.data(), setup.all_comms(), setup.train_sampler.get(), loss_scale,
                 options, setup.op_profile),
          m_inputs(static_cast<size_t>(cfg.train.micro_batch) * static_cast<size_t>(cfg.model.seq_len)),
          m_targets(m_inputs.size()) {
        m_step.use_examples(setup.examples.get());
    }

    Transformer& model() override { return m_model; }
    ModelState& state() override { return m_state; }
    size_t activation_bytes() const override { return m_model.activation_bytes(); }
    std::string describe() const override { return ""; }

    StepOutcome step(long step, TrainProgress& progress, StepReporter& reporter) override {
        return m_step.run(step, progress, reporter);
    }

    double val_loss() override {
        return m_setup.examples && m_setup.examples->val() ? example_val_loss() : window_val_loss();
    }

    void next_logits(const int32_t* window, int T, float* row) override {
        m_model.forward(m_state, window, nullptr, 1, T, 0.f);
        m_model.logits_row_to_host(T - 1, row);
    }

    const float* position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) override {
        m_model.forward(m_state, inputs, targets, B, T, 0.f);
        return m_model.position_losses().data();
    }

    std::vector<float> gather_params() override {
        std::vector<float> out;
        for (int u = 0; u < m_model.layout().num_units(); ++u) {
            std::vector<float> unit(m_model.layout().unit_numel[static_cast<size_t>(u)]);
            m_state.gather_unit_params(u, unit.data());
            out.insert(out.end(), unit.begin(), unit.end());
        }
        return out;
    }

  private:
    /// The mean loss over the leading validation windows (pretraining shards), split over
    /// the data ranks: every window has B * T targets.
    double window_val_loss() {
        const int B = m_tc.micro_batch;
        const int T = m_model.config().seq_len;
        Communicator& data = m_setup.data();
        double sum = 0.0;
        for (int e = 0; e < m_tc.eval_batches; ++e) {
            m_setup.val_sampler->fill(val_batch_first(data.rank(), m_tc, e), B, m_inputs.data(), m_targets.data());
            sum += m_model.forward(m_state, m_inputs.data(), m_targets.data(), B, T, 0.f);
        }
        data.all_reduce_scalars(&sum, 1);
        return sum / (static_cast<double>(m_tc.eval_batches) * data.size());
    }

    /// The masked loss over the leading validation rows (example shards): the sum over every
    /// target by their count over all data ranks; prompts never count.
    double example_val_loss() {
        Communicator& data = m_setup.data();
        const auto [sum, targets] = m_setup.examples->val_sums(m_model, m_state, m_tc, data.rank());
        double v[2] = {sum, static_cast<double>(targets)};
        data.all_reduce_scalars(v, 2);
        return v[1] > 0 ? v[0] / v[1] : 0.0;
    }

    const TrainConfig& m_tc;
    TrainSetup& m_setup;
    Transformer m_model;
    ModelState m_state;
    TrainStep m_step;
    std::vector<int32_t> m_inputs;  ///< a validation micro-batch
    std::vector<int32_t> m_targets;
};

}  // namespace

void check_stages(const Config& cfg, const TrainSetup& setup) {
    if (cfg.parallel.pipeline == 1) return;
    const std::string p = str("parallel.pipeline = ", cfg.parallel.pipeline, ": ");
    ZT_INPUT_CHECK(setup.backend_kind == BackendChoice::kCpu, p, "backend = cuda has no pipeline yet (its NCCL "
                   "messages are written but not yet run on a GPU); use backend = cpu or parallel.pipeline = 1");
}

std::unique_ptr<StageTraining> make_stage_training(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale,
                                                   const MemoryPlan& plan, const TrainOptions& options) {
    if (setup.layout().pipeline > 1) {
        return std::make_unique<PipelineTraining>(cfg, setup, loss_scale, plan.overlap_depth);
    }
    return std::make_unique<OneStageTraining>(cfg, setup, loss_scale, plan, options);
}

}  // namespace zt
