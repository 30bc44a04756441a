// ProfilingBackend: every timed call is mark, forward, mark (see profiling_backend.hpp).
#include "ztrain/backend/profiling_backend.hpp"

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "ztrain/core/error.hpp"

namespace zt {

const char* ProfilingBackend::op_name(int op) {
    static const char* const kNames[kNumOps] = {"encoder",     "layernorm",     "matmul_fwd", "matmul_bwd",
                                                "attention_fwd", "attention_bwd", "elementwise", "softmax_ce",
                                                "zero",        "copy",          "cast",       "accumulate",
                                                "adamw",       "sum_squares",   "rmsnorm",    "rope",
                                                "swiglu",      "muon"};
    return op >= 0 && op < kNumOps ? kNames[op] : "?";
}

namespace {
Backend& require_backend(const std::unique_ptr<Backend>& b) {
    ZT_REQUIRE(b != nullptr, "ProfilingBackend needs a backend to wrap");
    return *b;
}
}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner)
    : ForwardingBackend(require_backend(inner)), m_owned(std::move(inner)) {
    m_clock = m_owned->make_op_clock();
}

void ProfilingBackend::reset() {
    m_pending.clear();
    m_clock->reset();
    for (double& t : m_ms) t = 0.0;
}

double ProfilingBackend::op_ms(int op) {
    ZT_REQUIRE(op >= 0 && op < kNumOps, "op kind ", op);
    for (const Span& s : m_pending) m_ms[s.op] += m_clock->elapsed_ms(s.from, s.to);
    m_pending.clear();
    return m_ms[op];
}

template <typename F>
auto ProfilingBackend::timed(Op op, F&& f) -> decltype(f()) {
    // An op that throws leaves an unpaired mark behind, which nothing reads.
    const size_t from = m_clock->mark();
    if constexpr (std::is_void_v<decltype(f())>) {
        f();
        m_pending.push_back({op, from, m_clock->mark()});
    } else {
        auto result = f();
        m_pending.push_back({op, from, m_clock->mark()});
        return result;
    }
}

void ProfilingBackend::zero(float* p, size_t n) {
    timed(kOpZero, [&] { inner().zero(p, n); });
}
void ProfilingBackend::copy(float* dst, const float* src, size_t n) {
    timed(kOpCopy, [&] { inner().copy(dst, src, n); });
}
void ProfilingBackend::copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                                    size_t rows) {
    timed(kOpCopy, [&] { inner().copy_strided(dst, dst_pitch, src, src_pitch, width, rows); });
}
void ProfilingBackend::to_device(void* dst, const void* host_src, size_t bytes) {
    timed(kOpCopy, [&] { inner().to_device(dst, host_src, bytes); });
}
void ProfilingBackend::to_host(void* host_dst, const void* src, size_t bytes) {
    timed(kOpCopy, [&] { inner().to_host(host_dst, src, bytes); });
}
void ProfilingBackend::to_host_past_cache(void* host_dst, const void* src, size_t bytes) {
    timed(kOpCopy, [&] { inner().to_host_past_cache(host_dst, src, bytes); });
}

void ProfilingBackend::cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) {
    timed(kOpCast, [&] { inner().cast(dst, dst_type, src, src_type, n); });
}
void ProfilingBackend::accumulate(void* dst, DType dst_type, const float* src, size_t n) {
    timed(kOpAccumulate, [&] { inner().accumulate(dst, dst_type, src, n); });
}
void ProfilingBackend::round_to(float* x, size_t n, DType t) {
    timed(kOpCast, [&] { inner().round_to(x, n, t); });
}
void ProfilingBackend::zero_bytes(void* p, size_t bytes) {
    timed(kOpZero, [&] { inner().zero_bytes(p, bytes); });
}

