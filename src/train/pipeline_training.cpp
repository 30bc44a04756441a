// One rank's stage of a pipeline-parallel run (see pipeline_training.hpp beside this file).
#include "pipeline_training.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/train/collective_watchdog.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/memory_plan.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Elements per DDP gradient bucket: parallel.bucket_mb, or the memory plan's choice
/// (ddp_bucket_bytes) for the stage's gradients.
size_t stage_bucket_numel(const Config& cfg, const ModelLayout& layout) {
    const double elem = static_cast<double>(dtype_size(cfg.precision.reduce()));
    const double bytes = cfg.parallel.bucket_mb > 0 ? cfg.parallel.bucket_mb * 1048576.0
                                                    : ddp_bucket_bytes(static_cast<double>(layout.total_numel) * elem);
    return std::max<size_t>(1, static_cast<size_t>(bytes / elem));
}

}  // namespace

PipelineTraining::PipelineTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale, int overlap_depth)
    : m_cfg(cfg), m_setup(setup), m_loss_scale(loss_scale), m_stages(pipeline_blocks(cfg)) {
    const ModelConfig& mc = cfg.model;
    const TrainConfig& tc = cfg.train;
    const RankLayout& L = setup.layout();
    const int P = L.pipeline;
    const int s = L.pipeline_rank;
    const int v = cfg.parallel.chunks();
    m_runner = std::make_unique<PipelineRunner>(setup.mesh->pipeline_comm(), pipeline_schedule_kind(cfg.parallel.schedule),
                                                PipelineShape{P, tc.grad_accum, v});
    m_runner->watch_with(setup.pipeline_comm.get());
    m_owned.resize(static_cast<size_t>(v));
    m_models.resize(static_cast<size_t>(v));
    for (int c = 0; c < v; ++c) {
        const StageBlocks blocks = PipelineRunner::chunk_blocks(m_stages.first_layer, c * P + s);
        for (int k = 0; k < m_runner->slots()[static_cast<size_t>(c)]; ++k) {
            m_owned[static_cast<size_t>(c)].push_back(std::make_unique<Transformer>(
                mc, *setup.backend, tc.micro_batch,
                TransformerOptions()
                    .with_recompute(tc.recompute)
                    .with_activation(cfg.precision.dtype)
                    .with_tensor(setup.tensor_group_or_null(), cfg.parallel.sequence)
                    .with_stage(blocks)));
            m_models[static_cast<size_t>(c)].push_back(m_owned[static_cast<size_t>(c)].back().get());
        }
    }
    m_layout = PipelineRunner::stage_state_layout(m_owned[0][0]->layout(), PipelineShape{P, tc.grad_accum, v}, s,
                                                  m_stages.first_layer);
    // ZeRO-2/3 reduce-scatter each unit's gradient once, after the stage's last backward
    // (ShardingPolicy::reduce_once_per_step): not once per micro-batch.
    m_state = std::make_unique<ModelState>(m_layout, *setup.backend, setup.state_comms(),
                                           StateOptions::zero(cfg.parallel.zero_stage)
                                               .with_buckets(stage_bucket_numel(cfg, m_layout))
                                               .with_seed(tc.seed)
                                               .in(cfg.precision.dtype, cfg.precision.reduce())
                                               .with_overlap_depth(overlap_depth)
                                               .reduced_once_per_step());
    // Unit 0's two holders: the first and the last stage (the whole pipeline when P = 2).
    const bool holds_unit0 = s == 0 || s == P - 1;
    ZT_MPI_CHECK(MPI_Comm_split(setup.mesh->pipeline_comm(), holds_unit0 ? 0 : MPI_UNDEFINED, s, &m_ends_mpi));
    if (holds_unit0) m_ends = make_mpi_communicator(m_ends_mpi);
    m_global_batch = static_cast<long>(tc.micro_batch) * tc.grad_accum * setup.data().size();
    m_batches.resize(static_cast<size_t>(std::max(tc.grad_accum, tc.eval_batches)));
    const size_t window = static_cast<size_t>(tc.micro_batch) * static_cast<size_t>(mc.seq_len);
    for (RowBatch& b : m_batches) {
        b.reserve(tc.micro_batch, mc.seq_len);
        b.inputs.resize(window);  // the samplers' windows; example rows resize them as they fill
        b.targets.resize(window);
    }
    m_window.resize(static_cast<size_t>(mc.seq_len));
}

PipelineTraining::~PipelineTraining() {
    m_ends.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m_ends_mpi != MPI_COMM_NULL) MPI_Comm_free(&m_ends_mpi);
}

