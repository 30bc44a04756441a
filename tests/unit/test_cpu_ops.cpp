// Every op of the CPU backend, forward and backward, against naive double-precision
// references written here from the definitions (not from the backend's code).
//
// Conventions checked besides the values:
//  - backward ops ACCUMULATE: gradient outputs are pre-filled with nonzero values and the
//    expected result is prefill + gradient;
//  - null gradient outputs are skipped;
//  - sizes are odd (no multiple of a vector width or of the 16-wide sgemm split), and every
//    op also runs on one case big enough to take its multi-threaded path.
//
// Tolerances. The backend computes in fp32 (unit roundoff u = 6e-8), the references in
// double. Every check allows |got - ref| <= 1e-5 * |ref| + atol. For ops without long sums
// (element-wise, GELU, AdamW, short rows) atol = 1e-5. For a K-term sum of O(1) products
// (matmul, layernorm's row/column sums, attention) the fp32 rounding error grows like
// sqrt(K): atol = 4e-6 * sqrt(K). Both are at least 5x the largest error observed on
// these inputs (e.g. 6e-6 for a 300-term matmul) and 1e4x below the O(0.1) error of any
// indexing, transpose or accumulate-vs-overwrite mistake. The polynomial exp behind
// softmax/GELU/cross-entropy is within 1e-7 relative, well inside these bounds.
#include "ztrain/backend/backend.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/random.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace zt {
namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;

using Vec = std::vector<float>;
using DVec = std::vector<double>;

/// Uniform values in [lo, hi), a pure function of (seed, index).
Vec random_vec(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
    Vec v(n);
    for (size_t i = 0; i < n; ++i) {
        v[i] = lo + (hi - lo) * static_cast<float>(random_uniform(seed, 77, i));
    }
    return v;
}

DVec to_double(const Vec& v) {
    return DVec(v.begin(), v.end());
}

/// Absolute tolerance for results that are K-term fp32 sums of O(1) products.
double sum_atol(int K) {
    return 4e-6 * std::sqrt(static_cast<double>(std::max(K, 1)));
}

/// Compares got against ref element by element with |got - ref| <= atol + rtol * |ref|.
/// On failure says how many elements differ, the worst one (flat index and, when cols > 0,
/// row/column), both values and the error against the allowance, plus the max abs error.
::testing::AssertionResult all_close(const std::string& what, const DVec& ref, const float* got,
                                     size_t cols = 0, double rtol = kRtol, double atol = kAtol) {
    size_t bad = 0;
    size_t worst = 0;
    double worst_ratio = -1.0;
    double max_abs = 0.0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double g = static_cast<double>(got[i]);
        const double err = std::fabs(g - ref[i]);
        const double allowed = atol + rtol * std::fabs(ref[i]);
        const double ratio =
            std::isnan(err) ? std::numeric_limits<double>::infinity() : err / allowed;
        if (!(err <= allowed)) {
            ++bad;
        }
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
        if (!std::isnan(err)) {
            max_abs = std::max(max_abs, err);
        }
    }
    if (bad == 0) {
        return ::testing::AssertionSuccess();
    }
    std::ostringstream where;
    where << "index " << worst;
    if (cols > 0) {
        where << " (row " << worst / cols << ", col " << worst % cols << ")";
    }
    const double err = std::fabs(static_cast<double>(got[worst]) - ref[worst]);
    return ::testing::AssertionFailure()
           << what << ": " << bad << " of " << ref.size() << " elements out of tolerance; worst at "
           << where.str() << ": got " << got[worst] << ", want " << ref[worst] << ", abs err "
           << err << " > allowed " << (atol + rtol * std::fabs(ref[worst])) << " (rel err "
           << err / std::max(std::fabs(ref[worst]), 1e-300) << "); max abs err over all "
           << max_abs;
}

::testing::AssertionResult all_close(const std::string& what, const DVec& ref, const Vec& got,
                                     size_t cols = 0, double rtol = kRtol, double atol = kAtol) {
    if (ref.size() != got.size()) {
        return ::testing::AssertionFailure()
               << what << ": size " << got.size() << ", want " << ref.size();
    }
    return all_close(what, ref, got.data(), cols, rtol, atol);
}

std::unique_ptr<Backend> backend() {
    return make_cpu_backend(0);
}

// ----------------------------------------------------------------------------------------
// Memory and element-wise utilities
// ----------------------------------------------------------------------------------------

TEST(CpuBackend, ThreadsDefaultToHardwareConcurrency) {
    const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    EXPECT_EQ(make_cpu_backend(0)->threads(), hw);
    EXPECT_EQ(make_cpu_backend(-3)->threads(), hw);
    EXPECT_EQ(make_cpu_backend(1)->threads(), 1);
    EXPECT_EQ(make_cpu_backend(3)->threads(), 3);
    EXPECT_EQ(make_cpu_backend(1)->name(), "cpu");
}

TEST(CpuBackend, AllocIsAlignedAndZeroed) {
    auto be = backend();
    for (size_t n : {size_t{0}, size_t{1}, size_t{13}, size_t{1000003}}) {
        float* p = be->alloc_floats(n);
        ASSERT_NE(p, nullptr) << "n=" << n;
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << "n=" << n;
        size_t nonzero = 0;
        for (size_t i = 0; i < n; ++i) {
            nonzero += p[i] != 0.f ? 1 : 0;
        }
        EXPECT_EQ(nonzero, 0u) << "alloc_floats(" << n << ") left " << nonzero << " nonzero floats";
        be->free(p);
    }
}

