// matmul: out = inp @ weight^T [+ bias] and its gradients, each product split into one row
// or column slab per OpenMP thread, each slab a single-threaded sgemm (cpu_backend.cpp's
// header comment says why).
#include "cpu_common.hpp"
#include "ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <vector>

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

ZT_MAP_CLONES
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
ZT_MAP_CLONES
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
                     const float* weight, int N, int C, int OC, int threads, GradWrite grads) {
    const bool assign = grads == GradWrite::kAssign;
    // dinp (N, C) += dout (N, OC) @ weight (OC, C)
    const Gemm gi{false, false, N, C, OC, 1.f, dout, OC, weight, C, 1.f, dinp, C};
    // dweight (OC, C) (+)= dout^T (OC, N) @ inp (N, C)
    const Gemm gw{true, false, OC, C, N, 1.f, dout, OC, inp, C, assign ? 0.f : 1.f, dweight, C};
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
                if (assign) std::fill(dbias + c0, dbias + c1, 0.f);
                column_sum_kernel(dbias, dout, N, OC, static_cast<int>(c0),
                                  static_cast<int>(c1));
            }
        }
    }
}

namespace {

/// dbias[c] (+)= sum over rows of dout[r, c], dout typed, over the team's column slabs: rows
/// added in order per column, as column_sum_kernel adds them (bit-identical on fp32 values).
void column_sums(float* dbias, ConstActPtr dout, int N, int OC, int threads, bool parallel, bool assign) {
#pragma omp parallel num_threads(threads) if (parallel)
    {
        size_t c0 = 0;
        size_t c1 = 0;
        split_range(static_cast<size_t>(OC), omp_get_thread_num(), omp_get_num_threads(), 16, &c0, &c1);
        if (assign && c1 > c0) std::fill(dbias + c0, dbias + c1, 0.f);
        if (c1 > c0 && dout.f32()) {
            column_sum_kernel(dbias, dout.as_f32(), N, OC, static_cast<int>(c0), static_cast<int>(c1));
        } else if (c1 > c0) {
            const size_t w = c1 - c0;
            float* row = thread_rows(w);
            for (int r = 0; r < N; ++r) {
                widen(dout, static_cast<size_t>(r) * static_cast<size_t>(OC) + c0, w, row);
                column_sum_kernel(dbias + c0, row, 1, static_cast<int>(w), 0, static_cast<int>(w));
            }
        }
    }
}

/// dst[0, n) = src's elements [at, at + n) widened, over the team.
void widen_parallel(ConstActPtr src, size_t at, size_t n, float* dst, int threads) {
    parallel_blocks(n, threads, [&](size_t i, size_t m) { widen(src, at + i, m, dst + i); });
}

/// dst's elements [at, at + n) = src[0, n) [+ add's elements [at, at + n)], rounded once.
void narrow_parallel(const float* src, ConstActPtr add, ActPtr dst, size_t at, size_t n, int threads) {
    parallel_blocks(n, threads, [&](size_t i, size_t m) {
        if (add.data == nullptr) {
            narrow(src + i, dst, at + i, m);
            return;
        }
        float sum[kTypedBlock];
        widen(add, at + i, m, sum);
        add_kernel(sum, src + i, sum, m);
        narrow(sum, dst, at + i, m);
    });
}

/// fp32 scratch of the calling thread, reused across calls: the widened products' operands
/// (no bf16 products) or the sliced reduction's partial sums (bf16 products; each call's use
/// ends with it). It grows to exactly the largest need (not a vector's doubling), which the
/// memory plan counts (widened_operand_floats, cpu_reduction_slice_floats).
float* widened_operands(size_t n) {
    thread_local std::vector<float> buf;
    if (buf.size() < n) {
        buf.clear();
        buf.shrink_to_fit();
        buf.resize(n);
    }
    return buf.data();
}

/// Floats a widened block may hold: 16 MiB of operands.
constexpr size_t kWidenedBudget = size_t{4} << 20;

}  // namespace

int widened_gemm_rows(int N, int C, int OC) {
    const size_t per_row = 2 * static_cast<size_t>(C) + static_cast<size_t>(OC);
    if (static_cast<size_t>(N) * per_row <= kWidenedBudget) return std::max(N, 1);
    const size_t rows = std::max<size_t>(16, kWidenedBudget / per_row / 16 * 16);
    return static_cast<int>(std::min<size_t>(rows, static_cast<size_t>(N)));
}

