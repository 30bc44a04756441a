// RMSNorm (Llama): forward per row, backward per row for dinp and per channel slab for
// dweight.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <cmath>
#include <cstddef>

namespace zt::cpu {
namespace {

/// One RMSNorm row: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); returns rstd.
ZT_VEC_CLONES
float rmsnorm_row_kernel(float* __restrict out, const float* __restrict x, const float* __restrict w, int C,
                         float eps) {
    float sum_sq = 0.f;
#pragma omp simd reduction(+ : sum_sq)
    for (int i = 0; i < C; ++i) {
        sum_sq += x[i] * x[i];
    }
    const float rstd = 1.f / std::sqrt(sum_sq / static_cast<float>(C) + eps);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        out[i] = x[i] * rstd * w[i];
    }
    return rstd;
}

/// dinp += rstd * (dout * w - x * rstd^2 * mean(dout * w * x)): out = x * r(x) * w with
/// dr/dx_j = -r^3 x_j / C.
ZT_VEC_CLONES
void rmsnorm_dinp_row_kernel(float* __restrict dinp, const float* __restrict dout, const float* __restrict x,
                             const float* __restrict w, float rstd, int C) {
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < C; ++i) {
        dot += dout[i] * w[i] * x[i];
    }
    const float coef = rstd * rstd * dot / static_cast<float>(C);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        dinp[i] += rstd * (dout[i] * w[i] - x[i] * coef);
    }
}

/// dweight[c] += sum_r dout[r, c] * inp[r, c] * rstd[r] for c in [c0, c1).
ZT_VEC_CLONES
void rmsnorm_dweight_kernel(float* __restrict dweight, const float* __restrict dout, const float* __restrict inp,
                            const float* __restrict rstd, int N, int C, int c0, int c1) {
    for (int r = 0; r < N; ++r) {
        const float* d = dout + static_cast<size_t>(r) * C;
        const float* x = inp + static_cast<size_t>(r) * C;
        const float s = rstd[r];
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
            dweight[c] += d[c] * (x[c] * s);
        }
    }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps,
                     int threads) {
    const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * C;
        rstd[r] = rmsnorm_row_kernel(out + off, inp + off, weight, C, eps);
    }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, int threads) {
    // Channel slabs walking every row for dweight, as layernorm_backward's parameter gradients.
    rows_and_channel_slabs(
        N, C, threads, dinp != nullptr, dweight != nullptr,
        [&](int r, size_t off) { rmsnorm_dinp_row_kernel(dinp + off, dout + off, inp + off, weight, rstd[r], C); },
        [&](int c0, int c1) { rmsnorm_dweight_kernel(dweight, dout, inp, rstd, N, C, c0, c1); });
}

}  // namespace zt::cpu