TEST(CpuBackend, ZeroCopyResidual) {
    auto be = backend();
    // 300001 floats exceeds the threshold where zero/copy split across threads.
    for (size_t n : {size_t{17}, size_t{300001}}) {
        const Vec a = random_vec(n, 1);
        const Vec b = random_vec(n, 2);
        Vec x = a;
        be->zero(x.data(), n);
        EXPECT_TRUE(all_close("zero n=" + std::to_string(n), DVec(n, 0.0), x));

        Vec y(n, 5.f);
        be->copy(y.data(), a.data(), n);
        EXPECT_TRUE(all_close("copy n=" + std::to_string(n), to_double(a), y, 0, 0.0, 0.0));

        Vec out(n);
        DVec want(n);
        be->residual_forward(out.data(), a.data(), b.data(), n);
        for (size_t i = 0; i < n; ++i) {
            want[i] = static_cast<double>(a[i]) + b[i];
        }
        EXPECT_TRUE(all_close("residual n=" + std::to_string(n), want, out));
        // out aliasing an input (the residual stream is updated in place).
        Vec in_place = a;
        be->residual_forward(in_place.data(), in_place.data(), b.data(), n);
        EXPECT_TRUE(all_close("residual in place n=" + std::to_string(n), want, in_place));
    }
}

TEST(CpuBackend, SumSquaresInDouble) {
    auto be = backend();
    for (size_t n : {size_t{1}, size_t{1001}, size_t{1000003}}) {
        const Vec x = random_vec(n, 3, -2.f, 2.f);
        double want = 0.0;
        for (float v : x) {
            want += static_cast<double>(v) * v;
        }
        // Double accumulation: only the summation order differs from the reference.
        EXPECT_NEAR(be->sum_squares(x.data(), n), want, 1e-12 * want) << "n=" << n;
    }
    // A sum whose terms differ by 2^24 loses the small ones in fp32 but not in double.
    Vec x(4096, 1.f);
    x[0] = 4096.f;
    EXPECT_EQ(be->sum_squares(x.data(), x.size()), 4096.0 * 4096.0 + 4095.0);
}

// ----------------------------------------------------------------------------------------
// matmul
// ----------------------------------------------------------------------------------------

DVec ref_matmul_forward(const Vec& inp, const Vec& w, const Vec* bias, int N, int C, int OC) {
    DVec out(static_cast<size_t>(N) * OC);
    for (int n = 0; n < N; ++n) {
        for (int o = 0; o < OC; ++o) {
            double acc = bias != nullptr ? (*bias)[o] : 0.0;
            for (int c = 0; c < C; ++c) {
                acc += static_cast<double>(inp[n * C + c]) * w[o * C + c];
            }
            out[static_cast<size_t>(n) * OC + o] = acc;
        }
    }
    return out;
}

struct MatmulCase {
    int N;
    int C;
    int OC;
};
std::ostream& operator<<(std::ostream& os, const MatmulCase& c) {
    return os << "N=" << c.N << " C=" << c.C << " OC=" << c.OC;
}

class Matmul : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(Matmul, ForwardMatchesReference) {
    const auto [N, C, OC] = GetParam();
    auto be = backend();
    const Vec inp = random_vec(static_cast<size_t>(N) * C, 10);
    const Vec w = random_vec(static_cast<size_t>(OC) * C, 11);
    const Vec bias = random_vec(OC, 12);
    Vec out(static_cast<size_t>(N) * OC, 123.f);  // forward overwrites, never accumulates
    be->matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    EXPECT_TRUE(all_close("matmul_forward with bias", ref_matmul_forward(inp, w, &bias, N, C, OC),
                          out, OC, kRtol, sum_atol(C)));
    std::fill(out.begin(), out.end(), 123.f);
    be->matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
    EXPECT_TRUE(all_close("matmul_forward without bias",
                          ref_matmul_forward(inp, w, nullptr, N, C, OC), out, OC, kRtol,
                          sum_atol(C)));
}

TEST_P(Matmul, BackwardAccumulatesIntoAllGradients) {
    const auto [N, C, OC] = GetParam();
    auto be = backend();
    const Vec inp = random_vec(static_cast<size_t>(N) * C, 20);
    const Vec w = random_vec(static_cast<size_t>(OC) * C, 21);
    const Vec dout = random_vec(static_cast<size_t>(N) * OC, 22);
    const Vec dinp0 = random_vec(static_cast<size_t>(N) * C, 23);
    const Vec dw0 = random_vec(static_cast<size_t>(OC) * C, 24);
    const Vec db0 = random_vec(OC, 25);

    DVec want_dinp = to_double(dinp0);
    DVec want_dw = to_double(dw0);
    DVec want_db = to_double(db0);
    for (int n = 0; n < N; ++n) {
        for (int o = 0; o < OC; ++o) {
            const double d = dout[n * OC + o];
            want_db[o] += d;
            for (int c = 0; c < C; ++c) {
                want_dinp[static_cast<size_t>(n) * C + c] += d * w[o * C + c];
                want_dw[static_cast<size_t>(o) * C + c] += d * inp[n * C + c];
            }
        }
    }
    Vec dinp = dinp0;
    Vec dw = dw0;
    Vec db = db0;
    be->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C,
                        OC);
    EXPECT_TRUE(all_close("matmul_backward dinp", want_dinp, dinp, C, kRtol, sum_atol(OC)));
    EXPECT_TRUE(all_close("matmul_backward dweight", want_dw, dw, C, kRtol, sum_atol(N)));
    EXPECT_TRUE(all_close("matmul_backward dbias", want_db, db, 0, kRtol, sum_atol(N)));

    // Null outputs are skipped; the others are unaffected by the missing ones.
    dw = dw0;
    be->matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    EXPECT_TRUE(all_close("matmul_backward dweight only", want_dw, dw, C, kRtol, sum_atol(N)));
    dinp = dinp0;
    be->matmul_backward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
    EXPECT_TRUE(all_close("matmul_backward dinp only", want_dinp, dinp, C, kRtol, sum_atol(OC)));
}

