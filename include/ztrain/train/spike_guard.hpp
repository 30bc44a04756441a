// Loss spikes (train.spike = rollback): a loss that jumps and does not come back wastes the
// rest of a long run. The guard keeps an in-memory snapshot of this rank's owned state
// (fp32 master, AdamW m and v: host copies through StateShards, the path the async
// checkpoint's snapshot copies with; independent of checkpoint.keep) every
// train.spike_snapshot_every steps, with the progress and loss-scale state; it judges each
// step's loss against the median of the recent clean ones, and when the loss stays above
// train.spike_factor x that median for train.spike_patience steps, or is not finite, it
// restores the snapshot in the process and skips the global batches of the spike steps.
// The skipped spans go into TrainProgress (and so into every later checkpoint: a resume
// skips them too). After train.spike_max_rollbacks rollbacks the run ends (exit 4).
// Also the test hook ZT_DEBUG_SPIKE=S[:N]: the loss of the global batches S.. (N of them;
// all from S without N) is multiplied by 1000, as a poisoned span would make it.
// Not here: the skipped spans' application at every step (apply_skipped_spans, also with
// train.spike = off), the metrics records (StepReporter::rolled_back).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/optim/loss_scale_policy.hpp"

namespace zt {

class Communicator;
class ModelState;

/// Moves the data cursor past every skipped span that starts where it stands.
void apply_skipped_spans(TrainProgress& progress);

/// A confirmed spike: the step it was confirmed at, the step the state goes back to, the
/// global batches skipped (numbered from 1 as the steps of a run without skips) and why.
struct Rollback {
    long step = 0;
    long to_step = 0;
    std::vector<uint64_t> skipped_batches;
    std::string reason;
};

class SpikeGuard {
  public:
    /// `rows`: global rows (samples) per step. `comm`: the run's (the verdict is agreed).
    SpikeGuard(const TrainConfig& tc, ModelState& state, Communicator& comm, uint64_t rows);
    ~SpikeGuard();
    SpikeGuard(const SpikeGuard&) = delete;
    SpikeGuard& operator=(const SpikeGuard&) = delete;

    /// Before a step: the skipped spans due, then the snapshot when one is due (none yet, or
    /// every train.spike_snapshot_every steps while no spike is pending).
    void before_step(TrainProgress& progress, const LossScalePolicy& loss_scale);
    /// The step's loss as judged and reported: the ZT_DEBUG_SPIKE hook's, else `loss`.
    double debug_loss(double loss) const;
    /// After step `done` with `loss`: a rollback when the spike is confirmed (agreed by
    /// every rank). Throws AgreedError (exit 4) when train.spike_max_rollbacks are spent.
    std::optional<Rollback> judge(long done, double loss, const TrainProgress& progress);
    /// Restores the snapshot (collective: the working copy is re-assembled) and returns the
    /// progress to go on from, with the spike's batches added to the skipped spans.
    TrainProgress roll_back(const TrainProgress& now, LossScalePolicy& loss_scale);

  private:
    struct Snapshot;
    void take_snapshot(const TrainProgress& progress, const LossScalePolicy& loss_scale);
    double median() const;

    const TrainConfig& m_tc;
    ModelState& m_state;
    Communicator& m_comm;
    uint64_t m_rows;
    std::unique_ptr<Snapshot> m_snapshot;
    std::deque<double> m_recent;    ///< the latest clean losses (the median's window)
    uint64_t m_cursor = 0;          ///< the data cursor at the start of the current step
    int m_pending = 0;              ///< consecutive spike steps so far
    uint64_t m_spike_cursor = 0;    ///< the data cursor at the first of them
    int m_rollbacks = 0;
    long m_debug_first = -1;        ///< ZT_DEBUG_SPIKE: the first batch (1-based), -1 off
    long m_debug_count = -1;        ///< batches from it; -1: all
};

}  // namespace zt
