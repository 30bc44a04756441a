// Every CUDA op against its CPU twin (the reference) on fresh random inputs.
//
// Each test skips itself when no CUDA device is visible (cudaGetDeviceCount fails or says
// 0, as on a build machine without a driver), so `ctest -L gpu` passes there as skipped.
// The inputs are drawn from a new seed each run, printed so a failure can be replayed with
// ZT_TEST_SEED=<seed>. Shapes are deliberately odd (67 rows, 45 channels, 12-wide heads):
// they leave operands misaligned and tiles ragged, which is where GPU kernels break.
//
// Tolerances: |gpu - cpu| <= atol + rtol * |cpu| per element, per dtype and op kind.
//  - kExact: the same float operations in the same order (residual, encoder sums,
//    casts): 0.
//  - kElementwise (1e-6, 1e-6): one fp32 formula per element where the libm-grade CUDA
//    expf/sqrtf meet the CPU's polynomial versions (both within 2e-7 relative).
//  - kF32Sum (2e-4, 1e-4): fp32 reductions whose order differs (cuBLAS tiles vs OpenBLAS,
//    warp trees vs sequential loops). With inputs in [-1, 1] and at most 256 terms, the
//    rounding error of a sum is about sqrt(K) * 6e-8 * sum|terms| ~ 1e-5 typical, 1e-3 at
//    the adversarial worst; 2e-4 absolute sits between, far below any real indexing bug
//    (those give errors of order 1).
//  - kBF16 (1e-3, 1e-2) and kF16 (1e-3, 2e-3): the reference is fp32 arithmetic on inputs
//    already rounded to the 16-bit type, so the difference is the final rounding of the
//    output. One ulp is at most 2^-7 = 7.8e-3 (bf16, 8 significant bits) and 2^-10 =
//    9.8e-4 (fp16) relative; a different fp32 accumulation order can move a value across
//    a rounding boundary, so the bounds allow one ulp (bf16) and two (fp16).
//  - kTypedBF16 (2e-4, 2^-6) and kTypedF16 (2e-4, 2^-9): a typed op (16-bit activations)
//    against the CPU backend's same typed op on the same stored inputs. Both compute in
//    fp32 and round once, so they differ only where their fp32 results (within the fp32
//    bounds above) straddle a rounding boundary: one ulp. bf16 keeps 8 significant bits, so
//    one ulp is at most 2^-7 of the value (fp16, 11 bits: 2^-10); the bounds allow two ulps,
//    for outputs computed from a stored 16-bit intermediate that may itself differ by one
//    ulp (att in attention's backward is the CPU's, but the forward's out reads its own P).
//    atol covers fp32 sums that cancel to near zero, where the 16-bit ulp is tiny.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cuda_backend.hpp"
#include "ztrain/backend_cuda/cuda_backend.hpp"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/backend/profiling_backend.hpp"
#include "ztrain/backend/rope.hpp"
#include "ztrain/core/dtype.hpp"
#include "ztrain/core/error.hpp"

namespace {

using zt::DType;

struct Tol {
    double atol;
    double rtol;
};
constexpr Tol kExact{0.0, 0.0};
constexpr Tol kElementwise{1e-6, 1e-6};
constexpr Tol kF32Sum{2e-4, 1e-4};
constexpr Tol kBF16{1e-3, 1e-2};
constexpr Tol kF16{1e-3, 2e-3};

constexpr Tol kTypedBF16{2e-4, 1.0 / 64};
constexpr Tol kTypedF16{2e-4, 1.0 / 512};

Tol tol_for(DType t) { return t == DType::kBF16 ? kBF16 : t == DType::kF16 ? kF16 : kF32Sum; }
/// CUDA's typed op vs the CPU's typed op (see kTypedBF16).
Tol typed_tol(DType t) { return t == DType::kBF16 ? kTypedBF16 : t == DType::kF16 ? kTypedF16 : kF32Sum; }

/// Host activations stored in `dtype`: the CPU twin's typed buffers.
struct HostAct {
    DType dtype;
    std::vector<uint8_t> bytes;
    HostAct(const std::vector<float>& v, DType t) : dtype(t), bytes(v.size() * zt::dtype_size(t)) {
        zt::convert_from_f32(v.data(), bytes.data(), v.size(), t);
    }
    size_t size() const { return bytes.size() / zt::dtype_size(dtype); }
    zt::ActPtr ptr() { return {bytes.data(), dtype}; }
    std::vector<float> floats() const {
        std::vector<float> f(size());
        zt::convert_to_f32(bytes.data(), f.data(), f.size(), dtype);
        return f;
    }
};

/// Compares element-wise; reports how many are off, the worst, and the first offender.
/// `mask(i)` false skips element i (unspecified entries).
template <typename Mask>
void expect_close_masked(const std::vector<float>& got, const std::vector<float>& ref, Tol tol,
                         const std::string& what, Mask mask) {
    ASSERT_EQ(got.size(), ref.size()) << what;
    size_t bad = 0;
    size_t first = 0;
    double worst = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!mask(i)) continue;
        const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
        const bool ok = err <= tol.atol + tol.rtol * std::fabs(static_cast<double>(ref[i]));
        if (!ok || std::isnan(got[i]) != std::isnan(ref[i])) {
            if (bad == 0) first = i;
            ++bad;
        }
        if (!std::isnan(err)) worst = std::max(worst, err);
    }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off (atol " << tol.atol
                       << ", rtol " << tol.rtol << "); first at " << first << ": gpu " << got[first] << " cpu "
                       << ref[first] << "; worst abs error " << worst;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, Tol tol, const std::string& what) {
    expect_close_masked(got, ref, tol, what, [](size_t) { return true; });
}

uint64_t test_seed() {
    if (const char* s = std::getenv("ZT_TEST_SEED")) return std::strtoull(s, nullptr, 10);
    return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

class CudaOps : public ::testing::Test {
  protected:
    void SetUp() override {
        if (zt::cuda_device_count() <= 0) GTEST_SKIP() << "no CUDA device visible";
        const uint64_t seed = test_seed();
        std::printf("ZT_TEST_SEED=%llu\n", static_cast<unsigned long long>(seed));
        RecordProperty("seed", std::to_string(seed));
        m_rng.seed(seed);
        m_gpu = zt::make_cuda_backend(0);
        m_cpu = zt::make_cpu_backend(1);
    }

    void TearDown() override {
        if (!m_gpu) return;
        for (void* p : m_owned) m_gpu->free(p);
    }

    std::vector<float> rand(size_t n, float lo = -1.f, float hi = 1.f) {
        std::uniform_real_distribution<float> d(lo, hi);
        std::vector<float> v(n);
        for (float& x : v) x = d(m_rng);
        return v;
    }
    std::vector<int32_t> rand_ints(size_t n, int lo, int hi) {
        std::uniform_int_distribution<int> d(lo, hi);
        std::vector<int32_t> v(n);
        for (int32_t& x : v) x = d(m_rng);
        return v;
    }

    /// A device copy of host data (freed at TearDown).
    template <typename T>
    T* up(const std::vector<T>& h) {
        void* p = m_gpu->alloc_bytes(h.size() * sizeof(T));
        m_owned.push_back(p);
        m_gpu->to_device(p, h.data(), h.size() * sizeof(T));
        return static_cast<T*>(p);
    }
    /// A device copy of h stored as `t` (h rounded to t).
    void* up_as(const std::vector<float>& h, DType t) {
        std::vector<uint8_t> bytes(h.size() * zt::dtype_size(t));
        zt::convert_from_f32(h.data(), bytes.data(), h.size(), t);
        return up(bytes);
    }
    float* zeros(size_t n) {
        float* p = m_gpu->alloc_floats(n);
        m_owned.push_back(p);
        return p;
    }
    template <typename T>
    std::vector<T> down(const T* d, size_t n) {
        std::vector<T> h(n);
        m_gpu->to_host(h.data(), d, n * sizeof(T));
        return h;
    }
    std::vector<float> down_as(const void* d, size_t n, DType t) {
        std::vector<uint8_t> bytes(n * zt::dtype_size(t));
        m_gpu->to_host(bytes.data(), d, bytes.size());
        std::vector<float> h(n);
        zt::convert_to_f32(bytes.data(), h.data(), n, t);
        return h;
    }
    /// A device copy of typed host activations.
    zt::ActPtr up_act(const HostAct& h) { return {up(h.bytes), h.dtype}; }
    /// n typed device activations as fp32 values.
    std::vector<float> down_act(zt::ConstActPtr d, size_t n) { return down_as(d.data, n, d.dtype); }
    static std::vector<float> rounded(std::vector<float> v, DType t) {
        zt::round_to_dtype(v.data(), v.size(), t);
        return v;
    }

    /// matmul_forward_ex in `t` with bias + GELU (and the pre-GELU output) vs CPU matmul
    /// + gelu on inputs rounded to `t`.
    void check_matmul_ex(DType t);
    /// layernorm_backward on both sides from the CPU's mean and rstd (backward compared on
    /// its own): dinp within kF32Sum, the weight and bias gradients within `param_tol`.
    void check_layernorm_backward(const std::vector<float>& inp, const std::vector<float>& w,
                                  const std::vector<float>& mean, const std::vector<float>& rstd, int N, int C,
                                  Tol param_tol, const std::string& tag) {
        const size_t n = static_cast<size_t>(N) * C;
        const auto dout = rand(n);
        auto dinp = rand(n);
        auto dw = rand(static_cast<size_t>(C));
        auto db = rand(static_cast<size_t>(C));
        float* g_dinp = up(dinp);
        float* g_dw = up(dw);
        float* g_db = up(db);
        m_gpu->layernorm_backward(g_dinp, g_dw, g_db, up(dout), up(inp), up(w), up(mean), up(rstd), N, C);
        m_cpu->layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(),
                                  rstd.data(), N, C);
        expect_close(down(g_dinp, n), dinp, kF32Sum, "layernorm dinp" + tag);
        expect_close(down(g_dw, dw.size()), dw, param_tol, "layernorm dweight" + tag);
        expect_close(down(g_db, db.size()), db, param_tol, "layernorm dbias" + tag);
    }

    struct AttentionShape {
        int B, T, NH, NKV, hs;
    };
    /// (GQA) attention forward and backward vs the CPU; gpt2_entry: through GPT-2's
    /// attention_forward/backward (C, NH), which needs NKV = NH; attend_from ((B, T)):
    /// the segmented (block-diagonal) versions instead.
    void check_attention(const AttentionShape& s, bool gpt2_entry, const std::vector<int32_t>* attend_from = nullptr);
    /// The same in dtype t (qkv, out, att, dout, dqkv typed) vs the CPU's typed attention.
    void check_typed_attention(const AttentionShape& s, DType t, const std::vector<int32_t>* attend_from = nullptr);

    std::mt19937_64 m_rng;
    std::unique_ptr<zt::CudaBackend> m_gpu;
    std::unique_ptr<zt::Backend> m_cpu;
    std::vector<void*> m_owned;
};

// ---- matmul -------------------------------------------------------------------------

