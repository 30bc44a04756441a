// Element-wise residual add (out may alias a or b), typed through typed.cuh: the sum in
// fp32, rounded once; the scaled add of a column range (LoRA adapters' outputs); dropout (on
// LoRA adapters' inputs), drawing the host's masks (DropoutMask).
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

template <typename A>
__global__ void scale_add_columns_kernel(typename A::Dst dst, int dst_width, int dst_col, typename A::Src src,
                                         int src_width, int src_col, int width, size_t n, float scale) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t row = i / static_cast<size_t>(width);
    const size_t col = i % static_cast<size_t>(width);
    const size_t d = row * static_cast<size_t>(dst_width) + static_cast<size_t>(dst_col) + col;
    dst.store(d, dst.load(d) + scale * src[row * static_cast<size_t>(src_width) + static_cast<size_t>(src_col) + col]);
}

template <typename A>
__global__ void dropout_kernel(typename A::Dst out, typename A::Src in, int width, size_t n, DropoutMask mask,
                               float scale) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int row = static_cast<int>(i / static_cast<size_t>(width));
    const int col = static_cast<int>(i % static_cast<size_t>(width));
    const float x = in[i];
    out.store(i, mask.keeps(mask.row_key(row), col) ? x * scale : 0.f);
}

}  // namespace

void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * static_cast<size_t>(width);
    if (n == 0) return;
    // Compacted padding's per-token layout lives in host memory; the CUDA backend never
    // compacts (ExampleFeed), so a mask carrying it here is a wiring error.
    ZT_REQUIRE(mask.sample_of == nullptr && mask.position_of == nullptr,
               "CUDA dropout: a per-token row layout in host memory");
    with_access({out.dtype, in.dtype}, [&](auto access) {
        using A = decltype(access);
        dropout_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(out), typename A::Src(in), width,
                                                                      n, mask, 1.f / (1.f - mask.p));
        ZT_KERNEL_CHECK("dropout");
    });
}

void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col, int width,
                       int N, float scale, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(N) * static_cast<size_t>(width);
    if (n == 0) return;
    with_access({dst.dtype, src.dtype}, [&](auto access) {
        using A = decltype(access);
        scale_add_columns_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(
            typename A::Dst(dst), dst_width, dst_col, typename A::Src(src), src_width, src_col, width, n, scale);
        ZT_KERNEL_CHECK("scale_add_columns");
    });
}

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
