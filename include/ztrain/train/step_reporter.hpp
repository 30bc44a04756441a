// What rank 0 tells the user and metrics.jsonl about a run: the start-up memory record and
// table, one record and (every train.log_every steps) one console line per optimizer step,
// skipped steps, validation losses, samples, and the closing line. Every other rank holds a
// reporter that writes nothing. Not here: computing any of it (the trainer, the evaluator).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ztrain/config/config.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/parallel/device_mesh.hpp"
#include "ztrain/train/metrics.hpp"
#include "ztrain/train/spike_guard.hpp"
#include "ztrain/train/straggler_report.hpp"
#include "ztrain/train/tensorboard.hpp"

namespace zt {

class Communicator;
class Transformer;
class ProfilingBackend;
class LossScalePolicy;
struct ChoiceCounts;
struct StateBytes;

/// Wall seconds of one optimizer step's phases. opt covers the overflow check, grad norm,
/// clipping, AdamW and re-assembling parameters (ZeRO all-gathers included); comm is the
/// time spent waiting for gradient reductions after backward (plus the loss all-reduce).
struct PhaseTimes {
    double zero = 0.0;
    double fwd = 0.0;
    double bwd = 0.0;
    double comm = 0.0;
    double opt = 0.0;
};

/// One optimizer step as it is reported.
struct StepReport {
    long step = 0;              ///< 1-based: steps done
    double loss = 0.0;
    double lr = 0.0;
    double grad_norm = 0.0;     ///< unscaled; NaN/inf when the gradients were not finite
    double loss_scale = 1.0;    ///< the scale the step ran with
    bool skipped = false;
    uint64_t tokens_seen = 0;
    double tokens_per_s = 0.0;
    double step_s = 0.0;
    PhaseTimes phases;
    /// Example shards only (absent from the record otherwise): the step's target tokens and
    /// rows over every rank and micro-step.
    std::optional<uint64_t> targets;
    std::optional<uint64_t> rows;
    /// A weighted data.train only (absent otherwise): the tokens taken from each corpus so
    /// far, keyed by its pattern, in the list's order (they sum to tokens_seen).
    std::vector<std::pair<std::string, uint64_t>> tokens_by_corpus;
};

/// A validation loss per corpus of a weighted data.val, keyed by its pattern.
using CorpusLosses = std::vector<std::pair<std::string, double>>;

/// Text (a sample) as a terminal should show it: valid UTF-8 as is, line breaks kept and
/// indented by four spaces, every control byte and every byte of invalid UTF-8 escaped as
/// \xNN (it would garble the terminal, or print as a replacement character).
std::string printable_text(const std::string& s);

/// "1h02m", "3m05s", "42s"; "?" for a negative or absurd duration.
std::string format_duration(double seconds);


/// A published checkpoint, as the metrics record and the console line report it.
struct CheckpointSaved {
    std::string dir;
    long step = 0;
    bool async = false;
    uint64_t bytes = 0;      ///< every file published (all ranks' shards and meta.h5)
    double blocked_s = 0;    ///< the training loop waited this long
    double write_s = 0;      ///< save start to published checkpoint
    /// Where rank 0's write time went (ckpt/checkpoint.hpp's CheckpointWriteReport).
    double snapshot_s = 0, shard_write_s = 0, shard_sync_s = 0, publish_s = 0;
    bool direct_io = false;  ///< rank 0's data went to the disk by O_DIRECT
    double writer_cpu_s = 0; ///< rank 0's background writer: CPU time it took from training
    /// Rank 0's pacing (async): the duration its data pass was spread over (0: not paced),
    /// the time it slept for that, and whether a wait for the write cut the pacing short.
    double pace_target_s = 0, paced_s = 0;
    bool hurried = false;
};

class StepReporter {
  public:
    /// Opens run_dir/metrics.jsonl on rank 0 (`root`), appending when the run resumes.
    /// `comm` (the run's: scalars, agreements) and the model state's `shard` and `replica`
    /// communicators are those whose per-step bytes the records count (comm_bytes: the sum
    /// per kind, and `intra` / `inter` for the shard group and across groups); `model` gives
    /// the per-op profile when it is on.
    StepReporter(const std::string& run_dir, bool resuming, bool root, const TrainConfig& tc,
                 Communicator& comm, const Communicator& shard, const Communicator& replica,
                 const Transformer& model, ProfilingBackend* op_profile);
    /// Mirrors every record into a TensorBoard event file in `dir` (rank 0; run.tensorboard),
    /// a new one per run; `resumed_step`: the checkpoint's step (0: a fresh run). Call before
    /// start().
    void open_tensorboard(const std::string& dir, long resumed_step) {
        if (m_root) m_tensorboard = std::make_unique<TensorBoardWriter>(dir, resumed_step);
    }
    /// Where the ranks are (nodes, groups), for the memory record; call before start().
    void set_rank_layout(const RankLayout& layout) { m_layout = layout; }
    /// Tensor parallelism: the tensor group's communicator (its bytes also go to comm_bytes'
    /// `tensor` object) and the data-parallel ranks' (the losses' sums), counted with the
    /// others; call before the first step.
    void set_tensor_comms(const Communicator* tensor, const Communicator* data) {
        m_tensor = tensor;
        m_data = data;
    }

