// attention: causal grouped-query attention on qkv rows (backend.hpp's layout).
//
// One (batch, head) pair is one unit of work (cpu_backend.cpp's header comment says why
// sgemm): units are spread over the team, and each product covers only the lower triangle of
// kAttentionBlock-row blocks, so the masked work is the upper halves of the diagonal
// blocks. Row block [r0, r1) of queries needs keys [0, r1); key block [c0, c1) gets
// gradient from queries [c0, T).
//
// Segmented attention (attend_from: packed examples, a sliding window, or both) skips whole
// key blocks too: row block [r0, r1) reads keys [k0, r1) only, k0 the block-aligned least
// attend_from of its queries and every later one (KeyBands), so a window of w costs
// O(T * w), not O(T^2). Probabilities before k0 are neither computed nor read.
//
// Grouped-query attention only changes where a head's k and v start (key/value head
// h / group): with NKV = NH the pointers, leading dimensions and products are exactly
// GPT-2's. In backward a unit is (batch, key/value head) and walks its group's query
// heads in order, because they all accumulate into the same dk and dv (race-free and
// deterministic); with NKV = NH that is again one (batch, head) per unit.
//
// With bf16 buffers and bf16 products (cpu_bf16.hpp) the same blocks run through oneDNN, one
// single-threaded Bf16Products per team thread, on the buffers as stored; otherwise 16-bit
// heads are widened to fp32 for sgemm.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

namespace zt::cpu {
namespace {

// Rows of the causal block decomposition in attention: products are done for the lower
// block triangle only, so only the diagonal blocks carry wasted (masked) work.
constexpr int kAttentionBlock = 64;

/// In-place causal softmax of one attention row: row[0..len) -> probabilities, the rest of
/// the row [len, T) -> 0 (the P.V product multiplies whole blocks, so it needs the zeros).
ZT_VEC_CLONES
void causal_softmax_row_kernel(float* row, int len, int T) {
    float maxv = row[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < len; ++i) {
        maxv = row[i] > maxv ? row[i] : maxv;  // this form vectorizes; std::max does not
    }
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < len; ++i) {
        const float e = exp_approx(row[i] - maxv);
        row[i] = e;
        sum += e;
    }
    const float inv = 1.f / sum;
#pragma omp simd
    for (int i = 0; i < len; ++i) {
        row[i] *= inv;
    }
    for (int i = len; i < T; ++i) {
        row[i] = 0.f;
    }
}

/// Copies the causal part of one probability row and zeroes the rest (att above the
/// diagonal is unspecified by the interface, so backward never reads it).
ZT_MAP_CLONES
void causal_copy_row_kernel(float* __restrict dst, const float* __restrict src, int len, int T) {
#pragma omp simd
    for (int i = 0; i < len; ++i) {
        dst[i] = src[i];
    }
    for (int i = len; i < T; ++i) {
        dst[i] = 0.f;
    }
}

/// Softmax backward of one row, in place on dP: dS = P * (dP - sum_j P_j dP_j); zeros past
/// the diagonal.
ZT_VEC_CLONES
void softmax_backward_row_kernel(float* __restrict dp, const float* __restrict p, int len, int T) {
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < len; ++i) {
        dot += p[i] * dp[i];
    }
#pragma omp simd
    for (int i = 0; i < len; ++i) {
        dp[i] = p[i] * (dp[i] - dot);
    }
    for (int i = len; i < T; ++i) {
        dp[i] = 0.f;
    }
}

/// Softmax of score rows [r0, r1) of one head (row t at p + (t - r0) * T), causal, or over
/// keys [from[t], t] when `from` (the row's attend_from) is given: the keys from k0 (the row
/// block's first key, KeyBands) to from[t] get probability 0, so the P.V product (and
/// backward, which reads att) sees exactly the example's own keys. Every row is zeroed from
/// past its last key to `end`.
void softmax_block(float* p, int r0, int r1, int T, int end, const int32_t* from, int k0) {
    for (int t = r0; t < r1; ++t) {
        float* row = p + static_cast<size_t>(t - r0) * static_cast<size_t>(T);
        if (from == nullptr) {
            causal_softmax_row_kernel(row, t + 1, end);
            continue;
        }
        const int f = std::clamp(static_cast<int>(from[t]), k0, t);
        causal_softmax_row_kernel(row + f, t + 1 - f, end - f);
        std::fill(row + k0, row + f, 0.f);
    }
}

