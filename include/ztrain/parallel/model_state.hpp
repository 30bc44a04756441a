// The model state one rank holds, for every sharding strategy, behind three narrow faces:
// the model sees a UnitStore (acquire/release/prefetch/grads/grads_done), the trainer sees
// begin_micro_step / finish_grad_sync / grad_sum_squares / optimizer_step, and checkpoints
// and imports see StateShards (shards(): the owned master and AdamW elements). None ever
// branches on the ZeRO stage: all of that is here, in three parts along its axes:
//
//   ParameterStore   the working copy: replicated, or sharded and gathered per unit with
//                    prefetch; after the optimizer, the all-gather of ZeRO-1/2 (started,
//                    waited for per unit by the next forward)
//   GradientReducer  where backward's gradients go: DDP's bucketed all-reduce or per-unit
//                    reduce-scatter, both started as backward produces them and completed
//                    later (parallel/gradient_reducer.hpp)
//   OptimizerState   fp32 master weights and AdamW m, v over the owned elements
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
// One ShardPlan says who owns what, for these parts and for the checkpoint code alike.
//
// Precision: the working copy of parameters and the gradients are stored in the working
// dtype (fp32, bf16 or fp16); fp32 master weights and AdamW state live with the optimizer's
// elements. In fp32 the parameters are the master weights (no separate copy). A 16-bit unit
// is widened into an fp32 view when acquired (scratch; only its vectors when the products
// read its matrices as stored: acquire_vectors), and a unit's fp32 gradient scratch is
// rounded into 16-bit storage when backward is done with it.
// Every buffer is backend memory, and the widening, rounding and accumulation are backend
// ops (Backend::cast / accumulate): nothing here converts or adds on the host.
// Gradients are reduced in `reduce` dtype (the wire format; default: the working dtype).
// Gradient accumulation:
// stages 0 and 1 keep full gradient buffers, so non-final micro-steps communicate nothing;
// stages 2 and 3 keep only a shard, so they reduce-scatter every micro-step and add into the
// shard (the full-size buffer cannot outlive the unit's backward without losing the saving).
// Scratch: gathered units, fp32 views, gradient scratch and the buffers of reductions in
// flight come from one pool that reuses a buffer of the same byte size. The model's
// protocol (model/transformer.cpp: unit 0, the tied embedding, is held from the LM head through backward;
// other units are used one at a time, the next one prefetched) and the reducer's bound on
// reductions in flight bound what the pool holds; dynamic_scratch_planned() is that bound
// and the ZeroEquivalence tests check real steps against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/model_layout.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/gradient_reducer.hpp"
#include "ztrain/parallel/optimizer_state.hpp"
#include "ztrain/parallel/parameter_store.hpp"
#include "ztrain/parallel/shard_layout.hpp"
#include "ztrain/parallel/state_context.hpp"

