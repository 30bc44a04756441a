// precision: the span conversions of core/dtype (OpenMP, round to nearest even).
#include "cpu_common.hpp"
#include "ops.hpp"
#include "ztrain/core/dtype.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <omp.h>

namespace zt::cpu {

ZT_MAP_CLONES
void widen_bf16(const uint16_t* __restrict src, float* __restrict dst, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

ZT_MAP_CLONES
void narrow_bf16(const float* __restrict src, uint16_t* __restrict dst, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
    if (dst_type == src_type) {
        if (dst != src && n > 0) std::memcpy(dst, src, n * dtype_size(dst_type));
    } else if (src_type == DType::kF32 && dst_type == DType::kBF16) {
        // The parameter and gradient conversions of a bf16 step: the vector kernels that
        // widen/narrow use, not core/dtype's baseline-width loops (the same bits).
        const float* f = static_cast<const float*>(src);
        uint16_t* h = static_cast<uint16_t*>(dst);
        parallel_chunks(n, omp_get_max_threads(), [&](size_t b, size_t e) { narrow_bf16(f + b, h + b, e - b); });
    } else if (src_type == DType::kBF16 && dst_type == DType::kF32) {
        const uint16_t* h = static_cast<const uint16_t*>(src);
        float* f = static_cast<float*>(dst);
        parallel_chunks(n, omp_get_max_threads(), [&](size_t b, size_t e) { widen_bf16(h + b, f + b, e - b); });
    } else if (src_type == DType::kF32) {
        convert_from_f32(static_cast<const float*>(src), dst, n, dst_type);
    } else if (dst_type == DType::kF32) {
        convert_to_f32(src, static_cast<float*>(dst), n, src_type);
    } else {
        // bf16 <-> fp16: the 16-bit value widens to fp32 exactly, so converting element
        // by element equals a pass to fp32 and one back, without an fp32 buffer.
        const long long N = static_cast<long long>(n);
        const uint16_t* s = static_cast<const uint16_t*>(src);
        uint16_t* d = static_cast<uint16_t*>(dst);
        if (src_type == DType::kBF16) {
            #pragma omp parallel for schedule(static)
            for (long long i = 0; i < N; ++i) d[i] = f32_to_f16(bf16_to_f32(s[i]));
        } else {
            #pragma omp parallel for schedule(static)
            for (long long i = 0; i < N; ++i) d[i] = f32_to_bf16(f16_to_f32(s[i]));
        }
    }
}

void accumulate(void* dst, DType dst_type, const float* src, size_t n) { accumulate_into(dst, src, n, dst_type); }

void round_to(float* x, size_t n, DType t) { round_to_dtype(x, n, t); }

}  // namespace zt::cpu
