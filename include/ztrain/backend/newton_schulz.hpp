// The iterations of Backend::newton_schulz, shared by the CPU and CUDA backends: each
// supplies its row-major product and copy, so both run the same three products per step.
#pragma once

#include <cstddef>
#include <utility>

#include "ztrain/backend/backend.hpp"

namespace zt {

/// s.ns_steps iterations on x (rows, cols), already divided by its norm, with
/// gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) (C = alpha op(A)
/// op(B) + beta C, row-major) and copy(dst, src, floats). The Gram matrix is the short side's:
/// X X^T (k = rows) with the update on the left, or X^T X (k = cols) on the right, the same as
/// torch's transpose, iterate, transpose back. work: newton_schulz_work_floats(rows, cols).
template <class Gemm, class Copy>
void newton_schulz_iterations(float* x, int rows, int cols, const MuonStep& s, float* work, Gemm&& gemm, Copy&& copy) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    const bool left = rows <= cols;
    const int k = left ? rows : cols;
    const size_t gram = static_cast<size_t>(k) * static_cast<size_t>(k);
    float* X = x;
    float* Y = work;
    float* A = work + numel;
    float* B = A + gram;
    for (int it = 0; it < s.ns_steps; ++it) {
        if (left) {
            gemm(false, true, k, k, cols, 1.f, X, cols, X, cols, 0.f, A, k);
        } else {
            gemm(true, false, k, k, rows, 1.f, X, cols, X, cols, 0.f, A, k);
        }
        copy(B, A, gram);
        gemm(false, false, k, k, k, s.c, A, k, A, k, s.b, B, k);  // B = b A + c A A
        copy(Y, X, numel);
        if (left) {
            gemm(false, false, rows, cols, rows, 1.f, B, k, X, cols, s.a, Y, cols);  // a X + B X
        } else {
            gemm(false, false, rows, cols, cols, 1.f, X, cols, B, k, s.a, Y, cols);  // a X + X B
        }
        std::swap(X, Y);
    }
    if (X != x) copy(x, X, numel);
}

}  // namespace zt
