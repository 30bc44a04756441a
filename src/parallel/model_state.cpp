// Per-rank model state for DDP and ZeRO-1/2/3 (see the table in model_state.hpp).
#include "ztrain/parallel/model_state.hpp"

#include <algorithm>
#include <cstring>

#include "ztrain/core/error.hpp"

namespace zt {

ModelState::ModelState(const ModelLayout& layout, Backend& backend, uint64_t seed)
    : ModelState(layout, backend, self_communicator(), 0, SIZE_MAX, seed) {}

ModelState::ModelState(const ModelLayout& layout, Backend& backend, Communicator& comm, int zero_stage,
                       size_t bucket_numel, uint64_t seed)
    : m_layout(layout),
      m_backend(backend),
      m_comm(comm),
      m_stage(zero_stage),
      m_rank(comm.rank()),
      m_shards(make_unit_shards(layout.unit_numel, comm.size())) {
    ZT_REQUIRE(zero_stage >= 0 && zero_stage <= 3, "zero stage ", zero_stage);
    const int U = layout.num_units();
    size_t max_padded = 0;
    size_t max_shard = 0;
    size_t unit_max = 0;
    for (const UnitShard& s : m_shards) {
        max_padded = std::max(max_padded, s.padded_numel);
        max_shard = std::max(max_shard, s.shard_numel);
        unit_max = std::max(unit_max, s.numel);
    }
    std::vector<float> init(unit_max);
    if (m_stage <= 1) {
        // One arena, units in backward order, so a DDP bucket is one contiguous span.
        m_buckets = make_grad_buckets(m_shards, bucket_numel);
        size_t total = 0;
        for (const UnitShard& s : m_shards) total += s.padded_numel;
        m_grad_arena = backend.alloc_floats(total);
        m_grads.assign(static_cast<size_t>(U), nullptr);
        size_t off = 0;
        for (int u = U - 1; u >= 0; --u) {
            m_grads[static_cast<size_t>(u)] = m_grad_arena + off;
            off += m_shards[static_cast<size_t>(u)].padded_numel;
        }
    }
    for (int u = 0; u < U; ++u) {
        const UnitShard& s = m_shards[static_cast<size_t>(u)];
        init_unit(layout, u, seed, init.data());
        if (m_stage <= 2) {
            float* p = backend.alloc_floats(s.padded_numel);
            std::memcpy(p, init.data(), s.numel * sizeof(float));
            m_params.push_back(p);
        } else {
            float* p = backend.alloc_floats(s.shard_numel);
            const size_t b = s.begin(m_rank);
            const size_t e = s.live_end(m_rank);
            if (e > b) std::memcpy(p, init.data() + b, (e - b) * sizeof(float));
            m_params.push_back(p);
        }
        if (m_stage >= 2) m_grads.push_back(backend.alloc_floats(s.shard_numel));
        const size_t state_n = m_stage == 0 ? s.padded_numel : s.shard_numel;
        m_adam_m.push_back(backend.alloc_floats(state_n));
        m_adam_v.push_back(backend.alloc_floats(state_n));
        if (m_stage == 0) {
            m_segments.push_back(decay_segments(layout, u, 0, s.numel));
        } else {
            m_segments.push_back(decay_segments(layout, u, s.begin(m_rank), s.live_end(m_rank)));
        }
    }
    if (m_stage >= 1) m_shard_tmp = backend.alloc_floats(max_shard);
}

ModelState::~ModelState() {
    for (auto& [u, req] : m_gathering) m_comm.wait(req);
    for (auto& r : m_bucket_requests) m_comm.wait(r);
    for (auto& [u, p] : m_gathered) m_backend.free(p);
    for (auto& [u, p] : m_grad_scratch) m_backend.free(p);
    for (auto& [n, p] : m_pool) m_backend.free(p);
    for (auto* list : {&m_params, &m_adam_m, &m_adam_v}) {
        for (float* p : *list) m_backend.free(p);
    }
    if (m_stage >= 2) {
        for (float* p : m_grads) m_backend.free(p);
    }
    if (m_grad_arena != nullptr) m_backend.free(m_grad_arena);
    if (m_shard_tmp != nullptr) m_backend.free(m_shard_tmp);
}

// ---------------------------------------------------------------------------
// Scratch pool: gathered units and full-size gradient buffers come and go once per unit
// per micro-step; reusing them avoids page-faulting fresh memory every time.
// ---------------------------------------------------------------------------
float* ModelState::pool_take(size_t n) {
    auto it = m_pool.find(n);
    if (it != m_pool.end()) {
        float* p = it->second;
        m_pool.erase(it);
        return p;
    }
    return m_backend.alloc_floats(n);
}

void ModelState::pool_give(float* p, size_t n) { m_pool.emplace(n, p); }

// ---------------------------------------------------------------------------
// UnitStore
// ---------------------------------------------------------------------------
void ModelState::prefetch(int unit) {
    if (m_stage < 3 || m_gathered.count(unit) || m_gathering.count(unit)) return;
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    float* buf = pool_take(s.padded_numel);
    m_gathering[unit] = m_comm.start_all_gather(m_params[static_cast<size_t>(unit)], buf, s.shard_numel);
    m_gathered[unit] = buf;
}

const float* ModelState::acquire(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_layout.num_units(), "unit ", unit);
    if (m_stage < 3) return m_params[static_cast<size_t>(unit)];
    if (!m_gathered.count(unit)) prefetch(unit);
    auto it = m_gathering.find(unit);
    if (it != m_gathering.end()) {
        m_comm.wait(it->second);
        m_gathering.erase(it);
    }
    return m_gathered.at(unit);
}

