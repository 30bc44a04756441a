#include "ztrain/parallel/shard_layout.hpp"

#include <algorithm>
#include <utility>

#include "ztrain/core/error.hpp"

namespace zt {

std::vector<UnitShard> make_unit_shards(const std::vector<size_t>& unit_numel, int world_size) {
    ZT_REQUIRE(world_size >= 1, "world size ", world_size);
    const size_t quantum = static_cast<size_t>(world_size) * kShardAlign;
    std::vector<UnitShard> out;
    out.reserve(unit_numel.size());
    for (size_t n : unit_numel) {
        UnitShard s;
        s.numel = n;
        s.padded_numel = (n + quantum - 1) / quantum * quantum;
        if (s.padded_numel == 0) s.padded_numel = quantum;
        s.shard_numel = s.padded_numel / static_cast<size_t>(world_size);
        out.push_back(s);
    }
    return out;
}

ShardingPolicy ShardingPolicy::zero_stage(int stage, bool once_per_step) {
    ZT_REQUIRE(stage >= 0 && stage <= 3, "zero stage ", stage);
    ShardingPolicy p;
    p.optimizer_sharded = stage >= 1;
    p.grads_sharded = stage >= 2;
    p.params_sharded = stage >= 3;
    p.reduce_once_per_step = once_per_step && p.grads_sharded;
    return p;
}

ShardPlan::ShardPlan(const std::vector<size_t>& unit_numel, int world_size, ShardingPolicy policy,
                     std::vector<size_t> trainable_begin)
    : m_shards(make_unit_shards(unit_numel, world_size)),
      m_trainable_begin(std::move(trainable_begin)),
      m_world(world_size),
      m_policy(policy) {
    ZT_REQUIRE(!policy.params_sharded || policy.grads_sharded, "sharded parameters need sharded gradients");
    ZT_REQUIRE(!policy.grads_sharded || policy.optimizer_sharded, "sharded gradients need a sharded optimizer");
    if (m_trainable_begin.empty()) m_trainable_begin.assign(unit_numel.size(), 0);
    ZT_REQUIRE(m_trainable_begin.size() == unit_numel.size(), "trainable starts of ", m_trainable_begin.size(),
               " units for ", unit_numel.size());
    for (size_t u = 0; u < unit_numel.size(); ++u) {
        ZT_REQUIRE(m_trainable_begin[u] <= unit_numel[u], "unit ", u, " trains from ", m_trainable_begin[u],
                   " of ", unit_numel[u]);
    }
}

ElementRange ShardPlan::trainable(int unit) const {
    return ElementRange{m_trainable_begin[static_cast<size_t>(unit)], shard(unit).numel};
}

ElementRange ShardPlan::state_range(int unit, int rank) const {
    const ElementRange t = trainable(unit);
    if (partly_frozen(unit) && ownership_partitioned()) {
        // Equal kShardAlign-rounded parts of the tail, in rank order, wherever the shards lie.
        const size_t ranks = static_cast<size_t>(m_world);
        const size_t part = ((t.size() + ranks - 1) / ranks + kShardAlign - 1) / kShardAlign * kShardAlign;
        const size_t b = std::min(t.end, t.begin + static_cast<size_t>(rank) * part);
        return ElementRange{b, std::min(t.end, b + part)};
    }
    const ElementRange o = owned_range(unit, rank);
    const size_t b = std::max(o.begin, t.begin);
    return ElementRange{b, std::max(b, std::min(o.end, t.end))};
}

namespace {
size_t align_up(size_t n) { return std::max(kShardAlign, (n + kShardAlign - 1) / kShardAlign * kShardAlign); }
}  // namespace

size_t ShardPlan::grad_extent(int unit) const {
    return partly_frozen(unit) ? align_up(trainable(unit).size()) : shard(unit).padded_numel;
}

size_t ShardPlan::stored_state(int unit, int rank, bool sharded) const {
    if (!partly_frozen(unit)) return stored(unit, sharded);
    return sharded ? align_up(state_range(unit, rank).size()) : grad_extent(unit);
}

size_t ShardPlan::state_start(int unit, int rank, bool sharded) const {
    if (!partly_frozen(unit)) return start(unit, rank, sharded);
    return sharded ? state_range(unit, rank).begin : trainable(unit).begin;
}

ElementRange ShardPlan::owned_range(int unit, int rank) const {
    const UnitShard& s = shard(unit);
    if (!m_policy.optimizer_sharded) return ElementRange{0, s.numel};
    return ElementRange{s.begin(rank), s.live_end(rank)};
}

ElementRange ShardPlan::primary_range(int unit, int rank) const {
    if (!is_primary(rank)) return ElementRange{};
    return owned_range(unit, rank);
}

std::vector<GradBucket> make_grad_buckets(const std::vector<size_t>& extents, size_t bucket_numel,
                                          bool split_units) {
    std::vector<GradBucket> out;
    size_t offset = 0;
    bool open = false;  // whether the last bucket may take the next unit
    for (int u = static_cast<int>(extents.size()) - 1; u >= 0; --u) {
        const size_t n = extents[static_cast<size_t>(u)];
        if (split_units && n > bucket_numel && bucket_numel > 0) {
            for (size_t at = 0; at < n; at += bucket_numel) {
                out.push_back(GradBucket{u, u, offset + at, std::min(bucket_numel, n - at)});
            }
            offset += n;
            open = false;
            continue;
        }
        if (!open || out.back().numel >= bucket_numel) {
            out.push_back(GradBucket{u, u, offset, 0});
            open = true;
        }
        out.back().last_unit = u;
        out.back().numel += n;
        offset += n;
    }
    return out;
}

}  // namespace zt
