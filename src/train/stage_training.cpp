// The model in training on one rank (see include/ztrain/train/stage_training.hpp): this
// rank's stages, their models and state, and the schedule of passes over them, for every mesh.
#include "ztrain/train/stage_training.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/examples.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/pipeline_runner.hpp"
#include "ztrain/parallel/pipeline_stages.hpp"
#include "ztrain/train/collective_watchdog.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/memory_plan.hpp"
#include "ztrain/train/train_setup.hpp"
#include "ztrain/train/trainer.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

/// Elements per DDP gradient bucket: the plan's bucket bytes of the wire format, at least one.
size_t bucket_numel(const MemoryPlan& plan, DType reduce) {
    return std::max<size_t>(1, static_cast<size_t>(plan.bucket_bytes / static_cast<double>(dtype_size(reduce))));
}

/// Where micro-batch `a` of data rank `rank` starts, in global samples (windows, or example
/// rows) from `step_first`, the step's first: each data rank reads train.grad_accum
/// consecutive micro-batches of train.micro_batch, ranks in order.
uint64_t micro_batch_first(uint64_t step_first, int rank, const TrainConfig& tc, int a) {
    return step_first + static_cast<uint64_t>((static_cast<long>(rank) * tc.grad_accum + a) * tc.micro_batch);
}

/// Where validation micro-batch `e` of data rank `rank` starts: the same leading samples
/// every evaluation, train.eval_batches micro-batches per rank, ranks in order.
uint64_t val_batch_first(int rank, const TrainConfig& tc, int e) {
    return static_cast<uint64_t>(static_cast<long>(rank) * tc.eval_batches * tc.micro_batch +
                                 static_cast<long>(e) * tc.micro_batch);
}

/// The most micro-batches with passes both run and still to run in `passes`: the inputs a
/// step keeps at once.
int micro_batches_live(const std::vector<PipelinePass>& passes) {
    int micro = 0;
    for (const PipelinePass& p : passes) micro = std::max(micro, p.micro + 1);
    std::vector<size_t> first(static_cast<size_t>(micro), passes.size()), last(static_cast<size_t>(micro), 0);
    for (size_t i = 0; i < passes.size(); ++i) {
        const size_t m = static_cast<size_t>(passes[i].micro);
        first[m] = std::min(first[m], i);
        last[m] = std::max(last[m], i);
    }
    // A sweep over the passes: each micro-batch opens at its first pass and closes after its
    // last, so the setup is linear in train.grad_accum (a count per pass was quadratic).
    std::vector<int> opened(passes.size() + 1, 0);
    for (size_t m = 0; m < first.size(); ++m) {
        if (first[m] > last[m]) continue;
        ++opened[first[m]];
        --opened[last[m] + 1];
    }
    int most = 1;
    int live = 0;
    for (size_t i = 0; i < passes.size(); ++i) {
        live += opened[i];
        most = std::max(most, live);
    }
    return most;
}