struct MatmulShape {
    int N, C, OC;
};
// Odd (misaligned leading dimensions, ragged tiles) and GPT-like.
const MatmulShape kMatmulShapes[] = {{67, 45, 97}, {128, 64, 192}, {5, 256, 3}};

// The snapshot's host buffer: page-aligned (direct I/O) and usable by the copies both ways.
TEST_F(CudaOps, AllocHostIsPageAlignedAndCopiesRoundTrip) {
    const size_t n = 3 * 1024 + 7;
    auto* host = static_cast<float*>(m_gpu->alloc_host(n * sizeof(float)));
    ASSERT_NE(host, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(host) % zt::kHostPageAlign, 0u);
    const auto want = rand(n);
    float* dev = up(want);
    m_gpu->to_host(host, dev, n * sizeof(float));
    const std::vector<float> got(host, host + n);
    m_gpu->free_host(host);
    expect_close(got, want, kExact, "alloc_host round trip");
}

// copy_strided (Muon's tensor-parallel assembly: a column slice's rows in one call) against
// the CPU's row-by-row copies: 5 rows of 7 floats, pitches 9 and 16.
TEST_F(CudaOps, CopyStrided) {
    const auto src = rand(5 * 9);
    std::vector<float> dst(5 * 16, 0.f);
    float* g_dst = zeros(dst.size());
    m_gpu->copy_strided(g_dst + 3, 16, up(src) + 1, 9, 7, 5);
    m_cpu->copy_strided(dst.data() + 3, 16, src.data() + 1, 9, 7, 5);
    expect_close(down(g_dst, dst.size()), dst, kExact, "copy_strided");
}

TEST_F(CudaOps, MatmulForwardFp32) {
    for (const auto& s : kMatmulShapes) {
        for (bool with_bias : {false, true}) {
            const auto inp = rand(static_cast<size_t>(s.N) * s.C);
            const auto w = rand(static_cast<size_t>(s.OC) * s.C);
            const auto bias = rand(static_cast<size_t>(s.OC));
            std::vector<float> ref(static_cast<size_t>(s.N) * s.OC);
            m_cpu->matmul_forward(ref.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, s.N, s.C,
                                  s.OC);
            float* out = zeros(ref.size());
            m_gpu->matmul_forward(out, up(inp), up(w), with_bias ? up(bias) : nullptr, s.N, s.C, s.OC);
            expect_close(down(out, ref.size()), ref, kF32Sum,
                         "matmul_forward N=" + std::to_string(s.N) + " bias=" + std::to_string(with_bias));
        }
    }
}

TEST_F(CudaOps, MatmulBackwardFp32) {
    for (const auto& s : kMatmulShapes) {
        const size_t nc = static_cast<size_t>(s.N) * s.C;
        const size_t oc_c = static_cast<size_t>(s.OC) * s.C;
        const auto inp = rand(nc);
        const auto w = rand(oc_c);
        const auto dout = rand(static_cast<size_t>(s.N) * s.OC);
        // Non-zero starting gradients: backward accumulates.
        auto dinp = rand(nc);
        auto dw = rand(oc_c);
        auto db = rand(static_cast<size_t>(s.OC));
        float* g_dinp = up(dinp);
        float* g_dw = up(dw);
        float* g_db = up(db);
        m_gpu->matmul_backward(g_dinp, g_dw, g_db, up(dout), up(inp), up(w), s.N, s.C, s.OC);
        m_cpu->matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), s.N, s.C, s.OC);
        const std::string tag = " N=" + std::to_string(s.N);
        expect_close(down(g_dinp, nc), dinp, kF32Sum, "dinp" + tag);
        expect_close(down(g_dw, oc_c), dw, kF32Sum, "dweight" + tag);
        expect_close(down(g_db, db.size()), db, kF32Sum, "dbias" + tag);
    }
}

TEST_F(CudaOps, MatmulForwardExGeluFp32) { check_matmul_ex(DType::kF32); }
TEST_F(CudaOps, MatmulForwardExGeluBf16) { check_matmul_ex(DType::kBF16); }
TEST_F(CudaOps, MatmulForwardExGeluFp16) { check_matmul_ex(DType::kF16); }

void CudaOps::check_matmul_ex(DType t) {
    // 16-bit cuBLASLt kernels want 16-byte aligned rows: GPT shapes are multiples of 8.
    const int N = 64, C = 96, OC = 136;
    const auto inp = rounded(rand(static_cast<size_t>(N) * C), t);
    const auto w = rounded(rand(static_cast<size_t>(OC) * C), t);
    const auto bias = rounded(rand(static_cast<size_t>(OC)), t);
    const size_t n_out = static_cast<size_t>(N) * OC;
    std::vector<float> pre(n_out);
    std::vector<float> ref(n_out);
    m_cpu->matmul_forward(pre.data(), inp.data(), w.data(), bias.data(), N, C, OC);
    m_cpu->gelu_forward(ref.data(), pre.data(), n_out);

    const size_t bytes = n_out * zt::dtype_size(t);
    void* out = zeros((bytes + 3) / 4);
    void* pre_gelu = zeros((bytes + 3) / 4);
    zt::CudaMatmulOptions o;
    o.dtype = t;
    o.bias = up_as(bias, t);
    o.gelu = true;
    o.pre_gelu = pre_gelu;
    m_gpu->matmul_forward_ex(out, up_as(inp, t), up_as(w, t), N, C, OC, o);
    const std::string tag = std::string(" ") + zt::dtype_name(t);
    // cuBLASLt's GELU epilogue is the tanh form too, but may evaluate tanh with the
    // hardware approximation (error up to 2^-11 = 4.9e-4): 0.5 x (1 + tanh u) then errs by
    // up to 2.5e-4 |x| absolute, which for negative x is not small relative to the result.
    // So the absolute bound grows with the largest pre-activation (about 13 here: ~4e-3),
    // still far below the O(1) errors of a wrong epilogue or layout.
    double max_pre = 0.0;
    for (float x : pre) max_pre = std::max(max_pre, static_cast<double>(std::fabs(x)));
    const Tol tol{1e-3 + 3e-4 * max_pre, std::max(1e-3, tol_for(t).rtol)};
    expect_close(down_as(out, n_out, t), rounded(ref, t), tol, "gelu(matmul)" + tag);
    expect_close(down_as(pre_gelu, n_out, t), rounded(pre, t), tol_for(t),
                 "pre-GELU" + tag);
}

TEST_F(CudaOps, MatmulBackwardExLowPrecision) {
    const int N = 64, C = 96, OC = 136;
    for (DType t : {DType::kBF16, DType::kF16}) {
        const auto inp = rounded(rand(static_cast<size_t>(N) * C), t);
        const auto w = rounded(rand(static_cast<size_t>(OC) * C), t);
        const auto dout = rounded(rand(static_cast<size_t>(N) * OC), t);
        auto dinp = rounded(rand(static_cast<size_t>(N) * C), t);
        auto dw = rounded(rand(static_cast<size_t>(OC) * C), t);
        void* g_dinp = up_as(dinp, t);
        void* g_dw = up_as(dw, t);
        m_gpu->matmul_backward_ex(g_dinp, g_dw, up_as(dout, t), up_as(inp, t), up_as(w, t), N, C, OC, t);
        m_cpu->matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, C, OC);
        const std::string tag = std::string(" ") + zt::dtype_name(t);
        // K = 64 or 136 products of [-1, 1] values: outputs up to ~10, so allow 1e-2 absolute.
        const Tol tol{1e-2, tol_for(t).rtol};
        expect_close(down_as(g_dinp, dinp.size(), t), rounded(dinp, t), tol, "dinp" + tag);
        expect_close(down_as(g_dw, dw.size(), t), rounded(dw, t), tol, "dweight" + tag);
    }
}

// ---- layernorm, gelu, residual, scale ------------------------------------------------

TEST_F(CudaOps, LayerNorm) {
    for (int C : {45, 128, 768}) {
        const int N = 67;
        const size_t n = static_cast<size_t>(N) * C;
        // An offset mean: the two-pass variance must not cancel.
        const auto inp = rand(n, 2.f, 4.f);
        const auto w = rand(static_cast<size_t>(C));
        const auto b = rand(static_cast<size_t>(C));
        std::vector<float> out(n), mean(N), rstd(N);
        m_cpu->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
        float* g_inp = up(inp);
        float* g_w = up(w);
        float* g_out = zeros(n);
        float* g_mean = zeros(N);
        float* g_rstd = zeros(N);
        m_gpu->layernorm_forward(g_out, g_mean, g_rstd, g_inp, g_w, up(b), N, C);
        const std::string tag = " C=" + std::to_string(C);
        expect_close(down(g_out, n), out, kF32Sum, "layernorm out" + tag);
        expect_close(down(g_mean, N), mean, kF32Sum, "mean" + tag);
        expect_close(down(g_rstd, N), rstd, kF32Sum, "rstd" + tag);

        check_layernorm_backward(inp, w, mean, rstd, N, C, kF32Sum, tag);
    }
}

TEST_F(CudaOps, GeluResidualScale) {
    const size_t n = 100003;
    const auto x = rand(n, -6.f, 6.f);
    const auto y = rand(n);
    std::vector<float> ref(n);
    m_cpu->gelu_forward(ref.data(), x.data(), n);
    float* g_x = up(x);
    float* g_out = zeros(n);
    m_gpu->gelu_forward(g_out, g_x, n);
    expect_close(down(g_out, n), ref, kElementwise, "gelu_forward");

    auto dinp = rand(n);
    float* g_dinp = up(dinp);
    m_gpu->gelu_backward(g_dinp, g_x, up(y), n);
    m_cpu->gelu_backward(dinp.data(), x.data(), y.data(), n);
    expect_close(down(g_dinp, n), dinp, kElementwise, "gelu_backward");

    m_cpu->residual_forward(ref.data(), x.data(), y.data(), n);
    float* g_y = up(y);
    m_gpu->residual_forward(g_out, g_x, g_y, n);
    expect_close(down(g_out, n), ref, kExact, "residual_forward");
    m_gpu->residual_forward(g_y, g_x, g_y, n);  // out aliases b
    expect_close(down(g_y, n), ref, kExact, "residual_forward in place");
}

// ---- attention ---------------------------------------------------------------------

TEST_F(CudaOps, Attention) {
    // hs = 12 (48-byte head offsets), T not a multiple of anything; then GPT-like hs = 64.
    // GPT-2's entry points (C, NH) on both sides.
    for (const AttentionShape s : {AttentionShape{2, 37, 4, 4, 12}, AttentionShape{2, 64, 2, 2, 64},
                                   AttentionShape{1, 1, 2, 2, 8}}) {
        check_attention(s, true);
    }
}

// ---- Llama: grouped-query attention, RMSNorm, rotary embeddings, SwiGLU ---------------

