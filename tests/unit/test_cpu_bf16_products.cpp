// The CPU's bf16 products through oneDNN (backend/cpu_bf16.hpp): every matmul shape form the
// GPT-2 and Llama models use, forward and the transposed backward forms, against OpenBLAS
// sgemm (the same backend with fp32 activations) on the same bf16-rounded inputs; and the
// ZT_CPU_BF16 decision.
//
// The bound. A product of two bf16 values is exact in fp32 (8 + 8 significant bits <= 24),
// so both paths add the same exact terms p_k = a_k * b_k (and the old C, c0, when
// accumulating) in fp32, in different orders. Any fp32 summation order of n terms errs by at
// most gamma_n * sum |terms| with gamma_n ~ n * u, u = 2^-24 (Higham, Accuracy and
// Stability, 4.2); so the two differ by at most 2 * (K + 1) * u * (sum_k |p_k| + |c0|):
// "equal to fp32 accumulation rounding". Parameter-gradient bias sums (dbias) do not go
// through oneDNN and must be bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/backend/forwarding_backend.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

namespace zt {
namespace {

constexpr double kUnitRoundoff = 1.0 / (1 << 24);  // fp32's u = 2^-24

/// n bf16-representable values in about [-scale, scale], deterministic.
std::vector<float> bf16_values(size_t n, float scale, uint32_t seed) {
    std::vector<float> v(n);
    uint32_t s = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        const float x = scale * (static_cast<float>(s >> 8) / 8388608.f - 1.f);
        v[i] = bf16_to_f32(f32_to_bf16(x));
    }
    return v;
}

/// One row-major product form: C (M, N) [+]= op(A) (M, K) @ op(B) (K, N) with A, B, C
/// contiguous (lda/ldb the stored row width), as matmul uses them.
struct Form {
    bool trans_a;
    bool trans_b;
    int M, N, K;
};

/// sum_k |op(A)[m, k] * op(B)[k, n]| for every (m, n), in double.
std::vector<double> abs_products(const Form& f, const std::vector<float>& A, const std::vector<float>& B) {
    std::vector<double> s(static_cast<size_t>(f.M) * f.N, 0.0);
    for (int m = 0; m < f.M; ++m) {
        for (int k = 0; k < f.K; ++k) {
            const double a = f.trans_a ? A[static_cast<size_t>(k) * f.M + m] : A[static_cast<size_t>(m) * f.K + k];
            for (int n = 0; n < f.N; ++n) {
                const double b = f.trans_b ? B[static_cast<size_t>(n) * f.K + k] : B[static_cast<size_t>(k) * f.N + n];
                s[static_cast<size_t>(m) * f.N + n] += std::fabs(a * b);
            }
        }
    }
    return s;
}

/// got vs want element by element within 2 (K + 1) u (sum |p| + |c0|); names the first miss.
void expect_within_accumulation(const std::vector<float>& got, const std::vector<float>& want,
                                const std::vector<double>& abs_sum, const std::vector<float>& c0, int K,
                                const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
        const double bound = 2.0 * (K + 1) * kUnitRoundoff * (abs_sum[i] + std::fabs(c0[i]));
        const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
        ASSERT_LE(diff, bound) << what << ": element " << i << " of " << got.size() << " is " << got[i]
                               << ", sgemm gives " << want[i] << " (bound " << bound << ")";
    }
}

/// A matmul layer shape of the models: N rows, C inputs, OC outputs.
struct LayerShape {
    const char* name;
    int N, C, OC;
};

// GPT-2 at C = 64, 4 heads, Vp = 128; Llama at C = 64, NH = 4, NKV = 2 (hs 16), F = 176;
// N = B*T = 64 rows, an odd 37 (a ragged last block) and 1 (a decoded token).
const LayerShape kShapes[] = {
    {"gpt2 qkv", 64, 64, 192},      {"gpt2 attn proj", 64, 64, 64},  {"gpt2 fc", 64, 64, 256},
    {"gpt2 fc proj", 64, 256, 64},  {"gpt2 lm head", 64, 64, 128},   {"llama qkv", 64, 64, 128},
    {"llama o proj", 64, 64, 64},   {"llama gate_up", 64, 64, 352},  {"llama down", 64, 176, 64},
    {"llama lm head", 37, 64, 128}, {"decode qkv", 1, 64, 192},      {"decode lm head", 1, 64, 128},
};

