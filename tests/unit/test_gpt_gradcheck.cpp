// Whole-model gradient check: every element of every parameter tensor, analytic gradient
// against a central finite difference of the loss, so a wrong gradient anywhere fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/parallel/model_state.hpp"

#include "test_support.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

/// Vocabulary 11 padded to 16: exercises the padded LM-head columns.
ModelConfig tiny_model() { return test::model_config(2, 2, 8, 6, 11, /*vocab_pad_to=*/8); }

/// Llama with grouped-query attention (2 query heads share 1 key/value head, head size 4),
/// a tied or untied head, and a large RoPE angle step (theta 10) so rotation matters at 6
/// positions.
ModelConfig tiny_llama(bool tied, int n_kv_head) {
    ModelConfig mc = tiny_model();
    mc.arch = ModelArch("llama");
    mc.n_kv_head = n_kv_head;
    mc.ffn_dim = 12;
    mc.rope_theta = 10;
    mc.tie_embeddings = tied;
    return mc;
}

void check_every_tensor(const ModelConfig& mc) {
    auto backend = make_cpu_backend(1);
    const int B = 2;
    const int T = mc.seq_len;
    Transformer model(mc, *backend, B);
    ModelState state(model.layout(), *backend, 42);
    // Larger-than-init weights give the nonlinearities (GELU, softmax, LayerNorm) real work.
    for (int u = 0; u < model.layout().num_units(); ++u) {
        float* w = ModelStateTestAccess::unit_params(state, u);
        for (size_t i = 0; i < model.layout().unit_numel[static_cast<size_t>(u)]; ++i) {
            w[i] += static_cast<float>(0.3 * random_normal(7, 99, static_cast<uint64_t>(u) * 100000 + i));
        }
    }
    std::vector<int32_t> inputs(static_cast<size_t>(B * T));
    std::vector<int32_t> targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(3, 1, i) % static_cast<uint64_t>(mc.vocab_size));
        targets[i] = static_cast<int32_t>(random_bits(3, 2, i) % static_cast<uint64_t>(mc.vocab_size));
    }
    targets[3] = -1;  // an ignored position must not contribute
    const int counted = B * T - 1;

    // Analytic gradient of the summed loss (dloss = 1).
    state.zero_grads();
    model.forward(state, inputs.data(), targets.data(), B, T, 1.0f);
    model.backward(state);

    auto summed_loss = [&]() {
        return static_cast<double>(model.forward(state, inputs.data(), targets.data(), B, T, 0.f)) * counted;
    };

    // Central differences element by element (the model is small enough: ~6k parameters),
    // Richardson-extrapolated from steps eps and eps/2 so the O(eps^2) truncation error
    // cancels. fp32 loss ~30 carries ~2e-6 rounding, ~1e-4 after division by the step.
    // Measured on this model (correct code): the largest |analytic - numeric| over all
    // ~6k elements is 3.0e-4, and 0.55% relative where |g| > 0.03. The tolerance
    // (0.2% + 6e-4) sits 2x above that floor, so a 1% error in one element of a gradient
    // with |g| > 0.1 fails, as do wrong factors, missing terms and transposed indices.
    const double eps = 2e-2;
    for (const ParamSpec& p : model.layout().params) {
        float* w = ModelStateTestAccess::unit_params(state, p.unit) + p.offset;
        const float* g = state.grads(p.unit) + p.offset;
        size_t bad = 0;
        size_t worst_i = 0;
        double worst_excess = -1.0;
        double worst_a = 0.0, worst_n = 0.0;
        for (size_t i = 0; i < p.numel; ++i) {
            const float saved = w[i];
            auto central = [&](double h) {
                w[i] = saved + static_cast<float>(h);
                const double up = summed_loss();
                w[i] = saved - static_cast<float>(h);
                const double down = summed_loss();
                w[i] = saved;
                return (up - down) / (2 * h);
            };
            const double numeric = (4 * central(eps / 2) - central(eps)) / 3;
            const double analytic = g[i];
            const double tol = 2e-3 * std::max(std::fabs(numeric), std::fabs(analytic)) + 6e-4;
            const double excess = std::fabs(analytic - numeric) - tol;
            if (excess > 0) ++bad;
            if (excess > worst_excess) {
                worst_excess = excess;
                worst_i = i;
                worst_a = analytic;
                worst_n = numeric;
            }
        }
        EXPECT_EQ(bad, 0u) << "tensor " << p.name << ": " << bad << " of " << p.numel
                           << " elements disagree; worst element " << worst_i << ": analytic " << worst_a
                           << " vs finite difference " << worst_n;
    }
}

TEST(GptGradcheck, EveryTensorMatchesFiniteDifferences) { check_every_tensor(tiny_model()); }

