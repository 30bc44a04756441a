// Per-rank model state for DDP and ZeRO-1/2/3 in fp32, bf16 or fp16 (see model_state.hpp).
//
// Every buffer here is backend memory. Conversions between dtypes, the accumulation of
// gradients and zeroing are backend ops (cast, accumulate, zero_bytes); host memory is
// reached only through to_device / to_host (initial values, checkpoints, test hooks).
//
// Element indices below are unit-relative: element e of unit u is e in [0, numel). A rank
// "owns" [owned_begin, owned_end): the whole unit under DDP (every rank applies the full
// update), its live shard slice under ZeRO-1/2/3. Buffers that hold only the shard are
// addressed through a base pointer shifted by the shard start, so base[e] is element e.
#include "ztrain/parallel/model_state.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {
char* at(void* base, size_t element, DType t) { return static_cast<char*>(base) + element * dtype_size(t); }
}  // namespace

ModelState::ModelState(const ModelLayout& layout, Backend& backend, uint64_t seed)
    : ModelState(layout, backend, self_communicator(), 0, SIZE_MAX, seed) {}

ModelState::ModelState(const ModelLayout& layout, Backend& backend, Communicator& comm, int zero_stage,
                       size_t bucket_numel, uint64_t seed, DType work, DType reduce)
    : m_layout(layout),
      m_backend(backend),
      m_comm(comm),
      m_stage(zero_stage),
      m_rank(comm.rank()),
      m_work(work),
      m_reduce(reduce),
      m_plan(layout.unit_numel, comm.size(), zero_stage),
      m_shards(m_plan.shards()) {
    ZT_REQUIRE(zero_stage >= 0 && zero_stage <= 3, "zero stage ", zero_stage);
    // What the backend trains in is its answer (the trainer refuses other configs earlier).
    const BackendCapabilities caps = backend.capabilities();
    ZT_REQUIRE(caps.supports(work) && caps.supports(reduce), "backend ", backend.name(), " supports precision ",
               caps.work_dtypes(), " only; got ", dtype_name(work), "/", dtype_name(reduce));
    // Every persistent buffer is counted under its kind as it is allocated (the memory record).
    auto alloc_bytes = [&](size_t bytes, size_t& kind) {
        void* p = backend.alloc_bytes(bytes);
        m_allocations.push_back(p);
        kind += bytes;
        return p;
    };
    auto alloc_f32 = [&](size_t n, size_t& kind) {
        return static_cast<float*>(alloc_bytes(n * sizeof(float), kind));
    };
    const int U = layout.num_units();
    size_t max_padded = 0;
    size_t max_shard = 0;
    for (const UnitShard& s : m_shards) {
        max_padded = std::max(max_padded, s.padded_numel);
        max_shard = std::max(max_shard, s.shard_numel);
    }
    // Conversion and reduction buffers only where the precision/stage needs them (fp32 DDP
    // needs none): each holds the largest unit, 157 MB for GPT-2's embedding.
    if (needs_f32_tmp()) m_f32_tmp = alloc_f32(max_padded, m_allocated.scratch);
    if (needs_reduce_tmp()) m_reduce_tmp = alloc_bytes(max_padded * dtype_size(reduce), m_allocated.scratch);
    if (m_stage >= 1) m_shard_tmp = alloc_bytes(max_shard * dtype_size(reduce), m_allocated.scratch);

    if (m_stage <= 1) {
        // One arena, units in backward order, so a DDP bucket is one contiguous span.
        m_buckets = make_grad_buckets(m_shards, bucket_numel);
        size_t total = 0;
        for (const UnitShard& s : m_shards) total += s.padded_numel;
        m_grad_arena = alloc_bytes(total * esize(), m_allocated.grads);
        m_grads.assign(static_cast<size_t>(U), nullptr);
        size_t off = 0;
        for (int u = U - 1; u >= 0; --u) {
            m_grads[static_cast<size_t>(u)] = at(m_grad_arena, off, m_work);
            off += m_shards[static_cast<size_t>(u)].padded_numel;
        }
    }
    // Initial values are computed on the host (fp32) a piece at a time, so the host holds
    // 4 MiB of them at once, not a whole unit (157 MB for GPT-2's embedding, on top of the
    // peak). Each piece crosses to the backend into the fp32 parameters, or into the fp32
    // master and, through the conversion buffer, cast into the 16-bit working copy.
    constexpr size_t kInitPieceNumel = size_t{1} << 20;
    std::vector<float> piece(kInitPieceNumel);
    for (int u = 0; u < U; ++u) {
        const UnitShard& s = m_shards[static_cast<size_t>(u)];
        const size_t b = m_stage == 0 ? 0 : s.begin(m_rank);
        const size_t state_n = m_stage == 0 ? s.padded_numel : s.shard_numel;
        // What this rank's parameters hold: the whole unit (stages 0-2) or its shard (3).
        const size_t param_begin = m_stage <= 2 ? 0 : s.begin(m_rank);
        const size_t param_n = m_stage <= 2 ? s.padded_numel : s.shard_numel;
        void* p = alloc_bytes(param_n * esize(), m_allocated.params);
        m_params.push_back(p);
        float* master = nullptr;
        if (m_work != DType::kF32) {
            master = alloc_f32(state_n, m_allocated.master);
            m_master.push_back(master);
        }
        // [from, to) = [lo, hi) intersected with [dst_begin, dst_begin + dst_n); false if empty.
        auto overlap = [](size_t lo, size_t hi, size_t dst_begin, size_t dst_n, size_t* from, size_t* to) {
            *from = std::max(lo, dst_begin);
            *to = std::min(hi, dst_begin + dst_n);
            return *to > *from;
        };
        for (size_t lo = 0; lo < s.padded_numel; lo += kInitPieceNumel) {
            const size_t hi = std::min(s.padded_numel, lo + kInitPieceNumel);
            // Padding past the unit's numel is zero.
            std::fill(piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(hi - lo), 0.f);
            if (lo < s.numel) init_unit_range(layout, u, seed, lo, std::min(hi, s.numel), piece.data());
            size_t from = 0;
            size_t to = 0;
            if (overlap(lo, hi, param_begin, param_n, &from, &to)) {
                if (m_work == DType::kF32) {
                    backend.to_device(static_cast<float*>(p) + (from - param_begin), piece.data() + (from - lo),
                                      (to - from) * sizeof(float));
                } else {
                    backend.to_device(m_f32_tmp, piece.data() + (from - lo), (to - from) * sizeof(float));
                    backend.cast(at(p, from - param_begin, m_work), m_work, m_f32_tmp, DType::kF32, to - from);
                }
            }
            if (master != nullptr && overlap(lo, hi, b, state_n, &from, &to)) {
                backend.to_device(master + (from - b), piece.data() + (from - lo), (to - from) * sizeof(float));
            }
        }
        if (m_stage >= 2) m_grads.push_back(alloc_bytes(s.shard_numel * esize(), m_allocated.grads));
        m_adam_m.push_back(alloc_f32(state_n, m_allocated.optimizer));
        m_adam_v.push_back(alloc_f32(state_n, m_allocated.optimizer));
        m_segments.push_back(decay_segments(layout, u, owned_begin(u), owned_end(u)));
    }
}

