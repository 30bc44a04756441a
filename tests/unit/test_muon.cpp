// train.optimizer = muon against torch.optim.Muon (the reference is the library:
// tests/reference/muon_torch.py pairs it with torch.optim.AdamW on a tiny transformers Llama,
// in float64, with the library's own Newton-Schulz code unrounded), and its parts alone: the
// Newton-Schulz iteration, which tensors Muon takes, and the per-matrix rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "interop_python.hpp"
#include "test_support.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/ckpt/export.hpp"
#include "ztrain/comm/communicator.hpp"
#include "ztrain/config/config.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"
#include "ztrain/parallel/optimizer_state.hpp"
#include "ztrain/parallel/shard_layout.hpp"

namespace zt {
namespace {

double bf16_value(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

/// The same iteration in double, written out (rows <= cols after a transpose); under
/// s.ns_bf16 the products' operands rounded to bf16 where ztrain rounds them (X's operand
/// copy, A, and B = b A + c A A), X itself kept unrounded.
std::vector<double> newton_schulz_reference(const std::vector<float>& g, int rows, int cols, const MuonStep& s) {
    const bool tall = rows > cols;
    const int r = tall ? cols : rows;
    const int c = tall ? rows : cols;
    std::vector<double> x(static_cast<size_t>(r) * c);
    double ss = 0;
    for (int i = 0; i < rows; ++i) {
        for (int j = 0; j < cols; ++j) {
            const double v = g[static_cast<size_t>(i) * cols + j];
            (tall ? x[static_cast<size_t>(j) * c + i] : x[static_cast<size_t>(i) * c + j]) = v;
            ss += v * v;
        }
    }
    for (double& v : x) v /= std::max(std::sqrt(ss), static_cast<double>(s.eps));
    for (int it = 0; it < s.ns_steps; ++it) {
        std::vector<double> A(static_cast<size_t>(r) * r, 0.0), Bm(A.size(), 0.0), y(x.size(), 0.0);
        std::vector<double> xo = x;  // the products' copy of X
        auto operand = [&](std::vector<double>& m) {
            if (s.ns_bf16) {
                for (double& v : m) v = bf16_value(v);
            }
        };
        operand(xo);
        for (int i = 0; i < r; ++i)
            for (int j = 0; j < r; ++j)
                for (int k = 0; k < c; ++k) A[i * r + j] += xo[i * c + k] * xo[j * c + k];
        operand(A);
        for (int i = 0; i < r; ++i)
            for (int j = 0; j < r; ++j) {
                double aa = 0;
                for (int k = 0; k < r; ++k) aa += A[i * r + k] * A[k * r + j];
                Bm[i * r + j] = s.b * A[i * r + j] + s.c * aa;
            }
        operand(Bm);
        for (int i = 0; i < r; ++i)
            for (int j = 0; j < c; ++j) {
                double bx = 0;
                for (int k = 0; k < r; ++k) bx += Bm[i * r + k] * xo[k * c + j];
                y[i * c + j] = s.a * x[i * c + j] + bx;
            }
        x = y;
    }
    if (!tall) return x;
    std::vector<double> out(x.size());
    for (int i = 0; i < rows; ++i)
        for (int j = 0; j < cols; ++j) out[static_cast<size_t>(i) * cols + j] = x[static_cast<size_t>(j) * c + i];
    return out;
}

/// A full-rank (rows, cols) gradient: uniform noise (a smooth or periodic function of the
/// index gives low rank).
std::vector<float> noise_matrix(int rows, int cols) {
    std::vector<float> g(static_cast<size_t>(rows) * cols);
    std::mt19937 rng(static_cast<unsigned>(rows * 131 + cols));
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    for (float& v : g) v = uniform(rng);
    return g;
}

TEST(NewtonSchulz, MatchesTheIterationInDoubleForWideAndTallMatrices) {
    const MuonStep s;
    // The larger ones split their Gram matrices into bands over 2 and 3 threads.
    for (const auto& [rows, cols, threads] : {std::tuple<int, int, int>{24, 40, 1}, {40, 24, 1}, {33, 33, 1}, {1, 17, 1},
                                              {96, 200, 2}, {200, 96, 3}, {130, 130, 3}}) {
        auto be = make_cpu_backend(threads);
        const std::vector<float> g = noise_matrix(rows, cols);
        const std::vector<double> want = newton_schulz_reference(g, rows, cols, s);
        std::vector<float> x = g;
        std::vector<float> work(newton_schulz_work_floats(rows, cols));
        be->newton_schulz(x.data(), rows, cols, s, work.data());
        double worst = 0;
        for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - want[i]));
        EXPECT_LT(worst, 2e-5) << rows << " x " << cols << " on " << threads
                               << " threads: largest difference from the double iteration";
        // Its point: the singular values pulled into the quintic's band around 1 (about 0.7 to
        // 1.2), so their mean square, |X|_F^2 / min(rows, cols), is within 0.4 to 1.6 (the input's was
        // 1 / min(rows, cols) after the normalization).
        double ss = 0;
        for (float v : x) ss += static_cast<double>(v) * v;
        const double mean_square = ss / std::min(rows, cols);
        EXPECT_GT(mean_square, 0.4) << rows << " x " << cols;
        EXPECT_LT(mean_square, 1.6) << rows << " x " << cols;
    }
}

// train.muon_ns_dtype = bf16: oneDNN's bf16 products where the CPU has them, else OpenBLAS on
// the rounded operands (ctest's unit.muon_bf16_openblas runs these under ZT_CPU_BF16=off).
// One iteration against the rounded iteration in double: both accumulate the same operands,
// so they agree to fp32's accumulation (a few 1e-8 here), where leaving out any one rounding
// (of X's copy, A or B) moves the result by 2e-6 or more, and bf16 operands move it from
// fp32's by 6e-6 or more (checked, so the rounding cannot silently be skipped). Over more
// iterations the two drift apart: where an accumulated value lies within fp32's error of a
// bf16 tie the two round it apart by a bf16 step, and the quintic's slope at 0 (3.4) then
// grows what that step put into the small singular values at every iteration.
/// The backend's iteration with bf16 operands on noise_matrix(rows, cols), and the double
/// reference's with and without the rounding.
struct Bf16Iteration {
    std::vector<float> x;
    std::vector<double> rounded;
    std::vector<double> in_fp32;
};
Bf16Iteration bf16_iteration(int rows, int cols, int threads, int steps) {
    MuonStep s;
    s.ns_bf16 = true;
    s.ns_steps = steps;
    MuonStep fp32 = s;
    fp32.ns_bf16 = false;
    auto be = make_cpu_backend(threads);
    Bf16Iteration out;
    out.x = noise_matrix(rows, cols);
    out.rounded = newton_schulz_reference(out.x, rows, cols, s);
    out.in_fp32 = newton_schulz_reference(out.x, rows, cols, fp32);
    std::vector<float> work(newton_schulz_work_floats(rows, cols));
    be->newton_schulz(out.x.data(), rows, cols, s, work.data());
    return out;
}

TEST(NewtonSchulz, Bf16OperandsMatchTheRoundedIterationInDouble) {
    for (const auto& [rows, cols, threads] : {std::tuple<int, int, int>{24, 40, 1}, {40, 24, 1}, {96, 200, 2},
                                              {200, 96, 2}, {130, 130, 2}}) {
        const Bf16Iteration it = bf16_iteration(rows, cols, threads, 1);
        double worst = 0, rounding = 0;
        for (size_t i = 0; i < it.x.size(); ++i) {
            worst = std::max(worst, std::fabs(it.x[i] - it.rounded[i]));
            rounding = std::max(rounding, std::fabs(it.rounded[i] - it.in_fp32[i]));
        }
        EXPECT_LT(worst, 5e-7) << rows << " x " << cols << " on " << threads
                               << " threads: largest difference from the rounded iteration in double";
        EXPECT_GT(rounding, 5e-6) << rows << " x " << cols << ": bf16 operands should move the result";
    }
}

// Five iterations (the default): within bf16's reach of the fp32 iteration (at most 1e-2
// here), the singular values in the quintic's band as in fp32.
TEST(NewtonSchulz, Bf16OperandsStayNearTheFp32Iteration) {
    for (const auto& [rows, cols] : {std::pair<int, int>{96, 200}, {200, 96}, {130, 130}}) {
        const Bf16Iteration it = bf16_iteration(rows, cols, 2, MuonStep{}.ns_steps);
        double worst = 0, ss = 0;
        for (size_t i = 0; i < it.x.size(); ++i) {
            worst = std::max(worst, std::fabs(it.x[i] - it.in_fp32[i]));
            ss += static_cast<double>(it.x[i]) * it.x[i];
        }
        EXPECT_LT(worst, 3e-2) << rows << " x " << cols << ": largest difference from the fp32 iteration";
        const double mean_square = ss / std::min(rows, cols);
        EXPECT_GT(mean_square, 0.4) << rows << " x " << cols;
        EXPECT_LT(mean_square, 1.6) << rows << " x " << cols;
    }
}

TEST(NewtonSchulz, ZeroMatrixStaysZero) {
    auto be = make_cpu_backend(1);
    std::vector<float> x(12 * 20, 0.f);
    std::vector<float> work(newton_schulz_work_floats(12, 20));
    be->newton_schulz(x.data(), 12, 20, MuonStep{}, work.data());
    for (float v : x) ASSERT_EQ(v, 0.f);
}

TEST(MuonMatrices, TheBlocksMatricesOnly) {
    for (const ModelConfig& m : {test::model_config(2, 2, 16, 8, 40), test::small_llama(2, false, false)}) {
        const ModelLayout layout = make_model_layout(m);
        std::vector<std::string> names;
        for (int u = 0; u < layout.num_units(); ++u) {
            for (const MuonMatrix& mat : muon_matrices(layout, u)) {
                for (const ParamSpec& p : layout.params) {
                    if (p.unit == u && p.offset == mat.begin) names.push_back(p.name);
                }
            }
        }
        for (const ParamSpec& p : layout.params) {
            const bool in_block = p.name.find(".h.") != std::string::npos || p.name.find("h.") == 0 ||
                                  p.name.find("layers.") != std::string::npos;
            const bool want = in_block && p.shape.size() == 2;
            EXPECT_EQ(std::count(names.begin(), names.end(), p.name), want ? 1 : 0) << p.name;
        }
        // AdamW's part is what remains, every trained element in exactly one of the two.
        for (int u = 0; u < layout.num_units(); ++u) {
            const auto all = decay_segments(layout, u, 0, layout.unit_numel[static_cast<size_t>(u)]);
            const auto mats = muon_matrices(layout, u);
            size_t total = 0, rest = 0, in_mats = 0;
            for (const auto& s : all) total += s.end - s.begin;
            for (const auto& s : without_matrices(all, mats)) rest += s.end - s.begin;
            for (const auto& mt : mats) in_mats += mt.end() - mt.begin;
            EXPECT_EQ(rest + in_mats, total) << "unit " << u;
        }
    }
}

// Muon's matrices keep momentum alone, as torch.optim.Muon's do: the optimizer state is 4 B
// per matrix element smaller than AdamW's, and their second moment reads as zero while the
// rest round-trips through the packed buffer.
TEST(MuonState, MatricesKeepNoSecondMoment) {
    const ModelLayout layout = make_model_layout(test::model_config(2, 2, 16, 8, 40));
    auto backend = make_cpu_backend(1);
    ModelState adamw(layout, *backend, self_communicator(), StateOptions::zero(0).with_seed(1));
    ModelState muon(layout, *backend, self_communicator(), StateOptions::zero(0).with_seed(1).with_muon(MuonSettings{}));
    const ShardPlan plan(layout.unit_numel, 1, ShardingPolicy::zero_stage(0), trainable_begins(layout));
    size_t in_matrices = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
        for (const MuonMatrix& m : muon_matrices(layout, u)) in_matrices += m.end() - m.begin;
    }
    ASSERT_GT(in_matrices, 0u);
    EXPECT_EQ(muon.bytes().optimizer,
              adamw.bytes().optimizer - in_matrices * sizeof(float) + OptimizerState::muon_bytes(layout, plan))
        << "matrix elements " << in_matrices;
    StateShards sh = muon.shards();
    for (int u = 0; u < layout.num_units(); ++u) {
        const size_t n = layout.unit_numel[static_cast<size_t>(u)];
        std::vector<float> written(n), back(n, -1.f);
        for (size_t e = 0; e < n; ++e) written[e] = 1.f + static_cast<float>(e);
        sh.write(u, StateShards::kAdamV, 0, n, written.data());
        sh.read(u, StateShards::kAdamV, 0, n, back.data());
        std::vector<bool> in_matrix(n, false);
        for (const MuonMatrix& m : muon_matrices(layout, u)) {
            for (size_t e = m.begin; e < m.end(); ++e) in_matrix[e] = true;
        }
        for (const DecaySegment& seg : decay_segments(layout, u, 0, n)) {
            for (size_t e = seg.begin; e < seg.end; ++e) {
                ASSERT_EQ(back[e], in_matrix[e] ? 0.f : written[e]) << "unit " << u << " element " << e;
            }
        }
    }
}

