// layernorm: forward per row, backward per row for dinp and per channel slab for the
// parameter gradients.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace zt::cpu {
namespace {

constexpr float kLayerNormEps = 1e-5f;

ZT_VEC_CLONES
void layernorm_row_kernel(float* __restrict out, float* mean_out, float* rstd_out,
                          const float* __restrict x, const float* __restrict w,
                          const float* __restrict b, int C) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < C; ++i) {
        sum += x[i];
    }
    const float mean = sum / static_cast<float>(C);
    // Two-pass variance: no cancellation when |mean| >> std.
    float var = 0.f;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; ++i) {
        const float d = x[i] - mean;
        var += d * d;
    }
    const float rstd = 1.f / std::sqrt(var / static_cast<float>(C) + kLayerNormEps);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

/// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = dout * w.
ZT_VEC_CLONES
void layernorm_dinp_row_kernel(float* __restrict dinp, const float* __restrict dout,
                               const float* __restrict x, const float* __restrict w, float mean,
                               float rstd, int C) {
    float sum_dnorm = 0.f;
    float sum_dnorm_norm = 0.f;
#pragma omp simd reduction(+ : sum_dnorm, sum_dnorm_norm)
    for (int i = 0; i < C; ++i) {
        const float norm = (x[i] - mean) * rstd;
        const float dnorm = dout[i] * w[i];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * norm;
    }
    const float mean_dnorm = sum_dnorm / static_cast<float>(C);
    const float mean_dnorm_norm = sum_dnorm_norm / static_cast<float>(C);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        const float norm = (x[i] - mean) * rstd;
        const float dnorm = dout[i] * w[i];
        dinp[i] += (dnorm - mean_dnorm - norm * mean_dnorm_norm) * rstd;
    }
}

/// dweight[c] += sum_r dout[r, c] * norm[r, c]; dbias[c] += sum_r dout[r, c], c in [c0, c1).
ZT_MAP_CLONES
void layernorm_param_kernel(float* __restrict dweight, float* __restrict dbias,
                            const float* __restrict dout, const float* __restrict inp,
                            const float* __restrict mean, const float* __restrict rstd, int N,
                            int C, int c0, int c1) {
    for (int r = 0; r < N; ++r) {
        const float* d = dout + static_cast<size_t>(r) * C;
        const float* x = inp + static_cast<size_t>(r) * C;
        const float m = mean[r];
        const float s = rstd[r];
        if (dweight != nullptr) {
#pragma omp simd
            for (int c = c0; c < c1; ++c) {
                dweight[c] += d[c] * ((x[c] - m) * s);
            }
        }
        if (dbias != nullptr) {
#pragma omp simd
            for (int c = c0; c < c1; ++c) {
                dbias[c] += d[c];
            }
        }
    }
}

}  // namespace

void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight, const float* bias,
                       int N, int C, int threads) {
    const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
    const size_t c = static_cast<size_t>(C);
    const bool f32 = out.f32() && inp.f32();
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * c;
        if (f32) {
            layernorm_row_kernel(out.as_f32() + off, mean + r, rstd + r, inp.as_f32() + off, weight, bias, C);
            continue;
        }
        float* x = thread_rows(2 * c);
        widen(inp, off, c, x);
        layernorm_row_kernel(x + c, mean + r, rstd + r, x, weight, bias, C);
        narrow(x + c, out, off, c);
    }
}

void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, int threads) {
    const size_t c = static_cast<size_t>(C);
    const bool f32 = dinp.f32() && dout.f32() && inp.f32();
    // dinp: rows are independent. dweight/dbias sum over rows, per channel slab. Typed: the
    // same kernels on widened rows (and widened slabs of kTypedSlabRows rows), in the same
    // order, so the sums are the fp32 path's.
    auto rows = [&](int r, size_t off) {
        if (f32) {
            layernorm_dinp_row_kernel(dinp.as_f32() + off, dout.as_f32() + off, inp.as_f32() + off, weight, mean[r],
                                      rstd[r], C);
            return;
        }
        float* b = thread_rows(3 * c);
        widen(dinp, off, c, b);
        widen(dout, off, c, b + c);
        widen(inp, off, c, b + 2 * c);
        layernorm_dinp_row_kernel(b, b + c, b + 2 * c, weight, mean[r], rstd[r], C);
        narrow(b, dinp, off, c);
    };
    auto slabs = [&](int c0, int c1) {
        if (dout.f32() && inp.f32()) {
            layernorm_param_kernel(dweight, dbias, dout.as_f32(), inp.as_f32(), mean, rstd, N, C, c0, c1);
            return;
        }
        widened_slab_rows(dout, inp, N, C, c0, c1, [&](const float* d, const float* x, int r0, int k, int w) {
            layernorm_param_kernel(dweight != nullptr ? dweight + c0 : nullptr, dbias != nullptr ? dbias + c0 : nullptr,
                                   d, x, mean + r0, rstd + r0, k, w, 0, w);
        });
    };
    rows_and_channel_slabs(N, C, threads, dinp.data != nullptr, dweight != nullptr || dbias != nullptr, rows, slabs);
}

}  // namespace zt::cpu
