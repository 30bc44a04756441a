// Typed activation ops (backend.hpp ActPtr): an op given 16-bit buffers reads and writes that
// dtype and computes in fp32 inside, so its result is bit for bit the fp32 op on the widened
// inputs followed by one rounding: what the emulation (ActivationRoundingBackend over fp32
// buffers holding 16-bit values) gives. Checked per op, bf16 and fp16, on one thread and on a
// team (sizes past the threshold where the CPU ops go parallel, and not multiples of the
// block the typed path widens at a time), with accumulation into a non-zero gradient and an
// output aliasing an input where the op allows it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/activation_rounding.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/backend/forwarding_backend.hpp"
#include "ztrain/backend/rope.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {
namespace {

/// Values already representable in t (as the emulation's buffers hold), varied in sign and
/// magnitude.
std::vector<float> values(size_t n, float scale, float shift, DType t) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        v[i] = scale * std::sin(0.37f * static_cast<float>(i) + shift) + 1e-4f * static_cast<float>(i % 977);
    }
    round_to_dtype(v.data(), v.size(), t);
    return v;
}

std::vector<uint16_t> to16(const std::vector<float>& v, DType t) {
    std::vector<uint16_t> out(v.size());
    convert_from_f32(v.data(), out.data(), v.size(), t);
    return out;
}

std::vector<float> from16(const std::vector<uint16_t>& v, DType t) {
    std::vector<float> out(v.size());
    convert_to_f32(v.data(), out.data(), v.size(), t);
    return out;
}

/// Bit-for-bit equality, naming the first element that differs and by how much.
void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t differing = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differing++ == 0) first = i;
    }
    EXPECT_EQ(differing, 0u) << what << ": " << differing << " of " << got.size() << " elements differ; first "
                             << first << ": typed " << got[first] << ", emulated " << want[first];
}