/// softmax_backward_row_kernel on bf16 probabilities, dS rounded to bf16 into `ds` (the
/// products' operand); zeros in ds from len to end.
ZT_VEC_CLONES
void softmax_backward_row_bf16_kernel(uint16_t* __restrict ds, const float* __restrict dp,
                                      const uint16_t* __restrict p, int len, int end) {
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < len; ++i) {
        dot += bf16_to_f32(p[i]) * dp[i];
    }
#pragma omp simd
    for (int i = 0; i < len; ++i) {
        ds[i] = f32_to_bf16(bf16_to_f32(p[i]) * (dp[i] - dot));
    }
    for (int i = len; i < end; ++i) {
        ds[i] = 0;
    }
}

size_t attention_thread_scratch(int T) {
    return static_cast<size_t>(T) * T + static_cast<size_t>(kAttentionBlock) * kAttentionBlock;
}

}  // namespace

size_t attention_scratch_floats(int T, int threads) {
    // Per thread: dP -> dS (T, T) and the causal copy of one diagonal block of P.
    return static_cast<size_t>(threads) * attention_thread_scratch(T);
}

namespace {

/// One head's (T, hs) columns of qkv-shaped (or out-shaped) rows as fp32 with a leading
/// dimension: the rows themselves when stored fp32, else a widened copy on the thread's
/// scratch (leading dimension hs). Element (t, i) is ptr[t * ld + i].
struct HeadView {
    float* ptr = nullptr;
    int ld = 0;
};

/// A view of columns [col, col + hs) of T rows of width `row` starting at element `at`;
/// widened into `scratch` (T * hs floats) when x is 16-bit.
HeadView head_view(ConstActPtr x, size_t at, int row, int T, int hs, float* scratch) {
    if (x.f32()) return {const_cast<float*>(x.as_f32()) + at, row};
    widen_rows(x, at, static_cast<size_t>(T), static_cast<size_t>(row), static_cast<size_t>(hs), scratch);
    return {scratch, hs};
}

/// Writes a widened head view back into x's rows, rounded once (nothing when x is fp32:
/// the view is x itself).
void head_store(const HeadView& v, ActPtr x, size_t at, int row, int T, int hs) {
    if (x.f32()) return;
    narrow_rows(v.ptr, x, at, static_cast<size_t>(T), static_cast<size_t>(row), static_cast<size_t>(hs));
}

/// The end of the 64-row block holding row t: how far a row's zeros must reach for the
/// block products (they multiply whole diagonal blocks).
int block_end(int t, int T) { return std::min(T, (t / kAttentionBlock + 1) * kAttentionBlock); }

/// Which keys each kAttentionBlock-row block of queries reads, and which queries each key
/// block feeds, for one row's attend_from (null: causal, every block from key 0). A row
/// block's key start is the block-aligned least attend_from of its queries and of every
/// later query (a suffix minimum, so it never decreases along the row): its products skip
/// the keys before it, and a key block is read by the row blocks from its own up to the last
/// whose key start is at or before it.
struct KeyBands {
    std::vector<int> key_start;  ///< per row block: its first key (a multiple of kAttentionBlock)
    std::vector<int> query_end;  ///< per key block: one past the last query reading it
    int keys_from(int r0) const { return key_start[static_cast<size_t>(r0 / kAttentionBlock)]; }
    int queries_to(int c0) const { return query_end[static_cast<size_t>(c0 / kAttentionBlock)]; }
};

KeyBands key_bands(const int32_t* from, int T) {
    const size_t blocks = static_cast<size_t>((T + kAttentionBlock - 1) / kAttentionBlock);
    KeyBands kb{std::vector<int>(blocks, 0), std::vector<int>(blocks, T)};
    if (from == nullptr) return kb;
    int least = T;
    for (int t = T - 1; t >= 0; --t) {
        least = std::min(least, std::clamp(static_cast<int>(from[t]), 0, t));
        if (t % kAttentionBlock == 0) {
            kb.key_start[static_cast<size_t>(t / kAttentionBlock)] = least / kAttentionBlock * kAttentionBlock;
        }
    }
    size_t last = 0;
    for (size_t c = 0; c < blocks; ++c) {
        last = std::max(last, c);
        const int c0 = static_cast<int>(c) * kAttentionBlock;
        while (last + 1 < blocks && kb.key_start[last + 1] <= c0) ++last;
        kb.query_end[c] = std::min(T, static_cast<int>(last + 1) * kAttentionBlock);
    }
    return kb;
}

/// key_bands of every row of a batch (attend_from (B, T), or null).
std::vector<KeyBands> batch_key_bands(const int32_t* attend_from, int B, int T) {
    std::vector<KeyBands> bands;
    for (int b = 0; b < B; ++b) {
        bands.push_back(key_bands(attend_from != nullptr ? attend_from + static_cast<size_t>(b) * T : nullptr, T));
    }
    return bands;
}

/// Where row t's probabilities start: attend_from[t] (0 without it), never before k0.
int row_from(const int32_t* from, int t, int k0) {
    return from == nullptr ? 0 : std::clamp(static_cast<int>(from[t]), k0, t);
}

/// Softmax backward of every row of one head, in place on dP (row t at ds + t * T, from its
/// row block's first key to its block's end): dS over keys [from[t], t], zero elsewhere.
void softmax_backward_rows(float* ds, const float* p, int T, const int32_t* from, const KeyBands& kb) {
    for (int t = 0; t < T; ++t) {
        const size_t at = static_cast<size_t>(t) * static_cast<size_t>(T);
        const int k0 = kb.keys_from(t);
        const int f = row_from(from, t, k0);
        softmax_backward_row_kernel(ds + at + f, p + at + f, t + 1 - f, block_end(t, T) - f);
        std::fill(ds + at + k0, ds + at + f, 0.f);
    }
}

bool all_bf16(std::initializer_list<DType> ts) {
    for (DType t : ts) {
        if (t != DType::kBF16) return false;
    }
    return true;
}

/// bf16 forward: S = scale Q K^T from the stored q and k into fp32, its softmax in fp32,
/// P rounded into att, O = P V from att and the stored v straight into out (rounded once).
/// Only the causal part of each att row is written (from its block's first key to its
/// block's end).
void attention_forward_bf16(Bf16Products* const* products, ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T,
                            int NH, int NKV, int hs, int threads, const int32_t* attend_from) {
    const AttentionLayout lay = attention_layout(NH, NKV, hs);
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const int W = lay.row;
    const int O = lay.out_row;
    const size_t Ts = static_cast<size_t>(T);
    const std::vector<KeyBands> bands = batch_key_bands(attend_from, B, T);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int u = 0; u < B * NH; ++u) {
        Bf16Products& pr = *products[omp_get_thread_num()];
        const int b = u / NH;
        const int h = u % NH;
        const size_t row0 = static_cast<size_t>(b) * Ts * W;
        const size_t kv_col = static_cast<size_t>(h / lay.group) * hs;
        const ConstActPtr q = qkv.offset(row0 + static_cast<size_t>(h) * hs);
        const ConstActPtr k = qkv.offset(row0 + lay.k_offset + kv_col);
        const ConstActPtr v = qkv.offset(row0 + lay.v_offset + kv_col);
        const ActPtr p = att.offset(static_cast<size_t>(u) * Ts * Ts);
        const ActPtr o = out.offset(static_cast<size_t>(b) * Ts * O + static_cast<size_t>(h) * hs);
        const int32_t* from = attend_from != nullptr ? attend_from + static_cast<size_t>(b) * Ts : nullptr;
        const KeyBands& kb = bands[static_cast<size_t>(b)];
        float* s = thread_rows(static_cast<size_t>(kAttentionBlock) * Ts);
        for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
            const int r1 = std::min(T, r0 + kAttentionBlock);
            const int m = r1 - r0;
            const int k0 = kb.keys_from(r0);
            const size_t k0s = static_cast<size_t>(k0);
            pr.gemm({false, true, m, r1 - k0, hs, q.offset(static_cast<size_t>(r0) * W), W, k.offset(k0s * W), W,
                     false, ActPtr(s + k0s), T, nullptr, {}, scale});
            softmax_block(s, r0, r1, T, r1, from, k0);
            for (int t = r0; t < r1; ++t) {
                narrow(s + static_cast<size_t>(t - r0) * Ts + k0s, p, static_cast<size_t>(t) * Ts + k0s,
                       static_cast<size_t>(r1 - k0));
            }
            pr.gemm({false, false, m, hs, r1 - k0, p.offset(static_cast<size_t>(r0) * Ts + k0s), T,
                     v.offset(k0s * W), W, false, o.offset(static_cast<size_t>(r0) * O), O, nullptr, {}});
        }
    }
}