TEST(MuonRate, TorchAdjustLrFunctions) {
    // torch.optim.Muon's _adjust_lr for shape (A, B) = (out, in).
    EXPECT_DOUBLE_EQ(muon_matrix_rate(1e-3, MuonLrAdjust::kMatchRmsAdamW, 768, 3072), 1e-3 * 0.2 * std::sqrt(3072.0));
    EXPECT_DOUBLE_EQ(muon_matrix_rate(0.02, MuonLrAdjust::kOriginal, 3072, 768), 0.02 * 2.0);
    EXPECT_DOUBLE_EQ(muon_matrix_rate(0.02, MuonLrAdjust::kOriginal, 768, 3072), 0.02);
}

/// ztrain's Muon + AdamW steps on the reference's saved model, the losses before each step.
std::vector<double> ztrain_curve(const std::string& dir, const nlohmann::json& ref, MuonLrAdjust adjust,
                                 double muon_lr) {
    Config c;
    for (const HfSetting& s : read_hf_config(dir + "/model")) set_config_value(c, s.key, s.text);
    const ModelConfig mc = c.model;
    const int B = ref.at("B").get<int>();
    const int T = ref.at("T").get<int>();
    auto backend = make_cpu_backend(1);
    Transformer model(mc, *backend, B);
    TrainConfig tc = test::reference_adamw();  // muon_torch.py's LR, BETA1, ...
    tc.optimizer = OptimizerKind::kMuon;
    tc.muon_lr = muon_lr;
    tc.muon_adjust_lr = adjust;
    ModelState state(model.layout(), *backend, self_communicator(),
                     StateOptions::zero(0).with_muon(muon_settings(tc)));
    import_weights(dir + "/model", model.layout(), mc, state);
    std::vector<int32_t> inputs, targets;
    test::reference_rows(ref.at("tokens"), T, &inputs, &targets);
    const float dloss = 1.0f / static_cast<float>(B * T);
    std::vector<double> curve;
    const size_t steps = ref.at("match_rms_adamw").at("curve").size();
    for (size_t t = 1; t <= steps; ++t) {
        state.zero_grads();
        state.begin_micro_step(true, true);
        curve.push_back(model.forward(state, inputs.data(), targets.data(), B, T, dloss));
        model.backward(state);
        state.finish_grad_sync();
        AdamWStep sp = adamw_step_params(tc, tc.lr, static_cast<long>(t));
        sp.grad_scale = static_cast<float>(clip_multiplier(std::sqrt(state.grad_sum_squares()), tc.grad_clip));
        state.optimizer_step(sp);
    }
    return curve;
}

