// Where backward's gradients go and how they are reduced across ranks (part of ModelState).
//
//   stage 0     full arena (units in backward order); at the last micro-step each DDP bucket
//               is all-reduced as soon as backward has produced all its units
//   stage 1     full arena; at the last micro-step each unit is reduce-scattered as soon as
//               backward is done with it, and the rank keeps its own slice
//   stages 2-3  shard only; each unit's full gradient is fp32 scratch, reduce-scattered as
//               soon as backward is done with it (every micro-step) and added into the shard;
//               unit 0's scratch is kept across the micro-steps of a step and reduced once
//               (see reduced_once_per_step); a pipeline stage's state keeps every unit's
//               so (ShardingPolicy::reduce_once_per_step)
// With replica groups (hybrid sharding, stages 1-3), the reduce-scatter runs inside the shard
// group, and at the last micro-step each unit's owned shard, once final, is all-reduced
// across the groups (in place, or through a wire-dtype copy) while backward goes on.
// Every reduction is started (non-blocking) and completed later: at most
// StateContext::reductions_in_flight() of those that hold pooled buffers (gradient scratch, wire-dtype copies, shard results) are
// outstanding at once, so a reduction overlaps the backward of the next units without the
// memory of the whole model's gradients in flight. Those of one micro-step run on through the
// next one's forward, completed when backward returns to their unit; finish completes the
// rest. Gradients are stored in StateContext::grads (the working dtype; fp32 for the adapters
// of a 16-bit frozen base under fp32 activations, or when precision.grad_dtype = fp32); a
// 16-bit one stores rounded gradients, which backward's fp32 scratch is accumulated into
// (Backend::accumulate), while an fp32 one at stages 0-1 is written by backward directly.
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/state_context.hpp"

namespace zt {

class GradientReducer {
  public:
    /// Allocates the stored gradients (zeroed); the bytes go to *grads_bytes.
    GradientReducer(const StateContext& ctx, size_t bucket_numel, size_t* grads_bytes);
    ~GradientReducer();
    GradientReducer(const GradientReducer&) = delete;
    GradientReducer& operator=(const GradientReducer&) = delete;

    // ---- the model's face (UnitStore) ----
    float* grads(int unit);
    void grads_done(int unit);
    bool grads_need_zero(int unit);

    // ---- the step ----
    void zero();
    /// Completes what the previous micro-step left in flight, then records the new one.
    void begin_micro_step(bool first, bool last);
    /// Completes every reduction: afterwards the owned gradients are final.
    void finish();
    /// The final gradient of owned element `element` of a unit and those after it, in the
    /// stored (working) dtype: AdamW and the norm read it as it is, widening as they go.
    ConstActPtr owned(int unit, size_t element);
    /// Adds `with`'s other ranks' owned gradient of `unit` into this rank's, in place, in the
    /// stored dtype (after finish()). Collective over `with`.
    void sum_owned(int unit, Communicator& with);
    /// This rank's sum of squares over `segments` of each unit's owned gradients.
    double local_sum_squares(const std::vector<std::vector<DecaySegment>>& segments);
    /// Planned peak of the pooled scratch (gradient scratch, buffers of reductions in flight).
    size_t dynamic_scratch_planned() const {
        return planned_scratch(m_ctx.plan, m_ctx.grads, m_ctx.reduce, m_ctx.overlap_depth);
    }

    // ---- sizes, without allocating (the memory plan uses the same functions) ----
    /// `stored`: the stored gradients' dtype (StateContext::grads).
    static size_t planned_scratch(const ShardPlan& plan, DType stored, DType reduce, int overlap_depth);

