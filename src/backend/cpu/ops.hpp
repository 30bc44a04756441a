// The CPU ops behind CpuBackend, one .cpp file per op group with the base name of its CUDA
// twin in src/backend/cuda/ (declared in ops.cuh there), so an op and its twin sit side by
// side: matmul.cpp and matmul.cu, attention.cpp and attention.cu, ...
//
// Each op is a free function zt::cpu::<op>(..., int threads) that runs on an OpenMP team
// of at most `threads` (the backend's thread count, where ops.cuh passes the stream).
// Shapes, the row-major layout and the accumulate-into-gradient convention are those of
// backend.hpp; CpuBackend's methods forward to these. What the op files share (thresholds,
// vectorizable math, sgemm, partitions) is in cpu_common.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt::cpu {

// ---- matmul.cpp -----------------------------------------------------------------------

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                    int threads);
/// `grads` = kAssign writes dweight and dbias instead of adding into them (Backend::matmul_backward).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, int threads, GradWrite grads = GradWrite::kAdd);

/// The typed products without 16-bit products (fp16 storage, or bf16 where the CPU has no
/// bf16 instructions): row blocks widened to fp32, the fp32 op on them, the 16-bit outputs
/// narrowed once. out = inp @ weight^T + bias [+ residual] (residual.data may be null).
/// While N fits one block (widened_gemm_rows) every output equals the fp32 op on the widened
/// operands bit for bit. Past it, dbias still does; dweight adds the blocks' products in
/// order, and out and dinp may differ in the last fp32 bit (sgemm's sums depend on where
/// a row falls in a thread's slab).
void matmul_forward_widened(ActPtr out, ConstActPtr inp, const float* weight, const float* bias,
                            ConstActPtr residual, int N, int C, int OC, int threads);
void matmul_backward_widened(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                             const float* weight, int N, int C, int OC, int threads,
                             GradWrite grads = GradWrite::kAdd);
/// Rows per widened block for a product of inner size C and outer size OC (a multiple of 16,
/// at least 16, all N rows when the operands fit the block budget).
int widened_gemm_rows(int N, int C, int OC);
/// The widened products' fp32 scratch for that product: its backward's (the larger) block.
size_t widened_operand_floats(int N, int C, int OC);

// ---- bf16_products.cpp: bf16 products through oneDNN (cpu_bf16.hpp) -------------------

/// One row-major product C (M, N) = [C +] op(A) (M, K) @ op(B) (K, N) [+ bias (N)] [+ add
/// (M, N)]: fp32 accumulation, C rounded once to its dtype. A and B are used as stored when
/// bf16 and rounded to bf16 first when fp32; C and add are fp32 or bf16 (add read with ldc).
/// Built by aggregate initialization, fields in this order.
struct Bf16Gemm {
    bool trans_a = false;
    bool trans_b = false;
    int M = 0;
    int N = 0;
    int K = 0;
    ConstActPtr A;
    int lda = 0;
    ConstActPtr B;
    int ldb = 0;
    bool accumulate = false;  ///< C += product (sgemm's beta = 1) instead of C = product
    ActPtr C;
    int ldc = 0;
    const float* bias = nullptr;
    ConstActPtr add;  ///< add.data null: nothing added
    float alpha = 1.f;  ///< C = [C +] alpha * op(A) @ op(B) [+ bias] [+ add]
};

/// The oneDNN engine, stream, per-shape primitives and bf16 operand and primitive scratch of
/// one user. One object serves one thread at a time; objects on different threads share
/// nothing (a product called inside an OpenMP team runs on its calling thread alone).
/// Only made where cpu_bf16_products().native (throws in a build without oneDNN).
class Bf16Products {
  public:
    explicit Bf16Products(int threads);
    ~Bf16Products();
    Bf16Products(const Bf16Products&) = delete;
    Bf16Products& operator=(const Bf16Products&) = delete;
    void gemm(const Bf16Gemm& g);

  private:
    struct Impl;
    std::unique_ptr<Impl> m_impl;
    int m_threads = 1;
};

/// matmul_forward (with residual: matmul_residual_forward) / matmul_backward with every
/// product through `products`, fp32 or bf16 activations and weights (bf16 weights are read
/// as stored); dbias sums dout's columns in fp32 as the sgemm forms do.
void matmul_forward_bf16(Bf16Products& products, ActPtr out, ConstActPtr inp, ConstActPtr weight,
                         const float* bias, ConstActPtr residual, int N, int C, int OC);
/// Whether matmul_backward_bf16 runs the input gradient of a weight OC rows long (16-bit
/// dout) as a sliced reduction, and the rows of its blocks: their fp32 partial sums,
/// reduction_slice_rows(N, C) x C floats, are the calling thread's scratch (the memory plan's).
bool reduces_in_slices(int OC);
int reduction_slice_rows(int N, int C);
void matmul_backward_bf16(Bf16Products& products, ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout,
                          ConstActPtr inp, ConstActPtr weight, int N, int C, int OC, int threads,
                          GradWrite grads = GradWrite::kAdd);
