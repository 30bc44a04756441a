// RMSNorm forward and backward (Llama), one warp per row like layernorm.cu. The parameter
// gradient goes through the deterministic two-stage column reduction (reduce.cu), so results
// are bit-identical run to run. Not fused with the following product (the interface is op by op).
#include "cuda_check.cuh"
#include "ops.cuh"

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = kBlock / kWarpSize;

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight, int N,
                                       int C, float eps) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const float* x = inp + static_cast<size_t>(row) * C;
    float sum_sq = 0.f;
    for (int i = lane; i < C; i += kWarpSize) sum_sq += x[i] * x[i];
    const float s = 1.f / sqrtf(warp_sum(sum_sq) / static_cast<float>(C) + eps);
    float* o = out + static_cast<size_t>(row) * C;
    for (int i = lane; i < C; i += kWarpSize) o[i] = x[i] * s * weight[i];
    if (lane == 0) rstd[row] = s;
}

/// dinp += rstd * (dout * w - x * rstd^2 * mean(dout * w * x)).
__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int N, int C) {
    const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= N) return;
    const size_t off = static_cast<size_t>(row) * C;
    const float s = rstd[row];
    float dot = 0.f;
    for (int i = lane; i < C; i += kWarpSize) dot += dout[off + i] * weight[i] * inp[off + i];
    const float coef = s * s * warp_sum(dot) / static_cast<float>(C);
    for (int i = lane; i < C; i += kWarpSize) {
        dinp[off + i] += s * (dout[off + i] * weight[i] - inp[off + i] * coef);
    }
}

/// Per chunk of rows: partial[chunk, c] = sum dout * inp * rstd.
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const float* dout, const float* inp,
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

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     cudaStream_t stream) {
    if (N <= 0) return;
    rmsnorm_forward_kernel<<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
        out, rstd, inp, weight, N, C, eps);
    ZT_KERNEL_CHECK("rmsnorm_forward");
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream) {
    if (N <= 0) return;
    if (dinp != nullptr) {
        rmsnorm_dinp_kernel<<<grid_for(static_cast<size_t>(N), kWarpsPerBlock), kBlock, 0, stream>>>(
            dinp, dout, inp, weight, rstd, N, C);
        ZT_KERNEL_CHECK("rmsnorm_dinp");
    }
    if (dweight == nullptr) return;
    const size_t chunks = column_chunks(N);
    const dim3 grid(grid_for(static_cast<size_t>(C), kBlock), static_cast<unsigned>(chunks));
    rmsnorm_dweight_partial_kernel<<<grid, kBlock, 0, stream>>>(scratch, dout, inp, rstd, N, C);
    ZT_KERNEL_CHECK("rmsnorm_dweight_partial");
    column_finalize(dweight, scratch, chunks, C, stream);
}

}  // namespace zt::cuda