/// One query head's share of the bf16 backward: dV and dK into the fp32 accumulators of its
/// key/value head, dQ straight into dqkv (rounded once per element). ds (fp32, T x T) and
/// ds16 (bf16, T x T) and pc16 (one diagonal block) are the thread's scratch; `from` and kb
/// the row's attend_from (or null) and its KeyBands.
void attention_head_backward_bf16(Bf16Products& pr, ActPtr dq, float* dk, float* dv, ConstActPtr dy, ConstActPtr q,
                                  ConstActPtr k, ConstActPtr v, ConstActPtr p, int T, int W, int O, int hs,
                                  float scale, float* ds, uint16_t* ds16, uint16_t* pc16, const int32_t* from,
                                  const KeyBands& kb) {
    const size_t Ts = static_cast<size_t>(T);
    const size_t hss = static_cast<size_t>(hs);
    const uint16_t* p16 = static_cast<const uint16_t*>(p.data);
    // dP = dO V^T (row blocks, keys [k0, r1)).
    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock);
        const size_t k0 = static_cast<size_t>(kb.keys_from(r0));
        pr.gemm({false, true, r1 - r0, r1 - static_cast<int>(k0), hs, dy.offset(static_cast<size_t>(r0) * O), O,
                 v.offset(k0 * W), W, false, ActPtr(ds + static_cast<size_t>(r0) * Ts + k0), T, nullptr, {}});
    }
    // dV += P^T dO: key block [c0, c1) from queries [c0, queries_to); the diagonal block
    // copied with the entries above the diagonal (unspecified in att) zeroed.
    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
        const int c1 = std::min(T, c0 + kAttentionBlock);
        const int bw = c1 - c0;
        for (int r = 0; r < bw; ++r) {
            const uint16_t* src = p16 + static_cast<size_t>(c0 + r) * Ts + c0;
            uint16_t* dst = pc16 + static_cast<size_t>(r) * kAttentionBlock;
            std::copy(src, src + r + 1, dst);
            std::fill(dst + r + 1, dst + bw, uint16_t{0});
        }
        const ActPtr dv_c(dv + static_cast<size_t>(c0) * hss);
        pr.gemm({true, false, bw, hs, bw, ConstActPtr(pc16, DType::kBF16), kAttentionBlock,
                 dy.offset(static_cast<size_t>(c0) * O), O, true, dv_c, hs, nullptr, {}});
        pr.gemm({true, false, bw, hs, kb.queries_to(c0) - c1, p.offset(static_cast<size_t>(c1) * Ts + c0), T,
                 dy.offset(static_cast<size_t>(c1) * O), O, true, dv_c, hs, nullptr, {}});
    }
    for (int t = 0; t < T; ++t) {
        const size_t at = static_cast<size_t>(t) * Ts;
        const int k0 = kb.keys_from(t);
        const int f = row_from(from, t, k0);
        softmax_backward_row_bf16_kernel(ds16 + at + f, ds + at + f, p16 + at + f, t + 1 - f, block_end(t, T) - f);
        std::fill(ds16 + at + k0, ds16 + at + f, uint16_t{0});
    }
    const ConstActPtr dS(ds16, DType::kBF16);
    // dQ += scale * dS K.
    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock);
        const size_t k0 = static_cast<size_t>(kb.keys_from(r0));
        pr.gemm({false, false, r1 - r0, hs, r1 - static_cast<int>(k0), dS.offset(static_cast<size_t>(r0) * Ts + k0),
                 T, k.offset(k0 * W), W, true, dq.offset(static_cast<size_t>(r0) * W), W, nullptr, {}, scale});
    }
    // dK += scale * dS^T Q.
    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
        const int c1 = std::min(T, c0 + kAttentionBlock);
        pr.gemm({true, false, c1 - c0, hs, kb.queries_to(c0) - c0, dS.offset(static_cast<size_t>(c0) * Ts + c0), T,
                 q.offset(static_cast<size_t>(c0) * W), W, true, ActPtr(dk + static_cast<size_t>(c0) * hss), hs,
                 nullptr, {}, scale});
    }
}

