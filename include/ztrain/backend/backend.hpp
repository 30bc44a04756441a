// The compute interface the model is written against.
//
// The model never knows which backend runs it: it calls these methods with pointers into
// buffers the backend allocated. Shapes follow llm.c's conventions and are given in the
// comments: B batch, T time, C channels, NH (query) heads, NKV key/value heads, hs head
// size, F feed-forward width, V vocabulary, Vp padded vocabulary, N = B*T rows. A matrix
// weight is stored (OC, C): out = inp @ weight^T.
//
// Backward convention: every backward method ACCUMULATES (+=) into its gradient outputs,
// both parameter gradients (so gradient accumulation over micro-steps is free) and
// activation gradients (so a residual stream's gradient can be summed in place). A null
// gradient output pointer means "not needed" and is skipped.
//
// Element types: activations travel as ActPtr / ConstActPtr (a pointer and the dtype its
// elements are stored in), moving op by op from fp32-only `float*` to typed buffers: an op
// taking them reads and writes the stored dtype and computes in fp32 inside, its 16-bit
// result rounded once (what ActivationRoundingBackend's emulation gives, bit for bit). A
// float* converts to an fp32 ActPtr. Parameters and parameter gradients stay fp32 views.
// Buffers of the bf16/fp16 working copies of parameters and gradients are `void*` plus a
// DType, and only the precision ops (cast, accumulate, zero_bytes) read or write them, so
// code above the backend never converts, rounds or adds on memory the backend owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>

#include "ztrain/core/dtype.hpp"
#include "ztrain/core/random.hpp"
#include "ztrain/memory/device_memory.hpp"