// Llama: RMSNorm, RoPE, grouped-query attention, SwiGLU, tied and untied heads.
TEST(LlamaGradcheck, EveryTensorMatchesFiniteDifferencesGqaTied) { check_every_tensor(tiny_llama(true, 1)); }
TEST(LlamaGradcheck, EveryTensorMatchesFiniteDifferencesMhaUntied) { check_every_tensor(tiny_llama(false, 2)); }

/// Qwen2: Llama's block with q|k|v biases (every element checked, the biases included).
ModelConfig tiny_qwen2(bool tied, int n_kv_head) {
    ModelConfig mc = tiny_llama(tied, n_kv_head);
    mc.arch = ModelArch("qwen2");
    mc.qkv_bias = true;
    return mc;
}

/// Qwen3: q and k head norms before rotary, a head size (6) other than n_embd / n_head (4).
ModelConfig tiny_qwen3(bool tied, int n_kv_head) {
    ModelConfig mc = tiny_llama(tied, n_kv_head);
    mc.arch = ModelArch("qwen3");
    mc.qk_norm = true;
    mc.head_dim = 6;
    return mc;
}

TEST(QwenGradcheck, EveryTensorMatchesFiniteDifferencesQwen2GqaTied) { check_every_tensor(tiny_qwen2(true, 1)); }
TEST(QwenGradcheck, EveryTensorMatchesFiniteDifferencesQwen2MhaUntied) { check_every_tensor(tiny_qwen2(false, 2)); }
TEST(QwenGradcheck, EveryTensorMatchesFiniteDifferencesQwen3GqaTied) { check_every_tensor(tiny_qwen3(true, 1)); }
TEST(QwenGradcheck, EveryTensorMatchesFiniteDifferencesQwen3MhaUntied) { check_every_tensor(tiny_qwen3(false, 2)); }

void check_padded_rows(const ModelConfig& mc, const std::vector<std::string>& tensors) {
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, 1);
    ModelState state(model.layout(), *backend, 1);
    std::vector<int32_t> inputs{1, 2, 3, 4, 5, 6};
    std::vector<int32_t> targets{2, 3, 4, 5, 6, 7};
    state.zero_grads();
    model.forward(state, inputs.data(), targets.data(), 1, 6, 1.0f);
    model.backward(state);
    for (const std::string& name : tensors) {
        const ParamSpec& wte = model.layout().find(name);
        const float* g = state.grads(0) + wte.offset;
        const float* w = ModelStateTestAccess::unit_params(state, 0) + wte.offset;
        for (size_t i = static_cast<size_t>(mc.vocab_size) * mc.n_embd; i < wte.numel; ++i) {
            ASSERT_EQ(g[i], 0.f) << "padded " << name << " element " << i << " got gradient";
            ASSERT_EQ(w[i], 0.f) << "padded " << name << " element " << i << " was initialized nonzero";
        }
    }
}

TEST(GptGradcheck, PaddedVocabularyRowsGetNoGradient) { check_padded_rows(tiny_model(), {"wte.weight"}); }
TEST(LlamaGradcheck, PaddedVocabularyRowsGetNoGradient) {
    check_padded_rows(tiny_llama(false, 1), {"model.embed_tokens.weight", "lm_head.weight"});
}

// Activation recomputation changes memory, not math: the same loss and bit-identical
// gradients, with fewer activation bytes. Recomputing the attention probabilities alone
// keeps more than recomputing whole blocks and less than keeping everything.
void check_recompute(ModelConfig mc) {
    mc.n_layer = 3;
    auto backend = make_cpu_backend(1);
    const int B = 2;
    const int T = mc.seq_len;
    std::vector<int32_t> inputs(static_cast<size_t>(B * T)), targets(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>(random_bits(8, 1, i) % static_cast<uint64_t>(mc.vocab_size));
        targets[i] = static_cast<int32_t>(random_bits(8, 2, i) % static_cast<uint64_t>(mc.vocab_size));
    }
    Transformer plain(mc, *backend, B);
    ModelState a(plain.layout(), *backend, 5);
    a.zero_grads();
    const float la = plain.forward(a, inputs.data(), targets.data(), B, T, 1.f);
    plain.backward(a);
    size_t kept = plain.activation_bytes();
    for (const ActivationRecompute what : {ActivationRecompute::kAttention, ActivationRecompute::kBlocks}) {
        Transformer recompute(mc, *backend, B, TransformerOptions().with_recompute(what));
        ModelState b(recompute.layout(), *backend, 5);
        b.zero_grads();
        const float lb = recompute.forward(b, inputs.data(), targets.data(), B, T, 1.f);
        recompute.backward(b);
        EXPECT_EQ(la, lb) << "recompute " << setting_text(what);
        for (int u = 0; u < plain.layout().num_units(); ++u) {
            const size_t n = plain.layout().unit_numel[static_cast<size_t>(u)];
            EXPECT_EQ(std::memcmp(a.grads(u), b.grads(u), n * sizeof(float)), 0)
                << "recompute " << setting_text(what) << ": unit " << u << " gradients differ";
        }
        EXPECT_LT(recompute.activation_bytes(), kept) << "recompute " << setting_text(what);
        kept = recompute.activation_bytes();
    }
}

