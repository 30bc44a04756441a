// Fused softmax + cross-entropy (+ its gradient in place of the logits), one block a row,
// with the CPU twin's contract: only the first V of Vp columns take part, the padded
// columns of the gradient are 0, and a row whose target is < 0 has loss 0 and, when a
// gradient is asked for, an all-zero logits row. A target >= V is reported as zt::Error;
// the kernel flags it (and leaves that row alone) and the launcher checks the flag. Typed
// logits through typed.cuh: read as fp32, the gradient rounded once; losses stay fp32.
//
// The vocabulary-parallel form (tensor parallelism) splits the same computation into three
// kernels around the group's reductions, one block a row each: the row maximum over this
// slice's real columns, then the slice's sum of exp(logit - max) and its share of the
// target logit, then the losses and the gradient from the group's totals.
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

/// row_max[r] = the maximum of row r's first V columns (-inf where V = 0).
template <typename A>
__global__ void ce_row_max_kernel(float* row_max, typename A::Src logits, int V, int Vp) {
    __shared__ float shared[kCeWarps];
    const int r = blockIdx.x;
    const size_t row = static_cast<size_t>(r) * Vp;
    float maxv = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxv = fmaxf(maxv, logits[row + i]);
    maxv = block_reduce<true>(maxv, shared);
    if (threadIdx.x == 0) row_max[r] = maxv;
}

/// sums[r] = sum over row r's first V columns of exp(logit - row_max[r]); sums[N + r] = the
/// target's logit when this slice holds it (column target - vocab_begin in [0, V)), else 0.
template <typename A>
__global__ void ce_row_sums_kernel(float* sums, typename A::Src logits, const float* row_max, const int32_t* targets,
                                   int N, int V, int Vp, int vocab_begin) {
    __shared__ float shared[kCeWarps];
    const int r = blockIdx.x;
    const size_t row = static_cast<size_t>(r) * Vp;
    const float m = row_max[r];
    float sum = 0.f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(logits[row + i] - m);
    sum = block_reduce<false>(sum, shared);
    if (threadIdx.x == 0) {
        const int target = targets[r];
        const int local = target - vocab_begin;
        sums[r] = sum;
        sums[N + r] = target >= 0 && local >= 0 && local < V ? logits[row + local] : 0.f;
    }
}

/// losses[r] = log(sums[r]) + row_max[r] - sums[N + r] (0 for an ignored row); dloss != 0:
/// row r becomes dloss * (softmax - onehot) over this slice's columns, padded columns and
/// ignored rows 0. Each thread reads and writes only its own columns: no barrier needed.
template <typename A>
__global__ void ce_split_kernel(float* losses, typename A::Dst logits, const float* row_max, const float* sums,
                                const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss) {
    const int r = blockIdx.x;
    const size_t row = static_cast<size_t>(r) * Vp;
    const int target = targets[r];
    if (target < 0) {
        if (threadIdx.x == 0) losses[r] = 0.f;
        if (dloss != 0.f) {
            for (int i = threadIdx.x; i < Vp; i += blockDim.x) logits.store(row + i, 0.f);
        }
        return;
    }
    const float m = row_max[r];
    const float sum = sums[r];
    if (threadIdx.x == 0) losses[r] = (m - sums[N + r]) + logf(sum);
    if (dloss == 0.f) return;
    const float scale = dloss / sum;
    const int local = target - vocab_begin;
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = 0.f;
        if (i < V) g = expf(logits.load(row + i) - m) * scale - (i == local ? dloss : 0.f);
        logits.store(row + i, g);
    }
}

void require_split_shape(int V, int Vp) {
    ZT_REQUIRE(V >= 0 && V <= Vp, "cross-entropy: need 0 <= V <= Vp (V=", V, ", Vp=", Vp, ")");
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

void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp, cudaStream_t stream) {
    require_split_shape(V, Vp);
    if (N <= 0) return;
    with_access({logits.dtype}, [&](auto access) {
        using A = decltype(access);
        ce_row_max_kernel<A><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(row_max, typename A::Src(logits), V,
                                                                                 Vp);
        ZT_KERNEL_CHECK("cross_entropy_row_max");
    });
}

void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                            int V, int Vp, int vocab_begin, cudaStream_t stream) {
    require_split_shape(V, Vp);
    if (N <= 0) return;
    with_access({logits.dtype}, [&](auto access) {
        using A = decltype(access);
        ce_row_sums_kernel<A><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
            sums, typename A::Src(logits), row_max, targets, N, V, Vp, vocab_begin);
        ZT_KERNEL_CHECK("cross_entropy_row_sums");
    });
}

void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                         const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss,
                         cudaStream_t stream) {
    require_split_shape(V, Vp);
    if (N <= 0) return;
    with_access({logits.dtype}, [&](auto access) {
        using A = decltype(access);
        ce_split_kernel<A><<<static_cast<unsigned>(N), kCeBlock, 0, stream>>>(
            losses, typename A::Dst(logits), row_max, sums, targets, N, V, Vp, vocab_begin, dloss);
        ZT_KERNEL_CHECK("split_cross_entropy");
    });
}

}  // namespace zt::cuda
