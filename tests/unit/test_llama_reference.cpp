// Fidelity of the Llama model against an independent float64 numpy reference of Hugging
// Face's LlamaForCausalLM (tests/reference/llama_reference.py): the fp32 loss and every
// gradient of one batch, and a 20-step AdamW loss curve from the same weights; also on rows
// of packed examples (per-token positions, block-diagonal causal mask, prompt and padding
// targets masked), which the reference computes with HF's position_ids and a 4-D mask.
// Skipped (GTEST_SKIP) where python3 with numpy is not available.
//
// Norm: per tensor, ||g_ztrain - g_ref||_2 / ||g_ref||_2 (Frobenius, over all elements,
// padded vocabulary rows included: both are zero there); loss and curve: |a - b| / |b|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"

#include "test_support.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

const char* kScript = ZT_SOURCE_DIR "/tests/reference/llama_reference.py";

using test::numpy_python;
using test::read_f64;
using test::write_npy;

struct Case {
    const char* name;
    int n_kv_head;
    bool tied;
    bool llama3;
    bool packed = false;  ///< rows of packed examples (PackedRows)
};

/// Two rows of 8: examples of 3 and 5 positions, then one of 6 and 2 padding positions
/// (no target, attending to themselves); the first position of each example is a prompt.
struct PackedRows {
    std::vector<int32_t> positions, segment_start;
    PackedRows() {
        const int starts[2][3] = {{0, 3, 8}, {0, 6, 8}};
        for (int r = 0; r < 2; ++r) {
            for (int t = 0; t < 8; ++t) {
                const int s = t < starts[r][1] ? starts[r][0] : (r == 1 ? t : starts[r][1]);
                positions.push_back(t - s);
                segment_start.push_back(s);
            }
        }
    }
    /// Targets only where a token follows the first of its example, within it.
    void mask(std::vector<int32_t>& targets) const {
        for (size_t i = 0; i < targets.size(); ++i) {
            const bool padding = i >= 14;
            if (padding || positions[i] == 0) targets[i] = -1;
        }
    }
};

class LlamaReference : public ::testing::TestWithParam<Case> {};