TEST(GptRecompute, SameLossAndGradientsWithLessActivationMemory) { check_recompute(tiny_model()); }
TEST(LlamaRecompute, SameLossAndGradientsWithLessActivationMemory) { check_recompute(tiny_llama(false, 1)); }
TEST(QwenRecompute, SameLossAndGradientsWithLessActivationMemory) {
    check_recompute(tiny_qwen2(false, 1));
    check_recompute(tiny_qwen3(true, 1));
}
// A sliding window shorter than the rows: the rebuilt probabilities take the same mask.
TEST(MistralRecompute, SameLossAndGradientsWithLessActivationMemory) {
    ModelConfig mc = tiny_llama(false, 1);
    mc.arch = ModelArch("mistral");
    mc.sliding_window = mc.seq_len / 2;
    check_recompute(mc);
}

TEST(GptInit, IdenticalForEverySeedUseAndDependsOnSeed) {
    const ModelConfig mc = tiny_model();
    const ModelLayout layout = make_model_layout(mc);
    std::vector<float> a(layout.unit_numel[1]), b(layout.unit_numel[1]), c(layout.unit_numel[1]);
    init_unit(layout, 1, 5, a.data());
    init_unit(layout, 1, 5, b.data());
    init_unit(layout, 1, 6, c.data());
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    // Residual projections use std 0.02 / sqrt(2 * n_layer) = 0.01.
    const ParamSpec& proj = layout.find("h.0.mlp.c_proj.weight");
    double ss = 0.0;
    for (size_t i = 0; i < proj.numel; ++i) ss += a[proj.offset + i] * a[proj.offset + i];
    EXPECT_NEAR(std::sqrt(ss / proj.numel), 0.01, 0.002);
    EXPECT_EQ(a[layout.find("h.0.ln_1.weight").offset], 1.f);
    EXPECT_EQ(a[layout.find("h.0.ln_1.bias").offset], 0.f);
}

// ModelState initializes a unit a piece at a time: any split gives init_unit's values,
// including pieces that start or end inside a tensor or inside the padded vocabulary rows.
TEST(GptInit, RangesGiveTheWholeUnitsValues) {
    const ModelConfig mc = tiny_model();
    const ModelLayout layout = make_model_layout(mc);
    for (int u = 0; u < layout.num_units(); ++u) {
        const size_t n = layout.unit_numel[static_cast<size_t>(u)];
        std::vector<float> whole(n);
        init_unit(layout, u, 5, whole.data());
        for (size_t piece : {size_t{1}, size_t{37}, size_t{1000}, n}) {
            std::vector<float> joined(n, -1.f);
            for (size_t lo = 0; lo < n; lo += piece) {
                init_unit_range(layout, u, 5, lo, std::min(n, lo + piece), joined.data() + lo);
            }
            EXPECT_EQ(joined, whole) << "unit " << u << ", pieces of " << piece;
        }
    }
}

// GPT-2's std 0.02 for every other weight: both embeddings (the live rows of wte; its padded
// rows stay 0), c_attn and c_fc; the residual projections 0.02 / sqrt(2 * n_layer) = 0.01;
// LayerNorm weights 1 and every bias 0.
TEST(GptInit, NonResidualWeightsHaveStd002) {
    const ModelConfig mc = tiny_model();
    const ModelLayout layout = make_model_layout(mc);
    std::vector<std::vector<float>> units;
    for (int u = 0; u < layout.num_units(); ++u) {
        units.emplace_back(layout.unit_numel[static_cast<size_t>(u)]);
        init_unit(layout, u, 5, units.back().data());
    }
    auto values = [&](const ParamSpec& p) {
        const float* w = units[static_cast<size_t>(p.unit)].data() + p.offset;
        return std::vector<float>(w, w + p.numel);
    };
    auto rms = [](const std::vector<float>& x, size_t n) {
        double ss = 0.0;
        for (size_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
        return std::sqrt(ss / static_cast<double>(n));
    };
    // Per tensor (48..256 draws: within 25%), and pooled over the model (1032 and 640 draws:
    // within 10%, ~4 standard errors; far from 0.02 <-> 0.01 or a factor sqrt(2)).
    double ss_base = 0.0, ss_resid = 0.0;
    size_t n_base = 0, n_resid = 0;
    for (const ParamSpec& p : layout.params) {
        const std::vector<float> w = values(p);
        const bool resid = p.name.find("c_proj.weight") != std::string::npos;
        const bool base = p.name == "wte.weight" || p.name == "wpe.weight" ||
                          p.name.find("c_attn.weight") != std::string::npos ||
                          p.name.find("c_fc.weight") != std::string::npos;
        if (base || resid) {
            const size_t live = p.name == "wte.weight" ? static_cast<size_t>(mc.vocab_size) * mc.n_embd : p.numel;
            for (size_t i = live; i < p.numel; ++i) ASSERT_EQ(w[i], 0.f) << p.name << " padded element " << i;
            EXPECT_NEAR(rms(w, live), base ? 0.02 : 0.01, base ? 0.005 : 0.0025) << p.name;
            (base ? ss_base : ss_resid) += rms(w, live) * rms(w, live) * static_cast<double>(live);
            (base ? n_base : n_resid) += live;
        } else {
            const float want = p.name.find("ln_") != std::string::npos && p.name.find(".weight") != std::string::npos
                                   ? 1.f : 0.f;
            for (size_t i = 0; i < p.numel; ++i) ASSERT_EQ(w[i], want) << p.name << " element " << i;
        }
    }
    EXPECT_EQ(n_base, 11u * 8 + 6u * 8 + 2 * (24u * 8 + 32u * 8));
    EXPECT_NEAR(std::sqrt(ss_base / static_cast<double>(n_base)), 0.02, 0.002);
    EXPECT_NEAR(std::sqrt(ss_resid / static_cast<double>(n_resid)), 0.01, 0.001);
}

}  // namespace
}  // namespace zt

