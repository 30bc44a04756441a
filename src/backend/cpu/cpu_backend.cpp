// The CPU compute backend: every op of backend.hpp in fp32 on a shared-memory CPU.
//
// What it implements
//  - Every matrix product (matmul forward/backward, and Q.K^T, P.V and their gradients in
//    attention) is an OpenBLAS cblas_sgemm on the original buffers, with transpose flags and
//    leading dimensions doing the work (no transposing copies). Backward passes beta = 1 so
//    sgemm itself accumulates into the gradients.
//  - Everything else (also the Llama ops: RMSNorm, rotary embeddings, SwiGLU) is OpenMP
//    loops over rows written so GCC vectorizes them at plain -O3 (checked
//    with -fopt-info-vec): exp and sqrt are branch-free polynomial/Newton versions below,
//    because libm's expf/sqrtf keep loops scalar without -ffast-math / -fno-math-errno.
//  - The compute-heavy kernels are compiled twice with target_clones (x86-64-v3 = AVX2+FMA,
//    and the x86-64 baseline); the dynamic loader picks one per machine, so the binary runs
//    on any x86-64 and the build needs no -march flag.
//
// Threading (measured on the 2-core dev machine, Zen 3, OpenBLAS 0.3.21 pthread)
//  - OpenMP owns all the threads; OpenBLAS is set to ONE thread (deliberately, instead of
//    `threads`) and each product is split by us into one row or column slab per OpenMP
//    thread, each calling single-threaded sgemm. Letting OpenBLAS run its own pool made
//    sgemm ~1.8x slower (60 instead of 110 GFLOP/s) as soon as OpenMP regions ran between
//    products: idle libgomp workers spin (GOMP_SPINCOUNT) on the cores the OpenBLAS workers
//    need, and OpenBLAS workers spin after each call on the cores OpenMP needs. With one
//    pool nothing spins against anything, and the split loses nothing measurable. OMP_WAIT_
//    POLICY cannot be changed from here (libgomp reads it at load time), and need not be:
//    our own workers spinning between our own regions is what keeps them fast. It should be
//    PASSIVE only when ranks x threads exceed the cores (e.g. MPI tests on a small box).
//  - Concurrent single-threaded sgemm calls are safe in OpenBLAS >= 0.3.7: 3000 rounds of
//    concurrent block products matched the serial result bit for bit on 0.3.21.
//  - Every region uses fixed static partitions and no cross-thread reduction has an
//    unspecified order, so results are bit-identical run to run for a given thread count.
//
// Attention: one (batch, head) pair is one unit of work for one thread, whose products are
// sgemm calls on strided views of qkv (ld = 3C for GPT-2, (NH + 2 NKV) hs for grouped-query
// attention, which GPT-2's is the NKV = NH case of), restricted to the lower triangle of
// 64-row blocks. Against hand-written vectorized loops over the exact causal triangle this
// was 1.3-1.6x faster at hs = 64 (sgemm runs near peak; the loops are load/store bound),
// and 64-row blocks beat whole-square products by 1.5-1.7x at T = 256 (forward, backward).
//
// What it deliberately does not do
//  - No mixed precision and no fusion across ops (the interface is op by op).
//  - No flash-style attention: att (B, NH, T, T) is materialized because the interface
//    saves it for backward; at GPT-2 sizes it is small next to the MLP activations.
//  - No validation of token ids against the vocabulary (only the caller knows Vp);
//    cross-entropy targets are validated since V is known there.
#include "ztrain/backend/adamw_constants.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/stream_copy.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

// Function multi-versioning for the compute-heavy element-wise kernels (see header comment).
// Clang and non-x86 targets simply get the baseline build.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(ZT_NO_CLONES)
#define ZT_VEC_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ZT_VEC_CLONES
#endif

namespace zt {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
// Element-wise work below this many elements runs on the calling thread: waking the team
// costs more than the work.
constexpr size_t kParallelMinElements = size_t{1} << 14;
// Row and element-wise passes (layernorm, residual add, GELU) below this many elements run on
// the calling thread. On an idle machine a team halves a ~0.1 ms pass; on a loaded one every
// region waits for the thread whose core another job took, which cost layernorm and residual
// adds 10-30x their 1-thread time on the shared dev box (bench/cpu_notes.md). 2^19 keeps the
// (B*T, C) passes of GPT-2 small and of the bench's config b single-threaded, and the 4C-wide
// GELU passes parallel.
constexpr size_t kRowOpMinElements = size_t{1} << 19;
// Rows of the causal block decomposition in attention: products are done for the lower
// block triangle only, so only the diagonal blocks carry wasted (masked) work.
constexpr int kAttentionBlock = 64;

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
/// branch to the libm call, which stops vectorization and made AdamW 4x slower (compute-
/// bound at 5 GB/s instead of memory-bound at 22 GB/s). sqrt(0) = 0 exactly; denormal v
/// come out inaccurate but < 1e-19, far below any epsilon they are added to.
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
// sgemm partitioning
// ------------------------------------------------------------------------------------

/// One row-major sgemm: C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C.
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

// ------------------------------------------------------------------------------------
// Element-wise and row kernels (compiled per ISA, called on chunks from OpenMP loops)
// ------------------------------------------------------------------------------------

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

ZT_VEC_CLONES
void layernorm_row_kernel(float* __restrict out, float* mean_out, float* rstd_out,
                          const float* __restrict x, const float* __restrict w,
                          const float* __restrict b, int C) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < C; ++i) {
        sum += x[i];
    }
    const float mean = sum / static_cast<float>(C);
    // Two-pass variance: no cancellation when |mean| >> std.
    float var = 0.f;