TEST_P(LlamaReference, LossGradientsAndAdamWCurveMatchNumpy) {
    const std::string python = numpy_python();
    if (python.empty()) GTEST_SKIP() << "no python3 with numpy ($ZT_PYTHON, python3, /usr/bin/python3)";
    const Case c = GetParam();
    const ModelConfig mc = test::small_llama(c.n_kv_head, c.tied, c.llama3);
    const TrainConfig tc = test::reference_adamw();
    const int steps = 20;
    const int B = 2;
    const int T = mc.seq_len;
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, B);
    ModelState state(model.layout(), *backend, 11);
    const ModelLayout& layout = model.layout();
    // Weights larger than the init (std 0.02) so every nonlinearity does real work.
    for (int u = 0; u < layout.num_units(); ++u) {
        float* w = ModelStateTestAccess::unit_params(state, u);
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u) continue;
            const size_t live = p.unit == 0 ? static_cast<size_t>(mc.vocab_size) * mc.n_embd : p.numel;
            for (size_t i = 0; i < live; ++i) {
                w[p.offset + i] += static_cast<float>(0.2 * random_normal(9, 3, p.global_index + i));
            }
        }
    }
    std::vector<int32_t> inputs(static_cast<size_t>(B * T)), targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(4, 1, i) % static_cast<uint64_t>(mc.vocab_size));
        targets[i] = static_cast<int32_t>(random_bits(4, 2, i) % static_cast<uint64_t>(mc.vocab_size));
    }
    targets[5] = -1;  // ignored, as HF's ignore_index
    const PackedRows packed;
    if (c.packed) packed.mask(targets);
    const TokenRows rows = c.packed ? TokenRows{packed.positions.data(), packed.segment_start.data()} : TokenRows{};
    const int counted = static_cast<int>(std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }));

    const test::ScratchDir scratch(str("llama-reference-", c.name));
    const std::string& dir = scratch.path();
    nlohmann::json cfg = {{"n_layer", mc.n_layer},
                          {"n_head", mc.n_head},
                          {"n_kv_head", mc.kv_heads()},
                          {"n_embd", mc.n_embd},
                          {"ffn_dim", mc.ffn_dim},
                          {"vocab_size", mc.vocab_size},
                          {"rope_theta", mc.rope_theta},
                          {"rope_scaling", setting_text(mc.rope_scaling)},
                          {"rope_factor", mc.rope_factor},
                          {"rope_low_freq_factor", mc.rope_low_freq_factor},
                          {"rope_high_freq_factor", mc.rope_high_freq_factor},
                          {"rope_original_context", mc.rope_original_context},
                          {"norm_eps", mc.norm_eps},
                          {"tie_embeddings", mc.tie_embeddings},
                          {"lr", tc.lr},
                          {"beta1", tc.beta1},
                          {"beta2", tc.beta2},
                          {"eps", tc.eps},
                          {"weight_decay", tc.weight_decay},
                          {"grad_clip", tc.grad_clip},
                          {"steps", steps}};
    for (const ParamSpec& p : layout.params) {
        cfg["tensors"].push_back(p.name);
        write_npy(str(dir, "/", p.name, ".npy"), ModelStateTestAccess::unit_params(state, p.unit) + p.offset, "<f4", 4, p.shape);
    }
    std::ofstream(dir + "/config.json") << cfg.dump(1);
    write_npy(dir + "/tokens.npy", inputs.data(), "<i4", 4, {static_cast<size_t>(B), static_cast<size_t>(T)});
    write_npy(dir + "/targets.npy", targets.data(), "<i4", 4, {static_cast<size_t>(B), static_cast<size_t>(T)});
    if (c.packed) {
        const std::vector<size_t> shape{static_cast<size_t>(B), static_cast<size_t>(T)};
        write_npy(dir + "/positions.npy", packed.positions.data(), "<i4", 4, shape);
        write_npy(dir + "/segment_start.npy", packed.segment_start.data(), "<i4", 4, shape);
    }
    const std::string cmd = str(python, " ", kScript, " ", dir, " --selfcheck");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream ref_in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(ref_in);

    // One forward/backward: the gradient of the mean loss (dloss = 1 / counted rows).
    state.zero_grads();
    const float loss = model.forward(state, inputs.data(), targets.data(), B, T, 1.0f / counted, rows);
    model.backward(state);
    const double ref_loss = ref.at("loss").get<double>();
    EXPECT_LT(std::fabs(loss - ref_loss) / std::fabs(ref_loss), 1e-5) << loss << " vs " << ref_loss;
    double worst = 0;
    std::string worst_name;
    for (const ParamSpec& p : layout.params) {
        const std::vector<double> want = read_f64(str(dir, "/grad_", p.name, ".bin"), p.numel);
        const float* got = state.grads(p.unit) + p.offset;
        double diff = 0, norm = 0;
        for (size_t i = 0; i < p.numel; ++i) {
            diff += (got[i] - want[i]) * (got[i] - want[i]);
            norm += want[i] * want[i];
        }
        const double rel = std::sqrt(diff / norm);
        EXPECT_LT(rel, 1e-5) << p.name;
        if (rel > worst) {
            worst = rel;
            worst_name = p.name;
        }
    }
    std::printf("[%s] loss %.9g (reference %.9g, relative %.2e); largest gradient error %.2e (%s)\n", c.name, loss,
                ref_loss, std::fabs(loss - ref_loss) / std::fabs(ref_loss), worst, worst_name.c_str());

    // The AdamW curve, taken as the stages' step takes it (stage_training.cpp).
    const std::vector<double> curve = ref.at("curve").get<std::vector<double>>();
    ASSERT_EQ(curve.size(), static_cast<size_t>(steps));
    double worst_curve = 0;
    for (int t = 1; t <= steps; ++t) {
        state.zero_grads();
        state.begin_micro_step(true, true);
        const float l = model.forward(state, inputs.data(), targets.data(), B, T, 1.0f / counted, rows);
        model.backward(state);
        state.finish_grad_sync();
        const double norm = std::sqrt(state.grad_sum_squares());
        AdamWStep sp = adamw_step_params(tc, tc.lr, t);
        sp.grad_scale = static_cast<float>(clip_multiplier(norm, tc.grad_clip));
        state.optimizer_step(sp);
        const double rel = std::fabs(l - curve[static_cast<size_t>(t - 1)]) / std::fabs(curve[static_cast<size_t>(t - 1)]);
        EXPECT_LT(rel, 1e-4) << "step " << t << ": " << l << " vs " << curve[static_cast<size_t>(t - 1)];
        worst_curve = std::max(worst_curve, rel);
    }
    std::printf("[%s] AdamW curve %.6g -> %.6g over %d steps; largest relative loss difference %.2e\n", c.name,
                curve.front(), curve.back(), steps, worst_curve);
    EXPECT_LT(curve.back(), 0.9 * curve.front()) << "the curve should go down";
}

INSTANTIATE_TEST_SUITE_P(Llama, LlamaReference,
                         ::testing::Values(Case{"gqa_tied", 2, true, false}, Case{"mha_untied", 4, false, false},
                                           Case{"gqa_untied_llama3", 1, false, true},
                                           Case{"gqa_packed_examples", 2, true, false, true},
                                           Case{"mha_untied_packed_llama3", 4, false, true, true}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace zt
