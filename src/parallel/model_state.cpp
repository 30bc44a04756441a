// ModelState: the three parts (ParameterStore, GradientReducer, OptimizerState) composed
// behind the model's and the trainer's faces (see model_state.hpp).
#include "ztrain/parallel/model_state.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {

/// The fp32 conversion buffer 16-bit runs need (largest padded unit), counted as scratch.
float* alloc_conversion_buffer(Backend& backend, const ShardPlan& plan, DType work, size_t* scratch_bytes) {
    if (work == DType::kF32) return nullptr;
    const size_t n = conversion_chunk(plan);
    *scratch_bytes += n * sizeof(float);
    return backend.alloc_floats(n);
}

/// `segments` cut into the parts inside split tensors (TensorSlice::split) and the rest. A
/// slice several ranks hold (TensorSlice::copies) is counted by the first of them only: its
/// part goes to neither list on the others.
void split_segments_by_tensor(const ModelLayout& layout, const std::vector<std::vector<DecaySegment>>& segments,
                              std::vector<std::vector<DecaySegment>>* split,
                              std::vector<std::vector<DecaySegment>>* whole) {
    split->assign(segments.size(), {});
    whole->assign(segments.size(), {});
    for (size_t u = 0; u < segments.size(); ++u) {
        struct Cut {
            size_t begin, end;
            bool counted;
        };
        std::vector<Cut> cuts;  // the split tensors of unit u, in order
        for (const ParamSpec& p : layout.params) {
            if (p.unit != static_cast<int>(u) || !p.slice.split()) continue;
            cuts.push_back({p.offset, p.offset + p.numel, layout.split.rank % p.slice.copies == 0});
        }
        for (const DecaySegment& seg : segments[u]) {
            size_t at = seg.begin;
            for (const Cut& c : cuts) {
                const size_t lo = std::max(c.begin, at);
                const size_t hi = std::min(c.end, seg.end);
                if (hi <= lo) continue;
                if (lo > at) (*whole)[u].push_back({at, lo, seg.decay});
                if (c.counted) (*split)[u].push_back({lo, hi, seg.decay});
                at = hi;
            }
            if (at < seg.end) (*whole)[u].push_back({at, seg.end, seg.decay});
        }
    }
}

}  // namespace

ModelState::ModelState(const ModelLayout& layout, Backend& backend, uint64_t seed)
    : ModelState(layout, backend, self_communicator(), StateOptions::zero(0).with_seed(seed)) {}

ModelState::ModelState(const ModelLayout& layout, Backend& backend, Communicator& comm, const StateOptions& options)
    : ModelState(layout, backend, StateComms{comm, self_communicator()}, options) {}

