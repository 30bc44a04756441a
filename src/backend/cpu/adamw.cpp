// AdamW: one element-wise update per parameter, over one buffer or over many spans in one
// OpenMP region; a span's 16-bit gradient is widened and its 16-bit working copy written in
// the same pass (no fp32 copy of either).
#include "cpu_common.hpp"
#include "ops.hpp"
#include "ztrain/backend/adamw_constants.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace zt::cpu {
namespace {

ZT_MAP_CLONES
void adamw_kernel(float* __restrict param, float* __restrict m, float* __restrict v,
                  const float* __restrict grad, size_t n, AdamWConstants k) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = grad[i] * k.grad_scale;
        const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g;
        const float vi = k.beta2 * v[i] + k.one_minus_beta2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi * k.inv_bc1;
        const float vhat = vi * k.inv_bc2;
        const float denom = sqrt_approx(vhat) + k.eps;  // vhat >= 0 by construction
        const float p = param[i];
        param[i] = p - k.lr * (mhat / denom + k.weight_decay * p);
    }
}

/// Elements [b, e) of one span: fp32 gradients and no working copy straight through the
/// kernel; otherwise blocks of kTypedBlock, the gradient widened and the updated master
/// narrowed into the working copy on the stack (element-wise: the same values as a cast
/// before and after).
void adamw_span_range(const AdamWSpan& sp, size_t b, size_t e, const AdamWConstants& k) {
    if (sp.grad.f32() && sp.work.data == nullptr) {
        adamw_kernel(sp.param + b, sp.m + b, sp.v + b, sp.grad.as_f32() + b, e - b, k);
        return;
    }
    float g[kTypedBlock];
    for (size_t i = b; i < e; i += kTypedBlock) {
        const size_t n = std::min(kTypedBlock, e - i);
        const float* gi = g;
        if (sp.grad.f32()) {
            gi = sp.grad.as_f32() + i;
        } else {
            widen(sp.grad, i, n, g);
        }
        adamw_kernel(sp.param + i, sp.m + i, sp.v + i, gi, n, k);
        if (sp.work.data != nullptr) narrow(sp.param + i, sp.work, i, n);
    }
}

}  // namespace

void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step, int threads) {
    const AdamWConstants k = adamw_constants(step);
    AdamWConstants k_no_decay = k;
    k_no_decay.weight_decay = 0.f;
    size_t total_n = 0;
    for (size_t i = 0; i < count; ++i) {
        total_n += spans[i].n;
    }
    // One region for all spans (see sum_squares_spans); element-wise, so any split
    // gives the same result.
#pragma omp parallel num_threads(threads) if (total_n >= kParallelMinElements)
    {
        const int part = omp_get_thread_num();
        const int parts = omp_get_num_threads();
        for (size_t i = 0; i < count; ++i) {
            const AdamWSpan& sp = spans[i];
            size_t b = 0;
            size_t e = 0;
            split_range(sp.n, part, parts, 16, &b, &e);
            if (e > b) adamw_span_range(sp, b, e, sp.decay ? k : k_no_decay);
        }
    }
}

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, const AdamWStep& step,
                  int threads) {
    const AdamWConstants k = adamw_constants(step);
    parallel_chunks(n, threads, [&](size_t b, size_t e) {
        adamw_kernel(param + b, m + b, v + b, grad + b, e - b, k);
    });
}

}  // namespace zt::cpu
