// GradientReducer (see gradient_reducer.hpp). Element indices are unit-relative; a shard
// buffer (stages 2-3) is addressed through grad_ptr, which shifts by the shard start.
#include "ztrain/parallel/gradient_reducer.hpp"

#include <algorithm>
#include <exception>
#include <limits>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {
/// The elements of [begin, end) of `unit` that no trained tensor covers: what no backward
/// op writes.
std::vector<ElementRange> unwritten_ranges(const ModelLayout& layout, int unit, size_t begin, size_t end) {
    std::vector<ElementRange> trained;
    for (const ParamSpec& p : layout.params) {
        if (p.unit == unit && p.trainable) trained.push_back(ElementRange{p.offset, p.offset + p.numel});
    }
    std::sort(trained.begin(), trained.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
    std::vector<ElementRange> gaps;
    size_t at = begin;
    for (const ElementRange& r : trained) {
        if (r.begin >= end) break;
        if (r.begin > at) gaps.push_back(ElementRange{at, r.begin});
        at = std::max(at, r.end);
    }
    if (at < end) gaps.push_back(ElementRange{at, end});
    return gaps;
}
}  // namespace

GradientReducer::GradientReducer(const StateContext& ctx, size_t bucket_numel, size_t* grads_bytes) : m_ctx(ctx) {
    const int U = ctx.num_units();
    const size_t w = ctx.grads_size();
    m_zero_pending.assign(static_cast<size_t>(U), 0);
    for (int u = 0; u < U; ++u) {
        const size_t b = ctx.plan.grad_extent_start(u);
        m_scratch_gaps.push_back(unwritten_ranges(ctx.layout, u, b, b + ctx.plan.grad_extent(u)));
    }
    if (!ctx.plan.policy().grads_sharded) {
        // One arena, units in backward order, so a DDP bucket is one contiguous span.
        std::vector<size_t> extents;
        for (int u = 0; u < U; ++u) extents.push_back(ctx.plan.grad_extent(u));
        // A host all-reduce of the arena's own dtype copies its message: large units go in
        // bucket-sized pieces (a device communicator copies nothing; another wire dtype
        // converts whole units into pooled copies).
        const bool split = ctx.reduce == ctx.grads && !ctx.backend.capabilities().device_memory;
        m_buckets = make_grad_buckets(extents, bucket_numel, split);
        size_t total = 0;
        for (int u = 0; u < U; ++u) total += ctx.plan.stored_grads(u, ctx.rank);
        m_arena = ctx.backend.alloc_bytes(total * w);
        *grads_bytes += total * w;
        m_grads.assign(static_cast<size_t>(U), nullptr);
        m_unwritten.assign(static_cast<size_t>(U), 0);  // zero from allocation
        size_t off = 0;
        for (int u = U - 1; u >= 0; --u) {
            m_grads[static_cast<size_t>(u)] = element_at(m_arena, off, ctx.grads);
            off += extents[static_cast<size_t>(u)];
        }
    } else {
        for (int u = 0; u < U; ++u) {
            const size_t n = ctx.plan.stored_grads(u, ctx.rank);
            m_grads.push_back(ctx.backend.alloc_bytes(n * w));
            *grads_bytes += n * w;
        }
    }
}

GradientReducer::~GradientReducer() {
    // While an error unwinds, the job is about to be aborted (ztrain_main), and waiting could
    // block on ranks that never join; otherwise finish what was started.
    if (std::uncaught_exceptions() == 0) {
        for (InFlight& f : m_in_flight) {
            (f.kind == InFlight::kReplicaAllReduce ? m_ctx.replica : m_ctx.comm).wait(f.request);
        }
    }
    if (m_arena != nullptr) {
        m_ctx.backend.free(m_arena);
    } else {
        for (void* p : m_grads) m_ctx.backend.free(p);
    }
}

void* GradientReducer::grad_ptr(int unit, size_t element) {
    const size_t start = m_ctx.plan.grads_start(unit, m_ctx.rank);
    return element_at(m_grads[static_cast<size_t>(unit)], element - start, m_ctx.grads);
}

