// The CUDA backend's matrix products (src/backend/cuda/gemm_plan.hpp) run through a host
// reference of cuBLAS's strided-batched GEMM and compared with the CPU backend. No GPU is
// needed: this checks the layout arithmetic (transposes, leading dimensions, per-head batch
// strides into qkv) in every build; tests/gpu checks cuBLASLt's arithmetic on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "../../src/backend/cuda/gemm_plan.hpp"
#include "ztrain/backend/backend.hpp"

namespace {

using zt::cuda::Gemm;

/// cuBLAS semantics on host floats, column-major: D = alpha op(A) op(B) + beta D (+ bias).
void ref_gemm(const Gemm& g) {
    const auto* A = static_cast<const float*>(g.a.ptr);
    const auto* B = static_cast<const float*>(g.b.ptr);
    auto* D = static_cast<float*>(g.d.ptr);
    const auto* bias = static_cast<const float*>(g.bias);
    for (int bt = 0; bt < g.batch; ++bt) {
        const float* a = A + bt * g.a.stride;
        const float* b = B + bt * g.b.stride;
        float* d = D + bt * g.d.stride;
        for (int j = 0; j < g.n; ++j) {
            for (int i = 0; i < g.m; ++i) {
                double acc = 0.0;
                for (int l = 0; l < g.k; ++l) {
                    const float av = g.a.trans ? a[l + i * g.a.ld] : a[i + l * g.a.ld];
                    const float bv = g.b.trans ? b[j + l * g.b.ld] : b[l + j * g.b.ld];
                    acc += static_cast<double>(av) * bv;
                }
                float& out = d[i + j * g.d.ld];
                out = static_cast<float>(g.alpha * acc + (g.beta != 0.f ? g.beta * out : 0.f) +
                                         (bias != nullptr ? bias[i] : 0.f));
            }
        }
    }
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
    ASSERT_EQ(got.size(), ref.size());
    size_t bad = 0;
    size_t first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!(std::fabs(got[i] - ref[i]) <= 1e-4f + 1e-4f * std::fabs(ref[i]))) {
            if (bad++ == 0) first = i;
        }
    }
    EXPECT_EQ(bad, 0u) << what << ": first at " << first << ": plan " << got[first] << " cpu " << ref[first];
}

class GemmPlan : public ::testing::Test {
  protected:
    std::vector<float> rand(size_t n) {
        std::uniform_real_distribution<float> d(-1.f, 1.f);
        std::vector<float> v(n);
        for (float& x : v) x = d(m_rng);
        return v;
    }
    std::mt19937 m_rng{1234};
    std::unique_ptr<zt::Backend> m_cpu = zt::make_cpu_backend(1);
};

