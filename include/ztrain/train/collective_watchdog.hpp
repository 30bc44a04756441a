// The collective watchdog: aborts the job when this rank has waited in one collective longer
// than parallel.timeout_s, or when a device collective failed or has not finished on the GPU
// within parallel.timeout_s. A rank that died or hangs would otherwise keep every other rank
// waiting forever; exiting with status 1 makes mpirun/srun take the remaining ranks down.
// Also the test hook that simulates such a rank (ZT_DEBUG_STALL).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ztrain/model/model_layout.hpp"

namespace zt {

class Communicator;

class CollectiveWatchdog {
  public:
    /// Watches `comms` (the run's first: its rank names this rank) from a thread (none for
    /// timeout_s <= 0 or a single rank); `step` is the 0-based step the loop is in, for the
    /// message. Each is polled for a host collective blocked too long (pending_collective)
    /// and for collectives failing or stuck on the GPU (Communicator::device_stall), which
    /// block no host call of their own.
    /// `peers` (may be empty) is appended to the abort message: which hosts the other ranks
    /// are on (peer_hosts), so a lost node or a cut link is named.
    CollectiveWatchdog(std::vector<Communicator*> comms, double timeout_s, const std::atomic<long>& step,
                       std::string peers = std::string());
    ~CollectiveWatchdog();
    CollectiveWatchdog(const CollectiveWatchdog&) = delete;
    CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  private:
    void run();
    std::vector<Communicator*> m_comms;
    double m_timeout_s;
    std::string m_peers;
    const std::atomic<long>& m_step;
    std::thread m_thread;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    bool m_stop = false;
};

/// "the ranks on other hosts: node2 (ranks 2-3)" for this rank of `comm` (collective: every
/// rank's host name is gathered once, at start); "" when all ranks share this host. A stalled
/// collective cannot tell which peer stopped answering; when this rank's own node is fine, a
/// stall that every rank of the node reports points at these hosts.
std::string peer_hosts(Communicator& comm);
/// Every rank's host name, in rank order (collective over `comm`: one gather).
std::vector<std::string> rank_hosts(Communicator& comm);

/// Test hook for the watchdog: ZT_DEBUG_STALL="RANK:STEP:SECONDS" makes that rank sleep
/// before the gradient reduction of that (1-based) step, as a hung rank would.
void maybe_stall(int rank, long step);

/// Test hook for the communication thread: ZT_DEBUG_SLOW_UNITS="RANK:MS" makes that rank
/// sleep MS before each unit it acquires, as a rank with slower compute would; the model
/// then runs through the returned store. Nothing (the store itself) otherwise.
class SlowUnitStore : public UnitStore {
  public:
    SlowUnitStore(UnitStore& inner, double sleep_s) : m_inner(inner), m_sleep_s(sleep_s) {}
    const float* acquire(int unit) override;
    void release(int unit) override { m_inner.release(unit); }
    void prefetch(int unit) override { m_inner.prefetch(unit); }
    float* grads(int unit) override { return m_inner.grads(unit); }
    void grads_done(int unit) override { m_inner.grads_done(unit); }
    bool grads_need_zero(int unit) override { return m_inner.grads_need_zero(unit); }

  private:
    UnitStore& m_inner;
    double m_sleep_s;
};
/// The store the model should use on `rank`: a SlowUnitStore around `store` when
/// ZT_DEBUG_SLOW_UNITS names this rank (kept in `holder`), else `store`.
UnitStore& maybe_slow_units(int rank, UnitStore& store, std::unique_ptr<SlowUnitStore>& holder);

}  // namespace zt
