// AdamW over flat buffers, the learning-rate schedule and global-norm clipping helpers.
//
// The optimizer sees spans, never tensors: a unit (or a rank's shard of it) is cut into
// segments that share a weight-decay flag, taken from the tensor manifest. Which spans a
// rank owns is the parallel strategy's business.
#pragma once

#include <cstddef>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/model/model_layout.hpp"

namespace zt {

/// A run of elements [begin, end) of one unit with one decay flag.
struct DecaySegment {
    size_t begin = 0;
    size_t end = 0;
    bool decay = false;
};

/// fn(begin, end, decay) for the parts of `segments` inside [from, to), in order.
template <typename Fn>
void for_segments_within(const std::vector<DecaySegment>& segments, size_t from, size_t to, Fn&& fn) {
    for (const DecaySegment& seg : segments) {
        const size_t b = seg.begin > from ? seg.begin : from;
        const size_t e = seg.end < to ? seg.end : to;
        if (e > b) fn(b, e, seg.decay);
    }
}

/// Cuts unit `unit` into segments covering [range_begin, range_end) (clipped to the unit),
/// each with the decay flag of the tensor it lies in (gaps between tensors: no decay); the
/// elements of frozen tensors (ParamSpec::trainable false) lie in none.
std::vector<DecaySegment> decay_segments(const ModelLayout& layout, int unit, size_t range_begin,
                                         size_t range_end);

/// Learning rate for 0-based optimizer step `step`: linear warmup over warmup_steps to lr,
/// then cosine or linear decay to lr_min at schedule_steps (0: max_steps), held after it;
/// or constant; or wsd: lr held until the last decay_fraction of the steps after warmup,
/// which decay to lr_min by decay_shape.
double learning_rate(const TrainConfig& cfg, long step);

/// Hyper-parameters of AdamW step number `t` (1-based), excluding grad_scale.
AdamWStep adamw_step_params(const TrainConfig& cfg, double lr, long t);

/// The multiplier global-norm clipping applies: min(1, clip / norm); 1 when clip <= 0.
double clip_multiplier(double grad_norm, double clip);

// ---- Muon (muon.cpp) ----

/// train.optimizer = muon's settings, fixed for a run (the scheduled rate comes per step).
struct MuonSettings {
    double lr_ratio = 1.0;  ///< train.muon_lr / train.lr (1 when muon_lr is 0)
    float momentum = 0.95f;
    bool nesterov = true;
    int ns_steps = 5;
    bool ns_bf16 = false;  ///< train.muon_ns_dtype = bf16
    MuonLrAdjust adjust = MuonLrAdjust::kMatchRmsAdamW;
};
/// The settings of cfg.optimizer = muon (the caller asks only then).
MuonSettings muon_settings(const TrainConfig& cfg);

/// A matrix Muon updates: rows x cols (out, in) elements of its unit from `begin`.
struct MuonMatrix {
    size_t begin = 0;
    int rows = 0;
    int cols = 0;
    bool decay = true;
    size_t end() const { return begin + static_cast<size_t>(rows) * static_cast<size_t>(cols); }
};
/// The matrices of `unit` Muon updates: the trained 2-D tensors of the transformer blocks,
/// in order. The embeddings and the LM head (unit 0), norms, biases and LoRA's adapters are
/// AdamW's. GPT-2's fused q|k|v weight is one matrix, as in its Hugging Face module.
std::vector<MuonMatrix> muon_matrices(const ModelLayout& layout, int unit);
/// `segments` without the elements of `matrices`: what AdamW updates beside Muon.
std::vector<DecaySegment> without_matrices(const std::vector<DecaySegment>& segments,
                                           const std::vector<MuonMatrix>& matrices);
/// Muon's rate for a (rows, cols) matrix at scheduled rate `lr` (torch.optim.Muon's
/// _adjust_lr): lr 0.2 sqrt(max(rows, cols)), or lr sqrt(max(1, rows / cols)).
double muon_matrix_rate(double lr, MuonLrAdjust adjust, int rows, int cols);

}  // namespace zt
