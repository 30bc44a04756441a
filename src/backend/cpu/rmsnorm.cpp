// RMSNorm (Llama): forward per row, backward per row for dinp and per channel slab for
// dweight.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
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
ZT_MAP_CLONES
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

void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C, float eps,
                     int threads) {
    const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
    const size_t c = static_cast<size_t>(C);
    const bool f32 = out.f32() && inp.f32();
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * c;
        if (f32) {
            rstd[r] = rmsnorm_row_kernel(out.as_f32() + off, inp.as_f32() + off, weight, C, eps);
            continue;
        }
        float* x = thread_rows(2 * c);
        widen(inp, off, c, x);
        rstd[r] = rmsnorm_row_kernel(x + c, x, weight, C, eps);
        narrow(x + c, out, off, c);
    }
}

void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                      const float* rstd, int N, int C, int threads) {
    const size_t c = static_cast<size_t>(C);
    const bool f32 = dinp.f32() && dout.f32() && inp.f32();
    // Channel slabs walking every row for dweight, as layernorm_backward's parameter
    // gradients; typed, the same kernels on widened rows and slabs, in the same order.
    auto rows = [&](int r, size_t off) {
        if (f32) {
            rmsnorm_dinp_row_kernel(dinp.as_f32() + off, dout.as_f32() + off, inp.as_f32() + off, weight, rstd[r], C);
            return;
        }
        float* b = thread_rows(3 * c);
        widen(dinp, off, c, b);
        widen(dout, off, c, b + c);
        widen(inp, off, c, b + 2 * c);
        rmsnorm_dinp_row_kernel(b, b + c, b + 2 * c, weight, rstd[r], C);
        narrow(b, dinp, off, c);
    };
    auto slabs = [&](int c0, int c1) {
        if (dout.f32() && inp.f32()) {
            rmsnorm_dweight_kernel(dweight, dout.as_f32(), inp.as_f32(), rstd, N, C, c0, c1);
            return;
        }
        widened_slab_rows(dout, inp, N, C, c0, c1, [&](const float* d, const float* x, int r0, int k, int w) {
            rmsnorm_dweight_kernel(dweight + c0, d, x, rstd + r0, k, w, 0, w);
        });
    };
    rows_and_channel_slabs(N, C, threads, dinp.data != nullptr, dweight != nullptr, rows, slabs);
}

}  // namespace zt::cpu

namespace zt::cpu {

// Qwen3's q and k head norms: the RMSNorm row kernels on each head (hs channels) of a qkv
// row, q heads with q_weight, k heads with k_weight; v passes through. Rows run in parallel;
// the weight gradients sum rows and heads serially, in row order (deterministic).

void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int hs, float eps, int threads) {
    const int heads = NH + NKV;
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * static_cast<size_t>(hs);
    const size_t h = static_cast<size_t>(hs);
    const bool parallel = static_cast<size_t>(N) * row >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * row;
        float* x = thread_rows(2 * row);
        widen(inp, off, row, x);
        float* y = x + row;
        for (int k = 0; k < heads; ++k) {
            const size_t at = static_cast<size_t>(k) * h;
            rstd[static_cast<size_t>(r) * heads + k] =
                rmsnorm_row_kernel(y + at, x + at, k < NH ? q_weight : k_weight, hs, eps);
        }
        const size_t v = static_cast<size_t>(heads) * h;
        std::copy(x + v, x + row, y + v);
        narrow(y, out, off, row);
    }
}

void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                      const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV, int hs,
                      int threads) {
    const int heads = NH + NKV;
    const size_t row = static_cast<size_t>(NH + 2 * NKV) * static_cast<size_t>(hs);
    const size_t h = static_cast<size_t>(hs);
    const bool parallel = static_cast<size_t>(N) * row >= kRowOpMinElements;
    if (dinp.data != nullptr) {
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            const size_t off = static_cast<size_t>(r) * row;
            float* b = thread_rows(3 * row);
            float* di = b;
            float* d = b + row;
            float* x = b + 2 * row;
            widen(dinp, off, row, di);
            widen(dout, off, row, d);
            widen(inp, off, row, x);
            for (int k = 0; k < heads; ++k) {
                const size_t at = static_cast<size_t>(k) * h;
                rmsnorm_dinp_row_kernel(di + at, d + at, x + at, k < NH ? q_weight : k_weight,
                                        rstd[static_cast<size_t>(r) * heads + k], hs);
            }
            const size_t v = static_cast<size_t>(heads) * h;
            add_kernel(di + v, di + v, d + v, row - v);
            narrow(di, dinp, off, row);
        }
    }
    if (dq_weight == nullptr && dk_weight == nullptr) return;
    float* b = thread_rows(2 * row);
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * row;
        widen(dout, off, row, b);
        widen(inp, off, row, b + row);
        for (int k = 0; k < heads; ++k) {
            float* dw = k < NH ? dq_weight : dk_weight;
            if (dw == nullptr) continue;
            const size_t at = static_cast<size_t>(k) * h;
            rmsnorm_dweight_kernel(dw, b + at, b + row + at, rstd + static_cast<size_t>(r) * heads + k, 1, hs, 0, hs);
        }
    }
}

}  // namespace zt::cpu