ModelState::ModelState(const ModelLayout& layout, Backend& backend, StateComms comms, const StateOptions& options)
    : m_layout(layout),
      m_backend(backend),
      m_comm(comms.shard),
      m_replica(comms.replica),
      m_tensor(comms.tensor != nullptr && comms.tensor->size() > 1 ? comms.tensor : nullptr),
      m_rank(comms.shard.rank()),
      m_work(options.work),
      m_trained(options.trained_dtype()),
      m_grads_dtype(options.grads_dtype()),
      m_reduce(options.reduce),
      m_overlap_depth(options.overlap_depth),
      m_plan(layout.unit_numel, comms.shard.size(),
             ShardingPolicy::zero_stage(options.zero_stage, options.reduce_once_per_step), trainable_begins(layout)),
      m_pool(backend),
      m_f32_tmp(alloc_conversion_buffer(backend, m_plan, options.work, &m_allocated.scratch)),
      m_params(context(), &m_allocated.params),
      m_grads(context(), options.bucket_numel, &m_allocated.grads),
      m_optim(context(), m_params, &m_allocated.master, &m_allocated.optimizer, options.muon, m_tensor) {
    // What the backend trains in is its answer (the trainer refuses other configs earlier).
    const BackendCapabilities caps = backend.capabilities();
    ZT_REQUIRE(caps.supports(options.work) && caps.supports(options.reduce), "backend ", backend.name(),
               " supports precision ", caps.work_dtypes(), " only; got ", dtype_name(options.work), "/",
               dtype_name(options.reduce));
    ZT_REQUIRE(m_plan.ownership_partitioned() || comms.replica.size() == 1, "ZeRO stage 0 replicates over one group of all ranks; got ",
               comms.replica.size(), " replica groups");
    ZT_REQUIRE(options.overlap_depth >= 1, "overlap depth ", options.overlap_depth);
    ZT_REQUIRE(m_trained == m_work || m_trained == DType::kF32, "trained elements in ", dtype_name(m_trained),
               " beside a ", dtype_name(m_work), " working copy: only fp32 may differ");
    ZT_REQUIRE(m_grads_dtype == m_trained || m_grads_dtype == DType::kF32, "gradients in ", dtype_name(m_grads_dtype),
               " for ", dtype_name(m_trained), " trained elements: only fp32 may differ");
    if (m_tensor != nullptr) {
        split_segments_by_tensor(layout, m_optim.segments(), &m_split_segments, &m_whole_segments);
    }
    const StateBytes planned = plan_bytes(layout, comms.shard.size(), options, m_rank);
    const StateBytes got = bytes();
    ZT_REQUIRE(got.params == planned.params && got.grads == planned.grads && got.master == planned.master &&
                   got.optimizer == planned.optimizer && got.scratch == planned.scratch,
               "model-state plan differs from the allocation (params ", got.params, " vs ", planned.params, ", grads ",
               got.grads, " vs ", planned.grads, ", scratch ", got.scratch, " vs ", planned.scratch, ")");
    // Initial values are computed on the host (fp32) a piece at a time, so the host holds
    // 4 MiB of them at once, not a whole unit (157 MB for GPT-2's embedding, on top of the
    // peak). Each piece goes to the working copy and, in 16-bit runs, the fp32 master.
    constexpr size_t kInitPieceNumel = size_t{1} << 20;
    std::vector<float> piece(kInitPieceNumel);
    for (int u = 0; u < layout.num_units(); ++u) {
        const UnitShard& s = m_plan.shard(u);
        for (size_t lo = 0; lo < s.padded_numel; lo += kInitPieceNumel) {
            const size_t hi = std::min(s.padded_numel, lo + kInitPieceNumel);
            // Padding past the unit's numel is zero.
            std::fill(piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(hi - lo), 0.f);
            if (lo < s.numel) {
                init_unit_range(layout, u, options.seed, lo, std::min(hi, s.numel), piece.data(), options.initial);
            }
            m_params.write_initial(u, lo, hi, piece.data());
            m_optim.write_initial(u, lo, hi, piece.data());
        }
    }
}

ModelState::~ModelState() {
    if (m_f32_tmp != nullptr) m_backend.free(m_f32_tmp);
}

StateContext ModelState::context() {
    return StateContext{m_layout, m_backend, m_comm,          m_replica, m_plan,    m_rank,
                        m_work,   m_trained, m_grads_dtype, m_reduce, m_overlap_depth, m_pool, m_f32_tmp};
}

// ---- UnitStore ----
const float* ModelState::acquire(int unit) { return m_params.acquire(unit); }
ConstActPtr ModelState::acquired_storage(int unit) { return m_params.acquired_storage(unit); }
DType ModelState::stored_dtype() const { return m_params.stored_dtype(); }
const float* ModelState::acquire_vectors(int unit) { return m_params.acquire_vectors(unit); }
void ModelState::release(int unit) { m_params.release(unit); }
void ModelState::prefetch(int unit) { m_params.prefetch(unit); }
float* ModelState::grads(int unit) { return m_grads.grads(unit); }
void ModelState::grads_done(int unit) {
    m_grads.grads_done(unit);
    // Unit 0's gradient is the last of a backward: after the step's last one, the held
    // unit 0 is released by the model's release(0) that follows.
    if (unit != 0) return;
    m_params.end_training_pass();
    if (m_last_micro) m_params.hold_first_unit(false);
}
bool ModelState::grads_need_zero(int unit) { return m_grads.grads_need_zero(unit); }

// ---- the trainer's face ----
void ModelState::zero_grads() { m_grads.zero(); }
void ModelState::begin_micro_step(bool first, bool last) {
    m_grads.begin_micro_step(first, last);
    m_last_micro = last;
    m_params.hold_first_unit(true);
    m_params.begin_training_pass();
}
void ModelState::finish_grad_sync() { m_grads.finish(); }

namespace {

using UnitSegments = std::vector<std::vector<DecaySegment>>;

/// `all` without the units in `skip` (their lists emptied); `all` itself when none.
const UnitSegments& without_units(const UnitSegments& all, const std::vector<int>& skip, UnitSegments& copy) {
    if (skip.empty()) return all;
    copy = all;
    for (int u : skip) {
        ZT_REQUIRE(u >= 0 && static_cast<size_t>(u) < copy.size(), "unit ", u, " of ", copy.size());
        copy[static_cast<size_t>(u)].clear();
    }
    return copy;
}

}  // namespace

