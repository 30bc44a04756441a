// Shard ranges and bucket boundaries: pure functions of (unit sizes, world size), tested
// without MPI.
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
