// LoRA (lora.*): the keys and their checks, the adapters' tensors in the layout (PEFT's
// names, init and splits), their gradients against finite differences for both families, a
// frozen base whose gradient is never computed, AdamW leaving the base alone, and dropout on
// the adapters' input (its masks a function of the sample, position and feature).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/forwarding_backend.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/model/family.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/train/memory_plan.hpp"

#include "interop_python.hpp"
#include "model_state_access.hpp"
#include "test_support.hpp"

namespace zt {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_adapter(const ParamSpec& p) { return p.name.find(".lora_") != std::string::npos; }

ModelConfig tiny_gpt2(int rank, const std::string& targets) {
    ModelConfig mc = test::model_config(2, 2, 8, 6, 11, /*vocab_pad_to=*/8);
    mc.lora.rank = rank;
    mc.lora.alpha = 3.0;  // scale 1.5 at rank 2: a wrong scale shows
    mc.lora.targets = targets;
    return mc;
}

ModelConfig tiny_llama(int rank, const std::string& targets) {
    ModelConfig mc = tiny_gpt2(rank, targets);
    mc.arch = ModelArch("llama");
    mc.n_kv_head = 1;
    mc.ffn_dim = 12;
    mc.rope_theta = 10;
    return mc;
}

std::vector<std::string> adapter_names(const ModelLayout& layout) {
    std::vector<std::string> names;
    for (const ParamSpec& p : layout.params) {
        if (is_adapter(p)) names.push_back(p.name);
    }
    return names;
}

/// lora.targets as a list, as PEFT's target_modules.
std::vector<std::string> lora_targets(const ModelConfig& mc) {
    std::vector<std::string> out;
    std::string rest = mc.lora.targets;
    while (!rest.empty()) {
        const size_t comma = rest.find(',');
        out.push_back(rest.substr(0, comma));
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    }
    return out;
}

// --- keys and targets ---------------------------------------------------------------------

Config lora_config(const std::string& arch, const std::string& targets) {
    Config c;
    c.data.train = "t.bin";
    set_config_value(c, "model.arch", arch);
    if (arch == "llama") set_config_value(c, "model.ffn_dim", "256");
    set_config_value(c, "lora.rank", "4");
    set_config_value(c, "lora.targets", targets);
    return c;
}

TEST(LoraKeys, DefaultsAreOffAndPeftsTargets) {
    const Config c;
    EXPECT_EQ(c.model.lora.rank, 0);
    EXPECT_FALSE(c.model.lora.on());
    EXPECT_EQ(c.model.lora.targets, "default");
    EXPECT_NO_THROW(validate(lora_config("gpt2", "default")));
    const ModelLayout gpt2 = make_model_layout(tiny_gpt2(2, "default"));
    EXPECT_EQ(adapter_names(gpt2).size(), 4u);  // c_attn's A and B in each of 2 blocks
    EXPECT_EQ(gpt2.find("h.1.attn.c_attn.lora_A.weight").shape, (std::vector<size_t>{2, 8}));
    EXPECT_EQ(gpt2.find("h.1.attn.c_attn.lora_B.weight").shape, (std::vector<size_t>{24, 2}));
    const ModelLayout llama = make_model_layout(tiny_llama(2, "default"));
    EXPECT_EQ(adapter_names(llama), (std::vector<std::string>{
                                        "model.layers.0.self_attn.q_proj.lora_A.weight",
                                        "model.layers.0.self_attn.q_proj.lora_B.weight",
                                        "model.layers.0.self_attn.v_proj.lora_A.weight",
                                        "model.layers.0.self_attn.v_proj.lora_B.weight",
                                        "model.layers.1.self_attn.q_proj.lora_A.weight",
                                        "model.layers.1.self_attn.q_proj.lora_B.weight",
                                        "model.layers.1.self_attn.v_proj.lora_A.weight",
                                        "model.layers.1.self_attn.v_proj.lora_B.weight",
                                    }));
}

TEST(LoraKeys, TargetsMatchAsPeftsTargetModules) {
    // c_proj names attention's and the MLP's output projections; attn.c_proj one of them.
    EXPECT_EQ(adapter_names(make_model_layout(tiny_gpt2(2, "c_proj"))).size(), 8u);
    const std::vector<std::string> one = adapter_names(make_model_layout(tiny_gpt2(2, "attn.c_proj")));
    ASSERT_EQ(one.size(), 4u);
    EXPECT_EQ(one[0], "h.0.attn.c_proj.lora_A.weight");
    EXPECT_EQ(adapter_names(make_model_layout(tiny_gpt2(2, "transformer.h.0.attn.c_proj,h.1.attn.c_proj"))).size(),
              4u);
    EXPECT_NO_THROW(validate(lora_config("llama", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")));
}

TEST(LoraKeys, BadValuesExitTwoNamingKeyAndFamilysNames) {
    const std::string unknown = test::input_error_of([] { validate(lora_config("llama", "q_proj,c_attn")); });
    EXPECT_NE(unknown.find("lora.targets = 'q_proj,c_attn'"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("'c_attn' matches none"), std::string::npos) << unknown;
    const std::string some = test::input_error_of([] { validate(lora_config("gpt2", "h.0.attn.c_attn")); });
    EXPECT_NE(some.find("attn.c_attn is named in 1 of the 4 blocks"), std::string::npos) << some;
    Config c = lora_config("gpt2", "c_attn");
    c.model.lora.alpha = 0;
    EXPECT_NE(test::input_error_of([&] { validate(c); }).find("lora.alpha = 0: expected a number > 0"),
              std::string::npos);
    c = lora_config("gpt2", "c_attn");
    set_config_value(c, "lora.base_dtype", "fp16");
    EXPECT_NE(test::input_error_of([&] { validate(c); }).find("lora.base_dtype"), std::string::npos);
    c = lora_config("gpt2", "c_attn");
    c.model.lora.rank = -1;
    EXPECT_NE(test::input_error_of([&] { validate(c); }).find("lora.rank = -1"), std::string::npos);
}

// --- layout -------------------------------------------------------------------------------

TEST(LoraLayout, RankZeroOrNoTargetsIsTheFamilysLayout) {
    for (const ModelConfig& off : {tiny_gpt2(0, "c_attn"), tiny_gpt2(4, ""), tiny_llama(0, "default")}) {
        ModelConfig plain = off;
        plain.lora = LoraConfig{};
        const ModelLayout a = make_model_layout(off);
        const ModelLayout b = make_model_layout(plain);
        ASSERT_EQ(a.params.size(), b.params.size());
        EXPECT_EQ(a.unit_numel, b.unit_numel);
        for (const ParamSpec& p : a.params) EXPECT_TRUE(p.trainable) << p.name;
    }
}

TEST(LoraLayout, AdaptersFollowTheBaseWhichKeepsItsPlacesAndValues) {
    const ModelConfig mc = tiny_llama(2, "q_proj,v_proj,down_proj");
    ModelConfig plain = mc;
    plain.lora = LoraConfig{};
    const ModelLayout lora = make_model_layout(mc);
    const ModelLayout base = make_model_layout(plain);
    for (const ParamSpec& p : base.params) {
        const ParamSpec& q = lora.find(p.name);
        EXPECT_EQ(q.offset, p.offset) << p.name;
        EXPECT_EQ(q.global_index, p.global_index) << p.name;
        EXPECT_FALSE(q.trainable) << p.name;
    }
    for (int u = 0; u < lora.num_units(); ++u) {
        std::vector<float> a(lora.unit_numel[static_cast<size_t>(u)]);
        std::vector<float> b(base.unit_numel[static_cast<size_t>(u)]);
        init_unit(lora, u, 9, a.data());
        init_unit(base, u, 9, b.data());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), b.size() * sizeof(float)), 0) << "unit " << u;
        for (const ParamSpec& p : lora.params) {
            if (p.unit != u || !is_adapter(p)) continue;
            EXPECT_TRUE(p.trainable && p.decay) << p.name;
            const float* v = a.data() + p.offset;
            if (ends_with(p.name, "lora_B.weight")) {
                EXPECT_TRUE(std::all_of(v, v + p.numel, [](float x) { return x == 0.f; })) << p.name;
                continue;
            }
            // PEFT's kaiming_uniform_(a = sqrt(5)): uniform within 1 / sqrt(in).
            const float bound = 1.f / std::sqrt(static_cast<float>(p.shape[1]));
            float largest = 0.f;
            for (size_t i = 0; i < p.numel; ++i) largest = std::max(largest, std::fabs(v[i]));
            EXPECT_LE(largest, bound) << p.name;
            EXPECT_GT(largest, 0.5f * bound) << p.name;
        }
    }
}

// --- gradients ----------------------------------------------------------------------------

/// Records every parameter gradient an op is asked to compute.
class GradientRecorder final : public ForwardingBackend {
  public:
    using ForwardingBackend::ForwardingBackend;
    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                         ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override {
        if (dweight != nullptr) written.push_back(dweight);
        if (dbias != nullptr) written.push_back(dbias);
        ForwardingBackend::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, grads);
    }
    void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                 ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                 ActPtr scratch) override {
        if (dweight != nullptr) written.push_back(dweight);
        ForwardingBackend::matmul_backward_columns(dinp, dweight, dout, dout_width, dout_col, inp, weight, N, K, width,
                                                   scale, scratch);
    }
    void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override {
        if (dweight != nullptr) written.push_back(dweight);
        if (dbias != nullptr) written.push_back(dbias);
        ForwardingBackend::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    }
    void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                          const float* rstd, int N, int C) override {
        if (dweight != nullptr) written.push_back(dweight);
        ForwardingBackend::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    }
    void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override {
        written.push_back(dwte);
        ForwardingBackend::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    }
    std::vector<const float*> written;
};

