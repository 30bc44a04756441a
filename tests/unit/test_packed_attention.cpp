// Block-diagonal causal attention (Backend::gqa_attention_forward_segmented, CPU): examples
// packed into one row give, forward and backward, what each gives alone in its own row;
// a padding position that attends only to itself outputs its own value; all-zero
// attend_from is plain causal attention bit for bit.
//
// Rows cross the CPU kernel's 64-row block boundary (T = 70), and the heads are grouped
// (NH = 4 query heads over NKV = 2 key/value heads), so both the blocked products and the
// grouped-query gradient accumulation are covered.
//
// Sliding windows (Mistral) against a direct float64 computation of the masked attention:
// key j is seen from query t iff attend_from[t] <= j <= t, with attend_from[t] =
// max(segment start, t - window + 1) (transformers' sliding mask: t - j < window). Forward
// output and the gradient of q, k and v, for windows shorter than, equal to and not a
// multiple of the kernel's 64-row block, alone and with packed segments; the key/value-cache
// attention of generation with the same window, a token at a time and in chunks. The skipped
// work is checked directly: att is filled with NaN before the forward, so a probability
// outside the band the kernel computes, if it were read, would poison the result, and an
// entry far before the window is still NaN afterwards (never computed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/error.hpp"

namespace {

using Vec = std::vector<float>;
constexpr int kNH = 4;
constexpr int kNKV = 2;
constexpr int kHs = 8;
constexpr int kW = (kNH + 2 * kNKV) * kHs;  // qkv row
constexpr int kO = kNH * kHs;               // out row
constexpr int kKV = kNKV * kHs;             // one key/value cache row

Vec random_vec(size_t n, unsigned seed) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
    Vec v(n);
    for (float& x : v) x = dist(gen);
    return v;
}

/// Forward then backward of one batch; dqkv starts at zero.
struct AttentionRun {
    Vec out, att, dqkv;
};

AttentionRun run(zt::Backend& be, const Vec& qkv, const Vec& dout, int B, int T, const std::vector<int32_t>* from) {
    AttentionRun r{Vec(static_cast<size_t>(B) * T * kO), Vec(static_cast<size_t>(B) * kNH * T * T),
                   Vec(qkv.size(), 0.f)};
    if (from != nullptr) {
        be.gqa_attention_forward_segmented(r.out.data(), r.att.data(), qkv.data(), from->data(), B, T, kNH, kNKV, kHs);
    } else {
        be.gqa_attention_forward(r.out.data(), r.att.data(), qkv.data(), B, T, kNH, kNKV, kHs);
    }
    Vec scratch(be.attention_scratch_floats(B, T, kNH));
    if (from != nullptr) {
        be.gqa_attention_backward_segmented(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(),
                                            from->data(), B, T, kNH, kNKV, kHs);
    } else {
        be.gqa_attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(), B, T, kNH,
                                  kNKV, kHs);
    }
    return r;
}

/// Rows [first, first + n) of a (T, width) row-major block starting at `base`.
Vec rows(const Vec& v, size_t base, int first, int n, int width) {
    const auto begin = v.begin() + static_cast<std::ptrdiff_t>(base + static_cast<size_t>(first) * width);
    return Vec(begin, begin + static_cast<std::ptrdiff_t>(n) * width);
}

/// Largest |a - b| / max(1, |b|).
double max_rel(const Vec& a, const Vec& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        worst = std::max(worst, std::fabs(double{a[i]} - b[i]) / std::max(1.0, std::fabs(double{b[i]})));
    }
    return worst;
}

TEST(PackedAttention, EachExampleAsIfAlone) {
    const auto be = zt::make_cpu_backend(2);
    const int B = 2;
    const int T = 70;
    // Row 0: three examples of 17, 23 and 30 positions. Row 1: one of 50, then 20 padding
    // positions that attend only to themselves.
    const std::vector<std::pair<int, int>> row0 = {{0, 17}, {17, 23}, {40, 30}};
    std::vector<int32_t> from(static_cast<size_t>(B) * T);
    for (const auto& [start, len] : row0) {
        std::fill(from.begin() + start, from.begin() + start + len, start);
    }
    for (int t = 0; t < T; ++t) from[static_cast<size_t>(T + t)] = t < 50 ? 0 : t;
    const Vec qkv = random_vec(static_cast<size_t>(B) * T * kW, 1);
    const Vec dout = random_vec(static_cast<size_t>(B) * T * kO, 2);
    const AttentionRun packed = run(*be, qkv, dout, B, T, &from);

    std::vector<std::pair<size_t, std::pair<int, int>>> examples;  // (row, (start, len))
    for (const auto& e : row0) examples.push_back({0, e});
    examples.push_back({1, {0, 50}});
    for (const auto& [b, span] : examples) {
        const auto [start, len] = span;
        const Vec qkv_alone = rows(qkv, b * T * kW, start, len, kW);
        const Vec dout_alone = rows(dout, b * T * kO, start, len, kO);
        const AttentionRun alone = run(*be, qkv_alone, dout_alone, 1, len, nullptr);
        SCOPED_TRACE("row " + std::to_string(b) + ", example at " + std::to_string(start) + " of length " +
                     std::to_string(len));
        EXPECT_LE(max_rel(rows(packed.out, b * T * kO, start, len, kO), alone.out), 1e-5);
        EXPECT_LE(max_rel(rows(packed.dqkv, b * T * kW, start, len, kW), alone.dqkv), 1e-5);
    }
    // A padding position attends to itself only: its output is its own v.
    for (int t = 50; t < T; ++t) {
        for (int h = 0; h < kNH; ++h) {
            const size_t v_at = (static_cast<size_t>(T) + t) * kW + (kNH + kNKV) * kHs + (h / (kNH / kNKV)) * kHs;
            const size_t o_at = (static_cast<size_t>(T) + t) * kO + h * kHs;
            for (int i = 0; i < kHs; ++i) ASSERT_FLOAT_EQ(packed.out[o_at + i], qkv[v_at + i]) << "t " << t;
        }
    }
}

