// Shard ranges, ownership and bucket boundaries: pure functions of (unit sizes, world size,
// ZeRO stage), tested without MPI.
//
// Each unit's flat buffer is padded to a multiple of world_size * kShardAlign elements, so
// rank r owns the contiguous slice [r*S, (r+1)*S) with S = padded / world_size, aligned to
// 64 bytes. No tensor size ever has to divide by the world size: padding absorbs it.
#pragma once

#include <cstddef>
#include <vector>

namespace zt {

constexpr size_t kShardAlign = 16;  // elements (64 bytes of fp32)

struct UnitShard {
    size_t numel = 0;         ///< real elements of the unit
    size_t padded_numel = 0;  ///< numel rounded up to world_size * kShardAlign
    size_t shard_numel = 0;   ///< padded_numel / world_size
    /// This rank's slice [begin, end) of the padded buffer, and the part of it that holds
    /// real elements [begin, live_end) (live_end <= end; may equal begin on the last ranks).
    size_t begin(int rank) const { return static_cast<size_t>(rank) * shard_numel; }
    size_t end(int rank) const { return begin(rank) + shard_numel; }
    size_t live_end(int rank) const { return end(rank) < numel ? end(rank) : (begin(rank) < numel ? numel : begin(rank)); }
};

std::vector<UnitShard> make_unit_shards(const std::vector<size_t>& unit_numel, int world_size);

/// Elements [begin, end) of one unit (unit-relative indices; empty when end <= begin).
struct ElementRange {
    size_t begin = 0;
    size_t end = 0;
    size_t size() const { return end > begin ? end - begin : 0; }
    bool empty() const { return end <= begin; }
};

/// Which rank owns which elements of each unit: the one answer ModelState (the elements a
/// rank applies AdamW to and keeps master weights and m, v for) and the checkpoint code
/// (what a rank saves and loads) both use, so neither re-derives it from the ZeRO stage.
///
/// Ownership is replicated under DDP (stage 0: every rank owns every element and applies
/// the full update) and partitioned under ZeRO-1/2/3 (a rank owns the live part of its
/// shard slice). Either way each element has one *primary* owner, the rank whose copy a
/// checkpoint saves: the lowest rank that owns it.
class ShardPlan {
  public:
    ShardPlan(const std::vector<size_t>& unit_numel, int world_size, int zero_stage);

    int world_size() const { return m_world; }
    int num_units() const { return static_cast<int>(m_shards.size()); }
    /// The padded shard slices of every unit (storage of the partitioned stages).
    const std::vector<UnitShard>& shards() const { return m_shards; }
    const UnitShard& shard(int unit) const { return m_shards[static_cast<size_t>(unit)]; }

    /// The elements of `unit` that `rank` owns (may be empty on the last ranks of a small unit).
    ElementRange owned_range(int unit, int rank) const;
    /// The part of owned_range(unit, rank) whose primary owner is `rank`: all of it where
    /// ownership is partitioned, none of it on ranks above 0 where it is replicated.
    ElementRange primary_range(int unit, int rank) const;
    /// Whether `rank` is the primary owner of its part of the model (a checkpoint has one
    /// shard file per such rank, even one whose ranges are all empty).
    bool is_primary(int rank) const { return !m_replicated || rank == 0; }

  private:
    std::vector<UnitShard> m_shards;
    int m_world;
    bool m_replicated;  ///< DDP: every rank owns whole units
};

/// A run of units, consecutive in backward order (last unit first), whose gradients are
/// all-reduced together by DDP. Units are stored in this order in DDP's gradient arena, so
/// a bucket is one contiguous span.
struct GradBucket {
    int first_unit = 0;  ///< highest unit index in the bucket (produced first by backward)
    int last_unit = 0;   ///< lowest unit index
    size_t offset = 0;   ///< element offset of the bucket in the arena
    size_t numel = 0;
};

/// Groups units in backward order into buckets of at least bucket_numel elements (the last
/// bucket may be smaller; a unit larger than bucket_numel is a bucket alone). Arena offsets
/// follow the padded sizes of `shards`.
std::vector<GradBucket> make_grad_buckets(const std::vector<UnitShard>& shards, size_t bucket_numel);

}  // namespace zt
