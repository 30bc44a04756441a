// ForwardingBackend: a Backend that passes every call to an inner Backend unchanged, the base
// of the decorators (ActivationRoundingBackend, ProfilingBackend). A decorator overrides only
// the methods whose behaviour it changes; a new Backend method is added here once instead of
// in every decorator.
//
// What it does not forward: GPT-2's attention_forward/attention_backward are not virtual
// (Backend defines them on top of gqa_attention_*), so they reach the inner backend through
// this class's gqa_attention_* and every decorator sees them.
//
// It does not own the inner backend; a decorator that must (ProfilingBackend) keeps the
// owning pointer itself.
#pragma once

#include <memory>
#include <string>

#include "ztrain/backend/backend.hpp"

namespace zt {

class ForwardingBackend : public Backend {
  public:
    /// `inner` must outlive this.
    explicit ForwardingBackend(Backend& inner) : m_inner(inner) {}
    /// The backend every call goes to.
    Backend& inner() const { return m_inner; }

    std::string name() const override { return m_inner.name(); }
    BackendCapabilities capabilities() const override { return m_inner.capabilities(); }
    std::unique_ptr<OpClock> make_op_clock() const override { return m_inner.make_op_clock(); }
    int threads() const override { return m_inner.threads(); }

    // ---- memory ----
    DeviceMemory& memory() override { return m_inner.memory(); }
    float* alloc_floats(size_t n) override { return m_inner.alloc_floats(n); }
    void* alloc_bytes(size_t bytes) override { return m_inner.alloc_bytes(bytes); }
    void free(void* p) override { m_inner.free(p); }
    void zero(float* p, size_t n) override { m_inner.zero(p, n); }
    void copy(float* dst, const float* src, size_t n) override { m_inner.copy(dst, src, n); }
    void copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                      size_t rows) override {
        m_inner.copy_strided(dst, dst_pitch, src, src_pitch, width, rows);
    }
    void to_device(void* dst, const void* host_src, size_t bytes) override { m_inner.to_device(dst, host_src, bytes); }
    void to_host(void* host_dst, const void* src, size_t bytes) override { m_inner.to_host(host_dst, src, bytes); }
    void to_host_past_cache(void* host_dst, const void* src, size_t bytes) override {
        m_inner.to_host_past_cache(host_dst, src, bytes);
    }

