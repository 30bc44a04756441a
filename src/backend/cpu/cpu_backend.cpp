// The CPU compute backend: every op of backend.hpp in fp32 on a shared-memory CPU.
//
// What it implements
//  - Every matrix product (matmul forward/backward, and Q.K^T, P.V and their gradients in
//    attention) is an OpenBLAS cblas_sgemm on the original buffers, with transpose flags and
//    leading dimensions doing the work (no transposing copies). Backward passes beta = 1 so
//    sgemm itself accumulates into the gradients.
//  - Everything else (also the Llama ops: RMSNorm, rotary embeddings, SwiGLU) is OpenMP
//    loops over rows written so GCC vectorizes them at plain -O3 (checked
//    with -fopt-info-vec): exp and sqrt are branch-free polynomial/Newton versions
//    (cpu_common.hpp), because libm's expf/sqrtf keep loops scalar without -ffast-math /
//    -fno-math-errno.
//  - The compute-heavy kernels are compiled with target_clones (x86-64-v3 = AVX2+FMA and the
//    x86-64 baseline, and for the maps x86-64-v4 = AVX-512 too); the dynamic loader picks one
//    per machine, so the binary runs on any x86-64 and the build needs no -march flag. The v4
//    clone of the maps is faster where AVX-512 runs at full width (bench/cpu_notes.md) and
//    gives the same bits; kernels with a reduction across a row stay at AVX2, whose width sets
//    their summation order (cpu_common.hpp).
//
// Threading (OpenBLAS 0.3.21 pthread; the measurements behind it are in bench/cpu_notes.md)
//  - OpenMP owns all the threads; OpenBLAS is set to ONE thread (deliberately, instead of
//    `threads`) and each product is split by us into one row or column slab per OpenMP
//    thread, each calling single-threaded sgemm. Letting OpenBLAS run its own pool made
//    sgemm much slower as soon as OpenMP regions ran between products: idle libgomp
//    workers spin (GOMP_SPINCOUNT) on the cores the OpenBLAS workers need, and OpenBLAS
//    workers spin after each call on the cores OpenMP needs. With one pool nothing spins
//    against anything, and the split loses nothing measurable. OMP_WAIT_POLICY cannot be
//    changed from here (libgomp reads it at load time), and need not be:
//    our own workers spinning between our own regions is what keeps them fast. It should be
//    PASSIVE only when ranks x threads exceed the cores (e.g. MPI tests on a small box).
//  - Concurrent single-threaded sgemm calls are safe in OpenBLAS >= 0.3.7: 3000 rounds of
//    concurrent block products matched the serial result bit for bit on 0.3.21.
//  - Every region uses fixed static partitions and no cross-thread reduction has an
//    unspecified order, so results are bit-identical run to run for a given thread count.
//
// Attention: one (batch, head) pair is one unit of work for one thread, whose products are
// sgemm calls on strided views of qkv (ld = 3C for GPT-2, (NH + 2 NKV) hs for grouped-query
// attention, which GPT-2's is the NKV = NH case of), restricted to the lower triangle of
// 64-row blocks. Against hand-written vectorized loops over the exact causal triangle this
// was faster at hs = 64 (sgemm runs near peak; the loops are load/store bound), and 64-row
// blocks beat whole-square products at T = 256 (forward, backward).
//
// 16-bit activations: every op reads and writes the buffers' dtype and computes in fp32
// inside. A bf16 run's products (matmul forward/backward, and attention's block products,
// one single-threaded oneDNN set per team thread) run on bf16 instructions through oneDNN
// where the CPU has them (bf16_products.cpp, cpu_bf16.hpp); fp16, or bf16 without them,
// widens operands to fp32 for sgemm.
//
// What it deliberately does not do
//  - No fusion across ops (the interface is op by op).
//  - No flash-style attention: att (B, NH, T, T) is materialized because the interface
//    saves it for backward; at GPT-2 sizes it is small next to the MLP activations.
//  - No validation of token ids against the vocabulary (only the caller knows Vp);
//    cross-entropy targets are validated since V is known there.
//
// Files: one per op group, named as its CUDA twin in src/backend/cuda/ (matmul.cpp,
// attention.cpp, layernorm.cpp, ...), declared in ops.hpp; what they share is in
// cpu_common.hpp. This file holds the class, whose ops forward to them.
#include "ops.hpp"
#include "ztrain/backend/backend.hpp"
#include "ztrain/backend/cpu_bf16.hpp"
#include "ztrain/core/error.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <thread>
#include <vector>

