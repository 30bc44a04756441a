// SwiGLU (Llama): out = silu(gate) * up over rows [gate (F) | up (F)].
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
#include <cstddef>

namespace zt::cpu {
namespace {

/// out (n) = silu(gate) * up, silu(x) = x * sigmoid(x).
ZT_MAP_CLONES
void swiglu_forward_kernel(float* __restrict out, const float* __restrict gate, const float* __restrict up,
                           size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g * sigmoid_approx(g) * up[i];
    }
}

/// dgate += dout * up * silu'(gate), dup += dout * silu(gate); silu'(x) = s * (1 + x * (1 - s)).
ZT_MAP_CLONES
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

/// fn(r) for every row r < N, on a team when the op is large enough.
template <typename Fn>
void each_row(int N, int F, int threads, Fn&& fn) {
    const bool parallel = static_cast<size_t>(N) * F >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) fn(static_cast<size_t>(r));
}

}  // namespace

void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F, int threads) {
    const size_t f = static_cast<size_t>(F);
    if (out.f32() && inp.f32()) {
        each_row(N, F, threads, [&](size_t r) {
            const float* gate = inp.as_f32() + r * 2 * f;
            swiglu_forward_kernel(out.as_f32() + r * f, gate, gate + f, f);
        });
        return;
    }
    each_row(N, F, threads, [&](size_t r) {
        float gate[kTypedBlock];
        float up[kTypedBlock];
        float y[kTypedBlock];
        for (size_t j = 0; j < f; j += kTypedBlock) {
            const size_t m = std::min(kTypedBlock, f - j);
            widen(inp, r * 2 * f + j, m, gate);
            widen(inp, r * 2 * f + f + j, m, up);
            swiglu_forward_kernel(y, gate, up, m);
            narrow(y, out, r * f + j, m);
        }
    });
}

void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F, int threads) {
    const size_t f = static_cast<size_t>(F);
    if (dinp.f32() && inp.f32() && dout.f32()) {
        each_row(N, F, threads, [&](size_t r) {
            float* d = dinp.as_f32() + r * 2 * f;
            const float* x = inp.as_f32() + r * 2 * f;
            swiglu_backward_kernel(d, d + f, x, x + f, dout.as_f32() + r * f, f);
        });
        return;
    }
    each_row(N, F, threads, [&](size_t r) {
        float dgate[kTypedBlock];
        float dup[kTypedBlock];
        float gate[kTypedBlock];
        float up[kTypedBlock];
        float dy[kTypedBlock];
        const size_t off = r * 2 * f;
        for (size_t j = 0; j < f; j += kTypedBlock) {
            const size_t m = std::min(kTypedBlock, f - j);
            widen(dinp, off + j, m, dgate);
            widen(dinp, off + f + j, m, dup);
            widen(inp, off + j, m, gate);
            widen(inp, off + f + j, m, up);
            widen(dout, r * f + j, m, dy);
            swiglu_backward_kernel(dgate, dup, gate, up, dy, m);
            narrow(dgate, dinp, off + j, m);
            narrow(dup, dinp, off + f + j, m);
        }
    });
}

}  // namespace zt::cpu
