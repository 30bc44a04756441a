#include "ztrain/parallel/shard_layout.hpp"

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

ShardPlan::ShardPlan(const std::vector<size_t>& unit_numel, int world_size, ShardingPolicy policy)
    : m_shards(make_unit_shards(unit_numel, world_size)), m_world(world_size), m_policy(policy) {
    ZT_REQUIRE(!policy.params_sharded || policy.grads_sharded, "sharded parameters need sharded gradients");
    ZT_REQUIRE(!policy.grads_sharded || policy.optimizer_sharded, "sharded gradients need a sharded optimizer");
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

std::vector<GradBucket> make_grad_buckets(const std::vector<UnitShard>& shards, size_t bucket_numel) {
    std::vector<GradBucket> out;
    size_t offset = 0;
    for (int u = static_cast<int>(shards.size()) - 1; u >= 0; --u) {
        const size_t n = shards[static_cast<size_t>(u)].padded_numel;
        if (out.empty() || out.back().numel >= bucket_numel) {
            out.push_back(GradBucket{u, u, offset, 0});
        }
        out.back().last_unit = u;
        out.back().numel += n;
        offset += n;
    }
    return out;
}

}  // namespace zt