ModelState::~ModelState() {
    for (auto& [u, r] : m_resident) m_comm.wait(r.request);
    for (auto& req : m_bucket_requests) m_comm.wait(req);
    for (auto& [u, r] : m_resident) {
        if (r.gathered != nullptr) m_backend.free(r.gathered);
        if (r.owns_compute) m_backend.free(r.compute);
    }
    for (auto& [u, p] : m_grad_scratch) m_backend.free(p);
    for (auto& [n, p] : m_pool) m_backend.free(p);
    for (void* p : m_allocations) m_backend.free(p);
}

// ---------------------------------------------------------------------------
// Scratch pool: gathered units, fp32 views and gradient scratch come and go once per unit
// per micro-step; reusing them avoids page-faulting fresh memory every time.
// ---------------------------------------------------------------------------
void* ModelState::pool_take(size_t bytes) {
    auto it = m_pool.find(bytes);
    if (it != m_pool.end()) {
        void* p = it->second;
        m_pool.erase(it);
        return p;
    }
    m_dynamic_held += bytes;
    return m_backend.alloc_bytes(bytes);
}

void ModelState::pool_give(void* p, size_t bytes) { m_pool.emplace(bytes, p); }

size_t ModelState::owned_begin(int unit) const { return m_plan.owned_range(unit, m_rank).begin; }

