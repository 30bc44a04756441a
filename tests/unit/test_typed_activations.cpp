// Typed activation ops (backend.hpp ActPtr): an op given 16-bit buffers reads and writes that
// dtype and computes in fp32 inside, so its result is bit for bit the fp32 op on the widened
// inputs followed by one rounding: what the emulation (ActivationRoundingBackend over fp32
// buffers holding 16-bit values) gives. Checked per op, bf16 and fp16, on one thread and on a
// team (sizes past the threshold where the CPU ops go parallel, and not multiples of the
// block the typed path widens at a time), with accumulation into a non-zero gradient and an
// output aliasing an input where the op allows it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ztrain/backend/activation_rounding.hpp"
#include "ztrain/backend/backend.hpp"
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

struct TypedCase {
    DType dtype;
    int threads;
};

class TypedActivations : public ::testing::TestWithParam<TypedCase> {
  protected:
    DType t() const { return GetParam().dtype; }
    std::string at() const { return std::string(dtype_name(t())) + ", " + std::to_string(GetParam().threads) + " thread(s)"; }
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

INSTANTIATE_TEST_SUITE_P(Dtypes, TypedActivations,
                         ::testing::Values(TypedCase{DType::kBF16, 1}, TypedCase{DType::kBF16, 2},
                                           TypedCase{DType::kF16, 1}, TypedCase{DType::kF16, 2}),
                         [](const auto& info) {
                             return std::string(dtype_name(info.param.dtype)) + "_threads" +
                                    std::to_string(info.param.threads);
                         });

/// A backend whose GELU runs in fp32 only (the CUDA backend's state for now), over the CPU.
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