// ---------------------------------------------------------------------------
// The model's face
// ---------------------------------------------------------------------------
float* GradientReducer::grads(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_ctx.num_units(), "unit ", unit);
    // fp32 with full gradient buffers: backward accumulates straight into them.
    if (!m_ctx.plan.policy().grads_sharded && m_ctx.grads == DType::kF32) return static_cast<float*>(grad_ptr(unit, 0));
    // A partly frozen unit's buffers hold its trained tail: base[e] is element e there.
    const size_t shift = m_ctx.plan.grad_extent_start(unit);
    auto it = m_scratch.find(unit);
    if (it != m_scratch.end()) return it->second - shift;
    // The unit's reduction from the previous micro-step may still be in flight (it was left
    // to run through this micro-step's forward): its result must land in the shard before
    // this one's, and its scratch is given back for this one to take.
    complete_through(unit);
    const size_t n = m_ctx.plan.grad_extent(unit);
    float* buf = static_cast<float*>(m_ctx.pool.take(n * sizeof(float)));
    // Only what no op writes is zeroed here; the model zeroes (or assigns) each trained
    // tensor as it first writes it (grads_need_zero).
    for (const ElementRange& g : m_scratch_gaps[static_cast<size_t>(unit)]) {
        m_ctx.backend.zero(buf + (g.begin - shift), g.size());
    }
    m_zero_pending[static_cast<size_t>(unit)] = 1;
    m_scratch[unit] = buf;
    return buf - shift;
}

bool GradientReducer::grads_need_zero(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_ctx.num_units(), "unit ", unit);
    const bool pending = m_zero_pending[static_cast<size_t>(unit)] != 0;
    m_zero_pending[static_cast<size_t>(unit)] = 0;
    return pending;
}

void GradientReducer::grads_done(int unit) {
    // Reductions the communication thread has finished are completed now rather than when
    // the in-flight bound forces it: a finished reduce-scatter of the last micro-step starts
    // its unit's all-reduce across the groups (the network, in hybrid runs) at once.
    complete_finished();
    if (m_ctx.plan.grads_reduced_per_micro_step()) {
        // Unit 0's scratch stays for the next micro-step's backward to add into (see
        // reduced_once_per_step); every other unit is reduced now.
        if (!m_last_micro && reduced_once_per_step(unit)) return;
        start_unit_reduction(unit);
        return;
    }
    auto it = m_scratch.find(unit);
    if (it != m_scratch.end()) {
        // 16-bit: this micro-step's fp32 gradient is added into the stored (rounded) one, or,
        // the first this step, rounded into it (what zero() left unwritten).
        const size_t n = m_ctx.plan.grad_extent(unit);
        char& unwritten = m_unwritten[static_cast<size_t>(unit)];
        if (unwritten != 0) {
            m_ctx.backend.cast(m_grads[static_cast<size_t>(unit)], m_ctx.grads, it->second, DType::kF32, n);
            unwritten = 0;
        } else {
            m_ctx.backend.accumulate(m_grads[static_cast<size_t>(unit)], m_ctx.grads, it->second, n);
        }
        m_ctx.pool.give(it->second, n * sizeof(float));
        m_scratch.erase(it);
    }
    if (!m_last_micro) return;  // full gradients: accumulate locally, communicate once per step
    if (!m_ctx.plan.grads_all_reduced()) {
        start_unit_reduction(unit);
        return;
    }
    for (const GradBucket& b : m_buckets) {
        if (b.last_unit == unit) start_bucket(b);
    }
}

// ---------------------------------------------------------------------------
// Reductions in flight
// ---------------------------------------------------------------------------
void GradientReducer::make_room(const size_t& held) {
    while (held >= m_ctx.reductions_in_flight()) {
        complete(m_in_flight.front());
        m_in_flight.pop_front();
    }
}

void GradientReducer::start(InFlight f) {
    if (f.pooled()) ++m_pooled_in_flight;
    if (f.kind == InFlight::kBucket) ++m_buckets_in_flight;
    m_in_flight.push_back(f);
}