TEST_F(CudaOps, GroupedQueryAttention) {
    // NKV = NH, NH/3 and 1; odd T and hs = 12 leave tiles ragged; then Llama-like hs = 64.
    for (const AttentionShape s : {AttentionShape{2, 37, 6, 6, 12}, AttentionShape{2, 37, 6, 2, 12},
                                   AttentionShape{2, 37, 6, 1, 12}, AttentionShape{1, 130, 8, 2, 64}}) {
        check_attention(s, false);
    }
}

TEST_F(CudaOps, SegmentedAttentionMatchesTheCpu) {
    // Packed rows: row 0 holds examples at [0, 10), [10, 11) (one token), [11, 30) and
    // padding tokens that attend only to themselves; row 1 one example over the whole row
    // (plain causal). MHA and GQA, odd T and hs.
    for (const AttentionShape s : {AttentionShape{2, 37, 4, 4, 12}, AttentionShape{2, 37, 6, 2, 12}}) {
        std::vector<int32_t> attend_from(static_cast<size_t>(s.B) * s.T);
        for (int t = 0; t < s.T; ++t) {
            attend_from[static_cast<size_t>(t)] = t < 10 ? 0 : t < 11 ? 10 : t < 30 ? 11 : t;
            attend_from[static_cast<size_t>(s.T + t)] = 0;
        }
        check_attention(s, false, &attend_from);
    }
}

TEST_F(CudaOps, SlidingWindowAttentionMatchesTheCpu) {
    // Mistral's window as attend_from (max(segment start, t - window + 1)), with T past two
    // of the CPU kernel's 64-row blocks so it skips whole key blocks (its att is unspecified
    // there, and the GPU backward is given the CPU's att): a window of 40 alone (row 0) and
    // with a packed example boundary at 90 (row 1).
    // T = 300 also spans three of the CUDA kernel's 128-query score bands, the middle one
    // starting past key 0 (attention.cu: the products skip the keys no query of a band reads).
    for (const int T : {150, 300}) {
        const AttentionShape s{2, T, 4, 2, 16};
        const int window = 40;
        std::vector<int32_t> attend_from(static_cast<size_t>(s.B) * s.T);
        for (int t = 0; t < s.T; ++t) {
            attend_from[static_cast<size_t>(t)] = std::max(0, t - window + 1);
            attend_from[static_cast<size_t>(s.T + t)] = std::max(t < 90 ? 0 : 90, t - window + 1);
        }
        check_attention(s, false, &attend_from);
    }
}

/// Whether entry i of att (B, NH, T, T) is specified: key <= query and, segmented, key >=
/// the query's attend_from (the CPU skips key blocks no query of a row block reads).
std::function<bool(size_t)> attended(int T, int NH, const std::vector<int32_t>* attend_from) {
    return [T, NH, attend_from](size_t i) {
        const int key = static_cast<int>(i % static_cast<size_t>(T));
        const int query = static_cast<int>((i / static_cast<size_t>(T)) % static_cast<size_t>(T));
        const size_t row = i / (static_cast<size_t>(T) * static_cast<size_t>(T) * static_cast<size_t>(NH));
        const int from = attend_from != nullptr ? (*attend_from)[row * static_cast<size_t>(T) + query] : 0;
        return key <= query && key >= from;
    };
}

void CudaOps::check_attention(const AttentionShape& s, bool gpt2_entry, const std::vector<int32_t>* attend_from) {
    const int W = (s.NH + 2 * s.NKV) * s.hs;
    const int C = s.NH * s.hs;  // GPT-2's entry points: NKV = NH, hs = C / NH
    const size_t n_qkv = static_cast<size_t>(s.B) * s.T * W;
    const size_t n_out = static_cast<size_t>(s.B) * s.T * s.NH * s.hs;
    const size_t n_att = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
    const auto qkv = rand(n_qkv, -2.f, 2.f);
    std::vector<float> out(n_out), att(n_att);
    float* g_qkv = up(qkv);
    float* g_out = zeros(n_out);
    float* g_att = zeros(n_att);
    if (attend_from != nullptr) {
        m_cpu->gqa_attention_forward_segmented(out.data(), att.data(), qkv.data(), attend_from->data(), s.B, s.T, s.NH,
                                               s.NKV, s.hs);
        m_gpu->gqa_attention_forward_segmented(g_out, g_att, g_qkv, attend_from->data(), s.B, s.T, s.NH, s.NKV, s.hs);
    } else if (gpt2_entry) {
        m_cpu->attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, C, s.NH);
        m_gpu->attention_forward(g_out, g_att, g_qkv, s.B, s.T, C, s.NH);
    } else {
        m_cpu->gqa_attention_forward(out.data(), att.data(), qkv.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        m_gpu->gqa_attention_forward(g_out, g_att, g_qkv, s.B, s.T, s.NH, s.NKV, s.hs);
    }
    const std::string tag = std::string(attend_from != nullptr ? " segmented" : "") + " T=" + std::to_string(s.T) +
                            " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
                            " hs=" + std::to_string(s.hs);
    expect_close(down(g_out, n_out), out, kF32Sum, "attention out" + tag);
    const int T = s.T;
    expect_close_masked(down(g_att, n_att), att, kF32Sum, "attention probabilities" + tag,
                        attended(T, s.NH, attend_from));

    const auto dout = rand(n_out);
    auto dqkv = rand(n_qkv);
    float* g_dqkv = up(dqkv);
    float* g_scratch = zeros(m_gpu->attention_scratch_floats(s.B, s.T, s.NH));
    std::vector<float> scratch(m_cpu->attention_scratch_floats(s.B, s.T, s.NH));
    // Backward from the same probabilities on both sides (the CPU's). A key/value head sums
    // the gradients of NH/NKV query heads.
    float* g_dout = up(dout);
    float* g_att_cpu = up(att);
    if (attend_from != nullptr) {
        m_gpu->gqa_attention_backward_segmented(g_dqkv, g_scratch, g_dout, g_qkv, g_att_cpu, attend_from->data(), s.B,
                                                s.T, s.NH, s.NKV, s.hs);
        m_cpu->gqa_attention_backward_segmented(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(),
                                                attend_from->data(), s.B, s.T, s.NH, s.NKV, s.hs);
    } else if (gpt2_entry) {
        m_gpu->attention_backward(g_dqkv, g_scratch, g_dout, g_qkv, g_att_cpu, s.B, s.T, C, s.NH);
        m_cpu->attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T, C,
                                  s.NH);
    } else {
        m_gpu->gqa_attention_backward(g_dqkv, g_scratch, g_dout, g_qkv, g_att_cpu, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->gqa_attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), s.B, s.T,
                                      s.NH, s.NKV, s.hs);
    }
    expect_close(down(g_dqkv, n_qkv), dqkv, kF32Sum, "attention dqkv" + tag);
}

TEST_F(CudaOps, RmsNorm) {
    for (int C : {45, 128, 2048}) {
        const int N = 67;
        const size_t n = static_cast<size_t>(N) * C;
        const auto inp = rand(n, -3.f, 3.f);
        const auto w = rand(static_cast<size_t>(C));
        std::vector<float> out(n), rstd(N);
        m_cpu->rmsnorm_forward(out.data(), rstd.data(), inp.data(), w.data(), N, C, 1e-5f);
        float* g_inp = up(inp);
        float* g_w = up(w);
        float* g_out = zeros(n);
        float* g_rstd = zeros(N);
        m_gpu->rmsnorm_forward(g_out, g_rstd, g_inp, g_w, N, C, 1e-5f);
        const std::string tag = " C=" + std::to_string(C);
        expect_close(down(g_out, n), out, kF32Sum, "rmsnorm out" + tag);
        expect_close(down(g_rstd, N), rstd, kF32Sum, "rmsnorm rstd" + tag);

        const auto dout = rand(n);
        auto dinp = rand(n);
        auto dw = rand(static_cast<size_t>(C));
        float* g_dinp = up(dinp);
        float* g_dw = up(dw);
        // Both sides start from the CPU's rstd so backward is compared on its own.
        m_gpu->rmsnorm_backward(g_dinp, g_dw, up(dout), g_inp, g_w, up(rstd), N, C);
        m_cpu->rmsnorm_backward(dinp.data(), dw.data(), dout.data(), inp.data(), w.data(), rstd.data(), N, C);
        expect_close(down(g_dinp, n), dinp, kF32Sum, "rmsnorm dinp" + tag);
        expect_close(down(g_dw, dw.size()), dw, kF32Sum, "rmsnorm dweight" + tag);
    }
}

TEST_F(CudaOps, QkNorm) {
    // Qwen3's head norms: head sizes under and over a warp, grouped and multi-head k/v.
    for (const auto& [NH, NKV, hs] : {std::tuple<int, int, int>{4, 2, 12}, std::tuple<int, int, int>{16, 8, 128}}) {
        const int N = 67;
        const size_t n = static_cast<size_t>(N) * (NH + 2 * NKV) * hs;
        const size_t nr = static_cast<size_t>(N) * (NH + NKV);
        const auto inp = rand(n, -3.f, 3.f);
        const auto wq = rand(static_cast<size_t>(hs));
        const auto wk = rand(static_cast<size_t>(hs));
        std::vector<float> out(n), rstd(nr);
        m_cpu->qk_norm_forward(out.data(), rstd.data(), inp.data(), wq.data(), wk.data(), N, NH, NKV, hs, 1e-6f);
        float* g_inp = up(inp);
        float* g_wq = up(wq);
        float* g_wk = up(wk);
        float* g_out = zeros(n);
        float* g_rstd = zeros(nr);
        m_gpu->qk_norm_forward(g_out, g_rstd, g_inp, g_wq, g_wk, N, NH, NKV, hs, 1e-6f);
        const std::string tag = " hs=" + std::to_string(hs);
        expect_close(down(g_out, n), out, kF32Sum, "qk_norm out" + tag);
        expect_close(down(g_rstd, nr), rstd, kF32Sum, "qk_norm rstd" + tag);

        const auto dout = rand(n);
        auto dinp = rand(n);
        auto dwq = rand(static_cast<size_t>(hs));
        auto dwk = rand(static_cast<size_t>(hs));
        float* g_dinp = up(dinp);
        float* g_dwq = up(dwq);
        float* g_dwk = up(dwk);
        m_gpu->qk_norm_backward(g_dinp, g_dwq, g_dwk, up(dout), g_inp, g_wq, g_wk, up(rstd), N, NH, NKV, hs);
        m_cpu->qk_norm_backward(dinp.data(), dwq.data(), dwk.data(), dout.data(), inp.data(), wq.data(), wk.data(),
                                rstd.data(), N, NH, NKV, hs);
        expect_close(down(g_dinp, n), dinp, kF32Sum, "qk_norm dinp" + tag);
        expect_close(down(g_dwq, dwq.size()), dwq, kF32Sum, "qk_norm dq_weight" + tag);
        expect_close(down(g_dwk, dwk.size()), dwk, kF32Sum, "qk_norm dk_weight" + tag);
    }
}

