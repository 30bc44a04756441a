// residual: out = a + b element-wise; add_kernel also serves rope_backward and the encoder.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
#include <cstddef>

namespace zt::cpu {

ZT_VEC_CLONES
void add_kernel(float* out, const float* a, const float* b, size_t n) {
    // out may alias a or b (documented), so no __restrict; the loop is still a pure
    // element-wise map and GCC vectorizes it with a run-time overlap check.
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        out[i] = a[i] + b[i];
    }
}

void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n, int threads) {
    if (out.f32() && a.f32() && b.f32()) {
        parallel_chunks(n, threads, [&](size_t lo, size_t hi) {
            add_kernel(out.as_f32() + lo, a.as_f32() + lo, b.as_f32() + lo, hi - lo);
        });
        return;
    }
    // out may alias a or b: each block is read whole before it is written.
    parallel_blocks(n, threads, [&](size_t i, size_t m) {
        float x[kTypedBlock];
        float y[kTypedBlock];
        widen(a, i, m, x);
        widen(b, i, m, y);
        add_kernel(x, x, y, m);
        narrow(x, out, i, m);
    });
}

}  // namespace zt::cpu