size_t ModelState::owned_end(int unit) const { return m_plan.owned_range(unit, m_rank).end; }

void* ModelState::work_ptr(int unit, size_t element) {
    const size_t shift = m_stage == 3 ? m_shards[static_cast<size_t>(unit)].begin(m_rank) : 0;
    return at(m_params[static_cast<size_t>(unit)], element - shift, m_work);
}

void* ModelState::grad_ptr(int unit, size_t element) {
    const size_t shift = m_stage >= 2 ? m_shards[static_cast<size_t>(unit)].begin(m_rank) : 0;
    return at(m_grads[static_cast<size_t>(unit)], element - shift, m_work);
}

float* ModelState::master_base(int unit) {
    if (m_work == DType::kF32) return static_cast<float*>(work_ptr(unit, 0));
    float* m = m_master[static_cast<size_t>(unit)];
    return m_stage == 0 ? m : m - m_shards[static_cast<size_t>(unit)].begin(m_rank);
}

float* ModelState::adam_m_base(int unit) {
    const size_t i = static_cast<size_t>(unit);
    return m_adam_m[i] - (m_stage == 0 ? 0 : m_shards[i].begin(m_rank));
}

float* ModelState::adam_v_base(int unit) {
    const size_t i = static_cast<size_t>(unit);
    return m_adam_v[i] - (m_stage == 0 ? 0 : m_shards[i].begin(m_rank));
}

const float* ModelState::owned_grads_f32(int unit) {
    if (m_work == DType::kF32) return static_cast<const float*>(grad_ptr(unit, 0));
    const size_t b = owned_begin(unit);
    const size_t e = owned_end(unit);
    if (e > b) m_backend.cast(m_f32_tmp, DType::kF32, grad_ptr(unit, b), m_work, e - b);
    return m_f32_tmp - b;
}

// ---------------------------------------------------------------------------
// UnitStore
// ---------------------------------------------------------------------------
void ModelState::prefetch(int unit) {
    if (m_stage < 3 || m_resident.count(unit)) return;
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    Resident r;
    r.gathered = pool_take(s.padded_numel * esize());
    r.request = m_comm.start_all_gather(m_params[static_cast<size_t>(unit)], r.gathered, s.shard_numel, m_work);
    m_resident.emplace(unit, r);
}

const float* ModelState::acquire(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_layout.num_units(), "unit ", unit);
    if (m_stage < 3 && m_work == DType::kF32) return static_cast<const float*>(m_params[static_cast<size_t>(unit)]);
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    if (m_stage == 3 && !m_resident.count(unit)) prefetch(unit);
    Resident& r = m_resident[unit];
    if (r.compute != nullptr) return r.compute;
    m_comm.wait(r.request);
    const void* src = m_stage == 3 ? r.gathered : m_params[static_cast<size_t>(unit)];
    if (m_work == DType::kF32) {
        r.compute = static_cast<float*>(r.gathered);
    } else {
        r.compute = static_cast<float*>(pool_take(s.padded_numel * sizeof(float)));
        r.owns_compute = true;
        m_backend.cast(r.compute, DType::kF32, src, m_work, s.padded_numel);
    }
    return r.compute;
}

void ModelState::release(int unit) {
    auto it = m_resident.find(unit);
    if (it == m_resident.end()) return;
    Resident& r = it->second;
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    m_comm.wait(r.request);
    if (r.gathered != nullptr) pool_give(r.gathered, s.padded_numel * esize());
    if (r.owns_compute) pool_give(r.compute, s.padded_numel * sizeof(float));
    m_resident.erase(it);
}

float* ModelState::grads(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_layout.num_units(), "unit ", unit);
    // fp32 with full gradient buffers: backward accumulates straight into them.
    if (m_stage <= 1 && m_work == DType::kF32) return static_cast<float*>(m_grads[static_cast<size_t>(unit)]);
    auto it = m_grad_scratch.find(unit);
    if (it != m_grad_scratch.end()) return it->second;
    const size_t n = m_shards[static_cast<size_t>(unit)].padded_numel;
    float* buf = static_cast<float*>(pool_take(n * sizeof(float)));
    m_backend.zero(buf, n);
    m_grad_scratch[unit] = buf;
    return buf;
}

