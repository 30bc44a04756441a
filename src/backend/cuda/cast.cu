// Casts between fp32 and the 16-bit working types, and the fused loss-scale unscale +
// overflow check. Float -> 16 bit rounds to nearest even (__float2bfloat16_rn,
// __float2half_rn), matching zt::f32_to_bf16 / f32_to_f16 bit for bit except for the
// payload of a NaN (still a NaN).
#include "cuda_check.cuh"
#include "ops.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace zt::cuda {
namespace {

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

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

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<Dst>(to_float(src[i]));
}

template <typename T>
__global__ void unscale_check_kernel(T* x, size_t n, float scale, int* flag) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = to_float(x[i]);
    const float s = v * scale;
    // Any non-finite value flags the step; the write is idempotent, so a race is harmless.
    if (!isfinite(v) || !isfinite(s)) *flag = 1;
    x[i] = from_float<T>(s);
}

template <typename Dst, typename Src>
void launch_cast(void* dst, const void* src, size_t n, cudaStream_t stream) {
    cast_kernel<Dst, Src><<<grid_for(n, kBlock), kBlock, 0, stream>>>(static_cast<Dst*>(dst),
                                                                       static_cast<const Src*>(src), n);
    ZT_KERNEL_CHECK("cast");
}

template <typename T>
void launch_unscale(void* x, size_t n, float scale, int* flag, cudaStream_t stream) {
    unscale_check_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(static_cast<T*>(x), n, scale, flag);
    ZT_KERNEL_CHECK("unscale_check");
}

}  // namespace

void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n, cudaStream_t stream) {
    ZT_REQUIRE(dst_type == DType::kF32 || src_type == DType::kF32, "cast: one side must be fp32 (got ",
               dtype_name(src_type), " -> ", dtype_name(dst_type), ")");
    if (n == 0) return;
    if (dst_type == src_type) {
        ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        return;
    }
    if (dst_type == DType::kBF16) {
        launch_cast<__nv_bfloat16, float>(dst, src, n, stream);
    } else if (dst_type == DType::kF16) {
        launch_cast<__half, float>(dst, src, n, stream);
    } else if (src_type == DType::kBF16) {
        launch_cast<float, __nv_bfloat16>(dst, src, n, stream);
    } else {
        launch_cast<float, __half>(dst, src, n, stream);
    }
}

void unscale_check(void* x, DType type, size_t n, float scale, int* flag, cudaStream_t stream) {
    if (n == 0) return;
    switch (type) {
        case DType::kF32: launch_unscale<float>(x, n, scale, flag, stream); break;
        case DType::kBF16: launch_unscale<__nv_bfloat16>(x, n, scale, flag, stream); break;
        case DType::kF16: launch_unscale<__half>(x, n, scale, flag, stream); break;
    }
}

}  // namespace zt::cuda
