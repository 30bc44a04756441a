// What the CPU op files (src/backend/cpu/*.cpp) share: the multi-versioning attribute, the
// thresholds below which work stays on the calling thread, the vectorizable math, the sgemm
// call, the OpenMP partition helpers and the grouped-query attention layout. Private to
// src/backend/cpu/; the ops themselves are declared in ops.hpp.
#pragma once

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

// Function multi-versioning for the compute-heavy element-wise kernels (see the header
// comment of cpu_backend.cpp). Clang and non-x86 targets simply get the baseline build.
// ZT_MAP_CLONES: kernels that compute each element on its own (maps, and per-column sums
// over rows in row order): the same bits in the AVX-512 and the AVX2 clone, so they get both.
// ZT_VEC_CLONES: kernels with a reduction across a row (norms, softmax, cross-entropy, sums
// of squares), whose vector width sets the summation order: AVX2 at most, so their sums stay
// the same on AVX2 and AVX-512 machines (the equivalence tests' tolerances were set on them).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(ZT_NO_CLONES)
#define ZT_MAP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define ZT_VEC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ZT_MAP_CLONES
#define ZT_VEC_CLONES
#endif

namespace zt::cpu {

// Element-wise work below this many elements runs on the calling thread: waking the team
// costs more than the work.
constexpr size_t kParallelMinElements = size_t{1} << 14;
// Row and element-wise passes (layernorm, residual add, GELU) below this many elements run on
// the calling thread. On an idle machine a team shortens such a pass; on a loaded one every
// region waits for the thread whose core another job took, which made layernorm and residual
// adds many times slower than on one thread on the shared dev box (bench/cpu_notes.md). 2^19
// keeps the (B*T, C) passes of GPT-2 small and of the bench's config b single-threaded, and
// the 4C-wide GELU passes parallel.
constexpr size_t kRowOpMinElements = size_t{1} << 19;

// ------------------------------------------------------------------------------------
// Vectorizable math
// ------------------------------------------------------------------------------------

/// exp(x), max relative error 1e-7 on [-87, 87] (checked against double exp over a dense
/// grid), written branch-free so loops around it vectorize: glibc's expf is a call GCC
/// cannot vectorize without -ffast-math. |x| is clamped to 87 so the result and every
/// intermediate stays a normal float (denormals hit the FPU's slow path); exp(-87) = 1.6e-38
/// is zero for every use here (softmax terms, saturated sigmoids). NaN stays NaN.
/// The clamp is done on the bit pattern with integer ops on purpose: a float compare-and-
/// select makes GCC duplicate the constant-clamped path and then refuse to if-convert it
/// (the float ops "could trap" without -fno-trapping-math), which kills vectorization.
inline float exp_approx(float x) {
    int32_t bits = 0;
    std::memcpy(&bits, &x, sizeof(bits));
    const int32_t magnitude = bits & 0x7fffffff;
    const int32_t kNanBits = 0x7f800000;       // magnitudes above this are NaN
    const int32_t kMaxMagnitude = 0x42ae0000;  // 87.0f
    const int32_t clamped = magnitude > kNanBits ? magnitude : std::min(magnitude, kMaxMagnitude);
    bits = clamped | (bits & INT32_MIN);
    std::memcpy(&x, &bits, sizeof(x));
    // n = round(x / ln2) with the 1.5*2^23 trick (exact for |n| < 2^22; no SSE4.1 needed).
    const float round_magic = 12582912.f;
    const float fn = (x * 1.44269504088896341f + round_magic) - round_magic;
    // r = x - n*ln2 in two parts (Cody-Waite) so r keeps full precision.
    float r = x - fn * 0.693359375f;
    r = r + fn * 2.12194440e-4f;
    // Cephes expf polynomial on |r| <= ln2/2.
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = p * r * r + r + 1.f;
    // 2^n from the exponent bits; |n| <= 126 after the clamp, so it is a normal float.
    const int32_t scale_bits = (static_cast<int32_t>(fn) + 127) << 23;
    float scale = 0.f;
    std::memcpy(&scale, &scale_bits, sizeof(scale));
    return y * scale;
}

/// sqrt(v) for v >= 0, max relative error 2e-7 for normal v (checked over 1e-30..1e30):
/// the classic bit-trick estimate of 1/sqrt(v) plus three Newton steps, times v. Why not
/// sqrtf: with errno semantics (no -fno-math-errno in this build) every sqrtf carries a
/// branch to the libm call, which stops vectorization and made AdamW compute-bound instead
/// of memory-bound. sqrt(0) = 0 exactly; denormal v come out inaccurate but < 1e-19, far
/// below any epsilon they are added to.
inline float sqrt_approx(float v) {
    int32_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    bits = 0x5f375a86 - (bits >> 1);
    float y = 0.f;
    std::memcpy(&y, &bits, sizeof(y));
    const float half_v = 0.5f * v;
    y = y * (1.5f - half_v * y * y);
    y = y * (1.5f - half_v * y * y);
    y = y * (1.5f - half_v * y * y);
    return v * y;
}

/// 1 / (1 + exp(-x)); used for GELU since 0.5 * (1 + tanh(u)) == sigmoid(2u) exactly, which
/// avoids the cancellation of 1 + tanh(u) for very negative u.
inline float sigmoid_approx(float x) {
    return 1.f / (1.f + exp_approx(-x));
}

// ------------------------------------------------------------------------------------
// sgemm and OpenMP partitions
// ------------------------------------------------------------------------------------

inline void sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                  int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) {
        return;
    }
    if (K <= 0) {
        // An empty product: C = beta * C. Our callers use beta 0 or 1 only; OpenBLAS is not
        // called because some versions reject K = 0 with lda < 1.
        if (beta == 0.f) {
            for (int m = 0; m < M; ++m) {
                std::memset(C + static_cast<size_t>(m) * ldc, 0,
                            static_cast<size_t>(N) * sizeof(float));
            }
        }
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/// [begin, end) of chunk `part` when n items are split into `parts` near-equal chunks whose
/// edges are multiples of `align` items (keeps vector loops and cache lines whole).
inline void split_range(size_t n, int part, int parts, size_t align, size_t* begin, size_t* end) {
    size_t chunk = (n + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
    chunk = (chunk + align - 1) / align * align;
    *begin = std::min(n, static_cast<size_t>(part) * chunk);
    *end = std::min(n, *begin + chunk);
}

/// Runs fn(begin, end) over [0, n) split into one contiguous chunk per thread of a team of
/// `threads` (chunk edges on 16-float boundaries = whole cache lines), or inline when n is
/// small.
template <typename Fn>
void parallel_chunks(size_t n, int threads, Fn&& fn) {
    if (n < kRowOpMinElements || threads == 1) {
        if (n > 0) {
            fn(size_t{0}, n);
        }
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        size_t b = 0;
        size_t e = 0;
        split_range(n, omp_get_thread_num(), omp_get_num_threads(), 16, &b, &e);
        if (e > b) {
            fn(b, e);
        }
    }
}

/// The backward passes of the row normalizations (layernorm, RMSNorm) in one team: when
/// `rows`, row_fn(r, off) for every row r (rows are independent; off = r * C); when `slabs`,
/// slab_fn(c0, c1) for this thread's slab [c0, c1) of the C channels, walking every row for
/// the parameter gradients, which is race-free and deterministic without per-thread copies.
/// On the calling thread alone when N * C is below kRowOpMinElements.
template <typename RowFn, typename SlabFn>
void rows_and_channel_slabs(int N, int C, int threads, bool rows, bool slabs, RowFn&& row_fn, SlabFn&& slab_fn) {
    const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel num_threads(threads) if (parallel)
    {
        if (rows) {
#pragma omp for schedule(static) nowait
            for (int r = 0; r < N; ++r) {
                row_fn(r, static_cast<size_t>(r) * C);
            }
        }
        if (slabs) {
            size_t c0 = 0;
            size_t c1 = 0;
            split_range(static_cast<size_t>(C), omp_get_thread_num(), omp_get_num_threads(), 16, &c0, &c1);
            if (c1 > c0) {
                slab_fn(static_cast<int>(c0), static_cast<int>(c1));
            }
        }
    }
}

/// Where q, k and v sit in a qkv row of grouped-query attention (backend.hpp): [q: NH*hs |
/// k: NKV*hs | v: NKV*hs], in floats.
struct AttentionLayout {
    int row = 0;       ///< qkv row width (NH + 2*NKV) * hs
    int out_row = 0;   ///< attention output row width NH * hs
    int k_offset = 0;  ///< NH * hs
    int v_offset = 0;  ///< (NH + NKV) * hs
    int group = 1;     ///< query heads per key/value head, NH / NKV
};

inline AttentionLayout attention_layout(int NH, int NKV, int hs) {
    ZT_REQUIRE(NH > 0 && NKV > 0 && NH % NKV == 0, "attention: NKV=", NKV, " key/value heads must divide NH=", NH,
               " query heads");
    ZT_REQUIRE(hs > 0, "attention: head size ", hs, " must be positive");
    return {(NH + 2 * NKV) * hs, NH * hs, NH * hs, (NH + NKV) * hs, NH / NKV};
}

// ------------------------------------------------------------------------------------
// Kernels shared by several op files
// ------------------------------------------------------------------------------------

/// out = a + b element-wise over n floats; out may alias a or b. Defined (multi-versioned)
/// in residual.cpp; residual_forward, rope_backward and the encoder use it.
void add_kernel(float* out, const float* a, const float* b, size_t n);

// ---- typed activations ---------------------------------------------------------------
// A typed op over 16-bit storage runs its fp32 kernel on blocks widened on the thread's
// stack and narrows what it wrote, rounded once: bit for bit the fp32 op followed by
// ActivationRoundingBackend's rounding, at half the activation memory.

/// Elements widened at a time: a few operands of it fit L1, and it is long enough for the
/// kernels' vector loops.
constexpr size_t kTypedBlock = 1024;

/// Runs fn(at, m) over [0, n) in blocks [at, at + m) of at most kTypedBlock elements, split
/// over a team as parallel_chunks splits it.
template <typename Fn>
void parallel_blocks(size_t n, int threads, Fn&& fn) {
    parallel_chunks(n, threads, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; i += kTypedBlock) fn(i, std::min(kTypedBlock, e - i));
    });
}

