// Backend-level contracts that are not compute kernels: what a backend says it supports
// (BackendCapabilities), the precision ops (cast, accumulate, zero_bytes) against the
// core/dtype reference bit for bit, and ProfilingBackend (a decorator that must not change
// any result and must attribute time to the op kinds that ran).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/backend/forwarding_backend.hpp"
#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/model/transformer.hpp"
#include "ztrain/optim/optimizer.hpp"
#include "ztrain/parallel/model_state.hpp"

#include "test_support.hpp"
#include "model_state_access.hpp"

namespace zt {
namespace {

TEST(BackendCapabilities, CpuAndCudaTrainEveryDtype) {
    auto cpu = make_cpu_backend(1);
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) EXPECT_TRUE(cpu->capabilities().supports(t));
    EXPECT_EQ(cpu->capabilities().work_dtypes(), "fp32, bf16, fp16");
    // The one answer the trainer's input check, the model and the model state all ask.
    const BackendCapabilities cuda = cuda_capabilities();
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) EXPECT_TRUE(cuda.supports(t));
    EXPECT_EQ(cuda.work_dtypes(), "fp32, bf16, fp16");
    // Where the buffers live decides the snapshot's pinned memory, the communicator and the
    // memory plan's budget: the capability, not the backend's name.
    EXPECT_FALSE(cpu->capabilities().device_memory);
    EXPECT_TRUE(cuda.device_memory);
}

// The memory plan of a deck asks what a backend will report without making one: the same
// answers as the backend itself (cpu), or the CUDA formulas (cuda), and auto plans as cpu.
TEST(BackendCapabilities, PlannedBackendAnswersAsTheBackendWould) {
    for (int threads : {1, 3}) {
        for (int T : {8, 64, 200}) {
            const auto cpu = make_cpu_backend(threads);
            for (const char* setting : {"cpu", "auto"}) {
                const PlannedBackend p = planned_backend(setting, 2, T, 4, threads);
                EXPECT_EQ(p.attention_scratch_floats, static_cast<double>(cpu->attention_scratch_floats(2, T, 4)))
                    << setting << ", threads " << threads << ", T " << T;
                EXPECT_FALSE(p.capabilities.device_memory) << setting;
            }
            const PlannedBackend g = planned_backend("cuda", 2, T, 4, threads);
            EXPECT_EQ(g.attention_scratch_floats, cuda_attention_scratch_floats(T, 4)) << "T " << T;
            EXPECT_TRUE(g.capabilities.device_memory);
        }
    }
}

/// fp32 values that exercise the rounding: ties, subnormals, overflow, infinities, NaN, and
/// random bit patterns over every exponent.
std::vector<float> special_and_random_floats() {
    std::vector<float> v = {0.f,
                            -0.f,
                            1.f,
                            -1.5f,
                            65504.f,
                            65519.f,
                            65520.f,
                            1e-8f,
                            6e-8f,
                            3e-5f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            bits_float(0x3f808000u),
                            bits_float(0x3f818000u),
                            bits_float(0x3f801000u),
                            bits_float(0x3f803000u)};
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 20000; ++i) v.push_back(bits_float(bits(rng)));
    return v;
}

std::vector<uint8_t> as_bytes(const void* p, size_t bytes) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + bytes);
}

