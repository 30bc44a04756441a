// The CUDA backend's public face. Plain C++: no CUDA header is needed to include this, so
// the trainer, the NCCL communicator and the tests can name it in any build. The functions
// declared here exist in every build; the factory, make_cuda_backend, is the backend_cuda
// component's (ztrain/backend_cuda/cuda_backend.hpp) and exists only in CUDA builds.
//
// Memory: every float* / void* a CudaBackend hands out or takes is DEVICE memory, except
// the host side of to_device/to_host. All work runs in order on one stream the backend
// owns; methods return before the GPU is done, except those that return a host value
// (sum_squares, softmax_cross_entropy's target check) and synchronize(). Its OpClock
// (make_op_clock) records events on that stream.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "ztrain/backend/backend.hpp"
#include "ztrain/core/dtype.hpp"

namespace zt {

/// Options of the mixed-precision product (see CudaBackend::matmul_forward_ex).
struct CudaMatmulOptions {
    DType dtype = DType::kBF16;  ///< of inp, weight, bias, out and pre_gelu; fp32 accumulate always
    const void* bias = nullptr;  ///< (OC) or null; fused into the product (cuBLASLt epilogue)
    bool gelu = false;           ///< out = gelu(product + bias), fused
    void* pre_gelu = nullptr;    ///< (N, OC): product + bias before the GELU, for backward; needs gelu
};

/// A Backend whose buffers live on one GPU. Everything Backend promises holds (typed fp32,
/// bf16 and fp16 activations, the accumulate-into-gradient convention); the extra methods
/// are the CUDA-only parts.
class CudaBackend : public Backend {
  public:
    /// The CUDA device ordinal this backend computes on.
    virtual int device() const = 0;
    /// The compute stream, a cudaStream_t cast to void*. Every op is enqueued on it. To run
    /// a collective after compute on another stream: cudaEventRecord(ev, compute stream),
    /// then cudaStreamWaitEvent(comm stream, ev). The backend owns the stream: do not
    /// destroy it; it lives as long as the backend.
    virtual void* stream() const = 0;
    /// Blocks until all work enqueued so far is done (and reports its errors).
    virtual void synchronize() = 0;

    // Device memory: alloc_bytes, to_device and to_host (declared in Backend) are the
    // device allocation and the synchronous host <-> device copies here.

    /// out (N, OC) = [gelu](inp (N, C) @ weight (OC, C)^T + bias) in options.dtype, with
    /// fp32 accumulation (cuBLASLt). fp32 here is true fp32 (no TF32).
    virtual void matmul_forward_ex(void* out, const void* inp, const void* weight, int N, int C, int OC,
                                   const CudaMatmulOptions& options) = 0;
    /// dinp (N, C) += dout @ weight and dweight (OC, C) += dout^T @ inp, all in `dtype`
    /// with fp32 accumulation; null outputs are skipped. (No dbias: use the fp32 path.)
    virtual void matmul_backward_ex(void* dinp, void* dweight, const void* dout, const void* inp,
                                    const void* weight, int N, int C, int OC, DType dtype) = 0;
};

/// What backend = cuda trains with, in every build and before a device is opened (the
/// trainer's input check); CudaBackend::capabilities() returns the same.
BackendCapabilities cuda_capabilities();

/// Floats of attention-backward scratch the CUDA backend needs (its
/// attention_scratch_floats), in every build: the memory plan sizes a GPU run with it
/// before a device is opened. In double, so an absurd seq_len cannot overflow it.
double cuda_attention_scratch_floats(int T, int NH);

/// The compute stream of `b` (a cudaStream_t as void*) when it is a CudaBackend (also
/// behind a decorator such as ProfilingBackend), else null.
void* cuda_stream(Backend& b);

/// Turns the `backend` config value (cpu | cuda | auto) into the backend that will run:
/// returns "cpu" or "cuda". Throws InputError (exit 2) when `cuda` cannot be served (no
/// CUDA in this build, or no visible device); `auto` stays on the cpu for now. `note`, when
/// not null, receives a line worth printing for `auto` (else empty). Which configurations
/// train on cuda: check_cuda_training (ztrain/train/train_setup.hpp).
std::string resolve_backend(const std::string& requested, std::string* note);

}  // namespace zt