TEST_F(CudaOps, Rope) {
    zt::RopeOptions llama31;
    llama31.theta = 500000.0;
    llama31.llama3_scaling = true;
    struct Shape {
        int B, T, NH, NKV, hs;
    };
    for (const Shape s : {Shape{2, 37, 6, 2, 12}, Shape{1, 130, 8, 8, 64}}) {
        const std::vector<float> table = zt::rope_table(s.T, s.hs, llama31);
        const size_t n = static_cast<size_t>(s.B) * s.T * (s.NH + 2 * s.NKV) * s.hs;
        const auto x = rand(n);
        const std::string tag = " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
                                " hs=" + std::to_string(s.hs);
        float* g_table = up(table);
        float* g_x = up(x);
        std::vector<float> out(n);
        m_cpu->rope_forward(out.data(), x.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        float* g_out = zeros(n);
        m_gpu->rope_forward(g_out, g_x, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down(g_out, n), out, kElementwise, "rope out" + tag);
        m_gpu->rope_forward(g_x, g_x, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down(g_x, n), out, kElementwise, "rope in place" + tag);

        const auto dout = rand(n);
        auto dinp = rand(n);
        float* g_dinp = up(dinp);
        float* g_dout = up(dout);
        m_gpu->rope_backward(g_dinp, g_dout, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->rope_backward(dinp.data(), dout.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down(g_dinp, n), dinp, kElementwise, "rope dinp (accumulated)" + tag);
        auto d_in_place = dout;
        m_gpu->rope_backward(g_dout, g_dout, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->rope_backward(d_in_place.data(), d_in_place.data(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down(g_dout, n), d_in_place, kElementwise, "rope dinp in place" + tag);
    }
}

TEST_F(CudaOps, SwiGlu) {
    const int N = 67, F = 1001;
    const size_t n = static_cast<size_t>(N) * F;
    const auto inp = rand(2 * n, -6.f, 6.f);
    std::vector<float> out(n);
    m_cpu->swiglu_forward(out.data(), inp.data(), N, F);
    float* g_inp = up(inp);
    float* g_out = zeros(n);
    m_gpu->swiglu_forward(g_out, g_inp, N, F);
    expect_close(down(g_out, n), out, kElementwise, "swiglu out");

    const auto dout = rand(n);
    auto dinp = rand(2 * n);
    float* g_dinp = up(dinp);
    m_gpu->swiglu_backward(g_dinp, g_inp, up(dout), N, F);
    m_cpu->swiglu_backward(dinp.data(), inp.data(), dout.data(), N, F);
    expect_close(down(g_dinp, 2 * n), dinp, kElementwise, "swiglu d(gate|up)");
}

// ---- encoder -----------------------------------------------------------------------

TEST_F(CudaOps, Encoder) {
    const int B = 3, T = 29, C = 40, Vp = 24;  // few tokens: many repeats in the scatter
    const size_t n = static_cast<size_t>(B) * T * C;
    const auto tokens = rand_ints(static_cast<size_t>(B) * T, 0, Vp - 1);
    const auto wte = rand(static_cast<size_t>(Vp) * C);
    const auto wpe = rand(static_cast<size_t>(T) * C);
    std::vector<float> out(n);
    m_cpu->encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    int32_t* g_tokens = up(tokens);
    float* g_out = zeros(n);
    m_gpu->encoder_forward(g_out, g_tokens, up(wte), up(wpe), B, T, C);
    expect_close(down(g_out, n), out, kExact, "encoder_forward");
    // No position table (Llama).
    m_cpu->encoder_forward(out.data(), tokens.data(), wte.data(), nullptr, B, T, C);
    m_gpu->encoder_forward(g_out, g_tokens, up(wte), nullptr, B, T, C);
    expect_close(down(g_out, n), out, kExact, "encoder_forward without wpe");

    const auto dout = rand(n);
    auto dwte = rand(wte.size());
    auto dwpe = rand(wpe.size());
    float* g_dwte = up(dwte);
    float* g_dwpe = up(dwpe);
    m_gpu->encoder_backward(g_dwte, g_dwpe, up(dout), g_tokens, B, T, C);
    m_cpu->encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    // Same additions in the same order as the CPU twin (see encoder.cu): bit for bit.
    expect_close(down(g_dwte, dwte.size()), dwte, kExact, "encoder dwte");
    expect_close(down(g_dwpe, dwpe.size()), dwpe, kExact, "encoder dwpe");
}

// ---- loss --------------------------------------------------------------------------

TEST_F(CudaOps, SoftmaxCrossEntropy) {
    const int N = 40, V = 50, Vp = 64;
    auto targets = rand_ints(N, 0, V - 1);
    targets[3] = -1;  // ignored rows
    targets[17] = -1;
    targets[5] = V - 1;
    const auto logits = rand(static_cast<size_t>(N) * Vp, -10.f, 10.f);
    int32_t* g_targets = up(targets);
    for (float dloss : {0.f, 1.f / N}) {
        auto ref = logits;
        std::vector<float> losses(N);
        m_cpu->softmax_cross_entropy(losses.data(), ref.data(), targets.data(), N, V, Vp, dloss);
        float* g_logits = up(logits);
        float* g_losses = up(rand(N));  // garbage in: every row must be written
        m_gpu->softmax_cross_entropy(g_losses, g_logits, g_targets, N, V, Vp, dloss);
        const std::string tag = " dloss=" + std::to_string(dloss);
        // Losses are log-sum-exp of 50 terms up to e^20: fp32 sums, relative 1e-6.
        expect_close(down(g_losses, N), losses, Tol{1e-5, 1e-6}, "losses" + tag);
        // Gradients are probabilities * dloss (<= 1/40): 1e-7 absolute is ~1e-5 relative.
        expect_close(down(g_logits, ref.size()), ref, dloss == 0.f ? kExact : Tol{1e-7, 1e-5}, "dlogits" + tag);
    }
    // A target outside the vocabulary is an error, as on the CPU.
    targets[7] = V;
    float* g_logits = up(logits);
    float* g_losses = zeros(N);
    EXPECT_THROW(m_gpu->softmax_cross_entropy(g_losses, g_logits, up(targets), N, V, Vp, 1.f), zt::Error);
}

// GPT-2 124M's shapes, where the small tests above stay inside one block or one chunk: the
// loss over the padded vocabulary (50257 of 50304 columns), the embedding's scatter over
// 8192 positions, and layer norm's column reduction over 8192 rows (64 chunks).
TEST_F(CudaOps, Gpt2ShapesMatchTheCpu) {
    const int N = 2048, V = 50257, Vp = 50304;
    auto targets = rand_ints(N, 0, V - 1);
    targets[0] = -1;
    targets[1] = V - 1;
    const auto logits = rand(static_cast<size_t>(N) * Vp, -10.f, 10.f);
    auto ref = logits;
    std::vector<float> losses(N);
    const float dloss = 1.f / N;
    m_cpu->softmax_cross_entropy(losses.data(), ref.data(), targets.data(), N, V, Vp, dloss);
    float* g_logits = up(logits);
    float* g_losses = zeros(N);
    m_gpu->softmax_cross_entropy(g_losses, g_logits, up(targets), N, V, Vp, dloss);
    // Sums of 50257 exponentials in two orders: 1e-4 relative; an indexing error is order 1.
    expect_close(down(g_losses, N), losses, Tol{1e-6, 1e-4}, "losses at GPT-2's vocabulary");
    expect_close(down(g_logits, ref.size()), ref, Tol{1e-10, 1e-4}, "dlogits at GPT-2's vocabulary");

    const int B = 8, T = 1024, C = 768;
    const size_t n = static_cast<size_t>(B) * T * C;
    const auto tokens = rand_ints(static_cast<size_t>(B) * T, 0, V - 1);
    const auto dout = rand(n);
    auto dwte = rand(static_cast<size_t>(Vp) * C);
    auto dwpe = rand(static_cast<size_t>(T) * C);
    float* g_dwte = up(dwte);
    float* g_dwpe = up(dwpe);
    m_gpu->encoder_backward(g_dwte, g_dwpe, up(dout), up(tokens), B, T, C);
    m_cpu->encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    expect_close(down(g_dwte, dwte.size()), dwte, kExact, "encoder dwte at B=8, T=1024");
    expect_close(down(g_dwpe, dwpe.size()), dwpe, kExact, "encoder dwpe at B=8, T=1024");

    const int rows = B * T;
    const auto inp = rand(n, 2.f, 4.f);
    const auto w = rand(static_cast<size_t>(C));
    const auto b = rand(static_cast<size_t>(C));
    std::vector<float> out(n), mean(rows), rstd(rows);
    m_cpu->layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), rows, C);
    // The weight and bias gradients: 8192 fp32 terms of about 0.5 a column, summed in two
    // orders: 1e-3 absolute.
    check_layernorm_backward(inp, w, mean, rstd, rows, C, Tol{1e-3, 1e-4}, " over 8192 rows");
}

// ---- optimizer, norms, precision ------------------------------------------------------

TEST_F(CudaOps, AdamW) {
    const size_t n = 50001;
    auto p = rand(n);
    auto m = rand(n, -0.1f, 0.1f);
    auto v = rand(n, 0.f, 0.01f);
    const auto g = rand(n);
    zt::AdamWStep step;
    step.lr = 3e-3f;
    step.weight_decay = 0.1f;
    step.bias_correction1 = 1.f - std::pow(0.9f, 7.f);
    step.bias_correction2 = 1.f - std::pow(0.95f, 7.f);
    step.grad_scale = 0.5f;
    float* g_p = up(p);
    float* g_m = up(m);
    float* g_v = up(v);
    m_gpu->adamw_update(g_p, g_m, g_v, up(g), n, step);
    m_cpu->adamw_update(p.data(), m.data(), v.data(), g.data(), n, step);
    expect_close(down(g_p, n), p, kElementwise, "adamw param");
    expect_close(down(g_m, n), m, kElementwise, "adamw m");
    expect_close(down(g_v, n), v, kElementwise, "adamw v");
}

// Muon's three ops against the CPU's: the momentum and the decayed update element-wise (a
// bf16 gradient read as stored, a bf16 working copy written), and the Newton-Schulz
// iteration on a wide and a tall matrix (fp32 products summed in another order: kF32Sum),
// with fp32 and bf16 operands.
TEST_F(CudaOps, Muon) {
    const size_t n = 40 * 72;
    auto m = rand(n, -0.1f, 0.1f);
    const auto g = rounded(rand(n), DType::kBF16);
    zt::MuonStep step;
    step.grad_scale = 0.5f;
    std::vector<uint8_t> g16(n * 2);
    zt::convert_from_f32(g.data(), g16.data(), n, DType::kBF16);
    float* g_m = up(m);
    float* g_update = zeros(n);
    m_gpu->muon_momentum(g_m, g_update, zt::ConstActPtr(up_as(g, DType::kBF16), DType::kBF16), n, step);
    std::vector<float> update(n);
    m_cpu->muon_momentum(m.data(), update.data(), zt::ConstActPtr(g16.data(), DType::kBF16), n, step);
    expect_close(down(g_m, n), m, kElementwise, "muon momentum");
    expect_close(down(g_update, n), update, kElementwise, "muon update");
    // bf16 operands (train.muon_ns_dtype): one iteration, where both sides round the same
    // operands (later ones part where an fp32 sum lies at a bf16 tie: test_muon.cpp).
    for (const bool bf16 : {false, true}) {
        zt::MuonStep ns = step;
        ns.ns_bf16 = bf16;
        if (bf16) ns.ns_steps = 1;
        for (const auto& [rows, cols] : {std::pair<int, int>{40, 72}, {72, 40}}) {
            auto x = update;
            float* g_x = up(x);
            float* g_work = zeros(zt::newton_schulz_work_floats(rows, cols));
            std::vector<float> work(zt::newton_schulz_work_floats(rows, cols));
            m_gpu->newton_schulz(g_x, rows, cols, ns, g_work);
            m_cpu->newton_schulz(x.data(), rows, cols, ns, work.data());
            expect_close(down(g_x, n), x, kF32Sum,
                         std::string("newton_schulz ") + (bf16 ? "bf16 " : "") + std::to_string(rows) + " x " +
                             std::to_string(cols));
        }
    }
    auto p = rand(n);
    float* g_p = up(p);
    float* g_w = static_cast<float*>(up_as(std::vector<float>(n, 0.f), DType::kBF16));
    std::vector<uint8_t> w(n * 2);
    m_gpu->muon_apply(g_p, up(update), n, 3e-4f, 0.02f, zt::ActPtr(g_w, DType::kBF16));
    m_cpu->muon_apply(p.data(), update.data(), n, 3e-4f, 0.02f, zt::ActPtr(w.data(), DType::kBF16));
    const std::vector<float> master = down(g_p, n);
    expect_close(master, p, kElementwise, "muon param");
    expect_close(down_as(g_w, n, DType::kBF16), rounded(master, DType::kBF16), kExact, "muon working copy");
}

// A 16-bit span: the gradient read as stored, the new master rounded into the working copy
// in the same kernel, against the CPU's typed span.
TEST_F(CudaOps, AdamWTypedSpan) {
    const size_t n = 50001;
    for (DType t : {DType::kBF16, DType::kF16}) {
        auto p = rand(n);
        auto m = rand(n, -0.1f, 0.1f);
        auto v = rand(n, 0.f, 0.01f);
        const auto g = rounded(rand(n), t);
        zt::AdamWStep step;
        step.lr = 3e-3f;
        step.weight_decay = 0.1f;
        step.bias_correction1 = 1.f - std::pow(0.9f, 7.f);
        step.bias_correction2 = 1.f - std::pow(0.95f, 7.f);
        zt::AdamWSpan gs;
        gs.param = up(p);
        gs.m = up(m);
        gs.v = up(v);
        gs.grad = zt::ConstActPtr(up_as(g, t), t);
        gs.n = n;
        gs.decay = true;
        gs.work = zt::ActPtr(up_as(std::vector<float>(n, 0.f), t), t);
        std::vector<uint8_t> g16(n * zt::dtype_size(t)), work(n * zt::dtype_size(t));  // the CPU's
        zt::convert_from_f32(g.data(), g16.data(), n, t);
        zt::AdamWSpan cs = gs;
        cs.param = p.data();
        cs.m = m.data();
        cs.v = v.data();
        cs.grad = zt::ConstActPtr(g16.data(), t);
        cs.work = zt::ActPtr(work.data(), t);
        m_gpu->adamw_update_spans(&gs, 1, step);
        m_cpu->adamw_update_spans(&cs, 1, step);
        const std::vector<float> master = down(gs.param, n);
        expect_close(master, p, kElementwise, "adamw typed param");
        expect_close(down(gs.m, n), m, kElementwise, "adamw typed m");
        // The working copy is the GPU's own new master, rounded once.
        expect_close(down_as(gs.work.data, n, t), rounded(master, t), kExact, "adamw typed working copy");
    }
}

TEST_F(CudaOps, SumSquares) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000003}}) {
        const auto x = rand(n, -3.f, 3.f);
        const double ref = m_cpu->sum_squares(x.data(), n);
        const double got = m_gpu->sum_squares(n > 0 ? up(x) : zeros(1), n);
        // Double sums of float squares in different orders: ~n * 1e-16 relative at worst.
        EXPECT_NEAR(got, ref, 1e-10 * std::max(1.0, ref)) << "n=" << n;
    }
}