void ModelState::release(int unit) {
    if (m_stage < 3) return;
    auto it = m_gathered.find(unit);
    if (it == m_gathered.end()) return;
    auto g = m_gathering.find(unit);
    if (g != m_gathering.end()) {
        m_comm.wait(g->second);
        m_gathering.erase(g);
    }
    pool_give(it->second, m_shards[static_cast<size_t>(unit)].padded_numel);
    m_gathered.erase(it);
}

float* ModelState::grads(int unit) {
    ZT_REQUIRE(unit >= 0 && unit < m_layout.num_units(), "unit ", unit);
    if (m_stage <= 1) return m_grads[static_cast<size_t>(unit)];
    auto it = m_grad_scratch.find(unit);
    if (it != m_grad_scratch.end()) return it->second;
    const size_t n = m_shards[static_cast<size_t>(unit)].padded_numel;
    float* buf = pool_take(n);
    m_backend.zero(buf, n);
    m_grad_scratch[unit] = buf;
    return buf;
}

void ModelState::grads_done(int unit) {
    if (m_stage >= 2) {
        reduce_unit_grads(unit);
        return;
    }
    if (!m_last_micro) return;  // stages 0, 1: accumulate locally, communicate once per step
    if (m_stage == 1) {
        reduce_unit_grads(unit);
        return;
    }
    for (const GradBucket& b : m_buckets) {
        if (b.last_unit == unit) {
            m_bucket_requests.push_back(m_comm.start_all_reduce(m_grad_arena + b.offset, b.numel));
        }
    }
}

void ModelState::reduce_unit_grads(int unit) {
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    const size_t i = static_cast<size_t>(unit);
    if (m_stage == 1) {
        // Own slice of the full buffer receives the reduced values; the rest is stale.
        m_comm.reduce_scatter(m_grads[i], m_shard_tmp, s.shard_numel);
        std::memcpy(m_grads[i] + s.begin(m_rank), m_shard_tmp, s.shard_numel * sizeof(float));
        return;
    }
    auto it = m_grad_scratch.find(unit);
    ZT_REQUIRE(it != m_grad_scratch.end(), "grads_done(", unit, ") without grads(", unit, ")");
    if (m_first_micro) {
        m_comm.reduce_scatter(it->second, m_grads[i], s.shard_numel);
    } else {
        m_comm.reduce_scatter(it->second, m_shard_tmp, s.shard_numel);
        m_backend.residual_forward(m_grads[i], m_grads[i], m_shard_tmp, s.shard_numel);
    }
    pool_give(it->second, s.padded_numel);
    m_grad_scratch.erase(it);
}

