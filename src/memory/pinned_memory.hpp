// Page-locked host memory: defined in cuda/cuda_memory.cpp, or by no_cuda.cpp (throws) in
// builds without CUDA. Private to the memory component; callers use alloc_host(kPinned).
#pragma once

#include <cstddef>

namespace zt {

void* pinned_alloc(size_t bytes);
void pinned_free(void* p) noexcept;

}  // namespace zt
