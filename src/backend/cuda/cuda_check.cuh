// Checks for every CUDA runtime, cuBLAS and cuBLASLt call of the backend: the runtime
// checks (ZT_CUDA_CHECK, ZT_KERNEL_CHECK) come from the CUDA runtime helpers, which the
// communicators share; the cuBLAS check is here because only the backend links cuBLAS.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <string>

#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/cuda_check.hpp"

namespace zt::detail {
inline bool cublas_ok(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
inline std::string cublas_error_string(cublasStatus_t s) {
    return str(cublasGetStatusName(s), ": ", cublasGetStatusString(s));
}
}  // namespace zt::detail

/// Checks a cuBLAS or cuBLASLt call (CUBLAS_STATUS_SUCCESS; both share cublasStatus_t).
#define ZT_CUBLAS_CHECK(expr) \
    ZT_CHECK_GEN(expr, ::zt::detail::cublas_ok, ::zt::detail::cublas_error_string, "cuBLAS")