#pragma omp simd reduction(+ : var)
    for (int i = 0; i < C; ++i) {
        const float d = x[i] - mean;
        var += d * d;
    }
    const float rstd = 1.f / std::sqrt(var / static_cast<float>(C) + kLayerNormEps);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

/// dinp += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = dout * w.
ZT_VEC_CLONES
void layernorm_dinp_row_kernel(float* __restrict dinp, const float* __restrict dout,
                               const float* __restrict x, const float* __restrict w, float mean,
                               float rstd, int C) {
    float sum_dnorm = 0.f;
    float sum_dnorm_norm = 0.f;
#pragma omp simd reduction(+ : sum_dnorm, sum_dnorm_norm)
    for (int i = 0; i < C; ++i) {
        const float norm = (x[i] - mean) * rstd;
        const float dnorm = dout[i] * w[i];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * norm;
    }
    const float mean_dnorm = sum_dnorm / static_cast<float>(C);
    const float mean_dnorm_norm = sum_dnorm_norm / static_cast<float>(C);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        const float norm = (x[i] - mean) * rstd;
        const float dnorm = dout[i] * w[i];
        dinp[i] += (dnorm - mean_dnorm - norm * mean_dnorm_norm) * rstd;
    }
}

/// dweight[c] += sum_r dout[r, c] * norm[r, c]; dbias[c] += sum_r dout[r, c], c in [c0, c1).
ZT_VEC_CLONES
void layernorm_param_kernel(float* __restrict dweight, float* __restrict dbias,
                            const float* __restrict dout, const float* __restrict inp,
                            const float* __restrict mean, const float* __restrict rstd, int N,
                            int C, int c0, int c1) {
    for (int r = 0; r < N; ++r) {
        const float* d = dout + static_cast<size_t>(r) * C;
        const float* x = inp + static_cast<size_t>(r) * C;
        const float m = mean[r];
        const float s = rstd[r];
        if (dweight != nullptr) {
#pragma omp simd
            for (int c = c0; c < c1; ++c) {
                dweight[c] += d[c] * ((x[c] - m) * s);
            }
        }
        if (dbias != nullptr) {
#pragma omp simd
            for (int c = c0; c < c1; ++c) {
                dbias[c] += d[c];
            }
        }
    }
}

ZT_VEC_CLONES
void gelu_forward_kernel(float* __restrict out, const float* __restrict inp, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
        out[i] = x * sigmoid_approx(2.f * u);
    }
}

/// d/dx [x * s(2u)] = s + x * s * (1 - s) * 2 * du/dx, s = sigmoid(2u) = 0.5 * (1 + tanh u).
ZT_VEC_CLONES
void gelu_backward_kernel(float* __restrict dinp, const float* __restrict inp,
                          const float* __restrict dout, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
        const float du = kSqrt2OverPi * (1.f + 3.f * kGeluCubic * x * x);
        const float s = sigmoid_approx(2.f * u);
        const float grad = s + x * s * (1.f - s) * 2.f * du;
        dinp[i] += grad * dout[i];
    }
}

ZT_VEC_CLONES
void add_kernel(float* out, const float* a, const float* b, size_t n) {
    // out may alias a or b (documented), so no __restrict; the loop is still a pure
    // element-wise map and GCC vectorizes it with a run-time overlap check.
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        out[i] = a[i] + b[i];
    }
}

ZT_VEC_CLONES
double sum_squares_kernel(const float* x, size_t n) {
    double acc = 0.0;
#pragma omp simd reduction(+ : acc)
    for (size_t i = 0; i < n; ++i) {
        const double v = static_cast<double>(x[i]);
        acc += v * v;
    }
    return acc;
}

