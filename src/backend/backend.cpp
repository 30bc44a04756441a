// What each backend kind supports (BackendCapabilities), the host OpClock, GPT-2's head
// size check and the AdamW constants every backend's kernel reads. Compiled in
// every build, so the answer for cuda is available to the input checks of a build without
// CUDA and to the CUDA backend itself alike.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <vector>

#include "ztrain/backend/adamw_constants.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/core/error.hpp"

namespace zt {

AdamWConstants adamw_constants(const AdamWStep& step) {
    ZT_REQUIRE(step.bias_correction1 > 0.f && step.bias_correction2 > 0.f,
               "AdamW bias corrections must be positive (got ", step.bias_correction1, ", ",
               step.bias_correction2, ")");
    AdamWConstants k{};
    k.lr = step.lr;
    k.beta1 = step.beta1;
    k.one_minus_beta1 = 1.f - step.beta1;
    k.beta2 = step.beta2;
    k.one_minus_beta2 = 1.f - step.beta2;
    k.eps = step.eps;
    k.weight_decay = step.weight_decay;
    k.inv_bc1 = 1.f / step.bias_correction1;
    k.inv_bc2 = 1.f / step.bias_correction2;
    k.grad_scale = step.grad_scale;
    return k;
}

int mha_head_size(int C, int NH) {
    ZT_REQUIRE(NH > 0 && C % NH == 0, "attention: C=", C, " is not divisible by NH=", NH);
    return C / NH;
}

void Backend::copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                           size_t rows) {
    for (size_t i = 0; i < rows; ++i) copy(dst + i * dst_pitch, src + i * src_pitch, width);
}

void Backend::require_f32_activations(const char* op, std::initializer_list<DType> dtypes) const {
    for (DType t : dtypes) {
        ZT_REQUIRE(t == DType::kF32, "backend ", name(), ": ", op, " has no ", dtype_name(t),
                   " kernel (its activations must be fp32)");
    }
}

void Backend::gqa_attention_cached(float* /*out*/, const float* /*qkv*/, float* /*k_cache*/, float* /*v_cache*/,
                                   int /*past*/, int /*n*/, int /*NH*/, int /*NKV*/, int /*hs*/, int /*window*/) {
    throw Error(str("the ", name(), " backend has no key/value-cache attention yet (generation runs on cpu)"));
}

void Backend::matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight, int N,
                                 int K, int width, float scale, ActPtr scratch) {
    matmul_forward(scratch, inp, weight, nullptr, N, K, width);
    scale_add_columns(dst, dst_width, dst_col, scratch, width, 0, width, N, scale);
}

void Backend::matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                      ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                      ActPtr scratch) {
    zero_bytes(scratch.data, static_cast<size_t>(N) * static_cast<size_t>(width) * dtype_size(scratch.dtype));
    scale_add_columns(scratch, width, 0, dout, dout_width, dout_col, width, N, scale);
    matmul_backward(dinp, dweight, nullptr, scratch, inp, weight, N, K, width);
}

void Backend::dropout(ActPtr /*out*/, ConstActPtr /*in*/, int /*N*/, int /*width*/, const DropoutMask& /*mask*/) {
    throw Error(str("the ", name(), " backend has no dropout (lora.dropout > 0 needs it)"));
}

void Backend::gqa_attention_forward_segmented(ActPtr /*out*/, ActPtr /*att*/, ConstActPtr /*qkv*/,
                                              const int32_t* /*attend_from*/, int /*B*/, int /*T*/, int /*NH*/,
                                              int /*NKV*/, int /*hs*/) {
    throw Error(str("the ", name(), " backend has no block-diagonal (packed-example) attention yet (it runs on cpu)"));
}

void Backend::gqa_attention_backward_segmented(ActPtr /*dqkv*/, float* /*scratch*/, ConstActPtr /*dout*/,
                                               ConstActPtr /*qkv*/, ConstActPtr /*att*/,
                                               const int32_t* /*attend_from*/, int /*B*/, int /*T*/, int /*NH*/,
                                               int /*NKV*/, int /*hs*/) {
    throw Error(str("the ", name(), " backend has no block-diagonal (packed-example) attention backward yet (it runs "
                    "on cpu)"));
}

void Backend::qk_norm_forward(ActPtr /*out*/, float* /*rstd*/, ConstActPtr /*inp*/, const float* /*q_weight*/,
                              const float* /*k_weight*/, int /*N*/, int /*NH*/, int /*NKV*/, int /*hs*/,
                              float /*eps*/) {
    throw Error(str("the ", name(), " backend has no q/k head norm (Qwen3) yet (it runs on cpu)"));
}

void Backend::qk_norm_backward(ActPtr /*dinp*/, float* /*dq_weight*/, float* /*dk_weight*/, ConstActPtr /*dout*/,
                               ConstActPtr /*inp*/, const float* /*q_weight*/, const float* /*k_weight*/,
                               const float* /*rstd*/, int /*N*/, int /*NH*/, int /*NKV*/, int /*hs*/) {
    throw Error(str("the ", name(), " backend has no q/k head norm (Qwen3) backward yet (it runs on cpu)"));
}

bool BackendCapabilities::supports(DType work) const {
    switch (work) {
        case DType::kF32: return fp32;
        case DType::kBF16: return bf16;
        case DType::kF16: return fp16;
    }
    return false;
}

std::string BackendCapabilities::work_dtypes() const {
    std::string out;
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        if (!supports(t)) continue;
        if (!out.empty()) out += ", ";
        out += dtype_name(t);
    }
    return out;
}

double cuda_attention_scratch_floats(int T, int NH) {
    // The causal copy of P and dP -> dS for the NH query heads of one batch element
    // (cuda/attention.cu works through the batch one element at a time).
    return 2.0 * NH * static_cast<double>(T) * static_cast<double>(T);
}

BackendCapabilities cuda_capabilities() {
    // Every compute op reads and writes bf16/fp16 activations (src/backend/cuda/typed.cuh,
    // the typed products in matmul.cu) and the precision ops run on the GPU: cuda trains in
    // every working dtype.
    BackendCapabilities c;
    c.device_memory = true;
    return c;
}

namespace {

/// Host steady clock: a mark is a time point; ops of a host backend are done on return.
class HostOpClock final : public OpClock {
  public:
    size_t mark() override {
        m_marks.push_back(std::chrono::steady_clock::now());
        return m_marks.size() - 1;
    }
    double elapsed_ms(size_t from, size_t to) override {
        return std::chrono::duration<double, std::milli>(m_marks.at(to) - m_marks.at(from)).count();
    }
    void reset() override { m_marks.clear(); }

  private:
    std::vector<std::chrono::steady_clock::time_point> m_marks;
};

}  // namespace

std::unique_ptr<OpClock> make_host_op_clock() { return std::make_unique<HostOpClock>(); }

}  // namespace zt
