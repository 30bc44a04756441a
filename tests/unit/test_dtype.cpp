// fp32 <-> bf16 / fp16 conversions against an independent reference: every finite value of
// the 16-bit format is decoded with ldexp, and the correctly rounded result of an fp32 input
// is found by search in double precision (nearest; ties to the even encoding; past the
// largest finite value plus half an ulp: infinity).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ztrain/core/dtype.hpp"
#include "ztrain/core/random.hpp"

namespace zt {
namespace {

/// Independent decoding (ldexp, no bit tricks shared with the code under test).
double decode_f16(uint16_t h) {
    const int e = (h >> 10) & 0x1f;
    const int m = h & 0x3ff;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * std::ldexp(m, -24);
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
    return s * std::ldexp(1024 + m, e - 25);
}
double decode_bf16(uint16_t h) {
    const int e = (h >> 7) & 0xff;
    const int m = h & 0x7f;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 0) return s * std::ldexp(m, -133);
    if (e == 255) return m ? std::numeric_limits<double>::quiet_NaN() : s * HUGE_VAL;
    return s * std::ldexp(128 + m, e - 134);
}

struct Format {
    std::vector<std::pair<double, uint16_t>> positives;  // finite, sorted by value
    double max_finite;
    double max_ulp;
    uint16_t inf;
};

Format make_format(double (*decode)(uint16_t), uint16_t inf) {
    Format f;
    for (uint32_t h = 0; h < 0x8000; ++h) {
        const double v = decode(static_cast<uint16_t>(h));
        if (std::isfinite(v)) f.positives.emplace_back(v, static_cast<uint16_t>(h));
    }
    std::sort(f.positives.begin(), f.positives.end());
    f.max_finite = f.positives.back().first;
    f.max_ulp = f.max_finite - f.positives[f.positives.size() - 2].first;
    f.inf = inf;
    return f;
}

/// Correctly rounded encoding of x (finite) by search.
uint16_t reference_round(const Format& f, float x) {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= f.max_finite + f.max_ulp / 2) {
        // Exactly halfway rounds to even: max_finite has an odd significand, so up to inf.
        return static_cast<uint16_t>(sign | f.inf);
    }
    auto it = std::lower_bound(f.positives.begin(), f.positives.end(), std::make_pair(a, uint16_t{0}));
    if (it == f.positives.end()) return static_cast<uint16_t>(sign | f.positives.back().second);
    if (it->first == a) return static_cast<uint16_t>(sign | it->second);
    const auto lo = *(it - 1);
    const auto hi = *it;
    const double dlo = a - lo.first;
    const double dhi = hi.first - a;
    uint16_t pick;
    if (dlo < dhi) {
        pick = lo.second;
    } else if (dhi < dlo) {
        pick = hi.second;
    } else {
        pick = (lo.second & 1) == 0 ? lo.second : hi.second;
    }
    return static_cast<uint16_t>(sign | pick);
}

std::vector<float> edge_and_random_inputs(const Format& f) {
    std::vector<float> xs = {0.f, -0.f, 1.f, -1.f, 0.1f, 1e-3f, 65504.f, 65519.99f, 65520.f, 65536.f, 1e10f,
                             std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                             std::numeric_limits<float>::max(), 5.960464477539063e-08f /* 2^-24 */,
                             2.9802322387695312e-08f /* 2^-25 */, 6.103515625e-05f /* 2^-14 */};
    // Exact midpoints between neighbours (ties) and values just either side of them.
    for (size_t i = 0; i + 1 < f.positives.size(); i += 37) {
        const double mid = (f.positives[i].first + f.positives[i + 1].first) / 2;
        const float m = static_cast<float>(mid);
        if (static_cast<double>(m) == mid) {
            xs.push_back(m);
            xs.push_back(-m);
            xs.push_back(std::nextafter(m, 0.f));
            xs.push_back(std::nextafter(m, HUGE_VALF));
        }
    }
    for (uint64_t i = 0; i < 200000; ++i) {
        const uint32_t bits = static_cast<uint32_t>(random_bits(17, 1, i));
        const float x = bits_float(bits);
        if (std::isfinite(x)) xs.push_back(x);
    }
    return xs;
}

TEST(DType, F16MatchesCorrectRoundingOnEdgesTiesSubnormalsAndRandomBits) {
    const Format f = make_format(decode_f16, 0x7c00);
    size_t bad = 0;
    for (float x : edge_and_random_inputs(f)) {
        const uint16_t got = f32_to_f16(x);
        const uint16_t want = reference_round(f, x);
        if (got != want && bad++ < 5) {
            ADD_FAILURE() << "f32_to_f16(" << x << " = 0x" << std::hex << float_bits(x) << ") = 0x" << got
                          << ", correctly rounded 0x" << want;
        }
    }
    EXPECT_EQ(bad, 0u);
}

