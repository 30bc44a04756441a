// CudaBackend: every Backend op on one GPU, enqueued in order on one stream the backend
// owns (nothing global: the handles, workspaces and stream are members). Methods only
// forward to the op launchers (ops.cuh); this file owns the memory and the scratch.
//
// Host synchronization happens only where a host value is returned (sum_squares,
// cross-entropy's target check, encoder_backward's token bucketing), in the synchronous
// copies, in free() and when a profiling clock is read.
#include "ztrain/backend_cuda/cuda_backend.hpp"

#include "ztrain/backend/cuda_backend.hpp"

#include "cuda_check.cuh"
#include "ops.cuh"
#include "typed.cuh"
#include "ztrain/cuda_runtime/device.hpp"
#include "ztrain/cuda_runtime/stream.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

namespace zt {
namespace cuda {

Workspace::~Workspace() {
    if (m_ptr != nullptr) cudaFree(m_ptr);  // destructor: nothing to report to
}

void* Workspace::get(size_t bytes, cudaStream_t stream) {
    if (bytes <= m_bytes && m_ptr != nullptr) return m_ptr;
    // Kernels already enqueued may still use the old buffer.
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (m_ptr != nullptr) ZT_CUDA_CHECK(cudaFree(m_ptr));
    m_ptr = nullptr;
    m_bytes = 0;
    const size_t rounded = std::max<size_t>(bytes, size_t{1} << 20);
    ZT_CUDA_CHECK(cudaMalloc(&m_ptr, rounded));
    m_bytes = rounded;
    return m_ptr;
}

}  // namespace cuda

namespace {

// cuBLASLt workspace: 32 MiB, what llm.c gives Hopper (its larger tiles want it).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

/// Profiling marks as events recorded on the compute stream: the time between two marks is
/// the GPU's time for the work enqueued between them, whatever the host did meanwhile.
/// Events are created on first use and re-recorded after reset(), so a profiled step
/// creates none once the first step has sized the pool.
class EventClock final : public OpClock {
  public:
    explicit EventClock(cudaStream_t stream) : m_stream(stream) {}
    ~EventClock() override {
        for (cudaEvent_t e : m_events) cudaEventDestroy(e);  // destructor: nothing to report to
    }
    EventClock(const EventClock&) = delete;
    EventClock& operator=(const EventClock&) = delete;

    size_t mark() override {
        if (m_used == m_events.size()) {
            cudaEvent_t e = nullptr;
            ZT_CUDA_CHECK(cudaEventCreate(&e));
            m_events.push_back(e);
        }
        ZT_CUDA_CHECK(cudaEventRecord(m_events[m_used], m_stream));
        return m_used++;
    }
    double elapsed_ms(size_t from, size_t to) override {
        ZT_REQUIRE(from < m_used && to < m_used, "profiling marks ", from, ", ", to, " of ", m_used);
        ZT_CUDA_CHECK(cudaEventSynchronize(m_events[to]));
        float ms = 0.f;
        ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, m_events[from], m_events[to]));
        return ms;
    }
    void reset() override { m_used = 0; }

  private:
    cudaStream_t m_stream;
    std::vector<cudaEvent_t> m_events;
    size_t m_used = 0;  ///< events recorded since reset(); the rest wait for reuse
};

