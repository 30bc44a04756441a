// Stop signals: SIGTERM, SIGINT and SIGUSR1 become a flag the training loop reads at step
// boundaries (Slurm sends one of them before preempting or at the time limit), so the run
// checkpoints and exits 0 instead of dying mid-step. Not here: agreeing on the flag across
// ranks (the loop does that with one all-reduce, so every rank saves together).
#pragma once

#include <csignal>

namespace zt {

/// Installs the handlers for its lifetime; the previous handlers come back when it goes,
/// except SIGTERM's and SIGUSR1's after a stop: those keep only setting the flag, so one more
/// warning while the stopped process ends does not kill it. A second SIGINT while the first
/// is pending (Ctrl-C during a hung start-up) takes the default action, so an interactive
/// run can always be killed.
class StopSignals {
  public:
    StopSignals();
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;
    /// The pending signal number (0: none), as a double ready for a MAX all-reduce.
    double pending() const;

  private:
    static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
    void (*m_previous[3])(int);
};

}  // namespace zt