namespace zt {

/// Bytes per buffer kind on this rank (the memory record). The persistent kinds are summed
/// from the allocations the constructor made, not derived from the layout, so a test that
/// compares them with the ZeRO formulas checks what was allocated.
struct StateBytes {
    size_t params = 0;
    size_t grads = 0;
    size_t master = 0;     ///< fp32 master copy (0 in fp32: the parameters are the master)
    size_t optimizer = 0;  ///< AdamW m and v (Muon's matrices: m alone), and Muon's buffers
    /// Conversion/reduction buffers allocated up front plus the planned peak of what comes
    /// and goes per unit (gathered units, full-size gradient scratch); the part held at run
    /// time is ModelState::dynamic_scratch_held(), which tests check stays within the plan.
    size_t scratch = 0;
    size_t model_state() const { return params + grads + master + optimizer; }
};

/// How a ModelState is sharded, stored and initialised: its constructor's options, named at
/// the call site, e.g. StateOptions::zero(3).with_seed(1).in(DType::kBF16, DType::kBF16).
struct StateOptions {
    int zero_stage = 0;
    /// DDP gradient bucket elements (ZeRO stage 0); SIZE_MAX: one bucket.
    size_t bucket_numel = SIZE_MAX;
    uint64_t seed = 1;           ///< the counter-based initialisation's key
    DType work = DType::kF32;    ///< parameters and activations (and gradients, unless `grads`)
    DType reduce = DType::kF32;  ///< the gradients on the wire
    /// The trained elements' working copy (StateContext::trained); unset: `work`. Only fp32
    /// may differ from `work`.
    std::optional<DType> trained;
    /// The stored gradients (StateContext::grads); unset: the trained dtype. Only fp32 may
    /// differ from it.
    std::optional<DType> grads;
    /// How far communication runs ahead of compute, >= 1 (StateContext::overlap_depth).
    int overlap_depth = 1;
    /// ShardingPolicy::reduce_once_per_step: ZeRO-2/3 keep each unit's whole gradient through
    /// the step and reduce it once (a pipeline stage's state).
    bool reduce_once_per_step = false;
    /// Which initial values the state draws (init_unit_range): kAdaptersOnly where every other
    /// value is written right after (model.init_from's import, or a checkpoint's load).
    InitTensors initial = InitTensors::kAll;
    /// train.optimizer = muon: the blocks' matrices take Muon's step (OptimizerState).
    std::optional<MuonSettings> muon;

    static StateOptions zero(int stage) {
        StateOptions o;
        o.zero_stage = stage;
        return o;
    }
    StateOptions& with_seed(uint64_t s) {
        seed = s;
        return *this;
    }
    StateOptions& with_buckets(size_t numel) {
        bucket_numel = numel;
        return *this;
    }
    StateOptions& in(DType work_dtype, DType reduce_dtype) {
        work = work_dtype;
        reduce = reduce_dtype;
        return *this;
    }
    /// A frozen 16-bit base's adapters kept in `dtype` (fp32 under fp32 activations).
    StateOptions& training_in(DType dtype) {
        trained = dtype;
        return *this;
    }
    DType trained_dtype() const { return trained.value_or(work); }
    /// Gradients accumulated and stored in `dtype` (fp32 beside 16-bit training).
    StateOptions& accumulating_in(DType dtype) {
        grads = dtype;
        return *this;
    }
    DType grads_dtype() const { return grads.value_or(trained_dtype()); }
    StateOptions& with_overlap_depth(int depth) {
        overlap_depth = depth;
        return *this;
    }
    StateOptions& reduced_once_per_step(bool on = true) {
        reduce_once_per_step = on;
        return *this;
    }
    StateOptions& drawing(InitTensors which) {
        initial = which;
        return *this;
    }
    StateOptions& with_muon(const MuonSettings& settings) {
        muon = settings;
        return *this;
    }
};

class StateShards;

class ModelState : public UnitStore {
  public:
    /// Allocates this rank's buffers and initializes them from `options.seed` (counter-based,
    /// see init_unit: identical weights for every world size and stage). `layout` is kept by
    /// reference: it must outlive the state.
    /// Hybrid sharding: the state is split over comms.shard (its group) and replicated over
    /// comms.replica (see parallel/device_mesh.hpp).
    ModelState(const ModelLayout& layout, Backend& backend, StateComms comms, const StateOptions& options);
    /// One group of all of `comm`'s ranks (no replication).
    ModelState(const ModelLayout& layout, Backend& backend, Communicator& comm, const StateOptions& options);
    /// Single-rank convenience (tests, tools): stage 0 on a communicator of size 1.
    ModelState(const ModelLayout& layout, Backend& backend, uint64_t seed);
    ~ModelState() override;
    ModelState(const ModelState&) = delete;
    ModelState& operator=(const ModelState&) = delete;

    // ---- UnitStore (the model's face) ----
    const float* acquire(int unit) override;
    ConstActPtr acquired_storage(int unit) override;
    DType stored_dtype() const override;
    const float* acquire_vectors(int unit) override;
    void release(int unit) override;
    void prefetch(int unit) override;
    float* grads(int unit) override;
    void grads_done(int unit) override;
    bool grads_need_zero(int unit) override;

