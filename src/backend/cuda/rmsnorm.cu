// RMSNorm forward and backward (Llama), one warp per row like layernorm.cu. The parameter
// gradient goes through the deterministic two-stage column reduction (reduce.cu), so results
// are bit-identical run to run. Not fused with the following product (the interface is op by op).
// Typed activations through typed.cuh (rstd and the parameter gradient stay fp32).
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = kBlock / kWarpSize;

template <typename A>
__global__ void rmsnorm_forward_kernel(typename A::Dst out, float* rstd, typename A::Src inp, const float* weight,
                                       int N, int C, float eps) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const typename A::Src x = inp.offset(static_cast<size_t>(row) * C);
    float sum_sq = 0.f;
    for (int i = lane; i < C; i += kWarpSize) sum_sq += x[i] * x[i];
    const float s = 1.f / sqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
    const size_t o = static_cast<size_t>(row) * C;
    for (int i = lane; i < C; i += kWarpSize) out.store(o + i, x[i] * s * weight[i]);
    if (lane == 0) rstd[row] = s;
}

/// dinp += rstd * (dout * w - x * rstd^2 * mean(dout * w * x)).
template <typename A>
__global__ void rmsnorm_dinp_kernel(typename A::Dst dinp, typename A::Src dout, typename A::Src inp,
                                    const float* weight, const float* rstd, int N, int C) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const size_t off = static_cast<size_t>(row) * C;
    const float s = rstd[row];
    float dot = 0.f;
    for (int i = lane; i < C; i += kWarpSize) dot += dout[off + i] * weight[i] * inp[off + i];
    const float coef = s * s * warp_sum(dot) / static_cast<float>(C);
    for (int i = lane; i < C; i += kWarpSize) {
        dinp.add(off + i, s * (dout[off + i] * weight[i] - inp[off + i] * coef));
    }
}

/// Per chunk of rows: partial[chunk, c] = sum dout * inp * rstd.
template <typename A>
__global__ void rmsnorm_dweight_partial_kernel(float* partial, typename A::Src dout, typename A::Src inp,
                                               const float* rstd, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * kRowsPerChunk;
    const int r1 = min(N, r0 + kRowsPerChunk);
    float acc = 0.f;
    for (int r = r0; r < r1; ++r) {
        const size_t i = static_cast<size_t>(r) * C + c;
        acc += dout[i] * (inp[i] * rstd[r]);
    }
    partial[static_cast<size_t>(blockIdx.y) * C + c] = acc;
}

}  // namespace

void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C, float eps,
                     cudaStream_t stream) {
    if (N <= 0) return;
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        rmsnorm_forward_kernel<A><<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
            typename A::Dst(out), rstd, typename A::Src(inp), weight, N, C, eps);
        ZT_KERNEL_CHECK("rmsnorm_forward");
    });
}

void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
    if (N <= 0) return;
    with_access({dinp.dtype, dout.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        using Src = typename A::Src;
        if (dinp.data != nullptr) {
            rmsnorm_dinp_kernel<A><<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
                typename A::Dst(dinp), Src(dout), Src(inp), weight, rstd, N, C);
            ZT_KERNEL_CHECK("rmsnorm_dinp");
        }
        if (dweight == nullptr) return;
        const size_t chunks = column_chunks(N);
        const dim3 grid(grid_for(static_cast<size_t>(C), kBlock), static_cast<unsigned>(chunks));
        rmsnorm_dweight_partial_kernel<A><<<grid, kBlock, 0, stream>>>(scratch, Src(dout), Src(inp), rstd, N, C);
        ZT_KERNEL_CHECK("rmsnorm_dweight_partial");
        column_finalize(dweight, scratch, chunks, C, stream);
    });
}

}  // namespace zt::cuda