void GradientReducer::start_bucket(const GradBucket& b) {
    void* span = element_at(m_arena, b.offset, m_ctx.grads);
    if (m_ctx.reduce == m_ctx.grads) {
        // Open MPI's non-blocking all-reduce works on a temporary copy of its buffer: on the
        // host, every bucket in flight at once would copy the whole arena. A device
        // communicator copies nothing.
        if (!m_ctx.backend.capabilities().device_memory) make_room(m_buckets_in_flight);
        InFlight f(InFlight::kBucket);
        f.request = m_ctx.comm.start_all_reduce(span, b.numel, ReduceOp::kSum, m_ctx.grads);
        start(f);
        return;
    }
    // Another wire dtype: each unit of the bucket is converted into a pooled copy, reduced,
    // and converted back when completed (a unit at a time: the messages keep their sizes).
    size_t off = 0;
    for (int u = b.first_unit; u >= b.last_unit; --u) {
        const size_t n = m_ctx.plan.grad_extent(u);
        make_room(m_pooled_in_flight);  // before taking its buffers, so at most reductions_in_flight() are held
        InFlight f(InFlight::kUnitAllReduce);
        f.unit = u;
        f.send_bytes = n * dtype_size(m_ctx.reduce);
        f.send = m_ctx.pool.take(f.send_bytes);
        m_ctx.backend.cast(f.send, m_ctx.reduce, element_at(span, off, m_ctx.grads), m_ctx.grads, n);
        f.request = m_ctx.comm.start_all_reduce(f.send, n, ReduceOp::kSum, m_ctx.reduce);
        start(f);
        off += n;
    }
}

void GradientReducer::start_unit_reduction(int unit) {
    if (m_ctx.plan.partly_frozen(unit)) {
        start_trained_part_reduction(unit);
        return;
    }
    const UnitShard& s = m_ctx.shard(unit);
    const size_t i = static_cast<size_t>(unit);
    const size_t rsize = dtype_size(m_ctx.reduce);
    make_room(m_pooled_in_flight);  // before taking its buffers, so at most reductions_in_flight() are held
    InFlight f(InFlight::kReduceScatter);
    f.unit = unit;
    f.first = m_first_micro || reduced_once_per_step(unit);
    f.last = m_last_micro;
    const void* src = nullptr;
    void* out = nullptr;
    if (!m_ctx.plan.policy().grads_sharded) {
        // The own slice of the full buffer receives the result when completed.
        src = m_grads[i];
        if (m_ctx.reduce != m_ctx.grads) {
            f.send_bytes = s.padded_numel * rsize;
            f.send = m_ctx.pool.take(f.send_bytes);
            m_ctx.backend.cast(f.send, m_ctx.reduce, m_grads[i], m_ctx.grads, s.padded_numel);
            src = f.send;
        }
    } else {
        auto it = m_scratch.find(unit);
        ZT_REQUIRE(it != m_scratch.end(), "grads_done(", unit, ") without grads(", unit, ")");
        // The full-size fp32 scratch stays held until completion: it is the input (fp32 wire)
        // and afterwards the fp32 buffer a non-first micro-step's sum is widened into.
        f.scratch = it->second;
        f.scratch_bytes = s.padded_numel * sizeof(float);
        m_scratch.erase(it);
        src = f.scratch;
        if (m_ctx.reduce != DType::kF32) {
            f.send_bytes = s.padded_numel * rsize;
            f.send = m_ctx.pool.take(f.send_bytes);
            m_ctx.backend.cast(f.send, m_ctx.reduce, f.scratch, DType::kF32, s.padded_numel);
            src = f.send;
        }
        // The first micro-step's sum in the stored dtype goes straight into the shard.
        if (f.first && m_ctx.reduce == m_ctx.grads) out = m_grads[i];
    }
    if (out == nullptr) {
        f.recv_bytes = s.shard_numel * rsize;
        f.recv = m_ctx.pool.take(f.recv_bytes);
        out = f.recv;
    }
    f.request = m_ctx.comm.start_reduce_scatter(src, out, s.shard_numel, ReduceOp::kSum, m_ctx.reduce);
    start(f);
}