/// bf16 backward: per (batch, key/value head), dk and dv summed over the group's query heads
/// in fp32 (widened from dqkv, rounded once at the end); the products read q, k, v, att and
/// dout as stored and dS rounded to bf16.
void attention_backward_bf16(Bf16Products* const* products, ActPtr dqkv, float* scratch, ConstActPtr dout,
                             ConstActPtr qkv, ConstActPtr att, int B, int T, int NH, int NKV, int hs, int threads,
                             const int32_t* attend_from) {
    const AttentionLayout lay = attention_layout(NH, NKV, hs);
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const int W = lay.row;
    const int O = lay.out_row;
    const size_t Ts = static_cast<size_t>(T);
    const size_t tt = Ts * Ts;
    const size_t ths = Ts * static_cast<size_t>(hs);
    const std::vector<KeyBands> bands = batch_key_bands(attend_from, B, T);
#pragma omp parallel num_threads(threads)
    {
        Bf16Products& pr = *products[omp_get_thread_num()];
        float* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * attention_thread_scratch(T);
        const size_t pc = static_cast<size_t>(kAttentionBlock) * kAttentionBlock;
        float* dk = thread_rows(2 * ths + (tt + pc + 1) / 2);
        float* dv = dk + ths;
        uint16_t* ds16 = reinterpret_cast<uint16_t*>(dv + ths);
        uint16_t* pc16 = ds16 + tt;
#pragma omp for schedule(static)
        for (int u = 0; u < B * NKV; ++u) {
            const int b = u / NKV;
            const int kvh = u % NKV;
            const size_t row0 = static_cast<size_t>(b) * Ts;
            const size_t k_at = row0 * W + lay.k_offset + static_cast<size_t>(kvh) * hs;
            const size_t v_at = row0 * W + lay.v_offset + static_cast<size_t>(kvh) * hs;
            head_view(dqkv, k_at, W, T, hs, dk);
            head_view(dqkv, v_at, W, T, hs, dv);
            for (int h = kvh * lay.group; h < (kvh + 1) * lay.group; ++h) {
                const size_t q_at = row0 * W + static_cast<size_t>(h) * hs;
                attention_head_backward_bf16(pr, dqkv.offset(q_at), dk, dv,
                                             dout.offset(row0 * O + static_cast<size_t>(h) * hs), qkv.offset(q_at),
                                             qkv.offset(k_at), qkv.offset(v_at),
                                             att.offset((static_cast<size_t>(b) * NH + h) * tt), T, W, O, hs, scale,
                                             ds, ds16, pc16, attend_from != nullptr ? attend_from + row0 : nullptr,
                                             bands[static_cast<size_t>(b)]);
            }
            head_store({dk, hs}, dqkv, k_at, W, T, hs);
            head_store({dv, hs}, dqkv, v_at, W, T, hs);
        }
    }
}