bool ModelState::grads_need_zero(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_layout.num_units(), "unit ", unit);
    if (!lazy_zero() || m_zero_pending.empty()) return false;
    const bool pending = m_zero_pending[static_cast<size_t>(unit)] != 0;
    m_zero_pending[static_cast<size_t>(unit)] = 0;
    return pending;
}

void ModelState::grads_done(int unit) {
    if (m_stage >= 2) {
        reduce_unit_grads(unit);
        return;
    }
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    auto it = m_grad_scratch.find(unit);
    if (it != m_grad_scratch.end()) {
        // 16-bit: this micro-step's fp32 gradient is added into the stored (rounded) one.
        m_backend.accumulate(m_grads[static_cast<size_t>(unit)], m_work, it->second, s.padded_numel);
        pool_give(it->second, s.padded_numel * sizeof(float));
        m_grad_scratch.erase(it);
    }
    if (!m_last_micro) return;  // stages 0, 1: accumulate locally, communicate once per step
    if (m_stage == 1) {
        reduce_unit_grads(unit);
        return;
    }
    for (const GradBucket& b : m_buckets) {
        if (b.last_unit == unit) start_bucket(b);
    }
}

void ModelState::start_bucket(const GradBucket& b) {
    void* span = at(m_grad_arena, b.offset, m_work);
    if (m_reduce == m_work) {
        m_bucket_requests.push_back(m_comm.start_all_reduce(span, b.numel, ReduceOp::kSum, m_work));
        return;
    }
    // A different wire dtype: convert, reduce, convert back, a unit at a time (the scratch
    // buffers hold one unit).
    size_t off = 0;
    for (int u = b.first_unit; u >= b.last_unit; --u) {
        const size_t n = m_shards[static_cast<size_t>(u)].padded_numel;
        void* p = at(span, off, m_work);
        m_backend.cast(m_reduce_tmp, m_reduce, p, m_work, n);
        m_comm.all_reduce(m_reduce_tmp, n, ReduceOp::kSum, m_reduce);
        m_backend.cast(p, m_work, m_reduce_tmp, m_reduce, n);
        off += n;
    }
}

void ModelState::reduce_unit_grads(int unit) {
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    const size_t i = static_cast<size_t>(unit);
    const size_t b = s.begin(m_rank);
    if (m_stage == 1) {
        // Own slice of the full buffer receives the reduced values; the rest is stale.
        const void* src = m_grads[i];
        if (m_reduce != m_work) {
            m_backend.cast(m_reduce_tmp, m_reduce, src, m_work, s.padded_numel);
            src = m_reduce_tmp;
        }
        m_comm.reduce_scatter(src, m_shard_tmp, s.shard_numel, ReduceOp::kSum, m_reduce);
        m_backend.cast(at(m_grads[i], b, m_work), m_work, m_shard_tmp, m_reduce, s.shard_numel);
        return;
    }
    auto it = m_grad_scratch.find(unit);
    ZT_REQUIRE(it != m_grad_scratch.end(), "grads_done(", unit, ") without grads(", unit, ")");
    const float* full = it->second;
    const void* src = full;
    if (m_reduce != DType::kF32) {
        m_backend.cast(m_reduce_tmp, m_reduce, full, DType::kF32, s.padded_numel);
        src = m_reduce_tmp;
    }
    if (m_first_micro && m_reduce == m_work) {
        m_comm.reduce_scatter(src, m_grads[i], s.shard_numel, ReduceOp::kSum, m_reduce);
    } else {
        m_comm.reduce_scatter(src, m_shard_tmp, s.shard_numel, ReduceOp::kSum, m_reduce);
        if (m_first_micro) {
            m_backend.cast(m_grads[i], m_work, m_shard_tmp, m_reduce, s.shard_numel);
        } else if (m_reduce == DType::kF32 && m_work == DType::kF32) {
            float* g = static_cast<float*>(m_grads[i]);
            m_backend.residual_forward(g, g, static_cast<const float*>(m_shard_tmp), s.shard_numel);
        } else {
            // The full-size fp32 scratch is free again (the reduce-scatter consumed it).
            float* sum = static_cast<float*>(it->second);
            m_backend.cast(sum, DType::kF32, m_shard_tmp, m_reduce, s.shard_numel);
            m_backend.accumulate(m_grads[i], m_work, sum, s.shard_numel);
        }
    }
    pool_give(it->second, s.padded_numel * sizeof(float));
    m_grad_scratch.erase(it);
}

