// ParameterStore (see parameter_store.hpp). Element indices are unit-relative; a stage-3
// shard buffer is addressed through work_ptr, which shifts by the shard start.
#include "ztrain/parallel/parameter_store.hpp"

#include <algorithm>
#include <exception>

#include "ztrain/core/error.hpp"

namespace zt {

ScratchPool::~ScratchPool() {
    for (void* p : m_all) m_backend.free(p);
}

void* ScratchPool::take(size_t bytes) {
    auto it = m_free.find(bytes);
    if (it != m_free.end()) {
        void* p = it->second;
        m_free.erase(it);
        return p;
    }
    m_held += bytes;
    void* p = m_backend.alloc_bytes(bytes);
    m_all.push_back(p);
    return p;
}

ParameterStore::ParameterStore(const StateContext& ctx, size_t* params_bytes) : m_ctx(ctx) {
    for (int u = 0; u < ctx.num_units(); ++u) {
        const size_t n = ctx.plan.stored_params(u);
        m_params.push_back(ctx.backend.alloc_bytes(n * ctx.work_size()));
        *params_bytes += n * ctx.work_size();
    }
    m_gathers.resize(m_params.size());
    m_tail_copies.assign(m_params.size(), nullptr);
    m_tail_sums.resize(m_params.size());
    for (int u = 0; u < ctx.num_units(); ++u) {
        const size_t n = tail_copy_numel(ctx.plan, ctx.work, ctx.trained, u);
        if (n == 0) continue;
        m_tail_copies[static_cast<size_t>(u)] = ctx.backend.alloc_bytes(n * ctx.trained_size());
        *params_bytes += n * ctx.trained_size();
    }
    m_vectors.resize(m_params.size());
    for (const ParamSpec& p : ctx.layout.params) {
        const bool adapter = p.trainable && ctx.plan.partly_frozen(p.unit);
        if (p.shape.size() == 1 || adapter) {
            m_vectors[static_cast<size_t>(p.unit)].emplace_back(p.offset, p.offset + p.numel);
        }
    }
}

ParameterStore::~ParameterStore() {
    // As ~GradientReducer: no waiting while an error unwinds (the job is aborted next).
    if (std::uncaught_exceptions() == 0) {
        for (CommRequest& r : m_gathers) m_ctx.comm.wait(r);
        for (CommRequest& r : m_tail_sums) m_ctx.comm.wait(r);
        for (auto& [u, r] : m_resident) m_ctx.comm.wait(r.request);
    }
    // Resident buffers are pool memory: the pool frees them.
    for (void* p : m_params) m_ctx.backend.free(p);
    for (void* p : m_tail_copies) {
        if (p != nullptr) m_ctx.backend.free(p);
    }
}

size_t ParameterStore::tail_copy_numel(const ShardPlan& plan, DType work, DType trained, int unit) {
    const bool copied = trained != work || (plan.policy().params_sharded && plan.partly_frozen(unit));
    return copied ? plan.trainable(unit).size() : 0;
}

void* ParameterStore::work_ptr(int unit, size_t element) {
    const size_t start = m_ctx.plan.params_start(unit, m_ctx.rank);
    return element_at(m_params[static_cast<size_t>(unit)], element - start, m_ctx.work);
}

void ParameterStore::write_initial(int unit, size_t lo, size_t hi, const float* host) {
    const size_t begin = m_ctx.plan.params_start(unit, m_ctx.rank);
    const size_t end = begin + m_ctx.plan.stored_params(unit);
    if (void* tail = m_tail_copies[static_cast<size_t>(unit)]) {  // whole on every rank
        const ElementRange t = m_ctx.plan.trainable(unit);
        const size_t a = std::max(lo, t.begin);
        const size_t z = std::min(hi, t.end);
        if (z > a) upload(element_at(tail, a - t.begin, m_ctx.trained), m_ctx.trained, host + (a - lo), z - a);
    }
    const size_t from = std::max(lo, begin);
    const size_t to = std::min(hi, end);
    if (to > from) upload(work_ptr(unit, from), m_ctx.work, host + (from - lo), to - from);
}

void ParameterStore::upload(void* dst, DType dt, const float* host, size_t n) {
    if (dt == DType::kF32) {
        m_ctx.backend.to_device(dst, host, n * sizeof(float));
        return;
    }
    // Up as fp32 into the conversion buffer, then rounded, a chunk at a time.
    const size_t chunk = conversion_chunk(m_ctx.plan);
    for (size_t at = 0; at < n; at += chunk) {
        const size_t k = std::min(chunk, n - at);
        m_ctx.backend.to_device(m_ctx.f32_tmp, host + at, k * sizeof(float));
        m_ctx.backend.cast(element_at(dst, at, dt), dt, m_ctx.f32_tmp, DType::kF32, k);
    }
}

void ParameterStore::prefetch(int unit) {
    if (!m_ctx.plan.params_gathered_per_unit() || m_resident.count(unit)) return;
    const UnitShard& s = m_ctx.shard(unit);
    Resident r;
    r.gathered = m_ctx.pool.take(s.padded_numel * m_ctx.work_size());
    r.request = m_ctx.comm.start_all_gather(m_params[static_cast<size_t>(unit)], r.gathered, s.shard_numel,
                                            m_ctx.work);
    m_resident.emplace(unit, r);
}

void ParameterStore::wait_gather(int unit) {
    m_ctx.comm.wait(m_gathers[static_cast<size_t>(unit)]);
    m_ctx.comm.wait(m_tail_sums[static_cast<size_t>(unit)]);
}

const float* ParameterStore::acquire(int unit) { return acquire_view(unit, true); }

const float* ParameterStore::acquire_vectors(int unit) { return acquire_view(unit, false); }

const float* ParameterStore::acquire_view(int unit, bool whole) {
    ZT_REQUIRE(unit >= 0 && unit < m_ctx.num_units(), "unit ", unit);
    wait_gather(unit);
    const bool gathered = m_ctx.plan.params_gathered_per_unit();
    if (gathered && m_in_pass) look_ahead(unit);
    if (!gathered && m_ctx.work == DType::kF32) return static_cast<const float*>(m_params[static_cast<size_t>(unit)]);
    const UnitShard& s = m_ctx.shard(unit);
    if (gathered && !m_resident.count(unit)) prefetch(unit);
    Resident& r = m_resident[unit];
    const void* src = gathered ? r.gathered : m_params[static_cast<size_t>(unit)];
    if (r.compute != nullptr) {
        if (whole && r.vectors_only) widen_view(unit, r, src, true);
        return r.compute;
    }
    m_ctx.comm.wait(r.request);
    if (gathered) overlay_tail(unit, r.gathered);
    if (m_ctx.work == DType::kF32) {
        r.compute = static_cast<float*>(r.gathered);
    } else {
        r.compute = static_cast<float*>(m_ctx.pool.take(s.padded_numel * sizeof(float)));
        r.owns_compute = true;
        widen_view(unit, r, src, whole);
    }
    return r.compute;
}

void ParameterStore::overlay_tail(int unit, void* gathered) {
    const void* tail = m_tail_copies[static_cast<size_t>(unit)];
    if (tail == nullptr || separate_trained()) return;  // an fp32 tail goes into the view (widen_view)
    const ElementRange t = m_ctx.plan.trainable(unit);
    m_ctx.backend.cast(element_at(gathered, t.begin, m_ctx.work), m_ctx.work, tail, m_ctx.work, t.size());
}

void ParameterStore::widen_view(int unit, Resident& r, const void* src, bool whole) {
    r.vectors_only = !whole;
    const float* tail = separate_trained() ? static_cast<const float*>(m_tail_copies[static_cast<size_t>(unit)]) : nullptr;
    const ElementRange t = m_ctx.plan.trainable(unit);
    if (whole) {
        m_ctx.backend.cast(r.compute, DType::kF32, src, m_ctx.work, m_ctx.shard(unit).padded_numel);
    } else {
        for (const auto& [b, e] : m_vectors[static_cast<size_t>(unit)]) {
            if (tail != nullptr && b >= t.begin) continue;  // the fp32 tail's, below
            m_ctx.backend.cast(r.compute + b, DType::kF32, element_at(src, b, m_ctx.work), m_ctx.work, e - b);
        }
    }
    // The trained tail from its own fp32 copy: its values unrounded.
    if (tail != nullptr) m_ctx.backend.copy(r.compute + t.begin, tail, t.size());
}

ConstActPtr ParameterStore::acquired_storage(int unit) const {
    ZT_REQUIRE(unit >= 0 && unit < m_ctx.num_units(), "unit ", unit);
    if (!m_ctx.plan.params_gathered_per_unit()) return ConstActPtr(m_params[static_cast<size_t>(unit)], m_ctx.work);
    const auto it = m_resident.find(unit);
    ZT_REQUIRE(it != m_resident.end() && it->second.compute != nullptr, "acquired_storage(", unit,
               "): the unit is not acquired");
    return ConstActPtr(it->second.gathered, m_ctx.work);
}

void ParameterStore::look_ahead(int unit) {
    if (m_recording) {
        m_pass_order.push_back(unit);
        return;
    }
    if (!m_following) return;
    if (m_pass_pos >= m_pass_order.size() || m_pass_order[m_pass_pos] != unit) {
        m_following = false;  // another order than the first pass's: the model's hints only
        return;
    }
    ++m_pass_pos;
    const size_t end = std::min(m_pass_order.size(), m_pass_pos + static_cast<size_t>(m_ctx.overlap_depth));
    for (size_t i = m_pass_pos; i < end; ++i) prefetch(m_pass_order[i]);
}

void ParameterStore::begin_training_pass() {
    m_in_pass = true;
    m_recording = m_pass_order.empty();
    m_following = !m_recording;
    m_pass_pos = 0;
}

void ParameterStore::end_training_pass() {
    m_in_pass = m_recording = m_following = false;
    std::vector<int> unused;
    for (const auto& [u, r] : m_resident) {
        if (r.compute == nullptr) unused.push_back(u);
    }
    for (int u : unused) release(u);
}

void ParameterStore::release(int unit) {
    if (unit == 0 && m_hold_first_unit) return;
    auto it = m_resident.find(unit);
    if (it == m_resident.end()) return;
    Resident& r = it->second;
    const UnitShard& s = m_ctx.shard(unit);
    m_ctx.comm.wait(r.request);
    if (r.gathered != nullptr) m_ctx.pool.give(r.gathered, s.padded_numel * m_ctx.work_size());
    if (r.owns_compute) m_ctx.pool.give(r.compute, s.padded_numel * sizeof(float));
    m_resident.erase(it);
}

void ParameterStore::hold_first_unit(bool hold) {
    if (m_hold_first_unit == hold) return;
    m_hold_first_unit = hold;
    if (!hold) release(0);
}

float* ParameterStore::fp32_base(int unit) {
    ZT_REQUIRE(m_ctx.trained == DType::kF32, "fp32_base() of a ", dtype_name(m_ctx.trained), " working copy");
    float* tail = static_cast<float*>(m_tail_copies[static_cast<size_t>(unit)]);
    if (tail != nullptr) return tail - m_ctx.plan.trainable(unit).begin;
    // Beside a 16-bit base (fp32_work null), a unit without a tail has no trained element.
    return fp32_work(unit);
}

void* ParameterStore::trained_ptr(int unit, size_t element) {
    void* tail = m_tail_copies[static_cast<size_t>(unit)];
    if (tail == nullptr) return work_ptr(unit, element);
    return element_at(tail, element - m_ctx.plan.trainable(unit).begin, m_ctx.trained);
}

void ParameterStore::refresh_owned(int unit, const float* master_base) {
    // Where a master exists apart from the working copy: a frozen base's working copy is its
    // only copy (StateShards writes it there directly).
    const size_t b = m_ctx.state_begin(unit);
    const size_t e = m_ctx.state_end(unit);
    if (m_ctx.trained != DType::kF32 && e > b) {
        m_ctx.backend.cast(trained_ptr(unit, b), m_ctx.trained, master_base + b, DType::kF32, e - b);
    }
}

ActPtr ParameterStore::owned_work(int unit, size_t element) {
    if (m_ctx.trained == DType::kF32) return {};
    return {trained_ptr(unit, element), m_ctx.trained};
}

void ParameterStore::stored_to_f32(int unit, size_t from, size_t to, float* f32) {
    if (to > from) m_ctx.backend.cast(f32, DType::kF32, work_ptr(unit, from), m_ctx.work, to - from);
}

void ParameterStore::stored_from_f32(int unit, size_t from, size_t to, const float* f32) {
    if (to > from) m_ctx.backend.cast(work_ptr(unit, from), m_ctx.work, f32, DType::kF32, to - from);
}

CommRequest ParameterStore::start_tail_sum(int unit, void* tail, DType dt) {
    const ElementRange t = m_ctx.plan.trainable(unit);
    const ElementRange own = m_ctx.plan.state_range(unit, m_ctx.rank);
    const size_t w = dtype_size(dt);
    if (own.empty()) {
        m_ctx.backend.zero_bytes(tail, t.size() * w);
    } else {
        m_ctx.backend.zero_bytes(tail, (own.begin - t.begin) * w);
        m_ctx.backend.zero_bytes(element_at(tail, own.end - t.begin, dt), (t.end - own.end) * w);
    }
    return m_ctx.comm.start_all_reduce(tail, t.size(), ReduceOp::kSum, dt);
}

void ParameterStore::start_trained_gathers() {
    if (!m_ctx.plan.ownership_partitioned()) return;  // DDP: each rank updates all
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        void* tail = m_tail_copies[static_cast<size_t>(u)];
        if (tail == nullptr) continue;
        m_ctx.comm.wait(m_tail_sums[static_cast<size_t>(u)]);
        m_tail_sums[static_cast<size_t>(u)] = start_tail_sum(u, tail, m_ctx.trained);
    }
}