TEST(MuonReference, CurvesMatchTorchOptimMuonWithAdamW) {
    const std::string python = test::interop_python({"torch", "transformers"});
    ZT_SKIP_WITHOUT_INTEROP(python, "no interop environment with torch and transformers (ZT_INTEROP_VENV, .venv)");
    const test::ScratchDir scratch("muon-reference");
    const std::string& dir = scratch.path();
    const std::string cmd = str(python, " " ZT_SOURCE_DIR "/tests/reference/muon_torch.py ", dir);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    for (const auto& [name, adjust] : {std::pair<const char*, MuonLrAdjust>{"match_rms_adamw",
                                                                            MuonLrAdjust::kMatchRmsAdamW},
                                       {"original", MuonLrAdjust::kOriginal}}) {
        const nlohmann::json& r = ref.at(name);
        const std::vector<double> got = ztrain_curve(dir, ref, adjust, r.at("muon_lr").get<double>());
        const auto want = r.at("curve").get<std::vector<double>>();
        const auto bf16 = r.at("curve_bf16").get<std::vector<double>>();
        ASSERT_EQ(got.size(), want.size());
        // fp32 against float64: AdamW's rate gives 1e-6; "original" at 0.02 takes the loss
        // from 5.7 to 0.16 in 20 steps, a trajectory that grows fp32's rounding to ~7e-5 (the
        // order of the CPU's sums alone moves it between 1e-5 and 7e-5). A wrong momentum, rate
        // or decay is off by 1e-2 and more within a few steps.
        const double tolerance = adjust == MuonLrAdjust::kOriginal ? 3e-4 : 1e-4;
        double worst = 0, worst_bf16 = 0;
        for (size_t s = 0; s < want.size(); ++s) {
            const double rel = std::fabs(got[s] - want[s]) / want[s];
            EXPECT_LT(rel, tolerance) << name << " step " << s + 1 << ": " << got[s] << " vs torch " << want[s];
            worst = std::max(worst, rel);
            worst_bf16 = std::max(worst_bf16, std::fabs(got[s] - bf16[s]) / bf16[s]);
        }
        // Muon as torch ships it (bf16 Newton-Schulz) stays within its own rounding's reach.
        EXPECT_LT(worst_bf16, 5e-2) << name;
        std::printf("[muon %s] curve %.6g -> %.6g; largest relative difference %.2e (from bf16 torch %.2e)\n",
                    name, want.front(), want.back(), worst, worst_bf16);
    }
}

}  // namespace
}  // namespace zt
