// 16-bit activations on a backend that computes in fp32: a decorator that rounds every
// activation (and activation gradient) an op writes to the working dtype, in place.
//
// The CPU computes in fp32 (OpenBLAS sgemm has no bf16 product worth using here), so a bf16
// or fp16 run there keeps fp32 buffers that hold 16-bit values: the same numbers a 16-bit
// buffer would hold, at twice the memory. This is that emulation, in one place: the model
// calls its ops through an ActivationRoundingBackend and never rounds anything itself.
//
// What is rounded (the op's activation outputs) and what is not:
//   rounded: encoder/layernorm/matmul/gelu/residual/attention outputs (att included), the
//            logits and, in a training forward, dlogits; dinp of every backward op
//   kept:    LayerNorm mean/rstd, per-row losses, every parameter gradient (dweight, dbias,
//            encoder_backward: they accumulate in fp32 and are stored by the model state),
//            and every precision, optimizer and reduction op (forwarded unchanged).
// A projection that closes a residual branch is one op (matmul_residual_forward), so the
// branch output and the residual are added in fp32 and rounded once.
#pragma once

#include <memory>

#include "ztrain/backend/backend.hpp"

namespace zt {

class ActivationRoundingBackend final : public Backend {
  public:
    /// Rounds to `activation` (bf16 or fp16) on top of `inner`, which must outlive this and
    /// support that dtype (inner.round_to does the rounding, on inner's memory).
    ActivationRoundingBackend(Backend& inner, DType activation);
    DType activation_dtype() const { return m_act; }

    std::string name() const override { return m_inner.name(); }
    BackendCapabilities capabilities() const override { return m_inner.capabilities(); }
    std::unique_ptr<OpClock> make_op_clock() const override { return m_inner.make_op_clock(); }
    int threads() const override { return m_inner.threads(); }

    // ---- forwarded unchanged: memory, precision, optimizer, reductions ----
    float* alloc_floats(size_t n) override { return m_inner.alloc_floats(n); }
    void* alloc_bytes(size_t bytes) override { return m_inner.alloc_bytes(bytes); }
    void free(void* p) override { m_inner.free(p); }
    void zero(float* p, size_t n) override { m_inner.zero(p, n); }
    void copy(float* dst, const float* src, size_t n) override { m_inner.copy(dst, src, n); }
    void to_device(void* dst, const void* host_src, size_t bytes) override { m_inner.to_device(dst, host_src, bytes); }
    void to_host(void* host_dst, const void* src, size_t bytes) override { m_inner.to_host(host_dst, src, bytes); }
    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
        m_inner.cast(dst, dst_type, src, src_type, n);
    }
    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override {
        m_inner.accumulate(dst, dst_type, src, n);
    }
    void zero_bytes(void* p, size_t bytes) override { m_inner.zero_bytes(p, bytes); }
    void round_to(float* x, size_t n, DType t) override { m_inner.round_to(x, n, t); }
    size_t attention_scratch_floats(int B, int T, int NH) const override {
        return m_inner.attention_scratch_floats(B, T, NH);
    }
    void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T,
                          int C) override {
        m_inner.encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    }
    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override {
        m_inner.adamw_update(param, m, v, grad, n, step);
    }
    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override {
        m_inner.adamw_update_spans(spans, count, step);
    }
    double sum_squares(const float* x, size_t n) override { return m_inner.sum_squares(x, n); }
    double sum_squares_spans(const float* const* xs, const size_t* ns, size_t count) override {
        return m_inner.sum_squares_spans(xs, ns, count);
    }

    // ---- activation outputs rounded ----
    void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                        int OC) override;
    void matmul_residual_forward(float* out, const float* inp, const float* weight, const float* bias,
                                 const float* residual, int N, int C, int OC) override;
    void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                         const float* weight, int N, int C, int OC) override;
    void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                           const float* bias, int N, int C) override;
    void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override;
    void gelu_forward(float* out, const float* inp, size_t n) override;
    void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
    void residual_forward(float* out, const float* a, const float* b, size_t n) override;
    void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) override;
    void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv, const float* att,
                            int B, int T, int C, int NH) override;
    void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override;
    void softmax_cross_entropy(float* losses, float* logits, const int32_t* targets, int N, int V, int Vp,
                               float dloss) override;

  private:
    void round(float* x, size_t n) { m_inner.round_to(x, n, m_act); }
    Backend& m_inner;
    DType m_act;
};

}  // namespace zt
