// When and how the training loop saves: every checkpoint.every steps, at the end, and on a
// stop signal; a failed save either stops the run (checkpoint.on_error = stop, exit 1) or is
// reported and training goes on (continue). Either way `latest` still names a complete
// checkpoint and the half-written directory goes. Not here: the format (ckpt/checkpoint.hpp).
//
// checkpoint.async = true: a save waits for the previous write (if one is still running),
// copies this rank's owned state into a host snapshot (the only time training is blocked)
// and hands the write to a background thread (ckpt/background_writer.hpp), whose
// agreements and publish run on a communicator of their own beside the training
// collectives. The write's outcome is taken at the first step boundary where every rank's
// writer has finished (the loop's agreed flag), so all ranks report it, or stop on its
// failure, at the same step.
//
// Pacing (checkpoint.async_spread): the write is spread over spread x the expected time
// until the saver next has to wait for it, i.e. the steps to the next periodic save (or to
// the end of training, whichever comes first) x the median of the recent step times. Every
// wait hurries it (the next save, a stop signal, the end of training, an error unwinding
// through the destructor), so pacing never makes a save, a stop or an exit slower.
#pragma once

#include <mpi.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/ckpt/background_writer.hpp"
#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"

namespace zt {

class Communicator;
class Error;
class ModelState;
class StepReporter;

/// Seconds a background write after step `step` is paced over: `spread` x the steps until
/// the next periodic save (every `every`; 0: none) or `max_steps`, whichever comes first,
/// x `step_s` (the recent step time). 0 (full speed) when any factor is 0.
double async_pace_target_s(double spread, long step, int every, long max_steps, double step_s);

/// Median of `v` (the upper one of an even count); 0 when empty.
double median_of(std::vector<double> v);

/// Whether checkpoint.async has anything to overlap: a periodic save before the last step.
/// The last save (end of training, stop signal) has no steps after it, so it is written
/// synchronously, straight from the model state; with no periodic save the snapshot (and
/// its host memory) is not needed at all. The memory plan and the saver both ask this.
bool async_saves_planned(const Config& cfg);

class CheckpointSaver {
  public:
    /// `mpi_comm`: the training ranks (async saves talk over a duplicate of it).
    CheckpointSaver(const Config& cfg, std::string ckpt_dir, ModelState& state, Communicator& comm,
                    StepReporter& reporter, MPI_Comm mpi_comm);
    /// Waits for a write in flight without reporting it (an error is unwinding).
    ~CheckpointSaver();

    /// Whether the loop saves after `done` steps: periodic, last step, or a stop signal.
    bool due(long done, bool stop_requested) const;

    /// A step took `step_s` seconds: the recent step times set the pace of async writes.
    void step_finished(double step_s);

    /// Saves `progress` (collective). Throws Error when the save (or, async, the previous
    /// one, collected first) failed and on_error = stop. The last save of the run (the last
    /// step, or `stop_requested`) waits for a write in flight and then writes synchronously.
    void save(const TrainProgress& progress, bool stop_requested);

    /// Whether this rank's background write is still running: the step boundary's input to
    /// the agreement that decides when every rank collects it.
    bool writing() const { return m_writer.running(); }
    /// Reports a finished background write, or handles its failure like a synchronous one.
    /// Call when the ranks agreed that no writer is running (no-op when none is in flight).
    void collect_finished();
    /// Waits for the write in flight (hurried: no more pacing) and reports it (end of
    /// training, stop signal).
    void finish() { collect_finished(); }

    /// The run's input fingerprint (rank 0's; input_fingerprint.hpp), saved with every checkpoint.
    void set_inputs(nlohmann::json inputs) { m_inputs = std::move(inputs); }
    /// The blend's data cursor at a save's samples_seen (blend_cursor.hpp's record; null:
    /// none), saved with every checkpoint. Unset: no record.
    void set_blend_record(std::function<nlohmann::json(uint64_t samples_seen)> record) {
        m_blend_record = std::move(record);
    }

    bool async() const { return m_snapshot != nullptr; }
    /// Host bytes the async snapshot holds (0 for synchronous saves).
    size_t snapshot_bytes() const { return m_snapshot ? m_snapshot->bytes() : 0; }

  private:
    /// A failed save: the partial directory removed; stop or warn (checkpoint.on_error),
    /// and always stop when it was the run's `last` save.
    void handle_failure(long step, const Error& e, bool last);
    /// What a failed save leaves to resume from: the step `latest` names ("" when none).
    std::string previous_checkpoint() const;

    const Config& m_cfg;
    std::string m_ckpt_dir;
    ModelState& m_state;
    Communicator& m_comm;
    StepReporter& m_reporter;
    std::unique_ptr<Communicator> m_ckpt_comm;   ///< async: checkpoint traffic only
    std::unique_ptr<CheckpointSnapshot> m_snapshot;
    nlohmann::json m_inputs;
    std::function<nlohmann::json(uint64_t)> m_blend_record;
    std::vector<double> m_step_times;  ///< the last kStepWindow step times (a ring)
    size_t m_step_next = 0;            ///< where the next one goes in the ring
    // The write in flight.
    long m_pending_step = 0;
    double m_pending_blocked_s = 0;
    double m_pending_snapshot_s = 0;
    std::chrono::steady_clock::time_point m_pending_start;
    std::chrono::steady_clock::time_point m_pending_end;  ///< set by the writer thread
    BackgroundWriter m_writer;  ///< declared last: joined before anything it uses goes
};

}  // namespace zt
