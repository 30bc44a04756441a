// Causal grouped-query attention (GPT-2's multi-head attention is NKV = NH), llm.c's
// unfused form: cuBLASLt strided-batched products plus a causal softmax kernel. Correctness first: att (B, NH, T, T) is materialized
// because the interface saves it for backward (a flash-style kernel is the follow-up).
//
// The six products and their layout are in gemm_plan.hpp (unit-tested on the host). The
// full T x T scores are computed and the softmax zeroes the part above the diagonal, so
// the P.V products need no masking.
//
// Segmented (packed examples, block-diagonal causal): the same products; the softmax also
// zeroes the keys before each query's attend_from, so att is zero outside every segment.
// The backward then needs no mask of its own: it reads only att, and a zero probability
// gives zero dV, dS, dQ and dK terms (the CPU twin's argument, cpu_backend.cpp). Wasted
// work on the masked-out scores is the price of sharing the products (a flash-style
// kernel would skip whole tiles).
#include "cuda_check.cuh"
#include "ops.cuh"

#include <cmath>

namespace zt::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarpSize;

/// In place on each score row (b, h, t): softmax over [from, t], zeros elsewhere, where
/// from = attend_from[b * T + t] ((B, T) device memory), or 0 without attend_from (plain
/// causal). One warp a row.
__global__ void causal_softmax_kernel(float* att, int rows, int T, int NH, const int32_t* attend_from) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int t = row % T;
    const int len = t + 1;
    // row = (b * NH + h) * T + t
    const int from = attend_from == nullptr ? 0 : attend_from[static_cast<size_t>(row / (NH * T)) * T + t];
    float* p = att + static_cast<size_t>(row) * T;
    float maxv = -INFINITY;
    for (int i = from + lane; i < len; i += kWarpSize) maxv = fmaxf(maxv, p[i]);
    maxv = warp_max(maxv);
    float sum = 0.f;
    for (int i = from + lane; i < len; i += kWarpSize) {
        const float e = expf(p[i] - maxv);
        p[i] = e;
        sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int i = lane; i < T; i += kWarpSize) p[i] = i >= from && i < len ? p[i] * inv : 0.f;
}

/// Per row: pc = causal copy of P (att above the diagonal is unspecified, so it is never
/// trusted), ds = P * (dP - sum_j P_j dP_j) in place on dP, zeros past the diagonal.
__global__ void softmax_backward_kernel(float* ds, float* pc, const float* att, int rows, int T) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int len = row % T + 1;
    const size_t off = static_cast<size_t>(row) * T;
    float dot = 0.f;
    for (int i = lane; i < len; i += kWarpSize) dot += att[off + i] * ds[off + i];
    dot = warp_sum(dot);
    for (int i = lane; i < T; i += kWarpSize) {
        const float p = i < len ? att[off + i] : 0.f;
        pc[off + i] = p;
        ds[off + i] = p * (ds[off + i] - dot);
    }
}

/// The forward, plain causal (attend_from null) or segmented.
void attention_forward(const Blas& blas, float* out, float* att, const float* qkv, const int32_t* attend_from, int B,
                       int T, int NH, int NKV, int hs, cudaStream_t stream) {
    const AttentionDims d = gqa_attention_dims(T, NH, NKV, hs);
    if (B <= 0 || T <= 0) return;
    const size_t qkv_b = static_cast<size_t>(T) * d.W;
    const size_t att_b = static_cast<size_t>(NH) * d.tt;
    const size_t out_b = static_cast<size_t>(T) * d.O;
    for (int b = 0; b < B; ++b) {
        for (int g = 0; g < d.G; ++g) gemm(blas, attention_scores_gemm(d, att + b * att_b, qkv + b * qkv_b, g), stream);
    }
    const int rows = B * NH * T;
    causal_softmax_kernel<<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(att, rows, T, NH,
                                                                                                    attend_from);
    ZT_KERNEL_CHECK("causal_softmax");
    for (int b = 0; b < B; ++b) {
        for (int g = 0; g < d.G; ++g) {
            gemm(blas, attention_out_gemm(d, out + b * out_b, att + b * att_b, qkv + b * qkv_b, g), stream);
        }
    }
}

}  // namespace

void gqa_attention_forward(const Blas& blas, float* out, float* att, const float* qkv, int B, int T, int NH,
                           int NKV, int hs, cudaStream_t stream) {
    attention_forward(blas, out, att, qkv, nullptr, B, T, NH, NKV, hs, stream);
}

void gqa_attention_forward_segmented(const Blas& blas, float* out, float* att, const float* qkv,
                                     const int32_t* attend_from, int B, int T, int NH, int NKV, int hs,
                                     cudaStream_t stream) {
    ZT_REQUIRE(attend_from != nullptr, "gqa_attention_forward_segmented needs attend_from (device memory)");
    attention_forward(blas, out, att, qkv, attend_from, B, T, NH, NKV, hs, stream);
}

void gqa_attention_backward(const Blas& blas, float* dqkv, float* scratch, const float* dout, const float* qkv,
                            const float* att, int B, int T, int NH, int NKV, int hs, cudaStream_t stream) {
    const AttentionDims d = gqa_attention_dims(T, NH, NKV, hs);
    if (B <= 0 || T <= 0) return;
    const size_t qkv_b = static_cast<size_t>(T) * d.W;
    const size_t att_b = static_cast<size_t>(NH) * d.tt;
    const size_t out_b = static_cast<size_t>(T) * d.O;
    float* pc = scratch;
    float* ds = scratch + att_b;
    const int rows = NH * T;
    for (int b = 0; b < B; ++b) {
        const float* q = qkv + b * qkv_b;
        float* dq = dqkv + b * qkv_b;
        const float* dout_b = dout + b * out_b;
        for (int g = 0; g < d.G; ++g) gemm(blas, attention_dp_gemm(d, ds, dout_b, q, g), stream);
        softmax_backward_kernel<<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(
            ds, pc, att + b * att_b, rows, T);
        ZT_KERNEL_CHECK("softmax_backward");
        // The G group positions accumulate into the same dk and dv one after the other (one
        // stream, beta 1): a fixed order, no atomics.
        for (int g = 0; g < d.G; ++g) {
            gemm(blas, attention_dv_gemm(d, dq, dout_b, pc, g), stream);
            gemm(blas, attention_dq_gemm(d, dq, q, ds, g), stream);
            gemm(blas, attention_dk_gemm(d, dq, q, ds, g), stream);
        }
    }
}

}  // namespace zt::cuda