/// |got - want| <= rel * |want| + 1e-5 everywhere (one 16-bit ulp: rel = 2^-(mantissa
/// bits); the absolute term for sums of O(1) terms that cancel to near zero).
void expect_near_relative(const std::vector<float>& got, const std::vector<float>& want, double rel,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (std::fabs(double(got[i]) - want[i]) > rel * std::fabs(double(want[i])) + 1e-5 && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements beyond " << rel
                       << " relative; first " << first << ": typed " << got[first] << ", emulated " << want[first];
}

struct TypedCase {
    DType dtype;
    int threads;
};

class TypedActivations : public ::testing::TestWithParam<TypedCase> {
  protected:
    DType t() const { return GetParam().dtype; }
    std::string at() const {
        return std::string(dtype_name(t())) + ", " + std::to_string(GetParam().threads) + " thread(s)";
    }
    std::unique_ptr<Backend> cpu = make_cpu_backend(GetParam().threads);
    ActivationRoundingBackend emulated{*cpu, GetParam().dtype};
    /// Past the CPU ops' parallel threshold (2^19 elements), not a multiple of the block.
    static constexpr size_t kN = (size_t{1} << 19) + 1237;
};

TEST_P(TypedActivations, GeluForwardAndBackward) {
    const std::vector<float> x = values(kN, 3.f, 0.1f, t()), dy = values(kN, 0.5f, 0.7f, t());
    const std::vector<float> dx0 = values(kN, 0.2f, 1.3f, t());  // backward accumulates
    std::vector<float> y_want(kN), dx_want = dx0;
    emulated.gelu_forward(y_want.data(), x.data(), kN);
    emulated.gelu_backward(dx_want.data(), x.data(), dy.data(), kN);
    const std::vector<uint16_t> x16 = to16(x, t()), dy16 = to16(dy, t());
    std::vector<uint16_t> y16(kN), dx16 = to16(dx0, t());
    cpu->gelu_forward(ActPtr(y16.data(), t()), ConstActPtr(x16.data(), t()), kN);
    cpu->gelu_backward(ActPtr(dx16.data(), t()), ConstActPtr(x16.data(), t()), ConstActPtr(dy16.data(), t()), kN);
    expect_bits(from16(y16, t()), y_want, "gelu_forward out, " + at());
    expect_bits(from16(dx16, t()), dx_want, "gelu_backward dinp, " + at());
}

TEST_P(TypedActivations, ResidualInPlaceAndMixedWithFp32) {
    const std::vector<float> a = values(kN, 2.f, 0.2f, t()), b = values(kN, 1.f, 0.9f, t());
    std::vector<float> want = a;
    emulated.residual_forward(want.data(), want.data(), b.data(), kN);
    std::vector<uint16_t> a16 = to16(a, t());
    const std::vector<uint16_t> b16 = to16(b, t());
    ActPtr out(a16.data(), t());
    cpu->residual_forward(out, out, ConstActPtr(b16.data(), t()), kN);  // out aliases a
    expect_bits(from16(a16, t()), want, "residual_forward in place, " + at());
    // One fp32 operand (e.g. a residual stream kept in fp32): the same sum, rounded once.
    std::vector<uint16_t> mixed(kN);
    const std::vector<uint16_t> a16b = to16(a, t());
    cpu->residual_forward(ActPtr(mixed.data(), t()), ConstActPtr(a16b.data(), t()), b.data(), kN);
    expect_bits(from16(mixed, t()), want, "residual_forward with an fp32 operand, " + at());
}

TEST_P(TypedActivations, SwiGluForwardAndBackward) {
    const int N = 300, F = 1800;  // F spans two widening blocks; N * F past the threshold
    const size_t n_in = static_cast<size_t>(N) * 2 * F, n_out = static_cast<size_t>(N) * F;
    const std::vector<float> x = values(n_in, 3.f, 0.3f, t()), dy = values(n_out, 0.5f, 0.4f, t());
    const std::vector<float> dx0 = values(n_in, 0.1f, 2.1f, t());
    std::vector<float> y_want(n_out), dx_want = dx0;
    emulated.swiglu_forward(y_want.data(), x.data(), N, F);
    emulated.swiglu_backward(dx_want.data(), x.data(), dy.data(), N, F);
    const std::vector<uint16_t> x16 = to16(x, t()), dy16 = to16(dy, t());
    std::vector<uint16_t> y16(n_out), dx16 = to16(dx0, t());
    cpu->swiglu_forward(ActPtr(y16.data(), t()), ConstActPtr(x16.data(), t()), N, F);
    cpu->swiglu_backward(ActPtr(dx16.data(), t()), ConstActPtr(x16.data(), t()), ConstActPtr(dy16.data(), t()), N, F);
    expect_bits(from16(y16, t()), y_want, "swiglu_forward out, " + at());
    expect_bits(from16(dx16, t()), dx_want, "swiglu_backward dinp, " + at());
}

// Rows past the parallel threshold, C not a multiple of 16 (the channel slabs' alignment).
constexpr int kRows = 520, kCols = 1030;

TEST_P(TypedActivations, LayerNormForwardAndBackward) {
    const int N = kRows, C = kCols;
    const size_t n = static_cast<size_t>(N) * C;
    const std::vector<float> x = values(n, 2.f, 0.5f, t()), dy = values(n, 0.4f, 0.8f, t());
    const std::vector<float> dx0 = values(n, 0.1f, 1.7f, t());
    const std::vector<float> w = values(C, 1.f, 0.3f, DType::kF32), b = values(C, 0.2f, 0.6f, DType::kF32);
    std::vector<float> y_want(n), mean_want(N), rstd_want(N), dx_want = dx0;
    std::vector<float> dw_want = values(C, 0.05f, 0.1f, DType::kF32), db_want = values(C, 0.05f, 0.2f, DType::kF32);
    std::vector<float> dw = dw_want, db = db_want, mean(N), rstd(N);
    emulated.layernorm_forward(y_want.data(), mean_want.data(), rstd_want.data(), x.data(), w.data(), b.data(), N, C);
    emulated.layernorm_backward(dx_want.data(), dw_want.data(), db_want.data(), dy.data(), x.data(), w.data(),
                                mean_want.data(), rstd_want.data(), N, C);
    const std::vector<uint16_t> x16 = to16(x, t()), dy16 = to16(dy, t());
    std::vector<uint16_t> y16(n), dx16 = to16(dx0, t());
    cpu->layernorm_forward(ActPtr(y16.data(), t()), mean.data(), rstd.data(), ConstActPtr(x16.data(), t()), w.data(),
                           b.data(), N, C);
    cpu->layernorm_backward(ActPtr(dx16.data(), t()), dw.data(), db.data(), ConstActPtr(dy16.data(), t()),
                            ConstActPtr(x16.data(), t()), w.data(), mean.data(), rstd.data(), N, C);
    expect_bits(from16(y16, t()), y_want, "layernorm_forward out, " + at());
    expect_bits(mean, mean_want, "layernorm_forward mean, " + at());
    expect_bits(rstd, rstd_want, "layernorm_forward rstd, " + at());
    expect_bits(from16(dx16, t()), dx_want, "layernorm_backward dinp, " + at());
    expect_bits(dw, dw_want, "layernorm_backward dweight, " + at());
    expect_bits(db, db_want, "layernorm_backward dbias, " + at());
}

TEST_P(TypedActivations, RmsNormForwardAndBackward) {
    const int N = kRows, C = kCols;
    const size_t n = static_cast<size_t>(N) * C;
    const std::vector<float> x = values(n, 2.f, 0.9f, t()), dy = values(n, 0.4f, 0.2f, t());
    const std::vector<float> dx0 = values(n, 0.1f, 2.7f, t());
    const std::vector<float> w = values(C, 1.f, 0.4f, DType::kF32);
    std::vector<float> y_want(n), rstd_want(N), dx_want = dx0, dw_want = values(C, 0.05f, 0.3f, DType::kF32);
    std::vector<float> dw = dw_want, rstd(N);
    emulated.rmsnorm_forward(y_want.data(), rstd_want.data(), x.data(), w.data(), N, C, 1e-5f);
    emulated.rmsnorm_backward(dx_want.data(), dw_want.data(), dy.data(), x.data(), w.data(), rstd_want.data(), N, C);
    const std::vector<uint16_t> x16 = to16(x, t()), dy16 = to16(dy, t());
    std::vector<uint16_t> y16(n), dx16 = to16(dx0, t());
    cpu->rmsnorm_forward(ActPtr(y16.data(), t()), rstd.data(), ConstActPtr(x16.data(), t()), w.data(), N, C, 1e-5f);
    cpu->rmsnorm_backward(ActPtr(dx16.data(), t()), dw.data(), ConstActPtr(dy16.data(), t()),
                          ConstActPtr(x16.data(), t()), w.data(), rstd.data(), N, C);
    expect_bits(from16(y16, t()), y_want, "rmsnorm_forward out, " + at());
    expect_bits(rstd, rstd_want, "rmsnorm_forward rstd, " + at());
    expect_bits(from16(dx16, t()), dx_want, "rmsnorm_backward dinp, " + at());
    expect_bits(dw, dw_want, "rmsnorm_backward dweight, " + at());
}

// RoPE on qkv rows: in place (as the model runs it) and out of place, and the backward both
// in place (dout becomes R^T dout) and accumulating into another buffer.
TEST_P(TypedActivations, RopeForwardAndBackward) {
    const int B = 12, T = 64, NH = 8, NKV = 2, hs = 64;  // 768 rows of 768: past the parallel threshold
    const size_t n = static_cast<size_t>(B) * T * (NH + 2 * NKV) * hs;
    const std::vector<float> table = rope_table(T, hs, RopeOptions{});
    const std::vector<float> x = values(n, 2.f, 0.5f, t()), dy = values(n, 0.4f, 0.1f, t());
    const std::vector<float> dx0 = values(n, 0.1f, 1.1f, t());
    std::vector<float> y_want = x, y2_want(n), dy_want = dy, dx_want = dx0;
    emulated.rope_forward(y_want.data(), y_want.data(), table.data(), B, T, NH, NKV, hs);
    emulated.rope_forward(y2_want.data(), x.data(), table.data(), B, T, NH, NKV, hs);
    emulated.rope_backward(dy_want.data(), dy_want.data(), table.data(), B, T, NH, NKV, hs);
    emulated.rope_backward(dx_want.data(), dy.data(), table.data(), B, T, NH, NKV, hs);
    std::vector<uint16_t> y16 = to16(x, t()), y2_16(n), dy16 = to16(dy, t()), dx16 = to16(dx0, t());
    const std::vector<uint16_t> x16 = to16(x, t()), dy16b = to16(dy, t());
    cpu->rope_forward(ActPtr(y16.data(), t()), ActPtr(y16.data(), t()), table.data(), B, T, NH, NKV, hs);
    cpu->rope_forward(ActPtr(y2_16.data(), t()), ConstActPtr(x16.data(), t()), table.data(), B, T, NH, NKV, hs);
    cpu->rope_backward(ActPtr(dy16.data(), t()), ActPtr(dy16.data(), t()), table.data(), B, T, NH, NKV, hs);
    cpu->rope_backward(ActPtr(dx16.data(), t()), ConstActPtr(dy16b.data(), t()), table.data(), B, T, NH, NKV, hs);
    expect_bits(from16(y16, t()), y_want, "rope_forward in place, " + at());
    expect_bits(from16(y2_16, t()), y2_want, "rope_forward, " + at());
    expect_bits(from16(dy16, t()), dy_want, "rope_backward in place, " + at());
    expect_bits(from16(dx16, t()), dx_want, "rope_backward accumulating, " + at());
}

TEST_P(TypedActivations, EncoderForwardAndBackwardWithAndWithoutPositions) {
    const int B = 8, T = 100, C = 700, Vp = 50;  // 560 000 elements: past the threshold
    const size_t n = static_cast<size_t>(B) * T * C;
    std::vector<int32_t> tokens(static_cast<size_t>(B) * T);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % Vp);
    const std::vector<float> wte = values(static_cast<size_t>(Vp) * C, 0.5f, 0.3f, DType::kF32);
    const std::vector<float> wpe = values(static_cast<size_t>(T) * C, 0.2f, 0.8f, DType::kF32);
    const std::vector<float> dy = values(n, 0.3f, 0.5f, t());
    for (const float* pe : {wpe.data(), static_cast<const float*>(nullptr)}) {
        const std::string what = std::string(pe != nullptr ? "with" : "without") + " positions, " + at();
        std::vector<float> y_want(n), dwte_want = values(wte.size(), 0.01f, 0.1f, DType::kF32);
        std::vector<float> dwpe_want = values(wpe.size(), 0.01f, 0.2f, DType::kF32);
        std::vector<float> dwte = dwte_want, dwpe = dwpe_want;
        emulated.encoder_forward(y_want.data(), tokens.data(), wte.data(), pe, B, T, C);
        emulated.encoder_backward(dwte_want.data(), dwpe_want.data(), dy.data(), tokens.data(), B, T, C);
        std::vector<uint16_t> y16(n);
        const std::vector<uint16_t> dy16 = to16(dy, t());
        cpu->encoder_forward(ActPtr(y16.data(), t()), tokens.data(), wte.data(), pe, B, T, C);
        cpu->encoder_backward(dwte.data(), dwpe.data(), ConstActPtr(dy16.data(), t()), tokens.data(), B, T, C);
        expect_bits(from16(y16, t()), y_want, "encoder_forward out, " + what);
        expect_bits(dwte, dwte_want, "encoder_backward dwte, " + what);
        expect_bits(dwpe, dwpe_want, "encoder_backward dwpe, " + what);
    }
}