/// fp32 scratch of this thread, at least n floats, reused across calls: the typed row ops'
/// widened rows (a row may be wider than a stack block).
inline float* thread_rows(size_t n) {
    thread_local std::vector<float> rows;
    if (rows.size() < n) rows.resize(n);
    return rows.data();
}

/// The bf16 <-> fp32 conversions of widen/narrow as out-of-line kernels compiled for
/// AVX-512, AVX2 and the baseline (cast.cpp): integer bit operations, so every clone gives
/// the same bits, and inline in a baseline-compiled caller they ran at SSE2 width, slower
/// than the fp32 op they feed.
void widen_bf16(const uint16_t* __restrict src, float* __restrict dst, size_t n);
void narrow_bf16(const float* __restrict src, uint16_t* __restrict dst, size_t n);

/// dst[0, n) = the fp32 values of src's elements [at, at + n). Serial, unlike core/dtype's
/// span conversions (convert_to_f32 / convert_from_f32): the typed ops call these per block
/// inside their own team, where an OpenMP region per block would cost more than the block.
inline void widen(ConstActPtr src, size_t at, size_t n, float* dst) {
    if (src.dtype == DType::kF32) {
        std::memcpy(dst, src.as_f32() + at, n * sizeof(float));
        return;
    }
    const uint16_t* s = static_cast<const uint16_t*>(src.data) + at;
    if (src.dtype == DType::kBF16) {
        widen_bf16(s, dst, n);
    } else {
        for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
    }
}