double ModelState::tensor_sum_squares(bool check, const std::vector<int>& skip) {
    // Split tensors: each rank of the tensor group holds other elements, summed over it;
    // whole ones: the same on every rank (their gradients come from the group's sums), so
    // counted once.
    UnitSegments split_copy;
    UnitSegments whole_copy;
    double s[2] = {m_grads.local_sum_squares(without_units(m_split_segments, skip, split_copy)),
                   m_grads.local_sum_squares(without_units(m_whole_segments, skip, whole_copy))};
    if (check) {
        double bad = std::isfinite(s[0] + s[1]) ? 0.0 : 1.0;
        for (Communicator* c : {&m_comm, &m_replica, m_tensor}) {
            if (c->size() > 1) c->all_reduce_scalars(&bad, 1, ReduceOp::kMax);
        }
        if (bad != 0.0) return std::numeric_limits<double>::quiet_NaN();
    }
    if (m_plan.ownership_partitioned()) m_comm.all_reduce_scalars(s, 2);
    m_tensor->all_reduce_scalars(s, 1);
    return s[0] + s[1];
}

double ModelState::grad_sum_squares(const std::vector<int>& skip) {
    if (m_tensor != nullptr) return tensor_sum_squares(false, skip);
    UnitSegments copy;
    double s = m_grads.local_sum_squares(without_units(m_optim.segments(), skip, copy));
    // DDP: every rank holds the same full gradient, the local sum is already global; ZeRO:
    // the group's shards make one whole (the other groups hold the same shards).
    if (m_plan.ownership_partitioned()) m_comm.all_reduce_scalars(&s, 1);
    return s;
}

double ModelState::grad_sum_squares_if_finite(const std::vector<int>& skip) {
    if (m_tensor != nullptr) return tensor_sum_squares(true, skip);
    // A double sum of squared floats is finite exactly when every element is (a finite float
    // squared is below 1.2e77, far from overflowing a double), so the overflow check needs
    // no pass of its own.
    UnitSegments copy;
    double s = m_grads.local_sum_squares(without_units(m_optim.segments(), skip, copy));
    double bad = std::isfinite(s) ? 0.0 : 1.0;
    m_comm.all_reduce_scalars(&bad, 1, ReduceOp::kMax);
    // Replicas hold the same reduced gradients, so they agree already; one more flag makes a
    // skip decision that differs across groups (and a hang at the next collective) impossible.
    if (m_replica.size() > 1) m_replica.all_reduce_scalars(&bad, 1, ReduceOp::kMax);
    if (bad != 0.0) return std::numeric_limits<double>::quiet_NaN();
    if (m_plan.ownership_partitioned()) m_comm.all_reduce_scalars(&s, 1);
    return s;
}

void ModelState::optimizer_step(const AdamWStep& step) {
    m_params.hold_first_unit(false);
    m_params.wait_gathers();
    m_optim.update(step, m_grads);  // also rounds a 16-bit working copy's owned elements
    m_params.start_gathers(/*after_step=*/true);
}

void ModelState::sync_working_from_master() {
    m_params.hold_first_unit(false);
    m_params.wait_gathers();
    for (int u = 0; u < m_layout.num_units(); ++u) m_params.refresh_owned(u, m_optim.master_base(u));
    m_params.start_gathers();
}

// ---- inspection ----
StateBytes ModelState::bytes() const {
    StateBytes b = m_allocated;
    b.scratch += dynamic_scratch_planned();
    return b;
}

StateBytes ModelState::plan_bytes(const ModelLayout& layout, int group_size, const StateOptions& options, int rank) {
    const ShardPlan plan(layout.unit_numel, group_size,
                         ShardingPolicy::zero_stage(options.zero_stage, options.reduce_once_per_step),
                         trainable_begins(layout));
    const DType work = options.work;
    const DType trained = options.trained_dtype();
    const DType grads = options.grads_dtype();
    const DType reduce = options.reduce;
    const int overlap_depth = options.overlap_depth;
    const size_t w = dtype_size(work);
    StateBytes b;
    for (int u = 0; u < layout.num_units(); ++u) {
        b.params += plan.stored_params(u) * w + ParameterStore::tail_copy_numel(plan, work, trained, u) * dtype_size(trained);
        b.grads += plan.stored_grads(u, rank) * dtype_size(grads);
        const size_t state = plan.stored_optimizer(u, rank) * sizeof(float);
        if (trained != DType::kF32) b.master += state;  // fp32: the working copy is the master
        b.optimizer += state + OptimizerState::second_moment_floats(layout, plan, u, rank, options.muon.has_value()) *
                                   sizeof(float);
    }
    if (options.muon) b.optimizer += OptimizerState::muon_bytes(layout, plan);
    if (work != DType::kF32) b.scratch += conversion_chunk(plan) * sizeof(float);  // the conversion buffer
    b.scratch += ParameterStore::planned_scratch(plan, work, overlap_depth) +
                 GradientReducer::planned_scratch(plan, grads, reduce, overlap_depth);
    return b;
}

