// ActivationRoundingBackend: the inner op, then its activation outputs rounded in place.
#include "ztrain/backend/activation_rounding.hpp"

#include "ztrain/core/error.hpp"

namespace zt {

namespace {
size_t elements(int rows, int cols) { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }
}  // namespace

ActivationRoundingBackend::ActivationRoundingBackend(Backend& inner, DType activation)
    : ForwardingBackend(inner), m_act(activation) {
    ZT_REQUIRE(activation != DType::kF32, "fp32 activations need no rounding backend");
    const BackendCapabilities caps = inner.capabilities();
    ZT_REQUIRE(caps.supports(activation), "activation dtype ", dtype_name(activation), ": backend ", inner.name(),
               " supports precision ", caps.work_dtypes(), " only");
}

void ActivationRoundingBackend::matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                               int N, int C, int OC) {
    inner().matmul_forward(out, inp, weight, bias, N, C, OC);
    round(out, elements(N, OC));
}

void ActivationRoundingBackend::matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight,
                                                        const float* bias, ConstActPtr residual, int N, int C,
                                                        int OC) {
    inner().matmul_residual_forward(out, inp, weight, bias, residual, N, C, OC);
    round(out, elements(N, OC));
}

void ActivationRoundingBackend::matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout,
                                                ConstActPtr inp, ConstActPtr weight, int N, int C, int OC,
                                                GradWrite grads) {
    inner().matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, grads);
    if (dinp.data != nullptr) round(dinp, elements(N, C));
}

void ActivationRoundingBackend::layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp,
                                                  const float* weight, const float* bias, int N, int C) {
    inner().layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    round(out, elements(N, C));
}

void ActivationRoundingBackend::layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout,
                                                   ConstActPtr inp, const float* weight, const float* mean,
                                                   const float* rstd, int N, int C) {
    inner().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    if (dinp.data != nullptr) round(dinp, elements(N, C));
}

void ActivationRoundingBackend::gelu_forward(ActPtr out, ConstActPtr inp, size_t n) {
    inner().gelu_forward(out, inp, n);
    round(out, n);
}

void ActivationRoundingBackend::gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) {
    inner().gelu_backward(dinp, inp, dout, n);
    round(dinp, n);
}

void ActivationRoundingBackend::residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) {
    inner().residual_forward(out, a, b, n);
    round(out, n);
}

void ActivationRoundingBackend::scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src,
                                                  int src_width, int src_col, int width, int N, float scale) {
    inner().scale_add_columns(dst, dst_width, dst_col, src, src_width, src_col, width, N, scale);
    round(dst, elements(N, dst_width));
}

void ActivationRoundingBackend::dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) {
    inner().dropout(out, in, N, width, mask);
    round(out, elements(N, width));
}

void ActivationRoundingBackend::gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T,
                                                      int NH, int NKV, int hs) {
    inner().gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
    round(out, elements(B * T, NH * hs));
    round(att, elements(B * NH, T) * static_cast<size_t>(T));
}

void ActivationRoundingBackend::gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout,
                                                       ConstActPtr qkv, ConstActPtr att, int B, int T, int NH,
                                                       int NKV, int hs) {
    inner().gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs);
    round(dqkv, elements(B * T, (NH + 2 * NKV) * hs));
}

void ActivationRoundingBackend::gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv,
                                                                const int32_t* attend_from, int B, int T, int NH,
                                                                int NKV, int hs) {
    inner().gqa_attention_forward_segmented(out, att, qkv, attend_from, B, T, NH, NKV, hs);
    round(out, elements(B * T, NH * hs));
    round(att, elements(B * NH, T) * static_cast<size_t>(T));
}

void ActivationRoundingBackend::gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout,
                                                                 ConstActPtr qkv, ConstActPtr att,
                                                                 const int32_t* attend_from, int B, int T, int NH,
                                                                 int NKV, int hs) {
    inner().gqa_attention_backward_segmented(dqkv, scratch, dout, qkv, att, attend_from, B, T, NH, NKV, hs);
    round(dqkv, elements(B * T, (NH + 2 * NKV) * hs));
}

void ActivationRoundingBackend::encoder_forward(ActPtr out, const int32_t* tokens, const float* wte,
                                                const float* wpe, int B, int T, int C) {
    inner().encoder_forward(out, tokens, wte, wpe, B, T, C);
    round(out, elements(B * T, C));
}

void ActivationRoundingBackend::softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N,
                                                      int V, int Vp, float dloss) {
    inner().softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss);
    if (dloss != 0.f) round(logits, elements(N, Vp));  // dlogits
}

void ActivationRoundingBackend::split_cross_entropy(float* losses, ActPtr logits, const float* row_max,
                                                    const float* sums, const int32_t* targets, int N, int V, int Vp,
                                                    int vocab_begin, float dloss) {
    inner().split_cross_entropy(losses, logits, row_max, sums, targets, N, V, Vp, vocab_begin, dloss);
    if (dloss != 0.f) round(logits, elements(N, Vp));  // dlogits
}

void ActivationRoundingBackend::rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight,
                                                int N, int C, float eps) {
    inner().rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
    round(out, elements(N, C));
}

void ActivationRoundingBackend::rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp,
                                                 const float* weight, const float* rstd, int N, int C) {
    inner().rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
    if (dinp.data != nullptr) round(dinp, elements(N, C));
}

void ActivationRoundingBackend::qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight,
                                                const float* k_weight, int N, int NH, int NKV, int hs, float eps) {
    inner().qk_norm_forward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hs, eps);
    round(out, elements(N, (NH + 2 * NKV) * hs));  // v: a copy of rounded values, unchanged
}

void ActivationRoundingBackend::qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout,
                                                 ConstActPtr inp, const float* q_weight, const float* k_weight,
                                                 const float* rstd, int N, int NH, int NKV, int hs) {
    inner().qk_norm_backward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd, N, NH, NKV, hs);
    if (dinp.data != nullptr) round(dinp, elements(N, (NH + 2 * NKV) * hs));
}

void ActivationRoundingBackend::rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH,
                                             int NKV, int hs) {
    inner().rope_forward(out, inp, rope, B, T, NH, NKV, hs);
    // The whole row: v is a copy of already rounded values (or untouched), so rounding it
    // again changes nothing and keeps this one pass.
    round(out, elements(B * T, (NH + 2 * NKV) * hs));
}

void ActivationRoundingBackend::rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T,
                                              int NH, int NKV, int hs) {
    inner().rope_backward(dinp, dout, rope, B, T, NH, NKV, hs);
    round(dinp, elements(B * T, (NH + 2 * NKV) * hs));
}

void ActivationRoundingBackend::swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) {
    inner().swiglu_forward(out, inp, N, F);
    round(out, elements(N, F));
}

void ActivationRoundingBackend::swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) {
    inner().swiglu_backward(dinp, inp, dout, N, F);
    round(dinp, elements(N, 2 * F));
}

}  // namespace zt