/// One query head's fp32 operands in the backward (HeadView each): its key/value head's k,
/// v and their gradients, and the query head's q, dq and dout.
struct HeadGrads {
    HeadView k, v, dk, dv, q, dq, dy;
};

/// A 16-bit head's probabilities widened into `wide` (T x T): each row from its block's
/// first key to its block's end, all the backward reads.
const float* widened_rows(ConstActPtr att, size_t at, int T, const KeyBands& kb, float* wide) {
    const size_t Ts = static_cast<size_t>(T);
    for (int t = 0; t < T; ++t) {
        const size_t k0 = static_cast<size_t>(kb.keys_from(t));
        const size_t row = static_cast<size_t>(t) * Ts;
        widen(att, at + row + k0, static_cast<size_t>(block_end(t, T)) - k0, wide + row + k0);
    }
    return wide;
}

/// One query head's share of the fp32 backward: dV, dK (its key/value head's) and dQ
/// accumulated from dout and P; ds (T x T) and pc (one diagonal block) are the thread's
/// scratch, `from` and kb the row's attend_from (or null) and its KeyBands.
void attention_head_backward_f32(const HeadGrads& g, const float* p, int T, int hs, float scale, float* ds, float* pc,
                                 const int32_t* from, const KeyBands& kb) {
    const size_t Ts = static_cast<size_t>(T);
    // dP = dO V^T (row blocks, keys [k0, r1)).
    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock);
        const int k0 = kb.keys_from(r0);
        const size_t k0s = static_cast<size_t>(k0);
        sgemm(false, true, r1 - r0, r1 - k0, hs, 1.f, g.dy.ptr + static_cast<size_t>(r0) * g.dy.ld, g.dy.ld,
              g.v.ptr + k0s * g.v.ld, g.v.ld, 0.f, ds + static_cast<size_t>(r0) * Ts + k0s, T);
    }
    // dV += P^T dO: key block [c0, c1) gets contributions from queries [c0, queries_to).
    // Queries past the block read att as it is (every entry there is at or below the
    // diagonal, and within the band the forward wrote); only the diagonal block holds
    // entries above it, which the interface leaves unspecified, so that block alone is
    // copied with them zeroed (64 x 64 instead of the whole T x T).
    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
        const int c1 = std::min(T, c0 + kAttentionBlock);
        const int bw = c1 - c0;
        for (int r = 0; r < bw; ++r) {
            causal_copy_row_kernel(pc + static_cast<size_t>(r) * kAttentionBlock,
                                   p + static_cast<size_t>(c0 + r) * Ts + c0, r + 1, bw);
        }
        float* dv_c = g.dv.ptr + static_cast<size_t>(c0) * g.dv.ld;
        sgemm(true, false, bw, hs, bw, 1.f, pc, kAttentionBlock, g.dy.ptr + static_cast<size_t>(c0) * g.dy.ld,
              g.dy.ld, 1.f, dv_c, g.dv.ld);
        sgemm(true, false, bw, hs, kb.queries_to(c0) - c1, 1.f, p + static_cast<size_t>(c1) * Ts + c0, T,
              g.dy.ptr + static_cast<size_t>(c1) * g.dy.ld, g.dy.ld, 1.f, dv_c, g.dv.ld);
    }
    softmax_backward_rows(ds, p, T, from, kb);
    // dQ += scale * dS K.
    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
        const int r1 = std::min(T, r0 + kAttentionBlock);
        const int k0 = kb.keys_from(r0);
        const size_t k0s = static_cast<size_t>(k0);
        sgemm(false, false, r1 - r0, hs, r1 - k0, scale, ds + static_cast<size_t>(r0) * Ts + k0s, T,
              g.k.ptr + k0s * g.k.ld, g.k.ld, 1.f, g.dq.ptr + static_cast<size_t>(r0) * g.dq.ld, g.dq.ld);
    }
    // dK += scale * dS^T Q.
    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
        const int c1 = std::min(T, c0 + kAttentionBlock);
        sgemm(true, false, c1 - c0, hs, kb.queries_to(c0) - c0, scale, ds + static_cast<size_t>(c0) * Ts + c0, T,
              g.q.ptr + static_cast<size_t>(c0) * g.q.ld, g.q.ld, 1.f, g.dk.ptr + static_cast<size_t>(c0) * g.dk.ld,
              g.dk.ld);
    }
}

}  // namespace

