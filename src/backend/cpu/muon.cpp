// Muon's three passes (torch.optim.Muon): the momentum over a matrix's elements, the
// Newton-Schulz orthogonalization of the whole matrix, and the decayed update.
//
// Each Newton-Schulz iteration is X <- a X + (b A + c A A) X with A = X X^T, the Gram matrix
// of the short side (k rows of a k x n X, or X^T X on the right of a tall one). A and B =
// b A + c A A are symmetric, so the iteration takes syrk for A and A A (half a product each)
// and symm for B X: 3 k^2 n + k^3 multiply-adds where three general products take
// 4 k^2 n + 2 k^3 (torch.optim.Muon's), 1.3 to 1.5x fewer. With bf16 operands (MuonStep::
// ns_bf16) a CPU with bf16 products takes oneDNN's general products, which run at about twice
// the fp32 rate; the others take the same syrk and symm on operands rounded to bf16.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace zt::cpu {
namespace {

ZT_MAP_CLONES
void momentum_kernel(float* __restrict m, float* __restrict update, const float* __restrict grad, size_t n,
                     float scale, float momentum, bool nesterov) {
    const float keep = 1.f - momentum;
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = grad[i] * scale;
        const float mi = m[i] + keep * (g - m[i]);
        m[i] = mi;
        update[i] = nesterov ? g + momentum * (mi - g) : mi;
    }
}

/// Edge of band `b` of `parts` over k rows, the bands holding equal shares of the lower
/// triangle (row r has r + 1 elements), at multiples of 16.
int band_edge(int k, int b, int parts) {
    if (b >= parts) return k;
    const int e = static_cast<int>(std::lround(k * std::sqrt(static_cast<double>(b) / parts))) / 16 * 16;
    return std::min(k, e);
}

bool worth_a_team(int threads, int k, int n) { return threads > 1 && static_cast<double>(k) * k * n >= 64.0 * 64 * 64; }

/// The lower triangle of C (k, k) = alpha op(X) op(X)^T + beta C, op(X) the k x n X
/// (trans false) or the transpose of the n x k X (trans true), row length ldx. Each thread
/// takes a band of C's rows: the part left of its diagonal block by sgemm, that block by syrk.
void gram_lower(bool trans, int k, int n, float alpha, const float* X, int ldx, float beta, float* C, int threads) {
#pragma omp parallel num_threads(threads) if (worth_a_team(threads, k, n))
    {
        const int r0 = band_edge(k, omp_get_thread_num(), omp_get_num_threads());
        const int r1 = band_edge(k, omp_get_thread_num() + 1, omp_get_num_threads());
        if (r1 > r0) {
            const float* band = trans ? X + r0 : X + static_cast<size_t>(r0) * ldx;
            float* c = C + static_cast<size_t>(r0) * k;
            sgemm(trans, !trans, r1 - r0, r0, n, alpha, band, ldx, X, ldx, beta, c, k);
            cblas_ssyrk(CblasRowMajor, CblasLower, trans ? CblasTrans : CblasNoTrans, r1 - r0, n, alpha, band, ldx,
                        beta, c + r0, k);
        }
    }
}

/// C's upper triangle from its lower one.
void mirror_lower(float* C, int k, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (worth_a_team(threads, k, 16))
    for (int i = 0; i < k; ++i) {
        for (int j = i + 1; j < k; ++j) C[static_cast<size_t>(i) * k + j] = C[static_cast<size_t>(j) * k + i];
    }
}

/// Y = a Y + B X (left: X, Y k x n) or a Y + X B (right: X, Y n x k), B (k, k) symmetric with
/// its lower triangle set; the team splits Y's columns (left) or rows (right).
void symmetric_update(bool left, int k, int n, const float* B, const float* X, float a, float* Y, int threads) {
#pragma omp parallel num_threads(threads) if (worth_a_team(threads, k, n))
    {
        size_t b = 0;
        size_t e = 0;
        split_range(static_cast<size_t>(n), omp_get_thread_num(), omp_get_num_threads(), 16, &b, &e);
        const int m = static_cast<int>(e - b);
        if (m > 0 && left) {
            cblas_ssymm(CblasRowMajor, CblasLeft, CblasLower, k, m, 1.f, B, k, X + b, n, a, Y + b, n);
        } else if (m > 0) {
            cblas_ssymm(CblasRowMajor, CblasRight, CblasLower, m, k, 1.f, B, k, X + b * k, k, a, Y + b * k, k);
        }
    }
}

ZT_MAP_CLONES
void apply_kernel(float* __restrict param, const float* __restrict update, size_t n, float keep, float rate) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) param[i] = param[i] * keep - rate * update[i];
}

/// dst[0, n) = f * src[0, n) (dst may be src).
void scale_into(float* dst, const float* src, size_t n, float f, int threads) {
    parallel_chunks(n, threads, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) dst[i] = f * src[i];
    });
}

/// x[0, n) rounded to bf16 values (round to nearest even), kept in fp32.
void round_bf16(float* x, size_t n, int threads) {
    parallel_chunks(n, threads, [&](size_t b, size_t e) { round_to(x + b, e - b, DType::kBF16); });
}

