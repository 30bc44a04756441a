// Fidelity of the Qwen2 and Qwen3 families against transformers' own modules
// (tests/reference/qwen_transformers.py): transformers makes a tiny random model and saves it
// (save_pretrained), ztrain reads it through model.from_hf and import_weights, and ztrain's
// fp32 loss and every gradient of one batch equal transformers' float64 ones within 1e-5
// relative, and a 20-step AdamW loss curve within 1e-4 (the pattern of
// test_llama_reference.cpp, with transformers' module as the model).
//
// Needs the interop environment (ZT_INTEROP_VENV, or .venv at the source root) with torch
// and transformers: skipped without it, failed under ZT_REQUIRE_INTEROP=1.
//
// Norm: per tensor, ||g_ztrain - g_ref||_2 / ||g_ref||_2 over the live elements (a padded
// vocabulary row's gradient must be 0); loss and curve: |a - b| / |b|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "interop_python.hpp"
#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {
namespace {

const char* kScript = ZT_SOURCE_DIR "/tests/reference/qwen_transformers.py";

using test::read_f64;
using test::write_npy;


struct Case {
    const char* name;
    const char* family;
    bool tied;
};

class QwenReference : public ::testing::TestWithParam<Case> {};

/// The model keys model.from_hf takes from dir/config.json.
ModelConfig from_hf(const std::string& dir) {
    Config c;
    for (const HfSetting& s : read_hf_config(dir)) set_config_value(c, s.key, s.text);
    return c.model;
}

/// The gradient of `p` (ztrain's layout) against transformers' (HF shape: live vocabulary
/// rows only); the padded rows' must be zero. Returns the relative error.
double gradient_error(const ParamSpec& p, const float* got, const std::string& dir, const ModelConfig& mc) {
    const bool vocab_rows = p.unit == 0;
    const size_t live = vocab_rows ? static_cast<size_t>(mc.vocab_size) * static_cast<size_t>(mc.n_embd) : p.numel;
    const std::vector<double> want = read_f64(str(dir, "/grad_", p.name, ".bin"), live);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < live; ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    for (size_t i = live; i < p.numel; ++i) EXPECT_EQ(got[i], 0.f) << p.name << " padded element " << i;
    return std::sqrt(diff / norm);
}

TEST_P(QwenReference, LossGradientsAndAdamWCurveMatchTransformers) {
    const std::string python = test::interop_python({"torch", "transformers"});
    ZT_SKIP_WITHOUT_INTEROP(python, "no python with torch and transformers (ZT_INTEROP_VENV)");
    const Case c = GetParam();
    const test::ScratchDir scratch(str("qwen-reference-", c.name));
    const std::string& dir = scratch.path();
    // The batch and the training settings first: one python process makes the model and
    // computes the reference (its imports cost more than the model).
    const int vocab = 37;
    const int B = 2;
    const int T = 8;
    TrainConfig tc;
    tc.lr = 2e-3;
    tc.weight_decay = 0.1;
    tc.grad_clip = 1.0;
    const int steps = 20;
    std::vector<int32_t> inputs(static_cast<size_t>(B * T)), targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(4, 1, i) % static_cast<uint64_t>(vocab));
        targets[i] = static_cast<int32_t>(random_bits(4, 2, i) % static_cast<uint64_t>(vocab));
    }
    targets[5] = -1;  // ignored
    const int counted = B * T - 1;
    const std::vector<size_t> shape{static_cast<size_t>(B), static_cast<size_t>(T)};
    write_npy(dir + "/tokens.npy", inputs.data(), "<i4", 4, shape);
    write_npy(dir + "/targets.npy", targets.data(), "<i4", 4, shape);
    const nlohmann::json train = {{"lr", tc.lr},     {"beta1", tc.beta1},
                                  {"beta2", tc.beta2}, {"eps", tc.eps},
                                  {"weight_decay", tc.weight_decay}, {"grad_clip", tc.grad_clip},
                                  {"steps", steps}};
    std::ofstream(dir + "/config_train.json") << train.dump(1);
    const std::string cmd =
        str(python, " ", kScript, " ", dir, " ", c.family, c.tied ? " tied " : " untied ", vocab, " ", T);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream ref_in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(ref_in);
    const ModelConfig mc = from_hf(dir);
    ASSERT_EQ(mc.arch.name(), c.family);
    ASSERT_EQ(mc.vocab_size, vocab);
    ASSERT_EQ(mc.seq_len, T);
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, B);
    ModelState state(model.layout(), *backend, 11);
    import_weights(dir, model.layout(), mc, state);

    state.zero_grads();
    const float loss = model.forward(state, inputs.data(), targets.data(), B, T, 1.0f / counted);
    model.backward(state);
    const double ref_loss = ref.at("loss").get<double>();
    EXPECT_LT(std::fabs(loss - ref_loss) / std::fabs(ref_loss), 1e-5) << loss << " vs " << ref_loss;
    double worst = 0;
    for (const ParamSpec& p : model.layout().params) {
        const double rel = gradient_error(p, state.grads(p.unit) + p.offset, dir, mc);
        EXPECT_LT(rel, 1e-5) << p.name;
        worst = std::max(worst, rel);
    }
    std::printf("[%s] loss %.9g (transformers float64 %.9g); largest gradient error %.2e\n", c.name, loss, ref_loss,
                worst);

    const std::vector<double> curve = ref.at("curve").get<std::vector<double>>();
    ASSERT_EQ(curve.size(), static_cast<size_t>(steps));
    double worst_curve = 0;
    for (int t = 1; t <= steps; ++t) {
        state.zero_grads();
        state.begin_micro_step(true, true);
        const float l = model.forward(state, inputs.data(), targets.data(), B, T, 1.0f / counted);
        model.backward(state);
        state.finish_grad_sync();
        AdamWStep sp = adamw_step_params(tc, tc.lr, t);
        sp.grad_scale = static_cast<float>(clip_multiplier(std::sqrt(state.grad_sum_squares()), tc.grad_clip));
        state.optimizer_step(sp);
        const double want = curve[static_cast<size_t>(t - 1)];
        EXPECT_LT(std::fabs(l - want) / std::fabs(want), 1e-4) << "step " << t << ": " << l << " vs " << want;
        worst_curve = std::max(worst_curve, std::fabs(l - want) / std::fabs(want));
    }
    std::printf("[%s] AdamW curve %.6g -> %.6g over %d steps; largest relative difference %.2e\n", c.name,
                curve.front(), curve.back(), steps, worst_curve);
    EXPECT_LT(curve.back(), 0.9 * curve.front()) << "the curve should go down";
}

INSTANTIATE_TEST_SUITE_P(Qwen, QwenReference,
                         ::testing::Values(Case{"qwen2_tied", "qwen2", true}, Case{"qwen3_untied", "qwen3", false}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace zt