void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV, int hs,
                           int threads, const int32_t* attend_from, Bf16Products* const* bf16) {
    if (bf16 != nullptr && all_bf16({out.dtype, att.dtype, qkv.dtype})) {
        attention_forward_bf16(bf16, out, att, qkv, B, T, NH, NKV, hs, threads, attend_from);
        return;
    }
    const AttentionLayout lay = attention_layout(NH, NKV, hs);
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const int units = B * NH;
    const int W = lay.row;
    const int O = lay.out_row;
    const size_t Ts = static_cast<size_t>(T);
    const size_t ths = Ts * static_cast<size_t>(hs);
    const std::vector<KeyBands> bands = batch_key_bands(attend_from, B, T);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int u = 0; u < units; ++u) {
        const int b = u / NH;
        const int h = u % NH;
        // 16-bit buffers: q, k, v widened, a block of probability rows and of outputs in
        // fp32 on the thread's scratch, each rounded once when stored.
        float* scratch = out.f32() && att.f32() && qkv.f32()
                             ? nullptr
                             : thread_rows(4 * ths + static_cast<size_t>(kAttentionBlock) * Ts);
        auto part = [&](size_t i) { return scratch != nullptr ? scratch + i * ths : nullptr; };
        const size_t row0 = static_cast<size_t>(b) * Ts * W;
        const HeadView q = head_view(qkv, row0 + static_cast<size_t>(h) * hs, W, T, hs, part(0));
        const size_t kv_col = static_cast<size_t>(h / lay.group) * hs;
        const HeadView k = head_view(qkv, row0 + lay.k_offset + kv_col, W, T, hs, part(1));
        const HeadView v = head_view(qkv, row0 + lay.v_offset + kv_col, W, T, hs, part(2));
        const size_t p_at = static_cast<size_t>(u) * Ts * Ts;
        const size_t o_at = static_cast<size_t>(b) * Ts * O + static_cast<size_t>(h) * hs;
        HeadView o{out.f32() ? out.as_f32() + o_at : part(3), out.f32() ? O : hs};
        float* pblock = part(4);
        const int32_t* from = attend_from != nullptr ? attend_from + static_cast<size_t>(b) * Ts : nullptr;
        const KeyBands& kb = bands[static_cast<size_t>(b)];
        // Causal rows are zeroed to T; segmented ones to their block's end (its products read no further).
        const auto end = [&](int r1) { return from == nullptr ? T : r1; };
        // Row block [r0, r1) against keys [k0, r1): S = scale * Q K^T, its softmax, O = P V
        // (P is zero past the diagonal and before each row's attend_from).
        for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
            const int r1 = std::min(T, r0 + kAttentionBlock);
            const int k0 = kb.keys_from(r0);
            const size_t k0s = static_cast<size_t>(k0);
            float* p = att.f32() ? att.as_f32() + p_at + static_cast<size_t>(r0) * Ts : pblock;
            sgemm(false, true, r1 - r0, r1 - k0, hs, scale, q.ptr + static_cast<size_t>(r0) * q.ld, q.ld,
                  k.ptr + k0s * k.ld, k.ld, 0.f, p + k0s, T);
            softmax_block(p, r0, r1, T, end(r1), from, k0);
            sgemm(false, false, r1 - r0, hs, r1 - k0, 1.f, p + k0s, T, v.ptr + k0s * v.ld, v.ld, 0.f,
                  o.ptr + static_cast<size_t>(r0) * o.ld, o.ld);
            for (int t = r0; !att.f32() && t < r1; ++t) {
                narrow(p + static_cast<size_t>(t - r0) * Ts + k0s, att, p_at + static_cast<size_t>(t) * Ts + k0s,
                       static_cast<size_t>(end(r1) - k0));
            }
        }
        head_store(o, out, o_at, O, T, hs);
    }
}