// 7x13x11: odd, below the threading threshold. 67x96x130: split across threads, with odd
// remainders on both split dimensions. 5x40x300: few rows, so the split is by columns.
// One row (a decoded token: the sgemv path), below the threshold and split by columns.
INSTANTIATE_TEST_SUITE_P(CpuBackend, Matmul,
                         ::testing::Values(MatmulCase{7, 13, 11}, MatmulCase{67, 96, 130},
                                           MatmulCase{5, 40, 300}, MatmulCase{1, 13, 11},
                                           MatmulCase{1, 200, 1501}),
                         [](const ::testing::TestParamInfo<MatmulCase>& info) {
                             return "N" + std::to_string(info.param.N) + "_C" +
                                    std::to_string(info.param.C) + "_OC" +
                                    std::to_string(info.param.OC);
                         });

// ----------------------------------------------------------------------------------------
// layernorm
// ----------------------------------------------------------------------------------------

class LayerNorm : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(LayerNorm, ForwardAndBackwardMatchReference) {
    const auto [N, C] = GetParam();
    auto be = backend();
    // An offset mean (3.0) checks the variance does not cancel catastrophically.
    const Vec inp = random_vec(static_cast<size_t>(N) * C, 30, 2.f, 4.f);
    const Vec w = random_vec(C, 31, 0.5f, 1.5f);
    const Vec b = random_vec(C, 32);
    const Vec dout = random_vec(static_cast<size_t>(N) * C, 33);

    DVec want_out(static_cast<size_t>(N) * C);
    DVec want_mean(N);
    DVec want_rstd(N);
    DVec norm(static_cast<size_t>(N) * C);
    for (int n = 0; n < N; ++n) {
        double mean = 0.0;
        for (int c = 0; c < C; ++c) {
            mean += inp[n * C + c];
        }
        mean /= C;
        double var = 0.0;
        for (int c = 0; c < C; ++c) {
            var += (inp[n * C + c] - mean) * (inp[n * C + c] - mean);
        }
        var /= C;
        const double rstd = 1.0 / std::sqrt(var + 1e-5);
        want_mean[n] = mean;
        want_rstd[n] = rstd;
        for (int c = 0; c < C; ++c) {
            const size_t i = static_cast<size_t>(n) * C + c;
            norm[i] = (inp[i] - mean) * rstd;
            want_out[i] = norm[i] * w[c] + b[c];
        }
    }
    Vec out(static_cast<size_t>(N) * C);
    Vec mean(N);
    Vec rstd(N);
    be->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N,
                          C);
    EXPECT_TRUE(all_close("layernorm_forward out", want_out, out, C, kRtol, sum_atol(C)));
    EXPECT_TRUE(all_close("layernorm_forward mean", want_mean, mean, 0, kRtol, sum_atol(C)));
    EXPECT_TRUE(all_close("layernorm_forward rstd", want_rstd, rstd, 0, kRtol, sum_atol(C)));

    // Backward: y = norm * w + b, norm = (x - mean) * rstd.
    const Vec dinp0 = random_vec(static_cast<size_t>(N) * C, 34);
    const Vec dw0 = random_vec(C, 35);
    const Vec db0 = random_vec(C, 36);
    DVec want_dinp = to_double(dinp0);
    DVec want_dw = to_double(dw0);
    DVec want_db = to_double(db0);
    for (int n = 0; n < N; ++n) {
        double mean_dnorm = 0.0;
        double mean_dnorm_norm = 0.0;
        for (int c = 0; c < C; ++c) {
            const size_t i = static_cast<size_t>(n) * C + c;
            const double dnorm = static_cast<double>(dout[i]) * w[c];
            mean_dnorm += dnorm;
            mean_dnorm_norm += dnorm * norm[i];
            want_dw[c] += dout[i] * norm[i];
            want_db[c] += dout[i];
        }
        mean_dnorm /= C;
        mean_dnorm_norm /= C;
        for (int c = 0; c < C; ++c) {
            const size_t i = static_cast<size_t>(n) * C + c;
            const double dnorm = static_cast<double>(dout[i]) * w[c];
            want_dinp[i] += (dnorm - mean_dnorm - norm[i] * mean_dnorm_norm) * want_rstd[n];
        }
    }
    Vec dinp = dinp0;
    Vec dw = dw0;
    Vec db = db0;
    be->layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("layernorm_backward dinp", want_dinp, dinp, C, kRtol, sum_atol(C)));
    EXPECT_TRUE(all_close("layernorm_backward dweight", want_dw, dw, 0, kRtol, sum_atol(N)));
    EXPECT_TRUE(all_close("layernorm_backward dbias", want_db, db, 0, kRtol, sum_atol(N)));

    dinp = dinp0;
    be->layernorm_backward(dinp.data(), nullptr, nullptr, dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("layernorm_backward dinp only", want_dinp, dinp, C, kRtol, sum_atol(C)));
    dw = dw0;
    be->layernorm_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
    EXPECT_TRUE(all_close("layernorm_backward dweight only", want_dw, dw, 0, kRtol, sum_atol(N)));
}

