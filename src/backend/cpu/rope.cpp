// Rotary position embeddings (Llama) on the q and k heads of qkv rows; v passes through.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <cstddef>
#include <cstring>

namespace zt::cpu {
namespace {

inline AttentionLayout rope_layout(int NH, int NKV, int hs) {
    ZT_REQUIRE(hs > 0 && hs % 2 == 0, "rope: head size ", hs, " must be even and positive");
    return attention_layout(NH, NKV, hs);
}

/// Rotates `heads` consecutive heads of size 2*half by one position's angles (HF
/// rotate_half pairs (i, i + half)): out = R x, with sin_sign = -1 for the inverse R^T.
/// out may equal x (each iteration reads its pair before writing it) but must not
/// otherwise overlap it.
ZT_VEC_CLONES
void rope_rotate_kernel(float* out, const float* x, const float* __restrict cos_t, const float* __restrict sin_t,
                        int heads, int half, float sin_sign) {
    for (int h = 0; h < heads; ++h) {
        float* o = out + static_cast<size_t>(h) * 2 * half;
        const float* in = x + static_cast<size_t>(h) * 2 * half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
            const float x1 = in[i];
            const float x2 = in[i + half];
            const float s = sin_sign * sin_t[i];
            o[i] = x1 * cos_t[i] - x2 * s;
            o[i + half] = x2 * cos_t[i] + x1 * s;
        }
    }
}

/// dinp += R^T dout over `heads` consecutive heads (rope_backward's accumulating form).
ZT_VEC_CLONES
void rope_rotate_back_add_kernel(float* __restrict dinp, const float* __restrict dout,
                                 const float* __restrict cos_t, const float* __restrict sin_t, int heads, int half) {
    for (int h = 0; h < heads; ++h) {
        float* d = dinp + static_cast<size_t>(h) * 2 * half;
        const float* g = dout + static_cast<size_t>(h) * 2 * half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
            const float g1 = g[i];
            const float g2 = g[i + half];
            d[i] += g1 * cos_t[i] + g2 * sin_t[i];
            d[i + half] += g2 * cos_t[i] - g1 * sin_t[i];
        }
    }
}

}  // namespace

void rope_forward(float* out, const float* inp, const float* rope, int B, int T, int NH, int NKV, int hs,
                  int threads) {
    const AttentionLayout lay = rope_layout(NH, NKV, hs);
    const int rows = B * T;
    const int half = hs / 2;
    const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const float* cos_t = rope + static_cast<size_t>(r % T) * hs;
        const size_t off = static_cast<size_t>(r) * lay.row;
        // q and k are NH + NKV consecutive heads at the start of the row.
        rope_rotate_kernel(out + off, inp + off, cos_t, cos_t + half, NH + NKV, half, 1.f);
        if (out != inp) {
            std::memcpy(out + off + lay.v_offset, inp + off + lay.v_offset,
                        static_cast<size_t>(NKV) * hs * sizeof(float));
        }
    }
}

void rope_backward(float* dinp, const float* dout, const float* rope, int B, int T, int NH, int NKV, int hs,
                   int threads) {
    const AttentionLayout lay = rope_layout(NH, NKV, hs);
    const int rows = B * T;
    const int half = hs / 2;
    const bool in_place = dinp == dout;
    const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const float* cos_t = rope + static_cast<size_t>(r % T) * hs;
        const size_t off = static_cast<size_t>(r) * lay.row;
        if (in_place) {
            // R^T is the rotation by the negated angle; v's gradient stays as it is.
            rope_rotate_kernel(dinp + off, dout + off, cos_t, cos_t + half, NH + NKV, half, -1.f);
        } else {
            rope_rotate_back_add_kernel(dinp + off, dout + off, cos_t, cos_t + half, NH + NKV, half);
            float* dv = dinp + off + lay.v_offset;
            add_kernel(dv, dv, dout + off + lay.v_offset, static_cast<size_t>(NKV) * hs);
        }
    }
}

}  // namespace zt::cpu
