// LayerNorm forward and backward, eps 1e-5, one warp per row (as llm.c). The variance is
// two-pass like the CPU twin's, so rows with |mean| >> std lose nothing to cancellation.
// Parameter gradients go through the deterministic two-stage column reduction. Typed
// activations through typed.cuh (statistics and parameter gradients stay fp32).
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpsPerBlock = kBlock / kWarpSize;

template <typename A>
__global__ void layernorm_forward_kernel(typename A::Dst out, float* mean, float* rstd, typename A::Src inp,
                                         const float* weight, const float* bias, int N, int C) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const typename A::Src x = inp.offset(static_cast<size_t>(row) * C);
    float sum = 0.f;
    for (int i = lane; i < C; i += kWarpSize) sum += x[i];
    const float m = warp_sum(sum) / static_cast<float>(C);
    float var = 0.f;
    for (int i = lane; i < C; i += kWarpSize) {
        const float d = x[i] - m;
        var += d * d;
    }
    const float s = 1.f / sqrtf(warp_sum(var) / static_cast<float>(C) + kEps);
    const size_t o = static_cast<size_t>(row) * C;
    for (int i = lane; i < C; i += kWarpSize) out.store(o + i, (x[i] - m) * s * weight[i] + bias[i]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = dout * w.
template <typename A>
__global__ void layernorm_dinp_kernel(typename A::Dst dinp, typename A::Src dout, typename A::Src inp,
                                      const float* weight, const float* mean, const float* rstd, int N, int C) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const size_t off = static_cast<size_t>(row) * C;
    const float m = mean[row];
    const float s = rstd[row];
    float sum_dnorm = 0.f;
    float sum_dnorm_norm = 0.f;
    for (int i = lane; i < C; i += kWarpSize) {
        const float norm = (inp[off + i] - m) * s;
        const float dnorm = dout[off + i] * weight[i];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * norm;
    }
    const float mean_dnorm = warp_sum(sum_dnorm) / static_cast<float>(C);
    const float mean_dnorm_norm = warp_sum(sum_dnorm_norm) / static_cast<float>(C);
    for (int i = lane; i < C; i += kWarpSize) {
        const float norm = (inp[off + i] - m) * s;
        const float dnorm = dout[off + i] * weight[i];
        dinp.add(off + i, (dnorm - mean_dnorm - norm * mean_dnorm_norm) * s);
    }
}

/// Per chunk of rows: pw[chunk, c] = sum dout * norm, pb[chunk, c] = sum dout.
template <typename A>
__global__ void layernorm_param_partial_kernel(float* pw, float* pb, typename A::Src dout, typename A::Src inp,
                                               const float* mean, const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * kRowsPerChunk;
    const int r1 = min(N, r0 + kRowsPerChunk);
    float acc_w = 0.f;
    float acc_b = 0.f;
    for (int r = r0; r < r1; ++r) {
        const size_t i = static_cast<size_t>(r) * C + c;
        acc_w += dout[i] * ((inp[i] - mean[r]) * rstd[r]);
        acc_b += dout[i];
    }
    const size_t o = static_cast<size_t>(blockIdx.y) * C + c;
    pw[o] = acc_w;
    pb[o] = acc_b;
}

}  // namespace

void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
    if (N <= 0) return;
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        layernorm_forward_kernel<A><<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
            typename A::Dst(out), mean, rstd, typename A::Src(inp), weight, bias, N, C);
        ZT_KERNEL_CHECK("layernorm_forward");
    });
}

void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, float* scratch,
                        cudaStream_t stream) {
    if (N <= 0) return;
    with_access({dinp.dtype, dout.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        using Src = typename A::Src;
        if (dinp.data != nullptr) {
            layernorm_dinp_kernel<A><<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
                typename A::Dst(dinp), Src(dout), Src(inp), weight, mean, rstd, N, C);
            ZT_KERNEL_CHECK("layernorm_dinp");
        }
        if (dweight == nullptr && dbias == nullptr) return;
        const size_t chunks = column_chunks(N);
        float* pw = scratch;
        float* pb = scratch + chunks * static_cast<size_t>(C);
        const dim3 grid(grid_for(static_cast<size_t>(C), kBlock), static_cast<unsigned>(chunks));
        layernorm_param_partial_kernel<A><<<grid, kBlock, 0, stream>>>(pw, pb, Src(dout), Src(inp), mean, rstd, N, C);
        ZT_KERNEL_CHECK("layernorm_param_partial");
        if (dweight != nullptr) column_finalize(dweight, pw, chunks, C, stream);
        if (dbias != nullptr) column_finalize(dbias, pb, chunks, C, stream);
    });
}

}  // namespace zt::cuda