// 7x13: serial path. 33x515: threaded rows and threaded channel slabs.
INSTANTIATE_TEST_SUITE_P(CpuBackend, LayerNorm,
                         ::testing::Values(std::make_pair(7, 13), std::make_pair(33, 515)),
                         [](const ::testing::TestParamInfo<std::pair<int, int>>& info) {
                             return "N" + std::to_string(info.param.first) + "_C" +
                                    std::to_string(info.param.second);
                         });

// ----------------------------------------------------------------------------------------
// GELU
// ----------------------------------------------------------------------------------------

TEST(CpuBackend, GeluForwardAndBackwardMatchTanhFormula) {
    auto be = backend();
    const double k = std::sqrt(2.0 / 3.14159265358979323846);
    // 70001 elements take the threaded path; the tail holds saturated and extreme values.
    for (size_t n : {size_t{1001}, size_t{70001}}) {
        Vec x = random_vec(n, 40, -6.f, 6.f);
        const float extremes[] = {0.f,   -0.f, 1e-6f, -1e-6f, 10.f,
                                  -10.f, 30.f, -30.f, 200.f,  -200.f};
        std::copy(std::begin(extremes), std::end(extremes), x.end() - std::size(extremes));
        const Vec dout = random_vec(n, 41);
        const Vec dinp0 = random_vec(n, 42);
        DVec want(n);
        DVec want_dinp = to_double(dinp0);
        for (size_t i = 0; i < n; ++i) {
            const double v = x[i];
            const double u = k * (v + 0.044715 * v * v * v);
            const double th = std::tanh(u);
            want[i] = 0.5 * v * (1.0 + th);
            const double du = k * (1.0 + 3.0 * 0.044715 * v * v);
            want_dinp[i] += (0.5 * (1.0 + th) + 0.5 * v * (1.0 - th * th) * du) * dout[i];
        }
        Vec out(n);
        be->gelu_forward(out.data(), x.data(), n);
        EXPECT_TRUE(all_close("gelu_forward n=" + std::to_string(n), want, out));
        Vec dinp = dinp0;
        be->gelu_backward(dinp.data(), x.data(), dout.data(), n);
        EXPECT_TRUE(all_close("gelu_backward n=" + std::to_string(n), want_dinp, dinp));
    }
}

// ----------------------------------------------------------------------------------------
// attention
// ----------------------------------------------------------------------------------------

struct AttnCase {
    int B;
    int T;
    int C;
    int NH;
};
std::ostream& operator<<(std::ostream& os, const AttnCase& a) {
    return os << "B=" << a.B << " T=" << a.T << " C=" << a.C << " NH=" << a.NH;
}

struct AttnRef {
    DVec out;   // (B, T, C)
    DVec att;   // (B, NH, T, T), zero above the diagonal
    DVec dqkv;  // (B, T, 3C) gradient only (no prefill)
};

AttnRef ref_attention(const Vec& qkv, const Vec& dout, const AttnCase& a) {
    const int B = a.B, T = a.T, C = a.C, NH = a.NH;
    const int hs = C / NH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
    AttnRef r;
    r.out.assign(static_cast<size_t>(B) * T * C, 0.0);
    r.att.assign(static_cast<size_t>(B) * NH * T * T, 0.0);
    r.dqkv.assign(static_cast<size_t>(B) * T * 3 * C, 0.0);
    auto at = [&](int b, int t, int part, int h, int i) -> size_t {
        return (static_cast<size_t>(b) * T + t) * 3 * C + static_cast<size_t>(part) * C + h * hs +
               i;
    };
    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
            for (int t = 0; t < T; ++t) {
                DVec p(t + 1);
                double maxv = -1e300;
                for (int s = 0; s <= t; ++s) {
                    double dot = 0.0;
                    for (int i = 0; i < hs; ++i) {
                        dot += static_cast<double>(qkv[at(b, t, 0, h, i)]) * qkv[at(b, s, 1, h, i)];
                    }
                    p[s] = dot * scale;
                    maxv = std::max(maxv, p[s]);
                }
                double sum = 0.0;
                for (int s = 0; s <= t; ++s) {
                    p[s] = std::exp(p[s] - maxv);
                    sum += p[s];
                }
                const size_t arow = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
                for (int s = 0; s <= t; ++s) {
                    p[s] /= sum;
                    r.att[arow + s] = p[s];
                }
                const size_t orow = (static_cast<size_t>(b) * T + t) * C + h * hs;
                for (int i = 0; i < hs; ++i) {
                    double acc = 0.0;
                    for (int s = 0; s <= t; ++s) {
                        acc += p[s] * qkv[at(b, s, 2, h, i)];
                    }
                    r.out[orow + i] = acc;
                }
                // Backward of this row: dP, dV, softmax backward, dQ, dK.
                DVec dp(t + 1);
                double dot_pdp = 0.0;
                for (int s = 0; s <= t; ++s) {
                    double acc = 0.0;
                    for (int i = 0; i < hs; ++i) {
                        acc += static_cast<double>(dout[orow + i]) * qkv[at(b, s, 2, h, i)];
                        r.dqkv[at(b, s, 2, h, i)] += p[s] * dout[orow + i];
                    }
                    dp[s] = acc;
                    dot_pdp += p[s] * acc;
                }
                for (int s = 0; s <= t; ++s) {
                    const double ds = p[s] * (dp[s] - dot_pdp) * scale;
                    for (int i = 0; i < hs; ++i) {
                        r.dqkv[at(b, t, 0, h, i)] += ds * qkv[at(b, s, 1, h, i)];
                        r.dqkv[at(b, s, 1, h, i)] += ds * qkv[at(b, t, 0, h, i)];
                    }
                }
            }
        }
    }
    return r;
}