TEST_F(GemmPlan, Matmul) {
    const int N = 13, C = 7, OC = 11;
    const auto inp = rand(N * C), w = rand(OC * C), bias = rand(OC), dout = rand(N * OC);
    std::vector<float> out(N * OC), ref(N * OC);
    Gemm f = zt::cuda::matmul_forward_gemm(out.data(), inp.data(), w.data(), N, C, OC);
    f.bias = bias.data();
    ref_gemm(f);
    m_cpu->matmul_forward(ref.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    expect_near_all(out, ref, "forward");

    auto dinp = rand(N * C), dw = rand(OC * C);
    auto dinp_ref = dinp, dw_ref = dw;
    ref_gemm(zt::cuda::matmul_dinp_gemm(dinp.data(), dout.data(), w.data(), N, C, OC));
    ref_gemm(zt::cuda::matmul_dweight_gemm(dw.data(), dout.data(), inp.data(), N, C, OC));
    m_cpu->matmul_backward(dinp_ref.data(), dw_ref.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    expect_near_all(dinp, dinp_ref, "dinp");
    expect_near_all(dw, dw_ref, "dweight");
}

TEST_F(GemmPlan, Attention) {
    const int B = 2, T = 5, C = 12, NH = 3;
    const auto d = zt::cuda::attention_dims(T, C, NH);
    const zt::cuda::ScoreBand whole = zt::cuda::whole_scores(d);
    const size_t qkv_b = static_cast<size_t>(T) * 3 * C, out_b = static_cast<size_t>(T) * C;
    const size_t att_b = static_cast<size_t>(NH) * T * T;
    const auto qkv = rand(B * qkv_b);
    std::vector<float> out(B * out_b), att(B * att_b), out_ref(out.size()), att_ref(att.size());

    // Forward as attention.cu runs it, with the softmax kernel's row rule on the host.
    for (int b = 0; b < B; ++b) ref_gemm(zt::cuda::attention_scores_gemm(d, att.data() + b * att_b, qkv.data() + b * qkv_b, 0, whole));
    for (size_t row = 0; row < att.size() / T; ++row) {
        float* p = att.data() + row * T;
        const int len = static_cast<int>(row % T) + 1;
        const float mx = *std::max_element(p, p + len);
        float sum = 0.f;
        for (int i = 0; i < len; ++i) sum += (p[i] = std::exp(p[i] - mx));
        for (int i = 0; i < T; ++i) p[i] = i < len ? p[i] / sum : 0.f;
    }
    for (int b = 0; b < B; ++b) {
        ref_gemm(zt::cuda::attention_out_gemm(d, out.data() + b * out_b, att.data() + b * att_b, qkv.data() + b * qkv_b, 0, whole));
    }
    m_cpu->attention_forward(out_ref.data(), att_ref.data(), qkv.data(), B, T, C, NH);
    expect_near_all(out, out_ref, "out");
    expect_near_all(att, att_ref, "att");  // both zero above the diagonal

    // Backward, with the softmax-backward kernel's row rule on the host.
    const auto dout = rand(out.size());
    auto dqkv = rand(qkv.size());
    auto dqkv_ref = dqkv;
    std::vector<float> ds(att_b);
    for (int b = 0; b < B; ++b) {
        const float* p = att.data() + b * att_b;
        ref_gemm(zt::cuda::attention_dp_gemm(d, ds.data(), dout.data() + b * out_b, qkv.data() + b * qkv_b, 0, whole));
        for (size_t row = 0; row < att_b / T; ++row) {
            const int len = static_cast<int>(row % T) + 1;
            float dot = 0.f;
            for (int i = 0; i < len; ++i) dot += p[row * T + i] * ds[row * T + i];
            for (int i = 0; i < T; ++i) ds[row * T + i] = i < len ? p[row * T + i] * (ds[row * T + i] - dot) : 0.f;
        }
        float* dq = dqkv.data() + b * qkv_b;
        ref_gemm(zt::cuda::attention_dv_gemm(d, dq, dout.data() + b * out_b, p, 0, whole));
        ref_gemm(zt::cuda::attention_dq_gemm(d, dq, qkv.data() + b * qkv_b, ds.data(), 0, whole));
        ref_gemm(zt::cuda::attention_dk_gemm(d, dq, qkv.data() + b * qkv_b, ds.data(), 0, whole));
    }
    std::vector<float> scratch(m_cpu->attention_scratch_floats(B, T, NH));
    m_cpu->attention_backward(dqkv_ref.data(), scratch.data(), dout.data(), qkv.data(), att_ref.data(), B, T, C, NH);
    expect_near_all(dqkv, dqkv_ref, "dqkv");
}

// The segmented forward and backward as attention.cu runs them on bands (score_bands: a
// block of queries against keys from the first any of them attends to), grouped-query heads,
// a sliding window and a packed segment boundary; the softmax kernels' band rule on the host.
// Every score outside the bands starts NaN: a product or rule that read one would spread it.
// Against the CPU backend's segmented attention (its O(T * window) kernel).
TEST_F(GemmPlan, SegmentedAttentionOnBands) {
    const int B = 2, T = 37, NH = 4, NKV = 2, hs = 4, block = 8, window = 6;
    const auto d = zt::cuda::gqa_attention_dims(T, NH, NKV, hs);
    const size_t qkv_b = static_cast<size_t>(T) * d.W, out_b = static_cast<size_t>(T) * d.O;
    const size_t att_b = static_cast<size_t>(NH) * d.tt;
    std::vector<int32_t> from(static_cast<size_t>(B) * T);
    for (int b = 0; b < B; ++b) {
        for (int t = 0; t < T; ++t) {
            const int segment = b == 1 && t >= 20 ? 20 : 0;  // row 1 packs a second example at 20
            from[static_cast<size_t>(b) * T + t] = std::max(segment, t - window + 1);
        }
    }
    const auto qkv = rand(B * qkv_b);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> out(B * out_b, nan), att(B * att_b, nan), out_ref(out.size()), att_ref(att.size());
    size_t band_scores = 0;
    for (int b = 0; b < B; ++b) {
        const int32_t* f = from.data() + static_cast<size_t>(b) * T;
        const auto bands = zt::cuda::score_bands(f, T, block);
        float* a = att.data() + b * att_b;
        for (const auto& band : bands) {
            band_scores += static_cast<size_t>(band.queries()) * band.keys();
            for (int g = 0; g < d.G; ++g) ref_gemm(zt::cuda::attention_scores_gemm(d, a, qkv.data() + b * qkv_b, g, band));
            // causal_softmax_kernel's rule: softmax over [from, t], zeros in the rest of the band.
            for (int h = 0; h < NH; ++h) {
                for (int t = band.q0; t < band.q1; ++t) {
                    float* p = a + static_cast<size_t>(h) * d.tt + static_cast<size_t>(t) * T;
                    const float mx = *std::max_element(p + f[t], p + t + 1);
                    float sum = 0.f;
                    for (int i = f[t]; i <= t; ++i) sum += (p[i] = std::exp(p[i] - mx));
                    for (int i = band.k0; i < band.q1; ++i) p[i] = i >= f[t] && i <= t ? p[i] / sum : 0.f;
                }
            }
            for (int g = 0; g < d.G; ++g) {
                ref_gemm(zt::cuda::attention_out_gemm(d, out.data() + b * out_b, a, qkv.data() + b * qkv_b, g, band));
            }
        }
    }
    EXPECT_LT(band_scores, static_cast<size_t>(B) * T * (T + 1) / 2) << "the bands skip the keys no query reads";
    m_cpu->gqa_attention_forward_segmented(out_ref.data(), att_ref.data(), qkv.data(), from.data(), B, T, NH, NKV, hs);
    expect_near_all(out, out_ref, "segmented out");

    const auto dout = rand(out.size());
    auto dqkv = rand(qkv.size());
    auto dqkv_ref = dqkv;
    std::vector<float> pc(att_b), ds(att_b);
    for (int b = 0; b < B; ++b) {
        const int32_t* f = from.data() + static_cast<size_t>(b) * T;
        const float* p = att.data() + b * att_b;
        std::fill(pc.begin(), pc.end(), nan);
        std::fill(ds.begin(), ds.end(), nan);
        const auto bands = zt::cuda::score_bands(f, T, block);
        for (const auto& band : bands) {
            for (int g = 0; g < d.G; ++g) {
                ref_gemm(zt::cuda::attention_dp_gemm(d, ds.data(), dout.data() + b * out_b, qkv.data() + b * qkv_b, g, band));
            }
            // softmax_backward_kernel's rule over the band.
            for (int h = 0; h < NH; ++h) {
                for (int t = band.q0; t < band.q1; ++t) {
                    const size_t row = static_cast<size_t>(h) * d.tt + static_cast<size_t>(t) * T;
                    float dot = 0.f;
                    for (int i = f[t]; i <= t; ++i) dot += p[row + i] * ds[row + i];
                    for (int i = band.k0; i < band.q1; ++i) {
                        pc[row + i] = i >= f[t] && i <= t ? p[row + i] : 0.f;
                        ds[row + i] = pc[row + i] * (ds[row + i] - dot);
                    }
                }
            }
        }
        float* dq = dqkv.data() + b * qkv_b;
        for (const auto& band : bands) {
            for (int g = 0; g < d.G; ++g) {
                ref_gemm(zt::cuda::attention_dv_gemm(d, dq, dout.data() + b * out_b, pc.data(), g, band));
                ref_gemm(zt::cuda::attention_dq_gemm(d, dq, qkv.data() + b * qkv_b, ds.data(), g, band));
                ref_gemm(zt::cuda::attention_dk_gemm(d, dq, qkv.data() + b * qkv_b, ds.data(), g, band));
            }
        }
    }
    std::vector<float> scratch(m_cpu->attention_scratch_floats(B, T, NH));
    m_cpu->gqa_attention_backward_segmented(dqkv_ref.data(), scratch.data(), dout.data(), qkv.data(), att_ref.data(),
                                            from.data(), B, T, NH, NKV, hs);
    expect_near_all(dqkv, dqkv_ref, "segmented dqkv");
}

// The bands of a window: each block from its first query's window start (or its segment's).
TEST(ScoreBands, EachBlockStartsAtItsFirstAttendedKey) {
    std::vector<int32_t> from(10);
    for (int t = 0; t < 10; ++t) from[static_cast<size_t>(t)] = std::max(t >= 7 ? 7 : 0, t - 2);
    const auto bands = zt::cuda::score_bands(from.data(), 10, 4);
    ASSERT_EQ(bands.size(), 3u);
    EXPECT_EQ(bands[0].k0, 0);
    EXPECT_EQ(bands[1].k0, 2);  // query 4 attends from key 2
    EXPECT_EQ(bands[2].k0, 7);  // queries 8 and 9: their segment starts at 7, inside the window
    EXPECT_EQ(bands[2].q1, 10);
    EXPECT_EQ(bands[2].keys(), 3);
}

// Which products take cuBLASLt's fused bias/GELU epilogue and which the plain product plus
// the separate bias/GELU kernel: the pre-GELU output's leading dimension (the forward's OC)
// must be a multiple of 8 for the fused GELU_AUX epilogues.
TEST(CudaGemmEpiloguePath, FusedUnlessTheAuxLeadingDimensionBreaksCublasLtsRule) {
    using zt::cuda::EpiloguePath;
    float out = 0.f;
    float aux = 0.f;
    float bias = 0.f;
    const float in = 0.f;
    auto forward = [&](int OC, bool with_bias, bool gelu, bool with_aux) {
        Gemm g = zt::cuda::matmul_forward_gemm(&out, &in, &in, 4, 16, OC);
        g.bias = with_bias ? &bias : nullptr;
        g.gelu = gelu;
        g.gelu_aux = with_aux ? &aux : nullptr;
        return zt::cuda::epilogue_path(g);
    };
    EXPECT_EQ(forward(12, false, false, false), EpiloguePath::kNone);
    EXPECT_EQ(forward(12, true, false, false), EpiloguePath::kFused);   // no aux: any OC
    EXPECT_EQ(forward(12, true, true, false), EpiloguePath::kFused);
    EXPECT_EQ(forward(3072, true, true, true), EpiloguePath::kFused);   // GPT-2's MLP: 4C
    EXPECT_EQ(forward(16, false, true, true), EpiloguePath::kFused);
    EXPECT_EQ(forward(12, true, true, true), EpiloguePath::kSeparate);  // aux ld 12
    EXPECT_EQ(forward(7, false, true, true), EpiloguePath::kSeparate);
    // A pre-GELU output without GELU is a caller error, not a path.
    Gemm g = zt::cuda::matmul_forward_gemm(&out, &in, &in, 4, 16, 16);
    g.gelu_aux = &aux;
    EXPECT_THROW(zt::cuda::epilogue_path(g), zt::Error);
}

}  // namespace