    // ---- the trainer's face ----
    /// Zeroes the gradients this rank keeps; call once per optimizer step.
    void zero_grads();
    /// Announces a micro-step; `last` = the one after which gradients are reduced.
    void begin_micro_step(bool first, bool last);
    /// Waits for outstanding gradient reductions; afterwards owned gradients are final.
    void finish_grad_sync();
    /// Pipeline parallelism: adds the owned gradient of `unit` held by `with`'s other ranks
    /// (the same unit's state on another stage, which owns the same elements: unit 0 on the
    /// first and the last stage) into this rank's, in place. After finish_grad_sync;
    /// collective over `with`.
    void sum_unit_grads(int unit, Communicator& with) { m_grads.sum_owned(unit, with); }
    /// Global sum of squared gradients (over the group's owned elements: replicas hold the
    /// same ones). `skip`: units left out (pipeline parallelism: unit 0 on the last stage,
    /// counted and checked on the first).
    double grad_sum_squares(const std::vector<int>& skip = {});
    /// The global sum of squares and the overflow check in one pass over the gradients:
    /// returns NaN on every rank when any rank's owned gradients hold inf or NaN (agreed with
    /// an all-reduce MAX, so every rank takes the same decision), else the global sum.
    double grad_sum_squares_if_finite(const std::vector<int>& skip = {});
    /// AdamW over this rank's owned elements, then re-assembles full parameters where the
    /// stage keeps them. `step.grad_scale` multiplies the gradients.
    void optimizer_step(const AdamWStep& step);

    // ---- inspection (tests, checkpoints, import) ----
    StateBytes bytes() const;
    /// What bytes() will be for these options, without allocating anything (the memory
    /// plan): the same size functions the parts allocate with. The constructor checks that
    /// it allocated exactly this.
    /// `group_size`: the ranks the state is split over (the shard group; the world without
    /// hybrid sharding); `rank`: which of them (a frozen base's adapters are a tail of their
    /// units, so their owners keep more state). `options.seed` and `options.bucket_numel`
    /// do not matter.
    static StateBytes plan_bytes(const ModelLayout& layout, int group_size, const StateOptions& options,
                                 int rank = 0);
    /// The ZeRO stage the state was made with (recorded in checkpoints; the parts ask
    /// shard_plan()'s policy instead).
    int zero_stage() const { return m_plan.policy().stage(); }
    /// This rank's place in its shard group (the shard it owns) and which replica it is;
    /// replica 0 writes checkpoints.
    int shard_rank() const { return m_rank; }
    int replica() const { return m_replica.rank(); }
    int replicas() const { return m_replica.size(); }
    const ModelLayout& layout() const { return m_layout; }
    /// Who owns which elements (shared with the checkpoint code).
    const ShardPlan& shard_plan() const { return m_plan; }
    /// Copies the full, unpadded parameters of `unit` into out (unit_numel floats).
    /// Collective over the shard group where the master is sharded (every rank must call it).
    void gather_unit_params(int unit, float* out);

    // ---- checkpoints and imports ----
    /// This rank's shards of the master weights and AdamW moments, and the host copies of
    /// them (the checkpoint's face; StateShards below).
    StateShards shards();

  private:
    // Tests inspect and perturb the state through this (tests/support/model_state_access.hpp).
    friend class ModelStateTestAccess;
    friend class StateShards;
    StateContext context();
    void sync_working_from_master();
    /// gather_unit_params where the master does not hold the whole owned range (16-bit, or
    /// a frozen base).
    void gather_unit_params_piecewise(int unit, float* out);
    /// The planned peak of the per-unit scratch (included in bytes().scratch).
    size_t dynamic_scratch_planned() const;