// Losses alone (logits untouched) and with the gradient written over the logits; rows with
// target -1 are ignored.
TEST_P(TypedActivations, SoftmaxCrossEntropyLossAndGradient) {
    const int N = 300, V = 1900, Vp = 1920;  // 576 000 logits: past the threshold
    const size_t n = static_cast<size_t>(N) * Vp;
    std::vector<int32_t> targets(N);
    for (int r = 0; r < N; ++r) targets[r] = r % 17 == 0 ? -1 : (r * 613) % V;
    const std::vector<float> logits = values(n, 4.f, 0.2f, t());
    for (float dloss : {0.f, 1.f / N}) {
        const std::string what = (dloss != 0.f ? "with the gradient, " : "loss only, ") + at();
        std::vector<float> want = logits, loss_want(N), loss(N);
        emulated.softmax_cross_entropy(loss_want.data(), want.data(), targets.data(), N, V, Vp, dloss);
        std::vector<uint16_t> l16 = to16(logits, t());
        cpu->softmax_cross_entropy(loss.data(), ActPtr(l16.data(), t()), targets.data(), N, V, Vp, dloss);
        expect_bits(loss, loss_want, "softmax_cross_entropy losses, " + what);
        expect_bits(from16(l16, t()), want, "softmax_cross_entropy logits / dlogits, " + what);
    }
}

