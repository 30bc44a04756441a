// SwiGLU (Llama): out = silu(gate) * up over rows [gate (F) | up (F)].
#include "cpu_common.hpp"
#include "ops.hpp"

#include <cstddef>

namespace zt::cpu {
namespace {

/// out (n) = silu(gate) * up, silu(x) = x * sigmoid(x).
ZT_VEC_CLONES
void swiglu_forward_kernel(float* __restrict out, const float* __restrict gate, const float* __restrict up,
                           size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g * sigmoid_approx(g) * up[i];
    }
}

/// dgate += dout * up * silu'(gate), dup += dout * silu(gate); silu'(x) = s * (1 + x * (1 - s)).
ZT_VEC_CLONES
void swiglu_backward_kernel(float* __restrict dgate, float* __restrict dup, const float* __restrict gate,
                            const float* __restrict up, const float* __restrict dout, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float s = sigmoid_approx(g);
        dgate[i] += dout[i] * up[i] * (s * (1.f + g * (1.f - s)));
        dup[i] += dout[i] * (g * s);
    }
}

}  // namespace

void swiglu_forward(float* out, const float* inp, int N, int F, int threads) {
    const bool parallel = static_cast<size_t>(N) * F >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const float* gate = inp + static_cast<size_t>(r) * 2 * F;
        swiglu_forward_kernel(out + static_cast<size_t>(r) * F, gate, gate + F, static_cast<size_t>(F));
    }
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F, int threads) {
    const bool parallel = static_cast<size_t>(N) * F >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * 2 * F;
        swiglu_backward_kernel(dinp + off, dinp + off + F, inp + off, inp + off + F,
                               dout + static_cast<size_t>(r) * F, static_cast<size_t>(F));
    }
}

}  // namespace zt::cpu