class Attention : public ::testing::TestWithParam<AttnCase> {};

TEST_P(Attention, ForwardAndBackwardMatchReference) {
    const AttnCase a = GetParam();
    const int B = a.B, T = a.T, C = a.C, NH = a.NH;
    auto be = backend();
    // Scores of a few units give peaked, non-trivial softmax rows.
    const Vec qkv = random_vec(static_cast<size_t>(B) * T * 3 * C, 50, -1.5f, 1.5f);
    const Vec dout = random_vec(static_cast<size_t>(B) * T * C, 51);
    const AttnRef ref = ref_attention(qkv, dout, a);
    const double atol = sum_atol(std::max(T, C / NH));

    Vec out(static_cast<size_t>(B) * T * C, 7.f);
    Vec att(static_cast<size_t>(B) * NH * T * T, 7.f);
    be->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    EXPECT_TRUE(all_close("attention_forward out", ref.out, out, C, kRtol, atol));
    // Only the causal part of att is specified.
    DVec want_att_lower;
    Vec got_att_lower;
    for (size_t row = 0; row < static_cast<size_t>(B) * NH * T; ++row) {
        const size_t t = row % static_cast<size_t>(T);
        for (size_t s = 0; s <= t; ++s) {
            want_att_lower.push_back(ref.att[row * T + s]);
            got_att_lower.push_back(att[row * T + s]);
        }
    }
    EXPECT_TRUE(all_close("attention_forward att (causal part, packed row-major)", want_att_lower,
                          got_att_lower, 0, kRtol, atol));

    // Backward must not read att above the diagonal nor rely on scratch contents: poison both.
    for (size_t row = 0; row < static_cast<size_t>(B) * NH * T; ++row) {
        for (size_t s = row % static_cast<size_t>(T) + 1; s < static_cast<size_t>(T); ++s) {
            att[row * T + s] = std::numeric_limits<float>::quiet_NaN();
        }
    }
    Vec scratch(be->attention_scratch_floats(B, T, NH), std::numeric_limits<float>::quiet_NaN());
    const Vec dqkv0 = random_vec(qkv.size(), 52);
    DVec want = to_double(dqkv0);
    for (size_t i = 0; i < want.size(); ++i) {
        want[i] += ref.dqkv[i];
    }
    Vec dqkv = dqkv0;
    be->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T,
                           C, NH);
    EXPECT_TRUE(all_close("attention_backward dqkv (cols: [dq | dk | dv])", want, dqkv, 3 * C,
                          kRtol, atol));
}

// The small case is the brief's; 2x130x64x2 crosses two 64-row causal blocks with a partial
// third one; 3x67x48x4 has an odd head count per batch for the thread split.
INSTANTIATE_TEST_SUITE_P(CpuBackend, Attention,
                         ::testing::Values(AttnCase{2, 5, 12, 3}, AttnCase{2, 130, 64, 2},
                                           AttnCase{3, 67, 48, 4}, AttnCase{1, 1, 8, 2}),
                         [](const ::testing::TestParamInfo<AttnCase>& info) {
                             const AttnCase& a = info.param;
                             return "B" + std::to_string(a.B) + "_T" + std::to_string(a.T) + "_C" +
                                    std::to_string(a.C) + "_NH" + std::to_string(a.NH);
                         });

TEST(CpuBackend, AttentionRejectsIndivisibleHeads) {
    auto be = backend();
    Vec qkv(3 * 10, 0.f);
    Vec out(10);
    Vec att(1);
    EXPECT_THROW(be->attention_forward(out.data(), att.data(), qkv.data(), 1, 1, 10, 3), Error);
}

// ----------------------------------------------------------------------------------------
// encoder
// ----------------------------------------------------------------------------------------

