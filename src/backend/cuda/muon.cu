// Muon's three passes on the GPU, the CPU twin's (backend/cpu/muon.cpp) arithmetic: the
// momentum kernel, the Newton-Schulz iteration as cuBLAS products on the short side's Gram
// matrix (fp32, or bf16 operands on the tensor cores), and the decayed update with the 16-bit working copy rounded in the same kernel.
#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"

#include <cmath>

namespace zt::cuda {
namespace {

__global__ void momentum_kernel(float* m, float* update, const void* grad, DType grad_type, size_t n, float scale,
                                float momentum, bool nesterov) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = load_as_float(grad, grad_type, i) * scale;
    const float mi = m[i] + (1.f - momentum) * (g - m[i]);
    m[i] = mi;
    update[i] = nesterov ? g + momentum * (mi - g) : mi;
}

__global__ void scale_kernel(float* x, size_t n, float factor) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= factor;
}

__global__ void apply_kernel(float* param, const float* update, size_t n, float keep, float rate, void* work,
                             DType work_type) {
    const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float p = param[i] * keep - rate * update[i];
    param[i] = p;
    if (work != nullptr) store_rounded(work, work_type, i, p);
}

/// s.ns_steps iterations on x (rows, cols), already divided by its norm, with
/// gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) (C = alpha op(A)
/// op(B) + beta C, row-major), copy(dst, src, floats) and round(x, floats) (to bf16 values,
/// under s.ns_bf16). The Gram matrix is the short side's: Y Y^T (k = rows) with the update on
/// the left, or Y^T Y (k = cols) on the right, the same as torch's transpose, iterate,
/// transpose back; Y is X's operand copy. work: newton_schulz_work_floats(rows, cols).
template <class Gemm, class Copy, class Round>
void newton_schulz_iterations(float* x, int rows, int cols, const MuonStep& s, float* work, Gemm&& gemm, Copy&& copy,
                              Round&& round) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    const bool left = rows <= cols;
    const int k = left ? rows : cols;
    const size_t gram = static_cast<size_t>(k) * static_cast<size_t>(k);
    float* Y = work;
    float* A = work + numel;
    float* B = A + gram;
    for (int it = 0; it < s.ns_steps; ++it) {
        copy(Y, x, numel);
        if (s.ns_bf16) round(Y, numel);
        if (left) {
            gemm(false, true, k, k, cols, 1.f, Y, cols, Y, cols, 0.f, A, k);
        } else {
            gemm(true, false, k, k, rows, 1.f, Y, cols, Y, cols, 0.f, A, k);
        }
        if (s.ns_bf16) round(A, gram);
        copy(B, A, gram);
        gemm(false, false, k, k, k, s.c, A, k, A, k, s.b, B, k);  // B = b A + c A A
        if (s.ns_bf16) round(B, gram);
        if (left) {
            gemm(false, false, rows, cols, rows, 1.f, B, k, Y, cols, s.a, x, cols);  // X = a X + B Y
        } else {
            gemm(false, false, rows, cols, cols, 1.f, Y, cols, B, k, s.a, x, cols);  // X = a X + Y B
        }
    }
}

/// Row-major C (M, N) = alpha op(A) op(B) + beta C through column-major cuBLAS, as
/// C^T = op(B)^T op(A)^T.
/// bf16: fp32 operands holding bf16 values on the bf16 tensor cores (their down-conversion
/// exact), accumulated in fp32.
void row_major_sgemm(cublasHandle_t h, bool bf16, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                     int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (!bf16) {
        ZT_CUBLAS_CHECK(cublasSgemm(h, opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
        return;
    }
    ZT_CUBLAS_CHECK(cublasGemmEx(h, opb, opa, N, M, K, &alpha, B, CUDA_R_32F, ldb, A, CUDA_R_32F, lda, &beta, C,
                                 CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step, cudaStream_t stream) {
    if (n == 0) return;
    momentum_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(m, update, grad.data, grad.dtype, n, step.grad_scale,
                                                                step.momentum, step.nesterov);
    ZT_KERNEL_CHECK("muon_momentum");
}

void newton_schulz(const Blas& blas, float* x, int rows, int cols, const MuonStep& step, float* work,
                   double* sumsq_scratch, cudaStream_t stream) {
    const size_t numel = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    const ConstActPtr span(x);
    const double ss = sum_squares(&span, &numel, 1, sumsq_scratch, stream);
    const float inv = 1.f / std::fmax(static_cast<float>(std::sqrt(ss)), step.eps);
    scale_kernel<<<grid_for(numel, kBlock), kBlock, 0, stream>>>(x, numel, inv);
    ZT_KERNEL_CHECK("newton_schulz scale");
    ZT_CUBLAS_CHECK(cublasSetStream(blas.classic, stream));
    newton_schulz_iterations(
        x, rows, cols, step, work,
        [&](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B, int ldb,
            float beta, float* C, int ldc) {
            row_major_sgemm(blas.classic, step.ns_bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        },
        [&](float* dst, const float* src, size_t n) {
            ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        },
        [&](float* p, size_t n) { round_to(p, n, DType::kBF16, stream); });
}

void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work,
                cudaStream_t stream) {
    if (n == 0) return;
    apply_kernel<<<grid_for(n, kBlock), kBlock, 0, stream>>>(param, update, n, 1.f - decay, rate, work.data,
                                                             work.dtype);
    ZT_KERNEL_CHECK("muon_apply");
}

}  // namespace zt::cuda
