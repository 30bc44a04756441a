// residual: out = a + b element-wise; add_kernel also serves rope_backward and the encoder.
#include "cpu_common.hpp"
#include "ops.hpp"

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

void residual_forward(float* out, const float* a, const float* b, size_t n, int threads) {
    parallel_chunks(n, threads,
                    [&](size_t lo, size_t hi) { add_kernel(out + lo, a + lo, b + lo, hi - lo); });
}

}  // namespace zt::cpu
