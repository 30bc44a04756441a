// The training run: wires the components together and runs the step loop.
//
//   set_up_training   communicator, backend choice, data            (train_setup.hpp)
//   RunLocks          one job per run.dir / checkpoint.dir          (run_lock.hpp)
//   ResumePolicy      checkpoint.resume, fallback, seed, init_from  (resume_policy.hpp)
//   input_fingerprint the data identity saved with checkpoints     (input_fingerprint.hpp)
//   LossScalePolicy   apply / skip / stop per step                  (optim/loss_scale_policy.hpp)
//   StageTraining     this rank's stages: the step, the evaluations' forwards (stage_training.hpp)
//   Evaluator         validation loss and sample                    (evaluator.hpp)
//   StepReporter      metrics.jsonl, console lines, memory table    (step_reporter.hpp)
//   CheckpointSaver   periodic / final / on-signal saves            (checkpoint_saver.hpp)
//
// Nothing is written to run.dir until every input (data, checkpoint, init_from) has been
// checked: a rejected run leaves an existing run directory exactly as it was (the lock
// file rank 0 holds meanwhile is removed when the run ends).
#include "ztrain/train/trainer.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/agree.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/data/blend.hpp"
#include "ztrain/data/token_data.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/blend_cursor.hpp"
#include "ztrain/train/checkpoint_saver.hpp"
#include "ztrain/train/collective_watchdog.hpp"
#include "ztrain/train/evaluator.hpp"
#include "ztrain/train/example_feed.hpp"
#include "ztrain/train/input_fingerprint.hpp"
#include "ztrain/train/memory_plan.hpp"
#include "ztrain/train/metrics.hpp"
#include "ztrain/train/replica_check.hpp"
#include "ztrain/train/resume_policy.hpp"
#include "ztrain/train/run_lock.hpp"
#include "ztrain/train/spike_guard.hpp"
#include "ztrain/train/step_reporter.hpp"
#include "ztrain/train/stop_signals.hpp"
#include "ztrain/train/stage_training.hpp"
#include "ztrain/train/train_setup.hpp"