// The CPU adds an adapter's up-projection into its columns of the packed output, and reads
// those columns of the output gradient, in place (no scratch): every element is the exact
// result of its (rounded) operands, rounded once to the buffer's dtype (relative 2^-8 for
// bf16), within fp32 summation rounding; the columns outside stay untouched. The separate
// ops (Backend's default, the CUDA backend's) round the scratch too.
TEST(LoraColumnProducts, InPlaceProductsAreTheExactSumRoundedOnce) {
    const int N = 37, K = 8, width = 24, dst_width = 64, col = 16;
    const double scale = 2.5, u32 = 1.0 / (1 << 24);
    for (DType dt : {DType::kF32, DType::kBF16}) {
        auto cpu = make_cpu_backend(2);
        cpu->set_activation_dtype(dt);
        // Values the buffer's dtype holds exactly, so the fp64 reference uses the same numbers.
        auto values = [&](size_t n, float s, int seed) {
            std::vector<float> v(n);
            for (size_t i = 0; i < n; ++i) v[i] = s * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
            if (dt == DType::kBF16) cpu->round_to(v.data(), n, dt);
            return v;
        };
        auto typed = [&](const std::vector<float>& v) {
            std::vector<float> store(v.size());  // room for either dtype
            cpu->cast(store.data(), dt, v.data(), DType::kF32, v.size());
            return store;
        };
        auto wide = [&](const std::vector<float>& store, size_t n) {
            std::vector<float> v(n);
            cpu->cast(v.data(), DType::kF32, store.data(), dt, n);
            return v;
        };
        const auto inp = values(static_cast<size_t>(N) * K, 1.f, 1), weight = values(static_cast<size_t>(width) * K, 0.5f, 2);
        const auto dout = values(static_cast<size_t>(N) * dst_width, 1.f, 3), dst0 = values(static_cast<size_t>(N) * dst_width, 3.f, 4);
        const auto dinp0 = values(static_cast<size_t>(N) * K, 1.f, 5), dweight0 = values(static_cast<size_t>(width) * K, 1.f, 6);
        auto dst = typed(dst0), dinp = typed(dinp0);
        auto dweight = dweight0;
        const auto inp_t = typed(inp), weight_t = typed(weight), dout_t = typed(dout);
        cpu->matmul_add_columns(ActPtr(dst.data(), dt), dst_width, col, ConstActPtr(inp_t.data(), dt),
                                ConstActPtr(weight_t.data(), dt), N, K, width, static_cast<float>(scale), ActPtr{});
        cpu->matmul_backward_columns(ActPtr(dinp.data(), dt), dweight.data(), ConstActPtr(dout_t.data(), dt), dst_width,
                                     col, ConstActPtr(inp_t.data(), dt), ConstActPtr(weight_t.data(), dt), N, K, width,
                                     static_cast<float>(scale), ActPtr{});
        const double u = dt == DType::kF32 ? u32 : 1.0 / (1 << 8);
        const char* name = dtype_name(dt);
        // got vs old + scale * sum_k terms(k), in fp64.
        auto check = [&](float got, double old, int n, const std::function<double(int)>& term, double round,
                         const std::string& what) {
            double sum = 0, mag = std::fabs(old);
            for (int k = 0; k < n; ++k) {
                sum += scale * term(k);
                mag += std::fabs(scale * term(k));
            }
            const double want = old + sum;
            ASSERT_NEAR(got, want, round * std::fabs(want) + 2.0 * (n + 1) * u32 * mag) << name << " " << what;
        };
        const auto dst_w = wide(dst, dst.size()), dinp_w = wide(dinp, dinp.size());
        for (int r = 0; r < N; ++r) {
            for (int c = 0; c < dst_width; ++c) {
                const size_t at = static_cast<size_t>(r) * dst_width + c;
                if (c < col || c >= col + width) {
                    ASSERT_EQ(dst_w[at], dst0[at]) << name << " row " << r << " column " << c << " is not the adapter's";
                    continue;
                }
                check(dst_w[at], dst0[at], K, [&](int k) { return double(inp[r * K + k]) * weight[(c - col) * K + k]; }, u,
                      "dst row " + std::to_string(r) + " column " + std::to_string(c));
            }
            for (int k = 0; k < K; ++k) {
                check(dinp_w[static_cast<size_t>(r) * K + k], dinp0[static_cast<size_t>(r) * K + k], width,
                      [&](int j) { return double(dout[r * dst_width + col + j]) * weight[j * K + k]; }, u,
                      "dinp row " + std::to_string(r) + " column " + std::to_string(k));
            }
        }
        for (int j = 0; j < width; ++j) {
            for (int k = 0; k < K; ++k) {
                check(dweight[static_cast<size_t>(j) * K + k], dweight0[static_cast<size_t>(j) * K + k], N,
                      [&](int r) { return double(dout[r * dst_width + col + j]) * inp[r * K + k]; }, 0.0,
                      "dweight row " + std::to_string(j) + " column " + std::to_string(k));
            }
        }
    }
}