void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att, int B,
                            int T, int NH, int NKV, int hs, int threads, const int32_t* attend_from,
                            Bf16Products* const* bf16) {
    if (bf16 != nullptr && all_bf16({dqkv.dtype, dout.dtype, qkv.dtype, att.dtype})) {
        attention_backward_bf16(bf16, dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs, threads, attend_from);
        return;
    }
    const AttentionLayout lay = attention_layout(NH, NKV, hs);
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const int units = B * NKV;
    const int W = lay.row;
    const int O = lay.out_row;
    const size_t Ts = static_cast<size_t>(T);
    const size_t tt = Ts * Ts;
    const size_t ths = Ts * static_cast<size_t>(hs);
    const bool typed = !(dqkv.f32() && dout.f32() && qkv.f32() && att.f32());
    const std::vector<KeyBands> bands = batch_key_bands(attend_from, B, T);
#pragma omp parallel num_threads(threads)
    {
        float* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * attention_thread_scratch(T);
        float* pc = ds + tt;
        // 16-bit buffers: k, v, dk, dv, q, dq and dout widened and one head's probabilities,
        // on the thread's scratch; the gradients rounded once when stored.
        float* wide = typed ? thread_rows(7 * ths + (att.f32() ? 0 : tt)) : nullptr;
        auto part = [&](size_t i) { return wide != nullptr ? wide + i * ths : nullptr; };
#pragma omp for schedule(static)
        for (int u = 0; u < units; ++u) {
            const int b = u / NKV;
            const int kvh = u % NKV;
            const size_t row0 = static_cast<size_t>(b) * Ts;
            const size_t k_at = row0 * W + lay.k_offset + static_cast<size_t>(kvh) * hs;
            const size_t v_at = row0 * W + lay.v_offset + static_cast<size_t>(kvh) * hs;
            HeadGrads g{head_view(qkv, k_at, W, T, hs, part(0)), head_view(qkv, v_at, W, T, hs, part(1)),
                        head_view(dqkv, k_at, W, T, hs, part(2)), head_view(dqkv, v_at, W, T, hs, part(3)), {}, {}, {}};
            const KeyBands& kb = bands[static_cast<size_t>(b)];
            const int32_t* from = attend_from != nullptr ? attend_from + row0 : nullptr;
            for (int h = kvh * lay.group; h < (kvh + 1) * lay.group; ++h) {
                const size_t q_at = row0 * W + static_cast<size_t>(h) * hs;
                g.q = head_view(qkv, q_at, W, T, hs, part(4));
                g.dq = head_view(dqkv, q_at, W, T, hs, part(5));
                g.dy = head_view(dout, row0 * O + static_cast<size_t>(h) * hs, O, T, hs, part(6));
                const size_t p_at = (static_cast<size_t>(b) * NH + h) * tt;
                const float* p = att.f32() ? att.as_f32() + p_at : widened_rows(att, p_at, T, kb, part(7));
                attention_head_backward_f32(g, p, T, hs, scale, ds, pc, from, kb);
                head_store(g.dq, dqkv, q_at, W, T, hs);
            }
            head_store(g.dk, dqkv, k_at, W, T, hs);
            head_store(g.dv, dqkv, v_at, W, T, hs);
        }
    }
}