// ---------------------------------------------------------------------------
// The trainer's face
// ---------------------------------------------------------------------------
void ModelState::zero_grads() {
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const UnitShard& s = m_shards[static_cast<size_t>(u)];
        m_backend.zero(m_grads[static_cast<size_t>(u)], m_stage <= 1 ? s.padded_numel : s.shard_numel);
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

float* ModelState::param_base(int unit) {
    float* p = m_params[static_cast<size_t>(unit)];
    // Stage 3 keeps only the shard: shift so that unit element e sits at base[e].
    return m_stage == 3 ? p - m_shards[static_cast<size_t>(unit)].begin(m_rank) : p;
}

float* ModelState::grad_base(int unit) {
    float* g = m_grads[static_cast<size_t>(unit)];
    return m_stage >= 2 ? g - m_shards[static_cast<size_t>(unit)].begin(m_rank) : g;
}

double ModelState::grad_sum_squares() {
    double s = 0.0;
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const float* g = grad_base(u);
        for (const DecaySegment& seg : m_segments[static_cast<size_t>(u)]) {
            s += m_backend.sum_squares(g + seg.begin, seg.end - seg.begin);
        }
    }
    // DDP: every rank holds the same full gradient, the local sum is already global.
    if (m_stage >= 1) m_comm.all_reduce_scalars(&s, 1);
    return s;
}

void ModelState::optimizer_step(const AdamWStep& step) {
    for (int u = 0; u < m_layout.num_units(); ++u) {
        const size_t i = static_cast<size_t>(u);
        const size_t state_shift = m_stage == 0 ? 0 : m_shards[i].begin(m_rank);
        float* p = param_base(u);
        float* g = grad_base(u);
        float* m = m_adam_m[i] - state_shift;
        float* v = m_adam_v[i] - state_shift;
        for (const DecaySegment& seg : m_segments[i]) {
            AdamWStep s = step;
            if (!seg.decay) s.weight_decay = 0.f;
            m_backend.adamw_update(p + seg.begin, m + seg.begin, v + seg.begin, g + seg.begin, seg.end - seg.begin, s);
        }
    }
    if (m_stage == 1 || m_stage == 2) {
        for (int u = 0; u < m_layout.num_units(); ++u) {
            m_comm.all_gather(nullptr, m_params[static_cast<size_t>(u)], m_shards[static_cast<size_t>(u)].shard_numel);
        }
    }
}

// ---------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------
StateBytes ModelState::bytes() const {
    StateBytes b;
    size_t padded = 0;
    size_t shard = 0;
    size_t max_padded = 0;
    size_t max_shard = 0;
    for (const UnitShard& s : m_shards) {
        padded += s.padded_numel;
        shard += s.shard_numel;
        max_padded = std::max(max_padded, s.padded_numel);
        max_shard = std::max(max_shard, s.shard_numel);
    }
    const size_t f = sizeof(float);
    b.params = (m_stage <= 2 ? padded : shard) * f;
    b.grads = (m_stage <= 1 ? padded : shard) * f;
    b.master = 0;
    b.optimizer = 2 * (m_stage == 0 ? padded : shard) * f;
    if (m_stage >= 1) b.scratch += max_shard * f;
    if (m_stage >= 2) b.scratch += max_padded * f;          // one unit's full gradient
    if (m_stage == 3) b.scratch += 3 * max_padded * f;      // held + current + prefetched unit
    return b;
}

float* ModelState::unit_params(int unit) {
    ZT_REQUIRE(m_stage <= 2, "unit_params() needs replicated parameters (stage <= 2), stage is ", m_stage);
    return m_params.at(static_cast<size_t>(unit));
}

void ModelState::gather_unit_params(int unit, float* out) {
    const UnitShard& s = m_shards[static_cast<size_t>(unit)];
    if (m_stage <= 2) {
        std::memcpy(out, m_params[static_cast<size_t>(unit)], s.numel * sizeof(float));
        return;
    }
    std::vector<float> full(s.padded_numel);
    m_comm.all_gather(m_params[static_cast<size_t>(unit)], full.data(), s.shard_numel);
    std::memcpy(out, full.data(), s.numel * sizeof(float));
}

}  // namespace zt