// Qwen3's q and k head norms (Backend::qk_norm_forward / backward): the RMSNorm above on
// each head of a qkv row, one warp per (row, head) of the (NH + 2 NKV) heads: q heads with
// q_weight, k heads with k_weight, v heads copied (forward) or their gradient passed on.
namespace zt::cuda {
namespace {

constexpr int kHeadWarps = kBlock / kWarpSize;

template <typename A>
__global__ void qk_norm_forward_kernel(typename A::Dst out, float* rstd, typename A::Src inp, const float* q_weight,
                                       const float* k_weight, int N, int NH, int NKV, int hs, float eps) {
    const size_t warp = static_cast<size_t>(blockIdx.x) * kHeadWarps + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int all = NH + 2 * NKV;
    if (warp >= static_cast<size_t>(N) * all) return;
    const int row = static_cast<int>(warp / all);
    const int head = static_cast<int>(warp % all);
    const size_t off = warp * hs;  // rows are all heads wide: (row, head) starts at warp * hs
    if (head >= NH + NKV) {
        for (int i = lane; i < hs; i += kWarpSize) out.store(off + i, inp[off + i]);
        return;
    }
    const float* w = head < NH ? q_weight : k_weight;
    float sum_sq = 0.f;
    for (int i = lane; i < hs; i += kWarpSize) sum_sq += inp[off + i] * inp[off + i];
    const float s = 1.f / sqrtf(warp_sum(sum_sq) / static_cast<float>(hs) + eps);
    for (int i = lane; i < hs; i += kWarpSize) out.store(off + i, inp[off + i] * s * w[i]);
    if (lane == 0) rstd[static_cast<size_t>(row) * (NH + NKV) + head] = s;
}

template <typename A>
__global__ void qk_norm_dinp_kernel(typename A::Dst dinp, typename A::Src dout, typename A::Src inp,
                                    const float* q_weight, const float* k_weight, const float* rstd, int N, int NH,
                                    int NKV, int hs) {
    const size_t warp = static_cast<size_t>(blockIdx.x) * kHeadWarps + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    const int all = NH + 2 * NKV;
    if (warp >= static_cast<size_t>(N) * all) return;
    const int row = static_cast<int>(warp / all);
    const int head = static_cast<int>(warp % all);
    const size_t off = warp * hs;
    if (head >= NH + NKV) {
        for (int i = lane; i < hs; i += kWarpSize) dinp.add(off + i, dout[off + i]);
        return;
    }
    const float* w = head < NH ? q_weight : k_weight;
    const float s = rstd[static_cast<size_t>(row) * (NH + NKV) + head];
    float dot = 0.f;
    for (int i = lane; i < hs; i += kWarpSize) dot += dout[off + i] * w[i] * inp[off + i];
    const float coef = s * s * warp_sum(dot) / static_cast<float>(hs);
    for (int i = lane; i < hs; i += kWarpSize) dinp.add(off + i, s * (dout[off + i] * w[i] - inp[off + i] * coef));
}

/// Per chunk of rows: partial_q[chunk, c] (c < hs) and partial_k[chunk, c] = the sums over
/// the chunk's rows and the q (k) heads of dout * inp * rstd, in a fixed order.
template <typename A>
__global__ void qk_norm_dweight_partial_kernel(float* partial, typename A::Src dout, typename A::Src inp,
                                               const float* rstd, int N, int NH, int NKV, int hs, size_t chunks) {
    const int c2 = blockIdx.x * blockDim.x + threadIdx.x;
    if (c2 >= 2 * hs) return;
    const bool k = c2 >= hs;
    const int c = k ? c2 - hs : c2;
    const int h0 = k ? NH : 0;
    const int h1 = k ? NH + NKV : NH;
    const int r0 = blockIdx.y * kRowsPerChunk;
    const int r1 = min(N, r0 + kRowsPerChunk);
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * hs;
    float acc = 0.f;
    for (int r = r0; r < r1; ++r) {
        for (int h = h0; h < h1; ++h) {
            const size_t i = static_cast<size_t>(r) * row + static_cast<size_t>(h) * hs + c;
            acc += dout[i] * (inp[i] * rstd[static_cast<size_t>(r) * (NH + NKV) + h]);
        }
    }
    partial[(k ? chunks : 0) * hs + static_cast<size_t>(blockIdx.y) * hs + c] = acc;
}

}  // namespace

void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int hs, float eps, cudaStream_t stream) {
    if (N <= 0) return;
    const size_t warps = static_cast<size_t>(N) * static_cast<size_t>(NH + 2 * NKV);
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        qk_norm_forward_kernel<A><<<grid_for(warps, kHeadWarps), kBlock, 0, stream>>>(
            typename A::Dst(out), rstd, typename A::Src(inp), q_weight, k_weight, N, NH, NKV, hs, eps);
        ZT_KERNEL_CHECK("qk_norm_forward");
    });
}

void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                      const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV, int hs,
                      float* scratch, cudaStream_t stream) {
    if (N <= 0) return;
    const size_t warps = static_cast<size_t>(N) * static_cast<size_t>(NH + 2 * NKV);
    with_access({dinp.dtype, dout.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        using Src = typename A::Src;
        if (dinp.data != nullptr) {
            qk_norm_dinp_kernel<A><<<grid_for(warps, kHeadWarps), kBlock, 0, stream>>>(
                typename A::Dst(dinp), Src(dout), Src(inp), q_weight, k_weight, rstd, N, NH, NKV, hs);
            ZT_KERNEL_CHECK("qk_norm_dinp");
        }
        // Either weight's gradient alone, as the CPU's (the partials hold both).
        if (dq_weight == nullptr && dk_weight == nullptr) return;
        const size_t chunks = column_chunks(N);
        const dim3 grid(grid_for(static_cast<size_t>(2 * hs), kBlock), static_cast<unsigned>(chunks));
        qk_norm_dweight_partial_kernel<A><<<grid, kBlock, 0, stream>>>(scratch, Src(dout), Src(inp), rstd, N, NH, NKV,
                                                                      hs, chunks);
        ZT_KERNEL_CHECK("qk_norm_dweight_partial");
        if (dq_weight != nullptr) column_finalize(dq_weight, scratch, chunks, hs, stream);
        if (dk_weight != nullptr) column_finalize(dk_weight, scratch + chunks * static_cast<size_t>(hs), chunks, hs, stream);
    });
}

}  // namespace zt::cuda