class Bf16Products : public ::testing::TestWithParam<LayerShape> {
  protected:
    void SetUp() override {
        if (!cpu_bf16_products().native) {
            GTEST_SKIP() << "no bf16 products here: " << cpu_bf16_products().fallback_reason;
        }
        m_bf16 = make_cpu_backend(2);
        m_bf16->set_activation_dtype(DType::kBF16);
        m_fp32 = make_cpu_backend(2);
    }
    std::unique_ptr<Backend> m_bf16;
    std::unique_ptr<Backend> m_fp32;
};

TEST_P(Bf16Products, ForwardWithAndWithoutBiasIsSgemmUpToAccumulationOrder) {
    const LayerShape s = GetParam();
    const auto inp = bf16_values(static_cast<size_t>(s.N) * s.C, 2.f, 1);
    const auto weight = bf16_values(static_cast<size_t>(s.OC) * s.C, 0.5f, 2);
    const auto bias = bf16_values(static_cast<size_t>(s.OC), 1.f, 3);
    // out = inp @ weight^T: op(A) = inp (N, C), op(B) = weight^T (stored (OC, C)).
    const auto sums = abs_products({false, true, s.N, s.OC, s.C}, inp, weight);
    for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        std::vector<float> got(static_cast<size_t>(s.N) * s.OC, 7.f);
        std::vector<float> want(got.size(), 7.f);
        m_bf16->matmul_forward(got.data(), inp.data(), weight.data(), b, s.N, s.C, s.OC);
        m_fp32->matmul_forward(want.data(), inp.data(), weight.data(), b, s.N, s.C, s.OC);
        std::vector<float> c0(got.size(), 0.f);
        if (b != nullptr) {
            for (size_t i = 0; i < c0.size(); ++i) c0[i] = bias[i % s.OC];
        }
        expect_within_accumulation(got, want, sums, c0, s.C,
                                   std::string(s.name) + (b != nullptr ? " forward + bias" : " forward"));
    }
}

TEST_P(Bf16Products, BackwardAccumulatesDinpAndDweightAsSgemmAndDbiasBitForBit) {
    const LayerShape s = GetParam();
    const auto inp = bf16_values(static_cast<size_t>(s.N) * s.C, 2.f, 4);
    const auto weight = bf16_values(static_cast<size_t>(s.OC) * s.C, 0.5f, 5);
    const auto dout = bf16_values(static_cast<size_t>(s.N) * s.OC, 0.25f, 6);
    // The outputs hold earlier gradients: backward accumulates.
    const auto dinp0 = bf16_values(static_cast<size_t>(s.N) * s.C, 0.1f, 7);
    const auto dweight0 = bf16_values(static_cast<size_t>(s.OC) * s.C, 0.1f, 8);
    const auto dbias0 = bf16_values(static_cast<size_t>(s.OC), 0.1f, 9);
    std::vector<float> dinp = dinp0, dweight = dweight0, dbias = dbias0;
    std::vector<float> dinp_ref = dinp0, dweight_ref = dweight0, dbias_ref = dbias0;
    m_bf16->matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(), s.N,
                            s.C, s.OC);
    m_fp32->matmul_backward(dinp_ref.data(), dweight_ref.data(), dbias_ref.data(), dout.data(), inp.data(),
                            weight.data(), s.N, s.C, s.OC);
    // dinp (N, C) += dout (N, OC) @ weight (OC, C): no transposes, K = OC.
    expect_within_accumulation(dinp, dinp_ref, abs_products({false, false, s.N, s.C, s.OC}, dout, weight), dinp0,
                               s.OC, std::string(s.name) + " dinp");
    // dweight (OC, C) += dout^T (stored (N, OC)) @ inp (N, C): K = N.
    expect_within_accumulation(dweight, dweight_ref, abs_products({true, false, s.OC, s.C, s.N}, dout, inp),
                               dweight0, s.N, std::string(s.name) + " dweight");
    for (size_t i = 0; i < dbias.size(); ++i) {
        ASSERT_EQ(dbias[i], dbias_ref[i]) << s.name << " dbias element " << i;
    }
}

