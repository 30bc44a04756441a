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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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
/// D (m, n) = alpha * op(A) (m, k) @ op(B) (k, n) + beta * C [+ bias (m)] [then GELU], with
/// C = D unless `c` is set. A and B are stored in `dtype`, C and D in `out_dtype` (either
/// `dtype` or fp32), the bias in `bias_dtype`; accumulation is fp32 and D is rounded once.
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
    DType dtype = DType::kF32;      ///< of A and B
    DType out_dtype = DType::kF32;  ///< of C and D
    const void* bias = nullptr;     ///< (m)
    DType bias_dtype = DType::kF32;
    bool gelu = false;
    void* gelu_aux = nullptr;  ///< pre-GELU values (m, n), ld = d.ld, out_dtype; needs gelu
    /// C when it is not D (d's layout, read with beta): a residual added before D is rounded.
    /// cuBLASLt only (gemm_lt): the classic fallback accumulates into D itself.
    const void* c = nullptr;
};

/// Every operand of g in t (A, B, C/D and the bias): a product entirely in one dtype.
inline void set_dtype(Gemm& g, DType t) {
    g.dtype = t;
    g.out_dtype = t;
    g.bias_dtype = t;
}

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

// ---- attention: qkv (B, T, (NH + 2 NKV) hs), att (B, NH, T, T), per batch element ------
//
// A qkv row is [q: NH*hs | k: NKV*hs | v: NKV*hs] (GPT-2: NKV = NH, so 3C with C = NH*hs).
// Query head h of batch element b lives in qkv at b*T*W + h*hs with row stride W, and reads
// key/value head h / G (G = NH / NKV) at k_off + (h / G)*hs and v_off + (h / G)*hs. The
// query heads h = j*G + g of one "group position" g (j = 0..NKV-1) are one strided-batched
// product (batch NKV: query/att/out strides G heads, k/v strides one head), so the products
// below take g and attention.cu issues G of each; with G = 1 (GPT-2) that is one product of
// batch NH, stride hs, as before GQA. The pointers are already offset to batch element b:
// qkv_b = qkv + b*T*W, out_b / dout_b = + b*T*O, att_b = att + b*NH*T*T.

struct AttentionDims {
    int T;
    int NH;         ///< query heads
    int NKV;        ///< key/value heads
    int hs;         ///< head size
    int G;          ///< query heads per key/value head, NH / NKV
    int64_t W;      ///< qkv row stride (NH + 2 NKV) hs
    int64_t O;      ///< out row stride NH hs
    int64_t k_off;  ///< start of k in a qkv row, NH hs
    int64_t v_off;  ///< start of v in a qkv row, (NH + NKV) hs
    int64_t tt;     ///< T * T, one head's scores
    float scale;    ///< 1 / sqrt(hs)
};
inline AttentionDims gqa_attention_dims(int T, int NH, int NKV, int hs) {
    ZT_REQUIRE(NH > 0 && NKV > 0 && NH % NKV == 0, "attention: NKV=", NKV, " key/value heads must divide NH=", NH,
               " query heads");
    ZT_REQUIRE(hs > 0, "attention: head size ", hs, " must be positive");
    const int64_t h = hs;
    return {T, NH, NKV, hs, NH / NKV, (NH + 2 * NKV) * h, NH * h, NH * h, (NH + NKV) * h,
            static_cast<int64_t>(T) * T, 1.f / std::sqrt(static_cast<float>(hs))};
}
/// GPT-2's multi-head attention: NKV = NH, hs = C / NH.
inline AttentionDims attention_dims(int T, int C, int NH) {
    ZT_REQUIRE(NH > 0 && C % NH == 0, "attention: C=", C, " is not divisible by NH=", NH);
    return gqa_attention_dims(T, NH, NH, C / NH);
}
inline Gemm heads_gemm(const AttentionDims& d, int m, int n, int k, Operand a, Operand b, Output o, float alpha,
                       float beta) {
    Gemm g(m, n, k, a, b, o);
    g.batch = d.NKV;
    g.alpha = alpha;
    g.beta = beta;
    return g;
}
/// Operands of group position g: query-side (q, dq, out, dout: G heads apart), score-side
/// (att, dP/dS: G heads' scores apart) and key/value-side (k, v, dk, dv: one head apart).
inline int64_t query_offset(const AttentionDims& d, int g) { return static_cast<int64_t>(g) * d.hs; }
inline int64_t query_stride(const AttentionDims& d) { return static_cast<int64_t>(d.G) * d.hs; }
inline int64_t score_offset(const AttentionDims& d, int g) { return static_cast<int64_t>(g) * d.tt; }
inline int64_t score_stride(const AttentionDims& d) { return static_cast<int64_t>(d.G) * d.tt; }

/// The scores a product computes: query rows [q0, q1) against keys [k0, q1) (causal: no key
/// after the block's last query). The whole square is {0, T, 0}; a segmented forward (packed
/// examples, a sliding window) takes one band per block of queries, from the first key any of
/// them attends to (score_bands), so a window of w costs O(T (w + block)), not O(T^2).
struct ScoreBand {
    int q0 = 0;
    int q1 = 0;
    int k0 = 0;
    int queries() const { return q1 - q0; }
    int keys() const { return q1 - k0; }
};
inline ScoreBand whole_scores(const AttentionDims& d) { return {0, d.T, 0}; }
// Each product below takes the group position g and the band (whole_scores: plain causal).