/// This rank's stages (one chunk of the whole model without a pipeline; each chunk's models
/// per micro-batch in flight with one), their state, and the passes of PipelineRunner's
/// schedule over them.
class ScheduledTraining final : public StageTraining {
  public:
    ScheduledTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale, const MemoryPlan& plan,
                      const TrainOptions& options);
    ~ScheduledTraining() override;
    ScheduledTraining(const ScheduledTraining&) = delete;
    ScheduledTraining& operator=(const ScheduledTraining&) = delete;

    Transformer& model() override { return *m_owned[0][0]; }
    ModelState& state() override { return *m_state; }
    size_t activation_bytes() const override;
    std::string describe() const override;
    StepOutcome step(long step, TrainProgress& progress, StepReporter& reporter) override;
    double val_loss(size_t corpus) override;
    void next_logits(const int32_t* window, int T, float* row) override;
    const float* position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) override;
    std::vector<float> gather_params() override;

  private:
    enum class Source { kTrain, kVal };
    /// The batches hold no micro-batch (a new step or evaluation reads its own).
    void forget_batches() { m_batch_holds.assign(m_batches.size(), -1); }
    void make_models(const Config& cfg, const TrainSetup& setup, int chunks);
    /// Micro-batch a of the step from `first` (kTrain) or of the validation (kVal), filled
    /// into its batch unless it holds it already.
    PipelineMicroBatch micro_batch(Source source, uint64_t first, int a, long step);
    /// The stages' and data ranks' sum of `v`. Collective.
    void sum_over_ranks(double* v, int n);
    /// The global squared gradient norm, or NaN on every rank when any stage overflowed.
    double agreed_sum_squares();
    bool last_stage() const { return m_runner->stage() == m_runner->stages() - 1; }

    const Config& m_cfg;
    TrainSetup& m_setup;
    LossScalePolicy& m_loss_scale;
    const TrainOptions& m_options;
    PipelineStages m_stages;
    std::unique_ptr<PipelineRunner> m_runner;
    std::vector<std::vector<std::unique_ptr<Transformer>>> m_owned;
    std::vector<std::vector<Transformer*>> m_models;
    ModelLayout m_layout;  ///< the stage's units (stage_layout); m_state keeps a reference
    std::unique_ptr<ModelState> m_state;
    std::unique_ptr<SlowUnitStore> m_slow_units;  ///< ZT_DEBUG_SLOW_UNITS test hook
    UnitStore* m_store = nullptr;                 ///< what the training passes run on: m_state, or the hook
    /// The first and the last stage (unit 0's holders) when they differ; null elsewhere.
    MPI_Comm m_ends_mpi = MPI_COMM_NULL;
    std::unique_ptr<Communicator> m_ends;
    long m_global_batch = 0;
    /// The micro-batches in use (tokens and targets; on example shards also the packed
    /// rows' positions and segments), micro-batch a in batch a mod their count, and which
    /// micro-batch each holds: -1 none.
    std::vector<RowBatch> m_batches;
    std::vector<long> m_batch_holds;
    std::vector<float> m_losses;  ///< position_losses' result
    size_t m_val_corpus = 0;      ///< the validation corpus val_loss reads
};

ScheduledTraining::ScheduledTraining(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale,
                                     const MemoryPlan& plan, const TrainOptions& options)
    : m_cfg(cfg), m_setup(setup), m_loss_scale(loss_scale), m_options(options), m_stages(pipeline_blocks(cfg)) {
    const TrainConfig& tc = cfg.train;
    const RankLayout& L = setup.layout();
    const PipelineShape shape{L.pipeline, tc.grad_accum, cfg.parallel.chunks()};
    m_runner = std::make_unique<PipelineRunner>(setup.mesh->pipeline_comm(), pipeline_schedule_kind(cfg.parallel),
                                                shape);
    m_runner->watch_with(setup.pipeline_comm.get());
    make_models(cfg, setup, shape.virtual_stages);
    m_layout = PipelineRunner::stage_state_layout(m_owned[0][0]->layout(), shape, L.pipeline_rank,
                                                  m_stages.first_layer);
    // Across stages a unit's backward passes interleave with other micro-batches' forwards:
    // ZeRO-2/3 reduce-scatter each unit's gradient once, after the stage's last backward
    // (ShardingPolicy::reduce_once_per_step). One stage reduces each unit as it is final.
    StateOptions state_options = StateOptions::zero(cfg.parallel.zero_stage)
                               .with_buckets(bucket_numel(plan, cfg.precision.reduce()))
                               .with_seed(tc.seed)
                               .in(stored_dtype(cfg), cfg.precision.reduce())
                               .training_in(trained_dtype(cfg))
                               .accumulating_in(grads_dtype(cfg))
                               .with_overlap_depth(plan.overlap_depth)
                               .reduced_once_per_step(shape.stages > 1)
                               // An imported base (or a checkpoint, which init_from's runs resume
                               // from) overwrites every drawn value but LoRA's adapters.
                               .drawing(cfg.model.init_from.empty() ? InitTensors::kAll : InitTensors::kAdaptersOnly);
    if (tc.optimizer == OptimizerKind::kMuon) state_options.with_muon(muon_settings(tc));
    m_state = std::make_unique<ModelState>(m_layout, *setup.backend, setup.state_comms(), state_options);
    m_store = &maybe_slow_units(setup.comm->rank(), *m_state, m_slow_units);
    // Unit 0's two holders, the first and the last stage, when they are two.
    const int s = L.pipeline_rank;
    if (shape.stages > 1) {
        const bool holds_unit0 = s == 0 || s == shape.stages - 1;
        ZT_MPI_CHECK(MPI_Comm_split(setup.mesh->pipeline_comm(), holds_unit0 ? 0 : MPI_UNDEFINED, s, &m_ends_mpi));
        if (holds_unit0) m_ends = make_mpi_communicator(m_ends_mpi);
    }
    m_global_batch = static_cast<long>(tc.micro_batch) * tc.grad_accum * setup.data().size();
    m_batches.resize(static_cast<size_t>(micro_batches_live(m_runner->passes())));
    m_batch_holds.assign(m_batches.size(), -1);
    const size_t window = static_cast<size_t>(tc.micro_batch) * static_cast<size_t>(cfg.model.seq_len);
    for (RowBatch& b : m_batches) {
        if (setup.examples) b.reserve(tc.micro_batch, cfg.model.seq_len);
        b.inputs.resize(window);  // the samplers' windows; example rows resize them as they fill
        b.targets.resize(window);
    }
}