namespace zt {
namespace {

// The Llama manifest: Hugging Face's names; q|k|v and gate|up packed without gaps (one
// product each); the untied head in unit 0; HF's init (std 0.02 for every matrix, RMSNorm 1).
TEST(LlamaLayout, HuggingFaceNamesPackedProjectionsAndInit) {
    ModelConfig mc = tiny_llama(false, 1);
    const ModelLayout layout = make_model_layout(mc);
    const size_t C = 8, hs = 4, F = 12;
    ASSERT_EQ(layout.num_units(), mc.n_layer + 2);
    EXPECT_EQ(layout.find("model.embed_tokens.weight").unit, 0);
    EXPECT_EQ(layout.find("lm_head.weight").unit, 0);
    EXPECT_EQ(layout.find("model.norm.weight").unit, mc.n_layer + 1);
    const ParamSpec& q = layout.find("model.layers.1.self_attn.q_proj.weight");
    const ParamSpec& k = layout.find("model.layers.1.self_attn.k_proj.weight");
    const ParamSpec& v = layout.find("model.layers.1.self_attn.v_proj.weight");
    EXPECT_EQ(q.shape, (std::vector<size_t>{2 * hs, C}));
    EXPECT_EQ(k.shape, (std::vector<size_t>{hs, C}));
    EXPECT_EQ(k.offset, q.offset + q.numel);
    EXPECT_EQ(v.offset, k.offset + k.numel);
    const ParamSpec& gate = layout.find("model.layers.1.mlp.gate_proj.weight");
    const ParamSpec& up = layout.find("model.layers.1.mlp.up_proj.weight");
    EXPECT_EQ(up.offset, gate.offset + gate.numel);
    EXPECT_EQ(layout.find("model.layers.1.mlp.down_proj.weight").shape, (std::vector<size_t>{C, F}));
    EXPECT_EQ(layout.find("model.layers.1.self_attn.o_proj.weight").shape, (std::vector<size_t>{C, 2 * hs}));
    size_t numel = 0;
    for (const ParamSpec& p : layout.params) {
        numel += p.numel;
        EXPECT_EQ(p.decay, p.shape.size() == 2) << p.name;
        EXPECT_EQ(p.name.find("bias"), std::string::npos) << p.name;
    }
    EXPECT_EQ(numel, 2 * 16 * C + 2 * (2 * C + (2 * hs + 2 * hs) * C + C * 2 * hs + 3 * F * C) + C);
    // Init: matrices std 0.02 (pooled over the model), norms 1.
    double ss = 0;
    size_t n = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
        std::vector<float> w(layout.unit_numel[static_cast<size_t>(u)]);
        init_unit(layout, u, 5, w.data());
        for (const ParamSpec& p : layout.params) {
            if (p.unit != u) continue;
            const size_t live = p.unit == 0 ? static_cast<size_t>(mc.vocab_size) * C : p.numel;
            for (size_t i = 0; i < live; ++i) {
                if (p.shape.size() == 1) {
                    ASSERT_EQ(w[p.offset + i], 1.f) << p.name;
                } else {
                    ss += static_cast<double>(w[p.offset + i]) * w[p.offset + i];
                    ++n;
                }
            }
        }
    }
    EXPECT_NEAR(std::sqrt(ss / static_cast<double>(n)), 0.02, 0.002);
}

}  // namespace
}  // namespace zt