// ---------------------------------------------------------------------------
// The trainer's face
// ---------------------------------------------------------------------------
void ModelState::zero_grads() {
    if (lazy_zero()) {
        // The model zeroes each gradient tensor right before its first accumulation (see
        // grads_need_zero). What it never writes (alignment gaps, shard padding) is zero from
        // allocation and stays so: no op writes there, and reductions add zeros.
        m_zero_pending.assign(static_cast<size_t>(m_layout.num_units()), 1);
        return;
    }
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const UnitShard& s = m_shards[static_cast<size_t>(u)];
        const size_t n = m_stage <= 1 ? s.padded_numel : s.shard_numel;
        m_backend.zero_bytes(m_grads[static_cast<size_t>(u)], n * esize());
    }
}

void ModelState::begin_micro_step(bool first, bool last) {
    m_first_micro = first;
    m_last_micro = last;
}

void ModelState::finish_grad_sync() {
    for (CommRequest& r : m_bucket_requests) m_comm.wait(r);
    m_bucket_requests.clear();
}

double ModelState::local_grad_sum_squares() {
    // All segments in one backend call (one parallel region on the CPU). A 16-bit unit's fp32
    // view lives in a scratch buffer reused per unit, so there the call is per unit; the
    // result is the same sum either way (segments are added in order).
    double s = 0.0;
    std::vector<const float*> xs;
    std::vector<size_t> ns;
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const float* g = owned_grads_f32(u);
        for (const DecaySegment& seg : m_segments[static_cast<size_t>(u)]) {
            xs.push_back(g + seg.begin);
            ns.push_back(seg.end - seg.begin);
        }
        if (m_work != DType::kF32 || u + 1 == m_layout.num_units()) {
            s += m_backend.sum_squares_spans(xs.data(), ns.data(), xs.size());
            xs.clear();
            ns.clear();
        }
    }
    return s;
}

double ModelState::grad_sum_squares() {
    double s = local_grad_sum_squares();
    // DDP: every rank holds the same full gradient, the local sum is already global.
    if (m_stage >= 1) m_comm.all_reduce_scalars(&s, 1);
    return s;
}

double ModelState::grad_sum_squares_if_finite() {
    // A double sum of squared floats is finite exactly when every element is (a finite float
    // squared is below 1.2e77, far from overflowing a double), so the overflow check needs
    // no pass of its own.
    double s = local_grad_sum_squares();
    double bad = std::isfinite(s) ? 0.0 : 1.0;
    m_comm.all_reduce_scalars(&bad, 1, ReduceOp::kMax);
    if (bad != 0.0) return std::numeric_limits<double>::quiet_NaN();
    if (m_stage >= 1) m_comm.all_reduce_scalars(&s, 1);
    return s;
}

void ModelState::optimizer_step(const AdamWStep& step) {
    // All segments in one backend call where the gradients stay put (fp32); per unit where
    // a unit's fp32 gradient view is a reused scratch buffer (16-bit).
    std::vector<AdamWSpan> spans;
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const size_t i = static_cast<size_t>(u);
        const size_t state_shift = m_stage == 0 ? 0 : m_shards[i].begin(m_rank);
        float* p = master_base(u);
        const float* g = owned_grads_f32(u);
        float* m = m_adam_m[i] - state_shift;
        float* v = m_adam_v[i] - state_shift;
        for (const DecaySegment& seg : m_segments[i]) {
            spans.push_back({p + seg.begin, m + seg.begin, v + seg.begin, g + seg.begin, seg.end - seg.begin,
                             seg.decay});
        }
        if (m_work != DType::kF32 || u + 1 == m_layout.num_units()) {
            m_backend.adamw_update_spans(spans.data(), spans.size(), step);
            spans.clear();
        }
    }
    sync_working_from_master();
}

void ModelState::sync_working_from_master() {
    for (int u = 0; u < m_layout.num_units(); ++u) {
        // 16-bit: the working copy of the owned elements is the rounded master. (In fp32 the
        // working copy is the master.)
        const size_t b = owned_begin(u);
        const size_t e = owned_end(u);
        if (m_work != DType::kF32 && e > b) m_backend.cast(work_ptr(u, b), m_work, master_base(u) + b, DType::kF32, e - b);
    }
    if (m_stage == 1 || m_stage == 2) {
        for (int u = 0; u < m_layout.num_units(); ++u) {
            m_comm.all_gather(nullptr, m_params[static_cast<size_t>(u)], m_shards[static_cast<size_t>(u)].shard_numel,
                              m_work);
        }
    }
}

