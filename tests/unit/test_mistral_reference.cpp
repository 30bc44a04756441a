// The mistral family against transformers' own MistralForCausalLM (the reference is the
// library, not code written here): tests/reference/mistral_transformers.py makes a tiny
// random model with a sliding window shorter than the rows, saves it, and computes in
// float64 (eager attention, its sliding mask) the loss, every gradient and a 20-step AdamW
// curve; ztrain reads the saved directory (read_hf_config, import_weights) and computes the
// same in fp32: loss and every gradient within 1e-5 relative (per tensor, Frobenius), the
// curve within 1e-4. Needs the interop environment (ZT_INTEROP_VENV, else .venv at the
// source root): skipped without it, failed under ZT_REQUIRE_INTEROP=1.
//
// And without Python: a row packing two examples under a sliding window gives each example
// the loss it gives alone (the window and the segments combine, transformers' packed rows).
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
#include "ztrain/config/config.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"

namespace zt {
namespace {

const char* kScript = ZT_SOURCE_DIR "/tests/reference/mistral_transformers.py";
using test::read_f64;

/// ||got - want|| / ||want|| over a tensor's live rows (rows beyond vocab_size are padding).
double relative_error(const float* got, const std::vector<double>& want) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += want[i] * want[i];
    }
    return std::sqrt(diff / norm);
}

TEST(MistralReference, LossGradientsAndAdamWCurveMatchTransformers) {
    const std::string python = test::interop_python({"torch", "transformers"});
    ZT_SKIP_WITHOUT_INTEROP(python, "no interop environment with torch and transformers (ZT_INTEROP_VENV, .venv)");
    const test::ScratchDir scratch("mistral-reference");
    const std::string& dir = scratch.path();
    const std::string cmd = str(python, " ", kScript, " ", dir);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream ref_in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(ref_in);

    Config c;
    for (const HfSetting& s : read_hf_config(dir + "/model")) set_config_value(c, s.key, s.text);
    const ModelConfig mc = c.model;
    ASSERT_EQ(mc.arch, ModelArch("mistral"));
    ASSERT_EQ(mc.sliding_window, ref.at("window").get<int>());
    const int B = ref.at("B").get<int>();
    const int T = ref.at("T").get<int>();
    ASSERT_LT(mc.sliding_window, T) << "the window must be shorter than the rows";
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, B);
    ModelState state(model.layout(), *backend, 1);
    import_weights(dir + "/model", model.layout(), mc, state);
    std::vector<int32_t> inputs, targets;
    test::reference_rows(ref.at("tokens"), T, &inputs, &targets);
    const float dloss = 1.0f / static_cast<float>(B * T);

    state.zero_grads();
    const float loss = model.forward(state, inputs.data(), targets.data(), B, T, dloss);
    model.backward(state);
    const double ref_loss = ref.at("loss").get<double>();
    EXPECT_LT(std::fabs(loss - ref_loss) / ref_loss, 1e-5) << loss << " vs " << ref_loss;
    double worst = 0;
    for (const ParamSpec& p : model.layout().params) {
        const size_t live = p.unit == 0 ? static_cast<size_t>(mc.vocab_size) * mc.n_embd : p.numel;
        const std::vector<double> want = read_f64(str(dir, "/grad_", p.name, ".bin"), live);
        const double rel = relative_error(state.grads(p.unit) + p.offset, want);
        EXPECT_LT(rel, 1e-5) << p.name;
        worst = std::max(worst, rel);
    }
    std::printf("[mistral, window %d of %d] loss %.9g (transformers %.9g); largest gradient error %.2e\n",
                mc.sliding_window, T, loss, ref_loss, worst);

    const TrainConfig tc = test::reference_adamw();  // mistral_transformers.py's LR, BETA1, ...
    const std::vector<double> curve = ref.at("curve").get<std::vector<double>>();
    double worst_curve = 0;
    for (int t = 1; t <= static_cast<int>(curve.size()); ++t) {
        state.zero_grads();
        state.begin_micro_step(true, true);
        const float l = model.forward(state, inputs.data(), targets.data(), B, T, dloss);
        model.backward(state);
        state.finish_grad_sync();
        AdamWStep sp = adamw_step_params(tc, tc.lr, t);
        sp.grad_scale = static_cast<float>(clip_multiplier(std::sqrt(state.grad_sum_squares()), tc.grad_clip));
        state.optimizer_step(sp);
        const double want = curve[static_cast<size_t>(t - 1)];
        EXPECT_LT(std::fabs(l - want) / want, 1e-4) << "step " << t << ": " << l << " vs " << want;
        worst_curve = std::max(worst_curve, std::fabs(l - want) / want);
    }
    std::printf("AdamW curve %.6g -> %.6g; largest relative difference %.2e\n", curve.front(), curve.back(),
                worst_curve);
}

/// A small mistral: the numpy-reference Llama with a window of 3 and 24 positions.
ModelConfig small_mistral() {
    ModelConfig m = test::small_llama(2, false, false);
    m.arch = ModelArch("mistral");
    m.seq_len = 24;
    m.sliding_window = 3;
    return m;
}

TEST(MistralPacked, EachExampleUnderTheWindowAsIfAlone) {
    const ModelConfig mc = small_mistral();
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 5);
    const int T = mc.seq_len;
    const int first = 10;  // example A: positions [0, 10), example B: [10, 24)
    std::vector<int32_t> inputs(static_cast<size_t>(T)), targets(inputs.size());
    std::vector<int32_t> positions(inputs.size()), segment(inputs.size());
    for (int t = 0; t < T; ++t) {
        inputs[static_cast<size_t>(t)] = (t * 7 + 3) % mc.vocab_size;
        targets[static_cast<size_t>(t)] = (t * 5 + 1) % mc.vocab_size;
        positions[static_cast<size_t>(t)] = t < first ? t : t - first;
        segment[static_cast<size_t>(t)] = t < first ? 0 : first;
    }
    const TokenRows rows{positions.data(), segment.data()};
    for (const auto& [start, len] : {std::pair<int, int>{0, first}, std::pair<int, int>{first, T - first}}) {
        // The packed row with targets on this example only, against the example alone.
        std::vector<int32_t> only(targets.size(), -1);
        std::copy(targets.begin() + start, targets.begin() + start + len, only.begin() + start);
        const float packed = model.forward(state, inputs.data(), only.data(), 1, T, 1.0f / len, rows);
        const float alone = model.forward(state, inputs.data() + start, targets.data() + start, 1, len, 1.0f / len);
        EXPECT_NEAR(packed, alone, 1e-6 * std::fabs(alone)) << "example at " << start << " of length " << len;
    }
}

}  // namespace
}  // namespace zt
