// Element-wise residual add (out may alias a or b), typed through typed.cuh: the sum in
// fp32, rounded once.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

template <typename A>
__global__ void residual_kernel(typename A::Dst out, typename A::Src a, typename A::Src b, size_t n) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out.store(i, a[i] + b[i]);
}

}  // namespace

void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    with_access({out.dtype, a.dtype, b.dtype}, [&](auto access) {
        using A = decltype(access);
        residual_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(out), typename A::Src(a),
                                                                       typename A::Src(b), n);
        ZT_KERNEL_CHECK("residual");
    });
}

}  // namespace zt::cuda