namespace zt {
namespace {

class CpuBackend final : public Backend {
  public:
    explicit CpuBackend(int threads) {
        if (threads <= 0) {
            threads = static_cast<int>(std::thread::hardware_concurrency());
        }
        m_threads = std::max(1, threads);
        omp_set_num_threads(m_threads);
        // OpenBLAS runs single-threaded inside our OpenMP team (see the header comment).
        openblas_set_num_threads(1);
    }

    std::string name() const override { return "cpu"; }
    int threads() const override { return m_threads; }

    float* alloc_floats(size_t n) override {
        // 64-byte alignment: a cache line and a full AVX-512 vector; at least one line so a
        // zero-size request still yields a unique, freeable pointer.
        const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
        void* p = nullptr;
        const int rc = posix_memalign(&p, 64, bytes);
        ZT_REQUIRE(rc == 0 && p != nullptr, "posix_memalign of ", bytes, " bytes failed (rc ", rc,
                   ")");
        zero(static_cast<float*>(p), bytes / sizeof(float));
        return static_cast<float*>(p);
    }

    void free(void* p) override { std::free(p); }

    // One memset/memcpy on the calling thread: a second thread does not add write bandwidth
    // on the dev box, and on a loaded machine a parallel region waits for the thread whose
    // core is taken.
    void zero(float* p, size_t n) override { std::memset(p, 0, n * sizeof(float)); }

    void copy(float* dst, const float* src, size_t n) override {
        std::memcpy(dst, src, n * sizeof(float));
    }

    DeviceMemory& memory() override { return *m_memory; }

    // --------------------------------------------------------------------------------
    // precision: the span conversions of core/dtype (OpenMP, round to nearest even)
    // --------------------------------------------------------------------------------

    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
        cpu::cast(dst, dst_type, src, src_type, n);
    }

    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override {
        cpu::accumulate(dst, dst_type, src, n);
    }

    void round_to(float* x, size_t n, DType t) override { cpu::round_to(x, n, t); }
    void zero_bytes(void* p, size_t bytes) override {
        if (bytes > 0) std::memset(p, 0, bytes);
    }

    void set_activation_dtype(DType t) override {
        // bf16 products where the activations are bf16 and the CPU multiplies bf16, and under
        // fp32 activations for bf16-stored weights only (products_for); everything else (fp16,
        // no bf16 ISA, ZT_CPU_BF16=off) keeps the sgemm path.
        m_activations_bf16 = t == DType::kBF16;
        if (t == DType::kBF16 && cpu_bf16_products().native) {
            if (!m_bf16_products) m_bf16_products = std::make_unique<cpu::Bf16Products>(m_threads);
            // Attention multiplies one head per thread: one single-threaded set each.
            while (m_attention_products.size() < static_cast<size_t>(m_threads)) {
                m_attention_products.push_back(std::make_unique<cpu::Bf16Products>(1));
                m_attention_pointers.push_back(m_attention_products.back().get());
            }
        } else {
            m_bf16_products.reset();
            m_attention_products.clear();
            m_attention_pointers.clear();
        }
    }
    std::string activation_dtype_note(DType t) const override {
        if (t != DType::kBF16) return {};
        const CpuBf16Products& p = cpu_bf16_products();
        if (p.native) return {};
        return str("bf16 products run in fp32 through OpenBLAS: ", p.fallback_reason);
    }

    // --------------------------------------------------------------------------------
    // matmul
    // --------------------------------------------------------------------------------

    bool reads_weights_in(DType t) const override {
        return t == DType::kF32 || (t == DType::kBF16 && cpu_bf16_products().native);
    }

