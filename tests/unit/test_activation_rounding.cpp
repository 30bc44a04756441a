// The CPU's 16-bit activation emulation (backend/activation_rounding.hpp): which outputs an
// op rounds and which it leaves in fp32, against the same op on the plain backend.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ztrain/backend/activation_rounding.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/rope.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {
namespace {

std::vector<float> ramp(size_t n, float scale, float shift) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * static_cast<float>(i) + shift) + 0.001f * static_cast<float>(i);
    return v;
}

std::vector<float> rounded(std::vector<float> v, DType t) {
    round_to_dtype(v.data(), v.size(), t);
    return v;
}

/// Bit-for-bit equality, naming the first element that differs.
void expect_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << what << ": element " << i << " of " << got.size();
    }
}

/// Whether some element is not representable in t (so a rounding step would show).
bool has_unrounded(const std::vector<float>& v, DType t) { return rounded(v, t) != v; }

class ActivationRounding : public ::testing::TestWithParam<DType> {
  protected:
    std::unique_ptr<Backend> plain = make_cpu_backend(1);
};

TEST_P(ActivationRounding, LayerNormRoundsItsOutputOnlyNotMeanOrRstd) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 6, C = 20;
    const std::vector<float> x = ramp(N * C, 2.f, 0.1f), w = ramp(C, 1.f, 0.5f), b = ramp(C, 0.3f, 1.f);
    std::vector<float> out(N * C), mean(N), rstd(N), out0(N * C), mean0(N), rstd0(N);
    be.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    plain->layernorm_forward(out0.data(), mean0.data(), rstd0.data(), x.data(), w.data(), b.data(), N, C);
    ASSERT_TRUE(has_unrounded(out0, t)) << "the case must have something to round";
    expect_same(out, rounded(out0, t), "out");
    expect_same(mean, mean0, "mean");
    expect_same(rstd, rstd0, "rstd");
}

TEST_P(ActivationRounding, MatmulBackwardRoundsDinpButNotParameterGradients) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 5, C = 8, OC = 12;
    const std::vector<float> dout = ramp(N * OC, 1.f, 0.2f), inp = ramp(N * C, 1.f, 0.7f), w = ramp(OC * C, 0.5f, 0.3f);
    std::vector<float> dinp(N * C), dw(OC * C), db(OC), dinp0(N * C), dw0(OC * C), db0(OC);
    be.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    plain->matmul_backward(dinp0.data(), dw0.data(), db0.data(), dout.data(), inp.data(), w.data(), N, C, OC);
    ASSERT_TRUE(has_unrounded(dinp0, t) && has_unrounded(dw0, t));
    expect_same(dinp, rounded(dinp0, t), "dinp");
    expect_same(dw, dw0, "dweight");
    expect_same(db, db0, "dbias");
}

TEST_P(ActivationRounding, ResidualProjectionIsRoundedOnceAfterTheSum) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 4, C = 16, OC = 16;
    const std::vector<float> inp = ramp(N * C, 1.f, 0.4f), w = ramp(OC * C, 0.25f, 0.9f), b = ramp(OC, 0.1f, 0.f),
                             res = ramp(N * OC, 3.f, 1.3f);
    std::vector<float> out(N * OC), sum(N * OC);
    be.matmul_residual_forward(out.data(), inp.data(), w.data(), b.data(), res.data(), N, C, OC);
    plain->matmul_forward(sum.data(), inp.data(), w.data(), b.data(), N, C, OC);
    plain->residual_forward(sum.data(), sum.data(), res.data(), sum.size());
    expect_same(out, rounded(sum, t), "branch + residual");
}

TEST_P(ActivationRounding, CrossEntropyKeepsLossesAndRoundsDlogitsOnlyWhenTraining) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 3, V = 10, Vp = 16;
    const std::vector<int32_t> targets = {1, 7, 3};
    const std::vector<float> logits_in = ramp(N * Vp, 2.f, 0.6f);
    std::vector<float> logits = logits_in, logits0 = logits_in, losses(N), losses0(N);
    be.softmax_cross_entropy(losses.data(), logits.data(), targets.data(), N, V, Vp, 1.f / N);
    plain->softmax_cross_entropy(losses0.data(), logits0.data(), targets.data(), N, V, Vp, 1.f / N);
    ASSERT_TRUE(has_unrounded(logits0, t) && has_unrounded(losses0, t));
    expect_same(logits, rounded(logits0, t), "dlogits");
    expect_same(losses, losses0, "losses");
    // An evaluation (dloss 0) leaves the logits as they were.
    logits = logits_in;
    be.softmax_cross_entropy(losses.data(), logits.data(), targets.data(), N, V, Vp, 0.f);
    expect_same(logits, logits_in, "logits after an evaluation");
}

TEST_P(ActivationRounding, AttentionRoundsOutputAndProbabilitiesAndDqkv) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int B = 1, T = 4, C = 8, NH = 2;
    const std::vector<float> qkv = ramp(B * T * 3 * C, 1.f, 0.2f), dout = ramp(B * T * C, 1.f, 0.8f);
    std::vector<float> out(B * T * C), att(B * NH * T * T), out0(out.size()), att0(att.size());
    be.attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    plain->attention_forward(out0.data(), att0.data(), qkv.data(), B, T, C, NH);
    expect_same(out, rounded(out0, t), "out");
    for (size_t i = 0; i < att.size(); ++i) {
        if ((i % T) <= (i / T) % T) {
            ASSERT_EQ(att[i], rounded({att0[i]}, t)[0]) << "att element " << i;
        }
    }
    std::vector<float> scratch(plain->attention_scratch_floats(B, T, NH));
    std::vector<float> dqkv(qkv.size()), dqkv0(qkv.size());
    be.attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    plain->attention_backward(dqkv0.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    expect_same(dqkv, rounded(dqkv0, t), "dqkv");
}