namespace zt {
namespace {

/// The checkpoint fields that hold the loss-scale policy's state, as (TrainProgress member,
/// LossScaleRecord member) pairs: one list for both directions.
template <class Visit>
void for_each_loss_scale_field(Visit&& visit) {
    visit(&TrainProgress::loss_scale, &LossScaleRecord::scale);
    visit(&TrainProgress::loss_scale_mode, &LossScaleRecord::mode);
    visit(&TrainProgress::scaler_clean_steps, &LossScaleRecord::clean_steps);
    visit(&TrainProgress::scaler_hysteresis_left, &LossScaleRecord::hysteresis_left);
    visit(&TrainProgress::bad_steps, &LossScaleRecord::bad_steps);
}

LossScaleRecord loss_scale_record(const CheckpointRecord& loaded) {
    LossScaleRecord r;
    r.dtype = loaded.dtype;  // read only: the saver records the run's own dtype
    for_each_loss_scale_field(
        [&](auto progress_field, auto record_field) { r.*record_field = loaded.progress.*progress_field; });
    return r;
}

/// A resumed run takes the checkpoint's loss-scale state (rank 0 prints the note, if any).
void restore_loss_scale(const CheckpointRecord& resumed, LossScalePolicy& loss_scale, bool root) {
    const std::string note = loss_scale.restore(loss_scale_record(resumed));
    if (root && !note.empty()) std::printf("ztrain: %s\n", note.c_str());
}

/// The progress a checkpoint saves: the loop's cursor plus the loss-scale state.
TrainProgress checkpoint_progress(const TrainProgress& cursor, const LossScalePolicy& loss_scale) {
    TrainProgress p;
    p.step = cursor.step;
    p.applied_steps = cursor.applied_steps;
    p.samples_seen = cursor.samples_seen;
    p.tokens_seen = cursor.tokens_seen;
    p.skipped = cursor.skipped;
    const LossScaleRecord r = loss_scale.record();
    for_each_loss_scale_field([&](auto progress_field, auto record_field) { p.*progress_field = r.*record_field; });
    return p;
}

void record_evaluation(const std::optional<Evaluation>& ev, TrainSummary& summary) {
    if (!ev) return;
    summary.val_losses.push_back(ev->val_loss);
    if (ev->sample) summary.last_sample = *ev->sample;
}

StepReport step_report(const StepOutcome& out, const TrainProgress& cursor, long global_tokens, bool examples) {
    StepReport r;
    r.step = cursor.step;
    r.loss = out.loss;
    r.lr = out.lr;
    r.grad_norm = out.grad_norm;
    r.loss_scale = out.loss_scale;
    r.skipped = out.verdict.skipped();
    r.tokens_seen = cursor.tokens_seen;
    // On examples the speed is of target tokens, the ones trained on.
    r.tokens_per_s = static_cast<double>(examples ? static_cast<long>(out.targets) : global_tokens) / out.step_s;
    if (examples) {
        r.targets = out.targets;
        r.rows = out.rows;
    }
    r.step_s = out.step_s;
    r.phases = out.phases;
    return r;
}

void record_step(const StepOutcome& out, long done, TrainSummary& summary) {
    summary.losses.push_back(out.loss);
    summary.loss_scales.push_back(out.loss_scale);
    summary.skipped.push_back(out.verdict.skipped());
    summary.grad_norms.push_back(out.grad_norm);
    summary.steps = static_cast<int>(done);
}

/// The step loop's long-run checks: replicas and checksums (parallel.check_every) and
/// loss spikes (train.spike).
struct LongRunChecks {
    ReplicaCheck replicas;
    SpikeGuard spikes;
    LongRunChecks(const Config& cfg, TrainSetup& setup, ModelState& state, uint64_t rows_per_step)
        : replicas(cfg.parallel.check_every, state, *setup.comm, *setup.shard_comm, *setup.replica_comm),
          spikes(cfg.train, state, *setup.comm, rows_per_step) {}
    /// Before step `step` (0-based): skipped batches, snapshot, checksums verified.
    void before_step(long step, TrainProgress& progress, const LossScalePolicy& loss_scale) {
        replicas.before_step(step + 1);
        spikes.before_step(progress, loss_scale);
    }
    /// After a step's record: the state check, then the spike verdict; true when the state
    /// was rolled back (`progress` and `summary` then go back with it).
    bool rolled_back(const StepOutcome& out, TrainProgress& progress, LossScalePolicy& loss_scale,
                     StepReporter& reporter, TrainSummary& summary) {
        replicas.after_step(progress.step, out.step_s);
        const std::optional<Rollback> rb = spikes.judge(progress.step, out.loss, progress);
        if (!rb) return false;
        const size_t undone = static_cast<size_t>(rb->step - rb->to_step);
        for (auto* v : {&summary.losses, &summary.loss_scales, &summary.grad_norms}) v->resize(v->size() - undone);
        summary.skipped.resize(summary.skipped.size() - undone);
        summary.steps = static_cast<int>(rb->to_step);
        progress = spikes.roll_back(progress, loss_scale);
        replicas.state_replaced();
        reporter.rolled_back(*rb);
        return true;
    }
};

/// Rank 0 takes the locks of run.dir and checkpoint.dir before anything there is read; a
/// refusal is agreed, so every rank exits 2 together. Null on the other ranks.
std::unique_ptr<RunLocks> lock_run_dirs(const Config& cfg, const std::string& ckpt_dir, bool force_unlock,
                                        Communicator& comm) {
    std::unique_ptr<RunLocks> locks;
    agree_across_ranks(comm, [&] {
        if (comm.rank() == 0) locks = std::make_unique<RunLocks>(cfg, ckpt_dir, force_unlock);
    });
    return locks;
}

/// A resume whose checkpoint already reaches train.max_steps has nothing to do: it says so
/// and ends before the model exists, changing no file. Every rank reads the same meta.
bool nothing_to_train(const ResumePolicy& resume, const Config& cfg, bool root) {
    const long step = resume.checkpoint_step();
    if (step < cfg.train.max_steps) return false;
    if (root) {
        std::printf("ztrain: %s is at step %ld, which already reaches train.max_steps = %d: nothing to train, "
                    "no file changed (raise train.max_steps to go on, or --checkpoint.resume=never with another "
                    "run.dir to start over)\n",
                    resume.dir().c_str(), step, cfg.train.max_steps);
    }
    return true;
}

/// A resumed LoRA run's base must be the files the checkpoint's run was given (the same path
/// is checked by ResumePolicy; here their content): otherwise exit 2 whatever data.on_change.
void check_lora_base(const Config& cfg, const CheckpointRecord& resumed, const nlohmann::json& now) {
    const std::vector<std::string> changes = base_changes(resumed.inputs, now);
    if (changes.empty()) return;
    std::string list;
    for (const std::string& c : changes) list += str(list.empty() ? "" : "; ", c);
    // At another path than the recorded one: name both.
    const std::string& was = resumed.lora_base;
    std::error_code ec;
    const bool moved = !was.empty() && !std::filesystem::equivalent(was, cfg.model.init_from, ec);
    throw InputError(str("model.init_from = ", cfg.model.init_from, ": the LoRA run's base ",
                         moved ? str("was ", was, " when the checkpoint was written, and these files differ from its (")
                               : std::string("changed since the checkpoint was written ("),
                         list, "); its adapters were trained on the base it had: resume with those files, or start "
                         "over with checkpoint.resume=never"));
}

/// Rank 0: this run's data and tokenizer fingerprint, which every checkpoint saves; on a
/// resume, what differs from the checkpoint's is a note, or with data.on_change = error a
/// refusal (agreed: exit 2 on every rank, before anything is written).
nlohmann::json check_inputs(const Config& cfg, const TrainSetup& setup, const CheckpointRecord& resumed,
                            bool resuming, Communicator& comm) {
    nlohmann::json now;
    agree_across_ranks(comm, [&] {
        if (comm.rank() != 0) return;
        // A LoRA run's adapters belong to its base: its files are fingerprinted too.
        const std::vector<std::string> base =
            cfg.model.lora.on() ? lora_base_files(cfg.model.init_from) : std::vector<std::string>{};
        now = input_fingerprint(setup.train_files(), setup.val_files(), setup.tokenizer_file,
                                setup.train_file_corpora(), setup.val_file_corpora(), base);
        if (!resuming) return;
        check_lora_base(cfg, resumed, now);
        const std::vector<std::string> changes = input_changes(resumed.inputs, now);
        if (changes.empty()) return;
        std::string list;
        for (const std::string& c : changes) list += str(list.empty() ? "" : "; ", c);
        if (cfg.data.on_change == OnInputChange::kError) {
            throw InputError(str("data.on_change = error: the inputs differ from those the checkpoint was trained "
                                 "on: ", list, ". Resume with the checkpoint's data, or with --data.on_change=note "
                                 "to go on with these"));
        }
        std::printf("ztrain: note: the inputs differ from those the checkpoint was trained on: %s "
                    "(data.on_change = note: going on)\n",
                    list.c_str());
    });
    return now;
}

/// The names ztrain writes in run.dir must be free for it: a directory where a file goes (or a
/// file where TensorBoard's directory goes) is refused before any of them is written, so a
/// refused start leaves nothing that a later start takes for an earlier run.
void check_run_dir_entries(const Config& cfg) {
    const std::filesystem::path run_dir(cfg.run.dir);
    std::error_code ec;
    for (const char* file : {"config.ini", "metrics.jsonl"}) {
        const std::filesystem::path path = run_dir / file;
        if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
            throw InputError(str("run.dir = ", cfg.run.dir, ": ", path.string(),
                                 " is not a file; ztrain writes its ", file,
                                 " there. Move it away or give another --run.dir"));
        }
    }
    const std::filesystem::path tb = run_dir / "tb";
    if (cfg.run.tensorboard && std::filesystem::exists(tb, ec) && !std::filesystem::is_directory(tb, ec)) {
        throw InputError(str("run.tensorboard = true: ", tb.string(),
                             " is not a directory; the TensorBoard event files go there. Move it away, "
                             "give another --run.dir or set --run.tensorboard=false"));
    }
}

/// The run directory, once every input is accepted: the resolved deck written by rank 0, and
/// a resumed run's metrics.jsonl cut back to the checkpoint's step (agreed: an I/O error
/// there stops every rank).
void prepare_run_dir(const Config& cfg, bool resuming, long resumed_step, Communicator& comm) {
    agree_across_ranks(comm, [&] {
        const std::filesystem::path run_dir(cfg.run.dir);
        std::error_code ec;
        std::filesystem::create_directories(run_dir, ec);
        if (ec) throw InputError(str("run.dir: cannot create '", cfg.run.dir, "': ", ec.message()));
        if (comm.rank() != 0) return;
        check_run_dir_entries(cfg);
        std::ofstream ini(run_dir / "config.ini");
        ini << to_ini(cfg);
        if (!ini.flush()) throw Error(str("run.dir: cannot write ", (run_dir / "config.ini").string()));
        if (!resuming) return;
        const std::string metrics = (run_dir / "metrics.jsonl").string();
        const MetricsRepair repair = supersede_metrics(metrics, resumed_step);
        if (!repair.changed()) return;
        std::printf("ztrain: note: %s: %zu record(s) past step %ld, from the interrupted run, superseded%s\n",
                    metrics.c_str(), repair.superseded, resumed_step,
                    repair.cut_line ? "; its cut last line dropped" : "");
    });
}

/// Ends the outstanding collectives of `comms` (Communicator::end_outstanding) when the scope
/// is left by an exception, and does nothing on a normal exit.
class EndCollectivesOnError {
  public:
    EndCollectivesOnError(std::vector<Communicator*> comms, double timeout_s)
        : m_comms(std::move(comms)), m_timeout_s(timeout_s), m_uncaught(std::uncaught_exceptions()) {}
    ~EndCollectivesOnError() {
        if (std::uncaught_exceptions() > m_uncaught) {
            for (Communicator* c : m_comms) c->end_outstanding(m_timeout_s);
        }
    }
    EndCollectivesOnError(const EndCollectivesOnError&) = delete;
    EndCollectivesOnError& operator=(const EndCollectivesOnError&) = delete;

