// The Llama ops of the CPU backend (RMSNorm, rotary embeddings, SwiGLU, grouped-query
// attention) and the RoPE table, against double-precision references written here from the
// definitions (not from the backend's code), plus finite differences of each backward.
//
// Conventions checked besides the values: backward outputs ACCUMULATE (gradients are
// pre-filled with nonzero values and the expectation is prefill + gradient), null gradient
// outputs are skipped, rope's in-place forms equal the out-of-place ones.
//
// Tolerances (as tests/unit/test_cpu_ops.cpp argues them): fp32 results against double
// references allow |got - ref| <= 1e-5 * |ref| + atol, atol = 1e-5 for element-wise ops and
// 4e-6 * sqrt(K) for K-term sums, each >= 5x the largest error seen and >= 1e4x below the
// O(0.1) error of an indexing or sign mistake. Finite differences are central, step 1e-2 on
// O(1) inputs, of L = sum(dout * out) evaluated by the backend in fp32: truncation error is
// O(h^2) ~ 1e-4 times the third derivative, rounding ~1e-6, so 2e-3 * (1 + |g|) separates
// them from a wrong gradient (errors of order |g|).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../../src/backend/cuda/gemm_plan.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/backend/rope.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"

namespace zt {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

constexpr double kRtol = 1e-5;
constexpr double kElementAtol = 1e-5;
constexpr double kFdStep = 1e-2;
constexpr double kFdTol = 2e-3;

Vec uniform(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    Vec v(n);
    for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(random_uniform(seed, 16, i));
    return v;
}

double sum_atol(int K) { return 4e-6 * std::sqrt(static_cast<double>(std::max(K, 1))); }

/// Max-error comparison: passes when every |got - want| <= atol + rtol * |want|; the failure
/// names the element with the largest error relative to its allowance, both values and the
/// error against the allowance.
::testing::AssertionResult near(const std::string& what, const DVec& want, const Vec& got, double atol,
                                double rtol = kRtol) {
    if (want.size() != got.size()) {
        return ::testing::AssertionFailure() << what << ": " << got.size() << " elements, want " << want.size();
    }
    size_t worst = 0, over = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < want.size(); ++i) {
        const double allowed = atol + rtol * std::fabs(want[i]);
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        const double excess = std::isnan(err) ? 1e300 : err / allowed;
        if (!(err <= allowed)) ++over;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (over == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": " << over << " of " << want.size()
                                         << " elements differ; worst [" << worst << "] got " << got[worst]
                                         << " want " << want[worst] << " (error "
                                         << std::fabs(static_cast<double>(got[worst]) - want[worst])
                                         << ", allowed " << atol + rtol * std::fabs(want[worst]) << ")";
}

/// prefill + gradient, the expectation for an accumulating backward output.
DVec plus(const Vec& prefill, const DVec& grad) {
    DVec r(grad.size());
    for (size_t i = 0; i < r.size(); ++i) r[i] = prefill[i] + grad[i];
    return r;
}

/// Central differences of L(x) = sum(dout * f(x)) at `probes` coordinates of x against the
/// analytic gradient `grad` (same size as x).
void expect_fd_gradient(const std::string& what, Vec x, const Vec& grad, size_t probes,
                        const std::function<double(const Vec&)>& loss) {
    const size_t stride = std::max<size_t>(1, x.size() / probes);
    for (size_t i = stride / 2; i < x.size(); i += stride) {
        const float x0 = x[i];
        x[i] = x0 + static_cast<float>(kFdStep);
        const double up = loss(x);
        x[i] = x0 - static_cast<float>(kFdStep);
        const double down = loss(x);
        x[i] = x0;
        const double fd = (up - down) / (2.0 * kFdStep);
        EXPECT_NEAR(grad[i], fd, kFdTol * (1.0 + std::fabs(fd)))
            << what << ": analytic gradient vs central difference at element " << i << " of " << x.size();
    }
}

double dot(const Vec& a, const Vec& b) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

// ----------------------------------------------------------------------------------------
// RMSNorm
// ----------------------------------------------------------------------------------------

TEST(LlamaOps, RmsNormForwardBackwardMatchReference) {
    auto be = make_cpu_backend(0);
    const float eps = 1e-5f;
    // 3 x 37: single-threaded rows; 2053 x 300: above the threaded cut-off (2^19 elements).
    for (const auto& [N, C] : {std::pair<int, int>{3, 37}, std::pair<int, int>{2053, 300}}) {
        SCOPED_TRACE("N=" + std::to_string(N) + " C=" + std::to_string(C));
        const size_t n = static_cast<size_t>(N) * C;
        const Vec x = uniform(n, 1, -2.f, 2.f), w = uniform(C, 2, 0.5f, 1.5f), dout = uniform(n, 3);
        DVec out_ref(n), rstd_ref(N), dinp_ref(n, 0.0), dw_ref(C, 0.0);
        for (int r = 0; r < N; ++r) {
            const float* xr = x.data() + static_cast<size_t>(r) * C;
            const float* dr = dout.data() + static_cast<size_t>(r) * C;
            double ms = 0.0;
            for (int i = 0; i < C; ++i) ms += static_cast<double>(xr[i]) * xr[i];
            const double rs = 1.0 / std::sqrt(ms / C + eps);
            rstd_ref[r] = rs;
            for (int i = 0; i < C; ++i) {
                out_ref[r * static_cast<size_t>(C) + i] = xr[i] * rs * w[i];
                dw_ref[i] += dr[i] * xr[i] * rs;
            }
            // dinp_j = sum_i dout_i w_i d(x_i r)/dx_j, d(x_i r)/dx_j = delta_ij r - x_i r^3 x_j / C.
            for (int j = 0; j < C; ++j) {
                double acc = 0.0;
                for (int i = 0; i < C; ++i) {
                    const double jac = (i == j ? rs : 0.0) - static_cast<double>(xr[i]) * rs * rs * rs * xr[j] / C;
                    acc += dr[i] * static_cast<double>(w[i]) * jac;
                }
                dinp_ref[r * static_cast<size_t>(C) + j] = acc;
            }
        }
        Vec out(n), rstd(N);
        be->rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
        EXPECT_TRUE(near("rmsnorm out", out_ref, out, sum_atol(C)));
        EXPECT_TRUE(near("rmsnorm rstd", rstd_ref, rstd, sum_atol(C)));

        const Vec dinp0 = uniform(n, 4), dw0 = uniform(C, 5);
        Vec dinp = dinp0, dw = dw0;
        be->rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
        EXPECT_TRUE(near("rmsnorm dinp (prefill + gradient)", plus(dinp0, dinp_ref), dinp, sum_atol(C)));
        EXPECT_TRUE(near("rmsnorm dweight (prefill + gradient)", plus(dw0, dw_ref), dw, sum_atol(N)));

        // Null gradients are skipped, and each output alone gets the same values.
        Vec dinp_only = dinp0, dw_only = dw0;
        be->rmsnorm_backward(dinp_only.data(), nullptr, dout.data(), x.data(), w.data(), rstd.data(), N, C);
        be->rmsnorm_backward(nullptr, dw_only.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
        EXPECT_EQ(dinp_only, dinp);
        EXPECT_EQ(dw_only, dw);
    }
}

/// Qwen3's q and k head norms on qkv rows are the RMSNorm op on each head: q heads with
/// q_weight, k heads with k_weight (gathered here into rows of hs), v passed through; the
/// backward accumulates, its v part is dout, and it matches finite differences.
TEST(LlamaOps, QkNormIsRmsNormPerHeadAndMatchesFiniteDifferences) {
    auto be = make_cpu_backend(0);
    const int N = 5, NH = 4, NKV = 2, hs = 6, heads = NH + NKV;
    const int row = (NH + 2 * NKV) * hs;
    const float eps = 1e-6f;
    const size_t n = static_cast<size_t>(N) * row;
    const Vec x = uniform(n, 21, -2.f, 2.f), wq = uniform(hs, 22, 0.5f, 1.5f), wk = uniform(hs, 23, 0.5f, 1.5f);
    const Vec dout = uniform(n, 24);
    Vec out(n), rstd(static_cast<size_t>(N) * heads);
    be->qk_norm_forward(out.data(), rstd.data(), x.data(), wq.data(), wk.data(), N, NH, NKV, hs, eps);
    const Vec dinp0 = uniform(n, 25), dwq0 = uniform(hs, 26), dwk0 = uniform(hs, 27);
    Vec dinp = dinp0, dwq = dwq0, dwk = dwk0;
    be->qk_norm_backward(dinp.data(), dwq.data(), dwk.data(), dout.data(), x.data(), wq.data(), wk.data(),
                         rstd.data(), N, NH, NKV, hs);
    // The q heads, then the k heads, as rows of hs: the rmsnorm op's forward and backward.
    for (const bool q : {true, false}) {
        const int h0 = q ? 0 : NH, count = q ? NH : NKV, rows = N * count;
        Vec xh, dh, oh, dih;
        for (int r = 0; r < N; ++r) {
            for (int h = h0; h < h0 + count; ++h) {
                const size_t at = static_cast<size_t>(r) * row + static_cast<size_t>(h) * hs;
                xh.insert(xh.end(), x.begin() + at, x.begin() + at + hs);
                dh.insert(dh.end(), dout.begin() + at, dout.begin() + at + hs);
                oh.insert(oh.end(), out.begin() + at, out.begin() + at + hs);
                dih.insert(dih.end(), dinp.begin() + at, dinp.begin() + at + hs);
            }
        }
        const Vec& w = q ? wq : wk;
        Vec want(xh.size()), want_rstd(static_cast<size_t>(rows)), want_d(xh.size(), 0.f), want_dw(hs, 0.f);
        be->rmsnorm_forward(want.data(), want_rstd.data(), xh.data(), w.data(), rows, hs, eps);
        EXPECT_EQ(oh, want) << (q ? "q" : "k") << " heads";
        be->rmsnorm_backward(want_d.data(), want_dw.data(), dh.data(), xh.data(), w.data(), want_rstd.data(), rows, hs);
        DVec d_ref(want_d.begin(), want_d.end()), dw_ref(want_dw.begin(), want_dw.end());
        Vec prefill;
        for (int r = 0; r < N; ++r) {
            for (int h = h0; h < h0 + count; ++h) {
                const size_t at = static_cast<size_t>(r) * row + static_cast<size_t>(h) * hs;
                prefill.insert(prefill.end(), dinp0.begin() + at, dinp0.begin() + at + hs);
            }
        }
        EXPECT_TRUE(near(q ? "q dinp" : "k dinp", plus(prefill, d_ref), dih, sum_atol(hs)));
        EXPECT_TRUE(near(q ? "dq_weight" : "dk_weight", plus(q ? dwq0 : dwk0, dw_ref), q ? dwq : dwk, sum_atol(rows)));
    }
    for (int r = 0; r < N; ++r) {  // v: copied forward, its gradient passed on
        for (int i = heads * hs; i < row; ++i) {
            const size_t at = static_cast<size_t>(r) * row + static_cast<size_t>(i);
            EXPECT_EQ(out[at], x[at]);
            EXPECT_EQ(dinp[at], dinp0[at] + dout[at]);
        }
    }
    Vec d_only(n, 0.f), dq(hs, 0.f), dk(hs, 0.f);
    be->qk_norm_backward(d_only.data(), dq.data(), dk.data(), dout.data(), x.data(), wq.data(), wk.data(),
                         rstd.data(), N, NH, NKV, hs);
    auto loss = [&](const Vec& xx, const Vec& q, const Vec& k) {
        Vec o(n), rs(rstd.size());
        be->qk_norm_forward(o.data(), rs.data(), xx.data(), q.data(), k.data(), N, NH, NKV, hs, eps);
        return dot(dout, o);
    };
    expect_fd_gradient("qk_norm dinp", x, d_only, 40, [&](const Vec& xx) { return loss(xx, wq, wk); });
    expect_fd_gradient("qk_norm dq_weight", wq, dq, hs, [&](const Vec& q) { return loss(x, q, wk); });
    expect_fd_gradient("qk_norm dk_weight", wk, dk, hs, [&](const Vec& k) { return loss(x, wq, k); });
}

TEST(LlamaOps, RmsNormBackwardMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    const int N = 4, C = 24;
    const float eps = 1e-5f;
    const size_t n = static_cast<size_t>(N) * C;
    const Vec x = uniform(n, 11, -2.f, 2.f), w = uniform(C, 12, 0.5f, 1.5f), dout = uniform(n, 13);
    Vec out(n), rstd(N), dinp(n, 0.f), dw(C, 0.f);
    be->rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
    be->rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    auto loss = [&](const Vec& xx, const Vec& ww) {
        Vec o(n), rs(N);
        be->rmsnorm_forward(o.data(), rs.data(), xx.data(), ww.data(), N, C, eps);
        return dot(dout, o);
    };
    expect_fd_gradient("rmsnorm dinp", x, dinp, 40, [&](const Vec& xx) { return loss(xx, w); });
    expect_fd_gradient("rmsnorm dweight", w, dw, C, [&](const Vec& ww) { return loss(x, ww); });
}

// ----------------------------------------------------------------------------------------
// RoPE table
// ----------------------------------------------------------------------------------------

/// Llama 3.1's inverse frequencies, written from the description of the scaling (keep high
/// frequencies, divide low ones by factor, blend linearly in original_len / wavelength).
DVec llama3_inv_freq_reference(int hs, double theta, const RopeLlama3Scaling& s) {
    DVec f(static_cast<size_t>(hs / 2));
    const double two_pi = 2.0 * std::acos(-1.0);
    for (int i = 0; i < hs / 2; ++i) {
        const double base = 1.0 / std::pow(theta, (2.0 * i) / hs);
        const double ratio = s.original_max_position_embeddings * base / two_pi;  // original_len / wavelength
        if (ratio > s.high_freq_factor) {
            f[static_cast<size_t>(i)] = base;
        } else if (ratio < s.low_freq_factor) {
            f[static_cast<size_t>(i)] = base / s.factor;
        } else {
            const double blend = (ratio - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
            f[static_cast<size_t>(i)] = base * (blend + (1.0 - blend) / s.factor);
        }
    }
    return f;
}

TEST(RopeTable, DefaultFrequenciesByHand) {
    // hs 4, theta 1e4: inv_freq = {1, 1e4^(-1/2) = 0.01}.
    const std::vector<float> table = rope_table(3, 4, RopeOptions{});
    ASSERT_EQ(table.size(), 12u);
    const float want[12] = {1.f, 1.f, 0.f, 0.f,                                   // t = 0
                            0.5403023058681398f, 0.9999500004166653f,              // cos(1), cos(0.01)
                            0.8414709848078965f, 0.009999833334166664f,            // sin(1), sin(0.01)
                            -0.4161468365471424f, 0.9998000066665778f,             // cos(2), cos(0.02)
                            0.9092974268256817f, 0.01999866669333308f};            // sin(2), sin(0.02)
    for (int i = 0; i < 12; ++i) EXPECT_EQ(table[static_cast<size_t>(i)], want[i]) << "table element " << i;
}

TEST(RopeTable, Llama3ScalingByHand) {
    // factor 8, low 1, high 4, original 8192: wavelengths below 2048 are kept, above 8192
    // divided by 8, between blended. hs 4 has inv_freq {1, theta^(-1/2)}; theta picks the
    // regime of the second: 1e8 -> 1e-4 (wavelength 62832 > 8192) -> 1.25e-5; theta =
    // (4096 / 2pi)^2 -> 2pi / 4096 (wavelength 4096, blend (8192/4096 - 1) / 3 = 1/3) ->
    // (2/3) / 8 + 1/3 = 5/12 of it = 6.391586616190172e-4. The first (wavelength 2pi) stays 1.
    RopeOptions o;
    o.llama3_scaling = true;
    o.theta = 1e8;
    DVec f = rope_inv_freq(4, o);
    EXPECT_DOUBLE_EQ(f[0], 1.0);
    EXPECT_NEAR(f[1], 1.25e-5, 1e-18);
    const double pi = std::acos(-1.0);
    o.theta = (4096.0 / (2.0 * pi)) * (4096.0 / (2.0 * pi));
    f = rope_inv_freq(4, o);
    EXPECT_DOUBLE_EQ(f[0], 1.0);
    EXPECT_NEAR(f[1], 6.391586616190172e-4, 1e-15);
    // The table at t = 1000 with that theta: angle 1000 * 6.391586616190172e-4.
    const std::vector<float> table = rope_table(1001, 4, o);
    EXPECT_EQ(table[1000 * 4 + 1], static_cast<float>(std::cos(0.6391586616190172)));
    EXPECT_EQ(table[1000 * 4 + 3], static_cast<float>(std::sin(0.6391586616190172)));
}

TEST(RopeTable, Llama31TableMatchesIndependentDoubleComputation) {
    // Llama 3.1 8B: hs 128, theta 5e5, factor 8, low 1, high 4, original 8192; all three
    // regimes occur among its 64 frequencies.
    RopeOptions o;
    o.theta = 500000.0;
    o.llama3_scaling = true;
    const int hs = 128, T = 300;
    const DVec want_freq = llama3_inv_freq_reference(hs, o.theta, o.llama3);
    const DVec freq = rope_inv_freq(hs, o);
    ASSERT_EQ(freq.size(), want_freq.size());
    int kept = 0, divided = 0;
    for (size_t i = 0; i < freq.size(); ++i) {
        EXPECT_NEAR(freq[i], want_freq[i], 1e-15 * want_freq[i]) << "inv_freq " << i;
        const double unscaled = std::pow(o.theta, -2.0 * static_cast<double>(i) / hs);
        kept += freq[i] == unscaled;
        divided += std::fabs(freq[i] - unscaled / 8.0) <= 1e-15 * unscaled;
    }
    EXPECT_GT(kept, 0);
    EXPECT_GT(divided, 0);
    EXPECT_LT(kept + divided, hs / 2) << "some frequencies must be blended";
    const std::vector<float> table = rope_table(T, hs, o);
    ASSERT_EQ(table.size(), static_cast<size_t>(T) * hs);
    for (int t = 0; t < T; ++t) {
        for (int i = 0; i < hs / 2; ++i) {
            const double a = t * want_freq[static_cast<size_t>(i)];
            const size_t at = static_cast<size_t>(t) * hs + i;
            // Stored as the float nearest to the double value: within half an ulp.
            ASSERT_NEAR(table[at], std::cos(a), 6e-8 * std::max(1e-30, std::fabs(std::cos(a))) + 1e-12)
                << "cos at t=" << t << " i=" << i;
            ASSERT_NEAR(table[at + hs / 2], std::sin(a), 6e-8 * std::fabs(std::sin(a)) + 1e-12)
                << "sin at t=" << t << " i=" << i;
        }
    }
}

TEST(RopeTable, RejectsBadOptions) {
    EXPECT_THROW(rope_inv_freq(5, RopeOptions{}), Error);
    EXPECT_THROW(rope_inv_freq(0, RopeOptions{}), Error);
    RopeOptions o;
    o.llama3_scaling = true;
    o.llama3.high_freq_factor = o.llama3.low_freq_factor;
    EXPECT_THROW(rope_inv_freq(8, o), Error);
}

// ----------------------------------------------------------------------------------------
// Rotary embeddings on fused qkv rows
// ----------------------------------------------------------------------------------------

struct QkvShape {
    int B, T, NH, NKV, hs;
    int row() const { return (NH + 2 * NKV) * hs; }
    size_t numel() const { return static_cast<size_t>(B) * T * row(); }
};

/// The rotation of HF rotate_half: per q/k head and pair (i, i + hs/2) at position t,
/// [x1'; x2'] = [[c, -s], [s, c]] [x1; x2] with c, s of t * theta^(-2i/hs); `transpose`
/// applies the matrix's transpose instead. v is passed through.
DVec rope_reference(const Vec& x, const QkvShape& s, double theta, bool transpose) {
    DVec y(x.begin(), x.end());
    const int half = s.hs / 2;
    for (int b = 0; b < s.B; ++b) {
        for (int t = 0; t < s.T; ++t) {
            const size_t row = (static_cast<size_t>(b) * s.T + t) * s.row();
            for (int h = 0; h < s.NH + s.NKV; ++h) {  // q heads, then k heads
                for (int i = 0; i < half; ++i) {
                    const double a = t * std::pow(theta, -2.0 * i / s.hs);
                    const double m[2][2] = {{std::cos(a), -std::sin(a)}, {std::sin(a), std::cos(a)}};
                    const size_t i1 = row + static_cast<size_t>(h) * s.hs + i, i2 = i1 + half;
                    const double x1 = x[i1], x2 = x[i2];
                    if (transpose) {
                        y[i1] = m[0][0] * x1 + m[1][0] * x2;
                        y[i2] = m[0][1] * x1 + m[1][1] * x2;
                    } else {
                        y[i1] = m[0][0] * x1 + m[0][1] * x2;
                        y[i2] = m[1][0] * x1 + m[1][1] * x2;
                    }
                }
            }
        }
    }
    return y;
}

TEST(LlamaOps, RopeForwardBackwardMatchReferenceInAndOutOfPlace) {
    auto be = make_cpu_backend(0);
    const double theta = 10000.0;
    // The last shape is above the threaded cut-off (2^19 elements).
    for (const QkvShape s : {QkvShape{2, 5, 3, 1, 6}, QkvShape{1, 9, 4, 4, 10}, QkvShape{3, 131, 8, 2, 64}}) {
        SCOPED_TRACE("B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                     " NKV=" + std::to_string(s.NKV) + " hs=" + std::to_string(s.hs));
        const std::vector<float> table = rope_table(s.T + 3, s.hs, RopeOptions{theta, false, {}});  // longer than T
        const Vec x = uniform(s.numel(), 21), dout = uniform(s.numel(), 22);
        Vec out(s.numel(), -7.f);
        be->rope_forward(out.data(), x.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        EXPECT_TRUE(near("rope out (v copied)", rope_reference(x, s, theta, false), out, kElementAtol));
        Vec in_place = x;
        be->rope_forward(in_place.data(), in_place.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        EXPECT_EQ(in_place, out) << "rope in place differs from out of place";

        const Vec prefill = uniform(s.numel(), 23);
        Vec dinp = prefill;
        be->rope_backward(dinp.data(), dout.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        const DVec grad = rope_reference(dout, s, theta, true);
        EXPECT_TRUE(near("rope dinp (prefill + R^T dout)", plus(prefill, grad), dinp, kElementAtol));
        Vec d_in_place = dout;
        be->rope_backward(d_in_place.data(), d_in_place.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        EXPECT_TRUE(near("rope dinp in place (R^T dout)", grad, d_in_place, kElementAtol));

        // R^T R = 1: rotating back restores the input.
        Vec back = out;
        be->rope_backward(back.data(), back.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        EXPECT_TRUE(near("rope backward of forward", DVec(x.begin(), x.end()), back, kElementAtol));
    }
}

TEST(LlamaOps, RopeBackwardMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    const QkvShape s{1, 4, 2, 1, 8};
    const std::vector<float> table = rope_table(s.T, s.hs, RopeOptions{});
    const Vec x = uniform(s.numel(), 31), dout = uniform(s.numel(), 32);
    Vec dinp(s.numel(), 0.f);
    be->rope_backward(dinp.data(), dout.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
    expect_fd_gradient("rope dinp", x, dinp, 50, [&](const Vec& xx) {
        Vec o(s.numel());
        be->rope_forward(o.data(), xx.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        return dot(dout, o);
    });
}

TEST(LlamaOps, RopeRejectsOddHeadSizeAndIndivisibleHeads) {
    auto be = make_cpu_backend(1);
    Vec buf(64), table(64);
    EXPECT_THROW(be->rope_forward(buf.data(), buf.data(), table.data(), 1, 1, 2, 1, 5), Error);
    EXPECT_THROW(be->rope_forward(buf.data(), buf.data(), table.data(), 1, 1, 3, 2, 4), Error);
}

// ----------------------------------------------------------------------------------------
// SwiGLU
// ----------------------------------------------------------------------------------------

TEST(LlamaOps, SwiGluForwardBackwardMatchReference) {
    auto be = make_cpu_backend(0);
    // 7 x 13: single-threaded; 300 x 1800: above the threaded cut-off.
    for (const auto& [N, F] : {std::pair<int, int>{7, 13}, std::pair<int, int>{300, 1800}}) {
        SCOPED_TRACE("N=" + std::to_string(N) + " F=" + std::to_string(F));
        const size_t n = static_cast<size_t>(N) * F;
        // Gates over [-12, 12]: saturated and linear regions of the sigmoid.
        Vec inp = uniform(2 * n, 41, -3.f, 3.f);
        for (size_t r = 0; r < static_cast<size_t>(N); r += 2) {
            for (int i = 0; i < F; ++i) inp[r * 2 * F + i] *= 4.f;
        }
        const Vec dout = uniform(n, 42);
        DVec out_ref(n), dinp_ref(2 * n);
        for (int r = 0; r < N; ++r) {
            for (int i = 0; i < F; ++i) {
                const size_t gi = static_cast<size_t>(r) * 2 * F + i, ui = gi + F, oi = static_cast<size_t>(r) * F + i;
                const double g = inp[gi], u = inp[ui];
                const double sig = 1.0 / (1.0 + std::exp(-g));
                out_ref[oi] = g * sig * u;
                dinp_ref[gi] = dout[oi] * u * (sig + g * sig * (1.0 - sig));
                dinp_ref[ui] = dout[oi] * g * sig;
            }
        }
        Vec out(n);
        be->swiglu_forward(out.data(), inp.data(), N, F);
        EXPECT_TRUE(near("swiglu out", out_ref, out, kElementAtol));
        const Vec prefill = uniform(2 * n, 43);
        Vec dinp = prefill;
        be->swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
        EXPECT_TRUE(near("swiglu d(gate|up) (prefill + gradient)", plus(prefill, dinp_ref), dinp, kElementAtol));
    }
}

TEST(LlamaOps, SwiGluBackwardMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    const int N = 3, F = 10;
    const Vec inp = uniform(2 * N * F, 51, -3.f, 3.f), dout = uniform(N * F, 52);
    Vec dinp(inp.size(), 0.f);
    be->swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    expect_fd_gradient("swiglu d(gate|up)", inp, dinp, 60, [&](const Vec& x) {
        Vec o(N * F);
        be->swiglu_forward(o.data(), x.data(), N, F);
        return dot(dout, o);
    });
}

// ----------------------------------------------------------------------------------------
// Grouped-query attention
// ----------------------------------------------------------------------------------------

struct GqaRef {
    DVec out;   // (B, T, NH*hs)
    DVec att;   // (B, NH, T, T), zero above the diagonal
    DVec dqkv;  // (B, T, (NH + 2 NKV) hs), gradient only
};

/// Causal softmax(q.k / sqrt(hs)) v per query head, with query head h reading key/value head
/// h / (NH / NKV); backward by the chain rule through each (t, s) score.
GqaRef gqa_reference(const Vec& qkv, const Vec& dout, const QkvShape& s) {
    const int W = s.row(), O = s.NH * s.hs, G = s.NH / s.NKV;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.hs));
    GqaRef r;
    r.out.assign(static_cast<size_t>(s.B) * s.T * O, 0.0);
    r.att.assign(static_cast<size_t>(s.B) * s.NH * s.T * s.T, 0.0);
    r.dqkv.assign(qkv.size(), 0.0);
    for (int b = 0; b < s.B; ++b) {
        for (int h = 0; h < s.NH; ++h) {
            const int kvh = h / G;
            auto q = [&](int t, int i) { return (static_cast<size_t>(b) * s.T + t) * W + h * s.hs + i; };
            auto k = [&](int t, int i) { return (static_cast<size_t>(b) * s.T + t) * W + (s.NH + kvh) * s.hs + i; };
            auto v = [&](int t, int i) {
                return (static_cast<size_t>(b) * s.T + t) * W + (s.NH + s.NKV + kvh) * s.hs + i;
            };
            for (int t = 0; t < s.T; ++t) {
                DVec p(static_cast<size_t>(t) + 1);
                double mx = -1e300, sum = 0.0;
                for (int u = 0; u <= t; ++u) {
                    double d = 0.0;
                    for (int i = 0; i < s.hs; ++i) d += static_cast<double>(qkv[q(t, i)]) * qkv[k(u, i)];
                    p[u] = d * scale;
                    mx = std::max(mx, p[u]);
                }
                for (int u = 0; u <= t; ++u) sum += (p[u] = std::exp(p[u] - mx));
                for (int u = 0; u <= t; ++u) {
                    p[u] /= sum;
                    r.att[((static_cast<size_t>(b) * s.NH + h) * s.T + t) * s.T + u] = p[u];
                }
                const size_t o = (static_cast<size_t>(b) * s.T + t) * O + h * s.hs;
                for (int i = 0; i < s.hs; ++i) {
                    for (int u = 0; u <= t; ++u) r.out[o + i] += p[u] * qkv[v(u, i)];
                }
                DVec dp(p.size(), 0.0);
                double pdp = 0.0;
                for (int u = 0; u <= t; ++u) {
                    for (int i = 0; i < s.hs; ++i) {
                        dp[u] += static_cast<double>(dout[o + i]) * qkv[v(u, i)];
                        r.dqkv[v(u, i)] += p[u] * dout[o + i];
                    }
                    pdp += p[u] * dp[u];
                }
                for (int u = 0; u <= t; ++u) {
                    const double dscore = p[u] * (dp[u] - pdp) * scale;
                    for (int i = 0; i < s.hs; ++i) {
                        r.dqkv[q(t, i)] += dscore * qkv[k(u, i)];
                        r.dqkv[k(u, i)] += dscore * qkv[q(t, i)];
                    }
                }
            }
        }
    }
    return r;
}

class GqaAttention : public ::testing::TestWithParam<QkvShape> {};

TEST_P(GqaAttention, ForwardAndBackwardMatchReference) {
    const QkvShape s = GetParam();
    auto be = make_cpu_backend(0);
    const Vec qkv = uniform(s.numel(), 61, -1.5f, 1.5f);
    const size_t n_out = static_cast<size_t>(s.B) * s.T * s.NH * s.hs;
    const Vec dout = uniform(n_out, 62);
    const GqaRef ref = gqa_reference(qkv, dout, s);
    Vec out(n_out), att(static_cast<size_t>(s.B) * s.NH * s.T * s.T);
    be->gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hs);
    EXPECT_TRUE(near("gqa out", ref.out, out, sum_atol(s.T * s.hs)));
    // Entries above the diagonal are unspecified: compare the causal part only.
    DVec want_att, got_att_d;
    Vec got_att;
    for (size_t i = 0; i < att.size(); ++i) {
        if (static_cast<int>(i % s.T) <= static_cast<int>((i / s.T) % s.T)) {
            want_att.push_back(ref.att[i]);
            got_att.push_back(att[i]);
        }
    }
    EXPECT_TRUE(near("gqa att (causal part)", want_att, got_att, sum_atol(s.hs)));

    const Vec prefill = uniform(s.numel(), 63);
    Vec dqkv = prefill;
    Vec scratch(be->attention_scratch_floats(s.B, s.T, s.NH), -3.f);
    be->gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                               s.NKV, s.hs);
    EXPECT_TRUE(near("gqa dqkv (prefill + gradient)", plus(prefill, ref.dqkv), dqkv,
                     sum_atol(s.T * s.hs * s.NH / s.NKV)));

    if (s.NKV == s.NH) {
        // GPT-2's attention is the NKV = NH case, bit for bit.
        Vec out2(out.size()), att2(att.size()), dqkv2 = prefill;
        be->attention_forward(out2.data(), att2.data(), qkv.data(), s.B, s.T, s.NH * s.hs, s.NH);
        be->attention_backward(dqkv2.data(), scratch.data(), dout.data(), qkv.data(), att2.data(), s.B, s.T,
                               s.NH * s.hs, s.NH);
        EXPECT_EQ(out2, out);
        EXPECT_EQ(dqkv2, dqkv);
    }
}

// NKV = NH, NH/3 and 1; T = 67 and 131 cross the 64-row blocks; B * NKV units below and above
// the thread count.
INSTANTIATE_TEST_SUITE_P(LlamaOps, GqaAttention,
                         ::testing::Values(QkvShape{2, 67, 6, 6, 8}, QkvShape{2, 67, 6, 2, 8},
                                           QkvShape{2, 67, 6, 1, 8}, QkvShape{1, 131, 3, 1, 12},
                                           QkvShape{3, 5, 9, 3, 4}),
                         [](const ::testing::TestParamInfo<QkvShape>& p) {
                             std::ostringstream os;
                             os << "B" << p.param.B << "_T" << p.param.T << "_NH" << p.param.NH << "_NKV"
                                << p.param.NKV << "_hs" << p.param.hs;
                             return os.str();
                         });

TEST(LlamaOps, GqaBackwardMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    const QkvShape s{1, 6, 4, 2, 4};
    const Vec qkv = uniform(s.numel(), 71), dout = uniform(static_cast<size_t>(s.T) * s.NH * s.hs, 72);
    Vec out(dout.size()), att(static_cast<size_t>(s.NH) * s.T * s.T), dqkv(s.numel(), 0.f);
    Vec scratch(be->attention_scratch_floats(s.B, s.T, s.NH));
    be->gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hs);
    be->gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, s.NH,
                               s.NKV, s.hs);
    expect_fd_gradient("gqa dqkv", qkv, dqkv, 64, [&](const Vec& x) {
        Vec o(out.size()), a(att.size());
        be->gqa_attention_forward(o.data(), a.data(), x.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        return dot(dout, o);
    });
}

TEST(LlamaOps, GqaRejectsIndivisibleKvHeads) {
    auto be = make_cpu_backend(1);
    Vec buf(256);
    EXPECT_THROW(be->gqa_attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 6, 4, 4), Error);
    EXPECT_THROW(be->gqa_attention_forward(buf.data(), buf.data(), buf.data(), 1, 2, 6, 0, 4), Error);
}

// ----------------------------------------------------------------------------------------
// The CUDA backend's GQA products (gemm_plan.hpp), on the host: which head each batch entry
// of each product addresses. tests/unit/test_cuda_gemm_plan.cpp runs the GPT-2 (NKV = NH)
// products numerically; GQA changes only the per-entry offsets checked here.
// ----------------------------------------------------------------------------------------

TEST(LlamaOps, CudaGqaPlanAddressesTheSharedKeyValueHeads) {
    const int T = 5, NH = 6, hs = 4;
    for (int NKV : {6, 2, 1}) {
        const cuda::AttentionDims d = cuda::gqa_attention_dims(T, NH, NKV, hs);
        const int G = NH / NKV, W = (NH + 2 * NKV) * hs, O = NH * hs;
        ASSERT_EQ(d.G, G);
        std::vector<float> qkv(static_cast<size_t>(T) * W), out(static_cast<size_t>(T) * O),
            att(static_cast<size_t>(NH) * T * T);
        const float* q0 = qkv.data();
        // Address of batch entry j of an operand / output.
        auto at = [](const auto& operand, int j) { return static_cast<const float*>(operand.ptr) + j * operand.stride; };
        for (int g = 0; g < G; ++g) {
            const cuda::Gemm scores = cuda::attention_scores_gemm(d, att.data(), q0, g, cuda::whole_scores(d));
            const cuda::Gemm outp = cuda::attention_out_gemm(d, out.data(), att.data(), q0, g, cuda::whole_scores(d));
            const cuda::Gemm dk = cuda::attention_dk_gemm(d, qkv.data(), q0, att.data(), g, cuda::whole_scores(d));
            ASSERT_EQ(scores.batch, NKV);
            for (int j = 0; j < NKV; ++j) {
                const int h = j * G + g;  // query head of entry j; it reads key/value head j = h / G
                SCOPED_TRACE("NKV=" + std::to_string(NKV) + " g=" + std::to_string(g) + " j=" + std::to_string(j));
                EXPECT_EQ(at(scores.b, j), q0 + h * hs) << "scores: q of head h";
                EXPECT_EQ(at(scores.a, j), q0 + NH * hs + (h / G) * hs) << "scores: k of head h / G";
                EXPECT_EQ(at(scores.d, j), att.data() + static_cast<size_t>(h) * T * T) << "scores: att of head h";
                EXPECT_EQ(at(outp.a, j), q0 + (NH + NKV) * hs + (h / G) * hs) << "out: v of head h / G";
                EXPECT_EQ(at(outp.d, j), out.data() + h * hs) << "out: columns of head h";
                EXPECT_EQ(at(dk.d, j), qkv.data() + NH * hs + (h / G) * hs) << "dk: gradient of head h / G";
                EXPECT_EQ(dk.beta, 1.f) << "group positions must accumulate into dk";
            }
            EXPECT_EQ(scores.a.ld, W);
            EXPECT_EQ(scores.b.ld, W);
            EXPECT_EQ(outp.d.ld, O);
        }
    }
}

// ----------------------------------------------------------------------------------------
// ProfilingBackend: the new ops are timed under their kinds and change nothing
// ----------------------------------------------------------------------------------------

TEST(LlamaOps, ProfilingBackendTimesTheLlamaOpsWithoutChangingThem) {
    auto plain = make_cpu_backend(1);
    ProfilingBackend profiled(make_cpu_backend(1));
    const int N = 8, C = 16, F = 24;
    const QkvShape s{1, 8, 2, 1, 8};
    const Vec x = uniform(N * C, 81), w = uniform(C, 82), g = uniform(2 * N * F, 83), qkv = uniform(s.numel(), 84);
    const std::vector<float> table = rope_table(s.T, s.hs, RopeOptions{});
    auto run = [&](Backend& be) {
        Vec out(N * C), rstd(N), dinp(N * C), dw(C), sw(N * F), dg(2 * N * F), rot(s.numel()), drot(s.numel());
        be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
        be.rmsnorm_backward(dinp.data(), dw.data(), out.data(), x.data(), w.data(), rstd.data(), N, C);
        be.swiglu_forward(sw.data(), g.data(), N, F);
        be.swiglu_backward(dg.data(), g.data(), sw.data(), N, F);
        be.rope_forward(rot.data(), qkv.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        be.rope_backward(drot.data(), rot.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        for (const Vec* v : {&rstd, &dinp, &dw, &sw, &dg, &rot, &drot}) out.insert(out.end(), v->begin(), v->end());
        return out;
    };
    EXPECT_EQ(run(profiled), run(*plain));
    for (int op : {ProfilingBackend::kOpRmsNorm, ProfilingBackend::kOpRope, ProfilingBackend::kOpSwiGlu}) {
        EXPECT_GT(profiled.op_ms(op), 0.0) << ProfilingBackend::op_name(op);
    }
    EXPECT_STREQ(ProfilingBackend::op_name(ProfilingBackend::kOpRmsNorm), "rmsnorm");
    EXPECT_STREQ(ProfilingBackend::op_name(ProfilingBackend::kOpRope), "rope");
    EXPECT_STREQ(ProfilingBackend::op_name(ProfilingBackend::kOpSwiGlu), "swiglu");
}

}  // namespace
}  // namespace zt
