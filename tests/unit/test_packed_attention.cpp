// Block-diagonal causal attention (Backend::gqa_attention_forward_segmented, CPU): examples
// packed into one row give, forward and backward, what each gives alone in its own row;
// a padding position that attends only to itself outputs its own value; all-zero
// attend_from is plain causal attention bit for bit.
//
// Rows cross the CPU kernel's 64-row block boundary (T = 70), and the heads are grouped
// (NH = 4 query heads over NKV = 2 key/value heads), so both the blocked products and the
// grouped-query gradient accumulation are covered.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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
    be.gqa_attention_backward(r.dqkv.data(), scratch.data(), dout.data(), qkv.data(), r.att.data(), B, T, kNH, kNKV,
                              kHs);
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

}  // namespace