void GradientReducer::start_trained_part_reduction(int unit) {
    // A partly frozen unit (LoRA): its trained tail, all-reduced whole (each owner keeps its
    // part of it); the frozen rest has no gradient to reduce.
    const size_t n = m_ctx.plan.grad_extent(unit);
    if (m_ctx.plan.trainable(unit).empty()) {
        // Wholly frozen (the embedding and head, the final norm): no gradient at all.
        auto it = m_scratch.find(unit);
        if (it != m_scratch.end()) {
            m_ctx.pool.give(it->second, n * sizeof(float));
            m_scratch.erase(it);
        }
        return;
    }
    const size_t rsize = dtype_size(m_ctx.reduce);
    make_room(m_pooled_in_flight);
    InFlight f(InFlight::kTrainedPartAllReduce);
    f.unit = unit;
    f.first = m_first_micro || reduced_once_per_step(unit);
    f.last = m_last_micro;
    void* data = nullptr;
    DType dtype = m_ctx.reduce;
    if (!m_ctx.plan.policy().grads_sharded) {
        data = m_grads[static_cast<size_t>(unit)];
        dtype = m_ctx.grads;
    } else {
        auto it = m_scratch.find(unit);
        ZT_REQUIRE(it != m_scratch.end(), "grads_done(", unit, ") without grads(", unit, ")");
        f.scratch = it->second;
        f.scratch_bytes = n * sizeof(float);
        m_scratch.erase(it);
        data = f.scratch;
        dtype = DType::kF32;
    }
    if (dtype != m_ctx.reduce) {
        f.send_bytes = n * rsize;
        f.send = m_ctx.pool.take(f.send_bytes);
        m_ctx.backend.cast(f.send, m_ctx.reduce, data, dtype, n);
        data = f.send;
    }
    f.request = m_ctx.comm.start_all_reduce(data, n, ReduceOp::kSum, m_ctx.reduce);
    start(f);
}

void GradientReducer::complete_trained_part(InFlight& f) {
    const size_t n = m_ctx.plan.grad_extent(f.unit);
    const size_t shift = m_ctx.plan.grad_extent_start(f.unit);
    const DType stored = m_ctx.grads;
    const DType reduce = m_ctx.reduce;
    if (!m_ctx.plan.policy().grads_sharded) {
        // The whole tail is the group's sum (in place, or from the wire copy).
        if (f.send != nullptr) m_ctx.backend.cast(m_grads[static_cast<size_t>(f.unit)], stored, f.send, reduce, n);
        return;
    }
    // Stages 2-3: this rank's part of the sum goes into its stored gradients.
    const ElementRange own = m_ctx.plan.state_range(f.unit, m_ctx.rank);
    if (own.empty()) return;
    const size_t at = own.begin - shift;
    void* dst = grad_ptr(f.unit, own.begin);
    const void* sum = f.send != nullptr ? element_at(f.send, at, reduce) : element_at(f.scratch, at, DType::kF32);
    const DType sum_dtype = f.send != nullptr ? reduce : DType::kF32;
    if (f.first) {
        m_ctx.backend.cast(dst, stored, sum, sum_dtype, own.size());
    } else if (sum_dtype == DType::kF32 && stored == DType::kF32) {
        float* g = static_cast<float*>(dst);
        m_ctx.backend.residual_forward(g, g, static_cast<const float*>(sum), own.size());
    } else {
        // Widened into the scratch's own part (the sum there is no longer needed), then added.
        float* wide = f.scratch + at;
        if (sum != wide) m_ctx.backend.cast(wide, DType::kF32, sum, sum_dtype, own.size());
        m_ctx.backend.accumulate(dst, stored, wide, own.size());
    }
}

ElementRange GradientReducer::replica_span(int unit) const {
    // The shard (with its padding), or a partly frozen unit's owned trained part (the same
    // size on every replica: the same shard rank).
    if (m_ctx.plan.partly_frozen(unit)) return m_ctx.plan.state_range(unit, m_ctx.rank);
    const UnitShard& s = m_ctx.shard(unit);
    return ElementRange{s.begin(m_ctx.rank), s.end(m_ctx.rank)};
}

void GradientReducer::start_replica_reduction(int unit) {
    const ElementRange span = replica_span(unit);
    const size_t n = span.size();
    if (n == 0) return;
    void* shard = grad_ptr(unit, span.begin);
    if (m_ctx.reduce == m_ctx.grads) {
        InFlight f(InFlight::kReplicaAllReduce);
        f.unit = unit;
        f.request = m_ctx.replica.start_all_reduce(shard, n, ReduceOp::kSum, m_ctx.grads);
        start(f);
        return;
    }
    // Another wire dtype: through a pooled copy (the size of the reduce-scatter's result,
    // given back just before), converted back when completed.
    InFlight f(InFlight::kReplicaAllReduce);
    f.unit = unit;
    f.send_bytes = n * dtype_size(m_ctx.reduce);
    f.send = m_ctx.pool.take(f.send_bytes);
    m_ctx.backend.cast(f.send, m_ctx.reduce, shard, m_ctx.grads, n);
    f.request = m_ctx.replica.start_all_reduce(f.send, n, ReduceOp::kSum, m_ctx.reduce);
    start(f);
}