// The CPU's precision ops are the conversions ModelState ran on host memory before they
// became backend ops: bit-identical results, so bf16/fp16 training curves are unchanged.
TEST(BackendPrecisionOps, CpuCastAndAccumulateMatchCoreDtypeBitForBit) {
    auto be = make_cpu_backend(2);
    const std::vector<float> src = special_and_random_floats();
    const size_t n = src.size();
    for (DType t : {DType::kBF16, DType::kF16}) {
        std::vector<uint16_t> want(n);
        std::vector<uint16_t> got(n);
        convert_from_f32(src.data(), want.data(), n, t);
        be->cast(got.data(), t, src.data(), DType::kF32, n);
        EXPECT_EQ(as_bytes(got.data(), 2 * n), as_bytes(want.data(), 2 * n)) << "fp32 -> " << dtype_name(t);

        std::vector<float> back_want(n);
        std::vector<float> back_got(n);
        convert_to_f32(want.data(), back_want.data(), n, t);
        be->cast(back_got.data(), DType::kF32, want.data(), t, n);
        EXPECT_EQ(as_bytes(back_got.data(), 4 * n), as_bytes(back_want.data(), 4 * n)) << dtype_name(t) << " -> fp32";

        // 16 -> 16 equals the two-pass conversion through an fp32 buffer.
        const DType other = t == DType::kBF16 ? DType::kF16 : DType::kBF16;
        std::vector<uint16_t> cross_want(n);
        std::vector<uint16_t> cross_got(n);
        convert_from_f32(back_want.data(), cross_want.data(), n, other);
        be->cast(cross_got.data(), other, want.data(), t, n);
        EXPECT_EQ(as_bytes(cross_got.data(), 2 * n), as_bytes(cross_want.data(), 2 * n))
            << dtype_name(t) << " -> " << dtype_name(other);

        // Same dtype: a copy of n elements of that dtype (and nothing past them).
        std::vector<uint16_t> copy(n + 1, 0xabcdu);
        be->cast(copy.data(), t, want.data(), t, n);
        EXPECT_EQ(as_bytes(copy.data(), 2 * n), as_bytes(want.data(), 2 * n));
        EXPECT_EQ(copy[n], 0xabcdu);

        // Accumulation: round(dst + src) element by element, as accumulate_into.
        std::vector<float> add(n);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-2.f, 2.f);
        for (float& a : add) a = u(rng);
        std::vector<uint16_t> acc_want = want;
        std::vector<uint16_t> acc_got = want;
        accumulate_into(acc_want.data(), add.data(), n, t);
        be->accumulate(acc_got.data(), t, add.data(), n);
        EXPECT_EQ(as_bytes(acc_got.data(), 2 * n), as_bytes(acc_want.data(), 2 * n)) << "accumulate " << dtype_name(t);
    }
    std::vector<float> f(src.begin(), src.end());
    std::vector<float> f_want = f;
    std::vector<float> add(n, 0.25f);
    accumulate_into(f_want.data(), add.data(), n, DType::kF32);
    be->accumulate(f.data(), DType::kF32, add.data(), n);
    EXPECT_EQ(as_bytes(f.data(), 4 * n), as_bytes(f_want.data(), 4 * n)) << "accumulate fp32";

    std::vector<uint16_t> z(9, 0xffffu);
    be->zero_bytes(z.data(), 8 * sizeof(uint16_t));
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(z[i], 0u);
    EXPECT_EQ(z[8], 0xffffu);
}

ModelConfig tiny_model() { return test::model_config(2, 2, 16, 8, 40); }

struct StepResult {
    float loss = 0.f;
    double grad_sum_squares = 0.0;
    std::vector<float> state;  // master, m, v after one AdamW step
};

/// One training step (forward, backward, grad norm, AdamW) of the tiny model on `be`.
StepResult one_step(Backend& be, DType t, ActivationStorage storage = ActivationStorage::kTyped,
                    const ModelConfig& mc = tiny_model()) {
    Transformer model(mc, be, 2);
    model.set_activation_dtype(t, storage);
    ModelState state(model.layout(), be, self_communicator(), StateOptions::zero(0).with_seed(11).in(t, t));
    std::vector<int32_t> inputs(16);
    std::vector<int32_t> targets(16);
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>((i * 7) % mc.vocab_size);
        targets[i] = static_cast<int32_t>((i * 7 + 3) % mc.vocab_size);
    }
    StepResult r;
    state.zero_grads();
    state.begin_micro_step(true, true);
    r.loss = model.forward(state, inputs.data(), targets.data(), 2, 8, 1.f / 16.f);
    model.backward(state);
    state.finish_grad_sync();
    r.grad_sum_squares = state.grad_sum_squares_if_finite();
    AdamWStep step;
    step.lr = 1e-3f;
    step.weight_decay = 0.1f;
    step.bias_correction1 = 0.1f;
    step.bias_correction2 = 0.05f;
    state.optimizer_step(step);
    r.state = ModelStateTestAccess::owned_optimizer_state(state);
    return r;
}

