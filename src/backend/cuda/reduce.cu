// Deterministic reductions: column sums (bias and LayerNorm parameter gradients) and the
// sum of squares for the gradient norm. Both run in two passes with a fixed partition, so
// the order of additions depends only on the shape, never on timing (no float atomics).
// column_sum reads typed rows (a bias gradient from 16-bit dout) through typed.cuh.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

/// partial[chunk, c] = sum of src[r, c] over the chunk's rows, in row order.
template <typename A>
__global__ void column_partial_kernel(float* partial, typename A::Src src, int N, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.y * kRowsPerChunk;
    const int r1 = min(N, r0 + kRowsPerChunk);
    float acc = 0.f;
    for (int r = r0; r < r1; ++r) acc += src[static_cast<size_t>(r) * C + c];
    partial[static_cast<size_t>(blockIdx.y) * C + c] = acc;
}

__global__ void column_finalize_kernel(float* dst, const float* partial, size_t chunks, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float acc = 0.f;
    for (size_t k = 0; k < chunks; ++k) acc += partial[k * C + c];
    dst[c] += acc;
}

/// Block-wide sum of doubles in shared memory, a fixed tree; result in thread 0.
__device__ double block_sum_double(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    return shared[0];
}

__global__ void sum_squares_partial_kernel(double* partial, const void* x, DType type, size_t n) {
    __shared__ double shared[kBlock];
    double acc = 0.0;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = static_cast<double>(load_as_float(x, type, i));
        acc += v * v;
    }
    const double total = block_sum_double(acc, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void sum_squares_final_kernel(double* out, const double* partial, size_t parts) {
    __shared__ double shared[kBlock];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < parts; i += blockDim.x) acc += partial[i];
    const double total = block_sum_double(acc, shared);
    if (threadIdx.x == 0) *out = total;
}

}  // namespace

void column_finalize(float* dst, const float* partial, size_t chunks, int C, cudaStream_t stream) {
    column_finalize_kernel<<<grid_for(static_cast<size_t>(C), kBlock), kBlock, 0, stream>>>(dst, partial, chunks,
                                                                                             C);
    ZT_KERNEL_CHECK("column_finalize");
}

void column_sum(float* dst, ConstActPtr src, int N, int C, float* scratch, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const size_t chunks = column_chunks(N);
    const dim3 grid(grid_for(static_cast<size_t>(C), kBlock), static_cast<unsigned>(chunks));
    with_access({src.dtype}, [&](auto access) {
        using A = decltype(access);
        column_partial_kernel<A><<<grid, kBlock, 0, stream>>>(scratch, typename A::Src(src), N, C);
        ZT_KERNEL_CHECK("column_partial");
    });
    column_finalize(dst, scratch, chunks, C, stream);
}

double sum_squares(const ConstActPtr* xs, const size_t* ns, size_t count, double* scratch, cudaStream_t stream) {
    if (count == 0) return 0.0;
    // Span i's block partials go to scratch[i * kSumSquaresBlocks ...]; one final pass adds
    // them all in a fixed order, so the host waits once, not once per span.
    for (size_t i = 0; i < count; ++i) {
        sum_squares_partial_kernel<<<kSumSquaresBlocks, kBlock, 0, stream>>>(scratch + i * kSumSquaresBlocks,
                                                                            xs[i].data, xs[i].dtype, ns[i]);
        ZT_KERNEL_CHECK("sum_squares_partial");
    }
    const size_t parts = count * kSumSquaresBlocks;
    sum_squares_final_kernel<<<1, kBlock, 0, stream>>>(scratch + parts, scratch, parts);
    ZT_KERNEL_CHECK("sum_squares_final");
    double result = 0.0;
    ZT_CUDA_CHECK(cudaMemcpyAsync(&result, scratch + parts, sizeof(double), cudaMemcpyDeviceToHost, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return result;
}

}  // namespace zt::cuda
