// GELU, tanh approximation (GPT-2's), written as x * sigmoid(2u) like the CPU twin:
// 0.5 * (1 + tanh(u)) == sigmoid(2u) exactly, and the sigmoid form does not cancel for very
// negative u. expf, not __expf: the fast version's error would dominate the comparison.
// Typed buffers through typed.cuh's accessors: computed in fp32, rounded once on store.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

template <typename A>
__global__ void gelu_forward_kernel(typename A::Dst out, typename A::Src inp, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out.store(i, gelu_value(inp[i]));
}

template <typename A>
__global__ void gelu_backward_kernel(typename A::Dst dinp, typename A::Src inp, typename A::Src dout, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float du = kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
    const float s = gelu_sigmoid(2.f * u);
    dinp.add(i, (s + x * s * (1.f - s) * 2.f * du) * dout[i]);
}

}  // namespace

void gelu_forward(ActPtr out, ConstActPtr inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        gelu_forward_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(out),
                                                                           typename A::Src(inp), n);
        ZT_KERNEL_CHECK("gelu_forward");
    });
}

void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    with_access({dinp.dtype, inp.dtype, dout.dtype}, [&](auto access) {
        using A = decltype(access);
        gelu_backward_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
            typename A::Dst(dinp), typename A::Src(inp), typename A::Src(dout), n);
        ZT_KERNEL_CHECK("gelu_backward");
    });
}

}  // namespace zt::cuda