// 16-bit activations stored in their dtype give the emulation's step bit for bit (fp32
// buffers holding 16-bit values, rounded by ActivationRoundingBackend after each op): loss,
// gradient norm and the updated state, GPT-2 and Llama (grouped-query, RoPE), fp16 (widened
// fp32 products) and bf16 where the CPU has no bf16 products. With them, attention's block
// products read the probabilities and dS rounded to bf16, which the emulation (fp32
// attention, outputs rounded) does not: the loss is then within 2^-7 relative (one bf16 ulp)
// and the gradient norm within 2^-4 (squares of gradients that each move by a few bf16 ulp).
TEST(TypedActivations, ModelStepEqualsTheEmulation) {
    for (const ModelConfig& mc : {tiny_model(), test::small_llama(2, false, false)}) {
        for (DType t : {DType::kBF16, DType::kF16}) {
            const std::string what = mc.arch.name() + ", " + dtype_name(t);
            auto emulated_be = make_cpu_backend(2);
            auto typed_be = make_cpu_backend(2);
            const StepResult want = one_step(*emulated_be, t, ActivationStorage::kEmulated, mc);
            const StepResult got = one_step(*typed_be, t, ActivationStorage::kTyped, mc);
            if (t == DType::kBF16 && cpu_bf16_products().native) {
                EXPECT_NEAR(got.loss, want.loss, std::ldexp(std::fabs(want.loss), -7)) << what;
                EXPECT_NEAR(got.grad_sum_squares, want.grad_sum_squares, std::ldexp(want.grad_sum_squares, -4))
                    << what;
                continue;
            }
            EXPECT_EQ(float_bits(got.loss), float_bits(want.loss)) << what << ": loss " << got.loss << " vs "
                                                                   << want.loss;
            EXPECT_EQ(got.grad_sum_squares, want.grad_sum_squares) << what;
            ASSERT_EQ(got.state.size(), want.state.size());
            EXPECT_EQ(as_bytes(got.state.data(), 4 * got.state.size()),
                      as_bytes(want.state.data(), 4 * want.state.size()))
                << what << ": the updated master weights and moments differ";
        }
    }
}

/// Records the dtype of every weight the products are given; reads 16-bit weights when told to.
class WeightDtypes : public ForwardingBackend {
  public:
    WeightDtypes(Backend& inner, bool reads16) : ForwardingBackend(inner), m_reads16(reads16) {}
    bool reads_weights_in(DType t) const override { return t == DType::kF32 || m_reads16; }
    void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr w, const float* bias, int N, int C,
                        int OC) override {
        seen.insert(w.dtype);
        ForwardingBackend::matmul_forward(out, inp, w, bias, N, C, OC);
    }
    void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr w, const float* bias, ConstActPtr res,
                                 int N, int C, int OC) override {
        seen.insert(w.dtype);
        ForwardingBackend::matmul_residual_forward(out, inp, w, bias, res, N, C, OC);
    }
    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp, ConstActPtr w,
                         int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override {
        seen.insert(w.dtype);
        ForwardingBackend::matmul_backward(dinp, dweight, dbias, dout, inp, w, N, C, OC, grads);
    }
    std::set<DType> seen;

  private:
    bool m_reads16;
};

// The model hands the products a unit's 16-bit storage exactly where the backend says it
// reads such weights (Backend::reads_weights_in), and the fp32 view elsewhere; the step is
// the same bit for bit either way.
TEST(StoredWeights, TheProductsGetTheUnitsStorageWhereTheBackendReadsIt) {
    for (DType t : {DType::kBF16, DType::kF16}) {
        auto cpu_a = make_cpu_backend(1);
        auto cpu_b = make_cpu_backend(1);
        WeightDtypes reads(*cpu_a, true), views(*cpu_b, false);
        const StepResult a = one_step(reads, t);
        const StepResult b = one_step(views, t);
        EXPECT_EQ(reads.seen, std::set<DType>{t}) << dtype_name(t);
        EXPECT_EQ(views.seen, std::set<DType>{DType::kF32}) << dtype_name(t);
        EXPECT_EQ(float_bits(a.loss), float_bits(b.loss)) << dtype_name(t);
        EXPECT_EQ(a.grad_sum_squares, b.grad_sum_squares) << dtype_name(t);
        EXPECT_EQ(as_bytes(a.state.data(), 4 * a.state.size()), as_bytes(b.state.data(), 4 * b.state.size()))
            << dtype_name(t);
    }
}