TEST_F(CudaOps, SumSquaresSpans) {
    // Tensor-like spans, one of them empty: one host wait for all of them.
    const std::vector<size_t> sizes = {768, 0, 2304 * 768, 3, 50257};
    std::vector<std::vector<float>> host;
    std::vector<zt::ConstActPtr> cpu_ptrs, gpu_ptrs;
    for (size_t n : sizes) {
        host.push_back(rand(n));
        cpu_ptrs.emplace_back(host.back().data());
        gpu_ptrs.emplace_back(n > 0 ? up(host.back()) : zeros(1));
    }
    // One span stored in bf16: read as stored on both.
    const std::vector<float> h16 = rounded(rand(4099), DType::kBF16);
    host.push_back(h16);
    cpu_ptrs.emplace_back(host.back().data());
    gpu_ptrs.emplace_back(up_as(h16, DType::kBF16), DType::kBF16);
    std::vector<size_t> all_sizes = sizes;
    all_sizes.push_back(h16.size());
    const double ref = m_cpu->sum_squares_spans(cpu_ptrs.data(), all_sizes.data(), all_sizes.size());
    const double got = m_gpu->sum_squares_spans(gpu_ptrs.data(), all_sizes.data(), all_sizes.size());
    EXPECT_NEAR(got, ref, 1e-10 * ref);
}

/// fp32 values that exercise rounding: ties, subnormals, overflow, NaN, signed zeros.
std::vector<float> special_floats() {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> v = {0.f, -0.f, 1.f, -1.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                            65504.f, 65519.f, 65520.f, 1e-8f, 6e-8f, 3e-8f, 1e-40f, 3.4e38f, -3.4e38f,
                            zt::bits_float(0x3f808000u), zt::bits_float(0x3f818000u),  // bf16 ties
                            zt::bits_float(0x3f801000u), zt::bits_float(0x3f803000u)};  // fp16 ties
    return v;
}

TEST_F(CudaOps, Casts) {
    std::vector<float> src = special_floats();
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 100000; ++i) src.push_back(zt::bits_float(bits(m_rng)));  // every exponent
    const size_t n = src.size();
    float* g_src = up(src);
    for (DType t : {DType::kBF16, DType::kF16}) {
        std::vector<uint16_t> ref(n);
        zt::convert_from_f32(src.data(), ref.data(), n, t);
        void* g_dst = zeros(n);  // 2n bytes needed, 4n allocated
        m_gpu->cast(g_dst, t, g_src, DType::kF32, n);
        const auto got = down(static_cast<const uint16_t*>(g_dst), n);
        size_t bad = 0;
        for (size_t i = 0; i < n; ++i) {
            const bool nan_ref = std::isnan(src[i]);
            const float back = t == DType::kBF16 ? zt::bf16_to_f32(got[i]) : zt::f16_to_f32(got[i]);
            if (nan_ref ? !std::isnan(back) : got[i] != ref[i]) ++bad;  // NaN payloads may differ
        }
        EXPECT_EQ(bad, 0u) << "fp32 -> " << zt::dtype_name(t);

        // Every 16-bit pattern back to fp32.
        std::vector<uint16_t> all(65536);
        for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
        std::vector<float> back_ref(65536);
        zt::convert_to_f32(all.data(), back_ref.data(), all.size(), t);
        float* g_back = zeros(all.size());
        m_gpu->cast(g_back, DType::kF32, up(all), t, all.size());
        const auto back = down(g_back, all.size());
        size_t bad_back = 0;
        for (size_t i = 0; i < all.size(); ++i) {
            const bool same = std::isnan(back_ref[i]) ? std::isnan(back[i])
                                                       : zt::float_bits(back[i]) == zt::float_bits(back_ref[i]);
            if (!same) ++bad_back;
        }
        EXPECT_EQ(bad_back, 0u) << zt::dtype_name(t) << " -> fp32";
    }
}

// The precision ops ModelState runs (cast between any pair, accumulate into stored
// gradients, zero_bytes) give the CPU backend's bytes exactly (finite inputs: NaN payloads
// may differ, see Casts).
TEST_F(CudaOps, PrecisionOpsMatchTheCpuBitForBit) {
    const size_t n = 70001;
    const auto x = rand(n, -300.f, 300.f);
    const auto g = rand(n, -2.f, 2.f);
    float* g_g = up(g);
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        const size_t bytes = n * zt::dtype_size(t);
        std::vector<uint8_t> stored(bytes);
        m_cpu->cast(stored.data(), t, x.data(), DType::kF32, n);
        void* g_stored = up(stored);
        m_cpu->accumulate(stored.data(), t, g.data(), n);
        m_gpu->accumulate(g_stored, t, g_g, n);
        EXPECT_EQ(down(static_cast<const uint8_t*>(g_stored), bytes), stored) << "accumulate " << zt::dtype_name(t);
        for (DType to : {DType::kF32, DType::kBF16, DType::kF16}) {
            std::vector<uint8_t> want(n * zt::dtype_size(to));
            m_cpu->cast(want.data(), to, stored.data(), t, n);
            void* g_out = zeros(n);  // 4n bytes: room for every dtype
            m_gpu->cast(g_out, to, g_stored, t, n);
            EXPECT_EQ(down(static_cast<const uint8_t*>(g_out), want.size()), want)
                << zt::dtype_name(t) << " -> " << zt::dtype_name(to);
        }
        m_gpu->zero_bytes(g_stored, bytes);
        EXPECT_EQ(down(static_cast<const uint8_t*>(g_stored), bytes), std::vector<uint8_t>(bytes, 0));
    }
}

// Profiling a cuda backend times on the stream (events), so an op's time is the GPU's.
TEST_F(CudaOps, ProfilingBackendTimesWithEventsOnTheStream) {
    zt::ProfilingBackend profiled(zt::make_cuda_backend(0));
    EXPECT_NE(zt::cuda_stream(profiled), nullptr);
    const int N = 512;
    const int C = 256;
    const int OC = 512;
    float* inp = profiled.alloc_floats(static_cast<size_t>(N) * C);
    float* w = profiled.alloc_floats(static_cast<size_t>(OC) * C);
    float* out = profiled.alloc_floats(static_cast<size_t>(N) * OC);
    profiled.matmul_forward(out, inp, w, nullptr, N, C, OC);
    EXPECT_GT(profiled.op_ms(zt::ProfilingBackend::kOpMatmulFwd), 0.0);
    EXPECT_EQ(profiled.op_ms(zt::ProfilingBackend::kOpMatmulBwd), 0.0);
    profiled.reset();
    EXPECT_EQ(profiled.op_ms(zt::ProfilingBackend::kOpMatmulFwd), 0.0);
    for (float* p : {inp, w, out}) profiled.free(p);
}

TEST_F(CudaOps, StreamAccessor) {
    EXPECT_NE(zt::cuda_stream(*m_gpu), nullptr);
    EXPECT_EQ(zt::cuda_stream(*m_cpu), nullptr);
    EXPECT_EQ(m_gpu->name(), "cuda");
    m_gpu->synchronize();
}