void gqa_attention_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int past, int n, int NH,
                          int NKV, int hs, int window, int threads) {
    const AttentionLayout lay = attention_layout(NH, NKV, hs);
    const size_t KV = static_cast<size_t>(NKV) * static_cast<size_t>(hs);
    for (int i = 0; i < n; ++i) {
        const float* row = qkv + static_cast<size_t>(i) * lay.row;
        std::copy(row + lay.k_offset, row + lay.k_offset + KV, k_cache + static_cast<size_t>(past + i) * KV);
        std::copy(row + lay.v_offset, row + lay.v_offset + KV, v_cache + static_cast<size_t>(past + i) * KV);
    }
    const float scale = 1.f / std::sqrt(static_cast<float>(hs));
    const int len_max = past + n;
    // One (query row, head) pair per unit: a decode step (n = 1) still spreads its NH heads
    // over the team. The scores of one unit fit a row of len_max floats.
#pragma omp parallel num_threads(threads)
    {
        std::vector<float> p(static_cast<size_t>(len_max));
#pragma omp for schedule(static)
        for (int u = 0; u < n * NH; ++u) {
            const int i = u / NH;
            const int h = u % NH;
            // Query row i (position past + i) reads cache rows [first, past + i]: a window
            // keeps the last `window` of them.
            const int first = window > 0 ? std::max(0, past + i + 1 - window) : 0;
            const int len = past + i + 1 - first;
            const float* q = qkv + static_cast<size_t>(i) * lay.row + static_cast<size_t>(h) * hs;
            const size_t kv_at = static_cast<size_t>(first) * KV + static_cast<size_t>(h / lay.group) * hs;
            sgemm(false, true, 1, len, hs, scale, q, hs, k_cache + kv_at, static_cast<int>(KV), 0.f, p.data(), len);
            causal_softmax_row_kernel(p.data(), len, len);
            float* o = out + static_cast<size_t>(i) * lay.out_row + static_cast<size_t>(h) * hs;
            sgemm(false, false, 1, hs, len, 1.f, p.data(), len, v_cache + kv_at, static_cast<int>(KV), 0.f, o, hs);
        }
    }
}

}  // namespace zt::cpu