/// Every weight moved by normal noise of std `scale`, B away from zero among them.
void perturb(ModelState& state, const ModelLayout& layout, double scale) {
    for (int u = 0; u < layout.num_units(); ++u) {
        float* w = ModelStateTestAccess::unit_params(state, u);
        for (size_t i = 0; i < layout.unit_numel[static_cast<size_t>(u)]; ++i) {
            w[i] += static_cast<float>(scale * random_normal(7, 99, static_cast<uint64_t>(u) * 100000 + i));
        }
    }
}

struct Batch {
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;
};

Batch batch(const ModelConfig& mc, int B) {
    Batch b;
    for (size_t i = 0; i < static_cast<size_t>(B * mc.seq_len); ++i) {
        b.inputs.push_back(static_cast<int32_t>(random_bits(3, 1, i) % static_cast<uint64_t>(mc.vocab_size)));
        b.targets.push_back(static_cast<int32_t>(random_bits(3, 2, i) % static_cast<uint64_t>(mc.vocab_size)));
    }
    return b;
}

/// Every adapter element's gradient against central differences (the tolerance of
/// test_gpt_gradcheck.cpp), with B perturbed away from 0 so A's gradient is not zero; the
/// state keeps no gradient or moments for the base and no op computed a gradient outside
/// the adapters.
void check_adapters(const ModelConfig& mc, const DropoutRows& rows = {}) {
    auto cpu = make_cpu_backend(1);
    GradientRecorder backend(*cpu);
    const int B = 2;
    const int T = mc.seq_len;
    Transformer model(mc, backend, B);
    model.set_dropout_rows(rows);
    ModelState state(model.layout(), *cpu, 42);
    const ModelLayout& layout = model.layout();
    perturb(state, layout, 0.3);
    const Batch data = batch(mc, B);
    const int counted = B * T;
    state.zero_grads();
    model.forward(state, data.inputs.data(), data.targets.data(), B, T, 1.0f);
    model.backward(state);
    auto summed_loss = [&] {
        return static_cast<double>(model.forward(state, data.inputs.data(), data.targets.data(), B, T, 0.f)) *
               counted;
    };
    const double eps = 2e-2;
    size_t adapted = 0;
    size_t adapter_numel = 0;
    for (const ParamSpec& p : layout.params) adapter_numel += is_adapter(p) ? p.numel : 0;
    // The state keeps gradients and moments for the adapters only (up to alignment: a
    // kShardAlign rounding per unit and the gaps between tensors).
    const size_t slack = (static_cast<size_t>(layout.num_units()) * 2 + adapter_numel / 8) * kShardAlign;
    EXPECT_LE(state.bytes().grads, (adapter_numel + slack) * sizeof(float)) << adapter_numel << " adapter elements";
    EXPECT_LE(state.bytes().optimizer, 2 * (adapter_numel + slack) * sizeof(float));
    for (const ParamSpec& p : layout.params) {
        if (!is_adapter(p)) continue;
        const float* g = state.grads(p.unit) + p.offset;
        ++adapted;
        float* w = ModelStateTestAccess::unit_params(state, p.unit) + p.offset;
        size_t bad = 0;
        double worst = 0.0;
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
            const double tol = 2e-3 * std::max(std::fabs(numeric), std::fabs(double{g[i]})) + 6e-4;
            const double excess = std::fabs(g[i] - numeric) - tol;
            if (excess > 0) ++bad;
            worst = std::max(worst, std::fabs(g[i] - numeric));
        }
        EXPECT_EQ(bad, 0u) << p.name << ": " << bad << " of " << p.numel
                           << " elements disagree with finite differences; largest difference " << worst;
    }
    EXPECT_GT(adapted, 0u);
    // No op was asked for a gradient outside the adapters.
    for (const float* at : backend.written) {
        const bool inside = std::any_of(layout.params.begin(), layout.params.end(), [&](const ParamSpec& p) {
            const float* g = state.grads(p.unit) + p.offset;
            return is_adapter(p) && at >= g && at < g + p.numel;
        });
        EXPECT_TRUE(inside) << "a gradient was computed outside the adapters";
    }
    EXPECT_FALSE(backend.written.empty());
}