namespace zt {

/// Which elements of an (N, width) block of activations dropout keeps (LoRA's lora.dropout on
/// an adapter's input): row n is position n % T of sample first_sample + n / T, column j is
/// feature feature_offset + j; the element is kept with probability 1 - p, from the
/// counter-based draw of (key, sample, position, feature). So the same element of the same
/// sample gets the same draw wherever it is computed: on any rank, in any micro-batch, in any
/// tensor slice, and again in a recompute or a resumed run.
struct DropoutMask {
    uint64_t key = 0;  ///< dropout_key's: the seed, step, block and adapter
    uint64_t first_sample = 0;
    int T = 1;
    int feature_offset = 0;
    float p = 0.f;
    /// Rows laid out otherwise (compacted padding: several samples to a row): row n is
    /// position position_of[n] of sample first_sample + sample_of[n]. Host memory; null: the
    /// plain layout above.
    const int32_t* sample_of = nullptr;
    const int32_t* position_of = nullptr;
    /// The draws of row n share this.
    ZT_HOST_DEVICE uint64_t row_key(int n) const {
        const bool laid_out = sample_of != nullptr;
        const uint64_t sample = first_sample + static_cast<uint64_t>(laid_out ? sample_of[n] : n / T);
        const auto position = static_cast<uint64_t>(laid_out ? position_of[n] : n % T);
        return mix64(key ^ mix64(sample)) ^ (position << 32);
    }
    /// Whether column j of the row whose row_key is `row` is kept.
    ZT_HOST_DEVICE bool keeps(uint64_t row, int j) const {
        const uint64_t bits = mix64(row ^ static_cast<uint32_t>(feature_offset + j));
        return static_cast<float>(bits >> 40) * 0x1.0p-24f >= p;
    }
};

/// The key of one adapter's masks in one step: (seed, step, block, adapter).
inline uint64_t dropout_key(uint64_t seed, uint64_t step, int block, int adapter) {
    const uint64_t at = (static_cast<uint64_t>(block) << 16) | static_cast<uint64_t>(adapter);
    return random_bits(random_bits(seed, static_cast<uint64_t>(RandomStream::kLoraDropout), step), at, 0);
}

/// Activations stored in `dtype` at `data` (backend memory).
struct ActPtr {
    void* data = nullptr;
    DType dtype = DType::kF32;
    ActPtr() = default;
    ActPtr(void* p, DType t) : data(p), dtype(t) {}
    ActPtr(float* p) : data(p) {}  // NOLINT(google-explicit-constructor): fp32 buffers as they are
    bool f32() const { return dtype == DType::kF32; }
    float* as_f32() const { return static_cast<float*>(data); }  ///< only when f32()
    /// The buffer from element n on (same dtype).
    ActPtr offset(size_t n) const { return {static_cast<char*>(data) + n * dtype_size(dtype), dtype}; }
};

/// Read-only activations stored in `dtype` at `data`.
struct ConstActPtr {
    const void* data = nullptr;
    DType dtype = DType::kF32;
    ConstActPtr() = default;
    ConstActPtr(const void* p, DType t) : data(p), dtype(t) {}
    ConstActPtr(const float* p) : data(p) {}  // NOLINT(google-explicit-constructor)
    ConstActPtr(ActPtr a) : data(a.data), dtype(a.dtype) {}  // NOLINT(google-explicit-constructor)
    bool f32() const { return dtype == DType::kF32; }
    const float* as_f32() const { return static_cast<const float*>(data); }  ///< only when f32()
    ConstActPtr offset(size_t n) const { return {static_cast<const char*>(data) + n * dtype_size(dtype), dtype}; }
};

/// What a backend can train with. One answer per backend kind, so "which precisions run on
/// cuda" is decided here and nowhere else: the model state, the model and the trainer's
/// input check all ask it (Backend::capabilities, or cuda_capabilities() before a CUDA
/// backend exists).
struct BackendCapabilities {
    /// Working dtypes (parameters, gradients, activations, the gradient wire format).
    bool fp32 = true;
    bool bf16 = true;
    bool fp16 = true;
    /// Buffers live in device memory: the host reaches them only through to_host/to_device
    /// (page-locked host memory makes those full speed), collectives on them need a device
    /// communicator, and the memory plan counts them against the device, not the host.
    bool device_memory = false;
    bool supports(DType work) const;
    /// The supported working dtypes for messages: "fp32" or "fp32, bf16, fp16".
    std::string work_dtypes() const;
};

/// Profiling marks on a backend's own timeline (see ProfilingBackend). The CPU reads the host
/// clock; a GPU backend records events on its stream, because a host clock around an
/// asynchronous launch measures the launch, not the kernel.
class OpClock {
  public:
    virtual ~OpClock() = default;
    /// Records "now" on the backend's timeline; returns the mark's id.
    virtual size_t mark() = 0;
    /// Milliseconds between two marks (may wait for the later one to be reached).
    virtual double elapsed_ms(size_t from, size_t to) = 0;
    /// Forgets every mark (ids restart at 0).
    virtual void reset() = 0;
};

/// The host steady clock as an OpClock (backends whose ops return when done).
std::unique_ptr<OpClock> make_host_op_clock();

/// Hyper-parameters of one AdamW step, already including bias corrections and the
/// multiplier that folds gradient clipping and the fp16 loss-scale unscaling into the read
/// of the gradient: g = grad * grad_scale (the gradients themselves are never rescaled).
struct AdamWStep {
    float lr = 0.f;
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.f;   ///< decoupled: p -= lr * wd * p
    float bias_correction1 = 1.f;  ///< 1 - beta1^t
    float bias_correction2 = 1.f;  ///< 1 - beta2^t
    float grad_scale = 1.f;
};

/// One Muon step's constants (torch.optim.Muon's), besides the rates the caller applies.
struct MuonStep {
    float momentum = 0.95f;
    bool nesterov = true;
    float grad_scale = 1.f;  ///< the loss-scale and clipping multiplier, applied as the gradient is read
    int ns_steps = 5;
    /// The products' operands rounded to bf16 (X, A = X X^T and B = b A + c A A), accumulated
    /// in fp32 with X kept in fp32: torch.optim.Muon runs its iteration in bf16.
    bool ns_bf16 = false;
    /// The quintic Newton-Schulz coefficients and the norm's floor (Keller Jordan's Muon).
    float a = 3.4445f;
    float b = -4.7750f;
    float c = 2.0315f;
    float eps = 1e-7f;
};

/// Floats of work newton_schulz needs for a (rows, cols) matrix: a second copy of it and two
/// (k, k) Gram matrices, k = min(rows, cols).
inline size_t newton_schulz_work_floats(int rows, int cols) {
    const size_t k = static_cast<size_t>(rows < cols ? rows : cols);
    return static_cast<size_t>(rows) * static_cast<size_t>(cols) + 2 * k * k;
}

/// One span of a multi-span AdamW update: weight decay applies where `decay`. The gradient
/// is read in its stored dtype (a 16-bit one widens exactly); where `work` is set (a 16-bit
/// working copy of the fp32 master `param`), the updated values are rounded into it in the
/// same pass, as a cast afterwards would round them.
struct AdamWSpan {
    float* param = nullptr;
    float* m = nullptr;
    float* v = nullptr;
    ConstActPtr grad;
    size_t n = 0;
    bool decay = false;
    ActPtr work;
};

/// The head size C / NH of GPT-2's attention (throws unless NH > 0 divides C).
int mha_head_size(int C, int NH);

/// How a backward writes a parameter gradient: added into its buffer, or assigned (the
/// first of a step's writers, so nothing need zero the buffer before).
enum class GradWrite { kAdd, kAssign };

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    /// Which working dtypes this backend trains in (default: all of them).
    virtual BackendCapabilities capabilities() const { return {}; }
    /// The clock ProfilingBackend times this backend's ops with (default: the host clock).
    virtual std::unique_ptr<OpClock> make_op_clock() const { return make_host_op_clock(); }