// acquire_vectors widens only a unit's 1-D tensors (what the model reads from the fp32 view
// when the products read the matrices as stored); acquire() of the still acquired unit then
// widens the rest. Checked against the stored bf16 values, at stages 0 and 3.
TEST(StoredWeights, AcquireVectorsWidensTheVectorsAndAcquireTheRest) {
    auto cpu = make_cpu_backend(1);
    const ModelLayout layout = make_model_layout(tiny_model());
    for (int stage : {0, 3}) {
        ModelState state(layout, *cpu, self_communicator(),
                         StateOptions::zero(stage).with_seed(11).in(DType::kBF16, DType::kBF16));
        EXPECT_EQ(state.stored_dtype(), DType::kBF16);
        const int unit = 1;
        const float* view = state.acquire_vectors(unit);
        const ConstActPtr stored = state.acquired_storage(unit);
        const size_t n = layout.unit_numel[unit];
        std::vector<float> want(n);
        convert_to_f32(stored.data, want.data(), n, DType::kBF16);
        size_t vectors = 0;
        for (const ParamSpec& p : layout.params) {
            if (p.unit != unit || p.shape.size() != 1) continue;
            ++vectors;
            EXPECT_EQ(as_bytes(view + p.offset, 4 * p.numel), as_bytes(want.data() + p.offset, 4 * p.numel))
                << p.name << ", stage " << stage;
        }
        EXPECT_GT(vectors, 0u);
        EXPECT_EQ(state.acquire(unit), view) << "the same view, widened whole";
        EXPECT_EQ(as_bytes(view, 4 * n), as_bytes(want.data(), 4 * n)) << "stage " << stage;
        state.release(unit);
    }
}

// A 16-bit run's AdamW and gradient norm read the stored 16-bit gradients directly, widened
// in blocks. A unit larger than the conversion chunk (4M elements; this embedding: 4.2M) is
// updated element by element from its own gradient: after one step from m = v = 0,
// m = (1 - beta1) g and v = (1 - beta2) g^2 for every owned element, and the working copy
// is the new master rounded.
TEST(ConversionChunks, Bf16StepOverAUnitLargerThanTheChunk) {
    ModelConfig mc = test::model_config(1, 2, 128, 8, 33000);
    mc.vocab_pad_to = 64;
    auto be = make_cpu_backend(2);
    Transformer model(mc, *be, 2, TransformerOptions().with_activation(DType::kBF16));
    ASSERT_GT(model.layout().unit_numel[0], size_t{1} << 22) << "unit 0 must exceed one conversion chunk";
    ModelState state(model.layout(), *be, self_communicator(),
                     StateOptions::zero(0).with_seed(5).in(DType::kBF16, DType::kBF16));
    std::vector<int32_t> inputs(16), targets(16);
    for (size_t i = 0; i < inputs.size(); ++i) {
        inputs[i] = static_cast<int32_t>((i * 4099) % 33000);
        targets[i] = static_cast<int32_t>((i * 7919 + 3) % 33000);
    }
    state.zero_grads();
    state.begin_micro_step(true, true);
    model.forward(state, inputs.data(), targets.data(), 2, 8, 1.f / 16.f);
    model.backward(state);
    state.finish_grad_sync();
    const std::vector<float> g = ModelStateTestAccess::owned_grads(state);
    double want_ss = 0.0;
    for (float x : g) want_ss += static_cast<double>(x) * x;
    EXPECT_NEAR(state.grad_sum_squares_if_finite(), want_ss, 1e-9 * want_ss);
    AdamWStep step;
    step.lr = 1e-3f;
    state.optimizer_step(step);
    const std::vector<float> st = ModelStateTestAccess::owned_optimizer_state(state);
    size_t at_g = 0, at_s = 0, checked = 0;
    for (int u = 0; u < model.layout().num_units(); ++u) {
        const size_t n = state.shards().owned_end(u) - state.shards().owned_begin(u);
        for (size_t i = 0; i < n; ++i) {
            const float gi = g[at_g + i], m = st[at_s + n + i], v = st[at_s + 2 * n + i];
            ASSERT_NEAR(m, (1.f - step.beta1) * gi, 1e-6f * std::fabs(gi) + 1e-30f) << "unit " << u << " element " << i;
            ASSERT_NEAR(v, (1.f - step.beta2) * gi * gi, 1e-5f * gi * gi + 1e-30f) << "unit " << u << " element " << i;
            ++checked;
        }
        const float* working = state.acquire(u);  // the 16-bit working copy, widened
        const size_t b = state.shards().owned_begin(u);
        for (size_t i = 0; i < n; ++i) {
            const float master = st[at_s + i];
            ASSERT_EQ(working[b + i], bf16_to_f32(f32_to_bf16(master))) << "unit " << u << " element " << i;
        }
        state.release(u);
        at_g += n;
        at_s += 3 * n;
    }
    EXPECT_EQ(checked, g.size());
}