/// dst's elements [at, at + n) = src[0, n) rounded to dst's dtype (round to nearest even).
inline void narrow(const float* src, ActPtr dst, size_t at, size_t n) {
    if (dst.dtype == DType::kF32) {
        std::memcpy(dst.as_f32() + at, src, n * sizeof(float));
        return;
    }
    uint16_t* d = static_cast<uint16_t*>(dst.data) + at;
    if (dst.dtype == DType::kBF16) {
        narrow_bf16(src, d, n);
    } else {
        for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
    }
}

/// `rows` strided rows of src widened into dst (rows, width): row r from src's element
/// at + r * ld (a column range of a wider matrix, e.g. one head of qkv).
inline void widen_rows(ConstActPtr src, size_t at, size_t rows, size_t ld, size_t width, float* dst) {
    for (size_t r = 0; r < rows; ++r) widen(src, at + r * ld, width, dst + r * width);
}

/// src (rows, width) narrowed into `rows` strided rows of dst, row r at dst's element at + r * ld.
inline void narrow_rows(const float* src, ActPtr dst, size_t at, size_t rows, size_t ld, size_t width) {
    for (size_t r = 0; r < rows; ++r) narrow(src + r * width, dst, at + r * ld, width);
}

/// The typed parameter-gradient pass of a row normalization over channel slab [c0, c1):
/// fn(d, x, r0, k, w) for blocks of up to 32 rows r0 .. r0 + k - 1, with d and x the slab's
/// columns of those rows of dout and inp widened to fp32 (k rows of w floats each), in row
/// order, so a kernel summing over rows adds in the order of the fp32 pass.
template <typename Fn>
void widened_slab_rows(ConstActPtr dout, ConstActPtr inp, int N, int C, int c0, int c1, Fn&& fn) {
    constexpr int kRows = 32;
    const size_t w = static_cast<size_t>(c1 - c0);
    float* d = thread_rows(2 * kRows * w);
    float* x = d + kRows * w;
    for (int r0 = 0; r0 < N; r0 += kRows) {
        const int k = std::min(kRows, N - r0);
        for (int i = 0; i < k; ++i) {
            const size_t at = static_cast<size_t>(r0 + i) * static_cast<size_t>(C) + static_cast<size_t>(c0);
            widen(dout, at, w, d + static_cast<size_t>(i) * w);
            widen(inp, at, w, x + static_cast<size_t>(i) * w);
        }
        fn(d, x, r0, k, static_cast<int>(w));
    }
}

}  // namespace zt::cpu