void ParameterStore::start_gathers(bool after_step) {
    start_trained_gathers();
    if (!m_ctx.plan.params_gathered_after_step() || (after_step && separate_trained())) return;
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        // A step changes no element of a wholly frozen unit (LoRA's embedding and head), and
        // only the trained tail of a partly frozen one: its state owners' parts, which are not
        // the shards (ShardPlan::state_range), summed over the group with the rest zeroed.
        const ElementRange t = m_ctx.plan.trainable(u);
        if (after_step && t.empty()) continue;
        CommRequest& gather = m_gathers[static_cast<size_t>(u)];
        m_ctx.comm.wait(gather);
        if (m_ctx.plan.partly_frozen(u) && !t.empty() && !separate_trained()) {
            gather = start_tail_sum(u, work_ptr(u, t.begin), m_ctx.work);
            if (after_step) continue;
            // After a load the state owners wrote the tail: summed first, every shard is whole.
            m_ctx.comm.wait(gather);
        }
        gather = m_ctx.comm.start_all_gather(nullptr, m_params[static_cast<size_t>(u)], m_ctx.shard(u).shard_numel,
                                             m_ctx.work);
    }
}

void ParameterStore::wait_gathers() {
    for (int u = 0; u < m_ctx.num_units(); ++u) wait_gather(u);
}

size_t ParameterStore::planned_scratch(const ShardPlan& plan, DType work, int overlap_depth) {
    // Per the model's unit protocol (model/transformer.cpp): unit 0 is held from the LM head through
    // backward; other units are used one at a time, overlap_depth more gathered ahead at stage 3.
    const int U = plan.num_units();
    const size_t w = dtype_size(work);
    auto padded = [&](int u) { return plan.shard(u).padded_numel; };
    size_t planned = 0;
    if (plan.params_gathered_per_unit()) {  // gathered units: current + those ahead
        const size_t live = 1 + static_cast<size_t>(overlap_depth);
        planned += padded(0) * w + pooled_peak(1, U, live, [&](int u) { return padded(u) * w; });
    }
    if (work != DType::kF32) {  // fp32 views of acquired units
        planned += padded(0) * sizeof(float) + pooled_peak(1, U, 1, [&](int u) { return padded(u) * sizeof(float); });
    }
    return planned;
}

}  // namespace zt