TEST(CpuBackend, EncoderForwardAndBackward) {
    auto be = backend();
    // The second case takes the threaded path; both repeat tokens heavily (a scatter race
    // would lose updates).
    for (const auto& dims : {std::vector<int>{3, 5, 13, 11}, std::vector<int>{4, 16, 300, 7}}) {
        const int B = dims[0], T = dims[1], C = dims[2], Vp = dims[3];
        const Vec wte = random_vec(static_cast<size_t>(Vp) * C, 60);
        const Vec wpe = random_vec(static_cast<size_t>(T) * C, 61);
        std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
        for (size_t i = 0; i < tokens.size(); ++i) {
            tokens[i] = static_cast<int32_t>(random_bits(62, 0, i) % static_cast<uint64_t>(Vp));
        }
        tokens[0] = Vp - 1;
        DVec want(static_cast<size_t>(B) * T * C);
        for (int r = 0; r < B * T; ++r) {
            for (int c = 0; c < C; ++c) {
                want[static_cast<size_t>(r) * C + c] =
                    static_cast<double>(wte[static_cast<size_t>(tokens[r]) * C + c]) +
                    wpe[static_cast<size_t>(r % T) * C + c];
            }
        }
        Vec out(want.size());
        be->encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        const std::string tag = " C=" + std::to_string(C);
        EXPECT_TRUE(all_close("encoder_forward" + tag, want, out, C));
        // No position table (Llama): the token rows exactly.
        be->encoder_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
        for (int r = 0; r < B * T; ++r) {
            for (int c = 0; c < C; ++c) {
                ASSERT_EQ(out[static_cast<size_t>(r) * C + c], wte[static_cast<size_t>(tokens[r]) * C + c])
                    << "encoder_forward without wpe" << tag << ", row " << r << ", channel " << c;
            }
        }

        const Vec dout = random_vec(want.size(), 63);
        const Vec dwte0 = random_vec(wte.size(), 64);
        const Vec dwpe0 = random_vec(wpe.size(), 65);
        DVec want_dwte = to_double(dwte0);
        DVec want_dwpe = to_double(dwpe0);
        for (int r = 0; r < B * T; ++r) {
            for (int c = 0; c < C; ++c) {
                const double d = dout[static_cast<size_t>(r) * C + c];
                want_dwte[static_cast<size_t>(tokens[r]) * C + c] += d;
                want_dwpe[static_cast<size_t>(r % T) * C + c] += d;
            }
        }
        Vec dwte = dwte0;
        Vec dwpe = dwpe0;
        be->encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
        EXPECT_TRUE(all_close("encoder_backward dwte" + tag, want_dwte, dwte, C));
        EXPECT_TRUE(all_close("encoder_backward dwpe" + tag, want_dwpe, dwpe, C));
        dwte = dwte0;
        be->encoder_backward(dwte.data(), nullptr, dout.data(), tokens.data(), B, T, C);
        EXPECT_TRUE(all_close("encoder_backward dwte only" + tag, want_dwte, dwte, C));
    }
}

// ----------------------------------------------------------------------------------------
// softmax cross-entropy
// ----------------------------------------------------------------------------------------

struct XentCase {
    int N;
    int V;
    int Vp;
};
std::ostream& operator<<(std::ostream& os, const XentCase& c) {
    return os << "N=" << c.N << " V=" << c.V << " Vp=" << c.Vp;
}

class CrossEntropy : public ::testing::TestWithParam<XentCase> {};

TEST_P(CrossEntropy, LossesAndGradientsIgnorePaddingAndNegativeTargets) {
    const auto [N, V, Vp] = GetParam();
    auto be = backend();
    // Logits around 50 check the max subtraction; padded columns hold huge values that would
    // dominate the softmax if they were included.
    Vec logits = random_vec(static_cast<size_t>(N) * Vp, 70, 45.f, 55.f);
    for (int r = 0; r < N; ++r) {
        for (int c = V; c < Vp; ++c) {
            logits[static_cast<size_t>(r) * Vp + c] = 1e4f;
        }
    }
    std::vector<int32_t> targets(N);
    for (int r = 0; r < N; ++r) {
        targets[r] = static_cast<int32_t>(random_bits(71, 0, r) % static_cast<uint64_t>(V));
    }
    targets[1] = -1;
    targets[N - 1] = -100;
    targets[2] = V - 1;
    const float dloss = 0.37f;

    DVec want_loss(N, 0.0);
    DVec want_grad(logits.size(), 0.0);
    for (int r = 0; r < N; ++r) {
        if (targets[r] < 0) {
            continue;
        }
        const float* row = logits.data() + static_cast<size_t>(r) * Vp;
        double maxv = -1e300;
        for (int c = 0; c < V; ++c) {
            maxv = std::max(maxv, static_cast<double>(row[c]));
        }
        double sum = 0.0;
        for (int c = 0; c < V; ++c) {
            sum += std::exp(row[c] - maxv);
        }
        want_loss[r] = -(row[targets[r]] - maxv - std::log(sum));
        for (int c = 0; c < V; ++c) {
            const double p = std::exp(row[c] - maxv) / sum;
            want_grad[static_cast<size_t>(r) * Vp + c] =
                dloss * (p - (c == targets[r] ? 1.0 : 0.0));
        }
    }

    // dloss == 0: losses only, logits untouched.
    Vec losses(N, 9.f);
    Vec untouched = logits;
    be->softmax_cross_entropy(losses.data(), untouched.data(), targets.data(), N, V, Vp, 0.f);
    EXPECT_TRUE(all_close("cross-entropy losses (dloss=0)", want_loss, losses));
    EXPECT_TRUE(all_close("cross-entropy with dloss=0 must not modify logits", to_double(logits),
                          untouched, Vp, 0.0, 0.0));

    std::fill(losses.begin(), losses.end(), 9.f);
    Vec grad = logits;
    be->softmax_cross_entropy(losses.data(), grad.data(), targets.data(), N, V, Vp, dloss);
    EXPECT_TRUE(all_close("cross-entropy losses", want_loss, losses));
    // Includes: zeros in padded columns and in ignored rows.
    EXPECT_TRUE(all_close("cross-entropy dlogits", want_grad, grad, Vp));
}

// Small odd case; a GPT-2-like padded vocabulary slice that takes the threaded path.
INSTANTIATE_TEST_SUITE_P(CpuBackend, CrossEntropy,
                         ::testing::Values(XentCase{7, 11, 16}, XentCase{9, 5001, 5056},
                                           XentCase{5, 13, 13}),
                         [](const ::testing::TestParamInfo<XentCase>& info) {
                             return "N" + std::to_string(info.param.N) + "_V" +
                                    std::to_string(info.param.V) + "_Vp" +
                                    std::to_string(info.param.Vp);
                         });