TEST(LoraGradcheck, Gpt2EveryAdapterElement) { check_adapters(tiny_gpt2(2, "c_attn,c_proj,c_fc")); }
// q and v adapt part of the packed q|k|v product, gate and up both halves of gate|up.
TEST(LoraGradcheck, LlamaEveryAdapterElement) {
    check_adapters(tiny_llama(2, "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"));
}
// With dropout the loss is a fixed function of the weights for given rows: the masks are.
TEST(LoraGradcheck, Gpt2WithDropout) {
    ModelConfig mc = tiny_gpt2(2, "c_attn,c_proj,c_fc");
    mc.lora.dropout = 0.3;
    check_adapters(mc, DropoutRows{3, 11, 40});
}
TEST(LoraGradcheck, LlamaWithDropout) {
    ModelConfig mc = tiny_llama(2, "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
    mc.lora.dropout = 0.3;
    check_adapters(mc, DropoutRows{3, 11, 40});
}

// The mask: about p of the elements dropped, the rest scaled by 1 / (1 - p); a function of
// (key, sample, position, feature) only, so the same element drawn as another row of another
// batch, or in a slice of the features, gets the same draw.
TEST(LoraDropout, MaskIsTheSamplesPositionsAndFeatures) {
    auto be = make_cpu_backend(2);
    const int T = 16;
    const int N = 4 * T;
    const int W = 96;
    std::vector<float> ones(static_cast<size_t>(N * W), 1.f);
    std::vector<float> out(ones.size());
    const DropoutMask mask{dropout_key(7, 3, 1, 2), 100, T, 0, 0.25f};
    be->dropout(ActPtr(out.data()), ConstActPtr(ones.data()), N, W, mask);
    size_t kept = 0;
    for (float v : out) {
        ASSERT_TRUE(v == 0.f || std::fabs(v - 1.f / 0.75f) < 1e-6f) << v;
        kept += v != 0.f;
    }
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(out.size()), 0.75, 0.03);
    // Sample 102 (row block 2 above) alone, features 32.. of it as a slice.
    std::vector<float> slice(static_cast<size_t>(T * 32));
    be->dropout(ActPtr(slice.data()), ConstActPtr(ones.data()), T, 32, DropoutMask{mask.key, 102, T, 32, 0.25f});
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < 32; ++j)
            EXPECT_EQ(slice[static_cast<size_t>(t * 32 + j)], out[static_cast<size_t>((2 * T + t) * W + 32 + j)])
                << "position " << t << " feature " << 32 + j;
    // Another step, block or adapter: other draws.
    std::vector<float> other(out.size());
    be->dropout(ActPtr(other.data()), ConstActPtr(ones.data()), N, W, DropoutMask{dropout_key(7, 4, 1, 2), 100, T, 0, 0.25f});
    EXPECT_NE(other, out);
}

