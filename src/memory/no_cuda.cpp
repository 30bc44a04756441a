// The CUDA side of the memory service (src/memory/cuda/) in builds without CUDA: callers
// compile and link in every build and fail with a clear message at run time.
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/memory/device_memory.hpp"
#include "pinned_memory.hpp"

#if !ZT_HAVE_CUDA
namespace zt {

void* pinned_alloc(size_t) {
    throw Error("page-locked host memory: this build has no CUDA (configure with -DZT_CUDA=ON)");
}
void pinned_free(void*) noexcept {}

std::unique_ptr<DeviceMemory> make_cuda_device_memory(void*) {
    throw Error("CUDA device memory: this build has no CUDA (configure with -DZT_CUDA=ON)");
}

}  // namespace zt
#endif