PipelineMicroBatch PipelineTraining::micro_batch(int a) {
    RowBatch& b = m_batches[static_cast<size_t>(a)];
    // Packed example rows: every stage's attention keeps to each row's segments.
    const bool packed = m_setup.examples && m_setup.examples->packed();
    // Pretraining windows leave b.T at 0: the step's seq_len.
    return PipelineMicroBatch{b.inputs.data(), b.targets.data(),
                              packed ? TokenRows{b.positions.data(), b.segment_start.data()} : TokenRows{}, b.T};
}

size_t PipelineTraining::activation_bytes() const {
    size_t total = 0;
    for (const auto& chunk : m_owned) {
        for (const auto& model : chunk) total += model->activation_bytes();
    }
    return total;
}

double PipelineTraining::agreed_sum_squares() {
    // Unit 0 is the same on the first and the last stage after the sum: counted on the first.
    const double own = m_state->grad_sum_squares_if_finite(m_layout.stage.mirrored);
    double bad = std::isnan(own) ? 1.0 : 0.0;
    double sum = std::isnan(own) ? 0.0 : own;
    m_setup.pipeline_comm->all_reduce_scalars(&bad, 1, ReduceOp::kMax);
    m_setup.pipeline_comm->all_reduce_scalars(&sum, 1);
    return bad != 0.0 ? std::numeric_limits<double>::quiet_NaN() : sum;
}

StepOutcome PipelineTraining::step(long step, TrainProgress& progress, StepReporter& reporter) {
    const TrainConfig& tc = m_cfg.train;
    const int B = tc.micro_batch;
    const int T = m_cfg.model.seq_len;
    const int m = tc.grad_accum;
    Communicator& data = m_setup.data();
    StepOutcome out;
    PhaseTimes& ph = out.phases;
    const auto t0 = Clock::now();
    const double scale = start_step(m_setup.all_comms(), *m_state, m_loss_scale, out);
    // The loss is the mean over the global batch's targets: every token of a window, or on
    // example shards the target tokens of the step's rows (ExampleFeed::micro_steps).
    const ExampleFeed* feed = m_setup.examples.get();
    const uint64_t rows = static_cast<uint64_t>(m_global_batch);
    const uint64_t targets = feed ? feed->targets_in_rows(progress.samples_seen, rows) : rows * static_cast<uint64_t>(T);
    ZT_REQUIRE(targets > 0, "a step of ", rows, " rows without a target");
    const float dloss = static_cast<float>(scale / static_cast<double>(targets));
    // Every stage of a pipeline reads the same micro-batches: those of its data rank.
    for (int a = 0; a < m; ++a) {
        const uint64_t first = micro_batch_first(progress.samples_seen, data.rank(), tc, a);
        RowBatch& b = m_batches[static_cast<size_t>(a)];
        if (feed) {
            feed->fill_train(first, B, b);
        } else {
            m_setup.train_sampler->fill(first, B, b.inputs.data(), b.targets.data());
        }
    }
    auto batch = [&](int a) { return micro_batch(a); };
    maybe_stall(m_setup.comm->rank(), step + 1);  // the watchdog's test hook
    const auto tp = Clock::now();
    const PipelineStepTotals totals = m_runner->run(*m_state, m_models, batch, B, T, dloss,
                                                    [&](int a, int) { m_state->begin_micro_step(a == 0, a == m - 1); });
    // Forward and backward interleave: their time is fwd_ms, the time blocked on neighbours comm_ms.
    ph.fwd = since(tp) - totals.wait_s;
    ph.comm = totals.wait_s;
    auto tc0 = Clock::now();
    m_state->finish_grad_sync();
    if (m_ends) m_state->sum_unit_grads(0, *m_ends);
    // The loss: the last stage's sum over its micro-batches, summed over the pipeline (the
    // other stages add 0) and the data ranks, over the global batch's targets.
    double loss = totals.loss_sum;
    m_setup.pipeline_comm->all_reduce_scalars(&loss, 1);
    data.all_reduce_scalars(&loss, 1);
    out.loss = loss / static_cast<double>(targets);
    if (feed) {
        out.targets = targets;
        out.rows = rows;
    }
    ph.comm += since(tc0);

    const auto t_opt = Clock::now();
    apply_or_skip(agreed_sum_squares(), step, tc, *m_state, m_loss_scale, reporter, progress, out);
    ph.opt = since(t_opt);
    out.step_s = since(t0);
    advance_progress(progress, step, rows, targets);
    return out;
}