void GradientReducer::complete(InFlight& f) {
    if (f.kind == InFlight::kReplicaAllReduce) {
        m_ctx.replica.wait(f.request);
        if (f.send != nullptr) {
            const ElementRange span = replica_span(f.unit);
            m_ctx.backend.cast(grad_ptr(f.unit, span.begin), m_ctx.grads, f.send, m_ctx.reduce, span.size());
            m_ctx.pool.give(f.send, f.send_bytes);
            --m_pooled_in_flight;
        }
        return;
    }
    m_ctx.comm.wait(f.request);
    const DType stored = m_ctx.grads;
    const DType reduce = m_ctx.reduce;
    if (f.kind == InFlight::kUnitAllReduce) {
        const size_t n = m_ctx.plan.grad_extent(f.unit);
        m_ctx.backend.cast(m_grads[static_cast<size_t>(f.unit)], stored, f.send, reduce, n);
    } else if (f.kind == InFlight::kTrainedPartAllReduce) {
        complete_trained_part(f);
    } else if (f.kind == InFlight::kReduceScatter && f.recv != nullptr) {
        const UnitShard& s = m_ctx.shard(f.unit);
        void* shard = grad_ptr(f.unit, s.begin(m_ctx.rank));
        if (!m_ctx.plan.policy().grads_sharded || f.first) {
            m_ctx.backend.cast(shard, stored, f.recv, reduce, s.shard_numel);
        } else if (reduce == DType::kF32 && stored == DType::kF32) {
            float* g = static_cast<float*>(shard);
            m_ctx.backend.residual_forward(g, g, static_cast<const float*>(f.recv), s.shard_numel);
        } else {
            // Widened into the (now free) fp32 scratch, then added into the stored shard.
            m_ctx.backend.cast(f.scratch, DType::kF32, f.recv, reduce, s.shard_numel);
            m_ctx.backend.accumulate(shard, stored, f.scratch, s.shard_numel);
        }
    }
    if (f.send != nullptr) m_ctx.pool.give(f.send, f.send_bytes);
    if (f.recv != nullptr) m_ctx.pool.give(f.recv, f.recv_bytes);
    if (f.scratch != nullptr) m_ctx.pool.give(f.scratch, f.scratch_bytes);
    if (f.pooled()) --m_pooled_in_flight;
    if (f.kind == InFlight::kBucket) --m_buckets_in_flight;
    // The shard now holds the group's sum over every micro-step: the other groups' next.
    const bool reduced_in_group = f.kind == InFlight::kReduceScatter || f.kind == InFlight::kTrainedPartAllReduce;
    if (reduced_in_group && f.last && m_ctx.replica.size() > 1) start_replica_reduction(f.unit);
}

void GradientReducer::complete_finished() {
    while (!m_in_flight.empty()) {
        InFlight& f = m_in_flight.front();
        const Communicator& c = f.kind == InFlight::kReplicaAllReduce ? m_ctx.replica : m_ctx.comm;
        if (!c.finished(f.request)) return;
        complete(f);
        m_in_flight.pop_front();
    }
}

void GradientReducer::complete_through(int unit) {
    size_t n = 0;
    for (size_t i = 0; i < m_in_flight.size(); ++i) {
        if (m_in_flight[i].unit == unit) n = i + 1;
    }
    for (; n > 0; --n) {
        complete(m_in_flight.front());
        m_in_flight.pop_front();
    }
}

void GradientReducer::complete_all() {
    while (!m_in_flight.empty()) {
        complete(m_in_flight.front());
        m_in_flight.pop_front();
    }
}

