// OptimizerState (see optimizer_state.hpp). Buffers holding only the owned elements are
// addressed through a base pointer shifted by their start, so base[e] is element e; under
// Muon, v is packed along its runs instead (second_moment_runs).
#include "ztrain/parallel/optimizer_state.hpp"

#include <algorithm>

#include "ztrain/core/error.hpp"

namespace zt {

namespace {

/// The tensor `layout` holds at `offset` of `unit`.
const ParamSpec& spec_at(const ModelLayout& layout, int unit, size_t offset) {
    for (const ParamSpec& p : layout.params) {
        if (p.unit == unit && p.offset == offset) return p;
    }
    throw Error(str("no tensor at element ", offset, " of unit ", unit));
}

}  // namespace

std::vector<std::vector<OptimizerState::TensorMatrix>> OptimizerState::tensor_matrices(const ModelLayout& layout) {
    std::vector<std::vector<TensorMatrix>> out(static_cast<size_t>(layout.num_units()));
    const int T = layout.split.size;
    std::vector<ModelLayout> parts;  // every tensor rank's layout, and the unsplit one
    for (int q = 0; T > 1 && q <= T; ++q) {
        parts.push_back(q < T ? make_model_layout(layout.model, TensorSplit{T, q}) : make_model_layout(layout.model));
    }
    for (int u = 0; u < layout.num_units(); ++u) {
        for (const MuonMatrix& mat : muon_matrices(layout, u)) {
            TensorMatrix tm;
            tm.rows = mat.rows;
            tm.cols = mat.cols;
            const ParamSpec& p = spec_at(layout, u, mat.begin);
            if (T > 1 && p.slice.split()) {
                tm.rows = static_cast<int>(p.slice.global_shape[0]);
                tm.cols = static_cast<int>(p.slice.global_shape[1]);
                const ModelLayout& whole = parts.back();
                const size_t whole_begin = whole.find(p.name).offset;
                for (int q = 0; q < T; ++q) {
                    const ParamSpec& pq = parts[static_cast<size_t>(q)].find(p.name);
                    std::vector<SliceRun> runs = runs_within(slice_runs(parts[static_cast<size_t>(q)], whole, u),
                                                             pq.offset, pq.offset + pq.numel, /*local_side=*/true);
                    for (SliceRun& r : runs) {
                        r.local -= pq.offset;
                        r.whole -= whole_begin;
                    }
                    tm.runs.push_back(strided_runs(runs));
                }
            }
            out[static_cast<size_t>(u)].push_back(std::move(tm));
        }
    }
    return out;
}

OptimizerState::MuonFloats OptimizerState::muon_floats(const ModelLayout& layout, const ShardPlan& plan,
                                                       const std::vector<std::vector<TensorMatrix>>& tensor) {
    MuonFloats f;
    for (int u = 0; u < layout.num_units(); ++u) {
        const std::vector<MuonMatrix> mats = muon_matrices(layout, u);
        for (size_t i = 0; i < mats.size(); ++i) {
            const TensorMatrix& tm = tensor[static_cast<size_t>(u)][i];
            const size_t whole = static_cast<size_t>(tm.rows) * static_cast<size_t>(tm.cols);
            f.matrix = std::max(f.matrix, whole + newton_schulz_work_floats(tm.rows, tm.cols));
            if (!tm.runs.empty()) f.slices = std::max(f.slices, tm.runs.size() * (mats[i].end() - mats[i].begin));
        }
        if (!mats.empty() && plan.ownership_partitioned()) f.unit = std::max(f.unit, plan.shard(u).padded_numel);
    }
    return f;
}

size_t OptimizerState::muon_bytes(const ModelLayout& layout, const ShardPlan& plan) {
    const MuonFloats f = muon_floats(layout, plan, tensor_matrices(layout));
    return (f.matrix + f.slices + f.unit) * sizeof(float);
}

std::vector<OptimizerState::SecondMomentRun> OptimizerState::second_moment_runs(const ModelLayout& layout,
                                                                                const ShardPlan& plan, int unit,
                                                                                int rank, bool muon) {
    const std::vector<MuonMatrix> mats = muon ? muon_matrices(layout, unit) : std::vector<MuonMatrix>{};
    if (mats.empty()) {
        const size_t shift = plan.optimizer_start(unit, rank);
        return {{shift, shift + plan.stored_optimizer(unit, rank), 0}};
    }
    // torch.optim.Muon keeps a momentum buffer alone for its matrices: so does this state.
    const ElementRange owned = plan.state_range(unit, rank);
    std::vector<SecondMomentRun> runs;
    size_t at = 0;
    for (const DecaySegment& s : without_matrices(decay_segments(layout, unit, owned.begin, owned.end), mats)) {
        if (!runs.empty() && runs.back().end == s.begin) {
            runs.back().end = s.end;
        } else {
            runs.push_back({s.begin, s.end, at});
        }
        at += s.end - s.begin;
    }
    return runs;
}

size_t OptimizerState::floats_of(const std::vector<SecondMomentRun>& runs) {
    size_t n = 0;
    for (const SecondMomentRun& r : runs) n += r.end - r.begin;
    return n;
}

size_t OptimizerState::second_moment_floats(const ModelLayout& layout, const ShardPlan& plan, int unit, int rank,
                                            bool muon) {
    return floats_of(second_moment_runs(layout, plan, unit, rank, muon));
}

float* OptimizerState::second_moment_at(int unit, size_t element) {
    for (const SecondMomentRun& r : m_v_runs[static_cast<size_t>(unit)]) {
        if (element >= r.begin && element < r.end) return m_v[static_cast<size_t>(unit)] + r.at + (element - r.begin);
    }
    throw Error(str("element ", element, " of unit ", unit, " keeps no second moment"));
}

OptimizerState::OptimizerState(const StateContext& ctx, ParameterStore& params, size_t* master_bytes,
                               size_t* optimizer_bytes, const std::optional<MuonSettings>& muon, Communicator* tensor)
    : m_ctx(ctx), m_params(params), m_muon(muon), m_tensor(tensor) {
    auto alloc_f32 = [&](size_t n, size_t* kind) {
        *kind += n * sizeof(float);
        return static_cast<float*>(ctx.backend.alloc_bytes(n * sizeof(float)));
    };
    for (int u = 0; u < ctx.num_units(); ++u) {
        const size_t n = ctx.plan.stored_optimizer(u, ctx.rank);
        if (ctx.trained != DType::kF32) m_master.push_back(alloc_f32(n, master_bytes));
        m_m.push_back(alloc_f32(n, optimizer_bytes));
        m_v_runs.push_back(second_moment_runs(ctx.layout, ctx.plan, u, ctx.rank, m_muon.has_value()));
        m_v.push_back(alloc_f32(floats_of(m_v_runs.back()), optimizer_bytes));
        m_segments.push_back(decay_segments(ctx.layout, u, ctx.state_begin(u), ctx.state_end(u)));
        m_matrices.push_back(m_muon ? muon_matrices(ctx.layout, u) : std::vector<MuonMatrix>{});
        m_adamw_segments.push_back(without_matrices(m_segments.back(), m_matrices.back()));
    }
    if (m_muon) {
        ZT_REQUIRE((m_tensor != nullptr ? m_tensor->size() : 1) == ctx.layout.split.size, "Muon: a tensor group of ",
                   m_tensor != nullptr ? m_tensor->size() : 1, " ranks for a layout split ", ctx.layout.split.size,
                   " ways");
        m_tensor_matrices = tensor_matrices(ctx.layout);
        const MuonFloats f = muon_floats(ctx.layout, ctx.plan, m_tensor_matrices);
        if (f.matrix > 0) m_muon_matrix = alloc_f32(f.matrix, optimizer_bytes);
        if (f.slices > 0) m_muon_slices = alloc_f32(f.slices, optimizer_bytes);
        if (f.unit > 0) m_muon_unit = alloc_f32(f.unit, optimizer_bytes);
    }
}

OptimizerState::~OptimizerState() {
    for (float* p : m_master) m_ctx.backend.free(p);
    for (float* p : m_m) m_ctx.backend.free(p);
    for (float* p : m_v) m_ctx.backend.free(p);
    if (m_muon_matrix != nullptr) m_ctx.backend.free(m_muon_matrix);
    if (m_muon_slices != nullptr) m_ctx.backend.free(m_muon_slices);
    if (m_muon_unit != nullptr) m_ctx.backend.free(m_muon_unit);
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

float* OptimizerState::v_base(int unit) {
    ZT_REQUIRE(!m_muon, "v_base under Muon (its matrices keep no second moment: for_second_moment_within)");
    return m_v[static_cast<size_t>(unit)] - state_shift(unit);
}

void OptimizerState::update(const AdamWStep& step, GradientReducer& grads) {
    adamw_update(step, grads);
    if (!m_muon) return;
    MuonStep ms;
    ms.momentum = m_muon->momentum;
    ms.nesterov = m_muon->nesterov;
    ms.grad_scale = step.grad_scale;
    ms.ns_steps = m_muon->ns_steps;
    ms.ns_bf16 = m_muon->ns_bf16;
    const double rate = static_cast<double>(step.lr) * m_muon->lr_ratio;
    // torch.optim.Muon decays by its unadjusted rate: param *= 1 - lr * weight_decay.
    const float decay = static_cast<float>(rate * step.weight_decay);
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        if (!m_matrices[static_cast<size_t>(u)].empty()) muon_unit(u, ms, rate, decay, grads);
    }
}

void OptimizerState::muon_unit(int unit, const MuonStep& ms, double rate, float decay, GradientReducer& grads) {
    Backend& be = m_ctx.backend;
    const size_t b = m_ctx.state_begin(unit);
    const size_t e = m_ctx.state_end(unit);
    const ConstActPtr g = e > b ? grads.owned(unit, b) : ConstActPtr{};
    const ActPtr w = e > b ? m_params.owned_work(unit, b) : ActPtr{};
    float* m = m_base(unit);
    const std::vector<MuonMatrix>& mats = m_matrices[static_cast<size_t>(unit)];
    // Sharded state: each rank's momentum over its shard, then the group's whole update.
    const bool gathered = m_muon_unit != nullptr;
    if (gathered) {
        const UnitShard& s = m_ctx.shard(unit);
        be.zero(m_muon_unit + s.begin(m_ctx.rank), s.shard_numel);
        for (const MuonMatrix& mat : mats) {
            const size_t lo = std::max(mat.begin, b);
            const size_t hi = std::min(mat.end(), e);
            if (hi > lo) be.muon_momentum(m + lo, m_muon_unit + lo, g.offset(lo - b), hi - lo, ms);
        }
        m_ctx.comm.all_gather(nullptr, m_muon_unit, s.shard_numel);
    }
    for (size_t i = 0; i < mats.size(); ++i) {
        const MuonMatrix& mat = mats[i];
        const size_t lo = std::max(mat.begin, b);
        const size_t hi = std::min(mat.end(), e);
        // Another rank's: it orthogonalizes the matrix too. The ranks of a tensor group own
        // the same ranges of their (equal) units, so they skip the same matrices.
        if (hi <= lo) continue;
        const size_t n = mat.end() - mat.begin;
        const bool split = !m_tensor_matrices[static_cast<size_t>(unit)][i].runs.empty();
        float* x = split ? m_muon_slices + static_cast<size_t>(m_tensor->rank()) * n : m_muon_matrix;
        if (gathered) {
            be.copy(x, m_muon_unit + mat.begin, n);
        } else {
            be.muon_momentum(m + mat.begin, x, g.offset(mat.begin - b), n, ms);
        }
        const auto [rows, cols] = orthogonalize(unit, i, x, ms);
        const double r = muon_matrix_rate(rate, m_muon->adjust, rows, cols);
        be.muon_apply(master_base(unit) + lo, x + (lo - mat.begin), hi - lo, mat.decay ? decay : 0.f,
                      static_cast<float>(r), w.data != nullptr ? w.offset(lo - b) : ActPtr{});
    }
}

std::pair<int, int> OptimizerState::orthogonalize(int unit, size_t index, float* x, const MuonStep& ms) {
    Backend& be = m_ctx.backend;
    const MuonMatrix& mat = m_matrices[static_cast<size_t>(unit)][index];
    const TensorMatrix& tm = m_tensor_matrices[static_cast<size_t>(unit)][index];
    const size_t n = mat.end() - mat.begin;
    if (tm.runs.empty()) {
        be.newton_schulz(x, mat.rows, mat.cols, ms, x + n);
        return {mat.rows, mat.cols};
    }
    // Each rank's slice into its slot, then each slot's runs into the whole matrix (ranks
    // sharing a slice, as Llama's KV heads, write the same values).
    m_tensor->all_gather(nullptr, m_muon_slices, n);
    float* whole = m_muon_matrix;
    for (size_t q = 0; q < tm.runs.size(); ++q) {
        for (const StridedRuns& r : tm.runs[q]) {
            be.copy_strided(whole + r.whole, r.whole_pitch, m_muon_slices + q * n + r.local, r.local_pitch, r.length,
                            r.count);
        }
    }
    const size_t whole_numel = static_cast<size_t>(tm.rows) * static_cast<size_t>(tm.cols);
    be.newton_schulz(whole, tm.rows, tm.cols, ms, whole + whole_numel);
    for (const StridedRuns& r : tm.runs[static_cast<size_t>(m_tensor->rank())]) {
        be.copy_strided(x + r.local, r.local_pitch, whole + r.whole, r.whole_pitch, r.length, r.count);
    }
    return {tm.rows, tm.cols};
}

void OptimizerState::adamw_update(const AdamWStep& step, GradientReducer& grads) {
    // Every unit's segments in one backend call: the gradients read in their stored dtype,
    // and a 16-bit working copy rounded from the new master in the same pass.
    std::vector<AdamWSpan> spans;
    for (int u = 0; u < m_ctx.num_units(); ++u) {
        const size_t b = m_ctx.state_begin(u);
        const size_t e = m_ctx.state_end(u);
        if (e <= b) continue;
        float* p = master_base(u);
        float* m = m_base(u);
        const ConstActPtr g = grads.owned(u, b);
        const ActPtr w = m_params.owned_work(u, b);
        for_segments_within(m_adamw_segments[static_cast<size_t>(u)], b, e, [&](size_t sb, size_t se, bool decay) {
            AdamWSpan sp;
            sp.param = p + sb;
            sp.m = m + sb;
            sp.v = second_moment_at(u, sb);
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
