// Learning-rate schedules, AdamW step parameters, clipping and decay segmentation.
#include "ztrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "ztrain/core/error.hpp"

namespace zt {

std::vector<DecaySegment> decay_segments(const ModelLayout& layout, int unit, size_t range_begin,
                                         size_t range_end) {
    const size_t unit_end = layout.unit_numel[static_cast<size_t>(unit)];
    range_end = std::min(range_end, unit_end);
    std::vector<DecaySegment> out;
    auto push = [&](size_t b, size_t e, bool decay) {
        b = std::max(b, range_begin);
        e = std::min(e, range_end);
        if (b >= e) return;
        if (!out.empty() && out.back().end == b && out.back().decay == decay) {
            out.back().end = e;
        } else {
            out.push_back({b, e, decay});
        }
    };
    size_t cursor = 0;
    for (const ParamSpec& p : layout.params) {
        if (p.unit != unit) continue;
        push(cursor, p.offset, false);  // alignment gap
        // A frozen tensor (LoRA's base) is in no segment: AdamW never touches it.
        if (p.trainable) push(p.offset, p.offset + p.numel, p.decay);
        cursor = p.offset + p.numel;
    }
    push(cursor, unit_end, false);
    return out;
}

namespace {
/// wsd: lr until the decay's first step, then from lr to lr_min by its shape (as transformers'
/// get_wsd_schedule with min_lr_ratio = lr_min / lr), lr_min from `end` on.
double wsd_rate(const TrainConfig& cfg, long step, int end) {
    const int span = std::max(0, end - cfg.warmup_steps);
    const int decay = cfg.decay_steps > 0 ? std::min(cfg.decay_steps, std::max(1, span))
                                          : std::max(1, static_cast<int>(std::lround(cfg.decay_fraction * span)));
    const long decay_start = end - decay;
    if (step < decay_start) return cfg.lr;
    const double p = std::min(1.0, static_cast<double>(step - decay_start) / decay);
    double factor = 1.0 - p;
    if (cfg.decay_shape == DecayShape::kCosine) factor = 0.5 * (1.0 + std::cos(M_PI * p));
    if (cfg.decay_shape == DecayShape::kOneMinusSqrt) factor = 1.0 - std::sqrt(p);
    return cfg.lr_min + (cfg.lr - cfg.lr_min) * factor;
}
}  // namespace

double learning_rate(const TrainConfig& cfg, long step) {
    if (cfg.warmup_steps > 0 && step < cfg.warmup_steps) {
        return cfg.lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
    }
    if (cfg.schedule == LrSchedule::kConstant) return cfg.lr;
    const int end = cfg.schedule_steps > 0 ? cfg.schedule_steps : cfg.max_steps;
    if (cfg.schedule == LrSchedule::kWsd) return wsd_rate(cfg, step, end);
    const double span = std::max(1, end - cfg.warmup_steps);
    const double progress = std::clamp(static_cast<double>(step - cfg.warmup_steps) / span, 0.0, 1.0);
    if (cfg.schedule == LrSchedule::kLinear) return cfg.lr - (cfg.lr - cfg.lr_min) * progress;
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1.0 + std::cos(M_PI * progress));
}

AdamWStep adamw_step_params(const TrainConfig& cfg, double lr, long t) {
    AdamWStep s;
    s.lr = static_cast<float>(lr);
    s.beta1 = static_cast<float>(cfg.beta1);
    s.beta2 = static_cast<float>(cfg.beta2);
    s.eps = static_cast<float>(cfg.eps);
    s.weight_decay = static_cast<float>(cfg.weight_decay);
    // Bias corrections once per step here, so the per-element loop has no pow().
    s.bias_correction1 = static_cast<float>(1.0 - std::pow(cfg.beta1, static_cast<double>(t)));
    s.bias_correction2 = static_cast<float>(1.0 - std::pow(cfg.beta2, static_cast<double>(t)));
    return s;
}

double clip_multiplier(double grad_norm, double clip) {
    if (clip <= 0.0 || !(grad_norm > clip)) return 1.0;
    return clip / grad_norm;
}

}  // namespace zt
