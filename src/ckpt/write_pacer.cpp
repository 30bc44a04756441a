#include "ztrain/ckpt/write_pacer.hpp"

#include <algorithm>
#include <cstdint>

#include "ztrain/core/clock.hpp"

namespace zt {

double pace_sleep_s(uint64_t done, uint64_t total, double elapsed_s, double target_s) {
    if (!(target_s > 0) || total == 0) return 0;
    const double fraction = static_cast<double>(std::min(done, total)) / static_cast<double>(total);
    return std::max(0.0, target_s * fraction - elapsed_s);
}

WritePacer::WritePacer(double target_s) : m_target_s(target_s), m_start(std::chrono::steady_clock::now()) {}

void WritePacer::pace(uint64_t done, uint64_t total) {
    // Sleeps under a millisecond are left to the next piece (the pace is cumulative, so
    // nothing is lost): no timer syscalls for the many small datasets.
    const double sleep_s = hurried() ? 0 : pace_sleep_s(done, total, seconds_since(m_start), m_target_s);
    if (sleep_s >= 1e-3) {
        const auto t0 = std::chrono::steady_clock::now();
        // In whole nanoseconds, at most a day per wait: no overflow for any target.
        const auto until = t0 + std::chrono::nanoseconds(static_cast<int64_t>(std::min(sleep_s, 86400.0) * 1e9));
        {
            std::unique_lock<std::mutex> lock(m_mutex);
            m_wake.wait_until(lock, until, [this] { return hurried(); });
        }
        m_slept_s += seconds_since(t0);
    }
    if (done >= total) end();
}

void WritePacer::end() {
    const std::lock_guard<std::mutex> lock(m_mutex);
    m_ended = true;
}

void WritePacer::hurry() {
    {
        // Set under the mutex: a pace() between its predicate check and its wait cannot
        // miss the notification.
        const std::lock_guard<std::mutex> lock(m_mutex);
        if (!m_hurry.load(std::memory_order_relaxed) && m_target_s > 0 && !m_ended) {
            m_cut_short.store(true, std::memory_order_release);
        }
        m_hurry.store(true, std::memory_order_release);
    }
    m_wake.notify_all();
}

}  // namespace zt
