// GELU, tanh approximation (GPT-2's), written as x * sigmoid(2u) like the CPU twin:
// 0.5 * (1 + tanh(u)) == sigmoid(2u) exactly, and the sigmoid form does not cancel for very
// negative u. expf, not __expf: the fast version's error would dominate the comparison.
#include "cuda_check.cuh"
#include "ops.cuh"

namespace zt::cuda {
namespace {

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = gelu_value(inp[i]);
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float du = kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
    const float s = gelu_sigmoid(2.f * u);
    dinp[i] += (s + x * s * (1.f - s) * 2.f * du) * dout[i];
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_forward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(out, inp, n);
    ZT_KERNEL_CHECK("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_backward_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(dinp, inp, dout, n);
    ZT_KERNEL_CHECK("gelu_backward");
}

}  // namespace zt::cuda
