// OptimizerState (see optimizer_state.hpp). Buffers holding only the owned elements are
// addressed through a base pointer shifted by their start, so base[e] is element e.
#include "ztrain/parallel/optimizer_state.hpp"

#include <algorithm>

namespace zt {

OptimizerState::OptimizerState(const StateContext& ctx, ParameterStore& params, size_t* master_bytes,
                               size_t* optimizer_bytes)
    : m_ctx(ctx), m_params(params) {
    auto alloc_f32 = [&](size_t n, size_t* kind) {
        *kind += n * sizeof(float);
        return static_cast<float*>(ctx.backend.alloc_bytes(n * sizeof(float)));
    };
    for (int u = 0; u < ctx.num_units(); ++u) {
        const size_t n = ctx.plan.stored_optimizer(u, ctx.rank);
        if (ctx.trained != DType::kF32) m_master.push_back(alloc_f32(n, master_bytes));
        m_m.push_back(alloc_f32(n, optimizer_bytes));
        m_v.push_back(alloc_f32(n, optimizer_bytes));
        m_segments.push_back(decay_segments(ctx.layout, u, ctx.state_begin(u), ctx.state_end(u)));
    }
}

OptimizerState::~OptimizerState() {
    for (float* p : m_master) m_ctx.backend.free(p);
    for (float* p : m_m) m_ctx.backend.free(p);
    for (float* p : m_v) m_ctx.backend.free(p);
}

size_t OptimizerState::state_shift(int unit) const { return m_ctx.plan.optimizer_start(unit, m_ctx.rank); }

void OptimizerState::write_initial(int unit, size_t lo, size_t hi, const float* host) {
    if (m_ctx.trained == DType::kF32) return;  // the (trained elements') working copy is the master
    const size_t begin = state_shift(unit);
    const size_t end = begin + m_ctx.plan.stored_optimizer(unit, m_ctx.rank);
    const size_t from = std::max(lo, begin);
    const size_t to = std::min(hi, end);
    if (to > from) {
        m_ctx.backend.to_device(master_base(unit) + from, host + (from - lo), (to - from) * sizeof(float));
    }
}

float* OptimizerState::master_base(int unit) {
    if (m_ctx.trained == DType::kF32) return m_params.fp32_base(unit);
    return m_master[static_cast<size_t>(unit)] - state_shift(unit);
}

float* OptimizerState::m_base(int unit) { return m_m[static_cast<size_t>(unit)] - state_shift(unit); }

float* OptimizerState::v_base(int unit) { return m_v[static_cast<size_t>(unit)] - state_shift(unit); }

void OptimizerState::update(const AdamWStep& step, GradientReducer& grads) {
    // Every unit's segments in one backend call: the gradients read in their stored dtype,
    // and a 16-bit working copy rounded from the new master in the same pass.
    std::vector<AdamWSpan> spans;
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        const size_t b = m_ctx.state_begin(u);
        const size_t e = m_ctx.state_end(u);
        if (e <= b) continue;
        float* p = master_base(u);
        float* m = m_base(u);
        float* v = v_base(u);
        const ConstActPtr g = grads.owned(u, b);
        const ActPtr w = m_params.owned_work(u, b);
        for_segments_within(m_segments[static_cast<size_t>(u)], b, e, [&](size_t sb, size_t se, bool decay) {
            AdamWSpan sp;
            sp.param = p + sb;
            sp.m = m + sb;
            sp.v = v + sb;
            sp.grad = g.offset(sb - b);
            sp.n = se - sb;
            sp.decay = decay;
            if (w.data != nullptr) sp.work = w.offset(sb - b);
            spans.push_back(sp);
        });
    }
    if (!spans.empty()) m_ctx.backend.adamw_update_spans(spans.data(), spans.size(), step);
}

}  // namespace zt
