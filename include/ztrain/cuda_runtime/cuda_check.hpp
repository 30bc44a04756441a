// Checks for CUDA runtime calls: a failure throws zt::Error naming the call, the file and
// the line (and the rank, under MPI), like ZT_MPI_CHECK does. CUDA builds only: this header
// needs <cuda_runtime.h>. The cuBLAS check is the CUDA backend's
// (src/backend/cuda/cuda_check.cuh), since only the backend links cuBLAS.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "ztrain/core/error.hpp"

namespace zt::detail {
inline bool cuda_ok(cudaError_t e) { return e == cudaSuccess; }
inline std::string cuda_error_string(cudaError_t e) {
    return str(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
}  // namespace zt::detail

/// Checks a CUDA runtime call (cudaSuccess).
#define ZT_CUDA_CHECK(expr) \
    ZT_CHECK_GEN(expr, ::zt::detail::cuda_ok, ::zt::detail::cuda_error_string, "CUDA")
/// Checks the launch just made (bad configuration, missing kernel image for this GPU).
#define ZT_KERNEL_CHECK(name) \
    ZT_CHECK_GEN(cudaGetLastError(), ::zt::detail::cuda_ok, ::zt::detail::cuda_error_string, "CUDA kernel " name)