    // ---- precision ----
    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
        m_inner.cast(dst, dst_type, src, src_type, n);
    }
    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override {
        m_inner.accumulate(dst, dst_type, src, n);
    }
    void zero_bytes(void* p, size_t bytes) override { m_inner.zero_bytes(p, bytes); }
    void round_to(float* x, size_t n, DType t) override { m_inner.round_to(x, n, t); }

    void set_activation_dtype(DType t) override { m_inner.set_activation_dtype(t); }
    bool reads_weights_in(DType t) const override { return m_inner.reads_weights_in(t); }
    std::string activation_dtype_note(DType t) const override { return m_inner.activation_dtype_note(t); }

    // ---- GPT-2 compute ----
    void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N, int C,
                        int OC) override {
        m_inner.matmul_forward(out, inp, weight, bias, N, C, OC);
    }
    void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                 ConstActPtr residual, int N, int C, int OC) override {
        m_inner.matmul_residual_forward(out, inp, weight, bias, residual, N, C, OC);
    }
    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                         ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override {
        m_inner.matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, grads);
    }
    void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                           const float* bias, int N, int C) override {
        m_inner.layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    }
    void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override {
        m_inner.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    }
    void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override { m_inner.gelu_forward(out, inp, n); }
    void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override {
        m_inner.gelu_backward(dinp, inp, dout, n);
    }
    void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override {
        m_inner.residual_forward(out, a, b, n);
    }
    void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col,
                           int width, int N, float scale) override {
        m_inner.scale_add_columns(dst, dst_width, dst_col, src, src_width, src_col, width, N, scale);
    }
    void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) override {
        m_inner.dropout(out, in, N, width, mask);
    }
    void matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight, int N,
                            int K, int width, float scale, ActPtr scratch) override {
        m_inner.matmul_add_columns(dst, dst_width, dst_col, inp, weight, N, K, width, scale, scratch);
    }
    void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                 ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                 ActPtr scratch) override {
        m_inner.matmul_backward_columns(dinp, dweight, dout, dout_width, dout_col, inp, weight, N, K, width, scale,
                                        scratch);
    }
    void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                               int hs) override {
        m_inner.gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
    }
    void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att,
                                int B, int T, int NH, int NKV, int hs) override {
        m_inner.gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs);
    }
    void gqa_attention_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int past, int n, int NH,
                              int NKV, int hs, int window) override {
        m_inner.gqa_attention_cached(out, qkv, k_cache, v_cache, past, n, NH, NKV, hs, window);
    }
    void gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv, const int32_t* attend_from,
                                         int B, int T, int NH, int NKV, int hs) override {
        m_inner.gqa_attention_forward_segmented(out, att, qkv, attend_from, B, T, NH, NKV, hs);
    }
    void gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                          ConstActPtr att, const int32_t* attend_from, int B, int T, int NH, int NKV,
                                          int hs) override {
        m_inner.gqa_attention_backward_segmented(dqkv, scratch, dout, qkv, att, attend_from, B, T, NH, NKV, hs);
    }
    size_t attention_scratch_floats(int B, int T, int NH) const override {
        return m_inner.attention_scratch_floats(B, T, NH);
    }
    void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
        m_inner.encoder_forward(out, tokens, wte, wpe, B, T, C);
    }
    void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override {
        m_inner.encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
    }
    void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                               float dloss) override {
        m_inner.softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss);
    }
    void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) override {
        m_inner.cross_entropy_row_max(row_max, logits, N, V, Vp);
    }
    void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                                int V, int Vp, int vocab_begin) override {
        m_inner.cross_entropy_row_sums(sums, logits, row_max, targets, N, V, Vp, vocab_begin);
    }
    void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                             const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss) override {
        m_inner.split_cross_entropy(losses, logits, row_max, sums, targets, N, V, Vp, vocab_begin, dloss);
    }

    // ---- Llama compute ----
    void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                         float eps) override {
        m_inner.rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    }
    void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                          const float* rstd, int N, int C) override {
        m_inner.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    }
    void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight,
                         int N, int NH, int NKV, int hs, float eps) override {
        m_inner.qk_norm_forward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hs, eps);
    }
    void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                          const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV,
                          int hs) override {
        m_inner.qk_norm_backward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd, N, NH, NKV, hs);
    }
    void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs) override {
        m_inner.rope_forward(out, inp, rope, B, T, NH, NKV, hs);
    }
    void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV,
                       int hs) override {
        m_inner.rope_backward(dinp, dout, rope, B, T, NH, NKV, hs);
    }
    void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) override {
        m_inner.swiglu_forward(out, inp, N, F);
    }
    void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) override {
        m_inner.swiglu_backward(dinp, inp, dout, N, F);
    }

    // ---- optimizer, reductions ----
    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override {
        m_inner.adamw_update(param, m, v, grad, n, step);
    }
    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override {
        m_inner.adamw_update_spans(spans, count, step);
    }
    void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) override {
        m_inner.muon_momentum(m, update, grad, n, step);
    }
    void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) override {
        m_inner.newton_schulz(x, rows, cols, step, work);
    }
    void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work) override {
        m_inner.muon_apply(param, update, n, decay, rate, work);
    }
    double sum_squares(const float* x, size_t n) override { return m_inner.sum_squares(x, n); }
    double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) override {
        return m_inner.sum_squares_spans(xs, ns, count);
    }

  private:
    Backend& m_inner;
};

}  // namespace zt
