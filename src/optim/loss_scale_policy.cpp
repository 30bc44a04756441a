#include "ztrain/optim/loss_scale_policy.hpp"

#include <algorithm>
#include <cstdio>

#include "ztrain/core/error.hpp"

namespace zt {
namespace {

LossScalerConfig scaler_config(bool fp16, const PrecisionConfig& pr) {
    LossScalerConfig c;
    c.dynamic = fp16 && pr.loss_scale.dynamic;
    c.init_scale = !fp16 ? 1.0 : c.dynamic ? pr.init_scale : pr.loss_scale.fixed;
    c.growth_interval = pr.growth_interval;
    c.hysteresis = pr.hysteresis;
    c.min_scale = std::min(pr.min_scale, c.init_scale);
    return c;
}

}  // namespace

LossScalePolicy::LossScalePolicy(DType work, const PrecisionConfig& precision, int max_bad_steps)
    : m_fp16(work == DType::kF16),
      m_cfg(scaler_config(m_fp16, precision)),
      m_scaler(m_cfg),
      m_loss_scale_text(precision.loss_scale.text),
      m_max_bad_steps(max_bad_steps) {}

LossScalePolicy::Verdict LossScalePolicy::judge(bool non_finite, long step, double loss) {
    Verdict v;
    bool skipped = non_finite;
    if (m_fp16) {
        const LossScaler::Outcome outcome = m_scaler.update(non_finite);
        if (outcome == LossScaler::Outcome::kStuckAtMinimum) {
            v.stop_reason = str("step ", step, ": fp16 gradients overflow even at the minimum loss scale ",
                                m_scaler.scale(), " (precision.min_scale); the run cannot continue in fp16: try bf16, "
                                "a lower train.lr, or a lower precision.min_scale");
        }
        skipped = outcome != LossScaler::Outcome::kApplied;
    }
    if (!skipped) {
        m_bad_steps = 0;
        v.action = Action::kApply;
        return v;
    }
    ++m_bad_steps;
    // A dynamic fp16 scale stops at its floor (above); a fixed scale cannot change, so it is
    // bounded by train.max_bad_steps like bf16 and fp32.
    if (m_fp16 && !m_cfg.dynamic && m_bad_steps >= m_max_bad_steps) {
        v.stop_reason = str("step ", step, ": ", m_bad_steps, " consecutive steps with fp16 gradient overflow "
                            "at the static loss scale precision.loss_scale = ", m_loss_scale_text,
                            " (train.max_bad_steps = ", m_max_bad_steps, "): expected a scale the gradients "
                            "fit in fp16 at; lower precision.loss_scale or set it to dynamic");
    }
    if (!m_fp16 && m_bad_steps >= m_max_bad_steps) {
        v.stop_reason = str("step ", step, ": ", m_bad_steps, " consecutive steps with non-finite gradients "
                            "(train.max_bad_steps = ", m_max_bad_steps, "); last loss ", loss,
                            ". The run is diverging: lower train.lr or check the data");
    }
    v.action = v.stop_reason.empty() ? Action::kSkip : Action::kStop;
    return v;
}

LossScaleRecord LossScalePolicy::record() const {
    LossScaleRecord r;
    r.mode = mode();
    r.scale = m_scaler.scale();
    r.clean_steps = m_scaler.clean_steps();
    r.hysteresis_left = m_scaler.hysteresis_left();
    r.bad_steps = m_bad_steps;
    return r;
}

std::string LossScalePolicy::restore(const LossScaleRecord& saved) {
    m_bad_steps = saved.bad_steps;
    const bool same_scaler = saved.dtype == "fp16" && saved.mode == mode();
    if (m_fp16 && m_cfg.dynamic && same_scaler) {
        m_scaler.restore(saved.scale, saved.clean_steps, saved.hysteresis_left);
        return std::string();
    }
    if (!m_fp16 || (same_scaler && saved.scale == m_cfg.init_scale)) return std::string();
    const std::string written_with =
        saved.dtype == "fp16" ? str(" with a ", saved.mode, " loss scale ", saved.scale) : std::string();
    char init_scale[64];  // %g, as the note has always printed it
    std::snprintf(init_scale, sizeof init_scale, "%g", m_cfg.init_scale);
    return str("the checkpoint was written in ", saved.dtype, written_with, ": the fp16 loss scale ",
               m_cfg.dynamic ? "starts at " : "is ", init_scale, " (",
               m_cfg.dynamic ? "precision.init_scale" : "precision.loss_scale", ")");
}

}  // namespace zt