    void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N, int C,
                        int OC) override {
        matmul_residual_forward(out, inp, weight, bias, ConstActPtr{}, N, C, OC);
    }

    /// residual.data null: no residual.
    void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                 ConstActPtr residual, int N, int C, int OC) override {
        if (cpu::Bf16Products* p = products_for(weight.dtype, {out.dtype, inp.dtype, residual.dtype})) {
            cpu::matmul_forward_bf16(*p, out, inp, weight, bias, residual, N, C, OC);
            return;
        }
        const float* w = fp32_weight(weight, static_cast<size_t>(OC) * static_cast<size_t>(C));
        if (out.f32() && inp.f32() && residual.f32()) {
            cpu::matmul_forward(out.as_f32(), inp.as_f32(), w, bias, N, C, OC, m_threads);
            if (residual.data != nullptr) {
                cpu::residual_forward(out, out, residual, static_cast<size_t>(N) * OC, m_threads);
            }
        } else {
            cpu::matmul_forward_widened(out, inp, w, bias, residual, N, C, OC, m_threads);
        }
    }

    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                         ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override {
        if (grads == GradWrite::kAssign && N == 0) {  // no product writes them: zero
            if (dweight != nullptr) zero(dweight, static_cast<size_t>(OC) * static_cast<size_t>(C));
            if (dbias != nullptr) zero(dbias, static_cast<size_t>(OC));
            grads = GradWrite::kAdd;
        }
        if (cpu::Bf16Products* p = products_for(weight.dtype, {dinp.dtype, dout.dtype, inp.dtype})) {
            cpu::matmul_backward_bf16(*p, dinp, dweight, dbias, dout, inp, weight, N, C, OC, m_threads, grads);
            return;
        }
        const float* w = fp32_weight(weight, static_cast<size_t>(OC) * static_cast<size_t>(C));
        if (dinp.f32() && dout.f32() && inp.f32()) {
            cpu::matmul_backward(dinp.as_f32(), dweight, dbias, dout.as_f32(), inp.as_f32(), w, N, C, OC, m_threads,
                                 grads);
        } else {
            cpu::matmul_backward_widened(dinp, dweight, dbias, dout, inp, w, N, C, OC, m_threads, grads);
        }
    }

    // In place on the CPU (no scratch): the old columns and the product summed in fp32 and
    // rounded once, on the bf16 products where they run, else through sgemm on an fp32 weight.
    void matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight, int N, int K,
                            int width, float scale, ActPtr /*scratch*/) override {
        cpu::Bf16Products* p = products_for(weight.dtype, {dst.dtype, inp.dtype});
        cpu::matmul_add_columns(p, dst, dst_width, dst_col, inp, product_weight(p, weight, width, K), N, K, width,
                                scale, m_threads);
    }
    void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                 ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                 ActPtr /*scratch*/) override {
        cpu::Bf16Products* p = products_for(weight.dtype, {dinp.dtype, dout.dtype, inp.dtype});
        cpu::matmul_backward_columns(p, dinp, dweight, dout, dout_width, dout_col, inp,
                                     product_weight(p, weight, width, K), N, K, width, scale, m_threads);
    }

    // --------------------------------------------------------------------------------
    // layernorm
    // --------------------------------------------------------------------------------

    void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                           const float* bias, int N, int C) override {
        cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, m_threads);
    }

    void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override {
        cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, m_threads);
    }

    // --------------------------------------------------------------------------------
    // element-wise
    // --------------------------------------------------------------------------------

    void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override {
        cpu::gelu_forward(out, inp, n, m_threads);
    }

    void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override {
        cpu::gelu_backward(dinp, inp, dout, n, m_threads);
    }

    void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override {
        cpu::residual_forward(out, a, b, n, m_threads);
    }

    void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col,
                           int width, int N, float scale) override {
        cpu::scale_add_columns(dst, dst_width, dst_col, src, src_width, src_col, width, N, scale, m_threads);
    }
    void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) override {
        cpu::dropout(out, in, N, width, mask, m_threads);
    }

    double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n, m_threads); }

    double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) override {
        return cpu::sum_squares_spans(xs, ns, count, m_threads);
    }

    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override {
        cpu::adamw_update_spans(spans, count, step, m_threads);
    }

    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override {
        cpu::adamw_update(param, m, v, grad, n, step, m_threads);
    }

    void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) override {
        cpu::muon_momentum(m, update, grad, n, step, m_threads);
    }
    void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) override {
        cpu::Bf16Products* products = nullptr;
        if (step.ns_bf16 && cpu_bf16_products().native) {
            if (!m_bf16_products) m_bf16_products = std::make_unique<cpu::Bf16Products>(m_threads);
            products = m_bf16_products.get();
        }
        cpu::newton_schulz(x, rows, cols, step, work, m_threads, products);
    }
    void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work) override {
        cpu::muon_apply(param, update, n, decay, rate, work, m_threads);
    }

    // --------------------------------------------------------------------------------
    // attention (attention.cpp: the blocking and the work split)
    // --------------------------------------------------------------------------------

    void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                               int hs) override {
        cpu::gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs, m_threads, nullptr, attention_products());
    }

    void gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv, const int32_t* attend_from,
                                         int B, int T, int NH, int NKV, int hs) override {
        ZT_REQUIRE(attend_from != nullptr, "gqa_attention_forward_segmented needs attend_from");
        cpu::gqa_attention_forward(out, att, qkv, B, T, NH, NKV, hs, m_threads, attend_from, attention_products());
    }

    // The segmented forward wrote att only in the key blocks its queries read, zero outside
    // each query's keys there; the backward reads the same blocks (attend_from says which).
    void gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                          ConstActPtr att, const int32_t* attend_from, int B, int T, int NH, int NKV,
                                          int hs) override {
        ZT_REQUIRE(attend_from != nullptr, "gqa_attention_backward_segmented needs attend_from");
        cpu::gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs, m_threads, attend_from,
                                    attention_products());
    }

    void gqa_attention_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int past, int n, int NH,
                              int NKV, int hs, int window) override {
        cpu::gqa_attention_cached(out, qkv, k_cache, v_cache, past, n, NH, NKV, hs, window, m_threads);
    }

    size_t attention_scratch_floats(int /*B*/, int T, int /*NH*/) const override {
        return cpu::attention_scratch_floats(T, m_threads);
    }

    void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                ConstActPtr att, int B, int T, int NH, int NKV, int hs) override {
        cpu::gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NKV, hs, m_threads, nullptr,
                                    attention_products());
    }

    // --------------------------------------------------------------------------------
    // Llama: RMSNorm, rotary embeddings, SwiGLU
    // --------------------------------------------------------------------------------

    void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                         float eps) override {
        cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, m_threads);
    }

    void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                          const float* rstd, int N, int C) override {
        cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, m_threads);
    }

    void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight,
                         int N, int NH, int NKV, int hs, float eps) override {
        cpu::qk_norm_forward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hs, eps, m_threads);
    }

    void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                          const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV,
                          int hs) override {
        cpu::qk_norm_backward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd, N, NH, NKV, hs,
                              m_threads);
    }

    void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs) override {
        cpu::rope_forward(out, inp, rope, B, T, NH, NKV, hs, m_threads);
    }

    void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV,
                       int hs) override {
        cpu::rope_backward(dinp, dout, rope, B, T, NH, NKV, hs, m_threads);
    }

    void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) override {
        cpu::swiglu_forward(out, inp, N, F, m_threads);
    }

    void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) override {
        cpu::swiglu_backward(dinp, inp, dout, N, F, m_threads);
    }

    // --------------------------------------------------------------------------------
    // encoder
    // --------------------------------------------------------------------------------

    void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
        cpu::encoder_forward(out, tokens, wte, wpe, B, T, C, m_threads);
    }

    void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B,
                          int T, int C) override {
        cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, m_threads);
    }

    // --------------------------------------------------------------------------------
    // loss
    // --------------------------------------------------------------------------------

    void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V,
                               int Vp, float dloss) override {
        cpu::softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss, m_threads);
    }
    void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) override {
        cpu::cross_entropy_row_max(row_max, logits, N, V, Vp, m_threads);
    }
    void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                                int V, int Vp, int vocab_begin) override {
        cpu::cross_entropy_row_sums(sums, logits, row_max, targets, N, V, Vp, vocab_begin, m_threads);
    }
    void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                             const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss) override {
        cpu::split_cross_entropy(losses, logits, row_max, sums, targets, N, V, Vp, vocab_begin, dloss, m_threads);
    }

  private:
    int m_threads = 1;
    bool m_activations_bf16 = false;
    /// Made while the activations are bf16 and the CPU has bf16 products, or at the first
    /// product of a bf16-stored weight under fp32 activations; null otherwise.
    std::unique_ptr<cpu::Bf16Products> m_bf16_products;
    /// Attention's bf16 products, one per team thread (the same condition), and their
    /// pointers as attention.cpp takes them.
    std::vector<std::unique_ptr<cpu::Bf16Products>> m_attention_products;
    std::vector<cpu::Bf16Products*> m_attention_pointers;
    cpu::Bf16Products* const* attention_products() const {
        return m_attention_pointers.empty() ? nullptr : m_attention_pointers.data();
    }
    /// A weight as fp32: itself, or a 16-bit one widened into m_wide_weight (a product
    /// without 16-bit products given a stored weight: correct, not the fast path; the model
    /// passes stored weights only where reads_weights_in says so).
    const float* fp32_weight(ConstActPtr w, size_t n) {
        // No weight: a product's backward for its weight gradient only (no input gradient).
        if (w.f32() || w.data == nullptr) return static_cast<const float*>(w.data);
        if (m_wide_weight.size() < n) m_wide_weight.resize(n);
        cpu::cast(m_wide_weight.data(), DType::kF32, w.data, w.dtype, n);
        return m_wide_weight.data();
    }
    /// A (rows, cols) weight as a product reads it: as stored on the bf16 products, else fp32.
    ConstActPtr product_weight(cpu::Bf16Products* products, ConstActPtr w, int rows, int cols) {
        if (products != nullptr) return w;
        return ConstActPtr(fp32_weight(w, static_cast<size_t>(rows) * static_cast<size_t>(cols)), DType::kF32);
    }
    std::vector<float> m_wide_weight;
    /// The bf16 products a product of this weight and these other operands runs on, or null
    /// for the fp32 products. No operand may be stored fp16 (those take the widened fp32
    /// products). Under bf16 activations every product runs on them; under fp32 activations
    /// only a bf16-stored weight's (a LoRA base under lora.base_dtype = bf16: the other operands
    /// rounded to bf16, the product accumulated in fp32), so fp32 weights keep fp32 products.
    cpu::Bf16Products* products_for(DType weight, std::initializer_list<DType> others) {
        if (weight == DType::kF16) return nullptr;
        for (DType t : others) {
            // Under fp32 activations a 16-bit operand the backend was not told of is widened too.
            if (t == DType::kF16 || (!m_activations_bf16 && t != DType::kF32)) return nullptr;
        }
        if (m_activations_bf16) return m_bf16_products.get();
        if (weight != DType::kBF16 || !cpu_bf16_products().native) return nullptr;
        if (!m_bf16_products) m_bf16_products = std::make_unique<cpu::Bf16Products>(m_threads);
        return m_bf16_products.get();
    }
    std::unique_ptr<DeviceMemory> m_memory = make_host_device_memory(HostCopyTiming::kAtCall);
};

}  // namespace

size_t cpu_attention_scratch_floats(int T, int threads) { return cpu::attention_scratch_floats(T, threads); }
size_t cpu_widened_operand_floats(int N, int C, int OC) { return cpu::widened_operand_floats(N, C, OC); }
size_t cpu_reduction_slice_floats(int N, int C, int OC) {
    if (!cpu::reduces_in_slices(OC)) return 0;
    return static_cast<size_t>(cpu::reduction_slice_rows(N, C)) * static_cast<size_t>(C);
}

std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<CpuBackend>(threads);
}

}  // namespace zt
