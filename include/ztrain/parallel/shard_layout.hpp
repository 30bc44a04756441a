// Shard ranges, the sharding policy, ownership and bucket boundaries: pure functions of
// (unit sizes, world size, policy), tested without MPI.
//
// Each unit's flat buffer is padded to a multiple of world_size * kShardAlign elements, so
// rank r owns the contiguous slice [r*S, (r+1)*S) with S = padded / world_size, aligned to
// 64 bytes. No tensor size ever has to divide by the world size: padding absorbs it.
#pragma once

#include <algorithm>
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

/// What a ZeRO stage shards, decided once: the parts of a model state ask these flags (and
/// the ShardPlan's answers built on them), never the stage number.
///   stage 0 (DDP): nothing sharded; gradients all-reduced in buckets
///   stage 1: optimizer state (fp32 master, AdamW m, v)
///   stage 2: + stored gradients (reduce-scattered as backward produces them)
///   stage 3: + the parameters' working copy (gathered per unit just before use)
struct ShardingPolicy {
    bool optimizer_sharded = false;  ///< master weights and m, v only for the owned elements
    bool grads_sharded = false;      ///< stored gradients: the own shard only
    bool params_sharded = false;     ///< working copy: the own shard only
    /// With sharded gradients: each unit's whole gradient is accumulated through the step's
    /// micro-steps and reduce-scattered once, after the last (a pipeline stage's, as FSDP's
    /// no-sync between micro-batches), instead of once per micro-step.
    bool reduce_once_per_step = false;
    /// The policy of ZeRO stage `stage` (0-3; anything else is an error); `once_per_step`:
    /// reduce_once_per_step where the gradients are sharded (stages 2-3).
    static ShardingPolicy zero_stage(int stage, bool once_per_step = false);
    /// The ZeRO stage this policy is (the inverse of zero_stage()).
    int stage() const { return params_sharded ? 3 : grads_sharded ? 2 : optimizer_sharded ? 1 : 0; }
};

/// Which rank owns which elements of each unit, and how much of each kind of state a rank
/// stores: the one answer the model state's parts (ParameterStore, GradientReducer,
/// OptimizerState) and the checkpoint code all use, so none re-derives it from the stage.
///
/// Ownership is replicated under DDP (every rank owns every element and applies the full
/// update) and partitioned under ZeRO-1/2/3 (a rank owns the live part of its shard slice).
/// Either way each element has one *primary* owner, the rank whose copy a checkpoint saves:
/// the lowest rank that owns it.
///
/// The split is over one group of ranks (the shard group). A further mesh dimension
/// (tensor or pipeline parallel) adds its own split of the units before this one; the
/// parts keep asking the same questions.
///
/// A frozen base (LoRA): only a tail of each unit trains, [trainable_begin, numel) (its
/// adapters; empty for a unit without any). Ownership stays the same slices of the whole
/// unit, but gradients, master weights and moments are stored for the trained part only
/// (state_range), and a partly frozen unit's gradient is reduced over its trained part by an
/// all-reduce (its owners' parts differ in size, so no reduce-scatter fits them). Wherever
/// ownership is partitioned (ZeRO-1/2/3), the tail's state is split evenly over the ranks,
/// apart from the shards (which would give it all to the last ones); at ZeRO-3 every rank
/// keeps the tail's working copy whole beside its shard (ParameterStore).
class ShardPlan {
  public:
    /// `trainable_begin`: per unit, where its trained tail starts (empty: every unit trains
    /// whole; ModelLayout's trainable_begins()).
    ShardPlan(const std::vector<size_t>& unit_numel, int world_size, ShardingPolicy policy,
              std::vector<size_t> trainable_begin = {});

    int world_size() const { return m_world; }
    int num_units() const { return static_cast<int>(m_shards.size()); }
    const ShardingPolicy& policy() const { return m_policy; }
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
    bool is_primary(int rank) const { return m_policy.optimizer_sharded || rank == 0; }
    /// Whether each rank owns a part of the elements (so sums over owned elements, such as
    /// the gradient norm, are completed across the group).
    bool ownership_partitioned() const { return m_policy.optimizer_sharded; }