TEST(DType, BF16MatchesCorrectRoundingOnEdgesTiesSubnormalsAndRandomBits) {
    const Format f = make_format(decode_bf16, 0x7f80);
    size_t bad = 0;
    for (float x : edge_and_random_inputs(f)) {
        const uint16_t got = f32_to_bf16(x);
        const uint16_t want = reference_round(f, x);
        if (got != want && bad++ < 5) {
            ADD_FAILURE() << "f32_to_bf16(" << x << " = 0x" << std::hex << float_bits(x) << ") = 0x" << got
                          << ", correctly rounded 0x" << want;
        }
    }
    EXPECT_EQ(bad, 0u);
}

TEST(DType, EveryF16AndBF16ValueDecodesExactlyAndRoundTrips) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const uint16_t v = static_cast<uint16_t>(h);
        const double want16 = decode_f16(v);
        const float got16 = f16_to_f32(v);
        if (std::isnan(want16)) {
            ASSERT_TRUE(std::isnan(got16)) << "f16 0x" << std::hex << h;
            // NaN payload survives the round trip (quiet bit forced on).
            ASSERT_EQ(f32_to_f16(got16), static_cast<uint16_t>(v | 0x0200)) << "f16 NaN 0x" << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(got16), want16) << "f16 0x" << std::hex << h;
            ASSERT_EQ(f32_to_f16(got16), v) << "f16 round trip 0x" << std::hex << h;
        }
        const double want_b = decode_bf16(v);
        const float got_b = bf16_to_f32(v);
        if (std::isnan(want_b)) {
            ASSERT_TRUE(std::isnan(got_b)) << "bf16 0x" << std::hex << h;
            ASSERT_EQ(f32_to_bf16(got_b), static_cast<uint16_t>(v | 0x0040)) << "bf16 NaN 0x" << std::hex << h;
        } else {
            ASSERT_EQ(static_cast<double>(got_b), want_b) << "bf16 0x" << std::hex << h;
            ASSERT_EQ(f32_to_bf16(got_b), v) << "bf16 round trip 0x" << std::hex << h;
        }
    }
}

TEST(DType, NaNPayloadAndSignSurviveNarrowing) {
    const float nan_payload = bits_float(0xffc12345u);  // negative quiet NaN with payload
    const uint16_t b = f32_to_bf16(nan_payload);
    EXPECT_EQ(b, 0xffc1u);
    const uint16_t h = f32_to_f16(nan_payload);
    EXPECT_EQ(h & 0xfe00u, 0xfe00u) << "sign + quiet NaN";
    EXPECT_EQ(h & 0x1ffu, (0x412345u >> 13) & 0x1ffu) << "top payload bits kept";
    // A signalling NaN whose payload sits in the dropped bits must not become infinity.
    const float snan_low = bits_float(0x7f800001u);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(snan_low))));
    EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(snan_low))));
}

TEST(DType, SpanHelpersAgreeWithScalarConversions) {
    std::vector<float> x = {1.f, 1.00048828125f /* 1 + 2^-11: a tie in fp16 */, 3.14159f, 70000.f, -1e-8f};
    for (DType t : {DType::kBF16, DType::kF16}) {
        std::vector<uint16_t> stored(x.size());
        convert_from_f32(x.data(), stored.data(), x.size(), t);
        std::vector<float> back(x.size());
        convert_to_f32(stored.data(), back.data(), x.size(), t);
        std::vector<float> rounded = x;
        round_to_dtype(rounded.data(), rounded.size(), t);
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(float_bits(back[i]), float_bits(rounded[i])) << dtype_name(t) << " element " << i;
        }
        EXPECT_EQ(has_non_finite(stored.data(), stored.size(), t), t == DType::kF16) << "70000 overflows fp16 only";
    }
    EXPECT_EQ(f16_to_f32(f32_to_f16(1.00048828125f)), 1.f) << "tie rounds to the even significand";
    std::vector<float> f32 = {1.f, std::numeric_limits<float>::infinity()};
    EXPECT_TRUE(has_non_finite(f32.data(), 2, DType::kF32));
    EXPECT_FALSE(has_non_finite(f32.data(), 1, DType::kF32));
}

}  // namespace
}  // namespace zt
