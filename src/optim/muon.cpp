// Muon's side of the optimizer: which tensors it updates, its settings and its per-matrix
// rate. The step itself runs in parallel/optimizer_state.cpp over the backend's Muon ops.
#include <algorithm>
#include <cmath>

#include "ztrain/optim/optimizer.hpp"

namespace zt {

MuonSettings muon_settings(const TrainConfig& cfg) {
    MuonSettings s;
    s.lr_ratio = cfg.muon_lr > 0 ? cfg.muon_lr / cfg.lr : 1.0;
    s.momentum = static_cast<float>(cfg.muon_momentum);
    s.nesterov = cfg.muon_nesterov;
    s.ns_steps = cfg.muon_ns_steps;
    s.ns_bf16 = cfg.muon_ns_dtype == DType::kBF16;
    s.adjust = cfg.muon_adjust_lr;
    return s;
}

std::vector<MuonMatrix> muon_matrices(const ModelLayout& layout, int unit) {
    std::vector<MuonMatrix> out;
    if (unit == 0) return out;  // the embeddings and the LM head
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit || !p.trainable || p.adapter || p.shape.size() != 2) continue;
        out.push_back({p.offset, static_cast<int>(p.shape[0]), static_cast<int>(p.shape[1]), p.decay});
    }
    std::sort(out.begin(), out.end(), [](const MuonMatrix& a, const MuonMatrix& b) { return a.begin < b.begin; });
    return out;
}

std::vector<DecaySegment> without_matrices(const std::vector<DecaySegment>& segments,
                                           const std::vector<MuonMatrix>& matrices) {
    std::vector<DecaySegment> out;
    for (const DecaySegment& seg : segments) {
        size_t at = seg.begin;
        for (const MuonMatrix& m : matrices) {
            if (m.end() <= at || m.begin >= seg.end) continue;
            if (m.begin > at) out.push_back({at, m.begin, seg.decay});
            at = std::max(at, m.end());
        }
        if (at < seg.end) out.push_back({at, seg.end, seg.decay});
    }
    return out;
}

double muon_matrix_rate(double lr, MuonLrAdjust adjust, int rows, int cols) {
    const double r = rows;
    const double c = cols;
    if (adjust == MuonLrAdjust::kOriginal) return lr * std::sqrt(std::max(1.0, r / c));
    return lr * 0.2 * std::sqrt(std::max(r, c));
}

}  // namespace zt
