// Rotary position embeddings on the q and k heads of fused qkv rows (HF rotate_half pairs
// (i, i + hs/2), backend.hpp), one thread per pair. The q and k heads are NH + NKV
// consecutive heads at the start of a row, so a pair's place is (row, head, i) with no
// q/k distinction. In place is safe: each thread reads its pair before writing it and no
// other thread touches it. The v part is copied (out of place) or accumulated (backward)
// by a strided copy / an element-wise kernel. Typed buffers through typed.cuh: each value
// computed in fp32 and rounded once.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

namespace zt::cuda {
namespace {

/// y = R x per pair with sin scaled by sin_sign (-1: the inverse rotation R^T); written to
/// out, or added to it when accumulate.
template <typename A>
__global__ void rope_kernel(typename A::Dst out, typename A::Src inp, const float* rope, int rows, int T, int heads,
                            int half, int W, float sin_sign, bool accumulate) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t per_row = static_cast<size_t>(heads) * half;
    if (idx >= static_cast<size_t>(rows) * per_row) return;
    const int r = static_cast<int>(idx / per_row);
    const int in_row = static_cast<int>(idx % per_row);
    const int h = in_row / half;
    const int i = in_row % half;
    const float* cos_t = rope + static_cast<size_t>(r % T) * 2 * half;
    const float c = cos_t[i];
    const float s = sin_sign * cos_t[half + i];
    const size_t i1 = static_cast<size_t>(r) * W + static_cast<size_t>(h) * 2 * half + i;
    const size_t i2 = i1 + half;
    const float x1 = inp[i1];
    const float x2 = inp[i2];
    const float y1 = x1 * c - x2 * s;
    const float y2 = x2 * c + x1 * s;
    if (accumulate) {
        out.add(i1, y1);
        out.add(i2, y2);
    } else {
        out.store(i1, y1);
        out.store(i2, y2);
    }
}

/// dst[r, v_off + j] += src[r, v_off + j] for the v part of every row (accumulate), or =
/// (a copy between buffers of different dtypes).
template <typename A>
__global__ void v_part_kernel(typename A::Dst dst, typename A::Src src, int rows, int W, int v_off, int v_width,
                              bool accumulate) {
    const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (idx >= static_cast<size_t>(rows) * v_width) return;
    const size_t at = (idx / v_width) * W + v_off + idx % v_width;
    if (accumulate) {
        dst.add(at, src[at]);
    } else {
        dst.store(at, src[at]);
    }
}

struct RopeDims {
    int rows;
    int heads;  ///< q and k heads, NH + NKV
    int half;
    int W;      ///< qkv row width
    int v_off;
    int v_width;
};

RopeDims rope_dims(int B, int T, int NH, int NKV, int hs) {
    ZT_REQUIRE(hs > 0 && hs % 2 == 0, "rope: head size ", hs, " must be even and positive");
    ZT_REQUIRE(NH > 0 && NKV > 0 && NH % NKV == 0, "rope: NKV=", NKV, " key/value heads must divide NH=", NH,
               " query heads");
    return {B * T, NH + NKV, hs / 2, (NH + 2 * NKV) * hs, (NH + NKV) * hs, NKV * hs};
}

void launch_rope(ActPtr out, ConstActPtr inp, const float* rope, const RopeDims& d, int T, float sin_sign,
                 bool accumulate, cudaStream_t stream) {
    const size_t pairs = static_cast<size_t>(d.rows) * d.heads * d.half;
    with_access({out.dtype, inp.dtype}, [&](auto access) {
        using A = decltype(access);
        rope_kernel<A><<<grid_for(pairs, kBlock), kBlock, 0, stream>>>(typename A::Dst(out), typename A::Src(inp),
                                                                       rope, d.rows, T, d.heads, d.half, d.W,
                                                                       sin_sign, accumulate);
        ZT_KERNEL_CHECK("rope");
    });
}

void launch_v_part(ActPtr dst, ConstActPtr src, const RopeDims& d, bool accumulate, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(d.rows) * d.v_width;
    with_access({dst.dtype, src.dtype}, [&](auto access) {
        using A = decltype(access);
        v_part_kernel<A><<<grid_for(n, kBlock), kBlock, 0, stream>>>(typename A::Dst(dst), typename A::Src(src),
                                                                     d.rows, d.W, d.v_off, d.v_width, accumulate);
        ZT_KERNEL_CHECK("rope_v_part");
    });
}

}  // namespace

void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs,
                  cudaStream_t stream) {
    const RopeDims d = rope_dims(B, T, NH, NKV, hs);
    if (d.rows <= 0) return;
    launch_rope(out, inp, rope, d, T, 1.f, false, stream);
    if (out.data == inp.data) return;
    if (out.dtype != inp.dtype) {
        launch_v_part(out, inp, d, false, stream);
        return;
    }
    // Same dtype: v is copied as it is stored.
    const size_t elem = dtype_size(out.dtype);
    const size_t pitch = static_cast<size_t>(d.W) * elem;
    ZT_CUDA_CHECK(cudaMemcpy2DAsync(out.offset(d.v_off).data, pitch, inp.offset(d.v_off).data, pitch,
                                    static_cast<size_t>(d.v_width) * elem, static_cast<size_t>(d.rows),
                                    cudaMemcpyDeviceToDevice, stream));
}

void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV, int hs,
                   cudaStream_t stream) {
    const RopeDims d = rope_dims(B, T, NH, NKV, hs);
    if (d.rows <= 0) return;
    // In place (dinp == dout) the gradient is replaced by R^T dout and v's stays; otherwise
    // R^T dout and v's gradient are added to dinp.
    const bool in_place = dinp.data == dout.data;
    launch_rope(dinp, dout, rope, d, T, -1.f, !in_place, stream);
    if (!in_place) launch_v_part(dinp, dout, d, true, stream);
}

}  // namespace zt::cuda