TEST_P(ActivationRounding, RmsNormRoundsOutputAndDinpButNotRstdOrDweight) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 5, C = 24;
    const std::vector<float> x = ramp(N * C, 2.f, 0.3f), w = ramp(C, 1.f, 0.9f), dout = ramp(N * C, 1.f, 1.7f);
    std::vector<float> out(N * C), rstd(N), out0(N * C), rstd0(N);
    be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    plain->rmsnorm_forward(out0.data(), rstd0.data(), x.data(), w.data(), N, C, 1e-5f);
    ASSERT_TRUE(has_unrounded(out0, t) && has_unrounded(rstd0, t));
    expect_same(out, rounded(out0, t), "out");
    expect_same(rstd, rstd0, "rstd");
    std::vector<float> dinp(N * C), dw(C), dinp0(N * C), dw0(C);
    be.rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    plain->rmsnorm_backward(dinp0.data(), dw0.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    ASSERT_TRUE(has_unrounded(dinp0, t) && has_unrounded(dw0, t));
    expect_same(dinp, rounded(dinp0, t), "dinp");
    expect_same(dw, dw0, "dweight");
}

TEST_P(ActivationRounding, RopeRoundsTheRotatedQkvAndItsGradient) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int B = 2, T = 3, NH = 4, NKV = 2, hs = 6, W = (NH + 2 * NKV) * hs;
    const std::vector<float> table = rope_table(T, hs, RopeOptions{});
    // The input holds values of t, as a 16-bit qkv would: the v part is then unchanged.
    const std::vector<float> qkv = rounded(ramp(B * T * W, 1.f, 0.4f), t), dout = rounded(ramp(B * T * W, 1.f, 2.f), t);
    std::vector<float> out(qkv.size()), out0(qkv.size());
    be.rope_forward(out.data(), qkv.data(), table.data(), B, T, NH, NKV, hs);
    plain->rope_forward(out0.data(), qkv.data(), table.data(), B, T, NH, NKV, hs);
    ASSERT_TRUE(has_unrounded(out0, t));
    expect_same(out, rounded(out0, t), "rotated qkv");
    std::vector<float> in_place = qkv;
    be.rope_forward(in_place.data(), in_place.data(), table.data(), B, T, NH, NKV, hs);
    expect_same(in_place, out, "rotated qkv in place");
    std::vector<float> dinp(qkv.size()), dinp0(qkv.size());
    be.rope_backward(dinp.data(), dout.data(), table.data(), B, T, NH, NKV, hs);
    plain->rope_backward(dinp0.data(), dout.data(), table.data(), B, T, NH, NKV, hs);
    ASSERT_TRUE(has_unrounded(dinp0, t));
    expect_same(dinp, rounded(dinp0, t), "dqkv");
}

TEST_P(ActivationRounding, SwiGluRoundsOutputAndGradient) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int N = 4, F = 10;
    const std::vector<float> inp = ramp(N * 2 * F, 3.f, 0.1f), dout = ramp(N * F, 1.f, 0.6f);
    std::vector<float> out(N * F), out0(N * F), dinp(N * 2 * F), dinp0(N * 2 * F);
    be.swiglu_forward(out.data(), inp.data(), N, F);
    plain->swiglu_forward(out0.data(), inp.data(), N, F);
    ASSERT_TRUE(has_unrounded(out0, t));
    expect_same(out, rounded(out0, t), "out");
    be.swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    plain->swiglu_backward(dinp0.data(), inp.data(), dout.data(), N, F);
    ASSERT_TRUE(has_unrounded(dinp0, t));
    expect_same(dinp, rounded(dinp0, t), "d(gate|up)");
}

TEST_P(ActivationRounding, GroupedQueryAttentionRoundsOutputProbabilitiesAndDqkv) {
    const DType t = GetParam();
    ActivationRoundingBackend be(*plain, t);
    const int B = 2, T = 5, NH = 6, NKV = 2, hs = 4;
    const size_t n_qkv = static_cast<size_t>(B) * T * (NH + 2 * NKV) * hs, n_out = static_cast<size_t>(B) * T * NH * hs;
    const std::vector<float> qkv = ramp(n_qkv, 1.f, 0.5f), dout = ramp(n_out, 1.f, 1.1f);
    std::vector<float> out(n_out), out0(n_out), att(static_cast<size_t>(B) * NH * T * T), att0(att.size());
    be.gqa_attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, NKV, hs);
    plain->gqa_attention_forward(out0.data(), att0.data(), qkv.data(), B, T, NH, NKV, hs);
    ASSERT_TRUE(has_unrounded(out0, t));
    expect_same(out, rounded(out0, t), "out");
    for (size_t i = 0; i < att.size(); ++i) {
        if ((i % T) <= (i / T) % T) {
            ASSERT_EQ(att[i], rounded({att0[i]}, t)[0]) << "att element " << i;
        }
    }
    std::vector<float> scratch(plain->attention_scratch_floats(B, T, NH));
    std::vector<float> dqkv(n_qkv), dqkv0(n_qkv);
    be.gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NKV, hs);
    plain->gqa_attention_backward(dqkv0.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, NH, NKV,
                                  hs);
    ASSERT_TRUE(has_unrounded(dqkv0, t));
    expect_same(dqkv, rounded(dqkv0, t), "dqkv");
}

TEST(ActivationRoundingSetup, RefusesFp32) {
    std::unique_ptr<Backend> plain = make_cpu_backend(1);
    EXPECT_THROW(ActivationRoundingBackend(*plain, DType::kF32), std::exception);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationRounding, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) { return std::string(dtype_name(p.param)); });

}  // namespace
}  // namespace zt