// ---- typed activations (bf16, fp16) against the CPU's typed ops ----------------------
//
// Every op with 16-bit buffers, on both backends from the same stored inputs. The CPU
// widens, computes in fp32 and rounds once; so must the GPU (see kTypedBF16 for the bound).

const DType kTypedDtypes[] = {DType::kBF16, DType::kF16};

std::string typed_tag(DType t) { return std::string(" ") + zt::dtype_name(t); }

TEST_F(CudaOps, TypedCapabilitiesAndWeights) {
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
        EXPECT_TRUE(m_gpu->capabilities().supports(t)) << zt::dtype_name(t);
        // The model hands the products the units' 16-bit storage itself.
        EXPECT_TRUE(m_gpu->reads_weights_in(t)) << zt::dtype_name(t);
    }
}

TEST_F(CudaOps, TypedMatmulForward) {
    for (DType t : kTypedDtypes) {
        for (const auto& s : kMatmulShapes) {
            // Weight stored in t (the units' storage) or fp32 (converted per call); bias on/off.
            for (bool typed_weight : {true, false}) {
                for (bool with_bias : {false, true}) {
                    HostAct inp(rand(static_cast<size_t>(s.N) * s.C), t);
                    const auto w32 = rounded(rand(static_cast<size_t>(s.OC) * s.C), t);
                    HostAct w16(w32, t);
                    const auto bias = rand(static_cast<size_t>(s.OC));
                    const zt::ConstActPtr w_cpu =
                        typed_weight ? zt::ConstActPtr(w16.ptr()) : zt::ConstActPtr(w32.data());
                    HostAct out(std::vector<float>(static_cast<size_t>(s.N) * s.OC), t);
                    m_cpu->matmul_forward(out.ptr(), inp.ptr(), w_cpu, with_bias ? bias.data() : nullptr, s.N, s.C,
                                          s.OC);
                    const zt::ActPtr g_out = up_act(HostAct(std::vector<float>(out.size()), t));
                    const zt::ConstActPtr g_w = typed_weight ? zt::ConstActPtr(up_act(w16)) : zt::ConstActPtr(up(w32));
                    m_gpu->matmul_forward(g_out, up_act(inp), g_w, with_bias ? up(bias) : nullptr, s.N, s.C, s.OC);
                    expect_close(down_act(g_out, out.size()), out.floats(), typed_tol(t),
                                 "typed matmul_forward N=" + std::to_string(s.N) + " bias=" +
                                     std::to_string(with_bias) + " typed weight=" + std::to_string(typed_weight) +
                                     typed_tag(t));
                }
            }
        }
    }
}

TEST_F(CudaOps, TypedMatmulResidualForward) {
    // A residual of out's dtype (cuBLASLt's C) and an fp32 one (the fp32 product plus the
    // epilogue kernel): out rounded once after the bias and the residual, as on the CPU.
    for (DType t : kTypedDtypes) {
        for (const auto& s : kMatmulShapes) {
            for (DType res_t : {t, DType::kF32}) {
                HostAct inp(rand(static_cast<size_t>(s.N) * s.C), t);
                HostAct w(rand(static_cast<size_t>(s.OC) * s.C), t);
                HostAct res(rand(static_cast<size_t>(s.N) * s.OC), res_t);
                const auto bias = rand(static_cast<size_t>(s.OC));
                HostAct out(std::vector<float>(res.size()), t);
                m_cpu->matmul_residual_forward(out.ptr(), inp.ptr(), w.ptr(), bias.data(), res.ptr(), s.N, s.C, s.OC);
                const zt::ActPtr g_out = up_act(out);
                m_gpu->matmul_residual_forward(g_out, up_act(inp), up_act(w), up(bias), up_act(res), s.N, s.C, s.OC);
                expect_close(down_act(g_out, out.size()), out.floats(), typed_tol(t),
                             "typed matmul_residual_forward N=" + std::to_string(s.N) + " residual " +
                                 zt::dtype_name(res_t) + typed_tag(t));
            }
        }
    }
}

TEST_F(CudaOps, TypedMatmulBackward) {
    for (DType t : kTypedDtypes) {
        for (const auto& s : kMatmulShapes) {
            for (bool typed_weight : {true, false}) {
                const size_t nc = static_cast<size_t>(s.N) * s.C;
                const size_t oc_c = static_cast<size_t>(s.OC) * s.C;
                HostAct inp(rand(nc), t);
                const auto w32 = rounded(rand(oc_c), t);
                HostAct w16(w32, t);
                HostAct dout(rand(static_cast<size_t>(s.N) * s.OC), t);
                // Non-zero starting gradients: backward accumulates (dinp typed, the rest fp32).
                HostAct dinp(rand(nc), t);
                auto dw = rand(oc_c);
                auto db = rand(static_cast<size_t>(s.OC));
                const zt::ActPtr g_dinp = up_act(dinp);
                float* g_dw = up(dw);
                float* g_db = up(db);
                const zt::ConstActPtr g_w = typed_weight ? zt::ConstActPtr(up_act(w16)) : zt::ConstActPtr(up(w32));
                m_gpu->matmul_backward(g_dinp, g_dw, g_db, up_act(dout), up_act(inp), g_w, s.N, s.C, s.OC);
                const zt::ConstActPtr w_cpu = typed_weight ? zt::ConstActPtr(w16.ptr()) : zt::ConstActPtr(w32.data());
                m_cpu->matmul_backward(dinp.ptr(), dw.data(), db.data(), dout.ptr(), inp.ptr(), w_cpu, s.N, s.C, s.OC);
                const std::string tag = " N=" + std::to_string(s.N) + " typed weight=" +
                                        std::to_string(typed_weight) + typed_tag(t);
                expect_close(down_act(g_dinp, nc), dinp.floats(), typed_tol(t), "typed dinp" + tag);
                expect_close(down(g_dw, oc_c), dw, kF32Sum, "typed dweight" + tag);
                expect_close(down(g_db, db.size()), db, kF32Sum, "typed dbias" + tag);
            }
        }
    }
}

TEST_F(CudaOps, TypedLayerNorm) {
    for (DType t : kTypedDtypes) {
        for (int C : {45, 768}) {
            const int N = 67;
            const size_t n = static_cast<size_t>(N) * C;
            HostAct inp(rand(n, 2.f, 4.f), t);
            const auto w = rand(static_cast<size_t>(C));
            const auto b = rand(static_cast<size_t>(C));
            HostAct out(std::vector<float>(n), t);
            std::vector<float> mean(N), rstd(N);
            m_cpu->layernorm_forward(out.ptr(), mean.data(), rstd.data(), inp.ptr(), w.data(), b.data(), N, C);
            const zt::ActPtr g_inp = up_act(inp);
            float* g_w = up(w);
            const zt::ActPtr g_out = up_act(out);
            float* g_mean = zeros(N);
            float* g_rstd = zeros(N);
            m_gpu->layernorm_forward(g_out, g_mean, g_rstd, g_inp, g_w, up(b), N, C);
            const std::string tag = " C=" + std::to_string(C) + typed_tag(t);
            expect_close(down_act(g_out, n), out.floats(), typed_tol(t), "typed layernorm out" + tag);
            expect_close(down(g_mean, N), mean, kF32Sum, "typed layernorm mean" + tag);
            expect_close(down(g_rstd, N), rstd, kF32Sum, "typed layernorm rstd" + tag);

            HostAct dout(rand(n), t);
            HostAct dinp(rand(n), t);
            auto dw = rand(static_cast<size_t>(C));
            auto db = rand(static_cast<size_t>(C));
            const zt::ActPtr g_dinp = up_act(dinp);
            float* g_dw = up(dw);
            float* g_db = up(db);
            m_gpu->layernorm_backward(g_dinp, g_dw, g_db, up_act(dout), g_inp, g_w, up(mean), up(rstd), N, C);
            m_cpu->layernorm_backward(dinp.ptr(), dw.data(), db.data(), dout.ptr(), inp.ptr(), w.data(), mean.data(),
                                      rstd.data(), N, C);
            expect_close(down_act(g_dinp, n), dinp.floats(), typed_tol(t), "typed layernorm dinp" + tag);
            expect_close(down(g_dw, dw.size()), dw, kF32Sum, "typed layernorm dweight" + tag);
            expect_close(down(g_db, db.size()), db, kF32Sum, "typed layernorm dbias" + tag);
        }
    }
}

TEST_F(CudaOps, TypedGeluResidual) {
    const size_t n = 100003;
    for (DType t : kTypedDtypes) {
        HostAct x(rand(n, -6.f, 6.f), t);
        HostAct y(rand(n), t);
        HostAct out(std::vector<float>(n), t);
        m_cpu->gelu_forward(out.ptr(), x.ptr(), n);
        const zt::ActPtr g_x = up_act(x);
        const zt::ActPtr g_out = up_act(HostAct(std::vector<float>(n), t));
        m_gpu->gelu_forward(g_out, g_x, n);
        expect_close(down_act(g_out, n), out.floats(), typed_tol(t), "typed gelu_forward" + typed_tag(t));

        HostAct dinp(rand(n), t);
        const zt::ActPtr g_dinp = up_act(dinp);
        m_gpu->gelu_backward(g_dinp, g_x, up_act(y), n);
        m_cpu->gelu_backward(dinp.ptr(), x.ptr(), y.ptr(), n);
        expect_close(down_act(g_dinp, n), dinp.floats(), typed_tol(t), "typed gelu_backward" + typed_tag(t));

        // The sum of two 16-bit values rounded once: the same float on both sides.
        m_cpu->residual_forward(out.ptr(), x.ptr(), y.ptr(), n);
        const zt::ActPtr g_y = up_act(y);
        m_gpu->residual_forward(g_out, g_x, g_y, n);
        expect_close(down_act(g_out, n), out.floats(), kExact, "typed residual_forward" + typed_tag(t));
        m_gpu->residual_forward(g_y, g_x, g_y, n);  // out aliases b
        expect_close(down_act(g_y, n), out.floats(), kExact, "typed residual_forward in place" + typed_tag(t));
        // Mixed dtypes (an fp32 operand) read each buffer in its own dtype.
        const auto a32 = rand(n);
        m_cpu->residual_forward(out.ptr(), a32.data(), y.ptr(), n);
        m_gpu->residual_forward(g_out, up(a32), up_act(y), n);
        expect_close(down_act(g_out, n), out.floats(), kExact, "mixed residual_forward" + typed_tag(t));
    }
}

TEST_F(CudaOps, TypedAttention) {
    for (DType t : kTypedDtypes) {
        for (const AttentionShape s : {AttentionShape{2, 37, 4, 4, 12}, AttentionShape{2, 64, 2, 2, 64}}) {
            check_typed_attention(s, t);
        }
    }
}

TEST_F(CudaOps, TypedGroupedQueryAttention) {
    for (DType t : kTypedDtypes) {
        for (const AttentionShape s : {AttentionShape{2, 37, 6, 2, 12}, AttentionShape{1, 130, 8, 2, 64}}) {
            check_typed_attention(s, t);
        }
    }
}