size_t ModelState::dynamic_scratch_planned() const {
    // gather_unit_params' buffer is outside a step (checkpoints, export): not planned here.
    return m_params.dynamic_scratch_planned() + m_grads.dynamic_scratch_planned();
}

StateShards ModelState::shards() { return StateShards(*this); }

size_t StateShards::owned_begin(int unit) const { return m_state.m_plan.owned_range(unit, m_state.m_rank).begin; }
size_t StateShards::owned_end(int unit) const { return m_state.m_plan.owned_range(unit, m_state.m_rank).end; }

size_t StateShards::state_begin(int unit) const { return m_state.m_plan.state_range(unit, m_state.m_rank).begin; }
size_t StateShards::state_end(int unit) const { return m_state.m_plan.state_range(unit, m_state.m_rank).end; }

float* StateShards::base(int unit, Kind kind) {
    return kind == kMaster ? master_base(unit) : adam_m_base(unit);
}

void StateShards::read(int unit, Kind kind, size_t from, size_t to, float* host, bool snapshot) {
    // Elements below the trained part are frozen: their master is the working copy (and they
    // have no moments).
    const size_t split = std::clamp(m_state.m_plan.trainable(unit).begin, from, to);
    if (split > from) {
        if (kind == kMaster) {
            read_frozen_master(unit, from, split, host, snapshot);
        } else {
            std::fill(host, host + (split - from), 0.f);
        }
    }
    if (to <= split) return;
    float* dst = host + (split - from);
    auto out = [&](float* to_host, const float* src, size_t n) {
        if (snapshot) {
            snapshot_to_host(to_host, src, n);
        } else {
            copy_to_host(to_host, src, n);
        }
    };
    if (kind != kAdamV) {
        out(dst, base(unit, kind) + split, to - split);
        return;
    }
    std::fill(dst, dst + (to - split), 0.f);  // Muon's matrices keep no second moment
    m_state.m_optim.for_second_moment_within(unit, split, to,
                                             [&](size_t e, float* v, size_t n) { out(dst + (e - split), v, n); });
}

void StateShards::write(int unit, Kind kind, size_t from, size_t to, const float* host) {
    const size_t split = std::clamp(m_state.m_plan.trainable(unit).begin, from, to);
    if (split > from && kind == kMaster) write_frozen_master(unit, from, split, host);
    if (to <= split) return;
    if (kind != kAdamV) {
        copy_from_host(base(unit, kind) + split, host + (split - from), to - split);
        return;
    }
    m_state.m_optim.for_second_moment_within(
        unit, split, to, [&](size_t e, float* v, size_t n) { copy_from_host(v, host + (e - from), n); });
}

void StateShards::read_frozen_master(int unit, size_t from, size_t to, float* host, bool snapshot) {
    ModelState& s = m_state;
    if (const float* w = s.m_params.fp32_work(unit)) {
        if (snapshot) {
            snapshot_to_host(host, w + from, to - from);
        } else {
            copy_to_host(host, w + from, to - from);
        }
        return;
    }
    s.m_params.wait_gathers();
    const size_t chunk = conversion_chunk(s.m_plan);
    for (size_t at = from; at < to; at += chunk) {
        const size_t end = std::min(to, at + chunk);
        s.m_params.stored_to_f32(unit, at, end, s.m_f32_tmp);
        const size_t bytes = (end - at) * sizeof(float);
        if (snapshot) {
            s.m_backend.to_host_past_cache(host + (at - from), s.m_f32_tmp, bytes);
        } else {
            s.m_backend.to_host(host + (at - from), s.m_f32_tmp, bytes);
        }
    }
}

void StateShards::write_frozen_master(int unit, size_t from, size_t to, const float* host) {
    ModelState& s = m_state;
    if (float* w = s.m_params.fp32_work(unit)) {
        copy_from_host(w + from, host, to - from);
        return;
    }
    s.m_params.hold_first_unit(false);
    s.m_params.wait_gathers();
    const size_t chunk = conversion_chunk(s.m_plan);
    for (size_t at = from; at < to; at += chunk) {
        const size_t end = std::min(to, at + chunk);
        s.m_backend.to_device(s.m_f32_tmp, host + (at - from), (end - at) * sizeof(float));
        s.m_params.stored_from_f32(unit, at, end, s.m_f32_tmp);
    }
}