size_t widened_operand_floats(int N, int C, int OC) {
    const size_t per_row = 2 * static_cast<size_t>(C) + static_cast<size_t>(OC);
    return static_cast<size_t>(widened_gemm_rows(N, C, OC)) * per_row;
}

void matmul_forward_widened(ActPtr out, ConstActPtr inp, const float* weight, const float* bias,
                            ConstActPtr residual, int N, int C, int OC, int threads) {
    const int block = widened_gemm_rows(N, C, OC);
    const size_t Cs = static_cast<size_t>(C);
    const size_t OCs = static_cast<size_t>(OC);
    float* x = widened_operands(static_cast<size_t>(block) * (Cs + OCs));
    float* y = x + static_cast<size_t>(block) * Cs;
    for (int r0 = 0; r0 < N; r0 += block) {
        const int rows = std::min(block, N - r0);
        widen_parallel(inp, static_cast<size_t>(r0) * Cs, static_cast<size_t>(rows) * Cs, x, threads);
        matmul_forward(y, x, weight, bias, rows, C, OC, threads);
        narrow_parallel(y, residual, out, static_cast<size_t>(r0) * OCs, static_cast<size_t>(rows) * OCs, threads);
    }
}

void matmul_backward_widened(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                             const float* weight, int N, int C, int OC, int threads, GradWrite grads) {
    const int block = widened_gemm_rows(N, C, OC);
    const size_t Cs = static_cast<size_t>(C);
    const size_t OCs = static_cast<size_t>(OC);
    float* d = widened_operands(static_cast<size_t>(block) * (2 * Cs + OCs));
    float* x = d + static_cast<size_t>(block) * OCs;
    float* g = x + static_cast<size_t>(block) * Cs;
    for (int r0 = 0; r0 < N; r0 += block) {
        const int rows = std::min(block, N - r0);
        const size_t nc = static_cast<size_t>(rows) * Cs;
        const size_t at = static_cast<size_t>(r0) * Cs;
        widen_parallel(dout, static_cast<size_t>(r0) * OCs, static_cast<size_t>(rows) * OCs, d, threads);
        if (dweight != nullptr) widen_parallel(inp, at, nc, x, threads);
        if (dinp.data != nullptr) widen_parallel(dinp, at, nc, g, threads);
        // The first block writes assigned gradients, the rest add to them.
        matmul_backward(dinp.data != nullptr ? g : nullptr, dweight, dbias, d, x, weight, rows, C, OC, threads,
                        r0 == 0 ? grads : GradWrite::kAdd);
        if (dinp.data != nullptr) narrow_parallel(g, ConstActPtr{}, dinp, at, nc, threads);
    }
}

void matmul_forward_bf16(Bf16Products& products, ActPtr out, ConstActPtr inp, ConstActPtr weight,
                         const float* bias, ConstActPtr residual, int N, int C, int OC) {
    // The bias and the residual are added to the fp32 sum inside the product, so out is
    // rounded once, as the fp32-buffer forms followed by a rounding give it.
    products.gemm(Bf16Gemm{false, true, N, OC, C, inp, C, weight, C, false, out, OC, bias, residual});
}

namespace {

/// The reduction of a 16-bit output gradient's product with a weight twice this many rows
/// long or longer (the LM head's vocabulary) goes in slices of kReductionSlice: oneDNN 2.6
/// runs one product with a reduction that long well below its rate on the model's other
/// shapes (bench/results/bf16_reduction_slices_2026-12-02.md).
constexpr int kReductionSlice = 8192;

/// dinp (N, C) += dout (N, OC) @ weight (OC, C), OC at least twice kReductionSlice, dout 16-bit:
/// a block of rows at a time, each block's slices summed in fp32 and added to dinp with the
/// last slice's product, so dinp is rounded once.
void input_grad_in_slices(Bf16Products& products, ActPtr dinp, ConstActPtr dout, ConstActPtr weight, int N, int C,
                          int OC) {
    const int block = reduction_slice_rows(N, C);
    float* sums = widened_operands(static_cast<size_t>(block) * static_cast<size_t>(C));
    const size_t Cs = static_cast<size_t>(C);
    for (int r0 = 0; r0 < N; r0 += block) {
        const int rows = std::min(block, N - r0);
        const size_t at = static_cast<size_t>(r0);
        for (int k0 = 0; k0 < OC; k0 += kReductionSlice) {
            const int k = std::min(kReductionSlice, OC - k0);
            const ConstActPtr a = dout.offset(at * static_cast<size_t>(OC) + static_cast<size_t>(k0));
            const ConstActPtr b = weight.offset(static_cast<size_t>(k0) * Cs);
            if (k0 + k < OC) {
                products.gemm(Bf16Gemm{false, false, rows, C, k, a, OC, b, C, k0 > 0, ActPtr(sums), C, nullptr, {}});
            } else {
                products.gemm(Bf16Gemm{false, false, rows, C, k, a, OC, b, C, true, dinp.offset(at * Cs), C, nullptr,
                                       ConstActPtr(sums)});
            }
        }
    }
}

}  // namespace