  protected:
    /// For a typed op this backend runs in fp32 only: throws naming the backend, the op and
    /// the first dtype that is not fp32.
    void require_f32_activations(const char* op, std::initializer_list<DType> dtypes) const;

  public:

    /// Memory for activations / gradients / state. Zero-initialized. Freed with free().
    virtual float* alloc_floats(size_t n) = 0;
    virtual void free(void* p) = 0;
    virtual void zero(float* p, size_t n) = 0;
    virtual void copy(float* dst, const float* src, size_t n) = 0;
    /// `rows` copies of `width` floats, the i-th from src + i * src_pitch to dst + i *
    /// dst_pitch (pitches in floats, at least width): one call where the device copies in
    /// two dimensions (the default: one copy() per row).
    virtual void copy_strided(float* dst, size_t dst_pitch, const float* src, size_t src_pitch, size_t width,
                              size_t rows);

    /// Zeroed memory of `bytes` bytes (any element type); freed with free().
    virtual void* alloc_bytes(size_t bytes) { return alloc_floats((bytes + sizeof(float) - 1) / sizeof(float)); }
    /// The copy service of this backend's memory: host memory for a CPU backend (copies are
    /// memcpy, done when called), the device's for a GPU backend (copies ordered after the
    /// backend's stream). The copies and host allocations below go through it.
    virtual DeviceMemory& memory() = 0;
    /// Host -> backend and backend -> host copies, synchronous (they return when done).
    virtual void to_device(void* dst, const void* host_src, size_t bytes) {
        memory().copy_to_device(dst, host_src, bytes);
        memory().synchronize();
    }
    virtual void to_host(void* host_dst, const void* src, size_t bytes) {
        memory().copy_to_host(host_dst, src, bytes);
        memory().synchronize();
    }
    /// to_host for a large copy whose host side is read much later, by another thread (a
    /// checkpoint snapshot): DeviceMemory::copy_to_host_past_cache.
    virtual void to_host_past_cache(void* host_dst, const void* src, size_t bytes) {
        memory().copy_to_host_past_cache(host_dst, src, bytes);
        memory().synchronize();
    }
    /// Host memory this backend's copies run at full speed from and to (page-locked on a
    /// GPU, plain memory otherwise), aligned to kHostPageAlign so direct I/O can write it as
    /// is. Not zeroed; freed with free_host(). Throws zt::Error when none is left.
    void* alloc_host(size_t bytes) { return memory().alloc_host(bytes); }
    void free_host(void* p) noexcept { memory().free_host(p); }