TEST_P(Bf16Products, RepeatedProductsAreBitIdentical) {
    // Deterministic run to run (the ZeRO equivalence and resume tests rely on it), also
    // through the primitive cache's second use of a shape.
    const LayerShape s = GetParam();
    const auto inp = bf16_values(static_cast<size_t>(s.N) * s.C, 2.f, 10);
    const auto weight = bf16_values(static_cast<size_t>(s.OC) * s.C, 0.5f, 11);
    std::vector<float> first(static_cast<size_t>(s.N) * s.OC), again(first.size());
    m_bf16->matmul_forward(first.data(), inp.data(), weight.data(), nullptr, s.N, s.C, s.OC);
    m_bf16->matmul_forward(again.data(), inp.data(), weight.data(), nullptr, s.N, s.C, s.OC);
    for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], again[i]) << s.name << " element " << i;
}

INSTANTIATE_TEST_SUITE_P(ModelShapes, Bf16Products, ::testing::ValuesIn(kShapes),
                         [](const ::testing::TestParamInfo<LayerShape>& info) {
                             std::string n = info.param.name;
                             for (char& c : n) {
                                 if (c == ' ' || c == '_') c = 'X';
                             }
                             return n;
                         });

TEST(Bf16ProductsFp32Activations, StaySgemmBitForBit) {
    // fp32 (and fp16) activations never use the bf16 products: the fp32 decks' numbers.
    auto told = make_cpu_backend(2);
    told->set_activation_dtype(DType::kBF16);
    told->set_activation_dtype(DType::kF32);
    auto plain = make_cpu_backend(2);
    const int N = 64, C = 64, OC = 192;
    const auto inp = bf16_values(static_cast<size_t>(N) * C, 2.f, 12);
    const auto weight = bf16_values(static_cast<size_t>(OC) * C, 0.5f, 13);
    for (DType t : {DType::kF32, DType::kF16}) {
        told->set_activation_dtype(t);
        std::vector<float> got(static_cast<size_t>(N) * OC), want(got.size());
        told->matmul_forward(got.data(), inp.data(), weight.data(), nullptr, N, C, OC);
        plain->matmul_forward(want.data(), inp.data(), weight.data(), nullptr, N, C, OC);
        for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << dtype_name(t) << " element " << i;
    }
}

// Under fp32 activations a bf16-stored weight (a LoRA base under lora.base_dtype = bf16) runs
// on the bf16 products: the fp32 operands rounded to bf16, the products accumulated in fp32.
// fp32 weights in the same backend (the adapters) stay on sgemm, unrounded.
TEST(Bf16ProductsFp32Activations, Bf16StoredWeightsRunOnTheBf16Products) {
    if (!cpu_bf16_products().native) GTEST_SKIP() << "no bf16 products here: " << cpu_bf16_products().fallback_reason;
    auto be = make_cpu_backend(2);
    be->set_activation_dtype(DType::kF32);
    auto plain = make_cpu_backend(2);
    EXPECT_TRUE(be->reads_weights_in(DType::kBF16));
    const int N = 48, C = 64, OC = 96;
    std::vector<float> inp(static_cast<size_t>(N) * C), dout(static_cast<size_t>(N) * OC);
    for (size_t i = 0; i < inp.size(); ++i) inp[i] = std::sin(0.37f * static_cast<float>(i)) * 1.7f;  // not bf16
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.23f * static_cast<float>(i)) * 0.9f;
    const auto weight = bf16_values(static_cast<size_t>(OC) * C, 0.5f, 21);
    std::vector<uint16_t> weight16(weight.size());
    for (size_t i = 0; i < weight.size(); ++i) weight16[i] = f32_to_bf16(weight[i]);
    const ConstActPtr w16(weight16.data(), DType::kBF16);
    const auto rounded = [](std::vector<float> v) {
        for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
        return v;
    };
    const std::vector<float> inp_r = rounded(inp), dout_r = rounded(dout);
    std::vector<float> got(static_cast<size_t>(N) * OC), want(got.size()), wide(got.size());
    be->matmul_forward(got.data(), inp.data(), w16, nullptr, N, C, OC);
    be->matmul_forward(want.data(), inp_r.data(), w16, nullptr, N, C, OC);
    plain->matmul_forward(wide.data(), inp.data(), weight.data(), nullptr, N, C, OC);
    size_t differs = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "forward element " << i << ": the input was not rounded to bf16 once";
        ASSERT_NEAR(got[i], wide[i], 2e-2 * (1.0 + std::fabs(wide[i]))) << "forward element " << i;
        differs += got[i] != wide[i];
    }
    EXPECT_GT(differs, got.size() / 2) << "the fp32 product of the unrounded input, not the bf16 products";
    // The input gradient of a frozen weight (no weight gradient): dout rounded alike.
    std::vector<float> dgot(inp.size(), 0.f), dwant(inp.size(), 0.f);
    be->matmul_backward(dgot.data(), nullptr, nullptr, dout.data(), inp.data(), w16, N, C, OC);
    be->matmul_backward(dwant.data(), nullptr, nullptr, dout_r.data(), inp.data(), w16, N, C, OC);
    for (size_t i = 0; i < dgot.size(); ++i) ASSERT_EQ(dgot[i], dwant[i]) << "input gradient element " << i;
    // An fp32 weight after them: sgemm's bits, as a backend that never saw a bf16 weight.
    be->matmul_forward(got.data(), inp.data(), weight.data(), nullptr, N, C, OC);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], wide[i]) << "fp32 weight, element " << i;
}

