// reduce: the sums of squares behind the gradient norm, in double, with per-thread partials
// added in a fixed order.
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <algorithm>

#include <cstddef>
#include <vector>

namespace zt::cpu {
namespace {

ZT_VEC_CLONES
double block_sum_squares(const float* x, size_t n) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(x[i]);
        acc += v * v;
    }
    return acc;
}

/// Elements [at, at + n) of x: blocks of kTypedBlock (widened on the stack where 16-bit),
/// each reduced by the vector loop, added in order, so a 16-bit buffer and the same values
/// in fp32 give the same bits.
double sum_squares_kernel(ConstActPtr x, size_t at, size_t n) {
    double acc = 0.0;
    float widened[kTypedBlock];
    for (size_t i = 0; i < n; i += kTypedBlock) {
        const size_t m = std::min(kTypedBlock, n - i);
        const float* f = widened;
        if (x.f32()) {
            f = x.as_f32() + at + i;
        } else {
            widen(x, at + i, m, widened);
        }
        acc += block_sum_squares(f, m);
    }
    return acc;
}

}  // namespace

double sum_squares(const float* x, size_t n, int threads) {
    // Per-thread partial sums combined in thread order: deterministic, unlike an OpenMP
    // reduction clause whose combination order is unspecified.
    std::vector<double> partial(static_cast<size_t>(threads), 0.0);
    const bool parallel = n >= kParallelMinElements;
#pragma omp parallel num_threads(threads) if (parallel)
    {
        size_t b = 0;
        size_t e = 0;
        split_range(n, omp_get_thread_num(), omp_get_num_threads(), 16, &b, &e);
        if (e > b) {
            partial[static_cast<size_t>(omp_get_thread_num())] = sum_squares_kernel(x, b, e - b);
        }
    }
    double total = 0.0;
    for (double p : partial) {
        total += p;
    }
    return total;
}

double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count, int threads) {
    // One region for all spans (a model has dozens of tensors; on a loaded machine each
    // region can wait a scheduler tick for a thread whose core is taken). Each span is
    // split exactly as sum_squares() splits it and the partials are added in the same
    // order, so the result is bit-identical to calling sum_squares() per span.
    std::vector<double> partial(count * static_cast<size_t>(threads), 0.0);
    size_t total_n = 0;
    for (size_t i = 0; i < count; ++i) {
        total_n += ns[i];
    }
#pragma omp parallel num_threads(threads) if (total_n >= kParallelMinElements)
    {
        const int part = omp_get_thread_num();
        const int parts = omp_get_num_threads();
        for (size_t i = 0; i < count; ++i) {
            // Small spans run whole on one thread, as sum_squares() runs them inline.
            const bool split = ns[i] >= kParallelMinElements;
            if (!split && part != static_cast<int>(i % static_cast<size_t>(parts))) {
                continue;
            }
            size_t b = 0;
            size_t e = ns[i];
            if (split) {
                split_range(ns[i], part, parts, 16, &b, &e);
            }
            if (e > b) {
                partial[i * static_cast<size_t>(threads) + (split ? static_cast<size_t>(part) : 0)] =
                    sum_squares_kernel(xs[i], b, e - b);
            }
        }
    }
    double total = 0.0;
    for (size_t i = 0; i < count; ++i) {
        double s = 0.0;
        for (int t = 0; t < threads; ++t) {
            s += partial[i * static_cast<size_t>(threads) + static_cast<size_t>(t)];
        }
        total += s;
    }
    return total;
}

}  // namespace zt::cpu
