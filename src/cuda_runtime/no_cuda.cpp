// The device functions (include/ztrain/cuda_runtime/device.hpp) in builds without CUDA:
// no devices, and a clear message for anything that needs one, so callers compile and
// link in every build without #if.
#include "ztrain/config.hpp"
#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/device.hpp"

#if !ZT_HAVE_CUDA
namespace zt {

int cuda_device_count() { return 0; }
void cuda_set_device(int) { throw Error("cuda_set_device: this build has no CUDA (configure with -DZT_CUDA=ON)"); }
int select_local_device(int) {
    throw Error("select_local_device: this build has no CUDA (configure with -DZT_CUDA=ON)");
}
std::array<uint8_t, 16> cuda_device_uuid(int) { return {}; }
bool cuda_memory_info(size_t*, size_t*) { return false; }
std::string cuda_environment_report() { return "CUDA: not built"; }

}  // namespace zt
#endif
