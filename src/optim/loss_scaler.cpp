#include "ztrain/optim/loss_scaler.hpp"

#include <algorithm>

#include "ztrain/core/error.hpp"

namespace zt {

LossScaler::LossScaler(const LossScalerConfig& cfg)
    : m_cfg(cfg), m_scale(cfg.init_scale), m_hysteresis_left(std::max(1, cfg.hysteresis)) {
    ZT_REQUIRE(cfg.init_scale > 0 && cfg.min_scale > 0, "loss scales must be positive");
}

LossScaler::Outcome LossScaler::update(bool overflow) {
    if (!overflow) {
        if (m_cfg.dynamic && ++m_clean_steps >= m_cfg.growth_interval) {
            m_scale *= m_cfg.growth_factor;
            m_clean_steps = 0;
            m_hysteresis_left = std::max(1, m_cfg.hysteresis);
        }
        return Outcome::kApplied;
    }
    m_clean_steps = 0;
    if (!m_cfg.dynamic) return Outcome::kSkipped;
    if (--m_hysteresis_left > 0) return Outcome::kSkipped;
    m_hysteresis_left = std::max(1, m_cfg.hysteresis);
    if (m_scale <= m_cfg.min_scale) return Outcome::kStuckAtMinimum;
    m_scale = std::max(m_scale * m_cfg.backoff_factor, m_cfg.min_scale);
    return Outcome::kSkipped;
}

void LossScaler::restore(double scale, int clean_steps, int hysteresis_left) {
    m_scale = scale;
    m_clean_steps = clean_steps;
    m_hysteresis_left = hysteresis_left;
}

}  // namespace zt
