// GPU discovery for `ztrain --env`. Deliberately tolerant: a machine without a driver or
// GPU is reported, not treated as an error.
#include "ztrain/backend/cuda_info.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <sstream>

namespace zt {

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
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
    os << ", cuBLASLt " << cublasLtGetVersion() << "\n";
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        os << "GPUs: none (" << cudaGetErrorString(err) << ")";
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