/// C (k, k) [+]= alpha op(X) op(X)^T through bf16 products, op(X) the k x n X (trans false)
/// or the transpose of the n x k X, ldx its row length, C's lower triangle and diagonal
/// blocks set (the rest left): oneDNN has no syrk, so each band of about 128 rows is one
/// product with the rows up to the band's end, about 0.6 of the whole product's work.
void gram_lower_bf16(bool trans, int k, int n, float alpha, ConstActPtr X, int ldx, bool accumulate, float* C,
                     Bf16Products& products) {
    const int parts = std::max(1, (k + 64) / 128);
    for (int b = 0; b < parts; ++b) {
        const int r0 = b == 0 ? 0 : k * b / parts / 16 * 16;
        const int r1 = b + 1 == parts ? k : k * (b + 1) / parts / 16 * 16;
        if (r1 <= r0) continue;
        const ConstActPtr band = X.offset(trans ? static_cast<size_t>(r0) : static_cast<size_t>(r0) * ldx);
        products.gemm({trans, !trans, r1 - r0, r1, n, band, ldx, X, ldx, accumulate,
                       ActPtr(C + static_cast<size_t>(r0) * k), k, nullptr, {}, alpha});
    }
}

/// One iteration with bf16 operands through oneDNN's bf16 products (fp32 accumulation): the
/// same operands as the OpenBLAS path's rounded ones, the Gram matrices by bands
/// (gram_lower_bf16) and a general product for B Y. Y holds X's bf16 copy as bf16 storage
/// (half its floats).
void bf16_iteration(float* x, int rows, int cols, const MuonStep& step, float* Y, float* A, float* B,
                    Bf16Products& products, int threads) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    const bool left = rows <= cols;
    const int k = left ? rows : cols;
    const int n = left ? cols : rows;
    const size_t gram = static_cast<size_t>(k) * k;
    const ActPtr y16(Y, DType::kBF16);
    parallel_chunks(numel, threads, [&](size_t b, size_t e) { narrow(x + b, y16, b, e - b); });
    gram_lower_bf16(!left, k, n, 1.f, y16, cols, false, A, products);  // A = Y Y^T, or Y^T Y
    mirror_lower(A, k, threads);
    round_bf16(A, gram, threads);
    scale_into(B, A, gram, step.b, threads);
    gram_lower_bf16(false, k, k, step.c, ConstActPtr(A), k, true, B, products);  // B = b A + c A A (A A^T)
    mirror_lower(B, k, threads);
    round_bf16(B, gram, threads);
    scale_into(x, x, numel, step.a, threads);
    if (left) {
        products.gemm({false, false, rows, cols, rows, ConstActPtr(B), k, y16, cols, true, ActPtr(x), cols, nullptr, {}});
    } else {
        products.gemm({false, false, rows, cols, cols, y16, cols, ConstActPtr(B), k, true, ActPtr(x), cols, nullptr, {}});
    }
}

}  // namespace

void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step, int threads) {
    parallel_blocks(n, threads, [&](size_t at, size_t len) {
        float g[kTypedBlock];
        const float* gi = g;
        if (grad.f32()) {
            gi = grad.as_f32() + at;
        } else {
            widen(grad, at, len, g);
        }
        momentum_kernel(m + at, update + at, gi, len, step.grad_scale, step.momentum, step.nesterov);
    });
}

void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work, int threads,
                   Bf16Products* products) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    const double ss = sum_squares(x, numel, threads);
    scale_into(x, x, numel, 1.f / std::max(static_cast<float>(std::sqrt(ss)), step.eps), threads);
    const bool left = rows <= cols;
    const int k = left ? rows : cols;
    const int n = left ? cols : rows;
    const size_t gram = static_cast<size_t>(k) * k;
    float* Y = work;  // X's operand copy (bf16: rounded)
    float* A = work + numel;
    float* B = A + gram;
    for (int it = 0; it < step.ns_steps; ++it) {
        if (step.ns_bf16 && products != nullptr) {
            bf16_iteration(x, rows, cols, step, Y, A, B, *products, threads);
            continue;
        }
        std::memcpy(Y, x, numel * sizeof(float));
        if (step.ns_bf16) round_bf16(Y, numel, threads);
        gram_lower(!left, k, n, 1.f, Y, cols, 0.f, A, threads);  // A = Y Y^T, or Y^T Y
        mirror_lower(A, k, threads);  // syrk reads A A^T's operand whole
        if (step.ns_bf16) round_bf16(A, gram, threads);
        std::memcpy(B, A, gram * sizeof(float));
        gram_lower(false, k, k, step.c, A, k, step.b, B, threads);  // B = b A + c A A
        if (step.ns_bf16) round_bf16(B, gram, threads);  // symm reads its lower triangle
        symmetric_update(left, k, n, B, Y, step.a, x, threads);  // X = a X + B Y, or a X + Y B
    }
}

void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work, int threads) {
    const float keep = 1.f - decay;
    parallel_chunks(n, threads, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i += kTypedBlock) {
            const size_t len = std::min(kTypedBlock, e - i);
            apply_kernel(param + i, update + i, len, keep, rate);
            if (work.data != nullptr) narrow(param + i, work, i, len);
        }
    });
}

}  // namespace zt::cpu