TEST(CpuBackend, CrossEntropyRejectsTargetOutsideVocabulary) {
    auto be = backend();
    Vec logits(2 * 8, 0.f);
    Vec losses(2);
    const std::vector<int32_t> targets = {3, 6};  // 6 is a padded column (V = 5)
    EXPECT_THROW(
        be->softmax_cross_entropy(losses.data(), logits.data(), targets.data(), 2, 5, 8, 1.f),
        Error);
}

// ----------------------------------------------------------------------------------------
// AdamW
// ----------------------------------------------------------------------------------------

/// One AdamW step of the double-precision reference over elements [b, e) of (p, m, v),
/// with decoupled weight decay `weight_decay` (the step's own, or 0 where there is none).
void adamw_reference(DVec& p, DVec& m, DVec& v, const Vec& g, size_t b, size_t e,
                     const AdamWStep& step, double weight_decay) {
    for (size_t i = b; i < e; ++i) {
        const double gi = static_cast<double>(g[i]) * step.grad_scale;
        m[i] = step.beta1 * m[i] + (1.0 - step.beta1) * gi;
        v[i] = step.beta2 * v[i] + (1.0 - step.beta2) * gi * gi;
        const double mhat = m[i] / step.bias_correction1;
        const double vhat = v[i] / step.bias_correction2;
        p[i] -= step.lr * (mhat / (std::sqrt(vhat) + step.eps) + weight_decay * p[i]);
    }
}

/// AdamW for three steps: the fp32 state under test next to its double-precision reference.
struct AdamWRun {
    AdamWRun(size_t n, uint64_t seed)
        : p(random_vec(n, seed)), m(n, 0.f), v(n, 0.f), rp(to_double(p)), rm(n, 0.0), rv(n, 0.0) {
        step.lr = 3e-3f;
        step.beta1 = 0.9f;
        step.beta2 = 0.95f;
        step.eps = 1e-8f;
        step.weight_decay = 0.1f;
        step.grad_scale = 0.5f;
    }
    /// Sets the bias corrections of step t (1-based) and returns its gradients: spanning 6
    /// orders of magnitude, they exercise the eps term and the sqrt.
    Vec next_step(int t, uint64_t seed) {
        Vec g = random_vec(p.size(), seed);
        for (size_t i = 0; i < g.size(); i += 7) {
            g[i] *= 1e-6f;
        }
        step.bias_correction1 = 1.f - std::pow(step.beta1, static_cast<float>(t));
        step.bias_correction2 = 1.f - std::pow(step.beta2, static_cast<float>(t));
        return g;
    }
    void expect_matches(const std::string& tag) const {
        EXPECT_TRUE(all_close("adamw param" + tag, rp, p));
        EXPECT_TRUE(all_close("adamw m" + tag, rm, m));
        EXPECT_TRUE(all_close("adamw v" + tag, rv, v));
    }
    Vec p, m, v;
    DVec rp, rm, rv;
    AdamWStep step;
};

TEST(CpuBackend, AdamWThreeStepsMatchReference) {
    auto be = backend();
    for (size_t n : {size_t{1003}, size_t{50001}}) {
        AdamWRun r(n, 80);
        for (int t = 1; t <= 3; ++t) {
            const Vec g = r.next_step(t, 81 + t);
            be->adamw_update(r.p.data(), r.m.data(), r.v.data(), g.data(), n, r.step);
            adamw_reference(r.rp, r.rm, r.rv, g, 0, n, r.step, r.step.weight_decay);
            r.expect_matches(" n=" + std::to_string(n) + " step " + std::to_string(t));
        }
    }
}

// adamw_update_spans is what training runs (ModelState passes one span per decay segment).
// Spans as the trainer makes them: tensors of odd sizes inside one unit buffer, decay on
// some and not on others, with alignment gaps between them that no span covers (they must
// stay untouched); together past the threading threshold, so with several threads each span
// is split between them.
TEST(CpuBackend, AdamWSpansThreeStepsMatchReference) {
    struct Seg {
        size_t offset;
        size_t n;
        bool decay;
    };
    const std::vector<Seg> segs = {{0, 1, false},      {16, 37, true},     {64, 1003, false},
                                   {1072, 20011, true}, {21088, 5, false},  {21104, 40000, false},
                                   {61104, 4099, true}};
    const size_t total = 65211;  // the last span ends at 65203: a gap at the end too
    for (int threads : {1, 3}) {
        auto be = make_cpu_backend(threads);
        AdamWRun r(total, 90);
        for (int t = 1; t <= 3; ++t) {
            const Vec g = r.next_step(t, 91 + t);
            std::vector<AdamWSpan> spans;
            for (const Seg& s : segs) {
                AdamWSpan sp;
                sp.param = r.p.data() + s.offset;
                sp.m = r.m.data() + s.offset;
                sp.v = r.v.data() + s.offset;
                sp.grad = g.data() + s.offset;
                sp.n = s.n;
                sp.decay = s.decay;
                spans.push_back(sp);
                adamw_reference(r.rp, r.rm, r.rv, g, s.offset, s.offset + s.n, r.step,
                                s.decay ? r.step.weight_decay : 0.0);
            }
            be->adamw_update_spans(spans.data(), spans.size(), r.step);
            r.expect_matches(" spans, threads=" + std::to_string(threads) + " step " + std::to_string(t));
        }
    }
}

