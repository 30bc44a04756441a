// Pacing of a background checkpoint write (checkpoint.async_spread): the shard's data pass
// (direct writes and the hash, each reading the whole snapshot) is spread evenly over a
// target duration instead of running as fast as it can, so its memory traffic takes a
// small share of many steps rather than a large share of a few. Whoever has to wait for
// the write (the next save, a stop signal, the end of training, an error unwinding)
// hurries it: pacing ends at once, a sleep in progress included, and the rest runs at full
// speed. Synchronous saves are never paced.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace zt {

/// Seconds a write that has done `done` of `total` bytes, `elapsed_s` after it started,
/// sleeps so that its progress does not run ahead of an even spread of the bytes over
/// `target_s`: max(0, target_s * done / total - elapsed_s). 0 when not paced (target_s <= 0
/// or total == 0); `done` beyond `total` counts as `total`.
double pace_sleep_s(uint64_t done, uint64_t total, double elapsed_s, double target_s);

/// One write's pacing. The writer calls pace() after each piece; any thread may call hurry().
class WritePacer {
  public:
    /// Starts the write's clock now. target_s <= 0: not paced (pace() never sleeps).
    explicit WritePacer(double target_s = 0);
    WritePacer(const WritePacer&) = delete;
    WritePacer& operator=(const WritePacer&) = delete;

    /// After `done` of the write's `total` bytes: sleeps as pace_sleep_s says, or until hurried.
    void pace(uint64_t done, uint64_t total);
    /// The paced part is over (also for a rank with nothing to pace): a later hurry does
    /// not count as cutting it short.
    void end();
    /// Ends the pacing for good, waking a sleep in progress. Thread-safe.
    void hurry();
    bool hurried() const { return m_hurry.load(std::memory_order_acquire); }
    /// The hurry came while the write was still paced (target > 0, before the last byte or
    /// end()): someone had to wait for it. Thread-safe.
    bool cut_short() const { return m_cut_short.load(std::memory_order_acquire); }

    double target_s() const { return m_target_s; }
    /// Seconds pace() has slept so far (read on the writer thread, or after it is joined).
    double slept_s() const { return m_slept_s; }

  private:
    const double m_target_s;
    const std::chrono::steady_clock::time_point m_start;
    double m_slept_s = 0;
    std::atomic<bool> m_hurry{false};
    std::atomic<bool> m_cut_short{false};
    bool m_ended = false;  ///< pace() saw done >= total, or end() (guarded by m_mutex)
    std::mutex m_mutex;
    std::condition_variable m_wake;
};

}  // namespace zt
