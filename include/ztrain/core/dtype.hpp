// Element types of working copies and their conversions.
//
// ztrain keeps fp32 master weights and optimizer state; the working copy of parameters,
// activations and gradients may be bf16 or fp16. On the CPU low precision is storage with
// correct rounding (round to nearest, ties to even; subnormals, infinities and NaN payloads
// handled) and computation in fp32, so every branch of the mixed-precision logic runs
// without a GPU. The scalar conversions are inline for kernels; the span forms are OpenMP.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace zt {

enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);          ///< "fp32", "bf16", "fp16"
/// Parses "fp32" | "bf16" | "fp16"; throws InputError naming `key` otherwise.
DType parse_dtype(const std::string& s, const std::string& key);

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}
inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/// fp32 -> bf16, round to nearest even. NaN stays NaN (quiet bit set, sign and top payload
/// bits kept); overflow rounds to infinity as IEEE rounding says.
inline uint16_t f32_to_bf16(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
    const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

/// fp32 -> IEEE binary16, round to nearest even, with fp16 subnormals, overflow to infinity
/// (from 65520 up) and NaN payloads kept (quiet bit set).
inline uint16_t f32_to_f16(float f) {
    uint32_t x = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {
        if (x > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
    if (x < 0x38800000u) {                                                 // below 2^-14: subnormal
        if (x < 0x33000000u) return sign;                                  // <= 2^-25 rounds to 0
        const uint32_t e = x >> 23;
        const uint32_t m = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;  // 14..24
        uint32_t q = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t r = x - 0x38000000u;  // rebias the exponent from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
}

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return bits_float(sign);
        e = 113;  // normalise the subnormal
        while ((m & 0x400u) == 0) {
            m <<= 1;
            --e;
        }
        m &= 0x3ffu;
        return bits_float(sign | (e << 23) | (m << 13));
    }
    if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/// x[i] = value of x[i] after a round trip through `t` (no-op for fp32).
void round_to_dtype(float* x, size_t n, DType t);
/// Converts n fp32 values to `t` storage (dst holds n * dtype_size(t) bytes).
void convert_from_f32(const float* src, void* dst, size_t n, DType t);
/// Converts n values of `t` storage to fp32.
void convert_to_f32(const void* src, float* dst, size_t n, DType t);
/// dst (t storage) = round(dst + src) for n elements: accumulation in the working dtype.
void accumulate_into(void* dst, const float* src, size_t n, DType t);
/// True when any of the n values of `t` storage is inf or NaN.
bool has_non_finite(const void* x, size_t n, DType t);

}  // namespace zt
