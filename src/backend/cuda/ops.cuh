// The CUDA ops behind CudaBackend, one .cu file per op group, each with its CPU twin of the
// same base name in src/backend/cpu/ (declared in ops.hpp there) as the reference the gpu
// tests compare against.
//
// Pattern (after ggml's acc.cu, see STYLE.md): kernels in an anonymous namespace, and one
// launcher per op, zt::cuda::<op>(..., cudaStream_t), declared here, which checks what
// the kernel cannot (shapes, dtypes) with ZT_REQUIRE, launches and checks the launch with
// ZT_KERNEL_CHECK; CudaBackend's methods forward to these. Shapes, the row-major layout
// and the accumulate-into-gradient convention are those of backend.hpp. Every reduction
// has a fixed order (no atomics on floats), so results are bit-identical run to run.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gemm_plan.hpp"
#include "ztrain/backend/adamw_constants.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

namespace zt::cuda {

constexpr int kWarpSize = 32;
constexpr int kBlock = 256;  ///< threads per block of the element-wise kernels

/// Blocks of `threads` covering n items, at least 1 (a zero grid is a launch error).
inline unsigned grid_for(size_t n, int threads) {
    const size_t g = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
    return static_cast<unsigned>(g > 0 ? g : 1);
}

/// Sum over the 32 lanes of a warp, result in every lane (butterfly: a fixed order).
__device__ inline float warp_sum(float v) {
    for (int off = kWarpSize / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int off = kWarpSize / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

/// GELU, tanh approximation (GPT-2's), in the sigmoid form explained in gelu.cu; shared by
/// gelu.cu and matmul.cu's separate bias/GELU epilogue, so both compute the same values.
constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
__device__ inline float gelu_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }
__device__ inline float gelu_value(float x) {
    const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return x * gelu_sigmoid(2.f * u);
}

/// A device buffer owned by the backend that grows on demand (scratch for reductions and
/// index lists). Growing synchronizes the stream first, because kernels already enqueued
/// may still read the old buffer.
class Workspace {
  public:
    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    ~Workspace();
    void* get(size_t bytes, cudaStream_t stream);

  private:
    void* m_ptr = nullptr;
    size_t m_bytes = 0;
};

// ---- matmul.cu -----------------------------------------------------------------------

/// cuBLASLt state of one backend: handle, workspace, and a cuBLAS handle for products
/// cuBLASLt finds no algorithm for.
struct Blas {
    cublasLtHandle_t lt = nullptr;
    cublasHandle_t classic = nullptr;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
};

/// g through cuBLASLt, or, where it has no algorithm, its separate bias/GELU epilogue or
/// classic cuBLAS (which need g.c null and one dtype for the epilogue).
void gemm(const Blas& blas, const Gemm& g, cudaStream_t stream);
/// g through cuBLASLt alone: false, with nothing enqueued, where it has no algorithm.
bool gemm_lt(const Blas& blas, const Gemm& g, cudaStream_t stream);

/// Row-major helpers for the Backend layout (weight (OC, C), out = inp @ weight^T).
void matmul_forward(const Blas& blas, void* out, const void* inp, const void* weight, const void* bias,
                    int N, int C, int OC, DType dtype, bool gelu, void* pre_gelu, cudaStream_t stream);
void matmul_backward(const Blas& blas, void* dinp, void* dweight, const void* dout, const void* inp,
                     const void* weight, int N, int C, int OC, DType dtype, cudaStream_t stream);

/// Operands of the typed products converted to the product's dtype, and the fp32 product of
/// the epilogue fallback; grown on demand, reused call after call (stream-ordered).
struct MatmulScratch {
    Workspace weight;
    Workspace inp;
    Workspace dout;
    Workspace product;
};
/// The Backend's typed products (backend.hpp): out (N, OC) = inp @ weight^T + bias (fp32)
/// [+ residual (N, OC), null data: none], every buffer of any dtype, out rounded once.
/// Products of 16-bit buffers run in 16 bit (fp32 accumulate): see matmul.cu.
void typed_matmul_forward(const Blas& blas, ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                          ConstActPtr residual, int N, int C, int OC, MatmulScratch& scratch, cudaStream_t stream);
/// dinp (N, C) += dout @ weight (rounded once), dweight (OC, C, fp32) += dout^T @ inp; null
/// outputs skipped. The bias gradient is column_sum's.
void typed_matmul_backward(const Blas& blas, ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp,
                           ConstActPtr weight, int N, int C, int OC, MatmulScratch& scratch, cudaStream_t stream);

// ---- reduce.cu -----------------------------------------------------------------------

/// Rows per partial sum of the two-stage column reductions.
constexpr int kRowsPerChunk = 128;
/// The chunks are a grid's y dimension: at most 65535, so at most 8.4 M rows a call.
inline size_t column_chunks(int N) {
    const size_t chunks = (static_cast<size_t>(N) + kRowsPerChunk - 1) / kRowsPerChunk;
    ZT_REQUIRE(chunks <= 65535, "column reduction over ", N, " rows: ", chunks, " chunks of ", kRowsPerChunk,
               " rows, over the grid's limit of 65535");
    return chunks;
}

/// dst (C) += sum over rows of src (N, C, any dtype); scratch holds column_chunks(N) * C floats.
void column_sum(float* dst, ConstActPtr src, int N, int C, float* scratch, cudaStream_t stream);
/// dst (C) += sum over chunks of partial (chunks, C), chunks in order.
void column_finalize(float* dst, const float* partial, size_t chunks, int C, cudaStream_t stream);
/// Blocks of the first sum_squares pass (fixed, so the sum order does not depend on the GPU).
constexpr int kSumSquaresBlocks = 512;
/// Sum of x^2 in double over `count` spans (xs[i], ns[i] elements, each read in its dtype);
/// scratch holds count * kSumSquaresBlocks + 1 doubles. Synchronizes once.
double sum_squares(const ConstActPtr* xs, const size_t* ns, size_t count, double* scratch, cudaStream_t stream);

// ---- layernorm.cu, gelu.cu, residual.cu, adamw.cu ----------------------------------------
//
// From here on, the activations (ActPtr / ConstActPtr) are typed as backend.hpp says: read
// in their stored dtype, computed in fp32, written rounded once (typed.cuh); statistics,
// parameters and parameter gradients are fp32.

void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream);
/// scratch: 2 * column_chunks(N) * C floats (when dweight or dbias is wanted).
void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, cudaStream_t stream);

