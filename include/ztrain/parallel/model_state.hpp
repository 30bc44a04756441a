// The model state one rank holds, for every sharding strategy, behind two narrow faces:
// the model sees a UnitStore (acquire/release/prefetch/grads/grads_done), the trainer sees
// begin_micro_step / finish_grad_sync / grad_sum_squares / optimizer_step. Neither ever
// branches on the ZeRO stage: all of that is here.
//
//   stage | parameters               | gradients                          | AdamW m, v
//   ------+--------------------------+------------------------------------+-----------
//   0 DDP | full, persistent         | full arena; bucketed all-reduce    | full
//   1     | full; all-gather after   | full; reduce-scatter at last micro | shard
//         | the optimizer step       | step, own slice kept in place      |
//   2     | as 1                     | shard; each unit's full gradient   | shard
//         |                          | is scratch, reduce-scattered as    |
//         |                          | backward produces it (every micro) |
//   3     | shard; gathered just     | as 2                               | shard
//         | before use, next unit    |                                    |
//         | prefetched (non-blocking)|                                    |
//
// In fp32 the parameters are the master weights (no separate copy). Gradient accumulation:
// stages 0 and 1 keep full gradient buffers, so non-final micro-steps communicate nothing;
// stages 2 and 3 keep only a shard, so they reduce-scatter every micro-step and add into the
// shard (the full-size buffer cannot outlive the unit's backward without losing the saving).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/model/gpt.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/shard_layout.hpp"

namespace zt {

/// Bytes allocated per buffer kind on this rank (the memory record).
struct StateBytes {
    size_t params = 0;
    size_t grads = 0;
    size_t master = 0;     ///< fp32 master copy (0 in fp32: the parameters are the master)
    size_t optimizer = 0;  ///< AdamW m and v
    size_t scratch = 0;    ///< gathered units / full-size gradient scratch (stages 2, 3), planned peak
    size_t model_state() const { return params + grads + master + optimizer; }
};

class ModelState : public UnitStore {
  public:
    /// Allocates this rank's buffers and initializes them from `seed` (counter-based, see
    /// init_unit: identical weights for every world size and stage).
    ModelState(const ModelLayout& layout, Backend& backend, Communicator& comm, int zero_stage,
               size_t bucket_numel, uint64_t seed);
    /// Single-rank convenience (tests, tools): stage 0 on a communicator of size 1.
    ModelState(const ModelLayout& layout, Backend& backend, uint64_t seed);
    ~ModelState() override;
    ModelState(const ModelState&) = delete;
    ModelState& operator=(const ModelState&) = delete;

    // ---- UnitStore (the model's face) ----
    const float* acquire(int unit) override;
    void release(int unit) override;
    void prefetch(int unit) override;
    float* grads(int unit) override;
    void grads_done(int unit) override;

    // ---- the trainer's face ----
    /// Zeroes the gradients this rank keeps; call once per optimizer step.
    void zero_grads();
    /// Announces a micro-step; `last` = the one after which gradients are reduced.
    void begin_micro_step(bool first, bool last);
    /// Waits for outstanding gradient reductions; afterwards owned gradients are final.
    void finish_grad_sync();
    /// Global sum of squared gradients (over all ranks' owned elements).
    double grad_sum_squares();
    /// AdamW over this rank's owned elements, then re-assembles full parameters where the
    /// stage keeps them. `step.grad_scale` multiplies the gradients.
    void optimizer_step(const AdamWStep& step);

    // ---- inspection (tests, checkpoints, import) ----
    StateBytes bytes() const;
    int zero_stage() const { return m_stage; }
    const ModelLayout& layout() const { return m_layout; }
    const std::vector<UnitShard>& shards() const { return m_shards; }
    /// Copies the full, unpadded parameters of `unit` into out (unit_numel floats).
    /// Collective for stage 3 (every rank must call it).
    void gather_unit_params(int unit, float* out);
    /// Replicated stages only (0-2): direct access to a unit's full parameters.
    float* unit_params(int unit);

  private:
    float* pool_take(size_t n);
    void pool_give(float* p, size_t n);
    float* param_base(int unit);  // element e of the unit is param_base(unit)[e] (owned range)
    float* grad_base(int unit);
    void reduce_unit_grads(int unit);

    const ModelLayout& m_layout;
    Backend& m_backend;
    Communicator& m_comm;
    int m_stage;
    int m_rank;
    std::vector<UnitShard> m_shards;
    std::vector<GradBucket> m_buckets;

    std::vector<float*> m_params;      // full (stages 0-2) or shard (stage 3)
    float* m_grad_arena = nullptr;     // stages 0, 1: full grads, units in backward order
    std::vector<float*> m_grads;       // stages 0, 1: into the arena; stages 2, 3: shards
    std::vector<float*> m_adam_m;      // full (stage 0) or shard
    std::vector<float*> m_adam_v;
    std::vector<std::vector<DecaySegment>> m_segments;  // owned elements per unit

    // Stage 3 gathered units and stage 2/3 full-size gradient scratch.
    std::map<int, float*> m_gathered;
    std::map<int, CommRequest> m_gathering;
    std::map<int, float*> m_grad_scratch;
    std::multimap<size_t, float*> m_pool;
    float* m_shard_tmp = nullptr;      // max shard_numel, for reduce-scatter results

    std::vector<CommRequest> m_bucket_requests;
    bool m_first_micro = true;
    bool m_last_micro = true;
};

}  // namespace zt