    // ---- precision: the only ops that read or write buffers of a 16-bit dtype ----
    /// dst (n elements of dst_type) = src (n of src_type). To 16 bit rounds to nearest even
    /// exactly as zt::f32_to_bf16 / f32_to_f16 (NaN stays NaN, overflow gives infinity);
    /// 16 bit -> 16 bit goes through the exact fp32 value. Same dtype: a copy.
    virtual void cast(void* dst, DType dst_type, const void* src, DType src_type, size_t n) = 0;
    /// dst (n of dst_type) = round_to_dst_type(dst + src): a gradient (fp32) added into
    /// stored gradients of the working dtype, element by element.
    virtual void accumulate(void* dst, DType dst_type, const float* src, size_t n) = 0;
    /// Zeroes `bytes` bytes (buffers of any dtype).
    virtual void zero_bytes(void* p, size_t bytes) = 0;
    /// x (n fp32) = the value of dtype t nearest to x, rounded as cast() rounds (a cast to t
    /// and back, in place). fp32 buffers that hold 16-bit values: the CPU's emulation of
    /// 16-bit activations (activation_rounding.hpp). t = fp32 changes nothing.
    virtual void round_to(float* x, size_t n, DType t) = 0;

    /// The dtype the activations handed to the compute ops hold (the model's working dtype;
    /// fp32 until told otherwise). A backend with 16-bit products uses them for it (the CPU:
    /// bf16 products through oneDNN, cpu_bf16.hpp); an fp32 dtype keeps every product fp32,
    /// bit-identical to a backend never told. Default: nothing changes.
    virtual void set_activation_dtype(DType /*t*/) {}
    /// One sentence for the start-up report about how this backend runs the products of a
    /// run in dtype t when that is worth a note (the CPU without bf16 instructions); empty
    /// otherwise.
    virtual std::string activation_dtype_note(DType /*t*/) const { return {}; }
    /// Whether the products read weights stored in t as they are. Where they do, the model
    /// hands them a unit's 16-bit storage (UnitStore::acquired_storage) rather than its fp32
    /// view, which saves converting every weight back for each product; elsewhere a 16-bit
    /// weight still works, widened per call. Default: fp32 only.
    virtual bool reads_weights_in(DType t) const { return t == DType::kF32; }

