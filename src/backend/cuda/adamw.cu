// AdamW over one span (a rank's shard of fp32 master weights, m and v), the CPU twin's
// arithmetic term for term, from the same AdamWConstants: g = grad * grad_scale, decoupled
// weight decay.
#include "cuda_check.cuh"
#include "ops.cuh"

namespace zt::cuda {
namespace {

__global__ void adamw_kernel(float* param, float* m, float* v, const float* grad, size_t n, AdamWConstants k) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = grad[i] * k.grad_scale;
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi * k.inv_bc2) + k.eps;
    const float p = param[i];
    param[i] = p - k.lr * ((mi * k.inv_bc1) / denom + k.weight_decay * p);
}

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, const AdamWConstants& k,
                  cudaStream_t stream) {
    if (n == 0) return;
    adamw_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(param, m, v, grad, n, k);
    ZT_KERNEL_CHECK("adamw");
}

}  // namespace zt::cuda
