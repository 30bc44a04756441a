// Muon's three passes (torch.optim.Muon): the momentum over a matrix's elements, the
// Newton-Schulz orthogonalization of the whole matrix (three products per iteration, on
// the short side's Gram matrix), and the decayed update.
#include "cpu_common.hpp"
#include "ops.hpp"
#include "ztrain/backend/newton_schulz.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

namespace zt::cpu {
namespace {

ZT_VEC_CLONES
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

ZT_VEC_CLONES
void apply_kernel(float* __restrict param, const float* __restrict update, size_t n, float keep, float rate) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) param[i] = param[i] * keep - rate * update[i];
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

void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work, int threads) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    double ss = 0.0;
#pragma omp parallel for num_threads(threads) reduction(+ : ss) if (numel >= kParallelMinElements)
    for (size_t i = 0; i < numel; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = 1.f / std::max(static_cast<float>(std::sqrt(ss)), step.eps);
    parallel_chunks(numel, threads, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) x[i] *= inv;
    });
    newton_schulz_iterations(
        x, rows, cols, step, work,
        [threads](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
                  float beta, float* C, int ldc) { gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threads); },
        [](float* dst, const float* src, size_t n) { std::memcpy(dst, src, n * sizeof(float)); });
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