TEST(PackedAttention, ZeroStartsArePlainCausalAttentionBitForBit) {
    const auto be = zt::make_cpu_backend(2);
    const int B = 2;
    const int T = 67;
    const std::vector<int32_t> zeros(static_cast<size_t>(B) * T, 0);
    const Vec qkv = random_vec(static_cast<size_t>(B) * T * kW, 3);
    const Vec dout = random_vec(static_cast<size_t>(B) * T * kO, 4);
    const AttentionRun plain = run(*be, qkv, dout, B, T, nullptr);
    const AttentionRun seg = run(*be, qkv, dout, B, T, &zeros);
    EXPECT_EQ(plain.out, seg.out);
    EXPECT_EQ(plain.dqkv, seg.dqkv);
}

/// attend_from (B, T): the segment starts `segment` (null: 0) moved up to the window.
std::vector<int32_t> window_from(int B, int T, int window, const std::vector<int32_t>* segment) {
    std::vector<int32_t> from(static_cast<size_t>(B) * T);
    for (size_t i = 0; i < from.size(); ++i) {
        const int t = static_cast<int>(i % static_cast<size_t>(T));
        from[i] = std::max(segment != nullptr ? (*segment)[i] : 0, t - window + 1);
    }
    return from;
}

struct Result {
    std::vector<double> out, dqkv;
};

/// The masked attention and its gradient in float64, written from the definition.
Result reference(const Vec& qkv, const Vec& dout, const std::vector<int32_t>& from, int B, int T) {
    Result r{std::vector<double>(static_cast<size_t>(B) * T * kO, 0.0),
             std::vector<double>(qkv.size(), 0.0)};
    const double scale = 1.0 / std::sqrt(static_cast<double>(kHs));
    auto at = [&](int b, int t) { return (static_cast<size_t>(b) * T + t) * kW; };
    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < kNH; ++h) {
            const size_t q_col = static_cast<size_t>(h) * kHs;
            const size_t k_col = static_cast<size_t>(kNH + h / (kNH / kNKV)) * kHs;
            const size_t v_col = k_col + kKV;
            for (int t = 0; t < T; ++t) {
                const int f = from[static_cast<size_t>(b) * T + t];
                std::vector<double> p(static_cast<size_t>(t + 1 - f));
                double maxv = -1e300;
                for (int j = f; j <= t; ++j) {
                    double s = 0;
                    for (int i = 0; i < kHs; ++i) s += double{qkv[at(b, t) + q_col + i]} * qkv[at(b, j) + k_col + i];
                    p[static_cast<size_t>(j - f)] = s * scale;
                    maxv = std::max(maxv, s * scale);
                }
                double sum = 0;
                for (double& x : p) sum += (x = std::exp(x - maxv));
                for (double& x : p) x /= sum;
                const size_t o_at = (static_cast<size_t>(b) * T + t) * kO + q_col;
                // dP_j = dout . v_j; dS_j = P_j (dP_j - sum P dP).
                std::vector<double> dp(p.size());
                double dot = 0;
                for (int j = f; j <= t; ++j) {
                    const size_t jj = static_cast<size_t>(j - f);
                    double d = 0;
                    for (int i = 0; i < kHs; ++i) {
                        r.out[o_at + i] += p[jj] * qkv[at(b, j) + v_col + i];
                        d += double{dout[o_at + i]} * qkv[at(b, j) + v_col + i];
                        r.dqkv[at(b, j) + v_col + i] += p[jj] * dout[o_at + i];
                    }
                    dp[jj] = d;
                    dot += p[jj] * d;
                }
                for (int j = f; j <= t; ++j) {
                    const size_t jj = static_cast<size_t>(j - f);
                    const double ds = p[jj] * (dp[jj] - dot) * scale;
                    for (int i = 0; i < kHs; ++i) {
                        r.dqkv[at(b, t) + q_col + i] += ds * qkv[at(b, j) + k_col + i];
                        r.dqkv[at(b, j) + k_col + i] += ds * qkv[at(b, t) + q_col + i];
                    }
                }
            }
        }
    }
    return r;
}