float* StateShards::master_base(int unit) { return m_state.m_optim.master_base(unit); }
float* StateShards::adam_m_base(int unit) { return m_state.m_optim.m_base(unit); }
float* StateShards::adam_v_base(int unit) { return m_state.m_optim.v_base(unit); }

void* StateShards::alloc_host(size_t bytes) const { return m_state.m_backend.alloc_host(bytes); }
void StateShards::free_host(void* p) const noexcept { m_state.m_backend.free_host(p); }
void StateShards::sync_working_from_master() { m_state.sync_working_from_master(); }

void ModelState::gather_unit_params(int unit, float* out) {
    m_params.wait_gathers();
    const UnitShard& s = m_plan.shard(unit);
    const float* master = m_optim.master_base(unit);
    // The master is whole here when the optimizer is not sharded, or when it is the (fp32,
    // unsharded) working copy.
    const ShardingPolicy& p = m_plan.policy();
    if (m_work == DType::kF32 && !p.params_sharded) {
        m_backend.to_host(out, master, s.numel * sizeof(float));
        return;
    }
    if (!p.optimizer_sharded || m_plan.partly_frozen(unit)) {
        gather_unit_params_piecewise(unit, out);
        return;
    }
    // The master lives in shards: gather them (every rank calls this) into backend scratch,
    // which is what the state's communicator reads and writes, then copy out.
    void* full = m_pool.take(s.padded_numel * sizeof(float));
    m_comm.all_gather(master + s.begin(m_rank), full, s.shard_numel);
    m_backend.to_host(out, full, s.numel * sizeof(float));
    m_pool.give(full, s.padded_numel * sizeof(float));
}

void ModelState::gather_unit_params_piecewise(int unit, float* out) {
    // A master covering only a frozen base's trained part (LoRA): each rank's owned range of
    // the base (from the working copy) gathered, then its state range of the tail
    // (StateShards::read) summed over the group with the rest zero (where the tail's state
    // is split evenly, its ranges are not the shards).
    const UnitShard& s = m_plan.shard(unit);
    StateShards sh = shards();
    if (!m_plan.ownership_partitioned()) {
        sh.read(unit, StateShards::kMaster, 0, s.numel, out);
        return;
    }
    const ElementRange f = m_plan.frozen_range(unit, m_rank);
    const ElementRange t = m_plan.trainable(unit);
    const ElementRange own = m_plan.state_range(unit, m_rank);
    std::vector<float> mine(std::max(s.shard_numel, t.size()), 0.f);
    sh.read(unit, StateShards::kMaster, f.begin, f.end, mine.data());
    float* piece = static_cast<float*>(m_pool.take(mine.size() * sizeof(float)));
    void* full = m_pool.take(s.padded_numel * sizeof(float));
    m_backend.to_device(piece, mine.data(), s.shard_numel * sizeof(float));
    m_comm.all_gather(piece, full, s.shard_numel);
    m_backend.to_host(out, full, t.begin * sizeof(float));
    m_pool.give(full, s.padded_numel * sizeof(float));
    if (t.empty()) {
        m_pool.give(piece, mine.size() * sizeof(float));
        return;
    }
    std::fill(mine.begin(), mine.end(), 0.f);
    sh.read(unit, StateShards::kMaster, own.begin, own.end, mine.data() + (own.begin - t.begin));
    m_backend.to_device(piece, mine.data(), t.size() * sizeof(float));
    m_comm.all_reduce(piece, t.size());
    m_backend.to_host(out + t.begin, piece, t.size() * sizeof(float));
    m_pool.give(piece, mine.size() * sizeof(float));
}

void StateShards::copy_to_host(float* host, const float* src, size_t n) {
    m_state.m_params.wait_gathers();  // fp32: the master is the working copy a gather may be filling
    m_state.m_backend.to_host(host, src, n * sizeof(float));
}

void StateShards::snapshot_to_host(float* host, const float* src, size_t n) {
    m_state.m_params.wait_gathers();  // as copy_to_host
    m_state.m_backend.to_host_past_cache(host, src, n * sizeof(float));
}

void StateShards::copy_from_host(float* dst, const float* host, size_t n) {
    m_state.m_params.hold_first_unit(false);
    m_state.m_params.wait_gathers();
    m_state.m_backend.to_device(dst, host, n * sizeof(float));
}

}  // namespace zt