void gelu_forward(ActPtr out, ConstActPtr inp, size_t n, cudaStream_t stream);
void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n, cudaStream_t stream);

void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n, cudaStream_t stream);
void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col, int width,
                       int N, float scale, cudaStream_t stream);
void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask, cudaStream_t stream);

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, const AdamWConstants& k,
                  cudaStream_t stream);
/// One span of AdamWSpan's contract: the gradient read in its dtype, the updated master
/// rounded into `work` where it is set (k's weight decay already chosen for the span).
void adamw_update_span(const AdamWSpan& span, const AdamWConstants& k, cudaStream_t stream);

// ---- muon.cu (Backend::muon_momentum, newton_schulz, muon_apply) ------------------------
void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step, cudaStream_t stream);
/// sumsq_scratch: kSumSquaresBlocks + 1 doubles (the norm is read back to the host).
void newton_schulz(const Blas& blas, float* x, int rows, int cols, const MuonStep& step, float* work,
                   double* sumsq_scratch, cudaStream_t stream);
void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work,
                cudaStream_t stream);

// ---- attention.cu ---------------------------------------------------------------------

/// fp32 copies of one batch element's typed buffers (attention.cu's typed path): qkv and
/// dqkv (T, W), out and dout (T, NH*hs), the NH heads' scores (NH, T, T). Grown on demand.
struct AttentionScratch {
    Workspace qkv;
    Workspace dqkv;
    Workspace out;
    Workspace dout;
    Workspace scores;
};

/// Grouped-query attention, backend.hpp's layout (GPT-2: NKV = NH, hs = C / NH).
void gqa_attention_forward(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                           int hs, AttentionScratch& scratch, cudaStream_t stream);
/// The rows of a segmented attention (packed examples, a sliding window): query t of row b
/// attends to keys [from, t], from = attend_from[b*T + t]. Its products run on bands of
/// kAttentionBandRows queries each (score_bands, gemm_plan.hpp), from the first key any of
/// them attends to: a window of w costs O(T (w + kAttentionBandRows)), not O(T^2). Scores
/// outside every band are never written nor read.
constexpr int kAttentionBandRows = 128;
struct AttentionSegments {
    const int32_t* attend_from = nullptr;  ///< (B, T) device memory
    const int32_t* band_from = nullptr;    ///< (B, T) device memory: the k0 of each query's band
    std::vector<std::vector<ScoreBand>> bands;  ///< per batch element (host)
};
/// attend_from ((B, T) host memory, each value in [0, t]) and its bands, copied to the device
/// through `from_ws` and `band_ws` (stream-ordered; `band_host` keeps the host copy).
AttentionSegments attention_segments(const int32_t* attend_from, int B, int T, Workspace& from_ws,
                                     Workspace& band_ws, std::vector<int32_t>& band_host, cudaStream_t stream);

