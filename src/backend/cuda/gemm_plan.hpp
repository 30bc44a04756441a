// The matrix products of the CUDA backend as plain data: which operand, transposed or not,
// with which leading dimension and batch stride. Plain C++ (no CUDA header), so a unit
// test can run every product below through a host reference GEMM on a machine without a
// GPU and compare with the CPU backend: the layout arithmetic (row-major meaning, column-
// major cuBLAS terms, per-head views into qkv) is checked everywhere, the GPU only adds
// cuBLASLt's arithmetic.
//
// Row-major X (r, c) is column-major X^T (c, r) with the same leading dimension; every
// product is written in cuBLAS's column-major terms, with the row-major meaning beside it.
#pragma once

#include <cmath>
#include <cstdint>

#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

namespace zt::cuda {

/// An input matrix of a product as stored (column-major, leading dimension `ld`, batch
/// stride `stride` elements), used transposed when `trans`.
struct Operand {
    const void* ptr = nullptr;
    int64_t ld = 0;
    int64_t stride = 0;
    bool trans = false;
};
/// The output matrix (also read when beta != 0).
struct Output {
    void* ptr = nullptr;
    int64_t ld = 0;
    int64_t stride = 0;
};

/// One (strided-batched) product in cuBLAS's column-major terms:
/// D (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * D [+ bias (m)] [then GELU].
/// A, B and D share `dtype`; accumulation is fp32.
struct Gemm {
    Gemm() = default;
    Gemm(int m_, int n_, int k_, Operand a_, Operand b_, Output d_) : m(m_), n(n_), k(k_), a(a_), b(b_), d(d_) {}
    int m = 0;
    int n = 0;
    int k = 0;
    Operand a;
    Operand b;
    Output d;
    int batch = 1;
    float alpha = 1.f;
    float beta = 0.f;
    DType dtype = DType::kF32;
    const void* bias = nullptr;  ///< (m), dtype as D
    bool gelu = false;
    void* gelu_aux = nullptr;  ///< pre-GELU values (m, n), ld = d.ld; needs gelu
};

/// How gemm() applies a product's bias/GELU epilogue.
enum class EpiloguePath {
    kNone,      ///< no bias, no GELU: a plain product
    kFused,     ///< cuBLASLt's fused epilogue (falls back to kSeparate if it has no algorithm)
    kSeparate,  ///< a plain product, then the bias/GELU kernel over D
};

/// cuBLASLt requires CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD (the pre-GELU output's leading
/// dimension, here d.ld) to be a multiple of 8 elements; such shapes never get a fused
/// algorithm, so they take the separate path without asking the heuristic.
constexpr int64_t kEpilogueAuxLdMultiple = 8;

inline EpiloguePath epilogue_path(const Gemm& g) {
    ZT_REQUIRE(g.gelu_aux == nullptr || g.gelu, "gemm: a pre-GELU output needs the GELU epilogue");
    if (g.bias == nullptr && !g.gelu) return EpiloguePath::kNone;
    if (g.gelu_aux != nullptr && g.d.ld % kEpilogueAuxLdMultiple != 0) return EpiloguePath::kSeparate;
    return EpiloguePath::kFused;
}

// ---- matmul: weight (OC, C), out (N, OC) = inp (N, C) @ weight^T -------------------------

/// out^T (OC, N) = (weight stored (C, OC))^T @ inp stored (C, N).
inline Gemm matmul_forward_gemm(void* out, const void* inp, const void* weight, int N, int C, int OC) {
    return Gemm(OC, N, C, {weight, C, 0, true}, {inp, C, 0, false}, {out, OC, 0});
}
/// dinp (N, C) += dout @ weight:  dinp^T (C, N) += weight stored (C, OC) @ dout stored (OC, N).
inline Gemm matmul_dinp_gemm(void* dinp, const void* dout, const void* weight, int N, int C, int OC) {
    Gemm g(C, N, OC, {weight, C, 0, false}, {dout, OC, 0, false}, {dinp, C, 0});
    g.beta = 1.f;
    return g;
}
/// dweight (OC, C) += dout^T @ inp:  dweight^T (C, OC) += inp stored (C, N) @ (dout stored (OC, N))^T.
inline Gemm matmul_dweight_gemm(void* dweight, const void* dout, const void* inp, int N, int C, int OC) {
    Gemm g(C, OC, N, {inp, C, 0, false}, {dout, OC, 0, true}, {dweight, C, 0});
    g.beta = 1.f;
    return g;
}

// ---- attention: qkv (B, T, 3C), att (B, NH, T, T), one product per batch element ---------
//
// Head h of batch element b lives in qkv at b*T*3C + h*hs (+ C for k, + 2C for v) with
// row stride 3C, so one strided-batched product (batch NH, stride hs) covers all heads of
// b without permute copies. The pointers below are already offset to batch element b:
// qkv_b = qkv + b*T*3C, out_b / dout_b = + b*T*C, att_b = att + b*NH*T*T.

struct AttentionDims {
    int T;
    int C;
    int NH;
    int hs;       ///< head size C / NH
    int64_t C3;   ///< qkv row stride
    int64_t tt;   ///< T * T, one head's scores
    float scale;  ///< 1 / sqrt(hs)
};
inline AttentionDims attention_dims(int T, int C, int NH) {
    ZT_REQUIRE(NH > 0 && C % NH == 0, "attention: C=", C, " is not divisible by NH=", NH);
    const int hs = C / NH;
    return {T, C, NH, hs, 3 * static_cast<int64_t>(C), static_cast<int64_t>(T) * T,
            1.f / std::sqrt(static_cast<float>(hs))};
}
inline Gemm heads_gemm(const AttentionDims& d, int m, int n, int k, Operand a, Operand b, Output o, float alpha,
                       float beta) {
    Gemm g(m, n, k, a, b, o);
    g.batch = d.NH;
    g.alpha = alpha;
    g.beta = beta;
    return g;
}
/// S (T, T) = scale * Q K^T:  S^T = (K stored (hs, T))^T @ Q stored (hs, T).
inline Gemm attention_scores_gemm(const AttentionDims& d, float* att_b, const float* qkv_b) {
    return heads_gemm(d, d.T, d.T, d.hs, {qkv_b + d.C, d.C3, d.hs, true}, {qkv_b, d.C3, d.hs, false},
                      {att_b, d.T, d.tt}, d.scale, 0.f);
}
/// O (T, hs) = P V:  O^T (hs, T) = V stored (hs, T) @ P stored (T, T) (which is P^T).
inline Gemm attention_out_gemm(const AttentionDims& d, float* out_b, const float* att_b, const float* qkv_b) {
    return heads_gemm(d, d.hs, d.T, d.T, {qkv_b + 2 * d.C, d.C3, d.hs, false}, {att_b, d.T, d.tt, false},
                      {out_b, d.C, d.hs}, 1.f, 0.f);
}
/// dP (T, T) = dO V^T:  dP^T = (V stored (hs, T))^T @ dO stored (hs, T).
inline Gemm attention_dp_gemm(const AttentionDims& d, float* dp, const float* dout_b, const float* qkv_b) {
    return heads_gemm(d, d.T, d.T, d.hs, {qkv_b + 2 * d.C, d.C3, d.hs, true}, {dout_b, d.C, d.hs, false},
                      {dp, d.T, d.tt}, 1.f, 0.f);
}
/// dV (T, hs) += P^T dO:  dV^T = dO stored (hs, T) @ (P stored (T, T))^T.
inline Gemm attention_dv_gemm(const AttentionDims& d, float* dqkv_b, const float* dout_b, const float* p) {
    return heads_gemm(d, d.hs, d.T, d.T, {dout_b, d.C, d.hs, false}, {p, d.T, d.tt, true},
                      {dqkv_b + 2 * d.C, d.C3, d.hs}, 1.f, 1.f);
}
/// dQ (T, hs) += scale * dS K:  dQ^T = K stored (hs, T) @ dS stored (which is dS^T).
inline Gemm attention_dq_gemm(const AttentionDims& d, float* dqkv_b, const float* qkv_b, const float* ds) {
    return heads_gemm(d, d.hs, d.T, d.T, {qkv_b + d.C, d.C3, d.hs, false}, {ds, d.T, d.tt, false},
                      {dqkv_b, d.C3, d.hs}, d.scale, 1.f);
}
/// dK (T, hs) += scale * dS^T Q:  dK^T = Q stored (hs, T) @ (dS stored)^T.
inline Gemm attention_dk_gemm(const AttentionDims& d, float* dqkv_b, const float* qkv_b, const float* ds) {
    return heads_gemm(d, d.hs, d.T, d.T, {qkv_b, d.C3, d.hs, false}, {ds, d.T, d.tt, true},
                      {dqkv_b + d.C, d.C3, d.hs}, d.scale, 1.f);
}

}  // namespace zt::cuda
