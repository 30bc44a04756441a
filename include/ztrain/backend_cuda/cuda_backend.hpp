// The CUDA backend's factory. It belongs to the backend_cuda component (src/backend/cuda/,
// which defines it), a layer above backend; that component is built in CUDA builds only
// (ZT_HAVE_CUDA, ztrain/config.hpp), so a caller guards the call with #if ZT_HAVE_CUDA. The
// CudaBackend interface, and what every build may ask about CUDA (cuda_capabilities,
// cuda_attention_scratch_floats, cuda_stream, resolve_backend), stay in
// ztrain/backend/cuda_backend.hpp.
#pragma once

#include <memory>

#include "ztrain/backend/cuda_backend.hpp"

namespace zt {

/// The CUDA backend on device `device` (CUDA builds only). Throws zt::Error when the device
/// cannot be used.
std::unique_ptr<CudaBackend> make_cuda_backend(int device);

}  // namespace zt