    /// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null. Typed out,
    /// inp and weight (see reads_weights_in): the product accumulates in fp32 and out is
    /// rounded once.
    virtual void matmul_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias, int N, int C,
                                int OC) = 0;
    /// out (N, OC) = inp @ weight^T + bias + residual (N, OC): a projection closing a residual
    /// branch. out must not alias inp or residual. Default: matmul_forward, then
    /// residual_forward in place (exact for fp32 out only: a 16-bit out would be rounded
    /// twice, so a backend with typed products overrides it).
    virtual void matmul_residual_forward(ActPtr out, ConstActPtr inp, ConstActPtr weight, const float* bias,
                                         ConstActPtr residual, int N, int C, int OC) {
        matmul_forward(out, inp, weight, bias, N, C, OC);
        residual_forward(out, out, residual, static_cast<size_t>(N) * static_cast<size_t>(OC));
    }
    /// dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += sum_rows dout.
    /// Typed dinp / dout / inp (dweight, dbias fp32); a 16-bit dinp is rounded once after the add.
    /// With `grads` = kAssign, dweight and dbias are written (=) instead: the first writer of a
    /// gradient needs no zeroing pass, and its product reads no old values.
    virtual void matmul_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                 ConstActPtr weight, int N, int C, int OC, GradWrite grads = GradWrite::kAdd) = 0;

    /// out (N, C) = (inp - mean) * rstd * weight + bias, eps 1e-5; saves mean (N), rstd (N).
    /// Typed out / dinp / dout / inp; the statistics and parameter gradients stay fp32.
    virtual void layernorm_forward(ActPtr out, float* mean, float* rstd, ConstActPtr inp, const float* weight,
                                   const float* bias, int N, int C) = 0;
    virtual void layernorm_backward(ActPtr dinp, float* dweight, float* dbias, ConstActPtr dout, ConstActPtr inp,
                                    const float* weight, const float* mean, const float* rstd, int N, int C) = 0;

    /// GELU, tanh approximation (GPT-2's).
    /// Typed (see ActPtr): a backend without 16-bit kernels for an op refuses other dtypes
    /// by name (require_f32).
    virtual void gelu_forward(ActPtr out, ConstActPtr inp, size_t n) = 0;
    virtual void gelu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, size_t n) = 0;

    /// out = a + b (n elements). out may alias a or b. Typed.
    virtual void residual_forward(ActPtr out, ConstActPtr a, ConstActPtr b, size_t n) = 0;
    /// dst[i, dst_col + j] += scale * src[i, src_col + j] for i < N rows, j < width: a column
    /// range of one (N, dst_width) buffer from one of an (N, src_width) buffer (a LoRA
    /// adapter's output into its part of a packed product's). Typed, in fp32, rounded once;
    /// dst must not alias src.
    virtual void scale_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr src, int src_width, int src_col,
                                   int width, int N, float scale) = 0;
    /// dst[i, dst_col + j] += scale * (inp (N, K) @ weight (width, K)^T)[i, j]: a LoRA adapter's
    /// up-projection added into its columns of a packed product's output. Typed dst and inp.
    /// Default: the product into `scratch` (N x width, dst's dtype), then scale_add_columns; a
    /// backend that can add a product into a column range (the CPU) needs no scratch and rounds
    /// dst once.
    virtual void matmul_add_columns(ActPtr dst, int dst_width, int dst_col, ConstActPtr inp, ConstActPtr weight,
                                    int N, int K, int width, float scale, ActPtr scratch);
    /// matmul_add_columns' backward: dinp (N, K) += scale * dout[:, dout_col, + width) @ weight
    /// (width, K); dweight (width, K) += scale * dout[:, dout_col, + width)^T @ inp (N, K), each
    /// skipped when null. Default: the scaled columns copied into `scratch` (N x width, dout's
    /// dtype), then matmul_backward; the CPU reads dout's columns in place.
    virtual void matmul_backward_columns(ActPtr dinp, float* dweight, ConstActPtr dout, int dout_width, int dout_col,
                                         ConstActPtr inp, ConstActPtr weight, int N, int K, int width, float scale,
                                         ActPtr scratch);
    /// out (N, width) = in * keep / (1 - p), keep as `mask` draws it (0 where dropped); out
    /// may alias in. Typed, in fp32, rounded once. Default: refuses (LoRA dropout needs it).
    virtual void dropout(ActPtr out, ConstActPtr in, int N, int width, const DropoutMask& mask);

    /// Causal grouped-query self-attention (Llama; GPT-2's multi-head attention is NKV = NH).
    /// qkv (B, T, (NH + 2*NKV)*hs): per row [q: NH*hs | k: NKV*hs | v: NKV*hs]; query head h
    /// uses columns [h*hs, (h+1)*hs) of q and key/value head h / (NH/NKV) of k and v (NKV must
    /// divide NH). Scores are scaled by 1/sqrt(hs).
    /// out (B, T, NH*hs); att (B, NH, T, T) receives the softmax probabilities (saved for
    /// backward; entries above the diagonal are unspecified).
    virtual void gqa_attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int NH, int NKV,
                                       int hs) = 0;
    /// dqkv (B, T, (NH + 2*NKV)*hs) += the gradient of out w.r.t. qkv given dout (B, T, NH*hs)
    /// and att from the forward (a key/value head sums the gradients of the NH/NKV query heads
    /// that share it); scratch holds at least attention_scratch_floats(B, T, NH) floats.
    virtual void gqa_attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                        ConstActPtr att, int B, int T, int NH, int NKV, int hs) = 0;
    /// gqa_attention_forward with a block-diagonal causal mask: query t of row b attends to
    /// keys [attend_from[b*T + t], t] only (attend_from: (B, T) int32 host memory, each
    /// value in [0, t]), so examples packed into one row never see each other; a sliding
    /// window of w is attend_from[t] >= t - w + 1. att holds zero before attend_from where
    /// the backend computed it; entries it skipped (whole key blocks no query of a block
    /// reads: a window costs O(T * w), not O(T^2)) are unspecified, so only the segmented
    /// backward, given the same attend_from, reads this att.
    /// Default: refuses (a backend without it cannot train on packed examples).
    virtual void gqa_attention_forward_segmented(ActPtr out, ActPtr att, ConstActPtr qkv, const int32_t* attend_from,
                                                 int B, int T, int NH, int NKV, int hs);
    /// The backward of gqa_attention_forward_segmented (same attend_from): dqkv += the
    /// gradient given dout and the segmented forward's att. Keys outside a query's segment
    /// get no gradient from it. Default: refuses, like the forward.
    virtual void gqa_attention_backward_segmented(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv,
                                                  ConstActPtr att, const int32_t* attend_from, int B, int T,
                                                  int NH, int NKV, int hs);
    /// Scratch floats of (gqa_)attention_backward for NH query heads, whatever NKV and hs.
    virtual size_t attention_scratch_floats(int B, int T, int NH) const = 0;

    /// Inference attention over a key/value cache (batch 1, no backward): the k and v of the n
    /// new rows of qkv ((n, (NH + 2*NKV)*hs), gqa_attention_forward's layout) are written to
    /// rows [past, past + n) of k_cache and v_cache ((>= past + n, NKV*hs) each), then query
    /// row i, at position past + i, attends to cache rows [0, past + i], or with a sliding
    /// `window` > 0 to the last `window` of them, [max(0, past + i - window + 1), past + i].
    /// out (n, NH*hs). Default: refuses (a backend without it cannot generate with a cache).
    virtual void gqa_attention_cached(float* out, const float* qkv, float* k_cache, float* v_cache, int past, int n,
                                      int NH, int NKV, int hs, int window);

    /// GPT-2's causal multi-head self-attention: gqa_attention_forward with NKV = NH and
    /// hs = C / NH (C % NH == 0 required), so qkv (B, T, 3C) = [q | k | v] of C each, out
    /// (B, T, C), att (B, NH, T, T). Defined here on top of the GQA op so that backends and
    /// decorators implement attention once.
    void attention_forward(ActPtr out, ActPtr att, ConstActPtr qkv, int B, int T, int C, int NH) {
        gqa_attention_forward(out, att, qkv, B, T, NH, NH, mha_head_size(C, NH));
    }
    /// dqkv (B, T, 3C) += ...: gqa_attention_backward with NKV = NH, hs = C / NH.
    void attention_backward(ActPtr dqkv, float* scratch, ConstActPtr dout, ConstActPtr qkv, ConstActPtr att,
                            int B, int T, int C, int NH) {
        gqa_attention_backward(dqkv, scratch, dout, qkv, att, B, T, NH, NH, mha_head_size(C, NH));
    }

    // ---- Llama ops (rope.hpp builds the rotary table) ----

    /// RMSNorm: out (N, C) = inp * rstd * weight (C), rstd (N) = 1 / sqrt(mean_c(inp^2) + eps),
    /// computed in fp32; rstd is saved for backward.
    /// Typed out / inp (rstd fp32).
    virtual void rmsnorm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* weight, int N, int C,
                                 float eps) = 0;
    /// dinp (N, C) += d(out)/d(inp)^T dout; dweight (C) += sum_rows dout * inp * rstd.
    /// inp, weight and rstd are the forward's. Typed dinp / dout / inp.
    virtual void rmsnorm_backward(ActPtr dinp, float* dweight, ConstActPtr dout, ConstActPtr inp, const float* weight,
                                  const float* rstd, int N, int C) = 0;

    /// Rotary position embeddings on the q and k heads of fused qkv rows, Hugging Face's
    /// rotate_half convention (the q/k weights as stored in HF Llama files, unpermuted): for
    /// each head, pairs (i, i + hs/2), i < hs/2, at position t rotate as
    ///   x'[i]        = x[i] * cos[t][i] - x[i + hs/2] * sin[t][i]
    ///   x'[i + hs/2] = x[i + hs/2] * cos[t][i] + x[i] * sin[t][i].
    /// inp, out (B, T, (NH + 2*NKV)*hs) in the gqa_attention layout; rope (>= T, hs) is the
    /// table of rope_table() (row t = [cos (hs/2) | sin (hs/2)]), uploaded to this backend's
    /// memory. out == inp rotates in place; otherwise out must not overlap inp and the v
    /// part is copied to out, so out is a complete qkv buffer. hs must be even.
    virtual void rope_forward(ActPtr out, ConstActPtr inp, const float* rope, int B, int T, int NH, int NKV,
                              int hs) = 0;
    /// dinp (B, T, (NH + 2*NKV)*hs) += R^T dout (the inverse rotation on the q and k parts,
    /// dout itself on the v part). The one exception to the accumulate convention: dinp ==
    /// dout transforms the gradient in place (dout becomes R^T dout), which is what a model
    /// that rotated qkv in place wants.
    virtual void rope_backward(ActPtr dinp, ConstActPtr dout, const float* rope, int B, int T, int NH, int NKV,
                               int hs) = 0;

    /// Qwen3's q and k head norms: an RMSNorm over each head of fused qkv rows (the
    /// gqa_attention layout, (N, (NH + 2*NKV) hs)), the NH q heads with q_weight (hs), the NKV
    /// k heads with k_weight (hs); the v part copied. rstd (N, NH + NKV) is saved for
    /// backward. out must not overlap inp. The default throws (a backend without the op).
    /// Typed out / inp (rstd fp32).
    virtual void qk_norm_forward(ActPtr out, float* rstd, ConstActPtr inp, const float* q_weight,
                                 const float* k_weight, int N, int NH, int NKV, int hs, float eps);
    /// dinp (N, (NH + 2*NKV) hs) += d(out)/d(inp)^T dout (dout itself on the v part);
    /// dq_weight, dk_weight (hs) += their gradients, summed over rows and heads in a fixed
    /// order. inp, the weights and rstd are the forward's. Typed dinp / dout / inp.
    virtual void qk_norm_backward(ActPtr dinp, float* dq_weight, float* dk_weight, ConstActPtr dout,
                                  ConstActPtr inp, const float* q_weight, const float* k_weight, const float* rstd,
                                  int N, int NH, int NKV, int hs);

    /// SwiGLU: out (N, F) = silu(gate) * up, inp (N, 2F) per row [gate (F) | up (F)] (the
    /// output of one product with gate_proj and up_proj stacked as a (2F, C) weight),
    /// silu(x) = x * sigmoid(x).
    virtual void swiglu_forward(ActPtr out, ConstActPtr inp, int N, int F) = 0;
    /// dinp (N, 2F) += [dout * up * silu'(gate) | dout * silu(gate)]. Typed.
    virtual void swiglu_backward(ActPtr dinp, ConstActPtr inp, ConstActPtr dout, int N, int F) = 0;

    /// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; wpe null: no position table (Llama),
    /// out = wte[tokens[b, t]]. Typed out and dout (the tables and their gradients fp32).
    /// A token < 0 has no row here (another rank's vocabulary slice under tensor
    /// parallelism): it contributes zeros, and nothing to dwte.
    virtual void encoder_forward(ActPtr out, const int32_t* tokens, const float* wte, const float* wpe,
                                 int B, int T, int C) = 0;
    /// dwte (Vp, C) += scatter of dout by token; dwpe (T, C) += sum over batch.
    virtual void encoder_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens,
                                  int B, int T, int C) = 0;

    /// Row-wise softmax cross-entropy over the first V of Vp logit columns (padded columns
    /// are never predicted). losses (N) = -log p[target]. If dloss != 0, logits (N, Vp) are
    /// overwritten by d(dloss * sum losses)/dlogits, with zeros in the padded columns.
    /// A target < 0 marks a row that is ignored (loss 0, gradient 0). Typed logits: computed
    /// in fp32 per row, a 16-bit gradient rounded once; losses fp32.
    virtual void softmax_cross_entropy(float* losses, ActPtr logits, const int32_t* targets, int N,
                                       int V, int Vp, float dloss) = 0;

    /// The same over a vocabulary split across a tensor group (Megatron's vocab-parallel
    /// cross-entropy): this rank's logits (N, Vp) are columns [vocab_begin, vocab_begin + Vp)
    /// of the full vocabulary, of which the first V (0 <= V <= Vp) are real tokens; targets
    /// index the full vocabulary (< 0: ignored row). Three passes around the group's
    /// reductions, never exchanging logits:
    /// row_max (N) = the maximum of each row's real columns (-inf where V = 0); the group
    /// takes the maximum of them;
    virtual void cross_entropy_row_max(float* row_max, ConstActPtr logits, int N, int V, int Vp) = 0;
    /// with the group's row_max: sums (2, N) = the sum over real columns of
    /// exp(logit - row_max), and the target's logit where this rank holds it (else 0); the
    /// group sums them;
    virtual void cross_entropy_row_sums(float* sums, ConstActPtr logits, const float* row_max,
                                        const int32_t* targets, int N, int V, int Vp, int vocab_begin) = 0;
    /// with the group's sums: losses (N) = log(sum) + row_max - target logit, and when
    /// dloss != 0 logits become d(dloss * sum losses)/dlogits of this rank's columns (padded
    /// columns and ignored rows 0). Typed logits as softmax_cross_entropy.
    virtual void split_cross_entropy(float* losses, ActPtr logits, const float* row_max, const float* sums,
                                     const int32_t* targets, int N, int V, int Vp, int vocab_begin,
                                     float dloss) = 0;

    /// One AdamW step over n elements: param, m, v updated in place from grad * grad_scale.
    /// weight_decay applies to the whole span (callers split spans by decay mask).
    virtual void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                              const AdamWStep& step) = 0;

    /// AdamW over several spans (a model's tensors): the same as adamw_update per span with
    /// weight_decay zeroed where !decay, each span's gradient widened from its dtype and, where
    /// it has a working copy, the result rounded into it. One pass over all spans (the CPU
    /// backend: one parallel region instead of one per tensor).
    virtual void adamw_update_spans(const AdamWSpan* spans, size_t count, const AdamWStep& step) = 0;

    /// Muon's momentum over n elements of one matrix (torch.optim.Muon): m = m + (1 - momentum)
    /// (g - m), g = grad * grad_scale read in its dtype; update = g + momentum (m - g) under
    /// Nesterov, else m.
    virtual void muon_momentum(float* m, float* update, ConstActPtr grad, size_t n, const MuonStep& step) = 0;
    /// x (rows, cols, row-major) replaced by its Newton-Schulz orthogonalization: x / max(|x|_F,
    /// eps), then ns_steps of X = a X + (b A + c A A) X with A = X X^T (the Gram on the short side:
    /// X X^T when rows <= cols, else X^T X on the right), accumulated in fp32, the operands fp32
    /// or (step.ns_bf16) rounded to bf16. work: newton_schulz_work_floats.
    virtual void newton_schulz(float* x, int rows, int cols, const MuonStep& step, float* work) = 0;
    /// param = param * (1 - decay) - rate * update over n elements; where `work` is set (a
    /// 16-bit working copy), the new values rounded into it.
    virtual void muon_apply(float* param, const float* update, size_t n, float decay, float rate, ActPtr work) = 0;

    /// Sum of squares in double precision (for the global gradient norm).
    virtual double sum_squares(const float* x, size_t n) = 0;
    /// Sum over spans of the squares of xs[i]'s ns[i] elements, each read in its dtype (a
    /// 16-bit element widens exactly), spans added in order. Bit-identical for a span stored
    /// in 16 bits and the same values stored in fp32.
    virtual double sum_squares_spans(const ConstActPtr* xs, const size_t* ns, size_t count) = 0;

    /// Number of threads the backend uses for compute.
    virtual int threads() const = 0;
};

