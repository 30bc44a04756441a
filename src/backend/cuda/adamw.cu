// AdamW over one span (a rank's shard of fp32 master weights, m and v), the CPU twin's
// arithmetic term for term, from the same AdamWConstants: g = grad * grad_scale, decoupled
// weight decay; a span's 16-bit gradient read and its 16-bit working copy written in the
// same kernel.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

/// Gradients read through `Grad` (a float pointer, or a stored dtype); where `work` is set,
/// the new master is also rounded into it.
template <typename Grad>
__global__ void adamw_kernel(float* param, float* m, float* v, Grad grad, size_t n, AdamWConstants k, void* work,
                             DType work_type) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = grad(i) * k.grad_scale;
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi * k.inv_bc2) + k.eps;
    const float p = param[i];
    const float updated = p - k.lr * ((mi * k.inv_bc1) / denom + k.weight_decay * p);
    param[i] = updated;
    if (work != nullptr) store_rounded(work, work_type, i, updated);
}

struct F32Grad {
    const float* g;
    __device__ float operator()(size_t i) const { return g[i]; }
};

struct TypedGrad {
    const void* g;
    DType type;
    __device__ float operator()(size_t i) const { return load_as_float(g, type, i); }
};

}  // namespace

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, const AdamWConstants& k,
                  cudaStream_t stream) {
    if (n == 0) return;
    adamw_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(param, m, v, F32Grad{grad}, n, k, nullptr,
                                                             DType::kF32);
    ZT_KERNEL_CHECK("adamw");
}

void adamw_update_span(const AdamWSpan& sp, const AdamWConstants& k, cudaStream_t stream) {
    if (sp.n == 0) return;
    if (sp.grad.f32()) {
        adamw_kernel<<<grid_for(sp.n, kBlock), kBlock, 0, stream>>>(sp.param, sp.m, sp.v, F32Grad{sp.grad.as_f32()},
                                                                    sp.n, k, sp.work.data, sp.work.dtype);
    } else {
        adamw_kernel<<<grid_for(sp.n, kBlock), kBlock, 0, stream>>>(sp.param, sp.m, sp.v,
                                                                    TypedGrad{sp.grad.data, sp.grad.dtype}, sp.n, k,
                                                                    sp.work.data, sp.work.dtype);
    }
    ZT_KERNEL_CHECK("adamw");
}

}  // namespace zt::cuda