/// Block-diagonal causal forward on the segments' bands; att is zero outside [from, t] within
/// each band and unspecified outside the bands.
void gqa_attention_forward_segmented(const Blas& blas, ActPtr out, ActPtr att, ConstActPtr qkv,
                                     const AttentionSegments& segments, int B, int T, int NH, int NKV, int hs,
                                     AttentionScratch& scratch, cudaStream_t stream);
/// scratch: cuda_attention_scratch_floats(T, NH) floats; `wide` the typed path's copies.
/// segments (null: causal): the segmented forward's, whose bands the backward runs on; att is
/// read in [attend_from[t], t] only, so an att whose other entries are unspecified (the CPU's,
/// which skips key blocks) gives the same gradient.
void gqa_attention_backward(const Blas& blas, ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                            ConstActPtr att, const AttentionSegments* segments, int B, int T, int NH, int NKV,
                            int hs, AttentionScratch& wide, cudaStream_t stream);

// ---- rmsnorm.cu, rope.cu, swiglu.cu (Llama) ---------------------------------------------

void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C, float eps,
                     cudaStream_t stream);
/// scratch: column_chunks(N) * C floats (when dweight is wanted).
void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                      const float* rstd, int N, int C, float* scratch, cudaStream_t stream);
/// Qwen3's q and k head norms (Backend::qk_norm_forward / backward); scratch: 2 *
/// column_chunks(N) * hs floats (when the weight gradients are wanted).
void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int hs, float eps, cudaStream_t stream);
void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                      const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV, int hs,
                      float* scratch, cudaStream_t stream);

void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs,
                  cudaStream_t stream);
void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV, int hs,
                   cudaStream_t stream);

void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F, cudaStream_t stream);
void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F, cudaStream_t stream);

// ---- encoder.cu -----------------------------------------------------------------------

void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                     int C, cudaStream_t stream);
/// Host-side state of the deterministic dwte scatter (tokens bucketed on the host).
struct EncoderScratch {
    std::vector<int32_t> tokens;  ///< host copy of the batch's tokens
    std::vector<int32_t> index;   ///< [bucket offsets (nb + 1) | bucket token (nb) | rows (token >= 0)]
};
void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T, int C,
                      EncoderScratch& host, Workspace& ws, cudaStream_t stream);

// ---- cross_entropy.cu ------------------------------------------------------------------

/// Validates targets (< V) on the GPU; `flag` is one device int. Synchronizes to report a
/// bad target as zt::Error, as the CPU twin does.
void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                           float dloss, int* flag, cudaStream_t stream);

/// The vocabulary-parallel passes of backend.hpp (a rank's Vp columns from vocab_begin, the
/// first V real; 0 <= V <= Vp). row_max (N): each row's maximum over its real columns
/// (-inf where V = 0).
void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp, cudaStream_t stream);
/// sums (2, N): [sum of exp(logit - row_max) over real columns | target logit where this
/// slice holds it, else 0], with the group's row_max.
void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                            int V, int Vp, int vocab_begin, cudaStream_t stream);
/// losses (N) from the group's row_max and sums; dloss != 0: logits become this slice's
/// gradient (padded columns and ignored rows 0), rounded once.
void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                         const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss,
                         cudaStream_t stream);

// ---- cast.cu --------------------------------------------------------------------------

/// Any dtype pair; same dtype: a device copy (n * dtype_size bytes).
void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n, cudaStream_t stream);
/// dst (n of dst_type) = round(dst + src).
void accumulate(void* dst, DType dst_type, const float* src, size_t n, cudaStream_t stream);
/// x = float(T(x)) in place for T = t (rounded as cast rounds); fp32: nothing.
void round_to(float* x, size_t n, DType t, cudaStream_t stream);

}  // namespace zt::cuda