// A frozen bf16 weight's input gradient from fp32 output gradients with many outputs (the LM
// head's: vocabulary-wide rows) runs a block of rows at a time (its bf16 copy of dout is a
// block's): every row still equals the product of its rounded operands, within fp32
// accumulation rounding (the bound at the top of this file).
TEST(Bf16ProductsFp32Activations, AWideFrozenInputGradientGoesInRowBlocks) {
    if (!cpu_bf16_products().native) GTEST_SKIP() << "no bf16 products here: " << cpu_bf16_products().fallback_reason;
    auto be = make_cpu_backend(2);
    be->set_activation_dtype(DType::kF32);
    const int N = 40, C = 16, OC = 1 << 17;  // blocks of 32 rows: two, the second partial
    std::vector<float> dout(static_cast<size_t>(N) * OC);
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::cos(0.013f * static_cast<float>(i % 7919)) * 0.7f;
    const auto weight = bf16_values(static_cast<size_t>(OC) * C, 0.5f, 31);
    std::vector<uint16_t> weight16(weight.size());
    for (size_t i = 0; i < weight.size(); ++i) weight16[i] = f32_to_bf16(weight[i]);
    std::vector<float> dinp(static_cast<size_t>(N) * C, 0.f);
    be->matmul_backward(dinp.data(), nullptr, nullptr, dout.data(), nullptr, ConstActPtr(weight16.data(), DType::kBF16),
                        N, C, OC);
    for (int n = 0; n < N; ++n) {
        for (int c = 0; c < C; ++c) {
            double sum = 0, mag = 0;
            for (int o = 0; o < OC; ++o) {
                const double p = static_cast<double>(bf16_to_f32(f32_to_bf16(dout[static_cast<size_t>(n) * OC + o]))) *
                                 weight[static_cast<size_t>(o) * C + c];
                sum += p;
                mag += std::fabs(p);
            }
            const double bound = 2.0 * (OC + 1) * kUnitRoundoff * mag;
            ASSERT_NEAR(dinp[static_cast<size_t>(n) * C + c], sum, bound) << "row " << n << " column " << c;
        }
    }
}