bool reduces_in_slices(int OC) { return OC >= 2 * kReductionSlice; }

int reduction_slice_rows(int N, int C) {
    // About 4 MiB of partial sums, at least 256 rows (fewer rows run the slices slower).
    const int rows = std::max(256, (1 << 20) / std::max(C, 1) / 16 * 16);
    return std::max(1, std::min(N, rows));
}

void matmul_backward_bf16(Bf16Products& products, ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout,
                          ConstActPtr inp, ConstActPtr weight, int N, int C, int OC, int threads, GradWrite grads) {
    const bool assign = grads == GradWrite::kAssign;
    // dinp (N, C) += dout (N, OC) @ weight (OC, C). A frozen weight's (no dweight) from fp32
    // output gradients (a LoRA base under fp32 activations) goes a block of rows at a time, so
    // dout's bf16 copy is a block's (about 8 MiB), not the whole (N, OC): the LM head's is
    // micro-batch x vocabulary.
    if (dinp.data != nullptr && !dout.f32() && reduces_in_slices(OC)) {
        input_grad_in_slices(products, dinp, dout, weight, N, C, OC);
    } else if (dinp.data != nullptr) {
        constexpr size_t kRoundedElements = size_t{1} << 22;
        const int block = dweight == nullptr && dout.f32()
                              ? static_cast<int>(std::max<size_t>(1, kRoundedElements / static_cast<size_t>(OC)))
                              : N;
        for (int r0 = 0; r0 < N; r0 += block) {
            const int rows = std::min(block, N - r0);
            const size_t at = static_cast<size_t>(r0);
            products.gemm(Bf16Gemm{false, false, rows, C, OC, dout.offset(at * static_cast<size_t>(OC)), OC, weight, C,
                                   true, dinp.offset(at * static_cast<size_t>(C)), C, nullptr, {}});
        }
    }
    // dweight (OC, C) (+)= dout^T (OC, N) @ inp (N, C)
    if (dweight != nullptr) {
        products.gemm(Bf16Gemm{true, false, OC, C, N, dout, OC, inp, C, !assign, dweight, C, nullptr, {}});
    }
    // The column slabs of matmul_backward's split, so dbias is bit-identical to it.
    if (dbias != nullptr) {
        column_sums(dbias, dout, N, OC, threads, threads > 1 && gemm_worth_splitting(N, OC, C), assign);
    }
}