    /// Straggler reports every `report_every` steps (run.report_every; 0: none), naming
    /// `hosts` (every rank's, rank order); call before the first step.
    void watch_stragglers(int report_every, std::vector<std::string> hosts) {
        m_stragglers = std::make_unique<StragglerReport>(report_every, std::move(hosts));
    }

    /// The memory plan's figures (bytes) and its overlap depth, for the memory record
    /// (predicted_peak, overlap_depth) and the start-up line; call before start().
    void set_memory_plan(double per_rank, double per_node, double available, int overlap_depth) {
        m_plan_rank = per_rank;
        m_plan_node = per_node;
        m_plan_available = available;
        m_overlap_depth = overlap_depth;
    }
    /// At the end: every rank's measured peak resident set (bytes, rank order) against the
    /// plan, as a metrics record {"event":"memory_peak", ...} and a console line.
    void memory_peaks(const std::vector<double>& measured);
    /// The memory record, the model and batch lines, the memory table (bytes per kind next to
    /// the ZeRO formula each should follow) and, for 16-bit runs, the precision line.
    /// `snapshot_bytes`: the async checkpoint snapshot's host buffer (0: synchronous saves).
    /// `data_text`: what the batch line says the data is (TrainSetup::describe_data).
    void start(const Config& cfg, const StateBytes& bytes, size_t snapshot_bytes, int threads,
               const std::string& data_text, DType work, DType reduce, const LossScalePolicy& loss_scale);
    /// Starts the clock of the closing line (the training loop begins); `first_step` is the
    /// number of steps already done (the resumed step; 0 for a fresh run). Speeds, the ETA
    /// and the closing line count only the steps this process runs.
    void begin_training(long first_step) {
        m_first_step = first_step;
        m_run_start = std::chrono::steady_clock::now();
    }
    /// The console line of a skipped step (before its record); scale_after is the scale
    /// the policy moved to (fp16 only).
    void skipped(long step, bool fp16, double scale_before, double scale_after);
    /// The step's metrics record and, on log steps, its console line.
    void step(const StepReport& r);
    /// {"step","val_loss"}, with "val_loss_by_corpus" when `by_corpus` is not empty (a
    /// weighted data.val; `loss` is then their weighted mean).
    void val_loss(long step, double loss, const CorpusLosses& by_corpus = {});
    /// {"event":"eval","step","task","n","acc","acc_norm","acc_token"} and a console line.
    void choice_eval(long step, const std::string& task, const ChoiceCounts& counts);
    void sample(long step, const std::string& text);
    /// {"event":"checkpoint","step","async","bytes","blocked_ms","write_ms"} and a console line.
    void checkpoint_written(const CheckpointSaved& saved);
    void stopped_by_signal(int signal, long step);
    /// Why metrics.jsonl or the TensorBoard file could not be written (rank 0's first
    /// failure; empty: none, and always on the other ranks).
    const std::string& output_error() const { return m_output_error; }
    /// A loss-spike rollback: the records past rb.to_step superseded, then
    /// {"event":"rollback","step","to_step","skipped_batches","reason"} and a console line.
    void rolled_back(const Rollback& rb);
    /// "ztrain: N steps in T" (fresh), "ztrain: N steps (A to B) in T" (resumed); `last_step`
    /// is the number of steps done at the end.
    void finish(long last_step);

  private:
    /// metrics.jsonl comm_bytes: this step's bytes per collective kind, in all and per group.
    nlohmann::ordered_json comm_bytes_record() const;
    /// {"event":"stragglers","step","ranks","hosts","phase",...} and its console line.
    void report_stragglers(const Stragglers& s);
    /// One record to metrics.jsonl and, when open, the TensorBoard file. A write that fails
    /// is kept in output_error() and ends the writing: the loop stops at the next step
    /// boundary with a checkpoint instead of losing the steps since the last one.
    void record(const nlohmann::ordered_json& rec);

    bool m_root;
    int m_max_steps;
    int m_log_every;
    double m_muon_lr_ratio = 0.0;  ///< train.optimizer = muon: Muon's rate / lr (0: AdamW alone)
    MetricsLog m_metrics;
    std::string m_output_error;  ///< the first failed write (record)
    std::unique_ptr<TensorBoardWriter> m_tensorboard;
    std::unique_ptr<StragglerReport> m_stragglers;  ///< null until watch_stragglers
    Communicator& m_comm;  // non-const: step() gathers every rank's collective waits
    const Communicator& m_shard;
    const Communicator& m_replica;
    RankLayout m_layout;
    const Communicator* m_tensor = nullptr;
    const Communicator* m_data = nullptr;
    /// Every communicator whose bytes a step record counts.
    std::vector<const Communicator*> counted() const;
    const Transformer& m_model;
    ProfilingBackend* m_op_profile;  ///< null unless ZT_PROFILE_OPS is on
    std::chrono::steady_clock::time_point m_run_start;
    double m_train_seconds = 0.0;  ///< this process's steps after its first (which warms caches)
    long m_first_step = 0;         ///< steps done when this process began training
    double m_plan_rank = 0;
    double m_plan_node = 0;
    double m_plan_available = 0;
    int m_overlap_depth = 1;
};

}  // namespace zt