void ProfilingBackend::matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N,
                                      int C, int OC) {
    timed(kOpMatmulFwd, [&] { inner().matmul_forward(out, inp, weight, bias, N, C, OC); });
}
void ProfilingBackend::matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                               ConstActPtr residual, int N, int C, int OC) {
    timed(kOpMatmulFwd, [&] { inner().matmul_residual_forward(out, inp, weight, bias, residual, N, C, OC); });
}
void ProfilingBackend::matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                       ConstActPtr weight, int N, int C, int OC, GradWrite grads) {
    timed(kOpMatmulBwd, [&] { inner().matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, grads); });
}
void ProfilingBackend::layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                                         const float* bias, int N, int C) {
    timed(kOpLayerNorm, [&] { inner().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C); });
}
void ProfilingBackend::layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout,
                                          ConstActPtr inp, const float* weight, const float* mean,
                                          const float* rstd, int N, int C) {
    timed(kOpLayerNorm,
          [&] { inner().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C); });
}
void ProfilingBackend::gelu_forward(ActPtr out, ConstActPtr inp, size_t n) {
    timed(kOpElementwise, [&] { inner().gelu_forward(out, inp, n); });
}
void ProfilingBackend::gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) {
    timed(kOpElementwise, [&] { inner().gelu_backward(dinp, inp, dout, n); });
}
void ProfilingBackend::residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) {
    timed(kOpElementwise, [&] { inner().residual_forward(out, a, b, n); });
}