void ScheduledTraining::make_models(const Config& cfg, const TrainSetup& setup, int chunks) {
    const int P = m_runner->stages();
    // The LM head's models take its gradients in their forwards, over chunks of rows.
    const int tensor = std::max(1, cfg.parallel.tensor);
    const int head_rows = Transformer::chunked_head_rows(cfg.model, cfg.train.micro_batch, tensor);
    m_owned.resize(static_cast<size_t>(chunks));
    m_models.resize(static_cast<size_t>(chunks));
    // The stage's passes run one at a time: under recompute = attention its models share the
    // first one's probabilities buffer (null otherwise: each keeps its own).
    ActPtr probs{};
    for (int c = 0; c < chunks; ++c) {
        const StageBlocks blocks = PipelineRunner::chunk_blocks(m_stages.first_layer, c * P + m_runner->stage());
        for (int k = 0; k < m_runner->slots()[static_cast<size_t>(c)]; ++k) {
            m_owned[static_cast<size_t>(c)].push_back(std::make_unique<Transformer>(
                cfg.model, *setup.backend, cfg.train.micro_batch,
                TransformerOptions()
                    .with_recompute(cfg.train.recompute)
                    .with_activation(cfg.precision.dtype)
                    .with_tensor(setup.tensor_group_or_null(), cfg.parallel.sequence)
                    .with_stage(blocks)
                    .with_head_rows(head_rows)
                    .with_shared_probs(probs)));
            m_models[static_cast<size_t>(c)].push_back(m_owned[static_cast<size_t>(c)].back().get());
            if (probs.data == nullptr) probs = m_models[static_cast<size_t>(c)].back()->attention_probs();
        }
    }
}

ScheduledTraining::~ScheduledTraining() {
    m_ends.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && m_ends_mpi != MPI_COMM_NULL) MPI_Comm_free(&m_ends_mpi);
}