/// Attention forward then backward on `be`: causal, or block-diagonal with attend_from.
void attention_step(Backend& be, ActPtr out, ActPtr att, ConstActPtr qkv, ActPtr dqkv, float* scratch, ConstActPtr dy,
                    const int32_t* attend_from, int B, int T, int NH, int NKV, int hs) {
    if (attend_from == nullptr) {
        be.gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs);
        be.gqa_attention_backward(dqkv, scratch, dy, qkv, att, B, T, NH, NKV, hs);
        return;
    }
    be.gqa_attention_forward_segmented(out, att, qkv, attend_from, B, T, NH, NKV, hs);
    be.gqa_attention_backward_segmented(dqkv, scratch, dy, qkv, att, attend_from, B, T, NH, NKV, hs);
}

// Attention, GPT-2 (NKV = NH) and grouped-query shapes, causal and block-diagonal: out and
// the probabilities forward, dqkv backward (accumulating), T past one 64-row block and not a
// multiple of it.
TEST_P(TypedActivations, AttentionForwardAndBackward) {
    struct Shape {
        int B, T, NH, NKV, hs;
    };
    for (const Shape& sh : {Shape{2, 100, 4, 4, 16}, Shape{2, 100, 4, 2, 24}}) {
        const auto [B, T, NH, NKV, hs] = sh;
        const size_t nqkv = static_cast<size_t>(B) * T * (NH + 2 * NKV) * hs;
        const size_t nout = static_cast<size_t>(B) * T * NH * hs, natt = static_cast<size_t>(B) * NH * T * T;
        const std::vector<float> qkv = values(nqkv, 1.5f, 0.3f, t()), dy = values(nout, 0.4f, 0.9f, t());
        const std::vector<float> dqkv0 = values(nqkv, 0.1f, 1.9f, t());
        std::vector<int32_t> from(static_cast<size_t>(B) * T);
        for (size_t i = 0; i < from.size(); ++i) {
            const int tq = static_cast<int>(i % T);
            from[i] = tq < 37 ? 0 : tq < 80 ? 37 : 80;  // three packed examples per row
        }
        std::vector<float> scratch(cpu->attention_scratch_floats(B, T, NH));
        const int32_t* const segmented = from.data();
        for (const int32_t* attend_from : {static_cast<const int32_t*>(nullptr), segmented}) {
            const std::string what = std::string(attend_from != nullptr ? "segmented" : "causal") + ", NH " +
                                     std::to_string(NH) + " NKV " + std::to_string(NKV) + ", " + at();
            std::vector<float> out_want(nout), att_want(natt), dqkv_want = dqkv0;
            std::vector<uint16_t> out16(nout), att16(natt), dqkv16 = to16(dqkv0, t());
            const std::vector<uint16_t> qkv16 = to16(qkv, t()), dy16 = to16(dy, t());
            const ActPtr o(out16.data(), t()), a(att16.data(), t()), dq(dqkv16.data(), t());
            const ConstActPtr q(qkv16.data(), t()), d(dy16.data(), t());
            attention_step(emulated, out_want.data(), att_want.data(), qkv.data(), dqkv_want.data(), scratch.data(),
                           dy.data(), attend_from, B, T, NH, NKV, hs);
            attention_step(*cpu, o, a, q, dq, scratch.data(), d, attend_from, B, T, NH, NKV, hs);
            expect_bits(from16(out16, t()), out_want, "attention out, " + what);
            // Only the causal part of att is specified.
            std::vector<float> att_got = from16(att16, t());
            for (size_t r = 0; r < natt / T; ++r) {
                for (int c = static_cast<int>(r % T) + 1; c < T; ++c) att_got[r * T + c] = att_want[r * T + c];
            }
            expect_bits(att_got, att_want, "attention probabilities, " + what);
            expect_bits(from16(dqkv16, t()), dqkv_want, "attention dqkv, " + what);
        }
    }
}