// Compacted padding lays several samples in a row: each token keeps the draws of its sample
// and position, as if the sample had a row of its own.
TEST(LoraDropout, ACompactedTokenKeepsItsSamplesMask) {
    auto be = make_cpu_backend(2);
    const int T = 16;
    const int W = 40;
    const DropoutMask plain{dropout_key(7, 3, 1, 2), 100, T, 0, 0.25f};
    std::vector<float> ones(static_cast<size_t>(4 * T * W), 1.f);
    std::vector<float> rows(ones.size());
    be->dropout(ActPtr(rows.data()), ConstActPtr(ones.data()), 4 * T, W, plain);
    // One row of T: sample 3's positions 0..9, then sample 1's 0..5.
    std::vector<int32_t> sample_of(T);
    std::vector<int32_t> position_of(T);
    for (int t = 0; t < T; ++t) {
        sample_of[static_cast<size_t>(t)] = t < 10 ? 3 : 1;
        position_of[static_cast<size_t>(t)] = t < 10 ? t : t - 10;
    }
    DropoutMask laid = plain;
    laid.sample_of = sample_of.data();
    laid.position_of = position_of.data();
    std::vector<float> row(static_cast<size_t>(T * W));
    be->dropout(ActPtr(row.data()), ConstActPtr(ones.data()), T, W, laid);
    for (int t = 0; t < T; ++t) {
        const size_t at = static_cast<size_t>(sample_of[static_cast<size_t>(t)] * T + position_of[static_cast<size_t>(t)]);
        for (int j = 0; j < W; ++j)
            ASSERT_EQ(row[static_cast<size_t>(t * W + j)], rows[at * W + static_cast<size_t>(j)])
                << "token " << t << " (sample " << sample_of[static_cast<size_t>(t)] << ", position "
                << position_of[static_cast<size_t>(t)] << ") feature " << j;
    }
}

// Dropout acts (the loss moves from the undropped one), and a row's losses are its sample's:
// the same when the sample is the second row of a batch or a batch of its own.
TEST(LoraDropout, ARowsLossesAreItsSamples) {
    ModelConfig mc = tiny_llama(2, "q_proj,v_proj,down_proj");
    mc.lora.dropout = 0.5;
    auto be = make_cpu_backend(1);
    Transformer two(mc, *be, 2);
    Transformer one(mc, *be, 1);
    ModelState state(two.layout(), *be, 9);
    perturb(state, two.layout(), 0.3);
    const Batch data = batch(mc, 2);
    const int T = mc.seq_len;
    const float plain = two.forward(state, data.inputs.data(), data.targets.data(), 2, T, 0.f);
    two.set_dropout_rows(DropoutRows{5, 1, 20});
    const float dropped = two.forward(state, data.inputs.data(), data.targets.data(), 2, T, 0.f);
    EXPECT_GT(std::fabs(dropped - plain), 1e-4f) << "lora.dropout 0.5 left the loss unchanged";
    const std::vector<float> pair = two.position_losses();
    one.set_dropout_rows(DropoutRows{5, 1, 21});
    one.forward(state, data.inputs.data() + T, data.targets.data() + T, 1, T, 0.f);
    for (int t = 0; t < T; ++t) {
        const float want = pair[static_cast<size_t>(T + t)];
        EXPECT_NEAR(one.position_losses()[static_cast<size_t>(t)], want, 1e-5f * std::fabs(want) + 1e-6f)
            << "position " << t;
    }
}

