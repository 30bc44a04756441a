// The working copy of the parameters and how the model reaches it (part of ModelState).
//
//   stage 0     full, persistent; acquire hands it out
//   stages 1-2  full, persistent; after each optimizer step the updated shard of every unit
//               the step changed is all-gathered (LoRA: the trained tails only, summed; all
//               started at once, non-blocking), and acquire(u) waits for unit u's gather
//               only, so the next forward overlaps the rest
//   stage 3     shard only; acquire gathers the unit (prefetch starts the next one early).
//               Within a training pass the store also looks overlap_depth units ahead in the
//               order the model acquired them in its first training pass, so with depth > 1
//               several gathers run ahead of compute (see begin_training_pass)
// 16-bit working copies are widened into an fp32 view (pooled scratch) while acquired (only
// the 1-D tensors for acquire_vectors); in fp32 the working copy is the master copy the
// optimizer updates.
// Tail copies (LoRA): each partly frozen unit's trained tail has a second working copy, whole
// on every rank, in the trained dtype, where
//   - a 16-bit frozen base runs under fp32 activations (StateContext::trained = fp32): the
//     fp32 view takes the tail from it, so the adapters are never rounded to the base's dtype;
//   - the parameters are sharded (stage 3): the tail's state is split evenly over the ranks
//     (ShardPlan::state_range), not by the shards, so its owners update the whole copy, and
//     each gathered unit takes its tail from it.
// In fp32 it is also the tail's master. After each optimizer step each rank's state part is
// all-reduced into the others' (its other parts zeroed first: the sum is a gather).
#pragma once

#include <map>
#include <vector>

#include "ztrain/parallel/state_context.hpp"

namespace zt {

class ParameterStore {
  public:
    /// Allocates the working copy (zeroed); the bytes go to *params_bytes.
    ParameterStore(const StateContext& ctx, size_t* params_bytes);
    ~ParameterStore();
    ParameterStore(const ParameterStore&) = delete;
    ParameterStore& operator=(const ParameterStore&) = delete;

    /// Initial values: elements [lo, hi) of `unit` (host fp32, host[0] = element lo); the part
    /// this rank stores is written, the rest ignored.
    void write_initial(int unit, size_t lo, size_t hi, const float* host);

    // ---- the model's face (UnitStore) ----
    const float* acquire(int unit);
    /// UnitStore::acquire_vectors: in a 16-bit run only the unit's 1-D tensors (and a partly
    /// frozen unit's trained ones) are widened.
    const float* acquire_vectors(int unit);
    /// UnitStore::acquired_storage: the working copy of an acquired unit (gathered at stage 3).
    ConstActPtr acquired_storage(int unit) const;
    DType stored_dtype() const { return m_ctx.work; }
    void release(int unit);
    void prefetch(int unit);
    /// Within a training step the parameters do not change, and unit 0 (the token embedding
    /// and tied head) is used first in every forward and held from the LM head to the end of
    /// every backward. While `hold` is on, release(0) keeps it resident, so a step gathers it
    /// once instead of twice per micro-step (what FSDP does for its root unit). Turning it
    /// off releases it; the optimizer step does so before the parameters change.
    void hold_first_unit(bool hold);
    /// A micro-step's forward and backward follow, acquiring units in the same order as every
    /// other training pass (the model's unit protocol). The first pass is recorded; in later
    /// ones each acquire also starts the gathers of the next overlap_depth units of that
    /// order (the model itself announces only the next one). Evaluation and generation
    /// passes, outside begin/end, get the model's announcements only.
    void begin_training_pass();
    /// Backward is done with every unit. A gather started ahead and never acquired (none
    /// when the order held) is completed and its buffer given back.
    void end_training_pass();