TEST_F(CudaOps, TypedSegmentedAttention) {
    const AttentionShape s{2, 37, 6, 2, 12};
    std::vector<int32_t> attend_from(static_cast<size_t>(s.B) * s.T);
    for (int t = 0; t < s.T; ++t) {
        attend_from[static_cast<size_t>(t)] = t < 10 ? 0 : t < 11 ? 10 : t < 30 ? 11 : t;
        attend_from[static_cast<size_t>(s.T + t)] = 0;
    }
    for (DType t : kTypedDtypes) check_typed_attention(s, t, &attend_from);
}

TEST_F(CudaOps, TypedSlidingWindowAttention) {
    const AttentionShape s{1, 150, 4, 2, 16};  // past two 64-row blocks: the CPU skips key blocks
    std::vector<int32_t> attend_from(static_cast<size_t>(s.T));
    for (int t = 0; t < s.T; ++t) attend_from[static_cast<size_t>(t)] = std::max(0, t - 39);  // a window of 40
    for (DType t : kTypedDtypes) check_typed_attention(s, t, &attend_from);
}

void CudaOps::check_typed_attention(const AttentionShape& s, DType t, const std::vector<int32_t>* attend_from) {
    const int W = (s.NH + 2 * s.NKV) * s.hs;
    const size_t n_qkv = static_cast<size_t>(s.B) * s.T * W;
    const size_t n_out = static_cast<size_t>(s.B) * s.T * s.NH * s.hs;
    const size_t n_att = static_cast<size_t>(s.B) * s.NH * s.T * s.T;
    HostAct qkv(rand(n_qkv, -2.f, 2.f), t);
    HostAct out(std::vector<float>(n_out), t);
    HostAct att(std::vector<float>(n_att), t);
    const zt::ActPtr g_qkv = up_act(qkv);
    const zt::ActPtr g_out = up_act(out);
    const zt::ActPtr g_att = up_act(att);
    if (attend_from != nullptr) {
        m_cpu->gqa_attention_forward_segmented(out.ptr(), att.ptr(), qkv.ptr(), attend_from->data(), s.B, s.T, s.NH,
                                               s.NKV, s.hs);
        m_gpu->gqa_attention_forward_segmented(g_out, g_att, g_qkv, attend_from->data(), s.B, s.T, s.NH, s.NKV, s.hs);
    } else {
        m_cpu->gqa_attention_forward(out.ptr(), att.ptr(), qkv.ptr(), s.B, s.T, s.NH, s.NKV, s.hs);
        m_gpu->gqa_attention_forward(g_out, g_att, g_qkv, s.B, s.T, s.NH, s.NKV, s.hs);
    }
    const std::string tag = std::string(attend_from != nullptr ? " segmented" : "") + " T=" + std::to_string(s.T) +
                            " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
                            " hs=" + std::to_string(s.hs) + typed_tag(t);
    expect_close(down_act(g_out, n_out), out.floats(), typed_tol(t), "typed attention out" + tag);
    expect_close_masked(down_act(g_att, n_att), att.floats(), typed_tol(t), "typed attention probabilities" + tag,
                        attended(s.T, s.NH, attend_from));

    HostAct dout(rand(n_out), t);
    HostAct dqkv(rand(n_qkv), t);
    const zt::ActPtr g_dqkv = up_act(dqkv);
    float* g_scratch = zeros(m_gpu->attention_scratch_floats(s.B, s.T, s.NH));
    std::vector<float> scratch(m_cpu->attention_scratch_floats(s.B, s.T, s.NH));
    // Backward from the same (the CPU's) probabilities on both sides.
    const zt::ActPtr g_att_cpu = up_act(att);
    if (attend_from != nullptr) {
        m_gpu->gqa_attention_backward_segmented(g_dqkv, g_scratch, up_act(dout), g_qkv, g_att_cpu,
                                                attend_from->data(), s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->gqa_attention_backward_segmented(dqkv.ptr(), scratch.data(), dout.ptr(), qkv.ptr(), att.ptr(),
                                                attend_from->data(), s.B, s.T, s.NH, s.NKV, s.hs);
    } else {
        m_gpu->gqa_attention_backward(g_dqkv, g_scratch, up_act(dout), g_qkv, g_att_cpu, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->gqa_attention_backward(dqkv.ptr(), scratch.data(), dout.ptr(), qkv.ptr(), att.ptr(), s.B, s.T, s.NH,
                                      s.NKV, s.hs);
    }
    expect_close(down_act(g_dqkv, n_qkv), dqkv.floats(), typed_tol(t), "typed attention dqkv" + tag);
}

TEST_F(CudaOps, TypedRmsNorm) {
    for (DType t : kTypedDtypes) {
        for (int C : {45, 2048}) {
            const int N = 67;
            const size_t n = static_cast<size_t>(N) * C;
            HostAct inp(rand(n, -3.f, 3.f), t);
            const auto w = rand(static_cast<size_t>(C));
            HostAct out(std::vector<float>(n), t);
            std::vector<float> rstd(N);
            m_cpu->rmsnorm_forward(out.ptr(), rstd.data(), inp.ptr(), w.data(), N, C, 1e-5f);
            const zt::ActPtr g_inp = up_act(inp);
            float* g_w = up(w);
            const zt::ActPtr g_out = up_act(out);
            float* g_rstd = zeros(N);
            m_gpu->rmsnorm_forward(g_out, g_rstd, g_inp, g_w, N, C, 1e-5f);
            const std::string tag = " C=" + std::to_string(C) + typed_tag(t);
            expect_close(down_act(g_out, n), out.floats(), typed_tol(t), "typed rmsnorm out" + tag);
            expect_close(down(g_rstd, N), rstd, kF32Sum, "typed rmsnorm rstd" + tag);

            HostAct dout(rand(n), t);
            HostAct dinp(rand(n), t);
            auto dw = rand(static_cast<size_t>(C));
            const zt::ActPtr g_dinp = up_act(dinp);
            float* g_dw = up(dw);
            m_gpu->rmsnorm_backward(g_dinp, g_dw, up_act(dout), g_inp, g_w, up(rstd), N, C);
            m_cpu->rmsnorm_backward(dinp.ptr(), dw.data(), dout.ptr(), inp.ptr(), w.data(), rstd.data(), N, C);
            expect_close(down_act(g_dinp, n), dinp.floats(), typed_tol(t), "typed rmsnorm dinp" + tag);
            expect_close(down(g_dw, dw.size()), dw, kF32Sum, "typed rmsnorm dweight" + tag);
        }
    }
}

TEST_F(CudaOps, TypedRope) {
    zt::RopeOptions llama31;
    llama31.theta = 500000.0;
    llama31.llama3_scaling = true;
    const AttentionShape s{2, 37, 6, 2, 12};
    const std::vector<float> table = zt::rope_table(s.T, s.hs, llama31);
    const size_t n = static_cast<size_t>(s.B) * s.T * (s.NH + 2 * s.NKV) * s.hs;
    float* g_table = up(table);
    for (DType t : kTypedDtypes) {
        HostAct x(rand(n), t);
        HostAct out(std::vector<float>(n), t);
        m_cpu->rope_forward(out.ptr(), x.ptr(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        const zt::ActPtr g_x = up_act(x);
        const zt::ActPtr g_out = up_act(HostAct(std::vector<float>(n), t));
        m_gpu->rope_forward(g_out, g_x, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down_act(g_out, n), out.floats(), typed_tol(t), "typed rope out" + typed_tag(t));
        m_gpu->rope_forward(g_x, g_x, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down_act(g_x, n), out.floats(), typed_tol(t), "typed rope in place" + typed_tag(t));
        // Out of place into fp32 rows: the v part converted, not copied as bytes.
        std::vector<float> out32(n);
        HostAct x_again(x.floats(), t);
        m_cpu->rope_forward(out32.data(), x_again.ptr(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        float* g_out32 = zeros(n);
        m_gpu->rope_forward(g_out32, up_act(x_again), g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down(g_out32, n), out32, kElementwise, "typed rope into fp32" + typed_tag(t));

        HostAct dout(rand(n), t);
        HostAct dinp(rand(n), t);
        const zt::ActPtr g_dinp = up_act(dinp);
        const zt::ActPtr g_dout = up_act(dout);
        m_gpu->rope_backward(g_dinp, g_dout, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->rope_backward(dinp.ptr(), dout.ptr(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down_act(g_dinp, n), dinp.floats(), typed_tol(t), "typed rope dinp (accumulated)" + typed_tag(t));
        m_gpu->rope_backward(g_dout, g_dout, g_table, s.B, s.T, s.NH, s.NKV, s.hs);
        m_cpu->rope_backward(dout.ptr(), dout.ptr(), table.data(), s.B, s.T, s.NH, s.NKV, s.hs);
        expect_close(down_act(g_dout, n), dout.floats(), typed_tol(t), "typed rope dinp in place" + typed_tag(t));
    }
}

TEST_F(CudaOps, TypedSwiGlu) {
    const int N = 67, F = 1001;
    const size_t n = static_cast<size_t>(N) * F;
    for (DType t : kTypedDtypes) {
        HostAct inp(rand(2 * n, -6.f, 6.f), t);
        HostAct out(std::vector<float>(n), t);
        m_cpu->swiglu_forward(out.ptr(), inp.ptr(), N, F);
        const zt::ActPtr g_inp = up_act(inp);
        const zt::ActPtr g_out = up_act(out);
        m_gpu->swiglu_forward(g_out, g_inp, N, F);
        expect_close(down_act(g_out, n), out.floats(), typed_tol(t), "typed swiglu out" + typed_tag(t));

        HostAct dout(rand(n), t);
        HostAct dinp(rand(2 * n), t);
        const zt::ActPtr g_dinp = up_act(dinp);
        m_gpu->swiglu_backward(g_dinp, g_inp, up_act(dout), N, F);
        m_cpu->swiglu_backward(dinp.ptr(), inp.ptr(), dout.ptr(), N, F);
        expect_close(down_act(g_dinp, 2 * n), dinp.floats(), typed_tol(t), "typed swiglu d(gate|up)" + typed_tag(t));
    }
}

TEST_F(CudaOps, TypedEncoder) {
    const int B = 3, T = 29, C = 40, Vp = 24;
    const size_t n = static_cast<size_t>(B) * T * C;
    const auto tokens = rand_ints(static_cast<size_t>(B) * T, 0, Vp - 1);
    const auto wte = rand(static_cast<size_t>(Vp) * C);
    const auto wpe = rand(static_cast<size_t>(T) * C);
    int32_t* g_tokens = up(tokens);
    for (DType t : kTypedDtypes) {
        // wte + wpe in fp32, rounded once; the scatter adds the same widened values in the
        // same order as the CPU: bit for bit.
        HostAct out(std::vector<float>(n), t);
        m_cpu->encoder_forward(out.ptr(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        const zt::ActPtr g_out = up_act(out);
        m_gpu->encoder_forward(g_out, g_tokens, up(wte), up(wpe), B, T, C);
        expect_close(down_act(g_out, n), out.floats(), kExact, "typed encoder_forward" + typed_tag(t));

        HostAct dout(rand(n), t);
        auto dwte = rand(wte.size());
        auto dwpe = rand(wpe.size());
        float* g_dwte = up(dwte);
        float* g_dwpe = up(dwpe);
        m_gpu->encoder_backward(g_dwte, g_dwpe, up_act(dout), g_tokens, B, T, C);
        m_cpu->encoder_backward(dwte.data(), dwpe.data(), dout.ptr(), tokens.data(), B, T, C);
        expect_close(down(g_dwte, dwte.size()), dwte, kExact, "typed encoder dwte" + typed_tag(t));
        expect_close(down(g_dwpe, dwpe.size()), dwpe, kExact, "typed encoder dwpe" + typed_tag(t));
    }
}

TEST_F(CudaOps, TypedSoftmaxCrossEntropy) {
    const int N = 40, V = 50, Vp = 64;
    auto targets = rand_ints(N, 0, V - 1);
    targets[3] = -1;
    int32_t* g_targets = up(targets);
    for (DType t : kTypedDtypes) {
        // dloss 1: gradients are probabilities (minus 1 at the target), O(1) values whose
        // 16-bit rounding the relative bound measures.
        for (float dloss : {0.f, 1.f}) {
            HostAct logits(rand(static_cast<size_t>(N) * Vp, -10.f, 10.f), t);
            const zt::ActPtr g_logits = up_act(logits);
            std::vector<float> losses(N);
            m_cpu->softmax_cross_entropy(losses.data(), logits.ptr(), targets.data(), N, V, Vp, dloss);
            float* g_losses = up(rand(N));
            m_gpu->softmax_cross_entropy(g_losses, g_logits, g_targets, N, V, Vp, dloss);
            const std::string tag = " dloss=" + std::to_string(dloss) + typed_tag(t);
            expect_close(down(g_losses, N), losses, Tol{1e-5, 1e-6}, "typed losses" + tag);
            expect_close(down_act(g_logits, logits.size()), logits.floats(),
                         dloss == 0.f ? kExact : Tol{1e-6, typed_tol(t).rtol}, "typed dlogits" + tag);
        }
    }
}

// ---- tensor parallelism: vocabulary slices ------------------------------------------

// Tokens < 0 (another rank's vocabulary slice): out is wpe[t] alone (zeros without wpe), and
// the row adds nothing to dwte (its dout still goes into dwpe). Every dtype of out / dout;
// the same operations in the same order as the CPU twin: bit for bit.
TEST_F(CudaOps, EncoderNegativeTokens) {
    const int B = 3, T = 29, C = 40, Vp = 24;
    const size_t n = static_cast<size_t>(B) * T * C;
    auto tokens = rand_ints(static_cast<size_t>(B) * T, -1, Vp - 1);
    tokens[0] = -1;
    tokens[1] = -1;
    tokens[static_cast<size_t>(B) * T - 1] = -1;
    std::vector<int32_t> none(static_cast<size_t>(B) * T, -1);  // no token of this slice at all
    const auto wte = rand(static_cast<size_t>(Vp) * C);
    const auto wpe = rand(static_cast<size_t>(T) * C);
    const float* g_wte = up(wte);
    const float* g_wpe = up(wpe);
    for (const auto* toks : {&tokens, &none}) {
        const int32_t* g_tokens = up(*toks);
        const std::string which = toks == &none ? " (all -1)" : " (some -1)";
        for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
            for (bool with_wpe : {true, false}) {
                const std::string tag = which + typed_tag(t) + (with_wpe ? "" : " without wpe");
                HostAct out(rand(n), t);  // garbage in: every row must be written
                const zt::ActPtr g_out = up_act(out);
                m_cpu->encoder_forward(out.ptr(), toks->data(), wte.data(), with_wpe ? wpe.data() : nullptr, B, T,
                                       C);
                m_gpu->encoder_forward(g_out, g_tokens, g_wte, with_wpe ? g_wpe : nullptr, B, T, C);
                expect_close(down_act(g_out, n), out.floats(), kExact, "encoder_forward" + tag);

                HostAct dout(rand(n), t);
                auto dwte = rand(wte.size());
                auto dwpe = rand(wpe.size());
                float* g_dwte = up(dwte);
                float* g_dwpe = up(dwpe);
                float* pe = with_wpe ? dwpe.data() : nullptr;
                m_gpu->encoder_backward(g_dwte, with_wpe ? g_dwpe : nullptr, up_act(dout), g_tokens, B, T, C);
                m_cpu->encoder_backward(dwte.data(), pe, dout.ptr(), toks->data(), B, T, C);
                expect_close(down(g_dwte, dwte.size()), dwte, kExact, "encoder dwte" + tag);
                expect_close(down(g_dwpe, dwpe.size()), dwpe, kExact, "encoder dwpe" + tag);
            }
        }
    }
}

// The vocabulary-parallel cross-entropy (tensor parallelism) over three ranks' slices of a
// 90-token vocabulary, Vp = 64 columns each: [0, 64) all real, [64, 128) with 26 real and 38
// padded, [128, 192) only padded (V = 0, row max -inf). The group's reductions (max of the
// row maxima, sum of the sums) are done here on the host, each backend on its own values;
// padded columns hold garbage that must be ignored. fp32 and bf16 logits.
TEST_F(CudaOps, SplitCrossEntropy) {
    constexpr int kSlices = 3;
    const int N = 40, Vp = 64, Vtotal = 90;
    const int vocab_begin[kSlices] = {0, Vp, 2 * Vp};
    const int Vs[kSlices] = {Vp, Vtotal - Vp, 0};
    auto targets = rand_ints(N, 0, Vtotal - 1);
    targets[3] = -1;  // an ignored row
    targets[5] = Vtotal - 1;
    targets[6] = Vp;
    targets[7] = Vp - 1;
    targets[8] = 0;
    int32_t* g_targets = up(targets);
    const size_t rowsz = static_cast<size_t>(N) * Vp;
    for (DType t : {DType::kF32, DType::kBF16}) {
        // fp32: dloss 1/N as in SoftmaxCrossEntropy; bf16: dloss 1 as in TypedSoftmaxCrossEntropy.
        const float dl = t == DType::kF32 ? 1.f / N : 1.f;
        const Tol dtol = t == DType::kF32 ? Tol{1e-7, 1e-5} : Tol{1e-6, typed_tol(t).rtol};
        for (float dloss : {0.f, dl}) {
            const std::string tag = " dloss=" + std::to_string(dloss) + typed_tag(t);
            std::vector<HostAct> logits;
            std::vector<zt::ActPtr> g_logits;
            for (int s = 0; s < kSlices; ++s) {
                logits.emplace_back(rand(rowsz, -10.f, 10.f), t);
                g_logits.push_back(up_act(logits.back()));
            }
            // Pass 1: row maxima, the group's maximum.
            std::vector<float> max_cpu(N, -INFINITY);
            std::vector<float> max_gpu(N, -INFINITY);
            for (int s = 0; s < kSlices; ++s) {
                const std::string st = tag + " slice " + std::to_string(s);
                std::vector<float> m(N);
                m_cpu->cross_entropy_row_max(m.data(), logits[s].ptr(), N, Vs[s], Vp);
                float* g_m = up(rand(N));
                m_gpu->cross_entropy_row_max(g_m, g_logits[s], N, Vs[s], Vp);
                const auto gm = down(g_m, N);
                if (Vs[s] == 0) {
                    for (int r = 0; r < N; ++r) {
                        EXPECT_TRUE(std::isinf(gm[r]) && gm[r] < 0) << "row_max " << r << st << ": " << gm[r];
                        EXPECT_TRUE(std::isinf(m[r]) && m[r] < 0) << "cpu row_max " << r << st << ": " << m[r];
                    }
                } else {
                    expect_close(gm, m, kExact, "row_max" + st);
                }
                for (int r = 0; r < N; ++r) {
                    max_cpu[r] = std::max(max_cpu[r], m[r]);
                    max_gpu[r] = std::max(max_gpu[r], gm[r]);
                }
            }
            // Pass 2: sums of exponentials and the target logit, summed over the group.
            std::vector<float> sums_cpu(2 * static_cast<size_t>(N), 0.f);
            std::vector<float> sums_gpu(2 * static_cast<size_t>(N), 0.f);
            const float* g_max = up(max_gpu);
            for (int s = 0; s < kSlices; ++s) {
                const std::string st = tag + " slice " + std::to_string(s);
                std::vector<float> sm(2 * static_cast<size_t>(N));
                m_cpu->cross_entropy_row_sums(sm.data(), logits[s].ptr(), max_cpu.data(), targets.data(), N, Vs[s],
                                              Vp, vocab_begin[s]);
                float* g_sm = up(rand(2 * static_cast<size_t>(N)));
                m_gpu->cross_entropy_row_sums(g_sm, g_logits[s], g_max, g_targets, N, Vs[s], Vp, vocab_begin[s]);
                const auto gsm = down(g_sm, 2 * static_cast<size_t>(N));
                // Sums of <= 64 exponentials in (0, 1]; target logits are loads: exact.
                const std::vector<float> exp_gpu(gsm.begin(), gsm.begin() + N);
                const std::vector<float> exp_cpu(sm.begin(), sm.begin() + N);
                const std::vector<float> tl_gpu(gsm.begin() + N, gsm.end());
                const std::vector<float> tl_cpu(sm.begin() + N, sm.end());
                expect_close(exp_gpu, exp_cpu, Tol{1e-5, 1e-5}, "row sums" + st);
                expect_close(tl_gpu, tl_cpu, kExact, "target logits" + st);
                for (size_t i = 0; i < sm.size(); ++i) {
                    sums_cpu[i] += sm[i];
                    sums_gpu[i] += gsm[i];
                }
            }
            // Pass 3: losses (the same on every slice) and each slice's gradient.
            const float* g_sums = up(sums_gpu);
            for (int s = 0; s < kSlices; ++s) {
                const std::string st = tag + " slice " + std::to_string(s);
                std::vector<float> losses(N);
                m_cpu->split_cross_entropy(losses.data(), logits[s].ptr(), max_cpu.data(), sums_cpu.data(),
                                           targets.data(), N, Vs[s], Vp, vocab_begin[s], dloss);
                float* g_losses = up(rand(N));  // garbage in: every row must be written
                m_gpu->split_cross_entropy(g_losses, g_logits[s], g_max, g_sums, g_targets, N, Vs[s], Vp,
                                           vocab_begin[s], dloss);
                EXPECT_EQ(losses[3], 0.f) << "ignored row" << st;
                expect_close(down(g_losses, N), losses, Tol{1e-5, 1e-6}, "split losses" + st);
                expect_close(down_act(g_logits[s], rowsz), logits[s].floats(), dloss == 0.f ? kExact : dtol,
                             "split dlogits" + st);
            }
        }
    }
}

}  // namespace