/// B starts at zero: the model with adapters computes the base model's loss, bit for bit.
void check_step_zero_is_the_base(const ModelConfig& mc) {
    ModelConfig plain = mc;
    plain.lora = LoraConfig{};
    auto backend = make_cpu_backend(1);
    const int B = 2;
    Transformer with(mc, *backend, B);
    Transformer without(plain, *backend, B);
    ModelState a(with.layout(), *backend, 5);
    ModelState b(without.layout(), *backend, 5);
    const Batch data = batch(mc, B);
    EXPECT_EQ(with.forward(a, data.inputs.data(), data.targets.data(), B, mc.seq_len, 0.f),
              without.forward(b, data.inputs.data(), data.targets.data(), B, mc.seq_len, 0.f));
}

TEST(LoraForward, StepZeroIsTheBaseModel) {
    check_step_zero_is_the_base(tiny_gpt2(2, "c_attn,c_proj"));
    check_step_zero_is_the_base(tiny_llama(2, "q_proj,v_proj,gate_proj"));
}

// lora.base_dtype = bf16 under precision.dtype = fp32: the state stores the weights in bf16
// (the frozen base's only copy; here the adapters too: no training_in) while the activations
// stay fp32. Step 0 is still the base model bit for bit (the base's values
// are the same bf16 ones with or without adapters), and close to the fp32-stored model.
TEST(LoraBaseDtype, Bf16BaseUnderFp32ActivationsIsTheRoundedBase) {
    for (const ModelConfig& mc : {tiny_gpt2(2, "c_attn,c_proj"), tiny_llama(2, "q_proj,v_proj,gate_proj")}) {
        ModelConfig plain = mc;
        plain.lora = LoraConfig{};
        auto backend = make_cpu_backend(1);
        const int B = 2;
        Transformer with(mc, *backend, B);  // fp32 activations (the default)
        Transformer without(plain, *backend, B);
        const auto bf16_state = [&](const ModelLayout& layout) {
            return std::make_unique<ModelState>(layout, *backend, self_communicator(),
                                                StateOptions::zero(0).with_seed(5).in(DType::kBF16, DType::kF32));
        };
        auto a = bf16_state(with.layout());
        auto b = bf16_state(without.layout());
        ModelState f(without.layout(), *backend, 5);
        const Batch data = batch(mc, B);
        const float la = with.forward(*a, data.inputs.data(), data.targets.data(), B, mc.seq_len, 0.f);
        EXPECT_EQ(la, without.forward(*b, data.inputs.data(), data.targets.data(), B, mc.seq_len, 0.f)) << setting_text(mc.arch);
        const float lf = without.forward(f, data.inputs.data(), data.targets.data(), B, mc.seq_len, 0.f);
        EXPECT_NEAR(la, lf, 1e-2f * std::fabs(lf)) << setting_text(mc.arch) << ": the bf16-stored base vs the fp32 one";
        EXPECT_NE(la, lf) << setting_text(mc.arch) << ": the base was not rounded";
        const ModelState fa(with.layout(), *backend, 5);
        EXPECT_EQ(2 * a->bytes().params, fa.bytes().params) << setting_text(mc.arch) << ": half the fp32 bytes";
    }
}

