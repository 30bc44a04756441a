// Casts between the working dtypes and the accumulation of an fp32 gradient into stored
// gradients of a working dtype. Float -> 16 bit rounds to nearest even (__float2bfloat16_rn,
// __float2half_rn), matching zt::f32_to_bf16 / f32_to_f16 bit for bit except for the
// payload of a NaN (still a NaN).
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace zt::cuda {
namespace {

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<Dst>(to_float(src[i]));
}

/// dst = round(dst + src): the sum in fp32, rounded once, as zt::accumulate_into does.
template <typename T>
__global__ void accumulate_kernel(T* dst, const float* src, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = from_float<T>(to_float(dst[i]) + src[i]);
}

/// x = float(T(x)): an fp32 buffer holding values of T.
template <typename T>
__global__ void round_kernel(float* x, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = to_float(from_float<T>(x[i]));
}

template <typename T>
void launch_accumulate(void* dst, const float* src, size_t n, cudaStream_t stream) {
    accumulate_kernel<T><<<grid_for(n, kBlock), kBlock, 0, stream>>>(static_cast<T*>(dst), src, n);
    ZT_KERNEL_CHECK("accumulate");
}

template <typename Dst, typename Src>
void launch_cast(void* dst, const void* src, size_t n, cudaStream_t stream) {
    cast_kernel<Dst, Src><<<grid_for(n, kBlock), kBlock, 0, stream>>>(static_cast<Dst*>(dst),
                                                                       static_cast<const Src*>(src), n);
    ZT_KERNEL_CHECK("cast");
}

/// Src -> Dst for a run-time dst_type (Src fixed by the caller's dispatch).
template <typename Src>
void launch_cast_from(void* dst, DType dst_type, const void* src, size_t n, cudaStream_t stream) {
    switch (dst_type) {
        case DType::kF32: launch_cast<float, Src>(dst, src, n, stream); break;
        case DType::kBF16: launch_cast<__nv_bfloat16, Src>(dst, src, n, stream); break;
        case DType::kF16: launch_cast<__half, Src>(dst, src, n, stream); break;
    }
}

}  // namespace

void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    if (dst_type == src_type) {
        if (dst != src) {
            ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * dtype_size(dst_type), cudaMemcpyDeviceToDevice, stream));
        }
        return;
    }
    // 16 bit -> 16 bit widens to the exact fp32 value in registers and rounds once.
    switch (src_type) {
        case DType::kF32: launch_cast_from<float>(dst, dst_type, src, n, stream); break;
        case DType::kBF16: launch_cast_from<__nv_bfloat16>(dst, dst_type, src, n, stream); break;
        case DType::kF16: launch_cast_from<__half>(dst, dst_type, src, n, stream); break;
    }
}

void accumulate(void* dst, DType dst_type, const float* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    switch (dst_type) {
        case DType::kF32: launch_accumulate<float>(dst, src, n, stream); break;
        case DType::kBF16: launch_accumulate<__nv_bfloat16>(dst, src, n, stream); break;
        case DType::kF16: launch_accumulate<__half>(dst, src, n, stream); break;
    }
}

void round_to(float* x, size_t n, DType t, cudaStream_t stream) {
    if (n == 0 || t == DType::kF32) return;
    if (t == DType::kBF16) {
        round_kernel<__nv_bfloat16><<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, n);
    } else {
        round_kernel<__half><<<grid_for(n, kBlock), kBlock, 0, stream>>>(x, n);
    }
    ZT_KERNEL_CHECK("round_to");
}

}  // namespace zt::cuda
