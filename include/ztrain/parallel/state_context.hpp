// What the three parts of a rank's model state (ParameterStore, GradientReducer,
// OptimizerState; composed by ModelState) share: who owns what, the dtypes, the backend and
// communicators, and one pool of per-unit scratch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <set>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/parallel/shard_layout.hpp"

namespace zt {

/// Backend buffers that come and go once per unit per micro-step (gathered units, fp32
/// views, gradient scratch, reduction buffers in flight), reused by byte size so a step does
/// not page-fault fresh memory. held() is the high-water mark: the pool never frees early.
class ScratchPool {
  public:
    explicit ScratchPool(Backend& backend) : m_backend(backend) {}
    ~ScratchPool();
    ScratchPool(const ScratchPool&) = delete;
    ScratchPool& operator=(const ScratchPool&) = delete;
    void* take(size_t bytes);
    void give(void* p, size_t bytes) { m_free.emplace(bytes, p); }
    size_t held() const { return m_held; }

  private:
    Backend& m_backend;
    std::multimap<size_t, void*> m_free;
    std::vector<void*> m_all;
    size_t m_held = 0;
};

/// The peak bytes the pool holds for buffers of `bytes_of(unit)` when at most `live` such
/// buffers of one size are alive at once (the pool keeps, per size, as many as were ever
/// alive together). Sizes repeat (every block is one size), hence the per-size count.
template <typename BytesOf>
size_t pooled_peak(int first_unit, int end_unit, size_t live, BytesOf bytes_of) {
    std::map<size_t, size_t> count;
    for (int u = first_unit; u < end_unit; ++u) ++count[bytes_of(u)];
    size_t peak = 0;
    for (const auto& [bytes, n] : count) peak += bytes * (n < live ? n : live);
    return peak;
}

/// The communicators a model state works over: `shard`, the ranks its state is split
/// over (its shard group, parallel/device_mesh.hpp), and `replica`, the ranks holding the
/// same shard in the other groups (size 1 when nothing is replicated).
struct StateComms {
    Communicator& shard;
    Communicator& replica;
    /// The tensor group (parallel.tensor > 1; null: none): its ranks hold the other slices
    /// of the split tensors and the same whole ones, so the gradient norm and the overflow
    /// verdict are agreed over it too.
    Communicator* tensor = nullptr;
};

/// Reductions holding pooled buffers that may be outstanding at once, at an overlap depth
/// (StateContext::overlap_depth): the one rule the reducer and the memory plan both use.
inline size_t reductions_in_flight(int overlap_depth) { return static_cast<size_t>(overlap_depth) + 1; }

struct StateContext {
    const ModelLayout& layout;
    Backend& backend;
    Communicator& comm;     ///< the shard group: reduce-scatters and all-gathers
    Communicator& replica;  ///< across groups: the owned gradients' all-reduce
    const ShardPlan& plan;
    int rank;      ///< in the shard group
    DType work;    ///< the parameters' working copy
    /// The trained elements' working copy: `work`, except under a 16-bit frozen base with
    /// fp32 activations (LoRA), whose adapters stay fp32 beside it as PEFT keeps them
    /// (ParameterStore::separate_trained).
    DType trained;
    /// The stored gradients, which micro-steps accumulate into: `trained`, or fp32 beside a
    /// 16-bit one (precision.grad_dtype; Megatron's fp32 accumulation, DeepSpeed's
    /// grad_accum_dtype).
    DType grads;
    DType reduce;  ///< the gradients' wire format
    /// How far communication runs ahead of compute (>= 1): at stage 3 the units gathered
    /// ahead of the one in use, and the reductions holding pooled buffers at once (depth + 1).
    /// Each step deeper holds one more unit-sized buffer of each kind (the memory plan's
    /// choice, parallel.overlap_depth).
    int overlap_depth;
    size_t reductions_in_flight() const { return zt::reductions_in_flight(overlap_depth); }
    ScratchPool& pool;
    /// fp32 conversion buffer of conversion_chunk(plan) elements (16-bit runs only, else
    /// null): 16-bit gradients and initial values pass through it chunk by chunk.
    float* f32_tmp;

    int num_units() const { return layout.num_units(); }
    const UnitShard& shard(int unit) const { return plan.shard(unit); }
    size_t owned_begin(int unit) const { return plan.owned_range(unit, rank).begin; }
    size_t owned_end(int unit) const { return plan.owned_range(unit, rank).end; }
    /// The owned elements that keep gradients, master and moments (ShardPlan::state_range).
    size_t state_begin(int unit) const { return plan.state_range(unit, rank).begin; }
    size_t state_end(int unit) const { return plan.state_range(unit, rank).end; }
    size_t work_size() const { return dtype_size(work); }
    size_t trained_size() const { return dtype_size(trained); }
    size_t grads_size() const { return dtype_size(grads); }
};

/// Elements a conversion through StateContext::f32_tmp covers at a time: the largest padded
/// unit, at most 4M (16 MiB of fp32), so a 16-bit run never holds a whole large unit
/// (the embedding) in fp32 for its optimizer step.
inline size_t conversion_chunk(const ShardPlan& plan) {
    size_t largest = 0;
    for (const UnitShard& s : plan.shards()) largest = std::max(largest, s.padded_numel);
    return std::min(largest, size_t{1} << 22);
}

/// Address of element `element` in a buffer of dtype t.
inline char* element_at(void* base, size_t element, DType t) {
    return static_cast<char*>(base) + element * dtype_size(t);
}
inline const char* element_at(const void* base, size_t element, DType t) {
    return static_cast<const char*>(base) + element * dtype_size(t);
}

}  // namespace zt
