// Shard ranges, padding and DDP bucket boundaries as pure functions over many (numel, N).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include <numeric>

#include "ztrain/core/error.hpp"
#include "ztrain/parallel/shard_layout.hpp"

namespace zt {
namespace {

TEST(ShardLayout, ShardsTileThePaddedUnitForManySizes) {
    for (int world : {1, 2, 3, 4, 5, 7, 8, 16}) {
        for (size_t numel : {size_t{1}, size_t{2}, size_t{15}, size_t{16}, size_t{17}, size_t{97}, size_t{1000},
                             size_t{4099}, size_t{65537}, size_t{1234567}}) {
            const auto shards = make_unit_shards({numel}, world);
            ASSERT_EQ(shards.size(), 1u);
            const UnitShard& s = shards[0];
            SCOPED_TRACE(::testing::Message() << "numel " << numel << " world " << world);
            EXPECT_EQ(s.numel, numel);
            EXPECT_GE(s.padded_numel, numel);
            EXPECT_LT(s.padded_numel - numel, static_cast<size_t>(world) * kShardAlign) << "over-padded";
            EXPECT_EQ(s.padded_numel % (static_cast<size_t>(world) * kShardAlign), 0u);
            EXPECT_EQ(s.shard_numel * static_cast<size_t>(world), s.padded_numel);
            EXPECT_EQ(s.shard_numel % kShardAlign, 0u) << "shard start not 64-byte aligned";
            size_t live = 0;
            for (int r = 0; r < world; ++r) {
                EXPECT_EQ(s.begin(r), static_cast<size_t>(r) * s.shard_numel);
                EXPECT_EQ(s.end(r), s.begin(r) + s.shard_numel);
                EXPECT_LE(s.begin(r), s.live_end(r));
                EXPECT_LE(s.live_end(r), s.end(r));
                if (r + 1 < world) {
                    EXPECT_EQ(s.end(r), s.begin(r + 1));
                }
                live += s.live_end(r) - s.begin(r);
            }
            EXPECT_EQ(live, numel) << "live ranges do not cover the unit exactly once";
        }
    }
}

// The one ownership answer (model state and checkpoints): DDP owns every element on every
// rank; ZeRO-1/2/3 partition each unit into the live shard slices. Either way the primary
// ranges (what a checkpoint saves) cover every element of every unit exactly once.
TEST(ShardLayout, ShardPlanOwnershipAndPrimaryRangesCoverEachElementOnce) {
    const std::vector<size_t> units{1000, 17, 40, 4099};
    for (int world : {1, 2, 3, 4, 7}) {
        for (int stage : {0, 1, 2, 3}) {
            SCOPED_TRACE(::testing::Message() << "world " << world << " stage " << stage);
            const ShardPlan plan(units, world, ShardingPolicy::zero_stage(stage));
            ASSERT_EQ(plan.num_units(), static_cast<int>(units.size()));
            EXPECT_EQ(plan.world_size(), world);
            for (int u = 0; u < plan.num_units(); ++u) {
                const size_t numel = units[static_cast<size_t>(u)];
                std::vector<int> saved(numel, 0);
                for (int r = 0; r < world; ++r) {
                    const ElementRange owned = plan.owned_range(u, r);
                    const UnitShard& s = plan.shard(u);
                    if (stage == 0) {
                        EXPECT_EQ(owned.begin, 0u);
                        EXPECT_EQ(owned.end, numel);
                    } else {
                        EXPECT_EQ(owned.begin, s.begin(r));
                        EXPECT_EQ(owned.end, s.live_end(r));
                    }
                    EXPECT_EQ(plan.is_primary(r), stage > 0 || r == 0);
                    const ElementRange primary = plan.primary_range(u, r);
                    if (!plan.is_primary(r)) {
                        EXPECT_TRUE(primary.empty());
                    }
                    for (size_t e = primary.begin; e < primary.end; ++e) {
                        EXPECT_GE(e, owned.begin);
                        EXPECT_LT(e, owned.end);
                        ++saved[e];
                    }
                }
                for (size_t e = 0; e < numel; ++e) ASSERT_EQ(saved[e], 1) << "unit " << u << " element " << e;
            }
        }
    }
}

// The policy of each ZeRO stage, and the storage and movement the plan derives from it: the
// table in model_state.hpp, asked as flags and sizes.
TEST(ShardLayout, ZeroStagePoliciesStoreAndMoveWhatTheStageShards) {
    const std::vector<size_t> units{1000, 17, 4099};
    const int world = 4;
    for (int stage : {0, 1, 2, 3}) {
        SCOPED_TRACE(::testing::Message() << "stage " << stage);
        const ShardingPolicy p = ShardingPolicy::zero_stage(stage);
        EXPECT_EQ(p.stage(), stage);
        EXPECT_EQ(p.optimizer_sharded, stage >= 1);
        EXPECT_EQ(p.grads_sharded, stage >= 2);
        EXPECT_EQ(p.params_sharded, stage >= 3);
        const ShardPlan plan(units, world, p);
        EXPECT_EQ(plan.grads_all_reduced(), stage == 0);
        EXPECT_EQ(plan.grads_reduced_per_micro_step(), stage >= 2);
        EXPECT_EQ(plan.params_gathered_per_unit(), stage == 3);
        EXPECT_EQ(plan.params_gathered_after_step(), stage == 1 || stage == 2);
        EXPECT_EQ(plan.ownership_partitioned(), stage >= 1);
        for (int u = 0; u < plan.num_units(); ++u) {
            const UnitShard& s = plan.shard(u);
            EXPECT_EQ(plan.stored_params(u), stage >= 3 ? s.shard_numel : s.padded_numel) << "unit " << u;
            EXPECT_EQ(plan.stored_grads(u, 0), stage >= 2 ? s.shard_numel : s.padded_numel) << "unit " << u;
            EXPECT_EQ(plan.stored_optimizer(u, 0), stage >= 1 ? s.shard_numel : s.padded_numel) << "unit " << u;
            for (int r = 0; r < world; ++r) {
                EXPECT_EQ(plan.params_start(u, r), stage >= 3 ? s.begin(r) : 0u) << "unit " << u << " rank " << r;
                EXPECT_EQ(plan.grads_start(u, r), stage >= 2 ? s.begin(r) : 0u) << "unit " << u << " rank " << r;
                EXPECT_EQ(plan.optimizer_start(u, r), stage >= 1 ? s.begin(r) : 0u) << "unit " << u << " rank " << r;
            }
        }
    }
    EXPECT_THROW(ShardingPolicy::zero_stage(4), Error);
    EXPECT_THROW(ShardingPolicy::zero_stage(-1), Error);
    ShardingPolicy inconsistent;
    inconsistent.params_sharded = true;
    EXPECT_THROW(ShardPlan(units, world, inconsistent), Error);
}

// A frozen base (LoRA): the trained tails' state (gradients, masters, moments) and what a
// checkpoint saves of them. At ZeRO-1/2/3 the tail is split evenly in rank order, not by the
// shards (which would give it all to the last rank); under DDP every rank keeps the whole
// tail, rank 0 saving it.
TEST(ShardLayout, TrainedTailsStateIsSplitEvenlyWhereOwnershipIsPartitioned) {
    const std::vector<size_t> units{1000, 8336, 8336, 56};
    const std::vector<size_t> begins{1000, 7280, 7280, 56};  // wholly frozen, tails of 1056, wholly frozen
    for (int world : {2, 3, 4}) {
        for (int stage : {0, 1, 2, 3}) {
            SCOPED_TRACE(::testing::Message() << "stage " << stage << ", " << world << " ranks");
            const ShardPlan plan(units, world, ShardingPolicy::zero_stage(stage), begins);
            for (int u = 0; u < plan.num_units(); ++u) {
                const ElementRange t = plan.trainable(u);
                size_t at = t.begin;
                size_t largest = 0;
                for (int r = 0; r < world; ++r) {
                    const ElementRange s = plan.state_range(u, r);
                    const ElementRange saved = plan.saved_range(u, r);
                    if (stage == 0) {
                        EXPECT_EQ(s.begin, t.begin);
                        EXPECT_EQ(s.end, t.end);
                        EXPECT_EQ(saved.size(), r == 0 ? t.size() : 0u) << "rank " << r;
                        continue;
                    }
                    EXPECT_EQ(saved.begin, s.begin);
                    EXPECT_EQ(saved.end, s.end);
                    if (s.empty()) continue;
                    EXPECT_EQ(s.begin, at) << "unit " << u << " rank " << r << ": the ranges tile the tail in order";
                    at = s.end;
                    largest = std::max(largest, s.size());
                    EXPECT_EQ(plan.optimizer_start(u, r), s.begin);
                    EXPECT_EQ(plan.stored_optimizer(u, r) % kShardAlign, 0u);
                    EXPECT_GE(plan.stored_optimizer(u, r), s.size());
                    EXPECT_EQ(plan.stored_grads(u, r), stage >= 2 ? plan.stored_optimizer(u, r) : plan.grad_extent(u))
                        << "unit " << u << " rank " << r;
                }
                if (stage == 0) continue;
                EXPECT_EQ(at, t.end) << "unit " << u;
                const size_t even = ((t.size() + world - 1) / world + kShardAlign - 1) / kShardAlign * kShardAlign;
                EXPECT_EQ(largest, std::min(even, t.size())) << "unit " << u;
            }
        }
    }
}

TEST(ShardLayout, BucketsFollowBackwardOrderAndCoverEveryUnitOnce) {
    const std::vector<size_t> units{1000, 333, 333, 333, 333, 17};
    for (int world : {1, 2, 3, 4}) {
        const auto shards = make_unit_shards(units, world);
        size_t total = 0;
        std::vector<size_t> extents;
        for (const auto& s : shards) {
            total += s.padded_numel;
            extents.push_back(s.padded_numel);
        }
        for (size_t bucket : {size_t{1}, size_t{300}, size_t{700}, size_t{100000}}) {
            SCOPED_TRACE(::testing::Message() << "world " << world << " bucket " << bucket);
            const auto buckets = make_grad_buckets(extents, bucket);
            ASSERT_FALSE(buckets.empty());
            EXPECT_EQ(buckets.front().first_unit, static_cast<int>(units.size()) - 1);
            EXPECT_EQ(buckets.back().last_unit, 0);
            size_t offset = 0;
            int next_unit = static_cast<int>(units.size()) - 1;
            for (size_t i = 0; i < buckets.size(); ++i) {
                const GradBucket& b = buckets[i];
                EXPECT_EQ(b.offset, offset) << "bucket " << i << " not contiguous";
                EXPECT_EQ(b.first_unit, next_unit) << "bucket " << i << " skips a unit";
                size_t n = 0;
                for (int u = b.first_unit; u >= b.last_unit; --u) n += shards[static_cast<size_t>(u)].padded_numel;
                EXPECT_EQ(b.numel, n);
                if (i + 1 < buckets.size()) {
                    EXPECT_GE(b.numel, bucket) << "bucket " << i << " closed before it was full";
                    const size_t without_last = b.numel - shards[static_cast<size_t>(b.last_unit)].padded_numel;
                    EXPECT_LT(without_last, bucket) << "bucket " << i << " kept growing after it was full";
                }
                offset += b.numel;
                next_unit = b.last_unit - 1;
            }
            EXPECT_EQ(offset, total);
        }
    }
}

// With split_units a unit larger than a bucket goes in bucket-sized pieces of its own (the
// all-reduce's copy bounded by a bucket); smaller units still share buckets as before.
TEST(ShardLayout, SplitUnitsGoInBucketSizedPiecesOfTheirOwn) {
    const std::vector<size_t> units{1000, 333, 333, 333, 333, 17};
    const auto buckets = make_grad_buckets(units, 300, true);
    // Backward order: unit 5 (17) alone, as the next unit is split; units 4..1 (333 each) in
    // pieces of 300 and 33; unit 0 in pieces 300, 300, 300, 100.
    std::vector<std::array<size_t, 4>> want{{5, 5, 0, 17},     {4, 4, 17, 300},   {4, 4, 317, 33},
                                            {3, 3, 350, 300},  {3, 3, 650, 33},   {2, 2, 683, 300},
                                            {2, 2, 983, 33},   {1, 1, 1016, 300}, {1, 1, 1316, 33},
                                            {0, 0, 1349, 300}, {0, 0, 1649, 300}, {0, 0, 1949, 300},
                                            {0, 0, 2249, 100}};
    ASSERT_EQ(buckets.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(static_cast<size_t>(buckets[i].first_unit), want[i][0]) << "bucket " << i;
        EXPECT_EQ(static_cast<size_t>(buckets[i].last_unit), want[i][1]) << "bucket " << i;
        EXPECT_EQ(buckets[i].offset, want[i][2]) << "bucket " << i;
        EXPECT_EQ(buckets[i].numel, want[i][3]) << "bucket " << i;
    }
    // Units no larger than a bucket: the same buckets as without splitting.
    const auto whole = make_grad_buckets(units, 100000, true);
    ASSERT_EQ(whole.size(), 1u);
    EXPECT_EQ(whole[0].numel, 2349u);
}

}  // namespace
}  // namespace zt
