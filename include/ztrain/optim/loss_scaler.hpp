// Loss scaling for fp16 training: a small state machine, kept apart from everything else so
// it can be tested as one.
//
// Dynamic mode (the common frameworks' defaults): start at init_scale (2^16); after
// growth_interval consecutive clean steps multiply by growth_factor (2); on an overflowing
// step skip the update and, once `hysteresis` overflows have been seen since the last
// growth or backoff, multiply by backoff_factor (0.5), never below min_scale (1). An overflow
// when the scale is already at the minimum and the hysteresis is spent cannot be fixed by
// scaling: update() reports it, and the trainer stops with a message.
// Static mode keeps the scale fixed (overflowing steps are still skipped); scale 1 in
// static mode is "no scaling".
#pragma once

#include <cstdint>

namespace zt {

struct LossScalerConfig {
    bool dynamic = true;
    double init_scale = 65536.0;
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int growth_interval = 2000;
    int hysteresis = 2;
    double min_scale = 1.0;
};

class LossScaler {
  public:
    enum class Outcome {
        kApplied,        ///< clean step: apply the update
        kSkipped,        ///< overflow: skip the update (scale may have been reduced)
        kStuckAtMinimum  ///< overflow at the minimum scale with hysteresis spent: give up
    };

    explicit LossScaler(const LossScalerConfig& cfg);
    double scale() const { return m_scale; }
    /// Feeds one step's agreed overflow flag; returns what to do with the step.
    Outcome update(bool overflow);

    // State, for checkpoints and tests.
    int clean_steps() const { return m_clean_steps; }
    int hysteresis_left() const { return m_hysteresis_left; }
    void restore(double scale, int clean_steps, int hysteresis_left);

  private:
    LossScalerConfig m_cfg;
    double m_scale;
    int m_clean_steps = 0;
    int m_hysteresis_left;
};

}  // namespace zt