ZT_VEC_CLONES
void adamw_kernel(float* __restrict param, float* __restrict m, float* __restrict v,
                  const float* __restrict grad, size_t n, AdamWConstants k) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = grad[i] * k.grad_scale;
        const float mi = k.beta1 * m[i] + k.one_minus_beta1 * g;
        const float vi = k.beta2 * v[i] + k.one_minus_beta2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        const float mhat = mi * k.inv_bc1;
        const float vhat = vi * k.inv_bc2;
        const float denom = sqrt_approx(vhat) + k.eps;  // vhat >= 0 by construction
        const float p = param[i];
        param[i] = p - k.lr * (mhat / denom + k.weight_decay * p);
    }
}

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
ZT_VEC_CLONES
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

/// One RMSNorm row: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); returns rstd.
ZT_VEC_CLONES
float rmsnorm_row_kernel(float* __restrict out, const float* __restrict x, const float* __restrict w, int C,
                         float eps) {
    float sum_sq = 0.f;
#pragma omp simd reduction(+ : sum_sq)
    for (int i = 0; i < C; ++i) {
        sum_sq += x[i] * x[i];
    }
    const float rstd = 1.f / std::sqrt(sum_sq / static_cast<float>(C) + eps);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        out[i] = x[i] * rstd * w[i];
    }
    return rstd;
}

/// dinp += rstd * (dout * w - x * rstd^2 * mean(dout * w * x)): out = x * r(x) * w with
/// dr/dx_j = -r^3 x_j / C.
ZT_VEC_CLONES
void rmsnorm_dinp_row_kernel(float* __restrict dinp, const float* __restrict dout, const float* __restrict x,
                             const float* __restrict w, float rstd, int C) {
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < C; ++i) {
        dot += dout[i] * w[i] * x[i];
    }
    const float coef = rstd * rstd * dot / static_cast<float>(C);
#pragma omp simd
    for (int i = 0; i < C; ++i) {
        dinp[i] += rstd * (dout[i] * w[i] - x[i] * coef);
    }
}

/// dweight[c] += sum_r dout[r, c] * inp[r, c] * rstd[r] for c in [c0, c1).
ZT_VEC_CLONES
void rmsnorm_dweight_kernel(float* __restrict dweight, const float* __restrict dout, const float* __restrict inp,
                            const float* __restrict rstd, int N, int C, int c0, int c1) {
    for (int r = 0; r < N; ++r) {
        const float* d = dout + static_cast<size_t>(r) * C;
        const float* x = inp + static_cast<size_t>(r) * C;
        const float s = rstd[r];
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
            dweight[c] += d[c] * (x[c] * s);
        }
    }
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

/// out (n) = silu(gate) * up, silu(x) = x * sigmoid(x).
ZT_VEC_CLONES
void swiglu_forward_kernel(float* __restrict out, const float* __restrict gate, const float* __restrict up,
                           size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        out[i] = g * sigmoid_approx(g) * up[i];
    }
}

/// dgate += dout * up * silu'(gate), dup += dout * silu(gate); silu'(x) = s * (1 + x * (1 - s)).
ZT_VEC_CLONES
void swiglu_backward_kernel(float* __restrict dgate, float* __restrict dup, const float* __restrict gate,
                            const float* __restrict up, const float* __restrict dout, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float s = sigmoid_approx(g);
        dgate[i] += dout[i] * up[i] * (s * (1.f + g * (1.f - s)));
        dup[i] += dout[i] * (g * s);
    }
}

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

// ------------------------------------------------------------------------------------
// The backend
// ------------------------------------------------------------------------------------