/// dst's columns [dst_col, dst_col + width) += scale * inp (N, K) @ weight (width, K)^T, and
/// its backward (Backend::matmul_add_columns, matmul_backward_columns): products that read
/// and write the column range in place, on `products` where given (bf16), else sgemm with an
/// fp32 weight, 16-bit buffers widened a block of rows at a time; either way the old values
/// and the product are summed in fp32 and rounded once.
void matmul_add_columns(Bf16Products* products, ActPtr dst, int dst_width, int dst_col, ConstActPtr inp,
                        ConstActPtr weight, int N, int K, int width, float scale, int threads);
void matmul_backward_columns(Bf16Products* products, ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width,
                             int dout_col, ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                             int threads);

// ---- reduce.cpp -----------------------------------------------------------------------

double sum_squares(const float* x, size_t n, int threads);
/// Bit-identical to adding sum_squares() of each span (widened where 16-bit), in one OpenMP
/// region.
double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count, int threads);

// ---- layernorm.cpp, gelu.cpp, residual.cpp, adamw.cpp ----------------------------------------

// Typed activations (statistics and parameter gradients fp32).
void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight, const float* bias,
                       int N, int C, int threads);
void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C, int threads);

// Typed (ActPtr: fp32, bf16 or fp16 storage, each operand its own).
void gelu_forward(ActPtr out, ConstActPtr inp, size_t n, int threads);
void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n, int threads);

void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n, int threads);
void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col, int width,
                       int N, float scale, int threads);
void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask, int threads);

void adamw_update(float* param, float* m, float* v, const float* grad, size_t n, const AdamWStep& step,
                  int threads);
void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step, int threads);

/// C (M, N) = alpha op(A) op(B) + beta C, row-major, split over the team in slabs as the
/// products are.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, int threads);

// ---- muon.cpp (Backend::muon_momentum, newton_schulz, muon_apply) ----------------------
void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step, int threads);
/// step.ns_bf16: through `products` (oneDNN, bf16 CPUs), else OpenBLAS on bf16-rounded operands.
void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work, int threads,
                   Bf16Products* products = nullptr);
void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work, int threads);

// ---- attention.cpp ---------------------------------------------------------------------

/// Floats of backward scratch for a team of `threads`: per thread dP -> dS (T, T) and one
/// diagonal block of P.
size_t attention_scratch_floats(int T, int threads);
/// Grouped-query attention, backend.hpp's layout (GPT-2: NKV = NH, hs = C / NH); with
/// attend_from (B, T), query t attends to keys [attend_from[b*T + t], t] only, and the
/// blocked products skip the keys no query of a block reads (a window costs O(T * window));
/// the backward must be given the forward's attend_from.
/// Typed out, att, qkv, dqkv, dout: 16-bit operands are widened per head on the thread's
/// scratch and 16-bit results rounded once (the probabilities after O = P V used them),
/// unless every buffer is bf16 and `bf16` is given (one Bf16Products per team thread): then
/// the block products run in bf16 on the stored operands, with the probabilities and dS
/// rounded to bf16 as the products' inputs (PyTorch's CPU autocast does the same), the
/// softmax and its backward in fp32.
void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV, int hs,
                           int threads, const int32_t* attend_from = nullptr, Bf16Products* const* bf16 = nullptr);
void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att, int B,
                            int T, int NH, int NKV, int hs, int threads, const int32_t* attend_from = nullptr,
                            Bf16Products* const* bf16 = nullptr);
/// Inference attention of n new rows over a key/value cache (Backend::gqa_attention_cached).
void gqa_attention_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int past, int n, int NH,
                          int NKV, int hs, int window, int threads);

// ---- rmsnorm.cpp, rope.cpp, swiglu.cpp (Llama) ---------------------------------------------

// Typed activations (rstd and dweight fp32).
void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C, float eps,
                     int threads);
void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                      const float* rstd, int N, int C, int threads);

// Qwen3's q and k head norms on qkv rows (Backend::qk_norm_forward / backward).
void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight, int N,
                     int NH, int NKV, int hs, float eps, int threads);
void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                      const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV, int hs,
                      int threads);

void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs, int threads);
void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV, int hs,
                   int threads);

// Typed.
void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F, int threads);
void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F, int threads);

// ---- encoder.cpp -----------------------------------------------------------------------

// Typed out / dout (the tables and their gradients fp32).
void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     int threads);
void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T, int C,
                      int threads);

// ---- cross_entropy.cpp ------------------------------------------------------------------

/// Validates targets (< V) before any work and throws zt::Error on a bad one. Typed logits
/// (losses fp32).
void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp, float dloss,
                           int threads);
/// The vocabulary-parallel passes (Backend::cross_entropy_row_max and the two after it).
void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp, int threads);
void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                            int V, int Vp, int vocab_begin, int threads);
void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                         const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss, int threads);

// ---- cast.cpp --------------------------------------------------------------------------

/// Any dtype pair; same dtype: a copy (n * dtype_size bytes).
void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n);
/// dst (n of dst_type) = round(dst + src).
void accumulate(void* dst, DType dst_type, const float* src, size_t n);
/// x = float(T(x)) in place for T = t; fp32: nothing.
void round_to(float* x, size_t n, DType t);

}  // namespace zt::cpu
