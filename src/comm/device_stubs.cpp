// What the CUDA-only communicator files (src/comm/cuda/) provide, for builds without them:
// callers compile and link in every build and fail with a clear message at run time.
#include "ztrain/comm/device_memory.hpp"
#include "ztrain/comm/nccl_communicator.hpp"
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"

#ifndef ZT_HAVE_NCCL
#define ZT_HAVE_NCCL 0
#endif

namespace zt {

#if !ZT_HAVE_CUDA
std::unique_ptr<DeviceMemory> make_cuda_device_memory(void*) {
    throw Error("CUDA device memory: this build has no CUDA (configure with -DZT_CUDA=ON)");
}
#endif

#if !ZT_HAVE_NCCL
bool nccl_built() { return false; }
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, void*) {
    throw Error("NCCL communicator: this build has no NCCL (CUDA build with nccl.h and libnccl)");
}
#endif

}  // namespace zt
