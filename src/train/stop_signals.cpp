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
    for (int i = 0; i < 3; ++i) std::signal(kSignals[i], m_previous[i]);
}

double StopSignals::pending() const { return static_cast<double>(g_stop_signal); }

}  // namespace zt
