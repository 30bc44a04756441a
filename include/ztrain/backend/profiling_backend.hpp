// Per-op profiling as a decorator: a ProfilingBackend wraps any Backend, forwards every call
// to it (ForwardingBackend) and adds each op's time to its kind's total. The times come from the wrapped
// backend's OpClock (Backend::make_op_clock): the host clock on the CPU, events on the
// stream on a GPU, so asynchronous ops are timed where they run, not where they are launched.
//
// Opt-in (environment ZT_PROFILE_OPS=1, see profile_ops_from_env): without it nothing wraps
// the backend and ops cost nothing extra. With it each op costs two clock marks.
//
// What it does not know: which model op a call belongs to. Kinds are backend methods
// (matmul_fwd covers the blocks' products and the LM head alike).
#pragma once

#include <memory>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/forwarding_backend.hpp"

namespace zt {

class ProfilingBackend final : public ForwardingBackend {
  public:
    /// Op kinds, one per backend method family; forward and backward share a kind unless
    /// the name says which.
    enum Op {
        kOpEncoder, kOpLayerNorm, kOpMatmulFwd, kOpMatmulBwd, kOpAttentionFwd, kOpAttentionBwd,
        kOpElementwise, kOpSoftmaxCe, kOpZero, kOpCopy, kOpCast, kOpAccumulate, kOpAdamW, kOpSumSquares,
        kOpRmsNorm, kOpRope, kOpSwiGlu, kOpMuon,
        kNumOps
    };
    /// The name written to metrics.jsonl's ops_ms for `op` ("?" outside [0, kNumOps)).
    static const char* op_name(int op);

    explicit ProfilingBackend(std::unique_ptr<Backend> inner);

    /// Forgets the times accumulated so far (the trainer calls it at every step start).
    void reset();
    /// Milliseconds spent in ops of kind `op` since reset(). May wait for the backend to
    /// reach the last op (GPU events).
    double op_ms(int op);

    // Allocation and the scratch size are forwarded untimed (ForwardingBackend); every call
    // that moves, clears or computes data is timed:

    // ---- memory ----
    void zero(float* p, size_t n) override;
    void copy(float* dst, const float* src, size_t n) override;
    void copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                      size_t rows) override;
    void to_device(void* dst, const void* host_src, size_t bytes) override;
    void to_host(void* host_dst, const void* src, size_t bytes) override;
    void to_host_past_cache(void* host_dst, const void* src, size_t bytes) override;

    // ---- precision ----
    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override;
    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override;
    void zero_bytes(void* p, size_t bytes) override;
    void round_to(float* x, size_t n, DType t) override;

    // ---- compute ----
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
    void matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight, int N,
                            int K, int width, float scale, ActPtr scratch) override;
    void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                 ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                 ActPtr scratch) override;
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
    void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override;
    void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                               float dloss) override;
    void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) override;
    void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                                int V, int Vp, int vocab_begin) override;
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
    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override;
    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override;
    void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) override;
    void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) override;
    void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work) override;
    double sum_squares(const float* x, size_t n) override;
    double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) override;

  private:
    /// Runs f between two clock marks and files the pair under `op` (resolved in op_ms, so
    /// a GPU clock is read once per step, not once per op).
    template <typename F>
    auto timed(Op op, F&& f) -> decltype(f());

    struct Span {
        Op op;
        size_t from;
        size_t to;
    };
    std::unique_ptr<Backend> m_owned;  ///< the inner backend (ForwardingBackend only refers to it)
    std::unique_ptr<OpClock> m_clock;
    std::vector<Span> m_pending;   ///< marked, not yet added to m_ms
    double m_ms[kNumOps] = {};
};

/// Whether ZT_PROFILE_OPS asks for per-op times (set, non-empty and not "0").
bool op_profiling_requested();
/// `backend` wrapped in a ProfilingBackend when op_profiling_requested(), else unchanged.
std::unique_ptr<Backend> profile_ops_from_env(std::unique_ptr<Backend> backend);

}  // namespace zt