PipelineMicroBatch ScheduledTraining::micro_batch(Source source, uint64_t first, int a, long step) {
    const size_t slot = static_cast<size_t>(a) % m_batches.size();
    RowBatch& b = m_batches[slot];
    const ExampleFeed* feed = m_setup.examples.get();
    const bool training = source == Source::kTrain;
    const uint64_t first_sample = training ? micro_batch_first(first, m_setup.data().rank(), m_cfg.train, a) : 0;
    if (m_batch_holds[slot] != a) {
        const int B = m_cfg.train.micro_batch;
        if (training) {
            if (feed) {
                feed->fill_train(first_sample, B, b);
            } else {
                m_setup.train_sampler->fill(first_sample, B, b.inputs.data(), b.targets.data());
                if (m_options.on_inputs) m_options.on_inputs(step + 1, a, b.inputs);
            }
        } else {
            const uint64_t at = val_batch_first(m_setup.data().rank(), m_cfg.train, a);
            if (feed && feed->val()) {
                feed->fill_val(at, B, b);
            } else {
                m_setup.val_samplers[m_val_corpus]->fill(at, B, b.inputs.data(), b.targets.data());
            }
        }
        m_batch_holds[slot] = a;
    }
    // Rows holding several examples (packed, or compacted padding): every stage's attention
    // keeps to each row's segments. Pretraining windows leave b.T at 0: the step's seq_len.
    const bool segmented = feed && b.segmented;
    // A training row's dropout masks are its sample's: the same wherever it is computed, and
    // in a compacted batch each token's, as if its sample had a row of its own.
    const bool compacted = feed && !b.sample.empty();
    const DropoutRows dropout = training ? DropoutRows{step, m_cfg.train.seed, first_sample,
                                                       compacted ? b.sample.data() : nullptr,
                                                       compacted ? b.positions.data() : nullptr}
                                         : DropoutRows{};
    return PipelineMicroBatch{b.inputs.data(),
                              b.targets.data(),
                              segmented ? TokenRows{b.positions.data(), b.segment_start.data()} : TokenRows{},
                              b.T,
                              dropout,
                              feed ? b.rows : 0};
}

size_t ScheduledTraining::activation_bytes() const {
    size_t total = 0;
    for (const auto& chunk : m_owned) {
        for (const auto& model : chunk) total += model->activation_bytes();
    }
    return total;
}

std::string ScheduledTraining::describe() const {
    if (m_runner->stages() == 1) return "";
    std::string layers;
    for (int k = 0; k < m_stages.count(); ++k) layers += str(k ? "," : "", m_stages.layers(k));
    return str("pipeline: ", m_cfg.parallel.pipeline, " stages, schedule ", setting_text(m_cfg.parallel.schedule),
               ", blocks per virtual stage ", layers);
}

void ScheduledTraining::sum_over_ranks(double* v, int n) {
    m_setup.pipeline_comm->all_reduce_scalars(v, n);
    m_setup.data().all_reduce_scalars(v, n);
}

double ScheduledTraining::agreed_sum_squares() {
    // Unit 0 is the same on the first and the last stage after the sum: counted on the first.
    const double own = m_state->grad_sum_squares_if_finite(m_layout.stage.mirrored);
    double bad = std::isnan(own) ? 1.0 : 0.0;
    double sum = std::isnan(own) ? 0.0 : own;
    m_setup.pipeline_comm->all_reduce_scalars(&bad, 1, ReduceOp::kMax);
    m_setup.pipeline_comm->all_reduce_scalars(&sum, 1);
    return bad != 0.0 ? std::numeric_limits<double>::quiet_NaN() : sum;
}

/// The start of a step: the communicators' counters reset, the gradients zeroed
/// (out.phases.zero) and the loss scale the step runs with read into out.loss_scale.
void start_step(const std::vector<Communicator*>& counted, ModelState& state, const LossScalePolicy& loss_scale,
                StepOutcome& out) {
    const auto t0 = Clock::now();
    for (Communicator* c : counted) c->reset_stats();
    state.zero_grads();
    out.phases.zero = seconds_since(t0);
    out.loss_scale = loss_scale.scale();
}

/// The end of a step, once its gradients are synchronized: the norm from `sum_sq` (the
/// global squared norm of the scaled gradients, NaN when any rank overflowed), the loss-scale
/// policy's verdict on out.loss, and AdamW (unscaled and clipped) unless the step is skipped.
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

