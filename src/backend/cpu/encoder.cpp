// encoder: token plus position embeddings, and their gradients.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zt::cpu {

void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     int threads) {
    const int rows = B * T;
    const bool parallel = static_cast<size_t>(rows) * C >= kParallelMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const int t = r % T;
        const float* e = wte + static_cast<size_t>(tokens[r]) * C;
        if (wpe == nullptr) {
            std::memcpy(out + static_cast<size_t>(r) * C, e, static_cast<size_t>(C) * sizeof(float));
            continue;
        }
        const float* pe = wpe + static_cast<size_t>(t) * C;
        add_kernel(out + static_cast<size_t>(r) * C, e, pe, static_cast<size_t>(C));
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C,
                      int threads) {
    // Two rows may carry the same token, so rows cannot be split across threads; each
    // thread owns a slab of channels instead and walks every row in order (race-free
    // and deterministic).
    const bool parallel = static_cast<size_t>(B) * T * C >= kParallelMinElements;
#pragma omp parallel num_threads(threads) if (parallel)
    {
        size_t c0 = 0;
        size_t c1 = 0;
        split_range(static_cast<size_t>(C), omp_get_thread_num(), omp_get_num_threads(), 16,
                    &c0, &c1);
        const size_t w = c1 - c0;
        if (c1 > c0) {
            for (int r = 0; r < B * T; ++r) {
                const int t = r % T;
                const float* d = dout + static_cast<size_t>(r) * C + c0;
                if (dwte != nullptr) {
                    float* g = dwte + static_cast<size_t>(tokens[r]) * C + c0;
                    add_kernel(g, g, d, w);
                }
                if (dwpe != nullptr) {
                    float* g = dwpe + static_cast<size_t>(t) * C + c0;
                    add_kernel(g, g, d, w);
                }
            }
        }
    }
}

}  // namespace zt::cpu
