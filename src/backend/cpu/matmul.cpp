// matmul: out = inp @ weight^T [+ bias] and its gradients, each product split into one row
// or column slab per OpenMP thread, each slab a single-threaded sgemm (cpu_backend.cpp's
// header comment says why).
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>

namespace zt::cpu {
namespace {

// ------------------------------------------------------------------------------------
// sgemm partitioning
// ------------------------------------------------------------------------------------

/// One row-major sgemm: C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C. Built
/// by aggregate initialization, fields in this order.
struct Gemm {
    bool trans_a = false;
    bool trans_b = false;
    int M = 0;
    int N = 0;
    int K = 0;
    float alpha = 1.f;
    const float* A = nullptr;
    int lda = 0;
    const float* B = nullptr;
    int ldb = 0;
    float beta = 0.f;
    float* C = nullptr;
    int ldc = 0;
};

/// The block of output one thread computes: rows [m0, m1) x columns [n0, n1).
struct Block {
    int m0 = 0;
    int m1 = 0;
    int n0 = 0;
    int n1 = 0;
    bool empty() const { return m1 <= m0 || n1 <= n0; }
};

/// Splits C (M, N) into `parts` slabs along its larger dimension. Slab edges are multiples
/// of 16 so each sgemm keeps whole micro-kernel tiles (OpenBLAS' x86 kernels are 16 wide).
inline Block gemm_block(int M, int N, int part, int parts) {
    Block blk{0, M, 0, N};
    if (parts <= 1) {
        return blk;
    }
    const bool split_rows = M >= N;
    const int extent = split_rows ? M : N;
    int chunk = (extent + parts - 1) / parts;
    chunk = (chunk + 15) / 16 * 16;
    const int lo = std::min(extent, part * chunk);
    const int hi = std::min(extent, lo + chunk);
    if (split_rows) {
        blk.m0 = lo;
        blk.m1 = hi;
    } else {
        blk.n0 = lo;
        blk.n1 = hi;
    }
    return blk;
}

/// Computes this thread's block of g: called by every member of a team with its id.
inline void run_gemm_part(const Gemm& g, int part, int parts) {
    const Block blk = gemm_block(g.M, g.N, part, parts);
    if (blk.empty()) {
        return;
    }
    // op(A) rows m0.. : A is (M, K) untransposed -> row offset; transposed (K, M) -> column.
    const float* a = g.trans_a ? g.A + blk.m0 : g.A + static_cast<size_t>(blk.m0) * g.lda;
    // op(B) columns n0.. : B is (K, N) untransposed -> column offset; transposed (N, K) -> row.
    const float* b = g.trans_b ? g.B + static_cast<size_t>(blk.n0) * g.ldb : g.B + blk.n0;
    float* c = g.C + static_cast<size_t>(blk.m0) * g.ldc + blk.n0;
    sgemm(g.trans_a, g.trans_b, blk.m1 - blk.m0, blk.n1 - blk.n0, g.K, g.alpha, a, g.lda, b, g.ldb,
          g.beta, c, g.ldc);
}

/// Whether a product is big enough to be worth splitting across the team.
inline bool gemm_worth_splitting(int M, int N, int K) {
    return static_cast<double>(M) * N * K >= 64.0 * 64.0 * 64.0;
}

ZT_VEC_CLONES
void bias_fill_kernel(float* out, const float* bias, int rows, int cols, int ld) {
    for (int r = 0; r < rows; ++r) {
        float* o = out + static_cast<size_t>(r) * ld;
#pragma omp simd
        for (int c = 0; c < cols; ++c) {
            o[c] = bias[c];
        }
    }
}

/// dbias[c] += sum over rows of dout[r, c] for columns [c0, c1).
ZT_VEC_CLONES
void column_sum_kernel(float* __restrict dbias, const float* __restrict dout, int rows, int ld,
                       int c0, int c1) {
    for (int r = 0; r < rows; ++r) {
        const float* d = dout + static_cast<size_t>(r) * ld;
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
            dbias[c] += d[c];
        }
    }
}

/// out (1, OC) = inp (1, C) @ weight (OC, C)^T [+ bias] for one row (a decoded token): the
/// product only streams the weight once, and sgemm would first pack all of it for that one
/// row, so each thread runs sgemv over its slab of output columns instead.
void matvec_forward(float* out, const float* inp, const float* weight, const float* bias, int C, int OC,
                    int threads) {
    const bool parallel = threads > 1 && gemm_worth_splitting(1, OC, C);
#pragma omp parallel num_threads(threads) if (parallel)
    {
        const Block blk = gemm_block(1, OC, omp_get_thread_num(), omp_get_num_threads());
        if (!blk.empty()) {
            float* o = out + blk.n0;
            if (bias != nullptr) bias_fill_kernel(o, bias + blk.n0, 1, blk.n1 - blk.n0, OC);
            cblas_sgemv(CblasRowMajor, CblasNoTrans, blk.n1 - blk.n0, C, 1.f, weight + static_cast<size_t>(blk.n0) * C,
                        C, inp, 1, bias != nullptr ? 1.f : 0.f, o, 1);
        }
    }
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    int threads) {
    // out (N, OC) = inp (N, C) @ weight (OC, C)^T [+ bias]. The bias is broadcast into
    // out first and folded into the product with beta = 1, so it costs no extra pass.
    if (N == 1) {
        matvec_forward(out, inp, weight, bias, C, OC, threads);
        return;
    }
    const Gemm g{false, true, N, OC, C, 1.f, inp, C, weight, C, bias != nullptr ? 1.f : 0.f, out, OC};
    const bool parallel = threads > 1 && gemm_worth_splitting(N, OC, C);
#pragma omp parallel num_threads(threads) if (parallel)
    {
        // The team may be smaller than asked (e.g. when called inside another parallel
        // region), so the partition follows the actual team size.
        const int part = omp_get_thread_num();
        const int parts = omp_get_num_threads();
        if (bias != nullptr) {
            const Block blk = gemm_block(N, OC, part, parts);
            if (!blk.empty()) {
                bias_fill_kernel(out + static_cast<size_t>(blk.m0) * OC + blk.n0, bias + blk.n0,
                                 blk.m1 - blk.m0, blk.n1 - blk.n0, OC);
            }
        }
        run_gemm_part(g, part, parts);
    }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, int threads) {
    // dinp (N, C) += dout (N, OC) @ weight (OC, C)
    const Gemm gi{false, false, N, C, OC, 1.f, dout, OC, weight, C, 1.f, dinp, C};
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
    const Gemm gw{true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dweight, C};
    const bool parallel = threads > 1 && gemm_worth_splitting(N, OC, C);
    // One region for all three outputs: they are independent, so no barrier between.
#pragma omp parallel num_threads(threads) if (parallel)
    {
        const int part = omp_get_thread_num();
        const int parts = omp_get_num_threads();
        if (dinp != nullptr) {
            run_gemm_part(gi, part, parts);
        }
        if (dweight != nullptr) {
            run_gemm_part(gw, part, parts);
        }
        if (dbias != nullptr) {
            size_t c0 = 0;
            size_t c1 = 0;
            split_range(static_cast<size_t>(OC), part, parts, 16, &c0, &c1);
            if (c1 > c0) {
                column_sum_kernel(dbias, dout, N, OC, static_cast<int>(c0),
                                  static_cast<int>(c1));
            }
        }
    }
}

void matmul_forward_bf16(Bf16Products& products, float* out, const float* inp, const float* weight,
                         const float* bias, int N, int C, int OC, int threads) {
    // As matmul_forward: the bias is broadcast into out, then the product accumulates on it.
    if (bias != nullptr) {
        parallel_chunks(static_cast<size_t>(N), threads, [&](size_t r0, size_t r1) {
            bias_fill_kernel(out + r0 * OC, bias, static_cast<int>(r1 - r0), OC, OC);
        });
    }
    products.gemm(Bf16Gemm{false, true, N, OC, C, inp, C, weight, C, bias != nullptr, out, OC});
}

void matmul_backward_bf16(Bf16Products& products, float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int C, int OC, int threads) {
    // dinp (N, C) += dout (N, OC) @ weight (OC, C)
    if (dinp != nullptr) products.gemm(Bf16Gemm{false, false, N, C, OC, dout, OC, weight, C, true, dinp, C});
    // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
    if (dweight != nullptr) products.gemm(Bf16Gemm{true, false, OC, C, N, dout, OC, inp, C, true, dweight, C});
    if (dbias != nullptr) {
        // The column slabs of matmul_backward's split, so dbias is bit-identical to it.
        const bool parallel = threads > 1 && gemm_worth_splitting(N, OC, C);
#pragma omp parallel num_threads(threads) if (parallel)
        {
            size_t c0 = 0;
            size_t c1 = 0;
            split_range(static_cast<size_t>(OC), omp_get_thread_num(), omp_get_num_threads(), 16, &c0, &c1);
            if (c1 > c0) column_sum_kernel(dbias, dout, N, OC, static_cast<int>(c0), static_cast<int>(c1));
        }
    }
}

}  // namespace zt::cpu