StepOutcome ScheduledTraining::step(long step, TrainProgress& progress, StepReporter& reporter) {
    const TrainConfig& tc = m_cfg.train;
    const int m = tc.grad_accum;
    StepOutcome out;
    PhaseTimes& ph = out.phases;  // where a step's time goes (metrics fields *_ms)
    const auto t0 = Clock::now();
    if (m_setup.op_profile != nullptr) m_setup.op_profile->reset();
    start_step(m_setup.all_comms(), *m_state, m_loss_scale, out);
    // The loss is the mean over the global batch's targets, scaled through dloss: every
    // gradient comes out multiplied by the loss scale.
    const ExampleFeed* feed = m_setup.examples.get();
    const uint64_t rows = static_cast<uint64_t>(m_global_batch);
    const int T = m_cfg.model.seq_len;
    const uint64_t targets = feed ? feed->targets_in_rows(progress.samples_seen, rows) : rows * static_cast<uint64_t>(T);
    ZT_REQUIRE(targets > 0, "a step of ", rows, " rows without a target");
    const float dloss = static_cast<float>(out.loss_scale / static_cast<double>(targets));
    const uint64_t first = progress.samples_seen;
    forget_batches();
    maybe_stall(m_setup.comm->rank(), step + 1);  // the watchdog's test hook
    const PipelineStepTotals totals = m_runner->run(
        *m_store, m_models, [&](int a) { return micro_batch(Source::kTrain, first, a, step); }, tc.micro_batch, T,
        dloss, [&](int a, int) { m_state->begin_micro_step(a == 0, a == m - 1); });
    ph.fwd = totals.forward_s;
    ph.bwd = totals.backward_s;
    ph.comm = totals.wait_s;  // blocked on the neighbouring stages
    auto tc0 = Clock::now();
    m_state->finish_grad_sync();
    if (m_ends) {
        // m_ends is no communicator of the watchdog's: the wait is marked on the pipeline's.
        Communicator::PendingGuard pending(*m_setup.pipeline_comm, "unit 0's gradient sum");
        m_state->sum_unit_grads(0, *m_ends);
    }
    ph.comm += seconds_since(tc0);
    if (m_options.after_grad_sync) m_options.after_grad_sync(step + 1, *m_state);
    // The last stage's loss (the others add 0). Windows: the mean of the micro-batch means
    // (each has B * T targets); example rows: the sum over every target by their count.
    tc0 = Clock::now();
    double loss = feed ? totals.loss_sum : totals.loss_means / m;
    sum_over_ranks(&loss, 1);
    out.loss = loss / (feed ? static_cast<double>(targets) : static_cast<double>(m_setup.data().size()));
    if (feed) {
        out.targets = targets;
        out.rows = rows;
    }
    ph.comm += seconds_since(tc0);

    const auto t_opt = Clock::now();
    apply_or_skip(agreed_sum_squares(), step, tc, *m_state, m_loss_scale, reporter, progress, out);
    ph.opt = seconds_since(t_opt);
    if (m_options.after_step) m_options.after_step(step + 1, *m_state, out.verdict.skipped());
    out.step_s = seconds_since(t0);
    progress.step = step + 1;
    progress.samples_seen += rows;
    progress.tokens_seen += targets;  // on examples, the target tokens trained on
    return out;
}

double ScheduledTraining::val_loss(size_t corpus) {
    const TrainConfig& tc = m_cfg.train;
    m_val_corpus = corpus;
    const int E = tc.eval_batches;
    // The same leading windows (or example rows) every time, split over the data ranks.
    const bool examples = m_setup.examples && m_setup.examples->val();
    forget_batches();
    const PipelineStepTotals totals = m_runner->run_forward(
        *m_state, m_models, [&](int e) { return micro_batch(Source::kVal, 0, e, 0); }, E, tc.micro_batch,
        m_cfg.model.seq_len);
    if (examples) {
        double v[2] = {totals.loss_sum, static_cast<double>(totals.targets)};
        sum_over_ranks(v, 2);
        return v[1] > 0 ? v[0] / v[1] : 0.0;
    }
    double sum = totals.loss_means;
    sum_over_ranks(&sum, 1);
    return sum / (static_cast<double>(E) * m_setup.data().size());
}