    /// The elements of `unit` that train: all of it, or a frozen base's unit's tail.
    ElementRange trainable(int unit) const;
    /// Whether part of `unit` (but maybe not all) is frozen.
    bool partly_frozen(int unit) const { return trainable(unit).begin > 0; }
    /// The elements whose gradient, master and moments `rank` keeps: owned_range itself
    /// unless a base is frozen; then its part of trainable(unit): an even split of it where
    /// ownership is partitioned, all of it under DDP.
    ElementRange state_range(int unit, int rank) const;
    /// owned_range(unit, rank) below trainable(unit): the frozen base's elements `rank` owns
    /// (empty unless a base is frozen).
    ElementRange frozen_range(int unit, int rank) const {
        const ElementRange o = owned_range(unit, rank);
        return ElementRange{o.begin, std::min(o.end, std::max(o.begin, trainable(unit).begin))};
    }
    /// What a checkpoint saves of `unit` for `rank`: its state_range where it is a primary
    /// owner (a frozen base is not saved: it is read again from where it came from).
    ElementRange saved_range(int unit, int rank) const {
        return is_primary(rank) ? state_range(unit, rank) : ElementRange{};
    }
    /// A unit's whole gradient (the stages 0-1 buffer, the stages 2-3 scratch): this many
    /// elements from element grad_extent_start: the padded unit, or a partly frozen unit's
    /// trained tail rounded up to kShardAlign (at least kShardAlign).
    size_t grad_extent(int unit) const;
    size_t grad_extent_start(int unit) const { return partly_frozen(unit) ? trainable(unit).begin : 0; }

    // Elements stored per unit by each kind of state on `rank` (the padded unit or its
    // shard; the trained part of them when a base is frozen), and the unit element at index
    // 0 of such a buffer (the shard start, or 0).
    size_t stored_params(int unit) const { return stored(unit, m_policy.params_sharded); }
    size_t stored_grads(int unit, int rank) const { return stored_state(unit, rank, m_policy.grads_sharded); }
    size_t stored_optimizer(int unit, int rank) const {
        return stored_state(unit, rank, m_policy.optimizer_sharded);
    }
    size_t params_start(int unit, int rank) const { return start(unit, rank, m_policy.params_sharded); }
    size_t grads_start(int unit, int rank) const { return state_start(unit, rank, m_policy.grads_sharded); }
    size_t optimizer_start(int unit, int rank) const { return state_start(unit, rank, m_policy.optimizer_sharded); }

    // How gradients and parameters move.
    /// Gradients all-reduced whole, in buckets (nothing partitioned: DDP).
    bool grads_all_reduced() const { return !m_policy.optimizer_sharded; }
    /// Each unit's gradient reduce-scattered every micro-step as backward produces it (the
    /// full-size buffer is scratch); otherwise gradients accumulate locally and are reduced
    /// once per step.
    bool grads_reduced_per_micro_step() const { return m_policy.grads_sharded; }
    /// Parameters gathered per unit just before use and dropped after it.
    bool params_gathered_per_unit() const { return m_policy.params_sharded; }
    /// Full parameters re-assembled by an all-gather after each optimizer step (the
    /// optimizer updates only the owned shard of a full working copy).
    bool params_gathered_after_step() const { return m_policy.optimizer_sharded && !m_policy.params_sharded; }

  private:
    size_t stored(int unit, bool sharded) const {
        return sharded ? shard(unit).shard_numel : shard(unit).padded_numel;
    }
    size_t start(int unit, int rank, bool sharded) const { return sharded ? shard(unit).begin(rank) : 0; }
    size_t stored_state(int unit, int rank, bool sharded) const;
    size_t state_start(int unit, int rank, bool sharded) const;

    std::vector<UnitShard> m_shards;
    std::vector<size_t> m_trainable_begin;  ///< per unit (all 0 without a frozen base)
    int m_world;
    ShardingPolicy m_policy;
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
/// bucket may be smaller). A unit larger than bucket_numel is a bucket alone or, with
/// `split_units`, pieces of bucket_numel elements (the last smaller), each a bucket of that
/// unit alone (first_unit == last_unit, numel less than the unit's): Open MPI's host
/// all-reduce copies its whole message, so pieces bound that copy (a 128k-vocabulary
/// embedding is one message of gigabytes otherwise). Arena offsets follow `extents`: each
/// unit's gradient elements, ShardPlan::grad_extent.
std::vector<GradBucket> make_grad_buckets(const std::vector<size_t>& extents, size_t bucket_numel,
                                          bool split_units = false);

}  // namespace zt
