// Stragglers named from every rank's step times (include/ztrain/train/straggler_report.hpp).
#include "ztrain/train/straggler_report.hpp"

#include <algorithm>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    const size_t mid = v.size() / 2;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
    const double hi = v[mid];
    if (v.size() % 2 == 1) return hi;
    return (*std::max_element(v.begin(), v.begin() + static_cast<long>(mid)) + hi) / 2;
}

/// The phase in which `rank` spends the most time beyond the median rank's.
std::string slowest_phase(const std::vector<RankStepTimes>& sum, int rank) {
    int worst = 0;
    double most = -1e300;
    for (int k = 0; k < kStragglerPhases; ++k) {
        std::vector<double> phase;
        for (const RankStepTimes& t : sum) phase.push_back(t.phase_ms[static_cast<size_t>(k)]);
        const double excess = sum[static_cast<size_t>(rank)].phase_ms[static_cast<size_t>(k)] - median(phase);
        if (excess > most) {
            most = excess;
            worst = k;
        }
    }
    return kStragglerPhaseNames[static_cast<size_t>(worst)];
}

/// The ranks whose compute time is above kSlowRatio x the median and by more than
/// kMinExcessOfStep of the median step (`per_rank`: summed or one step's figures).
std::vector<bool> slow_ranks(const std::vector<RankStepTimes>& per_rank) {
    std::vector<double> compute, step_ms;
    for (const RankStepTimes& t : per_rank) {
        compute.push_back(t.compute_ms);
        step_ms.push_back(t.step_ms);
    }
    const double mid = median(compute);
    const double min_excess = StragglerReport::kMinExcessOfStep * median(step_ms);
    std::vector<bool> slow(per_rank.size());
    for (size_t r = 0; r < compute.size(); ++r) {
        slow[r] = mid > 0 && compute[r] > StragglerReport::kSlowRatio * mid && compute[r] - mid > min_excess;
    }
    return slow;
}

}  // namespace

ComputeExtremes compute_extremes(const std::vector<RankStepTimes>& ranks) {
    ComputeExtremes e;
    if (ranks.empty()) return e;
    const auto by_compute = [](const RankStepTimes& a, const RankStepTimes& b) { return a.compute_ms < b.compute_ms; };
    const auto lo = std::min_element(ranks.begin(), ranks.end(), by_compute);
    const auto hi = std::max_element(ranks.begin(), ranks.end(), by_compute);
    e.fastest_ms = lo->compute_ms;
    e.fastest_rank = static_cast<int>(lo - ranks.begin());
    e.slowest_ms = hi->compute_ms;
    e.slowest_rank = static_cast<int>(hi - ranks.begin());
    return e;
}

std::optional<Stragglers> StragglerReport::add(long step, const std::vector<RankStepTimes>& ranks, bool warm_up) {
    if (m_every <= 0 || ranks.size() < 2) return std::nullopt;
    if (m_sum.size() != ranks.size()) {
        m_sum.assign(ranks.size(), RankStepTimes{});
        m_slow_steps.assign(ranks.size(), 0);
    }
    if (!warm_up) {
        if (m_steps == 0) m_first = step;
        const std::vector<bool> slow_now = slow_ranks(ranks);
        for (size_t r = 0; r < ranks.size(); ++r) m_slow_steps[r] += slow_now[r] ? 1 : 0;
        for (size_t r = 0; r < ranks.size(); ++r) {
            m_sum[r].step_ms += ranks[r].step_ms;
            m_sum[r].compute_ms += ranks[r].compute_ms;
            for (size_t k = 0; k < m_sum[r].phase_ms.size(); ++k) m_sum[r].phase_ms[k] += ranks[r].phase_ms[k];
        }
        ++m_steps;
    }
    if (step % m_every != 0 || m_steps == 0) return std::nullopt;
    std::vector<double> compute;
    for (const RankStepTimes& t : m_sum) compute.push_back(t.compute_ms);
    const double mid = median(compute);
    const std::vector<bool> slow_sum = slow_ranks(m_sum);
    Stragglers s;
    s.step = step;
    s.first_step = m_first;
    s.median_ms = mid / static_cast<double>(m_steps);
    std::vector<int> slow;
    for (size_t r = 0; r < compute.size(); ++r) {
        const bool often = static_cast<double>(m_slow_steps[r]) >= kMinSlowSteps * static_cast<double>(m_steps);
        if (slow_sum[r] && often) slow.push_back(static_cast<int>(r));
    }
    std::sort(slow.begin(), slow.end(), [&](int a, int b) { return compute[static_cast<size_t>(a)] > compute[static_cast<size_t>(b)]; });
    for (int r : slow) {
        s.ranks.push_back(r);
        s.hosts.push_back(static_cast<size_t>(r) < m_hosts.size() ? m_hosts[static_cast<size_t>(r)] : "?");
        s.ratios.push_back(compute[static_cast<size_t>(r)] / mid);
    }
    if (!slow.empty()) s.phase = slowest_phase(m_sum, slow.front());
    m_sum.assign(ranks.size(), RankStepTimes{});
    m_slow_steps.assign(ranks.size(), 0);
    m_steps = 0;
    if (slow.empty()) return std::nullopt;
    return s;
}

std::string describe(const Stragglers& s) {
    std::string ranks;
    for (size_t i = 0; i < s.ranks.size(); ++i) {
        ranks += str(i ? ", " : "", "rank ", s.ranks[i], " (", s.hosts[i], ") ",
                     static_cast<double>(static_cast<long>(s.ratios[i] * 100 + 0.5)) / 100, "x");
    }
    return str("stragglers over steps ", s.first_step, "-", s.step, ": ", ranks, " the median compute time (",
               static_cast<double>(static_cast<long>(s.median_ms * 10 + 0.5)) / 10, " ms/step), slowest in ", s.phase);
}

}  // namespace zt