void ScheduledTraining::next_logits(const int32_t* window, int T, float* row) {
    const size_t Vp = static_cast<size_t>(m_cfg.model.padded_vocab());
    // The last virtual stage is the last chunk of the last stage; one micro-batch runs in its slot 0.
    const auto batch = [&](int) { return PipelineMicroBatch{window, nullptr, {}, 0}; };
    m_runner->run_forward(*m_state, m_models, batch, 1, 1, T);
    if (last_stage()) m_models.back().front()->logits_row_to_host(T - 1, row);
    m_setup.pipeline_comm->broadcast_bytes(row, Vp * sizeof(float), m_runner->stages() - 1);
}

const float* ScheduledTraining::position_losses(const int32_t* inputs, const int32_t* targets, int B, int T) {
    ZT_REQUIRE(B <= m_cfg.train.micro_batch && T <= m_cfg.model.seq_len, "position_losses: ", B, " rows of ", T,
               " tokens exceed the models' ", m_cfg.train.micro_batch, " of ", m_cfg.model.seq_len);
    const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
    const auto batch = [&](int) { return PipelineMicroBatch{inputs, targets, {}, T}; };
    m_runner->run_forward(*m_state, m_models, batch, 1, B, T);
    m_losses.resize(n);
    if (last_stage()) {
        const std::vector<float>& last = m_models.back().front()->position_losses();
        std::copy(last.begin(), last.begin() + static_cast<long>(n), m_losses.begin());
    }
    m_setup.pipeline_comm->broadcast_bytes(m_losses.data(), n * sizeof(float), m_runner->stages() - 1);
    return m_losses.data();
}

std::vector<float> ScheduledTraining::gather_params() {
    const ModelLayout& whole = m_owned[0][0]->layout();
    const int nL = m_cfg.model.n_layer;
    const int P = m_runner->stages();
    std::vector<float> out;
    for (int u = 0; u < whole.num_units(); ++u) {
        // The stage holding the unit (unit 0: the first, which also holds it when P = 1).
        int owner = u == nL + 1 ? P - 1 : 0;
        for (int k = 0; u >= 1 && u <= nL && k < m_stages.count(); ++k) {
            const StageBlocks blocks = PipelineRunner::chunk_blocks(m_stages.first_layer, k);
            if (u - 1 >= blocks.begin && u - 1 < blocks.end) owner = m_stages.stage_of(k);
        }
        std::vector<float> unit(whole.unit_numel[static_cast<size_t>(u)]);
        if (m_runner->stage() == owner) m_state->gather_unit_params(u, unit.data());
        m_setup.pipeline_comm->broadcast_bytes(unit.data(), unit.size() * sizeof(float), owner);
        out.insert(out.end(), unit.begin(), unit.end());
    }
    return out;
}

}  // namespace

void check_stages(const Config& cfg, const TrainSetup& setup) {
    if (cfg.parallel.pipeline == 1) return;
    const std::string p = str("parallel.pipeline = ", cfg.parallel.pipeline, ": ");
    ZT_INPUT_CHECK(setup.backend_kind == BackendChoice::kCpu, p, "backend = cuda has no pipeline yet (its NCCL "
                   "messages are written but not yet run on a GPU); use backend = cpu or parallel.pipeline = 1");
}

std::unique_ptr<StageTraining> make_stage_training(const Config& cfg, TrainSetup& setup, LossScalePolicy& loss_scale,
                                                   const MemoryPlan& plan, const TrainOptions& options) {
    return std::make_unique<ScheduledTraining>(cfg, setup, loss_scale, plan, options);
}

}  // namespace zt
