// Counter-based random numbers: every value is a pure function of (seed, stream, index).
//
// This is what makes initialization independent of world size and sharding strategy
// (a parameter's value depends only on its global index) and makes the data order a
// pure function of (seed, step). There is no hidden generator state to save or split.
#pragma once

#include <cmath>
#include <cstdint>

// Device code (the CUDA backend's dropout masks) draws the same numbers as host code.
#if defined(__CUDACC__)
#define ZT_HOST_DEVICE __host__ __device__
#else
#define ZT_HOST_DEVICE
#endif

namespace zt {

/// SplitMix64 finalizer: a bijective 64-bit mixer with good avalanche behaviour.
ZT_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/// 64 random bits for (seed, stream, index).
inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
    return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

/// Uniform double in [0, 1) with 53 random bits.
inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return static_cast<double>(random_bits(seed, stream, index) >> 11) * 0x1.0p-53;
}

/// Standard normal via Box-Muller on two counter draws (2*index, 2*index+1).
inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = random_uniform(seed, stream, 2 * index);
    double u2 = random_uniform(seed, stream, 2 * index + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

/// Named streams so unrelated consumers never draw the same numbers.
enum class RandomStream : uint64_t { kInit = 1, kData = 2, kSample = 3, kDataVal = 4, kLoraDropout = 5 };

}  // namespace zt
