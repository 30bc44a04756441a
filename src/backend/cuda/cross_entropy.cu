// Fused softmax + cross-entropy (+ its gradient in place of the logits), one block a row,
// with the CPU twin's contract: only the first V of Vp columns take part, the padded
// columns of the gradient are 0, and a row whose target is < 0 has loss 0 and, when a
// gradient is asked for, an all-zero logits row. A target >= V is reported as zt::Error;
// the kernel flags it (and leaves that row alone) and the launcher checks the flag. Typed
// logits through typed.cuh: read as fp32, the gradient rounded once; losses stay fp32.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

#include <cmath>

namespace zt::cuda {
namespace {

constexpr int kCeBlock = 512;
constexpr int kCeWarps = kCeBlock / kWarpSize;

/// Block-wide reduction through the warps' partials (a fixed order); result in every thread.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;
    v = kMax ? warp_max(v) : warp_sum(v);
    __syncthreads();  // shared may still be read by the previous reduction
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < kCeWarps ? shared[lane] : (kMax ? -INFINITY : 0.f);
    return kMax ? warp_max(v) : warp_sum(v);
}

template <typename A>
__global__ void cross_entropy_kernel(float* losses, typename A::Dst logits, const int32_t* targets, int V, int Vp,
                                     float dloss, int* flag) {
    __shared__ float shared[kCeWarps];
    const int r = blockIdx.x;
    const size_t row = static_cast<size_t>(r) * Vp;
    const int target = targets[r];
    if (target >= V) {
        if (threadIdx.x == 0) atomicMin(flag, r);  // the first bad row, as the CPU reports
        return;
    }
    if (target < 0) {
        if (threadIdx.x == 0) losses[r] = 0.f;
        if (dloss != 0.f) {
            for (int i = threadIdx.x; i < Vp; i += blockDim.x) logits.store(row + i, 0.f);
        }
        return;
    }
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, logits.load(row + i));
    maxv = block_reduce<true>(maxv, shared);
    float sum = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(logits.load(row + i) - maxv);
    sum = block_reduce<false>(sum, shared);
    const float target_logit = logits.load(row + target);
    if (threadIdx.x == 0) losses[r] = (maxv - target_logit) + logf(sum);
    if (dloss == 0.f) return;
    __syncthreads();  // every thread has read row[target] before it is overwritten
    const float scale = dloss / sum;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = 0.f;
        if (i < V) g = expf(logits.load(row + i) - maxv) * scale - (i == target ? dloss : 0.f);
        logits.store(row + i, g);
    }
}

}  // namespace

void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                           float dloss, int* flag, cudaStream_t stream) {
    ZT_REQUIRE(V > 0 && V <= Vp, "cross-entropy: need 0 < V <= Vp (V=", V, ", Vp=", Vp, ")");
    if (N <= 0) return;
    // "No bad row" is 0x7f7f7f7f (a memset can only write bytes); atomicMin keeps the first.
    constexpr int kNoBadRow = 0x7f7f7f7f;
    ZT_CUDA_CHECK(cudaMemsetAsync(flag, 0x7f, sizeof(int), stream));
    with_access({logits.dtype}, [&](auto access) {
        using A = decltype(access);
        cross_entropy_kernel<A><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
            losses, typename A::Dst(logits), targets, V, Vp, dloss, flag);
        ZT_KERNEL_CHECK("cross_entropy");
    });
    int bad = kNoBadRow;
    ZT_CUDA_CHECK(cudaMemcpyAsync(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (bad != kNoBadRow) {
        int32_t target = 0;
        ZT_CUDA_CHECK(cudaMemcpy(&target, targets + bad, sizeof(int32_t), cudaMemcpyDeviceToHost));
        ZT_REQUIRE(bad == kNoBadRow, "cross-entropy: target ", target, " of row ", bad,
                   " is not below the vocabulary size ", V);
    }
}

}  // namespace zt::cuda