void ProfilingBackend::scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width,
                                         int src_col, int width, int N, float scale) {
    timed(kOpElementwise,
          [&] { inner().scale_add_columns(dst, dst_width, dst_col, src, src_width, src_col, width, N, scale); });
}
void ProfilingBackend::dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) {
    timed(kOpElementwise, [&] { inner().dropout(out, in, N, width, mask); });
}
void ProfilingBackend::matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight,
                                          int N, int K, int width, float scale, ActPtr scratch) {
    timed(kOpMatmulFwd,
          [&] { inner().matmul_add_columns(dst, dst_width, dst_col, inp, weight, N, K, width, scale, scratch); });
}
void ProfilingBackend::matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width,
                                               int dout_col, ConstActPtr inp, ConstActPtr weight, int N, int K,
                                               int width, float scale, ActPtr scratch) {
    timed(kOpMatmulBwd, [&] {
        inner().matmul_backward_columns(dinp, dweight, dout, dout_width, dout_col, inp, weight, N, K, width, scale,
                                        scratch);
    });
}
void ProfilingBackend::gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH,
                                             int NKV, int hs) {
    timed(kOpAttentionFwd, [&] { inner().gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs); });
}
void ProfilingBackend::gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                              ConstActPtr att, int B, int T, int NH, int NKV, int hs) {
    timed(kOpAttentionBwd, [&] { inner().gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs); });
}
void ProfilingBackend::gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv,
                                                       const int32_t* attend_from, int B, int T, int NH, int NKV,
                                                       int hs) {
    timed(kOpAttentionFwd,
          [&] { inner().gqa_attention_forward_segmented(out, att, qkv, attend_from, B, T, NH, NKV, hs); });
}
void ProfilingBackend::gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout,
                                                        ConstActPtr qkv, ConstActPtr att,
                                                        const int32_t* attend_from, int B, int T, int NH, int NKV,
                                                        int hs) {
    timed(kOpAttentionBwd, [&] {
        inner().gqa_attention_backward_segmented(dqkv, scratch, dout, qkv, att, attend_from, B, T, NH, NKV, hs);
    });
}
void ProfilingBackend::encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                       int T, int C) {
    timed(kOpEncoder, [&] { inner().encoder_forward(out, tokens, wte, wpe, B, T, C); });
}
void ProfilingBackend::encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B,
                                        int T, int C) {
    timed(kOpEncoder, [&] { inner().encoder_backward(dwte, dwpe, dout, tokens, B, T, C); });
}
void ProfilingBackend::softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V,
                                             int Vp, float dloss) {
    timed(kOpSoftmaxCe, [&] { inner().softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss); });
}
void ProfilingBackend::cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) {
    timed(kOpSoftmaxCe, [&] { inner().cross_entropy_row_max(row_max, logits, N, V, Vp); });
}
void ProfilingBackend::cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max,
                                              const int32_t* targets, int N, int V, int Vp, int vocab_begin) {
    timed(kOpSoftmaxCe, [&] { inner().cross_entropy_row_sums(sums, logits, row_max, targets, N, V, Vp, vocab_begin); });
}
void ProfilingBackend::split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                                           const int32_t* targets, int N, int V, int Vp, int vocab_begin,
                                           float dloss) {
    timed(kOpSoftmaxCe,
          [&] { inner().split_cross_entropy(losses, logits, row_max, sums, targets, N, V, Vp, vocab_begin, dloss); });
}
void ProfilingBackend::rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                                       float eps) {
    timed(kOpRmsNorm, [&] { inner().rmsnorm_forward(out, rstd, inp, weight, N, C, eps); });
}
void ProfilingBackend::rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp,
                                        const float* weight, const float* rstd, int N, int C) {
    timed(kOpRmsNorm, [&] { inner().rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C); });
}
void ProfilingBackend::qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight,
                                       const float* k_weight, int N, int NH, int NKV, int hs, float eps) {
    timed(kOpRmsNorm, [&] { inner().qk_norm_forward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hs, eps); });
}
void ProfilingBackend::qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout,
                                        ConstActPtr inp, const float* q_weight, const float* k_weight,
                                        const float* rstd, int N, int NH, int NKV, int hs) {
    timed(kOpRmsNorm, [&] {
        inner().qk_norm_backward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd, N, NH, NKV, hs);
    });
}
void ProfilingBackend::rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV,
                                    int hs) {
    timed(kOpRope, [&] { inner().rope_forward(out, inp, rope, B, T, NH, NKV, hs); });
}
void ProfilingBackend::rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH,
                                     int NKV, int hs) {
    timed(kOpRope, [&] { inner().rope_backward(dinp, dout, rope, B, T, NH, NKV, hs); });
}
void ProfilingBackend::swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) {
    timed(kOpSwiGlu, [&] { inner().swiglu_forward(out, inp, N, F); });
}
void ProfilingBackend::swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) {
    timed(kOpSwiGlu, [&] { inner().swiglu_backward(dinp, inp, dout, N, F); });
}
void ProfilingBackend::adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                                    const AdamWStep& step) {
    timed(kOpAdamW, [&] { inner().adamw_update(param, m, v, grad, n, step); });
}
void ProfilingBackend::adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) {
    timed(kOpAdamW, [&] { inner().adamw_update_spans(spans, count, step); });
}
void ProfilingBackend::muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) {
    timed(kOpMuon, [&] { inner().muon_momentum(m, update, grad, n, step); });
}
void ProfilingBackend::newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) {
    timed(kOpMuon, [&] { inner().newton_schulz(x, rows, cols, step, work); });
}
void ProfilingBackend::muon_apply(float* param, const float* update, size_t n, float decay, float rate,
                                  ActPtr work) {
    timed(kOpMuon, [&] { inner().muon_apply(param, update, n, decay, rate, work); });
}
double ProfilingBackend::sum_squares(const float* x, size_t n) {
    return timed(kOpSumSquares, [&] { return inner().sum_squares(x, n); });
}
double ProfilingBackend::sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) {
    return timed(kOpSumSquares, [&] { return inner().sum_squares_spans(xs, ns, count); });
}

bool op_profiling_requested() {
    const char* v = std::getenv("ZT_PROFILE_OPS");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

std::unique_ptr<Backend> profile_ops_from_env(std::unique_ptr<Backend> backend) {
    if (!op_profiling_requested()) return backend;
    return std::make_unique<ProfilingBackend>(std::move(backend));
}

}  // namespace zt