/// Largest |a - b| / max(1, |b|).
double max_rel(const Vec& a, const std::vector<double>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        const double d = std::fabs(double{a[i]} - b[i]) / std::max(1.0, std::fabs(b[i]));
        worst = std::max(worst, std::isnan(d) ? std::numeric_limits<double>::infinity() : d);
    }
    return worst;
}

struct WindowCase {
    int window;
    bool packed;  ///< also packed segments (row 0: examples at 0, 37 and 150; row 1: one)
};

class SlidingWindow : public ::testing::TestWithParam<WindowCase> {};

TEST_P(SlidingWindow, ForwardAndBackwardEqualTheMaskedFloat64Attention) {
    const WindowCase c = GetParam();
    const auto be = zt::make_cpu_backend(2);
    const int B = 2;
    const int T = 200;  // four row blocks of the CPU kernel, the last one partial
    std::vector<int32_t> segment(static_cast<size_t>(B) * T, 0);
    for (int t = 0; t < T; ++t) segment[static_cast<size_t>(t)] = t < 37 ? 0 : t < 150 ? 37 : 150;
    const std::vector<int32_t> from = window_from(B, T, c.window, c.packed ? &segment : nullptr);
    const Vec qkv = random_vec(static_cast<size_t>(B) * T * kW, 5);
    const Vec dout = random_vec(static_cast<size_t>(B) * T * kO, 6);

    Vec out(static_cast<size_t>(B) * T * kO);
    Vec att(static_cast<size_t>(B) * kNH * T * T, std::numeric_limits<float>::quiet_NaN());
    Vec dqkv(qkv.size(), 0.f);
    Vec scratch(be->attention_scratch_floats(B, T, kNH));
    be->gqa_attention_forward_segmented(out.data(), att.data(), qkv.data(), from.data(), B, T, kNH, kNKV, kHs);
    be->gqa_attention_backward_segmented(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(),
                                         from.data(), B, T, kNH, kNKV, kHs);
    const Result want = reference(qkv, dout, from, B, T);
    const std::string what = "window " + std::to_string(c.window) + (c.packed ? ", packed" : "");
    EXPECT_LE(max_rel(out, want.out), 2e-6) << what << ": output";
    EXPECT_LE(max_rel(dqkv, want.dqkv), 2e-6) << what << ": gradient of q, k and v";
    if (c.window <= 64) {
        // Query T-1 reads keys from T - window on: key block 0 is before its row block's first
        // key, so that score was never computed.
        EXPECT_TRUE(std::isnan(att[static_cast<size_t>(T - 1) * T])) << what << ": att[T-1][0] was written";
    }
}

INSTANTIATE_TEST_SUITE_P(Windows, SlidingWindow,
                         ::testing::Values(WindowCase{1, false}, WindowCase{17, false}, WindowCase{64, false},
                                           WindowCase{70, false}, WindowCase{130, false}, WindowCase{200, false},
                                           WindowCase{17, true}, WindowCase{70, true}),
                         [](const ::testing::TestParamInfo<WindowCase>& i) {
                             return "w" + std::to_string(i.param.window) + (i.param.packed ? "_packed" : "");
                         });

TEST(SlidingWindow, KeyValueCacheAttendsToTheLastWindowPositions) {
    const auto be = zt::make_cpu_backend(2);
    const int T = 90;
    const int window = 24;
    const Vec qkv = random_vec(static_cast<size_t>(T) * kW, 7);
    const std::vector<int32_t> from = window_from(1, T, window, nullptr);
    const Result want = reference(qkv, Vec(static_cast<size_t>(T) * kO, 0.f), from, 1, T);
    // Chunks as generation feeds them: a prompt, then single tokens, then a chunk again.
    for (const std::vector<int>& chunks : {std::vector<int>{30, 1, 1, 1, 57}, std::vector<int>(T, 1)}) {
        Vec k_cache(static_cast<size_t>(T) * kKV), v_cache(k_cache.size()), out(static_cast<size_t>(T) * kO);
        int past = 0;
        for (int n : chunks) {
            be->gqa_attention_cached(out.data() + static_cast<size_t>(past) * kO,
                                     qkv.data() + static_cast<size_t>(past) * kW, k_cache.data(), v_cache.data(),
                                     past, n, kNH, kNKV, kHs, window);
            past += n;
        }
        ASSERT_EQ(past, T);
        EXPECT_LE(max_rel(out, want.out), 2e-6) << chunks.size() << " chunks";
    }
}

}  // namespace
