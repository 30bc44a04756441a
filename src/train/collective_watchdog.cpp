#include "ztrain/train/collective_watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>

#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

std::vector<std::string> rank_hosts(Communicator& comm) {
    constexpr size_t kName = 64;
    char mine[kName] = {};
    if (gethostname(mine, kName - 1) != 0) std::strncpy(mine, "?", kName - 1);
    std::vector<char> all(kName * static_cast<size_t>(comm.size()));
    comm.all_gather_bytes(mine, all.data(), kName);
    std::vector<std::string> hosts;
    for (int r = 0; r < comm.size(); ++r) hosts.emplace_back(&all[kName * static_cast<size_t>(r)]);
    return hosts;
}

std::string peer_hosts(Communicator& comm) {
    const std::vector<std::string> hosts = rank_hosts(comm);
    const std::string& mine = hosts[static_cast<size_t>(comm.rank())];
    std::map<std::string, std::vector<int>> others;  // host -> its ranks, in rank order
    for (int r = 0; r < comm.size(); ++r) {
        const std::string& host = hosts[static_cast<size_t>(r)];
        if (host != mine) others[host].push_back(r);
    }
    std::string out;
    for (const auto& [host, ranks] : others) {
        const bool run = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
        std::string list;
        for (int r : ranks) list += str(list.empty() ? "" : ", ", r);
        out += str(out.empty() ? "" : ", ", host, " (rank", ranks.size() > 1 ? "s " : " ",
                   run && ranks.size() > 2 ? str(ranks.front(), "-", ranks.back()) : list, ")");
    }
    return out.empty() ? out : "the ranks on other hosts: " + out;
}

CollectiveWatchdog::CollectiveWatchdog(std::vector<Communicator*> comms, double timeout_s,
                                       const std::atomic<long>& step, std::string peers)
    : m_comms(std::move(comms)), m_timeout_s(timeout_s), m_peers(std::move(peers)), m_step(step) {
    ZT_REQUIRE(!m_comms.empty(), "CollectiveWatchdog: no communicator");
    if (timeout_s > 0 && m_comms.front()->size() > 1) m_thread = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        m_stop = true;
    }
    m_cv.notify_all();
    if (m_thread.joinable()) m_thread.join();
}

void CollectiveWatchdog::run() {
    const auto poll = std::chrono::milliseconds(static_cast<long>(std::min(1.0, m_timeout_s / 4) * 1000) + 1);
    std::unique_lock<std::mutex> lock(m_mutex);
    const int rank = m_comms.front()->rank();
    while (!m_cv.wait_for(lock, poll, [this] { return m_stop; })) {
        for (Communicator* c : m_comms) {
            const std::string stall = c->device_stall(m_timeout_s);
            if (!stall.empty()) {
                std::fprintf(stderr,
                             "ztrain: rank %d: %s in step %ld (parallel.timeout_s = %g): another rank is stuck or "
                             "has died, or the device failed; aborting the job\n",
                             rank, stall.c_str(), m_step.load() + 1, m_timeout_s);
                std::fflush(stderr);
                std::fflush(stdout);
                std::_Exit(kExitFailure);
            }
            const char* name = c->pending_collective();
            if (name == nullptr) continue;
            const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
            const double waited = static_cast<double>(now - c->pending_since_ns()) * 1e-9;
            // Re-read: the collective may have finished while the wait was computed.
            if (waited < m_timeout_s || c->pending_collective() == nullptr) continue;
            std::fprintf(stderr,
                         "ztrain: rank %d: collective %s has waited %.0f s in step %ld (parallel.timeout_s = %g): "
                         "another rank is stuck or has died, or a host is unreachable%s%s%s; aborting the job\n",
                         rank, name, waited, m_step.load() + 1, m_timeout_s, m_peers.empty() ? "" : " (",
                         m_peers.c_str(), m_peers.empty() ? "" : ")");
            std::fflush(stderr);
            std::fflush(stdout);
            std::_Exit(kExitFailure);
        }
    }
}

void maybe_stall(int rank, long step) {
    const char* spec = std::getenv("ZT_DEBUG_STALL");
    if (spec == nullptr) return;
    int r = -1;
    long s = -1;
    double seconds = 0;
    if (std::sscanf(spec, "%d:%ld:%lf", &r, &s, &seconds) == 3 && r == rank && s == step) {
        std::fprintf(stderr, "ztrain: rank %d: ZT_DEBUG_STALL: sleeping %.0f s in step %ld\n", rank, seconds, step);
        std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    }
}

const float* SlowUnitStore::acquire(int unit) {
    std::this_thread::sleep_for(std::chrono::duration<double>(m_sleep_s));
    return m_inner.acquire(unit);
}

UnitStore& maybe_slow_units(int rank, UnitStore& store, std::unique_ptr<SlowUnitStore>& holder) {
    const char* spec = std::getenv("ZT_DEBUG_SLOW_UNITS");
    int r = -1;
    double ms = 0;
    if (spec == nullptr || std::sscanf(spec, "%d:%lf", &r, &ms) != 2 || r != rank || ms <= 0) return store;
    holder = std::make_unique<SlowUnitStore>(store, ms / 1e3);
    return *holder;
}

}  // namespace zt