/// One typed product against the emulation: forward with a bias, the residual form, and the
/// backward accumulating into non-zero dinp, dweight and dbias. N, C, OC are not multiples of
/// 16 (the slabs' alignment) and past the size where the products split over the team.
void check_typed_matmul(Backend& cpu, Backend& emulated, DType t, int N, int C, int OC, const std::string& at,
                        bool exact = true, bool stored_weights = false) {
    const size_t nx = static_cast<size_t>(N) * C, ny = static_cast<size_t>(N) * OC;
    const std::vector<float> x = values(nx, 1.f, 0.2f, t), dy = values(ny, 0.3f, 0.6f, t);
    const std::vector<float> res = values(ny, 1.f, 1.4f, t), dx0 = values(nx, 0.1f, 0.9f, t);
    const std::vector<float> w = values(static_cast<size_t>(OC) * C, 0.05f, 0.4f, t);
    const std::vector<float> b = values(OC, 0.2f, 0.1f, DType::kF32);
    std::vector<float> y_want(ny), r_want(ny), dx_want = dx0;
    std::vector<float> dw_want = values(w.size(), 0.01f, 0.7f, DType::kF32);
    std::vector<float> db_want = values(OC, 0.01f, 0.8f, DType::kF32);
    std::vector<float> dw = dw_want, db = db_want;
    emulated.matmul_forward(y_want.data(), x.data(), w.data(), b.data(), N, C, OC);
    emulated.matmul_residual_forward(r_want.data(), x.data(), w.data(), b.data(), res.data(), N, C, OC);
    emulated.matmul_backward(dx_want.data(), dw_want.data(), db_want.data(), dy.data(), x.data(), w.data(), N, C, OC);
    const std::vector<uint16_t> x16 = to16(x, t), dy16 = to16(dy, t), res16 = to16(res, t);
    std::vector<uint16_t> y16(ny), r16(ny), dx16 = to16(dx0, t);
    // The weights as a 16-bit unit stores them (the model passes those where the backend
    // reads them so), or the fp32 view.
    const std::vector<uint16_t> w16 = to16(w, t);
    const ConstActPtr wt = stored_weights ? ConstActPtr(w16.data(), t) : ConstActPtr(w.data());
    cpu.matmul_forward(ActPtr(y16.data(), t), ConstActPtr(x16.data(), t), wt, b.data(), N, C, OC);
    cpu.matmul_residual_forward(ActPtr(r16.data(), t), ConstActPtr(x16.data(), t), wt, b.data(),
                                ConstActPtr(res16.data(), t), N, C, OC);
    cpu.matmul_backward(ActPtr(dx16.data(), t), dw.data(), db.data(), ConstActPtr(dy16.data(), t),
                        ConstActPtr(x16.data(), t), wt, N, C, OC);
    if (exact) {
        expect_bits(from16(y16, t), y_want, "matmul_forward out, " + at);
        expect_bits(from16(r16, t), r_want, "matmul_residual_forward out, " + at);
        expect_bits(from16(dx16, t), dx_want, "matmul_backward dinp, " + at);
        expect_bits(db, db_want, "matmul_backward dbias, " + at);
        expect_bits(dw, dw_want, "matmul_backward dweight, " + at);
        return;
    }
    // Row blocks: sgemm's fp32 sums depend on where a row falls in a thread's slab, so a sum
    // may differ in its last fp32 bit and round to the neighbouring 16-bit value: within one
    // unit in the last place of t. dweight adds the blocks' products in order: fp32 rounding
    // of a sum of N terms, |error| <= N * 2^-24 * sum |terms| (|dy x| <= 0.3 * 1.1 per term).
    const double ulp = std::ldexp(1.0, t == DType::kBF16 ? -7 : -10);
    expect_near_relative(from16(y16, t), y_want, ulp, "matmul_forward out, " + at);
    expect_near_relative(from16(r16, t), r_want, ulp, "matmul_residual_forward out, " + at);
    expect_near_relative(from16(dx16, t), dx_want, ulp, "matmul_backward dinp, " + at);
    expect_bits(db, db_want, "matmul_backward dbias, " + at);
    const double bound = N * std::ldexp(1.0, -24) * N * 0.3 * 1.1;
    double worst = 0.0;
    for (size_t i = 0; i < dw.size(); ++i) worst = std::max(worst, std::fabs(double(dw[i]) - dw_want[i]));
    EXPECT_LE(worst, bound) << "matmul_backward dweight over row blocks, " << at;
}

