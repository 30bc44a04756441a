// The loss-scale policy: given one step's agreed overflow flag, says whether the step's
// update is applied, skipped, or whether the run must stop (and why).
//
// fp16 keeps its gradients in range with a LossScaler (loss_scaler.hpp): dynamic (backs off
// on overflow; an overflow at the floor with the hysteresis spent stops the run) or static
// (precision.loss_scale = N; overflowing steps are skipped, train.max_bad_steps consecutive
// ones stop the run). bf16 and fp32 run unscaled (scale 1) but still skip non-finite steps,
// bounded by train.max_bad_steps. Not here: computing the overflow flag or the gradient norm
// (ModelState), and printing (the trainer's reporter).
#pragma once

#include <string>

#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/optim/loss_scaler.hpp"

namespace zt {

/// The policy's state as a checkpoint keeps it.
struct LossScaleRecord {
    std::string dtype;         ///< working dtype of the run that wrote it ("fp16", ...)
    std::string mode;          ///< "dynamic" | "static" | "none"
    double scale = 1.0;
    int clean_steps = 0;
    int hysteresis_left = 0;
    int bad_steps = 0;         ///< consecutive skipped steps
};

class LossScalePolicy {
  public:
    enum class Action {
        kApply,  ///< finite gradients: apply the update
        kSkip,   ///< non-finite gradients: skip the update, train on
        kStop    ///< skip the update, then stop the run with `stop_reason`
    };
    struct Verdict {
        Action action = Action::kApply;
        std::string stop_reason;  ///< kStop only
        bool skipped() const { return action != Action::kApply; }
    };

    LossScalePolicy(DType work, const PrecisionConfig& precision, int max_bad_steps);

    /// The scale the next step's loss is multiplied by (1 outside fp16).
    double scale() const { return m_scaler.scale(); }
    bool fp16() const { return m_fp16; }
    bool dynamic() const { return m_cfg.dynamic; }
    /// "dynamic" | "static" (fp16) | "none" (bf16, fp32): how the scale is kept.
    const char* mode() const { return !m_fp16 ? "none" : m_cfg.dynamic ? "dynamic" : "static"; }

    /// Feeds 1-based step `step`'s agreed overflow flag; `loss` goes into a stop message.
    /// Every input is agreed across ranks, so every rank returns the same verdict.
    Verdict judge(bool non_finite, long step, double loss);

    LossScaleRecord record() const;
    /// Continues from a checkpoint's state: the bad-step count always; the scaler only where
    /// it means the same thing (an fp16 checkpoint of this dynamic mode: a static scale is
    /// the deck's, a bf16/fp32 checkpoint saved scale 1). Returns a note for the user when
    /// the fp16 scale does not continue from the checkpoint (empty otherwise).
    std::string restore(const LossScaleRecord& saved);

  private:
    bool m_fp16;
    LossScalerConfig m_cfg;
    LossScaler m_scaler;
    std::string m_loss_scale_text;  ///< precision.loss_scale as written, for messages
    int m_max_bad_steps;
    int m_bad_steps = 0;
};

}  // namespace zt