/// [begin, end) of chunk `part` when n items are split into `parts` near-equal chunks whose
/// edges are multiples of `align` items (keeps vector loops and cache lines whole).
inline void split_range(size_t n, int part, int parts, size_t align, size_t* begin, size_t* end) {
    size_t chunk = (n + static_cast<size_t>(parts) - 1) / static_cast<size_t>(parts);
    chunk = (chunk + align - 1) / align * align;
    *begin = std::min(n, static_cast<size_t>(part) * chunk);
    *end = std::min(n, *begin + chunk);
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

inline AttentionLayout rope_layout(int NH, int NKV, int hs) {
    ZT_REQUIRE(hs > 0 && hs % 2 == 0, "rope: head size ", hs, " must be even and positive");
    return attention_layout(NH, NKV, hs);
}

class CpuBackend final : public Backend {
  public:
    explicit CpuBackend(int threads) {
        if (threads <= 0) {
            threads = static_cast<int>(std::thread::hardware_concurrency());
        }
        m_threads = std::max(1, threads);
        omp_set_num_threads(m_threads);
        // OpenBLAS runs single-threaded inside our OpenMP team (see the header comment).
        openblas_set_num_threads(1);
    }

    std::string name() const override { return "cpu"; }
    int threads() const override { return m_threads; }

    float* alloc_floats(size_t n) override {
        // 64-byte alignment: a cache line and a full AVX-512 vector; at least one line so a
        // zero-size request still yields a unique, freeable pointer.
        const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
        void* p = nullptr;
        const int rc = posix_memalign(&p, 64, bytes);
        ZT_REQUIRE(rc == 0 && p != nullptr, "posix_memalign of ", bytes, " bytes failed (rc ", rc,
                   ")");
        zero(static_cast<float*>(p), bytes / sizeof(float));
        return static_cast<float*>(p);
    }

    void free(void* p) override { std::free(p); }

    // One memset/memcpy on the calling thread: a second thread does not add write bandwidth
    // on the dev box (496 MB: 55-72 ms on 1 thread, 50-65 ms on 2, min of 12), and on a
    // loaded machine a parallel region waits for the thread whose core is taken.
    void zero(float* p, size_t n) override { std::memset(p, 0, n * sizeof(float)); }

    void copy(float* dst, const float* src, size_t n) override {
        std::memcpy(dst, src, n * sizeof(float));
    }

    void to_host_past_cache(void* host_dst, const void* src, size_t bytes) override {
        copy_past_cache(host_dst, src, bytes);
    }

    // --------------------------------------------------------------------------------
    // precision: the span conversions of core/dtype (OpenMP, round to nearest even)
    // --------------------------------------------------------------------------------

    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
        if (dst_type == src_type) {
            if (dst != src && n > 0) std::memcpy(dst, src, n * dtype_size(dst_type));
        } else if (src_type == DType::kF32) {
            convert_from_f32(static_cast<const float*>(src), dst, n, dst_type);
        } else if (dst_type == DType::kF32) {
            convert_to_f32(src, static_cast<float*>(dst), n, src_type);
        } else {
            // bf16 <-> fp16: the 16-bit value widens to fp32 exactly, so converting element
            // by element equals a pass to fp32 and one back, without an fp32 buffer.
            const long long N = static_cast<long long>(n);
            const uint16_t* s = static_cast<const uint16_t*>(src);
            uint16_t* d = static_cast<uint16_t*>(dst);
            if (src_type == DType::kBF16) {
                #pragma omp parallel for schedule(static)
                for (long long i = 0; i < N; ++i) d[i] = f32_to_f16(bf16_to_f32(s[i]));
            } else {
                #pragma omp parallel for schedule(static)
                for (long long i = 0; i < N; ++i) d[i] = f32_to_bf16(f16_to_f32(s[i]));
            }
        }
    }

    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override {
        accumulate_into(dst, src, n, dst_type);
    }

    void round_to(float* x, size_t n, DType t) override { round_to_dtype(x, n, t); }
    void zero_bytes(void* p, size_t bytes) override {
        if (bytes > 0) std::memset(p, 0, bytes);
    }

    // --------------------------------------------------------------------------------
    // matmul
    // --------------------------------------------------------------------------------

    void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                        int C, int OC) override {
        // out (N, OC) = inp (N, C) @ weight (OC, C)^T [+ bias]. The bias is broadcast into
        // out first and folded into the product with beta = 1, so it costs no extra pass.
        Gemm g;
        g.trans_a = false;
        g.trans_b = true;
        g.M = N;
        g.N = OC;
        g.K = C;
        g.A = inp;
        g.lda = C;
        g.B = weight;
        g.ldb = C;
        g.beta = bias != nullptr ? 1.f : 0.f;
        g.C = out;
        g.ldc = OC;
        const bool parallel = m_threads > 1 && gemm_worth_splitting(N, OC, C);
#pragma omp parallel num_threads(m_threads) if (parallel)
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

    void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int N, int C, int OC) override {
        // dinp (N, C) += dout (N, OC) @ weight (OC, C)
        Gemm gi;
        gi.M = N;
        gi.N = C;
        gi.K = OC;
        gi.A = dout;
        gi.lda = OC;
        gi.B = weight;
        gi.ldb = C;
        gi.beta = 1.f;
        gi.C = dinp;
        gi.ldc = C;
        // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
        Gemm gw;
        gw.trans_a = true;
        gw.M = OC;
        gw.N = C;
        gw.K = N;
        gw.A = dout;
        gw.lda = OC;
        gw.B = inp;
        gw.ldb = C;
        gw.beta = 1.f;
        gw.C = dweight;
        gw.ldc = C;
        const bool parallel = m_threads > 1 && gemm_worth_splitting(N, OC, C);
        // One region for all three outputs: they are independent, so no barrier between.
#pragma omp parallel num_threads(m_threads) if (parallel)
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

    // --------------------------------------------------------------------------------
    // layernorm
    // --------------------------------------------------------------------------------

    void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, int N, int C) override {
        const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            const size_t off = static_cast<size_t>(r) * C;
            layernorm_row_kernel(out + off, mean + r, rstd + r, inp + off, weight, bias, C);
        }
    }

    void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, const float* mean,
                            const float* rstd, int N, int C) override {
        const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel num_threads(m_threads) if (parallel)
        {
            // dinp: rows are independent.
            if (dinp != nullptr) {
#pragma omp for schedule(static) nowait
                for (int r = 0; r < N; ++r) {
                    const size_t off = static_cast<size_t>(r) * C;
                    layernorm_dinp_row_kernel(dinp + off, dout + off, inp + off, weight, mean[r],
                                              rstd[r], C);
                }
            }
            // dweight/dbias sum over rows: each thread owns a slab of channels and walks all
            // rows, which is race-free and deterministic without per-thread copies.
            if (dweight != nullptr || dbias != nullptr) {
                size_t c0 = 0;
                size_t c1 = 0;
                split_range(static_cast<size_t>(C), omp_get_thread_num(), omp_get_num_threads(), 16,
                            &c0, &c1);
                if (c1 > c0) {
                    layernorm_param_kernel(dweight, dbias, dout, inp, mean, rstd, N, C,
                                           static_cast<int>(c0), static_cast<int>(c1));
                }
            }
        }
    }

    // --------------------------------------------------------------------------------
    // element-wise
    // --------------------------------------------------------------------------------

    void gelu_forward(float* out, const float* inp, size_t n) override {
        parallel_chunks(n,
                        [&](size_t b, size_t e) { gelu_forward_kernel(out + b, inp + b, e - b); });
    }

    void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
        parallel_chunks(n, [&](size_t b, size_t e) {
            gelu_backward_kernel(dinp + b, inp + b, dout + b, e - b);
        });
    }

    void residual_forward(float* out, const float* a, const float* b, size_t n) override {
        parallel_chunks(
            n, [&](size_t lo, size_t hi) { add_kernel(out + lo, a + lo, b + lo, hi - lo); });
    }

    double sum_squares(const float* x, size_t n) override {
        // Per-thread partial sums combined in thread order: deterministic, unlike an OpenMP
        // reduction clause whose combination order is unspecified.
        std::vector<double> partial(static_cast<size_t>(m_threads), 0.0);
        const bool parallel = n >= kParallelMinElements;
#pragma omp parallel num_threads(m_threads) if (parallel)
        {
            size_t b = 0;
            size_t e = 0;
            split_range(n, omp_get_thread_num(), omp_get_num_threads(), 16, &b, &e);
            if (e > b) {
                partial[static_cast<size_t>(omp_get_thread_num())] =
                    sum_squares_kernel(x + b, e - b);
            }
        }
        double total = 0.0;
        for (double p : partial) {
            total += p;
        }
        return total;
    }

    double sum_squares_spans(const float* const* xs, const size_t* ns, size_t count) override {
        // One region for all spans (a model has dozens of tensors; on a loaded machine each
        // region can wait a scheduler tick for a thread whose core is taken). Each span is
        // split exactly as sum_squares() splits it and the partials are added in the same
        // order, so the result is bit-identical to calling sum_squares() per span.
        std::vector<double> partial(count * static_cast<size_t>(m_threads), 0.0);
        size_t total_n = 0;
        for (size_t i = 0; i < count; ++i) {
            total_n += ns[i];
        }
#pragma omp parallel num_threads(m_threads) if (total_n >= kParallelMinElements)
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
                    partial[i * static_cast<size_t>(m_threads) + (split ? static_cast<size_t>(part) : 0)] =
                        sum_squares_kernel(xs[i] + b, e - b);
                }
            }
        }
        double total = 0.0;
        for (size_t i = 0; i < count; ++i) {
            double s = 0.0;
            for (int t = 0; t < m_threads; ++t) {
                s += partial[i * static_cast<size_t>(m_threads) + static_cast<size_t>(t)];
            }
            total += s;
        }
        return total;
    }

    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override {
        const AdamWConstants k = adamw_constants(step);
        AdamWConstants k_no_decay = k;
        k_no_decay.weight_decay = 0.f;
        size_t total_n = 0;
        for (size_t i = 0; i < count; ++i) {
            total_n += spans[i].n;
        }
        // One region for all spans (see sum_squares_spans); element-wise, so any split
        // gives the same result.
#pragma omp parallel num_threads(m_threads) if (total_n >= kParallelMinElements)
        {
            const int part = omp_get_thread_num();
            const int parts = omp_get_num_threads();
            for (size_t i = 0; i < count; ++i) {
                const AdamWSpan& sp = spans[i];
                size_t b = 0;
                size_t e = 0;
                split_range(sp.n, part, parts, 16, &b, &e);
                if (e > b) {
                    adamw_kernel(sp.param + b, sp.m + b, sp.v + b, sp.grad + b, e - b,
                                 sp.decay ? k : k_no_decay);
                }
            }
        }
    }

    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override {
        const AdamWConstants k = adamw_constants(step);
        parallel_chunks(n, [&](size_t b, size_t e) {
            adamw_kernel(param + b, m + b, v + b, grad + b, e - b, k);
        });
    }


    // --------------------------------------------------------------------------------
    // attention
    // --------------------------------------------------------------------------------
    //
    // One (batch, head) pair is one unit of work (see the header comment for why sgemm):
    // units are spread over the team, and each product covers only the lower triangle of
    // kAttentionBlock-row blocks, so the masked work is the upper halves of the diagonal
    // blocks. Row block [r0, r1) of queries needs keys [0, r1); key block [c0, c1) gets
    // gradient from queries [c0, T).
    //
    // Grouped-query attention only changes where a head's k and v start (key/value head
    // h / group): with NKV = NH the pointers, leading dimensions and products are exactly
    // GPT-2's. In backward a unit is (batch, key/value head) and walks its group's query
    // heads in order, because they all accumulate into the same dk and dv (race-free and
    // deterministic); with NKV = NH that is again one (batch, head) per unit.

    void gqa_attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV,
                               int hs) override {
        const AttentionLayout lay = attention_layout(NH, NKV, hs);
        const float scale = 1.f / std::sqrt(static_cast<float>(hs));
        const int units = B * NH;
        const int W = lay.row;
        const int O = lay.out_row;
#pragma omp parallel for num_threads(m_threads) schedule(static)
        for (int u = 0; u < units; ++u) {
            const int b = u / NH;
            const int h = u % NH;
            const float* row0 = qkv + static_cast<size_t>(b) * T * W;
            const float* q = row0 + static_cast<size_t>(h) * hs;
            const float* k = row0 + lay.k_offset + static_cast<size_t>(h / lay.group) * hs;
            const float* v = row0 + lay.v_offset + static_cast<size_t>(h / lay.group) * hs;
            float* p = att + static_cast<size_t>(u) * T * T;
            float* o = out + static_cast<size_t>(b) * T * O + static_cast<size_t>(h) * hs;
            // S = scale * Q K^T, row block [r0, r1) against keys [0, r1).
            for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
                const int r1 = std::min(T, r0 + kAttentionBlock);
                sgemm(false, true, r1 - r0, r1, hs, scale, q + static_cast<size_t>(r0) * W, W, k, W, 0.f,
                      p + static_cast<size_t>(r0) * T, T);
            }
            for (int t = 0; t < T; ++t) {
                causal_softmax_row_kernel(p + static_cast<size_t>(t) * T, t + 1, T);
            }
            // O = P V, same blocks (P is zero past the diagonal).
            for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
                const int r1 = std::min(T, r0 + kAttentionBlock);
                sgemm(false, false, r1 - r0, hs, r1, 1.f, p + static_cast<size_t>(r0) * T, T, v, W, 0.f,
                      o + static_cast<size_t>(r0) * O, O);
            }
        }
    }

    size_t attention_scratch_floats(int /*B*/, int T, int /*NH*/) const override {
        // Per thread: dP -> dS (T, T) and the causal copy of one diagonal block of P.
        return static_cast<size_t>(m_threads) * attention_thread_scratch(T);
    }
    static size_t attention_thread_scratch(int T) {
        return static_cast<size_t>(T) * T + static_cast<size_t>(kAttentionBlock) * kAttentionBlock;
    }

    void gqa_attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                                const float* att, int B, int T, int NH, int NKV, int hs) override {
        const AttentionLayout lay = attention_layout(NH, NKV, hs);
        const float scale = 1.f / std::sqrt(static_cast<float>(hs));
        const int units = B * NKV;
        const int W = lay.row;
        const int O = lay.out_row;
        const size_t tt = static_cast<size_t>(T) * T;
#pragma omp parallel num_threads(m_threads)
        {
            float* ds = scratch + static_cast<size_t>(omp_get_thread_num()) * attention_thread_scratch(T);
            float* pc = ds + tt;
#pragma omp for schedule(static)
            for (int u = 0; u < units; ++u) {
                const int b = u / NKV;
                const int kvh = u % NKV;
                const size_t row0 = static_cast<size_t>(b) * T;
                const float* k = qkv + row0 * W + lay.k_offset + static_cast<size_t>(kvh) * hs;
                const float* v = qkv + row0 * W + lay.v_offset + static_cast<size_t>(kvh) * hs;
                float* dk = dqkv + row0 * W + lay.k_offset + static_cast<size_t>(kvh) * hs;
                float* dv = dqkv + row0 * W + lay.v_offset + static_cast<size_t>(kvh) * hs;
                for (int h = kvh * lay.group; h < (kvh + 1) * lay.group; ++h) {
                    const float* q = qkv + row0 * W + static_cast<size_t>(h) * hs;
                    float* dq = dqkv + row0 * W + static_cast<size_t>(h) * hs;
                    const float* dout_h = dout + row0 * O + static_cast<size_t>(h) * hs;
                    const float* p = att + (static_cast<size_t>(b) * NH + h) * tt;
                    // dP = dO V^T (row blocks, keys [0, r1)).
                    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
                        const int r1 = std::min(T, r0 + kAttentionBlock);
                        sgemm(false, true, r1 - r0, r1, hs, 1.f, dout_h + static_cast<size_t>(r0) * O, O, v, W,
                              0.f, ds + static_cast<size_t>(r0) * T, T);
                    }
                    // dV += P^T dO: key block [c0, c1) gets contributions from queries [c0, T).
                    // Queries past the block read att as it is (every entry there is at or
                    // below the diagonal); only the diagonal block holds entries above it,
                    // which the interface leaves unspecified, so that block alone is copied
                    // with them zeroed (64 x 64 instead of the whole T x T).
                    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
                        const int c1 = std::min(T, c0 + kAttentionBlock);
                        const int bw = c1 - c0;
                        for (int r = 0; r < bw; ++r) {
                            causal_copy_row_kernel(pc + static_cast<size_t>(r) * kAttentionBlock,
                                                   p + static_cast<size_t>(c0 + r) * T + c0, r + 1, bw);
                        }
                        sgemm(true, false, bw, hs, bw, 1.f, pc, kAttentionBlock, dout_h + static_cast<size_t>(c0) * O,
                              O, 1.f, dv + static_cast<size_t>(c0) * W, W);
                        sgemm(true, false, bw, hs, T - c1, 1.f, p + static_cast<size_t>(c1) * T + c0, T,
                              dout_h + static_cast<size_t>(c1) * O, O, 1.f, dv + static_cast<size_t>(c0) * W, W);
                    }
                    for (int t = 0; t < T; ++t) {
                        softmax_backward_row_kernel(ds + static_cast<size_t>(t) * T, p + static_cast<size_t>(t) * T,
                                                    t + 1, T);
                    }
                    // dQ += scale * dS K.
                    for (int r0 = 0; r0 < T; r0 += kAttentionBlock) {
                        const int r1 = std::min(T, r0 + kAttentionBlock);
                        sgemm(false, false, r1 - r0, hs, r1, scale, ds + static_cast<size_t>(r0) * T, T, k, W, 1.f,
                              dq + static_cast<size_t>(r0) * W, W);
                    }
                    // dK += scale * dS^T Q.
                    for (int c0 = 0; c0 < T; c0 += kAttentionBlock) {
                        const int c1 = std::min(T, c0 + kAttentionBlock);
                        sgemm(true, false, c1 - c0, hs, T - c0, scale, ds + static_cast<size_t>(c0) * T + c0, T,
                              q + static_cast<size_t>(c0) * W, W, 1.f, dk + static_cast<size_t>(c0) * W, W);
                    }
                }
            }
        }
    }

    // --------------------------------------------------------------------------------
    // Llama: RMSNorm, rotary embeddings, SwiGLU
    // --------------------------------------------------------------------------------

    void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                         float eps) override {
        const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            const size_t off = static_cast<size_t>(r) * C;
            rstd[r] = rmsnorm_row_kernel(out + off, inp + off, weight, C, eps);
        }
    }

    void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                          const float* rstd, int N, int C) override {
        const bool parallel = static_cast<size_t>(N) * C >= kRowOpMinElements;
#pragma omp parallel num_threads(m_threads) if (parallel)
        {
            if (dinp != nullptr) {
#pragma omp for schedule(static) nowait
                for (int r = 0; r < N; ++r) {
                    const size_t off = static_cast<size_t>(r) * C;
                    rmsnorm_dinp_row_kernel(dinp + off, dout + off, inp + off, weight, rstd[r], C);
                }
            }
            // Channel slabs walking every row, as layernorm_backward's parameter gradients.
            if (dweight != nullptr) {
                size_t c0 = 0;
                size_t c1 = 0;
                split_range(static_cast<size_t>(C), omp_get_thread_num(), omp_get_num_threads(), 16, &c0, &c1);
                if (c1 > c0) {
                    rmsnorm_dweight_kernel(dweight, dout, inp, rstd, N, C, static_cast<int>(c0),
                                           static_cast<int>(c1));
                }
            }
        }
    }

    void rope_forward(float* out, const float* inp, const float* rope, int B, int T, int NH, int NKV,
                      int hs) override {
        const AttentionLayout lay = rope_layout(NH, NKV, hs);
        const int rows = B * T;
        const int half = hs / 2;
        const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
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

    void rope_backward(float* dinp, const float* dout, const float* rope, int B, int T, int NH, int NKV,
                       int hs) override {
        const AttentionLayout lay = rope_layout(NH, NKV, hs);
        const int rows = B * T;
        const int half = hs / 2;
        const bool in_place = dinp == dout;
        const bool parallel = static_cast<size_t>(rows) * lay.row >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
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

    void swiglu_forward(float* out, const float* inp, int N, int F) override {
        const bool parallel = static_cast<size_t>(N) * F >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            const float* gate = inp + static_cast<size_t>(r) * 2 * F;
            swiglu_forward_kernel(out + static_cast<size_t>(r) * F, gate, gate + F, static_cast<size_t>(F));
        }
    }

    void swiglu_backward(float* dinp, const float* inp, const float* dout, int N, int F) override {
        const bool parallel = static_cast<size_t>(N) * F >= kRowOpMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            const size_t off = static_cast<size_t>(r) * 2 * F;
            swiglu_backward_kernel(dinp + off, dinp + off + F, inp + off, inp + off + F,
                                   dout + static_cast<size_t>(r) * F, static_cast<size_t>(F));
        }
    }

    // --------------------------------------------------------------------------------
    // encoder
    // --------------------------------------------------------------------------------

    void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
        const int rows = B * T;
        const bool parallel = static_cast<size_t>(rows) * C >= kParallelMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < rows; ++r) {
            const int t = r % T;
            const float* e = wte + static_cast<size_t>(tokens[r]) * C;
            const float* pe = wpe + static_cast<size_t>(t) * C;
            add_kernel(out + static_cast<size_t>(r) * C, e, pe, static_cast<size_t>(C));
        }
    }

    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C) override {
        // Two rows may carry the same token, so rows cannot be split across threads; each
        // thread owns a slab of channels instead and walks every row in order (race-free
        // and deterministic).
        const bool parallel = static_cast<size_t>(B) * T * C >= kParallelMinElements;
#pragma omp parallel num_threads(m_threads) if (parallel)
        {
            size_t c0 = 0;
            size_t c1 = 0;
            split_range(static_cast<size_t>(C), omp_get_thread_num(), omp_get_num_threads(), 16,
                        &c0, &c1);
            const size_t w = c1 - c0;
            if (c1 > c0) {
                for (int r = 0; r < B * T; ++r) {
                    const int t = r % T;
                    const float* d = dout + static_cast<size_t>(r) * C + c0;
                    if (dwte != nullptr) {
                        float* g = dwte + static_cast<size_t>(tokens[r]) * C + c0;
                        add_kernel(g, g, d, w);
                    }
                    if (dwpe != nullptr) {
                        float* g = dwpe + static_cast<size_t>(t) * C + c0;
                        add_kernel(g, g, d, w);
                    }
                }
            }
        }
    }

    // --------------------------------------------------------------------------------
    // loss
    // --------------------------------------------------------------------------------

    void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int N, int V,
                               int Vp, float dloss) override {
        ZT_REQUIRE(V > 0 && V <= Vp, "cross-entropy: need 0 < V <= Vp (V=", V, ", Vp=", Vp, ")");
        // Validate before the parallel region: an exception must not escape an OpenMP region.
        for (int r = 0; r < N; ++r) {
            ZT_REQUIRE(targets[r] < V, "cross-entropy: target ", targets[r], " of row ", r,
                       " is not below the vocabulary size ", V);
        }
        const bool parallel = static_cast<size_t>(N) * Vp >= kParallelMinElements;
#pragma omp parallel for num_threads(m_threads) schedule(static) if (parallel)
        for (int r = 0; r < N; ++r) {
            float* row = logits + static_cast<size_t>(r) * Vp;
            if (targets[r] < 0) {
                losses[r] = 0.f;
                if (dloss != 0.f) {
                    std::memset(row, 0, static_cast<size_t>(Vp) * sizeof(float));
                }
                continue;
            }
            losses[r] = cross_entropy_row_kernel(row, targets[r], V, Vp, dloss);
        }
    }

  private:
    /// Runs fn(begin, end) over [0, n) split into one contiguous chunk per thread (chunk
    /// edges on 16-float boundaries = whole cache lines), or inline when n is small.
    template <typename Fn>
    void parallel_chunks(size_t n, Fn&& fn) {
        if (n < kRowOpMinElements || m_threads == 1) {
            if (n > 0) {
                fn(size_t{0}, n);
            }
            return;
        }
#pragma omp parallel num_threads(m_threads)
        {
            size_t b = 0;
            size_t e = 0;
            split_range(n, omp_get_thread_num(), omp_get_num_threads(), 16, &b, &e);
            if (e > b) {
                fn(b, e);
            }
        }
    }

    int m_threads = 1;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<CpuBackend>(threads);
}

}  // namespace zt
