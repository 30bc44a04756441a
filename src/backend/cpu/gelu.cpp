// GELU, tanh approximation (GPT-2's), in the sigmoid form: 0.5 * (1 + tanh(u)) == sigmoid(2u).
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
#include <cstddef>

namespace zt::cpu {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

ZT_MAP_CLONES
void gelu_forward_kernel(float* __restrict out, const float* __restrict inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
        out[i] = x * sigmoid_approx(2.f * u);
    }
}

/// d/dx [x * s(2u)] = s + x * s * (1 - s) * 2 * du/dx, s = sigmoid(2u) = 0.5 * (1 + tanh u).
ZT_MAP_CLONES
void gelu_backward_kernel(float* __restrict dinp, const float* __restrict inp,
                          const float* __restrict dout, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
        const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
        const float s = sigmoid_approx(2.f * u);
        const float grad = s + x * s * (1.f - s) * 2.f * du;
        dinp[i] += grad * dout[i];
    }
}

}  // namespace

void gelu_forward(ActPtr out, ConstActPtr inp, size_t n, int threads) {
    if (out.f32() && inp.f32()) {
        parallel_chunks(n, threads, [&](size_t b, size_t e) {
            gelu_forward_kernel(out.as_f32() + b, inp.as_f32() + b, e - b);
        });
        return;
    }
    parallel_blocks(n, threads, [&](size_t i, size_t m) {
        float x[kTypedBlock];
        float y[kTypedBlock];
        widen(inp, i, m, x);
        gelu_forward_kernel(y, x, m);
        narrow(y, out, i, m);
    });
}

void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n, int threads) {
    if (dinp.f32() && inp.f32() && dout.f32()) {
        parallel_chunks(n, threads, [&](size_t b, size_t e) {
            gelu_backward_kernel(dinp.as_f32() + b, inp.as_f32() + b, dout.as_f32() + b, e - b);
        });
        return;
    }
    parallel_blocks(n, threads, [&](size_t i, size_t m) {
        float dx[kTypedBlock];
        float x[kTypedBlock];
        float dy[kTypedBlock];
        widen(dinp, i, m, dx);
        widen(inp, i, m, x);
        widen(dout, i, m, dy);
        gelu_backward_kernel(dx, x, dy, m);
        narrow(dx, dinp, i, m);
    });
}

}  // namespace zt::cpu
