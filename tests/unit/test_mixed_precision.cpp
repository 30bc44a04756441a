// Mixed precision on one rank: fp16 gradients underflow without loss scaling on a case built
// for it, and survive with it; the memory record follows the per-dtype formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

#include "test_support.hpp"

namespace zt {
namespace {

ModelConfig small_model() { return test::model_config(1, 2, 16, 8, 32); }

/// Feeds every unit a gradient of `g * scale` through the UnitStore path backward uses and
/// returns the unscaled global gradient norm the trainer would compute.
double stored_grad_norm(ModelState& state, int units, size_t numel_total, float g, double scale) {
    state.zero_grads();
    state.begin_micro_step(true, true);
    for (int u = units - 1; u >= 0; --u) {
        float* buf = state.grads(u);
        for (size_t i = 0; i < state.layout().unit_numel[static_cast<size_t>(u)]; ++i) {
            buf[i] = static_cast<float>(g * scale);
        }
        state.grads_done(u);
    }
    state.finish_grad_sync();
    (void)numel_total;
    return std::sqrt(state.grad_sum_squares()) / scale;
}

// Gradients of 1e-8 lie below fp16's smallest subnormal (2^-24 ~ 6e-8, and below half of it
// they round to zero). A real model produces such gradients in its small-signal parameters;
// here every gradient is 1e-8 so the effect is exact and visible in the norm.
TEST(MixedPrecision, Fp16GradientsUnderflowWithoutLossScalingAndSurviveWithIt) {
    const ModelConfig mc = small_model();
    auto backend = make_cpu_backend(1);
    const ModelLayout layout = make_model_layout(mc);
    ModelState state(layout, *backend, self_communicator(),
                     StateOptions::zero(0).with_seed(1).in(DType::kF16, DType::kF16));
    const double expected = 1e-8 * std::sqrt(static_cast<double>(layout.total_numel));
    const double unscaled = stored_grad_norm(state, layout.num_units(), layout.total_numel, 1e-8f, 1.0);
    EXPECT_EQ(unscaled, 0.0) << "without scaling, fp16 should flush 1e-8 gradients to zero";
    const double scaled = stored_grad_norm(state, layout.num_units(), layout.total_numel, 1e-8f, 65536.0);
    EXPECT_NEAR(scaled, expected, 1e-3 * expected) << "with scale 2^16 the gradient survives fp16 storage";
    // bf16 has fp32's exponent range: no underflow even unscaled.
    ModelState bf(layout, *backend, self_communicator(),
                  StateOptions::zero(0).with_seed(1).in(DType::kBF16, DType::kBF16));
    const double bf_norm = stored_grad_norm(bf, layout.num_units(), layout.total_numel, 1e-8f, 1.0);
    EXPECT_NEAR(bf_norm, expected, 1e-2 * expected);
}

// Model-state bytes per dtype and stage on one rank (N = 1), against the formulas with
// w = working dtype size: params w*P, grads w*P, master 4P (16-bit only), AdamW 8P.
TEST(MixedPrecision, MemoryFollowsThePerDtypeFormulas) {
    const ModelConfig mc = small_model();
    auto backend = make_cpu_backend(1);
    const ModelLayout layout = make_model_layout(mc);
    double P = 0;
    for (const auto& p : layout.params) P += static_cast<double>(p.numel);
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        for (int stage = 0; stage <= 3; ++stage) {
            ModelState state(layout, *backend, self_communicator(), StateOptions::zero(stage).with_seed(1).in(t, t));
            const StateBytes b = state.bytes();
            const double w = static_cast<double>(dtype_size(t));
            const double master = t == DType::kF32 ? 0.0 : 4.0;
            EXPECT_NEAR(b.params, w * P, 0.05 * w * P) << dtype_name(t) << " stage " << stage;
            EXPECT_NEAR(b.grads, w * P, 0.05 * w * P) << dtype_name(t) << " stage " << stage;
            EXPECT_NEAR(b.master, master * P, 0.05 * master * P + 1) << dtype_name(t) << " stage " << stage;
            EXPECT_NEAR(b.optimizer, 8 * P, 0.05 * 8 * P) << dtype_name(t) << " stage " << stage;
            EXPECT_NEAR(b.model_state(), 16 * P, 0.05 * 16 * P) << dtype_name(t) << " stage " << stage;
        }
    }
}

}  // namespace
}  // namespace zt