// A 16-bit run's AdamW reads its stored gradients and writes its working copy in the same
// pass: bit for bit the fp32 update from the widened gradients followed by a cast of the new
// master, across block edges (kTypedBlock) and thread splits.
TEST(CpuBackend, AdamWTypedSpansEqualWidenUpdateCast) {
    const size_t n = 70001;
    for (DType t : {DType::kBF16, DType::kF16}) {
        for (int threads : {1, 3}) {
            auto be = make_cpu_backend(threads);
            AdamWRun typed(n, 95), plain(n, 95);
            const Vec g = typed.next_step(2, 96);
            plain.next_step(2, 96);
            std::vector<uint8_t> g16(n * dtype_size(t)), work(n * dtype_size(t)), want_work(n * dtype_size(t));
            convert_from_f32(g.data(), g16.data(), n, t);
            Vec g_wide(n);
            convert_to_f32(g16.data(), g_wide.data(), n, t);
            const size_t split = 40007;  // two spans, one without decay
            std::vector<AdamWSpan> spans(2);
            for (int k = 0; k < 2; ++k) {
                const size_t b = k == 0 ? 0 : split, e = k == 0 ? split : n;
                AdamWSpan& sp = spans[static_cast<size_t>(k)];
                sp.param = typed.p.data() + b;
                sp.m = typed.m.data() + b;
                sp.v = typed.v.data() + b;
                sp.grad = ConstActPtr(g16.data() + b * dtype_size(t), t);
                sp.n = e - b;
                sp.decay = k == 0;
                sp.work = ActPtr(work.data() + b * dtype_size(t), t);
                AdamWStep step = plain.step;
                if (k == 1) step.weight_decay = 0.f;
                be->adamw_update(plain.p.data() + b, plain.m.data() + b, plain.v.data() + b, g_wide.data() + b, e - b,
                                 step);
            }
            be->adamw_update_spans(spans.data(), spans.size(), typed.step);
            convert_from_f32(plain.p.data(), want_work.data(), n, t);
            const std::string what = std::string(dtype_name(t)) + ", threads " + std::to_string(threads);
            EXPECT_EQ(0, std::memcmp(typed.p.data(), plain.p.data(), n * 4)) << what << ": master";
            EXPECT_EQ(0, std::memcmp(typed.m.data(), plain.m.data(), n * 4)) << what << ": m";
            EXPECT_EQ(0, std::memcmp(typed.v.data(), plain.v.data(), n * 4)) << what << ": v";
            EXPECT_EQ(0, std::memcmp(work.data(), want_work.data(), work.size())) << what << ": working copy";
        }
    }
}

// The gradient norm reads 16-bit gradients as stored: the same bits as the same values in fp32.
TEST(CpuBackend, SumSquaresSpansOf16BitEqualsFp32) {
    for (DType t : {DType::kBF16, DType::kF16}) {
        auto be = make_cpu_backend(3);
        const std::vector<size_t> sizes = {1, 1500, 0, 300007, 17};
        std::vector<std::vector<uint8_t>> stored;
        std::vector<Vec> wide;
        std::vector<ConstActPtr> typed_spans, f32_spans;
        for (size_t i = 0; i < sizes.size(); ++i) {
            const Vec v = random_vec(sizes[i], 97 + i, -3.f, 3.f);
            stored.emplace_back(sizes[i] * dtype_size(t));
            convert_from_f32(v.data(), stored.back().data(), sizes[i], t);
            wide.emplace_back(sizes[i]);
            convert_to_f32(stored.back().data(), wide.back().data(), sizes[i], t);
        }
        for (size_t i = 0; i < sizes.size(); ++i) {
            typed_spans.emplace_back(stored[i].data(), t);
            f32_spans.emplace_back(wide[i].data());
        }
        const double a = be->sum_squares_spans(typed_spans.data(), sizes.data(), sizes.size());
        const double b = be->sum_squares_spans(f32_spans.data(), sizes.data(), sizes.size());
        EXPECT_EQ(a, b) << dtype_name(t) << ": differ by " << a - b;
        double want = 0;
        for (const Vec& w : wide) {
            for (float x : w) want += static_cast<double>(x) * x;
        }
        EXPECT_NEAR(a, want, 1e-12 * want) << dtype_name(t);
    }
}

// ----------------------------------------------------------------------------------------
// Threading: results do not depend on the run, and barely on the thread count
// ----------------------------------------------------------------------------------------

TEST(CpuBackend, ThreadedOpsAreDeterministicAndAgreeWithOneThread) {
    auto one = make_cpu_backend(1);
    auto many =
        make_cpu_backend(std::max(2, static_cast<int>(std::thread::hardware_concurrency())));
    const int N = 67, C = 96, OC = 130;
    const Vec inp = random_vec(static_cast<size_t>(N) * C, 90);
    const Vec w = random_vec(static_cast<size_t>(OC) * C, 91);
    const Vec dout = random_vec(static_cast<size_t>(N) * OC, 92);
    auto run = [&](Backend& be) {
        Vec dinp(inp.size(), 0.f);
        Vec dw(w.size(), 0.f);
        Vec db(OC, 0.f);
        be.matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N,
                           C, OC);
        dinp.insert(dinp.end(), dw.begin(), dw.end());
        dinp.insert(dinp.end(), db.begin(), db.end());
        return dinp;
    };
    const Vec a = run(*many);
    const Vec b = run(*many);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
        << "two identical multi-threaded matmul_backward calls gave different bits";
    EXPECT_TRUE(all_close("matmul_backward, many threads vs one", to_double(run(*one)), a, 0, kRtol,
                          sum_atol(OC)));
}

}  // namespace
}  // namespace zt