// Under fp32 activations a bf16 base's adapters stay fp32, as PEFT keeps them beside a bf16
// base: after optimizer steps the fp32 view the products read holds each adapter's master
// value bit for bit (not its bf16 rounding), their gradients are stored in fp32, and that
// fp32 copy is the master (none beside it). The base stays bf16.
TEST(LoraBaseDtype, Bf16BasesAdaptersStayFp32UnderFp32Activations) {
    for (const ModelConfig& mc : {tiny_gpt2(2, "c_attn,c_proj"), tiny_llama(2, "q_proj,v_proj,gate_proj")}) {
        auto backend = make_cpu_backend(1);
        const int B = 2;
        Transformer model(mc, *backend, B);
        const ModelLayout& layout = model.layout();
        const StateOptions rounded = StateOptions::zero(0).with_seed(5).in(DType::kBF16, DType::kF32);
        StateOptions kept = rounded;
        kept.training_in(DType::kF32);
        ModelState st(layout, *backend, self_communicator(), kept);
        const Batch data = batch(mc, B);
        TrainConfig tc;
        tc.lr = 1e-2;  // B moves well away from zero in three steps
        for (int t = 1; t <= 3; ++t) {
            st.zero_grads();
            st.begin_micro_step(true, true);
            model.forward(st, data.inputs.data(), data.targets.data(), B, mc.seq_len, 1.f / static_cast<float>(B * mc.seq_len));
            model.backward(st);
            st.finish_grad_sync();
            st.optimizer_step(adamw_step_params(tc, tc.lr, t));
        }
        size_t compared = 0;
        size_t not_bf16 = 0;  // elements a bf16 working copy could not hold
        for (int u = 0; u < layout.num_units(); ++u) {
            const ElementRange tail = st.shard_plan().trainable(u);
            if (tail.empty()) continue;
            std::vector<float> master(tail.size());
            st.shards().read(u, StateShards::kMaster, tail.begin, tail.end, master.data());
            const float* view = st.acquire(u);
            for (size_t i = 0; i < tail.size(); ++i) {
                ASSERT_EQ(view[tail.begin + i], master[i])
                    << setting_text(mc.arch) << ": unit " << u << " element " << tail.begin + i << " of the fp32 view";
                not_bf16 += bf16_to_f32(f32_to_bf16(master[i])) != master[i] ? 1 : 0;
            }
            st.release(u);
            compared += tail.size();
        }
        EXPECT_GT(compared, 0u);
        EXPECT_GT(not_bf16 * 2, compared) << setting_text(mc.arch) << ": most adapter values need fp32";
        const StateBytes got = st.bytes();
        const StateBytes bf16 = ModelState::plan_bytes(layout, 1, rounded);
        EXPECT_EQ(got.grads, 2 * bf16.grads) << setting_text(mc.arch) << ": fp32 gradients, twice bf16's";
        EXPECT_EQ(got.master, 0u) << setting_text(mc.arch) << ": the fp32 adapters are their own master";
        EXPECT_EQ(got.params, bf16.params + compared * sizeof(float)) << setting_text(mc.arch) << ": the bf16 base + fp32 tails";
    }
}

// The plan counts the stored weights in lora.base_dtype (the adapters' fp32 copies beside a
// bf16 base) and the activations in precision.dtype.
TEST(LoraBaseDtype, ThePlanStoresTheBaseInItsDtype) {
    Config c = lora_config("gpt2", "c_attn");
    const auto item = [](const MemoryPlan& plan, const std::string& name) {
        for (const MemoryItem& i : plan.items) {
            if (i.name == name) return i.bytes;
        }
        return -1.0;
    };
    const MemoryPlan fp32 = plan_memory(c, 1, 1, 0, 0, false);
    set_config_value(c, "lora.base_dtype", "bf16");
    validate(c);
    const MemoryPlan bf16 = plan_memory(c, 1, 1, 0, 0, false);
    const ModelLayout layout = make_model_layout(c.model);
    const ShardPlan shards(layout.unit_numel, 1, ShardingPolicy::zero_stage(0), trainable_begins(layout));
    double tails = 0;
    for (int u = 0; u < shards.num_units(); ++u) tails += static_cast<double>(shards.trainable(u).size());
    EXPECT_GT(tails, 0);
    EXPECT_DOUBLE_EQ(item(bf16, "params"), item(fp32, "params") / 2 + 4 * tails);
    EXPECT_DOUBLE_EQ(item(bf16, "grads"), item(fp32, "grads"));
    EXPECT_DOUBLE_EQ(item(bf16, "master"), 0);
    EXPECT_DOUBLE_EQ(item(bf16, "activations"), item(fp32, "activations"));
}

// DDP reduces a LoRA run's trained tails only: the plan's "mpi buffers" (MPI's copies of the
// reductions in flight) are at most that many tails, whether the wire dtype is the gradients'
// own (fp32 base: the buckets' copies) or another (bf16 base: each unit's fp32 copy), never
// whole frozen units.
TEST(LoraBaseDtype, ThePlansMpiBuffersHoldTheTrainedTailsOnly) {
    for (const char* base : {"fp32", "bf16"}) {
        Config c = lora_config("gpt2", "c_attn");
        set_config_value(c, "lora.base_dtype", base);
        validate(c);
        const MemoryPlan plan = plan_memory(c, 2, 2, 0, 0, false);
        double mpi = -1, grads = -1;
        for (const MemoryItem& i : plan.items) {
            if (i.name == "mpi buffers") mpi = i.bytes;
            if (i.name == "grads") grads = i.bytes;
        }
        const double grads_fp32 = grads * 4 / static_cast<double>(dtype_size(*c.model.lora.base_dtype));
        EXPECT_GT(mpi, 0) << base;
        EXPECT_LE(mpi, (plan.overlap_depth + 1) * grads_fp32) << base << " base: " << mpi << " bytes of MPI copies for "
                                                              << grads << " bytes of gradients";
    }
}

TEST(LoraOptimizer, AdamWSegmentsCoverTheAdaptersOnly) {
    const ModelLayout layout = make_model_layout(tiny_llama(2, "default"));
    for (int u = 0; u < layout.num_units(); ++u) {
        for (const DecaySegment& s : decay_segments(layout, u, 0, SIZE_MAX)) {
            for (const ParamSpec& p : layout.params) {
                if (p.unit != u || p.trainable) continue;
                EXPECT_TRUE(s.end <= p.offset || s.begin >= p.offset + p.numel) << "AdamW would update " << p.name;
            }
        }
    }
}

