#include "ztrain/train/stop_signals.hpp"

namespace zt {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

/// SIGTERM and SIGUSR1 (the batch system's warnings) only ever set the flag; a second
/// SIGINT while the first is pending takes the default action.
extern "C" void on_stop_signal(int sig) {
    if (sig == SIGINT && g_stop_signal == SIGINT) {
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
        return;
    }
    g_stop_signal = sig;
}

}  // namespace

StopSignals::StopSignals() {
    g_stop_signal = 0;
    for (int i = 0; i < 3; ++i) m_previous[i] = std::signal(kSignals[i], on_stop_signal);
}

StopSignals::~StopSignals() {
    // After a stop the batch system's warnings have been acted on (the checkpoint is written).
    // The ranks stop together on the first rank's signal, so the copy srun forwards to a rank
    // on another node can arrive after that rank's run has ended, and a later SIGTERM too:
    // they keep setting the flag instead of killing the process with 128 + signal. SIGINT
    // comes back (interactive runs).
    const bool stopped = g_stop_signal != 0;
    for (int i = 0; i < 3; ++i) {
        if (stopped && kSignals[i] != SIGINT) continue;
        std::signal(kSignals[i], m_previous[i]);
    }
}

double StopSignals::pending() const { return static_cast<double>(g_stop_signal); }

}  // namespace zt