std::vector<float> PipelineTraining::gather_params() {
    const RankLayout& L = m_setup.layout();
    const ModelLayout& whole = m_owned[0][0]->layout();
    const int nL = m_cfg.model.n_layer;
    std::vector<float> out;
    for (int u = 0; u < whole.num_units(); ++u) {
        // The stage holding the unit (unit 0: the first, which also holds it when P = 1).
        int owner = u == nL + 1 ? L.pipeline - 1 : 0;
        for (int k = 0; u >= 1 && u <= nL && k < m_stages.count(); ++k) {
            const StageBlocks blocks = PipelineRunner::chunk_blocks(m_stages.first_layer, k);
            if (u - 1 >= blocks.begin && u - 1 < blocks.end) owner = m_stages.stage_of(k);
        }
        std::vector<float> unit(whole.unit_numel[static_cast<size_t>(u)]);
        if (L.pipeline_rank == owner) m_state->gather_unit_params(u, unit.data());
        m_setup.pipeline_comm->broadcast_bytes(unit.data(), unit.size() * sizeof(float), owner);
        out.insert(out.end(), unit.begin(), unit.end());
    }
    return out;
}

void PipelineTraining::next_logits(const int32_t* window, int T, float* row) {
    const RankLayout& L = m_setup.layout();
    const size_t Vp = static_cast<size_t>(m_cfg.model.padded_vocab());
    // The last virtual stage is the last chunk of the last stage; one micro-batch runs in its slot 0.
    std::copy(window, window + T, m_window.data());
    const auto batch = [&](int) { return PipelineMicroBatch{m_window.data(), nullptr, {}, 0}; };
    m_runner->run_forward(*m_state, m_models, batch, 1, 1, T);
    if (L.pipeline_rank == L.pipeline - 1) m_models.back().front()->logits_row_to_host(T - 1, row);
    m_setup.pipeline_comm->broadcast_bytes(row, Vp * sizeof(float), L.pipeline - 1);
}

std::string PipelineTraining::describe() const {
    std::string layers;
    for (int k = 0; k < m_stages.count(); ++k) layers += str(k ? "," : "", m_stages.layers(k));
    return str("pipeline: ", m_cfg.parallel.pipeline, " stages, schedule ", setting_text(m_cfg.parallel.schedule),
               ", blocks per virtual stage ", layers);
}

const float* PipelineTraining::position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) {
    const RankLayout& L = m_setup.layout();
    ZT_REQUIRE(B <= m_cfg.train.micro_batch && T <= m_cfg.model.seq_len, "position_losses: ", B, " rows of ", T,
               " tokens exceed the models' ", m_cfg.train.micro_batch, " of ", m_cfg.model.seq_len);
    const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
    RowBatch& b = m_batches[0];
    if (b.inputs.size() < n) b.inputs.resize(n);  // example rows may have left it shorter
    if (b.targets.size() < n) b.targets.resize(n);
    std::copy(inputs, inputs + n, b.inputs.data());
    std::copy(targets, targets + n, b.targets.data());
    const auto batch = [&](int) { return PipelineMicroBatch{b.inputs.data(), b.targets.data(), {}, T}; };
    m_runner->run_forward(*m_state, m_models, batch, 1, B, T);
    m_losses.resize(n);
    if (L.pipeline_rank == L.pipeline - 1) {
        const std::vector<float>& last = m_models.back().front()->position_losses();
        std::copy(last.begin(), last.begin() + static_cast<long>(n), m_losses.begin());
    }
    m_setup.pipeline_comm->broadcast_bytes(m_losses.data(), n * sizeof(float), L.pipeline - 1);
    return m_losses.data();
}

double PipelineTraining::val_loss() {
    const TrainConfig& tc = m_cfg.train;
    const int B = tc.micro_batch;
    const int T = m_cfg.model.seq_len;
    const int E = tc.eval_batches;
    Communicator& data = m_setup.data();
    // The same leading windows (or example rows) every time, split over the data ranks, as
    // one stage reads them (val_batch_first); the loss over every target they hold.
    const bool examples = m_setup.examples && m_setup.examples->val();
    for (int e = 0; e < E; ++e) {
        const uint64_t first = val_batch_first(data.rank(), tc, e);
        RowBatch& b = m_batches[static_cast<size_t>(e)];
        if (examples) {
            m_setup.examples->fill_val(first, B, b);
        } else {
            m_setup.val_sampler->fill(first, B, b.inputs.data(), b.targets.data());
        }
    }
    auto batch = [&](int e) { return micro_batch(e); };
    const PipelineStepTotals totals = m_runner->run_forward(*m_state, m_models, batch, E, B, T);
    double v[2] = {totals.loss_sum, static_cast<double>(totals.targets)};
    m_setup.pipeline_comm->all_reduce_scalars(v, 2);
    data.all_reduce_scalars(v, 2);
    return v[1] > 0 ? v[0] / v[1] : 0.0;
}

}  // namespace zt
