// Stragglers: a rank that computes slower than the others holds every collective back, and
// nothing crashes. Each step the reporter gathers every rank's times in the all-reduce it
// already makes for comm_overlap.wait_ms_by_rank (no second collective); this component sums
// them over run.report_every steps and names the ranks whose compute time is more than 20%
// above the median, with their hosts and the phase they lose the most time in. Not here: the
// gathering (step_reporter.cpp) and writing the record.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

namespace zt {

/// The phases a step's time is split into (StepReport's PhaseTimes, as metrics name them).
constexpr int kStragglerPhases = 4;
constexpr std::array<const char*, kStragglerPhases> kStragglerPhaseNames{"forward", "backward", "communication",
                                                                          "optimizer"};

/// One rank's figures for one step, in ms: its step time, its compute time (the step less
/// the time it waited for collectives) and the phases' times.
struct RankStepTimes {
    double step_ms = 0;
    double compute_ms = 0;
    std::array<double, kStragglerPhases> phase_ms{};
};

/// A report: the slow ranks (slowest first), their hosts, each one's compute time over the
/// median's, the phase the slowest loses the most time in, and the window it covers.
struct Stragglers {
    long step = 0;
    long first_step = 0;  ///< the window's first step
    std::vector<int> ranks;
    std::vector<std::string> hosts;
    std::vector<double> ratios;  ///< compute time / the median rank's, per named rank
    double median_ms = 0;        ///< the median rank's mean compute time per step
    std::string phase;
};

/// The slowest and the fastest rank's compute time of one step (the step record's compute_ms).
struct ComputeExtremes {
    double slowest_ms = 0, fastest_ms = 0;
    int slowest_rank = 0, fastest_rank = 0;
};
ComputeExtremes compute_extremes(const std::vector<RankStepTimes>& ranks);

class StragglerReport {
  public:
    /// Ranks more than this much slower than the median are named...
    static constexpr double kSlowRatio = 1.2;
    /// ...when what they compute beyond it is also this fraction of the median step: where
    /// communication dominates the step, a fraction of a millisecond is noise, not a straggler.
    static constexpr double kMinExcessOfStep = 0.1;
    /// ...and in at least this fraction of the window's steps, each judged alone: a rank
    /// the system paused once (another process, a page fault storm) is no straggler.
    static constexpr double kMinSlowSteps = 0.75;
    /// `report_every` steps per window (0: never report); `hosts`: every rank's, rank order.
    StragglerReport(int report_every, std::vector<std::string> hosts)
        : m_every(report_every), m_hosts(std::move(hosts)) {}
    /// Adds step `step`'s figures (rank order); at the end of a window, the report when a
    /// rank is slow. `warm_up`: the process's first step, left out of the sums.
    std::optional<Stragglers> add(long step, const std::vector<RankStepTimes>& ranks, bool warm_up);

  private:
    int m_every;
    std::vector<std::string> m_hosts;
    std::vector<RankStepTimes> m_sum;  ///< per rank, over the window's steps
    std::vector<long> m_slow_steps;    ///< per rank: the window's steps it was slow in
    long m_steps = 0;                  ///< steps summed in the window
    long m_first = 0;
};

/// "stragglers at steps A-B: rank 1 (host) 2.31x the median compute time (12.0 ms/step), slowest in backward".
std::string describe(const Stragglers& s);

}  // namespace zt
