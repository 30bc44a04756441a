// Checks for every CUDA runtime, cuBLAS and cuBLASLt call: a failure throws zt::Error naming
// the call, the file and the line (and the rank, under MPI), like ZT_MPI_CHECK does.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "ztrain/core/error.hpp"

namespace zt::detail {
inline bool cuda_ok(cudaError_t e) { return e == cudaSuccess; }
inline std::string cuda_error_string(cudaError_t e) {
    return str(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}
inline bool cublas_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline std::string cublas_error_string(cublasStatus_t s) {
    return str(cublasGetStatusName(s), ": ", cublasGetStatusString(s));
}
}  // namespace zt::detail

/// Checks a CUDA runtime call (cudaSuccess).
#define ZT_CUDA_CHECK(expr) \
    ZT_CHECK_GEN(expr, ::zt::detail::cuda_ok, ::zt::detail::cuda_error_string, "CUDA")
/// Checks a cuBLAS or cuBLASLt call (CUBLAS_STATUS_SUCCESS; both share cublasStatus_t).
#define ZT_CUBLAS_CHECK(expr) \
    ZT_CHECK_GEN(expr, ::zt::detail::cublas_ok, ::zt::detail::cublas_error_string, "cuBLAS")
/// Checks the launch just made (bad configuration, missing kernel image for this GPU).
#define ZT_KERNEL_CHECK(name) \
    ZT_CHECK_GEN(cudaGetLastError(), ::zt::detail::cuda_ok, ::zt::detail::cuda_error_string, "CUDA kernel " name)
