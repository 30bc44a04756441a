// Causal multi-head attention, llm.c's unfused form: cuBLASLt strided-batched products
// plus a causal softmax kernel. Correctness first: att (B, NH, T, T) is materialized
// because the interface saves it for backward (a flash-style kernel is the follow-up).
//
// No permute copies: head h of batch b lives in qkv at b*T*3C + h*hs (+ C for k, + 2C for
// v) with row stride 3C, so one strided-batched product per batch element covers all NH
// heads (batch stride hs). The full T x T scores are computed and the softmax zeroes the
// part above the diagonal, so the P.V products need no masking.
//
// Row-major X (r, c) is column-major X^T; every product below is written in cuBLAS's
// column-major terms, with the row-major meaning in the comment.
#include "cuda_check.cuh"
#include "ops.cuh"

#include <cmath>

namespace zt::cuda {
namespace {

constexpr int kRowsPerBlock = kBlock / kWarpSize;

/// In place on each score row (b, h, t): softmax over [0, t], zeros in (t, T). One warp a row.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarpSize;
    const int lane = threadIdx.x % kWarpSize;
    if (row >= rows) return;
    const int len = row % T + 1;
    float* p = att + static_cast<size_t>(row) * T;
    float maxv = -INFINITY;
    for (int i = lane; i < len; i += kWarpSize) maxv = fmaxf(maxv, p[i]);
    maxv = warp_max(maxv);
    float sum = 0.f;
    for (int i = lane; i < len; i += kWarpSize) {
        const float e = expf(p[i] - maxv);
        p[i] = e;
        sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int i = lane; i < T; i += kWarpSize) p[i] = i < len ? p[i] * inv : 0.f;
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

/// One product over all NH heads of one batch element (the six below differ only in these).
void heads_gemm(const Blas& blas, int NH, int m, int n, int k, Operand a, Operand b, Output d, float alpha,
                float beta, cudaStream_t stream) {
    Gemm g(m, n, k, a, b, d);
    g.batch = NH;
    g.alpha = alpha;
    g.beta = beta;
    gemm(blas, g, stream);
}

/// Sizes shared by forward and backward.
struct Dims {
    int hs;        ///< head size
    int64_t C3;    ///< qkv row stride
    int64_t tt;    ///< T * T, one head's scores
    float scale;   ///< 1 / sqrt(hs)
};
Dims dims_of(int T, int C, int NH) {
    ZT_REQUIRE(NH > 0 && C % NH == 0, "attention: C=", C, " is not divisible by NH=", NH);
    const int hs = C / NH;
    return {hs, 3 * static_cast<int64_t>(C), static_cast<int64_t>(T) * T, 1.f / std::sqrt(static_cast<float>(hs))};
}

}  // namespace

void attention_forward(const Blas& blas, float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream) {
    const Dims dm = dims_of(T, C, NH);
    if (B <= 0 || T <= 0) return;
    const int hs = dm.hs;
    const int64_t C3 = dm.C3;
    const int64_t tt = dm.tt;
    for (int b = 0; b < B; ++b) {
        const float* q = qkv + static_cast<size_t>(b) * T * C3;
        float* p = att + static_cast<size_t>(b) * NH * tt;
        // S (T, T) = scale * Q K^T:  S^T = (K stored (hs, T))^T-op @ Q stored (hs, T).
        heads_gemm(blas, NH, T, T, hs, {q + C, C3, hs, true}, {q, C3, hs, false}, {p, T, tt}, dm.scale, 0.f, stream);
    }
    const int rows = B * NH * T;
    causal_softmax_kernel<<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(att, rows, T);
    ZT_KERNEL_CHECK("causal_softmax");
    for (int b = 0; b < B; ++b) {
        const float* v = qkv + static_cast<size_t>(b) * T * C3 + 2 * C;
        // O (T, hs) = P V:  O^T (hs, T) = V stored (hs, T) @ P stored (T, T) (= P^T).
        heads_gemm(blas, NH, hs, T, T, {v, C3, hs, false}, {att + static_cast<size_t>(b) * NH * tt, T, tt, false},
                   {out + static_cast<size_t>(b) * T * C, C, hs}, 1.f, 0.f, stream);
    }
}

size_t attention_scratch_floats(int T, int NH) {
    // The causal copy of P and dP -> dS for the NH heads of one batch element.
    return 2 * static_cast<size_t>(NH) * T * T;
}

void attention_backward(const Blas& blas, float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, cudaStream_t stream) {
    const Dims dm = dims_of(T, C, NH);
    if (B <= 0 || T <= 0) return;
    const int hs = dm.hs;
    const int64_t C3 = dm.C3;
    const int64_t tt = dm.tt;
    float* pc = scratch;
    float* ds = scratch + static_cast<size_t>(NH) * tt;
    for (int b = 0; b < B; ++b) {
        const size_t row0 = static_cast<size_t>(b) * T;
        const float* q = qkv + row0 * C3;
        const float* k = q + C;
        const float* v = q + 2 * C;
        float* dq = dqkv + row0 * C3;
        float* dk = dq + C;
        float* dv = dq + 2 * C;
        const float* dout_b = dout + row0 * C;
        const float* p = att + static_cast<size_t>(b) * NH * tt;

        // dP (T, T) = dO V^T:  dP^T = (V stored (hs, T))^T-op @ dO stored (hs, T).
        heads_gemm(blas, NH, T, T, hs, {v, C3, hs, true}, {dout_b, C, hs, false}, {ds, T, tt}, 1.f, 0.f, stream);

        const int rows = NH * T;
        softmax_backward_kernel<<<grid_for(static_cast<size_t>(rows), kRowsPerBlock), kBlock, 0, stream>>>(
            ds, pc, p, rows, T);
        ZT_KERNEL_CHECK("softmax_backward");

        // dV (T, hs) += P^T dO:  dV^T = dO stored (hs, T) @ (P stored (T, T) = P^T)^T-op.
        heads_gemm(blas, NH, hs, T, T, {dout_b, C, hs, false}, {pc, T, tt, true}, {dv, C3, hs}, 1.f, 1.f, stream);
        // dQ (T, hs) += scale * dS K:  dQ^T = K stored (hs, T) @ dS stored (= dS^T).
        heads_gemm(blas, NH, hs, T, T, {k, C3, hs, false}, {ds, T, tt, false}, {dq, C3, hs}, dm.scale, 1.f, stream);
        // dK (T, hs) += scale * dS^T Q:  dK^T = Q stored (hs, T) @ (dS stored)^T-op.
        heads_gemm(blas, NH, hs, T, T, {q, C3, hs, false}, {ds, T, tt, true}, {dk, C3, hs}, dm.scale, 1.f, stream);
    }
}

}  // namespace zt::cuda