  private:
    friend class ModelStateTestAccess;  // tests/support/model_state_access.hpp
    /// A started reduction and the pooled buffers it holds until completed.
    struct InFlight {
        enum Kind { kBucket, kUnitAllReduce, kReduceScatter, kReplicaAllReduce, kTrainedPartAllReduce };
        explicit InFlight(Kind k) : kind(k) {}
        Kind kind;
        int unit = -1;             // kUnitAllReduce, kReduceScatter
        bool first = false;        // the micro-step's first (kReduceScatter, stages 2-3)
        bool last = false;         // the step's last micro-step (kReduceScatter)
        CommRequest request;
        void* send = nullptr;      // pooled wire-dtype copy of the input (null: storage read)
        size_t send_bytes = 0;
        void* recv = nullptr;      // pooled result (null: reduced into the storage)
        size_t recv_bytes = 0;
        float* scratch = nullptr;  // stages 2-3: the unit's fp32 gradient scratch
        size_t scratch_bytes = 0;
        bool pooled() const { return send != nullptr || recv != nullptr || scratch != nullptr; }
    };
    /// Completes the oldest reductions until `held` (the count of those holding pool memory,
    /// or of DDP buckets in flight) is below reductions_in_flight().
    void make_room(const size_t& held);
    /// Zeroes the unit's stored gradients.
    void zero_stored(int unit);
    void start(InFlight f);
    void complete(InFlight& f);
    void complete_all();
    /// Completes, oldest first, every reduction up to the newest one of `unit`.
    void complete_through(int unit);
    /// Completes, oldest first, the reductions that have already run (never blocks).
    void complete_finished();
    void start_bucket(const GradBucket& b);
    void start_unit_reduction(int unit);
    /// A partly frozen unit's trained tail (ShardPlan::partly_frozen): all-reduced, then
    /// each rank keeps its part (stages 2-3: added into its stored gradients).
    void start_trained_part_reduction(int unit);
    void complete_trained_part(InFlight& f);
    /// The owned shard of `unit` is final for this step: all-reduce it across the groups.
    void start_replica_reduction(int unit);
    /// The elements that all-reduce covers on this rank.
    ElementRange replica_span(int unit) const;
    void* grad_ptr(int unit, size_t element);
    /// Stages 2-3: unit 0 (the token embedding and tied head) has its gradient written from
    /// the LM head, the first op of backward, to the embedding, the last, so its full-size
    /// scratch is live at the memory peak (the start of backward) in every micro-step anyway.
    /// Keeping it through the forward between micro-steps adds nothing to the peak, and the
    /// step reduces it once (as FSDP's no_sync does for a whole model) instead of once per
    /// micro-step: for a model whose embedding is a large share, most of the reduce-scatter
    /// bytes of gradient accumulation. Under ShardingPolicy::reduce_once_per_step (pipeline
    /// stages) every unit is.
    bool reduced_once_per_step(int unit) const { return unit == 0 || m_ctx.plan.policy().reduce_once_per_step; }
    /// fp32, stages 0-1: grads() hands out the stored buffer itself, so zeroing is left to
    /// the model (grads_need_zero) instead of a memset of every gradient at step start. A
    /// scratch (16-bit, stages 2-3) is left to the model the same way, but for its gaps.
    bool lazy_zero() const { return m_ctx.grads == DType::kF32 && !m_ctx.plan.policy().grads_sharded; }

    StateContext m_ctx;
    std::vector<GradBucket> m_buckets;
    void* m_arena = nullptr;              // stages 0-1: full gradients, backward order
    std::vector<void*> m_grads;           // stages 0-1: into the arena; stages 2-3: shards
    std::vector<char> m_zero_pending;     // per unit: not zeroed yet (this step, or this scratch)
    std::vector<char> m_unwritten;        // 16-bit full gradients, per unit: not written yet this step
    std::map<int, float*> m_scratch;      // fp32 gradient being produced by backward
    /// Per unit: the elements of its scratch no op writes (no trained tensor there:
    /// alignment gaps, padding, frozen tensors), zeroed when a scratch is taken; the model
    /// zeroes or assigns the rest as it first writes them.
    std::vector<std::vector<ElementRange>> m_scratch_gaps;
    std::deque<InFlight> m_in_flight;
    size_t m_pooled_in_flight = 0;
    size_t m_buckets_in_flight = 0;
    bool m_first_micro = true;
    bool m_last_micro = true;
};

}  // namespace zt