// Products without 16-bit products (fp16; bf16 where the CPU has no bf16 instructions):
// widened rows through sgemm, equal to the emulation bit for bit.
TEST_P(TypedActivations, MatmulWidenedForwardAndBackward) {
    check_typed_matmul(*cpu, emulated, t(), 300, 200, 520, "widened, " + at());
    check_typed_matmul(*cpu, emulated, t(), 300, 200, 520, "widened, 16-bit weights, " + at(), true, true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, TypedActivations,
                         ::testing::Values(TypedCase{DType::kBF16, 1}, TypedCase{DType::kBF16, 2},
                                           TypedCase{DType::kF16, 1}, TypedCase{DType::kF16, 2}),
                         [](const auto& info) {
                             return std::string(dtype_name(info.param.dtype)) + "_threads" +
                                    std::to_string(info.param.threads);
                         });

// Past the widened block budget (16 MiB of fp32 operands: 1040 of these rows, matmul.cpp's
// widened_gemm_rows): the rows go in two blocks; out, dinp
// and dbias stay bit-exact, dweight adds the blocks' products in order.
TEST(TypedMatmul, WidenedRowBlocksBeyondTheBudget) {
    std::unique_ptr<Backend> cpu = make_cpu_backend(2);
    ActivationRoundingBackend emulated(*cpu, DType::kF16);
    check_typed_matmul(*cpu, emulated, DType::kF16, 1100, 512, 3000, "fp16, two row blocks", false);
}

// bf16 on the CPU's bf16 instructions (oneDNN): bf16 operands read as stored, the bias and
// the residual added before the one rounding: the emulation's products on fp32 buffers bit
// for bit.
TEST(TypedMatmul, Bf16ProductsMatchTheEmulation) {
    if (!cpu_bf16_products().native) GTEST_SKIP() << cpu_bf16_products_report();
    for (int threads : {1, 2}) {
        std::unique_ptr<Backend> cpu = make_cpu_backend(threads);
        cpu->set_activation_dtype(DType::kBF16);
        ActivationRoundingBackend emulated(*cpu, DType::kBF16);
        check_typed_matmul(*cpu, emulated, DType::kBF16, 300, 200, 520,
                           "bf16 products, " + std::to_string(threads) + " thread(s)");
        check_typed_matmul(*cpu, emulated, DType::kBF16, 300, 200, 520,
                           "bf16 products, bf16 weights, " + std::to_string(threads) + " thread(s)", true, true);
        EXPECT_TRUE(cpu->reads_weights_in(DType::kBF16));
        EXPECT_FALSE(emulated.reads_weights_in(DType::kBF16)) << "the oracle multiplies by fp32 views";
        check_typed_matmul(*cpu, emulated, DType::kBF16, 1, 200, 520, "bf16 products, one row");
    }
}

/// Per-element error bounds of bf16 attention (block products on bf16 operands) against the
/// emulation (fp32 attention on the same bf16 values, outputs rounded), from the
/// emulation's own probabilities P (B, NH, T, T). Where the bf16 path multiplies a rounded
/// value the emulation multiplies unrounded (P in O = P V; dS in dQ and dK), the operand is
/// off by half a bf16 ulp (2^-8 relative), or a whole ulp (2^-7) where the fp32 scores differ
/// in their last bit and P rounds the other way; 2^-6 per term covers both:
///   out[i]  <= 2^-6 sum_j P_ij |v_j|
///   dq[i]   <= 2^-6 scale sum_j |dS_ij| |k_j|,   dk[j] <= 2^-6 scale sum_i |dS_ij| |q_i|
/// (dk summed over the key/value head's group), dS = P (dP - rowsum(P dP)), dP = dy v^T.
/// dv multiplies the same bf16 P in both: no term. The comparison adds one ulp of the
/// result (2^-7 relative: the sums differ in fp32 order and may round to a neighbour).
struct AttentionBounds {
    std::vector<double> out, dqkv;
};

AttentionBounds bf16_attention_bounds(const std::vector<float>& qkv, const std::vector<float>& dy,
                                      const std::vector<float>& P, int B, int T, int NH, int NKV, int hs) {
    const int W = (NH + 2 * NKV) * hs, O = NH * hs, group = NH / NKV;
    const double scale = 1.0 / std::sqrt(double(hs)), u = std::ldexp(1.0, -6);
    AttentionBounds r{std::vector<double>(dy.size()), std::vector<double>(qkv.size())};
    auto at = [&](int b, int t, int col) { return (size_t(b) * T + t) * W + col; };
    std::vector<double> ds(size_t(T) * T);
    for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
            const int qc = h * hs, kc = NH * hs + (h / group) * hs, vc = (NH + NKV) * hs + (h / group) * hs;
            const float* p = P.data() + (size_t(b) * NH + h) * T * T;
            for (int i = 0; i < T; ++i) {
                const float* dyi = dy.data() + (size_t(b) * T + i) * O + qc;
                double rowsum = 0.0;
                for (int j = 0; j < T; ++j) {
                    double dp = 0.0;
                    for (int c = 0; c < hs; ++c) dp += double(dyi[c]) * qkv[at(b, j, vc + c)];
                    ds[size_t(i) * T + j] = dp;
                    rowsum += p[size_t(i) * T + j] * dp;
                }
                for (int j = 0; j < T; ++j) {
                    double& d = ds[size_t(i) * T + j];
                    d = std::fabs(p[size_t(i) * T + j] * (d - rowsum));
                    for (int c = 0; c < hs; ++c) {
                        const double pv = p[size_t(i) * T + j] * std::fabs(qkv[at(b, j, vc + c)]);
                        r.out[(size_t(b) * T + i) * O + qc + c] += u * pv;
                        r.dqkv[at(b, i, qc + c)] += u * scale * d * std::fabs(qkv[at(b, j, kc + c)]);
                        r.dqkv[at(b, j, kc + c)] += u * scale * d * std::fabs(qkv[at(b, i, qc + c)]);
                    }
                }
            }
        }
    }
    return r;
}