  private:
    std::vector<Communicator*> m_comms;
    double m_timeout_s;
    int m_uncaught;
};

/// Each rank's predicted peak from the deck, checked (and warned about on rank 0) before
/// anything model-sized exists.
MemoryPlan plan_and_check_memory(const Config& cfg, TrainSetup& setup, Communicator& comm) {
    const TrainConfig& tc = cfg.train;
    const bool device = setup.backend->capabilities().device_memory;
    size_t device_free = 0;
    size_t device_total = 0;
    // A GPU run's items are device memory: checked against the device's free memory, which
    // already excludes the CUDA context the backend created (not yet run on a GPU).
    if (!device || !cuda_memory_info(&device_free, &device_total)) device_free = 0;
    // On example shards, the counts the feed read from their headers: the figures --plan has.
    std::optional<ExampleRunSizes> examples;
    if (setup.examples) examples = setup.examples->sizes();
    // This run's own kernels keep their attention probabilities, whatever [cluster] describes.
    Config run = cfg;
    run.cluster.attention_kernel = "materialized";
    const MemoryPlan memory = plan_memory(
        run, comm.size(), comm.local_size(),
        static_cast<double>(setup.backend->attention_scratch_floats(tc.micro_batch, cfg.model.seq_len,
                                                                    cfg.model.n_head / cfg.parallel.tensor)),
        measured_baseline_bytes(), device, static_cast<double>(device_free), examples ? &*examples : nullptr);
    const std::string memory_warning = check_memory_plan(memory, cfg.run.memory_check, comm);
    if (comm.rank() == 0 && !memory_warning.empty()) std::printf("ztrain: warning: %s\n", memory_warning.c_str());
    return memory;
}

/// After the last step: every rank's measured peak against the plan (host memory: the
/// resident set's high-water mark; a GPU run's device peak is not measured here).
void report_memory_peaks(Communicator& comm, StepReporter& reporter) {
    const double my_peak = measured_peak_bytes();
    std::vector<double> peaks(static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(&my_peak, peaks.data(), sizeof(double));
    reporter.memory_peaks(peaks);
}

/// The memory peaks, and the final parameters when the caller asked for them.
void finish_run(const TrainOptions& options, StageTraining& training, Communicator& comm, StepReporter& reporter,
                TrainSummary& summary) {
    report_memory_peaks(comm, reporter);
    if (options.collect_params) summary.final_params = training.gather_params();
}

/// What the reporter says about the run before its first step: TensorBoard (when asked), the
/// rank layout and the memory plan.
void describe_run(StepReporter& reporter, const Config& cfg, const TrainSetup& setup, const MemoryPlan& memory,
                  long step) {
    if (cfg.run.tensorboard) reporter.open_tensorboard((std::filesystem::path(cfg.run.dir) / "tb").string(), step);
    reporter.set_rank_layout(setup.layout());
    reporter.watch_stragglers(cfg.run.report_every, rank_hosts(*setup.comm));
    // The data communicator carries the loss's sum whatever its ranks (all of them without
    // tensor or pipeline parallelism): counted, so the step's scalar bytes are all there.
    reporter.set_tensor_comms(setup.split_tensor_comm(), setup.data_comm.get());
    reporter.set_memory_plan(memory.per_rank(), memory.per_node(), memory.available, memory.overlap_depth);
}

/// What the ranks agreed at a step boundary.
struct BoundaryAgreement {
    double signal = 0;           ///< a pending stop signal (0: none)
    bool output_failed = false;  ///< rank 0 could not write the run's records
    bool stop() const { return signal > 0 || output_failed; }
};

/// Ranks agree at the step boundary on a pending stop signal and on rank 0's failure to
/// write metrics.jsonl, so all save together, and on whether every rank's background write
/// has finished, so all take its outcome (or its failure) at the same step.
BoundaryAgreement agree_at_step_boundary(const StopSignals& signals, CheckpointSaver& saver,
                                         const StepReporter& reporter, Communicator& comm) {
    double flags[3] = {signals.pending(), saver.writing() ? 1.0 : 0.0, reporter.output_error().empty() ? 0.0 : 1.0};
    comm.all_reduce_scalars(flags, 3, ReduceOp::kMax);
    if (flags[1] == 0) saver.collect_finished();
    return BoundaryAgreement{flags[0], flags[2] > 0};
}

/// The error that ends a run whose records could not be written, after its checkpoint.
AgreedError records_failed(const StepReporter& reporter, long step, bool saved) {
    const std::string why = reporter.output_error().empty() ? "rank 0 could not write the run's records"
                                                            : reporter.output_error();
    return AgreedError(str(why, "; stopped after step ", step, saved ? " with a checkpoint" : " (checkpointing is off)",
                           ": free the space or fix the file, then resume"));
}

/// The step boundary: the ranks agree (agree_at_step_boundary) and save when a checkpoint is
/// due or they stop. Returns the agreed stop signal (0: none) once its checkpoint is written;
/// throws rank 0's failure to write the records once theirs is.
double save_at_step_boundary(const StopSignals& signals, CheckpointSaver& saver, const StepReporter& reporter,
                             Communicator& comm, const TrainProgress& progress, const LossScalePolicy& loss_scale) {
    const BoundaryAgreement agreed = agree_at_step_boundary(signals, saver, reporter, comm);
    const bool saving = saver.due(progress.step, agreed.stop());
    if (saving) saver.save(checkpoint_progress(progress, loss_scale), agreed.stop());
    if (agreed.stop()) saver.finish();
    if (agreed.output_failed) throw records_failed(reporter, progress.step, saving);
    return agreed.signal;
}

/// The example shards' summary line (rank 0), with the steps train.epochs came to.
void describe_examples(const TrainSetup& setup, const TrainConfig& tc, bool root) {
    if (!setup.examples || !root) return;
    std::printf("ztrain: examples: %s%s\n", setup.examples->describe().c_str(),
                tc.epochs > 0 ? str("; train.epochs = ", tc.epochs, ": ", tc.max_steps, " steps").c_str() : "");
}

/// Where a run starts: model.init_from, or a checkpoint (with its loss scale, a blend's cursor and the notes on
/// what changed since), and the inputs' fingerprint (`inputs`, for the saver) checked against
/// the checkpoint's. Once the inputs are accepted the run directory is prepared. Returns the
/// progress to continue from. Collective.
TrainProgress start_point(const Config& cfg, TrainSetup& setup, ResumePolicy& resume, ModelState& state,
                          LossScalePolicy& loss_scale, nlohmann::json& inputs) {
    Communicator& comm = *setup.comm;
    resume.initial_weights(state, comm);
    const CheckpointRecord resumed = resume.load(state, comm);
    if (resume.resuming()) restore_loss_scale(resumed, loss_scale, comm.rank() == 0);
    resume.report(resumed, comm.size(), setup.shard_comm->size());
    if (resume.resuming() && setup.train_sampler) {
        const std::string note = resume_blend(resumed, *setup.train_data, *setup.train_sampler);
        if (comm.rank() == 0 && !note.empty()) std::printf("ztrain: note: %s\n", note.c_str());
    }
    inputs = check_inputs(cfg, setup, resumed, resume.resuming(), comm);
    prepare_run_dir(cfg, resume.resuming(), resumed.progress.step, comm);
    return resumed.progress;
}

/// A blend's data cursor goes into every checkpoint (one unweighted corpus: nothing).
void record_blend_in_checkpoints(CheckpointSaver& saver, const TrainSetup& setup) {
    if (!setup.train_sampler) return;
    saver.set_blend_record([&setup](uint64_t samples_seen) {
        return blend_record(*setup.train_data, *setup.train_sampler, samples_seen);
    });
}

/// The deck as the ranks of `comm` train it (train.global_batch's grad_accum at their
/// number), validated; *note says what was replaced.
Config deck_for_world(const Config& given, MPI_Comm comm, std::string* note) {
    int world = 1;
    ZT_MPI_CHECK(MPI_Comm_size(comm, &world));
    Config deck = with_global_batch(given, world, note);
    validate(deck);
    return deck;
}

}  // namespace

TrainSummary train(const Config& given, const TrainOptions& options) {
    // SIGTERM/SIGINT/SIGUSR1 -> checkpoint at the next step boundary. Installed first: a signal
    // during start-up (data, checkpoint load) stops after the first step instead of killing.
    const StopSignals signals;
    std::string batch_note;
    const Config deck = deck_for_world(given, options.comm, &batch_note);
    TrainSetup setup = set_up_training(deck, options.comm);
    Communicator& comm = *setup.comm;
    // The data is split over the data-parallel ranks (setup.data()); train.epochs becomes a
    // number of steps once the examples are known.
    Communicator& data = setup.data();
    const Config cfg = with_run_length(deck, setup.examples.get(), data.size());
    const TrainConfig& tc = cfg.train;
    const bool root = comm.rank() == 0;
    if (root && !batch_note.empty()) std::printf("ztrain: note: %s\n", batch_note.c_str());
    const std::unique_ptr<RunLocks> locks = lock_run_dirs(cfg, checkpoint_dir(cfg), options.force_unlock, comm);
    ResumePolicy resume(cfg, comm);
    if (resume.resuming() && nothing_to_train(resume, cfg, root)) return TrainSummary{};
    start_compute(setup, cfg);
    check_stages(cfg, setup);
    // Memory: predicted from the deck, checked before anything model-sized exists.
    const MemoryPlan memory = plan_and_check_memory(cfg, setup, comm);

    // ---- this rank's stages of the model, their sharded state, the loss scale ----
    const DType work = cfg.precision.dtype;
    LossScalePolicy loss_scale(work, cfg.precision, tc.max_bad_steps);
    const std::unique_ptr<StageTraining> training = make_stage_training(cfg, setup, loss_scale, memory, options);
    ModelState& state = training->state();
    // On an error this guard (declared after the model state, so destroyed first) ends the
    // started collectives before ~ModelState frees their buffers: NCCL's are aborted (a device
    // free would otherwise sync on work peers never join), MPI's completed (a ZeRO-1/2 gather
    // would otherwise write into freed parameters).
    const EndCollectivesOnError end_collectives_on_error({setup.shard_comm.get(), setup.replica_comm.get()},
                                                         cfg.parallel.timeout_s);

    // ---- where it starts: init_from, or a checkpoint and what its progress means ----
    nlohmann::json inputs;
    TrainProgress progress = start_point(cfg, setup, resume, state, loss_scale, inputs);
    StepReporter reporter(cfg.run.dir, resume.resuming(), root, tc, comm, *setup.shard_comm, *setup.replica_comm,
                          training->model(), setup.op_profile);
    describe_run(reporter, cfg, setup, memory, progress.step);
    CheckpointSaver saver(cfg, resume.ckpt_dir(), state, comm, reporter, options.comm);
    saver.set_inputs(std::move(inputs));
    record_blend_in_checkpoints(saver, setup);
    reporter.start(cfg, state.bytes(), saver.snapshot_bytes(), setup.backend->threads(), setup.describe_data(),
                   work, cfg.precision.reduce(), loss_scale);
    describe_examples(setup, tc, root);
    const std::string stages = training->describe();
    if (root && !stages.empty()) std::printf("ztrain: %s\n", stages.c_str());

    Evaluator evaluator(tc, *training, setup, reporter);
    evaluator.set_tasks(setup.eval_tasks, cfg.eval);
    const long step_tokens = static_cast<long>(tc.micro_batch) * tc.grad_accum * data.size() * cfg.model.seq_len;
    TrainSummary summary;
    std::atomic<long> current_step{progress.step};
    const CollectiveWatchdog watchdog(setup.all_comms(), cfg.parallel.timeout_s, current_step, peer_hosts(comm));

    reporter.begin_training(progress.step);  // the step loop
    // A fresh run evaluates once before training, so the curve starts at the untrained loss.
    if (progress.step == 0 && progress.step < tc.max_steps) record_evaluation(evaluator.evaluate_at_start(), summary);
    LongRunChecks checks(cfg, setup, state, static_cast<uint64_t>(step_tokens / cfg.model.seq_len));
    for (long step = progress.step; step < tc.max_steps; ++step) {
        current_step = step;
        checks.before_step(step, progress, loss_scale);
        StepOutcome out = training->step(step, progress, reporter);
        out.loss = checks.spikes.debug_loss(out.loss);
        const long done = progress.step;
        record_step(out, done, summary);
        StepReport report = step_report(out, progress, step_tokens, setup.examples != nullptr);
        if (setup.train_sampler) {
            report.tokens_by_corpus = tokens_by_corpus(*setup.train_data, *setup.train_sampler, progress.samples_seen);
        }
        reporter.step(report);
        saver.step_finished(out.step_s);
        if (checks.rolled_back(out, progress, loss_scale, reporter, summary)) {
            step = progress.step - 1;  // the loop's ++step: the step after the snapshot
            continue;
        }
        if (out.verdict.action == LossScalePolicy::Action::kStop) throw AgreedError(out.verdict.stop_reason);
        if ((tc.eval_every > 0 && done % tc.eval_every == 0) || done == tc.max_steps) {
            record_evaluation(evaluator.evaluate(done), summary);
        }
        evaluator.evaluate_tasks(done);
        const double stop = save_at_step_boundary(signals, saver, reporter, comm, progress, loss_scale);
        if (stop > 0) {
            reporter.stopped_by_signal(static_cast<int>(stop), done);
            summary.stopped_by_signal = true;
            break;
        }
    }
    saver.finish();  // the last write is published before the run ends
    if (agree_at_step_boundary(signals, saver, reporter, comm).output_failed) {
        throw records_failed(reporter, progress.step, saver.due(progress.step, true));
    }
    reporter.finish(progress.step);
    const std::string check_cost = checks.replicas.cost();
    if (root && !check_cost.empty()) std::printf("ztrain: %s\n", check_cost.c_str());
    finish_run(options, *training, comm, reporter, summary);
    return summary;
}

}  // namespace zt
