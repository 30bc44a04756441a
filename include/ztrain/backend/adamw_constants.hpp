// AdamW's per-step constants, derived once from an AdamWStep for every backend: the CPU and
// CUDA kernels read the same numbers (1 - beta, 1 / bias correction) formed in one place,
// which also refuses a non-positive bias correction.
#pragma once

#include "ztrain/backend/backend.hpp"

namespace zt {

struct AdamWConstants {
    float lr;
    float beta1;
    float one_minus_beta1;
    float beta2;
    float one_minus_beta2;
    float eps;
    float weight_decay;
    float inv_bc1;  ///< 1 / (1 - beta1^t)
    float inv_bc2;  ///< 1 / (1 - beta2^t)
    float grad_scale;
};

/// Throws zt::Error when a bias correction is not positive (a step count below 1).
AdamWConstants adamw_constants(const AdamWStep& step);

}  // namespace zt