    // ---- around the optimizer ----
    /// Where the trained elements' working copy is fp32 (StateContext::trained): base[e] is
    /// element e of it (the master weights), valid for the trained elements this rank stores
    /// (every element of an fp32 working copy; a tail copy's whole tail).
    float* fp32_base(int unit);
    /// An fp32 working copy's base (element e at [e], valid for the elements this rank
    /// stores); null when it is 16-bit.
    float* fp32_work(int unit) {
        return m_ctx.work == DType::kF32 ? static_cast<float*>(work_ptr(unit, 0)) : nullptr;
    }
    /// Whether the trained elements are fp32 beside a 16-bit frozen base (so every partly
    /// frozen unit has an fp32 tail copy).
    bool separate_trained() const { return m_ctx.trained != m_ctx.work; }
    /// The elements of `unit`'s tail copy (its trained tail; 0 without one), in the trained dtype.
    static size_t tail_copy_numel(const ShardPlan& plan, DType work, DType trained, int unit);
    /// 16-bit: the owned elements of the working copy = master rounded (master_base[e] is
    /// element e). fp32: nothing (the working copy is the master).
    void refresh_owned(int unit, const float* master_base);
    /// 16-bit: the stored working copy (or tail copy) from owned element `element` of a unit
    /// on (AdamW rounds the new master into it). fp32: none (the working copy is the master).
    ActPtr owned_work(int unit, size_t element);
    /// Elements [from, to) of the stored working copy, as fp32 into backend memory `f32`
    /// (to_f32), and from it (from_f32): the only copy of a frozen base (LoRA), which has
    /// no master of its own.
    void stored_to_f32(int unit, size_t from, size_t to, float* f32);
    void stored_from_f32(int unit, size_t from, size_t to, const float* f32);
    /// Stages 1-2: starts the all-gather of every unit's owned shard into the full working
    /// copy; with tail copies under ZeRO, their all-reduce (every stage >= 1).
    /// `after_step`: only what an optimizer step changed: no wholly frozen unit, a partly
    /// frozen unit's trained tail only (start_tail_sum), and with tail copies nothing of
    /// the working copy (the tails alone change). After a load or an import every rank wrote
    /// its own shard of the base, and every unit is gathered (a tail summed first).
    void start_gathers(bool after_step = false);
    /// Completes every gather start_gathers began (before the working copy is read whole
    /// or written).
    void wait_gathers();

    /// Planned peak of the pooled scratch acquire/prefetch take (gathered units, fp32 views).
    size_t dynamic_scratch_planned() const { return planned_scratch(m_ctx.plan, m_ctx.work, m_ctx.overlap_depth); }

    // ---- sizes, without allocating (the memory plan uses the same functions) ----
    static size_t planned_scratch(const ShardPlan& plan, DType work, int overlap_depth);

  private:
    friend class ModelStateTestAccess;  // tests/support/model_state_access.hpp
    /// A unit while acquired or prefetched (stage 3 and/or 16-bit).
    struct Resident {
        void* gathered = nullptr;  // stage 3: the gathered working copy (padded, work dtype)
        float* compute = nullptr;  // fp32 view handed to the model (may alias gathered)
        bool owns_compute = false;
        bool vectors_only = false;  // 16-bit: only the unit's 1-D tensors widened so far
        CommRequest request;
    };
    void* work_ptr(int unit, size_t element);
    /// Element `element` of the trained elements' working copy: the tail copy, or work_ptr.
    void* trained_ptr(int unit, size_t element);
    /// `n` host fp32 values into backend memory of dtype `dt` (16-bit: through f32_tmp).
    void upload(void* dst, DType dt, const float* host, size_t n);
    /// acquire (whole) and acquire_vectors.
    const float* acquire_view(int unit, bool whole);
    /// Stage 3: the tail copy of the same dtype over the gathered unit's stale tail.
    void overlay_tail(int unit, void* gathered);
    /// Widens what `whole` asks of the unit's working copy `src` into r.compute.
    void widen_view(int unit, Resident& r, const void* src, bool whole);
    void wait_gather(int unit);
    void start_trained_gathers();
    /// Starts the sum over the group of `unit`'s trained tail (`tail`: its first element, in
    /// dtype `dt`: the working copy's, or a tail copy's), the elements this rank does
    /// not own zeroed first: a gather of the state owners' parts (ShardPlan::state_range).
    CommRequest start_tail_sum(int unit, void* tail, DType dt);
    /// In a training pass: records `unit` (first pass) or follows the recorded order and
    /// starts the gathers of the units ahead.
    void look_ahead(int unit);

    StateContext m_ctx;
    std::vector<void*> m_params;          // full (stages 0-2) or shard (stage 3), work dtype
    std::map<int, Resident> m_resident;
    /// Per unit: the [begin, end) element ranges of its 1-D tensors and, in a partly frozen
    /// unit, of its trained tensors (LoRA's adapters): what acquire_vectors widens.
    std::vector<std::vector<std::pair<size_t, size_t>>> m_vectors;
    bool m_hold_first_unit = false;
    std::vector<CommRequest> m_gathers;   // stages 1-2: per unit, since the optimizer step
    /// Tail copies (trained dtype; null for a unit without one), whole on every rank, and
    /// their all-reduce since the optimizer step.
    std::vector<void*> m_tail_copies;
    std::vector<CommRequest> m_tail_sums;
    // Training passes (stage 3): the acquire order of the first, and where this one is in it.
    std::vector<int> m_pass_order;
    bool m_in_pass = false;
    bool m_recording = false;
    bool m_following = false;
    size_t m_pass_pos = 0;  // entries of m_pass_order this pass has acquired
};

}  // namespace zt