// ---------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------
StateBytes ModelState::bytes() const {
    StateBytes b = m_allocated;
    b.scratch += dynamic_scratch_planned();
    return b;
}

size_t ModelState::dynamic_scratch_planned() const {
    // The pool reuses a buffer only for the same byte size, so it ends up holding, per size,
    // as many buffers as were ever live at once. Following the model's unit protocol
    // (model_state.hpp: unit 0 is held from the LM head through backward; other units are
    // used one at a time, with the next one prefetched at stage 3), per buffer kind that is
    // unit 0 once plus every distinct size among the other units once (twice for gathered
    // units: current + prefetched).
    const size_t s0 = m_shards.front().padded_numel;
    std::set<size_t> other_sizes;
    for (size_t u = 1; u < m_shards.size(); ++u) other_sizes.insert(m_shards[u].padded_numel);
    size_t d = 0;
    for (size_t n : other_sizes) d += n;
    const size_t w = dtype_size(m_work);
    const size_t f = sizeof(float);
    const bool sixteen_bit = m_work != DType::kF32;
    size_t planned = 0;
    if (m_stage >= 2 || sixteen_bit) planned += (s0 + d) * f;  // fp32 gradient scratch
    if (m_stage == 3) planned += (s0 + 2 * d) * w;             // gathered units
    if (sixteen_bit) planned += (s0 + d) * f;                  // fp32 views of acquired units
    return planned;
}

float* ModelState::unit_params(int unit) {
    ZT_REQUIRE(m_stage <= 2 && m_work == DType::kF32,
               "unit_params() needs replicated fp32 parameters (stage <= 2, fp32); stage is ", m_stage);
    return static_cast<float*>(m_params.at(static_cast<size_t>(unit)));
}

void ModelState::gather_unit_params(int unit, float* out) {
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    const float* master = master_base(unit);
    if (m_stage == 0 || (m_work == DType::kF32 && m_stage <= 2)) {
        m_backend.to_host(out, master, s.numel * sizeof(float));
        return;
    }
    // The master lives in shards: gather them (every rank calls this) into backend scratch,
    // which is what the state's communicator reads and writes, then copy out.
    void* full = pool_take(s.padded_numel * sizeof(float));
    m_comm.all_gather(master + s.begin(m_rank), full, s.shard_numel);
    m_backend.to_host(out, full, s.numel * sizeof(float));
    pool_give(full, s.padded_numel * sizeof(float));
}

void ModelState::copy_to_host(float* host, const float* src, size_t n) {
    m_backend.to_host(host, src, n * sizeof(float));
}

void ModelState::copy_from_host(float* dst, const float* host, size_t n) {
    m_backend.to_device(dst, host, n * sizeof(float));
}

std::vector<float> ModelState::owned_optimizer_state() {
    std::vector<float> out;
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const size_t i = static_cast<size_t>(u);
        const size_t b = owned_begin(u);
        const size_t e = owned_end(u);
        const size_t shift = m_stage == 0 ? 0 : m_shards[i].begin(m_rank);
        const float* p = master_base(u);
        // Through the backend: the buffers may be device memory.
        auto append = [&](const float* src) {
            const size_t at_end = out.size();
            out.resize(at_end + (e - b));
            copy_to_host(out.data() + at_end, src, e - b);
        };
        append(p + b);
        append(m_adam_m[i] + (b - shift));
        append(m_adam_v[i] + (b - shift));
    }
    return out;
}

void ModelState::poison_owned_grad() {
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const size_t b = owned_begin(u);
        if (owned_end(u) <= b) continue;
        const float inf = std::numeric_limits<float>::infinity();
        if (m_work == DType::kF32) {
            m_backend.to_device(grad_ptr(u, b), &inf, sizeof(float));
        } else {
            // Up as fp32 into the conversion buffer (16-bit runs have one), then cast.
            m_backend.to_device(m_f32_tmp, &inf, sizeof(float));
            m_backend.cast(grad_ptr(u, b), m_work, m_f32_tmp, DType::kF32, 1);
        }
        return;
    }
}

}  // namespace zt
