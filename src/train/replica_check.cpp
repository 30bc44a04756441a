// Replicas and checksums at rest compared every parallel.check_every steps
// (include/ztrain/train/replica_check.hpp).
#include "ztrain/train/replica_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "ztrain/ckpt/checkpoint.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/clock.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/collective_watchdog.hpp"

namespace zt {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kOwnedKinds[] = {"master", "AdamW m", "AdamW v"};
const char* const kParamKinds[] = {"parameters"};

/// Every rank of `group`'s world rank, in group order.
std::vector<int> world_ranks(Communicator& group, int world_rank) {
    std::vector<int> all(static_cast<size_t>(group.size()));
    group.all_gather_bytes(&world_rank, all.data(), sizeof(int));
    return all;
}

/// "1, 3" from a set of indices.
template <class Ints>
std::string join(const Ints& v) {
    std::string out;
    for (auto x : v) out += str(out.empty() ? "" : ", ", x);
    return out;
}

/// The hash of n floats of backend memory at `src` (copied to host first).
uint64_t hash_floats(StateShards& sh, const float* src, size_t n, std::vector<float>& host) {
    host.resize(n);
    if (n > 0) sh.copy_to_host(host.data(), src, n);
    return hash64(host.data(), n * sizeof(float));
}

uint64_t hash_state(StateShards& sh, int unit, StateShards::Kind kind, size_t b, size_t e, std::vector<float>& host) {
    host.resize(e - b);
    sh.read(unit, kind, b, e, host.data());
    return hash64(host.data(), (e - b) * sizeof(float));
}

}  // namespace

ReplicaCheck::ReplicaCheck(int check_every, ModelState& state, Communicator& world, Communicator& shard,
                           Communicator& replica)
    : m_every(check_every), m_state(state), m_world(world), m_shard(shard), m_replica(replica) {
    const char* flip = std::getenv("ZT_DEBUG_FLIP");
    if (flip != nullptr && std::sscanf(flip, "%d:%ld", &m_flip_rank, &m_flip_step) != 2) m_flip_rank = -1;
    if (m_every <= 0) return;
    m_hosts = rank_hosts(world);
    m_shard_members = world_ranks(shard, world.rank());
    m_replica_members = world_ranks(replica, world.rank());
}

std::vector<uint64_t> ReplicaCheck::owned_hashes() {
    StateShards sh = m_state.shards();
    std::vector<float> host;
    std::vector<uint64_t> out;
    for (int u = 0; u < m_state.layout().num_units(); ++u) {
        const size_t b = sh.owned_begin(u);
        const size_t n = sh.owned_end(u) > b ? sh.owned_end(u) - b : 0;
        for (StateShards::Kind kind : {StateShards::kMaster, StateShards::kAdamM, StateShards::kAdamV}) {
            out.push_back(n > 0 ? hash_state(sh, u, kind, b, b + n, host) : kHashSeed);
        }
    }
    return out;
}

std::vector<uint64_t> ReplicaCheck::param_hashes() {
    StateShards sh = m_state.shards();
    std::vector<float> host;
    std::vector<uint64_t> out;
    for (int u = 0; u < m_state.layout().num_units(); ++u) {
        const float* p = m_state.acquire(u);  // ZeRO-3: gathered from the owners
        out.push_back(hash_floats(sh, p, m_state.layout().unit_numel[static_cast<size_t>(u)], host));
        m_state.release(u);
    }
    return out;
}

std::string ReplicaCheck::compare(Communicator& group, const std::vector<int>& members,
                                  const std::vector<uint64_t>& mine, const char* const* kinds, int per_unit) {
    const size_t n = static_cast<size_t>(group.size());
    if (n < 2) return "";
    std::vector<uint64_t> all(n * mine.size());
    group.all_gather_bytes(mine.data(), all.data(), mine.size() * sizeof(uint64_t));
    std::map<int, std::vector<int>> units_of;  // suspect world rank -> units
    std::map<std::string, std::vector<int>> kinds_units;
    for (size_t i = 0; i < mine.size(); ++i) {
        std::map<uint64_t, int> votes;
        for (size_t r = 0; r < n; ++r) ++votes[all[r * mine.size() + i]];
        if (votes.size() == 1) continue;
        // The majority's value; with no majority (two replicas) every rank is a suspect.
        const auto top = std::max_element(votes.begin(), votes.end(),
                                          [](const auto& a, const auto& b) { return a.second < b.second; });
        const bool majority = 2 * static_cast<size_t>(top->second) > n;
        const int unit = static_cast<int>(i) / per_unit;
        for (size_t r = 0; r < n; ++r) {
            if (!majority || all[r * mine.size() + i] != top->first) units_of[members[r]].push_back(unit);
        }
        std::vector<int>& u = kinds_units[kinds[i % static_cast<size_t>(per_unit)]];
        if (u.empty() || u.back() != unit) u.push_back(unit);
    }
    if (units_of.empty()) return "";
    std::string who;
    for (const auto& [rank, units] : units_of) {
        who += str(who.empty() ? "" : ", ", "rank ", rank, " (", m_hosts[static_cast<size_t>(rank)], ")");
    }
    std::string what;
    for (const auto& [kind, units] : kinds_units) {
        what += str(what.empty() ? "" : "; ", kind, " of unit", units.size() > 1 ? "s " : " ", join(units));
    }
    return str("the ranks that must hold identical state disagree (", what, "): ", who,
               units_of.size() == n && n == 2 ? " (two copies: either may be wrong)" : " differ from the others");
}

