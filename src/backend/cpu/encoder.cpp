// encoder: token plus position embeddings, and their gradients.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zt::cpu {

void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     int threads) {
    const int rows = B * T;
    const size_t Cs = static_cast<size_t>(C);
    const bool parallel = static_cast<size_t>(rows) * C >= kParallelMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const int t = r % T;
        // A 16-bit out: the fp32 row on the thread's scratch, rounded once into out.
        float* o = out.f32() ? out.as_f32() + static_cast<size_t>(r) * Cs : thread_rows(Cs);
        const int token = tokens[r];
        const float* e = token >= 0 ? wte + static_cast<size_t>(token) * Cs : nullptr;
        if (e == nullptr) {  // another rank's vocabulary: positions only
            if (wpe == nullptr) {
                std::memset(o, 0, Cs * sizeof(float));
            } else {
                std::memcpy(o, wpe + static_cast<size_t>(t) * Cs, Cs * sizeof(float));
            }
        } else if (wpe == nullptr) {
            std::memcpy(o, e, Cs * sizeof(float));
        } else {
            add_kernel(o, e, wpe + static_cast<size_t>(t) * Cs, Cs);
        }
        if (!out.f32()) narrow(o, out, static_cast<size_t>(r) * Cs, Cs);
    }
}

void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T, int C,
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
        float* widened = dout.f32() || w == 0 ? nullptr : thread_rows(w);
        for (int r = 0; r < B * T && w > 0; ++r) {
            const int t = r % T;
            const size_t at = static_cast<size_t>(r) * C + c0;
            const float* d = dout.f32() ? dout.as_f32() + at : widened;
            if (!dout.f32()) widen(dout, at, w, widened);
            if (dwte != nullptr && tokens[r] >= 0) {
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

}  // namespace zt::cpu
