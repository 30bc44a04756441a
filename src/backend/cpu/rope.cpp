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
ZT_MAP_CLONES
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
ZT_MAP_CLONES
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

namespace {

/// One row of rope_forward in fp32 (out may equal inp).
void rope_forward_row(float* out, const float* inp, const float* cos_t, const AttentionLayout& lay, int NH, int NKV,
                      int hs) {
    rope_rotate_kernel(out, inp, cos_t, cos_t + hs / 2, NH + NKV, hs / 2, 1.f);
    if (out != inp) std::memcpy(out + lay.v_offset, inp + lay.v_offset, static_cast<size_t>(NKV) * hs * sizeof(float));
}

/// One row of rope_backward in fp32 (in place when dinp == dout).
void rope_backward_row(float* dinp, const float* dout, const float* cos_t, const AttentionLayout& lay, int NH,
                       int NKV, int hs) {
    const int half = hs / 2;
    if (dinp == dout) {
        // R^T is the rotation by the negated angle; v's gradient stays as it is.
        rope_rotate_kernel(dinp, dout, cos_t, cos_t + half, NH + NKV, half, -1.f);
        return;
    }
    rope_rotate_back_add_kernel(dinp, dout, cos_t, cos_t + half, NH + NKV, half);
    float* dv = dinp + lay.v_offset;
    add_kernel(dv, dv, dout + lay.v_offset, static_cast<size_t>(NKV) * hs);
}

}  // namespace

void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs,
                  int threads) {
    const AttentionLayout lay = rope_layout(NH, NKV, hs);
    const int rows = B * T;
    const size_t w = static_cast<size_t>(lay.row);
    const bool f32 = out.f32() && inp.f32();
    const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const float* cos_t = rope + static_cast<size_t>(r % T) * hs;
        const size_t off = static_cast<size_t>(r) * w;
        if (f32) {
            rope_forward_row(out.as_f32() + off, inp.as_f32() + off, cos_t, lay, NH, NKV, hs);
            continue;
        }
        float* x = thread_rows(w);
        widen(inp, off, w, x);
        rope_forward_row(x, x, cos_t, lay, NH, NKV, hs);
        narrow(x, out, off, w);
    }
}

void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV, int hs,
                   int threads) {
    const AttentionLayout lay = rope_layout(NH, NKV, hs);
    const int rows = B * T;
    const size_t w = static_cast<size_t>(lay.row);
    const bool f32 = dinp.f32() && dout.f32();
    const bool in_place = dinp.data == dout.data;
    const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < rows; ++r) {
        const float* cos_t = rope + static_cast<size_t>(r % T) * hs;
        const size_t off = static_cast<size_t>(r) * w;
        if (f32) {
            rope_backward_row(dinp.as_f32() + off, dout.as_f32() + off, cos_t, lay, NH, NKV, hs);
            continue;
        }
        float* d = thread_rows(2 * w);
        widen(dout, off, w, d + w);
        if (in_place) {
            rope_backward_row(d + w, d + w, cos_t, lay, NH, NKV, hs);
            narrow(d + w, dinp, off, w);
        } else {
            widen(dinp, off, w, d);
            rope_backward_row(d, d + w, cos_t, lay, NH, NKV, hs);
            narrow(d, dinp, off, w);
        }
    }
}

}  // namespace zt::cpu
