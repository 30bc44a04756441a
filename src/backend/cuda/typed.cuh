// Typed activations in the CUDA kernels: element accessors that load any stored dtype as
// fp32 and store an fp32 result rounded once (to nearest even, as zt::f32_to_bf16 /
// f32_to_f16 and cast.cu round), so one kernel source serves every dtype.
//
// A kernel is a template on an Access (F32Access or TypedAccess) and reads its activations
// through Access::Src and writes them through Access::Dst. The launcher picks F32Access
// when every activation buffer of the call is fp32: those accessors are plain float loads
// and stores, so that instantiation is the fp32 kernel as it was, bit for bit. Otherwise
// TypedAccess reads each buffer in its own dtype (a run-time dtype per buffer, the same for
// every thread of the launch, so the branch costs no divergence), which also covers calls
// whose buffers mix dtypes, as the CPU twin's widen/narrow does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt::cuda {

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

/// x rounded to T, to nearest even.
template <typename T>
__device__ inline T from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
    return x;
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <>
__device__ inline __half from_float<__half>(float x) {
    return __float2half_rn(x);
}

/// Element i of a buffer stored in t, as fp32.
__device__ inline float load_as_float(const void* p, DType t, size_t i) {
    switch (t) {
        case DType::kBF16: return to_float(static_cast<const __nv_bfloat16*>(p)[i]);
        case DType::kF16: return to_float(static_cast<const __half*>(p)[i]);
        default: return static_cast<const float*>(p)[i];
    }
}
/// Element i of a buffer stored in t = v, rounded once.
__device__ inline void store_rounded(void* p, DType t, size_t i, float v) {
    switch (t) {
        case DType::kBF16: static_cast<__nv_bfloat16*>(p)[i] = from_float<__nv_bfloat16>(v); break;
        case DType::kF16: static_cast<__half*>(p)[i] = from_float<__half>(v); break;
        default: static_cast<float*>(p)[i] = v; break;
    }
}

/// Read-only fp32 activations.
struct F32Src {
    const float* p;
    explicit F32Src(ConstActPtr a) : p(a.as_f32()) {}
    __device__ float operator[](size_t i) const { return p[i]; }
    /// The buffer from element n on.
    __host__ __device__ F32Src offset(size_t n) const {
        F32Src r = *this;
        r.p += n;
        return r;
    }
};
/// Written fp32 activations.
struct F32Dst {
    float* p;
    explicit F32Dst(ActPtr a) : p(a.as_f32()) {}
    __device__ float load(size_t i) const { return p[i]; }
    __device__ void store(size_t i, float v) const { p[i] = v; }
    /// p[i] += v (the accumulate-into-gradient convention).
    __device__ void add(size_t i, float v) const { p[i] += v; }
};

/// Read-only activations of a run-time dtype.
struct TypedSrc {
    const void* p;
    DType t;
    explicit TypedSrc(ConstActPtr a) : p(a.data), t(a.dtype) {}
    __device__ float operator[](size_t i) const { return load_as_float(p, t, i); }
    __host__ __device__ TypedSrc offset(size_t n) const {
        TypedSrc r = *this;
        r.p = static_cast<const char*>(p) + n * (t == DType::kF32 ? sizeof(float) : sizeof(uint16_t));
        return r;
    }
};
/// Written activations of a run-time dtype: a store rounds once; add reads the stored value,
/// adds in fp32 and rounds the sum once.
struct TypedDst {
    void* p;
    DType t;
    explicit TypedDst(ActPtr a) : p(a.data), t(a.dtype) {}
    __device__ float load(size_t i) const { return load_as_float(p, t, i); }
    __device__ void store(size_t i, float v) const { store_rounded(p, t, i, v); }
    __device__ void add(size_t i, float v) const { store_rounded(p, t, i, load_as_float(p, t, i) + v); }
};

struct F32Access {
    using Src = F32Src;
    using Dst = F32Dst;
};
struct TypedAccess {
    using Src = TypedSrc;
    using Dst = TypedDst;
};

inline bool all_f32(std::initializer_list<DType> dtypes) {
    for (DType t : dtypes) {
        if (t != DType::kF32) return false;
    }
    return true;
}

/// fn(F32Access{}) when every dtype is fp32 (the fp32 kernels as they were), else
/// fn(TypedAccess{}).
template <typename Fn>
void with_access(std::initializer_list<DType> dtypes, Fn&& fn) {
    if (all_f32(dtypes)) {
        fn(F32Access{});
    } else {
        fn(TypedAccess{});
    }
}

}  // namespace zt::cuda
