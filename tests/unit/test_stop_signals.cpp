// Stop signals (train/stop_signals.hpp): SIGTERM, SIGINT and SIGUSR1 only set a flag while a
// run trains, and a run that stopped on one is not killed by the next while it ends.
#include <gtest/gtest.h>

#include <csignal>

#include "ztrain/train/stop_signals.hpp"

namespace {

extern "C" void ignore_signal(int) {}

TEST(StopSignals, ASignalOnlySetsTheFlag) {
    const zt::StopSignals signals;
    EXPECT_EQ(signals.pending(), 0.0);
    std::raise(SIGUSR1);
    EXPECT_EQ(signals.pending(), static_cast<double>(SIGUSR1));
}

// The ranks stop together on the first rank's signal: the copy of a SIGUSR1 that srun
// forwards to a rank on another node can arrive after that rank's run has stopped (its
// checkpoint written), as can the SIGTERM after the grace period. It must still exit 0, not
// die by the signal (the requeue wrapper reads 128 + signal as a failure). The test process
// survives both.
TEST(StopSignals, AfterAStopFurtherWarningsDoNotKillTheProcess) {
    {
        const zt::StopSignals signals;
        std::raise(SIGUSR1);
        ASSERT_NE(signals.pending(), 0.0);
    }
    std::raise(SIGUSR1);
    std::raise(SIGTERM);
    SUCCEED() << "still running after SIGUSR1 and SIGTERM";
}

// A run that was not stopped gives the previous handlers back.
TEST(StopSignals, WithoutAStopThePreviousHandlersComeBack) {
    std::signal(SIGUSR1, ignore_signal);
    std::signal(SIGTERM, ignore_signal);
    { const zt::StopSignals signals; }
    EXPECT_EQ(std::signal(SIGUSR1, SIG_DFL), &ignore_signal);
    EXPECT_EQ(std::signal(SIGTERM, SIG_DFL), &ignore_signal);
}

}  // namespace