class CudaBackendImpl final : public CudaBackend {
  public:
    explicit CudaBackendImpl(int device) : m_device(device) {
        cuda_set_device(device);
        m_stream = create_stream();
        m_memory = make_cuda_device_memory(m_stream);
        ZT_CUBLAS_CHECK(cublasLtCreate(&m_blas.lt));
        ZT_CUBLAS_CHECK(cublasCreate(&m_blas.classic));
        ZT_CUDA_CHECK(cudaMalloc(&m_blas.workspace, kLtWorkspaceBytes));
        m_blas.workspace_bytes = kLtWorkspaceBytes;
        ZT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m_flag), sizeof(int)));
        ZT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m_sumsq), (cuda::kSumSquaresBlocks + 1) * sizeof(double)));
    }

    ~CudaBackendImpl() override {
        // No throwing here: errors at teardown have nobody left to handle them.
        if (m_stream != nullptr) cudaStreamSynchronize(m_stream);
        m_memory.reset();  // its transfer stream waits on m_stream's events: before m_stream goes
        if (m_sumsq != nullptr) cudaFree(m_sumsq);
        if (m_flag != nullptr) cudaFree(m_flag);
        if (m_blas.workspace != nullptr) cudaFree(m_blas.workspace);
        if (m_blas.classic != nullptr) cublasDestroy(m_blas.classic);
        if (m_blas.lt != nullptr) cublasLtDestroy(m_blas.lt);
        if (m_stream != nullptr) cudaStreamDestroy(m_stream);
    }

    std::string name() const override { return "cuda"; }
    BackendCapabilities capabilities() const override { return cuda_capabilities(); }
    std::unique_ptr<OpClock> make_op_clock() const override { return std::make_unique<EventClock>(m_stream); }
    int threads() const override { return 1; }
    int device() const override { return m_device; }
    void* stream() const override { return m_stream; }
    void synchronize() override { ZT_CUDA_CHECK(cudaStreamSynchronize(m_stream)); }

    // ---- memory ----

    void* alloc_bytes(size_t bytes) override {
        void* p = nullptr;
        const size_t n = std::max<size_t>(bytes, 1);  // a unique, freeable pointer also for 0
        ZT_CUDA_CHECK(cudaMalloc(&p, n));
        // On our stream, not the legacy default one, which does not order non-blocking streams.
        ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, n, m_stream));
        return p;
    }
    float* alloc_floats(size_t n) override { return static_cast<float*>(alloc_bytes(n * sizeof(float))); }
    DeviceMemory& memory() override { return *m_memory; }
    void free(void* p) override {
        // Never throws: owners free in destructors, often while an exception unwinds. An
        // error here is an earlier asynchronous failure, already reported or about to be.
        if (p == nullptr) return;
        const cudaError_t sync = cudaStreamSynchronize(m_stream);
        const cudaError_t freed = cudaFree(p);
        if (sync != cudaSuccess || freed != cudaSuccess) {
            std::fprintf(stderr, "ztrain: cuda backend: free after a failed operation: %s\n",
                         detail::cuda_error_string(sync != cudaSuccess ? sync : freed).c_str());
        }
    }
    void zero(float* p, size_t n) override {
        if (n > 0) ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), m_stream));
    }
    void copy(float* dst, const float* src, size_t n) override {
        if (n > 0 && dst != src) {
            ZT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, m_stream));
        }
    }
    void copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                      size_t rows) override {
        if (width == 0 || rows == 0) return;
        ZT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch * sizeof(float), src, src_pitch * sizeof(float),
                                        width * sizeof(float), rows, cudaMemcpyDeviceToDevice, m_stream));
    }

    // ---- matmul ----
    //
    // Activations of every dtype (ops.cuh: typed_matmul_*); all-fp32 calls keep the fp32
    // products exactly as they were. The weight comes in the activations' dtype where the
    // model stores one (reads_weights_in), else fp32, converted per call.

    bool reads_weights_in(DType /*t*/) const override { return true; }

    void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N, int C,
                        int OC) override {
        matmul_residual_forward(out, inp, weight, bias, ConstActPtr{}, N, C, OC);
    }
    /// residual.data null: no residual. A 16-bit out is rounded once, after the residual.
    void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                 ConstActPtr residual, int N, int C, int OC) override {
        if (!cuda::all_f32({out.dtype, inp.dtype, weight.dtype, residual.dtype})) {
            cuda::typed_matmul_forward(m_blas, out, inp, weight, bias, residual, N, C, OC, m_matmul, m_stream);
            return;
        }
        cuda::matmul_forward(m_blas, out.as_f32(), inp.as_f32(), weight.as_f32(), bias, N, C, OC, DType::kF32, false,
                             nullptr, m_stream);
        if (residual.data != nullptr) {
            cuda::residual_forward(out, out, residual, static_cast<size_t>(N) * static_cast<size_t>(OC), m_stream);
        }
    }
    void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                         ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) override {
        // Assigned gradients: zeroed here, then added as always (one path for the products).
        if (grads == GradWrite::kAssign) {
            if (dweight != nullptr) zero(dweight, static_cast<size_t>(OC) * static_cast<size_t>(C));
            if (dbias != nullptr) zero(dbias, static_cast<size_t>(OC));
        }
        if (cuda::all_f32({dinp.dtype, dout.dtype, inp.dtype, weight.dtype})) {
            cuda::matmul_backward(m_blas, dinp.as_f32(), dweight, dout.as_f32(), inp.as_f32(), weight.as_f32(), N, C,
                                  OC, DType::kF32, m_stream);
        } else {
            cuda::typed_matmul_backward(m_blas, dinp, dweight, dout, inp, weight, N, C, OC, m_matmul, m_stream);
        }
        if (dbias != nullptr && N > 0) {
            cuda::column_sum(dbias, dout, N, OC, scratch_floats(cuda::column_chunks(N) * OC), m_stream);
        }
    }
    void matmul_forward_ex(void* out, const void* inp, const void* weight, int N, int C, int OC,
                           const CudaMatmulOptions& o) override {
        cuda::matmul_forward(m_blas, out, inp, weight, o.bias, N, C, OC, o.dtype, o.gelu, o.pre_gelu, m_stream);
    }
    void matmul_backward_ex(void* dinp, void* dweight, const void* dout, const void* inp, const void* weight, int N,
                            int C, int OC, DType dtype) override {
        cuda::matmul_backward(m_blas, dinp, dweight, dout, inp, weight, N, C, OC, dtype, m_stream);
    }

    // ---- layernorm, element-wise ----

    void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                           const float* bias, int N, int C) override {
        cuda::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, m_stream);
    }
    void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                            const float* weight, const float* mean, const float* rstd, int N, int C) override {
        float* scratch = nullptr;
        if ((dweight != nullptr || dbias != nullptr) && N > 0) {
            scratch = scratch_floats(2 * cuda::column_chunks(N) * C);
        }
        cuda::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, scratch, m_stream);
    }
    void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) override {
        cuda::gelu_forward(out, inp, n, m_stream);
    }
    void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) override {
        cuda::gelu_backward(dinp, inp, dout, n, m_stream);
    }
    void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) override {
        cuda::residual_forward(out, a, b, n, m_stream);
    }
    void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col,
                           int width, int N, float scale) override {
        cuda::scale_add_columns(dst, dst_width, dst_col, src, src_width, src_col, width, N, scale, m_stream);
    }
    void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask) override {
        cuda::dropout(out, in, N, width, mask, m_stream);
    }
    double sum_squares(const float* x, size_t n) override {
        const ConstActPtr span(x);
        return cuda::sum_squares(&span, &n, 1, m_sumsq, m_stream);
    }
    double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) override {
        const size_t doubles = count * cuda::kSumSquaresBlocks + 1;
        auto* scratch = static_cast<double*>(m_scratch.get(doubles * sizeof(double), m_stream));
        return cuda::sum_squares(xs, ns, count, scratch, m_stream);
    }

    void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                      const AdamWStep& step) override {
        cuda::adamw_update(param, m, v, grad, n, adamw_constants(step), m_stream);
    }
    void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) override {
        const AdamWConstants k = adamw_constants(step);
        AdamWConstants k_no_decay = k;
        k_no_decay.weight_decay = 0.f;
        for (size_t i = 0; i < count; ++i) cuda::adamw_update_span(spans[i], spans[i].decay ? k : k_no_decay, m_stream);
    }
    void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) override {
        cuda::muon_momentum(m, update, grad, n, step, m_stream);
    }
    void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) override {
        cuda::newton_schulz(m_blas, x, rows, cols, step, work, m_sumsq, m_stream);
    }
    void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work) override {
        cuda::muon_apply(param, update, n, decay, rate, work, m_stream);
    }

    // ---- attention, encoder, loss ----

    void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                               int hs) override {
        cuda::gqa_attention_forward(m_blas, out, att, qkv, B, T, NH, NKV, hs, m_attention, m_stream);
    }
    void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att,
                                int B, int T, int NH, int NKV, int hs) override {
        cuda::gqa_attention_backward(m_blas, dqkv, scratch, dout, qkv, att, nullptr, B, T, NH, NKV, hs, m_attention,
                                     m_stream);
    }
    void gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv, const int32_t* attend_from,
                                         int B, int T, int NH, int NKV, int hs) override {
        const cuda::AttentionSegments segments = device_segments(attend_from, B, T);
        cuda::gqa_attention_forward_segmented(m_blas, out, att, qkv, segments, B, T, NH, NKV, hs, m_attention,
                                              m_stream);
    }
    // The backward reads att only over each query's keys (attention.cu).
    void gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                          ConstActPtr att, const int32_t* attend_from, int B, int T, int NH, int NKV,
                                          int hs) override {
        const cuda::AttentionSegments segments = device_segments(attend_from, B, T);
        cuda::gqa_attention_backward(m_blas, dqkv, scratch, dout, qkv, att, &segments, B, T, NH, NKV, hs,
                                     m_attention, m_stream);
    }
    /// attend_from (host memory, backend.hpp) checked here, where a bad value is still a
    /// clear error rather than a read outside the score row, then copied next to the scores
    /// with its bands (stream-ordered, so the next call's copy waits for this one's kernels).
    cuda::AttentionSegments device_segments(const int32_t* attend_from, int B, int T) {
        ZT_REQUIRE(attend_from != nullptr, "segmented attention needs attend_from");
        const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
        for (size_t i = 0; i < n; ++i) {
            const int t = static_cast<int>(i % static_cast<size_t>(T));
            ZT_REQUIRE(attend_from[i] >= 0 && attend_from[i] <= t, "attend_from ", attend_from[i], " of query ", t,
                       " outside [0, ", t, "]");
        }
        return cuda::attention_segments(attend_from, B, T, m_attend_ws, m_band_ws, m_band_host, m_stream);
    }
    size_t attention_scratch_floats(int /*B*/, int T, int NH) const override {
        return static_cast<size_t>(cuda_attention_scratch_floats(T, NH));
    }
    void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T,
                         int C) override {
        cuda::encoder_forward(out, tokens, wte, wpe, B, T, C, m_stream);
    }
    void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B, int T,
                          int C) override {
        cuda::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, m_encoder, m_index_ws, m_stream);
    }
    void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N, int V, int Vp,
                               float dloss) override {
        cuda::softmax_cross_entropy(losses, logits, targets, N, V, Vp, dloss, m_flag, m_stream);
    }
    void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) override {
        cuda::cross_entropy_row_max(row_max, logits, N, V, Vp, m_stream);
    }
    void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max, const int32_t* targets, int N,
                                int V, int Vp, int vocab_begin) override {
        cuda::cross_entropy_row_sums(sums, logits, row_max, targets, N, V, Vp, vocab_begin, m_stream);
    }
    void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                             const int32_t* targets, int N, int V, int Vp, int vocab_begin, float dloss) override {
        cuda::split_cross_entropy(losses, logits, row_max, sums, targets, N, V, Vp, vocab_begin, dloss, m_stream);
    }

    // ---- Llama: RMSNorm, rotary embeddings, SwiGLU ----

    void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                         float eps) override {
        cuda::rmsnorm_forward(out, rstd, inp, weight, N, C, eps, m_stream);
    }
    void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                          const float* rstd, int N, int C) override {
        float* scratch = dweight != nullptr && N > 0 ? scratch_floats(cuda::column_chunks(N) * C) : nullptr;
        cuda::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C, scratch, m_stream);
    }
    void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight, const float* k_weight,
                         int N, int NH, int NKV, int hs, float eps) override {
        cuda::qk_norm_forward(out, rstd, inp, q_weight, k_weight, N, NH, NKV, hs, eps, m_stream);
    }
    void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout, ConstActPtr inp,
                          const float* q_weight, const float* k_weight, const float* rstd, int N, int NH, int NKV,
                          int hs) override {
        const bool weights = (dq_weight != nullptr || dk_weight != nullptr) && N > 0;
        float* scratch = weights ? scratch_floats(2 * cuda::column_chunks(N) * static_cast<size_t>(hs)) : nullptr;
        cuda::qk_norm_backward(dinp, dq_weight, dk_weight, dout, inp, q_weight, k_weight, rstd, N, NH, NKV, hs,
                               scratch, m_stream);
    }
    void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV, int hs) override {
        cuda::rope_forward(out, inp, rope, B, T, NH, NKV, hs, m_stream);
    }
    void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV,
                       int hs) override {
        cuda::rope_backward(dinp, dout, rope, B, T, NH, NKV, hs, m_stream);
    }
    void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) override {
        cuda::swiglu_forward(out, inp, N, F, m_stream);
    }
    void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) override {
        cuda::swiglu_backward(dinp, inp, dout, N, F, m_stream);
    }

    // ---- precision ----

    void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) override {
        cuda::cast(dst, dst_type, src, src_type, n, m_stream);
    }
    void accumulate(void* dst, DType dst_type, const float* src, size_t n) override {
        cuda::accumulate(dst, dst_type, src, n, m_stream);
    }
    void round_to(float* x, size_t n, DType t) override { cuda::round_to(x, n, t, m_stream); }
    void zero_bytes(void* p, size_t bytes) override {
        if (bytes > 0) ZT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, m_stream));
    }

  private:
    float* scratch_floats(size_t n) { return static_cast<float*>(m_scratch.get(n * sizeof(float), m_stream)); }

    int m_device = 0;
    cudaStream_t m_stream = nullptr;
    /// Host copies and pinned memory: copies on a transfer stream ordered after m_stream.
    std::unique_ptr<DeviceMemory> m_memory;
    cuda::Blas m_blas;
    int* m_flag = nullptr;
    double* m_sumsq = nullptr;
    cuda::Workspace m_scratch;   ///< column-reduction partials
    cuda::Workspace m_index_ws;  ///< encoder_backward's bucket index
    cuda::Workspace m_attend_ws; ///< the segmented attention's attend_from, copied to the device
    cuda::Workspace m_band_ws;   ///< and each query's band start (cuda::AttentionSegments)
    std::vector<int32_t> m_band_host;
    cuda::EncoderScratch m_encoder;
    cuda::MatmulScratch m_matmul;        ///< the typed products' converted operands
    cuda::AttentionScratch m_attention;  ///< the typed attention's fp32 copies
};

}  // namespace

std::unique_ptr<CudaBackend> make_cuda_backend(int device) { return std::make_unique<CudaBackendImpl>(device); }

}  // namespace zt
