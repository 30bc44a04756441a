// Span conversions between fp32 and the 16-bit working dtypes (OpenMP).
#include "ztrain/core/dtype.hpp"

#include <cmath>

#include "ztrain/core/error.hpp"

namespace zt {

size_t dtype_size(DType t) { return t == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType t) {
    switch (t) {
        case DType::kF32: return "fp32";
        case DType::kBF16: return "bf16";
        case DType::kF16: return "fp16";
    }
    return "?";
}

DType parse_dtype(const std::string& s, const std::string& key) {
    if (s == "fp32") return DType::kF32;
    if (s == "bf16") return DType::kBF16;
    if (s == "fp16") return DType::kF16;
    throw InputError(str(key, " = '", s, "': expected fp32, bf16 or fp16"));
}

void round_to_dtype(float* x, size_t n, DType t) {
    const long long N = static_cast<long long>(n);
    if (t == DType::kBF16) {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    } else if (t == DType::kF16) {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) x[i] = f16_to_f32(f32_to_f16(x[i]));
    }
}

void convert_from_f32(const float* src, void* dst, size_t n, DType t) {
    const long long N = static_cast<long long>(n);
    if (t == DType::kF32) {
        std::memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (t == DType::kBF16) {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) d[i] = f32_to_bf16(src[i]);
    } else {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) d[i] = f32_to_f16(src[i]);
    }
}

void convert_to_f32(const void* src, float* dst, size_t n, DType t) {
    const long long N = static_cast<long long>(n);
    if (t == DType::kF32) {
        std::memcpy(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t* s = static_cast<const uint16_t*>(src);
    if (t == DType::kBF16) {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) dst[i] = bf16_to_f32(s[i]);
    } else {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) dst[i] = f16_to_f32(s[i]);
    }
}

void accumulate_into(void* dst, const float* src, size_t n, DType t) {
    const long long N = static_cast<long long>(n);
    if (t == DType::kF32) {
        float* d = static_cast<float*>(dst);
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) d[i] += src[i];
        return;
    }
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (t == DType::kBF16) {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) d[i] = f32_to_bf16(bf16_to_f32(d[i]) + src[i]);
    } else {
        #pragma omp parallel for schedule(static)
        for (long long i = 0; i < N; ++i) d[i] = f32_to_f16(f16_to_f32(d[i]) + src[i]);
    }
}

bool has_non_finite(const void* x, size_t n, DType t) {
    const long long N = static_cast<long long>(n);
    int bad = 0;
    if (t == DType::kF32) {
        const uint32_t* u = static_cast<const uint32_t*>(x);
        #pragma omp parallel for schedule(static) reduction(| : bad)
        for (long long i = 0; i < N; ++i) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    } else {
        // bf16: exponent bits 0x7f80; fp16: 0x7c00. All ones = inf or NaN.
        const uint16_t mask = t == DType::kBF16 ? 0x7f80u : 0x7c00u;
        const uint16_t* u = static_cast<const uint16_t*>(x);
        #pragma omp parallel for schedule(static) reduction(| : bad)
        for (long long i = 0; i < N; ++i) bad |= (u[i] & mask) == mask;
    }
    return bad != 0;
}

}  // namespace zt
