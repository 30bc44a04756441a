// 16-bit activations emulated in fp32 buffers: a decorator that rounds every activation (and
// activation gradient) an op writes to the working dtype, in place.
//
// The buffers hold the numbers a 16-bit buffer would hold, at twice the memory. Training
// stores activations in their dtype (the typed ops, backend.hpp's ActPtr); this emulation is
// kept as their oracle: a model built with ActivationStorage::kEmulated computes through it,
// and the typed ops and model must match it bit for bit (tests/unit/test_typed_activations.cpp,
// TypedActivations.ModelStepEqualsTheEmulationBitForBit).
//
// What is rounded (the op's activation outputs) and what is not:
//   rounded: encoder/layernorm/rmsnorm/matmul/gelu/swiglu/residual/rope/attention outputs
//            (att included), the logits and, in a training forward, dlogits; dinp (dqkv)
//            of every backward op
//   kept:    LayerNorm mean/rstd, RMSNorm rstd, per-row losses, every parameter gradient
//            (dweight, dbias, encoder_backward: they accumulate in fp32 and are stored by the
//            model state), and every precision, optimizer and reduction op (forwarded
//            unchanged by ForwardingBackend).
// A projection that closes a residual branch is one op (matmul_residual_forward), so the
// branch output and the residual are added in fp32 and rounded once.
#pragma once

#include <memory>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/forwarding_backend.hpp"

namespace zt {

class ActivationRoundingBackend final : public ForwardingBackend {
  public:
    /// Rounds to `activation` (bf16 or fp16) on top of `inner`, which must outlive this and
    /// support that dtype (inner.round_to does the rounding, on inner's memory).
    ActivationRoundingBackend(Backend& inner, DType activation);

    // Everything not listed is forwarded unchanged (ForwardingBackend).

    // ---- activation outputs rounded ----
    /// The oracle multiplies by fp32 views of the weights, as the emulation always did.
    bool reads_weights_in(DType t) const override { return t == DType::kF32; }
    void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N, int C,
                        int OC) override;
    void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                 ConstActPtr residual, int N, int C, int OC) override;
    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                         ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override;
    void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                           const float* bias, int N, int C) override;
    void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override;
    void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override;
    void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override;
    void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override;
    void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col,
                           int width, int N, float scale) override;
    void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) override;
    /// As the separate ops (Backend's default), each output rounded as those ops round it.
    void matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight, int N,
                            int K, int width, float scale, ActPtr scratch) override {
        Backend::matmul_add_columns(dst, dst_width, dst_col, inp, weight, N, K, width, scale, scratch);
    }
    void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                 ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                 ActPtr scratch) override {
        Backend::matmul_backward_columns(dinp, dweight, dout, dout_width, dout_col, inp, weight, N, K, width, scale,
                                         scratch);
    }
    void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                               int hs) override;
    void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att,
                                int B, int T, int NH, int NKV, int hs) override;
    void gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv, const int32_t* attend_from, int B,
                                         int T, int NH, int NKV, int hs) override;
    void gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                          ConstActPtr att, const int32_t* attend_from, int B, int T, int NH, int NKV,
                                          int hs) override;
    void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override;
    void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                               float dloss) override;
    void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                             const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss) override;
    void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                         float eps) override;
    void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                          const float* rstd, int N, int C) override;
    void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight,
                         int N, int NH, int NKV, int hs, float eps) override;
    void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                          const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV,
                          int hs) override;
    void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs) override;
    void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV,
                       int hs) override;
    void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) override;
    void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) override;

  private:
    void round(float* x, size_t n) { inner().round_to(x, n, m_act); }
    /// A typed output: fp32 buffers are rounded here; a 16-bit one the op rounded itself.
    void round(ActPtr x, size_t n) {
        if (x.f32()) round(x.as_f32(), n);
    }
    DType m_act;
};

}  // namespace zt