// ---------------------------------------------------------------------------
// The step
// ---------------------------------------------------------------------------
void GradientReducer::zero() {
    complete_all();
    if (lazy_zero()) {
        // The model zeroes each gradient tensor right before its first accumulation (see
        // grads_need_zero). What it never writes (alignment gaps, shard padding) is zero from
        // allocation and stays so: no op writes there, and reductions add zeros.
        m_zero_pending.assign(static_cast<size_t>(m_ctx.num_units()), 1);
        return;
    }
    if (!m_ctx.plan.policy().grads_sharded) {
        // 16-bit full gradients: each unit's first fp32 gradient of the step is rounded into
        // its storage instead of added (grads_done), so nothing needs zeroing here.
        m_unwritten.assign(static_cast<size_t>(m_ctx.num_units()), 1);
        return;
    }
    for (int u = 0; u < m_ctx.num_units(); ++u) zero_stored(u);
}

void GradientReducer::zero_stored(int unit) {
    m_ctx.backend.zero_bytes(m_grads[static_cast<size_t>(unit)],
                             m_ctx.plan.stored_grads(unit, m_ctx.rank) * m_ctx.grads_size());
}

void GradientReducer::begin_micro_step(bool first, bool last) {
    // Reductions of the previous micro-step keep running through this one's forward; each
    // unit's is completed when backward needs the unit's gradient scratch again (grads).
    m_first_micro = first;
    m_last_micro = last;
}

void GradientReducer::finish() {
    complete_all();
    // A unit no backward wrote this step holds zeros, as if zero() had written them.
    for (size_t u = 0; u < m_unwritten.size(); ++u) {
        if (m_unwritten[u] == 0) continue;
        zero_stored(static_cast<int>(u));
        m_unwritten[u] = 0;
    }
}

void GradientReducer::sum_owned(int unit, Communicator& with) {
    complete_all();
    const size_t b = m_ctx.state_begin(unit);
    const size_t e = m_ctx.state_end(unit);
    if (e > b) with.all_reduce(grad_ptr(unit, b), e - b, ReduceOp::kSum, m_ctx.grads);
}

ConstActPtr GradientReducer::owned(int unit, size_t element) {
    complete_all();
    return {grad_ptr(unit, element), m_ctx.grads};
}

double GradientReducer::local_sum_squares(const std::vector<std::vector<DecaySegment>>& segments) {
    // All segments in one backend call (one parallel region on the CPU), read in the stored
    // dtype, added in order.
    std::vector<ConstActPtr> xs;
    std::vector<size_t> ns;
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        const size_t b = m_ctx.state_begin(u);
        const size_t e = m_ctx.state_end(u);
        if (e <= b) continue;
        const ConstActPtr g = owned(u, b);
        for_segments_within(segments[static_cast<size_t>(u)], b, e, [&](size_t sb, size_t se, bool) {
            xs.push_back(g.offset(sb - b));
            ns.push_back(se - sb);
        });
    }
    return xs.empty() ? 0.0 : m_ctx.backend.sum_squares_spans(xs.data(), ns.data(), xs.size());
}

size_t GradientReducer::planned_scratch(const ShardPlan& plan, DType stored, DType reduce, int overlap_depth) {
    // Per the model's unit protocol (model/transformer.cpp): unit 0's gradient is produced from the LM head
    // through the whole backward; other units one at a time. Stages 2-3 hold a unit's fp32
    // scratch until its reduction completes (up to depth + 1 behind the current).
    const int U = plan.num_units();
    const size_t K = reductions_in_flight(overlap_depth);
    const size_t r = dtype_size(reduce);
    auto padded = [&](int u) { return plan.grad_extent(u); };
    size_t planned = 0;
    const bool per_micro_step = plan.grads_reduced_per_micro_step();
    if (per_micro_step || stored != DType::kF32) {  // fp32 gradient scratch
        // Reduced once per step: every unit's scratch lives through the step.
        const size_t live = !per_micro_step ? 1 : plan.policy().reduce_once_per_step ? static_cast<size_t>(U) : 1 + K;
        planned += padded(0) * sizeof(float) + pooled_peak(1, U, live, [&](int u) { return padded(u) * sizeof(float); });
    }
    const bool wire_copy = !per_micro_step ? reduce != stored : reduce != DType::kF32;
    if (wire_copy) planned += pooled_peak(0, U, K, [&](int u) { return padded(u) * r; });
    // The reduce-scatter's result (a partly frozen unit is all-reduced in place: none).
    auto result = [&](int u) { return plan.partly_frozen(u) ? 0 : plan.shard(u).shard_numel * r; };
    if (!plan.grads_all_reduced()) planned += pooled_peak(0, U, K, result);
    return planned;
}

}  // namespace zt