// A bf16 input gradient through a weight with a vocabulary's rows runs its reduction in
// slices (cpu/matmul.cpp: oneDNN runs one that long slower), summed in fp32 and added to the
// old dinp once: every element is the old value plus the exact sum, rounded to bf16 once
// (relative 2^-8), within fp32 accumulation rounding (the bound at the top of this file).
TEST(Bf16ProductsSlices, ALongInputGradientReductionIsRoundedOnce) {
    if (!cpu_bf16_products().native) GTEST_SKIP() << "no bf16 products here: " << cpu_bf16_products().fallback_reason;
    auto be = make_cpu_backend(2);
    be->set_activation_dtype(DType::kBF16);
    const int N = 24, C = 16, OC = 3 * 8192 + 100;  // three slices, the last ragged
    const auto dout = bf16_values(static_cast<size_t>(N) * OC, 0.7f, 41);
    const auto weight = bf16_values(static_cast<size_t>(OC) * C, 0.5f, 43);
    const auto c0 = bf16_values(static_cast<size_t>(N) * C, 4.f, 47);
    auto to16 = [](const std::vector<float>& v) {
        std::vector<uint16_t> h(v.size());
        for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
        return h;
    };
    const std::vector<uint16_t> dout16 = to16(dout), weight16 = to16(weight);
    std::vector<uint16_t> dinp16 = to16(c0);
    be->matmul_backward(ActPtr(dinp16.data(), DType::kBF16), nullptr, nullptr, ConstActPtr(dout16.data(), DType::kBF16),
                        ConstActPtr(nullptr, DType::kBF16), ConstActPtr(weight16.data(), DType::kBF16), N, C, OC);
    constexpr double kBf16Roundoff = 1.0 / (1 << 8);
    for (int n = 0; n < N; ++n) {
        for (int c = 0; c < C; ++c) {
            const size_t at = static_cast<size_t>(n) * C + c;
            double sum = c0[at], mag = std::fabs(c0[at]);
            for (int o = 0; o < OC; ++o) {
                const double p = static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) * weight[static_cast<size_t>(o) * C + c];
                sum += p;
                mag += std::fabs(p);
            }
            const double bound = kBf16Roundoff * std::fabs(sum) + 2.0 * (OC + 1) * kUnitRoundoff * mag;
            ASSERT_NEAR(bf16_to_f32(dinp16[at]), sum, bound) << "row " << n << " column " << c;
        }
    }
    // 1 in the first slice and 3 * 2^-10 in each of the next three: rounded per slice the sum
    // would stay 1 (each addition is under half of bf16's ulp at 1, 2^-8); rounded once,
    // 1 + 9 * 2^-10 is 1 + 2^-7.
    const int OC4 = 4 * 8192 + 100;
    std::vector<uint16_t> d4(static_cast<size_t>(OC4), 0), w4(static_cast<size_t>(OC4), 0), x4(1, 0);
    d4[0] = f32_to_bf16(1.f);
    for (int s4 = 1; s4 < 4; ++s4) d4[static_cast<size_t>(s4) * 8192] = f32_to_bf16(3.f / 1024.f);
    for (int s4 = 0; s4 < 4; ++s4) w4[static_cast<size_t>(s4) * 8192] = f32_to_bf16(1.f);
    be->matmul_backward(ActPtr(x4.data(), DType::kBF16), nullptr, nullptr, ConstActPtr(d4.data(), DType::kBF16),
                        ConstActPtr(nullptr, DType::kBF16), ConstActPtr(w4.data(), DType::kBF16), 1, 1, OC4);
    EXPECT_EQ(bf16_to_f32(x4[0]), 1.f + 1.f / 128.f) << "the slices' sum was rounded more than once";
}

TEST(Bf16ProductsDecision, OffAndBadValues) {
    const CpuBf16Products off = decide_cpu_bf16_products("off");
    EXPECT_FALSE(off.native);
    EXPECT_EQ(off.fallback_reason, "ZT_CPU_BF16=off");
    try {
        decide_cpu_bf16_products("fast");
        FAIL() << "ZT_CPU_BF16=fast accepted";
    } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("ZT_CPU_BF16=fast: expected auto, on or off"), std::string::npos)
            << e.what();
    }
    // auto is never an error; "on" is exactly auto where native products exist.
    const CpuBf16Products automatic = decide_cpu_bf16_products(nullptr);
    EXPECT_EQ(automatic.native, automatic.fallback_reason.empty()) << automatic.fallback_reason;
    if (automatic.native) {
        EXPECT_TRUE(decide_cpu_bf16_products("on").native);
    } else {
        EXPECT_THROW(decide_cpu_bf16_products("on"), InputError);
    }
    EXPECT_NE(cpu_bf16_products_report().find(automatic.isa), std::string::npos) << cpu_bf16_products_report();
}

TEST(Bf16ProductsDecision, NoteOnlyForBf16WithoutNativeProducts) {
    auto be = make_cpu_backend(1);
    EXPECT_EQ(be->activation_dtype_note(DType::kF32), "");
    EXPECT_EQ(be->activation_dtype_note(DType::kF16), "");
    EXPECT_EQ(be->activation_dtype_note(DType::kBF16).empty(), cpu_bf16_products().native)
        << be->activation_dtype_note(DType::kBF16);
}

}  // namespace
}  // namespace zt