    const ModelLayout& m_layout;
    Backend& m_backend;
    Communicator& m_comm;     // the shard group
    Communicator& m_replica;  // the same shard in the other groups
    Communicator* m_tensor;   // the tensor group (null: none)
    /// Under tensor parallelism, the owned segments of split tensors and of the rest (whole
    /// tensors, identical on every rank of the tensor group, and alignment gaps).
    std::vector<std::vector<DecaySegment>> m_split_segments;
    std::vector<std::vector<DecaySegment>> m_whole_segments;
    /// The global sum of squares of the tensor-parallel state (checked finite when `check`).
    double tensor_sum_squares(bool check, const std::vector<int>& skip);
    int m_rank;
    DType m_work;
    DType m_trained;
    DType m_grads_dtype;
    bool m_last_micro = true;  // the current micro-step is the step's last
    DType m_reduce;
    int m_overlap_depth;
    ShardPlan m_plan;
    ScratchPool m_pool;       // declared before the parts, which give buffers back to it
    StateBytes m_allocated;   // persistent bytes per kind (scratch: the conversion buffer)
    float* m_f32_tmp = nullptr;
    ParameterStore m_params;
    GradientReducer m_grads;
    OptimizerState m_optim;
};

/// The checkpoint's face of a ModelState (ModelState::shards()): this rank's owned elements
/// [owned_begin, owned_end) of each unit (shard_plan().owned_range for this rank) of the
/// fp32 master weights and the AdamW moments, the copies between them and host memory, and
/// the working copy recomputed after a load. A view: it holds the state by reference.
class StateShards {
  public:
    size_t owned_begin(int unit) const;
    size_t owned_end(int unit) const;
    /// The owned elements that keep a master and moments of their own: all of them unless
    /// a base is frozen (LoRA; ShardPlan::state_range).
    size_t state_begin(int unit) const;
    size_t state_end(int unit) const;
    /// What read and write move (the checkpoint's datasets, in its order).
    enum Kind { kMaster = 0, kAdamM = 1, kAdamV = 2 };
    /// Owned elements [from, to) of `unit`'s `kind` to host memory (`snapshot`: for a buffer
    /// another thread reads later, as snapshot_to_host), and from it. A frozen element has
    /// no master or moments of its own: its master is read from and written to the working
    /// copy (rounded to its dtype), its moments read zero and writing them does nothing.
    void read(int unit, Kind kind, size_t from, size_t to, float* host, bool snapshot = false);
    void write(int unit, Kind kind, size_t from, size_t to, const float* host);
    /// Base pointers such that base[e] is unit element e, valid for the elements in
    /// [state_begin, state_end) (the master in fp32: every stored element). adam_v_base only
    /// without Muon, whose matrices keep no second moment (read and write give them zeros).
    float* master_base(int unit);
    float* adam_m_base(int unit);
    float* adam_v_base(int unit);
    /// n floats from this state's memory (e.g. master_base(u) + b) to host memory, and back:
    /// the one edge between host and backend memory (a memcpy on the CPU). Host code never
    /// dereferences the base pointers above.
    void copy_to_host(float* host, const float* src, size_t n);
    void copy_from_host(float* dst, const float* host, size_t n);
    /// copy_to_host into a buffer read later by another thread (the checkpoint snapshot):
    /// Backend::to_host_past_cache.
    void snapshot_to_host(float* host, const float* src, size_t n);
    /// Host memory those copies run at full speed with (Backend::alloc_host: page-locked
    /// for a GPU state), page-aligned; freed with free_host().
    void* alloc_host(size_t bytes) const;
    void free_host(void* p) const noexcept;
    /// After master weights were overwritten (checkpoint load): recompute the working copy
    /// from them and re-assemble full parameters where the stage keeps them. Collective.
    void sync_working_from_master();

  private:
    friend class ModelState;
    explicit StateShards(ModelState& state) : m_state(state) {}
    float* base(int unit, Kind kind);  // kMaster or kAdamM
    /// A frozen range's master: the fp32 working copy itself, or through the state's fp32
    /// conversion buffer when 16-bit.
    void read_frozen_master(int unit, size_t from, size_t to, float* host, bool snapshot);
    void write_frozen_master(int unit, size_t from, size_t to, const float* host);
    ModelState& m_state;
};

}  // namespace zt