// The host memory a backend's copies use (the checkpoint snapshot's buffer): page-aligned,
// because the shard writer writes it by direct I/O, also through a decorator.
TEST(BackendCopies, AllocHostIsPageAlignedAndWritable) {
    auto cpu = make_cpu_backend(1);
    ProfilingBackend profiled(make_cpu_backend(1));
    for (Backend* b : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(&profiled)}) {
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{1} << 20}) {
            void* p = b->alloc_host(bytes);
            ASSERT_NE(p, nullptr) << b->name() << ", " << bytes << " bytes";
            EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHostPageAlign, 0u) << b->name() << ", " << bytes << " bytes";
            if (bytes > 0) std::memset(p, 0x5a, bytes);
            b->free_host(p);
        }
    }
}

// The snapshot copy writes past the cache with 16-byte streaming stores after an unaligned
// head: every destination alignment, lengths around the 64-byte loop, and the bytes just
// outside the range untouched, through the CPU backend and the profiling decorator.
TEST(BackendCopies, ToHostPastCacheCopiesExactlyTheRange) {
    auto cpu = make_cpu_backend(1);
    ProfilingBackend profiled(make_cpu_backend(1));
    std::vector<unsigned char> src(4096 + 64);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
    for (Backend* b : {static_cast<Backend*>(cpu.get()), static_cast<Backend*>(&profiled)}) {
        for (size_t dst_off = 0; dst_off < 16; ++dst_off) {
            for (size_t src_off : {size_t{0}, size_t{3}}) {
                for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63}, size_t{64}, size_t{65},
                                 size_t{200}, size_t{4000}}) {
                    std::vector<unsigned char> dst(4096 + 64, 0xAB);
                    b->to_host_past_cache(dst.data() + dst_off, src.data() + src_off, n);
                    for (size_t i = 0; i < dst.size(); ++i) {
                        const bool inside = i >= dst_off && i < dst_off + n;
                        const unsigned char want = inside ? src[i - dst_off + src_off] : 0xAB;
                        ASSERT_EQ(dst[i], want) << b->name() << ": byte " << i << " of a " << n
                                                << "-byte copy to offset " << dst_off << " from offset " << src_off;
                    }
                }
            }
        }
    }
    EXPECT_GT(profiled.op_ms(ProfilingBackend::kOpCopy), 0.0);
}

// The decorator forwards every call unchanged (bit-identical step in every dtype) and files
// time under the kinds that ran; reset() clears it.
// GradWrite::kAssign (the first writer of a step's parameter gradient, no zeroing pass):
// dweight and dbias written over whatever the buffers held equal kAdd into zeros bit for
// bit, on every CPU product path: fp32 sgemm, typed operands widened in row blocks (fp16;
// N past one block, so later blocks add to the first's), bf16 (oneDNN where the CPU has bf16
// products), and N = 0 (no product runs: zeros).
TEST(MatmulBackward, AssignedGradientsEqualAddedIntoZerosBitForBit) {
    std::unique_ptr<Backend> be = make_cpu_backend(2);
    struct Case {
        DType t;
        int N, C, OC;
    };
    for (const Case k : {Case{DType::kF32, 70, 48, 40}, Case{DType::kF16, 3000, 512, 512},
                         Case{DType::kBF16, 70, 48, 40}, Case{DType::kF32, 0, 16, 8}}) {
        const size_t w = dtype_size(k.t);
        const auto typed = [&](size_t n, uint32_t seed) {
            std::vector<float> f(n);
            std::mt19937 rng(seed);
            std::uniform_real_distribution<float> u(-1.f, 1.f);
            for (float& x : f) x = u(rng);
            std::vector<char> bytes(std::max<size_t>(n, 1) * w);
            be->cast(bytes.data(), k.t, f.data(), DType::kF32, n);
            return bytes;
        };
        const size_t N = static_cast<size_t>(k.N), C = static_cast<size_t>(k.C), OC = static_cast<size_t>(k.OC);
        std::vector<char> dout = typed(N * OC, 1), inp = typed(N * C, 2), weight = typed(OC * C, 3);
        const std::vector<char> dinp0 = typed(N * C, 4);
        std::vector<char> dinp_a = dinp0, dinp_b = dinp0;
        std::vector<float> dw_a(OC * C, std::numeric_limits<float>::quiet_NaN()), db_a(OC, 7.f);
        std::vector<float> dw_b(OC * C, 0.f), db_b(OC, 0.f);
        be->matmul_backward(ActPtr(dinp_a.data(), k.t), dw_a.data(), db_a.data(), ConstActPtr(dout.data(), k.t),
                            ConstActPtr(inp.data(), k.t), ConstActPtr(weight.data(), k.t), k.N, k.C, k.OC,
                            GradWrite::kAssign);
        be->matmul_backward(ActPtr(dinp_b.data(), k.t), dw_b.data(), db_b.data(), ConstActPtr(dout.data(), k.t),
                            ConstActPtr(inp.data(), k.t), ConstActPtr(weight.data(), k.t), k.N, k.C, k.OC);
        const std::string what = str(dtype_name(k.t), " N ", k.N, " C ", k.C, " OC ", k.OC);
        EXPECT_EQ(std::memcmp(dw_a.data(), dw_b.data(), dw_a.size() * sizeof(float)), 0) << what << ": dweight";
        EXPECT_EQ(std::memcmp(db_a.data(), db_b.data(), db_a.size() * sizeof(float)), 0) << what << ": dbias";
        EXPECT_EQ(dinp_a, dinp_b) << what << ": dinp (added into in both)";
        if (k.N == 0) {
            EXPECT_EQ(dw_a, std::vector<float>(OC * C, 0.f)) << "no rows: assigned zeros";
        }
    }
}

