// Softmax cross-entropy over the first V of Vp logits per row, with the gradient written
// in place of the logits when dloss != 0; and its vocabulary-parallel form in three passes.
#include "cpu_common.hpp"
#include "ops.hpp"
#include "ztrain/core/error.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zt::cpu {
namespace {

/// Cross-entropy of one logits row over the first V of Vp columns; returns the loss. When
/// dloss != 0 the row is overwritten with dloss * (softmax - onehot), padded columns 0.
ZT_VEC_CLONES
float cross_entropy_row_kernel(float* row, int target, int V, int Vp, float dloss) {
    float maxv = row[0];
#pragma omp simd reduction(max : maxv)
    for (int i = 0; i < V; ++i) {
        maxv = row[i] > maxv ? row[i] : maxv;  // this form vectorizes; std::max does not
    }
    const float target_logit = row[target];
    float sum = 0.f;
    if (dloss != 0.f) {
        // Store the exponentials so the gradient pass does not recompute them.
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; ++i) {
            const float e = exp_approx(row[i] - maxv);
            row[i] = e;
            sum += e;
        }
        const float scale = dloss / sum;
#pragma omp simd
        for (int i = 0; i < V; ++i) {
            row[i] *= scale;
        }
        row[target] -= dloss;
        for (int i = V; i < Vp; ++i) {
            row[i] = 0.f;
        }
    } else {
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; ++i) {
            sum += exp_approx(row[i] - maxv);
        }
    }
    return (maxv - target_logit) + std::log(sum);
}

}  // namespace

void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                           int threads) {
    ZT_REQUIRE(V > 0 && V <= Vp, "cross-entropy: need 0 < V <= Vp (V=", V, ", Vp=", Vp, ")");
    // Validate before the parallel region: an exception must not escape an OpenMP region.
    for (int r = 0; r < N; ++r) {
        ZT_REQUIRE(targets[r] < V, "cross-entropy: target ", targets[r], " of row ", r,
                   " is not below the vocabulary size ", V);
    }
    const size_t Vs = static_cast<size_t>(Vp);
    const bool parallel = static_cast<size_t>(N) * Vp >= kParallelMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t at = static_cast<size_t>(r) * Vs;
        if (targets[r] < 0) {
            losses[r] = 0.f;
            if (dloss != 0.f) {
                std::memset(static_cast<char*>(logits.data) + at * dtype_size(logits.dtype), 0,
                            Vs * dtype_size(logits.dtype));
            }
            continue;
        }
        // 16-bit logits: the row widened on the thread's scratch, the gradient rounded once.
        float* row = logits.f32() ? logits.as_f32() + at : thread_rows(Vs);
        if (!logits.f32()) widen(logits, at, Vs, row);
        losses[r] = cross_entropy_row_kernel(row, targets[r], V, Vp, dloss);
        if (!logits.f32() && dloss != 0.f) narrow(row, logits, at, Vs);
    }
}

namespace {

/// Calls fn(r, row) for each row r with row its logits as fp32: in place, or 16-bit ones
/// widened on the thread's scratch (written back rounded once when `write`).
template <typename Fn>
void for_rows(ActPtr logits, int N, int Vp, bool write, int threads, Fn fn) {
    const size_t Vs = static_cast<size_t>(Vp);
    const bool parallel = static_cast<size_t>(N) * Vs >= kParallelMinElements;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int r = 0; r < N; ++r) {
        const size_t at = static_cast<size_t>(r) * Vs;
        float* row = logits.f32() ? logits.as_f32() + at : thread_rows(Vs);
        if (!logits.f32()) widen(logits, at, Vs, row);
        fn(r, row);
        if (!logits.f32() && write) narrow(row, logits, at, Vs);
    }
}

ActPtr mutable_view(ConstActPtr p) { return ActPtr(const_cast<void*>(p.data), p.dtype); }

}  // namespace

void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp, int threads) {
    ZT_REQUIRE(V >= 0 && V <= Vp, "cross-entropy: need 0 <= V <= Vp (V=", V, ", Vp=", Vp, ")");
    for_rows(mutable_view(logits), N, Vp, false, threads, [&](int r, const float* row) {
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int i = 0; i < V; ++i) maxv = row[i] > maxv ? row[i] : maxv;
        row_max[r] = maxv;
    });
}

void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                            int V, int Vp, int vocab_begin, int threads) {
    for_rows(mutable_view(logits), N, Vp, false, threads, [&](int r, const float* row) {
        const float m = row_max[r];
        float sum = 0.f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < V; ++i) sum += exp_approx(row[i] - m);
        sums[r] = sum;
        const int local = targets[r] - vocab_begin;
        sums[N + r] = targets[r] >= 0 && local >= 0 && local < V ? row[local] : 0.f;
    });
}

void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                         const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss, int threads) {
    for_rows(logits, N, Vp, dloss != 0.f, threads, [&](int r, float* row) {
        if (targets[r] < 0) {
            losses[r] = 0.f;
            if (dloss != 0.f) std::memset(row, 0, static_cast<size_t>(Vp) * sizeof(float));
            return;
        }
        const float m = row_max[r];
        losses[r] = (m - sums[N + r]) + std::log(sums[r]);
        if (dloss == 0.f) return;
        const float scale = dloss / sums[r];
#pragma omp simd
        for (int i = 0; i < V; ++i) row[i] = exp_approx(row[i] - m) * scale;
        for (int i = V; i < Vp; ++i) row[i] = 0.f;
        const int local = targets[r] - vocab_begin;
        if (local >= 0 && local < V) row[local] -= dloss;
    });
}

}  // namespace zt::cpu