/// One batch element's bands: blocks of `block` queries, each from the smallest attend_from
/// (host memory, T values, each in [0, t]) of its rows.
inline std::vector<ScoreBand> score_bands(const int32_t* attend_from, int T, int block) {
    ZT_REQUIRE(block > 0, "score_bands: block ", block);
    std::vector<ScoreBand> bands;
    for (int q0 = 0; q0 < T; q0 += block) {
        ScoreBand b{q0, std::min(T, q0 + block), q0};
        for (int t = b.q0; t < b.q1; ++t) b.k0 = std::min(b.k0, static_cast<int>(attend_from[t]));
        bands.push_back(b);
    }
    return bands;
}

/// Offsets into one batch element's buffers of a band: its first query row of qkv / dqkv
/// (row stride W), of out / dout (O), its first key row of qkv (W), and its top-left score.
inline int64_t query_row(const AttentionDims& d, const ScoreBand& b) { return static_cast<int64_t>(b.q0) * d.W; }
inline int64_t out_row(const AttentionDims& d, const ScoreBand& b) { return static_cast<int64_t>(b.q0) * d.O; }
inline int64_t key_row(const AttentionDims& d, const ScoreBand& b) { return static_cast<int64_t>(b.k0) * d.W; }
inline int64_t score_at(const AttentionDims& d, const ScoreBand& b) {
    return static_cast<int64_t>(b.q0) * d.T + b.k0;
}

/// S (T, T) = scale * Q K^T:  S^T = (K stored (hs, T))^T @ Q stored (hs, T). A band: its
/// keys (m) by its queries (n), at its score offset (ld T).
inline Gemm attention_scores_gemm(const AttentionDims& d, float* att_b, const float* qkv_b, int g,
                                  const ScoreBand& b) {
    return heads_gemm(d, b.keys(), b.queries(), d.hs, {qkv_b + d.k_off + key_row(d, b), d.W, d.hs, true},
                      {qkv_b + query_offset(d, g) + query_row(d, b), d.W, query_stride(d), false},
                      {att_b + score_offset(d, g) + score_at(d, b), d.T, score_stride(d)}, d.scale, 0.f);
}
/// O (T, hs) = P V:  O^T (hs, T) = V stored (hs, T) @ P stored (T, T) (which is P^T). A band
/// writes its queries' rows from its keys.
inline Gemm attention_out_gemm(const AttentionDims& d, float* out_b, const float* att_b, const float* qkv_b, int g,
                               const ScoreBand& b) {
    return heads_gemm(d, d.hs, b.queries(), b.keys(), {qkv_b + d.v_off + key_row(d, b), d.W, d.hs, false},
                      {att_b + score_offset(d, g) + score_at(d, b), d.T, score_stride(d), false},
                      {out_b + query_offset(d, g) + out_row(d, b), d.O, query_stride(d)}, 1.f, 0.f);
}
/// dP (T, T) = dO V^T:  dP^T = (V stored (hs, T))^T @ dO stored (hs, T).
inline Gemm attention_dp_gemm(const AttentionDims& d, float* dp, const float* dout_b, const float* qkv_b, int g,
                              const ScoreBand& b) {
    return heads_gemm(d, b.keys(), b.queries(), d.hs, {qkv_b + d.v_off + key_row(d, b), d.W, d.hs, true},
                      {dout_b + query_offset(d, g) + out_row(d, b), d.O, query_stride(d), false},
                      {dp + score_offset(d, g) + score_at(d, b), d.T, score_stride(d)}, 1.f, 0.f);
}
/// dV (T, hs) += P^T dO:  dV^T = dO stored (hs, T) @ (P stored (T, T))^T. The G products of
/// a batch element (and a segmented backward's bands, whose keys overlap) accumulate into
/// the same dV in order (beta 1): deterministic.
inline Gemm attention_dv_gemm(const AttentionDims& d, float* dqkv_b, const float* dout_b, const float* p, int g,
                              const ScoreBand& b) {
    return heads_gemm(d, d.hs, b.keys(), b.queries(),
                      {dout_b + query_offset(d, g) + out_row(d, b), d.O, query_stride(d), false},
                      {p + score_offset(d, g) + score_at(d, b), d.T, score_stride(d), true},
                      {dqkv_b + d.v_off + key_row(d, b), d.W, d.hs}, 1.f, 1.f);
}
/// dQ (T, hs) += scale * dS K:  dQ^T = K stored (hs, T) @ dS stored (which is dS^T).
inline Gemm attention_dq_gemm(const AttentionDims& d, float* dqkv_b, const float* qkv_b, const float* ds, int g,
                              const ScoreBand& b) {
    return heads_gemm(d, d.hs, b.queries(), b.keys(), {qkv_b + d.k_off + key_row(d, b), d.W, d.hs, false},
                      {ds + score_offset(d, g) + score_at(d, b), d.T, score_stride(d), false},
                      {dqkv_b + query_offset(d, g) + query_row(d, b), d.W, query_stride(d)}, d.scale, 1.f);
}
/// dK (T, hs) += scale * dS^T Q:  dK^T = Q stored (hs, T) @ (dS stored)^T (accumulated over
/// the G group positions and the bands in order, as dV).
inline Gemm attention_dk_gemm(const AttentionDims& d, float* dqkv_b, const float* qkv_b, const float* ds, int g,
                              const ScoreBand& b) {
    return heads_gemm(d, d.hs, b.keys(), b.queries(),
                      {qkv_b + query_offset(d, g) + query_row(d, b), d.W, query_stride(d), false},
                      {ds + score_offset(d, g) + score_at(d, b), d.T, score_stride(d), true},
                      {dqkv_b + d.k_off + key_row(d, b), d.W, d.hs}, d.scale, 1.f);
}

}  // namespace zt::cuda