void ReplicaCheck::agree(const std::string& local, long step) {
    double flag = local.empty() ? 0.0 : 1.0;
    m_world.all_reduce_scalars(&flag, 1, ReduceOp::kMax);
    if (flag == 0.0) return;
    // Rank 0 may hold none of the disagreeing state: every rank's finding is gathered.
    constexpr size_t kLen = 1024;
    std::vector<char> mine(kLen, '\0'), all(kLen * static_cast<size_t>(m_world.size()));
    std::strncpy(mine.data(), local.c_str(), kLen - 1);
    m_world.all_gather_bytes(mine.data(), all.data(), kLen);
    std::vector<std::string> found;
    for (int r = 0; r < m_world.size(); ++r) {
        const std::string f(&all[kLen * static_cast<size_t>(r)]);
        if (!f.empty() && std::find(found.begin(), found.end(), f) == found.end()) found.push_back(f);
    }
    std::string text;
    for (const std::string& f : found) text += str(text.empty() ? "" : "; ", f);
    throw AgreedError(str("silent data corruption suspected at step ", step, ": ", text,
                          ". No checkpoint was written from this state; resume from the last checkpoint "
                          "(checkpoint.resume = auto), and check the hosts named"),
                      kExitStateMismatch);
}

void ReplicaCheck::maybe_flip(long step) {
    if (m_world.rank() != m_flip_rank || step != m_flip_step) return;
    StateShards sh = m_state.shards();
    for (int u = 0; u < m_state.layout().num_units(); ++u) {
        const size_t b = sh.state_begin(u);  // an element with a master of its own
        if (sh.state_end(u) <= b) continue;
        float x = 0;
        sh.copy_to_host(&x, sh.master_base(u) + b, 1);
        uint32_t bits = 0;
        std::memcpy(&bits, &x, sizeof bits);
        bits ^= 1u << 20;  // a mantissa bit: the value moves by a few parts per million
        std::memcpy(&x, &bits, sizeof bits);
        sh.copy_from_host(sh.master_base(u) + b, &x, 1);
        std::fprintf(stderr, "ztrain: rank %d: ZT_DEBUG_FLIP: flipped bit 20 of master element %zu of unit %d "
                     "before step %ld\n", m_world.rank(), b, u, step);
        return;
    }
}

void ReplicaCheck::before_step(long step) {
    maybe_flip(step);
    if (m_at_rest.empty()) return;
    const auto t0 = Clock::now();
    const std::vector<uint64_t> now = owned_hashes();
    std::vector<int> units;
    for (size_t i = 0; i < now.size(); ++i) {
        const int unit = static_cast<int>(i / 3);
        if (now[i] != m_at_rest[i] && (units.empty() || units.back() != unit)) units.push_back(unit);
    }
    std::string local;
    if (!units.empty()) {
        local = str("rank ", m_world.rank(), " (", m_hosts[static_cast<size_t>(m_world.rank())],
                    "): its master / AdamW state of unit", units.size() > 1 ? "s " : " ", join(units),
                    " changed at rest between the checksum after step ", m_at_rest_step, " and step ", step);
    }
    m_at_rest.clear();
    agree(local, step);
    m_check_s += seconds_since(t0);
}

void ReplicaCheck::after_step(long done, double step_s) {
    if (m_every <= 0) return;
    if (done > 1) {
        m_step_s += step_s;
        ++m_steps;
    }
    if (done % m_every != 0) return;
    const auto t0 = Clock::now();
    const std::vector<uint64_t> owned = owned_hashes();
    // The owned state first: a flipped owner also spoils every parameter gathered from it,
    // and the owners are the ones to name. Every comparison runs on every rank (each is
    // collective over its group).
    std::string local = compare(m_replica, m_replica_members, owned, kOwnedKinds, 3);
    // DDP: every rank owns every element, so the shard group holds replicas too.
    if (!m_state.shard_plan().ownership_partitioned()) {
        const std::string f = compare(m_shard, m_shard_members, owned, kOwnedKinds, 3);
        if (local.empty()) local = f;
    }
    agree(local, done);
    const std::vector<uint64_t> params = param_hashes();
    local = compare(m_shard, m_shard_members, params, kParamKinds, 1);
    const std::string f = compare(m_replica, m_replica_members, params, kParamKinds, 1);
    agree(local.empty() ? f : local, done);
    m_at_rest = owned;
    m_at_rest_step = done;
    ++m_checks;
    m_check_s += seconds_since(t0);
}

std::string ReplicaCheck::cost() const {
    if (m_checks == 0) return "";
    const double each = m_check_s / static_cast<double>(m_checks);
    const double step = m_steps > 0 ? m_step_s / static_cast<double>(m_steps) : 0;
    return str(m_checks, " state check(s) (parallel.check_every = ", m_every, "), ",
               static_cast<double>(static_cast<long>(each * 1e4 + 0.5)) / 10, " ms each with its verification: ",
               step > 0 ? str(static_cast<double>(static_cast<long>(each / (m_every * step) * 1e4 + 0.5)) / 100,
                              "% of the step time")
                        : std::string("no step time measured"));
}

}  // namespace zt