// --- against PEFT ---------------------------------------------------------------------------

/// Writes the model's tensors (ztrain names and orientation, live vocabulary rows), the
/// batch and the settings for tests/reference/lora_peft_reference.py.
void write_case(const std::string& dir, const ModelConfig& mc, const ModelLayout& layout, ModelState& state,
                const Batch& data, int B) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const ParamSpec& p : layout.params) {
        std::vector<size_t> shape = p.shape;
        if (p.init_numel < p.numel) shape[0] = static_cast<size_t>(mc.vocab_size);
        const std::string file = p.name + ".npy";
        test::write_npy(dir + "/" + file, ModelStateTestAccess::unit_params(state, p.unit) + p.offset, "<f4", 4, shape);
        tensors[p.name] = file;
    }
    const std::vector<size_t> rows{static_cast<size_t>(B), static_cast<size_t>(mc.seq_len)};
    test::write_npy(dir + "/inputs.npy", data.inputs.data(), "<i4", 4, rows);
    test::write_npy(dir + "/targets.npy", data.targets.data(), "<i4", 4, rows);
    const nlohmann::json c = {
        {"arch", mc.arch.name()},
        {"model", {{"n_layer", mc.n_layer}, {"n_head", mc.n_head}, {"n_kv_head", mc.kv_heads()}, {"n_embd", mc.n_embd},
                   {"seq_len", mc.seq_len}, {"vocab_size", mc.vocab_size}, {"ffn_dim", mc.ffn_dim},
                   {"norm_eps", mc.norm_eps}, {"rope_theta", mc.rope_theta}, {"tie_embeddings", mc.tie_embeddings}}},
        {"lora", {{"rank", mc.lora.rank}, {"alpha", mc.lora.alpha}, {"targets", lora_targets(mc)}}},
        {"tensors", tensors}};
    std::ofstream(dir + "/case.json") << c.dump();
}

/// ztrain's fp32 loss and adapter gradients of one batch against PEFT's in float64, from the
/// same base and adapter weights (B away from zero): loss within 1e-6 relative, each
/// adapter's gradient within 1e-5 (||g - g_peft|| / ||g_peft||).
void check_against_peft(const ModelConfig& mc) {
    const std::string py = test::interop_python({"torch", "transformers", "peft"});
    ZT_SKIP_WITHOUT_INTEROP(py, "no interop virtual environment (ZT_INTEROP_VENV or .venv): PEFT comparison skipped");
    auto backend = make_cpu_backend(1);
    const int B = 2;
    Transformer model(mc, *backend, B);
    ModelState state(model.layout(), *backend, 42);
    const ModelLayout& layout = model.layout();
    perturb(state, layout, 0.1);
    // (Padded vocabulary rows are never read or predicted; the files hold the live ones.)
    const Batch data = batch(mc, B);
    state.zero_grads();
    const float loss = model.forward(state, data.inputs.data(), data.targets.data(), B, mc.seq_len, 1.0f);
    model.backward(state);
    const test::ScratchDir scratch("lora_peft");
    const std::string& dir = scratch.path();
    write_case(dir, mc, layout, state, data, B);
    const int rc = std::system((py + " " ZT_SOURCE_DIR "/tests/reference/lora_peft_reference.py " + dir).c_str());
    ASSERT_EQ(rc, 0) << "the PEFT reference failed";
    nlohmann::json ref;
    std::ifstream(dir + "/reference.json") >> ref;
    const double ref_loss = ref["loss"].get<double>();
    EXPECT_LT(std::fabs(loss - ref_loss) / std::fabs(ref_loss), 1e-6) << "loss " << loss << " vs PEFT's " << ref_loss;
    size_t compared = 0;
    for (const ParamSpec& p : layout.params) {
        if (!is_adapter(p)) continue;
        const std::vector<double> want = ref["grads"].at(p.name).get<std::vector<double>>();
        ASSERT_EQ(want.size(), p.numel) << p.name;
        const float* g = state.grads(p.unit) + p.offset;
        double diff = 0.0;
        double norm = 0.0;
        for (size_t i = 0; i < p.numel; ++i) {
            diff += (g[i] - want[i]) * (g[i] - want[i]);
            norm += want[i] * want[i];
        }
        EXPECT_LT(std::sqrt(diff / norm), 1e-5) << p.name << ": gradient differs from PEFT's";
        ++compared;
    }
    EXPECT_GT(compared, 0u);
}

TEST(LoraPeft, Gpt2LossAndAdapterGradients) { check_against_peft(tiny_gpt2(2, "c_attn,c_proj,c_fc")); }
TEST(LoraPeft, LlamaLossAndAdapterGradients) {
    check_against_peft(tiny_llama(2, "q_proj,v_proj,o_proj,gate_proj,down_proj"));
}

}  // namespace
}  // namespace zt
