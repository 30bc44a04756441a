// SwiGLU (Llama's MLP activation) on the fused [gate | up] rows of one (2F, C) product, one
// thread per output element. expf, not __expf, as in gelu.cu: the fast version's error would
// dominate the comparison with the CPU twin. Typed buffers through typed.cuh.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

__device__ inline float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

/// out (N, F) = silu(gate) * up, inp (N, 2F) = [gate | up].
template <typename A>
__global__ void swiglu_forward_kernel(typename A::Dst out, typename A::Src inp, int N, int F) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= static_cast<size_t>(N) * F) return;
    const size_t g = (idx / F) * 2 * F + idx % F;
    const float x = inp[g];
    out.store(idx, x * sigmoid(x) * inp[g + F]);
}

/// dgate += dout * up * silu'(gate), dup += dout * silu(gate); silu'(x) = s * (1 + x * (1 - s)).
template <typename A>
__global__ void swiglu_backward_kernel(typename A::Dst dinp, typename A::Src inp, typename A::Src dout, int N,
                                       int F) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= static_cast<size_t>(N) * F) return;
    const size_t g = (idx / F) * 2 * F + idx % F;
    const float x = inp[g];
    const float s = sigmoid(x);
    dinp.add(g, dout[idx] * inp[g + F] * (s * (1.f + x * (1.f - s))));
    dinp.add(g + F, dout[idx] * (x * s));
}

}  // namespace

void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * F;
    if (n == 0) return;
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        swiglu_forward_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(out),
                                                                             typename A::Src(inp), N, F);
        ZT_KERNEL_CHECK("swiglu_forward");
    });
}

void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * F;
    if (n == 0) return;
    with_access({dinp.dtype, inp.dtype, dout.dtype}, [&](auto access) {
        using A = decltype(access);
        swiglu_backward_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
            typename A::Dst(dinp), typename A::Src(inp), typename A::Src(dout), N, F);
        ZT_KERNEL_CHECK("swiglu_backward");
    });
}

}  // namespace zt::cuda
