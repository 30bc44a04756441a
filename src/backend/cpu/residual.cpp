// residual: out = a + b element-wise; add_kernel also serves rope_backward and the encoder.
// Also scale_add_columns, the scaled add of a column range (LoRA adapters' outputs), and
// dropout (on LoRA adapters' inputs).
#include "cpu_common.hpp"
#include "ops.hpp"

#include <algorithm>
#include <cstddef>

namespace zt::cpu {

ZT_MAP_CLONES
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

void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col, int width,
                       int N, float scale, int threads) {
    const size_t w = static_cast<size_t>(width);
    // One row at a time (widened on the stack when 16-bit): rows are independent.
    parallel_chunks(static_cast<size_t>(N), threads, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
            const size_t d = i * static_cast<size_t>(dst_width) + static_cast<size_t>(dst_col);
            const size_t s = i * static_cast<size_t>(src_width) + static_cast<size_t>(src_col);
            for (size_t j = 0; j < w; j += kTypedBlock) {
                const size_t m = std::min(kTypedBlock, w - j);
                float x[kTypedBlock];
                float y[kTypedBlock];
                widen(ConstActPtr(dst.data, dst.dtype), d + j, m, x);
                widen(src, s + j, m, y);
                for (size_t k = 0; k < m; ++k) x[k] += scale * y[k];
                narrow(x, dst, d + j, m);
            }
        }
    });
}

void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask, int threads) {
    const size_t w = static_cast<size_t>(width);
    const float scale = 1.f / (1.f - mask.p);
    parallel_chunks(static_cast<size_t>(N), threads, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
            const uint64_t row = mask.row_key(static_cast<int>(i));
            for (size_t j = 0; j < w; j += kTypedBlock) {
                const size_t m = std::min(kTypedBlock, w - j);
                float x[kTypedBlock];
                widen(in, i * w + j, m, x);
                for (size_t k = 0; k < m; ++k) x[k] = mask.keeps(row, static_cast<int>(j + k)) ? x[k] * scale : 0.f;
                narrow(x, out, i * w + j, m);
            }
        }
    });
}

}  // namespace zt::cpu