TEST(ProfilingBackend, ChangesNoResultAndTimesTheOpsThatRan) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        auto plain = make_cpu_backend(1);
        const StepResult want = one_step(*plain, t);
        ProfilingBackend profiled(make_cpu_backend(1));
        EXPECT_EQ(profiled.name(), "cpu");
        EXPECT_EQ(cuda_stream(profiled), nullptr);
        const StepResult got = one_step(profiled, t);
        EXPECT_EQ(float_bits(got.loss), float_bits(want.loss)) << dtype_name(t);
        EXPECT_EQ(got.grad_sum_squares, want.grad_sum_squares) << dtype_name(t);
        ASSERT_EQ(got.state.size(), want.state.size());
        EXPECT_EQ(as_bytes(got.state.data(), 4 * got.state.size()), as_bytes(want.state.data(), 4 * want.state.size()))
            << dtype_name(t);
        using P = ProfilingBackend;
        for (int op : {P::kOpEncoder, P::kOpLayerNorm, P::kOpMatmulFwd, P::kOpMatmulBwd, P::kOpAttentionFwd,
                       P::kOpAttentionBwd, P::kOpElementwise, P::kOpSoftmaxCe, P::kOpAdamW, P::kOpSumSquares}) {
            EXPECT_GT(profiled.op_ms(op), 0.0) << P::op_name(op) << " " << dtype_name(t);
        }
        // 16-bit working copies are widened and gradients rounded into storage (one
        // micro-step: rounded, a cast; a later one would be added, an accumulate).
        if (t != DType::kF32) {
            EXPECT_GT(profiled.op_ms(P::kOpCast), 0.0) << dtype_name(t);
            EXPECT_EQ(profiled.op_ms(P::kOpAccumulate), 0.0) << dtype_name(t);
        }
        profiled.reset();
        for (int op = 0; op < P::kNumOps; ++op) EXPECT_EQ(profiled.op_ms(op), 0.0) << P::op_name(op);
    }
}

TEST(ProfilingBackend, OpNamesAreDistinctAndStable) {
    std::set<std::string> names;
    for (int op = 0; op < ProfilingBackend::kNumOps; ++op) names.insert(ProfilingBackend::op_name(op));
    EXPECT_EQ(names.size(), static_cast<size_t>(ProfilingBackend::kNumOps));
    EXPECT_STREQ(ProfilingBackend::op_name(ProfilingBackend::kOpMatmulFwd), "matmul_fwd");
    EXPECT_STREQ(ProfilingBackend::op_name(-1), "?");
    EXPECT_STREQ(ProfilingBackend::op_name(ProfilingBackend::kNumOps), "?");
}

}  // namespace
}  // namespace zt
