// The CUDA devices (include/ztrain/cuda_runtime/device.hpp), CUDA builds. Discovery is
// deliberately tolerant (a machine without a driver or GPU has zero devices, and --env
// reports it); selection is strict (using a device that is not there is an error).
#include "ztrain/cuda_runtime/device.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>
#include <sstream>

#include "ztrain/core/error.hpp"
#include "ztrain/cuda_runtime/cuda_check.hpp"

namespace zt {

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

void cuda_set_device(int device) {
    int count = 0;
    ZT_CUDA_CHECK(cudaGetDeviceCount(&count));
    ZT_REQUIRE(device >= 0 && device < count, "CUDA device ", device, " does not exist (", count, " visible)");
    ZT_CUDA_CHECK(cudaSetDevice(device));
}

int select_local_device(int local_rank) {
    int count = 0;
    ZT_CUDA_CHECK(cudaGetDeviceCount(&count));
    const int device = local_device(local_rank, count);
    ZT_CUDA_CHECK(cudaSetDevice(device));
    return device;
}

bool cuda_memory_info(size_t* free_bytes, size_t* total_bytes) {
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
}

std::array<uint8_t, 16> cuda_device_uuid(int device) {
    std::array<uint8_t, 16> uuid{};
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return uuid;
    static_assert(sizeof prop.uuid.bytes == 16, "CUDA device UUIDs are 16 bytes");
    std::memcpy(uuid.data(), prop.uuid.bytes, uuid.size());
    return uuid;
}

std::string cuda_environment_report() {
    std::ostringstream os;
    int runtime = 0;
    int driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    os << "CUDA runtime " << runtime / 1000 << "." << (runtime % 1000) / 10;
    if (driver > 0) {
        os << ", driver API " << driver / 1000 << "." << (driver % 1000) / 10;
    } else {
        os << ", no driver";
    }
    // cuBLASLt is the backend's library; its version belongs in the same line as the
    // runtime's, since a mismatch between the two is what this report is for.
    os << ", cuBLASLt " << cublasLtGetVersion() << "\n";
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        // Without a driver the runtime says "CUDA driver version is insufficient", which reads
        // like a fault on a machine that simply has no GPU.
        if (driver == 0 || err == cudaErrorInsufficientDriver) {
            os << "GPUs: none (no GPU driver)";
        } else if (err == cudaErrorNoDevice) {
            os << "GPUs: none (no device)";
        } else {
            os << "GPUs: none (" << cudaGetErrorString(err) << ")";
        }
        return os.str();
    }
    os << "GPUs: " << n;
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
        os << "\n  [" << i << "] " << prop.name << ", " << (prop.totalGlobalMem >> 20) << " MiB, sm_"
           << prop.major << prop.minor;
    }
    return os.str();
}

}  // namespace zt