/// |got - want| <= bound + 2^-7 |want| + 1e-6 everywhere, naming the first element beyond.
void expect_within(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound,
                   const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - want[i]);
        if (!(err <= bound[i] + std::ldexp(std::fabs(double(want[i])), -7) + 1e-6) && bad++ == 0) first = i;
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements beyond their bound; first "
                       << first << ": bf16 " << got[first] << ", emulated " << want[first] << ", bound "
                       << bound[first];
}

// bf16 attention on the CPU's bf16 instructions (oneDNN, one head per thread): within the
// bounds above of the emulation, forward and backward (accumulating into dqkv), GPT-2 and
// grouped-query shapes, causal and block-diagonal, T past one 64-row block; the same
// results on one thread and two.
TEST(TypedAttention, Bf16ProductsWithinTheirBound) {
    if (!cpu_bf16_products().native) GTEST_SKIP() << cpu_bf16_products_report();
    const DType t = DType::kBF16;
    struct Shape {
        int B, T, NH, NKV, hs;
    };
    for (const Shape& sh : {Shape{2, 100, 4, 4, 16}, Shape{2, 130, 4, 2, 24}}) {
        const auto [B, T, NH, NKV, hs] = sh;
        const size_t nqkv = size_t(B) * T * (NH + 2 * NKV) * hs;
        const size_t nout = size_t(B) * T * NH * hs, natt = size_t(B) * NH * T * T;
        const std::vector<float> qkv = values(nqkv, 1.5f, 0.3f, t), dy = values(nout, 0.4f, 0.9f, t);
        const std::vector<float> dqkv0 = values(nqkv, 0.1f, 1.9f, t);
        std::vector<int32_t> from(size_t(B) * T);
        for (size_t i = 0; i < from.size(); ++i) {
            const int tq = static_cast<int>(i % T);
            from[i] = tq < 37 ? 0 : tq < 80 ? 37 : 80;
        }
        const int32_t* const segmented = from.data();
        for (const int32_t* attend_from : {static_cast<const int32_t*>(nullptr), segmented}) {
            std::vector<uint16_t> first_out, first_dqkv;
            for (int threads : {1, 2}) {
                const std::string what = std::string(attend_from != nullptr ? "segmented" : "causal") + ", T " +
                                         std::to_string(T) + " NH " + std::to_string(NH) + " NKV " +
                                         std::to_string(NKV) + ", " + std::to_string(threads) + " thread(s)";
                std::unique_ptr<Backend> fp32 = make_cpu_backend(threads);
                ActivationRoundingBackend emulated(*fp32, t);
                std::unique_ptr<Backend> cpu = make_cpu_backend(threads);
                cpu->set_activation_dtype(t);
                std::vector<float> scratch(cpu->attention_scratch_floats(B, T, NH));
                std::vector<float> out_want(nout), att_want(natt), dqkv_want = dqkv0;
                std::vector<uint16_t> out16(nout), att16(natt), dqkv16 = to16(dqkv0, t);
                const std::vector<uint16_t> qkv16 = to16(qkv, t), dy16 = to16(dy, t);
                const ActPtr o(out16.data(), t), a(att16.data(), t), dq(dqkv16.data(), t);
                const ConstActPtr q(qkv16.data(), t), d(dy16.data(), t);
                attention_step(emulated, out_want.data(), att_want.data(), qkv.data(), dqkv_want.data(),
                               scratch.data(), dy.data(), attend_from, B, T, NH, NKV, hs);
                attention_step(*cpu, o, a, q, dq, scratch.data(), d, attend_from, B, T, NH, NKV, hs);
                const AttentionBounds bound = bf16_attention_bounds(qkv, dy, att_want, B, T, NH, NKV, hs);
                const std::vector<float> out_got = from16(out16, t);
                expect_within(out_got, out_want, bound.out, "bf16 attention out, " + what);
                // Only the causal part of att is specified; it is the emulation's within an ulp.
                std::vector<float> att_got = from16(att16, t);
                for (size_t r = 0; r < natt / T; ++r) {
                    for (int c = static_cast<int>(r % T) + 1; c < T; ++c) att_got[r * T + c] = att_want[r * T + c];
                }
                expect_within(att_got, att_want, std::vector<double>(natt, 0.0),
                              "bf16 attention probabilities, " + what);
                expect_within(from16(dqkv16, t), dqkv_want, bound.dqkv, "bf16 attention dqkv, " + what);
                size_t moved = 0;
                for (size_t i = 0; i < nout; ++i) moved += out_got[i] != out_want[i];
                EXPECT_GT(moved, 0u) << what << ": out equals the emulation everywhere; were the bf16 products used?";
                if (threads == 1) {
                    first_out = out16;
                    first_dqkv = dqkv16;
                } else {
                    EXPECT_TRUE(first_out == out16 && first_dqkv == dqkv16) << what << ": differs from one thread";
                }
            }
        }
    }
}

/// A backend whose GELU runs in fp32 only (a backend without 16-bit kernels), over the CPU.
class Fp32OnlyGelu : public ForwardingBackend {
  public:
    using ForwardingBackend::ForwardingBackend;
    void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override {
        require_f32_activations("gelu_forward", {out.dtype, inp.dtype});
        ForwardingBackend::gelu_forward(out, inp, n);
    }
};

// Such a backend refuses a 16-bit buffer naming the op and the dtype, rather than reading
// its bytes as fp32; fp32 passes through.
TEST(TypedActivationsRefusal, AnFp32OnlyOpNamesItselfAndTheDtype) {
    std::unique_ptr<Backend> cpu = make_cpu_backend(1);
    Fp32OnlyGelu be(*cpu);
    std::vector<float> x(8, 1.f), y(8);
    be.gelu_forward(y.data(), x.data(), x.size());
    EXPECT_GT(y[0], 0.8f);
    std::vector<uint16_t> y16(8);
    try {
        be.gelu_forward(ActPtr(y16.data(), DType::kBF16), x.data(), x.size());
        ADD_FAILURE() << "a bf16 output was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gelu_forward has no bf16 kernel"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace zt