namespace {

/// Columns [col, col + width) of `rows` rows of x (row length ld) from row r0, widened into
/// dst (rows, width), or narrowed back from it.
void widen_columns(ConstActPtr x, int r0, int rows, int ld, int col, int width, float* dst) {
    const size_t at = static_cast<size_t>(r0) * static_cast<size_t>(ld) + static_cast<size_t>(col);
    widen_rows(x, at, static_cast<size_t>(rows), static_cast<size_t>(ld), static_cast<size_t>(width), dst);
}
void narrow_columns(const float* src, ActPtr x, int r0, int rows, int ld, int col, int width) {
    const size_t at = static_cast<size_t>(r0) * static_cast<size_t>(ld) + static_cast<size_t>(col);
    narrow_rows(src, x, at, static_cast<size_t>(rows), static_cast<size_t>(ld), static_cast<size_t>(width));
}

/// matmul_add_columns with 16-bit buffers and an fp32 weight: inp's rows and dst's columns
/// widened a block of rows at a time, the product added with beta 1, the sum rounded once.
void add_columns_widened(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, const float* weight, int N, int K,
                         int width, float scale, int threads) {
    const int block = widened_gemm_rows(N, K, width);
    const size_t Ks = static_cast<size_t>(K);
    float* x = widened_operands(static_cast<size_t>(block) * (Ks + static_cast<size_t>(width)));
    float* y = x + static_cast<size_t>(block) * Ks;
    for (int r0 = 0; r0 < N; r0 += block) {
        const int rows = std::min(block, N - r0);
        widen_parallel(inp, static_cast<size_t>(r0) * Ks, static_cast<size_t>(rows) * Ks, x, threads);
        widen_columns(dst, r0, rows, dst_width, dst_col, width, y);
        gemm(false, true, rows, width, K, scale, x, K, weight, K, 1.f, y, width, threads);
        narrow_columns(y, dst, r0, rows, dst_width, dst_col, width);
    }
}

/// matmul_backward_columns with 16-bit buffers and an fp32 weight, a block of rows at a time:
/// dout's columns widened, dinp's rows widened, added to and rounded once, dweight added to.
void backward_columns_widened(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                              ConstActPtr inp, const float* weight, int N, int K, int width, float scale,
                              int threads) {
    const int block = widened_gemm_rows(N, K, width);
    const size_t Ks = static_cast<size_t>(K);
    const size_t Bs = static_cast<size_t>(block);
    float* d = widened_operands(Bs * (2 * Ks + static_cast<size_t>(width)));
    float* x = d + Bs * static_cast<size_t>(width);
    float* g = x + Bs * Ks;
    for (int r0 = 0; r0 < N; r0 += block) {
        const int rows = std::min(block, N - r0);
        const size_t at = static_cast<size_t>(r0) * Ks;
        const size_t n = static_cast<size_t>(rows) * Ks;
        widen_columns(dout, r0, rows, dout_width, dout_col, width, d);
        if (dinp.data != nullptr) {
            widen_parallel(dinp, at, n, g, threads);
            gemm(false, false, rows, K, width, scale, d, width, weight, K, 1.f, g, K, threads);
            narrow_parallel(g, ConstActPtr{}, dinp, at, n, threads);
        }
        if (dweight != nullptr) {
            widen_parallel(inp, at, n, x, threads);
            gemm(true, false, width, K, rows, scale, d, width, x, K, 1.f, dweight, K, threads);
        }
    }
}

}  // namespace

void matmul_add_columns(Bf16Products* products, ActPtr dst, int dst_width, int dst_col, ConstActPtr inp,
                        ConstActPtr weight, int N, int K, int width, float scale, int threads) {
    const size_t col = static_cast<size_t>(dst_col);
    if (products != nullptr) {
        // The product and the old columns are summed in fp32 and rounded once.
        products->gemm(Bf16Gemm{false, true, N, width, K, inp, K, weight, K, true, dst.offset(col), dst_width, nullptr,
                                {}, scale});
        return;
    }
    if (!dst.f32() || !inp.f32()) {
        add_columns_widened(dst, dst_width, dst_col, inp, weight.as_f32(), N, K, width, scale, threads);
        return;
    }
    gemm(false, true, N, width, K, scale, inp.as_f32(), K, weight.as_f32(), K, 1.f, dst.as_f32() + col, dst_width,
         threads);
}

void matmul_backward_columns(Bf16Products* products, ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width,
                             int dout_col, ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                             int threads) {
    const ConstActPtr d = dout.offset(static_cast<size_t>(dout_col));
    if (products != nullptr) {
        if (dinp.data != nullptr) {
            products->gemm(Bf16Gemm{false, false, N, K, width, d, dout_width, weight, K, true, dinp, K, nullptr, {},
                                    scale});
        }
        if (dweight != nullptr) {
            products->gemm(Bf16Gemm{true, false, width, K, N, d, dout_width, inp, K, true, ActPtr(dweight), K, nullptr,
                                    {}, scale});
        }
        return;
    }
    if (!dout.f32() || !inp.f32() || (dinp.data != nullptr && !dinp.f32())) {
        backward_columns_widened(dinp, dweight, dout, dout_width, dout_col, inp, weight.as_f32(), N, K, width, scale,
                                 threads);
        return;
    }
    if (dinp.data != nullptr) {
        gemm(false, false, N, K, width, scale, d.as_f32(), dout_width, weight.as_f32(), K, 1.f, dinp.as_f32(), K,
             threads);
    }
    if (dweight != nullptr) {
        gemm(true, false, width, K, N, scale, d.as_f32(), dout_width, inp.as_f32(), K, 1.f, dweight, K, threads);
    }
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, int threads) {
    const Gemm g{trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
    const bool parallel = threads > 1 && gemm_worth_splitting(M, N, K);
#pragma omp parallel num_threads(threads) if (parallel)
    run_gemm_part(g, omp_get_thread_num(), omp_get_num_threads());
}

}  // namespace zt::cpu