/// The CPU backend: OpenBLAS sgemm for products, OpenMP for everything else.
/// threads <= 0 means all cores.
std::unique_ptr<Backend> make_cpu_backend(int threads);
/// The CPU backend's attention_scratch_floats at `threads` threads, without making one.
size_t cpu_attention_scratch_floats(int T, int threads);
/// The fp32 scratch (floats) the CPU backend keeps for an (N x C) by (C -> OC) product with
/// 16-bit operands and no 16-bit products: its operands widened, a block of rows at a time.
size_t cpu_widened_operand_floats(int N, int C, int OC);
/// The CPU backend's fp32 partial sums for a bf16 product's input gradient through a weight
/// OC rows long (N rows, C wide; the LM head's vocabulary slices), 0 where it runs as one
/// product (cpu/matmul.cpp).
size_t cpu_reduction_slice_floats(int N, int C, int OC);

/// What a backend of the `backend` setting (cpu, cuda or auto; auto plans as cpu, what it
/// resolves to) will report, without making one or needing its device: a deck's memory plan
/// (ztrain --plan) on a machine that is not the one it will run on.
struct PlannedBackend {
    BackendCapabilities capabilities;
    double attention_scratch_floats = 0;  ///< for (B, T, NH) at the given CPU threads
};
PlannedBackend planned_backend(const std::string& setting, int B, int T, int NH, int threads);

}  // namespace zt
